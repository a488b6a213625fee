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
    """Make ``import name`` cheap until the module is used. A no-op if it is already imported (or absent)."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None:
        return
    stand_in = _Deferred(name)
    stand_in.__spec__ = spec
    stand_in.__path__ = list(spec.submodule_search_locations or [])  # type: ignore[attr-defined]
    sys.modules[name] = stand_in
