"""TL103: a batch from a DataLoader copied to the GPU without ``non_blocking=True``."""

from __future__ import annotations

import ast
from typing import List, Optional, Set, Union

import libcst as cst

from torchlint.analysis import (FileAnalysis, LoopInfo, call_name, dotted_name, keyword_arg, receiver, target_names,
                                walk)
from torchlint.arguments import with_keyword
from torchlint.ast_index import AstCallInfo, AstIndex, index_of
from torchlint.ast_index import call_name as ast_call_name
from torchlint.ast_index import dotted_name as ast_dotted_name
from torchlint.ast_index import target_names as ast_target_names
from torchlint.ast_index import walk as ast_walk
from torchlint.comments import DROPS_COMMENT, loses_comment
from torchlint.config import Settings
from torchlint.facts.devices import CUDA, to_destination
from torchlint.facts.loaders import is_batch_part, root_name
from torchlint.loader_prefilter import (LOADER_NAME, assigned_values, is_move_without_non_blocking, last_name,
                                       loop_may_move_batch, may_move_to_device, may_name_a_loader)
from torchlint.loaders import WRAPPERS, LoaderFacts, loader_facts
from torchlint.rule import Applicability, Fix, FixAvailability, Rule, RuleContext


class BlockingHostToDeviceCopy(Rule):
    """## What it does
    Flags `.to(device)` and `.cuda()` of a batch that comes from iterating a `DataLoader` (the loop's
    targets, or what the loop body unpacks or indexes from them: `x, y = batch`, `batch["image"]`, the
    values of `{k: v.to(device) for k, v in batch.items()}`) when the destination is plausibly a CUDA
    device and `non_blocking=` is not passed.

    A loop counts as iterating a loader when it walks a `DataLoader(...)` this file builds (through its
    name, `enumerate`/`tqdm`/`zip`, or a function of the file that takes it as a parameter) or a name that
    says it is one (`train_loader`, `dataloader`, `val_dl`). Silent for copies to a provable CPU device
    (`"cpu"`, `torch.device("cpu")`, a name bound to one), for device-to-host copies (`.cpu()`), for
    `.to(x)` where `x` may be a dtype or a tensor, for calls that already pass `non_blocking=` (either
    way) or `**kwargs`, and in tests (pytest files, `tests/` folders). Silent too for loops over a loader
    bound to the result of Hugging Face Accelerate's `accelerator.prepare(...)` / `prepare_data_loader(...)`
    or Lightning Fabric's `fabric.setup_dataloaders(...)`: those loaders yield batches already on the
    device, so the `.to(accelerator.device)` left in the loop copies nothing (unless the file turns that
    placement off: `device_placement=False`, `move_to_device=False`, `put_on_device=False`).

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
    accelerators with streams); on a CPU-only machine `non_blocking=True` changes nothing.
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

    has_ast_prefilter = True

    @classmethod
    def may_fire_in_ast(cls, tree: ast.Module, text: str, settings: Settings) -> bool:
        return loop_may_move_batch(tree, text) and _ast_may_report(index_of(tree))

    def check(self, ctx: RuleContext) -> None:
        a = ctx.analysis
        facts = loader_facts(a)
        built_here = {id(loop.node) for site in facts.sites for loop in site.loops}
        placed = _device_placed_loaders(a)
        seen: Set[int] = set()
        for loop in a.loops:
            from_dataloader = id(loop.node) in built_here
            if not from_dataloader and not _named_like_a_loader(facts, loop):
                continue
            if placed and _iterates_placed_loader(a, facts, loop, placed):
                continue  # Accelerate / Fabric already put the batch on the device: the copy is a no-op
            for call in facts.batch_moves(loop):
                if id(call) in seen or not _can_add_keyword(call):
                    continue
                seen.add(id(call))
                self._report(ctx, a, facts, loop, call, from_dataloader)

    def _report(self, ctx: RuleContext, a: FileAnalysis, facts: LoaderFacts, loop: LoopInfo, call: cst.Call,
                from_dataloader: bool) -> None:
        written_after = _source_written_after(a, loop, call)
        safe = from_dataloader and not written_after
        message = self.message
        if _moves_whole_batch(loop, call) and not _default_collated(facts, loop):
            batch = receiver(call).value  # type: ignore[union-attr]
            ctx.report(call, message=message + (
                f" (not fixed automatically: `{batch}` may be a batch object whose own `.to()` takes no "
                "`non_blocking`, such as a Hugging Face `BatchEncoding` before transformers 4.48)"))
            return
        fixed = _with_non_blocking(call)
        if loses_comment({call: fixed}):
            ctx.report(call, message=f"{message} ({DROPS_COMMENT})")
            return
        if written_after:
            message += " (unsafe fix: the loop writes to the source tensor after the copy)"
        elif not from_dataloader:
            message += " (unsafe fix: a loader only by its name, which may reuse its buffers)"
        ctx.report(call, message=message,
                   fix=Fix.replace(call, fixed, Applicability.SAFE if safe else Applicability.UNSAFE))


# Calls that wrap a loader so that it yields batches already on the device: Accelerate's
# `accelerator.prepare(...)` / `prepare_data_loader(...)` and Lightning Fabric's `fabric.setup_dataloaders(...)`
# (both place batches by default), keyed by the package the file must import for the name to mean that.
_PLACING_CALLS = {"prepare": ("accelerate",), "prepare_data_loader": ("accelerate",),
                  "setup_dataloaders": ("lightning", "lightning_fabric", "pytorch_lightning")}


def _device_placed_loaders(a: FileAnalysis) -> List[cst.Assign]:
    """The assignments that bind a placing call's result (``model, opt, train_dl = accelerator.prepare(...)``),
    where the file imports the package and does not turn placement off (``device_placement=False``,
    ``move_to_device=False``) anywhere."""
    imported = {value.split(".")[0] for value in a.imports.values()}
    if any(keyword_arg(call, off) is not None and _is_false(keyword_arg(call, off).value)
           for name in ("Accelerator", "setup_dataloaders", "prepare_data_loader")
           for call in a.calls_by_name.get(name, ()) for off in ("device_placement", "move_to_device", "put_on_device")):
        return []
    assigns = []
    for name, packages in _PLACING_CALLS.items():
        if not imported.intersection(packages):
            continue
        for call in a.calls_by_name.get(name, ()):
            parent = a.parent(call)
            method = isinstance(call.func, cst.Attribute)  # `accelerator.prepare(...)`, not a `prepare` of the file
            if (method or name == "prepare_data_loader") and isinstance(parent, cst.Assign) and parent.value is call:
                assigns.append(parent)
    return assigns


def _is_false(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "False"


def _iterates_placed_loader(a: FileAnalysis, facts: LoaderFacts, loop: LoopInfo, placed: List[cst.Assign]) -> bool:
    """The loop walks a name that a placing call's result is bound to in the loop's scope (or the module),
    directly or through names bound only to such loaders (``active = train_dl``, or
    ``accelerator.skip_first_batches(train_dl, n)`` when resuming)."""
    scope = a.scope_of(loop.node)
    targets = {dotted_name(part) for assign in placed if a.scope_of(assign) in (scope, a.module)
               for target in assign.targets for part in _unpacked(target.target)}
    targets.discard(None)
    return bool(targets) and any(_placed_name(a, dotted_name(expr), scope, targets, 0) for expr in facts.iterated(loop))


def _placed_name(a: FileAnalysis, written: Optional[str], scope, targets: Set[Optional[str]], depth: int) -> bool:
    if written is None or depth > 3:
        return False
    if written in targets:
        return True
    values = a.values_of(written, scope) if "." not in written else ()
    return bool(values) and all(value is not None and _placed_value(a, value, scope, targets, depth) for value in values)


def _placed_value(a: FileAnalysis, value: cst.BaseExpression, scope, targets: Set[Optional[str]], depth: int) -> bool:
    if isinstance(value, cst.Call) and call_name(value) == "skip_first_batches" and value.args:
        value = value.args[0].value  # Accelerate's resumed loader keeps the placement of the one it wraps
    return isinstance(value, (cst.Name, cst.Attribute)) and _placed_name(a, dotted_name(value), scope, targets, depth + 1)


def _unpacked(target: cst.BaseExpression) -> List[cst.BaseExpression]:
    if isinstance(target, (cst.Tuple, cst.List)):
        return [part for element in target.elements for part in _unpacked(element.value)]
    return [target]


def _named_like_a_loader(facts: LoaderFacts, loop: LoopInfo) -> bool:
    for expr in facts.iterated(loop):
        written = expr.attr.value if isinstance(expr, cst.Attribute) else expr.value if isinstance(expr, cst.Name) else None
        if written is not None and LOADER_NAME.search(written):
            return True
    return False


def _moves_whole_batch(loop: LoopInfo, call: cst.Call) -> bool:
    """``for batch in loader: batch.to(device)`` (or ``for step, batch in enumerate(loader)``): the copy's
    receiver is the whole batch, which a collate function may have made any object with a ``.to()`` of its
    own."""
    if not isinstance(loop.node, cst.For):
        return False
    target = loop.node.target
    iterable = loop.node.iter
    if isinstance(target, cst.Tuple) and isinstance(iterable, cst.Call) and call_name(iterable) == "enumerate" \
            and len(target.elements) == 2:
        target = target.elements[1].value
    owner = receiver(call)
    return isinstance(target, cst.Name) and isinstance(owner, cst.Name) and owner.value == target.value


def _default_collated(facts: LoaderFacts, loop: LoopInfo) -> bool:
    """The loop walks a ``DataLoader(...)`` of this file built without ``collate_fn=``: its batches are what
    the default collation makes (a tensor where ``.to()`` works on the whole batch)."""
    sites = [site for site in facts.sites if any(l is loop for l in site.loops)]
    return bool(sites) and all(keyword_arg(site.call, "collate_fn") is None
                               and not any(arg.star for arg in site.call.args) for site in sites)


def _can_add_keyword(call: cst.Call) -> bool:
    """No ``non_blocking=`` yet, no ``*args``/``**kwargs``, and no positional ``non_blocking`` either
    (``x.to(device, dtype, True)``, ``x.cuda(0, True)``)."""
    if keyword_arg(call, "non_blocking") is not None or any(arg.star for arg in call.args):
        return False
    positional = [arg for arg in call.args if arg.keyword is None]
    return len(positional) <= (2 if call_name(call) == "to" else 1)


def _with_non_blocking(call: cst.Call) -> cst.Call:
    return with_keyword(call, "non_blocking", cst.Name("True"))


def _source_written_after(a: FileAnalysis, loop: LoopInfo, call: cst.Call) -> bool:
    """The loop body writes in place, after ``call``, to the name the call copies (unless the call's own
    statement rebinds that name to the copy)."""
    owner = receiver(call)
    root = owner
    while isinstance(root, (cst.Attribute, cst.Subscript)):
        root = root.value
    if not isinstance(root, cst.Name):
        return False
    name = root.value
    statement = a.enclosing_statement(call)
    if isinstance(statement, cst.SimpleStatementLine):
        for small in statement.body:
            if isinstance(small, cst.Assign) and any(name in target_names(t.target) for t in small.targets):
                return False
    assert isinstance(loop.node, cst.For)
    for node in walk(loop.node.body):
        if not a.comes_before(call, node):
            continue
        if isinstance(node, cst.Call) and _writes_in_place(node, name):
            return True
        targets: List[cst.BaseExpression] = []
        if isinstance(node, cst.Assign):
            targets = [t.target for t in node.targets]
        elif isinstance(node, cst.AugAssign):
            targets = [node.target]
        if any(_root_is(t, name) and not isinstance(t, cst.Name) for t in targets):
            return True
        if isinstance(node, cst.AugAssign) and _root_is(node.target, name):
            return True
    return False


def _writes_in_place(call: cst.Call, name: str) -> bool:
    method = call_name(call)
    owner: Optional[cst.BaseExpression] = receiver(call)
    return (method is not None and method.endswith("_") and not method.startswith("_")
            and owner is not None and _root_is(owner, name))


def _root_is(expr: cst.BaseExpression, name: str) -> bool:
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        expr = expr.value
    return isinstance(expr, cst.Name) and expr.value == name


# --- the ast stage: check's gates, each read as a superset ---------------------------------------------


def _ast_may_report(index: AstIndex) -> bool:
    """A for loop tied to a DataLoader of the file or named like a loader (``check``'s two ways in) that
    moves part of its batch with ``.to``/``.cuda`` to a device that may be CUDA, without ``non_blocking=``."""
    sites = index.calls_by_name.get("DataLoader", ())
    targets = _ast_loader_targets(index, sites)
    moves = {id(info.node): info for name in ("to", "cuda") for info in index.calls_by_name.get(name, ())
             if is_move_without_non_blocking(info.node)}
    for loop in index.loops:
        node = loop.node
        if type(node) not in (ast.For, ast.AsyncFor):  # LibCST's For is both
            continue
        iterated = list(_ast_iterated(index, node.iter, 0))
        tied = sites and any(_ast_tied(index, expr, loop.function, targets) for expr in iterated)
        if not tied and not any(_ast_named_like_a_loader(expr) for expr in iterated):
            continue
        if _ast_moves_batch(index, node, moves):
            return True
    return False


def _ast_loader_targets(index: AstIndex, sites) -> Set[str]:
    """How each ``DataLoader(...)`` is written where it is assigned (``_assigned_target``): ``loader``,
    ``self.loader``; annotated assignments are found by a walk of the statements."""
    targets: Set[str] = set()
    unassigned = set()
    for info in sites:
        target = index.assigned_to.get(info.node)
        written = ast_dotted_name(target) if target is not None else None
        if written is not None:
            targets.add(written)
        elif target is None:
            unassigned.add(id(info.node))
    if unassigned:
        for node in ast_walk(index.tree):
            if type(node) is ast.AnnAssign and id(node.value) in unassigned:
                written = ast_dotted_name(node.target)
                if written is not None:
                    targets.add(written)
    return targets


def _ast_iterated(index: AstIndex, expr: ast.expr, depth: int):
    """``LoaderFacts._unwrap``, a superset: a name is kept as well as every wrapper it is assigned."""
    if depth > 3:
        return
    if type(expr) is ast.Call and type(expr.func) in (ast.Name, ast.Attribute) and ast_call_name(expr) in WRAPPERS:
        for arg in expr.args:
            if type(arg) is not ast.Starred:
                yield from _ast_iterated(index, arg, depth + 1)
        return
    if type(expr) is ast.Name:
        for value in assigned_values(index).get(expr.id, ()):
            if type(value) is ast.Call and ast_call_name(value) in WRAPPERS:
                yield from _ast_iterated(index, value, depth + 1)
    yield expr


def _ast_tied(index: AstIndex, expr: ast.expr, function, targets: Set[str]) -> bool:
    """``LoaderFacts._sites``' ties, a superset: a ``DataLoader(...)`` iterated directly, a name or
    attribute spelled as a loader's target (scopes are not compared), or a parameter of the loop's def
    (a same-file call may pass it a loader)."""
    if type(expr) is ast.Call and ast_call_name(expr) == "DataLoader":
        return True
    if ast_dotted_name(expr) in targets:
        return True
    if type(expr) is ast.Name and isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        arguments = function.args
        return any(arg.arg == expr.id for arg in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs))
    return False


def _ast_named_like_a_loader(expr: ast.expr) -> bool:
    written = last_name(expr)
    return written is not None and LOADER_NAME.search(written) is not None


def _ast_moves_batch(index: AstIndex, loop: Union[ast.For, ast.AsyncFor], moves) -> bool:
    """``LoaderFacts.batch_moves`` is not empty, a superset: the batch names are closed under every
    ``x = <part of the batch>`` of the body (check takes them in source order)."""
    body = [node for statement in loop.body for node in ast_walk(statement)]
    found = [node for node in body if id(node) in moves]
    if not found:
        return False
    names = set(ast_target_names(loop.target))
    assignments = [node for node in body if type(node) is ast.Assign and is_batch_part(node.value)]
    grown = True
    while grown:
        grown = False
        for assignment in assignments:
            if root_name(assignment.value) in names:
                new = {name for target in assignment.targets for name in ast_target_names(target)} - names
                if new:
                    names |= new
                    grown = True
    comprehension_names = {name for node in body if type(node) is ast.comprehension
                           and root_name(node.iter) in names for name in ast_target_names(node.target)}
    for call in found:  # moves of a name or a part of one (is_move_without_non_blocking)
        root = root_name(call.func.value)  # type: ignore[attr-defined]
        if (root in names or root in comprehension_names) and _ast_may_go_to_cuda(index, moves[id(call)]):
            return True
    return False


def _ast_may_go_to_cuda(index: AstIndex, info: AstCallInfo) -> bool:
    """``to_destination(...) == CUDA``, read by the index's form of the fact (equal to LibCST's:
    tests/test_facts.py)."""
    scope = info.function if info.function is not None else index.tree
    return to_destination(index, info.node, scope) == CUDA
