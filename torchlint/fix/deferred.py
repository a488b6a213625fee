"""Load libcst on first use, not at start-up.

Importing libcst costs more than checking a typical file, and most files never reach the LibCST stage: the
text and ast pre-filters rule them out (docs/architecture.md). The command line therefore puts a stand-in
for libcst in ``sys.modules``: ``import libcst as cst`` binds it at once, and the real package is imported
on the first attribute that the stand-in lacks (``cst.parse_module``, ``cst.Name``), i.e. when a file is
parsed. (``importlib.util.LazyLoader`` does not do here: on Python 3.11 a second ``import libcst`` reads
``__spec__`` and that loads it.) Modules on the check path must not touch ``cst.<anything>`` at import time
(module-level constants, base classes): that would load it for every run.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types


class _Deferred(types.ModuleType):
    def __getattr__(self, attr: str):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)  # dunders the import system probes for: not a use of the module
        real = sys.modules.get(self.__name__)
        if real is None or real is self:
            del sys.modules[self.__name__]
            real = importlib.import_module(self.__name__)
            self.__dict__.update(real.__dict__)  # later uses through this object: plain lookups
        return getattr(real, attr)


def defer_import(name: str) -> None:
    """Make ``import name`` cheap until the module is used. A no-op if it is already imported (or absent).

    A submodule (``libcst.matchers``) needs its package deferred first: ``import libcst.matchers as m`` then
    finds the stand-in as an attribute of the package's stand-in, and loads nothing."""
    if name in sys.modules:
        return
    parent_name, _, child = name.rpartition(".")
    parent = sys.modules.get(parent_name) if parent_name else None
    if parent_name and not isinstance(parent, _Deferred):
        return  # a real package: importing the submodule the usual way is fine
    spec = importlib.util.find_spec(name) if not parent_name else _find_in(parent, name)
    if spec is None:
        return
    stand_in = _Deferred(name)
    stand_in.__spec__ = spec
    if spec.submodule_search_locations is not None:
        stand_in.__path__ = list(spec.submodule_search_locations)  # type: ignore[attr-defined]
    sys.modules[name] = stand_in
    if parent is not None:
        parent.__dict__[child] = stand_in


def _find_in(parent: types.ModuleType, name: str):
    """The spec of a submodule, found on the deferred package's path without loading the package."""
    import importlib.machinery

    return importlib.machinery.PathFinder.find_spec(name, parent.__dict__.get("__path__"))


def is_loaded(name: str) -> bool:
    """``name`` is imported for real (not just a deferred stand-in)."""
    module = sys.modules.get(name)
    return module is not None and not isinstance(module, _Deferred)  # a loaded stand-in leaves sys.modules
