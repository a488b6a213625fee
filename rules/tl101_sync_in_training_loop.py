"""TL101: host-device synchronisations in every step of a training loop."""

from __future__ import annotations

import ast
import bisect
import re
from functools import partial
from typing import TYPE_CHECKING, Callable, Dict, Iterator, List, Optional, Set, Tuple, Union

import libcst as cst

from torchlint.facts.index import (
    COMPREHENSIONS, AstIndex, AstLoopInfo, AstScope, StatementLine, call_arguments, call_name, dotted_name,
    names_spelled, source_order, spells_name, target_names, walk,
)
from torchlint.fix.comments import DROPS_COMMENT, loses_comment
from torchlint.facts.arrays import numpy_source
from torchlint.facts.grad_mode import disables_grad
from torchlint.facts.guards import is_logging_guard
from torchlint.facts.loaders import iterates_loader
from torchlint.facts.devices import cpu_loop, on_cpu, runs_on_cpu
from torchlint.facts.steps import StepFacts, runs_once_in, step_facts, step_place
from torchlint.facts.syncs import SYNC_METHODS, chain_has_sync, is_sync_call
from torchlint.rule import Applicability, Fix, FixAvailability, ImportRequest, IndexContext, Rewrite, Rule
from torchlint.facts.text_gates import TRAINING_WORDS, call_text, may_train, search_method, search_word

if TYPE_CHECKING:
    from torchlint.fix.analysis import FileAnalysis

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
# Functions outside `torch.` itself that return a tensor (the total norm that gradient clipping measures).
_TENSOR_FUNCS = {"torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_norm", "torch.nn.utils.get_total_norm",
                 "torch.linalg.norm", "torch.linalg.vector_norm", "torch.linalg.matrix_norm"}
# Calls that only show, store or collect a value: a sync whose value ends up here is a slowdown to remove.
_SINK_METHODS = {
    "append", "extend", "add", "update", "add_scalar", "add_scalars", "log", "log_metrics", "log_dict",
    "info", "debug", "warning", "warn", "error", "set_postfix", "set_postfix_str", "set_description",
    "write", "insert", "record", "put", "setdefault",
}
_SINK_FUNCTIONS = {"print"}
# TensorBoard's writers and the methods that make a NumPy value of a tensor argument (torch's summary.scalar /
# histogram and tensorboardX's call make_np: `.cpu().numpy()`): (position, keyword) of that argument.
_SUMMARY_WRITERS = {"torch.utils.tensorboard.SummaryWriter", "torch.utils.tensorboard.writer.SummaryWriter",
                    "tensorboardX.SummaryWriter", "tensorboardX.writer.SummaryWriter"}
_SUMMARY_METHODS = {"add_scalar": (1, "scalar_value"), "add_scalars": (1, "tag_scalar_dict"),
                    "add_histogram": (1, "values")}
# torch functions that make a tensor of a host number: a sync whose value only goes back into one is a round trip.
_BACK_TO_TENSOR = {"torch.tensor", "torch.as_tensor", "torch.scalar_tensor"}
# Calls that pass a value through unchanged in kind (a number stays a number): follow them outwards.
_TRANSPARENT_FUNCTIONS = {"float", "int", "round", "abs", "str", "format", "repr", "min", "max", "sum"}
# Calls that end the program: a sync just before one runs once.
_EXIT_CALLS = {"sys.exit", "exit", "quit", "os._exit", "builtins.exit", "builtins.quit"}
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
    ``.format(``, a SummaryWriter's ``.add_scalar(``/``.add_scalars(``/``.add_histogram(`` or an f-string: the
    plain spellings first (nearly every file that has one has those)."""
    if "%" in text or "print(" in text or any("." + name + "(" in text for name in SYNC_METHODS):
        return True
    if any(search_method(call_text(name), text) for name in (*SYNC_METHODS, "format", *_SUMMARY_METHODS)
           if name in text):
        return True
    if any(search_word(pattern, text) for pattern in _CONVERSION_CALL_TEXTS):
        return True
    return any(search_word(pattern, text) for pattern in _FSTRING_TEXTS if pattern.pattern[:-5] in text)


class SyncInTrainingLoop(Rule):
    """## What it does
    Flags host-device synchronisations inside a training loop (a loop whose own body calls `.backward()` or
    `optimizer.step()`, including loops nested in that body): `.item()`, `.tolist()`, `.cpu()`, `.numpy()`,
    `float()` / `int()` / `bool()` of a tensor, `print()` of a tensor (also formatted into the printed text:
    an f-string, `"...".format(x)`, `"..." % x`; the total norm `clip_grad_norm_` returns is a tensor), and a tensor
    handed to a TensorBoard writer: `add_scalar(tag, value)`, `add_scalars(tag, {...})` and
    `add_histogram(tag, values)` of a `SummaryWriter` (of `torch.utils.tensorboard` or tensorboardX, in
    any import spelling; recognised by the call that builds it, `writer = SummaryWriter(...)` or
    `self.writer = SummaryWriter(...)`, never by its name) turn the tensor into a NumPy value
    (`.detach().cpu().numpy()`) before they return.

    A call only counts as a tensor conversion when its argument is evidently a tensor in that function: a name
    on which `.backward()` is called, or one bound to a model output (`model(x)`), a loss (`criterion(...)`,
    `F.cross_entropy(...)`), a `torch.*` result, or a tensor method of those (`out.argmax(1)`, `x.sum()`);
    `.grad` of such a tensor or of a parameter that a loop over `m.parameters()` / `m.named_parameters()`
    draws (`for name, p in model.named_parameters(): ... p.grad.norm()`).
    `float(lr)` and `print(epoch)` are not flagged. NumPy arrays and raw batches straight from the
    `for x, y in loader` target (still on the CPU; also through tensor methods that keep the device,
    `x.float().mean()`, and as an element a comprehension draws from it, `[i.item() for i in ids]`) are not
    flagged either, nor is a read of a tensor the file
    shows lives on the CPU (`w[0].item()`, `float(w)`): a name every binding of which, anywhere in the file,
    is a torch factory given no device or a CPU one (`w = torch.zeros(2)`; `torch.tensor(...)` only of
    literal numbers, as a tensor given as data keeps its device), that the file never moves (`w.to(...)`,
    `w.cuda()`, `w.data = ...`, `w.set_(...)`), in a file that sets no default device
    (`torch.set_default_device`, `with torch.device(...)`) and star-imports nothing; likewise a batch a
    Hugging Face tokenizer or processor returns (a call given `return_tensors="pt"`), read before any move
    (`tok(text, return_tensors="pt")["input_ids"][0].tolist()`).
    Test files (pytest files, files under `tests/`, `test/` or `testing/`) are not checked: their speed does
    not matter.

    It stays silent where the host value is load-bearing: a value that decides Python control flow (an `if` /
    `while` / `assert` test, `break` on `loss < 1e-3`, `if not math.isfinite(loss.item()): sys.exit(1)`), an
    index, or the argument of a call that needs a Python number (`env.step(action.item())`,
    `range(n.item())`), also through a variable (`v = loss.item(); if v > best: ...`). Those syncs are needed.
    A variable counts only where its host value can be read: with `loss = loss.item()` at the end of the step,
    `dist.all_reduce(loss)` earlier in the step reads the tensor that `loss = criterion(...)` bound before it on
    every iteration, not the number (an unpacking, `acc1, acc5 = accuracy(...)`, binds the names the same
    way); a test at the top of the loop that runs before anything binds the name again, or after a binding
    that only some iterations make (under an `if`), may read the previous step's number, and keeps the sync.

    Logging guards: a sync inside the body of an `if` whose test uses `%` (`if step % log_every == 0:`,
    `if (i + 1) % 100 == 0:`, `if divisible_by(step, every):`) or names logging (`if should_log:`,
    `if args.verbose:`), also through a variable set once to such a test (`is_metric_step = i % every == 0`
    then `if is_metric_step:`), runs every N steps, not every step; it is deliberately not reported. So does a
    sync after the inverted guard in its block, `if not should_log: return` (or `continue`). The `else`
    branch of such an `if` is checked as usual, except where the test is one that guards every backward
    pass and optimizer step of the loop (`if is_train: loss.backward(); optimizer.step()` and later `if
    is_train: ... else: writer.add_scalar("val_loss", loss.item())`, a shared train/validation loop whose
    test the loop never rebinds): that `else` runs in the iterations that train nothing.

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
    also when its body calls a function of the same file that runs `backward()` or `optimizer.step()` outside
    a loop of its own (a `def backward_pass(loss): ...` closure; a `train_one_epoch()` with its own batch loop
    runs once per epoch, not per step), or a method that does, directly or through the calls it makes
    (`agent.update(batch)` with `agent = Agent(...)`, `self.trainer.optimize(opt)` with `self.trainer =
    Trainer(...)`, of a class of the file or of another file of the project); a method of a class of the file is
    a step also where the file hands an object of the class to a function of another project file whose loop
    calls that method and the method steps (`loop_utils.train_agent(env, Agent(), n)` calling `agent.update(...)`
    per iteration: the message names that loop); and `return loss.item()` from such a step function is reported
    when every loop that calls it only shows or sums the result. A loop that leaves after its first iteration
    (`for x, y in loader: ...; break`) is no training loop: it runs once.

    Syncs in the file's functions that a training step calls are reported too, where the sync is, and the
    message names the training loop that reaches the function: a gradient-norm helper that calls `.item()`
    once per parameter, a metric recorder handed `loss` (`recorder.update(loss)` with
    `recorder = Recorder()` a class of the file, `self.record(loss)` in the same class, `self.meter.add(loss)`
    with `self.meter = Meter()`), and whatever those call in turn. A def the loop hands to a function that
    calls it once (a timing wrapper: `timed(step)` with `def timed(fn): out = fn(); ...`, of the file or of
    another project file, `gpu_timer(train_step)`) runs every iteration too; one handed to a function that keeps
    it for later or calls it only under a condition does not, and the wrapper's value is not the def's. A host value such a function returns counts as
    its callers use it: `n_correct = ....sum().item(); return loss, n_correct` is reported where every call of
    the function in the file only shows, stores or sums that value (`loss, hits, seen = score(...)` then
    `total += hits`), and not where a caller needs it in Python, keeps the result whole (`result = score(...)`),
    or the function is named otherwise than by those calls (handed around as a value). A module-level
    function of the file that a training loop of another project file calls every iteration
    (`acc = calculate_accuracy(out, y)` in `training.py`'s batch loop, `from utils import calculate_accuracy`)
    is reached the same way; a value it returns counts as shown there only where that loop drops it or passes
    it to a collecting or logging call (`meters.update(acc, n)`, `print(...)`), or sums it into a running total
    that loop reads nowhere else (`acc += get_accuracy(sr, gt)`, read after the loop: a tensor sum would do);
    any other sum there, whose use is out of sight, keeps it silent. The function may also be taken by the
    loop's file through its one star import of a project module (`from evaluation import *`). A method of the file's class that such a loop calls every iteration is judged
    the same way, element by element for a returned tuple unpacked into names there (`return loss_a.item(),
    loss_b.item()` with `a, b = agent.update(...)` in `main.py`, each name only logged: both reported; a name
    tested there, or the result kept whole, `out = agent.update(...)`, or unpacked with a `*rest`: that
    element silent). A value formatted into text there (`"loss {:.3f}".format(a)`, `f"{a}"`, `"%.3f" % a`) is
    shown too, and the class may come through a package that re-exports it (`from pkg import algo` then
    `agent = algo.Agent(...)`, with `from .agent import Agent` in `pkg/algo/__init__.py`). The step may be in another file of the
    project: where `main.py`'s loop calls `policy.train(batch)` every iteration with `policy = TD3.TD3(...)`
    (`import TD3`), the reads that `TD3.py`'s `train()` reaches are reported in `TD3.py`, once, and the
    message names the loop by its file and line (`the training loop at main.py:112 reaches it`); `TD3.py`
    checked alone (pre-commit) reads that loop off `main.py`. A Lightning Trainer calls `training_step` of a
    `LightningModule` subclass (`pytorch_lightning` or `lightning`, as the file imports it) once per batch:
    the reads it reaches, through `self.<method>()` calls, are reported naming Lightning's `Trainer.fit()`
    (other hooks, `validation_step` and the epoch-end ones, are not steps). Not followed: a call under a logging guard or in a branch that runs a few times, a call
    before or after the loop (set-up), and a function with a training loop of its own.

    Code that runs a few times over the whole run is not every step: the body of an `if` that tests the
    training loop's own counter (its `for` target or a `step += 1` of its body) for a few values
    (`if i < 5:`, `if step == 0:`, `if epoch == 0 and i == 0:`, at most 10 values; `if step == total_steps:`
    where the loop does not move `total_steps`; `if epoch == 0:` inside the batch loop runs every step of
    the first epoch and is checked).

    A CPU program gets no finding: a script (a `__main__` guard, a module-level training loop, or a
    module-level call of a function of the file that runs one, directly or through the file's other
    functions, as a notebook's `train()`) with no
    `.cuda`, no string that names CUDA or NCCL (docstrings and `help=` texts are prose and do not count),
    no integer device, no import of a framework that places work on a GPU (Accelerate, Lightning,
    DeepSpeed, transformers...) or of `torch.distributed` / `torch.cuda`, and no device that could be
    CUDA (a `device` parameter of a function the file never calls, or calls with such a device; a device
    from a config, a call's result). `device = "cuda" if torch.cuda.is_available() else "cpu"` is CUDA; an
    argparse option `--device` counts by its default, so `default="cpu"` with no CUDA anywhere is the CPU.
    Nor does a loop at the top level of a script or a notebook that can only compute on the CPU: nothing in
    it or in a module-level def it calls moves or makes anything on a device, and no module-level name it
    reads (the model, the data) was moved since its last binding above the loop (a tutorial's first model,
    sent to the GPU only in a later cell; `facts.devices.cpu_loop`).
    A file that only defines training functions for others to call is checked as before, unless it too
    passes those tests and every project file that imports it is a program (a notebook, or a script with a
    `__main__` guard) that, with every project module it imports, names no GPU (no `cuda`, `nccl` or GPU
    framework in its text): a tutorial's `fc_model.py` that only CPU notebooks call runs on the CPU with them.

    Nor is a read right after `torch.cuda.synchronize()` (the statements between queue no GPU work, as in a
    timing section; the read may sit in an `if` or `with` whose header queues none either, and the
    synchronize under `if device_type == "cuda":`): the synchronize has waited for the GPU already and is
    the per-step cost (TL105 reports it), the read waits for nothing; reporting both would count one wait
    twice. So is a read right after a call of a def of the file that ends with a read it needs after all
    of its GPU work (`loss = self.update_model()`, whose last steps are `priorities =
    errors.cpu().numpy()` handed to a replay buffer, then host work: NumPy, a def that never names torch).
    A host value that only goes
    back into a tensor (`torch.tensor(running, device=device)` to all-reduce it) or is only tested against
    `None` is not load-bearing: the read is reported.

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
    text_gate = (TRAINING_WORDS,)

    @classmethod
    def may_fire(cls, text: str, settings) -> bool:
        return (may_train(text) or ("LightningModule" in text and "training_step" in text)) \
            and _may_sync_or_format(text)  # (a Lightning Trainer runs `training_step` every step: `facts.steps`)

    def detect(self, ctx: IndexContext) -> None:
        _Detector(ctx).run()


class _Detector:
    """One file's findings. Nodes are the index's ``ast`` nodes; ``scope`` is the def or lambda around an
    expression, or the module."""

    def __init__(self, ctx: IndexContext) -> None:
        self.ctx = ctx
        self.index: AstIndex = ctx.index
        self._backward_names: Optional[Dict[AstScope, Set[str]]] = None  # scope -> names `.backward()` is called on
        # statement -> [(node, message, what, rewrite)]: one finding per statement, listing its syncs
        self._found: dict = {}
        # Per-loop indexes, built on first use (the read-before and name-use questions over a whole loop).
        self._reads_by_loop: dict = {}
        self._names_by_node: dict = {}
        self._name_parents: dict = {}  # a Name (a leaf: the index keeps no parent for it) -> its parent
        self._loads_of_name: dict = {}
        self._mentions_by_block: dict = {}
        self._codes: dict = {}  # statement -> its StatementCode, for quoting
        self.steps: StepFacts = step_facts(ctx.index, ctx.project)
        # a sync in a function a step calls -> (that function, the step loop): named in the message
        self._via: dict = {}
        self._synchronized: dict = {}  # a compound statement -> its statements right after a synchronize
        self._guarded_below: dict = {}  # (child, loop) -> whether an ancestor of child up to loop guards it
        self._exit_guards: dict = {}  # (id of a block's owner, field) -> where its statements stand, and the first
        # `if not <logging guard>: return` among them
        self._returned_memo: dict = {}  # (def, position, size) -> where its callers take a returned host value
        self._spellings: Optional[dict] = None  # name -> how often the file spells it (``_spelled``)
        self._drained: dict = {}  # def -> whether it ends with a needed sync after its GPU work (``_ends_drained``)
        self._step_guards: dict = {}  # (loop, a test's dump) -> whether it guards every step of the loop

    def run(self) -> None:
        index = self.index
        if not self.steps.has_steps() or runs_on_cpu(self.ctx):
            return  # no training step, or a CPU program: nothing waits for a GPU
        for name in SYNC_METHODS:
            for info in index.calls_by_name.get(name, ()):
                self.check_method(info.node, name)
        for name in _CONVERSIONS:
            for info in index.calls_by_name.get(name, ()):
                self.check_conversion(info.node, name)
        for info in index.calls_by_name.get("print", ()):
            self.check_print(info.node)
        for loop in index.loops:
            if self.is_training(loop) and not any(self.is_training(o) for o in index.enclosing_loops(loop.node)):
                self.check_formatting(loop)  # outermost training loops only
        for method in _SUMMARY_METHODS:
            for info in index.calls_by_name.get(method, ()):
                self.check_summary(info.node, method)
        self.flush()

    def report(self, node: ast.AST, message: str, what: str, rewrite: Optional[Rewrite] = None) -> None:
        statement = self.index.enclosing_statement(node) or node
        self._found.setdefault(statement, []).append((node, message + self._reached_by(node), what, rewrite))

    def _reached_by(self, node: ast.AST) -> str:
        """For a sync in a function that a step calls: which function, and the step loop's line."""
        via = self._via.get(node)
        if via is None:
            return ""
        function, loop = via
        return f" (`{function.name}()` runs every step: the training loop at {step_place(loop)} reaches it)"

    def flush(self) -> None:
        for found in self._found.values():
            found.sort(key=lambda item: source_order(item[0]))
            if len(found) == 1:
                node, message, _, rewrite = found[0]
                self.ctx.report(node, message=message, rewrite=rewrite)
                continue
            whats: List[str] = []
            for item in found:
                if item[2] not in whats:
                    whats.append(item[2])
            listed = ", ".join(whats[:-1]) + " and " + whats[-1] if len(whats) > 1 else whats[0]
            self.ctx.report(found[0][0], message=(
                f"{len(found)} host-device syncs in one statement ({listed}) wait for the GPU every training "
                "step; keep the values on the device and read them once, or every N steps"
                + self._reached_by(found[0][0])))

    # --- which loops train --------------------------------------------------------------------------
    def is_training(self, loop: AstLoopInfo) -> bool:
        return loop.node in self.steps.step_loops

    def per_step_return(self, call: ast.Call, top: ast.AST) -> bool:
        """``return loss.item()`` at the end of a step function (it calls ``backward()`` or ``step()``, not in
        a loop) that the file calls in a loop, where every such caller only shows or sums the result."""
        index = self.index
        node = top
        while type(index.parent(node)) is ast.Tuple:
            node = index.parent(node)
        if type(index.parent(node)) is not ast.Return or next(index.enclosing_loops(call), None) is not None:
            return False
        function = index.function_of(call)
        if type(function) not in (ast.FunctionDef, ast.AsyncFunctionDef) \
                or function.name not in self.steps.step_functions:
            return False
        callers = [info.node for info in index.calls_by_name.get(function.name, ())
                   if self.steps.calls_step(info.node) and call_name(info.node) == function.name]
        in_loops = [(c, next(index.enclosing_loops(c), None)) for c in callers]
        in_loops = [(c, loop) for c, loop in in_loops if loop is not None]
        if not in_loops or len(in_loops) != len(callers):
            return False
        return all(self._destination(c, loop, follow=True) == "sink" for c, loop in in_loops)

    def _training_loop(self, node: ast.AST) -> Optional[AstLoopInfo]:
        """The training loop around ``node``, unless ``node`` runs only a few times in it (``if step == 0:``)
        or sits in an evaluation block nested in it: a ``with torch.no_grad()`` / ``inference_mode()`` block
        that runs its own loop or calls ``.eval()``. Outside a training loop, in a function that a step calls
        every time (``facts.steps``): the loop around ``node`` in that function, else the function itself
        (as a loop of one iteration; the step loop that reaches it is named in the message)."""
        index = self.index
        loop = self.steps.step_loop_around(self.index, node)
        if loop is None:
            return self._reached_region(node)
        if runs_once_in(index, node, loop) or cpu_loop(index, loop):
            return None  # (a few times only; or a top-level loop that computes on the CPU)
        for ancestor in index.ancestors(node):
            if ancestor is loop.node:
                break
            if type(ancestor) in (ast.With, ast.AsyncWith) and disables_grad(index, ancestor) \
                    and self._is_evaluation_block(ancestor):
                return None
        return loop

    def _reached_region(self, node: ast.AST) -> Optional[AstLoopInfo]:
        reached = self.steps.reaching_step(self.index, node)
        if reached is None:
            return None
        function, step = reached
        self._via[node] = reached
        inner = next(self.index.enclosing_loops(node), None)
        return inner if inner is not None else AstLoopInfo(function, function, None)  # type: ignore[arg-type]

    def _is_evaluation_block(self, statement: Union[ast.With, ast.AsyncWith]) -> bool:
        """A no-grad block that evaluates: it loops (over a validation set, sampling steps) or calls ``.eval()``."""
        if any(type(node) in (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.GeneratorExp)
               for child in statement.body for node in ast.walk(child)):
            return True
        return any(call_name(info.node) == "eval" and not info.node.args and not info.node.keywords
                   for child in statement.body for info in self.index.calls_in(child))

    # --- the three kinds of sync ----------------------------------------------------------------------
    def check_method(self, call: ast.Call, name: str) -> None:
        index = self.index
        if type(call.func) is not ast.Attribute or call.args or call.keywords:
            return
        recv = call.func.value
        loop = self._training_loop(call)
        if loop is None or call in self._via:
            if name in ("item", "tolist", "cpu") and not chain_has_sync(recv) \
                    and self.is_tensor(recv, index.scope_of(call)) and not on_cpu(index, recv) \
                    and self.per_step_return(call, self._chain_top(call)):
                what = f"`{self._short(recv, call)}.{name}()`"
                self._via.pop(call, None)  # the message names the step already
                self.report(call, f"{what} is returned by a training step the loop calls every iteration: it waits "
                                  "for the GPU every step; return the tensor (`.detach()`) and read it every N steps",
                            what)
                return
            if loop is None:
                return
        if chain_has_sync(recv):
            return  # `x.cpu().numpy()`: reported once, at `.cpu()`
        if self._host_from_reached_def(recv):
            return  # `to_cpu(loss).item()`: the wait is the helper's `.cpu()`, reported there, naming this step
        scope = index.scope_of(call)
        if numpy_source(index, recv, scope) is not None or self._is_raw_batch(recv, loop, call) \
                or on_cpu(index, recv):
            return  # a NumPy array, a batch the loader made, a tensor the file keeps on the CPU
        if name == "cpu" and _is_module(recv):
            return
        if name == "numpy" and not self.is_tensor(recv, scope):
            return  # `.numpy()` needs a CPU tensor: only a sync when it follows device work we can see
        top = self._chain_top(call)
        if not self._is_slowdown(top, loop):
            return
        if self._read_before(call, recv, loop):
            return  # the step already waited for this value: this read finds it ready
        if self._after_synchronize(call):
            return  # `torch.cuda.synchronize()` just waited for the GPU: the wait is its (TL105), not this read's
        text = self._short(recv, call)
        fix = self._accumulation_fix(call, top, loop) if name == "item" else None
        if fix is not None:
            acc, make = fix
            detached = text if _is_detach_call(recv) else f"{text}.detach()"
            message = (f"`{acc} += {text}.item()` waits for the GPU every step; accumulate on the device "
                       f"(`{acc} += {detached}`) and convert once after the loop")
            self.report(call, message, f"`{text}.item()`", Rewrite(make, message + " ({reason})", call))
            return
        what = f"`{text}.{name}()`"
        self.report(call, f"{what} waits for the GPU every training step; keep the value on the "
                          "device (accumulate with `.detach()`) and read it once, or every N steps", what)

    def _host_from_reached_def(self, recv: ast.expr) -> bool:
        """``recv`` calls defs of the file that a step reaches (their syncs are reported there) and that
        return only values already read to the host (``return tensor.detach().cpu()``)."""
        callees = self.steps.callees_of(recv) if type(recv) is ast.Call else []  # type: ignore[arg-type]
        if not callees or any(callee not in self.steps.reached for callee in callees):
            return False
        for callee in callees:
            returns = [node for node in walk(callee) if type(node) is ast.Return
                       and self.index.function_of(node) is callee]
            if not returns or any(r.value is None or not chain_has_sync(r.value) for r in returns):
                return False
        return True

    def _read_before(self, call: ast.Call, recv: ast.expr, loop: AstLoopInfo) -> bool:
        """An earlier, load-bearing sync of the same value (``if last.item() < tol:`` ... ``print(last.item())``)
        runs in every iteration of ``loop`` before ``call``, and nothing in between can queue GPU work: the
        first read has to stay and has waited already, so this one costs no wait of its own. (Two reads that
        only show the value are both reported: removing the first makes the second the one that waits.)

        Only the latest such read needs testing: what lies between an earlier one and ``call`` holds what lies
        between the latest one and ``call`` (two reads of one receiver never nest). The loop's calls, their
        GPU work as a running count and the load-bearing reads by receiver are indexed once per loop, so a
        loop of N reads costs O(N), not a walk over every pair."""
        index = self.index
        reads = self._loop_reads(loop)
        before = bisect.bisect_left(reads.orders, source_order(call))  # calls[:before] come before ``call``
        earlier = self._load_bearing_reads(loop, reads, self._code(recv, call))
        count = bisect.bisect_left(earlier, before)
        if not count:
            return False
        latest = earlier[count - 1]
        after = min(latest + len(index.calls_in(reads.calls[latest])), before)  # past the calls inside that read
        queued = reads.gpu_counts[before] - reads.gpu_counts[after]
        for ancestor in index.ancestors(call):  # calls around ``call`` are not "in between"
            at = reads.position.get(ancestor) if type(ancestor) is ast.Call else None
            if at is not None and after <= at < before and not _queues_no_gpu_work(ancestor):
                queued -= 1
        return queued == 0

    def _after_synchronize(self, call: ast.Call) -> bool:
        """The statement holding ``call`` follows a ``synchronize()`` statement in its block with nothing in
        between that can queue GPU work (``torch.cuda.synchronize(); t = time.time(); print(loss.item())``),
        also inside an ``if`` that so follows one and whose test queues none (``if master: print(...)``):
        the GPU is idle already, so the read waits for nothing. Each block is scanned once."""
        index = self.index
        statement = next((a for a in (call, *index.ancestors(call)) if isinstance(a, ast.stmt)), None)
        if statement is None:
            return False
        # the ifs around the statement whose blocks are not scanned yet, innermost first: scanned outermost
        # first, each block starting "waited" where its if follows a synchronize (no recursion: elif chains)
        owners = []
        owner = index.parent(statement) or index.tree
        while owner not in self._synchronized:
            owners.append(owner)
            if type(owner) not in _PASSES_WAIT:
                break
            owner = index.parent(owner) or index.tree
        for owner in reversed(owners):
            inherited = type(owner) in _PASSES_WAIT \
                and owner in self._synchronized.get(index.parent(owner) or index.tree, ()) \
                and all(_queues_no_gpu_work(info.node) for part in _header(owner) for info in index.calls_in(part))
            self._synchronized[owner] = self._ready_after_synchronize(owner, inherited)
        return statement in self._synchronized[index.parent(statement) or index.tree]

    def _ready_after_synchronize(self, owner: ast.AST, inherited: bool) -> set:
        """The statements of ``owner``'s blocks that run after a ``synchronize()`` with no GPU work queued
        since (``inherited``: the block starts so)."""
        ready = set()
        for block in (getattr(owner, name, None) for name in ("body", "orelse", "finalbody")):
            waited = inherited
            for here in block if type(block) is list else ():
                if waited:
                    ready.add(here)
                if _synchronizes(here) or (type(here) is ast.If and not here.orelse and _synchronizes(here.body[-1])
                                           and all(_queues_no_gpu_work(info.node)
                                                   for info in self.index.calls_in(here.test))):
                    waited = True  # (`if device_type == "cuda": torch.cuda.synchronize()`: the CPU waits for nothing)
                elif self._drained_by(here):
                    waited = True  # (`a, b = self.update_model()`, which ends with a sync it needs)
                elif any(not _queues_no_gpu_work(info.node) for info in self.index.calls_in(here)):
                    waited = False
        return ready

    def _drained_by(self, statement: ast.stmt) -> bool:
        """``statement`` runs defs of the file that end with a sync they need, after their last GPU work
        (``_ends_drained``): ``actor_loss, critic_loss = self.update_model()``, whose last steps are
        ``priorities = td_error.cpu().numpy()`` for a replay buffer and host work. A read right after finds the
        GPU idle, as after a ``synchronize()``."""
        if type(statement) not in (ast.Expr, ast.Assign) or type(statement.value) is not ast.Call:  # type: ignore[attr-defined]
            return False
        call = statement.value  # type: ignore[attr-defined]
        callees = self.steps.callees_of(call)
        if not callees or any(not _queues_no_gpu_work(info.node) for info in self.index.calls_in(call)
                              if info.node is not call):
            return False
        return all(self._ends_drained(callee) for callee in callees)

    def _ends_drained(self, function: ast.AST) -> bool:
        """The def's body ends, at its top level, with a statement that reads a value to the host (a sync
        whose calls are all syncs or host work) followed only by host work (``_host_only``)."""
        memo = self._drained.get(function)
        if memo is None:
            self._drained[function] = False  # (recursion: a def that runs itself is not known to end drained)
            memo = False
            body = getattr(function, "body", [])
            for at in range(len(body) - 1, -1, -1):
                statement = body[at]
                calls = [info.node for info in self.index.calls_in(statement)]
                if type(statement) not in (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return):
                    break  # a branch or a loop: what runs last is not in sight
                if any(is_sync_call(c) for c in calls):  # the read: the GPU is idle after it, if nothing else queues
                    memo = all(is_sync_call(c) or self._host_only(c) for c in calls) \
                        and _needed_after(statement, body[at + 1:])
                    break
                if not all(self._host_only(c) for c in calls):
                    break
            self._drained[function] = memo
        return memo

    def _host_only(self, call: ast.Call) -> bool:
        """``call`` queues no GPU work: a call that only shows, stores or converts (``_queues_no_gpu_work``), a
        NumPy call, a call on a value already read to the host (``x.cpu().numpy().squeeze()``), or a call of
        defs of the file that never name torch (a replay buffer's ``update_priorities``)."""
        if _queues_no_gpu_work(call) or (self.index.qualified_name(call.func) or "").startswith("numpy."):
            return True
        if type(call.func) is ast.Attribute and chain_has_sync(call.func.value):
            return True
        callees = self.steps.callees_of(call)
        return bool(callees) and all(_names_no_torch(callee) for callee in callees)

    def _loop_reads(self, loop: AstLoopInfo) -> "_LoopReads":
        reads = self._reads_by_loop.get(loop.node)
        if reads is None:
            calls = [info.node for statement in loop.node.body for info in self.index.calls_in(statement)]
            reads = self._reads_by_loop[loop.node] = _LoopReads(calls, self)
        return reads

    def _load_bearing_reads(self, loop: AstLoopInfo, reads: "_LoopReads", text: str) -> List[int]:
        """The reads of receiver ``text`` that run every iteration and whose value Python needs, in order."""
        found = reads.load_bearing.get(text)
        if found is None:
            found = reads.load_bearing[text] = [
                at for at in reads.by_receiver.get(text, ())
                if self._every_iteration(reads.calls[at], loop)
                and self._destination(self._chain_top(reads.calls[at]), loop, follow=True) == "load"
            ]
        return found

    def _every_iteration(self, node: ast.AST, loop: AstLoopInfo) -> bool:
        """``node`` runs whenever an iteration of ``loop`` runs: no branch, inner loop, comprehension,
        short-circuit or nested def between it and the loop (an ``if`` test always runs)."""
        child = node
        for ancestor in self.index.ancestors(node):
            if ancestor is loop.node:
                return True
            if type(ancestor) is ast.If and child is not ancestor.test:
                return False
            if type(ancestor) in _BRANCHING:
                return False
            child = ancestor
        return False

    def check_conversion(self, call: ast.Call, name: str) -> None:
        index = self.index
        if type(call.func) is not ast.Name or name in index.imports or len(call.args) + len(call.keywords) != 1 \
                or (call.keywords and call.keywords[0].arg is not None):
            return  # one argument without a keyword (`float(*x)` and `float(**x)` count)
        loop = self._training_loop(call)
        if loop is None:
            return
        arg = _unstarred(call.args[0]) if call.args else call.keywords[0].value
        if not self.is_tensor(arg, index.scope_of(call)) or self._is_raw_batch(arg, loop, call) \
                or on_cpu(index, arg) or not self._is_slowdown(call, loop):
            return
        what = f"`{name}({self._short(arg, call)})`"
        self.report(call, f"{what} copies a tensor to the host and waits for the GPU "
                          "every training step; keep it on the device and convert once, or every N steps", what)

    def check_print(self, call: ast.Call) -> None:
        index = self.index
        if type(call.func) is not ast.Name or "print" in index.imports:
            return
        loop = self._training_loop(call)
        if loop is None or self._guarded(call, loop) or self._after_synchronize(call):
            return  # (after a `synchronize()`, what it prints is ready: the wait was the synchronize's)
        scope = index.scope_of(call)
        for keyword, value in call_arguments(call):
            if keyword is not None:
                continue
            shown = self._printed_tensor(value, scope, loop, call)
            if shown is not None:
                text = self._short(shown, call)
                self.report(call, f"`print` of the tensor `{text}` waits for the GPU every "
                                  "training step; print every N steps (`if step % log_every == 0:`)",
                            f"`print({text})`")
                return

    def check_formatting(self, loop: AstLoopInfo) -> None:
        """A tensor formatted into a string outside ``print`` (f-string, ``%``, ``"...".format``) for a
        progress bar or a log line: formatting reads its value on the host."""
        index = self.index
        for node in (node for statement in loop.node.body for node in walk(statement)):
            kind = type(node)
            if kind is ast.JoinedStr:
                parent = index.parent(node)
                if type(parent) is ast.FormattedValue and parent.format_spec is node:
                    continue  # `f"{x:{width}}"`: part of the outer string
                values = [part.value for part in node.values if type(part) is ast.FormattedValue]
            elif kind is ast.BinOp and type(node.op) is ast.Mod and _is_text(node.left):
                right = node.right
                values = [_unstarred(e) for e in right.elts] if type(right) is ast.Tuple else [right]
            elif kind is ast.Call and _formats_literal(node):
                values = [value for _, value in call_arguments(node)]
            else:
                continue
            if any(type(above) is ast.Call and call_name(above) == "print" for above in index.ancestors(node)):
                continue  # check_print reports it
            here = self._training_loop(node)
            if here is None or self._guarded(node, here):
                continue
            scope = index.scope_of(node)
            shown = next((v for v in values if not chain_has_sync(v) and self.is_tensor(v, scope)
                          and not self._is_raw_batch(v, here, node)), None)
            if shown is None or self._destination(node, here, follow=True) != "sink":
                continue
            what = f"formatting `{self._short(shown, node)}`"
            self.report(node, f"{what} into a string reads the tensor on the host and waits for the GPU every "
                              "training step; format it every N steps", what)

    def check_summary(self, call: ast.Call, method: str) -> None:
        """``writer.add_scalar(tag, value)`` (``add_scalars``, ``add_histogram``) on a TensorBoard
        ``SummaryWriter``: it turns a tensor value into a NumPy one (``make_np``: ``.detach().cpu().numpy()``)
        before it returns, so a tensor passed every step is a sync every step."""
        index = self.index
        if type(call.func) is not ast.Attribute or not self._is_summary_writer(call.func.value, index.scope_of(call)):
            return
        loop = self._training_loop(call)
        if loop is None or self._guarded(call, loop):
            return
        position, keyword = _SUMMARY_METHODS[method]
        value = next((v for k, v in call_arguments(call) if k == keyword), None)
        if value is None and not any(type(a) is ast.Starred for a in call.args[:position + 1]) \
                and len(call.args) > position:
            value = call.args[position]
        if value is None:
            return
        values = [v for v in value.values] if method == "add_scalars" and type(value) is ast.Dict else [value]
        if method == "add_scalars" and type(value) is not ast.Dict:
            return  # a dict built elsewhere: its values are not in sight
        scope = index.scope_of(call)
        shown = next((v for v in values if not chain_has_sync(v) and self.is_tensor(v, scope)
                      and not self._is_raw_batch(v, loop, call)), None)
        if shown is None:
            return
        writer = self._short(call.func.value, call)
        text = self._short(shown, call)
        what = f"`{writer}.{method}(..., {text})`"
        self.report(call, f"{what} copies the tensor `{text}` to the host (`.cpu().numpy()` inside the "
                          f"SummaryWriter), which waits for the GPU every training step; log it every N steps "
                          "(`if step % log_every == 0:`)", what)

    def _is_summary_writer(self, expr: ast.AST, scope: AstScope) -> bool:
        """A name bound only to ``SummaryWriter(...)`` (``torch.utils.tensorboard`` or tensorboardX, any
        import spelling), in ``scope`` or, where ``scope`` does not bind it, at module level; or ``self.<x>``
        that the class of the method assigns only such a writer."""
        index = self.index
        if type(expr) is ast.Name:
            for where in (scope, index.tree):
                values = index.values_of(expr.id, where)
                if values:
                    return all(type(v) is ast.Call and index.qualified_name(v.func) in _SUMMARY_WRITERS
                               for v in values)
            return False
        if type(expr) is ast.Attribute and type(expr.value) is ast.Name and expr.value.id == "self" \
                and type(scope) in (ast.FunctionDef, ast.AsyncFunctionDef):
            klass = index.class_of.get(scope)
            if klass is None:
                return False
            assigned = [node.value for node in walk(klass) if type(node) is ast.Assign for target in node.targets
                        if type(target) is ast.Attribute and target.attr == expr.attr
                        and type(target.value) is ast.Name and target.value.id == "self"]
            return bool(assigned) and all(type(v) is ast.Call and index.qualified_name(v.func) in _SUMMARY_WRITERS
                                          for v in assigned)
        return False

    def _printed_tensor(self, value: ast.expr, scope: AstScope, loop: AstLoopInfo, call: ast.Call):
        """The tensor ``print`` shows in ``value``: itself, or one formatted into it (an f-string,
        ``"...".format(x)``, ``"..." % x``)."""
        parts: Optional[List[ast.expr]] = None
        if type(value) is ast.JoinedStr:
            parts = [part.value for part in value.values if type(part) is ast.FormattedValue]
        elif type(value) is ast.Call and _formats_literal(value):
            parts = [argument for _, argument in call_arguments(value)]
        elif type(value) is ast.BinOp and type(value.op) is ast.Mod and _is_text(value.left):
            right = value.right
            parts = [_unstarred(e) for e in right.elts] if type(right) is ast.Tuple else [right]
        if parts is not None:
            return next((found for part in parts
                         for found in (self._printed_tensor(part, scope, loop, call),) if found is not None), None)
        if self.is_tensor(value, scope) and not self._is_raw_batch(value, loop, call) and not on_cpu(self.index, value):
            return value
        return None

    # --- is it a tensor? ------------------------------------------------------------------------------
    def is_tensor(self, expr: ast.AST, scope: AstScope, depth: int = 0) -> bool:
        index = self.index
        if depth > 5:
            return False
        kind = type(expr)
        if kind is ast.Call:
            qualified = index.qualified_name(expr.func) or ""
            if qualified.startswith("torch.nn.functional."):
                return True
            if qualified in _TENSOR_FUNCS or (
                    qualified.startswith("torch.") and qualified[len("torch."):] in _TORCH_TENSOR_FUNCS):
                return True
            if qualified.startswith(("numpy.", "math.", "builtins.")):
                return False
            name = dotted_name(expr.func)
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
            if any(_is_host_value(v) for v in known):
                return False
            if expr.id in self._backward_receivers(scope):
                return True
            # `m = torch.zeros(3)` then `m = (m * i + x) / (i + 1)`: the update keeps the kind of the start
            fresh = [v for v in known if not spells_name(v, expr.id)]
            return bool(values) and len(known) == len(values) and bool(fresh) and all(
                self.is_tensor(v, scope, depth + 1) for v in fresh)
        if kind is ast.Attribute:
            if expr.attr == "grad":  # `p.grad` of a tensor, or of a parameter a loop over `.parameters()` draws
                return self.is_tensor(expr.value, scope, depth + 1) or self._is_parameter(expr.value, scope)
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

    def _is_parameter(self, expr: ast.AST, scope: AstScope) -> bool:
        """``p`` bound only as the target of loops over ``m.parameters()`` (``for p in ...``) or
        ``m.named_parameters()`` (``for name, p in ...``) in ``scope``: a parameter, a tensor."""
        if type(expr) is not ast.Name:
            return False
        index = self.index
        values = index.values_of(expr.id, scope)
        if not values or any(v is not None for v in values):
            return False
        loops = [loop.node for loop in index.loops if (loop.function or index.tree) is scope
                 and type(loop.node) in (ast.For, ast.AsyncFor) and expr.id in target_names(loop.node.target)]
        if len(loops) != len(values):
            return False  # also bound otherwise (a `with ... as p`, an unpacking)
        for node in loops:
            source = node.iter
            if type(source) is not ast.Call or type(source.func) is not ast.Attribute or source.args \
                    or source.func.attr not in ("parameters", "named_parameters"):
                return False
            target = node.target
            if source.func.attr == "parameters":
                if type(target) is not ast.Name:
                    return False
            elif not (type(target) is ast.Tuple and len(target.elts) == 2 and type(target.elts[1]) is ast.Name
                      and target.elts[1].id == expr.id):
                return False
        return True

    def _backward_receivers(self, scope: AstScope) -> Set[str]:
        """Names in ``scope`` on which ``.backward()`` is called: those are tensors."""
        if self._backward_names is None:  # every scope's at once (a scan per scope cost scopes x calls)
            tree = self.index.tree
            self._backward_names = {}
            for info in self.index.calls_by_name.get("backward", ()):
                if type(info.node.func) is ast.Attribute and type(info.node.func.value) is ast.Name:
                    self._backward_names.setdefault(info.function or tree, set()).add(info.node.func.value.id)
        return self._backward_names.get(scope, set())

    def _is_raw_batch(self, expr: ast.AST, loop: AstLoopInfo, anchor: ast.AST) -> bool:
        """``y`` in ``for x, y in loader:`` never rebound: the loader's CPU tensors, no device sync; also what
        a tensor method that keeps the device makes of them (``x.float().mean()``).
        (``anchor``: the call or string that holds ``expr``, whose loops and scope are its own.)"""
        root = expr
        while True:
            if type(root) is ast.Call and type(root.func) is ast.Attribute and root.func.attr in _SAME_DEVICE_METHODS:
                root = root.func.value
            elif type(root) in (ast.Attribute, ast.Subscript):
                root = root.value
            else:
                break
        if type(root) is not ast.Name:
            return False
        index = self.index
        drawn = _comprehension_source(index, root.id, anchor)
        if drawn is not None:  # `[(p.item(), q) for p, q in zip(paths, probs)]`: an element of what it walks
            return self._is_raw_batch(drawn, loop, anchor)
        scope = index.scope_of(anchor)
        targets = sum(1 for info in index.enclosing_loops(anchor)
                      if type(info.node) in (ast.For, ast.AsyncFor) and root.id in target_names(info.node.target)
                      and iterates_loader(index, info))
        return targets > 0 and len(index.values_of(root.id, scope)) == targets

    # --- where does the host value go? ------------------------------------------------------------------
    def _chain_top(self, call: ast.Call) -> ast.AST:
        """``x.cpu()`` in ``x.cpu().numpy().tolist()`` -> the whole chain."""
        index = self.index
        node: ast.AST = call
        while True:
            parent = index.parent(node)
            grand = index.parent(parent) if parent is not None else None
            if type(parent) is ast.Attribute and type(grand) is ast.Call and grand.func is parent:
                node = grand
            else:
                return node

    def _is_slowdown(self, node: ast.AST, loop: AstLoopInfo) -> bool:
        return not self._guarded(node, loop) and self._destination(node, loop, follow=True) == "sink"

    def _guarded(self, node: ast.AST, loop: AstLoopInfo) -> bool:
        """Inside the body of ``if step % N == 0:`` (or ``if should_log:``) within the training loop, or on a
        path that leaves the loop (runs once): a ``raise`` statement, or a block of an ``if`` / ``else`` that
        ends with ``raise``, ``return``, ``sys.exit()`` or a ``break`` out of this loop."""
        # remembered per (child, loop) on the way up: reads deep in an elif chain share their ancestors
        memo = self._guarded_below
        path = []
        guarded = False
        child = node
        for ancestor in self.index.ancestors(node):
            key = (child, loop.node)
            if key in memo:
                guarded = memo[key]
                break
            path.append(key)
            if self._keeps_out(ancestor, child, loop):
                guarded = True
                break
            if ancestor is loop.node:
                break
            child = ancestor
        for key in path:
            memo[key] = guarded
        return guarded

    def _keeps_out(self, ancestor: ast.AST, child: ast.AST, loop: AstLoopInfo) -> bool:
        """``ancestor`` (the parent of ``child``) keeps what ``child`` holds out of most steps (see ``_guarded``)."""
        kind = type(ancestor)
        if kind is ast.Raise:
            return True
        if isinstance(child, ast.stmt) and self._after_exit_guard(ancestor, child):
            return True
        if kind is ast.If:
            in_body = any(s is child for s in ancestor.body)
            if in_body and is_logging_guard(ancestor.test, self.index, self.index.scope_of(ancestor)):
                return True
            if not in_body and any(s is child for s in ancestor.orelse) and self._guards_the_step(ancestor.test, loop):
                return True  # `if is_train: ... else: val_loss += loss.item()`: the iterations with no step
            block = ancestor.body if in_body else ancestor.orelse
            return any(s is child for s in block) and self._leaves_loop(block, ancestor, loop)
        return kind in _WITH_ELSE and any(s is child for s in ancestor.orelse) \
            and self._leaves_loop(ancestor.orelse, ancestor, loop)

    def _guards_the_step(self, test: ast.expr, loop: AstLoopInfo) -> bool:
        """Every backward pass and optimizer step the loop runs itself is in the body of an ``if`` with this very
        test (``if is_train: loss.backward(); optimizer.step()``), a test of names and constants the loop
        never binds: its ``else`` runs in the iterations that train nothing (a shared train/validation loop)."""
        key = (loop.node, ast.dump(test))
        found = self._step_guards.get(key)
        if found is None:
            found = self._step_guards[key] = self._is_step_guard(test, loop)
        return found

    def _is_step_guard(self, test: ast.expr, loop: AstLoopInfo) -> bool:
        index = self.index
        if any(type(node) not in (ast.Name, ast.Attribute, ast.Constant, ast.Compare, ast.UnaryOp, ast.BoolOp,
                                  ast.Load, ast.Not, ast.And, ast.Or, ast.Eq, ast.NotEq, ast.Is, ast.IsNot)
               for node in ast.walk(test)):
            return False  # (a call may give another answer the second time)
        names = {node.id for node in ast.walk(test) if type(node) is ast.Name}
        if any(name in target_names(target) for node in walk(loop.node) if type(node) in (ast.Assign, ast.AugAssign)
               for target in (node.targets if type(node) is ast.Assign else [node.target]) for name in names):
            return False
        steps = [call for call in loop.direct_calls
                 if index.is_backward_call(call) or index.is_optimizer_step(call, loop.function)]
        wanted = ast.dump(test)
        return bool(steps) and all(any(
            type(ancestor) is ast.If and ast.dump(ancestor.test) == wanted and index.contains(ancestor, call)
            and not any(index.contains(branch, call) for branch in ancestor.orelse)
            for ancestor in self._ancestors_within(call, loop)) for call in steps)

    def _ancestors_within(self, node: ast.AST, loop: AstLoopInfo) -> Iterator[ast.AST]:
        for ancestor in self.index.ancestors(node):
            if ancestor is loop.node:
                return
            yield ancestor

    def _after_exit_guard(self, owner: ast.AST, child: ast.stmt) -> bool:
        """``child`` follows, in its block, an early exit on the steps that do not log: ``if not should_log:
        return`` (or ``continue``), the inverted form of ``if should_log:`` around it."""
        for field in ("body", "orelse", "finalbody"):
            block = getattr(owner, field, None)
            if type(block) is not list:
                continue
            key = (id(owner), field)
            known = self._exit_guards.get(key)
            if known is None:
                positions = {id(statement): at for at, statement in enumerate(block)}
                first = next((at for at, statement in enumerate(block) if self._exits_unless_logging(statement)), None)
                known = self._exit_guards[key] = (positions, first)
            positions, first = known
            at = positions.get(id(child))
            if at is not None:
                return first is not None and at > first
        return False

    def _exits_unless_logging(self, statement: ast.stmt) -> bool:
        if type(statement) is not ast.If or statement.orelse or type(statement.test) is not ast.UnaryOp \
                or type(statement.test.op) is not ast.Not:
            return False
        if type(statement.body[-1]) not in (ast.Return, ast.Continue):
            return False
        return is_logging_guard(statement.test.operand, self.index, self.index.scope_of(statement))

    def _leaves_loop(self, block: List[ast.stmt], owner: ast.AST, loop: AstLoopInfo) -> bool:
        """The block's last statement leaves the training loop: ``raise``, ``return``, ``sys.exit(...)`` /
        ``exit()`` / ``quit()`` / ``os._exit(...)``, or a ``break`` whose innermost loop is ``loop`` (``owner``:
        the statement the block belongs to)."""
        last = block[-1]
        kind = type(last)
        if kind is ast.Raise or kind is ast.Return:
            return True
        if kind is ast.Break:
            # a `break` is a leaf, without a parent link: its loop is the owner's (one in a loop's `else`
            # block counts as that loop's)
            inner = owner if type(owner) in _LOOPS else next(
                (info.node for info in self.index.enclosing_loops(owner)), None)
            return inner is loop.node
        if kind is ast.Expr and type(last.value) is ast.Call:
            func = last.value.func
            return (self.index.qualified_name(func) or dotted_name(func) or "") in _EXIT_CALLS
        return False

    def _parent(self, node: ast.AST) -> Optional[ast.AST]:
        parent = self.index.parent(node)
        return parent if parent is not None else self._name_parents.get(node)

    def _destination(self, node: ast.AST, loop: AstLoopInfo, follow: bool) -> str:
        """"sink" where the host value is only shown, stored or summed; "load" where Python needs it."""
        while True:
            parent = self._parent(node)
            kind = type(parent)
            if kind is ast.Starred:
                grand = self._parent(parent)
                if type(grand) is not ast.Call:
                    node = parent  # `[*x]`, `a, *b = ...`
                    continue
                node, parent, kind = parent, grand, ast.Call  # `f(*x)`: an argument
            elif kind is ast.keyword:
                node, parent = parent, self._parent(parent)
                kind = type(parent)
                if kind is not ast.Call:
                    return "load"  # `class A(metaclass=x)`
            if kind is ast.Call:
                if node is parent.func:
                    return "load"
                call_kind = self._call_kind(parent)
                if call_kind == "through":
                    node = parent
                    continue
                return call_kind
            if kind is ast.Attribute:
                grand = self._parent(parent)
                if type(grand) is ast.Call and grand.func is parent:
                    node = grand  # a method of the host value (`loss.item().__round__()`): follow it
                    continue
                return "load"
            if kind is ast.Compare and all(type(op) in (ast.Is, ast.IsNot) for op in parent.ops) and all(
                    type(side) is ast.Constant and side.value is None for side in (parent.left, *parent.comparators)
                    if side is not node):
                return "sink"  # `v is not None`: true of every number, its value is not needed
            if kind is ast.BinOp and type(parent.op) is ast.Mod and node is parent.right and _is_text(parent.left):
                return "sink"  # "loss %.3f" % value: formatted for display
            if kind is ast.Tuple and type(self._parent(parent)) is ast.Return:
                # `return loss, n_correct`: the callers' element at this position
                position = next(at for at, element in enumerate(parent.elts) if element is node)
                return self._returned(self._parent(parent), position, len(parent.elts))
            if kind is ast.Return:
                return self._returned(parent, None, 0)
            if kind in _PASS_UP:
                if kind is ast.DictComp and node is parent.key:
                    return "load"
                node = parent
                continue
            if kind is ast.FormattedValue or kind is ast.JoinedStr:
                return "sink"  # formatted for display
            if kind is ast.IfExp:
                if node is parent.test:
                    return "load"
                node = parent
                continue
            if kind is ast.Subscript:
                if node is parent.value:
                    node = parent
                    continue
                return "load"
            if kind is ast.Expr:
                return "sink"
            if kind is ast.AugAssign:
                if not follow:
                    return self._feeds_tensor(parent, parent.target, parent.value)
                return self._name_destination(parent.target, loop, parent)
            if kind is ast.Assign or kind is ast.AnnAssign:
                if (kind is ast.Assign and node is not parent.value) or (
                        kind is ast.AnnAssign and node is parent.annotation):
                    return "load"  # a target's part (`x[i] = ...`, `a, b = ...`), an annotation
                if not follow:
                    return self._feeds_tensor(parent, None, parent.value)
                targets = parent.targets if kind is ast.Assign else [parent.target]
                for target in targets:
                    if self._name_destination(target, loop, parent) == "load":
                        return "load"
                return "sink"
            return "load"  # if/while/assert tests, return, yield, lambda, await...

    def _returned(self, statement: ast.Return, position: Optional[int], size: int) -> str:
        """Where a host value returned by a def of the file goes (``position``: its place in a returned tuple
        of ``size``): "sink" where every call of the def in the file only shows, stores or sums it
        (``n_correct`` of ``loss, n_correct = perf(pred, y)`` only added to a total), "load" where any needs
        it, or where the def is named otherwise than by the calls the step model resolves (passed as a value,
        called from another file: callers out of sight)."""
        index = self.index
        function = index.function_of(statement)
        if type(function) not in (ast.FunctionDef, ast.AsyncFunctionDef):
            return "load"
        key = (function, position, size)
        found = self._returned_memo.get(key)
        if found is not None:
            return found
        self._returned_memo[key] = "load"  # (a def that returns its own call's value: unsure)
        found = self._callers_destination(function, position, size)  # type: ignore[arg-type]
        self._returned_memo[key] = found
        return found

    def _callers_destination(self, function: Union[ast.FunctionDef, ast.AsyncFunctionDef], position: Optional[int],
                             size: int) -> str:
        index = self.index
        calls = self.steps.calls_of(function)
        foreign = self.steps.foreign_results.get(function, [])
        if (not calls and not foreign) or self._spelled(function.name) != len(calls) \
                or any(call in self.steps.handing for call in calls):
            return "load"  # (handed to a wrapper, `gpu_timer(step)`: its value is the wrapper's)
        if foreign and not all(self._shown_there(uses, position, size) for uses in foreign):
            return "load"
        for call in calls:
            caller = index.function_of(call)
            loop = next(index.enclosing_loops(call), None)
            if loop is None:
                if type(caller) not in (ast.FunctionDef, ast.AsyncFunctionDef):
                    return "load"
                loop = AstLoopInfo(caller, caller, None)  # type: ignore[arg-type]
            if position is None:
                found = self._destination(call, loop, follow=True)
            else:
                assign = index.parent(call)
                if type(assign) is not ast.Assign or assign.value is not call or len(assign.targets) != 1 \
                        or type(assign.targets[0]) not in (ast.Tuple, ast.List) \
                        or len(assign.targets[0].elts) != size \
                        or any(type(element) is ast.Starred for element in assign.targets[0].elts):
                    return "load"  # `result = perf(...)`, `a, *rest = perf(...)`: where the element goes is out of sight
                found = self._name_destination(assign.targets[0].elts[position], loop, assign)
                if type(assign.targets[0].elts[position]) is not ast.Name:
                    found = "load"
            if found != "sink":
                return "load"
        return "sink"

    @staticmethod
    def _shown_there(uses: Optional[list], position: Optional[int] = None, size: int = 0) -> bool:
        """A call's result in a loop of another project file (``facts.steps.result_uses``) is only shown or
        stored there: dropped, summed into a running total that loop reads nowhere else (``acc +=
        accuracy(sr, gt)``, read after the loop), or each use an argument of a collecting or logging call
        (``meter.update(acc, n)``, ``print(acc)``); anything else, another sum included (what it feeds is out
        of sight), needs it.
        For the element at ``position`` of a returned tuple of ``size``: the result is unpacked into as many
        names there (``loss_a, loss_b = agent.update(batch)``) and that element's name is only shown."""
        if uses is None:
            return False
        if position is not None:
            if len(uses) != 1 or uses[0][0] != "unpack" or len(uses[0][1]) != size:
                return False
            uses = uses[0][1][position]
        for kind, written in uses:
            if kind == "text" or (kind == "add" and written):
                continue  # formatted into text ("loss {:.3f}".format(value)), or summed into a running total
                # that the loop reads nowhere else (`acc += accuracy(sr, gt)`: a tensor sum would do)
            last = written.rsplit(".", 1)[-1]
            if kind != "arg" or not (("." in written and last in _SINK_METHODS) or written in _SINK_FUNCTIONS
                                     or ("." not in written and _DISPLAY_HELPER.search(last))):
                return False
        return True

    def _spelled(self, name: str) -> int:
        """How often the file names ``name`` as a variable or an attribute (a def is called by one of those)."""
        if self._spellings is None:
            self._spellings = {}
            for node in ast.walk(self.index.tree):
                kind = type(node)
                if kind is ast.Name:
                    spelled = node.id  # type: ignore[attr-defined]
                elif kind is ast.Attribute:
                    spelled = node.attr  # type: ignore[attr-defined]
                else:
                    continue
                self._spellings[spelled] = self._spellings.get(spelled, 0) + 1
        return self._spellings.get(name, 0)

    def _feeds_tensor(self, statement: ast.stmt, target: Optional[ast.expr], value: Optional[ast.expr]) -> str:
        """A host value used in a statement that computes a tensor (``d_loss = real - k * fake``, the next step's
        loss) is load-bearing: "load"; otherwise the statement only stores it: "sink"."""
        if value is None:
            return "sink"
        scope = self.index.scope_of(statement)
        if self.is_tensor(value, scope) or (target is not None and self.is_tensor(target, scope)):
            return "load"
        return "sink"

    def _name_destination(self, target: ast.expr, loop: AstLoopInfo, binding: Optional[ast.stmt] = None) -> str:
        """A name that holds a host value: "load" when the loop uses it for control flow. With ``binding``, the
        statement that binds the host value, only the uses that value can reach count (``_reached``)."""
        if type(target) is not ast.Name:
            return "sink"
        key = (loop.node, target.id)
        loads = self._loads_of_name.get(key)
        if loads is None:  # the uses that need the value, found once per loop and name
            loads = self._loads_of_name[key] = [
                use for use, how in self._names_under(loop.node).get(target.id, ())
                if not self._is_binding(use, how) and self._use_destination(use, how, loop) == "load"
            ]
        return "load" if any(use is not target and (binding is None or self._reached(use, binding, target.id, loop))
                             for use in loads) else "sink"

    def _reached(self, use: ast.AST, binding: ast.stmt, name: str, loop: AstLoopInfo) -> bool:
        """Whether the value ``binding`` gives ``name`` may be the one ``use`` reads in ``loop``. Not where a
        statement of a block around ``use`` binds ``name`` again before it in that block (``x = ...`` or
        ``a, x = ...``, directly in the block: it runs whenever the block reaches ``use``) and every path from
        ``binding`` to ``use`` enters the block from above that statement: ``binding`` is outside the block, or
        after ``use`` in it (reached only through the next iteration, which binds it first: ``loss =
        sum(losses)``; ``all_reduce(loss)``; ``loss = loss.item()``), or before the rebinding. A use outside
        the loop's body (its header, its ``else``) or in a nested def or lambda (run who knows when) is always
        reached."""
        index = self.index
        parent = self._parent(use)
        node = parent if parent is not None else use
        if index.scope_of(node) is not (loop.function or index.tree):
            return True
        for holder in index.ancestors(node):
            block = next((statements for field in ("body", "orelse", "finalbody")
                          for statements in (getattr(holder, field, None),) if type(statements) is list
                          and any(statement is node for statement in statements)), None)
            if block is not None:
                if holder is loop.node and block is not loop.node.body:  # type: ignore[attr-defined]
                    return True
                used = next(at for at, statement in enumerate(block) if statement is node)
                bound = next((at for at, statement in enumerate(block) if index.contains(statement, binding)), None)
                for at, statement in enumerate(block[:used]):
                    if (type(statement) is ast.Assign and any(name in target_names(t) for t in statement.targets)
                            or type(statement) is ast.AnnAssign and statement.value is not None
                            and name in target_names(statement.target)) \
                            and (bound is None or used < bound or at > bound):
                        return False
            if holder is loop.node:
                return True
            node = holder
        return True

    def _use_destination(self, use: ast.AST, how: str, loop: AstLoopInfo) -> str:
        """``_destination`` of one mention of a name (see ``_mentions``): a variable's own; an attribute's
        or a keyword's as its call takes it; any other (a parameter, a def's name) is "load"."""
        if how == "name":
            return self._destination(use, loop, follow=False)
        if how == "attribute":
            grand = self._parent(use)
            if type(grand) is ast.Call and grand.func is use:
                return self._destination(grand, loop, follow=False)
            return "load"
        if how == "keyword":
            call = self._parent(use)
            if type(call) is not ast.Call:
                return "load"
            call_kind = self._call_kind(call)
            return self._destination(call, loop, follow=False) if call_kind == "through" else call_kind
        return "load"

    def _names_under(self, node: ast.AST) -> dict:
        """Every mention under ``node`` by spelling, as (node, how) (``_mentions`` for all names at once): one
        walk per loop, which also records the parents of the names it meets."""
        names = self._names_by_node.get(node)
        if names is None:
            names = self._names_by_node[node] = {}
            for spelling, use, how, parent in names_spelled(node):
                names.setdefault(spelling, []).append((use, how))
                if how == "name":
                    self._name_parents[use] = parent
        return names

    def _is_binding(self, use: ast.AST, how: str) -> bool:
        """``v = ...`` and ``a, v = ...`` bind v; ``v += x`` reads it too, but only to add to it (a sink, see
        ``_destination``)."""
        if how != "name":
            return False
        node, parent = use, self._parent(use)
        while type(parent) in (ast.Tuple, ast.List, ast.Starred):
            node, parent = parent, self._parent(parent)
        return type(parent) is ast.Assign and any(t is node for t in parent.targets)

    def _call_kind(self, call: ast.Call) -> str:
        index = self.index
        func = call.func
        if type(func) is ast.Name and func.id not in index.imports:
            if func.id in _SINK_FUNCTIONS or _DISPLAY_HELPER.search(func.id):
                return "sink"
            if func.id in _TRANSPARENT_FUNCTIONS:
                return "through"
            return "load"
        qualified = index.qualified_name(func)
        if qualified is not None and qualified.startswith(("math.", "numpy.")):
            return "through"  # a host number or array in, a host number or array out
        if qualified in _BACK_TO_TENSOR:
            return "sink"  # the number goes back into a tensor (to all-reduce it): it could have stayed one
        if type(func) is ast.Attribute and func.attr in _SINK_METHODS:
            return "sink"
        if _formats_literal(call):
            return "sink"  # "loss {:.3f}".format(value)
        name = dotted_name(func)
        if name is not None and _DISPLAY_HELPER.search(name.split(".")[-1]):
            return "sink"
        return "load"

    # --- the accumulation fix -------------------------------------------------------------------------
    def _accumulation_fix(self, call: ast.Call, top: ast.AST, loop: AstLoopInfo) -> Optional[Tuple[str, Callable]]:
        """``acc += x.item()``, where ``acc`` starts as a number and the loop reads it nowhere else: the
        accumulator's name and the rewrite (``Rewrite.make``) that sums on the device."""
        index = self.index
        aug = index.parent(call)
        if top is not call or type(aug) is not ast.AugAssign or aug.value is not call:
            return None
        if loop.node not in index.loop_info:
            return None  # the whole function a step calls, not a loop: no place after it for the conversion
        if type(aug.op) is not ast.Add or type(aug.target) is not ast.Name:
            return None
        acc = aug.target.id
        recv = call.func.value  # type: ignore[attr-defined]
        if chain_has_sync(recv) or spells_name(recv, acc):
            return None
        # nothing in the loop but this statement mentions acc
        if any(use is not aug.target for use, _ in self._names_under(loop.node).get(acc, ())):
            return None
        # the loop runs after `acc = <number>`, with nothing touching acc in between
        literal = _number_literal_init(index, self._previous_mention(loop.node, acc), acc)
        if literal is None:
            return None
        depth = next(i for i, info in enumerate(index.enclosing_loops(call)) if info is loop)
        make = partial(_accumulate_on_device, depth=depth, keep_receiver=_is_detach_call(recv),
                       from_float=type(literal.value) is float)
        return acc, make

    def _previous_mention(self, loop: ast.AST, acc: str) -> Optional[ast.stmt]:
        """The nearest statement before ``loop`` that mentions ``acc``, climbing out of enclosing blocks.

        Climbing out of an enclosing loop requires that nothing else in it mentions ``acc`` (on its next
        iteration the value must still be the number the conversion left); climbing out of an ``if`` / ``with``
        / ``try`` body requires only that its header does not.
        """
        index = self.index
        statement: ast.stmt = loop  # type: ignore[assignment]
        while True:
            container = index.parent(statement)
            block = index.statement_block(statement)
            positions, mentions = self._mentions_in_block(block)
            spots = mentions.get(acc, ())
            before = bisect.bisect_left(spots, positions[statement])
            if before:
                return block[spots[before - 1]]
            if container is None or block is not getattr(container, "body", None):
                return None  # the module's top, an `else`, `except` or `finally` block
            kind = type(container)
            if kind in _LOOPS:
                if any(not index.contains(loop, use) for use, _ in self._names_under(container).get(acc, ())):
                    return None
            elif kind is ast.If:
                if spells_name(container.test, acc):
                    return None
            elif kind in (ast.With, ast.AsyncWith):
                if any(spells_name(item, acc) for item in container.items):
                    return None
            elif kind is not ast.Try:
                return None
            statement = container

    def _mentions_in_block(self, block: List[ast.stmt]) -> tuple:
        """A block's statements: the position of each, and for each name the positions of the statements
        that mention it, in order (one walk per block, not one per accumulator asked about)."""
        found = self._mentions_by_block.get(id(block))
        if found is None:
            positions, mentions = {}, {}
            for position, statement in enumerate(block):
                positions[statement] = position
                for spelling, *_ in names_spelled(statement):
                    spots = mentions.setdefault(spelling, [])
                    if not spots or spots[-1] != position:
                        spots.append(position)
            found = self._mentions_by_block[id(block)] = (positions, mentions, block)  # keeps `block` alive
        return found[:2]

    # --- quoting code ---------------------------------------------------------------------------------
    def _code(self, expr: ast.AST, anchor: ast.AST) -> str:
        """``expr`` as LibCST's ``code_for_node`` writes it; ``anchor`` is a call or string that holds it
        (``expr`` may be a name, which has no parent link)."""
        statement = anchor if isinstance(anchor, ast.stmt) else next(
            a for a in self.index.ancestors(anchor) if isinstance(a, ast.stmt))
        code = self._codes.get(statement)
        if code is None:
            code = self._codes[statement] = self.index.statement_code(statement)
        return code.text(*code.place(expr))

    def _short(self, expr: ast.AST, anchor: ast.AST) -> str:
        text = " ".join(self._code(expr, anchor).split())
        return text if len(text) <= 40 else text[:37] + "..."


class _LoopReads:
    """A loop body's calls in source order, with what ``_read_before`` asks of them: each call's index, how
    many of the first k calls may queue GPU work, and the argument-less sync calls by receiver text."""

    def __init__(self, calls: List[ast.Call], detector: _Detector) -> None:
        self.calls = calls
        self.orders = [source_order(c) for c in calls]
        self.position = {c: i for i, c in enumerate(calls)}
        self.gpu_counts = [0]
        self.by_receiver: dict = {}
        for at, c in enumerate(calls):
            self.gpu_counts.append(self.gpu_counts[-1] + (not _queues_no_gpu_work(c)))
            if is_sync_call(c):
                self.by_receiver.setdefault(detector._code(c.func.value, c), []).append(at)  # type: ignore[attr-defined]
        self.load_bearing: dict = {}  # receiver text -> ``_Detector._load_bearing_reads``


def _comprehension_source(index: AstIndex, name: str, anchor: ast.AST) -> Optional[ast.expr]:
    """What the comprehension around ``anchor`` that binds ``name`` walks, for that name: ``paths`` for ``p`` in
    ``for p in paths`` or ``for p, q in zip(paths, probs)``; None where no comprehension there binds it so."""
    for above in index.ancestors(anchor):
        if type(above) not in COMPREHENSIONS:
            if isinstance(above, ast.stmt):
                return None
            continue
        for generator in above.generators:  # type: ignore[attr-defined]
            target, walked = generator.target, generator.iter
            if type(target) is ast.Name and target.id == name:
                return walked
            if type(target) is ast.Tuple and type(walked) is ast.Call and type(walked.func) is ast.Name \
                    and walked.func.id == "zip" and "zip" not in index.imports and not walked.keywords \
                    and len(walked.args) == len(target.elts):
                for part, source in zip(target.elts, walked.args):
                    if type(part) is ast.Name and part.id == name and type(source) is not ast.Starred:
                        return source
    return None


def _is_module(expr: ast.AST) -> bool:
    name = dotted_name(expr)
    return name is not None and (name == "self" or bool(_MODEL_NAME.search(name.split(".")[-1])))


def _unstarred(node: ast.expr) -> ast.expr:
    return node.value if type(node) is ast.Starred else node  # type: ignore[attr-defined]


def _is_host_value(value: ast.AST) -> bool:
    """A number or string literal, an f-string, or a call of a host function (``len``, ``.item()``): once a
    name is bound to one, it is not a tensor (``True``, ``False`` and ``None`` are not counted)."""
    kind = type(value)
    if kind is ast.Constant:
        return type(value.value) in (int, float, str, bytes)  # type: ignore[attr-defined]
    return kind is ast.JoinedStr or (kind is ast.Call and call_name(value) in _HOST_CALLS)  # type: ignore[arg-type]


def _is_text(node: ast.AST) -> bool:
    """A string literal, or one built from literals: ``"%11s" * 2 + "%11.4g" * 5``."""
    if type(node) is ast.JoinedStr or (type(node) is ast.Constant and isinstance(node.value, (str, bytes))):
        return True
    return type(node) is ast.BinOp and type(node.op) in (ast.Add, ast.Mult) and (
        _is_text(node.left) or _is_text(node.right))


def _formats_literal(call: ast.Call) -> bool:
    """``"loss {:.3f}".format(...)`` on a string literal (not an f-string)."""
    func = call.func
    return type(func) is ast.Attribute and func.attr == "format" and type(func.value) is ast.Constant \
        and isinstance(func.value.value, (str, bytes))


def _is_detach_call(expr: ast.AST) -> bool:
    return type(expr) is ast.Call and call_name(expr) == "detach" and not expr.args and not expr.keywords  # type: ignore[attr-defined]


def _number_literal_init(index: AstIndex, statement: Optional[ast.stmt], acc: str) -> Optional[ast.Constant]:
    """The number in ``acc = 0.0``, ``a = acc = 0`` or ``loss, acc = 0.0, 0`` as a statement alone on its
    line."""
    if type(statement) is not ast.Assign:
        return None
    line = index.statement_line(statement)
    if not isinstance(line, StatementLine) or line.first is not statement or line.last is not statement:
        return None
    value = statement.value
    found = None
    for target in statement.targets:
        if type(target) is ast.Name:
            if target.id == acc:
                found = value
        elif type(target) in (ast.Tuple, ast.List) and type(value) in (ast.Tuple, ast.List):
            if len(target.elts) != len(value.elts):
                return None
            for element, item in zip(target.elts, value.elts):
                if type(element) is ast.Name and element.id == acc and type(item) is not ast.Starred:
                    found = item
        elif spells_name(target, acc):
            return None
    if type(found) is ast.Constant and type(found.value) in (int, float) \
            and not spells_name(value, acc):
        return found
    return None


def _accumulate_on_device(call: cst.Call, a: "FileAnalysis", depth: int, keep_receiver: bool,
                          from_float: bool) -> Union[Fix, str]:
    """The rewrite of ``acc += x.item()`` (``call`` is LibCST's ``x.item()``): ``acc += x.detach()`` in the
    loop ``depth`` loops out, and ``acc = float(acc)`` (or ``torch.as_tensor(acc).item()`` for an integer
    start) right after it."""
    aug = a.parent(call)
    loop = list(a.enclosing_loops(call))[depth].node
    # `.item(...)` becomes `.detach(...)` in place, so whatever its brackets hold (a comment) stays
    detach = call.func.value if keep_receiver else call.with_changes(  # type: ignore[attr-defined]
        func=call.func.with_changes(attr=cst.Name("detach")))  # type: ignore[attr-defined]
    # Only ``call`` differs in the loop, and the conversion has no comment: what the whole fix would drop,
    # ``call``'s replacement drops (asking of the whole loop made every finding cost the loop's size).
    if loses_comment({call: detach}):
        return DROPS_COMMENT
    from torchlint.fix.fixer import replaced_within  # the fixer loads only for files with a finding

    new_loop = replaced_within(loop, aug, aug.with_changes(value=detach), a)  # type: ignore[union-attr]
    acc = aug.target.value  # type: ignore[union-attr]
    imports: Tuple[ImportRequest, ...] = ()
    if from_float:
        conversion = cst.parse_statement(f"{acc} = float({acc})")
    else:
        torch = a.module_alias("torch")
        if torch is None:
            torch = "torch"
            imports = (ImportRequest("torch"),)
        conversion = cst.parse_statement(f"{acc} = {torch}.as_tensor({acc}).item()")
    return Fix({loop: cst.FlattenSentinel([new_loop, conversion])}, Applicability.UNSAFE, imports)


# Tensor methods whose result stays on the device of the tensor they are called on (a raw CPU batch stays a CPU
# tensor); `.to`, `.cuda`, `.type`, `.type_as`, `.new_*` may move it.
_SAME_DEVICE_METHODS = frozenset({
    "float", "double", "half", "bfloat16", "long", "int", "bool", "byte", "mean", "sum", "max", "min", "argmax",
    "argmin", "std", "var", "norm", "abs", "view", "reshape", "flatten", "squeeze", "unsqueeze", "permute",
    "contiguous", "detach", "clone", "eq", "ne", "gt", "lt", "ge", "le", "prod", "numel", "count_nonzero"})

# Calls that queue no GPU work (they show, store or convert host values): a second read of a value that
# only these separate from the first waits for nothing.
_NO_GPU_WORK_CALLS = _SINK_METHODS | _SINK_FUNCTIONS | set(SYNC_METHODS) | {
    "int", "float", "bool", "str", "len", "repr", "format", "join", "dict", "items", "keys", "values", "get",
    "time", "perf_counter", "monotonic", "flush", "isinstance", "hasattr", "getattr", "exists", "open",
    "detach",  # (a view without its autograd history: no kernel)
}


def _queues_no_gpu_work(call: ast.Call) -> bool:
    return call_name(call) in _NO_GPU_WORK_CALLS


def _needed_after(read: ast.stmt, rest: List[ast.stmt]) -> bool:
    """``read`` binds names (``priorities = td.cpu().numpy()``) that a later statement of ``rest`` passes to a
    call that needs the value (``buffer.update_priorities(idx, priorities)``), not only one that shows or
    collects it: the read has to stay, so a read after it finds the GPU idle."""
    if type(read) is not ast.Assign:
        return False
    names = {name for target in read.targets for name in target_names(target)}
    for statement in rest:
        for node in ast.walk(statement):
            if type(node) is ast.Call and call_name(node) not in _SINK_METHODS | _SINK_FUNCTIONS and any(
                    type(argument) is ast.Name and argument.id in names for argument in node.args):
                return True
    return False


def _names_no_torch(function: ast.AST) -> bool:
    """The def names neither ``torch`` nor a tensor's move or read (``.cuda``, ``.to``, ``.item``...): host code,
    such as a replay buffer's segment trees."""
    for node in ast.walk(function):
        if (type(node) is ast.Name and node.id == "torch") or (  # type: ignore[attr-defined]
                type(node) is ast.Attribute and node.attr in ("cuda", "to", "torch", *SYNC_METHODS)):  # type: ignore[attr-defined]
            return False
    return True


def _synchronizes(statement: ast.stmt) -> bool:
    return type(statement) is ast.Expr and type(statement.value) is ast.Call \
        and call_name(statement.value) == "synchronize"  # type: ignore[attr-defined]


# Compound statements whose blocks start as their own place does, after a synchronize or not (what runs in
# their header, ``_header``, is asked apart).
_PASSES_WAIT = (ast.If, ast.With)


def _header(statement: ast.AST) -> List[ast.expr]:
    if type(statement) is ast.If:
        return [statement.test]  # type: ignore[attr-defined]
    return [item.context_expr for item in statement.items]  # type: ignore[attr-defined]


_LOOPS = (ast.For, ast.AsyncFor, ast.While)
# Statements with an `else:` block besides `if` (whose blocks `_guarded` reads itself).
_WITH_ELSE = (ast.For, ast.AsyncFor, ast.While, ast.Try) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())
# What may skip a node in an iteration (``_every_iteration``; an `if` is asked about apart: its test runs).
_BRANCHING = frozenset({ast.IfExp, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.BoolOp, ast.ListComp,
                        ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda, ast.FunctionDef,
                        ast.AsyncFunctionDef} | ({ast.Match} if hasattr(ast, "Match") else set()))
# Expressions a host value passes through on its way to where it is used (``_destination``).
_PASS_UP = frozenset({ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.List, ast.Tuple, ast.Set, ast.Dict,
                      ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp})
