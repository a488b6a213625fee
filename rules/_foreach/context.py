"""Where the loop stands in its file: the torch alias, autograd mode, and the names around it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Set, Tuple

import libcst as cst

from torchlint.analysis import FileAnalysis, iter_children, walk


@dataclass
class LoopContext:
    """What the rewrite needs to know about where the loop stands."""

    analysis: FileAnalysis
    torch_name: str  # the file's name for the torch module
    in_no_grad: bool  # under @torch.no_grad() / with torch.no_grad() / inference_mode
    taken_names: Set[str]  # names already used in the function (and module): new names avoid them
    names_read_after_loop: Set[str]  # names whose next use after the loop (or in an enclosing loop) is a read
    torch_version: Tuple[int, int] = (2, 13)


def loop_context(analysis: FileAnalysis, loop: cst.For, torch_version: Tuple[int, int]) -> Optional[LoopContext]:
    """Where the loop stands: its torch alias, autograd mode and the names around it. None without ``import torch``."""
    torch_name = analysis.module_alias("torch")
    if torch_name is None:
        return None
    scope = analysis.scope_of(loop)
    taken: Set[str] = set()
    for node in walk(scope):
        if isinstance(node, cst.Name):
            taken.add(node.value)
    taken |= _module_level_names(analysis)  # globals the function may read
    return LoopContext(analysis, torch_name, _in_no_grad(analysis, loop), taken, _read_after(analysis, loop, scope),
                       torch_version)


def _module_level_names(analysis: FileAnalysis) -> Set[str]:
    """Names written outside every def and lambda (their names, parameters and decorators are inside),
    computed once per file: every loop of the file asks."""
    names = getattr(analysis, "_module_level_names", None)
    if names is None:
        names = set()
        stack: List[cst.CSTNode] = [analysis.module]
        while stack:
            node = stack.pop()
            if isinstance(node, cst.Name):
                names.add(node.value)
            elif node in analysis.function_info:
                continue  # everything below a def or lambda is in that function
            stack.extend(iter_children(node))
        analysis._module_level_names = names  # type: ignore[attr-defined]
    return names


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


def _in_no_grad(analysis: FileAnalysis, node: cst.CSTNode) -> bool:
    for ancestor in analysis.ancestors(node):
        if isinstance(ancestor, cst.With):
            for item in ancestor.items:
                expr = item.item.func if isinstance(item.item, cst.Call) else item.item
                if (analysis.qualified_name(expr) or "") in ("torch.no_grad", "torch.inference_mode"):
                    return True
        if isinstance(ancestor, cst.FunctionDef):
            for decorator in ancestor.decorators:
                expr = decorator.decorator
                expr = expr.func if isinstance(expr, cst.Call) else expr
                if (analysis.qualified_name(expr) or "") in ("torch.no_grad", "torch.inference_mode"):
                    return True
            return False
    return False
