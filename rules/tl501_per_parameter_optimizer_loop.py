"""TL501: optimizer-style updates run one parameter at a time."""

from __future__ import annotations

import ast
import re
from functools import partial
from typing import Iterable, Iterator, List, Optional, Set, Tuple, Union

import libcst as cst

from torchlint.fix.analysis import FileAnalysis, keyword_arg
from torchlint.facts.index import AstIndex, AstLoopInfo, AstScope, call_arguments, call_name, dotted_name, is_literal, keyword_value, walk
from torchlint.fix.comments import has_comment, loses_comment
from torchlint.config import Settings
from torchlint.facts.devices import runs_on_cpu
from torchlint.facts.grad_mode import grad_off_in_function
from torchlint.facts.modules import class_attributes, self_attribute
from torchlint.facts.steps import runs_once_per_run, runs_only_for_evaluation, step_facts, step_place
from torchlint.rule import Applicability, Fix, FixAvailability, IndexContext, Rewrite, Rule
from torchlint.facts.text_gates import CALL_GAP, GAP, lowered, search_method


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
    `ema.state_dict().items()` / `.values()`, the names of a dict of parameters with another such dict indexed
    by them: `for name, p in params.items(): ema_params[name].mul_(d)...` after
    `ema_params = OrderedDict(ema.named_parameters())`, or the keys of a state dict kept in a name:
    `for key in src.keys(): dst[key].data.copy_(dst[key].data * d + src[key].data * (1 - d))` after
    `src = model.state_dict()`) whose body updates the parameters, their gradients or their
    per-parameter state in place (`p.add_(...)`, `p.data.add_(...)`, `p -= lr * p.grad`,
    `exp_avg.mul_(beta1).add_(...)`, an EMA's `ema_p.mul_(d).add_(p, alpha=1 - d)` or `v *= d; v += (1 - d) * w`,
    or its assignment form `ema_p.data = ema_p.data * d + p.data * (1 - d)`: arithmetic that reads the assigned
    parameter and its partner in the loop),
    in a `torch.optim.Optimizer.step` override or in free-standing training code. The message says about how many
    kernel launches per parameter the loop body makes, as far as it can be read from the code.

    It also flags `torch.optim.<Optimizer>(..., foreach=False)`.

    It stays silent on loops that only read the parameters (counting them, logging norms), on loops that
    only initialise, copy, freeze or reset them (`nn.init.*`, `p.data.normal_()`, `q.copy_(p)`,
    `p.requires_grad_(False)`, `p.grad.zero_()`), on loops in `__init__`/`init_weights`/`reset_parameters`
    and in test functions (they run once; test files are not checked at all), on loops at module level
    outside every loop (a script's set-up that rescales the initial weights runs once per run), in defs
    that the file calls only in the body of an `if` that also puts a model into eval mode, directly or
    through its other defs (averaged weights swapped in before an evaluation pass and back after it: once
    per evaluation, not per step), in helpers that change the
    weights of the module they are given and return it (`scale_module(m, s)`, used as
    `self.out = scale_module(nn.Conv2d(...), 0.1)`: a model builder, run once; not where the loop reads
    `.grad`), on loops over a name the file binds, at least once, to a list of flat tensors that each join a
    group of parameters into one (`[nn.Parameter(_flatten_dense_tensors(group)) ...]`, `parameters_to_vector`,
    `torch.cat`, also built by a def of the file: a mixed-precision trainer's flat master weights; the loop
    runs once per group, not once per parameter, whatever the list is called), on loops that collect tensors into lists for later `torch._foreach_*` calls
    (also lists kept in a dict by device and dtype; the parameters such a loop still handles one by one,
    sparse gradients, are the ones the foreach ops do not take), in functions compiled with `torch.compile`
    (as a decorator, or `step = torch.compile(step)`: the compiler fuses the loop's ops over all parameters
    itself; a loop written per parameter there is deliberate, to start each gradient's communication
    early), and on the deliberate per-parameter path of code that also has a foreach or fused one (a
    `_single_tensor_*` function, or the branch of `if foreach:` / `if self.foreach: ... else:` that loops).
    Silent too in CPU programs (a script or notebook in which nothing can reach a CUDA device, see TL101):
    the CPU has no multi-tensor kernels, the `_foreach_*` ops loop over the tensors there as the code does,
    which is why torch's optimizers take the foreach path by default only for CUDA tensors.

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
    differs (`if "buf" not in state: ... else: ...`), `p.data = ...` (below), a `state_dict()` loop that does not skip
    integer buffers (also over a name bound to `m.state_dict()`: `for k, v in sd.items():` needs
    `if v.dtype.is_floating_point:` first, as `num_batches_tracked` is an int64 entry there), names read after the loop, nested loops, `break`/`return`. Comments are kept: the
    comment lines above a lifted statement and a comment at the end of its line go, each on a line of its
    own, above its batched form; a comment inside a lifted statement (within its brackets) means no fix, as
    the rewrite would drop it.

    An update that assigns `.data` (`ema_p.data = ema_p.data * d + p.data * (1 - d)`) is reported without a
    fix: the in-place foreach form is not the same program. The assignment gives each parameter a new tensor,
    of the dtype the arithmetic promotes to (a half-precision average of a float model becomes float); an
    in-place update keeps the parameter's storage and dtype. Anything that still holds the old storage (a view
    of it, a flat buffer it lives in) keeps the old values after the assignment and would see the new ones
    after `torch._foreach_lerp_`, and the dtype would no longer change. Written as `ema_p.copy_(...)` the
    loop can be lifted.

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
        """An optimizer built with ``foreach=False``, or a word ``detect`` takes for parameters; then an update
        (``_may_update``). Literal tests first: most files stop there."""
        if "foreach" in text and _FOREACH_FALSE_TEXT.search(text):
            return True
        # `_PARAMS_NAME` ignores case: `param`, `Params`, `PARAMS`, `modelParams` hold `aram` or `ARAM`; the
        # lower-cased text is made only for a file without either, for `pArams` or `PAram`. (A loop over a
        # name bound to parameters names them where it binds them.)
        if "aram" not in text and "ARAM" not in text and "state_dict" not in text and "param" not in lowered(text):
            return False
        return "for" in text and _may_update(text)

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        if runs_on_cpu(ctx):
            return  # no multi-tensor kernels on the CPU: the foreach ops loop there too
        for loop in index.loops:
            if type(loop.node) is ast.For:  # not `async for`
                self._check_loop(ctx, loop)
        self._check_foreach_false(ctx)

    # --- for p in params: p.add_(...) ------------------------------------------------------------------
    def _check_loop(self, ctx: IndexContext, loop: AstLoopInfo) -> None:
        index = ctx.index
        node = loop.node
        scope = loop.function or index.tree
        params = _param_targets(index, node.iter, node.target, scope)
        by_name = _param_dicts_by_name(index, node, scope)
        params |= by_name
        if not params:
            return
        if loop.function is None and runs_once_per_run(index, node, None):
            return  # a script's set-up at module level, outside every loop (scaling the initial weights): once per run
        for function in index.functions:  # the defs around the loop
            name = function.name
            if index.contains(function, node) and (
                    _INIT_FUNCTION.search(name) or name.startswith("test") or _SINGLE_TENSOR_FUNCTION.search(name)):
                # initialisation and tests run once; a `_single_tensor_*` function is the deliberate
                # per-parameter path beside a foreach/fused one (as torch.optim ships)
                return
            if index.contains(function, node) and _compiled(index, function):
                return  # `@torch.compile`: the compiler fuses the loop's ops over the parameters itself
        body = _LoopBody(params, {local for local, target in index.imports.items() if target == "torch"})
        body.read(node.body)
        if not body.updates:
            return
        if _rescales_module_it_returns(loop):
            return  # `zero_module(conv)`-style builders run while the model is made, not every step
        if _collects_for_foreach(index, node, scope) or _beside_foreach_branch(index, node):
            return  # a pass of a foreach implementation, or its deliberate per-parameter branch
        launches = max(body.launches, body.updates)
        ops = list(dict.fromkeys(body.inplace_ops))
        twins = _foreach_msg(ops)
        averaging = (_is_zip_of_params(index, node.iter, scope) or len(by_name) > 1
                     or "state_dict" in index.code_for_node(node.iter, node))
        if "lerp_" in ops or (averaging and ({"mul_", "add_"} <= set(ops) or "copy_" in ops)):
            hint = "for an EMA: `torch._foreach_lerp_(ema_params, params, 1 - decay)`"
        elif ops and set(ops) <= {"clamp_", "clamp_min_", "clamp_max_"} and _reads_grad(node.body):
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
        facts = step_facts(index, ctx.project)
        reached = facts.reaching_step(index, node)
        if reached is None and type(loop.function) in (ast.FunctionDef, ast.AsyncFunctionDef) \
                and runs_only_for_evaluation(index, loop.function, facts):
            return  # a helper run only around an evaluation pass (swapping in averaged weights): not per step
        if reached is not None:  # the loop is in a helper: say which step runs it
            message += (f"; `{reached[0].name}()` runs every step: the training loop at "
                        f"{step_place(reached[1])} reaches it")
        # the lift reads the loop's function (the module's names come from the index); a loop outside
        # every def reads the whole module, what follows it included
        reads = tuple(index.tree.body) if loop.function is None else ()
        lift = partial(_lift_loop, torch_version=ctx.torch_version, index=index,
                       in_no_grad=grad_off_in_function(index, node),
                       over_state_dict=_iterates_state_dict(index, node, scope))
        ctx.report(node.iter, message=message,
                   rewrite=Rewrite(lift, message + "; no automatic fix: {reason}", block=node, statements=reads,
                                   reads=loop.function))

    # --- torch.optim.X(..., foreach=False) ------------------------------------------------------------
    def _check_foreach_false(self, ctx: IndexContext) -> None:
        index = ctx.index
        if "foreach" not in ctx.source:
            return
        for info in index.calls:
            call = info.node
            arg = next((keyword for keyword in call.keywords if keyword.arg == "foreach"), None)
            if arg is None or not is_literal(arg.value, False):
                continue
            qualified = index.qualified_name(call.func) or ""
            if not qualified.startswith("torch.optim.") or _OPTIMIZER_SKIP.match(qualified):
                continue
            fused = keyword_value(call, "fused")
            if fused is not None and not (is_literal(fused, False) or is_literal(fused, None)):
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
            ctx.report(arg, message=message,
                       rewrite=Rewrite(_drop_foreach, message + " (not fixed automatically: {reason})", call, reads=call))


# --- the rewrites, made on LibCST's tree where a fix is shown or applied ---------------------------------


def _lift_loop(node: "cst.For", analysis: FileAnalysis, torch_version: Tuple[int, int], index: AstIndex,
               in_no_grad: bool, over_state_dict: bool = False) -> Union[Fix, str]:
    """The unsafe fix lifting the loop into `torch._foreach_*` calls, or the reason there is none
    (``over_state_dict``: the loop runs over a dict the index shows is a `state_dict()`)."""
    # Imported here: the rewriter builds tables of LibCST classes at import, and most runs never get here.
    from ._foreach import NoFix, loop_context, rewrite_loop

    where = loop_context(analysis, node, torch_version, index, in_no_grad, over_state_dict)
    if where is None:
        return "the file does not import torch"
    try:
        statements = rewrite_loop(node, where)
    except NoFix as reason:
        return str(reason)
    replacements = {node: cst.FlattenSentinel(statements)}
    if loses_comment(replacements):
        return "it would drop a comment"  # one inside a lifted statement's brackets
    return Fix(replacements, Applicability.UNSAFE)


def _drop_foreach(call: "cst.Call", analysis: FileAnalysis) -> Union[Fix, str]:
    new_call = remove_arg(call, keyword_arg(call, "foreach"))
    return Fix.replace(call, new_call, Applicability.SAFE) if new_call is not None else "it would drop a comment"


# The text stage (see `may_fire`), however the code is spaced (see text_prefilter).
_FOREACH_FALSE_TEXT = re.compile(r"foreach" + GAP + r"=(?:[\s\\(]|#[^\r\n]*[\r\n])*False")
_AUG_OP_TEXTS = ("-=", "+=", "*=", "/=", "%=", "@=", "&=", "|=", "^=", ">>=", "<<=")  # `//=`, `**=` hold one
_DATA_SET_TEXT = re.compile(r"data" + CALL_GAP + r"=(?!=)")  # with search_method: `p.data = `, `(p . data) =`
_INPLACE_CALL_TEXT = re.compile(r"_(?<=\w_)" + CALL_GAP + r"\(")  # after a word character: `p.add_(`, `p.mul_ (`


def _may_update(text: str) -> bool:
    """Something ``_LoopBody`` counts as an update: an augmented assignment, ``p.data = ...`` or an in-place
    method call."""
    if any(op in text for op in _AUG_OP_TEXTS):
        return True
    if "data" in text and search_method(_DATA_SET_TEXT, text):
        return True
    return _INPLACE_CALL_TEXT.search(text) is not None


# --- the loops that run once or belong to a foreach implementation ---------------------------------------


def _rescales_module_it_returns(info: AstLoopInfo) -> bool:
    """``def scale_module(m, s): for p in m.parameters(): p.detach().mul_(s); return m``: a helper that
    changes the weights of the module it is given and hands that module back is a model builder
    (``self.out = scale_module(nn.Conv2d(...), 0.1)``), run once. Gradients are left out: a loop reading
    ``.grad`` is a training step whatever the function returns."""
    function, loop = info.function, info.node
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    iterable = loop.iter
    if not (type(iterable) is ast.Call and type(iterable.func) is ast.Attribute
            and iterable.func.attr in ("parameters", "named_parameters") and type(iterable.func.value) is ast.Name):
        return False
    module = iterable.func.value.id
    if module not in {arg.arg for arg in function.args.args}:
        return False
    body = function.body
    last = body[-1]
    if not (type(last) is ast.Return and type(last.value) is ast.Name and last.value.id == module):
        return False
    if len(body) > 1 and body[-2].end_lineno == last.lineno:
        return False  # `x = 1; return m`: not a line of its own
    return not _reads_grad(loop.body)


def _reads_grad(body: List[ast.stmt]) -> bool:
    """The loop body reads a gradient: ``.grad`` somewhere in it."""
    return any(type(node) is ast.Attribute and node.attr == "grad" for statement in body for node in walk(statement))


def _beside_foreach_branch(index: AstIndex, loop: ast.For) -> bool:
    """The loop sits in one branch of an ``if`` that picks a foreach or fused path (``if self.foreach: ...
    else: for p in ...``, ``if not foreach:``): the per-parameter branch is the deliberate fallback."""
    for ancestor in index.ancestors(loop):
        kind = type(ancestor)
        if kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            return False
        if kind is ast.If and _FOREACH_FLAG.search(index.code_for_node(ancestor.test, ancestor)):
            return True
    return False


def _compiled(index: AstIndex, function: ast.AST) -> bool:
    """``@torch.compile`` / ``@torch.compile(...)`` on the def, however torch is imported, or the def handed
    to ``torch.compile`` by its name (``step = torch.compile(step)``, ``opt.step = torch.compile(opt.step)``)."""
    if any(index.qualified_name(d.func if type(d) is ast.Call else d) == "torch.compile"
           for d in getattr(function, "decorator_list", ())):
        return True
    name = getattr(function, "name", None)
    for info in index.calls_by_name.get("compile", ()):
        call = info.node
        if index.qualified_name(call.func) == "torch.compile" and call.args:
            compiled = call.args[0]
            if (type(compiled) is ast.Name and compiled.id == name) or (
                    type(compiled) is ast.Attribute and compiled.attr == name):
                return True
    return False


def _collects_for_foreach(index: AstIndex, loop: ast.For, scope: AstScope) -> bool:
    """The loop appends to lists that a later ``torch._foreach_*`` call takes: it is the collecting pass of a
    foreach implementation (whatever host bookkeeping it also does, like ``state["step"] += 1``). The lists
    may sit in a dict by device and dtype (``grads[p.device][p.dtype].append(p.grad)``), taken later by a
    loop over it (``for per_dtype in grads.values(): for g in per_dtype.values(): torch._foreach_mul_(g, c)``)."""
    appended = set()
    for statement in loop.body:
        for info in index.calls_in(statement):
            func = info.node.func
            if call_name(info.node) == "append" and type(func) is ast.Attribute:
                receiver = func.value
                while type(receiver) is ast.Subscript:
                    receiver = receiver.value
                if type(receiver) is ast.Name:
                    appended.add(receiver.id)
    if not appended:
        return False
    end = (loop.end_lineno, loop.end_col_offset)
    for later in index.loops:  # names a later loop binds from the collected lists take them on
        header = later.node
        if (type(header) is ast.For and (header.lineno, header.col_offset) >= end
                and (later.function or index.tree) is scope and appended & set(_names_in(header.iter))):
            appended |= {n.id for n in ast.walk(header.target) if type(n) is ast.Name}
    for info in index.calls if scope is index.tree else index.calls_in(scope):
        call = info.node
        if (call.lineno, call.col_offset) < end:
            continue  # before the loop, or in it
        if (call_name(call) or "").startswith("_foreach_") and any(
            type(value) is ast.Name and value.id in appended for _, value in call_arguments(call)
        ):
            return True
    return False


# --- which loops iterate parameters ----------------------------------------------------------------


def _param_targets(index: AstIndex, iterable: ast.expr, target: ast.expr, scope: AstScope) -> Set[str]:
    """The loop-target names that are parameters (or parameter-like tensors such as state_dict values);
    ``scope``: the def around the loop, or the module."""
    if type(iterable) is ast.Call:
        name = call_name(iterable)
        if name == "enumerate" and (iterable.args or iterable.keywords):
            if type(target) in (ast.Tuple, ast.List) and len(target.elts) == 2:
                return _param_targets(index, call_arguments(iterable)[0][1], _element(target.elts[1]), scope)
            return set()
        if name == "zip" and type(iterable.func) is ast.Name:
            arguments = _arguments(iterable)
            if type(target) not in (ast.Tuple, ast.List) or len(target.elts) != len(arguments):
                return set()
            elements = [_element(e) for e in target.elts]
            names: Set[str] = set()
            for (value, plain), element in zip(arguments, elements):
                if plain:
                    names |= _param_targets(index, value, element, scope)
            if names:  # zip(shadow, params): the partner of a parameter is a per-parameter tensor too (an EMA copy)
                names |= {e.id for e in elements if type(e) is ast.Name}
            return names
        if name == "named_parameters" or _is_state_dict_items(iterable):  # for k, v in ema.state_dict().items()
            if type(target) in (ast.Tuple, ast.List) and len(target.elts) == 2:
                value = _element(target.elts[1])
                return {value.id} if type(value) is ast.Name else set()
            return set()
    if type(target) is ast.Name and _is_params_expr(index, iterable, scope, 0):
        return {target.id}
    return set()


def _param_dicts_by_name(index: AstIndex, loop: ast.For, scope: AstScope) -> Set[str]:
    """A loop over the names of a dict of parameters (``for name in params``, ``.keys()``, ``.items()`` of
    ``params = dict(model.named_parameters())``): the value target of ``.items()`` and every such dict the
    body indexes (``ema_params[name]``), which hold one parameter per name (an EMA paired by name)."""
    iterable = loop.iter
    over = iterable.func.value if (type(iterable) is ast.Call and type(iterable.func) is ast.Attribute
                                   and iterable.func.attr in ("keys", "items") and not iterable.args) else iterable
    if not _is_param_dict(index, over, scope):
        return set()
    found = set()
    target = loop.target
    if over is not iterable and iterable.func.attr == "items":  # type: ignore[attr-defined]
        if type(target) is ast.Tuple and len(target.elts) == 2 and type(target.elts[1]) is ast.Name:
            found.add(target.elts[1].id)
    for statement in loop.body:
        for node in walk(statement):
            if type(node) is ast.Subscript and type(node.value) is ast.Name and _is_param_dict(index, node.value, scope):
                found.add(node.value.id)
    return found


def _iterates_state_dict(index: AstIndex, loop: ast.For, scope: AstScope) -> bool:
    """The loop runs over a name bound to a `state_dict()` (``for k, v in sd.items()``, ``for k in sd``, its
    ``.keys()`` or ``.values()``), whose entries include integer buffers (``num_batches_tracked``)."""
    over = loop.iter
    if type(over) is ast.Call and type(over.func) is ast.Attribute and over.func.attr in ("keys", "items", "values") \
            and not over.args and not over.keywords:
        over = over.func.value
    if type(over) is not ast.Name:
        return False
    value, _ = index.single_value_and_scope(over.id, scope)
    return value is not None and _is_state_dict_call(value)


def _is_param_dict(index: AstIndex, expr: ast.expr, scope: AstScope) -> bool:
    """``dict(m.named_parameters())``, ``OrderedDict(...)`` of them, ``m.state_dict()`` (parameters and
    buffers by name), or a name bound to one."""
    if type(expr) is ast.Name:
        value, bound_in = index.single_value_and_scope(expr.id, scope)
        if value is None or type(value) is ast.Name:
            return False
        return _is_param_dict(index, value, bound_in)
    if _is_state_dict_call(expr):
        return True
    if not (type(expr) is ast.Call and len(expr.args) == 1 and not expr.keywords and (
            (type(expr.func) is ast.Name and expr.func.id == "dict" and "dict" not in index.imports)
            or index.qualified_name(expr.func) == "collections.OrderedDict")):
        return False
    inner = expr.args[0]
    return type(inner) is ast.Call and call_name(inner) == "named_parameters" and type(inner.func) is ast.Attribute


def _element(node: ast.expr) -> ast.expr:
    """A target's or a display's element, ``*x`` read as ``x`` (LibCST's ``element.value``)."""
    return node.value if type(node) is ast.Starred else node  # type: ignore[attr-defined]


def _arguments(call: ast.Call) -> List[Tuple[ast.expr, bool]]:
    """Each argument's value as LibCST's ``Call.args`` lists them (source order), with whether it is a plain
    positional one (no ``*``, ``**`` or keyword)."""
    found = [(arg.value, False) if type(arg) is ast.Starred else (arg, True) for arg in call.args]
    if call.keywords:
        found += [(keyword.value, False) for keyword in call.keywords]
        found.sort(key=lambda entry: (entry[0].lineno, entry[0].col_offset))
    return found


def _is_state_dict_call(expr: ast.expr) -> bool:
    """``m.state_dict()``: a dict of the module's parameters and buffers by name."""
    return type(expr) is ast.Call and type(expr.func) is ast.Attribute and expr.func.attr == "state_dict" \
        and not expr.args and not expr.keywords


def _is_state_dict_items(iterable: ast.Call) -> bool:
    func = iterable.func
    return (call_name(iterable) == "items" and type(func) is ast.Attribute and type(func.value) is ast.Call
            and call_name(func.value) == "state_dict")


def _is_params_expr(index: AstIndex, expr: ast.expr, scope: AstScope, depth: int) -> bool:
    """``expr``, in ``scope``, is parameters: ``m.parameters()``, ``group["params"]``, a name taken for them,
    or a name bound once to such a value."""
    if depth > 3:
        return False
    kind = type(expr)
    if kind is ast.Call:
        name = call_name(expr)
        func = expr.func
        if name == "parameters" and type(func) is ast.Attribute:
            return True
        if name == "values" and type(func) is ast.Attribute and type(func.value) is ast.Call:
            return call_name(func.value) == "state_dict"  # ema.state_dict().values()
        if name in ("list", "tuple", "filter", "reversed") and type(func) is ast.Name and (expr.args or expr.keywords):
            return _is_params_expr(index, _arguments(expr)[-1][0], scope, depth + 1)
        return False
    if kind is ast.Subscript:  # group["params"]
        key = expr.slice
        return type(key) is ast.Constant and key.value == "params"
    if kind is ast.ListComp or kind is ast.GeneratorExp:
        return any(_is_params_expr(index, comprehension.iter, scope, depth + 1) for comprehension in expr.generators)
    name = dotted_name(expr)
    if name is None:
        return False
    last = name.split(".")[-1]
    if _PARAMS_NAME.search(last) and not _NOT_PARAMS_NAME.search(last):
        # taken for parameters by its name, unless the file binds it to a list of flat tensors
        return not _may_hold_flat_tensors(index, expr, scope)
    if kind is ast.Name:
        value, bound_in = index.single_value_and_scope(expr.id, scope)
        if value is not None:
            return _is_params_expr(index, value, bound_in, depth + 1)
    return False


# Calls that join several tensors into one new flat tensor (a mixed-precision trainer's master copy of a
# group of parameters), and what keeps such a tensor one tensor.
_FLATTENING = {"torch._utils._flatten_dense_tensors", "torch.nn.utils.parameters_to_vector",
               "torch.nn.utils.convert_parameters.parameters_to_vector", "torch.cat", "torch.concat",
               "torch.concatenate"}
_PARAMETER_CLASSES = {"torch.nn.Parameter", "torch.nn.parameter.Parameter"}
_SAME_TENSOR_METHODS = {"view", "reshape", "float", "half", "bfloat16", "double", "detach", "clone",
                        "contiguous", "to", "cuda", "requires_grad_"}


def _may_hold_flat_tensors(index: AstIndex, expr: ast.expr, scope: AstScope) -> bool:
    """A name (or ``self.<attr>``) that the file binds, at least once, to a list of flat tensors: each
    element joins several tensors into one (``make_master_params(...)`` returning
    ``[nn.Parameter(_flatten_dense_tensors([...]))]``). A loop over it runs once per group, not once per
    parameter, so its name does not make it a list of parameters."""
    attr = self_attribute(expr)
    if attr is not None:
        function = scope if scope is not index.tree else None
        klass = index.class_of.get(function) if function is not None else None
        values = class_attributes(index, klass).assigned.get(attr, []) if klass is not None else []
    elif type(expr) is ast.Name:
        values = index.values_of(expr.id, scope) or index.values_of(expr.id, index.tree)
    else:
        return False
    return any(value is not None and _is_flat_list(index, value, index.function_of(value) or index.tree)
               for value in values)


def _is_flat_list(index: AstIndex, expr: ast.AST, scope: AstScope) -> bool:
    """A list display or comprehension of flat tensors, or a call of a module-level def of the file whose
    every ``return`` gives one (also a name it binds to a list and only appends flat tensors to)."""
    kind = type(expr)
    if kind is ast.List:
        return bool(expr.elts) and all(_is_flat_tensor(index, e, scope, 0) for e in expr.elts)  # type: ignore[attr-defined]
    if kind is ast.ListComp:
        return _is_flat_tensor(index, expr.elt, scope, 0)  # type: ignore[attr-defined]
    if kind is not ast.Call or type(expr.func) is not ast.Name or expr.func.id in index.imports:  # type: ignore[attr-defined]
        return False
    defs = [f for f in index.functions if f.name == expr.func.id  # type: ignore[attr-defined]
            and index.function_of(f) is None and index.class_of.get(f) is None]
    if len(defs) != 1:
        return False
    function = defs[0]
    returns = [node for node in _own_nodes(function) if type(node) is ast.Return]
    return bool(returns) and all(node.value is not None and (  # type: ignore[attr-defined]
        _is_flat_list(index, node.value, function) if type(node.value) in (ast.List, ast.ListComp)  # type: ignore[attr-defined]
        else type(node.value) is ast.Name and _appends_only_flat(index, function, node.value.id))  # type: ignore[attr-defined]
        for node in returns)


def _appends_only_flat(index: AstIndex, function: ast.AST, name: str) -> bool:
    """In ``function``, ``name`` is bound only to list displays (``[]`` or of flat tensors) and otherwise
    used only as ``name.append(<flat tensor>)`` or returned."""
    values = index.values_of(name, function)
    if not values or not all(type(v) is ast.List and (not v.elts or _is_flat_list(index, v, function))  # type: ignore[union-attr]
                             for v in values):
        return False
    allowed: Set[int] = set()
    for node in _own_nodes(function):
        kind = type(node)
        if kind is ast.Return and type(node.value) is ast.Name and node.value.id == name:  # type: ignore[attr-defined]
            allowed.add(id(node.value))  # type: ignore[attr-defined]
        elif kind is ast.Assign and any(type(t) is ast.Name and t.id == name for t in node.targets):  # type: ignore[attr-defined]
            if len(node.targets) != 1:  # type: ignore[attr-defined]
                return False
            allowed.add(id(node.targets[0]))  # type: ignore[attr-defined]
        elif kind is ast.Call and call_name(node) == "append" and type(node.func) is ast.Attribute \
                and type(node.func.value) is ast.Name and node.func.value.id == name:  # type: ignore[attr-defined]
            if len(node.args) != 1 or node.keywords or not _is_flat_tensor(index, node.args[0], function, 0):  # type: ignore[attr-defined]
                return False
            allowed.add(id(node.func.value))  # type: ignore[attr-defined]
    return all(id(node) in allowed for node in _own_nodes(function) if type(node) is ast.Name and node.id == name)


def _own_nodes(function: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``function``'s body, not those of defs, lambdas or classes inside it."""
    stack = list(function.body)  # type: ignore[attr-defined]
    while stack:
        node = stack.pop()
        yield node
        if type(node) not in _NESTED_SCOPES:
            stack.extend(ast.iter_child_nodes(node))


def _is_flat_tensor(index: AstIndex, expr: ast.AST, scope: AstScope, depth: int) -> bool:
    """A tensor that joins several tensors into one (``_flatten_dense_tensors(...)``,
    ``parameters_to_vector(...)``, ``torch.cat(...)``), wrapped in ``nn.Parameter`` or viewed, converted or
    detached; or a name bound only to such tensors in ``scope``."""
    if depth > 4:
        return False
    kind = type(expr)
    if kind is ast.Name:
        values = index.values_of(expr.id, scope)  # type: ignore[attr-defined]
        return bool(values) and all(v is not None and _is_flat_tensor(index, v, scope, depth + 1) for v in values)
    if kind is not ast.Call:
        return False
    qualified = index.qualified_name(expr.func)  # type: ignore[attr-defined]
    if qualified in _FLATTENING:
        return True
    if qualified in _PARAMETER_CLASSES:
        return bool(expr.args) and _is_flat_tensor(index, expr.args[0], scope, depth + 1)  # type: ignore[attr-defined]
    func = expr.func  # type: ignore[attr-defined]
    return type(func) is ast.Attribute and func.attr in _SAME_TENSOR_METHODS and _is_flat_tensor(
        index, func.value, scope, depth + 1)


def _is_zip_of_params(index: AstIndex, iterable: ast.expr, scope: AstScope) -> bool:
    if not (type(iterable) is ast.Call and call_name(iterable) == "zip"):
        return False
    arguments = _arguments(iterable)
    return len(arguments) >= 2 and any(_is_params_expr(index, value, scope, 0) for value, _ in arguments)


# --- what a loop body does ------------------------------------------------------------------------


class _LoopBody:
    """Reads one loop body (not nested defs, not state-initialisation branches): the in-place updates of
    parameters or per-parameter state, and about how many kernel launches one iteration makes. Nodes are
    read in source order, each before its children."""

    def __init__(self, params: Set[str], torch_names: Set[str]) -> None:
        self.torch_names = torch_names  # local names of the torch module
        self.params = set(params)
        self.tracked = set(params)  # names holding parameters, per-parameter state or values computed from them
        self.state_names: Set[str] = set()  # names bound to per-parameter state (dicts or their tensors)
        # names whose in-place update changes a parameter, its gradient or its state: the parameters, the
        # state, and plain aliases of them (`grad = p.grad`, `buf = state["momentum_buffer"]`)
        self.mutable = set(params)
        self.updates = 0
        self.inplace_ops: List[str] = []
        self.launches = 0

    def read(self, body: List[ast.stmt]) -> None:
        stack: List[ast.AST] = list(reversed(body))
        while stack:
            node = stack.pop()
            kind = type(node)
            if kind in _NESTED_SCOPES:
                continue  # runs elsewhere
            if kind is ast.If and self._mentions_state(node.test):
                # `if len(state) == 0:` / `if "buf" not in state:`: runs once
                stack.extend(reversed([node.test, *node.orelse]))
                continue
            if kind is ast.Assign:
                self._assign(node)
            elif kind is ast.AugAssign:
                self._aug_assign(node)
            elif kind is ast.BinOp:
                if self._tensorish(node.left) or self._tensorish(node.right):
                    self.launches += 1
            elif kind is ast.Call:
                self._call(node)
            stack.extend(reversed(_source_children(node)))

    def _assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            kind = type(target)
            if kind is ast.Name:
                self._bind(target.id, node.value)
            elif kind is ast.Tuple and type(node.value) is ast.Tuple and len(target.elts) == len(node.value.elts):
                # exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                for element, value in zip(target.elts, node.value.elts):
                    element = _element(element)
                    if type(element) is ast.Name:
                        self._bind(element.id, _element(value))
            elif kind is ast.Attribute and target.attr == "data":
                root = self._root(target)
                if root in self.params and self._is_step(node.value):
                    self.updates += 1  # p.data = p.data - lr * p.grad
                elif root in self.params and self._averages(root, node.value):
                    self.updates += 1  # e.data = e.data * m + p.data * (1 - m)
                    self.inplace_ops.extend(_AUG_OPS[type(n.op)] for n in ast.walk(node.value)
                                            if type(n) is ast.BinOp and type(n.op) in _AUG_OPS and self._tensorish(n))

    def _bind(self, name: str, value: ast.expr) -> None:
        if self._is_state(value):
            self.state_names.add(name)
            self.mutable.add(name)
            self.tracked.add(name)
        elif self._tensorish(value):
            self.tracked.add(name)
            if self._is_alias(value):
                self.mutable.add(name)

    def _aug_assign(self, node: ast.AugAssign) -> None:
        root = self._root(node.target)
        if root is None or root not in self.tracked:
            return
        self.launches += 1
        if _is_step_count(node):
            return  # `state["step"] += 1`: bookkeeping (a python number in most optimizers), not an update
        if root in self.mutable:
            self.updates += 1
            op = _AUG_OPS.get(type(node.op))
            if op is not None:
                self.inplace_ops.append(op)

    def _call(self, node: ast.Call) -> None:
        func = node.func
        if type(func) is not ast.Attribute:
            return
        name = func.attr
        receiver = func.value
        root = self._root(receiver)
        on_tensor = root in self.tracked if root is not None else self._tensorish(receiver)
        if not on_tensor:
            dotted = dotted_name(func)
            if dotted is not None and dotted.split(".")[0] in self.torch_names and any(
                self._tensorish(value) for _, value in call_arguments(node)
            ):
                self.launches += 1  # torch.sqrt(exp_avg_sq), torch.maximum(...)
            return
        if name.endswith("_") and not name.startswith("_"):
            self.launches += 1
            self.inplace_ops.append(name)
            if root in self.mutable and (
                name not in _NOT_UPDATES
                or (name == "copy_" and any(self._computes(value) for _, value in call_arguments(node)))
            ):
                self.updates += 1
        elif name not in _SCALAR_METHODS and name not in _NO_LAUNCH_METHODS:
            self.launches += 1

    # --- expression helpers --------------------------------------------------------------------
    def _root(self, expr: ast.AST) -> Optional[str]:
        """``exp_avg`` for ``exp_avg.mul_(b)``, ``p`` for ``p.grad.data``, "<state>" for ``self.state[p][k]``."""
        while True:
            kind = type(expr)
            if kind is ast.Call:
                expr = expr.func
            elif kind is ast.Attribute:
                if expr.attr == "state" and type(expr.value) in (ast.Name, ast.Attribute):
                    self.tracked.add("<state>")
                    self.state_names.add("<state>")
                    self.mutable.add("<state>")
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

    def _is_alias(self, expr: ast.AST) -> bool:
        """``p.grad``, ``p.grad.data``, ``state["buf"]``, ``p.grad.detach()``: the same storage as a mutable name
        (``p.float()`` and ``.to(...)`` too, where the dtype already matches)."""
        while type(expr) in (ast.Attribute, ast.Subscript, ast.Call):
            if type(expr) is ast.Call:
                func = expr.func
                if not (type(func) is ast.Attribute and func.attr in ("detach", "view", "view_as", "float", "to", "type_as")):
                    return False
                expr = func.value
            else:
                expr = expr.value
        return type(expr) is ast.Name and expr.id in self.mutable

    def _is_state(self, expr: ast.AST) -> bool:
        """``self.state[p]``, ``state["exp_avg"]`` where ``state`` is such a dict."""
        if type(expr) is not ast.Subscript:
            return False
        root = self._root(expr)
        return root is not None and root in self.state_names

    def _mentions_state(self, test: ast.expr) -> bool:
        names = set(_names_in(test))
        return bool(names & self.state_names) or "state" in names  # `state` as a name or an attribute

    def _tensorish(self, expr: ast.AST) -> bool:
        kind = type(expr)
        if kind is ast.BinOp:
            return self._tensorish(expr.left) or self._tensorish(expr.right)
        if kind is ast.UnaryOp:
            return self._tensorish(expr.operand)
        if kind is ast.Call:
            name = call_name(expr)
            if name in _SCALAR_METHODS or name in ("len", "isinstance", "float", "int", "bool", "str", "max", "min"):
                return False
            if type(expr.func) is ast.Attribute:
                root = self._root(expr.func.value)
                if root is not None and root in self.tracked:
                    return True
                if root is None and self._tensorish(expr.func.value):
                    return True  # (exp_avg_sq / bc2).sqrt()
            return any(self._tensorish(value) for _, value in call_arguments(expr))
        if kind is ast.Name or kind is ast.Attribute or kind is ast.Subscript:
            root = self._root(expr)
            return root is not None and root in self.tracked
        return False

    def _is_step(self, expr: ast.AST) -> bool:
        """Arithmetic on the gradient or per-parameter state (not ``fn(p.data)`` or a re-initialisation)."""
        if not (type(expr) is ast.BinOp and self._tensorish(expr)):
            return False
        return any(type(n) is ast.Attribute and n.attr == "grad" for n in walk(expr)) or bool(
            set(_names_in(expr)) & (self.state_names - {"<state>"})
        )

    def _averages(self, root: str, expr: ast.AST) -> bool:
        """Arithmetic that mixes the assigned parameter ``root`` with another loop parameter (its partner
        in a ``zip``): ``e.data * m + p.data * (1 - m)``, the assignment form of an EMA update."""
        if not (type(expr) is ast.BinOp and self._tensorish(expr)):
            return False
        names = {node.id for node in ast.walk(expr) if type(node) is ast.Name}
        return root in names and bool(names & (self.params - {root}))

    def _computes(self, expr: ast.AST) -> bool:
        """True where ``expr`` computes a new tensor from tracked ones (not a plain copy or detach)."""
        kind = type(expr)
        if kind is ast.BinOp or kind is ast.UnaryOp:
            return self._tensorish(expr)
        if kind is ast.Call:
            if type(expr.func) is ast.Attribute and expr.func.attr in _PASS_THROUGH:
                return self._computes(expr.func.value)
            return self._tensorish(expr)
        return False


_NESTED_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_AUG_OPS = {ast.Add: "add_", ast.Sub: "sub_", ast.Mult: "mul_", ast.Div: "div_"}


def _source_children(node: ast.AST) -> List[ast.AST]:
    """``node``'s children in source order, as LibCST visits them (``ast`` lists a call's keywords after its
    positional arguments, a dict's keys before its values, a conditional expression's test first)."""
    kind = type(node)
    if kind is ast.Call:
        return [node.func, *(value for _, value in call_arguments(node))]  # `*x` as `x`: no node of its own
    if kind is ast.Dict:
        return [child for key, value in zip(node.keys, node.values) for child in (key, value) if child is not None]
    if kind is ast.IfExp:
        return [node.body, node.test, node.orelse]
    return list(ast.iter_child_nodes(node))


def _is_step_count(node: ast.AugAssign) -> bool:
    """``state["step"] += 1`` / ``step += 1``: a counter bumped by a literal."""
    if not (type(node.op) is ast.Add and type(node.value) is ast.Constant and type(node.value.value) is int):
        return False
    target = node.target
    if type(target) is ast.Subscript:
        key = target.slice
        value = key.value if type(key) is ast.Constant else None
        return "step" in value if isinstance(value, str) else isinstance(value, bytes) and b"step" in value
    return type(target) is ast.Name and "step" in target.id


def _names_in(expr: ast.AST) -> Iterator[str]:
    """Every name LibCST's tree of ``expr`` holds: names, attribute names, keywords, lambda parameters."""
    for node in ast.walk(expr):
        kind = type(node)
        if kind is ast.Name:
            yield node.id
        elif kind is ast.Attribute:
            yield node.attr
        elif (kind is ast.keyword or kind is ast.arg) and node.arg is not None:
            yield node.arg


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
