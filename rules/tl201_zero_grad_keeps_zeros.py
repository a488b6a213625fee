"""TL201: gradients reset by filling them with zeros instead of freeing them."""

from __future__ import annotations

import ast
import bisect
import re
from functools import partial
from typing import TYPE_CHECKING, Iterator, List, Optional, Set, Tuple, Union

import libcst as cst

from torchlint.fix.analysis import call_name as cst_call_name
from torchlint.facts.index import AstCallInfo, AstIndex, Extent, call_arguments, call_name, dotted_name, is_literal, walk
from torchlint.fix.comments import DROPS_COMMENT, has_comment, loses_comment
from torchlint.config import Settings
from torchlint.rule import Applicability, Fix, FixAvailability, IndexContext, Rewrite, Rule

if TYPE_CHECKING:
    from torchlint.fix.analysis import FileAnalysis
from torchlint.facts.text_gates import CALL_GAP, GAP, call_text, call_with_text, search_method

_PARAM_NAME = re.compile(r"param", re.IGNORECASE)
# Text stage (ZeroGradKeepsZeros.may_fire): `zero_grad(`, from torch 2.0 on only with a False; or
# `.grad.zero_()`, `.grad.data.zero_()`, or an assignment to a `.grad` in a file that names `zeros_like`,
# however spaced (see text_prefilter): `p . grad . zero_ ()`, `(p.grad).zero_()`,
# `p.grad = (torch.zeros_like(p))`, `p.grad = zl(p)` after `from torch import zeros_like as zl`.
_ZERO_GRAD_TEXT = call_text("zero_grad")
_ZERO_GRAD_FALSE_TEXT = call_with_text("zero_grad", "False")
_GRAD_ZERO_TEXT = re.compile(r"grad" + CALL_GAP + r"(?:\." + GAP + r"data" + CALL_GAP + r")?\." + GAP + r"zero_" + CALL_GAP + r"\(")
_GRAD_ASSIGN_TEXT = re.compile(r"grad" + CALL_GAP + r"=(?!=)")  # searched with `search_method`: `.grad =`


class ZeroGradKeepsZeros(Rule):
    """## What it does
    Flags gradient resets that keep zero-filled tensors instead of freeing them:

    - `optimizer.zero_grad(set_to_none=False)` and `model.zero_grad(set_to_none=False)`;
    - a bare `optimizer.zero_grad()` / `model.zero_grad()` when the configured `torch-version` is below 2.0,
      where `set_to_none` defaulted to `False`;
    - manual zeroing loops over parameters: `for p in model.parameters(): p.grad.zero_()`, `p.grad.data.zero_()`,
      `p.grad.detach_(); p.grad.zero_()` and `p.grad = torch.zeros_like(p)`.

    Test files (pytest files, files under `tests/`, `test/` or `testing/`) are not checked: their speed does
    not matter. It stays silent where the zeros are load-bearing: when the same function reads or updates `.grad`
    (`p.grad += g`, `p.grad.add_(...)`, `p.grad.norm()`, `p.grad is None`...) after the reset and before the
    next `backward()`, counting the function's next call (a parameter server that resets at the end of a
    round and does `p.grad += g` at the top of the same function); when another method of the class reads
    or updates gradients without calling `backward()`, or the function and its class write gradients by hand
    and never call `backward()` (the gradients arrive from workers, the zeros are where they are summed); when the zeroing sits between `backward()` and `optimizer.step()` (that masks gradients,
    it does not reset them); inside an implementation of `zero_grad(set_to_none=...)` itself (a function
    with a `set_to_none` parameter, a branch testing `set_to_none`, or a loop that also calls
    `p.grad.requires_grad_(False)` the way `Optimizer.zero_grad` does; a function merely named `zero_grad`
    is judged by its code like any other); and on `p.grad = torch.zeros_like(p)`
    in a function that never calls `backward()`, which creates gradient buffers for manual accumulation
    (a parameter server's `__init__`) rather than resetting them each step.

    ## Why is this slow?
    Zeroing launches a memset kernel per gradient every step (a `foreach` one at best), and the next `backward()`
    then *adds* into the zeros (a read-modify-write of every gradient) instead of simply writing the fresh
    gradient. Setting gradients to `None` costs nothing, lets `backward()` allocate and write them directly, and
    frees their memory between the reset and the next backward. `p.grad = torch.zeros_like(p)` is worse still:
    it allocates a fresh tensor per parameter per step.

    ## Example
    ```python
    for inputs, targets in loader:
        optimizer.zero_grad(set_to_none=False)
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    for inputs, targets in loader:
        optimizer.zero_grad()  # set_to_none=True is the default since PyTorch 2.0
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.step()
    ```

    ## Fix safety
    Every fix is **unsafe**: it changes what a gradient is after the reset, from a zero tensor to `None`.
    - The fix drops `set_to_none=False` (writes `set_to_none=True` when `torch-version` is below 2.0, also for a
      bare `zero_grad()` there), and rewrites a manual zeroing statement to `p.grad = None` (a preceding
      `p.grad.detach_()` is removed with it; a comment at the end of its line stays, on a line of its own).
    - Comments stay on their lines: one after the dropped `set_to_none=False` remains after the opening
      bracket, or on the argument's own line. Where comments sit on both sides of the argument, or inside
      the part of a manual zeroing that goes away (`(p.grad  # note` / `.zero_())`, a comment inside the
      removed `detach_()` call), the finding is reported without a fix: it would drop a comment.
    - A parameter that gets no gradient in a step (unused branch, frozen path, a `torch.no_grad()` part of the
      model) keeps `grad=None`. PyTorch's optimizers **skip** such parameters: no weight decay, no momentum or
      Adam moment update, no step at all, whereas a zero gradient still decays the weight and moves it by its
      momentum. Training of such parameters changes.
    - Code that reads `p.grad` later (gradient clipping by hand, logging gradient norms, a custom optimizer)
      may meet `None` where it met a zero tensor, and `p.grad += g` raises `TypeError`. Reads in the same
      function between the reset and the next `backward()` make the rule silent, but reads elsewhere (another
      function, a hook) cannot be seen. Where a gradient is read after the last reset (after the training
      loop, in the same function or, at module level, anywhere later in the script:
      `print(model.fc.weight.grad)`), the finding is reported without a fix: that read would meet `None`.
    - Gradient memory is freed after the reset and allocated again by `backward()`.
    The fix is only safe when every parameter gets a gradient every step and nothing reads a gradient before the
    next `backward()`; torchlint cannot prove that statically, so no fix is marked safe.

    ## PyTorch versions
    Since PyTorch 2.0, `Optimizer.zero_grad()` and `Module.zero_grad()` default to `set_to_none=True`, so a bare
    `zero_grad()` is fine and only an explicit `set_to_none=False` is flagged. Before 2.0 the default was
    `False`: with `torch-version` below 2.0 a bare `zero_grad()` is flagged too and the fix writes
    `set_to_none=True` (available since 1.7). Below 1.7 `zero_grad()` has no `set_to_none` argument, so a bare call
    is not flagged there (a manual `p.grad.zero_()` loop still is: `p.grad = None` works on every version).
    """

    code = "TL201"
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)
    name = "zero-grad-keeps-zeros"
    message = "Gradients are reset to zero tensors; set them to `None` instead"
    summary = "zero_grad(set_to_none=False) or manual gradient zeroing keeps zero-filled gradients"
    fix_availability = FixAvailability.ALWAYS
    fix_applicabilities = (Applicability.UNSAFE,)
    # The text stage: a `zero_grad(` call, or a manual reset of a `.grad`; from 2.0 on a bare zero_grad() is
    # fine, so only one passing False can fire. Every match holds "grad" and "zero": two plain substring
    # tests before the regexes, whose literal prefixes keep them fast.
    text_gate = (("grad",), ("zero",))

    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        if "grad" not in text or "zero" not in text:
            return False
        zero_grad = _ZERO_GRAD_TEXT if settings.torch_version < (2, 0) else _ZERO_GRAD_FALSE_TEXT
        if "zero_grad" in text and zero_grad.search(text):
            return True
        if "zero_" in text and search_method(_GRAD_ZERO_TEXT, text):
            return True
        return "zeros_like" in text and search_method(_GRAD_ASSIGN_TEXT, text) is not None

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        old_torch = ctx.torch_version < (2, 0)
        memo: dict = {}  # what each region holds, for this file (``_zeros_are_load_bearing``)
        for info in index.calls_by_name.get("zero_grad", ()):
            self._check_zero_grad(ctx, index, info.node, old_torch, memo)
        for loop in index.loops:
            if isinstance(loop.node, (ast.For, ast.AsyncFor)):
                param = _parameter_loop_target(index, loop.node)
                if param is not None:
                    self._check_manual_loop(ctx, index, loop.node, param, memo)

    # --- optimizer.zero_grad(...) / model.zero_grad(...) ----------------------------------------------
    def _check_zero_grad(self, ctx: IndexContext, index: AstIndex, call: ast.Call, old_torch: bool,
                         memo: dict) -> None:
        if not isinstance(call.func, ast.Attribute):
            return
        arguments = call_arguments(call)
        if len(arguments) > 1 or any(isinstance(arg, ast.Starred) for arg in call.args) or any(
                keyword.arg is None for keyword in call.keywords):
            return
        keyword, value = arguments[0] if arguments else (None, None)
        if keyword is not None and keyword != "set_to_none":
            return
        if value is None:
            if not old_torch or not index.imports_torch() or ctx.torch_version < (1, 7):
                return  # (before 1.7 `zero_grad()` has no `set_to_none` to pass: nothing to switch to)
        elif not is_literal(value, False):
            return  # set_to_none=True, or a variable: the caller decides
        statement = index.enclosing_statement(call)
        if statement is None or _zeros_are_load_bearing(index, statement, memo):
            return
        owner = dotted_name(call.func.value) or "optimizer"
        written = "set_to_none=False" if keyword is not None else "False"
        if value is None:
            message = (f"`{owner}.zero_grad()` keeps zero-filled gradients before PyTorch 2.0; "
                       "pass `set_to_none=True`")
        elif old_torch:
            message = (f"`{owner}.zero_grad({written})` fills every gradient with zeros each step; "
                       "use `set_to_none=True`")
        else:
            message = (f"`{owner}.zero_grad({written})` fills every gradient with zeros each step; "
                       f"drop `{written}` so gradients are freed")
        read = _read_after_last_reset(index, call, memo)
        if read is not None:
            ctx.report(call, message=message + _read_later(index, read))
            return
        rewrite = Rewrite(partial(_zero_grad_fix, old_torch=old_torch), message + " ({reason})", call)
        ctx.report(call, message=message, rewrite=rewrite)

    # --- for p in model.parameters(): p.grad.zero_() --------------------------------------------------
    def _check_manual_loop(self, ctx: IndexContext, index: AstIndex, loop: Union[ast.For, ast.AsyncFor],
                           param: str, memo: dict) -> None:
        function = index.function_of(loop)
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            # an implementation of `zero_grad(set_to_none=...)`; the function's name alone decides nothing
            if any(arg.arg == "set_to_none" for arg in function.args.args + function.args.kwonlyargs):
                return
        body_calls = [info for statement in loop.body for info in index.calls_in(statement)]
        if any(call_name(info.node) == "requires_grad_" and isinstance(info.node.func, ast.Attribute)
               and _grad_of(info.node.func.value, param) is not None for info in body_calls):
            return  # a re-implementation of zero_grad(set_to_none=False): the zeros are the point
        zeroings: List[Tuple[ast.stmt, ast.Call]] = []
        for statement, call in _zeroing_statements(index, loop, body_calls, param):
            if any(isinstance(anc, ast.If) and _mentions(anc.test, "set_to_none") for anc in index.ancestors(statement)):
                continue
            if isinstance(statement, ast.Assign) and not _events_in(index, _region(index, loop), memo).has_backward:
                continue  # `p.grad = zeros_like(p)` with no backward() around: buffers made for manual accumulation
            zeroings.append((statement, call))
        if not zeroings or _zeros_are_load_bearing(index, loop, memo):
            return
        message = (f"Zeroing `{param}.grad` in place keeps zero-filled gradients; set `{param}.grad = None` "
                   "(or call `zero_grad()`)")
        read = _read_after_last_reset(index, loop, memo)
        for statement, call in zeroings:
            if read is not None:
                ctx.report(statement, message=message + _read_later(index, read))
                continue
            # The fix rewrites the statement: the LibCST twin of its zeroing call leads to it (``_manual_fix``).
            rewrite = Rewrite(partial(_manual_fix, param=param), message + " ({reason})", call)
            ctx.report(statement, message=message, rewrite=rewrite)


def _mentions(node: ast.AST, name: str) -> bool:
    """``name`` spelled as a name, an attribute, a keyword or a lambda parameter in ``node`` (LibCST's
    ``names_in``: every ``Name`` node)."""
    for child in ast.walk(node):
        spelled = (child.id if isinstance(child, ast.Name) else child.attr if isinstance(child, ast.Attribute)
                   else child.arg if isinstance(child, (ast.keyword, ast.arg)) else None)
        if spelled == name:
            return True
    return False


def _parameter_loop_target(index: AstIndex, loop: Union[ast.For, ast.AsyncFor]) -> Optional[str]:
    """``p`` in ``for p in model.parameters()``, ``for n, p in m.named_parameters()``, ``for p in group["params"]``."""
    target = loop.target
    it = loop.iter
    if isinstance(it, ast.Call) and call_name(it) in {"list", "tuple", "filter"} and (it.args or it.keywords):
        it = call_arguments(it)[-1][1]  # the last argument, as LibCST lists them
    named = False
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute):
        method = it.func.attr
        if method == "parameters":
            pass
        elif method == "named_parameters":
            named = True
        else:
            return None
    elif isinstance(it, ast.Subscript):
        if _only_subscript(index, it) != "params":
            return None
    else:
        name = dotted_name(it)
        if name is None or not _PARAM_NAME.search(name.split(".")[-1]):
            return None
    if named:
        if isinstance(target, ast.Tuple) and len(target.elts) == 2 and isinstance(target.elts[1], ast.Name):
            return target.elts[1].id
        return None
    return target.id if isinstance(target, ast.Name) else None


def _only_subscript(index: AstIndex, subscript: ast.Subscript) -> Optional[str]:
    """The string in ``x["params"]`` (or ``x["params",]``: one element to LibCST too), written as one literal."""
    element = subscript.slice
    if isinstance(element, ast.Tuple) and len(element.elts) == 1 and not index.has_own_brackets(element):
        element = element.elts[0]
    return index.literal_string(element)


def _grad_of(expr: Optional[ast.AST], param: str) -> Optional[ast.Attribute]:
    """The ``p.grad`` in ``p.grad`` or ``p.grad.data``."""
    if isinstance(expr, ast.Attribute) and expr.attr == "data":
        expr = expr.value
    if isinstance(expr, ast.Attribute) and expr.attr == "grad" and isinstance(expr.value, ast.Name) and expr.value.id == param:
        return expr
    return None


def _zeroing_statements(index: AstIndex, loop: ast.AST, body_calls: List[AstCallInfo],
                        param: str) -> Iterator[Tuple[ast.stmt, ast.Call]]:
    """(statement, its call) for each zeroing of the loop target's grad directly in ``loop``: ``p.grad.zero_()``,
    ``p.grad.data.zero_()``, ``p.grad = torch.zeros_like(...)``."""
    for info in body_calls:
        call = info.node
        name = call_name(call)
        if (name != "zero_" and name != "zeros_like") or info.loop is None or info.loop.node is not loop:
            continue
        statement = index.parent(call)
        if name == "zero_":
            if (isinstance(statement, ast.Expr) and not call.args and not call.keywords
                    and isinstance(call.func, ast.Attribute) and _grad_of(call.func.value, param) is not None):
                yield statement, call
        elif (isinstance(statement, ast.Assign) and len(statement.targets) == 1
              and index.qualified_name(call.func) == "torch.zeros_like" and len(call.args) + len(call.keywords) == 1):
            target = statement.targets[0]
            if _grad_of(target, param) is target:  # p.grad.data = ... is not a rebinding of p.grad
                yield statement, call


# --- the fixes, made on LibCST's tree ------------------------------------------------------------------
def _zero_grad_fix(call: cst.Call, a: FileAnalysis, old_torch: bool) -> Union[Fix, str]:
    """``set_to_none=True`` before PyTorch 2.0, else the call without its ``set_to_none=False``."""
    arg = call.args[0] if call.args else None
    if arg is None:
        new_call: Optional[cst.Call] = call.with_changes(args=[cst.Arg(
            cst.Name("True"), keyword=cst.Name("set_to_none"),
            equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                  whitespace_after=cst.SimpleWhitespace("")))])
    elif old_torch:
        new_call = call.with_changes(args=[arg.with_changes(value=cst.Name("True"))])
    else:
        new_call = _without_argument(call, arg)
    if new_call is None or loses_comment({call: new_call}):
        return DROPS_COMMENT
    return Fix.replace(call, new_call, Applicability.UNSAFE)


def _method_on_grad(small: cst.BaseSmallStatement, param: str, method: str) -> Optional[cst.Attribute]:
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        call = small.value
        if cst_call_name(call) == method and not call.args and isinstance(call.func, cst.Attribute):
            return _cst_grad_of(call.func.value, param)
    return None


def _cst_grad_of(expr: cst.BaseExpression, param: str) -> Optional[cst.Attribute]:
    """``_grad_of`` on LibCST's tree."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "data":
        expr = expr.value
    if (isinstance(expr, cst.Attribute) and expr.attr.value == "grad"
            and isinstance(expr.value, cst.Name) and expr.value.value == param):
        return expr
    return None


def _without_argument(call: cst.Call, arg: cst.Arg) -> Optional[cst.Call]:
    """``zero_grad(set_to_none=False)`` without its one argument, every comment kept on its line: one after
    the argument stays after the opening bracket (``zero_grad(  # note``) or, where the argument had a line
    of its own, on that line. None where comments sit both before and after the argument."""
    comma = arg.comma if isinstance(arg.comma, cst.Comma) else None
    spaces = (comma.whitespace_before, comma.whitespace_after) if comma is not None else ()
    after = [ws for ws in (*spaces, arg.whitespace_after_arg) if has_comment(ws)]
    before = call.whitespace_before_args
    if not after:
        if has_comment(before):
            return call.with_changes(args=[])  # `zero_grad(\n    # note\n    set_to_none=False)`: the note stays
        return call.with_changes(args=[], whitespace_before_args=cst.SimpleWhitespace(""))
    if len(after) > 1 or has_comment(before) or not isinstance(after[0], cst.ParenthesizedWhitespace):
        return None
    note = after[0]
    if isinstance(before, cst.ParenthesizedWhitespace):  # the argument's own line keeps its comment
        lines = list(before.empty_lines)
        if note.first_line.comment is not None:
            lines.append(cst.EmptyLine(indent=before.indent, whitespace=before.last_line, comment=note.first_line.comment))
        note = note.with_changes(first_line=before.first_line, empty_lines=[*lines, *note.empty_lines])
    return call.with_changes(args=[], whitespace_before_args=note)


def _manual_fix(call: cst.Call, a: FileAnalysis, param: str) -> Union[Fix, str]:
    """The zeroing statement around ``call`` (``p.grad.zero_()``, ``p.grad = torch.zeros_like(p)``) as
    ``p.grad = None``, or why not."""
    statement = a.parent(call)
    line = a.parent(statement)
    assert isinstance(statement, (cst.Expr, cst.Assign)) and isinstance(line, (cst.SimpleStatementLine, cst.SimpleStatementSuite))
    index = next(i for i, s in enumerate(line.body) if s is statement)
    grad = statement.targets[0].target if isinstance(statement, cst.Assign) else _method_on_grad(statement, param, "zero_")
    replacements = _replacements(a, line, index, grad, param)
    if loses_comment(replacements):  # `(p.grad  # note\n .zero_())`: `p.grad = None` has no place for it
        return DROPS_COMMENT
    return Fix(replacements, Applicability.UNSAFE)


def _replacements(a: FileAnalysis, line, index: int, grad: cst.Attribute, param: str):
    """Replace the zeroing with ``p.grad = None``; remove a ``p.grad.detach_()`` just before it."""
    assign = cst.Assign(targets=[cst.AssignTarget(grad)], value=cst.Name("None"))
    body = list(line.body)
    old = body[index]
    body[index] = assign.with_changes(semicolon=old.semicolon)
    replacements = {}
    leading = list(getattr(line, "leading_lines", ()))
    if index > 0 and _method_on_grad(body[index - 1], param, "detach_") is not None:
        del body[index - 1]
    elif index == 0 and isinstance(line, cst.SimpleStatementLine):
        block = a.parent(line)
        siblings = list(getattr(block, "body", ()))
        position = next((i for i, s in enumerate(siblings) if s is line), None)
        if position:
            previous = siblings[position - 1]
            if (isinstance(previous, cst.SimpleStatementLine) and len(previous.body) == 1
                    and _method_on_grad(previous.body[0], param, "detach_") is not None):
                kept = list(previous.leading_lines)
                comment = previous.trailing_whitespace.comment
                if comment is not None:
                    kept.append(cst.EmptyLine(comment=comment))
                leading = kept + leading
                replacements[previous] = cst.RemovalSentinel.REMOVE
    if isinstance(body[-1], cst.Assign) and body[-1].semicolon is not cst.MaybeSentinel.DEFAULT and len(body) == 1:
        body[-1] = body[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
    if isinstance(line, cst.SimpleStatementLine):
        replacements[line] = line.with_changes(body=body, leading_lines=leading)
    else:
        replacements[line] = line.with_changes(body=body)
    return replacements


# --- are the zeros needed? -----------------------------------------------------------------------------
def _region(index: AstIndex, node: Union[ast.AST, Extent]) -> Optional[ast.AST]:
    """The function around ``node``, or at module level its top-level statement (None where that is
    ``node`` itself: nothing lies around it)."""
    first = node.first if isinstance(node, Extent) else node
    function = index.function_of(first)
    if function is not None:
        return function
    top: Optional[ast.AST] = None if isinstance(node, Extent) else first
    for ancestor in index.ancestors(first):
        if isinstance(ancestor, ast.Module):
            break
        top = ancestor
    return top


def _start(node: Union[ast.AST, Extent]) -> Tuple[int, int]:
    first = node.first if isinstance(node, Extent) else node
    return first.lineno, first.col_offset  # type: ignore[attr-defined]


def _end(node: Union[ast.AST, Extent]) -> Tuple[int, int]:
    last = node.last if isinstance(node, Extent) else node
    return last.end_lineno, last.end_col_offset  # type: ignore[attr-defined]


def _negated_end(node: ast.AST) -> Tuple[int, int]:
    return -node.end_lineno, -node.end_col_offset  # type: ignore[attr-defined,operator]


def _zeros_are_load_bearing(index: AstIndex, zeroing: Union[ast.AST, Extent], memo: dict) -> bool:
    """True when, after ``zeroing`` and before the next ``backward()``, a gradient is read or the optimizer steps.

    Order is source order, wrapping around the innermost loop around the zeroing (its next iteration), then
    around the function (its next call: a parameter server's ``p.grad += g`` at the top of the function reads
    the zeros the previous call's reset left). In a method, a gradient read in another method of the class
    that calls no ``backward()`` (gradients that arrive from workers) also needs the zeros, and so does any
    gradient written by hand where the function and its class never call ``backward()``.

    What each region holds is indexed once (``memo``, per file): N zeroings in one function cost O(N), not a
    walk of the function each. Events inside ``zeroing`` never count: the order below skips its span.
    """
    region = _region(index, zeroing)
    if region is None:
        return False  # a module-level line of its own: nothing comes after it within its region
    events = _events_in(index, region, memo)
    start, end = _start(zeroing), _end(zeroing)
    first = zeroing.first if isinstance(zeroing, Extent) else zeroing
    loop = next((info.node for info in index.enclosing_loops(first) if index.contains(region, info.node)), None)
    function = index.function_of(first)
    if loop is not None:
        lo, hi = _start(loop), _end(loop)
        spans = [(end, hi), (lo, start), (hi, None)] + ([(None, lo)] if function is not None else [])
    else:
        spans = [(end, None)] + ([(None, start)] if function is not None else [])
    for after, before in spans:
        kind = events.first(after, before)
        if kind is not None:
            return kind != "backward"  # a gradient read, or a step on the zeros: keep them
    if function is None:
        return False
    klass = index.parent(function)
    klass = klass if isinstance(klass, ast.ClassDef) else None
    code = klass if klass is not None else function
    if not _events_in(index, code, memo).has_backward and _events_in(index, code, memo).grads_outside(start, end):
        return True  # gradients written by hand, never by backward(): the zeros are where they accumulate
    if klass is None:
        return False
    for method in klass.body:
        if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and method is not function:
            if _events_in(index, method, memo).adds_by_hand:
                return True  # another method adds into the gradients without producing them by backward()
    return False


def _read_after_last_reset(index: AstIndex, zeroing: ast.AST, memo: dict) -> Optional[ast.Attribute]:
    """The first ``x.grad`` read after the last run of ``zeroing`` (after the outermost loop around it, up to
    its def; at module level in any later statement), where no ``backward()`` comes before it: it would meet
    ``None`` after the fix instead of the zeros (``print(model.fc.weight.grad)`` after the training loop)."""
    function = index.function_of(zeroing)
    loops = [info.node for info in index.enclosing_loops(zeroing)]
    last = loops[-1] if loops else zeroing
    events = _events_in(index, function if function is not None else index.tree, memo)
    return events.first_read(_end(last))


def _read_later(index: AstIndex, read: ast.Attribute) -> str:
    statement = next(a for a in index.ancestors(read) if isinstance(a, ast.stmt))
    return (f" (not fixed automatically: `{index.code_for_node(read, statement)}` is read after the last reset, "
            "where it would be `None`)")


class _Events:
    """A region's ``backward()`` calls, optimizer steps and gradient reads (not ``x.grad = ...``, not
    ``autograd.grad(...)``), by position; and where it holds any ``x.grad`` (written ones included)."""

    def __init__(self, index: AstIndex, region: ast.AST) -> None:
        # (start, the end negated, kind): a call on a gradient, `p.grad.norm().backward()`, sorts before
        # the gradient it holds, as LibCST's pre-order numbers do
        events: List[Tuple[Tuple[int, int], Tuple[int, int], str]] = []
        grads: List[ast.Attribute] = []
        not_reads: Set[ast.AST] = set()
        for node in walk(region):  # decorators included, as LibCST's walk of a def
            kind = type(node)
            if kind is ast.Call:
                if index.is_backward_call(node):
                    events.append((_start(node), _negated_end(node), "backward"))
                elif index.is_optimizer_step(node, index.function_of(node)):
                    events.append((_start(node), _negated_end(node), "step"))
                if type(node.func) is ast.Attribute and node.func.attr == "grad":
                    not_reads.add(node.func)
            elif kind is ast.Attribute and node.attr == "grad":
                grads.append(node)
            elif kind is ast.Assign:
                # `x.grad = ...` replaces the gradient: only `x` is read
                not_reads.update(t for t in node.targets if type(t) is ast.Attribute and t.attr == "grad")
        self.has_backward = any(kind == "backward" for _, _, kind in events)
        reads = [g for g in grads if g not in not_reads]
        self.adds_by_hand = bool(reads) and not self.has_backward
        events.extend((_start(g), _negated_end(g), "grad") for g in reads)
        events.sort()
        self.positions = [position for position, _, _ in events]
        self.kinds = [kind for _, _, kind in events]
        self._reads = {_start(g): g for g in reversed(reads)}  # the outermost read at each position
        self.grads = sorted(_start(g) for g in grads)

    def first(self, after: Optional[Tuple[int, int]], before: Optional[Tuple[int, int]]) -> Optional[str]:
        """The kind of the first event at ``after <= position < before`` (None: unbounded), or None."""
        at = 0 if after is None else bisect.bisect_left(self.positions, after)
        if at < len(self.positions) and (before is None or self.positions[at] < before):
            return self.kinds[at]
        return None

    def first_read(self, after: Tuple[int, int]) -> Optional[ast.Attribute]:
        """The gradient read that is the first event at or after ``after``; None where a ``backward()`` or a
        step comes first, or nothing does."""
        at = bisect.bisect_left(self.positions, after)
        if at < len(self.positions) and self.kinds[at] == "grad":
            return self._reads[self.positions[at]]
        return None

    def grads_outside(self, start: Tuple[int, int], end: Tuple[int, int]) -> bool:
        """Some ``x.grad`` lies outside ``start <= position < end``."""
        inside = bisect.bisect_left(self.grads, end) - bisect.bisect_left(self.grads, start)
        return len(self.grads) > inside


def _events_in(index: AstIndex, region: ast.AST, memo: dict) -> _Events:
    events = memo.get(region)
    if events is None:
        events = memo[region] = _Events(index, region)
    return events
