"""TL101: host-device synchronisations in every step of a training loop."""

from __future__ import annotations

import ast
import bisect
import re
from typing import List, Optional, Set

import libcst as cst

from torchlint.analysis import (
    FileAnalysis, LoopInfo, ScopeNode, call_name, dotted_name, names_in, receiver, target_names, walk,
)
from torchlint.ast_index import AstIndex, index_of
from torchlint.ast_index import call_name as ast_call_name
from torchlint.ast_index import dotted_name as ast_dotted_name
from torchlint.comments import DROPS_COMMENT, loses_comment
from torchlint.rule import Applicability, Fix, FixAvailability, ImportRequest, Rule, RuleContext
from torchlint.text_prefilter import call_text, may_train, search_method, search_word

_SYNC_METHODS = ("item", "tolist", "cpu", "numpy")
_CONVERSIONS = ("float", "int", "bool")
# Names whose call returns a tensor: the model, the loss.
_MODEL_NAME = re.compile(
    r"^(model|net|network|module|encoder|decoder|backbone|head|classifier|policy|actor|critic|generator|"
    r"discriminator|disc|gen|ddp_model|student|teacher)$|_model$|^model_|_net$",
)  # case-sensitive: `Net()` builds a module, `net(x)` runs one
_LOSS_NAME = re.compile(r"^(?!get_)(?!.*scale)(\w*_)?(criterion|loss)(_\w*)?$", re.IGNORECASE)
# Values that are certainly not tensors: once a name is bound to one, `.backward()` on it is no evidence.
_HOST_CALLS = {"item", "tolist", "float", "int", "bool", "len", "str"}
# Methods of a tensor that return a tensor (used to follow `out.argmax(1)`, `loss.detach()`...).
_TENSOR_METHODS = {
    "sum", "mean", "detach", "float", "double", "half", "bfloat16", "norm", "abs", "max", "min", "argmax",
    "argmin", "clone", "to", "cuda", "pow", "sqrt", "exp", "log", "std", "var", "squeeze", "unsqueeze",
    "view", "reshape", "softmax", "log_softmax", "sigmoid", "eq", "ne", "gt", "lt", "ge", "le", "mul",
    "div", "add", "sub", "flatten", "contiguous", "prod", "all", "any", "logsumexp", "square",
}
# torch.* functions that return a tensor.
_TORCH_TENSOR_FUNCS = {
    "sum", "mean", "stack", "cat", "tensor", "as_tensor", "norm", "max", "min", "exp", "log", "sqrt", "abs",
    "clamp", "where", "matmul", "sigmoid", "softmax", "log_softmax", "argmax", "argmin", "eq", "isfinite",
    "isnan", "isinf", "all", "any", "mul", "add", "sub", "div", "square", "logsumexp", "einsum", "bmm", "mm",
    "zeros", "ones", "full", "zeros_like", "ones_like", "empty", "randn", "rand", "arange",
}
# Calls that only show, store or collect a value: a sync whose value ends up here is a slowdown to remove.
_SINK_METHODS = {
    "append", "extend", "add", "update", "add_scalar", "add_scalars", "log", "log_metrics", "log_dict",
    "info", "debug", "warning", "warn", "error", "set_postfix", "set_postfix_str", "set_description",
    "write", "insert", "record", "put", "setdefault",
}
_SINK_FUNCTIONS = {"print"}
# Calls that pass a value through unchanged in kind (a number stays a number): follow them outwards.
_TRANSPARENT_FUNCTIONS = {"float", "int", "round", "abs", "str", "format", "repr", "min", "max", "sum"}
# Calls that end the program: a sync just before one runs once.
_EXIT_CALLS = {"sys.exit", "exit", "quit", "os._exit", "builtins.exit", "builtins.quit"}
# Names in an `if` test that make it a logging guard: logging words, and `divisible_by(step, every)`, the
# spelled-out form of `step % every == 0`.
_GUARD_NAME = re.compile(r"log|print|verbose|report|display|debug|divisible", re.IGNORECASE)
# Helpers that only show a value: `progress_bar(i, n, msg)`, `log_metrics(...)`, `show_stats(...)`.
_DISPLAY_HELPER = re.compile(
    r"^_*(progress|print|show|display|report|plot|pbar|log$|logger|log_(?!softmax|prob|sigmoid|sum|det|normal|lik))",
    re.IGNORECASE,
)


_CONVERSION_CALL_TEXTS = tuple(call_text(name) for name in (*_CONVERSIONS, "print"))
# f-string prefixes, any case, raw or not (`f"`, `F'`, `rf"`, `fR'`): each searched with `search_word`.
_FSTRING_TEXTS = tuple(re.compile(first + r"[\"']") for first in (
    "f", "F", "fr", "fR", "Fr", "FR", "rf", "rF", "Rf", "RF"))


def _may_sync_or_format(text: str) -> bool:
    """``.item()``/``.tolist()``/``.cpu()``/``.numpy()``, ``float(``/``int(``/``bool(``/``print(``, ``%``,
    ``.format(`` or an f-string: the plain spellings first (nearly every file that has one has those)."""
    if "%" in text or "print(" in text or any("." + name + "(" in text for name in _SYNC_METHODS):
        return True
    if any(search_method(call_text(name), text) for name in (*_SYNC_METHODS, "format") if name in text):
        return True
    if any(search_word(pattern, text) for pattern in _CONVERSION_CALL_TEXTS):
        return True
    return any(search_word(pattern, text) for pattern in _FSTRING_TEXTS if pattern.pattern[:-5] in text)


class SyncInTrainingLoop(Rule):
    """## What it does
    Flags host-device synchronisations inside a training loop (a loop whose own body calls `.backward()` or
    `optimizer.step()`, including loops nested in that body): `.item()`, `.tolist()`, `.cpu()`, `.numpy()`,
    `float()` / `int()` / `bool()` of a tensor, and `print()` of a tensor (also inside an f-string).

    A call only counts as a tensor conversion when its argument is evidently a tensor in that function: a name
    on which `.backward()` is called, or one bound to a model output (`model(x)`), a loss (`criterion(...)`,
    `F.cross_entropy(...)`), a `torch.*` result, or a tensor method of those (`out.argmax(1)`, `x.sum()`).
    `float(lr)` and `print(epoch)` are not flagged. NumPy arrays and raw batches straight from the
    `for x, y in loader` target (still on the CPU) are not flagged either.
    Test files (pytest files, files under `tests/`, `test/` or `testing/`) are not checked: their speed does
    not matter.

    It stays silent where the host value is load-bearing: a value that decides Python control flow (an `if` /
    `while` / `assert` test, `break` on `loss < 1e-3`, `if not math.isfinite(loss.item()): sys.exit(1)`), an
    index, or the argument of a call that needs a Python number (`env.step(action.item())`,
    `range(n.item())`), also through a variable (`v = loss.item(); if v > best: ...`). Those syncs are needed.

    Logging guards: a sync inside the body of an `if` whose test uses `%` (`if step % log_every == 0:`,
    `if (i + 1) % 100 == 0:`, `if divisible_by(step, every):`) or names logging (`if should_log:`,
    `if args.verbose:`) runs every N steps, not every step; it is deliberately not reported. The `else`
    branch of such an `if` is checked as usual.

    Nor is a second read of a value that a load-bearing sync earlier in the same step already read, with
    nothing that can queue GPU work in between (`if last.item() < tol: ...` then `print(last.item())`): the
    value is ready, the read waits for nothing. Nor is a sync on a path that leaves the loop, which runs
    once: inside a `raise` statement, or in a block of an `if` / `else` that ends with `raise`, `return`,
    `sys.exit()` (`exit()`, `quit()`, `os._exit()`) or a `break` out of the training loop
    (`if not torch.isfinite(loss): print(loss.item()); sys.exit(1)`).

    A host value that the next step computes with (`k = k + lam * diff.item()` where `k` later scales a loss
    tensor, a BEGAN-style balance term) is load-bearing too.

    Syncs outside training loops (evaluation loops, the per-epoch summary after the batch loop) are not
    reported, nor those in an evaluation block nested in a training loop's body: a `with torch.no_grad():`
    / `inference_mode()` block that runs its own loop or calls `.eval()`. A loop counts as a training loop
    also when its body calls a function of the same file that runs `backward()` or `optimizer.step()` (a
    `def backward_pass(loss): ...` closure); and `return loss.item()` from such a step function is reported
    when every loop that calls it only shows or sums the result.

    Where a sync is reported: at the first sync of a chain (`x.cpu()` in `x.cpu().numpy()`), and only when the
    host value is shown, stored or summed: an expression statement, an assignment whose variable the loop
    does not use for control flow, `+=`, an f-string, `%`-formatting or `"...".format(...)`, `print(...)`, a
    collecting / logging call (`.append`, `.extend`, `.update`, `.add_scalar`, `.log`, `.info`,
    `.set_postfix`, `.write`...) or a display helper (`progress_bar(...)`, `log_...(...)`), also through
    `numpy` and `math` functions (`np.mean(x.cpu().numpy())`). Several syncs in one statement (a `print`
    of six `.item()`s) are one finding that lists them. A tensor formatted into a string outside `print`
    (an f-string, `%` or `.format` for a progress bar: `pbar.set_description("%10.4g" % (*mean_loss,))`)
    is reported too.

    ## Why is this slow?
    CUDA runs asynchronously: Python queues kernels and moves on while the GPU works. Reading a value on the
    host (`.item()`, `.cpu()`, `float(t)`, printing a tensor) makes Python wait until every queued kernel has
    finished and the value has been copied back, so the GPU idles while Python prepares the next step and the
    input pipeline stalls. Once per step this can cost a large share of the step time for small and medium
    models.

    ## Example
    ```python
    running_loss = 0.0
    for inputs, targets in loader:
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
    print(running_loss / len(loader))
    ```

    ## Use instead
    ```python
    running_loss = 0.0
    for inputs, targets in loader:
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.step()
        running_loss += loss.detach()
    running_loss = float(running_loss)
    print(running_loss / len(loader))
    ```
    Or log every N steps: `if step % log_every == 0: print(loss.item())`.

    ## Fix safety
    Only the accumulation pattern has a fix, and it is **unsafe**: `acc += <tensor>.item()` becomes
    `acc += <tensor>.detach()`, and a conversion back to a Python number is inserted right after the loop. It is
    offered only when `acc` is set to a number literal (`acc = 0.0`, `loss_sum, correct = 0.0, 0`) by an
    earlier statement of the same function, either in the loop's own block or before an enclosing epoch loop /
    `if` / `with` / `try` that does not otherwise mention `acc`; the statements in between do not touch `acc`;
    and nothing in the loop other than that one statement mentions `acc` (so no read inside the loop ever sees
    a tensor). Any other form (`acc += loss.item() * n`, `acc -= ...`, an attribute `self.acc`, an `acc` that is
    printed inside the loop, `print(f"{loss.item():.3f}")`) is reported without a fix. The conversion is `acc = float(acc)` for a float
    literal start (`0.0`), and `acc = torch.as_tensor(acc).item()` for an integer start (`0`), which keeps an
    integer count an `int` and a float sum a `float`, and leaves `acc` unchanged when the loop ran zero times.
    What changes:
    - the sum is accumulated on the device in the tensor's dtype (usually float32) instead of in Python's
      float64: the result may differ in the last digits, and with a float16/bfloat16 value it loses precision
      over many steps;
    - the sync happens once after the loop instead of every step, so an exception raised by an asynchronous
      CUDA error surfaces later;
    - inside the loop `acc` is a tensor: code outside the function that reads it during the loop (a callback
      reading a global) would see a tensor.
    Every other sync is reported without a fix: whether to log every N steps or accumulate on the device is
    the author's call. A comment inside `.item(...)` stays where it is (`.detach(  # note`); where the call
    goes away (`x.detach().item()` becomes `x.detach()`) and holds a comment, there is no fix: it would drop
    the comment.

    ## PyTorch versions
    All versions. `torch.as_tensor` exists since 0.4.
    """

    code = "TL101"
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)
    name = "sync-in-training-loop"
    message = ("Host-device sync in every training step; keep the value on the device "
               "(accumulate with `.detach()`) and convert once, or log every N steps")
    summary = "`.item()`, `.cpu()`, `float(tensor)`, `print(tensor)` in every step of a training loop"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicabilities = (Applicability.UNSAFE,)
    # The text stage: a training step (`may_train`: the rarer test first, most files stop there), then a
    # sync, conversion or print call, or formatting (`%`, `.format(`, an f-string), spaced as Python allows.
    @classmethod
    def may_fire(cls, text: str, settings) -> bool:
        return may_train(text) and _may_sync_or_format(text)

    has_ast_prefilter = True

    @classmethod
    def may_fire_in_ast(cls, tree: ast.Module, text: str, settings) -> bool:
        """``check``'s gates: a sync, conversion, print or formatting of the kinds ``check`` reads, inside a
        training loop (or returned by a step function)."""
        return _ast_may_report(index_of(tree))

    def check(self, ctx: RuleContext) -> None:
        a = ctx.analysis
        checker = _Checker(ctx, a)
        if not any(loop.is_training for loop in a.loops) and not checker.step_functions():
            return
        for name in _SYNC_METHODS:
            for call in a.calls_by_name.get(name, ()):
                checker.check_method(call, name)
        for name in _CONVERSIONS:
            for call in a.calls_by_name.get(name, ()):
                checker.check_conversion(call, name)
        for call in a.calls_by_name.get("print", ()):
            checker.check_print(call)
        for loop in a.loops:
            if checker.is_training(loop) and not any(checker.is_training(o) for o in a.enclosing_loops(loop.node)):
                checker.check_formatting(loop)  # outermost training loops only
        checker.flush()


class _Checker:
    def __init__(self, ctx: RuleContext, a: FileAnalysis) -> None:
        self.ctx = ctx
        self.a = a
        self._backward_names: dict = {}
        # statement -> [(node, message, fix, what)]: one finding per statement, listing its syncs
        self._found: dict = {}
        # Per-loop indexes, built on first use (the read-before and name-use questions over a whole loop).
        self._reads_by_loop: dict = {}
        self._names_by_node: dict = {}
        self._loads_of_name: dict = {}
        self._mentions_by_block: dict = {}

    def report(self, node: cst.CSTNode, message: str, what: str, fix=None) -> None:
        statement = self.a.enclosing_statement(node) or node
        self._found.setdefault(statement, []).append((node, message, fix, what))

    def flush(self) -> None:
        for statement, found in self._found.items():
            found.sort(key=lambda item: self.a.spans[item[0]][0])
            if len(found) == 1:
                node, message, fix, _ = found[0]
                self.ctx.report(node, message=message, fix=fix)
                continue
            whats = []
            for item in found:
                if item[3] not in whats:
                    whats.append(item[3])
            listed = ", ".join(whats[:-1]) + " and " + whats[-1] if len(whats) > 1 else whats[0]
            self.ctx.report(found[0][0], message=(
                f"{len(found)} host-device syncs in one statement ({listed}) wait for the GPU every training "
                "step; keep the values on the device and read them once, or every N steps"))

    def step_functions(self) -> Set[str]:
        """Names of the file's functions that run a training step themselves: ``def _backward(loss): ...
        loss.backward(); optimizer.step()`` (a closure or helper a loop calls every iteration)."""
        names = getattr(self, "_step_names", None)
        if names is None:
            names = {
                info.name for info in self.a.functions
                if any((self.a.is_backward_call(c) or self.a.is_optimizer_step(c)) and self.a.function_of(c) is info
                       for c in self.a.calls_in(info.node))
            }
            self._step_names = names
        return names

    def is_training(self, loop: LoopInfo) -> bool:
        steps = self.step_functions()
        return loop.is_training or (bool(steps) and any(self._calls_step(c, steps) for c in loop.direct_calls))

    def _helper_training_loop(self, node: cst.CSTNode) -> Optional[LoopInfo]:
        """The innermost loop around ``node`` whose body calls one of the file's step functions."""
        steps = self.step_functions()
        if not steps:
            return None
        for loop in self.a.enclosing_loops(node):
            if any(self._calls_step(c, steps) for c in loop.direct_calls):
                return loop
        return None

    @staticmethod
    def _calls_step(call: cst.Call, steps: Set[str]) -> bool:
        func = call.func
        if isinstance(func, cst.Name):
            return func.value in steps
        return isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self" \
            and func.attr.value in steps

    def per_step_return(self, call: cst.Call, top: cst.BaseExpression) -> bool:
        """``return loss.item()`` at the end of a step function (it calls ``backward()`` or ``step()``, not in
        a loop) that the file calls in a loop, where every such caller only shows or sums the result."""
        a = self.a
        node = top
        while isinstance(a.parent(node), (cst.Tuple, cst.Element)):
            node = a.parent(node)
        if not isinstance(a.parent(node), cst.Return) or next(a.enclosing_loops(call), None) is not None:
            return False
        info = a.function_of(call)
        if info is None or info.name not in self.step_functions() or not isinstance(info.node, cst.FunctionDef):
            return False
        callers = [c for c in a.calls_by_name.get(info.name, ()) if self._calls_step(c, {info.name})]
        in_loops = [(c, next(a.enclosing_loops(c), None)) for c in callers]
        in_loops = [(c, loop) for c, loop in in_loops if loop is not None]
        if not in_loops or len(in_loops) != len(callers):
            return False
        return all(self._destination(c, loop, follow=True) == "sink" for c, loop in in_loops)

    def _training_loop(self, node: cst.CSTNode) -> Optional[LoopInfo]:
        """The training loop around ``node``, unless ``node`` sits in an evaluation block nested in it: a
        ``with torch.no_grad()`` / ``inference_mode()`` block that runs its own loop or calls ``.eval()``."""
        a = self.a
        loop = a.training_loop_of(node) or self._helper_training_loop(node)
        if loop is None:
            return None
        for ancestor in a.ancestors(node):
            if ancestor is loop.node:
                break
            if isinstance(ancestor, cst.With) and _disables_grad(a, ancestor) and _is_evaluation_block(a, ancestor):
                return None
        return loop

    # --- the three kinds of sync ----------------------------------------------------------------------
    def check_method(self, call: cst.Call, name: str) -> None:
        a = self.a
        if not isinstance(call.func, cst.Attribute) or call.args:
            return
        loop = self._training_loop(call)
        if loop is None:
            if name in ("item", "tolist", "cpu") and not self._chain_has_sync(call.func.value) \
                    and self.is_tensor(call.func.value, a.scope_of(call)) \
                    and self.per_step_return(call, self._chain_top(call)):
                what = f"`{_short(a, call.func.value)}.{name}()`"
                self.report(call, f"{what} is returned by a training step the loop calls every iteration: it waits "
                                  "for the GPU every step; return the tensor (`.detach()`) and read it every N steps",
                            what)
            return
        recv = call.func.value
        if self._chain_has_sync(recv):
            return  # `x.cpu().numpy()`: reported once, at `.cpu()`
        scope = a.scope_of(call)
        if a.is_numpy_expr(recv, scope) or self._is_raw_batch(recv, loop):
            return
        if name == "cpu" and self._is_module(recv):
            return
        if name == "numpy" and not self.is_tensor(recv, scope):
            return  # `.numpy()` needs a CPU tensor: only a sync when it follows device work we can see
        top = self._chain_top(call)
        if not self._is_slowdown(top, loop):
            return
        if self._read_before(call, recv, loop):
            return  # the step already waited for this value: this read finds it ready
        fix = self._accumulation_fix(call, top, loop) if name == "item" else None
        text = _short(a, recv)
        if fix is not None:
            acc = fix[1]
            detached = text if _is_detach_call(recv) else f"{text}.detach()"
            message = (f"`{acc} += {text}.item()` waits for the GPU every step; accumulate on the device "
                       f"(`{acc} += {detached}`) and convert once after the loop")
            if fix[2]:
                self.report(call, f"{message} ({DROPS_COMMENT})", f"`{text}.item()`")
            else:
                self.report(call, message, f"`{text}.item()`", fix=fix[0])
            return
        what = {"item": f"`{text}.item()`", "tolist": f"`{text}.tolist()`", "cpu": f"`{text}.cpu()`",
                "numpy": f"`{text}.numpy()`"}[name]
        self.report(call, f"{what} waits for the GPU every training step; keep the value on the "
                          "device (accumulate with `.detach()`) and read it once, or every N steps", what)

    def _read_before(self, call: cst.Call, recv: cst.BaseExpression, loop: LoopInfo) -> bool:
        """An earlier, load-bearing sync of the same value (``if last.item() < tol:`` ... ``print(last.item())``)
        runs in every iteration of ``loop`` before ``call``, and nothing in between can queue GPU work: the
        first read has to stay and has waited already, so this one costs no wait of its own. (Two reads that
        only show the value are both reported: removing the first makes the second the one that waits.)

        Only the latest such read needs testing: what lies between an earlier one and ``call`` holds what lies
        between the latest one and ``call`` (two reads of one receiver never nest). The loop's calls, their
        GPU work as a running count and the load-bearing reads by receiver are indexed once per loop, so a
        loop of N reads costs O(N), not a walk over every pair."""
        a = self.a
        reads = self._loop_reads(loop)
        calls, orders, gpu_counts, position = reads.calls, reads.orders, reads.gpu_counts, reads.position
        before = bisect.bisect_left(orders, a.order[call])  # calls[:before] come before ``call``
        earlier = self._load_bearing_reads(loop, reads, a.module.code_for_node(recv))
        count = bisect.bisect_left(earlier, before)
        if not count:
            return False
        latest = earlier[count - 1]
        after = min(latest + len(a.calls_in(calls[latest])), before)  # past the calls inside that read
        queued = gpu_counts[before] - gpu_counts[after]
        for ancestor in a.ancestors(call):  # calls around ``call`` are not "in between"
            index = position.get(ancestor) if isinstance(ancestor, cst.Call) else None
            if index is not None and after <= index < before and not _queues_no_gpu_work(ancestor):
                queued -= 1
        return queued == 0

    def _loop_reads(self, loop: LoopInfo) -> "_LoopReads":
        reads = self._reads_by_loop.get(loop.node)
        if reads is None:
            calls = self.a.calls_in(loop.node.body)
            reads = self._reads_by_loop[loop.node] = _LoopReads(calls, self.a)
        return reads

    def _load_bearing_reads(self, loop: LoopInfo, reads: "_LoopReads", text: str) -> List[int]:
        """The reads of receiver ``text`` that run every iteration and whose value Python needs, in order."""
        found = reads.load_bearing.get(text)
        if found is None:
            found = reads.load_bearing[text] = [
                index for index in reads.by_receiver.get(text, ())
                if self._every_iteration(reads.calls[index], loop)
                and self._destination(self._chain_top(reads.calls[index]), loop, follow=True) == "load"
            ]
        return found

    def _every_iteration(self, node: cst.CSTNode, loop: LoopInfo) -> bool:
        """``node`` runs whenever an iteration of ``loop`` runs: no branch, inner loop, comprehension,
        short-circuit or nested def between it and the loop (an ``if`` test always runs)."""
        child = node
        for ancestor in self.a.ancestors(node):
            if ancestor is loop.node:
                return True
            if isinstance(ancestor, cst.If) and child is not ancestor.test:
                return False
            if isinstance(ancestor, (cst.IfExp, cst.For, cst.While, cst.Try, cst.BooleanOperation, cst.ListComp,
                                     cst.SetComp, cst.DictComp, cst.GeneratorExp, cst.Lambda, cst.FunctionDef,
                                     cst.Match)):
                return False
            child = ancestor
        return False

    def check_conversion(self, call: cst.Call, name: str) -> None:
        a = self.a
        if not isinstance(call.func, cst.Name) or name in a.imports or len(call.args) != 1 or call.args[0].keyword:
            return
        loop = self._training_loop(call)
        if loop is None:
            return
        arg = call.args[0].value
        scope = a.scope_of(call)
        if not self.is_tensor(arg, scope) or self._is_raw_batch(arg, loop) or not self._is_slowdown(call, loop):
            return
        what = f"`{name}({_short(a, arg)})`"
        self.report(call, f"{what} copies a tensor to the host and waits for the GPU "
                          "every training step; keep it on the device and convert once, or every N steps", what)

    def check_print(self, call: cst.Call) -> None:
        a = self.a
        if not isinstance(call.func, cst.Name) or "print" in a.imports:
            return
        loop = self._training_loop(call)
        if loop is None or self._guarded(call, loop):
            return
        scope = a.scope_of(call)
        for arg in call.args:
            if arg.keyword is not None:
                continue
            shown = self._printed_tensor(arg.value, scope, loop)
            if shown is not None:
                self.report(call, f"`print` of the tensor `{_short(a, shown)}` waits for the GPU every "
                                  "training step; print every N steps (`if step % log_every == 0:`)",
                            f"`print({_short(a, shown)})`")
                return

    def check_formatting(self, loop: LoopInfo) -> None:
        """A tensor formatted into a string outside ``print`` (f-string, ``%``, ``"...".format``) for a
        progress bar or a log line: formatting reads its value on the host."""
        a = self.a
        for node in walk(loop.node.body):
            if isinstance(node, cst.FormattedString):
                values = [p.expression for p in node.parts if isinstance(p, cst.FormattedStringExpression)]
            elif isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo) and _is_text(node.left):
                right = node.right
                values = [e.value for e in right.elements] if isinstance(right, cst.Tuple) else [right]
            elif isinstance(node, cst.Call) and call_name(node) == "format" and isinstance(
                    node.func.value, (cst.SimpleString, cst.ConcatenatedString)):
                values = [arg.value for arg in node.args]
            else:
                continue
            if any(isinstance(anc, cst.Call) and call_name(anc) == "print" for anc in a.ancestors(node)):
                continue  # check_print reports it
            here = self._training_loop(node)
            if here is None or self._guarded(node, here):
                continue
            scope = a.scope_of(node)
            shown = next((v for v in values if not self._chain_has_sync(v) and self.is_tensor(v, scope)
                          and not self._is_raw_batch(v, here)), None)
            if shown is None or self._destination(node, here, follow=True) != "sink":
                continue
            what = f"formatting `{_short(a, shown)}`"
            self.report(node, f"{what} into a string reads the tensor on the host and waits for the GPU every "
                              "training step; format it every N steps", what)

    def _printed_tensor(self, value: cst.BaseExpression, scope: ScopeNode, loop: LoopInfo):
        if isinstance(value, cst.FormattedString):
            for part in value.parts:
                if isinstance(part, cst.FormattedStringExpression):
                    found = self._printed_tensor(part.expression, scope, loop)
                    if found is not None:
                        return found
            return None
        if self.is_tensor(value, scope) and not self._is_raw_batch(value, loop):
            return value
        return None

    # --- is it a tensor? ------------------------------------------------------------------------------
    def is_tensor(self, expr: cst.BaseExpression, scope: ScopeNode, depth: int = 0) -> bool:
        a = self.a
        if depth > 5:
            return False
        if isinstance(expr, cst.Call):
            qualified = a.qualified_name(expr.func) or ""
            if qualified.startswith("torch.nn.functional."):
                return True
            if qualified.startswith("torch.") and qualified[len("torch."):] in _TORCH_TENSOR_FUNCS:
                return True
            if qualified.startswith(("numpy.", "math.", "builtins.")):
                return False
            name = dotted_name(expr.func)
            if name is not None:
                last = name.split(".")[-1]
                if _LOSS_NAME.search(last) or _MODEL_NAME.search(last):
                    return True
            if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _TENSOR_METHODS:
                return self.is_tensor(expr.func.value, scope, depth + 1)
            return False
        if isinstance(expr, cst.Name):
            values = a.values_of(expr.value, scope)
            known = [v for v in values if v is not None]
            if any(isinstance(v, (cst.Integer, cst.Float, cst.SimpleString, cst.FormattedString))
                   or (isinstance(v, cst.Call) and call_name(v) in _HOST_CALLS) for v in known):
                return False
            if expr.value in self._backward_receivers(scope):
                return True
            # `m = torch.zeros(3)` then `m = (m * i + x) / (i + 1)`: the update keeps the kind of the start
            fresh = [v for v in known if not names_in(v, expr.value)]
            return bool(values) and len(known) == len(values) and bool(fresh) and all(
                self.is_tensor(v, scope, depth + 1) for v in fresh)
        if isinstance(expr, cst.Attribute):
            if expr.attr.value in {"loss", "logits"}:
                return self.is_tensor(expr.value, scope, depth + 1)
            return False
        if isinstance(expr, cst.BinaryOperation):
            return self.is_tensor(expr.left, scope, depth + 1) or self.is_tensor(expr.right, scope, depth + 1)
        if isinstance(expr, cst.UnaryOperation):
            return self.is_tensor(expr.expression, scope, depth + 1)
        if isinstance(expr, cst.Comparison):
            return self.is_tensor(expr.left, scope, depth + 1) or any(
                self.is_tensor(c.comparator, scope, depth + 1) for c in expr.comparisons)
        if isinstance(expr, cst.Subscript):
            return self.is_tensor(expr.value, scope, depth + 1)
        return False

    def _backward_receivers(self, scope: ScopeNode) -> Set[str]:
        """Names in ``scope`` on which ``.backward()`` is called: those are tensors."""
        names = self._backward_names.get(scope)
        if names is None:
            names = set()
            for call in self.a.calls_by_name.get("backward", ()):
                recv = receiver(call)
                if isinstance(recv, cst.Name) and self.a.scope_of(call) is scope:
                    names.add(recv.value)
            self._backward_names[scope] = names
        return names

    def _is_module(self, expr: cst.BaseExpression) -> bool:
        name = dotted_name(expr)
        return name is not None and (name == "self" or bool(_MODEL_NAME.search(name.split(".")[-1])))

    def _is_raw_batch(self, expr: cst.BaseExpression, loop: LoopInfo) -> bool:
        """``y`` in ``for x, y in loader:`` never rebound: the loader's CPU tensors, no device sync."""
        root = expr
        while isinstance(root, (cst.Attribute, cst.Subscript)):
            root = root.value
        if not isinstance(root, cst.Name):
            return False
        name = root.value
        a = self.a
        scope = a.scope_of(expr)
        targets = 0
        for info in a.enclosing_loops(expr):
            if isinstance(info.node, cst.For) and info.iterates_loader and name in target_names(info.node.target):
                targets += 1
        return targets > 0 and len(a.values_of(name, scope)) == targets

    # --- where does the host value go? ------------------------------------------------------------------
    def _chain_has_sync(self, expr: cst.BaseExpression) -> bool:
        while isinstance(expr, (cst.Call, cst.Attribute, cst.Subscript)):
            if isinstance(expr, cst.Call):
                if call_name(expr) in _SYNC_METHODS and isinstance(expr.func, cst.Attribute) and not expr.args:
                    return True
                expr = expr.func
            else:
                expr = expr.value
        return False

    def _chain_top(self, call: cst.Call) -> cst.BaseExpression:
        """``x.cpu()`` in ``x.cpu().numpy().tolist()`` -> the whole chain."""
        node: cst.BaseExpression = call
        while True:
            parent = self.a.parent(node)
            grand = self.a.parent(parent) if parent is not None else None
            if isinstance(parent, cst.Attribute) and parent.value is node and isinstance(grand, cst.Call) \
                    and grand.func is parent:
                node = grand
            else:
                return node

    def _is_slowdown(self, node: cst.BaseExpression, loop: LoopInfo) -> bool:
        return not self._guarded(node, loop) and self._destination(node, loop, follow=True) == "sink"

    def _guarded(self, node: cst.CSTNode, loop: LoopInfo) -> bool:
        """Inside the body of ``if step % N == 0:`` (or ``if should_log:``) within the training loop, or on a
        path that leaves the loop (runs once): a ``raise`` statement, or a block of an ``if`` that ends with
        ``raise``, ``return``, ``sys.exit()`` or a ``break`` out of this loop."""
        a = self.a
        child = node
        for ancestor in a.ancestors(node):
            if ancestor is loop.node:
                return False
            if isinstance(ancestor, cst.Raise):
                return True
            if isinstance(ancestor, cst.If) and child is ancestor.body and _is_logging_guard(ancestor.test):
                return True
            if isinstance(ancestor, (cst.IndentedBlock, cst.SimpleStatementSuite)) and isinstance(
                    a.parent(ancestor), (cst.If, cst.Else)) and self._leaves_loop(ancestor, loop):
                return True
            child = ancestor
        return False

    def _leaves_loop(self, block: cst.BaseSuite, loop: LoopInfo) -> bool:
        """The block's last statement leaves the training loop: ``raise``, ``return``, ``sys.exit(...)`` /
        ``exit()`` / ``quit()`` / ``os._exit(...)``, or a ``break`` whose innermost loop is ``loop``."""
        statements = list(block.body)
        if not statements:
            return False
        last = statements[-1]
        if isinstance(last, cst.SimpleStatementLine):
            if not last.body:
                return False
            last = last.body[-1]
        if isinstance(last, (cst.Raise, cst.Return)):
            return True
        if isinstance(last, cst.Break):
            inner = next(self.a.enclosing_loops(last), None)
            return inner is not None and inner.node is loop.node
        if isinstance(last, cst.Expr) and isinstance(last.value, cst.Call):
            called = self.a.qualified_name(last.value.func) or dotted_name(last.value.func) or ""
            return called in _EXIT_CALLS
        return False

    def _destination(self, node: cst.CSTNode, loop: LoopInfo, follow: bool) -> str:
        """"sink" where the host value is only shown, stored or summed; "load" where Python needs it."""
        a = self.a
        while True:
            parent = a.parent(node)
            if parent is None:
                return "load"
            if isinstance(parent, cst.Arg):
                call = a.parent(parent)
                assert isinstance(call, cst.Call)
                kind = self._call_kind(call)
                if kind == "through":
                    node = call
                    continue
                return kind
            if isinstance(parent, cst.Attribute):
                grand = a.parent(parent)
                if isinstance(grand, cst.Call) and grand.func is parent:
                    node = grand  # a method of the host value (`loss.item().__round__()`): follow it
                    continue
                return "load"
            if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.Modulo) \
                    and node is parent.right and _is_text(parent.left):
                return "sink"  # "loss %.3f" % value: formatted for display
            if isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation, cst.BooleanOperation, cst.Comparison,
                                   cst.ComparisonTarget, cst.Element, cst.DictElement, cst.StarredElement,
                                   cst.StarredDictElement, cst.List, cst.Tuple, cst.Set, cst.Dict,
                                   cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
                if isinstance(parent, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)) and \
                        node is not getattr(parent, "elt", None) and node is not getattr(parent, "value", None):
                    return "load"
                node = parent
                continue
            if isinstance(parent, (cst.FormattedStringExpression, cst.FormattedString)):
                return "sink"  # formatted for display
            if isinstance(parent, cst.IfExp):
                if node is parent.test:
                    return "load"
                node = parent
                continue
            if isinstance(parent, cst.Subscript):
                if node is parent.value:
                    node = parent
                    continue
                return "load"
            if isinstance(parent, cst.Expr):
                return "sink"
            if isinstance(parent, cst.AugAssign):
                if not follow:
                    return self._feeds_tensor(parent.target, parent.value)
                return self._name_destination(parent.target, loop)
            if isinstance(parent, (cst.Assign, cst.AnnAssign)):
                if not follow:
                    return self._feeds_tensor(None, parent.value)
                targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
                for target in targets:
                    if self._name_destination(target, loop) == "load":
                        return "load"
                return "sink"
            return "load"  # if/while/assert tests, return, yield, lambda, await...

    def _feeds_tensor(self, target: Optional[cst.BaseExpression], value: Optional[cst.BaseExpression]) -> str:
        """A host value used in a statement that computes a tensor (``d_loss = real - k * fake``, the next step's
        loss) is load-bearing: "load"; otherwise the statement only stores it: "sink"."""
        if value is None:
            return "sink"
        scope = self.a.scope_of(value)
        if self.is_tensor(value, scope) or (target is not None and self.is_tensor(target, scope)):
            return "load"
        return "sink"

    def _name_destination(self, target: cst.BaseExpression, loop: LoopInfo) -> str:
        """A name that holds a host value: "load" when the loop uses it for control flow."""
        if not isinstance(target, cst.Name):
            return "sink"
        key = (loop.node, target.value)
        loads = self._loads_of_name.get(key)
        if loads is None:  # the uses that need the value, found once per loop and name
            loads = self._loads_of_name[key] = [
                use for use in self._names_under(loop.node).get(target.value, ())
                if not self._is_binding(use) and self._destination(use, loop, follow=False) == "load"
            ]
        return "load" if any(use is not target for use in loads) else "sink"

    def _names_under(self, node: cst.CSTNode) -> dict:
        """Every ``Name`` under ``node`` by spelling (``names_in`` for all names at once): one walk per loop."""
        names = self._names_by_node.get(node)
        if names is None:
            names = self._names_by_node[node] = {}
            for below in walk(node):
                if isinstance(below, cst.Name):
                    names.setdefault(below.value, []).append(below)
        return names

    def _is_binding(self, name: cst.Name) -> bool:
        """``v = ...`` binds v; ``v += x`` reads it too, but only to add to it (a sink, see ``_destination``)."""
        parent = self.a.parent(name)
        return isinstance(parent, cst.AssignTarget) and parent.target is name

    def _call_kind(self, call: cst.Call) -> str:
        a = self.a
        func = call.func
        qualified = a.qualified_name(func)
        if isinstance(func, cst.Name) and func.value not in a.imports:
            if func.value in _SINK_FUNCTIONS or _DISPLAY_HELPER.search(func.value):
                return "sink"
            if func.value in _TRANSPARENT_FUNCTIONS:
                return "through"
            return "load"
        if qualified is not None and qualified.startswith(("math.", "numpy.")):
            return "through"  # a host number or array in, a host number or array out
        if isinstance(func, cst.Attribute) and func.attr.value in _SINK_METHODS:
            return "sink"
        if isinstance(func, cst.Attribute) and func.attr.value == "format" and isinstance(
                func.value, (cst.SimpleString, cst.ConcatenatedString)):
            return "sink"  # "loss {:.3f}".format(value)
        name = dotted_name(func)
        if name is not None and _DISPLAY_HELPER.search(name.split(".")[-1]):
            return "sink"
        return "load"

    def _previous_mention(self, loop: cst.CSTNode, acc: str) -> Optional[cst.CSTNode]:
        """The nearest statement before ``loop`` that mentions ``acc``, climbing out of enclosing blocks.

        Climbing out of an enclosing loop requires that nothing else in it mentions ``acc`` (on its next
        iteration the value must still be the number the conversion left); climbing out of an ``if`` / ``with``
        / ``try`` body requires only that its header does not.
        """
        a = self.a
        statement: cst.CSTNode = loop
        while True:
            block = a.parent(statement)
            if not isinstance(block, (cst.IndentedBlock, cst.Module)):
                return None  # an `elif`, or a one-line suite
            positions, mentions = self._mentions_in_block(block)
            position = positions.get(statement)
            if position is None:
                return None
            spots = mentions.get(acc, ())
            before = bisect.bisect_left(spots, position)
            if before:
                return block.body[spots[before - 1]]
            container = a.parent(block)
            if isinstance(container, (cst.For, cst.While)):
                if any(use for use in self._names_under(container).get(acc, ()) if not a.contains(loop, use)):
                    return None
            elif isinstance(container, (cst.If, cst.With)):
                header = container.test if isinstance(container, cst.If) else container.items
                if any(names_in(item, acc) for item in (header if isinstance(header, (list, tuple)) else [header])):
                    return None
            elif not isinstance(container, cst.Try):
                return None
            statement = container

    def _mentions_in_block(self, block: cst.CSTNode) -> tuple:
        """A block's statements: the position of each, and for each name the positions of the statements
        that mention it, in order (one walk per block, not one per accumulator asked about)."""
        found = self._mentions_by_block.get(block)
        if found is None:
            positions, mentions = {}, {}
            for position, statement in enumerate(block.body):
                positions[statement] = position
                for node in walk(statement):
                    if isinstance(node, cst.Name):
                        spots = mentions.setdefault(node.value, [])
                        if not spots or spots[-1] != position:
                            spots.append(position)
            found = self._mentions_by_block[block] = (positions, mentions)
        return found

    # --- the accumulation fix -------------------------------------------------------------------------
    def _accumulation_fix(self, call: cst.Call, top: cst.BaseExpression, loop: LoopInfo):
        a = self.a
        aug = a.parent(call)
        if top is not call or not isinstance(aug, cst.AugAssign) or aug.value is not call:
            return None
        if not isinstance(aug.operator, cst.AddAssign) or not isinstance(aug.target, cst.Name):
            return None
        line = a.parent(aug)
        if not isinstance(line, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            return None
        acc = aug.target.value
        recv = call.func.value
        if self._chain_has_sync(recv) or names_in(recv, acc):
            return None
        # nothing in the loop but this statement mentions acc
        if any(use is not aug.target for use in self._names_under(loop.node).get(acc, ())):
            return None
        # the loop runs after `acc = <number>`, with nothing touching acc in between
        if isinstance(a.parent(loop.node), cst.SimpleStatementSuite):
            return None
        init = self._previous_mention(loop.node, acc)
        literal = _number_literal_init(init, acc)
        if literal is None:
            return None
        # `.item(...)` becomes `.detach(...)` in place, so whatever its brackets hold (a comment) stays
        detach = recv if _is_detach_call(recv) else call.with_changes(
            func=call.func.with_changes(attr=cst.Name("detach")))
        from torchlint.fixer import replaced_within  # the fixer loads only for files with a finding

        new_loop = replaced_within(loop.node, aug, aug.with_changes(value=detach), a)
        imports = ()
        if isinstance(literal, cst.Float):
            conversion = cst.parse_statement(f"{acc} = float({acc})")
        else:
            torch = a.module_alias("torch")
            if torch is None:
                torch = "torch"
                imports = (ImportRequest("torch"),)
            conversion = cst.parse_statement(f"{acc} = {torch}.as_tensor({acc}).item()")
        fix = Fix({loop.node: cst.FlattenSentinel([new_loop, conversion])}, Applicability.UNSAFE, imports)
        # Only ``call`` differs in the loop, and ``conversion`` has no comment: what the whole fix would drop,
        # ``call``'s replacement drops (asking of the whole loop made every finding cost the loop's size).
        return fix, acc, loses_comment({call: detach})


_NO_GRAD = ("torch.no_grad", "torch.inference_mode", "torch.set_grad_enabled", "torch.autograd.no_grad",
            "torch.autograd.grad_mode.no_grad", "torch.autograd.grad_mode.inference_mode")


def _disables_grad(a: FileAnalysis, with_node: cst.With) -> bool:
    for item in with_node.items:
        call = item.item
        if isinstance(call, cst.Call) and a.qualified_name(call.func) in _NO_GRAD:
            if a.qualified_name(call.func) == "torch.set_grad_enabled":
                if not (call.args and isinstance(call.args[0].value, cst.Name) and call.args[0].value.value == "False"):
                    continue
            return True
    return False


def _is_evaluation_block(a: FileAnalysis, with_node: cst.With) -> bool:
    """A no-grad block that evaluates: it loops (over a validation set, sampling steps) or calls ``.eval()``."""
    if any(isinstance(node, (cst.For, cst.While, cst.ListComp, cst.GeneratorExp)) for node in walk(with_node.body)):
        return True
    return any(call_name(c) == "eval" and not c.args for c in a.calls_in(with_node.body))


def _is_text(node: cst.BaseExpression) -> bool:
    """A string literal, or one built from literals: ``"%11s" * 2 + "%11.4g" * 5``."""
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)):
        return True
    return isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Multiply)) and (
        _is_text(node.left) or _is_text(node.right))


# Calls that queue no GPU work (they show, store or convert host values): a second read of a value that
# only these separate from the first waits for nothing.
_NO_GPU_WORK_CALLS = _SINK_METHODS | _SINK_FUNCTIONS | set(_SYNC_METHODS) | {
    "int", "float", "bool", "str", "len", "repr", "format", "join", "dict", "items", "keys", "values", "get",
    "time", "perf_counter", "monotonic", "flush", "isinstance", "hasattr", "getattr", "exists",
}


def _queues_no_gpu_work(call: cst.Call) -> bool:
    return call_name(call) in _NO_GPU_WORK_CALLS


class _LoopReads:
    """A loop body's calls in source order, with what ``_read_before`` asks of them: each call's index, how
    many of the first k calls may queue GPU work, and the argument-less sync calls by receiver text."""

    def __init__(self, calls: List[cst.Call], a: FileAnalysis) -> None:
        self.calls = calls
        self.orders = [a.order[c] for c in calls]
        self.position = {c: i for i, c in enumerate(calls)}
        self.gpu_counts = [0]
        self.by_receiver: dict = {}
        for index, c in enumerate(calls):
            self.gpu_counts.append(self.gpu_counts[-1] + (not _queues_no_gpu_work(c)))
            if isinstance(c.func, cst.Attribute) and not c.args and call_name(c) in _SYNC_METHODS:
                self.by_receiver.setdefault(a.module.code_for_node(c.func.value), []).append(index)
        self.load_bearing: dict = {}  # receiver text -> ``_Checker._load_bearing_reads``


def _is_logging_guard(test: cst.BaseExpression) -> bool:
    for node in walk(test):
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
            return True
        if isinstance(node, cst.Name) and _GUARD_NAME.search(node.value):
            return True
    return False


def _number_literal_init(statement: Optional[cst.CSTNode], acc: str) -> Optional[cst.BaseNumber]:
    """The number in ``acc = 0.0``, ``a = acc = 0`` or ``loss, acc = 0.0, 0`` as a whole statement line."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    assign = statement.body[0]
    if not isinstance(assign, cst.Assign):
        return None
    value = assign.value
    found = None
    for target in (t.target for t in assign.targets):
        if isinstance(target, cst.Name):
            if target.value == acc:
                found = value
        elif isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)):
            if len(target.elements) != len(value.elements):
                return None
            for element, item in zip(target.elements, value.elements):
                if isinstance(element.value, cst.Name) and element.value.value == acc and not isinstance(
                        element, cst.StarredElement) and not isinstance(item, cst.StarredElement):
                    found = item.value
        elif names_in(target, acc):
            return None
    if isinstance(found, (cst.Integer, cst.Float)) and not names_in(value, acc):
        return found
    return None


def _is_detach_call(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Call) and call_name(expr) == "detach" and not expr.args


def _short(a: FileAnalysis, expr: cst.CSTNode) -> str:
    text = a.module.code_for_node(expr)
    text = " ".join(text.split())
    return text if len(text) <= 40 else text[:37] + "..."


def _ast_step_functions(index: AstIndex) -> Set[str]:
    """``_Checker.step_functions`` on the ast index: the file's functions that call ``backward()`` or
    ``optimizer.step()`` themselves."""
    return {info.function.name for info in index.calls
            if isinstance(info.function, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (index.is_backward_call(info.node) or index.is_optimizer_step(info.node, info.function))}


def _ast_may_report(index: AstIndex) -> bool:
    steps = _ast_step_functions(index)
    if not steps and not any(loop.is_training for loop in index.loops):
        return False
    training = [loop for loop in index.loops if _ast_is_training(loop, steps)]
    reached: Set[int] = set()  # calls in a training loop, outside a logging guard (`_Checker._guarded`)
    tensors = _AstTensors(index)
    for loop in training:
        formatted = _ast_walk_training_body(loop.node, {id(other.node) for other in training}, reached)
        if any(not _ast_chain_has_sync(value) and tensors.is_tensor(value, loop.function)
               for value in formatted):
            return True  # `check_formatting`
    for name in _SYNC_METHODS:  # `check_method`
        for info in index.calls_by_name.get(name, ()):
            call = info.node
            if type(call.func) is ast.Attribute and not call.args and not call.keywords and id(call) in reached:
                receiver = call.func.value
                if _ast_chain_has_sync(receiver):
                    continue  # `x.cpu().numpy()`: reported once, at `.cpu()`
                if name == "cpu" and _ast_is_module(receiver):
                    continue
                if name == "numpy" and not tensors.is_tensor(receiver, info.function):
                    continue
                return True
    for name in _CONVERSIONS + ("print",):  # `check_conversion`, `check_print`
        if name in index.imports:
            continue
        for info in index.calls_by_name.get(name, ()):
            call = info.node
            if type(call.func) is not ast.Name or id(call) not in reached:
                continue
            if name == "print":
                if any(_ast_prints_tensor(tensors, _unstarred(arg), info.function) for arg in call.args):
                    return True
            elif _ast_one_plain_arg(call):
                arg = _unstarred(call.args[0]) if call.args else call.keywords[0].value
                if tensors.is_tensor(arg, info.function):
                    return True
    return bool(steps) and _ast_may_return_sync(index, steps, tensors)


def _ast_is_module(expr: ast.AST) -> bool:
    """``_Checker._is_module``."""
    name = ast_dotted_name(expr)
    return name is not None and (name == "self" or bool(_MODEL_NAME.search(name.split(".")[-1])))


def _unstarred(node: ast.AST) -> ast.AST:
    return node.value if type(node) is ast.Starred else node  # type: ignore[attr-defined]


def _ast_prints_tensor(tensors: "_AstTensors", value: ast.AST, scope) -> bool:
    """``_Checker._printed_tensor`` (a superset: raw loader batches count)."""
    if type(value) is ast.JoinedStr:
        return any(_ast_prints_tensor(tensors, part.value, scope)
                   for part in value.values if type(part) is ast.FormattedValue)
    return tensors.is_tensor(value, scope)


def _ast_chain_has_sync(expr: ast.AST) -> bool:
    """``_Checker._chain_has_sync``."""
    while type(expr) in (ast.Call, ast.Attribute, ast.Subscript):
        if type(expr) is ast.Call:
            if ast_call_name(expr) in _SYNC_METHODS and type(expr.func) is ast.Attribute and not expr.args \
                    and not expr.keywords:
                return True
            expr = expr.func
        else:
            expr = expr.value  # type: ignore[attr-defined]
    return False


class _AstTensors:
    """``_Checker.is_tensor`` on the index; ``scope`` is the def around the expression (None: the module)."""

    def __init__(self, index: AstIndex) -> None:
        self.index = index
        self._backward: dict = {}

    def is_tensor(self, expr: ast.AST, scope, depth: int = 0) -> bool:
        index = self.index
        if depth > 5:
            return False
        kind = type(expr)
        if kind is ast.Call:
            qualified = index.qualified_name(expr.func) or ""
            if qualified.startswith("torch.nn.functional."):
                return True
            if qualified.startswith("torch.") and qualified[len("torch."):] in _TORCH_TENSOR_FUNCS:
                return True
            if qualified.startswith(("numpy.", "math.", "builtins.")):
                return False
            name = ast_dotted_name(expr.func)
            if name is not None:
                last = name.split(".")[-1]
                if _LOSS_NAME.search(last) or _MODEL_NAME.search(last):
                    return True
            if type(expr.func) is ast.Attribute and expr.func.attr in _TENSOR_METHODS:
                return self.is_tensor(expr.func.value, scope, depth + 1)
            return False
        if kind is ast.Name:
            values = index.values_of(expr.id, scope)
            known = [v for v in values if v is not None]
            if expr.id in self._backward_receivers(scope):
                return True  # asked first: LibCST's literal test misses implicit concatenations
            if any(_ast_is_host_value(v) for v in known):
                return False
            fresh = [v for v in known if not _ast_mentions(v, expr.id)]
            return bool(values) and len(known) == len(values) and bool(fresh) and all(
                self.is_tensor(v, scope, depth + 1) for v in fresh)
        if kind is ast.Attribute:
            return expr.attr in {"loss", "logits"} and self.is_tensor(expr.value, scope, depth + 1)
        if kind is ast.BinOp:
            return self.is_tensor(expr.left, scope, depth + 1) or self.is_tensor(expr.right, scope, depth + 1)
        if kind is ast.UnaryOp:
            return self.is_tensor(expr.operand, scope, depth + 1)
        if kind is ast.Compare:
            return self.is_tensor(expr.left, scope, depth + 1) or any(
                self.is_tensor(c, scope, depth + 1) for c in expr.comparators)
        if kind is ast.Subscript:
            return self.is_tensor(expr.value, scope, depth + 1)
        return False

    def _backward_receivers(self, scope) -> Set[str]:
        names = self._backward.get(scope)
        if names is None:
            names = {info.node.func.value.id for info in self.index.calls_by_name.get("backward", ())
                     if type(info.node.func) is ast.Attribute and type(info.node.func.value) is ast.Name
                     and info.function is scope}
            self._backward[scope] = names
        return names


def _ast_is_host_value(value: ast.AST) -> bool:
    """A number or string literal, an f-string, or a call of a host function (``len``, ``.item()``)."""
    if type(value) is ast.Constant:
        return type(value.value) in (int, float, str)  # LibCST: Integer, Float, SimpleString (not True/None)
    if type(value) is ast.JoinedStr:
        return True
    return type(value) is ast.Call and ast_call_name(value) in _HOST_CALLS


def _ast_mentions(node: ast.AST, name: str) -> bool:
    """``names_in(node, name)``: LibCST's names include attribute, keyword and parameter names."""
    for inner in ast.walk(node):
        kind = type(inner)
        if (kind is ast.Name and inner.id == name) or (kind is ast.Attribute and inner.attr == name) or (
                kind is ast.keyword and inner.arg == name) or (kind is ast.arg and inner.arg == name):
            return True
    return False


def _ast_walk_training_body(loop: ast.AST, training: Set[int], reached: Set[int]) -> List[ast.AST]:
    """Adds to ``reached`` the calls of the loop's body that no logging guard holds, stopping at nested defs
    and at the bodies of nested training loops (their own walk: a guard counts only inside the innermost
    training loop); returns the values formatted into strings outside logging guards (``check_formatting``)."""
    formatted: List[ast.AST] = []
    stack = [(node, False) for node in loop.body + loop.orelse]
    while stack:
        node, guarded = stack.pop()
        kind = type(node)
        if kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda):
            continue
        if kind is ast.Call:
            if not guarded:
                reached.add(id(node))
                func = node.func
                if type(func) is ast.Attribute and func.attr == "format" and (
                        type(func.value) is ast.JoinedStr or (type(func.value) is ast.Constant
                                                              and isinstance(func.value.value, (str, bytes)))):
                    formatted += [_unstarred(arg) for arg in node.args] + [k.value for k in node.keywords]
        elif kind is ast.If:
            stack.append((node.test, guarded))
            inner = guarded or _ast_is_logging_guard(node.test)
            stack.extend((child, inner) for child in node.body)
            stack.extend((child, guarded) for child in node.orelse)
            continue
        elif id(node) in training:
            header = [node.test] if kind is ast.While else [node.target, node.iter]
            stack.extend((child, guarded) for child in header)
            continue
        elif not guarded and kind is ast.JoinedStr:
            formatted += [part.value for part in node.values if type(part) is ast.FormattedValue]
        elif not guarded and kind is ast.BinOp and type(node.op) is ast.Mod and _ast_is_text(node.left):
            right = node.right
            formatted += [_unstarred(e) for e in right.elts] if type(right) is ast.Tuple else [right]
        stack.extend((child, guarded) for child in ast.iter_child_nodes(node))
    return formatted


def _ast_is_logging_guard(test: ast.AST) -> bool:
    """``_is_logging_guard``, on the names LibCST's walk yields (names, attribute names, keyword names)."""
    for node in ast.walk(test):
        kind = type(node)
        if kind is ast.BinOp and type(node.op) is ast.Mod:
            return True
        name = node.id if kind is ast.Name else node.attr if kind is ast.Attribute else (
            node.arg if kind is ast.keyword else None)
        if name and _GUARD_NAME.search(name):
            return True
    return False


def _ast_one_plain_arg(call: ast.Call) -> bool:
    """LibCST's ``len(call.args) == 1 and not call.args[0].keyword`` (``*a`` and ``**k`` are args there)."""
    if len(call.args) + len(call.keywords) != 1:
        return False
    return not call.keywords or call.keywords[0].arg is None


def _ast_is_training(loop, steps: Set[str]) -> bool:
    """``_Checker.is_training``."""
    if loop.is_training:
        return True
    for call in loop.direct_calls if steps else ():
        func = call.func
        if (type(func) is ast.Name and func.id in steps) or (
                type(func) is ast.Attribute and type(func.value) is ast.Name and func.value.id == "self"
                and func.attr in steps):
            return True
    return False


def _ast_is_text(node: ast.AST) -> bool:
    """``_is_text``: a string literal, or one built from literals with ``+`` and ``*``."""
    if type(node) is ast.JoinedStr or (type(node) is ast.Constant and isinstance(node.value, (str, bytes))):
        return True
    return type(node) is ast.BinOp and type(node.op) in (ast.Add, ast.Mult) and (
        _ast_is_text(node.left) or _ast_is_text(node.right))


def _ast_may_return_sync(index: AstIndex, steps: Set[str], tensors: "_AstTensors") -> bool:
    """``check_method``'s other case (``per_step_return``): ``.item()``/``.tolist()``/``.cpu()`` of a tensor
    outside any loop in a step function."""
    for name in ("item", "tolist", "cpu"):
        for info in index.calls_by_name.get(name, ()):
            call = info.node
            if type(call.func) is ast.Attribute and not call.args and not call.keywords and info.loop is None \
                    and type(info.function) in (ast.FunctionDef, ast.AsyncFunctionDef) and info.function.name in steps \
                    and not _ast_chain_has_sync(call.func.value) and tensors.is_tensor(call.func.value, info.function):
                return True
    return False