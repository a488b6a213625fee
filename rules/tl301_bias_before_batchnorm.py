"""TL301: a Conv/Linear bias that the BatchNorm right after it cancels."""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Set, Tuple, Union

import libcst as cst

from torchlint.facts.index import (
    AstIndex, StatementLine, arguments, call_name, called_origin, dotted_name, import_origins, is_literal,
    keyword_value, parameter_default, source_order,
)
from torchlint.fix.comments import DROPS_COMMENT, loses_comment
from torchlint.facts.modules import (
    LAYERS as _LAYERS, Before, Layer, in_file_classes, ClassAttributes, applied_next, applied_to_output_of, class_attributes, module_before, names_spelled,
    self_attribute,
)
from torchlint.rule import Applicability, Fix, FixAvailability, IndexContext, Rewrite, Rule, line_reference

if TYPE_CHECKING:
    from torchlint.fix.analysis import FileAnalysis


_NORMS = tuple(name for name, layer in _LAYERS.items() if layer.kind == "bn")


def _short(qualified: str) -> str:
    return qualified.rsplit(".", 1)[-1]


@dataclass
class _Finding:
    producer: ast.Call
    producer_name: str
    norm_name: str
    bias: Optional[ast.expr]  # the argument that passes `bias=True`, if one does
    fixable: bool = True
    why_not: Optional[str] = None
    # `if normalize: layers.append(BatchNorm2d(n))`: the BatchNorm follows only when its test is true
    guard: Optional[ast.If] = None
    # `bias=bias` of a parameter of this def that defaults to True (`def __init__(self, ..., bias=True)`)
    default_of: Optional[str] = None
    # a project class whose forward returns its conv's output (`ConvNorm(...)`): the conv's name, the class's
    # place, and the keyword its `bias` parameter takes (None: no fix is exact)
    inner: Optional[str] = None
    inner_at: str = ""
    keyword: Optional[str] = None


class BiasBeforeBatchNorm(Rule):
    """## What it does
    Flags a `nn.Conv1d/2d/3d`, `nn.ConvTranspose1d/2d/3d` or `nn.Linear` (and their `Lazy*` variants) that
    keeps its bias (the default) although its output goes straight into a matching BatchNorm
    (`BatchNorm1d/2d/3d`, `SyncBatchNorm`). It recognises the layers adjacent in `nn.Sequential(...)`
    (positional or through an `OrderedDict`), adjacent in a list later passed to `nn.Sequential(*layers)`
    (built as a literal, with `layers.append(...)`, `layers.extend([...])` or `layers += [...]`; also a list
    a block helper returns and the file splices in as `nn.Sequential(*block(...))`), consecutive
    `add_module(...)` calls on an `nn.Sequential` (or `self` in a subclass of it), and modules assigned in
    `__init__` and applied in `forward` as `self.bn(self.conv(x))` or `x = self.conv(x)` followed by
    `x = self.bn(x)`. Factory keyword arguments that cannot hold `bias` (`**dd` with
    `dd = {"device": device, "dtype": dtype}`) do not hide a layer.

    A BatchNorm added only under a condition right after the layer (`if normalize: layers.append(
    nn.BatchNorm2d(n))`, no `else`) cancels the bias only when the condition holds: the message and the fix
    say `bias=not normalize`, which keeps the bias on the path without BatchNorm.

    A layer built with `bias=bias`, where `bias` is a parameter of the def that builds it (a block's
    `__init__(self, ..., bias=True)`, a `conv_bn(c_in, c_out, bias=True)` helper) that defaults to `True`
    and is not rebound there, is reported too, with no fix: every caller that keeps the default gets a bias
    the BatchNorm cancels, whatever other callers pass (`bias=False` at some calls makes those layers right,
    not the default). The message names the def and the parameter. It is silent for a parameter with no
    default or another default, and for any other name (`bias=use_bias`).

    A project class right before the BatchNorm (of the file, or of another project file it imports, absolutely
    or relatively, also through a package's re-export) whose `forward(self, x)` only returns the output of a
    conv it builds once in `__init__` (`return self.conv(x)`, or through one local name) is reported at the
    class's construction when that conv's bias is on: always (no `bias` argument, `bias=True`), or by a `bias`
    parameter of `__init__` passed on unchanged whose default is `True` and that the construction does not
    set to something else (`ConvNorm(80, n)`, `ConvNorm(80, n, bias=True)`). The message names the class, the
    conv and where it is built. The fix passes `bias=False` at the construction (unsafe, as below) only where
    the parameter reaches the conv unchanged and the class reads no `.bias` and uses the conv nowhere else
    (an init of its `.weight` aside); otherwise it is reported without a fix, saying why. It is silent for a
    class that does anything after the conv (an activation, a scale), one whose bias is off or computed
    (`bias=not plain`), a conv of another rank than the BatchNorm's, and a class from outside the project.

    It stays silent where the bias does not cancel: a model only evaluated (`model = nn.Sequential(...).eval()`
    that the file only calls, or asks `.cuda()`/`.to()`/`.load_state_dict()` as statements of their own: no
    `.train()`, no `.parameters()`, never handed on), whose BatchNorm normalizes with running statistics;
    `bias=False` already, anything between the two layers
    (`conv -> ReLU -> BN`), GroupNorm/LayerNorm/InstanceNorm (they normalise over other axes, or per sample),
    and a BatchNorm whose `num_features` differs from the layer's `out_channels`/`out_features` (both written
    as literals), e.g. a `Linear` on `(N, L, C)` followed by `BatchNorm1d(L)`. For a `Linear` the counts must
    be provably equal (the same literal or the same expression, `Linear(d, hidden)` then
    `BatchNorm1d(hidden)`): with `Linear(d_model, d_model)` then `BatchNorm1d(seq_len)` the BatchNorm may
    normalise the sequence axis, where the bias does not cancel.

    Test files (pytest files, files under `tests/`, `test/` or `testing/`) are not checked: a layer built
    in a test runs for a few steps at most, and tests often count or load the parameters that `bias=False`
    would remove.

    ## Why is this slow?
    BatchNorm subtracts the per-channel batch mean, so a constant per-channel bias added just before it
    cancels exactly: the layer spends an extra elementwise kernel (or a bias epilogue) in the forward pass, a
    reduction for its gradient in the backward pass, and optimizer work and memory for a parameter that has
    no effect on the output. Without the bias, cuDNN can also pick conv algorithms and fusions that have no
    bias epilogue.

    ## Example
    ```python
    import torch.nn as nn

    block = nn.Sequential(
        nn.Conv2d(64, 128, kernel_size=3, padding=1),
        nn.BatchNorm2d(128),
        nn.ReLU(inplace=True),
    )
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    block = nn.Sequential(
        nn.Conv2d(64, 128, kernel_size=3, padding=1, bias=False),
        nn.BatchNorm2d(128),
        nn.ReLU(inplace=True),
    )
    ```

    ## Fix safety
    The fix adds `bias=False` (or turns an explicit `bias=True` into `bias=False`); for a conditional
    BatchNorm it adds `bias=not <condition>` (only when the condition has no calls or subscripts, so reading
    it once more gives the same answer). It is **unsafe**:
    - the module's `state_dict` no longer has `<layer>.bias`, so checkpoints saved before the change fail
      to load with `load_state_dict(..., strict=True)` (unexpected key);
    - on an already trained model the eval-mode outputs change: the BatchNorm's `running_mean` absorbed the
      old bias, so removing it shifts every output channel until the running statistics are re-estimated
      (training from scratch gives the same function as before);
    - under a fixed seed (`torch.manual_seed(0)`) the random initialisation changes from this layer on: its
      constructor no longer draws the bias's initial values, so every layer built after it, and every later
      draw from the same generator (a shuffling `DataLoader`'s seed, for one), gets other random numbers
      than before: a run is not reproducible against one recorded before the fix;
    - code that reads the layer's `.bias` (an init loop calling `nn.init.zeros_(m.bias)` without an
      `if m.bias is not None` guard, weight-transfer scripts) now gets `None`.
    No fix is offered where the file reads a layer's `.bias` without an `is not None` check (an init loop
    `for m in self.modules(): if isinstance(m, nn.Conv2d): m.bias.data.zero_()`, a `weights_init(m)` testing
    `classname.find("Conv") != -1`, `nn.init.zeros_(block[0].bias)`) unless an `isinstance` or class-name
    test around it names only other layer types: after the fix that code would fail on `None`. Code in other
    files that reads the bias cannot be seen. No fix is offered either where the layer is also used without
    the BatchNorm (a module bound to a name that
    is used elsewhere, a `self.conv` called elsewhere or whose `.bias` the class reads): the finding is
    still reported. No fix is offered for a `bias=<parameter>` whose default is `True`: the fix would be the
    default `bias=False` in the def's signature, which changes the layer for every caller in the project
    (and in other projects that import the block) that keeps the default, with the checkpoint keys, the
    trained outputs and the seeded initialisation above, while a caller that passes `bias=True` on purpose
    keeps it; passing `bias=False` at the calls instead is the author's choice, call by call.

    ## PyTorch versions
    All versions: BatchNorm has always normalised with the batch mean, and `bias=False` is accepted by every
    Conv and Linear layer.
    """

    code = "TL301"
    name = "bias-before-batchnorm"
    message = "this layer's bias is cancelled by the BatchNorm right after it; pass `bias=False`"
    summary = "Conv/Linear with a bias feeding straight into BatchNorm"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicabilities = (Applicability.UNSAFE,)
    required_patterns = (r"BatchNorm", r"Conv|Linear")
    text_gate = (("BatchNorm",), ("Conv", "Linear"))
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        findings: Dict[ast.Call, _Finding] = {}

        def record(finding: _Finding) -> None:
            known = findings.get(finding.producer)
            if known is None:
                findings[finding.producer] = finding
            elif not finding.fixable and known.fixable:
                known.fixable, known.why_not = False, finding.why_not

        wrapper = functools.partial(_wrapper_of, index, ctx.project)
        for info in index.calls_to(*_NORMS):
            if _only_evaluated(index, info.node):
                continue  # built in eval mode and never trained: its BatchNorm uses running stats, the bias counts
            before = module_before(index, info.node)
            found = _finding_for(index, before, info.node, wrapper) if before is not None else None
            if found is not None:
                found.guard = before.guard  # type: ignore[union-attr]
                record(found)
            for found in _forward_findings(index, info.node, wrapper):
                record(found)

        hazards: Optional[List[_BiasUse]] = None
        for finding in sorted(findings.values(), key=lambda f: source_order(f.producer)):
            producer = finding.producer
            if finding.fixable:
                if hazards is None:
                    hazards = _unguarded_bias_uses(index)
                use = next((h for h in hazards if h.may_touch(finding.inner or finding.producer_name)), None)
                if use is not None:
                    finding.fixable = False
                    finding.why_not = (
                        f"not fixed automatically: `{use.code}` reads a `.bias` without an `is not None` check "
                        "and would fail once this bias is `None`"
                    )
            message = (
                f"`{finding.producer_name}` feeds straight into `{finding.norm_name}`, which subtracts the "
                f"per-channel batch mean and cancels the bias: pass `bias=False`"
            )
            if finding.default_of is not None:
                name = finding.bias.id  # type: ignore[union-attr]
                when = ""
                if finding.guard is not None:
                    when = f" when `{index.code_for_node(finding.guard.test, finding.guard).strip()}` is true"
                message = (
                    f"`{finding.producer_name}` feeds straight into `{finding.norm_name}`{when}, and its bias is "
                    f"`{finding.producer_name}(..., bias={name})` with `{name}=True` by default in "
                    f"`{finding.default_of}`: every caller that keeps the default gets a bias the BatchNorm cancels; "
                    f"default `{name}` to `False` or pass `{name}=False` at the calls"
                )
            if finding.inner is not None:
                message = (
                    f"`{finding.producer_name}` feeds straight into `{finding.norm_name}`, and its forward returns the "
                    f"output of its `{finding.inner}` ({finding.inner_at}), whose bias is on: the BatchNorm cancels "
                    f"it; pass `bias=False`" if finding.keyword is not None else
                    f"`{finding.producer_name}` feeds straight into `{finding.norm_name}`, and its forward returns the "
                    f"output of its `{finding.inner}` ({finding.inner_at}), whose bias is on: the BatchNorm cancels it"
                )
            if not finding.fixable:
                ctx.report(producer, message=f"{message} ({finding.why_not})")
                continue
            value: Optional[str] = "False"
            if finding.guard is not None:
                test = index.code_for_node(finding.guard.test, finding.guard).strip()
                value = _negated(index, finding.guard)
                message = (
                    f"`{finding.producer_name}` feeds straight into `{finding.norm_name}` when `{test}` is true, and "
                    f"the BatchNorm cancels the bias there: pass `bias={value}`"
                )
                if not _is_pure(finding.guard.test):
                    value = None
            if value is None or not (producer.args or producer.keywords):
                ctx.report(producer, message=message)
                continue
            position = next((at for at, arg in enumerate(arguments(producer)) if arg.value is finding.bias), None)
            ctx.report(producer, message=message, rewrite=Rewrite(functools.partial(_with_bias, position, value,
                                                                                    finding.keyword or "bias"),
                                                                  message + " ({reason})", producer, reads=producer))


# What a model that is only evaluated may be asked: its forward (a call of it), and these methods.
_EVALUATION_METHODS = {"eval", "to", "cuda", "cpu", "float", "half", "double", "load_state_dict"}


def _only_evaluated(index: AstIndex, norm: ast.Call) -> bool:
    """``norm`` is a layer of ``model = nn.Sequential(...).eval()`` and the file uses ``model`` only to call it
    or to ask it ``_EVALUATION_METHODS`` (no ``.train()``, no ``.parameters()`` for an optimizer, never handed
    on): in eval mode a BatchNorm normalizes with its running statistics, which do not cancel the bias, and
    nothing trains the model."""
    sequential = index.parent(norm)
    if type(sequential) is not ast.Call or not any(argument is norm for argument in sequential.args) \
            or (index.qualified_name(sequential.func) or "").rsplit(".", 1)[-1] != "Sequential":
        return False
    method = index.parent(sequential)
    evaluated = index.parent(method) if type(method) is ast.Attribute and method.attr == "eval" else None
    if type(evaluated) is not ast.Call or evaluated.args or evaluated.keywords:
        return False
    target = index.assigned_to.get(evaluated)
    if type(target) is not ast.Name or len(index.values_of(target.id, index.scope_of(evaluated))) != 1:
        return False
    for use, holder in index.names_named(target.id):
        if use is target or type(use.ctx) is not ast.Load:
            continue
        if type(holder) is ast.Call and holder.func is use:
            continue  # its forward
        if type(holder) is ast.Attribute and holder.attr in _EVALUATION_METHODS \
                and type(index.parent(index.parent(holder))) is ast.Expr:
            continue  # (a statement of its own: `model.cuda()`; the module these return is the model itself)
        return False
    return True


# --- a biased Conv/Linear and the BatchNorm after it ----------------------------------------------------


def _layer_of(index: AstIndex, call: ast.Call) -> Optional[Tuple[str, Layer]]:
    qualified = index.qualified_name(call.func)
    layer = _LAYERS.get(qualified) if qualified is not None else None
    return (qualified, layer) if layer is not None else None  # type: ignore[return-value]


def _arg_at(call: ast.Call, position: Optional[int], keyword: Optional[str]) -> Optional[ast.expr]:
    """The keyword argument, else the positional one at ``position`` (``*args`` left out)."""
    if keyword is not None:
        found = keyword_value(call, keyword)
        if found is not None:
            return found
    if position is None:
        return None
    positional = [arg for arg in call.args if type(arg) is not ast.Starred]
    return positional[position] if position < len(positional) else None


def _has_star(call: ast.Call) -> bool:
    return any(type(arg) is ast.Starred for arg in call.args) or any(k.arg is None for k in call.keywords)


def _may_pass_bias(index: AstIndex, call: ast.Call) -> bool:
    """``*args``, or ``**kwargs`` that may hold ``bias``; ``**dd`` with ``dd = {'device': d, 'dtype': t}`` (or
    ``dict(device=d, dtype=t)``) in the same scope cannot."""
    if any(type(arg) is ast.Starred for arg in call.args):
        return True
    for given in call.keywords:
        if given.arg is None:
            value: Optional[ast.AST] = given.value
            if type(value) is ast.Name:
                value = index.single_value(value.id, index.scope_of(call))  # type: ignore[union-attr]
            keys = _dict_keys(index, value)
            if keys is None or "bias" in keys:
                return True
    return False


def _dict_keys(index: AstIndex, value: Optional[ast.AST]) -> Optional[Set[str]]:
    """The keys of a literal dict (``{'device': d}`` or ``dict(device=d)``); None when unknown."""
    if type(value) is ast.Dict:
        keys = set()
        for key in value.keys:  # type: ignore[union-attr]
            text = index.literal_string(key) if key is not None else None
            if text is None:
                return None
            keys.add(text)
        return keys
    if type(value) is ast.Call and type(value.func) is ast.Name and value.func.id == "dict":  # type: ignore[union-attr]
        if value.args or any(k.arg is None for k in value.keywords):  # type: ignore[union-attr]
            return None
        return {k.arg for k in value.keywords}  # type: ignore[union-attr,misc]
    return None


def _int_literal(node: Optional[ast.expr]) -> Optional[int]:
    return node.value if type(node) is ast.Constant and type(node.value) is int else None  # type: ignore[union-attr]


def _match(index: AstIndex, producer: ast.Call, norm: ast.Call, wrapper=None) -> Optional[_Finding]:
    """A finding when ``producer`` is a biased Conv/Linear whose output features ``norm`` normalises, or a
    project class that returns such a conv's output (``wrapper``: ``_wrapper_of``)."""
    found, norm_found = _layer_of(index, producer), _layer_of(index, norm)
    if found is None and norm_found is not None and wrapper is not None:
        return _wrapper_match(index, producer, norm_found[1], _short(norm_found[0]), wrapper(producer))
    if found is None or norm_found is None:
        return None
    (pq, pl), (nq, nl) = found, norm_found
    if pl.kind not in ("conv", "linear") or nl.kind != "bn" or _may_pass_bias(index, producer):
        return None
    if nl.dim is not None and nl.dim != pl.dim:
        return None
    bias = _arg_at(producer, pl.bias_index, "bias")
    default_of: Optional[str] = None
    if bias is not None and not is_literal(bias, True):
        default_of = _true_default_parameter(index, producer, bias)
        if default_of is None:
            return None  # bias=False, or a value we cannot read (bias=use_bias)
    out = _arg_at(producer, pl.count_index, pl.count_keyword)
    features = _arg_at(norm, nl.count_index, nl.count_keyword) if not _has_star(norm) else None
    if out is not None and features is not None:
        out_n, features_n = _int_literal(out), _int_literal(features)
        if out_n is not None and features_n is not None and out_n != features_n:
            return None  # it normalises another axis: the bias does not cancel
    if pl.kind == "linear" and not _same_count(index, out, producer, features, norm):
        # A conv's channels are always BatchNorm's axis, but a Linear on (N, L, C) before BatchNorm1d(L)
        # normalises L, not the features: only a count provably equal (same literal or same expression,
        # `Linear(d, hidden)` then `BatchNorm1d(hidden)`) shows the bias cancels.
        return None
    finding = _Finding(producer, _short(pq), _short(nq), bias)
    if default_of is not None:
        finding.default_of = default_of
        finding.fixable = False
        finding.why_not = "not fixed automatically: a new default changes the layer for every caller that keeps it"
    return finding


def _wrapper_of(index: AstIndex, project, call: ast.Call) -> Optional[dict]:
    """The ``wraps`` entry (``facts.modules.conv_wrapper``) of the class ``call`` builds: a module-level class of
    the file, or one of another project file through ``project``; None for anything else."""
    written = dotted_name(call.func)
    if written is None:
        return None
    origins = import_origins(index)
    if "." not in written and written not in origins:
        entry = in_file_classes(index).get(written)
        if entry is None or "wraps" not in entry:
            return None
        return dict(entry["wraps"], path="")
    origin = called_origin(origins, written)
    return project.conv_wrapper(*origin) if origin is not None and project is not None else None


def _wrapper_match(index: AstIndex, producer: ast.Call, norm: Layer, norm_name: str, wraps: Optional[dict]
                   ) -> Optional[_Finding]:
    """``producer`` builds a class whose forward returns the output of its conv (``wraps``) with the bias on
    (always, by its ``bias`` parameter's default, or as passed) right before a BatchNorm of the conv's rank."""
    if wraps is None:
        return None
    layer = _LAYERS.get(wraps["layer"])
    if layer is None or (norm.dim is not None and norm.dim != layer.dim):
        return None
    bias, keyword, passed = wraps["bias"], None, None
    if bias is not True:
        keyword, position, default = bias
        if any(type(arg) is ast.Starred for arg in producer.args) or any(k.arg is None for k in producer.keywords):
            return None  # `*args` / `**kwargs` may pass it
        passed = keyword_value(producer, keyword)
        positional = producer.args
        if passed is None and position is not None and position < len(positional):
            passed = positional[position]
        if passed is None and default is not True:
            return None  # off by default, or a default the rule cannot read
        if passed is not None and not is_literal(passed, True):
            return None  # `bias=False`, or a value the rule cannot read
    at = f"{wraps['path']}:{wraps['line']}" if wraps["path"] else line_reference(wraps["line"])
    finding = _Finding(producer, dotted_name(producer.func) or "?", norm_name, passed)
    finding.inner, finding.inner_at = _short(wraps["layer"]), at
    if keyword is None:
        finding.fixable = False
        finding.why_not = "no automatic fix: the class takes no `bias` parameter that reaches the conv"
    elif not wraps["exact"]:
        finding.fixable = False
        finding.why_not = "not fixed automatically: the class also uses the conv, or a `.bias`, elsewhere"
    else:
        finding.keyword = keyword
    return finding


def _true_default_parameter(index: AstIndex, producer: ast.Call, bias: ast.expr) -> Optional[str]:
    """``bias=bias`` where ``bias`` is a parameter of the def that builds the layer (a block's ``__init__``,
    a ``conv_bn(...)`` helper), with the default ``True`` and never rebound there: the name of that def. A
    caller that keeps the default gets a bias the BatchNorm cancels; one that passes ``bias=False`` does not."""
    if type(bias) is not ast.Name:
        return None
    function = index.function_of(producer)
    if type(function) not in (ast.FunctionDef, ast.AsyncFunctionDef):
        return None
    default = parameter_default(function, bias.id)
    if default is None or not is_literal(default, True):
        return None  # no default (every caller decides), or another one
    if index.values_of(bias.id, function) != [None]:  # type: ignore[arg-type]
        return None  # rebound in the def (`bias = bias and not bn`): the value at the call is not the default
    klass = index.class_of.get(function)
    return f"{klass.name}.{function.name}" if klass is not None else function.name  # type: ignore[union-attr]


def _statement_of(index: AstIndex, node: ast.AST) -> ast.stmt:
    """The innermost statement around ``node``: it holds ``node`` in its first logical line."""
    return next(n for n in index.ancestors(node) if isinstance(n, ast.stmt))  # type: ignore[return-value]


def _same_count(index: AstIndex, out: Optional[ast.expr], producer: ast.Call, features: Optional[ast.expr],
                norm: ast.Call) -> bool:
    if out is None or features is None:
        return False
    written = [index.code_for_node(count, _statement_of(index, call)) for count, call in ((out, producer),
                                                                                         (features, norm))]
    return "".join(written[0].split()) == "".join(written[1].split())


def _finding_for(index: AstIndex, before: Before, norm: ast.Call, wrapper=None) -> Optional[_Finding]:
    """``before.module`` is the module right before ``norm``: a constructor call, or a name bound to one."""
    expr = before.module
    if type(expr) is ast.Call:
        return _match(index, expr, norm, wrapper)
    if type(expr) is not ast.Name:
        return None
    holder = index.scope_of(before.holder)
    value = index.single_value(expr.id, holder)  # type: ignore[attr-defined]
    if type(value) is not ast.Call:
        return None
    finding = _match(index, value, norm, wrapper)  # type: ignore[arg-type]
    if finding is None:
        return None
    name = expr.id  # type: ignore[attr-defined]
    if type(holder) not in (ast.FunctionDef, ast.AsyncFunctionDef) or index.scope_of(value) is not holder:
        finding.fixable, finding.why_not = False, f"not fixed automatically: `{name}` may be used elsewhere"
    elif names_spelled(holder.body, name) != 2:  # type: ignore[union-attr]  # its binding and this use
        finding.fixable, finding.why_not = False, f"not fixed automatically: `{name}` is also used elsewhere"
    return finding


# --- self.bn(self.conv(x)) and x = self.conv(x); x = self.bn(x) ---------------------------------------


def _forward_findings(index: AstIndex, norm: ast.Call, wrapper=None) -> List[_Finding]:
    assign = index.parent(norm)
    if type(assign) not in (ast.Assign, ast.AnnAssign) or assign.value is not norm:  # type: ignore[union-attr]
        return []
    targets = assign.targets if type(assign) is ast.Assign else [assign.target]  # type: ignore[union-attr]
    norm_attrs = [attr for attr in map(self_attribute, targets) if attr is not None]
    if not norm_attrs:
        return []
    klass = next((n for n in index.ancestors(assign) if type(n) is ast.ClassDef), None)  # type: ignore[arg-type]
    if klass is None:
        return []
    facts = class_attributes(index, klass)  # type: ignore[arg-type]
    findings = []
    for norm_attr in norm_attrs:
        if len(facts.assigned.get(norm_attr, ())) != 1:
            continue
        for norm_use in facts.calls.get(norm_attr, ()):
            producer_attr = applied_to_output_of(index, norm_use)
            if producer_attr is None or len(facts.assigned.get(producer_attr, ())) != 1:
                continue
            producer = facts.assigned[producer_attr][0]
            if type(producer) is not ast.Call:
                continue
            finding = _match(index, producer, norm, wrapper)  # type: ignore[arg-type]
            if finding is None:
                continue
            if not all(any(_is_bn_attr(index, self_attribute(after.func), facts) for after in applied_next(index, use))
                       for use in facts.calls.get(producer_attr, ())):
                continue  # self.conv is also applied without the BatchNorm: its bias matters there
            if "bias" in facts.attributes_read.get(producer_attr, ()):
                finding.fixable, finding.why_not = False, f"not fixed automatically: the class reads `self.{producer_attr}.bias`"
            elif facts.other_uses.get(producer_attr, 0):
                finding.fixable, finding.why_not = False, f"not fixed automatically: `self.{producer_attr}` is also used elsewhere"
            findings.append(finding)
    return findings


def _is_bn_attr(index: AstIndex, attr: Optional[str], facts: ClassAttributes) -> bool:
    values = facts.assigned.get(attr, ()) if attr is not None else ()
    if len(values) != 1 or type(values[0]) is not ast.Call:
        return False
    found = _layer_of(index, values[0])  # type: ignore[arg-type]
    return found is not None and found[1].kind == "bn"


# --- unguarded `.bias` uses: what `bias=False` would break --------------------------------------------


@dataclass
class _BiasUse:
    """A ``<expr>.bias`` read with no ``is not None`` check, and the layer types its ``if``s restrict it to."""

    code: str
    types: Optional[Set[str]]  # isinstance(m, T) / type(m) is T: class names; None: any layer
    substrings: Optional[Set[str]]  # "Conv" in classname / classname.find("Conv") != -1

    def may_touch(self, layer: str) -> bool:
        if self.types is None and self.substrings is None:
            return True
        if self.types is not None and any(t == layer or t not in _KNOWN_OTHER_TYPES for t in self.types):
            return True
        return self.substrings is not None and any(s in layer for s in self.substrings)


# Layer classes an isinstance check can name that are not (and are no base class of) a Conv or Linear.
_KNOWN_OTHER_TYPES = {
    _short(q) for q in _LAYERS
} | {
    "LayerNorm", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "Embedding", "EmbeddingBag",
    "LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell", "MultiheadAttention", "PReLU", "RMSNorm",
    "LocalResponseNorm", "Bilinear", "Identity",
}


def _unguarded_bias_uses(index: AstIndex) -> List[_BiasUse]:
    """Every ``x.bias`` in the file that would fail on ``None`` (``m.bias.data.zero_()``,
    ``nn.init.zeros_(m.bias)``), outside an ``if ... bias is not None`` guard, in source order. ``self.bias``
    (the module's own parameter) and ``self.conv.bias`` (checked per class) are left out."""
    uses = []
    for node in index.attributes_named("bias"):
        base = node.value  # type: ignore[attr-defined]
        if type(base) is ast.Name and base.id == "self" or self_attribute(base) is not None:
            continue
        parent = index.parent(node)
        if type(parent) is ast.Assign and any(t is node for t in parent.targets) or _is_none_test(parent, node):  # type: ignore[union-attr]
            continue
        if _is_bias_guarded(index, node):
            continue
        types, substrings = _type_guards(index, node)
        uses.append(_BiasUse(_quoted(index, node), types, substrings))
    return uses


def _quoted(index: AstIndex, node: ast.AST) -> str:
    """The first line of the statement that holds ``node`` as LibCST writes it (its comment lines above
    included), or of ``node`` where the statement is a compound one or follows a header on its line."""
    statement = index.enclosing_statement(node)
    if isinstance(statement, StatementLine):
        code = index.statement_line_first_line(statement)
    else:
        code = index.code_for_node(node, _statement_of(index, node)).strip()
    return code.splitlines()[0][:80] if code else "x.bias"


def _is_none_test(parent: Optional[ast.AST], node: ast.AST) -> bool:
    """``x.bias is None`` / ``x.bias is not None`` / ``x.bias != None``."""
    if type(parent) is not ast.Compare or parent.left is not node or len(parent.ops) != 1:  # type: ignore[union-attr]
        return False
    return type(parent.ops[0]) in (ast.Is, ast.IsNot, ast.Eq, ast.NotEq) and is_literal(parent.comparators[0], None)  # type: ignore[union-attr]


def _guarding_tests(index: AstIndex, node: ast.AST):
    """The tests of the ``if``s (statements and expressions) whose true branch holds ``node``, and the left
    operands of an ``and`` it is on the right of (together, as one test)."""
    child = node
    for ancestor in index.ancestors(node):
        kind = type(ancestor)
        if kind is ast.If and any(s is child for s in ancestor.body):  # type: ignore[attr-defined]
            yield [ancestor.test]  # type: ignore[attr-defined]
        elif kind is ast.IfExp and ancestor.body is child:  # type: ignore[attr-defined]
            yield [ancestor.test]  # type: ignore[attr-defined]
        elif kind is ast.BoolOp and type(ancestor.op) is ast.And:  # type: ignore[attr-defined]
            at = next(i for i, value in enumerate(ancestor.values) if value is child)  # type: ignore[attr-defined]
            if at:
                yield ancestor.values[:at]  # type: ignore[attr-defined]
        elif kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            return
        child = ancestor


def _nodes_in(test: List[ast.expr], kind: type) -> List[ast.AST]:
    return [node for part in test for node in ast.walk(part) if type(node) is kind]


def _is_bias_guarded(index: AstIndex, node: ast.AST) -> bool:
    for test in _guarding_tests(index, node):
        for comparison in _nodes_in(test, ast.Compare):
            left = comparison.left  # type: ignore[attr-defined]
            given = arguments(left) if type(left) is ast.Call else []
            named_bias = (type(left) is ast.Attribute and left.attr == "bias") or (
                call_name(left) == "getattr" and len(given) >= 2 and index.literal_string(given[1].value) == "bias")
            if named_bias and any(type(op) in (ast.IsNot, ast.NotEq) and is_literal(right, None)
                                  for op, right in zip(comparison.ops, comparison.comparators)):  # type: ignore[attr-defined]
                return True
    return False


def _type_guards(index: AstIndex, node: ast.AST) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
    """Layer class names that ``isinstance``/``type`` checks around ``node`` name, and class-name substrings
    that ``"Conv" in classname`` / ``classname.find("Conv") != -1`` checks look for (None: no such check)."""
    types: Optional[Set[str]] = None
    substrings: Optional[Set[str]] = None
    for test in _guarding_tests(index, node):
        if any(type(n.op) is ast.Not for n in _nodes_in(test, ast.UnaryOp)):  # type: ignore[attr-defined]
            continue  # `not isinstance(...)`: it names what the branch is not
        for call in _nodes_in(test, ast.Call):
            name = call_name(call)  # type: ignore[arg-type]
            given = arguments(call)  # type: ignore[arg-type]
            if name in ("isinstance", "issubclass") and len(given) == 2:
                spec = given[1].value
                parts = ([e.value if type(e) is ast.Starred else e for e in spec.elts]  # type: ignore[attr-defined]
                         if type(spec) in (ast.Tuple, ast.List) else [spec])
                found = {(dotted_name(p) or "?").rsplit(".", 1)[-1] for p in parts}
                types = found if types is None else types & found
            elif name in ("find", "startswith", "endswith", "index") and given:
                text = index.literal_string(given[0].value)
                if text is not None:
                    substrings = (substrings or set()) | {text}
        for comparison in _nodes_in(test, ast.Compare):
            left = comparison.left  # type: ignore[attr-defined]
            for op, right in zip(comparison.ops, comparison.comparators):  # type: ignore[attr-defined]
                text = index.literal_string(left)
                if type(op) is ast.In and text is not None:
                    substrings = (substrings or set()) | {text}
                elif type(op) in (ast.Is, ast.Eq) and type(left) is ast.Call and call_name(left) == "type":
                    found = {(dotted_name(right) or "?").rsplit(".", 1)[-1]}
                    types = found if types is None else types & found
    if types is not None and substrings is not None:
        return types, None  # both forms: the isinstance check is the precise one
    return types, substrings


# --- the fix ---------------------------------------------------------------------------------------


def _negated(index: AstIndex, guard: ast.If) -> str:
    """``not <test>`` as code; ``if not first:`` gives ``first`` (the layers only test ``bias`` for truth)."""
    test = guard.test
    if type(test) is ast.UnaryOp and type(test.op) is ast.Not:
        inner = test.operand
        if _is_name_like(inner):  # without its parentheses
            line, column, end_line, end_column = index.span(inner)
            return index.statement_code(guard).text((line, column), (end_line, end_column)).strip()
        return index.code_for_node(inner, guard).strip()
    code = index.code_for_node(test, guard).strip()
    return f"not {code}" if _is_name_like(test) else f"not ({code})"


def _is_name_like(node: ast.expr) -> bool:
    """A name or attribute (LibCST's ``Name`` also spells ``True``, ``False`` and ``None``)."""
    return type(node) in (ast.Name, ast.Attribute) or (type(node) is ast.Constant and node.value in (True, False, None)
                                                       and type(node.value) in (bool, type(None)))


def _is_pure(test: ast.expr) -> bool:
    """A test that reading twice gives the same answer: names, attributes, literals and operators, no calls."""
    return not any(type(node) in (ast.Call, ast.NamedExpr, ast.Await, ast.Subscript) for node in ast.walk(test))


def _with_bias(position: Optional[int], value: str, keyword: str, call: cst.Call, analysis: "FileAnalysis"
               ) -> Union[Fix, str]:
    """``<keyword>=<value>`` on the LibCST twin of the layer's call; ``position``: where ``bias=True`` is
    passed."""
    new = cst.parse_expression(value)
    if position is not None:  # bias=True / positional True -> the new value
        fixed = call.with_changes(args=[arg.with_changes(value=new) if at == position else arg
                                        for at, arg in enumerate(call.args)])
    else:
        fixed = append_keyword(call, keyword, new)
    if loses_comment({call: fixed}):
        return DROPS_COMMENT
    return Fix.replace(call, fixed, Applicability.UNSAFE)


def _line_break_like(ws: cst.ParenthesizedWhitespace) -> cst.ParenthesizedWhitespace:
    return cst.ParenthesizedWhitespace(
        first_line=cst.TrailingWhitespace(), empty_lines=[], indent=ws.indent, last_line=ws.last_line
    )


def append_keyword(call: cst.Call, keyword: str, value: cst.BaseExpression) -> cst.Call:
    """``call`` with ``keyword=value`` added last, in the call's own layout (one argument per line, trailing
    comma, comments) wherever it has one."""
    args = list(call.args)
    new = cst.Arg(
        value=value,
        keyword=cst.Name(keyword),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    last = args[-1]
    if isinstance(last.comma, cst.Comma):  # trailing comma: `..., last,\n)`
        closing = last.comma.whitespace_after
        breaks = [arg.comma.whitespace_after for arg in args[:-1] if isinstance(arg.comma, cst.Comma)]
        breaks.append(call.whitespace_before_args)
        line_break = next((ws for ws in breaks if isinstance(ws, cst.ParenthesizedWhitespace)), None)
        if isinstance(closing, cst.ParenthesizedWhitespace) and line_break is not None:
            args[-1] = last.with_changes(
                comma=last.comma.with_changes(
                    whitespace_after=closing.with_changes(indent=line_break.indent, last_line=line_break.last_line)
                )
            )
            args.append(new.with_changes(comma=cst.Comma(whitespace_after=_line_break_like(closing))))
        else:
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            args.append(new.with_changes(comma=last.comma))
    else:
        args[-1] = last.with_changes(
            comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")), whitespace_after_arg=cst.SimpleWhitespace("")
        )
        args.append(new.with_changes(whitespace_after_arg=last.whitespace_after_arg))
    return call.with_changes(args=args)
