"""TL103: a batch from a DataLoader copied to the GPU without ``non_blocking=True``."""

from __future__ import annotations

import ast
from functools import partial
from typing import TYPE_CHECKING, List, Optional, Set, Union

import libcst as cst

from torchlint.fix.arguments import with_keyword
from torchlint.facts.index import (AstIndex, AstLoopInfo, AstScope, StatementLine, call_arguments, call_name,
                                 dotted_name, has_star, is_literal, keyword_value, source_order, target_names, walk)
from torchlint.fix.comments import DROPS_COMMENT, loses_comment
from torchlint.config import Settings
from torchlint.facts.loaders import LOADER_NAME, LoaderFacts, built_by_other_iterator, loader_facts
from torchlint.facts.steps import runs_once_in
from torchlint.facts.devices import runs_on_cpu
from torchlint.rule import Applicability, Fix, FixAvailability, IndexContext, Rewrite, Rule
from torchlint.facts.text_gates import may_move_to_device, may_name_a_loader

if TYPE_CHECKING:
    from torchlint.fix.analysis import FileAnalysis


class BlockingHostToDeviceCopy(Rule):
    """## What it does
    Flags `.to(device)` and `.cuda()` of a batch that comes from iterating a `DataLoader` (the loop's
    targets, or what the loop body unpacks or indexes from them: `x, y = batch`, `batch["image"]`,
    `x, y = batch["image"], batch["label"]`, the
    values of `{k: v.to(device) for k, v in batch.items()}`) when the destination is plausibly a CUDA
    device and `non_blocking=` is not passed.

    A loop counts as iterating a loader when it walks a `DataLoader(...)` this file builds (through its
    name, `enumerate`/`tqdm`/`zip`, or a function of the file that takes it as a parameter) or a name that
    says it is one (`train_loader`, `dataloader`, `val_dl`), unless the code shows that name holds a batch
    iterator of another library that is no DataLoader: every binding of it is torchtext's legacy
    `Iterator(...)`, `BucketIterator(...)` or `BPTTIterator(...)` or unpacks their `.splits(...)`, or it is a
    parameter of a function of the file every call of which passes one (such an iterator builds its
    batches' tensors itself, with no pinned memory for `non_blocking` to use), or no statement of the file binds
    the name at all (a loop over it would raise NameError: dead code). Silent for copies to a provable CPU device
    (`"cpu"`, `torch.device("cpu")`, a name bound to one), for device-to-host copies (`.cpu()`), for
    `.to(x)` where `x` may be a dtype or a tensor, for calls that already pass `non_blocking=` (either
    way) or `**kwargs`, and in tests (pytest files, `tests/` folders). Silent for copies that run once, not
    for every batch: in a loop that leaves after its first batch (`for x, y in loader: ...; break`) or in
    a branch on the loop's counter that runs a few times (`if i == 0:`, `if step < 5:`); and in CPU
    programs (a script in which nothing can reach a CUDA device: see TL101). Silent too for loops over a loader
    bound to the result of Hugging Face Accelerate's `accelerator.prepare(...)` / `prepare_data_loader(...)`
    or Lightning Fabric's `fabric.setup_dataloaders(...)`: those loaders yield batches already on the
    device, so the `.to(accelerator.device)` left in the loop copies nothing (unless the file turns that
    placement off: `device_placement=False`, `move_to_device=False`, `put_on_device=False`); in such a
    file, also for batches a loop draws with `next()` (`next(self.dl).to(device)` with `self.dl =
    cycle(dl)`), which may come from the placed loader. Silent for a
    move of a name the loop's body has already bound to a copy of the batch on the GPU (`target =
    target.cuda()` and, a statement later, `target_var = target.cuda()`): it copies nothing, until a
    statement binds the name again.

    Silent too where every loader the loop iterates is provably not pinned (`pin_memory` not passed, or
    `False`): a non-blocking copy from pageable memory is staged by the driver and gains next to nothing, so
    TL402 reports the loader instead (its fix, `pin_memory=True`, comes first; `fix --unsafe-fixes` then
    adds `non_blocking=True` in its next pass). A loader counts as iterated as in TL401: through aliases,
    `next()` on `iter(loader)` or on a generator of the file, factories of the file, factories of
    other files of the checked project, and loaders another project file hands to a class or function of
    this file (`Solver(config, train_loader)`: a real `DataLoader`, so the fix is safe where it is pinned),
    also under a name that says nothing of a loader (`fit_one_epoch(..., gen, ...)`), and where the
    handing file builds it more than once with the same settings (a detector's trainer builds its loader
    again after unfreezing the backbone).

    ## Why is this slow?
    A blocking host-to-device copy makes the Python thread wait until the batch has landed on the GPU
    before it can queue the forward pass, so the GPU idles during every copy and the CPU idles while it
    waits. With `non_blocking=True` the copy is queued on the current stream like a kernel: the host goes
    on to queue the forward pass (which the stream orders after the copy), and with pinned memory
    (`DataLoader(..., pin_memory=True)`, see TL402) the DMA engine moves the data while the GPU still
    computes. Without pinned memory the copy is staged through a driver buffer and the gain is small;
    the two settings belong together.

    ## Example
    ```python
    for images, labels in train_loader:
        images, labels = images.to(device), labels.to(device)
        loss = criterion(model(images), labels)
    ```

    ## Use instead
    ```python
    for images, labels in train_loader:
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        loss = criterion(model(images), labels)
    ```

    ## Fix safety
    The fix adds `non_blocking=True` to the copy. A non-blocking host-to-device copy reads its source after
    the call returns, so the source must not be written before the copy has run; the values a program
    computes on the GPU are the same either way (the stream orders the copy before every kernel that reads
    the result).

    The fix is **safe** when the tensor is a fresh batch of a `torch.utils.data.DataLoader` the file builds:
    the loader makes new tensors for every batch and nothing writes to them afterwards (PyTorch's pinned
    allocator keeps a freed source alive until its copy is done).

    It is **unsafe** when the loop's iterable is a loader only by its name (built in another file, or a
    custom iterable that might refill one pinned buffer for every batch), or when the loop body writes to
    the source tensor in place after the copy (`images.mul_(...)`, `images[...] = ...`): that write could
    race the copy and the GPU would see the new values.

    No fix is offered where the copy moves the loop's whole batch (`for batch in loader: batch.to(device)`)
    and the loader is not a `DataLoader` of the file with the default collation: a `collate_fn` (or a
    loader built elsewhere) may yield an object with a `.to()` of its own that rejects `non_blocking`
    (Hugging Face's `BatchEncoding` before transformers 4.48), so the fix could stop the loop from running.

    Device-to-host copies (`.cpu()`, `.to("cpu")`) are never flagged: with `non_blocking=True` the CPU
    tensor can be read before the copy has filled it.

    ## PyTorch versions
    `non_blocking=` is the keyword of `Tensor.to` and `Tensor.cuda` from PyTorch 0.4 on (it replaced
    `async=`, a reserved word since Python 3.7). Non-blocking copies only pay off on CUDA (and other
    accelerators with streams); on a CPU-only machine `non_blocking=True` changes nothing, so a CPU program
    (as TL101 tells one, a helper module that only CPU files import included) gets no finding.
    """

    code = "TL103"
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)
    name = "blocking-host-to-device-copy"
    message = ("blocking copy of a loader batch to the GPU; pass `non_blocking=True` (with `pin_memory=True` on "
               "the DataLoader) so the copy overlaps with compute")
    summary = "Batch copied host-to-device without non_blocking=True"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicabilities = (Applicability.SAFE, Applicability.UNSAFE)
    text_gate = (("oader", "OADER", "dl"),)  # may_name_a_loader

    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        return may_move_to_device(text) and may_name_a_loader(text)

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        facts = loader_facts(index, ctx.project)
        built_here = {loop.node for site in facts.sites for loop in site.loops}
        placed = _device_placed_loaders(index)
        seen: Set[ast.Call] = set()
        if runs_on_cpu(ctx):
            return  # a CPU program: no copy to a GPU to overlap
        for loop in index.loops:
            from_dataloader = loop.node in built_here
            if not from_dataloader and not _named_like_a_loader(facts, loop):
                continue
            if from_dataloader and facts.unpinned(loop):
                continue  # non_blocking gains nothing from pageable memory: TL402 reports the loader
            if placed and (_iterates_placed_loader(index, facts, loop, placed) or facts.draws_with_next(loop)):
                continue  # Accelerate / Fabric already put the batch on the device (or may have, for a batch
                # drawn with `next()` from an iterator the placed loader may feed): the copy is a no-op
            for call in facts.batch_moves(loop):
                if call in seen or not _can_add_keyword(call) or runs_once_in(index, call, loop):
                    continue  # (a batch peeked at once, `for x in loader: ...; break`, is not every batch)
                seen.add(call)
                self._report(ctx, index, facts, loop, call, from_dataloader)

    def _report(self, ctx: IndexContext, index: AstIndex, facts: LoaderFacts, loop: AstLoopInfo, call: ast.Call,
                from_dataloader: bool) -> None:
        written_after = _source_written_after(index, loop, call)
        message = self.message
        if _moves_whole_batch(loop, call) and not _default_collated(facts, loop):
            batch = call.func.value.id  # type: ignore[attr-defined]
            ctx.report(call, message=message + (
                f" (not fixed automatically: `{batch}` may be a batch object whose own `.to()` takes no "
                "`non_blocking`, such as a Hugging Face `BatchEncoding` before transformers 4.48)"))
            return
        refused = message + " ({reason})"  # the fix would drop a comment in the call's brackets
        if written_after:
            message += " (unsafe fix: the loop writes to the source tensor after the copy)"
        elif not from_dataloader:
            message += " (unsafe fix: a loader only by its name, which may reuse its buffers)"
        safe = from_dataloader and not written_after
        make = partial(_pass_non_blocking, applicability=Applicability.SAFE if safe else Applicability.UNSAFE)
        ctx.report(call, message=message, rewrite=Rewrite(make, refused, call, reads=call))


def _pass_non_blocking(call: cst.Call, analysis: FileAnalysis, applicability: Applicability) -> Union[Fix, str]:
    fixed = with_keyword(call, "non_blocking", cst.Name("True"))
    if loses_comment({call: fixed}):
        return DROPS_COMMENT
    return Fix.replace(call, fixed, applicability)


# Calls that wrap a loader so that it yields batches already on the device: Accelerate's
# `accelerator.prepare(...)` / `prepare_data_loader(...)` and Lightning Fabric's `fabric.setup_dataloaders(...)`
# (both place batches by default), keyed by the package the file must import for the name to mean that.
_PLACING_CALLS = {"prepare": ("accelerate",), "prepare_data_loader": ("accelerate",),
                  "setup_dataloaders": ("lightning", "lightning_fabric", "pytorch_lightning")}


def _device_placed_loaders(index: AstIndex) -> List[ast.Assign]:
    """The assignments that bind a placing call's result (``model, opt, train_dl = accelerator.prepare(...)``),
    where the file imports the package and does not turn placement off (``device_placement=False``,
    ``move_to_device=False``) anywhere."""
    imported = {value.split(".")[0] for value in index.imports.values()}
    if any(is_literal(keyword_value(info.node, off), False)
           for name in ("Accelerator", "setup_dataloaders", "prepare_data_loader")
           for info in index.calls_by_name.get(name, ()) for off in ("device_placement", "move_to_device", "put_on_device")):
        return []
    assigns = []
    for name, packages in _PLACING_CALLS.items():
        if not imported.intersection(packages):
            continue
        for info in index.calls_by_name.get(name, ()):
            call = info.node
            parent = index.parent(call)
            method = type(call.func) is ast.Attribute  # `accelerator.prepare(...)`, not a `prepare` of the file
            if (method or name == "prepare_data_loader") and type(parent) is ast.Assign and parent.value is call:
                assigns.append(parent)
    return assigns


def _iterates_placed_loader(index: AstIndex, facts: LoaderFacts, loop: AstLoopInfo, placed: List[ast.Assign]) -> bool:
    """The loop walks a name that a placing call's result is bound to in the loop's scope (or the module),
    directly or through names bound only to such loaders (``active = train_dl``, or
    ``accelerator.skip_first_batches(train_dl, n)`` when resuming)."""
    scope = index.scope_of(loop.node)
    targets = {dotted_name(part) for assign in placed if index.scope_of(assign) in (scope, index.tree)
               for target in assign.targets for part in _unpacked(target)}
    targets.discard(None)
    return bool(targets) and any(_placed_name(index, dotted_name(expr), scope, targets, 0)
                                 for expr in facts.iterated(loop))


def _placed_name(index: AstIndex, written: Optional[str], scope: AstScope, targets: Set[Optional[str]],
                 depth: int) -> bool:
    if written is None or depth > 3:
        return False
    if written in targets:
        return True
    values = index.values_of(written, scope) if "." not in written else ()
    return bool(values) and all(value is not None and _placed_value(index, value, scope, targets, depth)
                                for value in values)


def _placed_value(index: AstIndex, value: ast.AST, scope: AstScope, targets: Set[Optional[str]], depth: int) -> bool:
    if type(value) is ast.Call and call_name(value) == "skip_first_batches":  # type: ignore[arg-type]
        arguments = call_arguments(value)  # type: ignore[arg-type]
        if arguments:
            value = arguments[0][1]  # Accelerate's resumed loader keeps the placement of the one it wraps
    return type(value) in (ast.Name, ast.Attribute) and _placed_name(index, dotted_name(value), scope, targets,
                                                                      depth + 1)


def _unpacked(target: ast.expr) -> List[ast.expr]:
    if type(target) in (ast.Tuple, ast.List):
        return [part for element in target.elts  # type: ignore[attr-defined]
                for part in _unpacked(element.value if type(element) is ast.Starred else element)]
    return [target]


def _named_like_a_loader(facts: LoaderFacts, loop: AstLoopInfo) -> bool:
    index = facts.index
    for expr in facts.iterated(loop):
        if built_by_other_iterator(index, expr, index.scope_of(expr)):
            continue  # a torchtext `BucketIterator`: no DataLoader, whatever its name
        kind = type(expr)
        written = expr.attr if kind is ast.Attribute else expr.id if kind is ast.Name else None  # type: ignore[attr-defined]
        if written is not None and LOADER_NAME.search(written) and not (kind is ast.Name and _bound_nowhere(index, written)):
            return True
    return False


def _bound_nowhere(index: AstIndex, name: str) -> bool:
    """No statement of the file binds ``name`` (no assignment, loop or ``with`` target, parameter or import,
    and no star import that might): a loop over it would raise NameError, dead code that says nothing."""
    if name in index.imports or index.has_star_import():
        return False
    if any(type(node.ctx) is not ast.Load for node, _ in index.names_named(name)):
        return False
    return name not in index.parameter_names()


def _moves_whole_batch(loop: AstLoopInfo, call: ast.Call) -> bool:
    """``for batch in loader: batch.to(device)`` (or ``for step, batch in enumerate(loader)``): the copy's
    receiver is the whole batch, which a collate function may have made any object with a ``.to()`` of its
    own."""
    node = loop.node
    if type(node) is ast.While:
        return False
    target = node.target  # type: ignore[union-attr]
    iterable = node.iter  # type: ignore[union-attr]
    if (type(target) is ast.Tuple and type(iterable) is ast.Call and call_name(iterable) == "enumerate"
            and len(target.elts) == 2):
        target = target.elts[1]
        target = target.value if type(target) is ast.Starred else target
    owner = call.func.value  # type: ignore[attr-defined]
    return type(target) is ast.Name and type(owner) is ast.Name and owner.id == target.id


def _default_collated(facts: LoaderFacts, loop: AstLoopInfo) -> bool:
    """The loop walks a ``DataLoader(...)`` of this file built without ``collate_fn=``: its batches are what
    the default collation makes (a tensor where ``.to()`` works on the whole batch)."""
    sites = facts.sites_of(loop)
    return bool(sites) and all(site.imported.get("default_collate", False) if site.imported is not None
                               else keyword_value(site.call, "collate_fn") is None and not has_star(site.call)
                               for site in sites)


def _can_add_keyword(call: ast.Call) -> bool:
    """No ``non_blocking=`` yet, no ``*args``/``**kwargs``, and no positional ``non_blocking`` either
    (``x.to(device, dtype, True)``, ``x.cuda(0, True)``)."""
    if keyword_value(call, "non_blocking") is not None or has_star(call):
        return False
    return len(call.args) <= (2 if call_name(call) == "to" else 1)


def _source_written_after(index: AstIndex, loop: AstLoopInfo, call: ast.Call) -> bool:
    """The loop body writes in place, after ``call``, to the name the call copies (unless the call's own
    statement line rebinds that name to the copy)."""
    root = call.func.value  # type: ignore[attr-defined]
    while type(root) in (ast.Attribute, ast.Subscript):
        root = root.value
    if type(root) is not ast.Name:
        return False
    name = root.id
    statement = index.enclosing_statement(call)
    if isinstance(statement, StatementLine):  # LibCST's SimpleStatementLine: the line's simple statements
        block = index.statement_block(statement.first)  # type: ignore[arg-type]
        start = index.block_position(statement.first)  # type: ignore[arg-type]
        end = index.block_position(statement.last)  # type: ignore[arg-type]
        for small in block[start:end + 1]:
            if type(small) is ast.Assign and any(name in target_names(t) for t in small.targets):
                return False
    after = source_order(call)
    for statement in loop.node.body:
        for node in walk(statement):
            kind = type(node)
            if kind not in (ast.Call, ast.Assign, ast.AugAssign) or source_order(node) <= after:
                continue
            if kind is ast.Call and _writes_in_place(node, name):  # type: ignore[arg-type]
                return True
            if kind is ast.Assign and any(_root_is(t, name) and type(t) is not ast.Name
                                          for t in node.targets):  # type: ignore[attr-defined]
                return True
            if kind is ast.AugAssign and _root_is(node.target, name):  # type: ignore[attr-defined]
                return True
    return False


def _writes_in_place(call: ast.Call, name: str) -> bool:
    method = call_name(call)
    return (method is not None and method.endswith("_") and not method.startswith("_")
            and type(call.func) is ast.Attribute and _root_is(call.func.value, name))


def _root_is(expr: ast.AST, name: str) -> bool:
    while type(expr) in (ast.Attribute, ast.Subscript):
        expr = expr.value  # type: ignore[attr-defined]
    return type(expr) is ast.Name and expr.id == name  # type: ignore[attr-defined]
