"""TL501's fix: lift a per-parameter update loop into ``torch._foreach_*`` calls over lists.

The loop body is read as a straight-line program over one iteration's values, each classified as:

* a per-parameter **tensor** (a *root*: the loop variable, its ``.grad``, a tensor of ``self.state[p]``, a
  value of another dict indexed by the loop key, or a name bound to one of these): it becomes a list;
* a per-parameter **scalar** on the host (``state["step"] += 1``, bias corrections computed from it): its
  statement stays in the first pass and its value is collected into a list (``float()`` where it may be a
  0-d tensor), which the ops take as a scalar list;
* a **loop-invariant** scalar (a name the body does not bind, ``group["lr"]``): it stays as written.

The output has two passes. The first is the original loop with every tensor statement taken out: it keeps the
filters (``if p.grad is None: continue``), the lazy state initialisation and the host scalars, and appends each
parameter's tensors to lists, one set of lists per (device, dtype) because a ``torch._foreach_*`` call needs one
of each. The second loops over those buckets and applies every tensor statement to whole lists, in the original
order: each in-place method (``x.mul_(b)``, a chained ``.add_(...)``, ``x -= y``) becomes the matching
``torch._foreach_<op>_`` call, each out-of-place expression the matching ``torch._foreach_<op>`` (named after the
variable it was bound to). Every op applies the same ATen op to each tensor as the loop did, so on the CPU the
result is bitwise the same; an EMA (``e.mul_(d).add_(p, alpha=1 - d)`` and its spellings) becomes one
``torch._foreach_lerp_``, which rounds differently in the last bit.

Anything it cannot lift exactly raises ``NoFix`` with the reason, which the finding's message repeats.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from torchlint.analysis import FileAnalysis, call_name, dotted_name, iter_children, walk


class NoFix(Exception):
    """The loop cannot be lifted exactly; the message says why (it ends up in the finding)."""


# --- the ops we know -----------------------------------------------------------------------------------------

_BINARY_METHODS = {"add", "sub", "mul", "div"}  # tensor or scalar other; alpha only with a tensor (add/sub)
_UNARY_METHODS = {"sqrt", "abs", "neg", "exp", "log", "sign", "reciprocal", "sigmoid", "tanh", "rsqrt", "zero"}
_TERNARY_METHODS = {"addcmul", "addcdiv"}  # (t1, t2, value=)
_SCALAR_ONLY_METHODS = {"clamp_min", "clamp_max", "pow"}
_TENSOR_ONLY_METHODS = {"maximum", "minimum", "copy"}
_AUG_OPS = {cst.AddAssign: "add", cst.SubtractAssign: "sub", cst.MultiplyAssign: "mul", cst.DivideAssign: "div"}
_BIN_OPS = {cst.Add: "add", cst.Subtract: "sub", cst.Multiply: "mul", cst.Divide: "div", cst.Power: "pow"}
# torch.<fn>(tensor, ...) spelled as a function
_TORCH_FUNCTIONS = _BINARY_METHODS | _UNARY_METHODS | _TERNARY_METHODS | {"lerp", "maximum", "minimum", "pow", "clamp"}
# Attributes and methods that read a tensor's metadata, never its values: safe in filters and host code.
_METADATA_ATTRS = {
    "dtype", "device", "shape", "ndim", "is_sparse", "requires_grad", "is_leaf", "is_cuda", "is_floating_point",
    "grad", "layout", "is_complex",
}
_METADATA_METHODS = {"dim", "numel", "size", "is_floating_point", "is_complex", "nelement", "element_size"}
_PURE_HOST_CALLS = {"float", "int", "abs", "min", "max", "len", "isinstance", "round", "bool"}
_PURE_HOST_MODULES = ("math.",)
# What the lazy state initialisation may create: tensors shaped like the parameter, and host scalars.
_LIKE_PARAM_FUNCS = {"zeros_like", "ones_like", "full_like", "empty_like", "clone", "rand_like", "randn_like"}
_NEW_LIKE_METHODS = {"clone", "new_zeros", "new_ones", "new_full", "new_empty", "detach", "zeros_like"}
_INIT_TEST = re.compile(r"^(len\(\w+\)\s*==\s*0|not\s+\w+|['\"]\w+['\"]\s+not\s+in\s+\w+)$")
_MIN_TORCH = (2, 1)  # torch._foreach_copy_ and the scalar-list lerp/pow overloads


@dataclass
class LoopContext:
    """What the rewrite needs to know about where the loop stands."""

    analysis: FileAnalysis
    torch_name: str  # the file's name for the torch module
    in_no_grad: bool  # under @torch.no_grad() / with torch.no_grad() / inference_mode
    taken_names: Set[str]  # names already used in the function (and module): new names avoid them
    names_read_after_loop: Set[str]  # names whose next use after the loop (or in an enclosing loop) is a read
    torch_version: Tuple[int, int] = (2, 13)


# --- small helpers ---------------------------------------------------------------------------------------------


def _code(module: cst.Module, node: cst.CSTNode) -> str:
    return module.code_for_node(node)


def _names(node: cst.CSTNode) -> Set[str]:
    """Plain names read in ``node`` (not attribute names, keyword names or comprehension targets)."""
    out: Set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name):
            out.add(current.value)
        elif isinstance(current, cst.Attribute):
            stack.append(current.value)
            continue
        elif isinstance(current, cst.Arg):
            stack.append(current.value)
            continue
        stack.extend(current.children)
    return out


def plural(name: str) -> str:
    """The list's name for one per-parameter value's name: ``p`` -> ``params``, ``exp_avg`` -> ``exp_avgs``."""
    special = {"p": "params", "param": "params", "w": "weights", "weight": "weights", "v": "values",
               "value": "values", "g": "grads", "grad": "grads", "d_p": "d_ps", "buf": "bufs", "e": "ema_values"}
    if name in special:
        return special[name]
    for suffix, replacement in (("_p", "_params"), ("_v", "_values"), ("_w", "_weights"), ("_g", "_grads")):
        if name.endswith(suffix):
            return name[: -len(suffix)] + replacement
    if name.endswith("s"):
        return name + "_list"
    return name + "s"


def _string_key(node: cst.BaseExpression) -> Optional[str]:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _subscript_index(node: cst.Subscript) -> Optional[cst.BaseExpression]:
    if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
        return node.slice[0].slice.value
    return None


def _is_one_minus(weight: cst.BaseExpression, decay: cst.BaseExpression, module: cst.Module) -> bool:
    """``1 - d`` / ``1. - d`` / ``(1.0 - d)`` for the decay ``d`` written the same way."""
    if not (isinstance(weight, cst.BinaryOperation) and isinstance(weight.operator, cst.Subtract)):
        return False
    left = weight.left
    if not (isinstance(left, (cst.Integer, cst.Float)) and float(left.value) == 1.0):
        return False
    return _code(module, weight.right).strip("() ") == _code(module, decay).strip("() ")


# --- values in the foreach section -----------------------------------------------------------------------------


@dataclass
class TList:
    """A list of per-parameter tensors: a named list, or a fresh one not yet bound to a name."""

    code: str
    fresh: bool = False  # a new list nobody else refers to (the result of an out-of-place op)
    named: bool = True


@dataclass
class Scalar:
    code: str
    per_param: bool = False  # a list of python numbers, one per parameter (a scalar list)


Value = Union[TList, Scalar]


@dataclass
class Root:
    key: str  # canonical spelling of the access, e.g. "p", "p.grad", "state:exp_avg", "msd[k]"
    collect: str  # what the first pass appends (a name bound in the first pass, or the access itself)
    list_name: str
    keyed: bool = False  # its device and dtype are part of the bucket key (it is not derived from another root)


@dataclass
class HostName:
    per_param: bool
    maybe_tensor: bool  # may hold a 0-d tensor: collected through float()
    bound_at: int  # index of the statement that binds it


# --- the rewriter -------------------------------------------------------------------------------------------------


class LoopRewriter:
    def __init__(self, loop: cst.For, ctx: LoopContext) -> None:
        self.loop = loop
        self.ctx = ctx
        self.module = ctx.analysis.module
        self.torch = ctx.torch_name
        self.tensor_targets: List[str] = []  # loop targets that are tensors
        self.key_targets: List[str] = []  # loop targets that are host keys (state_dict().items(), enumerate)
        self.state_dicts: Set[str] = set()  # names bound to self.state[p]
        self.state_entries: Dict[str, str] = {}  # key -> "tensor" | "host_tensor" | "number"
        self.aliases: Dict[str, str] = {}  # first-pass name -> root key it aliases
        self.roots: Dict[str, Root] = {}
        self.hosts: Dict[str, HostName] = {}
        self.body_bound: Set[str] = set()  # every name the loop body binds
        self.taken = set(ctx.taken_names)
        self.collected_hosts: Dict[str, str] = {}  # host name -> list name
        self.collected_exprs: Dict[str, str] = {}  # per-parameter scalar expression -> list of float() of it
        self.env: Dict[str, str] = {}  # body name -> list name in the foreach section
        self.tensor_names: Set[str] = set()  # names the tensor statements bind (temporaries)
        self.preferred_name: Optional[str] = None  # the name the next fresh list is bound to
        self.lerp_pairs: List[Tuple[str, str]] = []  # (EMA root, averaged root) of each lerp
        self.rebound_aliases: List[Tuple[str, str]] = []  # (list name, alias) collected as their own list
        self.float_guarded = False  # a state_dict() loop skips integer buffers

    # ----- entry point -----
    def rewrite(self) -> List[cst.BaseStatement]:
        if self.ctx.torch_version < _MIN_TORCH:
            raise NoFix("the rewrite needs PyTorch 2.1 or later (`torch._foreach_copy_`, scalar-list overloads)")
        loop = self.loop
        if loop.orelse is not None:
            raise NoFix("the loop has an `else:` clause")
        self._read_header()
        self._collect_bound_names(loop.body)
        prelude, block_path = self._find_update_block()
        statements = self._flatten(block_path[-1])
        self._check_float_guard(self._guard_tests(prelude + list(block_path[-1].body), block_path))
        first_pass, tensor_statements = self._classify(prelude, statements)
        if not tensor_statements:
            raise NoFix("no tensor statement to lift")
        self._check_names_after_loop()
        foreach_body = self._translate_block(tensor_statements)
        return self._assemble(block_path, first_pass, foreach_body)

    # ----- the loop header -----
    def _read_header(self) -> None:
        target, iterable = self.loop.target, self.loop.iter
        if isinstance(target, cst.Name):
            self.tensor_targets = [target.value]
            return
        if not isinstance(target, (cst.Tuple, cst.List)) or not all(
            isinstance(e.value, cst.Name) for e in target.elements
        ):
            raise NoFix("the loop target is not a name or a tuple of names")
        names = [e.value.value for e in target.elements]  # type: ignore[union-attr]
        name = call_name(iterable) if isinstance(iterable, cst.Call) else None
        if name == "zip":
            self.tensor_targets = names
        elif name in ("items", "named_parameters", "named_buffers", "enumerate") and len(names) == 2:
            self.key_targets, self.tensor_targets = [names[0]], [names[1]]
        else:
            raise NoFix("the loop target unpacks something other than `zip`, `.items()` or `enumerate`")
        if len(set(names)) != len(names):
            raise NoFix("the loop target repeats a name")

    def _check_float_guard(self, tests: Iterable[cst.BaseExpression]) -> None:
        """A state_dict() also holds integer buffers (``num_batches_tracked``): the loop must skip them."""
        if "state_dict" not in _code(self.module, self.loop.iter):
            return
        if not any("is_floating_point" in _code(self.module, test) for test in tests):
            raise NoFix(
                "the loop runs over a `state_dict()`, which also holds integer buffers (`num_batches_tracked`); "
                "skip them with `if v.dtype.is_floating_point:` first"
            )

    def _find_update_block(self) -> Tuple[List[cst.BaseStatement], List[cst.BaseSuite]]:
        """The statements before the block that holds the updates, and the chain of guard blocks down to it.

        ``for k, v in sd.items(): if v.dtype.is_floating_point: ...`` has its updates inside the guard."""
        prelude: List[cst.BaseStatement] = []
        path: List[cst.BaseSuite] = [self.loop.body]
        body = self.loop.body
        while True:
            statements = list(body.body) if isinstance(body, cst.IndentedBlock) else []
            if not isinstance(body, cst.IndentedBlock):
                raise NoFix("the loop body is on the loop's line")
            last = statements[-1] if statements else None
            updates_before = any(isinstance(small, (cst.Expr, cst.AugAssign))
                                 for statement in statements[:-1] for small in self._flatten_one(statement))
            if (
                isinstance(last, cst.If) and last.orelse is None and not updates_before
                and self._is_metadata_test(last.test)
                and not self._is_init_test(last.test)
                and not (len(last.body.body) == 1 and self._is_exit(last.body.body[0]))
            ):
                prelude.extend(statements[:-1])
                path.append(last.body)
                body = last.body
                continue
            return prelude, path

    def _guard_tests(self, statements: Sequence[cst.CSTNode], path: Sequence[cst.BaseSuite]) -> List[cst.BaseExpression]:
        tests = []
        for statement in statements:
            if isinstance(statement, cst.If) and len(statement.body.body) == 1 and self._is_exit(statement.body.body[0]):
                tests.append(statement.test)
        for outer in path[:-1]:
            last = outer.body[-1]  # type: ignore[attr-defined]
            if isinstance(last, cst.If):
                tests.append(last.test)
        return tests

    # ----- which names the body binds -----
    def _collect_bound_names(self, body: cst.CSTNode) -> None:
        for node in walk(body):
            if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                raise NoFix("the loop body defines a function or class")
            if isinstance(node, (cst.For, cst.While)):
                raise NoFix("the loop body has a nested loop")
            if isinstance(node, (cst.Return, cst.Break, cst.Yield, cst.Await, cst.Global, cst.Nonlocal)):
                raise NoFix(f"the loop body has a `{type(node).__name__.lower()}` statement")
            if isinstance(node, (cst.Try, cst.With)):
                raise NoFix(f"the loop body has a `{type(node).__name__.lower()}` block")
            if isinstance(node, cst.NamedExpr):
                raise NoFix("the loop body uses `:=`")
            if isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Name):
                self.body_bound.add(node.target.value)
            elif isinstance(node, cst.AssignTarget) and isinstance(node.target, (cst.Tuple, cst.List)):
                for element in node.target.elements:
                    if isinstance(element.value, cst.Name):
                        self.body_bound.add(element.value.value)
            elif isinstance(node, (cst.AugAssign, cst.AnnAssign)) and isinstance(node.target, cst.Name):
                self.body_bound.add(node.target.value)
        self.body_bound |= set(self.tensor_targets) | set(self.key_targets)

    def _flatten(self, block: cst.BaseSuite) -> List[cst.CSTNode]:
        assert isinstance(block, cst.IndentedBlock)
        out: List[cst.CSTNode] = []
        for statement in block.body:
            if isinstance(statement, cst.SimpleStatementLine):
                out.extend(statement.body)
            else:
                out.append(statement)
        return out

    # ----- classification: first pass or foreach section -----
    def _classify(
        self, prelude: List[cst.BaseStatement], statements: List[cst.CSTNode]
    ) -> Tuple[Set[int], List[Tuple[int, cst.CSTNode]]]:
        """Indices (into ``statements``) that stay in the first pass, and the tensor statements in order."""
        for statement in prelude:
            for small in self._flatten_one(statement):
                kind = self._first_pass_kind(small, index=-1)
                if kind is None:
                    raise NoFix(f"`{self._short(small)}` comes before a guard the updates depend on")
        first_pass: Set[int] = set()
        tensor_statements: List[Tuple[int, cst.CSTNode]] = []
        for index, small in enumerate(statements):
            kind = self._first_pass_kind(small, index)
            if kind is not None:
                if kind == "reads_values" and tensor_statements:
                    raise NoFix(f"`{self._short(small)}` reads a tensor after the loop body has updated it")
                if kind == "host_in_place" and tensor_statements:
                    # a 0-d tensor changed in place: a scalar collected from it would see the later value
                    raise NoFix(f"`{self._short(small)}` changes a scalar tensor after the updates that use it")
                if kind == "filter" and tensor_statements:
                    # the updates above it run for every parameter, the ones below only for those it lets through
                    raise NoFix(f"`{self._short(small)}` skips parameters after some of their updates")
                first_pass.add(index)
                continue
            self._check_tensor_statement(small)
            tensor_statements.append((index, small))
        # a host value rebound after a tensor statement used it would be collected with its later value
        for index, small in tensor_statements:
            for name in _names(small):
                host = self.hosts.get(name)
                if host is not None and host.bound_at > index:
                    raise NoFix(f"`{name}` is changed after `{self._short(small)}` uses it")
        return first_pass, tensor_statements

    def _flatten_one(self, statement: cst.CSTNode) -> List[cst.CSTNode]:
        if isinstance(statement, cst.SimpleStatementLine):
            return list(statement.body)
        return [statement]

    def _first_pass_kind(self, small: cst.CSTNode, index: int) -> Optional[str]:
        """How ``small`` stays in the first pass: "filter", "state", "init", "alias", "host"; None: a tensor op."""
        if isinstance(small, cst.If):
            if len(small.body.body) == 1 and self._is_exit(small.body.body[0]) and small.orelse is None:
                computed = sorted(_names(small.test) & self.tensor_names)
                if computed:
                    raise NoFix(f"`if {self._short(small.test)}:` tests `{computed[0]}`, a tensor the loop computes")
                if not self._is_metadata_test(small.test):
                    raise NoFix(f"`if {self._short(small.test)}:` depends on tensor values")
                return "filter"
            if self._is_init_test(small.test):
                return "reads_values" if self._read_init(small) else "init"
            if self._is_invariant(small.test):
                if self._only_host_statements(small, index):
                    return "host"  # `if corrected: scale = lr ** 2 / max_lr`: scalars only, first pass
                return None  # an `if` on a loop-invariant condition: lifted around the foreach calls
            if self._is_metadata_test(small.test):
                raise NoFix(f"`if {self._short(small.test)}:` takes a different branch for some parameters")
            raise NoFix(f"`if {self._short(small.test)}:` depends on tensor values (data-dependent control flow)")
        if isinstance(small, (cst.Pass,)):
            return "host"
        if isinstance(small, cst.Expr):
            return None
        if isinstance(small, cst.Assign):
            if len(small.targets) != 1:
                raise NoFix(f"`{self._short(small)}` assigns several targets")
            target = small.targets[0].target
            value = small.value
            if isinstance(target, cst.Name):
                return self._binding_kind(target.value, value, index)
            if (isinstance(target, cst.Tuple) and isinstance(value, cst.Tuple)
                    and len(target.elements) == len(value.elements)
                    and all(isinstance(e.value, cst.Name) for e in target.elements)
                    and not any(isinstance(e, cst.StarredElement) for e in value.elements)):
                # `exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]`: one binding per pair
                kinds = {self._binding_kind(t.value.value, v.value, index)  # type: ignore[union-attr]
                         for t, v in zip(target.elements, value.elements)}
                if None in kinds:
                    if kinds != {None}:
                        raise NoFix(f"`{self._short(small)}` binds tensors and scalars together")
                    raise NoFix(f"`{self._short(small)}` computes several tensors in one statement")
                return "alias"
            if isinstance(target, cst.Subscript) and self._state_entry_kind(target) in ("host_tensor", "number"):
                if self._is_host_expr(value):
                    return "host"
            if isinstance(target, (cst.Tuple, cst.List)) and self._is_host_expr(value):
                for element in target.elements:
                    if isinstance(element.value, cst.Name):
                        self._bind_host(element.value.value, index, self._is_per_param(value), self._maybe_tensor(value))
                    else:
                        raise NoFix(f"`{self._short(small)}` unpacks into something other than names")
                return "host"
            if isinstance(target, cst.Attribute) and target.attr.value == "data":
                raise NoFix("the loop assigns `.data` (a new tensor per parameter); `.copy_()` could be lifted")
            if isinstance(target, cst.Subscript) and self._state_entry_kind(target) == "tensor":
                raise NoFix(f"`{self._short(target)} = ...` rebinds a state tensor per parameter")
            return None
        if isinstance(small, cst.AugAssign):
            target = small.target
            if isinstance(target, cst.Name) and target.value in self.hosts:
                if not self._is_host_expr(small.value):
                    raise NoFix(f"`{self._short(small)}` mixes a host scalar with a tensor")
                self.hosts[target.value].bound_at = index
                return "host_in_place" if self.hosts[target.value].maybe_tensor else "host"
            kind = self._state_entry_kind(target) if isinstance(target, cst.Subscript) else None
            if kind in ("host_tensor", "number"):
                if not self._is_host_expr(small.value):
                    raise NoFix(f"`{self._short(small)}` mixes a host scalar with a tensor")
                return "host_in_place" if kind == "host_tensor" else "host"
            return None
        if isinstance(small, cst.Raise):
            return "filter"
        raise NoFix(f"`{self._short(small)}` cannot be lifted")

    def _only_host_statements(self, node: cst.If, index: int) -> bool:
        """Every branch binds host scalars only (checked without binding anything: a tensor branch is
        classified later, statement by statement)."""
        for branch in self._if_branches(node):
            for statement in branch:
                for small in self._flatten_one(statement):
                    if isinstance(small, cst.Assign) and len(small.targets) == 1:
                        target = small.targets[0].target
                        if isinstance(target, cst.Name) and target.value not in self.aliases \
                                and target.value not in self.tensor_names and self._root_key(small.value) is None \
                                and self._is_host_expr(small.value):
                            continue
                    return False
        for branch in self._if_branches(node):
            for statement in branch:
                for small in self._flatten_one(statement):
                    self._first_pass_kind(small, index)
        return True

    def _binding_kind(self, name: str, value: cst.BaseExpression, index: int) -> Optional[str]:
        """How ``name = value`` stays in the first pass ("state", "alias", "host"), or None: a tensor statement."""
        if self._is_state_access(value):
            if name in self.state_dicts or name in self.aliases:
                raise NoFix(f"`{name}` is bound twice")
            self.state_dicts.add(name)
            return "state"
        if name in self.aliases or name in self.tensor_names:
            return None  # rebinding a per-parameter tensor name: done on the lists
        root = self._root_key(value)
        if root is not None:
            key, kind = root
            if kind == "tensor":
                if name in self.hosts:
                    raise NoFix(f"`{name}` is bound twice")
                self.aliases[name] = key
                return "alias"
            self._bind_host(name, index, per_param=True, maybe_tensor=kind == "host_tensor")
            return "host"
        if self._is_host_expr(value):
            self._bind_host(name, index, self._is_per_param(value), self._maybe_tensor(value))
            return "host"
        return None

    def _bind_host(self, name: str, index: int, per_param: bool, maybe_tensor: bool) -> None:
        if name in self.aliases or name in self.state_dicts:
            raise NoFix(f"`{name}` is bound twice")
        previous = self.hosts.get(name)
        self.hosts[name] = HostName(
            per_param or (previous is not None and previous.per_param),
            maybe_tensor or (previous is not None and previous.maybe_tensor),
            index,
        )

    def _is_exit(self, statement: cst.CSTNode) -> bool:
        return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(
            statement.body[0], (cst.Continue, cst.Raise)
        )

    def _is_init_test(self, test: cst.BaseExpression) -> bool:
        text = " ".join(_code(self.module, test).split())
        if not _INIT_TEST.match(text):
            return False
        return bool(_names(test) & self.state_dicts)

    def _read_init(self, node: cst.If) -> bool:
        """Type each state entry the lazy initialisation creates; it runs unchanged in the first pass.

        True where it reads tensor values (``p.clone()``), not only their shape (``torch.zeros_like(p)``)."""
        reads_values = False
        if node.orelse is not None:
            raise NoFix("the state initialisation has an `else:` branch: the first step differs per parameter")
        for statement in node.body.body:
            for small in self._flatten_one(statement):
                if not isinstance(small, cst.Assign) or len(small.targets) != 1:
                    raise NoFix(f"the state initialisation does more than assign entries: `{self._short(small)}`")
                target = small.targets[0].target
                if not (isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name)
                        and target.value.value in self.state_dicts):
                    raise NoFix(f"the state initialisation assigns `{self._short(target)}`")
                key = _string_key(_subscript_index(target) or cst.Name("x"))
                if key is None:
                    raise NoFix("a state key is not a string literal")
                self.state_entries[key] = self._init_kind(small.value)
                reads_values = reads_values or any(
                    isinstance(n, cst.Call) and call_name(n) in ("clone", "detach", "copy_", "new_tensor")
                    for n in walk(small.value)
                )
        return reads_values

    def _init_kind(self, value: cst.BaseExpression) -> str:
        if isinstance(value, (cst.Integer, cst.Float)):
            return "number"
        if isinstance(value, cst.Call):
            name = call_name(value)
            dotted = dotted_name(value.func) or ""
            if dotted.split(".")[0] == self.torch and name in ("tensor", "zeros", "ones", "scalar_tensor"):
                if any(a.keyword is not None and a.keyword.value == "device" for a in value.args):
                    return "device_tensor"
                if name == "tensor" and value.args and isinstance(value.args[0].value, (cst.Integer, cst.Float)):
                    return "host_tensor"
                if name in ("zeros", "ones") and value.args and _code(self.module, value.args[0].value) in ("()", "[]"):
                    return "host_tensor"
                return "unknown"
            if dotted.split(".")[0] == self.torch and name in _LIKE_PARAM_FUNCS and value.args:
                return "tensor" if self._mentions_targets(value.args[0].value) else "unknown"
            if isinstance(value.func, cst.Attribute) and name in _NEW_LIKE_METHODS:
                return "tensor" if self._mentions_targets(value.func.value) else "unknown"
        return "unknown"

    def _mentions_targets(self, expr: cst.BaseExpression) -> bool:
        return bool(_names(expr) & (set(self.tensor_targets) | set(self.aliases)))

    def _is_state_access(self, expr: cst.BaseExpression) -> bool:
        """``self.state[p]`` (any owner's ``.state``) indexed by a tensor loop target."""
        if not isinstance(expr, cst.Subscript):
            return False
        owner = expr.value
        index = _subscript_index(expr)
        return (isinstance(owner, cst.Attribute) and owner.attr.value == "state" and isinstance(index, cst.Name)
                and index.value in self.tensor_targets)

    def _state_entry_kind(self, expr: cst.BaseExpression) -> Optional[str]:
        if not isinstance(expr, cst.Subscript):
            return None
        owner = expr.value
        if not ((isinstance(owner, cst.Name) and owner.value in self.state_dicts) or self._is_state_access(owner)):
            return None
        key = _string_key(_subscript_index(expr) or cst.Name("x"))
        if key is None:
            raise NoFix("a state key is not a string literal")
        kind = self.state_entries.get(key)
        if kind is None:
            raise NoFix(
                f"state[{key!r}] is not created by the loop's lazy initialisation (`if len(state) == 0:`), so the "
                "rewrite cannot tell a tensor from a number"
            )
        if kind == "device_tensor":
            raise NoFix(f"state[{key!r}] is a scalar tensor on the parameter's device")
        if kind == "unknown":
            raise NoFix(f"state[{key!r}] is initialised with something the rewrite cannot type")
        return kind

    # ----- roots: the per-parameter tensors the lists hold -----
    def _root_key(self, expr: cst.BaseExpression) -> Optional[Tuple[str, str]]:
        """(canonical key, kind) for an access to a per-parameter value, else None. Kinds: "tensor",
        "host_tensor", "number" (the last two only for state entries)."""
        base, _suffix = self._strip_detach(expr)
        if isinstance(base, cst.Name):
            if base.value in self.tensor_targets:
                return base.value, "tensor"
            if base.value in self.aliases:
                return self.aliases[base.value], "tensor"
            return None
        if isinstance(base, cst.Attribute) and base.attr.value == "grad":
            inner = self._root_key(base.value)
            if inner is not None and inner[1] == "tensor" and inner[0] in self.tensor_targets:
                return inner[0] + ".grad", "tensor"
            return None
        if isinstance(base, cst.Subscript):
            kind = self._state_entry_kind(base)
            if kind is not None:
                key = _string_key(_subscript_index(base) or cst.Name("x"))
                return f"state:{key}", kind
            owner, index = base.value, _subscript_index(base)
            if (isinstance(owner, cst.Name) and owner.value not in self.body_bound and isinstance(index, cst.Name)
                    and index.value in self.key_targets):
                return f"{owner.value}[{index.value}]", "tensor"
        return None

    def _strip_detach(self, expr: cst.BaseExpression) -> Tuple[cst.BaseExpression, str]:
        suffix = ""
        while True:
            if isinstance(expr, cst.Attribute) and expr.attr.value == "data":
                suffix = ".data" + suffix
                expr = expr.value
            elif (isinstance(expr, cst.Call) and not expr.args and isinstance(expr.func, cst.Attribute)
                  and expr.func.attr.value == "detach"):
                suffix = ".detach()" + suffix
                expr = expr.func.value
            else:
                return expr, suffix

    # ----- host (scalar) expressions -----
    def _is_host_expr(self, expr: cst.BaseExpression) -> bool:
        """True when ``expr`` computes a scalar without reading tensor values (metadata reads are fine)."""
        if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString)):
            return True
        if isinstance(expr, cst.Name):
            if expr.value in self.tensor_targets or expr.value in self.aliases or expr.value in self.tensor_names:
                return False
            return expr.value not in self.state_dicts
        if isinstance(expr, cst.BinaryOperation):
            return self._is_host_expr(expr.left) and self._is_host_expr(expr.right)
        if isinstance(expr, cst.UnaryOperation):
            return self._is_host_expr(expr.expression)
        if isinstance(expr, (cst.Tuple, cst.List)):
            return all(self._is_host_expr(e.value) for e in expr.elements)
        if isinstance(expr, cst.Comparison):
            return self._is_host_expr(expr.left) and all(self._is_host_expr(c.comparator) for c in expr.comparisons)
        if isinstance(expr, cst.BooleanOperation):
            return self._is_host_expr(expr.left) and self._is_host_expr(expr.right)
        if isinstance(expr, cst.IfExp):
            return all(self._is_host_expr(e) for e in (expr.test, expr.body, expr.orelse))
        if isinstance(expr, cst.Subscript):
            root = self._root_key(expr)
            if root is not None:
                return root[1] != "tensor"
            return not (_names(expr) & self._per_param_tensor_names())
        if isinstance(expr, cst.Attribute):
            if expr.attr.value in _METADATA_ATTRS and expr.attr.value != "grad":
                return not (_names(expr) & self.tensor_names)  # a temporary does not exist in the first pass
            return not (_names(expr) & self._per_param_tensor_names())
        if isinstance(expr, cst.Call):
            name = call_name(expr)
            dotted = dotted_name(expr.func) or ""
            args_host = all(self._is_host_expr(a.value) for a in expr.args)
            if isinstance(expr.func, cst.Name) and name in _PURE_HOST_CALLS:
                return args_host or (name == "len" and True)
            if dotted.startswith(_PURE_HOST_MODULES):
                return args_host
            if isinstance(expr.func, cst.Attribute) and name in _METADATA_METHODS:
                return not (_names(expr) & self.tensor_names)
            if isinstance(expr.func, cst.Attribute) and name == "item":
                root = self._root_key(expr.func.value)
                return root is not None and root[1] == "host_tensor" or (
                    isinstance(expr.func.value, cst.Name) and expr.func.value.value in self.hosts
                )
            if not (_names(expr) & self.body_bound):
                return True  # a call on loop-invariant values only (`group["lr"]`, `self.lr_at(t)`)
            return False
        return False

    def _per_param_tensor_names(self) -> Set[str]:
        return set(self.tensor_targets) | set(self.aliases) | self.tensor_names

    def _is_per_param(self, expr: cst.BaseExpression) -> bool:
        names = _names(expr)
        if names & (set(self.tensor_targets) | set(self.key_targets) | self.state_dicts | set(self.aliases)):
            return True
        return any(self.hosts[n].per_param for n in names if n in self.hosts)

    def _maybe_tensor(self, expr: cst.BaseExpression) -> bool:
        """Whether a host value may be a 0-d tensor (then it is collected through ``float()``)."""
        if isinstance(expr, (cst.Integer, cst.Float)):
            return False
        if isinstance(expr, cst.Call) and call_name(expr) in ("float", "int", "item", "len"):
            return False
        if isinstance(expr, cst.Call) and (dotted_name(expr.func) or "").startswith("math."):
            return False
        for node in walk(expr):
            if isinstance(node, cst.Name):
                host = self.hosts.get(node.value)
                if host is not None and host.maybe_tensor:
                    return True
                if host is None and node.value not in self.body_bound:
                    return True  # a loop-invariant value of unknown type (an lr may be a tensor)
            if isinstance(node, cst.Subscript):
                root = self._root_key(node) if self._state_entry_kind_safe(node) else None
                if root is not None and root[1] == "host_tensor":
                    return True
        return False

    def _state_entry_kind_safe(self, node: cst.Subscript) -> bool:
        try:
            return self._state_entry_kind(node) is not None
        except NoFix:
            return False

    def _is_invariant(self, expr: cst.BaseExpression) -> bool:
        """The same for every parameter: no per-parameter name (a name the body binds from invariants only,
        like `nesterov = group["nesterov"]`, counts as invariant)."""
        if not self._is_host_expr(expr):
            return False
        for name in _names(expr) & self.body_bound:
            host = self.hosts.get(name)
            if host is None or host.per_param:
                return False
        return True

    def _is_metadata_test(self, test: cst.BaseExpression) -> bool:
        """A test on metadata only: ``p.grad is None``, ``v.dtype.is_floating_point``, ``not p.requires_grad``."""
        if isinstance(test, cst.UnaryOperation):
            return self._is_metadata_test(test.expression)
        if isinstance(test, cst.BooleanOperation):
            return self._is_metadata_test(test.left) and self._is_metadata_test(test.right)
        if isinstance(test, cst.Comparison):
            operands = [test.left] + [c.comparator for c in test.comparisons]
            if all(isinstance(c.operator, (cst.Is, cst.IsNot)) for c in test.comparisons):
                # `grad is None`: identity, not values
                return all(self._metadata_operand(e) or self._is_root_tensor_safe(e) for e in operands)
            return all(self._metadata_operand(e) for e in operands)
        return self._metadata_operand(test)

    def _is_root_tensor_safe(self, expr: cst.BaseExpression) -> bool:
        try:
            found = self._root_key(expr)
        except NoFix:
            return False
        return found is not None and found[1] == "tensor"

    def _metadata_operand(self, expr: cst.BaseExpression) -> bool:
        if isinstance(expr, (cst.Name,)) and expr.value in ("None", "True", "False"):
            return True
        if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString)):
            return True
        if isinstance(expr, cst.Attribute):
            if expr.attr.value == "grad":  # `p.grad is None`
                return self._root_key(expr) is not None
            if expr.attr.value in _METADATA_ATTRS:
                return not (_names(expr) & self.tensor_names)
            return self._is_invariant(expr)
        if isinstance(expr, cst.Call):
            if isinstance(expr.func, cst.Attribute) and call_name(expr) in _METADATA_METHODS:
                return not (_names(expr) & self.tensor_names)
            if call_name(expr) == "isinstance":
                return True
        if isinstance(expr, cst.Name):
            return expr.value in self.key_targets or self._is_invariant(expr) or (
                expr.value in self.hosts and not self.hosts[expr.value].maybe_tensor
            )
        return self._is_invariant(expr)

    # ----- tensor statements: checks before translation -----
    def _check_tensor_statement(self, small: cst.CSTNode) -> None:
        if isinstance(small, cst.If):
            for branch in self._if_branches(small):
                for statement in branch:
                    for inner in self._flatten_one(statement):
                        if self._is_name_to_tensor(inner):
                            self._check_tensor_statement(inner)
                            continue
                        if self._first_pass_kind(inner, index=10**9) is not None:
                            raise NoFix(f"`{self._short(inner)}` runs only when `{self._short(small.test)}` holds")
                        self._check_tensor_statement(inner)
            return
        if isinstance(small, cst.Assign):
            target = small.targets[0].target
            if isinstance(target, cst.Name):
                self.tensor_names.add(target.value)
                if target.value in self.hosts or target.value in self.state_dicts:
                    raise NoFix(f"`{target.value}` holds a scalar and a tensor")
            return

    def _is_name_to_tensor(self, small: cst.CSTNode) -> bool:
        if not (isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name)):
            return False
        found = self._root_key(small.value)
        return found is not None and found[1] == "tensor"

    def _if_branches(self, node: cst.If) -> List[Sequence[cst.BaseStatement]]:
        branches = [node.body.body]
        orelse = node.orelse
        while orelse is not None:
            if isinstance(orelse, cst.Else):
                branches.append(orelse.body.body)
                break
            branches.append(orelse.body.body)
            orelse = orelse.orelse
        return branches

    def _check_names_after_loop(self) -> None:
        read_later = self.ctx.names_read_after_loop
        for name in sorted(self.tensor_names | set(self.tensor_targets)):
            if name in read_later:
                raise NoFix(f"`{name}` is read after the loop, where the rewrite would leave it unbound or changed")

    # ----- naming -----
    def _fresh(self, base: str) -> str:
        candidates = [base]
        if base.endswith("s") and not base.endswith("_list"):
            candidates.append(base[:-1] + "_list")  # `params` is taken (the loop runs over it): `param_list`
        candidates += [f"{base}_{n}" for n in range(2, 100)]
        for name in candidates:
            if name not in self.taken and name not in self.body_bound:
                self.taken.add(name)
                return name
        raise NoFix("no free name for a list")

    def _root_for(self, expr: cst.BaseExpression) -> Root:
        found = self._root_key(expr)
        assert found is not None and found[1] == "tensor"
        key = found[0]
        root = self.roots.get(key)
        if root is not None:
            return root
        alias = next((name for name, target in self.aliases.items() if target == key and name not in self.tensor_names), None)
        if alias is not None:
            root = Root(key, alias, self._fresh(plural(alias)))
        else:
            root = Root(key, self._collect_spelling(key), self._fresh(self._default_list_name(key)))
        root.keyed = key in self.tensor_targets or "[" in key
        self.roots[key] = root
        return root

    def _default_list_name(self, key: str) -> str:
        if key.endswith(".grad"):
            base = key[: -len(".grad")]
            return "grads" if base == self.tensor_targets[0] else plural(base) + "_grads"
        if key.startswith("state:"):
            entry = re.sub(r"\W", "_", key[len("state:"):]).strip("_") or "state_value"
            return plural(entry)
        if "[" in key:
            return plural(key.split("[")[0]) if not key.split("[")[0].endswith("sd") else key.split("[")[0] + "_values"
        return plural(key)

    def _collect_spelling(self, key: str) -> str:
        """What the first pass appends for a root: ``p``, ``p.grad``, ``state["exp_avg"]``, with the ``.data`` /
        ``.detach()`` the loop writes where every use of it writes one and the loop runs with autograd on."""
        spelling = self._root_spelling(key)
        suffixes = self.suffixes.get(key, set())
        if not self.ctx.in_no_grad and len(suffixes) == 1 and "" not in suffixes:
            return spelling + next(iter(suffixes))
        if not self.ctx.in_no_grad and len(suffixes) > 1 and self.updated_roots.intersection({key}):
            raise NoFix(f"`{spelling}` is used both with and without `.data` outside `torch.no_grad()`")
        return spelling

    def _root_spelling(self, key: str) -> str:
        if key.startswith("state:"):
            entry = key[len("state:"):]
            owner = next(iter(sorted(self.state_dicts)), None)
            if owner is None:
                raise NoFix("a state entry is read without a name for the state dict")
            return f"{owner}[{entry!r}]".replace("'", '"')
        return key

    # ----- translation of the tensor statements -----
    def _translate_block(self, statements: List[Tuple[int, cst.CSTNode]]) -> List[cst.BaseStatement]:
        self.suffixes: Dict[str, Set[str]] = {}
        self.updated_roots: Set[str] = set()
        for _, small in statements:
            self._scan_suffixes(small)
        for name in sorted(self.aliases):
            if name in self.tensor_names:  # `d_p = p.grad` rebound later on (`d_p = d_p.add(p, alpha=wd)`)
                list_name = self._fresh(plural(name))
                self.rebound_aliases.append((list_name, name))
                self.env[name] = list_name
        lines: List[cst.BaseStatement] = []
        grouped = self._group_by_line(statements)
        lerp_skip: Set[int] = set()
        for position, (index, small, leading) in enumerate(grouped):
            if index in lerp_skip:
                continue
            nxt = grouped[position + 1] if position + 1 < len(grouped) else None
            lerp = self._match_ema(small, nxt[1] if nxt else None)
            if lerp is not None:
                code, used_next = lerp
                if used_next and nxt is not None:
                    lerp_skip.add(nxt[0])
                    leading = list(leading) + list(nxt[2])
                lines.extend(self._statements([code], leading))
                continue
            lines.extend(self._translate_statement(small, leading))
        return lines

    def _group_by_line(self, statements: List[Tuple[int, cst.CSTNode]]) -> List[Tuple[int, cst.CSTNode, Sequence[cst.EmptyLine]]]:
        """Each tensor statement with the comment lines above its source line (given to the first of a line);
        a comment at the end of that line goes on a line of its own below them, above the rewritten statement."""
        out = []
        seen_lines: Set[int] = set()
        for index, small in statements:
            line = self.ctx.analysis.parent(small)
            leading: Sequence[cst.EmptyLine] = ()
            holder = line if isinstance(line, cst.SimpleStatementLine) else small
            if id(holder) not in seen_lines:
                seen_lines.add(id(holder))
                leading = getattr(holder, "leading_lines", ())
                trailing = getattr(holder, "trailing_whitespace", None)
                if trailing is not None and trailing.comment is not None:
                    leading = [*leading, cst.EmptyLine(comment=trailing.comment)]
            out.append((index, small, leading))
        return out

    def _scan_suffixes(self, node: cst.CSTNode) -> None:
        for sub in walk(node):
            if isinstance(sub, (cst.Attribute, cst.Call, cst.Name, cst.Subscript)):
                parent = self.ctx.analysis.parent(sub)
                if isinstance(parent, cst.Attribute) and parent.attr.value == "data":
                    continue
                if isinstance(parent, cst.Attribute) and parent.attr.value == "detach":
                    continue
                if isinstance(parent, cst.Attribute) and parent.value is sub and parent.attr.value == "grad":
                    continue
                try:
                    found = self._root_key(sub)
                except NoFix:
                    continue
                if found is None or found[1] != "tensor":
                    continue
                base, suffix = self._strip_detach(sub)
                if base is sub and isinstance(sub, cst.Call):
                    continue
                self.suffixes.setdefault(found[0], set()).add(suffix)

    def _statements(self, codes: Sequence[str], leading: Sequence[cst.EmptyLine]) -> List[cst.BaseStatement]:
        out = []
        for i, code in enumerate(codes):
            statement = cst.parse_statement(code + "\n", config=self.module.config_for_parsing)
            if i == 0 and leading:
                statement = statement.with_changes(leading_lines=list(leading))
            out.append(statement)
        return out

    def _translate_statement(self, small: cst.CSTNode, leading: Sequence[cst.EmptyLine]) -> List[cst.BaseStatement]:
        if isinstance(small, cst.If):
            return [self._translate_if(small, leading)]
        codes: List[str] = []
        if isinstance(small, cst.Expr):
            value = small.value
            if not isinstance(value, cst.Call):
                raise NoFix(f"`{self._short(small)}` is not a call")
            self._inplace_chain(value, codes)
        elif isinstance(small, cst.AugAssign):
            op = _AUG_OPS.get(type(small.operator))
            if op is None:
                raise NoFix(f"`{self._short(small)}` uses an operator without a foreach twin")
            target = self._tensor(small.target, codes, need_name=True)
            other = self._value(small.value, codes)
            self._mark_updated(small.target)
            codes.append(self._call(op + "_", target, [other]))
        elif isinstance(small, cst.Assign):
            target = small.targets[0].target
            if not isinstance(target, cst.Name):
                raise NoFix(f"`{self._short(small)}` assigns to something other than a name")
            list_name = self.env.get(target.value) or self._fresh(plural(target.value))
            # a fresh list gets the variable's name, unless the right-hand side still reads the variable
            self.preferred_name = None if target.value in _names(small.value) else list_name
            value = self._value(small.value, codes)
            self.preferred_name = None
            if not isinstance(value, TList):
                raise NoFix(f"`{self._short(small)}` binds a scalar computed from tensors")
            if value.code != list_name:
                codes.append(f"{list_name} = {value.code}")
            self.env[target.value] = list_name
        else:
            raise NoFix(f"`{self._short(small)}` cannot be lifted")
        return self._statements(codes, leading)

    def _translate_if(self, node: cst.If, leading: Sequence[cst.EmptyLine]) -> cst.If:
        def block(statements: Sequence[cst.BaseStatement]) -> cst.IndentedBlock:
            out: List[cst.BaseStatement] = []
            for statement in statements:
                inner_leading = getattr(statement, "leading_lines", ())
                for i, small in enumerate(self._flatten_one(statement)):
                    out.extend(self._translate_statement(small, inner_leading if i == 0 else ()))
            return cst.IndentedBlock(body=out)

        env_before = dict(self.env)
        body = block(node.body.body)
        env_after_body = dict(self.env)
        orelse = None
        if node.orelse is not None:
            self.env = dict(env_before)
            if isinstance(node.orelse, cst.Else):
                orelse = cst.Else(body=block(node.orelse.body.body))
            else:
                orelse = self._translate_if(node.orelse, ())
            if self.env != env_after_body:
                raise NoFix(f"the branches of `if {self._short(node.test)}:` bind different names")
        elif self.env != env_before:
            # a name bound only in the branch must keep its list name after it: only rebinding is fine
            new = set(self.env) - set(env_before)
            if new:
                raise NoFix(f"`{sorted(new)[0]}` is bound only when `{self._short(node.test)}` holds")
        return node.with_changes(body=body, orelse=orelse, leading_lines=list(leading))

    # in-place chains: x.mul_(a).add_(b, alpha=c)
    def _inplace_chain(self, call: cst.Call, codes: List[str]) -> TList:
        func = call.func
        if not isinstance(func, cst.Attribute):
            name = dotted_name(func) or "?"
            raise NoFix(f"calls `{name}`, which the rewrite cannot lift")
        method = func.attr.value
        if not method.endswith("_") or method.startswith("_"):
            raise NoFix(f"`{self._short(call)}` is not an in-place update the rewrite knows")
        receiver = func.value
        if isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute) and receiver.func.attr.value.endswith("_") \
                and not receiver.func.attr.value.startswith("_"):
            target = self._inplace_chain(receiver, codes)
        else:
            target = self._tensor(receiver, codes, need_name=True)
            self._mark_updated(receiver)
        self._emit_inplace(method[:-1], target, call, codes)
        return target

    def _mark_updated(self, expr: cst.BaseExpression) -> None:
        try:
            found = self._root_key(expr)
        except NoFix:
            return
        if found is not None:
            self.updated_roots.add(found[0])

    def _emit_inplace(self, op: str, target: TList, call: cst.Call, codes: List[str]) -> None:
        args = call.args
        if op == "clamp":
            low, high = self._clamp_bounds(args, codes)
            if low is not None:
                codes.append(self._call("clamp_min_", target, [low]))
            if high is not None:
                codes.append(self._call("clamp_max_", target, [high]))
            return
        if op == "lerp":
            end, weight = self._positional(args, 2, ("end", "weight"), call)
            codes.append(self._call("lerp_", target, [self._tensor(end, codes), self._scalar(weight)]))
            return
        values, keywords = self._op_args(op, args, call, codes)
        codes.append(self._call(op + "_", target, values, keywords))

    def _clamp_bounds(self, args: Sequence[cst.Arg], codes: List[str]) -> Tuple[Optional[Scalar], Optional[Scalar]]:
        low = high = None
        for i, arg in enumerate(args):
            name = arg.keyword.value if arg.keyword is not None else ("min" if i == 0 else "max")
            if isinstance(arg.value, cst.Name) and arg.value.value == "None":
                continue
            if name == "min":
                low = self._scalar(arg.value)
            elif name == "max":
                high = self._scalar(arg.value)
            else:
                raise NoFix(f"`clamp` with `{name}=`")
        return low, high

    def _positional(self, args: Sequence[cst.Arg], count: int, names: Tuple[str, ...], call: cst.Call) -> List[cst.BaseExpression]:
        out: List[Optional[cst.BaseExpression]] = [None] * count
        for i, arg in enumerate(args):
            if arg.star:
                raise NoFix(f"`{self._short(call)}` passes `*args`")
            if arg.keyword is None:
                if i >= count:
                    raise NoFix(f"`{self._short(call)}` has too many arguments")
                out[i] = arg.value
            elif arg.keyword.value in names:
                out[names.index(arg.keyword.value)] = arg.value
            else:
                raise NoFix(f"`{self._short(call)}` passes `{arg.keyword.value}=`")
        if any(v is None for v in out):
            raise NoFix(f"`{self._short(call)}` is missing an argument")
        return out  # type: ignore[return-value]

    def _op_args(self, op: str, args: Sequence[cst.Arg], call: cst.Call, codes: List[str]) -> Tuple[List[Value], Dict[str, Scalar]]:
        if op in _UNARY_METHODS:
            if args:
                raise NoFix(f"`{self._short(call)}` passes arguments")
            return [], {}
        if op in _BINARY_METHODS:
            positional = [a for a in args if a.keyword is None]
            keywords = {a.keyword.value: a.value for a in args if a.keyword is not None}
            if len(positional) != 1 or set(keywords) - {"alpha"} or (keywords and op not in ("add", "sub")):
                raise NoFix(f"`{self._short(call)}`: arguments the rewrite does not know")
            other = self._value(positional[0].value, codes)
            if "alpha" in keywords:
                alpha = self._scalar(keywords["alpha"], "alphas")
                if not isinstance(other, TList) or alpha.per_param:
                    raise NoFix(f"`{self._short(call)}`: `alpha=` with a scalar or per-parameter value")
                return [other], {"alpha": alpha}
            return [other], {}
        if op in _TERNARY_METHODS:
            positional = [a for a in args if a.keyword is None]
            keywords = {a.keyword.value: a.value for a in args if a.keyword is not None}
            if len(positional) != 2 or set(keywords) - {"value"}:
                raise NoFix(f"`{self._short(call)}`: arguments the rewrite does not know")
            t1 = self._tensor(positional[0].value, codes)
            t2 = self._tensor(positional[1].value, codes)
            if "value" not in keywords:
                return [t1, t2], {}
            value = self._scalar(keywords["value"], f"{op}_values")
            if value.per_param:
                return [t1, t2, value], {}
            return [t1, t2], {"value": value}
        if op in _SCALAR_ONLY_METHODS:
            if len(args) != 1 or args[0].keyword is not None:
                raise NoFix(f"`{self._short(call)}`: arguments the rewrite does not know")
            other = self._value(args[0].value, codes)
            if isinstance(other, TList) and op == "pow":
                return [other], {}
            if not isinstance(other, Scalar):
                raise NoFix(f"`{self._short(call)}` with a tensor argument")
            return [other], {}
        if op in _TENSOR_ONLY_METHODS:
            if len(args) != 1 or args[0].keyword is not None:
                raise NoFix(f"`{self._short(call)}`: arguments the rewrite does not know")
            return [self._tensor(args[0].value, codes)], {}
        raise NoFix(f"`.{op}()` has no `torch._foreach_*` twin the rewrite knows")

    def _call(self, op: str, target: TList, values: Sequence[Value], keywords: Optional[Dict[str, Scalar]] = None) -> str:
        parts = [target.code] + [v.code for v in values]
        parts += [f"{k}={v.code}" for k, v in (keywords or {}).items()]
        return f"{self.torch}._foreach_{op}({', '.join(parts)})"

    # expressions
    def _tensor(self, expr: cst.BaseExpression, codes: List[str], need_name: bool = False) -> TList:
        value = self._value(expr, codes)
        if not isinstance(value, TList):
            raise NoFix(f"`{self._short(expr)}` is not a per-parameter tensor")
        if need_name and not value.named:
            return TList(self._bind_fresh(value, codes), fresh=True)
        return value

    def _value(self, expr: cst.BaseExpression, codes: List[str]) -> Value:
        # per-parameter roots and names
        try:
            found = self._root_key(expr)
        except NoFix:
            raise
        if found is not None:
            key, kind = found
            if kind == "tensor":
                if isinstance(expr, cst.Name) and expr.value in self.env and self.env[expr.value]:
                    return TList(self.env[expr.value])
                return TList(self._root_for(expr).list_name)
            return self._scalar(expr)
        if isinstance(expr, cst.Name) and expr.value in self.env and self.env[expr.value]:
            return TList(self.env[expr.value])
        if isinstance(expr, cst.Name) and expr.value in self.tensor_names:
            raise NoFix(f"`{expr.value}` is read before the loop body binds it")
        if not self._mentions_tensor(expr):
            return self._scalar(expr)
        if isinstance(expr, cst.BinaryOperation):
            op = _BIN_OPS.get(type(expr.operator))
            if op is None:
                raise NoFix(f"`{self._short(expr)}`: an operator without a foreach twin")
            left = self._value(expr.left, codes)
            right = self._value(expr.right, codes)
            if isinstance(left, TList):
                return self._out_of_place(op, left, [right], {}, codes)
            # scalar on the left: only the commutative ops and scalar ** tensor are exact
            assert isinstance(right, TList)
            if op in ("add", "mul"):
                return self._out_of_place(op, right, [left], {}, codes)
            if op == "pow" and not left.per_param:
                return TList(f"{self.torch}._foreach_pow({left.code}, {right.code})", fresh=True, named=False)
            raise NoFix(f"`{self._short(expr)}`: a scalar {'minus' if op == 'sub' else 'over'} a tensor has no exact foreach form")
        if isinstance(expr, cst.UnaryOperation):
            if isinstance(expr.operator, cst.Minus):
                inner = self._value(expr.expression, codes)
                assert isinstance(inner, TList)
                return self._out_of_place("neg", inner, [], {}, codes)
            raise NoFix(f"`{self._short(expr)}`: a unary operator without a foreach twin")
        if isinstance(expr, cst.Call):
            return self._call_value(expr, codes)
        raise NoFix(f"`{self._short(expr)}` cannot be lifted")

    def _call_value(self, call: cst.Call, codes: List[str]) -> Value:
        func = call.func
        name = call_name(call) or ""
        dotted = dotted_name(func) or ""
        if isinstance(func, cst.Attribute) and dotted.split(".")[0] == self.torch and dotted.count(".") == 1:
            if name not in _TORCH_FUNCTIONS or not call.args:
                raise NoFix(f"calls `{dotted}`, which the rewrite cannot lift")
            first = self._tensor(call.args[0].value, codes)
            rest = call.with_changes(func=cst.Attribute(cst.Name("_"), cst.Name(name)), args=call.args[1:])
            return self._method_value(name, first, rest, codes)
        if not isinstance(func, cst.Attribute):
            raise NoFix(f"calls `{dotted or self._short(func)}`, which the rewrite cannot lift")
        if name.endswith("_") and not name.startswith("_"):  # an in-place chain used as a value
            return self._inplace_chain(call, codes)
        if name == "clone" and not call.args:
            inner = self._tensor(func.value, codes)
            return TList(f"[t.clone() for t in {inner.code}]", fresh=True, named=False)
        if not self._mentions_tensor(func.value):
            raise NoFix(f"calls `{dotted or self._short(func)}`, which the rewrite cannot lift")
        receiver = self._tensor(func.value, codes)
        return self._method_value(name, receiver, call, codes)

    def _method_value(self, name: str, receiver: TList, call: cst.Call, codes: List[str]) -> Value:
        if name == "clamp":
            low, high = self._clamp_bounds(call.args, codes)
            result = receiver
            for op, bound in (("clamp_min", low), ("clamp_max", high)):
                if bound is not None:
                    result = self._out_of_place(op, result, [bound], {}, codes)
            return result
        if name == "lerp":
            end, weight = self._positional(call.args, 2, ("end", "weight"), call)
            return self._out_of_place("lerp", receiver, [self._tensor(end, codes), self._scalar(weight)], {}, codes)
        if name in ("detach", "contiguous") and not call.args and receiver.fresh:
            return receiver
        values, keywords = self._op_args(name, call.args, call, codes)
        return self._out_of_place(name, receiver, values, keywords, codes)

    def _out_of_place(self, op: str, receiver: TList, values: Sequence[Value], keywords: Dict[str, Scalar],
                      codes: List[str]) -> TList:
        """``op`` applied to a list: in place on a fresh unnamed list (after binding it), else a new list."""
        if op in ("add", "sub", "mul", "div", "pow") and values and isinstance(values[0], Scalar) and keywords:
            raise NoFix(f"`{op}` with a scalar and `alpha=`")
        if receiver.fresh and not receiver.named:
            name = self._bind_fresh(receiver, codes)
            codes.append(self._call(op + "_", TList(name), values, keywords))
            return TList(name, fresh=True)
        return TList(self._call(op, receiver, values, keywords), fresh=True, named=False)

    def _bind_fresh(self, value: TList, codes: List[str]) -> str:
        name = self.preferred_name
        self.preferred_name = None
        if name is None:
            name = self._fresh("updates")
        codes.append(f"{name} = {value.code}")
        return name

    def _mentions_tensor(self, expr: cst.BaseExpression) -> bool:
        for node in walk(expr):
            if isinstance(node, cst.Name) and (node.value in self.env and self.env[node.value]):
                return True
            if isinstance(node, (cst.Name, cst.Attribute, cst.Subscript)):
                try:
                    found = self._root_key(node)
                except NoFix:
                    continue
                if found is not None and found[1] == "tensor":
                    return True
        return False

    # scalars
    def _scalar(self, expr: cst.BaseExpression, role: str = "scalars") -> Scalar:
        """A scalar argument: as written where it is the same for every parameter, else a list per parameter
        (``role`` names a list collected for a whole expression, e.g. ``addcdiv_values``)."""
        if self._mentions_tensor(expr):
            raise NoFix(f"`{self._short(expr)}` is used as a scalar but holds a tensor")
        if not self._is_host_expr(expr):
            raise NoFix(f"`{self._short(expr)}` cannot be lifted as a scalar")
        per_param = [n for n in sorted(_names(expr)) if n in self.hosts and self.hosts[n].per_param]
        state_reads = [node for node in walk(expr) if isinstance(node, cst.Subscript) and self._state_entry_kind_safe(node)]
        if state_reads:
            raise NoFix(f"`{self._short(expr)}` reads a state scalar directly; bind it to a name first")
        if expr.lpar:  # an argument needs no parentheses
            expr = expr.with_changes(lpar=[], rpar=[])
        code = _code(self.module, expr).strip()
        if not per_param:
            return Scalar(code)
        if isinstance(expr, cst.Name):
            return Scalar(self._collect_host(expr.value), per_param=True)
        if any(self.hosts[n].maybe_tensor for n in per_param) and not self._floats_at_leaves(expr, set(per_param)):
            # It may compute on 0-d tensors (rounding in float32): evaluate it as written in the first pass and
            # collect float() of it, which is what the op does with a 0-d tensor passed as a scalar.
            if code not in self.collected_exprs:
                self.collected_exprs[code] = self._fresh(role)
            return Scalar(self.collected_exprs[code], per_param=True)
        lists = [self._collect_host(n) for n in per_param]
        if len(per_param) == 1:
            return Scalar(f"[{code} for {per_param[0]} in {lists[0]}]", per_param=True)
        return Scalar(f"[{code} for {', '.join(per_param)} in zip({', '.join(lists)})]", per_param=True)

    def _floats_at_leaves(self, expr: cst.BaseExpression, names: Set[str]) -> bool:
        """Each per-parameter name is turned into a python float before any arithmetic (``-x``,
        ``math.sqrt(x)``, ``float(x)``): then computing on the collected floats gives the same numbers."""
        for node in walk(expr):
            if not (isinstance(node, cst.Name) and node.value in names):
                continue
            parent = self.ctx.analysis.parent(node)
            if isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Minus):
                continue  # negation is exact
            if isinstance(parent, cst.Arg):
                call = self.ctx.analysis.parent(parent)
                if isinstance(call, cst.Call) and len(call.args) == 1 and (
                    (dotted_name(call.func) or "").startswith("math.") or call_name(call) in ("float", "abs")
                ):
                    continue
            return False
        return True

    def _collect_host(self, name: str) -> str:
        if name not in self.collected_hosts:
            self.collected_hosts[name] = self._fresh(plural(name))
        return self.collected_hosts[name]

    # ----- EMA: e.mul_(d).add_(p, alpha=1 - d) and its spellings -> torch._foreach_lerp_ -----
    def _match_ema(self, first: cst.CSTNode, second: Optional[cst.CSTNode]) -> Optional[Tuple[str, bool]]:
        single = self._ema_single(first)
        if single is not None:
            return single, False
        if second is None:
            return None
        decay = self._scale_of(first)
        if decay is None:
            return None
        target, d = decay
        found = self._added_of(second, target)
        if found is None:
            return None
        end, weight = found
        if not _is_one_minus(weight, d, self.module):
            return None
        return self._lerp_code(target, end, weight), True

    def _ema_single(self, node: cst.CSTNode) -> Optional[str]:
        if not (isinstance(node, cst.Expr) and isinstance(node.value, cst.Call)):
            return None
        call = node.value
        if call_name(call) == "add_" and isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Call):
            inner = call.func.value
            if call_name(inner) == "mul_" and len(inner.args) == 1 and inner.args[0].keyword is None:
                target, d = inner.func.value, inner.args[0].value  # type: ignore[union-attr]
                found = self._add_args(call, target)
                if found and _is_one_minus(found[1], d, self.module):
                    return self._lerp_code(target, found[0], found[1])
            return None
        if call_name(call) == "copy_" and len(call.args) == 1 and isinstance(call.func, cst.Attribute):
            target = call.func.value
            parts = self._weighted_sum(call.args[0].value, target)
            if parts is not None:
                return self._lerp_code(target, *parts)
        return None

    def _weighted_sum(self, expr: cst.BaseExpression, target: cst.BaseExpression):
        """``d * e + (1 - d) * p`` (products and terms in either order) -> (p, 1 - d), with e being ``target``."""
        if not (isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add)):
            return None
        first, second = self._product(expr.left), self._product(expr.right)
        if first is None or second is None:
            return None
        (a_tensor, a_scalar), (b_tensor, b_scalar) = first, second
        if self._same_root(b_tensor, target):  # `tau * p + (1 - tau) * e`: the average's term second
            (a_tensor, a_scalar), (b_tensor, b_scalar) = (b_tensor, b_scalar), (a_tensor, a_scalar)
        if not self._same_root(a_tensor, target) or self._same_root(b_tensor, target):
            return None
        # d * e + (1 - d) * p, or (1 - tau) * e + tau * p: lerp(e, p, weight of p)
        if _is_one_minus(b_scalar, a_scalar, self.module) or _is_one_minus(a_scalar, b_scalar, self.module):
            return b_tensor, b_scalar
        return None

    def _product(self, expr: cst.BaseExpression):
        if not (isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply)):
            return None
        for tensor, scalar in ((expr.left, expr.right), (expr.right, expr.left)):
            if self._is_root_tensor(tensor) and not self._mentions_tensor(scalar):
                return tensor, scalar
        return None

    def _is_root_tensor(self, expr: cst.BaseExpression) -> bool:
        try:
            found = self._root_key(expr)
        except NoFix:
            return False
        if found is None or found[1] != "tensor":
            return False
        return not (isinstance(expr, cst.Name) and self.env.get(expr.value))

    def _same_root(self, a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
        try:
            ra, rb = self._root_key(a), self._root_key(b)
        except NoFix:
            return False
        return ra is not None and rb is not None and ra[0] == rb[0]

    def _scale_of(self, node: cst.CSTNode):
        """``e.mul_(d)`` or ``e *= d``: (e, d)."""
        if isinstance(node, cst.Expr) and isinstance(node.value, cst.Call) and call_name(node.value) == "mul_":
            call = node.value
            if len(call.args) == 1 and call.args[0].keyword is None and isinstance(call.func, cst.Attribute):
                target = call.func.value
                if self._is_root_tensor(target) and not self._mentions_tensor(call.args[0].value):
                    return target, call.args[0].value
        if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.MultiplyAssign):
            if self._is_root_tensor(node.target) and not self._mentions_tensor(node.value):
                return node.target, node.value
        return None

    def _added_of(self, node: cst.CSTNode, target: cst.BaseExpression):
        """``e.add_(p, alpha=w)`` / ``e += w * p`` / ``e.add_(w * p)`` on the same ``e``: (p, w)."""
        if isinstance(node, cst.Expr) and isinstance(node.value, cst.Call) and call_name(node.value) == "add_":
            call = node.value
            if isinstance(call.func, cst.Attribute) and self._same_root(call.func.value, target):
                return self._add_args(call, target)
        if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.AddAssign):
            if self._same_root(node.target, target):
                product = self._product(node.value)
                if product is not None and not self._same_root(product[0], target):
                    return product
        return None

    def _add_args(self, call: cst.Call, target: cst.BaseExpression):
        positional = [a for a in call.args if a.keyword is None]
        keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        if len(positional) == 1 and set(keywords) == {"alpha"}:
            end = positional[0].value
            if self._is_root_tensor(end) and not self._same_root(end, target):
                return end, keywords["alpha"]
        if len(positional) == 1 and not keywords:
            product = self._product(positional[0].value)
            if product is not None and not self._same_root(product[0], target):
                return product
        return None

    def _lerp_code(self, target: cst.BaseExpression, end: cst.BaseExpression, weight: cst.BaseExpression) -> Optional[str]:
        # Only an average of the weights themselves (EMA, Polyak): an optimizer's moment (`exp_avg.mul_(b1)
        # .add_(grad, alpha=1 - b1)`) keeps its exact mul_/add_, so the rewrite stays bitwise on the CPU.
        if not (self._is_keyed_root(target) and self._is_keyed_root(end)):
            return None
        weight_value = self._scalar(weight)
        if weight_value.per_param:
            return None
        codes: List[str] = []
        target_list = self._tensor(target, codes, need_name=True)
        self._mark_updated(target)
        end_root = self._root_for(end)
        # lerp_ needs the end in the EMA's dtype, where mul_/add_ promoted it: collect it converted
        target_root = self._root_for(target)
        self.lerp_pairs.append((target_root.key, end_root.key))
        return self._call("lerp_", target_list, [TList(end_root.list_name), weight_value])

    def _is_keyed_root(self, expr: cst.BaseExpression) -> bool:
        found = self._root_key(expr)
        return found is not None and (found[0] in self.tensor_targets or "[" in found[0])

    # ----- assembling the output -----
    def _assemble(self, block_path: List[cst.BaseSuite], first_pass: Set[int],
                  foreach_body: List[cst.BaseStatement]) -> List[cst.BaseStatement]:
        roots = list(self.roots.values())
        for root in roots:
            if root.key in self.tensor_targets and root.collect == root.key:
                # the loop variable itself: `.data`/`.detach()` as the loop writes it (see _collect_spelling)
                root.collect = self._collect_spelling(root.key)
        collected = [(root.list_name, self._collected_expr(root)) for root in roots]
        collected += self.rebound_aliases
        collected += [(list_name, self._host_collect_expr(name)) for name, list_name in self.collected_hosts.items()]
        collected += [(list_name, f"float({code})") for code, list_name in self.collected_exprs.items()]
        list_names = [name for name, _ in collected]
        buckets = self._fresh("buckets")
        # The bucket key: device and dtype of each tensor the loop gets from outside (its targets, other dicts'
        # values); gradients and state tensors follow their parameter. A lerp's end is converted to the
        # average's dtype and must share its device (the loop's add_ needed that too).
        lerp_ends = {end for _, end in self.lerp_pairs}
        key_parts = []
        for target in self.tensor_targets:
            if target not in lerp_ends:
                key_parts += [f"{target}.device", f"{target}.dtype"]
        for root in roots:
            if "[" in root.key and root.key not in lerp_ends:
                key_parts += [f"{root.collect}.device", f"{root.collect}.dtype"]
        if not key_parts:
            raise NoFix("no per-parameter tensor to group by device and dtype")
        key = f"({', '.join(key_parts)})"
        empties = ", ".join("[]" for _ in list_names)
        if len(list_names) == 1:
            bucket_line = f"{list_names[0]} = {buckets}.setdefault({key}, [])"
            loop_target = list_names[0]
        else:
            names = ", ".join(list_names)
            width = 110 - self._indent_width()
            if len(names) + 4 > width:  # one name per line: long tuples read better that way
                names = "(\n" + "".join(f"    {name},\n" for name in list_names) + ")"
            bucket_line = f"{names} = {buckets}.setdefault({key}, ({empties}))"
            if len(bucket_line.splitlines()[-1]) > width:
                bucket_line = f"{names} = {buckets}.setdefault(\n    {key}, ({empties})\n)"
            loop_target = names
        collect_lines = [bucket_line] + [f"{name}.append({expr})" for name, expr in collected]
        collect_statements = [cst.parse_statement(line + "\n", config=self.module.config_for_parsing) for line in collect_lines]

        # the first pass: the loop without its tensor statements, collecting the lists at the end of the update block
        first_pass_block = self._first_pass_block(block_path[-1], first_pass, collect_statements)
        new_body = first_pass_block
        for outer in reversed(block_path[:-1]):
            new_body = self._replace_last(outer, new_body)
        comments = [cst.EmptyLine(comment=cst.Comment(
            f"# Batched with {self.torch}._foreach_*: collect the tensors per (device, dtype), then one call per op."
        ))]
        init = cst.parse_statement(f"{buckets} = {{}}\n", config=self.module.config_for_parsing)
        init = init.with_changes(leading_lines=[*self.loop.leading_lines, *comments])
        first_loop = self.loop.with_changes(body=new_body, leading_lines=[])
        if foreach_body:  # no blank line right under the loop header
            first_statement = foreach_body[0]
            lines = list(getattr(first_statement, "leading_lines", ()))
            while lines and lines[0].comment is None:
                lines.pop(0)
            foreach_body = [first_statement.with_changes(leading_lines=lines), *foreach_body[1:]]
        foreach_loop = cst.parse_statement(
            f"for {loop_target} in {buckets}.values():\n    pass\n", config=self.module.config_for_parsing
        )
        assert isinstance(foreach_loop, cst.For)
        foreach_loop = foreach_loop.with_changes(body=foreach_loop.body.with_changes(body=foreach_body))
        return [init, first_loop, foreach_loop]

    def _collected_expr(self, root: Root) -> str:
        for target_key, end_key in self.lerp_pairs:
            if end_key == root.key and self.roots[end_key].keyed:
                target = self.roots[target_key].collect
                return f"{root.collect}.to({target}.dtype)"
        return root.collect

    def _host_collect_expr(self, name: str) -> str:
        return f"float({name})" if self.hosts[name].maybe_tensor else name

    def _first_pass_block(self, block: cst.BaseSuite, keep: Set[int], collect: List[cst.BaseStatement]) -> cst.IndentedBlock:
        assert isinstance(block, cst.IndentedBlock)
        out: List[cst.BaseStatement] = []
        index = 0
        for statement in block.body:
            if isinstance(statement, cst.SimpleStatementLine):
                smalls = list(statement.body)
                kept = [s for i, s in enumerate(smalls, start=index) if i in keep]
                index += len(smalls)
                if not kept:
                    continue
                if len(kept) != len(smalls):
                    kept = [s.with_changes(semicolon=cst.MaybeSentinel.DEFAULT) if i == len(kept) - 1 else s
                            for i, s in enumerate(kept)]
                    statement = statement.with_changes(body=kept)
                out.append(statement)
            else:
                if index in keep:
                    out.append(statement)
                index += 1
        return block.with_changes(body=[*out, *collect])

    def _replace_last(self, block: cst.BaseSuite, inner: cst.IndentedBlock) -> cst.IndentedBlock:
        assert isinstance(block, cst.IndentedBlock)
        last = block.body[-1]
        assert isinstance(last, cst.If)
        return block.with_changes(body=[*block.body[:-1], last.with_changes(body=inner)])

    def _indent_width(self) -> int:
        """About how deep the loop body is indented (for line lengths only)."""
        depth = sum(1 for a in self.ctx.analysis.ancestors(self.loop) if isinstance(a, cst.IndentedBlock)) + 1
        return depth * len(self.module.default_indent)

    def _short(self, node: cst.CSTNode) -> str:
        text = " ".join(_code(self.module, node).split())
        return text if len(text) <= 60 else text[:57] + "..."


def rewrite_loop(loop: cst.For, ctx: LoopContext) -> List[cst.BaseStatement]:
    """The statements that replace ``loop``; raises ``NoFix`` with the reason where it cannot be lifted."""
    return LoopRewriter(loop, ctx).rewrite()


def loop_context(analysis: FileAnalysis, loop: cst.For, torch_version: Tuple[int, int]) -> Optional[LoopContext]:
    """Where the loop stands: its torch alias, autograd mode and the names around it. None without ``import torch``."""
    torch_name = analysis.module_alias("torch")
    if torch_name is None:
        return None
    scope = analysis.scope_of(loop)
    taken: Set[str] = set()
    for node in walk(scope):
        if isinstance(node, cst.Name):
            taken.add(node.value)
    taken |= _module_level_names(analysis)  # globals the function may read
    return LoopContext(analysis, torch_name, _in_no_grad(analysis, loop), taken, _read_after(analysis, loop, scope),
                       torch_version)


def _module_level_names(analysis: FileAnalysis) -> Set[str]:
    """Names written outside every def and lambda (their names, parameters and decorators are inside),
    computed once per file: every loop of the file asks."""
    names = getattr(analysis, "_module_level_names", None)
    if names is None:
        names = set()
        stack: List[cst.CSTNode] = [analysis.module]
        while stack:
            node = stack.pop()
            if isinstance(node, cst.Name):
                names.add(node.value)
            elif node in analysis.function_info:
                continue  # everything below a def or lambda is in that function
            stack.extend(iter_children(node))
        analysis._module_level_names = names  # type: ignore[attr-defined]
    return names


def _read_after(analysis: FileAnalysis, loop: cst.For, scope: cst.CSTNode) -> Set[str]:
    """Names whose first use after ``loop`` is a read: after it in the function, or anywhere in an enclosing
    loop (the next iteration). A name stored first (``for p in ...`` again) is not read from this loop."""
    outer = next((info.node for info in analysis.enclosing_loops(loop)), None)
    region = outer if outer is not None else scope
    seen: Set[str] = set()
    read: Set[str] = set()
    after = [n for n in walk(region) if isinstance(n, cst.Name) and not analysis.contains(loop, n)]
    if outer is None:
        after = [n for n in after if analysis.comes_before(loop, n)]
    else:  # from the loop to the end of the enclosing loop, then from its start (the next iteration)
        after = [n for n in after if analysis.comes_before(loop, n)] + [n for n in after if analysis.comes_before(n, loop)]
    for node in after:
        parent = analysis.parent(node)
        if (isinstance(parent, cst.Attribute) and parent.attr is node) or (isinstance(parent, cst.Arg) and parent.keyword is node):
            continue  # `x.update`, `f(lr=...)`: not the name
        if node.value in seen:
            continue
        seen.add(node.value)
        if not _is_store(analysis, node):
            read.add(node.value)
    return read


def _is_store(analysis: FileAnalysis, name: cst.Name) -> bool:
    parent = analysis.parent(name)
    while isinstance(parent, (cst.Element, cst.Tuple, cst.List, cst.StarredElement)):
        parent = analysis.parent(parent)
    if isinstance(parent, cst.AssignTarget):
        return True
    if isinstance(parent, (cst.For, cst.CompFor)) and parent.target is not None:
        return analysis.contains(parent.target, name)
    return False


def _in_no_grad(analysis: FileAnalysis, node: cst.CSTNode) -> bool:
    for ancestor in analysis.ancestors(node):
        if isinstance(ancestor, cst.With):
            for item in ancestor.items:
                expr = item.item.func if isinstance(item.item, cst.Call) else item.item
                if (analysis.qualified_name(expr) or "") in ("torch.no_grad", "torch.inference_mode"):
                    return True
        if isinstance(ancestor, cst.FunctionDef):
            for decorator in ancestor.decorators:
                expr = decorator.decorator
                expr = expr.func if isinstance(expr, cst.Call) else expr
                if (analysis.qualified_name(expr) or "") in ("torch.no_grad", "torch.inference_mode"):
                    return True
            return False
    return False
