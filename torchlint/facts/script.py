"""Is this file a training script, and does a statement in it run on every run of it?

File-level rules (mixed precision, cuDNN autotuning, fused optimizers, deterministic algorithms, debug
APIs) report only in code that trains: a file with a training loop (a loop that calls ``backward()`` or
steps an optimizer). Library code that defines models but never trains them has none, and stays silent.
They also need to know whether a setting is made on every run, or only under a flag (``if args.debug:``),
which is the author's decision and not a finding.
"""

from __future__ import annotations

import ast
from typing import Optional

from torchlint.facts.index import AstIndex, AstLoopInfo

_MAX_CALL_DEPTH = 4  # how far `runs_on_every_run` follows a function to its callers
# Calls that run the function given them in each process they start.
_SPAWNS = ("torch.multiprocessing.spawn", "torch.multiprocessing.start_processes")
_STOPS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def first_training_loop(index: AstIndex) -> Optional[AstLoopInfo]:
    """The first loop (in source order) that runs a training step per iteration."""
    return next((loop for loop in index.loops if loop.is_training), None)


def training_loop_around(index: AstIndex, node: ast.AST) -> Optional[AstLoopInfo]:
    """The innermost loop around ``node`` (up to the enclosing def) that runs a training step per iteration."""
    return next((loop for loop in index.enclosing_loops(node) if loop.is_training), None)


def loop_header(loop: AstLoopInfo) -> ast.expr:
    """What a file-level finding points at: the loop's iterable (``for x in loader``) or its test."""
    node = loop.node
    return node.test if isinstance(node, ast.While) else node.iter


def is_main_guard(test: ast.expr) -> bool:
    """``if __name__ == "__main__":``: the script's entry point, not a condition."""
    if not isinstance(test, ast.Compare) or len(test.ops) != 1:
        return False
    sides = [test.left, test.comparators[0]]
    return (any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
            and any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides))


def condition_around(index: AstIndex, node: ast.AST) -> Optional[ast.AST]:
    """The innermost ``if``/``else``, conditional expression, ``and``/``or``, ``while`` test or ``except``
    between ``node`` and its function (or module), or None. The ``__main__`` guard does not count. (An
    ``else`` block is answered with the statement that owns it.)"""
    child = node
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, _STOPS):
            return None
        if isinstance(ancestor, ast.If):
            if not (is_main_guard(ancestor.test) and any(s is child for s in ancestor.body)):
                return ancestor
        elif isinstance(ancestor, (ast.IfExp, ast.BoolOp, ast.ExceptHandler)):
            return ancestor
        elif isinstance(ancestor, ast.While) and child is ancestor.test:
            return ancestor
        elif (isinstance(ancestor, (ast.For, ast.AsyncFor, ast.While, ast.Try) + _TRY_STAR)
              and any(s is child for s in ancestor.orelse)):
            return ancestor  # a loop's or try's `else:` block
        child = ancestor
    return None


_TRY_STAR = (ast.TryStar,) if hasattr(ast, "TryStar") else ()


def runs_on_every_run(index: AstIndex, node: ast.AST, depth: int = 0) -> bool:
    """True where ``node`` runs whenever the script runs: at module level or in ``main()``, not under a
    condition, and, inside a function, only if some call of that function in this file does too. A function
    the file never calls (a helper for other files) is not known to run: False. A function the file hands
    to ``torch.multiprocessing.spawn`` (a DDP worker) runs where that call runs."""
    if condition_around(index, node) is not None:
        return False
    function = index.function_of(node)
    if function is None:
        return True
    if depth >= _MAX_CALL_DEPTH or isinstance(function, ast.Lambda):
        return False
    for call in index.calls_by_name.get(function.name, ()):
        if index.contains(function, call.node):
            continue  # recursion
        if runs_on_every_run(index, call.node, depth + 1):
            return True
    if index.in_class(function):
        return False
    for info in index.calls_to(*_SPAWNS):  # `mp.spawn(main_worker, ...)` runs it in every process
        target = info.node.args[0] if info.node.args else next(
            (k.value for k in info.node.keywords if k.arg == "fn"), None)
        if (type(target) is ast.Name and target.id == function.name and not index.contains(function, info.node)
                and runs_on_every_run(index, info.node, depth + 1)):
            return True
    return False


def main_guard(index: AstIndex) -> Optional[ast.If]:
    """The first module-level ``if __name__ == "__main__":`` block."""
    return next((statement for statement in index.tree.body
                 if type(statement) is ast.If and is_main_guard(statement.test)), None)


def training_entry_calls(index: AstIndex, loops=None) -> list:
    """The calls outside every def and class, outside the ``__main__`` block, in source order, of a
    module-level function of the file that runs one of ``loops`` (the file's training loops by default), in
    its own body or through other module-level functions of the file it calls: ``train()`` at the end of a
    notebook or of a simple script. A function the file also binds otherwise (an import, an assignment) is
    not known to be that def: it does not count."""
    training = [loop for loop in (index.loops if loops is None else loops) if loops is not None or loop.is_training]
    if not training:
        return []
    defs = {}
    for statement in index.tree.body:
        if type(statement) in (ast.FunctionDef, ast.AsyncFunctionDef):
            defs.setdefault(statement.name, []).append(statement)
    defs = {name: nodes[0] for name, nodes in defs.items()
            if len(nodes) == 1 and name not in index.imports and index.values_of(name, index.tree) == [None]}
    if not defs:
        return []
    owners = {loop.function for loop in training if loop.function is not None}
    trains: dict = {}
    guard = main_guard(index)
    found = []
    for info in index.calls:
        func = info.node.func
        if info.function is not None or type(func) is not ast.Name or func.id not in defs:
            continue
        if guard is not None and index.contains(guard, info.node):
            continue
        if any(type(a) is ast.ClassDef for a in index.ancestors(info.node)):
            continue
        if _runs_training(index, defs[func.id], defs, owners, trains):
            found.append(info.node)
    return found


def _runs_training(index: AstIndex, function: ast.AST, defs: dict, owners: set, trains: dict) -> bool:
    """``function`` owns one of the training loops (``owners``) or calls, in its own body, a module-level def
    (``defs``) that does, in turn. (A module-level function, not a closure: a recursive closure is a
    reference cycle.)"""
    if function in trains:
        return trains[function]  # False while it is being answered: a cycle adds nothing
    trains[function] = False
    answer = function in owners or any(
        type(info.node.func) is ast.Name and info.node.func.id in defs and info.function is function
        and _runs_training(index, defs[info.node.func.id], defs, owners, trains)
        for info in index.calls_within(function))  # type: ignore[arg-type]
    trains[function] = answer
    return answer


def runs_itself(index: AstIndex, loops=None) -> bool:
    """The file runs training when it is run: it has a ``__main__`` block, a training loop (of ``loops``, the
    file's training loops by default) outside every def, or a module-level call of a function of the file that
    runs one (``training_entry_calls``). A file that only defines training functions for others to call does not."""
    if main_guard(index) is not None:
        return True
    training = [loop for loop in (index.loops if loops is None else loops) if loops is not None or loop.is_training]
    if any(loop.function is None for loop in training):
        return True
    return bool(training_entry_calls(index, training))
