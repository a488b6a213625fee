"""Is this file a training script, and does a statement in it run on every run of it?

File-level rules (mixed precision, cuDNN autotuning, fused optimizers, deterministic algorithms, debug
APIs) report only in code that trains: a file with a training loop (a loop that calls ``backward()`` or
steps an optimizer). Library code that defines models but never trains them has none, and stays silent.
They also need to know whether a setting is made on every run, or only under a flag (``if args.debug:``),
which is the author's decision and not a finding.

Each fact has a LibCST form (for ``check``) and a stdlib-``ast`` form for the pre-filter stage, which
answers False only where the LibCST form certainly does.
"""

from __future__ import annotations

import ast
from typing import Iterator, List, Optional, Set

import libcst as cst

from torchlint.analysis import FileAnalysis, LoopInfo

_MAX_CALL_DEPTH = 4  # how far `runs_on_every_run` follows a function to its callers


def first_training_loop(analysis: FileAnalysis) -> Optional[LoopInfo]:
    """The first loop (in source order) that runs a training step per iteration."""
    return next(iter(analysis.training_loops()), None)


def loop_header(loop: LoopInfo) -> cst.CSTNode:
    """What a file-level finding points at: the loop's iterable (``for x in loader``) or its test."""
    node = loop.node
    return node.iter if isinstance(node, cst.For) else node.test


def is_main_guard(test: cst.BaseExpression) -> bool:
    """``if __name__ == "__main__":``: the script's entry point, not a condition."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    sides = [test.left, test.comparisons[0].comparator]
    names = [s for s in sides if isinstance(s, cst.Name) and s.value == "__name__"]
    strings = [s for s in sides if isinstance(s, cst.SimpleString) and s.evaluated_value == "__main__"]
    return bool(names and strings)


def condition_around(analysis: FileAnalysis, node: cst.CSTNode) -> Optional[cst.CSTNode]:
    """The innermost ``if``/``else``, conditional expression, ``and``/``or``, ``while`` test or ``except``
    between ``node`` and its function (or module), or None. The ``__main__`` guard does not count."""
    child = node
    for ancestor in analysis.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return None
        if isinstance(ancestor, cst.If) and not (is_main_guard(ancestor.test) and child is ancestor.body):
            return ancestor
        if isinstance(ancestor, (cst.Else, cst.IfExp, cst.BooleanOperation, cst.ExceptHandler, cst.ExceptStarHandler)):
            return ancestor
        if isinstance(ancestor, cst.While) and child is ancestor.test:
            return ancestor
        child = ancestor
    return None


def runs_on_every_run(analysis: FileAnalysis, node: cst.CSTNode, depth: int = 0) -> bool:
    """True where ``node`` runs whenever the script runs: at module level or in ``main()``, not under a
    condition, and, inside a function, only if some call of that function in this file does too. A function
    the file never calls (a helper for other files) is not known to run: False."""
    if condition_around(analysis, node) is not None:
        return False
    function = analysis.function_of(node)
    if function is None:
        return True
    if depth >= _MAX_CALL_DEPTH or not isinstance(function.node, cst.FunctionDef):
        return False
    for call in analysis.calls_by_name.get(function.name, ()):
        if analysis.contains(function.node, call):
            continue  # recursion
        if runs_on_every_run(analysis, call, depth + 1):
            return True
    return False


# --- the same facts on the stdlib ast (pre-filter stage) ---------------------------------------------

_FUNCTION_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_LOOP_NODES = (ast.For, ast.AsyncFor, ast.While)
_TRAINING_CALLS = {"backward", "step"}


def ast_training_loop_calls(tree: ast.AST) -> Iterator[ast.Call]:
    """Calls of ``backward``/``step`` inside a loop of the same function: a superset of the calls that make
    ``FileAnalysis`` call a loop a training loop."""
    stack: List[tuple] = [(tree, False)]
    while stack:
        node, in_loop = stack.pop()
        if isinstance(node, ast.Call) and in_loop and ast_call_name(node) in _TRAINING_CALLS:
            yield node
        if isinstance(node, _FUNCTION_NODES):
            inner = False
        else:
            inner = in_loop or isinstance(node, _LOOP_NODES)
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))


def ast_has_training_loop(tree: ast.AST) -> bool:
    return next(ast_training_loop_calls(tree), None) is not None


def ast_call_name(call: ast.Call) -> Optional[str]:
    """The called name's last part, as ``analysis.call_name``."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def ast_dotted_name(node: ast.AST) -> Optional[str]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def ast_imported_roots(tree: ast.Module) -> Set[str]:
    """The top-level packages a file imports (absolute imports only, as ``FileAnalysis.imports``)."""
    roots: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module is not None:
            if not any(alias.name == "*" for alias in node.names):
                roots.add(node.module.split(".")[0])
    return roots
