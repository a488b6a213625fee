"""Calls that read a tensor's value on the host: each waits until the GPU has computed it."""

from __future__ import annotations

import ast

# `x.item()`, `x.tolist()`, `x.cpu()`, `x.numpy()`: argument-less methods that copy a tensor to the host.
SYNC_METHODS = ("item", "tolist", "cpu", "numpy")


def is_sync_call(node: ast.AST) -> bool:
    """``x.item()``, ``x.tolist()``, ``x.cpu()`` or ``x.numpy()``, without arguments."""
    return (type(node) is ast.Call and type(node.func) is ast.Attribute  # type: ignore[attr-defined]
            and node.func.attr in SYNC_METHODS and not node.args and not node.keywords)  # type: ignore[attr-defined]


def chain_has_sync(expr: ast.AST) -> bool:
    """A host read somewhere in the call/attribute/subscript chain that ``expr`` ends: ``x.cpu()[0]``,
    ``x.cpu().numpy``, ``x.item().real``; its value is on the host already."""
    while type(expr) in (ast.Call, ast.Attribute, ast.Subscript):
        if is_sync_call(expr):
            return True
        expr = expr.func if type(expr) is ast.Call else expr.value  # type: ignore[attr-defined]
    return False
