"""Where autograd is off: ``with torch.no_grad():``, ``inference_mode()``, ``set_grad_enabled(False)``."""

from __future__ import annotations

import ast
from typing import Union

from torchlint.facts.index import AstIndex, call_arguments

# Context managers (and decorators) that turn autograd off, by qualified name.
NO_GRAD_CALLS = frozenset({
    "torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.inference_mode",
    "torch.autograd.grad_mode.no_grad", "torch.autograd.grad_mode.inference_mode",
})
# They turn it off when their first argument is `False`.
SET_GRAD_CALLS = frozenset({
    "torch.set_grad_enabled", "torch.autograd.set_grad_enabled", "torch.autograd.grad_mode.set_grad_enabled",
})


def turns_grad_off(index: AstIndex, expr: ast.AST) -> bool:
    """``torch.no_grad()``, ``torch.inference_mode()``, ``torch.set_grad_enabled(False)`` (any spelling
    the imports give them)."""
    if type(expr) is not ast.Call:
        return False
    qualified = index.qualified_name(expr.func)  # type: ignore[attr-defined]
    return qualified in NO_GRAD_CALLS or sets_grad_off(index, expr)  # type: ignore[arg-type]


def sets_grad_off(index: AstIndex, call: ast.Call) -> bool:
    """``torch.set_grad_enabled(False)`` in any spelling: off for its block, or for good as a statement."""
    if index.qualified_name(call.func) not in SET_GRAD_CALLS:
        return False
    arguments = call_arguments(call)
    return bool(arguments) and type(arguments[0][1]) is ast.Constant and arguments[0][1].value is False  # type: ignore[attr-defined]


def disables_grad(index: AstIndex, statement: Union[ast.With, ast.AsyncWith]) -> bool:
    """A ``with`` statement one of whose items turns autograd off for its block."""
    return any(turns_grad_off(index, item.context_expr) for item in statement.items)


def grad_off_in_function(index: AstIndex, node: ast.AST) -> bool:
    """Autograd is off where ``node`` runs, by its own function: a ``with`` that turns it off holds ``node``
    inside that function, or the function is decorated with one (``@torch.no_grad()``, ``@torch.no_grad``,
    ``@torch.set_grad_enabled(False)``)."""
    for ancestor in index.ancestors(node):
        kind = type(ancestor)
        if (kind is ast.With or kind is ast.AsyncWith) and disables_grad(index, ancestor):  # type: ignore[arg-type]
            return True
        if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
            return any(turns_grad_off(index, d) or index.qualified_name(d) in NO_GRAD_CALLS
                       for d in ancestor.decorator_list)  # type: ignore[attr-defined]
        if kind is ast.Lambda or kind is ast.ClassDef:
            return False
    return False
