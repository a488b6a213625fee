"""TL301: a Conv/Linear bias that the BatchNorm right after it cancels."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Set, Tuple, Union

import libcst as cst
import libcst.matchers as m

from torchlint.analysis import FileAnalysis, call_name, dotted_name, keyword_arg, names_in, receiver, walk
from torchlint.ast_index import AstCallInfo, index_of
from torchlint.ast_index import walk as ast_walk
from torchlint.ast_index import call_name as ast_call_name
from torchlint.comments import DROPS_COMMENT, loses_comment
from torchlint.rule import Applicability, Fix, FixAvailability, Rule, RuleContext


@dataclass(frozen=True)
class _Layer:
    kind: str  # "conv" | "linear" | "bn"
    dim: Optional[int]  # 1/2/3; None for SyncBatchNorm (any)
    count_index: Optional[int]  # positional index of out_channels/out_features/num_features
    count_keyword: Optional[str]
    bias_index: Optional[int] = None  # positional index of `bias` (producers only)


def _layer_table() -> Dict[str, _Layer]:
    table: Dict[str, _Layer] = {}
    for d in (1, 2, 3):
        table[f"Conv{d}d"] = _Layer("conv", d, 1, "out_channels", 7)
        table[f"ConvTranspose{d}d"] = _Layer("conv", d, 1, "out_channels", 7)
        table[f"LazyConv{d}d"] = _Layer("conv", d, 0, "out_channels", 6)
        table[f"LazyConvTranspose{d}d"] = _Layer("conv", d, 0, "out_channels", 6)
        table[f"BatchNorm{d}d"] = _Layer("bn", d, 0, "num_features")
        table[f"LazyBatchNorm{d}d"] = _Layer("bn", d, None, None)
    table["Linear"] = _Layer("linear", 1, 1, "out_features", 2)
    table["LazyLinear"] = _Layer("linear", 1, 0, "out_features", 1)
    table["SyncBatchNorm"] = _Layer("bn", None, 0, "num_features")
    return {f"torch.nn.{name}": layer for name, layer in table.items()}


_LAYERS = _layer_table()
_SEQUENTIAL = "torch.nn.Sequential"
_ORDERED_DICT = ("collections.OrderedDict", "typing.OrderedDict")
_APPENDERS = ("append", "extend")


def _short(qualified: str) -> str:
    return qualified.rsplit(".", 1)[-1]


@dataclass
class _Finding:
    producer: cst.Call
    producer_name: str
    norm_name: str
    fixable: bool = True
    why_not: Optional[str] = None
    # `if normalize: layers.append(BatchNorm2d(n))`: the BatchNorm follows only when this is true
    condition: Optional[cst.BaseExpression] = None


@dataclass
class _ClassFacts:
    """``self.<attr>`` facts of one class body (walked once, only for classes that assign a BatchNorm)."""

    assigned: Dict[str, List[cst.BaseExpression]] = field(default_factory=dict)
    calls: Dict[str, List[cst.Call]] = field(default_factory=dict)
    other_refs: Dict[str, int] = field(default_factory=dict)  # references that are neither call nor assignment
    bias_refs: Set[str] = field(default_factory=set)


class _ClassCollector:
    """A pre-order walk with visit_<Node> handlers, like a CSTVisitor (not one: subclassing libcst's classes
    here would load libcst whenever the rule is imported, see docs/architecture.md)."""

    def __init__(self, facts: _ClassFacts) -> None:
        self.facts = facts
        self.skip: Set[cst.CSTNode] = set()  # self.<attr> nodes already accounted for

    def run(self, tree: cst.CSTNode) -> None:
        for node in walk(tree):
            handler = getattr(self, f"visit_{type(node).__name__}", None)
            if handler is not None:
                handler(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            attr = _self_attr(target.target)
            if attr is not None:
                self.facts.assigned.setdefault(attr, []).append(node.value)
                self.skip.add(target.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        attr = _self_attr(node.target)
        if attr is not None and node.value is not None:
            self.facts.assigned.setdefault(attr, []).append(node.value)
            self.skip.add(node.target)

    def visit_Call(self, node: cst.Call) -> None:
        attr = _self_attr(node.func)
        if attr is not None:
            self.facts.calls.setdefault(attr, []).append(node)
            self.skip.add(node.func)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node in self.skip:
            return
        inner = _self_attr(node.value)
        if inner is not None and node.attr.value == "bias":
            self.facts.bias_refs.add(inner)
        attr = _self_attr(node)
        if attr is not None:
            self.facts.other_refs[attr] = self.facts.other_refs.get(attr, 0) + 1


def _self_attr(node: cst.CSTNode) -> Optional[str]:
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        return node.attr.value
    return None


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

    It stays silent where the bias does not cancel: `bias=False` already, anything between the two layers
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
    - code that reads the layer's `.bias` (an init loop calling `nn.init.zeros_(m.bias)` without an
      `if m.bias is not None` guard, weight-transfer scripts) now gets `None`.
    No fix is offered where the file reads a layer's `.bias` without an `is not None` check (an init loop
    `for m in self.modules(): if isinstance(m, nn.Conv2d): m.bias.data.zero_()`, a `weights_init(m)` testing
    `classname.find("Conv") != -1`, `nn.init.zeros_(block[0].bias)`) unless an `isinstance` or class-name
    test around it names only other layer types: after the fix that code would fail on `None`. Code in other
    files that reads the bias cannot be seen. No fix is offered either where the layer is also used without
    the BatchNorm (a module bound to a name that
    is used elsewhere, a `self.conv` called elsewhere or whose `.bias` the class reads): the finding is
    still reported.

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

    has_ast_prefilter = True

    @classmethod
    def may_fire_in_ast(cls, tree: ast.Module, text: str, settings) -> bool:
        """A biased torch Conv/Linear and a BatchNorm that ``_match`` could pair: same dimension, output and
        feature counts that may agree (and, for a Linear, are written alike)."""
        return _ast_may_report(index_of(tree))

    def check(self, ctx: RuleContext) -> None:
        a = ctx.analysis
        local_names = _local_layer_names(a)
        if not local_names:
            return
        findings: Dict[cst.Call, _Finding] = {}
        order: List[cst.Call] = []

        def record(finding: _Finding) -> None:
            known = findings.get(finding.producer)
            if known is None:
                findings[finding.producer] = finding
                order.append(finding.producer)
            elif not finding.fixable and known.fixable:
                known.fixable, known.why_not = False, finding.why_not

        norm_calls = [
            call
            for name in local_names
            for call in a.calls_by_name.get(name, ())
            if _layer_of(a, call) is not None and _layer_of(a, call)[1].kind == "bn"
        ]
        norm_calls.sort(key=lambda c: a.spans[c][0])
        class_facts: Dict[cst.ClassDef, _ClassFacts] = {}
        for norm in norm_calls:
            for finding in self._sequence_findings(a, norm):
                record(finding)
            for finding in self._forward_findings(a, norm, class_facts):
                record(finding)

        hazards: Optional[List[_BiasUse]] = None
        for producer in sorted(order, key=lambda c: a.spans[c][0]):
            finding = findings[producer]
            if finding.fixable:
                if hazards is None:
                    hazards = _unguarded_bias_uses(a)
                use = next((h for h in hazards if h.may_touch(finding.producer_name)), None)
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
            if not finding.fixable:
                ctx.report(producer, message=f"{message} ({finding.why_not})")
                continue
            if finding.condition is not None:
                test = a.module.code_for_node(finding.condition).strip()
                exact = _negated(a, finding.condition)
                message = (
                    f"`{finding.producer_name}` feeds straight into `{finding.norm_name}` when `{test}` is true, and "
                    f"the BatchNorm cancels the bias there: pass `bias={exact}`"
                )
                new_call = _with_bias(a, producer, cst.parse_expression(exact)) if _is_pure(finding.condition) else None
            else:
                new_call = _with_bias(a, producer, cst.Name("False"))
            if new_call is None:
                ctx.report(producer, message=message)
                continue
            if loses_comment({producer: new_call}):
                ctx.report(producer, message=f"{message} ({DROPS_COMMENT})")
                continue
            ctx.report(producer, message=message, fix=Fix.replace(producer, new_call, Applicability.UNSAFE))

    # --- nn.Sequential(...), OrderedDict, lists passed to nn.Sequential(*layers) ------------------
    def _sequence_findings(self, a: FileAnalysis, norm: cst.Call) -> List[_Finding]:
        before = _module_before(a, norm)
        if before is None:
            return []
        expr, scope, condition = before if len(before) == 3 else (*before, None)
        finding = _finding_for(a, expr, norm, scope)
        if finding is None:
            return []
        finding.condition = condition
        return [finding]

    # --- self.bn(self.conv(x)) and x = self.conv(x); x = self.bn(x) ---------------------------------
    def _forward_findings(
        self, a: FileAnalysis, norm: cst.Call, cache: Dict[cst.ClassDef, _ClassFacts]
    ) -> List[_Finding]:
        assign = a.parent(norm)
        if not isinstance(assign, (cst.Assign, cst.AnnAssign)) or assign.value is not norm:
            return []
        targets = [t.target for t in assign.targets] if isinstance(assign, cst.Assign) else [assign.target]
        norm_attrs = [attr for attr in map(_self_attr, targets) if attr is not None]
        if not norm_attrs:
            return []
        klass = next((n for n in a.ancestors(assign) if isinstance(n, cst.ClassDef)), None)
        if klass is None:
            return []
        facts = cache.get(klass)
        if facts is None:
            facts = _ClassFacts()
            _ClassCollector(facts).run(klass)
            cache[klass] = facts
        findings = []
        for norm_attr in norm_attrs:
            if len(facts.assigned.get(norm_attr, ())) != 1:
                continue
            for norm_use in facts.calls.get(norm_attr, ()):
                producer_attr = _producer_attr_of(a, norm_use)
                if producer_attr is None or len(facts.assigned.get(producer_attr, ())) != 1:
                    continue
                producer = facts.assigned[producer_attr][0]
                if not isinstance(producer, cst.Call):
                    continue
                finding = _match(a, producer, norm)
                if finding is None:
                    continue
                uses = facts.calls.get(producer_attr, ())
                if any(_producer_attr_of_use(a, use, facts) is None for use in uses):
                    continue  # self.conv is also applied without the BatchNorm: its bias matters there
                if producer_attr in facts.bias_refs:
                    finding.fixable, finding.why_not = False, f"not fixed automatically: the class reads `self.{producer_attr}.bias`"
                elif facts.other_refs.get(producer_attr, 0):
                    finding.fixable, finding.why_not = False, f"not fixed automatically: `self.{producer_attr}` is also used elsewhere"
                findings.append(finding)
        return findings


# --- helpers ---------------------------------------------------------------------------------------


def _ast_may_report(index) -> bool:
    producers: List[Tuple[_Layer, ast.Call]] = []
    norms: List[Tuple[_Layer, AstCallInfo]] = []
    for info in index.calls:
        qualified = index.qualified_name(info.node.func)
        layer = _LAYERS.get(qualified) if qualified is not None else None
        if layer is None:
            continue
        if layer.kind == "bn":
            norms.append((layer, info))
        elif _may_have_bias(index, info, layer):
            producers.append((layer, info.node))
    if not producers or not norms:
        return False
    placed = _ast_norm_places(index, [info.node for _, info in norms])
    passed: Optional[Set[int]] = None  # producers handed to a call: not the value of a `self.<name> = ...`
    facts_of: Dict[int, _AstClassFacts] = {}
    for norm_layer, norm_info in norms:
        norm = norm_info.node
        if id(norm) not in placed:
            continue
        place = placed[id(norm)]
        klass = _ast_class_around(index, norm_info) if isinstance(place, str) else None
        in_class: Optional[Set[int]] = None  # `self.P = producer` in the norm's class, P feeding the norm
        if klass is not None:
            if not any(_ast_within(producer, klass) for _, producer in producers):
                continue
            in_class = _ast_forward_producers(index, klass, place, facts_of)  # type: ignore[arg-type]
            if not in_class:
                continue
        feeding = _ast_feeding_attrs(index, place) if isinstance(place, str) and klass is None else None
        features = None if _ast_has_star(norm) else _ast_arg_at(norm, norm_layer.count_index, norm_layer.count_keyword)
        for layer, producer in producers:
            if norm_layer.dim is not None and norm_layer.dim != layer.dim:
                continue
            if isinstance(place, int) and place != id(producer):
                continue  # the module right before the norm is another call
            if in_class is not None and id(producer) not in in_class:
                continue
            if feeding is not None:  # `_forward_findings` where the class is unknown here (a lambda, say)
                target = index.assigned_to.get(producer)
                if target is not None and not (_ast_self_attr(target) and target.attr in feeding):  # type: ignore
                    continue
                if target is None:
                    if passed is None:
                        wanted = {id(call) for _, call in producers}
                        passed = {id(arg) for info in index.calls for arg in info.node.args if id(arg) in wanted}
                        passed |= {id(k.value) for info in index.calls for k in info.node.keywords if id(k.value) in wanted}
                    if id(producer) in passed:
                        continue
            if _ast_counts_may_match(layer, _ast_arg_at(producer, layer.count_index, layer.count_keyword), features):
                return True
    return False


def _ast_class_around(index, info) -> Optional[ast.ClassDef]:
    """The class of the def around a call: it holds ``_forward_findings``' ``klass`` (the innermost class
    around the norm; a class statement inside the def would be smaller, which only makes the stage looser:
    it reads a superset of that class's assignments and calls). None outside a def, or in a lambda."""
    function = info.function
    return index.class_of.get(function) if function is not None else None


@dataclass
class _AstClassFacts:
    """What ``_forward_findings`` reads of one class, from its whole subtree (as ``_ClassCollector``)."""

    klass: ast.ClassDef
    assigned: Dict[str, List[ast.expr]] = field(default_factory=dict)  # self.<attr> -> the values given it
    _handed_on: Optional[List[Tuple[str, str, List[ast.Call]]]] = None

    def __post_init__(self) -> None:
        for node in ast_walk(self.klass):
            kind = type(node)
            if kind is ast.Assign:
                for target in node.targets:
                    if _ast_self_attr(target):
                        self.assigned.setdefault(target.attr, []).append(node.value)  # type: ignore[attr-defined]
            elif kind is ast.AnnAssign and node.value is not None and _ast_self_attr(node.target):
                self.assigned.setdefault(node.target.attr, []).append(node.value)  # type: ignore[attr-defined]

    def handed_on(self) -> List[Tuple[str, str, List[ast.Call]]]:
        """``x = self.P(...)`` right before an assignment or ``return``: (P, x, the calls of that statement)."""
        if self._handed_on is None:
            self._handed_on = []
            for node in ast_walk(self.klass):
                for block in (getattr(node, "body", None), getattr(node, "orelse", None),
                              getattr(node, "finalbody", None)):
                    if isinstance(block, list):
                        self._handed_on.extend(_ast_handed_on(block))
        return self._handed_on


def _ast_handed_on(block: List[ast.stmt]) -> Iterator[Tuple[str, str, List[ast.Call]]]:
    for previous, statement in zip(block, block[1:]):
        if type(statement) not in (ast.Assign, ast.Return) or type(previous) is not ast.Assign:
            continue
        produced = previous.value
        if (len(previous.targets) == 1 and type(previous.targets[0]) is ast.Name
                and type(produced) is ast.Call and _ast_self_attr(produced.func)):
            calls = [call for call in ast_walk(statement) if type(call) is ast.Call]
            yield produced.func.attr, previous.targets[0].id, calls  # type: ignore[attr-defined]


def _ast_forward_producers(index, klass: ast.ClassDef, norm_attr: str,
                           facts_of: Dict[int, _AstClassFacts]) -> Set[int]:
    """``_forward_findings`` on the class: ``id`` of each call that is the one value assigned to a
    ``self.P`` whose output a ``self.<norm_attr>(...)`` of the class may normalise (``_producer_attr_of``:
    ``self.bn(self.P(x))``, or ``x = self.P(...)`` right before an assignment or ``return`` that calls
    ``self.bn(x)``). A superset: the target and the single use of ``x``, and that each attribute is assigned
    once, are not checked. ``facts_of``: each class's facts, filled as needed."""
    facts = facts_of.get(id(klass))
    if facts is None:
        facts = facts_of[id(klass)] = _AstClassFacts(klass)
    feeding: Set[str] = set()
    by_name: Dict[int, str] = {}  # `self.bn(x)` calls -> x
    for info in index.calls_by_name.get(norm_attr, ()):
        use = info.node
        if (not _ast_self_attr(use.func) or len(use.args) != 1 or use.keywords or type(use.args[0]) is ast.Starred
                or not _ast_within(use, klass)):
            continue
        value = use.args[0]
        if type(value) is ast.Call and _ast_self_attr(value.func):
            feeding.add(value.func.attr)  # type: ignore[attr-defined]
        elif type(value) is ast.Name:
            by_name[id(use)] = value.id
    if by_name:
        feeding.update(attr for attr, name, calls in facts.handed_on()
                       if any(by_name.get(id(call)) == name for call in calls))
    return {id(value) for attr in feeding for value in facts.assigned.get(attr, ()) if type(value) is ast.Call}


def _ast_within(node: ast.AST, klass: ast.ClassDef) -> bool:
    """Lexically inside the class (its decorators included, as a LibCST walk of the class visits them)."""
    first = min([klass, *klass.decorator_list], key=lambda n: (n.lineno, n.col_offset))
    start = (node.lineno, node.col_offset)  # type: ignore[attr-defined]
    end = (node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
    return (first.lineno, first.col_offset) <= start and end <= (klass.end_lineno, klass.end_col_offset)


_ANY = None


def _ast_norm_places(index, norms: List[ast.Call]) -> Dict[int, Union[None, int, str]]:
    """Where each norm may get a module applied right before it: ``id`` of the producer call right before it
    in a Sequential's arguments or a list (``_module_before``), ``_ANY`` where another statement or a name
    decides, or the ``self.<name>`` it is bound to for ``forward`` (``_forward_findings``). Norms placed
    where neither can find anything are left out. The index answers most; a walk finds the rest."""
    wanted = {id(norm) for norm in norms}
    placed: Dict[int, Union[None, int, str]] = {}
    for info in index.calls:
        call = info.node
        if ast_call_name(call) == "add_module" and len(call.args) + len(call.keywords) == 2:
            module = [*call.args, *(k.value for k in call.keywords)][1]
            if id(module) in wanted:  # `_previous_add_module`: the `add_module` statement right before
                previous = _ast_statement_before(info.function or index.tree, call)
                added = _ast_added_module(previous) if previous is not None else None
                if added is not None:
                    _place_after(placed, module, added, False)
                continue
        if call.args and any(id(arg) in wanted for arg in call.args):
            spliced = ast_call_name(call) == "append"  # the statement before decides
            for position, arg in enumerate(call.args):
                if id(arg) in wanted:
                    _place_after(placed, arg, call.args[position - 1] if position else None, spliced)
        if call.keywords and any(id(k.value) in wanted for k in call.keywords):
            for position, keyword in enumerate(call.keywords):
                if keyword.arg is not None and id(keyword.value) in wanted and position:
                    before = call.keywords[position - 1]
                    if before.arg is not None:
                        _place_after(placed, keyword.value, before.value, False)
    for norm in norms:
        target = index.assigned_to.get(norm)
        if _ast_self_attr(target):
            placed[id(norm)] = target.attr  # type: ignore[union-attr]
    for node in ast_walk(index.tree) if wanted - set(placed) else ():  # lists, tuples, other assignments
        kind = type(node)
        if kind is ast.List or kind is ast.Tuple:
            for position, element in enumerate(node.elts):
                if id(element) in wanted:
                    if kind is ast.Tuple and len(node.elts) == 2 and position == 1:
                        continue  # `("bn", BatchNorm2d(n))`: the list around the pair decides, below
                    _place_after(placed, element, node.elts[position - 1] if position else None, False)
                elif type(element) is ast.Tuple and len(element.elts) == 2 and id(element.elts[1]) in wanted:
                    previous = node.elts[position - 1] if position else None  # `_ordered_dict_pair_before`
                    if type(previous) is ast.Tuple and len(previous.elts) == 2:  # type: ignore[attr-defined]
                        _place_after(placed, element.elts[1], previous.elts[1], False)  # type: ignore[union-attr]
        elif kind is ast.Assign:
            if id(node.value) in wanted and any(_ast_self_attr(target) for target in node.targets):
                placed.setdefault(id(node.value), _ANY)
        elif kind is ast.AnnAssign:
            if node.value is not None and id(node.value) in wanted and _ast_self_attr(node.target):
                placed.setdefault(id(node.value), _ANY)
    return placed


def _ast_statement_before(scope: ast.AST, call: ast.Call) -> Optional[ast.stmt]:
    """The statement right before the expression statement ``call`` in its block, else None."""
    for node in ast_walk(scope):
        for block in (getattr(node, "body", None), getattr(node, "orelse", None), getattr(node, "finalbody", None)):
            if isinstance(block, list):
                for previous, statement in zip(block, block[1:]):
                    if type(statement) is ast.Expr and statement.value is call:
                        return previous
    return None


def _ast_added_module(statement: ast.stmt) -> Optional[ast.expr]:
    """The module of an ``x.add_module(name, module)`` statement (no stars), as ``_previous_add_module``."""
    call = statement.value if type(statement) is ast.Expr else None  # type: ignore[attr-defined]
    if type(call) is not ast.Call or ast_call_name(call) != "add_module" or _ast_has_star(call):
        return None
    arguments = [*call.args, *(k.value for k in call.keywords)]
    return arguments[1] if len(arguments) == 2 else None


def _place_after(placed: Dict[int, Union[None, int, str]], norm: ast.AST, before: Optional[ast.AST],
                 elsewhere: bool) -> None:
    """``_module_before`` / ``_finding_for`` for a norm after ``before``: that call, a name's value (any), or,
    first in its list or call or where other statements decide (``elsewhere``), any producer."""
    if before is None or elsewhere or type(before) is ast.Name:
        placed[id(norm)] = _ANY
    elif type(before) is ast.Call:
        placed[id(norm)] = id(before)
    # anything else before it (an unpacking, an attribute, a literal): no module `_match` can pair with


def _ast_feeding_attrs(index, norm_attr: str) -> Set[str]:
    """``self.P`` modules whose output a call of ``self.<norm_attr>`` may normalise (``_producer_attr_of``):
    ``self.bn(self.P(x))``, or ``self.bn(x)`` where some ``x = self.P(...)`` (the statement right before, in
    ``check``)."""
    fed_from: Dict[str, Set[str]] = {}
    feeding: Set[str] = set()
    for info in index.calls_by_name.get(norm_attr, ()):
        use = info.node
        if not _ast_self_attr(use.func) or len(use.args) != 1 or use.keywords or type(use.args[0]) is ast.Starred:
            continue
        value = use.args[0]
        if type(value) is ast.Call and _ast_self_attr(value.func):
            feeding.add(value.func.attr)  # type: ignore[attr-defined]
        elif type(value) is ast.Name:
            if not fed_from:
                for call, target in index.assigned_to.items():
                    if type(target) is ast.Name and _ast_self_attr(call.func):
                        fed_from.setdefault(target.id, set()).add(call.func.attr)  # type: ignore[attr-defined]
            feeding |= fed_from.get(value.id, set())
    return feeding


def _ast_self_attr(node: ast.AST) -> bool:
    return type(node) is ast.Attribute and type(node.value) is ast.Name and node.value.id == "self"


def _ast_counts_may_match(layer: _Layer, out: Optional[ast.expr], features: Optional[ast.expr]) -> bool:
    """``_match``'s count tests: literals that differ never match; a Linear needs counts written alike
    (``_same_count``, compared on ``ast.unparse`` without whitespace: equal wherever the source texts are)."""
    if out is not None and features is not None:
        out_n, features_n = _ast_int(out), _ast_int(features)
        if out_n is not None and features_n is not None and out_n != features_n:
            return False
    if layer.kind == "linear":
        if out is None or features is None:
            return False
        return "".join(ast.unparse(out).split()) == "".join(ast.unparse(features).split())
    return True


def _ast_int(node: ast.expr) -> Optional[int]:
    return node.value if type(node) is ast.Constant and type(node.value) is int else None


def _ast_has_star(call: ast.Call) -> bool:
    return any(type(arg) is ast.Starred for arg in call.args) or any(k.arg is None for k in call.keywords)


def _ast_arg_at(call: ast.Call, index: Optional[int], keyword: Optional[str]) -> Optional[ast.expr]:
    """``_arg_at``: the keyword, else the positional argument at ``index`` (stars left out)."""
    if keyword is not None:
        found = next((k.value for k in call.keywords if k.arg == keyword), None)
        if found is not None:
            return found
    if index is None:
        return None
    positional = [arg for arg in call.args if type(arg) is not ast.Starred]
    return positional[index] if index < len(positional) else None


def _may_have_bias(index, info, layer: _Layer) -> bool:
    """The ast stage of ``_match``'s producer test: nothing that may pass ``bias`` (``_may_pass_bias``), and
    ``bias`` absent or ``True``."""
    call = info.node
    if any(type(arg) is ast.Starred for arg in call.args):
        return False
    for keyword in call.keywords:
        if keyword.arg is None:  # `**dd`: only a dict of known keys without `bias` lets `_match` go on
            value = keyword.value
            if type(value) is ast.Name:
                value = index.single_value(value.id, info.function)
            keys = _ast_dict_keys(value)
            if keys is None or "bias" in keys:
                return False
    bias = _ast_arg_at(call, layer.bias_index, "bias")
    return bias is None or (isinstance(bias, ast.Constant) and bias.value is True)


def _ast_dict_keys(value) -> Optional[Set[str]]:
    """``_dict_keys`` (a superset of the dicts it reads: string keys LibCST sees as concatenations count)."""
    if type(value) is ast.Dict:
        if not all(type(k) is ast.Constant and isinstance(k.value, str) for k in value.keys):
            return None  # `**inner` (a None key) or a key that is not a string literal
        return {k.value for k in value.keys}  # type: ignore[union-attr]
    if type(value) is ast.Call and type(value.func) is ast.Name and value.func.id == "dict":
        if value.args or any(k.arg is None for k in value.keywords):
            return None
        return {k.arg for k in value.keywords}  # type: ignore[misc]
    return None


def _local_layer_names(a: FileAnalysis) -> Set[str]:
    """Called names (last part) that can be one of our layers: the canonical names and import aliases."""
    names = {_short(q) for q in _LAYERS}
    names |= {local for local, target in a.imports.items() if target in _LAYERS}
    return {n for n in names if n in a.calls_by_name}


def _layer_of(a: FileAnalysis, call: cst.Call) -> Optional[Tuple[str, _Layer]]:
    qualified = a.qualified_name(call.func)
    if qualified is None:
        return None
    layer = _LAYERS.get(qualified)
    return (qualified, layer) if layer is not None else None


def _int_literal(node: cst.BaseExpression) -> Optional[int]:
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    return None


def _arg_at(call: cst.Call, index: Optional[int], keyword: Optional[str]) -> Optional[cst.Arg]:
    if keyword is not None:
        found = keyword_arg(call, keyword)
        if found is not None:
            return found
    if index is None:
        return None
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    return positional[index] if index < len(positional) else None


def _has_star(call: cst.Call) -> bool:
    return any(arg.star for arg in call.args)


def _may_pass_bias(a: FileAnalysis, call: cst.Call) -> bool:
    """``*args``, or ``**kwargs`` that may hold ``bias``; ``**dd`` with ``dd = {'device': d, 'dtype': t}`` (or
    ``dict(device=d, dtype=t)``) in the same scope cannot."""
    for arg in call.args:
        if arg.star == "*":
            return True
        if arg.star == "**":
            value = arg.value
            if isinstance(value, cst.Name):
                value = a.single_value(value.value, a.scope_of(arg))
            if _dict_keys(value) is None or "bias" in _dict_keys(value):
                return True
    return False


def _dict_keys(value: Optional[cst.CSTNode]) -> Optional[Set[str]]:
    """The keys of a literal dict (``{'device': d}`` or ``dict(device=d)``); None when unknown."""
    if isinstance(value, cst.Dict):
        keys = set()
        for element in value.elements:
            if not isinstance(element, cst.DictElement) or not isinstance(element.key, cst.SimpleString):
                return None
            keys.add(element.key.evaluated_value)
        return keys
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "dict":
        if any(arg.keyword is None for arg in value.args):
            return None
        return {arg.keyword.value for arg in value.args}
    return None


def _bias_arg(call: cst.Call, layer: _Layer) -> Optional[cst.Arg]:
    return _arg_at(call, layer.bias_index, "bias")


def _match(a: FileAnalysis, producer: cst.Call, norm: cst.Call) -> Optional[_Finding]:
    """A finding when ``producer`` is a biased Conv/Linear whose output features ``norm`` normalises."""
    found, norm_found = _layer_of(a, producer), _layer_of(a, norm)
    if found is None or norm_found is None:
        return None
    (pq, pl), (nq, nl) = found, norm_found
    if pl.kind not in ("conv", "linear") or nl.kind != "bn" or _may_pass_bias(a, producer):
        return None
    if nl.dim is not None and nl.dim != pl.dim:
        return None
    bias = _bias_arg(producer, pl)
    if bias is not None and not (isinstance(bias.value, cst.Name) and bias.value.value == "True"):
        return None  # bias=False, or a value we cannot read (bias=use_bias)
    out = _arg_at(producer, pl.count_index, pl.count_keyword)
    features = _arg_at(norm, nl.count_index, nl.count_keyword) if not _has_star(norm) else None
    if out is not None and features is not None:
        out_n, features_n = _int_literal(out.value), _int_literal(features.value)
        if out_n is not None and features_n is not None and out_n != features_n:
            return None  # it normalises another axis: the bias does not cancel
    if pl.kind == "linear" and not _same_count(a, out, features):
        # A conv's channels are always BatchNorm's axis, but a Linear on (N, L, C) before BatchNorm1d(L)
        # normalises L, not the features: only a count provably equal (same literal or same expression,
        # `Linear(d, hidden)` then `BatchNorm1d(hidden)`) shows the bias cancels.
        return None
    return _Finding(producer, _short(pq), _short(nq))


def _same_count(a: FileAnalysis, out: Optional[cst.Arg], features: Optional[cst.Arg]) -> bool:
    if out is None or features is None:
        return False
    return "".join(a.module.code_for_node(out.value).split()) == "".join(a.module.code_for_node(features.value).split())


def _finding_for(a: FileAnalysis, expr: cst.BaseExpression, norm: cst.Call, scope: cst.CSTNode) -> Optional[_Finding]:
    """``expr`` is the module right before ``norm``: a constructor call, or a name bound to one."""
    if isinstance(expr, cst.Call):
        return _match(a, expr, norm)
    if not isinstance(expr, cst.Name):
        return None
    value = a.single_value(expr.value, a.scope_of(expr))
    if not isinstance(value, cst.Call):
        return None
    finding = _match(a, value, norm)
    if finding is None:
        return None
    holder = a.scope_of(expr)
    if not isinstance(holder, cst.FunctionDef) or a.scope_of(value) is not holder:
        finding.fixable, finding.why_not = False, f"not fixed automatically: `{expr.value}` may be used elsewhere"
    elif len(names_in(holder.body, expr.value)) != 2:  # its binding and this use
        finding.fixable, finding.why_not = False, f"not fixed automatically: `{expr.value}` is also used elsewhere"
    return finding


def _is_sequential(a: FileAnalysis, call: cst.CSTNode) -> bool:
    return isinstance(call, cst.Call) and a.qualified_name(call.func) == _SEQUENTIAL


def _module_before(a: FileAnalysis, norm: cst.Call) -> Optional[Tuple[cst.BaseExpression, cst.CSTNode]]:
    """The expression applied right before ``norm`` in a Sequential, an OrderedDict or a layer list."""
    parent = a.parent(norm)
    if isinstance(parent, cst.Arg) and not parent.star:
        holder = a.parent(parent)
        if not isinstance(holder, cst.Call):
            return None
        if _is_sequential(a, holder) and parent.keyword is None:
            return _previous_arg(holder, parent)
        if parent.keyword is not None and _is_ordered_dict_in_sequential(a, holder):
            return _previous_arg(holder, parent, keywords=True)
        if call_name(holder) == "append" and parent.keyword is None and len(holder.args) == 1:
            return _previous_statement_item(a, holder)
        if call_name(holder) == "add_module" and len(holder.args) == 2 and parent is holder.args[1]:
            return _previous_add_module(a, holder)
        return None
    if isinstance(parent, cst.Element):
        container = a.parent(parent)
        if not isinstance(container, (cst.List, cst.Tuple)):
            return None
        elements = list(container.elements)
        index = elements.index(parent)
        if isinstance(container, cst.Tuple) and len(elements) == 2 and index == 1:
            return _ordered_dict_pair_before(a, container)
        if not _flows_into_sequential(a, container):
            return None
        if index > 0:
            previous = elements[index - 1]
            if isinstance(previous, cst.StarredElement):
                return None
            return previous.value, container
        return _previous_statement_item(a, container)
    return None


def _previous_add_module(a: FileAnalysis, call: cst.Call):
    """``seq.add_module("bn", BatchNorm2d(n))`` right after ``seq.add_module("conv", Conv2d(...))``, where
    ``seq`` is an ``nn.Sequential`` (``self`` in a subclass of it): the order added is the order applied."""
    small = a.parent(call)
    owner = receiver(call)
    if not isinstance(small, cst.Expr) or owner is None or not _is_sequential_object(a, owner):
        return None
    previous = _previous_small_statement(a, small)
    if not (isinstance(previous, cst.Expr) and isinstance(previous.value, cst.Call)):
        return None
    before = previous.value
    if call_name(before) != "add_module" or len(before.args) != 2 or any(arg.star for arg in before.args):
        return None
    if not receiver(before).deep_equals(owner):
        return None
    return before.args[1].value, call


def _is_sequential_object(a: FileAnalysis, owner: cst.BaseExpression) -> bool:
    if isinstance(owner, cst.Name) and owner.value == "self":
        klass = next((n for n in a.ancestors(owner) if isinstance(n, cst.ClassDef)), None)
        return klass is not None and any(a.qualified_name(base.value) == _SEQUENTIAL for base in klass.bases)
    if isinstance(owner, cst.Name):
        return _is_sequential(a, a.single_value(owner.value, a.scope_of(owner)))
    return False


def _previous_arg(call: cst.Call, arg: cst.Arg, keywords: bool = False):
    args = list(call.args)
    index = args.index(arg)
    if index == 0:
        return None
    previous = args[index - 1]
    if previous.star or (previous.keyword is not None) != keywords:
        return None
    return previous.value, call


def _is_ordered_dict_in_sequential(a: FileAnalysis, call: cst.Call) -> bool:
    if not (a.is_qualified(call.func, *_ORDERED_DICT) or (isinstance(call.func, cst.Name) and call.func.value == "OrderedDict")):
        return False
    arg = a.parent(call)
    return isinstance(arg, cst.Arg) and not arg.star and arg.keyword is None and _is_sequential(a, a.parent(arg))


def _ordered_dict_pair_before(a: FileAnalysis, pair: cst.Tuple):
    """``OrderedDict([("conv", Conv2d(...)), ("bn", BatchNorm2d(...))])``: the module of the pair before."""
    element = a.parent(pair)
    outer = a.parent(element) if isinstance(element, cst.Element) else None
    if not isinstance(outer, (cst.List, cst.Tuple)):
        return None
    arg = a.parent(outer)
    if not isinstance(arg, cst.Arg) or arg.star or arg.keyword is not None:
        return None
    holder = a.parent(arg)
    if not isinstance(holder, cst.Call) or not _is_ordered_dict_in_sequential(a, holder):
        return None
    elements = list(outer.elements)
    index = elements.index(element)
    if index == 0:
        return None
    previous = elements[index - 1].value
    if not isinstance(previous, cst.Tuple) or len(previous.elements) != 2:
        return None
    return previous.elements[1].value, holder


def _list_name_of(a: FileAnalysis, node: cst.CSTNode) -> Optional[Tuple[str, cst.CSTNode]]:
    """For a list literal or an ``x.append(...)`` call: the list's name and the small statement."""
    parent = a.parent(node)
    if isinstance(node, cst.Call):  # layers.append(module)
        target = node.func.value if isinstance(node.func, cst.Attribute) else None
        if isinstance(target, cst.Name) and isinstance(parent, cst.Expr):
            return target.value, parent
        return None
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
        return parent.targets[0].target.value, parent
    if isinstance(parent, cst.AugAssign) and isinstance(parent.operator, cst.AddAssign) and isinstance(parent.target, cst.Name):
        return parent.target.value, parent
    if isinstance(parent, cst.Arg) and not parent.star and parent.keyword is None:
        call = a.parent(parent)
        if isinstance(call, cst.Call) and call_name(call) == "extend" and len(call.args) == 1:
            found = _list_name_of(a, call)
            return found
    return None


def _flows_into_sequential(a: FileAnalysis, container: cst.CSTNode) -> bool:
    parent = a.parent(container)
    if isinstance(parent, cst.Arg) and parent.star == "*" and _is_sequential(a, a.parent(parent)):
        return True
    found = _list_name_of(a, container)
    if found is None:
        return False
    name, _ = found
    return _passed_to_sequential(a, name, a.scope_of(container))


def _passed_to_sequential(a: FileAnalysis, name: str, scope: cst.CSTNode, follow_returns: bool = True) -> bool:
    for call in a.calls_in(scope):
        if a.scope_of(call) is not scope or not _is_sequential(a, call):
            continue
        for arg in call.args:
            if arg.star == "*" and isinstance(arg.value, cst.Name) and arg.value.value == name:
                return True
    return (follow_returns and isinstance(scope, cst.FunctionDef) and _returns_name(scope, name)
            and _spliced_into_sequential(a, scope.name.value))


def _returns_name(function: cst.FunctionDef, name: str) -> bool:
    return bool(m.findall(function.body, m.Return(value=m.Name(name))))


def _spliced_into_sequential(a: FileAnalysis, helper: str) -> bool:
    """``nn.Sequential(*helper(...), ...)`` somewhere in the file: the helper's list is a layer sequence."""
    for call in a.calls_by_name.get(helper, ()):
        arg = a.parent(call)
        if isinstance(arg, cst.Arg) and arg.star == "*" and _is_sequential(a, a.parent(arg)):
            return True
        # layers.extend(helper(...)) / layers += helper(...), then nn.Sequential(*layers)
        holder = a.parent(arg) if isinstance(arg, cst.Arg) and not arg.star and arg.keyword is None else None
        if isinstance(holder, cst.Call) and call_name(holder) == "extend" and len(holder.args) == 1:
            found = _list_name_of(a, holder)
        elif isinstance(arg, cst.AugAssign) and isinstance(arg.operator, cst.AddAssign) and arg.value is call \
                and isinstance(arg.target, cst.Name):
            found = (arg.target.value, arg)
        else:
            found = None
        if found is not None and _passed_to_sequential(a, found[0], a.scope_of(call), follow_returns=False):
            return True
    return False


def _previous_statement_item(a: FileAnalysis, node: cst.CSTNode):
    """``node`` (a list literal or ``layers.append`` call) starts a statement that adds to a layer list: the
    last module the statement right before it added to the same list."""
    found = _list_name_of(a, node)
    if found is None:
        return None
    name, small = found
    if isinstance(small, cst.Assign):
        return None  # `layers = [bn, ...]` starts the list
    if not _passed_to_sequential(a, name, a.scope_of(node)):
        return None
    previous = _previous_small_statement(a, small)
    condition = None
    if previous is None:
        # `if normalize:` / `if bn:` right after the producer, holding only this statement, with no else
        guard = _only_statement_of_if(a, small)
        if guard is None:
            return None
        previous, condition = _previous_small_statement(a, guard), guard.test
        if previous is None:
            return None
    last = _last_added(previous, name)
    if last is None:
        return None
    return last, node, condition


def _only_statement_of_if(a: FileAnalysis, small: cst.CSTNode) -> Optional[cst.If]:
    line = a.parent(small)
    block = a.parent(line) if isinstance(line, cst.SimpleStatementLine) else None
    if isinstance(line, cst.SimpleStatementSuite):
        block, line = line, small
    if not isinstance(line, (cst.SimpleStatementLine, cst.BaseSmallStatement)) or block is None:
        return None
    statement = a.parent(block)
    if not isinstance(statement, cst.If) or statement.body is not block or statement.orelse is not None:
        return None
    if len(block.body) != 1 or len(getattr(line, "body", [small])) != 1:
        return None
    return statement


def _previous_small_statement(a: FileAnalysis, small: cst.CSTNode) -> Optional[cst.BaseSmallStatement]:
    if isinstance(small, cst.BaseCompoundStatement):
        line = small
    else:
        line = a.parent(small)
        if not isinstance(line, cst.SimpleStatementLine):
            return None
        index = list(line.body).index(small)
        if index > 0:
            return line.body[index - 1]
    suite = a.parent(line)
    body = getattr(suite, "body", None)
    if not isinstance(body, (list, tuple)):
        return None
    position = list(body).index(line)
    if position == 0:
        return None
    previous = body[position - 1]
    if not isinstance(previous, cst.SimpleStatementLine) or not previous.body:
        return None
    return previous.body[-1]


def _last_added(statement: cst.BaseSmallStatement, name: str) -> Optional[cst.BaseExpression]:
    """The last module ``statement`` adds to the list ``name``, if it is one of the forms we follow."""
    sequence = None
    if isinstance(statement, cst.Expr) and isinstance(statement.value, cst.Call):
        call = statement.value
        func = call.func
        if (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == name
                and func.attr.value in _APPENDERS and len(call.args) == 1 and not call.args[0].star
                and call.args[0].keyword is None):
            if func.attr.value == "append":
                return call.args[0].value
            sequence = call.args[0].value
    elif isinstance(statement, cst.AugAssign):
        if isinstance(statement.target, cst.Name) and statement.target.value == name and isinstance(statement.operator, cst.AddAssign):
            sequence = statement.value
    elif isinstance(statement, cst.Assign):
        if len(statement.targets) == 1 and isinstance(statement.targets[0].target, cst.Name) and statement.targets[0].target.value == name:
            sequence = statement.value
    if isinstance(sequence, (cst.List, cst.Tuple)) and sequence.elements:
        last = sequence.elements[-1]
        return None if isinstance(last, cst.StarredElement) else last.value
    return None


def _producer_attr_of(a: FileAnalysis, norm_use: cst.Call) -> Optional[str]:
    """For ``self.bn(...)``: the ``self.<attr>`` module whose output it normalises, if it is direct."""
    if len(norm_use.args) != 1 or norm_use.args[0].star or norm_use.args[0].keyword is not None:
        return None
    value = norm_use.args[0].value
    if isinstance(value, cst.Call):  # self.bn(self.conv(x))
        return _self_attr(value.func)
    if not isinstance(value, cst.Name):
        return None
    name = value.value
    # x = self.conv(x)  then  x = self.bn(x) / return self.bn(x): the conv output is used only here
    small = a.parent(_outermost_expression(a, norm_use))
    if isinstance(small, cst.Assign):
        if not (len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name)
                and small.targets[0].target.value == name):
            return None
    elif not isinstance(small, cst.Return):
        return None
    if small.value is None or len(names_in(small.value, name)) != 1:
        return None
    previous = _previous_small_statement(a, small)
    if not (isinstance(previous, cst.Assign) and len(previous.targets) == 1
            and isinstance(previous.targets[0].target, cst.Name) and previous.targets[0].target.value == name
            and isinstance(previous.value, cst.Call)):
        return None
    return _self_attr(previous.value.func)


def _outermost_expression(a: FileAnalysis, node: cst.CSTNode) -> cst.CSTNode:
    while True:
        parent = a.parent(node)
        if parent is None or isinstance(parent, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            return node
        node = parent


def _producer_attr_of_use(a: FileAnalysis, use: cst.Call, facts: _ClassFacts) -> Optional[str]:
    """For a call ``self.conv(...)``: the BatchNorm attribute that normalises its output right away, if any."""
    parent = a.parent(use)
    if isinstance(parent, cst.Arg):  # self.bn(self.conv(x))
        outer = a.parent(parent)
        if isinstance(outer, cst.Call):
            attr = _self_attr(outer.func)
            if attr is not None and _is_bn_attr(a, attr, facts) and _producer_attr_of(a, outer) is not None:
                return attr
        return None
    if not isinstance(parent, cst.Assign):
        return None
    following = _next_small_statement(a, parent)
    if following is None:
        return None
    for call in a.calls_in(following):
        attr = _self_attr(call.func)
        if attr is not None and _is_bn_attr(a, attr, facts) and _producer_attr_of(a, call) is not None:
            return attr
    return None


def _is_bn_attr(a: FileAnalysis, attr: str, facts: _ClassFacts) -> bool:
    values = facts.assigned.get(attr, ())
    if len(values) != 1 or not isinstance(values[0], cst.Call):
        return False
    found = _layer_of(a, values[0])
    return found is not None and found[1].kind == "bn"


def _next_small_statement(a: FileAnalysis, small: cst.CSTNode) -> Optional[cst.BaseSmallStatement]:
    line = a.parent(small)
    if not isinstance(line, cst.SimpleStatementLine):
        return None
    index = list(line.body).index(small)
    if index + 1 < len(line.body):
        return line.body[index + 1]
    suite = a.parent(line)
    body = getattr(suite, "body", None)
    if not isinstance(body, (list, tuple)):
        return None
    position = list(body).index(line)
    if position + 1 >= len(body):
        return None
    following = body[position + 1]
    if not isinstance(following, cst.SimpleStatementLine) or not following.body:
        return None
    return following.body[0]


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


def _unguarded_bias_uses(a: FileAnalysis) -> List[_BiasUse]:
    """Every ``x.bias`` in the file that would fail on ``None`` (``m.bias.data.zero_()``,
    ``nn.init.zeros_(m.bias)``), outside an ``if ... bias is not None`` guard. ``self.bias`` (the module's
    own parameter) and ``self.conv.bias`` (checked per class) are left out."""
    uses = []
    for node in _bias_attributes(a):
        base = node.value
        if isinstance(base, cst.Name) and base.value == "self" or _self_attr(base) is not None:
            continue
        parent = a.parent(node)
        if isinstance(parent, cst.AssignTarget) or _is_none_test(parent, node):
            continue
        if _is_bias_guarded(a, node):
            continue
        types, substrings = _type_guards(a, node)
        statement = a.enclosing_statement(node)
        code = a.module.code_for_node(statement if isinstance(statement, cst.SimpleStatementLine) else node).strip()
        uses.append(_BiasUse(code.splitlines()[0][:80] if code else "x.bias", types, substrings))
    return uses


def _bias_attributes(a: FileAnalysis) -> List[cst.Attribute]:
    """Every ``<expr>.bias`` in the file, in source order: the analysis already numbered every node in
    pre-order, so no second walk of the tree is needed."""
    attribute = cst.Attribute
    return [node for node in a.order if type(node) is attribute and node.attr.value == "bias"]


def _is_none_test(parent: Optional[cst.CSTNode], node: cst.CSTNode) -> bool:
    """``x.bias is None`` / ``x.bias is not None`` / ``x.bias != None``."""
    if not isinstance(parent, cst.Comparison) or parent.left is not node or len(parent.comparisons) != 1:
        return False
    target = parent.comparisons[0]
    return isinstance(target.operator, (cst.Is, cst.IsNot, cst.Equal, cst.NotEqual)) and _is_none(target.comparator)


def _is_none(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


def _guarding_tests(a: FileAnalysis, node: cst.CSTNode):
    """The tests of the ``if``s (statements and expressions) whose true branch holds ``node``, and the left
    operands of an ``and`` it is on the right of."""
    child = node
    for ancestor in a.ancestors(node):
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is ancestor.body:
            yield ancestor.test
        elif isinstance(ancestor, cst.BooleanOperation) and isinstance(ancestor.operator, cst.And) and child is ancestor.right:
            yield ancestor.left
        elif isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
            return
        child = ancestor


def _is_bias_guarded(a: FileAnalysis, node: cst.Attribute) -> bool:
    for test in _guarding_tests(a, node):
        for comparison in m.findall(test, m.Comparison()):
            left = comparison.left
            named_bias = (isinstance(left, cst.Attribute) and left.attr.value == "bias") or (
                isinstance(left, cst.Call) and call_name(left) == "getattr" and len(left.args) >= 2
                and isinstance(left.args[1].value, cst.SimpleString) and left.args[1].value.evaluated_value == "bias")
            if named_bias and any(isinstance(c.operator, (cst.IsNot, cst.NotEqual)) and _is_none(c.comparator)
                                  for c in comparison.comparisons):
                return True
    return False


def _type_guards(a: FileAnalysis, node: cst.CSTNode) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
    """Layer class names that ``isinstance``/``type`` checks around ``node`` name, and class-name substrings
    that ``"Conv" in classname`` / ``classname.find("Conv") != -1`` checks look for (None: no such check)."""
    types: Optional[Set[str]] = None
    substrings: Optional[Set[str]] = None
    for test in _guarding_tests(a, node):
        if m.findall(test, m.UnaryOperation(operator=m.Not())):
            continue  # `not isinstance(...)`: it names what the branch is not
        for call in m.findall(test, m.Call()):
            name = call_name(call)
            if name in ("isinstance", "issubclass") and len(call.args) == 2:
                spec = call.args[1].value
                parts = [e.value for e in spec.elements] if isinstance(spec, (cst.Tuple, cst.List)) else [spec]
                found = {(dotted_name(p) or "?").rsplit(".", 1)[-1] for p in parts}
                types = found if types is None else types & found
            elif name in ("find", "startswith", "endswith", "index") and call.args:
                text = call.args[0].value
                if isinstance(text, cst.SimpleString):
                    substrings = (substrings or set()) | {text.evaluated_value}
        for comparison in m.findall(test, m.Comparison()):
            for target in comparison.comparisons:
                if isinstance(target.operator, cst.In) and isinstance(comparison.left, cst.SimpleString):
                    substrings = (substrings or set()) | {comparison.left.evaluated_value}
                elif isinstance(target.operator, (cst.Is, cst.Equal)) and isinstance(comparison.left, cst.Call) \
                        and call_name(comparison.left) == "type":
                    found = {(dotted_name(target.comparator) or "?").rsplit(".", 1)[-1]}
                    types = found if types is None else types & found
    if types is not None and substrings is not None:
        return types, None  # both forms: the isinstance check is the precise one
    return types, substrings


# --- the fix ---------------------------------------------------------------------------------------


def _with_bias(a: FileAnalysis, call: cst.Call, value: cst.BaseExpression) -> Optional[cst.Call]:
    found = _layer_of(a, call)
    if found is None or not call.args:
        return None
    bias = _bias_arg(call, found[1])
    if bias is not None:  # bias=True / positional True -> the new value
        return call.with_changes(args=[arg.with_changes(value=value) if arg is bias else arg for arg in call.args])
    return append_keyword(call, "bias", value)


def _negated(a: FileAnalysis, test: cst.BaseExpression) -> str:
    """``not <test>`` as code; ``if not first:`` gives ``first`` (the layers only test ``bias`` for truth)."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = test.expression
        return a.module.code_for_node(inner.with_changes(lpar=[], rpar=[]) if isinstance(inner, (cst.Name, cst.Attribute)) else inner).strip()
    code = a.module.code_for_node(test).strip()
    return f"not {code}" if isinstance(test, (cst.Name, cst.Attribute)) else f"not ({code})"


def _is_pure(test: cst.BaseExpression) -> bool:
    """A test that reading twice gives the same answer: names, attributes, literals and operators, no calls."""
    return not m.findall(test, m.Call() | m.NamedExpr() | m.Await() | m.Subscript())


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
