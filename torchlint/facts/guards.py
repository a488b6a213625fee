"""Guards that make code run every N steps rather than every step: a logging interval.

A training step that shows a value only under ``if step % log_every == 0:`` (or ``if should_log:``,
``if args.verbose:``, ``if divisible_by(step, every):``) pays for it once every N steps: what the guard's
body does is not a per-step cost. Its ``else`` branch runs on the other steps.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from torchlint.facts.index import AstIndex, AstScope

# Names in an `if` test that make it a logging guard: logging words, and `divisible_by(step, every)`, the
# spelled-out form of `step % every == 0`.
LOGGING_GUARD_NAME = re.compile(r"log|print|verbose|report|display|debug|divisible", re.IGNORECASE)


def is_logging_guard(test: ast.expr, index: Optional[AstIndex] = None, scope: Optional[AstScope] = None) -> bool:
    """An ``if`` test that runs its body every N steps: it takes a remainder (``%``), or a name in it
    (a variable, an attribute, a keyword or a lambda parameter) names logging. Given the index and the
    test's scope, also a variable set once to such a test
    (``is_metric_step = i % metric_every == 0 or last`` then ``if is_metric_step:``)."""
    if _names_interval(test):
        return True
    if index is None:
        return False
    for node in ast.walk(test):
        if type(node) is ast.Name:
            value = index.single_value(node.id, scope)  # type: ignore[attr-defined]
            if isinstance(value, ast.expr) and _names_interval(value):
                return True
    return False


def _names_interval(test: ast.AST) -> bool:
    for node in ast.walk(test):
        kind = type(node)
        if kind is ast.BinOp and type(node.op) is ast.Mod:  # type: ignore[attr-defined]
            return True
        name = node.id if kind is ast.Name else node.attr if kind is ast.Attribute else (  # type: ignore[attr-defined]
            node.arg if kind is ast.keyword or kind is ast.arg else None)  # type: ignore[attr-defined]
        if name and LOGGING_GUARD_NAME.search(name):
            return True
    return False
