"""TL105: a full device synchronize in every training step."""

from __future__ import annotations

import ast
from typing import List, Optional, Set, Tuple, Union

from torchlint.facts.index import AstCallInfo, AstIndex, call_name, dotted_name, keyword_value
from torchlint.config import Settings
from torchlint.facts.clocks import reads_clock, reads_clock_in
from torchlint.facts.devices import CPU, to_destination
from torchlint.facts.guards import is_logging_guard
from torchlint.facts.steps import calls_by_name, step_facts
from torchlint.facts.syncs import is_sync_call
from torchlint.rule import IndexContext, Rule
from torchlint.facts.text_gates import TRAINING_WORDS, may_train

# Waits for every kernel on every stream of the device (their docstrings in torch 2.13). A stream's or an
# event's `synchronize()` waits for less, and is not this rule's.
DEVICE_SYNCS = ("torch.cuda.synchronize", "torch.accelerator.synchronize")
# Questions whose answer is the same on every step of a run: a condition made of these alone holds on every
# step or on none, so a synchronize under it runs on every step of the runs where it runs.
_RUN_CONSTANT_CALLS = {
    "torch.cuda.is_available", "torch.accelerator.is_available", "torch.cuda.device_count",
    "torch.distributed.is_available", "torch.distributed.is_initialized", "torch.distributed.get_rank",
    "torch.distributed.get_world_size",
}
_RUN_CONSTANT_BUILTINS = {"isinstance", "hasattr"}
# Streams the step runs its own work on: a full synchronize may be what orders them with the host.
_STREAM_CALLS = {"torch.cuda.stream", "torch.cuda.Stream", "torch.Stream", "torch.cuda.StreamContext"}

# Parts of the code that run on some passes only, or not in the step itself.
_CONDITIONAL_PARTS = (ast.BoolOp, ast.ExceptHandler, ast.match_case, ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)

_Step = Union[ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef]


class CudaSynchronizeInStep(Rule):
    """## What it does
    Flags a full device synchronize, `torch.cuda.synchronize()` (with or without a device, in any
    spelling: `from torch.cuda import synchronize as sync`, `import torch.cuda as tc`) or
    `torch.accelerator.synchronize()`, that runs in every step of a training loop (a loop that calls
    `backward()` or steps an optimizer, and the loops nested in its body), or in a function of the same file
    that runs a training step itself and that a loop calls every iteration (`def train_step(...)`).

    Silent where the synchronize is there for a reason the code shows:
    - **timing code**: the step reads a clock (`time.time()`, `time.perf_counter()`, `time.monotonic()`,
      `timeit.default_timer()`, `datetime.now()`), makes or records a CUDA timing event
      (`torch.cuda.Event(enable_timing=True)`, `torch.Event(enable_timing=True)`) or reads
      `start.elapsed_time(end)`, or calls a method that reads a clock itself (a timer's `tic()`/`toc()`,
      its class in the file or in another file of the project). GPU work runs asynchronously, so a clock read without the synchronize before
      it measures only how fast Python queued the kernels: the synchronize is what makes the timing true.
      This is decided from the calls, not from names or comments;
    - **a logging interval**: inside `if step % log_every == 0:` (or `if should_log:`, the guards TL101
      knows); the `else` branch runs on the other steps and is checked;
    - a condition that changes from step to step (it reads a name the loop assigns, `if step == 0:`,
      `if i >= warmup:`, or calls something other than `torch.cuda.is_available()` and its like): it may run
      on one step only. A condition that holds for the whole run (`if device.type == "cuda":`,
      `if args.cuda:`) does not hide a per-step synchronize;
    - an `except` handler, a loop's `else` block;
    - a step that copies to the host with `non_blocking=True` (`x.to("cpu", non_blocking=True)`,
      `buffer.copy_(x, non_blocking=True)`) or runs work on its own CUDA streams (`torch.cuda.stream(s)`):
      the host may need the synchronize before it reads the copy or reuses a buffer.

    A stream's or an event's `synchronize()` (`torch.cuda.current_stream().synchronize()`) waits for that
    stream or event only, not for the whole device, and is not reported. Nor is a synchronize in a loop whose
    backward pass and optimizer step run inside a helper of another file (`loss_scaler(loss, optimizer)`):
    the file does not show that loop trains.

    Where the statement right after the synchronize reads a value with `.item()`, the finding says so: that
    read finds its value ready, so the wait is paid at the synchronize, and removing the `.item()` alone
    gains nothing.

    Test files are not checked.

    ## Why is this slow?
    CUDA runs asynchronously: Python queues kernels and moves on while the GPU works through the queue, so
    the host prepares step n+1 (data loading, the next launches) while the GPU still computes step n.
    `torch.cuda.synchronize()` blocks the host until every kernel queued on the device, on all its streams,
    has finished: a full pipeline drain each step. The GPU then idles while Python starts the next step,
    and the overlap of host and device work is gone. Per-step synchronizes measured 40-50 ms per step in
    torchtune's recipes before they were removed (torchtune PR 522).

    ## Example
    ```python
    for x, y in loader:
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
    ```

    ## Use instead
    ```python
    for x, y in loader:
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    ```
    Nothing in a training step needs the synchronize: a read of a value (`.item()`, `.cpu()`) waits for
    the kernels that compute it, and kernels on one stream run in order. To time steps, read the clock only
    every N steps (`if step % log_every == 0: torch.cuda.synchronize(); t = time.perf_counter()`), or record
    CUDA events and read `elapsed_time` later.

    ## Fix safety
    No fix: whether anything relies on the synchronize (a host buffer reused after a `non_blocking` copy,
    work on other streams, a profiler trace, an error surfacing at the right step) is the author's call.
    Removing it does not change results computed on one stream; an asynchronous CUDA error is then raised at
    a later call.

    ## PyTorch versions
    `torch.cuda.synchronize()` exists in every version, its `device` argument since 0.4.
    `torch.accelerator.synchronize()` exists since 2.6. `torch.cuda.Event(enable_timing=True)` and
    `elapsed_time` exist since 0.4; the device-generic `torch.Event(enable_timing=True)` in recent 2.x releases.
    """

    code = "TL105"
    name = "cuda-synchronize-in-step"
    message = ("`torch.cuda.synchronize()` in every training step waits until every kernel queued on the device, "
               "on all its streams, has finished: a full pipeline drain each step, the GPU idle while Python "
               "queues the next one; remove it (a read of a value waits for what it needs) or run it every N steps")
    summary = "`torch.cuda.synchronize()` in every training step, outside timing code and logging intervals"
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)
    # The text stage: a device synchronize (its import spells the name too) and a training step.
    text_gate = (("synchronize",), TRAINING_WORDS)

    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        return "synchronize" in text and may_train(text)

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        syncs = index.calls_to(*DEVICE_SYNCS)
        if not syncs:
            return
        facts = step_facts(index, ctx.project)
        steps = facts.step_functions
        stored: dict = {}  # step -> the names it assigns (``_assigned_names``), on first use
        for info in syncs:
            found = _step_of(index, info, steps)
            if found is None:
                continue
            step, measured = found
            if not _runs_every_step(index, info.node, step, stored):
                continue
            regions = (step, *measured)
            if any(_times_or_orders(index, call) or _runs_a_timer(index, call.node, facts, ctx.project)
                   for region in regions for call in index.calls_in(region)):
                continue
            statement = _statement_of(index, info.node)
            code = index.code_for_node(info.node, statement)
            message = self.message.replace("`torch.cuda.synchronize()`", f"`{code}`", 1)
            read = _item_read_after(index, statement)
            if read is not None:
                message += (f"; the `{index.code_for_node(*read)}` right after it "
                            "finds its value ready: the wait is paid here, and removing that read alone gains nothing")
            ctx.report(info.node, message)


def _step_of(index: AstIndex, info: AstCallInfo, steps: Set[str]) -> Optional[Tuple[_Step, Tuple[ast.AST, ...]]]:
    """What runs ``info`` once per training step: its training loop (one that calls ``backward()``, steps an
    optimizer or calls a function of this file that does, ``steps``), or the step function it is in, when
    a loop calls it; with it, the loops that call that function, whose clocks time the step too."""
    loop = index.training_loop_of(info)
    if loop is not None:
        return loop.node, ()
    loop = info.loop
    while loop is not None:
        if any(calls_by_name(call, steps) for call in loop.direct_calls):
            return loop.node, ()
        loop = loop.parent
    function = info.function
    if info.loop is not None or not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    if function.name not in steps:
        return None
    callers = tuple(loop.node for loop in index.loops
                    if any(calls_by_name(call, {function.name}) for call in loop.direct_calls))
    return (function, callers) if callers else None


def _runs_every_step(index: AstIndex, node: ast.AST, step: _Step, stored: dict) -> bool:
    """No condition between ``node`` and ``step`` limits it to some steps: a logging interval, a test that
    reads what the step assigns or calls something that may answer differently, an ``except`` handler, a
    loop's ``else``."""
    child = node
    for ancestor in index.ancestors(node):
        if ancestor is step:
            return True
        kind = type(ancestor)
        if kind is ast.If or kind is ast.IfExp:
            if child is ancestor.test:
                return False
            in_body = child is ancestor.body if kind is ast.IfExp else any(s is child for s in ancestor.body)
            if is_logging_guard(ancestor.test):
                if in_body:
                    return False  # every N steps
            elif _varies_per_step(index, ancestor.test, step, stored):
                return False
        elif kind in _CONDITIONAL_PARTS:
            return False
        elif kind in (ast.For, ast.AsyncFor, ast.While, ast.Try) and any(s is child for s in ancestor.orelse):
            return False
        child = ancestor
    return False


def _varies_per_step(index: AstIndex, test: ast.expr, step: _Step, stored: dict) -> bool:
    """The test may answer differently on different steps: it reads a name the step assigns (its loop
    target, a counter), or it calls something not known to answer the same on every step."""
    for node in ast.walk(test):
        if isinstance(node, ast.Call):
            qualified = index.qualified_name(node.func)
            if qualified not in _RUN_CONSTANT_CALLS and not (
                    qualified is None and isinstance(node.func, ast.Name) and node.func.id in _RUN_CONSTANT_BUILTINS):
                return True
    assigned = stored.get(step)
    if assigned is None:
        assigned = stored[step] = _assigned_names(step)
    return any(read == name or read.startswith(name + ".") or name.startswith(read + ".")
               for read in _names_read(test) for name in assigned)


def _names_read(test: ast.expr) -> List[str]:
    """The whole names a test reads: ``args.sync`` once (not also ``args``), ``step``."""
    found: List[str] = []
    stack: List[ast.AST] = [test]
    while stack:
        node = stack.pop()
        name = dotted_name(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
        if name is not None:
            found.append(name)
        else:
            stack.extend(ast.iter_child_nodes(node))
    return found


def _assigned_names(step: _Step) -> Set[str]:
    """The names and attributes a step binds or changes: targets of its assignments and loops, the
    containers it stores into (``x[i] = ...``), and a step function's parameters."""
    assigned: Set[str] = set()
    if isinstance(step, (ast.FunctionDef, ast.AsyncFunctionDef)):
        arguments = step.args
        assigned.update(arg.arg for arg in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs))
        assigned.update(arg.arg for arg in (arguments.vararg, arguments.kwarg) if arg is not None)
    for node in ast.walk(step):
        if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and isinstance(node.ctx, ast.Store):
            name = dotted_name(node.value if isinstance(node, ast.Subscript) else node)
            if name is not None:
                assigned.add(name)
    return assigned


def _times_or_orders(index: AstIndex, info: AstCallInfo) -> bool:
    """A call that gives the step's synchronize a reason: it reads a clock, copies to the host without
    blocking, or runs work on a stream of its own."""
    call = info.node
    scope = info.function if info.function is not None else index.tree
    if reads_clock(index, call, scope) or index.qualified_name(call.func) in _STREAM_CALLS:
        return True
    non_blocking = keyword_value(call, "non_blocking")
    if non_blocking is None or (isinstance(non_blocking, ast.Constant) and not non_blocking.value):
        return False
    return call_name(call) in ("copy_", "cpu") or to_destination(index, call, scope) == CPU


def _runs_a_timer(index: AstIndex, call: ast.Call, facts, project) -> bool:
    """``call`` runs a def of the file that reads a clock (``timer.tic()`` of a class of the file), or a method
    of an imported project class that does (``facts.steps.step_summary``'s ``clocks``)."""
    if any(reads_clock_in(index, callee) for callee in facts.callees_of(call)):
        return True
    return project is not None and any(method in project.clock_methods(module, level, name)
                                       for module, level, name, method in facts.imported_methods_of(call))


def _statement_of(index: AstIndex, node: ast.AST) -> ast.stmt:
    return next(a for a in index.ancestors(node) if isinstance(a, ast.stmt))


def _item_read_after(index: AstIndex, statement: ast.stmt) -> Optional[Tuple[ast.Call, ast.stmt]]:
    """The first ``x.item()`` of the simple statement right after ``statement``, with that statement."""
    following = index.simple_statement_next_to(statement, 1)
    if following is None:
        return None
    return next(((info.node, following) for info in index.calls_in(following)
                 if is_sync_call(info.node) and call_name(info.node) == "item"), None)
