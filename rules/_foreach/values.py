"""What the foreach section computes with, and the names the rewrite gives it."""

from __future__ import annotations

import keyword
from dataclasses import dataclass
from typing import Iterable, Set, Union

from .nofix import NoFix


@dataclass
class TList:
    """A list of per-parameter tensors: a named list, or a fresh one not yet bound to a name."""

    code: str
    fresh: bool = False  # a new list nobody else refers to (the result of an out-of-place op)
    named: bool = True


@dataclass
class Scalar:
    code: str
    per_param: bool = False  # a list of python numbers, one per parameter (a scalar list)


Value = Union[TList, Scalar]


@dataclass
class Root:
    """A per-parameter tensor the first pass collects into a list."""

    key: str  # canonical spelling of the access, e.g. "p", "p.grad", "state:exp_avg", "msd[k]"
    collect: str  # what the first pass appends (a name bound in the first pass, or the access itself)
    list_name: str
    keyed: bool = False  # its device and dtype are part of the bucket key (it is not derived from another root)


def plural(name: str) -> str:
    """The list's name for one per-parameter value's name: ``p`` -> ``params``, ``exp_avg`` -> ``exp_avgs``."""
    special = {"p": "params", "param": "params", "w": "weights", "weight": "weights", "v": "values",
               "value": "values", "g": "grads", "grad": "grads", "d_p": "d_ps", "buf": "bufs", "e": "ema_values"}
    if name in special:
        return special[name]
    for suffix, replacement in (("_p", "_params"), ("_v", "_values"), ("_w", "_weights"), ("_g", "_grads")):
        if name.endswith(suffix):
            return name[: -len(suffix)] + replacement
    if name.endswith("s"):
        return name + "_list"
    return name + "s"


class Names:
    """New names for lists and buckets: no keyword, none already used around the loop or bound in its body."""

    def __init__(self, taken: Iterable[str], body_bound: Set[str]) -> None:
        self.taken = set(taken)
        self.body_bound = body_bound

    def fresh(self, base: str) -> str:
        candidates = [base]
        if base.endswith("s") and not base.endswith("_list"):
            candidates.append(base[:-1] + "_list")  # `params` is taken (the loop runs over it): `param_list`
        candidates += [f"{base}_{n}" for n in range(2, 100)]
        for name in candidates:
            if name not in self.taken and name not in self.body_bound and not keyword.iskeyword(name):  # `as`, `is`
                self.taken.add(name)
                return name
        raise NoFix("no free name for a list")
