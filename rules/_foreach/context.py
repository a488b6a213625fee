"""Where the loop stands in its file: the torch alias, autograd mode, and the names around it."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import List, Optional, Set, Tuple

import libcst as cst

from torchlint.fix.analysis import FileAnalysis, walk
from torchlint.facts.index import AstIndex


@dataclass
class LoopContext:
    """What the rewrite needs to know about where the loop stands."""

    analysis: FileAnalysis
    torch_name: str  # the file's name for the torch module
    in_no_grad: bool  # autograd off where the loop runs (facts.grad_mode.grad_off_in_function)
    taken_names: Set[str]  # names already used in the function (and module): new names avoid them
    names_read_after_loop: Set[str]  # names whose next use after the loop (or in an enclosing loop) is a read
    torch_version: Tuple[int, int] = (2, 13)
    over_state_dict: bool = False  # the loop runs over a name the index shows is bound to a `state_dict()`


def loop_context(analysis: FileAnalysis, loop: cst.For, torch_version: Tuple[int, int], index: AstIndex,
                 in_no_grad: bool, over_state_dict: bool = False) -> Optional[LoopContext]:
    """Where the loop stands: its torch alias, autograd mode (``in_no_grad``, the index's answer) and the
    names around it. None without ``import torch``. ``index``: the file's, for the names its module level
    uses (``analysis`` may hold only some statements)."""
    torch_name = analysis.module_alias("torch")
    if torch_name is None:
        return None
    scope = analysis.scope_of(loop)
    taken: Set[str] = set()
    for node in walk(scope):
        if isinstance(node, cst.Name):
            taken.add(node.value)
    taken |= module_level_names(index)  # globals the function may read
    return LoopContext(analysis, torch_name, in_no_grad, taken, _read_after(analysis, loop, scope), torch_version,
                       over_state_dict)


def module_level_names(index: AstIndex) -> Set[str]:
    """Every identifier written outside the file's defs and lambdas (their names, parameters and
    decorators are inside), as LibCST spells them in ``Name`` nodes: names, attributes, keywords, the
    parts of imported names, class names, ``global`` names, ``except ... as`` names, names in patterns, and
    ``True``/``False``/``None``. Computed once per file: every loop of the file asks."""
    names = index.shared.get("foreach.module_level_names")
    if names is None:
        names = index.shared["foreach.module_level_names"] = set()
        stack: List[ast.AST] = list(index.tree.body)
        while stack:
            node = stack.pop()
            kind = type(node)
            if kind in _DEFS:
                continue
            names.update(_identifiers(node))
            stack.extend(ast.iter_child_nodes(node))
    return names  # type: ignore[no-any-return]


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _identifiers(node: ast.AST) -> List[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.keyword):
        return [node.arg] if node.arg else []
    if isinstance(node, ast.alias):  # (`from m import *` names nothing)
        return [*node.name.split("."), *([node.asname] if node.asname else [])] if node.name != "*" else []
    if isinstance(node, ast.ImportFrom):
        return node.module.split(".") if node.module else []
    if isinstance(node, ast.ClassDef):
        return [node.name]
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return list(node.names)
    if isinstance(node, ast.ExceptHandler):
        return [node.name] if node.name else []
    if isinstance(node, ast.Constant) and (node.value is None or node.value is True or node.value is False):
        return [repr(node.value)]
    if isinstance(node, (ast.MatchAs, ast.MatchStar)):
        return [node.name] if node.name else []
    if isinstance(node, ast.MatchMapping):
        return [node.rest] if node.rest else []
    if isinstance(node, ast.MatchClass):
        return list(node.kwd_attrs)
    return []


def _read_after(analysis: FileAnalysis, loop: cst.For, scope: cst.CSTNode) -> Set[str]:
    """Names whose first use after ``loop`` is a read: after it in the function, or anywhere in an enclosing
    loop (the next iteration). A name stored first (``for p in ...`` again) is not read from this loop."""
    outer = next((info.node for info in analysis.enclosing_loops(loop)), None)
    region = outer if outer is not None else scope
    seen: Set[str] = set()
    read: Set[str] = set()
    after = [n for n in walk(region) if isinstance(n, cst.Name) and not analysis.contains(loop, n)]
    if outer is None:
        after = [n for n in after if analysis.comes_before(loop, n)]
    else:  # from the loop to the end of the enclosing loop, then from its start (the next iteration)
        after = [n for n in after if analysis.comes_before(loop, n)] + [n for n in after if analysis.comes_before(n, loop)]
    for node in after:
        parent = analysis.parent(node)
        if (isinstance(parent, cst.Attribute) and parent.attr is node) or (isinstance(parent, cst.Arg) and parent.keyword is node):
            continue  # `x.update`, `f(lr=...)`: not the name
        if node.value in seen:
            continue
        seen.add(node.value)
        if not _is_store(analysis, node):
            read.add(node.value)
    return read


def _is_store(analysis: FileAnalysis, name: cst.Name) -> bool:
    parent = analysis.parent(name)
    while isinstance(parent, (cst.Element, cst.Tuple, cst.List, cst.StarredElement)):
        parent = analysis.parent(parent)
    if isinstance(parent, cst.AssignTarget):
        return True
    if isinstance(parent, (cst.For, cst.CompFor)) and parent.target is not None:
        return analysis.contains(parent.target, name)
    return False


