"""LibCST's ``parse_module`` without re-validating the nodes its own parser builds.

Every LibCST node checks its fields when it is constructed (``CSTNode.__post_init__`` calls
``_validate``). That protects trees built by hand; a tree the native parser builds from source that parsed
is valid by construction, and re-checking its million nodes costs 15-25% of the parse (measured on the
training-code corpus; LibCST's own comment on ``__post_init__`` notes the same). So ``parse_module`` here
turns the check off for the nodes built during one parse, on the parsing thread only: nodes that rules and
fixes build afterwards, or that another thread builds meanwhile, are validated as before.
"""

from __future__ import annotations

import threading

import libcst as cst

_parsing = threading.local()
_installed = False


def parse_module(source: str) -> "cst.Module":
    _install()
    _parsing.active = True
    try:
        return cst.parse_module(source)
    finally:
        _parsing.active = False


def _install() -> None:
    """Wrap ``CSTNode.__post_init__`` once so that it skips validation while this thread parses."""
    global _installed
    if _installed:
        return
    CSTNode = cst.CSTNode  # loads libcst itself first (torchlint.fix.deferred)
    validate_on_init = CSTNode.__post_init__

    def __post_init__(self: "cst.CSTNode") -> None:
        if not getattr(_parsing, "active", False):
            validate_on_init(self)

    CSTNode.__post_init__ = __post_init__  # type: ignore[method-assign]
    _installed = True
