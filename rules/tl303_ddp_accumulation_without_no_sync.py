"""TL303: gradient accumulation under DistributedDataParallel that all-reduces on every micro-batch."""

from __future__ import annotations

import ast
from typing import List, Optional, Set, Tuple

from torchlint.facts.index import AstIndex, AstLoopInfo, dotted_name, walk
from torchlint.facts.distributed import calls_module, ddp_models, handles_sync, no_sync_context
from torchlint.rule import IndexContext, Rule

_ACCUMULATING = (
    "`backward()` under `DistributedDataParallel` all-reduces the gradients on every micro-batch, but the "
    "optimizer steps only {when}: run the forward and the backward of the micro-batches that do not step "
    "under `{model}.no_sync()`, {shape} (no fix: where the context goes is the author's choice)"
)
_BACKWARD_ONLY = (
    "`no_sync()` around `backward()` alone still all-reduces: DDP decides in the forward, and `{forward}` ran "
    "outside the `with`; move the forward into it: `with {context}: loss = ...; loss.backward()`"
)


class DdpAccumulationWithoutNoSync(Rule):
    """## What it does
    Flags gradient accumulation in a model wrapped in `DistributedDataParallel` (any spelling:
    `torch.nn.parallel.DistributedDataParallel`, `from torch.nn.parallel import DistributedDataParallel as DDP`)
    where the micro-batches that do not step the optimizer still synchronise their gradients:

    - a training loop that calls the DDP model and `backward()` on every iteration but steps the optimizer only
      under a condition on the iteration (`if (i + 1) % accum_steps == 0:`, or `continue` before the step), or
      an inner loop of micro-batches with `backward()` whose enclosing loop steps after it; the finding is on the
      `backward()`;
    - `with model.no_sync():` (or `accelerator.no_sync(model)`) whose block runs `backward()` while the model's
      forward ran before it, outside the block; the finding is on the `no_sync` call.

    Silent where the function (or the script, for top-level code) turns the sync off in any form:
    `model.no_sync()`, Accelerate's `accelerator.accumulate(model)` / `accelerator.no_sync(model)`, or
    `model.require_backward_grad_sync = ...` (nanoGPT); where the model is not wrapped in DDP in this file
    (a helper such as `smart_DDP(model)` is not followed); and where the step is not conditional (no
    accumulation).

    ## Why is this slow?
    Under DDP every `backward()` all-reduces every gradient across the processes: the full model's gradient
    size over the network per micro-batch. With accumulation only the last micro-batch's sum is needed, so
    N micro-batches pay N all-reduces where one would do. Accelerate's gradient-synchronization guide measures
    2.0 s per batch across two nodes without `no_sync`, 2.13 s with it around `backward()` alone and 0.91 s with
    it around forward and backward (0.50 s and 0.41 s on one node). `benchmarks/ddp_no_sync.py` counts them on
    two CPU processes (gloo, 4 micro-batches per step): 20 all-reduced buckets in 5 steps without `no_sync`,
    20 with it around `backward()` alone, 5 with it around both, and the same parameters (within 1e-7: the
    local sum is added in another order). `no_sync()` must hold the forward too: DDP's forward prepares
    the reducer for the backward that follows when `require_backward_grad_sync` is set, so a `no_sync()` around
    `backward()` alone changes nothing (the warning in `DistributedDataParallel.no_sync`'s docstring: "The
    forward pass should be included inside the context manager, or else gradients will still be synchronized").

    ## Example
    ```python
    model = DDP(model, device_ids=[rank])
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x), y) / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    ```

    ## Use instead
    ```python
    import contextlib

    model = DDP(model, device_ids=[rank])
    for i, (x, y) in enumerate(loader):
        stepping = (i + 1) % accum_steps == 0
        with (contextlib.nullcontext() if stepping else model.no_sync()):
            loss = criterion(model(x), y) / accum_steps
            loss.backward()
        if stepping:
            optimizer.step()
            optimizer.zero_grad()
    ```
    For an inner loop of micro-batches, nanoGPT's form is
    `model.require_backward_grad_sync = (micro_step == accum_steps - 1)` before the forward. The gradients are
    the same: the synchronising backward all-reduces the sum accumulated locally (DDP averages over
    processes either way).

    ## Fix safety
    No fix: the forward, the backward and the condition have to move into one block, and what else sits between
    them (logging, loss scaling, clipping) decides where the block goes. The message gives the shape. A step
    whose condition is not the last micro-batch (a step on the epoch's last batch as well) needs the same
    condition in the context.

    ## PyTorch versions
    `DistributedDataParallel.no_sync()` exists since PyTorch 1.1 and `require_backward_grad_sync` is the
    attribute it sets (still so in 2.13's `torch/nn/parallel/distributed.py`). Setting the attribute directly
    works but is not a documented API. FSDP's `no_sync()` acts in the backward, so this rule is about DDP only.
    """

    code = "TL303"
    name = "ddp-accumulation-without-no-sync"
    message = ("gradient accumulation under `DistributedDataParallel` all-reduces on every micro-batch: run the "
               "forward and backward of the micro-batches that do not step under `model.no_sync()`")
    summary = "Gradient accumulation under DistributedDataParallel that all-reduces on every micro-batch"
    silent_in_test_files = True
    required_patterns = (r"DistributedDataParallel", r"backward")  # the DDP wrap, and the backward reported
    text_gate = (("DistributedDataParallel",), ("backward",))

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        models = set(ddp_models(index))
        if not models:
            return
        for loop in index.loops:
            if loop.is_training:
                self._accumulation(ctx, loop, models)
        for name in ("no_sync", "accumulate"):
            for info in index.calls_by_name.get(name, ()):
                self._backward_only(ctx, info.node, models)

    def _accumulation(self, ctx: IndexContext, loop: AstLoopInfo, models: Set[str]) -> None:
        index = ctx.index
        backwards = [c for c in loop.direct_calls if index.is_backward_call(c) and not _ifs_between(index, c, loop)]
        forward = next((c for c in loop.direct_calls if calls_module(c, models)), None)
        if not backwards or forward is None:
            return
        scope = loop.function if loop.function is not None else index.tree
        if handles_sync(index, scope, models):
            return
        model = _model_name(forward, models)
        steps = [c for c in loop.direct_calls if index.is_optimizer_step(c, loop.function)]
        if steps:
            conditions = [_step_condition(index, step, loop) for step in steps]
            if any(condition is None for condition in conditions):
                return  # a step on every iteration: no accumulation in this loop
            branch, skips = conditions[0]  # type: ignore[misc]
            test = _code(index, branch.test, branch)
            when = f"when `{test}`" + (" is false" if skips else "")
            context = (f"`with ({model}.no_sync() if {test} else contextlib.nullcontext()):`" if skips
                       else f"`with (contextlib.nullcontext() if {test} else {model}.no_sync()):`")
            shape = f"{context} around both"
        else:
            if not _steps_after(index, loop):
                return
            when = "after this loop of micro-batches"
            shape = (f"that is all but the last; or set `{model}.require_backward_grad_sync = <last micro-batch>` before "
                     "the forward, as nanoGPT does")
        for backward in backwards:
            ctx.report(backward, _ACCUMULATING.format(when=when, model=model, shape=shape))

    def _backward_only(self, ctx: IndexContext, call: ast.Call, models: Set[str]) -> None:
        index = ctx.index
        item = index.parent(call)
        statement = index.parent(item) if isinstance(item, ast.withitem) else None
        if not isinstance(statement, (ast.With, ast.AsyncWith)) or no_sync_context(item) is not call:
            return
        owner = call.func.value if not call.args else call.args[0]  # `model.no_sync()`, `accelerator.no_sync(model)`
        model = dotted_name(owner)
        if model not in models:
            return
        inside = index.calls_in(statement)
        if not any(index.is_backward_call(c.node) for c in inside) or any(calls_module(c.node, {model}) for c in inside):
            return
        function = index.function_of(statement)
        before = [info.node for info in index.calls if info.function is function and calls_module(info.node, {model})
                  and _end(info.node) <= _position(statement)]
        if not before:
            return
        forward = before[-1]
        ctx.report(call, _BACKWARD_ONLY.format(forward=_code(index, forward, _statement(index, forward)),
                                              context=_code(index, call, statement)))


def _steps_after(index: AstIndex, loop: AstLoopInfo) -> bool:
    """An optimizer step in the statements after ``loop`` in its block: the micro-batch loop's step."""
    block = index.block_of.get(loop.node, [])
    after = block[next((i for i, s in enumerate(block) if s is loop.node), len(block)) + 1:]
    return any(index.is_optimizer_step(info.node, info.function) for statement in after
               for info in index.calls_in(statement) if info.function is loop.function)


def _ifs_between(index: AstIndex, node: ast.AST, loop: AstLoopInfo) -> List[ast.If]:
    """The ``if`` statements between ``node`` and ``loop`` whose branches hold it."""
    found = []
    child = node
    for ancestor in index.ancestors(node):
        if ancestor is loop.node:
            break
        if isinstance(ancestor, ast.If) and child is not ancestor.test:
            found.append(ancestor)
        child = ancestor
    return found


def _step_condition(index: AstIndex, step: ast.Call, loop: AstLoopInfo) -> Optional[Tuple[ast.If, bool]]:
    """The ``if`` on the iteration under which ``step`` runs: (it, False) for ``if <test>: step()``,
    (it, True) for ``if <test>: continue`` before it in the loop's body. None when it runs every iteration."""
    scope = loop.function if loop.function is not None else index.tree
    for branch in _ifs_between(index, step, loop):
        if _on_iteration(index, branch.test, scope):
            return branch, False
    statement = next((s for s in loop.node.body if index.contains(s, step)), None)
    for earlier in loop.node.body:
        if earlier is statement:
            break
        if (isinstance(earlier, ast.If) and len(earlier.body) == 1 and isinstance(earlier.body[0], ast.Continue)
                and _on_iteration(index, earlier.test, scope)):
            return earlier, True
    return None


def _on_iteration(index: AstIndex, test: ast.expr, scope: ast.AST) -> bool:
    """A test that takes a remainder (``(i + 1) % accum == 0``), directly or through a name bound to one
    in the same scope (``need_update = last or (i + 1) % accum == 0``)."""
    for node in ast.walk(test):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return True
        if isinstance(node, ast.Name):
            for value in index.values_of(node.id, scope):  # type: ignore[arg-type]
                if value is not None and any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod)
                                             for n in walk(value)):
                    return True
    return False


def _model_name(forward: ast.Call, models: Set[str]) -> str:
    if dotted_name(forward.func) in models:
        return dotted_name(forward.func)  # type: ignore[return-value]
    for arg in [*forward.args, *(k.value for k in forward.keywords)]:
        if dotted_name(arg) in models:
            return dotted_name(arg)  # type: ignore[return-value]
    return "model"


def _statement(index: AstIndex, node: ast.AST) -> ast.stmt:
    return next(n for n in index.ancestors(node) if isinstance(n, ast.stmt))  # type: ignore[return-value]


def _code(index: AstIndex, node: ast.AST, statement: ast.stmt) -> str:
    """``node``'s text on one line (``statement`` holds it)."""
    return " ".join(index.code_for_node(node, statement).split())


def _position(node: ast.AST) -> Tuple[int, int]:
    return node.lineno, node.col_offset  # type: ignore[attr-defined]


def _end(node: ast.AST) -> Tuple[int, int]:
    return node.end_lineno, node.end_col_offset  # type: ignore[attr-defined]
