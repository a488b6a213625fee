"""TL501: optimizer-style updates run one parameter at a time."""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from keyword import kwlist
from typing import Dict, Iterable, Iterator, List, Optional, Set, Tuple

import libcst as cst

from torchlint.analysis import FileAnalysis, LoopInfo, call_name, dotted_name, keyword_arg
from torchlint.ast_index import AstIndex, index_of, is_literal, target_names
from torchlint.ast_index import call_name as ast_call_name
from torchlint.ast_index import dotted_name as ast_dotted_name
from torchlint.comments import has_comment, loses_comment
from torchlint.config import Settings
from torchlint.rule import Applicability, Fix, FixAvailability, Rule, RuleContext
from torchlint.text_prefilter import (
    CALL_GAP, GAP, finditer_word, is_word_char, search_method, statement_end, with_newline_ends,
)


# In-place ops with a `torch._foreach_<op>` twin, named in the message when the loop uses them.
_FOREACH_TWINS = {
    "add_", "sub_", "mul_", "div_", "addcmul_", "addcdiv_", "lerp_", "copy_", "zero_", "sqrt_", "clamp_min_",
    "clamp_max_", "maximum_", "minimum_", "neg_", "exp_", "pow_", "abs_", "sign_", "reciprocal_", "sigmoid_",
    "tanh_", "rsqrt_", "log_",
}
# In-place ops that do not make a loop an update loop: initialisation, freezing, gradient resets.
_NOT_UPDATES = {
    "requires_grad_", "share_memory_", "zero_", "normal_", "uniform_", "fill_", "random_", "bernoulli_",
    "exponential_", "geometric_", "cauchy_", "log_normal_", "detach_", "set_", "resize_", "resize_as_",
    "fill_diagonal_", "copy_", "retain_grad",
}
# Methods that return Python values or views: no kernel launch, and their result is not a tensor we track.
_SCALAR_METHODS = {
    "item", "numel", "dim", "size", "tolist", "data_ptr", "nelement", "element_size", "is_contiguous",
    "stride", "get", "keys", "values", "items", "is_floating_point", "is_complex", "get_device",
    "setdefault", "pop", "append", "extend", "untyped_storage", "storage_offset",
}
_NO_LAUNCH_METHODS = {"detach", "view", "view_as", "reshape", "t", "expand", "expand_as", "unsqueeze", "squeeze",
                      "flatten", "contiguous", "requires_grad_", "retain_grad", "to", "type_as"}
_SCALAR_ATTRS = {"shape", "dtype", "device", "ndim", "is_sparse", "requires_grad", "is_leaf", "is_cuda", "names"}
_PASS_THROUGH = {"detach", "clone", "data", "to", "float", "type_as", "view_as", "contiguous"}
# By class name, not class: touching ``cst.AddAssign`` at import time would load libcst on every run.
_AUG_OPS = {"AddAssign": "add_", "SubtractAssign": "sub_", "MultiplyAssign": "mul_", "DivideAssign": "div_"}
_INIT_FUNCTION = re.compile(r"init|reset_param", re.IGNORECASE)
_SINGLE_TENSOR_FUNCTION = re.compile(r"single_tensor", re.IGNORECASE)
_FOREACH_FLAG = re.compile(r"\b(foreach|fused|use_foreach|multi_tensor)\b|_foreach_", re.IGNORECASE)
_PARAMS_NAME = re.compile(r"param", re.IGNORECASE)
_NOT_PARAMS_NAME = re.compile(r"group|name|shape|size|count|num|key|spec|dict", re.IGNORECASE)
_OPTIMIZER_SKIP = re.compile(r"^torch\.optim\.(lr_scheduler|swa_utils|_functional|_multi_tensor)\b")


def _foreach_msg(ops: Iterable[str]) -> str:
    twins = []
    for op in ops:
        if op in _FOREACH_TWINS:
            twins.append(f"`torch._foreach_{op}`")
        elif op == "clamp_":
            twins += ["`torch._foreach_clamp_min_`", "`torch._foreach_clamp_max_`"]
    twins = list(dict.fromkeys(twins))
    return ", ".join(twins[:4]) if twins else "`torch._foreach_*` ops"


class PerParameterOptimizerLoop(Rule):
    """## What it does
    Flags loops over parameters (`for p in model.parameters()`, `for p in group["params"]`, a list of
    parameters, `zip(ema.parameters(), model.parameters())`, `zip(shadow, params)`,
    `ema.state_dict().items()` / `.values()`) whose body updates the parameters, their gradients or their
    per-parameter state in place (`p.add_(...)`, `p.data.add_(...)`, `p -= lr * p.grad`,
    `exp_avg.mul_(beta1).add_(...)`, an EMA's `ema_p.mul_(d).add_(p, alpha=1 - d)` or `v *= d; v += (1 - d) * w`),
    in a `torch.optim.Optimizer.step` override or in free-standing training code. The message says about how many
    kernel launches per parameter the loop body makes, as far as it can be read from the code.

    It also flags `torch.optim.<Optimizer>(..., foreach=False)`.

    It stays silent on loops that only read the parameters (counting them, logging norms), on loops that
    only initialise, copy, freeze or reset them (`nn.init.*`, `p.data.normal_()`, `q.copy_(p)`,
    `p.requires_grad_(False)`, `p.grad.zero_()`), on loops in `__init__`/`init_weights`/`reset_parameters`
    and in test functions (they run once; test files are not checked at all), in helpers that change the
    weights of the module they are given and return it (`scale_module(m, s)`, used as
    `self.out = scale_module(nn.Conv2d(...), 0.1)`: a model builder, run once; not where the loop reads
    `.grad`), on loops that collect tensors into lists for later `torch._foreach_*` calls,
    and on the deliberate per-parameter path of code that also has a foreach or fused one (a `_single_tensor_*`
    function, or the branch of `if foreach:` / `if self.foreach: ... else:` that loops).

    ## Why is this slow?
    Every elementwise op on one parameter is one kernel launch (several microseconds of CPU time each on
    CUDA, plus the Python and dispatcher overhead). An AdamW step written per parameter makes about 15
    launches per parameter: for a model with 300 parameter tensors that is 4,500 tiny launches per step,
    and the GPU idles waiting for them. The `torch._foreach_*` ops do the same math on the whole list of
    tensors in a handful of launches. `torch.optim` optimizers use them on CUDA by default, unless
    `foreach=False` turns them off.

    ## Example
    ```python
    import torch

    @torch.no_grad()
    def sgd_momentum_step(params, bufs, lr=0.1, momentum=0.9):
        for p, buf in zip(params, bufs):
            buf.mul_(momentum).add_(p.grad)
            p.add_(buf, alpha=-lr)

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    ```

    ## Use instead
    ```python
    import torch

    @torch.no_grad()
    def sgd_momentum_step(params, bufs, lr=0.1, momentum=0.9):
        # Batched with torch._foreach_*: collect the tensors per (device, dtype), then one call per op.
        buckets = {}
        for p, buf in zip(params, bufs):
            buf_list, grads, param_list = buckets.setdefault(
                (p.device, p.dtype, buf.device, buf.dtype), ([], [], [])
            )
            buf_list.append(buf)
            grads.append(p.grad)
            param_list.append(p)
        for buf_list, grads, param_list in buckets.values():
            torch._foreach_mul_(buf_list, momentum)
            torch._foreach_add_(buf_list, grads)
            torch._foreach_add_(param_list, buf_list, alpha=-lr)

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    # or torchlint.runtime.AdamW, a foreach AdamW that matches torch.optim.AdamW
    ```
    That is the fix's output (`params` and `bufs` are taken, so the lists get other names). An EMA update becomes
    `torch._foreach_lerp_(ema_params, params, 1 - decay)`.

    ## Fix safety
    **The loop rewrite is unsafe** (`--unsafe-fixes`). It replaces the loop with two: the first keeps the loop's
    filters (`if p.grad is None: continue`), its lazy state initialisation and its host-side scalars
    (`state["step"] += 1`, bias corrections) and collects each parameter's tensors into lists, one set per
    (device, dtype) of the loop's own tensors (gradients and state follow their parameter); the second applies
    each tensor statement of the body to whole lists, in the body's order: an in-place method (`x.mul_(b)`,
    each link of `.mul_(b).add_(g, alpha=a)`, `x -= y`) becomes the matching `torch._foreach_<op>_`, an
    out-of-place expression the matching `torch._foreach_<op>` bound to the variable's plural
    (`denom` -> `denoms`), an `if` on a value that is the same for every parameter stays an `if`. Scalars that
    differ per parameter become scalar lists (through `float()` where they may be 0-d tensors, which is what
    an op does with a 0-d tensor passed as a scalar). What changes:
    - the order of the work: all parameters go through one op before the next op starts. This is the same
      result as long as no tensor appears twice (a parameter listed twice in a group, tied weights listed
      under two names, an EMA that shares storage with the model);
    - on the CPU every foreach call applies the same op to each tensor, so the result is bitwise the same (the
      tests hold it to that, 10 steps of AdamW, SGD with momentum and Nesterov, RMSprop, Adagrad and Lion);
      on CUDA the multi-tensor kernels may round the last bit differently;
    - an EMA (`e.mul_(d).add_(p, alpha=1 - d)`, `e.copy_(d * e + (1 - d) * p)`, `v *= d; v += (1 - d) * w`,
      `copy_(tau * p + (1 - tau) * e)`) becomes `torch._foreach_lerp_`, which computes `e + w * (p - e)`: the
      last bit differs (about 1e-7 relative after 10 updates); the averaged tensors are converted to the
      average's dtype first (`p.to(e.dtype)`), as the loop's `add_` promoted them;
    - per-parameter names of the loop body that only the tensor statements bound (`denom`) no longer exist
      after the loop (the fix is not offered where the code reads them there), and the list names it adds
      are new names in the function;
    - peak memory grows by the out-of-place temporaries of a whole list at once (e.g. AdamW's denominators:
      about one extra copy of the parameters).

    Where it cannot lift a loop exactly it reports the loop without a fix and says why: control flow that
    depends on tensor values or differs per parameter (`if p.dim() > 1:`), calls it does not know, state it
    does not see created (`self.state[p]["buf"]` without the loop's `if len(state) == 0:`), a first step that
    differs (`if "buf" not in state: ... else: ...`), `p.data = ...`, a `state_dict()` loop that does not skip
    integer buffers, names read after the loop, nested loops, `break`/`return`. Comments are kept: the
    comment lines above a lifted statement and a comment at the end of its line go, each on a line of its
    own, above its batched form; a comment inside a lifted statement (within its brackets) means no fix, as
    the rewrite would drop it.

    Dropping `foreach=False` is a **safe** fix: `foreach=None` (the default) lets PyTorch pick the
    multi-tensor implementation where every parameter is a plain tensor on a device that supports it (CUDA
    and other accelerators) and keep the single-tensor one otherwise (CPU, sparse gradients,
    `differentiable=True`, tensor subclasses), so on the CPU nothing changes at all. Both implementations
    compute the same update. Two things can differ on an accelerator: results are not guaranteed to be
    bit-identical to the single-tensor path in every optimizer and option (e.g. `capturable=True` in Adam
    scales the denominator in another order), so a run is not bit-reproducible against one recorded with
    `foreach=False`; and peak memory grows by the multi-tensor path's intermediates (e.g. Adam's
    denominators for all parameters of a device at once, about one extra copy of the parameters). Where
    either matters, keep `foreach=False` with a `# noqa: TL501`. No finding is made where `fused=` is set
    (the fused kernel wins over both).

    ## PyTorch versions
    The multi-tensor path is the default on CUDA since PyTorch 2.0. With an older `--torch-version`,
    `foreach=None` still means the per-parameter loop, so the finding asks for `foreach=True` and has no
    fix. The loop rewrite needs PyTorch 2.1 (`torch._foreach_lerp_`, `torch._foreach_copy_` and the scalar-list
    overloads it uses); with an older `--torch-version` loops are reported without a fix.
    """

    code = "TL501"
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)
    name = "per-parameter-optimizer-loop"
    message = (
        "per-parameter update loop: one kernel launch per op and parameter; batch the updates over all "
        "parameters with `torch._foreach_*` ops (or use `torchlint.runtime.AdamW`)"
    )
    summary = "Optimizer-style update loop over parameters, or an optimizer built with foreach=False"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicabilities = (Applicability.SAFE, Applicability.UNSAFE)
    text_gate = (("foreach", "state_dict", "am", "aM", "Am", "AM"),)  # `param` in any case ends so

    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        """An optimizer built with ``foreach=False``, or a loop over parameters (``_has_param_loop``); then an
        update (``_may_update``). A cheap literal gate first: most files stop there."""
        foreach = "foreach" in text
        if foreach and _FOREACH_FALSE_TEXT.search(text):
            return _may_update(text)
        # `_PARAMS_NAME` ignores case: `param`, `Params`, `PARAMS`, `modelParams` hold `aram` or `ARAM`; the
        # lower-cased text is made only for a file without either, for `pArams` or `PAram`.
        if "aram" not in text and "ARAM" not in text and "state_dict" not in text and "param" not in text.lower():
            return False
        return _has_param_loop(text) and _may_update(text)

    has_ast_prefilter = True

    @classmethod
    def may_fire_in_ast(cls, tree: ast.Module, text: str, settings: Settings) -> bool:
        return _ast_may_report(tree, text)

    def check(self, ctx: RuleContext) -> None:
        a = ctx.analysis
        for loop in a.loops:
            if isinstance(loop.node, cst.For):
                self._check_loop(ctx, a, loop)
        self._check_foreach_false(ctx, a)

    # --- for p in params: p.add_(...) ------------------------------------------------------------------
    def _check_loop(self, ctx: RuleContext, a: FileAnalysis, loop: LoopInfo) -> None:
        node = loop.node
        assert isinstance(node, cst.For)
        if node.asynchronous is not None:
            return
        params = _param_targets(a, node.iter, node.target)
        if not params:
            return
        function = loop.function
        while function is not None:
            if _INIT_FUNCTION.search(function.name) or function.name.startswith("test"):
                return  # initialisation and tests run once
            if _SINGLE_TENSOR_FUNCTION.search(function.name):
                return  # the deliberate per-parameter path beside a foreach/fused one (as torch.optim ships)
            function = function.parent
        if _beside_foreach_branch(a, node) or _collects_for_foreach(a, node):
            return
        if _rescales_module_it_returns(a, node, loop):
            return  # `zero_module(conv)`-style builders run while the model is made, not every step
        body = _loop_body_class()(params, {local for local, target in a.imports.items() if target == "torch"})
        node.body.visit(body)
        if not body.updates:
            return
        launches = max(body.launches, len(body.updates))
        ops = list(dict.fromkeys(body.inplace_ops))
        twins = _foreach_msg(ops)
        averaging = _is_zip_of_params(a, node.iter) or "state_dict" in a.module.code_for_node(node.iter)
        if "lerp_" in ops or (averaging and ({"mul_", "add_"} <= set(ops) or "copy_" in ops)):
            hint = "for an EMA: `torch._foreach_lerp_(ema_params, params, 1 - decay)`"
        elif ops and set(ops) <= {"clamp_", "clamp_min_", "clamp_max_"} and ".grad" in a.module.code_for_node(node.body):
            hint = "for gradient clipping: `torch.nn.utils.clip_grad_value_`, which uses them"
        elif ops and set(ops) <= {"mul_", "div_"}:
            hint = "for scaling gradients or weights: one call covers the whole list"
        elif "addcdiv_" in ops:
            hint = "for AdamW: `torchlint.runtime.AdamW`"
        else:
            hint = "or a `torch.optim` optimizer; for AdamW, `torchlint.runtime.AdamW`"
        message = (
            f"per-parameter update loop: about {launches} kernel launch{'es' if launches != 1 else ''} per "
            f"parameter, one parameter at a time; batch them over the whole parameter list with {twins} "
            f"({hint})"
        )
        fix, reason = self._rewrite(ctx, a, node)
        if fix is None:
            message += f"; no automatic fix: {reason}"
        ctx.report(node.iter, message=message, fix=fix)

    def _rewrite(self, ctx: RuleContext, a: FileAnalysis, node: cst.For) -> Tuple[Optional[Fix], str]:
        """The unsafe fix lifting the loop into `torch._foreach_*` calls, or None and the reason there is none."""
        # Imported here: the rewriter builds tables of LibCST classes at import, and most runs never get here.
        from ._foreach import NoFix, loop_context, rewrite_loop

        where = loop_context(a, node, ctx.torch_version)
        if where is None:
            return None, "the file does not import torch"
        try:
            statements = rewrite_loop(node, where)
        except NoFix as reason:
            return None, str(reason)
        replacements = {node: cst.FlattenSentinel(statements)}
        if loses_comment(replacements):
            return None, "it would drop a comment"  # one inside a lifted statement's brackets
        return Fix(replacements, Applicability.UNSAFE), ""

    # --- torch.optim.X(..., foreach=False) ------------------------------------------------------------
    def _check_foreach_false(self, ctx: RuleContext, a: FileAnalysis) -> None:
        if "foreach" not in a.source:
            return
        for call in a.calls:
            arg = keyword_arg(call, "foreach")
            if arg is None or not (isinstance(arg.value, cst.Name) and arg.value.value == "False"):
                continue
            qualified = a.qualified_name(call.func) or ""
            if not qualified.startswith("torch.optim.") or _OPTIMIZER_SKIP.match(qualified):
                continue
            fused = keyword_arg(call, "fused")
            if fused is not None and not (isinstance(fused.value, cst.Name) and fused.value.value in ("False", "None")):
                continue  # the fused kernel wins over both
            optimizer = qualified.rsplit(".", 1)[-1]
            if ctx.torch_version < (2, 0):
                ctx.report(
                    arg,
                    message=(
                        f"`{optimizer}(..., foreach=False)` updates one parameter at a time; before PyTorch 2.0 "
                        "the default is the same loop, so pass `foreach=True` for the multi-tensor kernels"
                    ),
                )
                continue
            message = (
                f"`{optimizer}(..., foreach=False)` updates one parameter at a time (several kernel launches "
                "per parameter); drop it so PyTorch uses the multi-tensor `torch._foreach_*` kernels on CUDA"
            )
            new_call = remove_arg(call, arg)
            if new_call is None:
                ctx.report(arg, message=f"{message} (not fixed automatically: it would drop a comment)")
                continue
            ctx.report(arg, message=message, fix=Fix.replace(call, new_call, Applicability.SAFE))


# The text stage (see `may_fire`), however the code is spaced (see text_prefilter).
_FOREACH_FALSE_TEXT = re.compile(r"foreach" + GAP + r"=(?:[\s\\(]|#[^\r\n]*[\r\n])*False")
# A `for` statement: its keyword starts a line (a comprehension's `for` is no loop `check` reads).
_FOR_TEXT = re.compile(r"for\b")  # with finditer_word, then only spaces before it on its line
_IN_TEXT = re.compile(r"\bin\b")
# What `_param_targets`/`_is_params_expr` look through to a name: `enumerate(ps)`, `zip(ps, qs)`, `list(ps)`.
_WRAPPER_TEXT = re.compile(r"[\s(]*(?:enumerate|zip|list|tuple|filter|reversed)" + CALL_GAP + r"\(")
_BARE_NAME_TEXT = re.compile(r"(?<![\w.])([A-Za-z_]\w*)(?=[\s),:\\]|$)")  # not a callee, receiver or attribute
_NOT_NAMES = frozenset(kwlist)
_ASSIGNED_TEXT = re.compile(CALL_GAP + r"(?::[^=\n]*)?=(?!=)")  # after a name: `ps = `, `(ps) = `, `ps: list = `
_ONE_NAME_TEXT = re.compile(r"[\s(\\]*([A-Za-z_]\w*)[\s)\\]*(?::|#|$)")  # `for p in ps:`, `= ps  # note`
_AUG_OP_TEXTS = ("-=", "+=", "*=", "/=", "%=", "@=", "&=", "|=", "^=", ">>=", "<<=")  # `//=`, `**=` hold one
_DATA_SET_TEXT = re.compile(r"data" + CALL_GAP + r"=(?!=)")  # with search_method: `p.data = `, `(p . data) =`
_INPLACE_CALL_TEXT = re.compile(r"_(?<=\w_)" + CALL_GAP + r"\(")  # after a word character: `p.add_(`, `p.mul_ (`


def _has_param_loop(text: str) -> bool:
    """A ``for`` statement whose iterable (its lines joined: ``statement_end``) may be parameters: it holds a
    word ``check`` takes for them (``_PARAMS_NAME``, any case; ``state_dict``), or names a variable bound to
    such a value (``ps = list(model.parameters())`` then ``for p in ps:``), through up to three bindings as
    ``_is_params_expr`` follows them."""
    text = with_newline_ends(text)
    loops = []
    for match in finditer_word(_FOR_TEXT, text):
        start = match.start()
        line_start = text.rfind("\n", 0, start) + 1
        if text[line_start:start].strip(" \t\f"):
            continue  # a comprehension's `for`, or the word in prose
        end = statement_end(text, start)
        found = _IN_TEXT.search(text, start + 3, end)
        if found is not None:
            iterable = text[found.end():end]
            if _names_params(iterable):
                return True
            loops.append((start, start - line_start, end, iterable))
    # Then the loops over names whose body may update something: `_is_params_expr` reads a name's bindings
    # in the loop's own scope.
    for start, indent, end, iterable in loops:
        if _may_update(_loop_text(text, start, indent, end)) and _may_be_params(text, iterable, 0, {}, start, None):
            return True
    return False


def _loop_text(text: str, start: int, indent: int, header_end: int) -> str:
    """The loop's text: its header, then the lines up to the next one indented ``indent`` or less."""
    end = _dedent_text(indent).search(text, header_end)
    return text[start:end.start() if end is not None else len(text)]


def _names_params(code: str) -> bool:
    return "state_dict" in code or "param" in code.lower()


def _may_be_params(text: str, code: str, depth: int, seen: Dict[str, int], at: int,
                   scope: Optional[Tuple[int, int]]) -> bool:
    """The text ``code`` of an iterable or a bound value may be parameters for ``_is_params_expr``: it holds
    a word taken for them, or names (directly, or in ``enumerate``/``zip``/``list``... as `_param_targets`
    and `_is_params_expr` look through them) a variable whose value in the scope of the statement at ``at``
    (``scope``, found on the first name) may be."""
    if _names_params(code):
        return True
    if depth > 3:
        return False
    wrapper = _WRAPPER_TEXT.match(code)
    if wrapper is not None:
        names = _BARE_NAME_TEXT.findall(code, wrapper.end())
    else:
        one = _ONE_NAME_TEXT.match(code)
        names = [one.group(1)] if one is not None else []
    for name in names:
        if name in _NOT_NAMES or seen.get(name, 99) <= depth:
            continue  # its bindings were read from as high up already
        seen[name] = depth
        if scope is None:
            scope = _scope_of(text, at)
        values = list(_bound_values(text, name, scope))
        if not values and scope[0] > 0 and not _in_def_line(text, name, scope[0]):
            # Neither assigned in its def nor one of the def's parameters: `single_value` reads the module's
            # bindings (searched in the whole text: a superset).
            scope = (0, len(text))
            values = list(_bound_values(text, name, scope))
        for value in values:
            if _may_be_params(text, text[value:statement_end(text, value)], depth + 1, seen, at, scope):
                return True
    return False


def _in_def_line(text: str, name: str, def_line: int) -> bool:
    """``name`` is in the ``def`` statement (its parameters) that starts at ``def_line``."""
    end = statement_end(text, def_line)
    at = text.find(name, def_line, end)
    while at != -1:
        if not is_word_char(text[at - 1]) and not is_word_char(text[at + len(name)]):
            return True
        at = text.find(name, at + len(name), end)
    return False


def _bound_values(text: str, name: str, scope: Tuple[int, int]) -> Iterator[int]:
    """Where the value of each ``name = value`` in ``scope`` starts (``(name) =``, ``name: T =``,
    ``a = name = value``). In a def, each place of the name is read by hand; in the whole text, one regex
    search finds them."""
    start, end = scope
    if start == 0:
        pattern = _binding_text(name)
        match = pattern.search(text, start, end)
        while match is not None:
            if not is_word_char(text[match.start() - 1]):
                yield match.end()
            match = pattern.search(text, match.start() + 1, end)
        return
    at = text.find(name, start, end)
    while at != -1:
        after = at + len(name)
        binding = _ASSIGNED_TEXT.match(text, after) if not is_word_char(text[at - 1]) else None
        if binding is not None:
            yield binding.end()
        at = text.find(name, after, end)


@lru_cache(maxsize=1024)
def _binding_text(name: str) -> "re.Pattern[str]":
    return re.compile(re.escape(name) + _ASSIGNED_TEXT.pattern)


def _scope_of(text: str, pos: int) -> Tuple[int, int]:
    """The text of the ``def`` around the statement at ``pos`` (the whole text at module level): from its
    ``def`` line to the next line indented no deeper than it (blank and comment lines, and lines that start
    with a closing bracket, do not end it). Indentation is compared by length, which is exact for the
    consistent indentation Python requires within one block and at worst widens the scope."""
    line_start = text.rfind("\n", 0, pos) + 1
    indent = pos - line_start
    if indent == 0:
        return 0, len(text)
    at = pos
    while True:
        at = text.rfind("def", 0, at)
        if at == -1:
            return 0, len(text)
        def_line = text.rfind("\n", 0, at) + 1
        before = text[def_line:at]
        depth = len(before) - len(before.lstrip(" \t\f"))
        if before.strip() in ("", "async") and text[at + 3:at + 4] in (" ", "\t", "\\") and depth < indent:
            end = _dedent_text(depth).search(text, at)
            return def_line, end.start() if end is not None else len(text)


@lru_cache(maxsize=None)
def _dedent_text(depth: int) -> "re.Pattern[str]":
    """A line indented ``depth`` or less that holds code (not a comment or a closing bracket)."""
    return re.compile(r"\n[ \t\f]{0,%d}(?![ \t\f#)\]}\r\n])" % depth)


def _may_update(text: str) -> bool:
    """Something ``_LoopBody`` counts as an update: an augmented assignment, ``p.data = ...`` or an in-place
    method call (``foreach`` stands for ``_check_foreach_false``)."""
    if "foreach" in text or any(op in text for op in _AUG_OP_TEXTS):
        return True
    if "data" in text and search_method(_DATA_SET_TEXT, text):
        return True
    return _INPLACE_CALL_TEXT.search(text) is not None


def _rescales_module_it_returns(a: FileAnalysis, loop: cst.For, info: LoopInfo) -> bool:
    """``def scale_module(m, s): for p in m.parameters(): p.detach().mul_(s); return m``: a helper that
    changes the weights of the module it is given and hands that module back is a model builder
    (``self.out = scale_module(nn.Conv2d(...), 0.1)``), run once. Gradients are left out: a loop reading
    ``.grad`` is a training step whatever the function returns."""
    function = info.function
    if function is None or not isinstance(function.node, cst.FunctionDef):
        return False
    iterable = loop.iter
    if not (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Attribute)
            and iterable.func.attr.value in ("parameters", "named_parameters")
            and isinstance(iterable.func.value, cst.Name)):
        return False
    module = iterable.func.value.value
    node = function.node
    if module not in {p.name.value for p in node.params.params}:
        return False
    statements = list(node.body.body) if isinstance(node.body, cst.IndentedBlock) else []
    last = statements[-1] if statements else None
    if not (isinstance(last, cst.SimpleStatementLine) and len(last.body) == 1 and isinstance(last.body[0], cst.Return)
            and isinstance(last.body[0].value, cst.Name) and last.body[0].value.value == module):
        return False
    return ".grad" not in a.module.code_for_node(loop.body)


def _beside_foreach_branch(a: FileAnalysis, loop: cst.For) -> bool:
    """The loop sits in one branch of an ``if`` that picks a foreach or fused path (``if self.foreach: ...
    else: for p in ...``, ``if not foreach:``): the per-parameter branch is the deliberate fallback."""
    for ancestor in a.ancestors(loop):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
            return False
        if isinstance(ancestor, (cst.If, cst.IfExp)) and _FOREACH_FLAG.search(a.module.code_for_node(ancestor.test)):
            return True
    return False


def _collects_for_foreach(a: FileAnalysis, loop: cst.For) -> bool:
    """The loop appends to lists that a later ``torch._foreach_*`` call takes: it is the collecting pass of a
    foreach implementation (whatever host bookkeeping it also does, like ``state["step"] += 1``)."""
    appended = {
        call.func.value.value
        for call in a.calls_in(loop.body)
        if call_name(call) == "append" and isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name)
    }
    if not appended:
        return False
    scope = a.scope_of(loop)
    for call in a.calls_in(scope):
        if a.comes_before(call, loop) or a.contains(loop, call):
            continue
        name = call_name(call) or ""
        if name.startswith("_foreach_") and any(
            isinstance(arg.value, cst.Name) and arg.value.value in appended for arg in call.args
        ):
            return True
    return False


# --- the ast pre-filter: a superset of what `check` reports ------------------------------------------
# On the shared index, the gating tests of `_check_loop` (the loop's parameter targets, the functions around
# it, the foreach branch and collecting pass, a candidate update in its body) and of `_check_foreach_false`.
# Not mirrored: the finer tests of the body (`_LoopBody`'s state-initialisation branches and tensor tracking):
# those only add a "maybe". (Test files never reach this stage: `silent_in_test_files`.)


def _ast_may_report(tree: ast.Module, text: str) -> bool:
    index = index_of(tree)
    if "foreach" in text and _ast_has_foreach_false(index):
        return True
    for loop in index.loops:
        node = loop.node
        if type(node) is not ast.For:
            continue
        params = _ast_param_targets(index, node.iter, node.target, loop.function)
        if not params or not _may_update_in(node, params):
            continue
        if _ast_in_run_once_function(index, node):
            continue
        if _ast_beside_foreach_branch(index, node, text) or _ast_collects_for_foreach(index, loop):
            continue
        return True
    return False


def _ast_has_foreach_false(index: AstIndex) -> bool:
    """``_check_foreach_false``'s candidates: ``torch.optim.X(..., foreach=False)`` without a fused kernel."""
    for info in index.calls:
        call = info.node
        keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
        if not is_literal(keywords.get("foreach"), False):
            continue
        qualified = index.qualified_name(call.func) or ""
        if not qualified.startswith("torch.optim.") or _OPTIMIZER_SKIP.match(qualified):
            continue
        fused = keywords.get("fused")
        if fused is None or is_literal(fused, False) or is_literal(fused, None):
            return True
    return False


def _ast_args(call: ast.Call) -> List[Tuple[ast.expr, bool, bool]]:
    """LibCST's ``call.args``: (value, starred, keyword) in source order (``*a`` after a keyword too)."""
    args = [(a.value, True, False) if type(a) is ast.Starred else (a, False, False) for a in call.args]
    if call.keywords:
        args += [(k.value, k.arg is None, k.arg is not None) for k in call.keywords]
        args.sort(key=lambda arg: (arg[0].lineno, arg[0].col_offset))
    return args


def _ast_elements(target: ast.AST) -> List[ast.AST]:
    return [e.value if type(e) is ast.Starred else e for e in target.elts]  # type: ignore[attr-defined]


def _ast_param_targets(index: AstIndex, iterable: ast.AST, target: ast.AST, scope) -> Set[str]:
    """``_param_targets`` on the ast."""
    if type(iterable) is ast.Call:
        name = ast_call_name(iterable)
        args = _ast_args(iterable)
        if name == "enumerate" and args:
            if type(target) in (ast.Tuple, ast.List) and len(target.elts) == 2:
                return _ast_param_targets(index, args[0][0], _ast_elements(target)[1], scope)
            return set()
        if name == "zip" and type(iterable.func) is ast.Name:
            if type(target) not in (ast.Tuple, ast.List) or len(target.elts) != len(args):
                return set()
            names: Set[str] = set()
            elements = _ast_elements(target)
            for (value, starred, keyword), element in zip(args, elements):
                if not starred and not keyword:
                    names |= _ast_param_targets(index, value, element, scope)
            if names:
                names |= {e.id for e in elements if type(e) is ast.Name}
            return names
        if name in ("items", "named_parameters") and (name == "named_parameters" or _ast_is_state_dict_items(iterable)):
            if type(target) in (ast.Tuple, ast.List) and len(target.elts) == 2:
                value = _ast_elements(target)[1]
                return {value.id} if type(value) is ast.Name else set()
            return set()
    if type(target) is ast.Name and _ast_is_params_expr(index, iterable, scope, 0):
        return {target.id}
    return set()


def _ast_is_state_dict_items(call: ast.Call) -> bool:
    func = call.func
    return (type(func) is ast.Attribute and func.attr == "items" and type(func.value) is ast.Call
            and ast_call_name(func.value) == "state_dict")


def _ast_is_params_expr(index: AstIndex, expr: ast.AST, scope, depth: int) -> bool:
    """``_is_params_expr``; ``scope`` is the def around ``expr`` (None: the module)."""
    if depth > 3:
        return False
    kind = type(expr)
    if kind is ast.Call:
        name = ast_call_name(expr)
        func = expr.func
        if name == "parameters" and type(func) is ast.Attribute:
            return True
        if name == "values" and type(func) is ast.Attribute and type(func.value) is ast.Call:
            return ast_call_name(func.value) == "state_dict"
        args = _ast_args(expr)
        if name in ("list", "tuple", "filter", "reversed") and type(func) is ast.Name and args:
            return _ast_is_params_expr(index, args[-1][0], scope, depth + 1)
        return False
    if kind is ast.Subscript:  # group["params"] (a string LibCST reads as one literal: a superset)
        key = expr.slice
        return type(key) is ast.Constant and key.value == "params"
    if kind in (ast.ListComp, ast.GeneratorExp):
        return any(_ast_is_params_expr(index, g.iter, scope, depth + 1) for g in expr.generators)
    name = ast_dotted_name(expr)
    if name is None:
        return False
    last = name.split(".")[-1]
    if _PARAMS_NAME.search(last) and not _NOT_PARAMS_NAME.search(last):
        return True
    if kind is ast.Name:
        # `single_value`, knowing which scope the value comes from (its own, for the recursion)
        for candidate in (scope, None):
            values = index.values_of(expr.id, candidate)
            if values:
                value = values[0] if len(values) == 1 else None
                return value is not None and _ast_is_params_expr(index, value, candidate, depth + 1)
    return False


def _ast_root(expr: ast.AST) -> Optional[str]:
    """``_LoopBody._root``."""
    while True:
        kind = type(expr)
        if kind is ast.Call:
            expr = expr.func
        elif kind is ast.Attribute:
            if expr.attr == "state" and type(expr.value) in (ast.Name, ast.Attribute):
                return "<state>"
            if expr.attr in _SCALAR_ATTRS:
                return None
            expr = expr.value
        elif kind is ast.Subscript:
            expr = expr.value
        elif kind is ast.Name:
            return expr.id
        else:
            return None


def _may_update_in(loop: ast.For, params: Set[str]) -> bool:
    """A superset of ``_LoopBody.updates``: an in-place update whose root is a parameter, per-parameter state
    or a name the body binds (``_LoopBody.mutable`` grows only through assignments)."""
    nodes: List[ast.AST] = []
    stack: List[ast.AST] = list(loop.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        nodes.append(node)
        stack.extend(ast.iter_child_nodes(node))
    mutable = set(params) | {"<state>"}
    for node in nodes:
        if type(node) is ast.Assign:
            for target in node.targets:
                mutable.update(target_names(target))
    for node in nodes:
        kind = type(node)
        if kind is ast.AugAssign:
            if _ast_root(node.target) in mutable:
                return True
        elif kind is ast.Call and type(node.func) is ast.Attribute:
            name = node.func.attr
            if name.endswith("_") and not name.startswith("_") and _ast_root(node.func.value) in mutable and (
                    name not in _NOT_UPDATES
                    or (name == "copy_" and any(map(_ast_may_compute, [*node.args, *(k.value for k in node.keywords)])))):
                return True
        elif kind is ast.Assign and type(node.value) is ast.BinOp:
            if any(type(t) is ast.Attribute and t.attr == "data" and _ast_root(t) in params for t in node.targets):
                return True
    return False


def _ast_may_compute(expr: ast.AST) -> bool:
    """A superset of ``_LoopBody._computes``: arithmetic or a call (a plain name, attribute or subscript is a
    copy, not an update: ``p._mp_param.copy_(p.data)``)."""
    while type(expr) is ast.Call and type(expr.func) is ast.Attribute and expr.func.attr in _PASS_THROUGH:
        expr = expr.func.value
    return type(expr) in (ast.BinOp, ast.UnaryOp, ast.Call)


def _ast_in_run_once_function(index: AstIndex, loop: ast.For) -> bool:
    """A def around the loop is an initialisation, a test or a `_single_tensor_*` path (`_check_loop`)."""
    for function in index.functions:
        if function.lineno <= loop.lineno <= (function.end_lineno or function.lineno):
            name = function.name
            if _INIT_FUNCTION.search(name) or name.startswith("test") or _SINGLE_TENSOR_FUNCTION.search(name):
                return True
    return False


def _ast_beside_foreach_branch(index: AstIndex, loop: ast.For, text: str) -> bool:
    """``_beside_foreach_branch``: an ``if`` on a foreach flag around the loop, within its def or class.
    Goes down the statements whose lines hold the loop's first line (a compound statement starts a line)."""
    found = False
    nodes: List[ast.AST] = list(index.tree.body)
    while nodes:
        holder = next((n for n in nodes if n.lineno <= loop.lineno <= (n.end_lineno or n.lineno)), None)
        if holder is None or holder is loop:
            return found and holder is loop
        if isinstance(holder, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found = False
        elif type(holder) is ast.If and not found:
            found = bool(_FOREACH_FLAG.search(ast.get_source_segment(text, holder.test) or ""))
        nodes = []
        for child in ast.iter_child_nodes(holder):
            if isinstance(child, ast.match_case):
                nodes.extend(child.body)  # a case has no position of its own
            elif isinstance(child, (ast.stmt, ast.excepthandler)):
                nodes.append(child)
    return False


def _ast_collects_for_foreach(index: AstIndex, loop) -> bool:
    """``_collects_for_foreach``: the loop appends to lists that a ``torch._foreach_*`` call after it takes
    (in the same def: a subset of the calls LibCST looks at)."""
    node = loop.node
    first = (node.body[0].lineno, node.body[0].col_offset)
    body_end = (node.body[-1].end_lineno, node.body[-1].end_col_offset)
    last = (node.end_lineno, node.end_col_offset)
    appended = {
        info.node.func.value.id
        for info in index.calls_by_name.get("append", ())
        if type(info.node.func) is ast.Attribute and type(info.node.func.value) is ast.Name
        and first <= (info.node.lineno, info.node.col_offset) <= body_end
    }
    if not appended:
        return False
    for name, infos in index.calls_by_name.items():
        if not name.startswith("_foreach_"):
            continue
        for info in infos:
            call = info.node
            if info.function is loop.function and (call.lineno, call.col_offset) > last and (
                    any(type(arg) is ast.Name and arg.id in appended for arg in call.args)
                    or any(type(k.value) is ast.Name and k.value.id in appended for k in call.keywords)):
                return True
    return False


# --- which loops iterate parameters ----------------------------------------------------------------


def _param_targets(a: FileAnalysis, iterable: cst.BaseExpression, target: cst.BaseExpression) -> Set[str]:
    """The loop-target names that are parameters (or parameter-like tensors such as state_dict values)."""
    if isinstance(iterable, cst.Call) and call_name(iterable) == "enumerate" and iterable.args:
        if isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2:
            return _param_targets(a, iterable.args[0].value, target.elements[1].value)
        return set()
    if isinstance(iterable, cst.Call) and call_name(iterable) == "zip" and isinstance(iterable.func, cst.Name):
        if not isinstance(target, (cst.Tuple, cst.List)) or len(target.elements) != len(iterable.args):
            return set()
        names: Set[str] = set()
        for arg, element in zip(iterable.args, target.elements):
            if not arg.star and arg.keyword is None:
                names |= _param_targets(a, arg.value, element.value)
        if names:  # zip(shadow, params): the partner of a parameter is a per-parameter tensor too (an EMA copy)
            names |= {e.value.value for e in target.elements if isinstance(e.value, cst.Name)}
        return names
    if _is_state_dict_items(iterable):  # for k, v in ema.state_dict().items()
        if isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2:
            value = target.elements[1].value
            return {value.value} if isinstance(value, cst.Name) else set()
        return set()
    if isinstance(iterable, cst.Call) and call_name(iterable) == "named_parameters":
        if isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2:
            value = target.elements[1].value
            return {value.value} if isinstance(value, cst.Name) else set()
        return set()
    if isinstance(target, cst.Name) and _is_params_expr(a, iterable, depth=0):
        return {target.value}
    return set()


def _is_state_dict_items(iterable: cst.BaseExpression) -> bool:
    return (
        isinstance(iterable, cst.Call) and call_name(iterable) == "items" and isinstance(iterable.func, cst.Attribute)
        and isinstance(iterable.func.value, cst.Call) and call_name(iterable.func.value) == "state_dict"
    )


def _is_params_expr(a: FileAnalysis, expr: cst.BaseExpression, depth: int) -> bool:
    if depth > 3:
        return False
    if isinstance(expr, cst.Call):
        name = call_name(expr)
        if name == "parameters" and isinstance(expr.func, cst.Attribute):
            return True
        if name == "values" and isinstance(expr.func, cst.Attribute) and isinstance(expr.func.value, cst.Call):
            return call_name(expr.func.value) == "state_dict"  # ema.state_dict().values()
        if name in ("list", "tuple", "filter", "reversed") and isinstance(expr.func, cst.Name) and expr.args:
            return _is_params_expr(a, expr.args[-1].value, depth + 1)
        return False
    if isinstance(expr, cst.Subscript):  # group["params"]
        if len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
            key = expr.slice[0].slice.value
            return isinstance(key, cst.SimpleString) and key.evaluated_value == "params"
        return False
    if isinstance(expr, (cst.ListComp, cst.GeneratorExp)):
        return any(_is_params_expr(a, f.iter, depth + 1) for f in _comp_fors(expr.for_in))
    name = dotted_name(expr)
    if name is None:
        return False
    last = name.split(".")[-1]
    if _PARAMS_NAME.search(last) and not _NOT_PARAMS_NAME.search(last):
        return True
    if isinstance(expr, cst.Name):
        value = a.single_value(expr.value, a.scope_of(expr))
        if value is not None:
            return _is_params_expr(a, value, depth + 1)
    return False


def _comp_fors(comp_for: cst.CompFor) -> List[cst.CompFor]:
    out = []
    while comp_for is not None:
        out.append(comp_for)
        comp_for = comp_for.inner_for_in
    return out


def _is_zip_of_params(a: FileAnalysis, iterable: cst.BaseExpression) -> bool:
    if not (isinstance(iterable, cst.Call) and call_name(iterable) == "zip"):
        return False
    return len(iterable.args) >= 2 and any(_is_params_expr(a, arg.value, 0) for arg in iterable.args)


# --- what a loop body does ------------------------------------------------------------------------


@lru_cache(maxsize=None)
def _loop_body_class() -> type:
    """The visitor class, made on first use: subclassing ``cst.CSTVisitor`` at import time would load
    libcst on every run, also where no file reaches the LibCST stage (torchlint/deferred.py)."""

    class _LoopBody(cst.CSTVisitor):
        """Reads one loop body (not nested defs, not state-initialisation branches): the in-place updates of
        parameters or per-parameter state, and about how many kernel launches one iteration makes."""

        def __init__(self, params: Set[str], torch_names: Set[str]) -> None:
            super().__init__()
            self.torch_names = torch_names  # local names of the torch module
            self.params = set(params)
            self.tracked = set(params)  # names holding parameters, per-parameter state or values computed from them
            self.state_names: Set[str] = set()  # names bound to per-parameter state (dicts or their tensors)
            # names whose in-place update changes a parameter, its gradient or its state: the parameters, the
            # state, and plain aliases of them (`grad = p.grad`, `buf = state["momentum_buffer"]`)
            self.mutable = set(params)
            self.updates: List[cst.CSTNode] = []
            self.inplace_ops: List[str] = []
            self.launches = 0

        # nested scopes run elsewhere
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

        def visit_If(self, node: cst.If) -> bool:
            if self._mentions_state(node.test):  # `if len(state) == 0:` / `if "buf" not in state:`: runs once
                node.test.visit(self)
                if node.orelse is not None:
                    node.orelse.visit(self)
                return False
            return True

        def visit_Assign(self, node: cst.Assign) -> None:
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    self._bind(target.target.value, node.value)
                elif (isinstance(target.target, cst.Tuple) and isinstance(node.value, cst.Tuple)
                      and len(target.target.elements) == len(node.value.elements)):
                    # exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                    for element, value in zip(target.target.elements, node.value.elements):
                        if isinstance(element.value, cst.Name):
                            self._bind(element.value.value, value.value)
                elif isinstance(target.target, cst.Attribute) and target.target.attr.value == "data":
                    root = self._root(target.target)
                    if root in self.params and self._is_step(node.value):
                        self.updates.append(node)  # p.data = p.data - lr * p.grad

        def _bind(self, name: str, value: cst.BaseExpression) -> None:
            if self._is_state(value):
                self.state_names.add(name)
                self.mutable.add(name)
                self.tracked.add(name)
            elif self._tensorish(value):
                self.tracked.add(name)
                if self._is_alias(value):
                    self.mutable.add(name)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            root = self._root(node.target)
            if root is None or root not in self.tracked:
                return
            self.launches += 1
            if _is_step_count(node):
                return  # `state["step"] += 1`: bookkeeping (a python number in most optimizers), not an update
            if root in self.mutable:
                self.updates.append(node)
                op = _AUG_OPS.get(type(node.operator).__name__)
                if op is not None:
                    self.inplace_ops.append(op)

        def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
            if self._tensorish(node.left) or self._tensorish(node.right):
                self.launches += 1

        def visit_Call(self, node: cst.Call) -> None:
            name = call_name(node)
            func = node.func
            if not isinstance(func, cst.Attribute) or name is None:
                return
            receiver = func.value
            root = self._root(receiver)
            on_tensor = root in self.tracked if root is not None else self._tensorish(receiver)
            if not on_tensor:
                dotted = dotted_name(func)
                if dotted is not None and dotted.split(".")[0] in self.torch_names and any(
                    self._tensorish(arg.value) for arg in node.args
                ):
                    self.launches += 1  # torch.sqrt(exp_avg_sq), torch.maximum(...)
                return
            if name.endswith("_") and not name.startswith("_"):
                self.launches += 1
                self.inplace_ops.append(name)
                if root in self.mutable and (
                    name not in _NOT_UPDATES or (name == "copy_" and any(self._computes(arg.value) for arg in node.args))
                ):
                    self.updates.append(node)
            elif name not in _SCALAR_METHODS and name not in _NO_LAUNCH_METHODS:
                self.launches += 1

        # --- expression helpers --------------------------------------------------------------------
        def _root(self, expr: cst.BaseExpression) -> Optional[str]:
            """``exp_avg`` for ``exp_avg.mul_(b)``, ``p`` for ``p.grad.data``, "<state>" for ``self.state[p][k]``."""
            while True:
                if isinstance(expr, cst.Call):
                    expr = expr.func
                elif isinstance(expr, cst.Attribute):
                    if expr.attr.value == "state" and isinstance(expr.value, (cst.Name, cst.Attribute)):
                        self.tracked.add("<state>")
                        self.state_names.add("<state>")
                        self.mutable.add("<state>")
                        return "<state>"
                    if expr.attr.value in _SCALAR_ATTRS:
                        return None
                    expr = expr.value
                elif isinstance(expr, cst.Subscript):
                    expr = expr.value
                elif isinstance(expr, cst.Name):
                    return expr.value
                else:
                    return None

        def _is_alias(self, expr: cst.BaseExpression) -> bool:
            """``p.grad``, ``p.grad.data``, ``state["buf"]``, ``p.grad.detach()``: the same storage as a mutable name
            (``p.float()`` and ``.to(...)`` too, where the dtype already matches)."""
            while isinstance(expr, (cst.Attribute, cst.Subscript, cst.Call)):
                if isinstance(expr, cst.Call):
                    if not (isinstance(expr.func, cst.Attribute) and expr.func.attr.value in ("detach", "view", "view_as", "float", "to", "type_as")):
                        return False
                    expr = expr.func.value
                else:
                    expr = expr.value
            return isinstance(expr, cst.Name) and expr.value in self.mutable

        def _is_state(self, expr: cst.BaseExpression) -> bool:
            """``self.state[p]``, ``state["exp_avg"]`` where ``state`` is such a dict."""
            if not isinstance(expr, cst.Subscript):
                return False
            root = self._root(expr)
            return root is not None and root in self.state_names

        def _mentions_state(self, test: cst.BaseExpression) -> bool:
            names = {n for n in _names_in(test)}
            return bool(names & self.state_names) or any(
                isinstance(n, cst.Attribute) and n.attr.value == "state" for n in _attributes_in(test)
            ) or "state" in names

        def _tensorish(self, expr: cst.BaseExpression) -> bool:
            if isinstance(expr, cst.BinaryOperation):
                return self._tensorish(expr.left) or self._tensorish(expr.right)
            if isinstance(expr, cst.UnaryOperation):
                return self._tensorish(expr.expression)
            if isinstance(expr, cst.Call):
                name = call_name(expr)
                if name in _SCALAR_METHODS or name in ("len", "isinstance", "float", "int", "bool", "str", "max", "min"):
                    return False
                if isinstance(expr.func, cst.Attribute):
                    root = self._root(expr.func.value)
                    if root is not None and root in self.tracked:
                        return True
                    if root is None and self._tensorish(expr.func.value):
                        return True  # (exp_avg_sq / bc2).sqrt()
                return any(self._tensorish(arg.value) for arg in expr.args)
            if isinstance(expr, (cst.Name, cst.Attribute, cst.Subscript)):
                root = self._root(expr)
                return root is not None and root in self.tracked
            return False

        def _is_step(self, expr: cst.BaseExpression) -> bool:
            """Arithmetic on the gradient or per-parameter state (not ``fn(p.data)`` or a re-initialisation)."""
            if not (isinstance(expr, cst.BinaryOperation) and self._tensorish(expr)):
                return False
            return any(isinstance(n, cst.Attribute) and n.attr.value == "grad" for n in _attributes_in(expr)) or bool(
                set(_names_in(expr)) & (self.state_names - {"<state>"})
            )

        def _computes(self, expr: cst.BaseExpression) -> bool:
            """True where ``expr`` computes a new tensor from tracked ones (not a plain copy or detach)."""
            if isinstance(expr, (cst.BinaryOperation, cst.UnaryOperation)):
                return self._tensorish(expr)
            if isinstance(expr, cst.Call):
                name = call_name(expr)
                if isinstance(expr.func, cst.Attribute) and name in _PASS_THROUGH:
                    return self._computes(expr.func.value)
                return self._tensorish(expr)
            return False

    return _LoopBody


def _is_step_count(node: cst.AugAssign) -> bool:
    """``state["step"] += 1`` / ``step += 1``: a counter bumped by a literal."""
    if not (isinstance(node.operator, cst.AddAssign) and isinstance(node.value, cst.Integer)):
        return False
    target = node.target
    if isinstance(target, cst.Subscript) and len(target.slice) == 1 and isinstance(target.slice[0].slice, cst.Index):
        key = target.slice[0].slice.value
        return isinstance(key, cst.SimpleString) and "step" in key.value
    return isinstance(target, cst.Name) and "step" in target.value


def _names_in(expr: cst.CSTNode) -> Iterable[str]:
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Name):
            yield node.value
        stack.extend(node.children)


def _attributes_in(expr: cst.CSTNode) -> Iterable[cst.Attribute]:
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Attribute):
            yield node
        stack.extend(node.children)


# --- the fix: drop one argument, keeping the call's layout -------------------------------------------


def _has_comment(ws: object) -> bool:
    if isinstance(ws, cst.ParenthesizedWhitespace):
        return ws.first_line.comment is not None or any(line.comment is not None for line in ws.empty_lines)
    return False


def remove_arg(call: cst.Call, arg: cst.Arg) -> Optional[cst.Call]:
    """``call`` without ``arg``; None where a comment would be lost."""
    if has_comment(arg):
        return None
    new_call = _without_arg(call, arg)
    return None if new_call is None or loses_comment({call: new_call}) else new_call


def _without_arg(call: cst.Call, arg: cst.Arg) -> Optional[cst.Call]:
    args = list(call.args)
    index = args.index(arg)
    if index < len(args) - 1 or index == 0:  # the next argument takes its place (or there is none)
        del args[index]
        return call.with_changes(args=args)
    previous = args[index - 1]
    if isinstance(arg.comma, cst.Comma):  # `prev, foreach=False,\n)` -> `prev,\n)`
        closing = arg.comma.whitespace_after
        mine = previous.comma.whitespace_after if isinstance(previous.comma, cst.Comma) else None
        if isinstance(mine, cst.ParenthesizedWhitespace) and isinstance(closing, cst.ParenthesizedWhitespace):
            closing = closing.with_changes(first_line=mine.first_line, empty_lines=mine.empty_lines)
        elif _has_comment(mine):
            return None
        new_previous = previous.with_changes(
            comma=cst.Comma(
                whitespace_before=previous.comma.whitespace_before if isinstance(previous.comma, cst.Comma) else cst.SimpleWhitespace(""),
                whitespace_after=closing,
            )
        )
    else:  # `prev, foreach=False)` -> `prev)`
        mine = previous.comma.whitespace_after if isinstance(previous.comma, cst.Comma) else None
        if _has_comment(mine):  # `prev,  # note\n    foreach=False\n)` -> `prev,  # note\n)`
            closing = arg.whitespace_after_arg
            if not isinstance(closing, cst.ParenthesizedWhitespace) or _has_comment(closing):
                return None
            args[index - 1] = previous.with_changes(
                comma=previous.comma.with_changes(
                    whitespace_after=mine.with_changes(indent=closing.indent, last_line=closing.last_line)
                )
            )
            del args[index]
            return call.with_changes(args=args)
        new_previous = previous.with_changes(comma=cst.MaybeSentinel.DEFAULT, whitespace_after_arg=arg.whitespace_after_arg)
    args[index - 1] = new_previous
    del args[index]
    return call.with_changes(args=args)
