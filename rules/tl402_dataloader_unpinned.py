"""TL402: a training DataLoader whose batches go to the GPU from pageable host memory."""

from __future__ import annotations

import ast
import functools
from typing import TYPE_CHECKING, List, Optional, Union

import libcst as cst

from torchlint.fix.arguments import with_keyword
from torchlint.fix.comments import DROPS_COMMENT, loses_comment
from torchlint.config import Settings
from torchlint.facts.loaders import ABSENT, argument_position, built_elsewhere, conversion_before_move, loader_facts
from torchlint.rule import Applicability, Fix, FixAvailability, IndexContext, Rewrite, Rule
from torchlint.facts.text_gates import TRAINING_WORDS, may_move_to_device, may_train

if TYPE_CHECKING:
    from torchlint.fix.analysis import FileAnalysis


class DataloaderUnpinned(Rule):
    """## What it does
    Flags a `torch.utils.data.DataLoader(...)` without `pin_memory=True` (or with `pin_memory=False`) when
    a training loop of the same file iterates it and copies its batches to a CUDA device (`.cuda()`,
    `.to(device)`, `.to("cuda")`), also after a dtype conversion (`im.float().to(device)`). The loop is tied to the loader as in TL401: by the loader's name,
    through `enumerate`/`tqdm`, an alias, a function of the file that takes the loader as a parameter, or
    `next()` (or `it.next()`) on `iter(loader)` or on a generator of the file that yields from it (then the
    batch is what `next()` returns, also moved at once: `next(batches).to(device)`). A loader built by a factory of another file of the checked project (`from data
    import build_loader`, or a star import of a project module that binds it: `from utils import *`) is
    reported at the factory's call, naming where it is built, without a fix (the
    fix belongs in that file); one another project file hands to a class or function of this file
    (`Solver(config, train_loader)`) is reported at the parameter that receives it, as in TL401. This rule also speaks for TL103 there: `non_blocking=True` gains nothing
    on a loader that is not pinned, so TL103 stays silent on its batches, and this finding's fix comes
    first.

    A conversion without arguments before the move (`.float()`, `.half()`, `.long()`...) returns the
    pinned tensor itself where the batch has that dtype already, so pinning speeds the copy up; where it
    changes the dtype it makes a new pageable host tensor, which pinning does not reach. Where every move
    of the loop is such a conversion the message says so: convert after the move
    (`im.to(device).float()`, which also copies fewer bytes for a narrower source dtype).

    Silent where `pin_memory` comes through `**kwargs` or a variable (`pin_memory=args.pin_mem`), where the
    destination is provably the CPU, for `TensorDataset` loaders and files whose `Dataset` classes move data
    to the GPU themselves (their batches may already be on the device, which cannot be pinned), for a loader
    whose dataset is, or may be, an instance of a class of the file (also one defined inside a function)
    whose `__getitem__`, or a method of its class that it calls, makes or moves a tensor on a device that is
    CUDA or may be (as in TL401), for loaders
    no training loop of the file iterates (also those built in another module in a way the project model
    does not follow: the rule stays silent rather than guess), and in tests.

    ## Why is this slow?
    A copy from ordinary (pageable) host memory to the GPU is done by the CUDA driver in two steps: it
    first copies the data into a page-locked staging buffer, then lets the DMA engine transfer it, and the
    host waits for both. With `pin_memory=True` the loader's pin-memory thread puts every batch in
    page-locked memory as it arrives, so the copy to the device is a single DMA transfer, faster, and
    with `non_blocking=True` (TL103) it overlaps with the computation instead of stalling the host.

    ## Example
    ```python
    train_loader = DataLoader(train_set, batch_size=256, shuffle=True, num_workers=8)
    for images, labels in train_loader:
        images, labels = images.cuda(), labels.cuda()
        ...
    ```

    ## Use instead
    ```python
    train_loader = DataLoader(train_set, batch_size=256, shuffle=True, num_workers=8, pin_memory=True)
    for images, labels in train_loader:
        images, labels = images.cuda(non_blocking=True), labels.cuda(non_blocking=True)
        ...
    ```

    ## Fix safety
    The fix adds `pin_memory=True` (or turns `pin_memory=False` into `True`). It is **unsafe**:
    - Pinning applies to tensors and to the standard containers (tuples, lists, dicts, namedtuples) of the
      batch; a custom batch class is pinned only if it defines a `pin_memory()` method, and is otherwise
      passed through unpinned (no error, but no gain either).
    - A batch that already lives on the GPU (a dataset that returns CUDA tensors) makes the pin-memory
      thread fail: only CPU tensors can be pinned.
    - Pinned memory is page-locked host memory: the operating system cannot swap it out, and it is
      allocated per batch in flight (`num_workers * prefetch_factor` batches); very large batches on a
      machine short of RAM can make allocation fail or slow the whole system.
    - On a machine without a GPU, `pin_memory=True` prints a warning and does nothing.

    ## PyTorch versions
    `pin_memory=` exists in every version. Older 1.x releases pin for CUDA only; `pin_memory_device=` was
    added later to pin for another device, and current 2.x releases (2.13 included) pin for the current
    accelerator (`torch.accelerator`) and deprecate `pin_memory_device=`. Without an accelerator,
    `pin_memory=True` warns and is ignored.
    """

    code = "TL402"
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)
    name = "dataloader-unpinned"
    message = ("this DataLoader's batches are copied to the GPU from pageable memory; pass `pin_memory=True` "
               "so each copy is one DMA transfer that can overlap with compute")
    summary = "DataLoader feeding the GPU without pin_memory=True"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicabilities = (Applicability.UNSAFE,)
    # Text gate: every finding's text holds `DataLoader`, a `.to(`/`.cuda(` move and a training step.
    text_gate = (("DataLoader",), TRAINING_WORDS)

    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        return "DataLoader" in text and may_move_to_device(text) and may_train(text)

    def detect(self, ctx: IndexContext) -> None:
        facts = loader_facts(ctx.index, ctx.project)
        for site in facts.sites:
            if facts.setting(site, "pin_memory") not in (ABSENT, False):
                continue
            if facts.is_in_memory_dataset(site) or facts.batches_may_be_on_cuda(site):
                continue
            loops = facts.training_loops(site)
            moves = [move for loop in loops for move in facts.batch_moves(loop, converted=True)]
            if not moves:
                continue
            message = self.message + self._converted_note(ctx, moves)
            if site.imported is not None:  # built in another file: the fix would be there
                ctx.report(site.call, message=message + built_elsewhere(site))
                continue
            make = functools.partial(_pin, argument_position(site.call, "pin_memory"))
            ctx.report(site.call, message=message, rewrite=Rewrite(make, message + " ({reason})", site.call, reads=site.call))

    @staticmethod
    def _converted_note(ctx: IndexContext, moves: List[ast.Call]) -> str:
        """Where every move copies a dtype conversion of the batch (``im.float().to(device)``): pinning reaches
        it only where the conversion keeps the dtype (it then returns the pinned tensor itself)."""
        conversions = [conversion_before_move(move) for move in moves]
        if not all(conversions):
            return ""
        first = conversions[0]
        statement = next(a for a in ctx.index.ancestors(first) if isinstance(a, ast.stmt))
        text = ctx.index.code_for_node(first, statement)
        return (f" (`{text}` before the move makes a new pageable tensor where it changes the dtype, which "
                "pinning does not reach: convert after the move)")


def _pin(position: Optional[int], call: cst.Call, analysis: FileAnalysis) -> Union[Fix, str]:
    """``pin_memory=True`` on the LibCST twin; ``position``: where ``pin_memory=False`` is passed by position."""
    if position is not None:
        fixed = call.with_changes(args=[
            arg.with_changes(value=cst.Name("True")) if at == position else arg for at, arg in enumerate(call.args)])
    else:
        fixed = with_keyword(call, "pin_memory", cst.Name("True"))
    if loses_comment({call: fixed}):
        return DROPS_COMMENT
    return Fix.replace(call, fixed, Applicability.UNSAFE)
