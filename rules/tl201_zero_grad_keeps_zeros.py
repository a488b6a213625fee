"""TL201: gradients reset by filling them with zeros instead of freeing them."""

from __future__ import annotations

import ast
import bisect
import re
from typing import Iterator, List, Optional, Set, Tuple

import libcst as cst

from torchlint.analysis import FileAnalysis, call_name, dotted_name, is_literal, iter_children, names_in, receiver, walk
from torchlint.ast_index import AstIndex, index_of
from torchlint.ast_index import call_name as ast_call_name
from torchlint.ast_index import dotted_name as ast_dotted_name
from torchlint.comments import DROPS_COMMENT, has_comment, loses_comment
from torchlint.config import Settings
from torchlint.rule import Applicability, Fix, FixAvailability, Rule, RuleContext
from torchlint.text_prefilter import CALL_GAP, GAP, call_text, call_with_text, search_method

_PARAM_NAME = re.compile(r"param", re.IGNORECASE)
_ZEROING_FUNCTION = re.compile(r"^_*zero_grad$")
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
    it does not reset them); inside an implementation of `zero_grad` itself (a function named `zero_grad`,
    one with a `set_to_none` parameter, a branch testing `set_to_none`, or a loop that also calls
    `p.grad.requires_grad_(False)` the way `Optimizer.zero_grad` does); and on `p.grad = torch.zeros_like(p)`
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
      function, a hook) cannot be seen.
    - Gradient memory is freed after the reset and allocated again by `backward()`.
    The fix is only safe when every parameter gets a gradient every step and nothing reads a gradient before the
    next `backward()`; torchlint cannot prove that statically, so no fix is marked safe.

    ## PyTorch versions
    Since PyTorch 2.0, `Optimizer.zero_grad()` and `Module.zero_grad()` default to `set_to_none=True`, so a bare
    `zero_grad()` is fine and only an explicit `set_to_none=False` is flagged. Before 2.0 the default was
    `False`: with `torch-version` below 2.0 a bare `zero_grad()` is flagged too and the fix writes
    `set_to_none=True` (available since 1.7).
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

    has_ast_prefilter = True

    @classmethod
    def may_fire_in_ast(cls, tree: ast.Module, text: str, settings: Settings) -> bool:
        """A ``zero_grad`` call with arguments ``check`` reports, or a zeroing in a loop over parameters."""
        index = index_of(tree)
        old_torch = settings.torch_version < (2, 0)
        for info in index.calls_by_name.get("zero_grad", ()):
            if _zero_grad_may_fire(index, info.node, old_torch):
                return True
        return any(_loop_may_zero(index, loop) for loop in index.loops)

    def check(self, ctx: RuleContext) -> None:
        a = ctx.analysis
        old_torch = ctx.torch_version < (2, 0)
        memo: dict = {}  # what each region holds, for this file (``_zeros_are_load_bearing``)
        for call in a.calls_by_name.get("zero_grad", ()):
            self._check_zero_grad(ctx, a, call, old_torch, memo)
        for loop in a.loops:
            if isinstance(loop.node, cst.For):
                param = _parameter_loop_target(a, loop.node)
                if param is not None:
                    self._check_manual_loop(ctx, a, loop.node, param, memo)

    # --- optimizer.zero_grad(...) / model.zero_grad(...) ----------------------------------------------
    def _check_zero_grad(self, ctx: RuleContext, a: FileAnalysis, call: cst.Call, old_torch: bool, memo: dict) -> None:
        if not isinstance(call.func, cst.Attribute):
            return
        if len(call.args) > 1 or any(arg.star for arg in call.args):
            return
        arg = call.args[0] if call.args else None
        if arg is not None and arg.keyword is not None and arg.keyword.value != "set_to_none":
            return
        if arg is None:
            if not old_torch or not _imports_torch(a):
                return
        elif not is_literal(arg.value, "False"):
            return  # set_to_none=True, or a variable: the caller decides
        statement = a.enclosing_statement(call)
        if statement is None or _zeros_are_load_bearing(a, statement, memo):
            return
        owner = dotted_name(call.func.value) or "optimizer"
        written = "set_to_none=False" if arg is not None and arg.keyword is not None else "False"
        if arg is None:
            new_call = call.with_changes(args=[cst.Arg(cst.Name("True"), keyword=cst.Name("set_to_none"),
                                                       equal=cst.AssignEqual(
                                                           whitespace_before=cst.SimpleWhitespace(""),
                                                           whitespace_after=cst.SimpleWhitespace("")))])
            message = (f"`{owner}.zero_grad()` keeps zero-filled gradients before PyTorch 2.0; "
                       "pass `set_to_none=True`")
        elif old_torch:
            new_call = call.with_changes(args=[arg.with_changes(value=cst.Name("True"))])
            message = (f"`{owner}.zero_grad({written})` fills every gradient with zeros each step; "
                       "use `set_to_none=True`")
        else:
            new_call = _without_argument(call, arg)
            message = (f"`{owner}.zero_grad({written})` fills every gradient with zeros each step; "
                       f"drop `{written}` so gradients are freed")
        if new_call is None or loses_comment({call: new_call}):
            ctx.report(call, message=f"{message} ({DROPS_COMMENT})")
            return
        ctx.report(call, message=message, fix=Fix.replace(call, new_call, Applicability.UNSAFE))

    # --- for p in model.parameters(): p.grad.zero_() --------------------------------------------------
    def _check_manual_loop(self, ctx: RuleContext, a: FileAnalysis, loop: cst.For, param: str, memo: dict) -> None:
        function = a.function_of(loop)
        if function is not None and isinstance(function.node, cst.FunctionDef):
            if _ZEROING_FUNCTION.search(function.name) or any(
                p.name.value == "set_to_none" for p in function.node.params.params + function.node.params.kwonly_params
            ):
                return
        if any(call_name(c) == "requires_grad_" and _grad_of(receiver(c), param) is not None
               for c in a.calls_in(loop.body)):
            return  # a re-implementation of zero_grad(set_to_none=False): the zeros are the point
        zeroings: List[Tuple[cst.CSTNode, int, cst.Attribute]] = []
        for line, index, grad in _zeroing_statements(a, loop, param):
            if any(isinstance(anc, cst.If) and _mentions(anc.test, "set_to_none") for anc in a.ancestors(line)):
                continue
            if isinstance(line.body[index], cst.Assign) and not _events_in(a, _region(a, loop), memo).has_backward:
                continue  # `p.grad = zeros_like(p)` with no backward() around: buffers made for manual accumulation
            zeroings.append((line, index, grad))
        if not zeroings or _zeros_are_load_bearing(a, loop, memo):
            return
        for line, index, grad in zeroings:
            replacements = _manual_fix(a, line, index, grad, param)
            message = (f"Zeroing `{param}.grad` in place keeps zero-filled gradients; set `{param}.grad = None` "
                       "(or call `zero_grad()`)")
            if loses_comment(replacements):  # `(p.grad  # note\n .zero_())`: `p.grad = None` has no place for it
                ctx.report(line.body[index], message=f"{message} ({DROPS_COMMENT})")
                continue
            ctx.report(line.body[index], message=message, fix=Fix(replacements, Applicability.UNSAFE))


def _zero_grad_may_fire(index: AstIndex, call: ast.Call, old_torch: bool) -> bool:
    """The ast stage of ``_check_zero_grad``: the call's shape (the load-bearing test is left to ``check``)."""
    if not isinstance(call.func, ast.Attribute) or len(call.args) + len(call.keywords) > 1:
        return False
    if call.keywords:
        keyword = call.keywords[0]
        return keyword.arg == "set_to_none" and isinstance(keyword.value, ast.Constant) and keyword.value.value is False
    if call.args:
        arg = call.args[0]
        return isinstance(arg, ast.Constant) and arg.value is False
    return old_torch and index.imports_torch()


def _loop_may_zero(index: AstIndex, loop) -> bool:
    """The ast stage of ``_check_manual_loop``: a loop over parameters that zeroes its target's grad."""
    node = loop.node
    if not isinstance(node, (ast.For, ast.AsyncFor)):
        return False
    param = _ast_parameter_target(node)
    if param is None:
        return False
    function = loop.function
    if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
            _ZEROING_FUNCTION.search(function.name)
            or any(arg.arg == "set_to_none" for arg in function.args.args + function.args.kwonlyargs)):
        return False
    for call in loop.direct_calls:
        name = ast_call_name(call)
        if name == "zero_" and not call.args and not call.keywords and isinstance(call.func, ast.Attribute):
            if _ast_grad_of(call.func.value, param):
                return True
        elif (name == "zeros_like" and index.qualified_name(call.func) == "torch.zeros_like"
              and len(call.args) + len(call.keywords) == 1 and _ast_rebinds_grad(node, call, param)):
            return True
    return False


def _ast_rebinds_grad(loop: ast.AST, call: ast.Call, param: str) -> bool:
    """``p.grad = torch.zeros_like(...)``, the one statement around ``zeros_like`` that ``_zeroing_statements``
    takes (``p.grad.data = ...`` and a comparison with zeros are not rebindings)."""
    return any(isinstance(node, ast.Assign) and node.value is call and len(node.targets) == 1
               and _ast_grad_of(node.targets[0], param) and node.targets[0].attr == "grad"
               for node in ast.walk(loop))


def _ast_parameter_target(loop) -> Optional[str]:
    """``_parameter_loop_target`` on the stdlib ast."""
    target, it = loop.target, loop.iter
    if isinstance(it, ast.Call) and ast_call_name(it) in {"list", "tuple", "filter"} and (it.args or it.keywords):
        it = it.keywords[-1].value if it.keywords else it.args[-1]  # the last argument, as LibCST lists them
        if isinstance(it, ast.Starred):
            it = it.value
    named = False
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute):
        if it.func.attr == "named_parameters":
            named = True
        elif it.func.attr != "parameters":
            return None
    elif isinstance(it, ast.Subscript):
        if not (isinstance(it.slice, ast.Constant) and it.slice.value == "params"):
            return None
    else:
        name = ast_dotted_name(it)
        if name is None or not _PARAM_NAME.search(name.split(".")[-1]):
            return None
    if named:
        if isinstance(target, ast.Tuple) and len(target.elts) == 2 and isinstance(target.elts[1], ast.Name):
            return target.elts[1].id
        return None
    return target.id if isinstance(target, ast.Name) else None


def _ast_grad_of(expr: ast.AST, param: str) -> bool:
    if isinstance(expr, ast.Attribute) and expr.attr == "data":
        expr = expr.value
    return (isinstance(expr, ast.Attribute) and expr.attr == "grad"
            and isinstance(expr.value, ast.Name) and expr.value.id == param)


def _imports_torch(a: FileAnalysis) -> bool:
    return any(target == "torch" or target.startswith("torch.") for target in a.imports.values())


def _mentions(node: cst.CSTNode, name: str) -> bool:
    return bool(names_in(node, name))


def _parameter_loop_target(a: FileAnalysis, loop: cst.For) -> Optional[str]:
    """``p`` in ``for p in model.parameters()``, ``for n, p in m.named_parameters()``, ``for p in group["params"]``."""
    target = loop.target
    it = loop.iter
    if isinstance(it, cst.Call) and call_name(it) in {"list", "tuple", "filter"} and it.args:
        it = it.args[-1].value
    named = False
    if isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute):
        method = it.func.attr.value
        if method == "parameters":
            pass
        elif method == "named_parameters":
            named = True
        else:
            return None
    elif isinstance(it, cst.Subscript):
        index = it.slice[0].slice if len(it.slice) == 1 else None
        if not (isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString)
                and index.value.evaluated_value == "params"):
            return None
    else:
        name = dotted_name(it)
        if name is None or not _PARAM_NAME.search(name.split(".")[-1]):
            return None
    if named:
        if isinstance(target, cst.Tuple) and len(target.elements) == 2 and isinstance(target.elements[1].value, cst.Name):
            return target.elements[1].value.value
        return None
    return target.value if isinstance(target, cst.Name) else None


def _grad_of(expr: Optional[cst.BaseExpression], param: str) -> Optional[cst.Attribute]:
    """The ``p.grad`` in ``p.grad`` or ``p.grad.data``."""
    if expr is None:
        return None
    if isinstance(expr, cst.Attribute) and expr.attr.value == "data":
        expr = expr.value
    if (isinstance(expr, cst.Attribute) and expr.attr.value == "grad"
            and isinstance(expr.value, cst.Name) and expr.value.value == param):
        return expr
    return None


def _method_on_grad(small: cst.BaseSmallStatement, param: str, method: str) -> Optional[cst.Attribute]:
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        call = small.value
        if call_name(call) == method and not call.args and isinstance(call.func, cst.Attribute):
            return _grad_of(call.func.value, param)
    return None


def _zeroing_statements(a: FileAnalysis, loop: cst.For, param: str) -> Iterator[Tuple[cst.CSTNode, int, cst.Attribute]]:
    """(line, index of the small statement, the ``p.grad`` node) for each zeroing of the loop target's grad."""
    for call in a.calls_in(loop.body):
        name = call_name(call)
        if name != "zero_" and name != "zeros_like":
            continue
        if next(a.enclosing_loops(call), None) is None or next(a.enclosing_loops(call)).node is not loop:
            continue
        small = a.enclosing_statement(call)
        line = a.parent(small) if not isinstance(small, cst.SimpleStatementLine) else small
        stmt = a.parent(call)
        if not isinstance(line, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) or not isinstance(stmt, (cst.Expr, cst.Assign)):
            continue
        index = next((i for i, s in enumerate(line.body) if s is stmt), None)
        if index is None:
            continue
        if name == "zero_":
            grad = _method_on_grad(stmt, param, "zero_")
        else:
            grad = None
            if (isinstance(stmt, cst.Assign) and len(stmt.targets) == 1 and stmt.value is call
                    and a.is_qualified(call.func, "torch.zeros_like") and len(call.args) == 1):
                grad = _grad_of(stmt.targets[0].target, param)
                if grad is not None and grad is not stmt.targets[0].target:
                    grad = None  # p.grad.data = ... is not a rebinding of p.grad
        if grad is not None:
            yield line, index, grad


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


def _manual_fix(a: FileAnalysis, line, index: int, grad: cst.Attribute, param: str):
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
def _region(a: FileAnalysis, node: cst.CSTNode) -> cst.CSTNode:
    """The function around ``node``, or at module level its top-level statement."""
    function = a.function_of(node)
    if function is not None:
        return function.node
    top = node
    for ancestor in a.ancestors(node):
        if isinstance(ancestor, cst.Module):
            break
        top = ancestor
    return top


def _grad_uses(region: cst.CSTNode) -> List[cst.Attribute]:
    """``x.grad`` attributes in ``region`` that read or update a gradient (not ``x.grad = ...``, not
    ``autograd.grad(...)``), in source order."""
    uses: List[cst.Attribute] = []
    skipped: Set[cst.CSTNode] = set()
    stack: List[cst.CSTNode] = [region]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Attribute) and node.target.attr.value == "grad":
            stack.append(node.target.value)  # `x.grad = ...` replaces the gradient: only `x` is read
            continue
        if isinstance(node, cst.Attribute) and node.attr.value == "grad":
            uses.append(node)
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "grad":
            skipped.add(node.func)
        stack.extend(reversed(iter_children(node)))
    return [u for u in uses if u not in skipped]


def _zeros_are_load_bearing(a: FileAnalysis, zeroing: cst.CSTNode, memo: dict) -> bool:
    """True when, after ``zeroing`` and before the next ``backward()``, a gradient is read or the optimizer steps.

    Order is source order, wrapping around the innermost loop around the zeroing (its next iteration), then
    around the function (its next call: a parameter server's ``p.grad += g`` at the top of the function reads
    the zeros the previous call's reset left). In a method, a gradient read in another method of the class
    that calls no ``backward()`` (gradients that arrive from workers) also needs the zeros, and so does any
    gradient written by hand where the function and its class never call ``backward()``.

    What each region holds is indexed once (``memo``, per file): N zeroings in one function cost O(N), not a
    walk of the function each. Events inside ``zeroing`` never count: the order below skips its span.
    """
    region = _region(a, zeroing)
    events = _events_in(a, region, memo)
    start, end = a.spans[zeroing]
    loop = next((info.node for info in a.enclosing_loops(zeroing) if a.contains(region, info.node)), None)
    function = a.function_of(zeroing)
    if loop is not None:
        lo, hi = a.spans[loop]
        spans = [(end, hi), (lo, start), (hi, None)] + ([(None, lo)] if function is not None else [])
    else:
        spans = [(end, None)] + ([(None, start)] if function is not None else [])
    for after, before in spans:
        kind = events.first(after, before)
        if kind is not None:
            return kind != "backward"  # a gradient read, or a step on the zeros: keep them
    if function is None:
        return False
    klass = _class_of(a, function.node)
    code = klass if klass is not None else function.node
    if not _events_in(a, code, memo).has_backward and _grad_attributes_in(a, code, memo).outside(start, end):
        return True  # gradients written by hand, never by backward(): the zeros are where they accumulate
    if klass is None:
        return False
    methods = [n for n in klass.body.body if isinstance(n, cst.FunctionDef) and n is not function.node]
    for method in methods:
        if _events_in(a, method, memo).adds_by_hand:
            return True  # another method adds into the gradients without producing them by backward()
    return False


class _Events:
    """A region's ``backward()`` calls, optimizer steps and gradient reads (``_grad_uses``), by position."""

    def __init__(self, a: FileAnalysis, region: cst.CSTNode) -> None:
        events: List[Tuple[int, str]] = []
        for call in a.calls_in(region):
            if a.is_backward_call(call):
                events.append((a.spans[call][0], "backward"))
            elif a.is_optimizer_step(call):
                events.append((a.spans[call][0], "step"))
        self.has_backward = any(kind == "backward" for _, kind in events)
        uses = _grad_uses(region)
        self.adds_by_hand = bool(uses) and not self.has_backward
        events.extend((a.spans[use][0], "grad") for use in uses)
        events.sort()
        self.positions = [position for position, _ in events]
        self.kinds = [kind for _, kind in events]

    def first(self, after: Optional[int], before: Optional[int]) -> Optional[str]:
        """The kind of the first event at ``after <= position < before`` (None: unbounded), or None."""
        index = 0 if after is None else bisect.bisect_left(self.positions, after)
        if index < len(self.positions) and (before is None or self.positions[index] < before):
            return self.kinds[index]
        return None


class _Positions:
    def __init__(self, positions: List[int]) -> None:
        self.positions = sorted(positions)

    def outside(self, start: int, end: int) -> bool:
        """Some position lies outside ``start <= position < end``."""
        inside = bisect.bisect_left(self.positions, end) - bisect.bisect_left(self.positions, start)
        return len(self.positions) > inside


def _events_in(a: FileAnalysis, region: cst.CSTNode, memo: dict) -> _Events:
    key = ("events", region)
    if key not in memo:
        memo[key] = _Events(a, region)
    return memo[key]


def _grad_attributes_in(a: FileAnalysis, code: cst.CSTNode, memo: dict) -> _Positions:
    """Where ``code`` holds any ``x.grad`` attribute (written ones included)."""
    key = ("grad attributes", code)
    if key not in memo:
        memo[key] = _Positions([a.spans[g][0] for g in walk(code) if isinstance(g, cst.Attribute) and g.attr.value == "grad"])
    return memo[key]


def _class_of(a: FileAnalysis, function: cst.CSTNode) -> Optional[cst.ClassDef]:
    parent = a.parent(function)
    holder = a.parent(parent) if isinstance(parent, cst.IndentedBlock) else None
    return holder if isinstance(holder, cst.ClassDef) else None
