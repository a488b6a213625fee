"""Cheap stdlib-``ast`` questions for the input-pipeline rules' pre-filter stage (TL102, TL103, TL401-TL403).

Each answer is a superset of what the LibCST checks can report: False only where the rule certainly
finds nothing. ``DataLoader`` and ``.to(`` occur in a great many files; these stages keep the LibCST
parse for the few that build a loader and train on it, or move a fresh tensor or batch.
"""

from __future__ import annotations

import ast
import re
from typing import Callable, Iterator, Optional

LOADER_NAME = re.compile(r"loader|dataloader|_dl$|^dl$|_dl_|^dl_", re.IGNORECASE)


def _last_name(node: ast.AST) -> Optional[str]:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _keyword(call: ast.Call, name: str) -> Optional[ast.keyword]:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword
    return None


def has_star(call: ast.Call) -> bool:
    return any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args)


def is_literal(node: Optional[ast.AST], value: object) -> bool:
    return isinstance(node, ast.Constant) and node.value is value


def calls(tree: ast.AST) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node


def dataloader_calls(tree: ast.AST) -> Iterator[ast.Call]:
    for call in calls(tree):
        if _last_name(call.func) == "DataLoader":
            yield call


def loader_argument(call: ast.Call, name: str, position: Optional[int]) -> object:
    """The value node that sets ``name``, None when absent, ``...`` when ``*args``/``**kwargs`` may set it."""
    keyword = _keyword(call, name)
    if keyword is not None:
        return keyword.value
    if has_star(call):
        return ...
    if position is not None and position < len(call.args):
        return call.args[position]
    return None


def may_train(tree: ast.AST) -> bool:
    """A for loop and a ``backward``/``.step(`` call somewhere: what every loader-to-training tie needs."""
    has_loop = has_step = False
    for node in ast.walk(tree):
        if isinstance(node, ast.For):
            has_loop = True
        elif isinstance(node, ast.Call) and _last_name(node.func) in {"backward", "step"}:
            has_step = True
        if has_loop and has_step:
            return True
    return False


def loader_may_fire(tree: ast.AST, wants: Callable[[ast.Call], bool]) -> bool:
    """Some ``DataLoader(...)`` call passes ``wants`` and the file may train on it."""
    return any(wants(call) for call in dataloader_calls(tree)) and may_train(tree)


def _is_move_without_non_blocking(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    if node.func.attr not in {"to", "cuda"} or has_star(node) or _keyword(node, "non_blocking") is not None:
        return False
    owner = node.func.value
    while isinstance(owner, (ast.Attribute, ast.Subscript)):
        owner = owner.value
    return isinstance(owner, ast.Name)


def loop_may_move_batch(tree: ast.AST, text: str) -> bool:
    """A for loop that may iterate a loader and moves a name (or part of one) with ``.to``/``.cuda`` and no
    ``non_blocking=``."""
    loader_anywhere = "DataLoader" in text
    for node in ast.walk(tree):
        if not isinstance(node, ast.For):
            continue
        if not loader_anywhere and not _mentions_loader(node.iter, tree):
            continue
        if any(_is_move_without_non_blocking(inner) for stmt in node.body for inner in ast.walk(stmt)):
            return True
    return False


def _mentions_loader(expr: ast.AST, tree: ast.AST) -> bool:
    names = [n for n in (_last_name(x) for x in ast.walk(expr)) if n]
    if any(LOADER_NAME.search(n) for n in names):
        return True
    # `pbar = tqdm(train_loader)` ... `for batch in pbar:`: the name's values are in the tree
    if isinstance(expr, ast.Name):
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == expr.id for t in node.targets):
                if any(LOADER_NAME.search(n) for n in (_last_name(x) for x in ast.walk(node.value)) if n):
                    return True
    return False
