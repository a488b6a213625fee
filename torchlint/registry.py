"""Find the rules: every ``Rule`` subclass in a module of the ``torchlint.rules`` package."""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from typing import Dict, Tuple, Type

from torchlint.config import ConfigError
from torchlint.rule import Rule


@lru_cache(maxsize=None)
def all_rules() -> Tuple[Type[Rule], ...]:
    import torchlint.rules as package

    found: Dict[str, Type[Rule]] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Rule) and obj is not Rule and obj.__module__ == module.__name__:
                if obj.code in found:
                    raise RuntimeError(f"rule code {obj.code} defined twice: {found[obj.code]} and {obj}")
                found[obj.code] = obj
    return tuple(found[code] for code in sorted(found))


def rules_by_code() -> Dict[str, Type[Rule]]:
    return {rule.code: rule for rule in all_rules()}


def get_rule(code: str) -> Type[Rule]:
    """A rule by its code (``TL201``, any case) or its name (``zero-grad-keeps-zeros``)."""
    rule = rules_by_code().get(code.strip().upper())
    if rule is None:
        rule = next((r for r in all_rules() if r.name == code.strip().lower()), None)
    if rule is None:
        raise ConfigError(f"unknown rule code {code!r}; run `torchlint rules` to list them")
    return rule
