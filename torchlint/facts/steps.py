"""What runs in every training step of a file, and how often a line inside a loop runs.

A training step is one iteration of a step loop: a loop that calls ``backward()`` or steps an optimizer
itself, or calls a step function of the file (a def that does so outside any loop of its own:
``def train_step(batch): ...; loss.backward(); opt.step()``). A loop that leaves after its first iteration
(``for x in loader: ...; break``) is not one: it runs once.

What a step runs reaches past the loop into the file's functions: ``grad_norm(model)`` or
``self.record(loss)`` called in a step loop runs every step, and so does whatever those call, transitively
(a call graph over the file's defs by name: plain calls and ``self.<method>`` in the caller's class). A
call under a logging guard (``if step % 100 == 0:``) or in a branch that runs only a few times
(``if step == 0:``, ``if i < 5:``) does not make its callee per step, and a function that has a step loop
of its own (``train_one_epoch``) runs once per epoch, not per step: it is not followed.

A call on an instance runs the class's method: ``agent.update(batch)`` where every binding of ``agent`` is a
call of a class of the file (``agent = Agent(...)``), ``self.meter.add(loss)`` where every binding of
``self.meter`` in the class is one, ``Trainer(...).run()``. A def that runs a step (``stepping``: a step
function, or one that calls a stepping def outside a loop of its own) makes a loop that calls it a step loop.
Through the project model (``facts.project``) the class may be another file's: ``policy.train(...)`` with
``policy = TD3.TD3(...)`` steps where ``TD3.py``'s summary says ``train`` does (``step_summary``), and a loop
of a file that imports this one runs this file's methods every iteration where that file's summary says so
(``uses_summary``): those methods are then reached by a ``ForeignStep`` (its file and line). A module-level
function of another project file steps the same way (``train_step(model, batch, opt)`` from ``steps.py``), and a
loop that calls another file's function or method that runs a training loop of its own (``train_epoch(...)`` of
``training.py``, ``agent.update()`` looping over its epochs) is an epoch loop (``epoch_loops``): the program
trains there (TL502, TL702), one epoch a call, so it is no step loop.

Built once per file (``step_facts``), in time linear in the file: one pass over its calls, one walk over the
graph.
"""

from __future__ import annotations

import ast
import builtins
from collections import deque
from typing import Dict, List, Optional, Set, Tuple, Union

from torchlint.facts.index import (
    COMPREHENSIONS, AstIndex, AstLoopInfo, AstScope, call_name, called_origin, dotted_name, import_origins,
    may_be_project, module_function_returns, names_spelled, source_order, target_names, unpacked_from, walk,
)
from torchlint.facts.evaluation import eval_receiver
from torchlint.facts.guards import is_logging_guard
from torchlint.facts.loaders import handed_summary
from torchlint.rule import line_reference

_FEW = 10  # `if i < 10:` runs at most this many times: a warm-up print, not a per-step cost
# the decorators of a def that leave it a plain function called where it is called (``runs_once``)
_ONCE_DECORATORS = frozenset({"staticmethod", "classmethod", "torch.no_grad", "torch.inference_mode",
                              "torch.enable_grad"})
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_Def = Union[ast.FunctionDef, ast.AsyncFunctionDef]


def _def_order(function: ast.AST) -> Tuple[int, int]:
    return function.lineno, function.col_offset  # type: ignore[attr-defined]  # (AstIndex.functions' order)


def ends_after_first_iteration(loop: ast.AST) -> bool:
    """The loop's body leaves it unconditionally (a ``break``, ``return`` or ``raise`` among its own
    statements): it runs one iteration, once (``for x, y in loader: print(x.shape); break``)."""
    return any(type(statement) in (ast.Break, ast.Return, ast.Raise) for statement in loop.body)  # type: ignore[attr-defined]


def loop_counters(index: AstIndex, loop: AstLoopInfo) -> Tuple[Set[str], Set[str]]:
    """Names that count the iterations of ``loop``: its ``for`` targets (``for i, batch in enumerate(...)``)
    and what its own statements add to (``step += 1``, ``self.global_step += 1``); and the names its own
    statements set otherwise (a moving bound: ``next_eval = step + every``)."""
    memo = index.shared.setdefault("loop_counters", {})
    found = memo.get(loop.node)  # type: ignore[union-attr]
    if found is None:
        node = loop.node
        counters = set(target_names(node.target)) if type(node) in (ast.For, ast.AsyncFor) else set()
        moving: Set[str] = set()
        for statement in node.body:
            if type(statement) is ast.AugAssign:
                name = dotted_name(statement.target)
                if name is not None:
                    (counters if type(statement.op) is ast.Add else moving).add(name)
            elif type(statement) in (ast.Assign, ast.AnnAssign):
                for target in statement.targets if type(statement) is ast.Assign else [statement.target]:
                    moving.update(target_names(target))
                    if dotted_name(target) is not None:
                        moving.add(dotted_name(target))  # type: ignore[arg-type]
        found = memo[loop.node] = (counters, moving)  # type: ignore[index]
    return found


def _made_once(index: AstIndex, test_if: ast.If, loop: AstLoopInfo) -> bool:
    """``test_if`` tests ``x is None`` (alone or in an ``and``), its body binds ``x`` at its top level to a
    tensor (``.to(...)``/``.cuda()`` of a torch call, never None), and nothing in ``loop`` sets ``x``
    to None or deletes it: after the body's first run the test fails for every later iteration."""
    test = test_if.test
    parts = test.values if type(test) is ast.BoolOp and type(test.op) is ast.And else [test]  # type: ignore[attr-defined]
    missing = {dotted_name(part.left) for part in parts  # type: ignore[attr-defined]
               if type(part) is ast.Compare and len(part.ops) == 1 and type(part.ops[0]) is ast.Is
               and type(part.comparators[0]) is ast.Constant and part.comparators[0].value is None}
    missing.discard(None)
    if not missing:
        return False
    made = set()
    for statement in test_if.body:
        if type(statement) is ast.Assign and len(statement.targets) == 1 and _makes_tensor(index, statement.value):
            made.add(dotted_name(statement.targets[0]))
    names = missing & made
    if not names:
        return False
    for node in walk(loop.node):  # (`walk` yields no Name: the targets are read from the statements)
        kind = type(node)
        if kind is ast.Delete and any(dotted_name(target) in names for target in node.targets):  # type: ignore[attr-defined]
            return False
        if kind in (ast.Assign, ast.AnnAssign) and type(node.value) is ast.Constant \
                and node.value.value is None:  # type: ignore[attr-defined]
            targets = node.targets if kind is ast.Assign else [node.target]  # type: ignore[attr-defined]
            if any(dotted_name(target) in names for target in targets):
                return False
    return True


def _makes_tensor(index: AstIndex, value: ast.expr) -> bool:
    """``value`` moves what a ``torch.*`` call returns: ``.to(...)``/``.cuda()`` of it, a tensor (never None)."""
    moves = 0
    while type(value) is ast.Call and type(value.func) is ast.Attribute \
            and value.func.attr in ("to", "cuda"):  # type: ignore[attr-defined]
        value, moves = value.func.value, moves + 1  # type: ignore[attr-defined]
    return moves > 0 and type(value) is ast.Call \
        and (index.qualified_name(value.func) or "").startswith("torch.")  # type: ignore[attr-defined]


def runs_few_times(test: ast.expr, counters: Set[str], moving: Set[str] = frozenset()) -> bool:  # type: ignore[assignment]
    """An ``if`` test true for at most a few values of a counter: ``i == 0``, ``step < 5``, ``3 >= i``,
    ``i in (0, 1)``, ``not step``, ``step == total_steps`` (a bound the loop does not move: ``moving``), and
    ``and`` with one such side (``epoch == 0 and i == 0``)."""
    kind = type(test)
    if kind is ast.BoolOp:
        sides = [runs_few_times(value, counters, moving) for value in test.values]  # type: ignore[attr-defined]
        return any(sides) if type(test.op) is ast.And else all(sides)  # type: ignore[attr-defined]
    if kind is ast.UnaryOp and type(test.op) is ast.Not:  # type: ignore[attr-defined]
        return dotted_name(test.operand) in counters  # type: ignore[attr-defined]
    if kind is not ast.Compare or len(test.ops) != 1:  # type: ignore[attr-defined]
        return False
    left, op, right = test.left, type(test.ops[0]), test.comparators[0]  # type: ignore[attr-defined]
    if dotted_name(right) in counters and dotted_name(left) not in counters:  # `0 == i`, `5 > i`
        left, right = right, left
        op = {ast.Gt: ast.Lt, ast.GtE: ast.LtE}.get(op, op)
    if dotted_name(left) not in counters:
        return False
    if op is ast.Eq:  # one value of a counter: once, unless the other side moves with the loop
        return _is_int(right) or not any(
            (dotted_name(node) or "") in counters | moving for node in ast.walk(right)
            if type(node) in (ast.Name, ast.Attribute))
    if op in (ast.Lt, ast.LtE):
        return _is_int(right) and right.value <= _FEW  # type: ignore[attr-defined]
    if op is ast.In:
        return type(right) in (ast.Tuple, ast.List, ast.Set) and len(right.elts) <= _FEW and all(  # type: ignore[attr-defined]
            _is_int(element) for element in right.elts)  # type: ignore[attr-defined]
    return False


def _is_int(node: ast.AST) -> bool:
    return type(node) is ast.Constant and type(node.value) is int  # type: ignore[attr-defined]


def runs_once_in(index: AstIndex, node: ast.AST, loop: AstLoopInfo) -> bool:
    """``node`` (a call or statement inside ``loop``) runs at most a few times over all of ``loop``'s
    iterations: the loop leaves after its first one, ``node`` sits in the body of an ``if`` that tests
    ``loop``'s counter for a few values (``if step == 0:``, ``if i < 5:``), in the body of an ``if`` that
    makes a tensor the first time it is missing (``_made_once``), or in a block of an ``if`` that ends by
    leaving ``loop`` (``break``, ``return``, ``raise``)."""
    memo = index.shared.setdefault("ends_after_first_iteration", {})
    ends = memo.get(loop.node)  # type: ignore[union-attr]
    if ends is None:
        ends = memo[loop.node] = ends_after_first_iteration(loop.node)  # type: ignore[index]
    if ends:
        return True
    # remembered per (child, loop, whether a loop or def was met below it) on the way up: the reads deep
    # in an elif chain share their ancestors
    memo = index.shared.setdefault("runs_once_in", {})
    path = []
    once = False
    counters: Optional[Set[str]] = None
    moving: Set[str] = set()
    child = node
    inner = False  # a loop or def around ``node`` met so far (below ``loop``)
    for ancestor in index.ancestors(node):
        key = (child, loop.node, inner)
        if key in memo:
            once = memo[key]
            break
        path.append(key)
        if ancestor is loop.node:
            break
        kind = type(ancestor)
        if kind is ast.If:
            block = ancestor.body if any(statement is child for statement in ancestor.body) else ancestor.orelse
            if block is ancestor.body:
                if counters is None:
                    counters, moving = loop_counters(index, loop)
                if counters and runs_few_times(ancestor.test, counters, moving):
                    once = True
                    break
                if not inner and _made_once(index, ancestor, loop):
                    once = True  # `if queue is None: queue = torch.zeros(n).cuda()`: made on the first pass
                    break
            if block and not inner and type(block[-1]) in (ast.Break, ast.Return, ast.Raise):
                once = True  # `if step >= total: finish(); break`: the way out of the loop, taken once
                break
        elif kind in (ast.For, ast.AsyncFor, ast.While) or kind in _DEFS:
            inner = True
        child = ancestor
    for key in path:
        memo[key] = once
    return once


# At most this many iterations, provably, make a loop "a few" (a loop over a dataset's 20 classes, 10 samples)
FEW_ITERATIONS = 32
_SIZE_DEPTH = 8  # names, len(), comprehensions and enumerate() followed to a display


def few_iterations(index: AstIndex, loop: AstLoopInfo) -> bool:
    """``loop`` runs at most ``FEW_ITERATIONS`` times, as the code shows: a ``for`` over ``range(...)`` whose
    stop is a small integer (a literal, a name bound once to one, ``len()`` of a short display or of a
    comprehension over one: ``n_classes = len(label_map)`` with ``label_map = {k: v for v, k in
    enumerate(("cat", "dog"))}``), or over a short display itself."""
    node = loop.node
    if type(node) not in (ast.For, ast.AsyncFor):
        return False
    scope = loop.function or index.tree
    iterable = node.iter  # type: ignore[union-attr]
    if type(iterable) is ast.Call and type(iterable.func) is ast.Name and iterable.func.id == "range" \
            and "range" not in index.imports and not iterable.keywords and 1 <= len(iterable.args) <= 3:
        if len(iterable.args) > 1:
            start = _small_int(index, iterable.args[0], scope, 0)
            if start is None or start < 0:
                return False
        stop = _small_int(index, iterable.args[min(1, len(iterable.args) - 1)], scope, 0)
        return stop is not None and stop <= FEW_ITERATIONS
    size = _size(index, iterable, scope, 0)
    return size is not None and size <= FEW_ITERATIONS


def _small_int(index: AstIndex, expr: ast.AST, scope: AstScope, depth: int) -> Optional[int]:
    """The integer ``expr`` provably is (a literal, a name bound once to one, ``len()`` of a sized value,
    a sum or difference of those), or None."""
    if depth > _SIZE_DEPTH:
        return None
    kind = type(expr)
    if kind is ast.Constant:
        return expr.value if type(expr.value) is int else None  # type: ignore[attr-defined]
    if kind is ast.Name:
        value, where = index.single_value_and_scope(expr.id, scope)  # type: ignore[attr-defined]
        return _small_int(index, value, where, depth + 1) if value is not None else None
    if kind is ast.BinOp and type(expr.op) in (ast.Add, ast.Sub):  # type: ignore[attr-defined]
        left = _small_int(index, expr.left, scope, depth + 1)  # type: ignore[attr-defined]
        right = _small_int(index, expr.right, scope, depth + 1)  # type: ignore[attr-defined]
        if left is None or right is None:
            return None
        return left + right if type(expr.op) is ast.Add else left - right  # type: ignore[attr-defined]
    if kind is ast.Call and type(expr.func) is ast.Name and expr.func.id == "len" \
            and "len" not in index.imports and len(expr.args) == 1 and not expr.keywords:  # type: ignore[attr-defined]
        return _size(index, expr.args[0], scope, depth + 1)  # type: ignore[attr-defined]
    return None


def _size(index: AstIndex, expr: ast.AST, scope: AstScope, depth: int) -> Optional[int]:
    """How many items ``expr`` provably holds at most: a list, tuple, set or dict display; a comprehension
    with one generator over such a value (an ``if`` only drops items); ``enumerate``/``reversed`` of one; a
    name bound once to one."""
    if depth > _SIZE_DEPTH:
        return None
    kind = type(expr)
    if kind in (ast.List, ast.Tuple, ast.Set):
        return None if any(type(e) is ast.Starred for e in expr.elts) else len(expr.elts)  # type: ignore[attr-defined]
    if kind is ast.Dict:
        return None if any(k is None for k in expr.keys) else len(expr.keys)  # type: ignore[attr-defined]
    if kind in COMPREHENSIONS:
        generators = expr.generators  # type: ignore[attr-defined]
        return _size(index, generators[0].iter, scope, depth + 1) if len(generators) == 1 else None
    if kind is ast.Name:
        value, where = index.single_value_and_scope(expr.id, scope)  # type: ignore[attr-defined]
        return _size(index, value, where, depth + 1) if value is not None else None
    if kind is ast.Call and type(expr.func) is ast.Name and expr.func.id in ("enumerate", "reversed") \
            and expr.func.id not in index.imports and len(expr.args) == 1 and not expr.keywords:  # type: ignore[attr-defined]
        return _size(index, expr.args[0], scope, depth + 1)  # type: ignore[attr-defined]
    return None


def runs_once_per_run(index: AstIndex, node: ast.AST, function: Optional[ast.AST]) -> bool:
    """``node`` (in ``function``, None at module level) runs once per run of the script, not every step:
    it is in no loop, at module level or in a function that runs the training loop itself (``main()``'s
    set-up: ``fixed_noise = torch.randn(...).cuda()`` before ``for epoch in ...``)."""
    if next(index.enclosing_loops(node), None) is not None:
        return False
    if function is None:
        return True
    if type(function) is ast.Lambda or not any(loop.is_training and loop.function is function for loop in index.loops):
        return False
    # one that also steps outside its loops is itself one step (`for micro in batch.split(4): ...backward()`
    # then `optimizer.step()`): what it makes outside the loop, it makes every step
    return not any(call.function is function and call.loop is None and (
        index.is_backward_call(call.node) or index.is_optimizer_step(call.node, function))
        for call in index.calls_in(function))


def runs_only_for_evaluation(index: AstIndex, function: ast.AST, facts: "StepFacts") -> bool:
    """Every call of the file's def ``function`` (as the call graph resolves them; at least one) sits in the
    body of an ``if`` that also puts a model into eval mode (``if should_eval: swap_weights(); model.eval();
    ...``), or in a def whose calls all do: it runs around an evaluation pass, not in a training step."""
    memo: Dict[ast.AST, bool] = index.shared.setdefault("steps.runs_only_for_evaluation", {})  # type: ignore[assignment]
    return _for_evaluation(index, function, facts, memo, set())


def _for_evaluation(index: AstIndex, function: ast.AST, facts: "StepFacts", memo: Dict[ast.AST, bool],
                    seen: Set[ast.AST]) -> bool:
    if function in memo:
        return memo[function]
    if function in seen:
        return False
    seen.add(function)
    calls = facts.calls_of(function)
    result = bool(calls)
    for call in calls:
        if _in_evaluation_block(index, call):
            continue
        caller = index.function_of(call)
        if type(caller) not in _DEFS or not _for_evaluation(index, caller, facts, memo, seen):
            result = False
            break
    memo[function] = result
    return result


def _in_evaluation_block(index: AstIndex, node: ast.AST) -> bool:
    """``node`` is in the body of an ``if`` (within its own def) whose body switches a model to eval mode."""
    child = node
    for ancestor in index.ancestors(node):
        kind = type(ancestor)
        if kind in _DEFS or kind is ast.Lambda or kind is ast.ClassDef:
            return False
        if kind is ast.If and any(statement is child for statement in ancestor.body) and any(
                eval_receiver(index, info.node) is not None
                for statement in ancestor.body for info in index.calls_in(statement)):
            return True
        child = ancestor
    return False


def under_logging_guard(index: AstIndex, node: ast.AST, stop: ast.AST) -> bool:
    """``node`` sits in the body of an ``if`` with a logging guard (``facts.guards``) below ``stop``."""
    child = node
    for ancestor in index.ancestors(node):
        if ancestor is stop:
            return False
        if type(ancestor) is ast.If and is_logging_guard(ancestor.test, index, index.scope_of(ancestor)) \
                and any(statement is child for statement in ancestor.body):
            return True
        child = ancestor
    return False


def calls_by_name(call: ast.Call, names: Set[str]) -> bool:
    """``call`` runs a def of the file named in ``names`` by its name: ``train_step(...)``, ``self.step(...)``."""
    func = call.func
    if type(func) is ast.Name:
        return func.id in names  # type: ignore[attr-defined]
    return type(func) is ast.Attribute and type(func.value) is ast.Name and func.value.id == "self" \
        and func.attr in names  # type: ignore[attr-defined]


# A class a call's receiver was built from: a class of this file, or (module, level, name) as the file imports it
# (``from fp16_util import Trainer``; ``import TD3`` then ``TD3.TD3(...)``), which only the project model can
# tell to be a class of another project file.
_Target = Union[ast.ClassDef, Tuple[str, int, str]]


class ForeignStep:
    """A step loop of another project file that calls a method of one of this file's classes every iteration
    (``policy.train(batch)`` in ``main.py`` with ``policy = TD3.TD3(...)``): its file (relative to the project
    root) and line."""

    __slots__ = ("path", "line")

    def __init__(self, path: str, line: int) -> None:
        self.path, self.line = path, line


class FrameworkStep:
    """The training loop of a framework that calls a hook of one of this file's classes every step: Lightning's
    ``Trainer.fit()`` runs ``training_step`` of a ``LightningModule`` subclass once per batch."""

    __slots__ = ()


# the base classes whose ``training_step`` a Lightning Trainer calls every step, as the file imports them
LIGHTNING_MODULES = frozenset({
    "pytorch_lightning.LightningModule", "pytorch_lightning.core.LightningModule",
    "pytorch_lightning.core.module.LightningModule", "pytorch_lightning.core.lightning.LightningModule",
    "lightning.LightningModule", "lightning.pytorch.LightningModule", "lightning.pytorch.core.LightningModule",
    "lightning.pytorch.core.module.LightningModule",
})


def step_place(loop: Union[AstLoopInfo, ForeignStep, FrameworkStep]) -> str:
    """Where a step loop is, as a message names it: ``line 12`` in this file, ``main.py:112`` in another,
    Lightning's ``Trainer.fit()``."""
    if type(loop) is FrameworkStep:
        return "Lightning's `Trainer.fit()`"
    if type(loop) is ForeignStep:
        return f"{loop.path}:{loop.line}"  # type: ignore[union-attr]
    return line_reference(loop.node.lineno)  # type: ignore[union-attr]


class StepFacts:
    """The file's step functions and step loops, and the functions each step reaches (see the module).
    ``project`` (``facts.project.ProjectModel``): the steps of imported classes, and the loops of other files
    that call this file's methods; None for the file alone (its summaries)."""

    # (It keeps no reference to the index, which holds it: no reference cycle keeps a tree alive.)
    def __init__(self, index: AstIndex, project=None) -> None:
        self.step_functions: Set[str] = {
            info.function.name for info in index.calls
            if type(info.function) in _DEFS and info.loop is None
            and (index.is_backward_call(info.node) or index.is_optimizer_step(info.node, info.function))}
        # call -> the defs of this file it runs; call -> the methods of imported classes it runs
        self._callees_of: Dict[ast.Call, List[_Def]] = {}
        self._imported_of: Dict[ast.Call, List[Tuple[str, int, str, str]]] = {}
        # a call in this file that runs a training step of an imported project class -> that class's summary
        # (``class_steps``: its file, name, where it moves work to CUDA)
        self.imported_steps: Dict[ast.Call, dict] = {}
        # a call in this file of an imported project function or method that runs a training loop of its own
        # (``train_epoch(...)`` of ``training.py``, ``agent.update()`` that loops over its epochs) -> its summary
        self.imported_trainers: Dict[ast.Call, dict] = {}
        self._methods: Dict[Tuple[ast.AST, str], List[_Def]] = {}
        self._classes: Dict[str, ast.ClassDef] = {}
        self._functions: Dict[str, List[_Def]] = {}  # module-level defs by name
        self._calls_of: Optional[Dict[ast.AST, List[ast.Call]]] = None  # def -> the calls that run it (``calls_of``)
        # a call that hands a def of this file to an imported function (``gpu_timer(train_step)``), where no
        # project says whether that function calls it: [(module, level, name), [(position, def)]]
        self.passed_out: Dict[ast.Call, Tuple[Tuple[str, int, str], List[Tuple[int, _Def]]]] = {}
        # the calls that run a def of this file they are handed (``gpu_timer(train_step)``): their value is
        # the wrapper's, not the def's
        self.handing: Set[ast.Call] = set()
        self._graph(index, project)
        # the defs that run a training step when called: a step function, or one that calls such a def (or a
        # stepping method of an imported class) outside a loop of its own and not under a logging guard
        self.stepping: Set[ast.AST] = self._stepping(index)
        self.step_loops: Dict[ast.AST, AstLoopInfo] = {
            loop.node: loop for loop in index.loops if self._steps(loop)}
        # the loops of this file that run a training loop of another project file (an epoch loop that calls
        # ``train_epoch(...)`` of ``training.py``): the program trains there, one epoch (not one step) a call
        self.epoch_loops: Dict[ast.AST, AstLoopInfo] = {
            loop.node: loop for loop in index.loops if loop.node not in self.step_loops
            and any(call in self.imported_trainers for call in loop.direct_calls)} if self.imported_trainers else {}
        # def -> the step loop through which it runs every step (the first one found, in source order; a
        # ``ForeignStep`` where only a loop of another file reaches it)
        self.reached: Dict[ast.AST, Union[AstLoopInfo, ForeignStep, FrameworkStep]] = {}
        # a module-level def or a method of this file that loops of other project files call -> for each such
        # call, where its result goes there (``result_uses``; None where out of sight)
        self.foreign_results: Dict[ast.AST, List[Optional[list]]] = {}
        self._reach(index, project)
        # (class or function, method or "") -> for each call of it in the files that import this one, whether
        # it runs once per run there (``uses_summary``'s ``once``)
        self._foreign_once: Dict[Tuple[str, str], List[bool]] = project.called_once() if project is not None else {}

    def _steps(self, loop: AstLoopInfo) -> bool:
        if ends_after_first_iteration(loop.node):
            return False
        if loop.is_training:
            return True
        for call in loop.direct_calls:
            if self.step_functions and self.calls_step(call):
                return True
            if call in self.imported_steps or any(c in self.stepping for c in self._callees_of.get(call, ())):
                return True
        return False

    def calls_step(self, call: ast.Call) -> bool:
        """``call`` runs one of the file's step functions by its name: ``train_step(...)``, ``self.step(...)``."""
        return calls_by_name(call, self.step_functions)

    def step_loop_around(self, index: AstIndex, node: ast.AST) -> Optional[AstLoopInfo]:
        """The innermost step loop around ``node`` in its function (or module)."""
        return next((loop for loop in index.enclosing_loops(node) if loop.node in self.step_loops), None)

    def has_steps(self) -> bool:
        """The file has a step loop, or a loop of another project file runs a def of this one every step."""
        return bool(self.step_loops) or any(type(loop) is not AstLoopInfo for loop in self.reached.values())

    def reaching_step(self, index: AstIndex, node: ast.AST) -> Optional[Tuple[_Def, Union[AstLoopInfo, ForeignStep]]]:
        """For ``node`` in a def that some step runs every time (and not under a logging guard there): that
        def and the step loop that reaches it."""
        function = index.function_of(node)
        loop = self.reached.get(function) if function is not None else None
        if loop is None or under_logging_guard(index, node, function):  # type: ignore[arg-type]
            return None
        return function, loop  # type: ignore[return-value]

    def calls_of(self, function: ast.AST) -> List[ast.Call]:
        """The calls of this file that run ``function`` (a def of the file), as the call graph resolves them."""
        if self._calls_of is None:
            self._calls_of = {}
            for call, callees in self._callees_of.items():
                for callee in callees:
                    self._calls_of.setdefault(callee, []).append(call)
        return self._calls_of.get(function, [])

    def callees_of(self, call: ast.Call) -> List[_Def]:
        """The defs of this file ``call`` runs, as the call graph resolves them (none where it cannot tell)."""
        return self._callees_of.get(call, [])

    def imported_methods_of(self, call: ast.Call) -> List[Tuple[str, int, str, str]]:
        """The methods of imported classes ``call`` runs: ``(module, level, class, method)`` as the file imports
        the class (``timer.tic()`` with ``timer = Timer()`` and ``from pkg.timer import Timer``)."""
        return self._imported_of.get(call, [])

    def methods_of(self, class_name: str, method: str) -> List[_Def]:
        """The defs of method ``method`` of the file's class ``class_name`` (``method`` empty: the module-level
        defs named ``class_name``)."""
        if not method:
            return self._functions.get(class_name, [])
        klass = self._classes.get(class_name)
        return self._methods.get((klass, method), []) if klass is not None else []

    # --- how often a def runs ---------------------------------------------------------------------
    def runs_once(self, index: AstIndex, function: ast.AST) -> bool:
        """``function`` (a def of the file) runs once per run, as far as the project shows: no step reaches
        it, and every call of it the file makes (each resolved to it by the call graph, its name used for
        nothing else) is outside any loop, at module level or in a def that runs the training loop itself
        (``runs_once_per_run``) or that runs once in turn (``init_memory(loader)`` in ``main()`` before the
        epoch loop, ``main()`` called once at the end of the script), and so is every run of it by the files
        that import this one (``ProjectModel.called_once``, ``runs_once_here`` there); at least one call in
        all. A class's ``__init__`` runs
        once per object: once per run where every build of the class the file shows (and of its subclasses
        there) runs once; a class the file never builds is built by another file, as set-up (a model, an
        agent, a runner), which is taken for once per run. A dunder, ``forward`` (``nn.Module.__call__`` runs
        it) and a def with a decorator other than ``staticmethod``, ``classmethod`` and the grad modes are
        never taken for once."""
        memo: Dict[ast.AST, bool] = index.shared.setdefault("steps.runs_once", {})  # type: ignore[assignment]
        known = memo.get(function)
        if known is None:
            memo[function] = False  # a def that calls itself, directly or around a circle, runs again
            known = memo[function] = self._once(index, function)
        return known

    def _once(self, index: AstIndex, function: ast.AST) -> bool:
        if type(function) not in _DEFS or function in self.reached or function in self.stepping:
            return False
        if any(_qualified_decorator(index, decorator) not in _ONCE_DECORATORS
               for decorator in function.decorator_list):  # type: ignore[attr-defined]
            return False
        name = function.name  # type: ignore[attr-defined]
        klass = index.class_of.get(function)
        if klass is not None and (name == "forward" or name.startswith("__") and name.endswith("__")):
            return name == "__init__" and function in klass.body and self._built_once(index, klass)
        calls = self.calls_of(function)
        foreign = self._foreign_once.get(_importable_as(index, function), [])  # (calls from other files)
        if (not calls and not foreign) or any(call in self.handing for call in calls):
            return False
        called = {id(call.func) for call in calls}
        uses = index.attributes_named(name) if klass is not None else [use for use, _ in index.names_named(name)]
        if any(id(use) not in called for use in uses):
            return False  # called on a receiver the graph cannot follow, or handed on as a value
        return all(foreign) and all(self._once_at(index, call) for call in calls)

    def _built_once(self, index: AstIndex, klass: ast.ClassDef) -> bool:
        """Every build of ``klass`` this file shows runs once (``runs_once``), and so does every build of its
        subclasses here; its name is used for nothing else but ``isinstance``/``issubclass``."""
        memo: Dict[ast.AST, bool] = index.shared.setdefault("steps.built_once", {})  # type: ignore[assignment]
        known = memo.get(klass)
        if known is not None:
            return known
        memo[klass] = False
        if sum(1 for other in index.classes if other.name == klass.name) > 1 or klass.name in index.imports:
            return False  # which class a build means is not one answer
        found = True
        for use, parent in index.names_named(klass.name):
            kind = type(parent)
            if kind is ast.Call and parent.func is use:  # type: ignore[attr-defined]
                found = self._once_at(index, parent)  # type: ignore[arg-type]
            elif kind is ast.ClassDef and use in parent.bases:  # type: ignore[attr-defined]
                found = self._built_once(index, parent)  # type: ignore[arg-type]
            elif not (kind is ast.Call and call_name(parent) in ("isinstance", "issubclass")  # type: ignore[arg-type]
                      and use is not parent.func):  # type: ignore[attr-defined]
                found = False  # handed on as a value (a factory, a registry): built where it goes
            if not found:
                break
        memo[klass] = found
        return found

    def _once_at(self, index: AstIndex, call: ast.Call) -> bool:
        """``call`` runs once per run of what holds it: in no loop, at module level, or in a def that runs the
        training loop itself or runs once (``runs_once``)."""
        if next(index.enclosing_loops(call), None) is not None:
            return False
        caller = index.function_of(call)
        return caller is None or (type(caller) in _DEFS and (
            runs_once_per_run(index, call, caller) or self.runs_once(index, caller)))

    # --- the call graph ---------------------------------------------------------------------------
    def _graph(self, index: AstIndex, project) -> None:
        # name -> the defs of that name, grouped by the scope that makes them (the answer of `_in_sight` is
        # the group's: a long file that defines one name many times must not climb scopes for each def)
        functions: Dict[str, Dict[ast.AST, List[_Def]]] = {}
        methods = self._methods
        for function in index.functions:
            klass = index.class_of.get(function)
            if klass is None:
                home = index.function_of(function) or index.tree
                functions.setdefault(function.name, {}).setdefault(home, []).append(function)
            else:
                methods.setdefault((klass, function.name), []).append(function)
        module = index.tree
        self._functions = {name: groups[module] for name, groups in functions.items() if module in groups}
        self._classes = classes = {klass.name: klass for klass in index.class_of.values() if klass is not None}
        origins = import_origins(index) if index.import_statements else {}
        if not functions and not methods and not origins:
            return
        for info in index.calls:
            func = info.node.func
            if type(func) is not ast.Name and type(func) is not ast.Attribute:
                continue
            callees, imported = self._callees(index, info.node, info.function, functions, methods, classes,
                                              origins)
            passed = self._passed(index, info.node, info.function, functions) if info.node.args else []
            if passed:  # `gpu_timer(train_step)`: a def handed to a function that calls it
                handed = self._run_by(index, info.node, callees, passed, origins, project)
                if handed:
                    self.handing.add(info.node)
                    callees = list(callees) + handed
            if callees:
                self._callees_of[info.node] = callees
            if imported:
                self._imported_of[info.node] = imported
                if project is not None:
                    for module, level, name, method in imported:
                        found = project.class_steps(module, level, name)
                        if found is not None and method in found["steps"]:
                            self.imported_steps[info.node] = found
                            break
                        if found is not None and method in found.get("trains", ()):
                            self.imported_trainers[info.node] = found
            elif not callees and project is not None and project.has_imported_functions and origins:
                written = dotted_name(func)
                origin = called_origin(origins, written) if written is not None else None
                found = project.function_steps(*origin) if origin is not None else None
                if found is not None:  # `train_step(...)` / `training.train_epoch(...)` of another project file
                    (self.imported_steps if found["kind"] == "steps" else self.imported_trainers)[info.node] = found

    def _passed(self, index: AstIndex, call: ast.Call, caller, functions) -> List[Tuple[int, _Def]]:
        """The positional arguments of ``call`` that name one def of this file in sight (``train_step`` in
        ``gpu_timer(train_step)``), with their positions."""
        found = []
        for at, argument in enumerate(call.args):
            if type(argument) is not ast.Name or argument.id in index.imports:
                continue
            groups = functions.get(argument.id)
            if groups and len(groups) == 1:
                home, defs = next(iter(groups.items()))
                if len(defs) == 1 and self._in_sight(index, home, argument.id, caller):
                    found.append((at, defs[0]))
        return found

    def _run_by(self, index: AstIndex, call: ast.Call, callees: List[_Def], passed: List[Tuple[int, _Def]],
                origins, project) -> List[_Def]:
        """The defs of ``passed`` that the function ``call`` runs calls, once a call: a def of this file that
        calls that parameter (``calls_parameter``), or an imported function whose step summary says so (without
        a project: noted in ``passed_out``)."""
        positions: Set[int] = set()
        for callee in callees:
            if index.class_of.get(callee) is None:
                positions.update(calls_parameter(index, callee))
        if not callees and origins:
            written = dotted_name(call.func)
            origin = called_origin(origins, written) if written is not None else None
            if origin is not None and may_be_project(origin[0], origin[1]):
                if project is None:
                    self.passed_out[call] = (origin, passed)
                else:
                    positions.update(project.calls_parameter(*origin))
        return [function for at, function in passed if at in positions and function not in callees]

    def _stepping(self, index: AstIndex) -> Set[ast.AST]:
        stepping: Set[ast.AST] = {
            info.function for info in index.calls
            if type(info.function) in _DEFS and info.loop is None
            and (index.is_backward_call(info.node) or index.is_optimizer_step(info.node, info.function)
                 or info.node in self.imported_steps)}
        callers: Dict[ast.AST, List[ast.AST]] = {}
        for info in index.calls:
            callees = self._callees_of.get(info.node)
            if callees and info.loop is None and type(info.function) in _DEFS \
                    and not under_logging_guard(index, info.node, info.function):  # type: ignore[arg-type]
                for callee in callees:
                    callers.setdefault(callee, []).append(info.function)  # type: ignore[arg-type]
        return _with_callers(stepping, callers)

    def trainers(self, index: AstIndex) -> Set[ast.AST]:
        """The defs that run a whole training loop when called, not one step: a def with a step loop of its
        own (``train_one_epoch``), one that calls an imported project function or method that does, and one
        that calls such a def, anywhere in it (stepping defs left out: they are one step a call)."""
        found: Set[ast.AST] = {loop.function for loop in self.step_loops.values() if type(loop.function) in _DEFS}
        found.update(info.function for info in index.calls
                     if info.node in self.imported_trainers and type(info.function) in _DEFS)
        callers: Dict[ast.AST, List[ast.AST]] = {}
        for info in index.calls:
            if type(info.function) in _DEFS:
                for callee in self._callees_of.get(info.node, ()):
                    callers.setdefault(callee, []).append(info.function)  # type: ignore[arg-type]
        return _with_callers(found, callers) - self.stepping

    def _reach(self, index: AstIndex, project) -> None:
        framework = _lightning_steps(index)
        if not self._callees_of and project is None and not framework:
            return
        own_loops = {loop.function for loop in self.step_loops.values()}  # per epoch, not per step
        roots: List[Tuple[_Def, Union[AstLoopInfo, ForeignStep, FrameworkStep]]] = []
        edges: Dict[ast.AST, List[_Def]] = {}
        for info in index.calls:
            callees = self._callees_of.get(info.node)
            if not callees:
                continue
            step = self._step_of(info.loop)
            if step is not None:
                if not runs_once_in(index, info.node, step) \
                        and not under_logging_guard(index, info.node, step.node):
                    roots.extend((callee, step) for callee in callees)
            elif type(info.function) in _DEFS and not under_logging_guard(index, info.node, info.function):
                edges.setdefault(info.function, []).extend(callees)
        if project is not None:  # loops of other files that run methods of this file's classes
            for path, line, steps, calls in project.callers():
                targets = [function for name, method, *_ in calls for function in self.methods_of(name, method)]
                for name, method, *uses in calls:
                    for function in self.methods_of(name, method):
                        self.foreign_results.setdefault(function, []).append(uses[0] if uses else None)
                if steps or any(function in self.stepping for function in targets):
                    foreign = ForeignStep(path, line)
                    roots.extend((function, foreign) for function in targets)
        if project is not None:  # objects of this file's classes handed to another file's loop that runs a method
            roots.extend(self._handed_instances(index, project))
        lightning = FrameworkStep()
        roots.extend((function, lightning) for function in framework)  # a Lightning Trainer runs them every step
        queue = deque()
        for callee, step in roots:
            if callee not in self.reached and callee not in own_loops:
                self.reached[callee] = step
                queue.append(callee)
        _pass_down(self.reached, edges, queue, own_loops)

    def _handed_instances(self, index: AstIndex, project) -> List[Tuple[_Def, ForeignStep]]:
        """The methods of this file's classes that another project file's function runs in a loop on an object
        this file hands it (``rl_utils.train_off_policy_agent(env, agent, ...)`` with ``agent = SAC(...)``,
        whose episode loop calls ``agent.update(...)``; ``ProjectModel.loop_methods``), where the method runs a
        training step: that loop is its step loop, in the other file."""
        origins = import_origins(index) if index.import_statements else {}
        found: List[Tuple[_Def, ForeignStep]] = []
        for info in index.calls:
            written = dotted_name(info.node.func)
            origin = called_origin(origins, written) if written is not None and origins else None
            if origin is None or not may_be_project(origin[0], origin[1]) \
                    or any(type(arg) is ast.Starred for arg in info.node.args):
                continue
            looped = project.loop_methods(*origin)
            if looped is None:
                continue
            path, methods = looped
            for position, method, line in methods:
                if position >= len(info.node.args):
                    continue
                for klass in instance_classes(index, info.node.args[position], info.function):
                    if type(klass) is not ast.ClassDef:
                        continue  # (an imported class: its file reads the loop off this one's summary, if ever)
                    for function in self.methods_of(klass.name, method):
                        if function in self.stepping:
                            found.append((function, ForeignStep(path, line)))
        return found

    def _step_of(self, loop: Optional[AstLoopInfo]) -> Optional[AstLoopInfo]:
        while loop is not None:
            if loop.node in self.step_loops:
                return loop
            loop = loop.parent
        return None

    def _in_sight(self, index: AstIndex, home: ast.AST, name: str, caller) -> bool:
        """``name`` in ``caller`` (a def, a lambda or None: the module) means a def of that name made in
        ``home`` (a def, a lambda or the module): ``home`` is ``caller`` or a scope around it, and no scope in
        between binds the name otherwise (a loop target ``for step in steps: step(batch)`` is not the file's
        ``def step``)."""
        scope = caller if caller is not None else index.tree
        while scope is not home:
            if index.values_of(name, scope) or scope is index.tree:
                return False  # bound here by something else, or ``home`` is not around ``caller``
            scope = index.function_of(scope) or index.tree
        return True

    def _callees(self, index: AstIndex, call: ast.Call, caller, functions, methods, classes, origins
                 ) -> Tuple[List[_Def], List[Tuple[str, int, str, str]]]:
        """The defs of this file ``call`` runs, and the methods of imported classes: ``helper(...)``,
        ``self.record(...)``, ``recorder.update(...)`` / ``self.trainer.step(...)`` / ``Trainer(...).run()``
        where every value the receiver is bound to is built by a class (of this file, or imported)."""
        func = call.func
        if type(func) is ast.Name:
            if func.id in index.imports:
                return [], []
            groups = functions.get(func.id)
            if not groups:
                return [], []
            if len(groups) == 1:  # (most names: one scope makes them)
                home, defs = next(iter(groups.items()))
                return (defs if self._in_sight(index, home, func.id, caller) else []), []
            found = [(defs, home) for home, defs in groups.items() if self._in_sight(index, home, func.id, caller)]
            if len(found) > 1:
                return sorted((f for defs, _ in found for f in defs), key=_def_order), []
            return (found[0][0] if found else []), []
        if type(func) is not ast.Attribute:
            return [], []
        receiver = func.value
        if type(receiver) is ast.Name and receiver.id == "self":
            klass = index.class_of.get(caller) if caller is not None else None
            return (methods.get((klass, func.attr), []) if klass is not None else []), []
        targets = instance_classes(index, receiver, caller, classes, origins)
        local: List[_Def] = []
        imported = []
        for target in targets:
            if type(target) is tuple:
                imported.append((*target, func.attr))  # type: ignore[misc]
            else:
                local.extend(methods.get((target, func.attr), ()))
        return local, imported

    def _per_iteration(self, index: AstIndex, node: ast.AST, loop: AstLoopInfo) -> Optional[AstLoopInfo]:
        """The loop that runs ``node`` (a call whose innermost loop is ``loop``) every iteration: the step loop
        around it, else ``loop``; None where it runs a few times there or under a logging guard."""
        loop = self._step_of(loop) or loop
        if ends_after_first_iteration(loop.node) or runs_once_in(index, node, loop) \
                or under_logging_guard(index, node, loop.node):
            return None
        return loop

    def _iterated(self, index: AstIndex) -> Dict[ast.AST, AstLoopInfo]:
        """def -> a loop of the file (any loop, the first found) that runs it every iteration, as ``reached``
        follows the step loops."""
        own_loops = {loop.function for loop in self.step_loops.values()}
        found: Dict[ast.AST, AstLoopInfo] = {}
        edges: Dict[ast.AST, List[_Def]] = {}
        queue = deque()
        for info in index.calls:
            callees = self._callees_of.get(info.node)
            if not callees:
                continue
            if info.loop is not None:
                loop = self._per_iteration(index, info.node, info.loop)
                for callee in callees if loop is not None else ():
                    if callee not in found and callee not in own_loops:
                        found[callee] = loop
                        queue.append(callee)
            elif type(info.function) in _DEFS and not under_logging_guard(index, info.node, info.function):  # type: ignore[arg-type]
                edges.setdefault(info.function, []).extend(callees)  # type: ignore[arg-type]
        _pass_down(found, edges, queue, own_loops)
        return found


def _importable_as(index: AstIndex, function: ast.AST) -> Optional[Tuple[str, str]]:
    """How another file names ``function``: (its name, "") for a module-level def, (class, method) for a method
    of a module-level class; None for a def no other file can call by name (nested)."""
    klass = index.class_of.get(function)
    if klass is None:
        return (function.name, "") if index.function_of(function) is None else None  # type: ignore[attr-defined]
    if function in klass.body and index.function_of(klass) is None:
        return klass.name, function.name  # type: ignore[attr-defined]
    return None


def _qualified_decorator(index: AstIndex, decorator: ast.expr) -> Optional[str]:
    """What a decorator names, called or not (``@torch.no_grad()``, ``@staticmethod``), by the file's imports."""
    target = decorator.func if type(decorator) is ast.Call else decorator  # type: ignore[attr-defined]
    return index.qualified_name(target) or dotted_name(target)


def _with_callers(found: Set[ast.AST], callers: Dict[ast.AST, List[ast.AST]]) -> Set[ast.AST]:
    """``found`` (updated) with every def that calls one of them, directly or through other defs."""
    queue = deque(found)
    while queue:
        for caller in callers.get(queue.popleft(), ()):
            if caller not in found:
                found.add(caller)
                queue.append(caller)
    return found


def _pass_down(found: Dict[ast.AST, object], edges: Dict[ast.AST, List[_Def]], queue: deque,
               stop: Set[ast.AST]) -> None:
    """From each def in ``queue`` (a key of ``found``), give every def it calls, directly or through other
    defs (``edges``), not in ``found`` yet and not in ``stop``, the value of the def that reaches it."""
    while queue:
        caller = queue.popleft()
        for callee in edges.get(caller, ()):
            if callee not in found and callee not in stop:
                found[callee] = found[caller]
                queue.append(callee)


def _lightning_steps(index: AstIndex) -> List[_Def]:
    """The ``training_step`` methods of the file's module-level classes that derive from Lightning's
    ``LightningModule`` (by the file's imports: ``pl.LightningModule``, ``from lightning import
    LightningModule``)."""
    if "LightningModule" not in index.source:
        return []
    found: List[_Def] = []
    for klass in index.tree.body:  # type: ignore[attr-defined]
        if type(klass) is not ast.ClassDef or not any(
                index.qualified_name(base) in LIGHTNING_MODULES for base in klass.bases):
            continue
        found.extend(statement for statement in klass.body
                     if type(statement) in _DEFS and statement.name == "training_step")
    return found


def instance_classes(index: AstIndex, receiver: ast.expr, caller, classes: Optional[Dict[str, ast.ClassDef]] = None,
                     origins=None, none_too: bool = False) -> List[_Target]:
    """The classes ``receiver`` was built by: ``Trainer(...)`` itself, a name (or ``self.<attribute>`` of the
    caller's class) every binding of which is such a call; empty where any is something else (``none_too``:
    but for ``None``, ``helper = None`` on the path that builds none). Each a class of this file (a
    ``ClassDef``: ``classes``, by name, those with methods) or ``(module, level, name)`` of an imported name
    (``origins``: ``import_origins``); both read off the index where not given."""
    if classes is None or origins is None:
        known = index.shared.get("steps.instance_classes")
        if known is None:
            known = index.shared["steps.instance_classes"] = (
                {klass.name: klass for klass in index.class_of.values() if klass is not None},
                import_origins(index) if index.import_statements else {})
        classes, origins = known  # type: ignore[misc]
    kind = type(receiver)
    if kind is ast.Call:
        return _class_of_call(index, receiver, classes, origins)  # type: ignore[arg-type]
    if kind is ast.Name:
        values: List[Optional[ast.AST]] = []
        for scope in (caller if caller is not None else index.tree, index.tree):
            values = index.values_of(receiver.id, scope)  # type: ignore[attr-defined]
            if values:
                break
    elif kind is ast.Attribute and type(receiver.value) is ast.Name and receiver.value.id == "self":  # type: ignore[attr-defined]
        klass = index.class_of.get(caller) if caller is not None else None
        values = index.self_attributes.get((klass, receiver.attr), []) if klass is not None else []  # type: ignore[attr-defined]
    else:
        return []
    targets: List[_Target] = []
    for value in values:
        if none_too and type(value) is ast.Constant and value.value is None:  # type: ignore[attr-defined]
            continue
        built = _class_of_call(index, value, classes, origins) if type(value) is ast.Call else []  # type: ignore[arg-type]
        if not built:
            return []
        targets.extend(target for target in built if target not in targets)
    return targets


def _class_of_call(index: AstIndex, call: ast.Call, classes: Dict[str, ast.ClassDef], origins) -> List[_Target]:
    """``Recorder(...)`` of a class of this file, or a call of an imported name (``Trainer(...)``,
    ``TD3.TD3(...)``): the class it may build."""
    func = call.func
    if type(func) is ast.Name and func.id in classes and func.id not in index.imports:
        return [classes[func.id]]
    written = dotted_name(func)
    origin = called_origin(origins, written) if written is not None and origins else None
    return [origin] if origin is not None else []  # type: ignore[list-item]


def calls_parameter(index: AstIndex, function: _Def) -> List[int]:
    """The positions of the parameters ``function`` calls once every time it runs: a call of the parameter
    that is a statement of its own body, or its value assigned or returned there (``result = closure()``,
    ``return fn()``; not in a branch, a loop or a nested def), where nothing else binds that name."""
    arguments = function.args
    names = [argument.arg for argument in (*arguments.posonlyargs, *arguments.args)]
    if index.class_of.get(function) is not None:
        names = names[1:]  # `self`
    found = []
    for statement in function.body:
        value = statement.value if type(statement) in (ast.Expr, ast.Assign, ast.Return) else None
        if type(value) is ast.Call and type(value.func) is ast.Name and value.func.id in names:
            name = value.func.id
            if all(bound is None for bound in index.values_of(name, function)) and names.index(name) not in found:
                found.append(names.index(name))
    return found


def loop_methods(index: AstIndex, function: _Def) -> List[list]:
    """``[position, method, line]`` for each method that ``function`` calls on one of its parameters in a loop
    of its own (``agent.update(batch)`` in ``def train_off_policy_agent(env, agent, ...)``'s episode loop; the
    line of that loop), where nothing else binds that parameter: the file that hands an object over learns
    which of its methods run every iteration there."""
    arguments = function.args
    names = [argument.arg for argument in (*arguments.posonlyargs, *arguments.args)]
    if index.class_of.get(function) is not None:
        return []
    found: List[list] = []
    for info in index.calls_in(function):
        func = info.node.func
        if info.function is not function or info.loop is None or type(func) is not ast.Attribute \
                or type(func.value) is not ast.Name or func.value.id not in names:
            continue
        name = func.value.id
        entry = [names.index(name), func.attr, info.loop.node.lineno]
        if all(bound is None for bound in index.values_of(name, function)) and entry[:2] not in [e[:2] for e in found]:
            found.append(entry)
    return found


# --- what other project files use of this one (plain data, from this file alone) -------------------------
def step_summary(index: AstIndex) -> dict:
    """What a file that imports this one may use of its training steps (``facts.project``): per class, the
    methods that run a training step when called (``steps``: through ``self.<method>()`` and the file's
    functions), those that run a training loop of their own (``trains``: ``update()`` looping over its
    epochs), and the first place its methods move work to a CUDA device the code shows (``cuda``: line and
    statement; ``.to(device)`` with ``device = "cuda" if torch.cuda.is_available() else "cpu"``, not a device
    known only by its name); whether the file computes in reduced or double precision anywhere
    (``reduced``); its module-level functions that step or train (``functions``: name -> "steps" for one
    step a call, "trains" for a training loop of their own); and those that return a CUDA device, or one when available
    (``devices``: ``def dev(): return torch.device("cuda") if torch.cuda.is_available() else ...``)."""
    from torchlint.facts.devices import returns_cuda_device, moves_to_cuda, mixed_precision_evidence, uses_fp64

    summary: dict = {}
    facts = StepFacts(index)
    classes: Dict[str, dict] = {}
    functions: Dict[str, str] = {}
    trainers = facts.trainers(index) if facts.step_loops or facts.stepping else set()
    for function in index.functions:
        if index.function_of(function) is not None:
            continue
        kind = "steps" if function in facts.stepping else "trains" if function in trainers else None
        if kind is None:
            continue
        klass = index.class_of.get(function)
        if klass is None:
            functions.setdefault(function.name, kind)
            continue
        entry = classes.setdefault(klass.name, {"steps": []})
        names = entry["steps"] if kind == "steps" else entry.setdefault("trains", [])
        if function.name not in names:
            names.append(function.name)
    if functions:
        summary["functions"] = functions
        summary["reduced"] = mixed_precision_evidence(index) is not None or uses_fp64(index)
    if classes:
        for info in index.calls:
            klass = index.class_of.get(info.function) if info.function is not None else None
            entry = classes.get(klass.name) if klass is not None else None
            if entry is None or "cuda" in entry or not moves_to_cuda(index, info.node, info.function):
                continue
            statement = next(a for a in index.ancestors(info.node) if isinstance(a, ast.stmt))
            text = index.code_for_node(statement, statement).split("\n")[0]
            entry["cuda"] = [info.node.lineno, text if len(text) <= 50 else text[:47] + "..."]
        summary["classes"] = classes
        summary["reduced"] = mixed_precision_evidence(index) is not None or uses_fp64(index)
    devices = [function.name for function in index.functions
               if index.class_of.get(function) is None and index.function_of(function) is None
               and returns_cuda_device(index, function)]
    if devices:
        summary["devices"] = devices
    calling = {function.name: positions for function in index.tree.body  # type: ignore[attr-defined]
               if type(function) in _DEFS for positions in (calls_parameter(index, function),) if positions}
    if calling:
        summary["calls"] = calling
    looping = {function.name: methods for function in index.tree.body  # type: ignore[attr-defined]
               if type(function) in _DEFS for methods in (loop_methods(index, function),) if methods}
    if looping:
        summary["loop_methods"] = looping
    clocks = _clock_methods(index)
    if clocks:
        summary["clocks"] = clocks
    return summary


def _clock_methods(index: AstIndex) -> Dict[str, List[str]]:
    """Per module-level class, the methods that read a clock themselves (a timer's ``tic()``/``toc()``:
    a step that calls them times itself, TL105)."""
    from torchlint.facts.clocks import CLOCK_TEXTS, reads_clock_in

    if not index.classes or not any(text in index.source for text in CLOCK_TEXTS):
        return {}
    found: Dict[str, List[str]] = {}
    for function in index.functions:
        klass = index.class_of.get(function)
        if klass is not None and function in klass.body and index.function_of(klass) is None \
                and reads_clock_in(index, function):
            found.setdefault(klass.name, []).append(function.name)
    return found


_BUILTINS = frozenset(dir(builtins))


def uses_summary(index: AstIndex) -> dict:
    """``_uses_summary``, with the names a file's one star import of a project module may bind
    (``_star_guesses``) in its import table: which of them that module defines is that file's to say (the
    receiving side matches them against its own defs and classes)."""
    guesses = _star_guesses(index)
    if not guesses:
        return _uses_summary(index)
    with index.with_star_names(guesses):
        return _uses_summary(index)


def _star_guesses(index: AstIndex) -> Dict[str, Tuple[str, int, Optional[str]]]:
    """Where the file star-imports exactly one module that may be of the project (``from evaluation import
    *``), every name it calls (``get_accuracy(sr, gt)``) that it binds nowhere and that is no builtin, as taken
    from that module; else nothing."""
    stars = [(statement.module or "", statement.level) for statement in index.import_statements
             if type(statement) is ast.ImportFrom and any(alias.name == "*" for alias in statement.names)]
    if len(stars) != 1 or not may_be_project(*stars[0]):
        return {}
    module, level = stars[0]
    bound = {name for names in index.bindings.values() for name in names}
    return {name: (module, level, name) for name in index.calls_by_name
            if name not in bound and name not in _BUILTINS and any(
                type(info.node.func) is ast.Name for info in index.calls_by_name[name])}


def _uses_summary(index: AstIndex) -> dict:
    """What this file runs of other files' classes every iteration of its loops, as plain data: per loop (its
    line, whether it is a step loop of this file), the methods called on instances of imported names
    (``[module, level, name, method]`` as the file imports them: ``policy.train(...)`` with ``policy =
    TD3.TD3(...)``, ``self.trainer.optimize(...)`` with ``self.trainer = Trainer(...)``), in the loop or in a def
    the loop runs every iteration (not under a logging guard, not in a branch that runs a few times); and, under
    "built", "once" and "handed", the classes it builds with CUDA modules (``_cuda_builds``), how often it runs
    each imported name (``_once_calls``) and the loaders it hands to them (``facts.loaders.handed_summary``)."""
    index.survey()  # (names, parents and attributes, all asked below, in one walk)
    facts = StepFacts(index)
    called = _imported_function_calls(index, facts)
    summary: dict = {}
    for key, found in (("built", _cuda_builds(index)), ("once", _once_calls(index, facts)),
                       ("handed", handed_summary(index))):
        if found:
            summary[key] = found
    if not facts._imported_of and not called and not facts.passed_out:
        return summary
    iterated = facts._iterated(index)
    loops: Dict[ast.AST, Tuple[AstLoopInfo, List[list]]] = {}
    for info in index.calls:
        imported = facts._imported_of.get(info.node)
        if not imported:
            origin = called.get(info.node)
            if origin is None or info.loop is None:
                continue
            loop = facts._per_iteration(index, info.node, info.loop)
            if loop is not None:
                calls = loops.setdefault(loop.node, (loop, []))[1]
                calls.append([*origin, "", result_uses(index, info.node, loop)])
            continue
        uses = None  # where the returned value goes: out of sight in a def the loop runs
        if info.loop is not None:
            loop = facts._per_iteration(index, info.node, info.loop)
            if loop is not None:
                uses = result_uses(index, info.node, loop)
        elif type(info.function) in _DEFS and not under_logging_guard(index, info.node, info.function):  # type: ignore[arg-type]
            loop = iterated.get(info.function)  # type: ignore[arg-type]
        else:
            loop = None
        if loop is None:
            continue
        calls = loops.setdefault(loop.node, (loop, []))[1]
        calls.extend(entry for entry in ([*entry, uses] for entry in imported) if entry not in calls)
    for call, (wrapper, passed) in facts.passed_out.items():
        _hand_out(index, facts, call, wrapper, passed, loops, called)
    if loops:
        summary["loops"] = [[loop.node.lineno, loop.node in facts.step_loops, calls]  # type: ignore[attr-defined]
                            for loop, calls in sorted(loops.values(), key=lambda item: source_order(item[0].node))]
    return summary


def _once_calls(index: AstIndex, facts: StepFacts) -> List[list]:
    """The imported names of other project files this file runs, each once as ``[module, level, name, method,
    whether every run of it here is once per run]`` (``method`` empty for a function): a call of an imported
    function, a method called on an instance of an imported class (``runner.sample()`` with ``runner =
    Diffusion(...)``), and an imported function named otherwise than called (handed on as a value: never once).
    A call runs once per run where ``runs_once_here`` says so; ``StepFacts.runs_once`` of the other file reads
    them."""
    origins = import_origins(index) if index.import_statements else {}
    if not origins:
        return []
    found: Dict[tuple, bool] = {}

    def note(entry: tuple, once: bool) -> None:
        found[entry] = found.get(entry, True) and once

    def project_origin(written: Optional[str]) -> Optional[Tuple[str, int, str]]:
        origin = called_origin(origins, written) if written is not None else None
        return origin if origin is not None and may_be_project(origin[0], origin[1]) else None

    called: Set[int] = set()
    for info in index.calls:
        called.add(id(info.node.func))
        imported = facts._imported_of.get(info.node)
        if imported:
            entries = [tuple(entry) for entry in imported if may_be_project(entry[0], entry[1])]
        elif info.node in facts._callees_of:
            continue
        else:
            origin = project_origin(dotted_name(info.node.func))
            if origin is None:
                continue
            entries = [(*origin, "")]
        once = runs_once_here(index, facts, info.node)
        for entry in entries:
            note(entry, once)
    # `fun=trainer.time_model`: run wherever it is handed (a walk of the whole tree, only where some name
    # imported from a project module is the start of a dotted name)
    dotted = any(type(parent) is ast.Attribute for local, (module, level, taken) in origins.items()
                 if may_be_project(module or taken, level) for _use, parent in index.names_named(local))
    for node in walk(index.tree) if dotted else ():
        if type(node) is ast.Attribute and id(node) not in called and type(index.parent(node)) is not ast.Attribute:
            origin = project_origin(dotted_name(node))
            if origin is not None:
                note((*origin, ""), False)
    for local, (module, level, taken) in origins.items():
        if taken is None or not may_be_project(module, level):
            continue
        for use, parent in index.names_named(local):
            if type(use.ctx) is ast.Load and id(use) not in called and type(parent) is not ast.Attribute:
                note((module, level, taken, ""), False)
    return [[*entry, once] for entry, once in found.items()]


def runs_once_here(index: AstIndex, facts: StepFacts, call: ast.Call) -> bool:
    """``call`` runs once per run of this file, as far as the file shows: in no loop, at module level, in a
    def that runs the training loop itself or runs once (``StepFacts.runs_once``), or in a module-level def
    the file never names (an entry point another file runs: ``time_model()`` handed to a launcher), with no
    decorator but those ``runs_once`` allows, that no step reaches."""
    if next(index.enclosing_loops(call), None) is not None:
        return False
    caller = index.function_of(call)
    if caller is None:
        return True
    if type(caller) not in _DEFS:
        return False
    if runs_once_per_run(index, call, caller) or facts.runs_once(index, caller):
        return True
    return index.function_of(caller) is None and index.class_of.get(caller) is None \
        and caller not in facts.stepping and caller not in facts.reached \
        and not index.names_named(caller.name) and all(  # type: ignore[attr-defined]
            _qualified_decorator(index, decorator) in _ONCE_DECORATORS for decorator in caller.decorator_list)  # type: ignore[attr-defined]


def _hand_out(index: AstIndex, facts: StepFacts, call: ast.Call, wrapper: Tuple[str, int, str],
              passed: List[Tuple[int, _Def]], loops: Dict[ast.AST, Tuple[AstLoopInfo, List[list]]],
              called: Dict[ast.Call, Tuple[str, int, str]]) -> None:
    """A loop that hands a def of the file to an imported function every iteration (``gpu_timer(train_step)``,
    ``facts.passed_out``): the calls of imported names in that def, and in the defs it runs, go into the loop's
    entries with ``[module, level, function, position, whether the def steps]`` of the wrapper last; the file
    they reach keeps them only where the wrapper's file says it calls that parameter (``calls_parameter``)."""
    info = next((info for info in index.calls if info.node is call), None)
    if info is None or info.loop is None:
        return
    loop = facts._per_iteration(index, call, info.loop)
    if loop is None:
        return
    origins = import_origins(index) if index.import_statements else {}
    edges: Dict[ast.AST, List[_Def]] = {}
    for other in index.calls:
        if type(other.function) in _DEFS and other.loop is None \
                and not under_logging_guard(index, other.node, other.function):  # type: ignore[arg-type]
            edges.setdefault(other.function, []).extend(facts._callees_of.get(other.node, ()))
    calls = loops.setdefault(loop.node, (loop, []))[1]
    for position, function in passed:
        reached = {function: True}
        queue = deque([function])
        _pass_down(reached, edges, queue, set())  # type: ignore[arg-type]
        via = [*wrapper, position, any(def_ in facts.stepping for def_ in reached)]
        for other in index.calls:
            if other.function not in reached or other.loop is not None \
                    or under_logging_guard(index, other.node, other.function):  # type: ignore[arg-type]
                continue
            for module, level, name, method in facts._imported_of.get(other.node, ()):
                entry = [module, level, name, method, None, via]
                if entry not in calls:
                    calls.append(entry)
            written = dotted_name(other.node.func)
            origin = called_origin(origins, written) if written is not None and origins \
                and other.node not in facts._imported_of and other.node not in facts._callees_of else None
            if origin is not None and may_be_project(origin[0], origin[1]):
                entry = [*origin, "", None, via]
                if entry not in calls:
                    calls.append(entry)


def _cuda_builds(index: AstIndex) -> List[list]:
    """The calls of imported names (a class of another project file: ``algo.PPO(actor_critic, ...)``) with
    arguments, where the file moves a module to CUDA: ``[module, level, name, [[position, line], ...],
    [[keyword, line], ...]]``, the arguments that are such modules each with the line of the move (none: a
    build with no CUDA module, which the class's file must see too). A module is moved where it is a name of the call's scope that an
    expression statement of that scope moves before the call (``actor_critic.to(device)``, ``.cuda()``, with a
    device the code shows to be CUDA, or CUDA when available or on a flag) after its every binding there, or
    whose one binding there is such a move (``net = Net().to(device)``)."""
    from torchlint.facts.devices import moves_to_cuda

    if "to" not in index.calls_by_name and "cuda" not in index.calls_by_name:
        return []
    origins = import_origins(index) if index.import_statements else {}
    if not origins:
        return []
    found: List[list] = []
    for info in index.calls:
        written = dotted_name(info.node.func)
        origin = called_origin(origins, written) if written is not None else None
        if origin is None or not may_be_project(origin[0], origin[1]):
            continue
        positions = [[at, line] for at, argument in enumerate(info.node.args)
                     for line in (_moved_to_cuda(index, argument, info.node, moves_to_cuda),) if line]
        keywords = [[keyword.arg, line] for keyword in info.node.keywords if keyword.arg is not None
                    for line in (_moved_to_cuda(index, keyword.value, info.node, moves_to_cuda),) if line]
        if info.node.args or info.node.keywords:
            found.append([*origin, positions, keywords])
    return found if any(positions or keywords for *_, positions, keywords in found) else []


def _moved_to_cuda(index: AstIndex, argument: ast.expr, call: ast.AST, moves_to_cuda, depth: int = 0) -> int:
    """The line where the name ``argument`` is moved to CUDA before ``call`` (``_cuda_builds``), or 0: by its one
    binding (``net = Net().to(device)``), by an expression statement after its every binding (``net.cuda()``), by
    its last binding where that is a move (``if torch.cuda.is_available(): model = model.cuda()``: CUDA when one
    is available), or as what a module-level def of the file returns moved so (``model, criterion =
    set_model(opt)``, ``_returned_to_cuda``)."""
    if type(argument) is not ast.Name:
        return 0
    scope = index.scope_of(call)
    values = index.values_of(argument.id, scope)
    if len(values) == 1 and type(values[0]) is ast.Call and call_name(values[0]) in ("to", "cuda") \
            and moves_to_cuda(index, values[0], scope) and source_order(values[0]) < source_order(call):
        return values[0].lineno
    if len(values) == 1 and depth < 3:
        found = _returned_to_cuda(index, argument.id, values[0], scope, call, moves_to_cuda, depth)
        if found:
            return found
    if not values or any(value is None or source_order(value) > source_order(call) for value in values):
        return 0
    last_value = max(values, key=source_order)  # type: ignore[arg-type]
    if depth and type(last_value) is ast.Call and call_name(last_value) in ("to", "cuda") \
            and moves_to_cuda(index, last_value, scope):  # (in a def whose value a caller takes)
        return last_value.lineno  # type: ignore[union-attr]
    last = source_order(last_value)
    for name in ("to", "cuda"):
        for info in index.calls_by_name.get(name, ()):
            move = info.node
            receiver = move.func.value if type(move.func) is ast.Attribute else None
            if type(receiver) is ast.Name and receiver.id == argument.id and (info.function or index.tree) is scope \
                    and type(index.parent(move)) is ast.Expr and last < source_order(move) < source_order(call) \
                    and moves_to_cuda(index, move, scope):
                return move.lineno
    return 0


def _returned_to_cuda(index: AstIndex, name: str, value: Optional[ast.AST], scope: AstScope, call: ast.AST,
                      moves_to_cuda, depth: int) -> int:
    """Where ``name``'s one binding in ``scope`` (``value``: its value, None for an element of a tuple target)
    is the result of a call of a module-level def of the file, before ``call``, and every ``return`` of that
    def gives, at that place, a name it moves to CUDA (``_moved_to_cuda``): the line of the move, else 0."""
    position = None
    if value is None:  # `model, criterion = set_model(opt)`: the call, and which element the name takes
        unpacked = unpacked_from(index, name, scope)
        if unpacked is not None:
            value, position = unpacked
    if type(value) is not ast.Call or type(value.func) is not ast.Name \
            or source_order(value) > source_order(call):  # type: ignore[union-attr]
        return 0
    returned = module_function_returns(index, value.func.id)  # type: ignore[union-attr]
    if returned is None:
        return 0
    lines = []
    for node in returned[1]:
        given = node.value
        if position is not None:
            given = given.elts[position] if type(given) is ast.Tuple and len(given.elts) > position else None  # type: ignore[union-attr]
        line = _moved_to_cuda(index, given, node, moves_to_cuda, depth + 1) if given is not None else 0
        if not line:
            return 0
        lines.append(line)
    return lines[0]


# the top-level modules no project file is: a call of theirs is not recorded in a uses summary
def _imported_function_calls(index: AstIndex, facts: StepFacts) -> Dict[ast.Call, Tuple[str, int, str]]:
    """The calls of imported names that are no method of an instance (``calculate_accuracy(...)`` with ``from
    utils import calculate_accuracy``, ``utils.accuracy(...)``): (module, level, name) as the file imports them,
    for the modules a project file may be."""
    origins = import_origins(index) if index.import_statements else {}
    found: Dict[ast.Call, Tuple[str, int, str]] = {}
    if not origins:
        return found
    for info in index.calls:
        if info.loop is None or info.node in facts._imported_of or info.node in facts._callees_of:
            continue
        written = dotted_name(info.node.func)
        origin = called_origin(origins, written) if written is not None else None
        if origin is not None and may_be_project(origin[0], origin[1]):
            found[info.node] = origin
    return found


def result_uses(index: AstIndex, call: ast.Call, loop: AstLoopInfo) -> Optional[list]:
    """Where the value ``call`` returns goes in ``loop``, as plain data: ``[]`` where it is dropped (an
    expression statement); ``[["arg", "meter.update"]]`` as an argument of that call; for a name bound once in the loop to it (``acc = accuracy(out, y)``), each
    use: ``["arg", "meter.update"]`` as an argument of that call, ``["other", ""]`` otherwise; ``[["add",
    "total"]]`` for ``total += accuracy(...)`` where the loop reads ``total`` nowhere else (a running total, read
    after the loop), ``[["add", ""]]`` for any other sum; ``[["unpack", [uses of each element]]]`` where it is unpacked into names
    (``loss_a, loss_b = agent.update(batch)``); None where it goes anywhere else (a tuple, an attribute, a
    test)."""
    parent = index.parent(call)
    kind = type(parent)
    if kind is ast.Expr:
        return []
    if kind is ast.AugAssign and parent.value is call and type(parent.op) is ast.Add:  # type: ignore[attr-defined]
        return [["add", _running_total(loop, parent.target)]]  # type: ignore[attr-defined]
    if kind is ast.Call and any(argument is call for argument in parent.args):  # type: ignore[attr-defined]
        return [["arg", dotted_name(parent.func) or ""]]  # type: ignore[attr-defined]
    if kind is not ast.Assign or parent.value is not call or len(parent.targets) != 1:  # type: ignore[attr-defined]
        return None
    target = parent.targets[0]  # type: ignore[attr-defined]
    if type(target) is ast.Name:
        return _name_uses(loop, target)
    if type(target) not in (ast.Tuple, ast.List) or not all(type(element) is ast.Name for element in target.elts) \
            or len({element.id for element in target.elts}) != len(target.elts):  # type: ignore[attr-defined]
        return None  # `a, *rest = ...`, `a, a = ...`, `x.a, b = ...`: where an element goes is out of sight
    elements = [_name_uses(loop, element) for element in target.elts]  # type: ignore[attr-defined]
    return None if any(uses is None for uses in elements) else [["unpack", elements]]


def _running_total(loop: AstLoopInfo, target: ast.expr) -> str:
    """The name of ``target`` (of ``total += ...``) where ``loop`` names it nowhere but there, else ""."""
    if type(target) is not ast.Name:
        return ""
    name = target.id  # type: ignore[attr-defined]
    others = any(spelling == name and use is not target and how not in ("attribute", "keyword")
                 for spelling, use, how, _ in names_spelled(loop.node))
    return "" if others else name


def _name_uses(loop: AstLoopInfo, target: ast.Name) -> Optional[list]:
    """The uses in ``loop`` of the name ``target`` binds: ``["arg", "meter.update"]`` as an argument of that
    call, ``["text", ""]`` formatted into text there (``"{:.3f}".format(loss)``, ``f"{loss}"``, ``"%f" % loss``),
    ``["other", ""]`` otherwise; None where the loop binds the name again."""
    name = target.id
    uses: list = []
    for spelling, use, how, above in names_spelled(loop.node):
        if spelling != name or use is target or how in ("attribute", "keyword"):
            continue  # (`x.acc`, `f(acc=...)`: not the variable)
        if how != "name" or type(use.ctx) is not ast.Load:  # type: ignore[attr-defined]
            return None  # bound again (a target, a parameter, a def of that name)
        if _formatted(use, above):
            uses.append(["text", ""])
        elif type(above) is ast.Call and any(argument is use for argument in above.args):  # type: ignore[attr-defined]
            uses.append(["arg", dotted_name(above.func) or ""])  # type: ignore[attr-defined]
        else:
            uses.append(["other", ""])
    return uses


def _formatted(use: ast.AST, above: Optional[ast.AST]) -> bool:
    """``use`` is formatted into text right where it stands: an f-string's ``{use}``, ``"...".format(use)`` or
    ``"..." % use`` of a string literal (the text's value, not the number, goes on)."""
    kind = type(above)
    if kind is ast.FormattedValue:
        return above.value is use  # type: ignore[union-attr]
    if kind is ast.Call:
        func = above.func  # type: ignore[union-attr]
        return type(func) is ast.Attribute and func.attr == "format" and type(func.value) is ast.Constant \
            and isinstance(func.value.value, str) and any(argument is use for argument in above.args)  # type: ignore[union-attr]
    return kind is ast.BinOp and type(above.op) is ast.Mod and above.right is use \
        and type(above.left) is ast.Constant and isinstance(above.left.value, str)  # type: ignore[union-attr]


def step_facts(index: AstIndex, project=None) -> StepFacts:
    """The file's step facts, computed once and shared by every rule that asks (``project``: the project model
    the rule was handed, ``IndexContext.project``; every rule of a file passes the same)."""
    facts = index.shared.get("step_facts")
    if facts is None:
        facts = index.shared["step_facts"] = StepFacts(index, project)
    return facts  # type: ignore[return-value]
