"""LibCST's tree as the rewrites see it (torchlint.fix.analysis): imports, the walk, spans."""

from __future__ import annotations

import textwrap

import libcst as cst

from torchlint.fix.analysis import FileAnalysis


def analyse(source: str) -> FileAnalysis:
    source = textwrap.dedent(source)
    return FileAnalysis(cst.parse_module(source), source)


def test_import_aliases_resolve_to_qualified_names():
    a = analyse(
        """
        import torch as t
        import torch.nn.functional as F
        import numpy as np
        from torch import nn
        from torch.nn import BatchNorm2d as BN
        import os.path
        from . import sibling
        x = t.nn.Conv2d(1, 2, 3)
        y = nn.Linear(1, 2)
        z = BN(4)
        w = F.relu(x)
        v = np.zeros(3)
        """
    )
    names = [a.qualified_name(c.func) for c in a.calls]
    assert names == ["torch.nn.Conv2d", "torch.nn.Linear", "torch.nn.BatchNorm2d", "torch.nn.functional.relu", "numpy.zeros"]
    assert a.imports["os"] == "os" and "sibling" not in a.imports
    assert a.module_alias("torch") == "t" and a.module_alias("numpy") == "np"


def test_spans_and_calls_in():
    a = analyse(
        """
        def f():
            g(h(1))
        k()
        """
    )
    func = a.functions[0].node
    assert [c.func.value for c in a.calls_in(func)] == ["g", "h"]
    g, h, k = a.calls
    assert a.contains(g, h) and not a.contains(h, g) and a.comes_before(h, k)
    assert a.function_of(h).name == "f" and a.function_of(k) is None


WALKED = """
import torch as t
@t.no_grad()
def f(a, *args, b: int = 2, **kw) -> "x":
    x = [i for i in range(3) if i] ; y = {k: v for k, v in kw.items()}
    z = (a if b else (lambda q: q)(a))
    with t.no_grad(), open("f") as g:
        for p in params:  # loop
            p.grad = None
    try:
        del x[1:2, ...]
    except (ValueError, TypeError) as e:
        raise RuntimeError from e
    finally:
        pass
    return f"{x!r:>10} {y=}" + 'é' * 2 + rb'\\x00' + 1j + 1.5 + -a ** ~b
class C(Base, metaclass=M):
    async def g(self):
        async for q in self.h():
            await q
        global G
        match self:
            case [1, *rest] if rest: pass
            case {"k": v, **others} | C(x=1): pass
"""


def _reference_children(node: cst.CSTNode):
    """Every field's nodes in source order, less the punctuation and whitespace the analysis leaves out:
    what the walk must visit, read the slow way (no field skipped for its annotation)."""
    import dataclasses

    from torchlint.fix.analysis import _SKIPPED_FIELDS, _source_order

    names = _source_order().get(type(node)) or [
        f.name for f in dataclasses.fields(node)
        if f.name not in _SKIPPED_FIELDS and not f.name.startswith("whitespace")
    ]
    children = []
    for name in names:
        value = getattr(node, name, None)
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, cst.CSTNode):
                children.append(item)
    return children


def test_the_walk_numbers_and_links_every_node_a_plain_walk_finds():
    from torchlint.fix.analysis import iter_children

    a = analyse(WALKED)
    expected_order, parents, stack = [], {a.module: None}, [a.module]
    while stack:
        node = stack.pop()
        expected_order.append(node)
        children = _reference_children(node)
        assert iter_children(node) == children
        parents.update((child, node) for child in children)
        stack.extend(reversed(children))
    assert list(a.order) == expected_order and list(a.order.values()) == list(range(len(expected_order)))
    assert a.parents == parents
    assert len(expected_order) > 200
