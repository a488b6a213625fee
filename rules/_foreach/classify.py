"""Read a per-parameter loop's body as one iteration's straight-line program, and sort its statements.

Each value the body computes is one of:

* a per-parameter **tensor** (a *root*: the loop variable, its ``.grad``, a tensor of ``self.state[p]``, a
  value of another dict indexed by the loop key, or a name bound to one of these): it becomes a list;
* a per-parameter **scalar** on the host (``state["step"] += 1``, bias corrections computed from it): its
  statement stays in the first pass and its value is collected into a list (``float()`` where it may be a
  0-d tensor), which the ops take as a scalar list;
* a **loop-invariant** scalar (a name the body does not bind, ``group["lr"]``): it stays as written.

Each statement gets a kind: the first pass keeps a "filter" (``if p.grad is None: continue``), the "state"
binding (``state = self.state[p]``), the lazy "init" of the state (or "reads_values" where it copies a tensor's
values), an "alias" of a root, and "host" / "host_in_place" scalar code; a statement of kind None is a tensor
statement, which ``ops`` maps to ``torch._foreach_*`` calls. Anything that cannot be sorted exactly raises
``NoFix`` with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint.fix.analysis import call_name, dotted_name, walk

from .context import LoopContext
from .nofix import NoFix
from .syntax import (
    block_statements, branch_statements, code, is_exit, names_read, short, small_statements, string_key,
    subscript_index,
)

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


@dataclass
class HostName:
    per_param: bool
    maybe_tensor: bool  # may hold a 0-d tensor: collected through float()
    bound_at: int  # index of the statement that binds it


@dataclass
class Split:
    """The loop body sorted: what stays in the first pass and what the foreach section computes."""

    block_path: List[cst.BaseSuite]  # the loop body, then each guard block down to the one with the updates
    statements: List[cst.CSTNode]  # the small statements of that last block
    kinds: List[Optional[str]]  # each statement's first-pass kind; None: a tensor statement
    tensor_statements: List[Tuple[int, cst.CSTNode]]  # (index into statements, statement), in order

    @property
    def first_pass(self) -> Set[int]:
        return {index for index, kind in enumerate(self.kinds) if kind is not None}


class LoopBody:
    """What one iteration of the loop binds and reads; ``classify`` fills it in and sorts the statements."""

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
        self.hosts: Dict[str, HostName] = {}
        self.body_bound: Set[str] = set()  # every name the loop body binds
        self.tensor_names: Set[str] = set()  # names the tensor statements bind (temporaries)

    def classify(self) -> Split:
        """Read the header and the body; raises ``NoFix`` where the loop cannot be lifted exactly."""
        self._read_header()
        self._collect_bound_names(self.loop.body)
        prelude, block_path = self._find_update_block()
        statements = block_statements(block_path[-1])
        self._check_float_guard(self._guard_tests(prelude + list(block_path[-1].body), block_path))
        kinds, tensor_statements = self._classify(prelude, statements)
        if not tensor_statements:
            raise NoFix("no tensor statement to lift")
        self._check_names_after_loop()
        return Split(block_path, statements, kinds, tensor_statements)

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
        if "state_dict" not in code(self.module, self.loop.iter) and not self.ctx.over_state_dict:
            return
        if not any("is_floating_point" in code(self.module, test) for test in tests):
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
                                 for statement in statements[:-1] for small in small_statements(statement))
            if (
                isinstance(last, cst.If) and last.orelse is None and not updates_before
                and self._is_metadata_test(last.test)
                and not self._is_init_test(last.test)
                and not (len(last.body.body) == 1 and is_exit(last.body.body[0]))
            ):
                prelude.extend(statements[:-1])
                path.append(last.body)
                body = last.body
                continue
            return prelude, path

    def _guard_tests(self, statements: Sequence[cst.CSTNode], path: Sequence[cst.BaseSuite]) -> List[cst.BaseExpression]:
        tests = []
        for statement in statements:
            if isinstance(statement, cst.If) and len(statement.body.body) == 1 and is_exit(statement.body.body[0]):
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

    # ----- classification: first pass or foreach section -----
    def _classify(
        self, prelude: List[cst.BaseStatement], statements: List[cst.CSTNode]
    ) -> Tuple[List[Optional[str]], List[Tuple[int, cst.CSTNode]]]:
        """Each statement's first-pass kind (None for a tensor statement), and the tensor statements in order."""
        for statement in prelude:
            for small in small_statements(statement):
                kind = self._first_pass_kind(small, index=-1)
                if kind is None:
                    raise NoFix(f"`{short(self.module, small)}` comes before a guard the updates depend on")
        kinds: List[Optional[str]] = []
        tensor_statements: List[Tuple[int, cst.CSTNode]] = []
        for index, small in enumerate(statements):
            kind = self._first_pass_kind(small, index)
            kinds.append(kind)
            if kind is not None:
                if kind == "reads_values" and tensor_statements:
                    raise NoFix(f"`{short(self.module, small)}` reads a tensor after the loop body has updated it")
                if kind == "host_in_place" and tensor_statements:
                    # a 0-d tensor changed in place: a scalar collected from it would see the later value
                    raise NoFix(f"`{short(self.module, small)}` changes a scalar tensor after the updates that use it")
                if kind == "filter" and tensor_statements:
                    # the updates above it run for every parameter, the ones below only for those it lets through
                    raise NoFix(f"`{short(self.module, small)}` skips parameters after some of their updates")
                continue
            self._check_tensor_statement(small)
            tensor_statements.append((index, small))
        # a host value rebound after a tensor statement used it would be collected with its later value
        for index, small in tensor_statements:
            for name in sorted(names_read(small)):  # the reason names the first: the same in every run
                host = self.hosts.get(name)
                if host is not None and host.bound_at > index:
                    raise NoFix(f"`{name}` is changed after `{short(self.module, small)}` uses it")
        return kinds, tensor_statements

    def _first_pass_kind(self, small: cst.CSTNode, index: int) -> Optional[str]:
        """How ``small`` stays in the first pass: "filter", "state", "init", "alias", "host"; None: a tensor op."""
        if isinstance(small, cst.If):
            if len(small.body.body) == 1 and is_exit(small.body.body[0]) and small.orelse is None:
                computed = sorted(names_read(small.test) & self.tensor_names)
                if computed:
                    raise NoFix(f"`if {short(self.module, small.test)}:` tests `{computed[0]}`, a tensor the loop computes")
                if not self._is_metadata_test(small.test):
                    raise NoFix(f"`if {short(self.module, small.test)}:` depends on tensor values")
                return "filter"
            if self._is_init_test(small.test):
                return "reads_values" if self._read_init(small) else "init"
            if self._is_invariant(small.test):
                if self._only_host_statements(small, index):
                    return "host"  # `if corrected: scale = lr ** 2 / max_lr`: scalars only, first pass
                return None  # an `if` on a loop-invariant condition: lifted around the foreach calls
            if self._is_metadata_test(small.test):
                raise NoFix(f"`if {short(self.module, small.test)}:` takes a different branch for some parameters")
            raise NoFix(f"`if {short(self.module, small.test)}:` depends on tensor values (data-dependent control flow)")
        if isinstance(small, (cst.Pass,)):
            return "host"
        if isinstance(small, cst.Expr):
            return None
        if isinstance(small, cst.Assign):
            if len(small.targets) != 1:
                raise NoFix(f"`{short(self.module, small)}` assigns several targets")
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
                        raise NoFix(f"`{short(self.module, small)}` binds tensors and scalars together")
                    raise NoFix(f"`{short(self.module, small)}` computes several tensors in one statement")
                return "alias"
            if isinstance(target, cst.Subscript) and self._state_entry_kind(target) in ("host_tensor", "number"):
                if self.is_host_expr(value):
                    return "host"
            if isinstance(target, (cst.Tuple, cst.List)) and self.is_host_expr(value):
                for element in target.elements:
                    if isinstance(element.value, cst.Name):
                        self._bind_host(element.value.value, index, self._is_per_param(value), self._maybe_tensor(value))
                    else:
                        raise NoFix(f"`{short(self.module, small)}` unpacks into something other than names")
                return "host"
            if isinstance(target, cst.Attribute) and target.attr.value == "data":
                raise NoFix("the loop assigns `.data` (a new tensor per parameter); `.copy_()` could be lifted")
            if isinstance(target, cst.Subscript) and self._state_entry_kind(target) == "tensor":
                raise NoFix(f"`{short(self.module, target)} = ...` rebinds a state tensor per parameter")
            return None
        if isinstance(small, cst.AugAssign):
            target = small.target
            if isinstance(target, cst.Name) and target.value in self.hosts:
                if not self.is_host_expr(small.value):
                    raise NoFix(f"`{short(self.module, small)}` mixes a host scalar with a tensor")
                self.hosts[target.value].bound_at = index
                return "host_in_place" if self.hosts[target.value].maybe_tensor else "host"
            kind = self._state_entry_kind(target) if isinstance(target, cst.Subscript) else None
            if kind in ("host_tensor", "number"):
                if not self.is_host_expr(small.value):
                    raise NoFix(f"`{short(self.module, small)}` mixes a host scalar with a tensor")
                return "host_in_place" if kind == "host_tensor" else "host"
            return None
        if isinstance(small, cst.Raise):
            return "filter"
        raise NoFix(f"`{short(self.module, small)}` cannot be lifted")

    def _only_host_statements(self, node: cst.If, index: int) -> bool:
        """Every branch binds host scalars only (checked without binding anything: a tensor branch is
        classified later, statement by statement)."""
        for small in branch_statements(node):
            if isinstance(small, cst.Assign) and len(small.targets) == 1:
                target = small.targets[0].target
                if isinstance(target, cst.Name) and target.value not in self.aliases \
                        and target.value not in self.tensor_names and self.root_key(small.value) is None \
                        and self.is_host_expr(small.value):
                    continue
            return False
        for small in branch_statements(node):
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
        root = self.root_key(value)
        if root is not None:
            key, kind = root
            if kind == "tensor":
                if name in self.hosts:
                    raise NoFix(f"`{name}` is bound twice")
                self.aliases[name] = key
                return "alias"
            self._bind_host(name, index, per_param=True, maybe_tensor=kind == "host_tensor")
            return "host"
        if self.is_host_expr(value):
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

    def _is_init_test(self, test: cst.BaseExpression) -> bool:
        text = " ".join(code(self.module, test).split())
        if not _INIT_TEST.match(text):
            return False
        return bool(names_read(test) & self.state_dicts)

    def _read_init(self, node: cst.If) -> bool:
        """Type each state entry the lazy initialisation creates; it runs unchanged in the first pass.

        True where it reads tensor values (``p.clone()``), not only their shape (``torch.zeros_like(p)``)."""
        reads_values = False
        if node.orelse is not None:
            raise NoFix("the state initialisation has an `else:` branch: the first step differs per parameter")
        for statement in node.body.body:
            for small in small_statements(statement):
                if not isinstance(small, cst.Assign) or len(small.targets) != 1:
                    raise NoFix(f"the state initialisation does more than assign entries: `{short(self.module, small)}`")
                target = small.targets[0].target
                if not (isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name)
                        and target.value.value in self.state_dicts):
                    raise NoFix(f"the state initialisation assigns `{short(self.module, target)}`")
                key = string_key(subscript_index(target) or cst.Name("x"))
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
                if name in ("zeros", "ones") and value.args and code(self.module, value.args[0].value) in ("()", "[]"):
                    return "host_tensor"
                return "unknown"
            if dotted.split(".")[0] == self.torch and name in _LIKE_PARAM_FUNCS and value.args:
                return "tensor" if self._mentions_targets(value.args[0].value) else "unknown"
            if isinstance(value.func, cst.Attribute) and name in _NEW_LIKE_METHODS:
                return "tensor" if self._mentions_targets(value.func.value) else "unknown"
        return "unknown"

    def _mentions_targets(self, expr: cst.BaseExpression) -> bool:
        return bool(names_read(expr) & (set(self.tensor_targets) | set(self.aliases)))

    def _is_state_access(self, expr: cst.BaseExpression) -> bool:
        """``self.state[p]`` (any owner's ``.state``) indexed by a tensor loop target."""
        if not isinstance(expr, cst.Subscript):
            return False
        owner = expr.value
        index = subscript_index(expr)
        return (isinstance(owner, cst.Attribute) and owner.attr.value == "state" and isinstance(index, cst.Name)
                and index.value in self.tensor_targets)

    def _state_entry_kind(self, expr: cst.BaseExpression) -> Optional[str]:
        if not isinstance(expr, cst.Subscript):
            return None
        owner = expr.value
        if not ((isinstance(owner, cst.Name) and owner.value in self.state_dicts) or self._is_state_access(owner)):
            return None
        key = string_key(subscript_index(expr) or cst.Name("x"))
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
    def root_key(self, expr: cst.BaseExpression) -> Optional[Tuple[str, str]]:
        """(canonical key, kind) for an access to a per-parameter value, else None. Kinds: "tensor",
        "host_tensor", "number" (the last two only for state entries)."""
        base, _suffix = self.strip_detach(expr)
        if isinstance(base, cst.Name):
            if base.value in self.tensor_targets:
                return base.value, "tensor"
            if base.value in self.aliases:
                return self.aliases[base.value], "tensor"
            return None
        if isinstance(base, cst.Attribute) and base.attr.value == "grad":
            inner = self.root_key(base.value)
            if inner is not None and inner[1] == "tensor" and inner[0] in self.tensor_targets:
                return inner[0] + ".grad", "tensor"
            return None
        if isinstance(base, cst.Subscript):
            kind = self._state_entry_kind(base)
            if kind is not None:
                key = string_key(subscript_index(base) or cst.Name("x"))
                return f"state:{key}", kind
            owner, index = base.value, subscript_index(base)
            if (isinstance(owner, cst.Name) and owner.value not in self.body_bound and isinstance(index, cst.Name)
                    and index.value in self.key_targets):
                return f"{owner.value}[{index.value}]", "tensor"
        return None

    def known_root(self, expr: cst.BaseExpression) -> Optional[Tuple[str, str]]:
        """``root_key``, or None where it cannot tell (a state entry the initialisation does not type)."""
        try:
            return self.root_key(expr)
        except NoFix:
            return None

    def is_tensor_root(self, expr: cst.BaseExpression) -> bool:
        found = self.known_root(expr)
        return found is not None and found[1] == "tensor"

    def strip_detach(self, expr: cst.BaseExpression) -> Tuple[cst.BaseExpression, str]:
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
    def is_host_expr(self, expr: cst.BaseExpression) -> bool:
        """True when ``expr`` computes a scalar without reading tensor values (metadata reads are fine)."""
        if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString)):
            return True
        if isinstance(expr, cst.Name):
            if expr.value in self.tensor_targets or expr.value in self.aliases or expr.value in self.tensor_names:
                return False
            return expr.value not in self.state_dicts
        if isinstance(expr, cst.BinaryOperation):
            return self.is_host_expr(expr.left) and self.is_host_expr(expr.right)
        if isinstance(expr, cst.UnaryOperation):
            return self.is_host_expr(expr.expression)
        if isinstance(expr, (cst.Tuple, cst.List)):
            return all(self.is_host_expr(e.value) for e in expr.elements)
        if isinstance(expr, cst.Comparison):
            return self.is_host_expr(expr.left) and all(self.is_host_expr(c.comparator) for c in expr.comparisons)
        if isinstance(expr, cst.BooleanOperation):
            return self.is_host_expr(expr.left) and self.is_host_expr(expr.right)
        if isinstance(expr, cst.IfExp):
            return all(self.is_host_expr(e) for e in (expr.test, expr.body, expr.orelse))
        if isinstance(expr, cst.Subscript):
            root = self.root_key(expr)
            if root is not None:
                return root[1] != "tensor"
            return not (names_read(expr) & self._per_param_tensor_names())
        if isinstance(expr, cst.Attribute):
            if expr.attr.value in _METADATA_ATTRS and expr.attr.value != "grad":
                return not (names_read(expr) & self.tensor_names)  # a temporary does not exist in the first pass
            return not (names_read(expr) & self._per_param_tensor_names())
        if isinstance(expr, cst.Call):
            name = call_name(expr)
            dotted = dotted_name(expr.func) or ""
            args_host = all(self.is_host_expr(a.value) for a in expr.args)
            if isinstance(expr.func, cst.Name) and name in _PURE_HOST_CALLS:
                return args_host or (name == "len" and True)
            if dotted.startswith(_PURE_HOST_MODULES):
                return args_host
            if isinstance(expr.func, cst.Attribute) and name in _METADATA_METHODS:
                return not (names_read(expr) & self.tensor_names)
            if isinstance(expr.func, cst.Attribute) and name == "item":
                root = self.root_key(expr.func.value)
                return root is not None and root[1] == "host_tensor" or (
                    isinstance(expr.func.value, cst.Name) and expr.func.value.value in self.hosts
                )
            if not (names_read(expr) & self.body_bound):
                return True  # a call on loop-invariant values only (`group["lr"]`, `self.lr_at(t)`)
            return False
        return False

    def _per_param_tensor_names(self) -> Set[str]:
        return set(self.tensor_targets) | set(self.aliases) | self.tensor_names

    def _is_per_param(self, expr: cst.BaseExpression) -> bool:
        names = names_read(expr)
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
                root = self.root_key(node) if self.is_state_entry(node) else None
                if root is not None and root[1] == "host_tensor":
                    return True
        return False

    def is_state_entry(self, node: cst.Subscript) -> bool:
        try:
            return self._state_entry_kind(node) is not None
        except NoFix:
            return False

    def _is_invariant(self, expr: cst.BaseExpression) -> bool:
        """The same for every parameter: no per-parameter name (a name the body binds from invariants only,
        like `nesterov = group["nesterov"]`, counts as invariant)."""
        if not self.is_host_expr(expr):
            return False
        for name in names_read(expr) & self.body_bound:
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
                return all(self._metadata_operand(e) or self.is_tensor_root(e) for e in operands)
            return all(self._metadata_operand(e) for e in operands)
        return self._metadata_operand(test)


    def _metadata_operand(self, expr: cst.BaseExpression) -> bool:
        if isinstance(expr, (cst.Name,)) and expr.value in ("None", "True", "False"):
            return True
        if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString)):
            return True
        if isinstance(expr, cst.Attribute):
            if expr.attr.value == "grad":  # `p.grad is None`
                return self.root_key(expr) is not None
            if expr.attr.value in _METADATA_ATTRS:
                return not (names_read(expr) & self.tensor_names)
            return self._is_invariant(expr)
        if isinstance(expr, cst.Call):
            if isinstance(expr.func, cst.Attribute) and call_name(expr) in _METADATA_METHODS:
                return not (names_read(expr) & self.tensor_names)
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
            for inner in branch_statements(small):
                if self._is_name_to_tensor(inner):
                    self._check_tensor_statement(inner)
                    continue
                if self._first_pass_kind(inner, index=10**9) is not None:
                    raise NoFix(f"`{short(self.module, inner)}` runs only when `{short(self.module, small.test)}` holds")
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
        found = self.root_key(small.value)
        return found is not None and found[1] == "tensor"

    def _check_names_after_loop(self) -> None:
        read_later = self.ctx.names_read_after_loop
        for name in sorted(self.tensor_names | set(self.tensor_targets)):
            if name in read_later:
                raise NoFix(f"`{name}` is read after the loop, where the rewrite would leave it unbound or changed")

