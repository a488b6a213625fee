"""TL203: autograd debugging and profiling left on around training."""

from __future__ import annotations

import ast
import re
from pathlib import PurePath
from typing import Optional, Union

from torchlint.facts.index import AstIndex, call_arguments, is_literal, keyword_value
from torchlint.config import Settings
from torchlint.facts.script import condition_around, first_training_loop, runs_on_every_run, training_loop_around
from torchlint.rule import IndexContext, Rule
from torchlint.facts.text_gates import TRAINING_WORDS, any_of, may_train

_ANOMALY_SWITCH = {"torch.autograd.set_detect_anomaly", "torch.autograd.anomaly_mode.set_detect_anomaly"}
_ANOMALY_CONTEXT = {"torch.autograd.detect_anomaly", "torch.autograd.anomaly_mode.detect_anomaly"}
_PROFILERS = {
    "torch.profiler.profile", "torch.autograd.profiler.profile", "torch.autograd.profile",
    "torch.autograd.profiler.emit_nvtx", "torch.cuda.profiler.profile", "torch.autograd.profiler_legacy.profile",
}
_GRADCHECKS = {
    "torch.autograd.gradcheck", "torch.autograd.gradgradcheck", "torch.autograd.gradcheck.gradcheck",
    "torch.autograd.gradcheck.gradgradcheck",
}
# Files and functions whose purpose is profiling or debugging: the overhead is what they are for.
_DEBUG_PURPOSE = re.compile(r"profil|bench|debug|anomal", re.IGNORECASE)


class DebugApiEnabled(Rule):
    """## What it does
    Flags debugging and profiling APIs left on for a whole training run, in a training script (a file
    with a training loop):
    - `torch.autograd.set_detect_anomaly(True)` made on every run (at module level, in `main()`, or in a
      function this file calls unconditionally);
    - `with torch.autograd.detect_anomaly():` (or `set_detect_anomaly(True)` as a context manager) around a
      training loop or around every step inside one;
    - `with torch.profiler.profile(...)`, `torch.autograd.profiler.profile`, `emit_nvtx` or
      `torch.cuda.profiler.profile` around a training loop or around every step, without a `schedule=`
      (which limits recording to a few steps) and without `enabled=`;
    - `torch.autograd.gradcheck` / `gradgradcheck` on every run of a training script, or inside its loop.

    Silent when the API is toggled by a flag (`set_detect_anomaly(args.debug)`, `enabled=args.profile`) or
    sits in a debug branch (`if args.detect_anomaly:`), in files and functions whose name says they profile,
    benchmark or debug (`bench.py`, `def profile_step`), in files without a training loop, and in tests.

    ## Why is this slow?
    Anomaly detection records a Python stack trace for every operation of every forward pass and checks
    every gradient of the backward pass for NaN, which synchronises with the GPU: training runs several
    times slower. A profiler records every operator (and, with `record_shapes`/`with_stack`, its shapes and
    Python stack), so a long run slows down and its trace grows without bound in memory. `emit_nvtx` adds
    an NVTX range around every operator. `gradcheck` evaluates the function with finite differences in
    float64, two evaluations per input element: seconds or minutes, for a result only a test needs.

    ## Example
    ```python
    torch.autograd.set_detect_anomaly(True)
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    torch.autograd.set_detect_anomaly(args.detect_anomaly)  # off unless debugging
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    ```
    To profile, record a few steps with a schedule:
    `torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=3), ...)` and call
    `prof.step()` once per step. Move `gradcheck` into a test.

    ## Fix safety
    No fix: removing the call changes what the run records (stack traces of anomalies, a trace file), which
    may be why it is there. Put it behind a flag, or keep it with a `# noqa: TL203` for a debugging session.

    ## PyTorch versions
    `torch.autograd.set_detect_anomaly` and `detect_anomaly` exist in every supported version; their
    `check_nan=` argument since 2.0. `torch.profiler.profile` and its `schedule` exist since 1.8.1 (the older
    `torch.autograd.profiler.profile` has no schedule). `torch.autograd.gradcheck`'s `fast_mode=` (1.9+)
    makes it cheaper, but it is still meant for tests.
    """

    code = "TL203"
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)
    name = "debug-api-enabled"
    message = "debugging API left on for the whole training run"
    summary = "Anomaly detection, profilers or gradcheck left on around training"
    # Text stage (may_fire): one of the APIs, and a training loop.

    text_gate = (("detect_anomaly", "profile", "emit_nvtx", "gradcheck"), TRAINING_WORDS)

    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        return any_of(text, "detect_anomaly", "profile", "emit_nvtx", "gradcheck") and may_train(text)

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        if _DEBUG_PURPOSE.search(PurePath(ctx.path).stem) or first_training_loop(index) is None:
            return
        for info in index.calls_to(*_ANOMALY_SWITCH, *_ANOMALY_CONTEXT, *_PROFILERS, *_GRADCHECKS):  # aliases too
            message = self._finding(index, info.node)
            if message is not None and not _in_debug_function(index, info.node):
                ctx.report(info.node, message=message)

    def _finding(self, index: AstIndex, call: ast.Call) -> Optional[str]:
        qualified = index.qualified_name(call.func) or ""
        with_node = _with_of(index, call)
        if qualified in _ANOMALY_SWITCH:
            mode = keyword_value(call, "mode")
            if mode is None:
                arguments = call_arguments(call)
                mode = arguments[0][1] if arguments and arguments[0][0] is None else None
            if mode is None or not is_literal(mode, True):
                return None
            if with_node is not None:
                return self._around_training(index, with_node, "anomaly detection")
            if runs_on_every_run(index, call):
                return (
                    "`set_detect_anomaly(True)` on every run: each op records a stack trace and each backward "
                    "checks for NaN, several times slower; turn it on with a debug flag"
                )
            return None
        if qualified in _ANOMALY_CONTEXT:
            return self._around_training(index, with_node, "anomaly detection") if with_node is not None else None
        if qualified in _PROFILERS:
            if with_node is None or keyword_value(call, "enabled") is not None or keyword_value(call, "schedule") is not None:
                return None
            return self._around_training(index, with_node, "the profiler")
        if qualified in _GRADCHECKS:
            if training_loop_around(index, call) is not None and condition_around(index, call) is None:
                return "`gradcheck` in the training loop: finite differences in float64 on every step; move it to a test"
            if runs_on_every_run(index, call):
                return "`gradcheck` on every run of a training script: finite differences in float64; move it to a test"
        return None

    @staticmethod
    def _around_training(index: AstIndex, with_node: Union[ast.With, ast.AsyncWith], what: str) -> Optional[str]:
        if condition_around(index, with_node) is not None:
            return None
        if any(index.contains(statement, loop.node) for loop in index.loops if loop.is_training
               for statement in with_node.body):
            return f"{what} is on around a whole training loop: every step pays for it; put it behind a debug flag"
        if training_loop_around(index, with_node) is not None:
            return f"{what} is on for every training step: put it behind a debug flag or limit it to a few steps"
        return None


def _with_of(index: AstIndex, call: ast.Call) -> Optional[Union[ast.With, ast.AsyncWith]]:
    """The ``with`` statement that uses ``call`` as one of its context managers."""
    item = index.parent(call)
    if isinstance(item, ast.withitem) and item.context_expr is call:
        statement = index.parent(item)
        if isinstance(statement, (ast.With, ast.AsyncWith)):
            return statement
    return None


def _in_debug_function(index: AstIndex, node: ast.AST) -> bool:
    return any(isinstance(ancestor, (ast.FunctionDef, ast.AsyncFunctionDef)) and _DEBUG_PURPOSE.search(ancestor.name)
               for ancestor in index.ancestors(node))
