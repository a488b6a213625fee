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

Built once per file (``step_facts``), in time linear in the file: one pass over its calls, one walk over the
graph.
"""

from __future__ import annotations

import ast
from collections import deque
from typing import Dict, List, Optional, Set, Tuple, Union

from torchlint.facts.index import AstIndex, AstLoopInfo, dotted_name, target_names
from torchlint.facts.guards import is_logging_guard

_FEW = 10  # `if i < 10:` runs at most this many times: a warm-up print, not a per-step cost
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
    ``loop``'s counter for a few values (``if step == 0:``, ``if i < 5:``), or in a block of an ``if``
    that ends by leaving ``loop`` (``break``, ``return``, ``raise``)."""
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
            if block and not inner and type(block[-1]) in (ast.Break, ast.Return, ast.Raise):
                once = True  # `if step >= total: finish(); break`: the way out of the loop, taken once
                break
        elif kind in (ast.For, ast.AsyncFor, ast.While) or kind in _DEFS:
            inner = True
        child = ancestor
    for key in path:
        memo[key] = once
    return once


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


class StepFacts:
    """The file's step functions and step loops, and the functions each step reaches (see the module)."""

    # (It keeps no reference to the index, which holds it: no reference cycle keeps a tree alive.)
    def __init__(self, index: AstIndex) -> None:
        self.step_functions: Set[str] = {
            info.function.name for info in index.calls
            if type(info.function) in _DEFS and info.loop is None
            and (index.is_backward_call(info.node) or index.is_optimizer_step(info.node, info.function))}
        self.step_loops: Dict[ast.AST, AstLoopInfo] = {
            loop.node: loop for loop in index.loops if self._steps(loop)}
        # def -> the step loop through which it runs every step (the first one found, in source order)
        self.reached: Dict[ast.AST, AstLoopInfo] = {}
        self._reach(index)

    def _steps(self, loop: AstLoopInfo) -> bool:
        if ends_after_first_iteration(loop.node):
            return False
        return loop.is_training or (bool(self.step_functions) and any(
            self.calls_step(call) for call in loop.direct_calls))

    def calls_step(self, call: ast.Call) -> bool:
        """``call`` runs one of the file's step functions by its name: ``train_step(...)``, ``self.step(...)``."""
        return calls_by_name(call, self.step_functions)

    def step_loop_around(self, index: AstIndex, node: ast.AST) -> Optional[AstLoopInfo]:
        """The innermost step loop around ``node`` in its function (or module)."""
        return next((loop for loop in index.enclosing_loops(node) if loop.node in self.step_loops), None)

    def has_steps(self) -> bool:
        return bool(self.step_loops)

    def reaching_step(self, index: AstIndex, node: ast.AST) -> Optional[Tuple[_Def, AstLoopInfo]]:
        """For ``node`` in a def that some step runs every time (and not under a logging guard there): that
        def and the step loop that reaches it."""
        function = index.function_of(node)
        loop = self.reached.get(function) if function is not None else None
        if loop is None or under_logging_guard(index, node, function):  # type: ignore[arg-type]
            return None
        return function, loop  # type: ignore[return-value]

    # --- the call graph ---------------------------------------------------------------------------
    def _reach(self, index: AstIndex) -> None:
        # name -> the defs of that name, grouped by the scope that makes them (the answer of `_in_sight` is
        # the group's: a long file that defines one name many times must not climb scopes for each def)
        functions: Dict[str, Dict[ast.AST, List[_Def]]] = {}
        methods: Dict[Tuple[ast.AST, str], List[_Def]] = {}
        for function in index.functions:
            klass = index.class_of.get(function)
            if klass is None:
                home = index.function_of(function) or index.tree
                functions.setdefault(function.name, {}).setdefault(home, []).append(function)
            else:
                methods.setdefault((klass, function.name), []).append(function)
        if not functions and not methods:
            return
        classes = {klass.name: klass for klass in index.class_of.values() if klass is not None}
        own_loops = {loop.function for loop in self.step_loops.values()}  # per epoch, not per step
        roots: List[Tuple[_Def, AstLoopInfo]] = []
        edges: Dict[ast.AST, List[_Def]] = {}
        for info in index.calls:
            callees = self._callees(index, info.node, info.function, functions, methods, classes)
            if not callees:
                continue
            step = self._step_of(info.loop)
            if step is not None:
                if not runs_once_in(index, info.node, step) \
                        and not under_logging_guard(index, info.node, step.node):
                    roots.extend((callee, step) for callee in callees)
            elif type(info.function) in _DEFS and not under_logging_guard(index, info.node, info.function):
                edges.setdefault(info.function, []).extend(callees)
        queue = deque()
        for callee, step in roots:
            if callee not in self.reached and callee not in own_loops:
                self.reached[callee] = step
                queue.append(callee)
        while queue:
            caller = queue.popleft()
            for callee in edges.get(caller, ()):
                if callee not in self.reached and callee not in own_loops:
                    self.reached[callee] = self.reached[caller]
                    queue.append(callee)

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

    def _callees(self, index: AstIndex, call: ast.Call, caller, functions, methods, classes) -> List[_Def]:
        func = call.func
        if type(func) is ast.Name:
            if func.id in index.imports:
                return []
            groups = functions.get(func.id)
            if not groups:
                return []
            if len(groups) == 1:  # (most names: one scope makes them)
                home, defs = next(iter(groups.items()))
                return defs if self._in_sight(index, home, func.id, caller) else []
            found = [(defs, home) for home, defs in groups.items() if self._in_sight(index, home, func.id, caller)]
            return sorted((f for defs, _ in found for f in defs), key=_def_order) if len(found) > 1 else \
                (found[0][0] if found else [])
        if type(func) is not ast.Attribute or type(func.value) is not ast.Name:
            return []
        if func.value.id == "self":
            klass = index.class_of.get(caller) if caller is not None else None
        else:  # `recorder.update(...)` after `recorder = Recorder()`, a class of this file
            value = index.single_value(func.value.id, caller)
            klass = classes.get(value.func.id) if type(value) is ast.Call and type(value.func) is ast.Name \
                and value.func.id not in index.imports else None
        return methods.get((klass, func.attr), []) if klass is not None else []


def step_facts(index: AstIndex) -> StepFacts:
    facts = index.shared.get("step_facts")
    if facts is None:
        facts = index.shared["step_facts"] = StepFacts(index)
    return facts  # type: ignore[return-value]
