"""Map each tensor statement of the loop body to ``torch._foreach_*`` calls on whole lists.

Every op applies the same ATen op to each tensor as the loop did, so on the CPU the result is bitwise the same:

* an in-place method (``x.mul_(b)``, a chained ``.add_(...)``, ``x -= y``) becomes ``torch._foreach_<op>_``;
* an out-of-place expression (``a * b``, ``torch.sqrt(v)``, ``g.add(p, alpha=wd)``) becomes
  ``torch._foreach_<op>``, bound to the list named after the variable it was bound to;
* an ``if`` on a loop-invariant condition stays around the calls;
* an EMA becomes one ``torch._foreach_lerp_`` (see ``lerp``).

Scalars that are the same for every parameter are passed as written; per-parameter scalars as lists the first
pass collects. Anything without an exact foreach form raises ``NoFix`` with the reason.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint.fix.analysis import call_name, dotted_name, walk

from .classify import LoopBody
from .lerp import match_ema
from .nofix import NoFix
from .syntax import code, names_read, short, small_statements, split_args
from .values import Names, Root, Scalar, TList, Value, plural

_BINARY_METHODS = {"add", "sub", "mul", "div"}  # tensor or scalar other; alpha only with a tensor (add/sub)
_UNARY_METHODS = {"sqrt", "abs", "neg", "exp", "log", "sign", "reciprocal", "sigmoid", "tanh", "rsqrt", "zero"}
_TERNARY_METHODS = {"addcmul", "addcdiv"}  # (t1, t2, value=)
_SCALAR_ONLY_METHODS = {"clamp_min", "clamp_max", "pow"}
_TENSOR_ONLY_METHODS = {"maximum", "minimum", "copy"}
_AUG_OPS = {cst.AddAssign: "add", cst.SubtractAssign: "sub", cst.MultiplyAssign: "mul", cst.DivideAssign: "div"}
_BIN_OPS = {cst.Add: "add", cst.Subtract: "sub", cst.Multiply: "mul", cst.Divide: "div", cst.Power: "pow"}
# torch.<fn>(tensor, ...) spelled as a function
_TORCH_FUNCTIONS = _BINARY_METHODS | _UNARY_METHODS | _TERNARY_METHODS | {"lerp", "maximum", "minimum", "pow", "clamp"}


class OpMapper:
    """The foreach section of one loop: the lists it reads and binds, and the calls that compute them."""

    def __init__(self, body: LoopBody, names: Names) -> None:
        self.body = body
        self.names = names
        self.ctx = body.ctx
        self.module = body.module
        self.torch = body.torch
        self.roots: Dict[str, Root] = {}
        self.collected_hosts: Dict[str, str] = {}  # host name -> list name
        self.collected_exprs: Dict[str, str] = {}  # per-parameter scalar expression -> list of float() of it
        self.env: Dict[str, str] = {}  # body name -> list name in the foreach section
        self.preferred_name: Optional[str] = None  # the name the next fresh list is bound to
        self.lerp_pairs: List[Tuple[str, str]] = []  # (EMA root, averaged root) of each lerp
        self.rebound_aliases: List[Tuple[str, str]] = []  # (list name, alias) collected as their own list
        self.suffixes: Dict[str, Set[str]] = {}  # root key -> the `.data` / `.detach()` spellings the loop uses
        self.updated_roots: Set[str] = set()

    # ----- the lists: one per root -----
    def root_for(self, expr: cst.BaseExpression) -> Root:
        found = self.body.root_key(expr)
        assert found is not None and found[1] == "tensor"
        key = found[0]
        root = self.roots.get(key)
        if root is not None:
            return root
        alias = next((name for name, target in self.body.aliases.items() if target == key and name not in self.body.tensor_names), None)
        if alias is not None:
            root = Root(key, alias, self.names.fresh(plural(alias)))
        else:
            root = Root(key, self.collect_spelling(key), self.names.fresh(self._default_list_name(key)))
        root.keyed = key in self.body.tensor_targets or "[" in key
        self.roots[key] = root
        return root

    def _default_list_name(self, key: str) -> str:
        if key.endswith(".grad"):
            base = key[: -len(".grad")]
            return "grads" if base == self.body.tensor_targets[0] else plural(base) + "_grads"
        if key.startswith("state:"):
            entry = re.sub(r"\W", "_", key[len("state:"):]).strip("_") or "state_value"
            return plural(entry)
        if "[" in key:
            return plural(key.split("[")[0]) if not key.split("[")[0].endswith("sd") else key.split("[")[0] + "_values"
        return plural(key)

    def collect_spelling(self, key: str) -> str:
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
            owner = next(iter(sorted(self.body.state_dicts)), None)
            if owner is None:
                raise NoFix("a state entry is read without a name for the state dict")
            return f"{owner}[{entry!r}]".replace("'", '"')
        return key

    # ----- translation of the tensor statements -----
    def translate(self, statements: List[Tuple[int, cst.CSTNode]]) -> List[cst.BaseStatement]:
        """The foreach section's statements for the tensor statements, in their order."""
        for _, small in statements:
            self._scan_suffixes(small)
        for name in sorted(self.body.aliases):
            if name in self.body.tensor_names:  # `d_p = p.grad` rebound later on (`d_p = d_p.add(p, alpha=wd)`)
                list_name = self.names.fresh(plural(name))
                self.rebound_aliases.append((list_name, name))
                self.env[name] = list_name
        lines: List[cst.BaseStatement] = []
        grouped = self._group_by_line(statements)
        lerp_skip: Set[int] = set()
        for position, (index, small, leading) in enumerate(grouped):
            if index in lerp_skip:
                continue
            nxt = grouped[position + 1] if position + 1 < len(grouped) else None
            lerp = match_ema(self, small, nxt[1] if nxt else None)
            if lerp is not None:
                lerp_call, used_next = lerp
                if used_next and nxt is not None:
                    lerp_skip.add(nxt[0])
                    leading = list(leading) + list(nxt[2])
                lines.extend(self._statements([lerp_call], leading))
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
                found = self.body.known_root(sub)
                if found is None or found[1] != "tensor":
                    continue
                base, suffix = self.body.strip_detach(sub)
                if base is sub and isinstance(sub, cst.Call):
                    continue
                self.suffixes.setdefault(found[0], set()).add(suffix)

    def _statements(self, codes: Sequence[str], leading: Sequence[cst.EmptyLine]) -> List[cst.BaseStatement]:
        out = []
        for i, line in enumerate(codes):
            statement = cst.parse_statement(line + "\n", config=self.module.config_for_parsing)
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
                raise NoFix(f"`{short(self.module, small)}` is not a call")
            self._inplace_chain(value, codes)
        elif isinstance(small, cst.AugAssign):
            op = _AUG_OPS.get(type(small.operator))
            if op is None:
                raise NoFix(f"`{short(self.module, small)}` uses an operator without a foreach twin")
            target = self.tensor(small.target, codes, need_name=True)
            other = self._value(small.value, codes)
            self.mark_updated(small.target)
            codes.append(self.call(op + "_", target, [other]))
        elif isinstance(small, cst.Assign):
            target = small.targets[0].target
            if not isinstance(target, cst.Name):
                raise NoFix(f"`{short(self.module, small)}` assigns to something other than a name")
            list_name = self.env.get(target.value) or self.names.fresh(plural(target.value))
            # a fresh list gets the variable's name, unless the right-hand side still reads the variable
            self.preferred_name = None if target.value in names_read(small.value) else list_name
            value = self._value(small.value, codes)
            self.preferred_name = None
            if not isinstance(value, TList):
                raise NoFix(f"`{short(self.module, small)}` binds a scalar computed from tensors")
            if value.code != list_name:
                codes.append(f"{list_name} = {value.code}")
            self.env[target.value] = list_name
        else:
            raise NoFix(f"`{short(self.module, small)}` cannot be lifted")
        return self._statements(codes, leading)

    def _translate_if(self, node: cst.If, leading: Sequence[cst.EmptyLine]) -> cst.If:
        def block(statements: Sequence[cst.BaseStatement]) -> cst.IndentedBlock:
            out: List[cst.BaseStatement] = []
            for statement in statements:
                inner_leading = getattr(statement, "leading_lines", ())
                for i, small in enumerate(small_statements(statement)):
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
                raise NoFix(f"the branches of `if {short(self.module, node.test)}:` bind different names")
        elif self.env != env_before:
            # a name bound only in the branch must keep its list name after it: only rebinding is fine
            new = set(self.env) - set(env_before)
            if new:
                raise NoFix(f"`{sorted(new)[0]}` is bound only when `{short(self.module, node.test)}` holds")
        return node.with_changes(body=body, orelse=orelse, leading_lines=list(leading))

    # in-place chains: x.mul_(a).add_(b, alpha=c)
    def _inplace_chain(self, call: cst.Call, codes: List[str]) -> TList:
        func = call.func
        if not isinstance(func, cst.Attribute):
            name = dotted_name(func) or "?"
            raise NoFix(f"calls `{name}`, which the rewrite cannot lift")
        method = func.attr.value
        if not method.endswith("_") or method.startswith("_"):
            raise NoFix(f"`{short(self.module, call)}` is not an in-place update the rewrite knows")
        receiver = func.value
        if isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute) and receiver.func.attr.value.endswith("_") \
                and not receiver.func.attr.value.startswith("_"):
            target = self._inplace_chain(receiver, codes)
        else:
            target = self.tensor(receiver, codes, need_name=True)
            self.mark_updated(receiver)
        self._emit_inplace(method[:-1], target, call, codes)
        return target

    def mark_updated(self, expr: cst.BaseExpression) -> None:
        found = self.body.known_root(expr)
        if found is not None:
            self.updated_roots.add(found[0])

    def _emit_inplace(self, op: str, target: TList, call: cst.Call, codes: List[str]) -> None:
        args = call.args
        if op == "clamp":
            low, high = self._clamp_bounds(args, codes)
            if low is not None:
                codes.append(self.call("clamp_min_", target, [low]))
            if high is not None:
                codes.append(self.call("clamp_max_", target, [high]))
            return
        if op == "lerp":
            end, weight = self._positional(args, 2, ("end", "weight"), call)
            codes.append(self.call("lerp_", target, [self.tensor(end, codes), self.scalar(weight)]))
            return
        values, keywords = self._op_args(op, args, call, codes)
        codes.append(self.call(op + "_", target, values, keywords))

    def _clamp_bounds(self, args: Sequence[cst.Arg], codes: List[str]) -> Tuple[Optional[Scalar], Optional[Scalar]]:
        low = high = None
        for i, arg in enumerate(args):
            name = arg.keyword.value if arg.keyword is not None else ("min" if i == 0 else "max")
            if isinstance(arg.value, cst.Name) and arg.value.value == "None":
                continue
            if name == "min":
                low = self.scalar(arg.value)
            elif name == "max":
                high = self.scalar(arg.value)
            else:
                raise NoFix(f"`clamp` with `{name}=`")
        return low, high

    def _positional(self, args: Sequence[cst.Arg], count: int, names: Tuple[str, ...], call: cst.Call) -> List[cst.BaseExpression]:
        out: List[Optional[cst.BaseExpression]] = [None] * count
        for i, arg in enumerate(args):
            if arg.star:
                raise NoFix(f"`{short(self.module, call)}` passes `*args`")
            if arg.keyword is None:
                if i >= count:
                    raise NoFix(f"`{short(self.module, call)}` has too many arguments")
                out[i] = arg.value
            elif arg.keyword.value in names:
                out[names.index(arg.keyword.value)] = arg.value
            else:
                raise NoFix(f"`{short(self.module, call)}` passes `{arg.keyword.value}=`")
        if any(v is None for v in out):
            raise NoFix(f"`{short(self.module, call)}` is missing an argument")
        return out  # type: ignore[return-value]

    def _op_args(self, op: str, args: Sequence[cst.Arg], call: cst.Call, codes: List[str]) -> Tuple[List[Value], Dict[str, Scalar]]:
        if op in _UNARY_METHODS:
            if args:
                raise NoFix(f"`{short(self.module, call)}` passes arguments")
            return [], {}
        if op in _BINARY_METHODS:
            positional, keywords = split_args(args)
            if len(positional) != 1 or set(keywords) - {"alpha"} or (keywords and op not in ("add", "sub")):
                raise NoFix(f"`{short(self.module, call)}`: arguments the rewrite does not know")
            other = self._value(positional[0].value, codes)
            if "alpha" in keywords:
                alpha = self.scalar(keywords["alpha"], "alphas")
                if not isinstance(other, TList) or alpha.per_param:
                    raise NoFix(f"`{short(self.module, call)}`: `alpha=` with a scalar or per-parameter value")
                return [other], {"alpha": alpha}
            return [other], {}
        if op in _TERNARY_METHODS:
            positional, keywords = split_args(args)
            if len(positional) != 2 or set(keywords) - {"value"}:
                raise NoFix(f"`{short(self.module, call)}`: arguments the rewrite does not know")
            t1 = self.tensor(positional[0].value, codes)
            t2 = self.tensor(positional[1].value, codes)
            if "value" not in keywords:
                return [t1, t2], {}
            value = self.scalar(keywords["value"], f"{op}_values")
            if value.per_param:
                return [t1, t2, value], {}
            return [t1, t2], {"value": value}
        if op in _SCALAR_ONLY_METHODS:
            if len(args) != 1 or args[0].keyword is not None:
                raise NoFix(f"`{short(self.module, call)}`: arguments the rewrite does not know")
            other = self._value(args[0].value, codes)
            if isinstance(other, TList) and op == "pow":
                return [other], {}
            if not isinstance(other, Scalar):
                raise NoFix(f"`{short(self.module, call)}` with a tensor argument")
            return [other], {}
        if op in _TENSOR_ONLY_METHODS:
            if len(args) != 1 or args[0].keyword is not None:
                raise NoFix(f"`{short(self.module, call)}`: arguments the rewrite does not know")
            return [self.tensor(args[0].value, codes)], {}
        raise NoFix(f"`.{op}()` has no `torch._foreach_*` twin the rewrite knows")

    def call(self, op: str, target: TList, values: Sequence[Value], keywords: Optional[Dict[str, Scalar]] = None) -> str:
        parts = [target.code] + [v.code for v in values]
        parts += [f"{k}={v.code}" for k, v in (keywords or {}).items()]
        return f"{self.torch}._foreach_{op}({', '.join(parts)})"

    # expressions
    def tensor(self, expr: cst.BaseExpression, codes: List[str], need_name: bool = False) -> TList:
        value = self._value(expr, codes)
        if not isinstance(value, TList):
            raise NoFix(f"`{short(self.module, expr)}` is not a per-parameter tensor")
        if need_name and not value.named:
            return TList(self._bind_fresh(value, codes), fresh=True)
        return value

    def _value(self, expr: cst.BaseExpression, codes: List[str]) -> Value:
        # per-parameter roots and names
        found = self.body.root_key(expr)
        if found is not None:
            key, kind = found
            if kind == "tensor":
                if isinstance(expr, cst.Name) and expr.value in self.env and self.env[expr.value]:
                    return TList(self.env[expr.value])
                return TList(self.root_for(expr).list_name)
            return self.scalar(expr)
        if isinstance(expr, cst.Name) and expr.value in self.env and self.env[expr.value]:
            return TList(self.env[expr.value])
        if isinstance(expr, cst.Name) and expr.value in self.body.tensor_names:
            raise NoFix(f"`{expr.value}` is read before the loop body binds it")
        if not self.mentions_tensor(expr):
            return self.scalar(expr)
        if isinstance(expr, cst.BinaryOperation):
            op = _BIN_OPS.get(type(expr.operator))
            if op is None:
                raise NoFix(f"`{short(self.module, expr)}`: an operator without a foreach twin")
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
            raise NoFix(f"`{short(self.module, expr)}`: a scalar {'minus' if op == 'sub' else 'over'} a tensor has no exact foreach form")
        if isinstance(expr, cst.UnaryOperation):
            if isinstance(expr.operator, cst.Minus):
                inner = self._value(expr.expression, codes)
                assert isinstance(inner, TList)
                return self._out_of_place("neg", inner, [], {}, codes)
            raise NoFix(f"`{short(self.module, expr)}`: a unary operator without a foreach twin")
        if isinstance(expr, cst.Call):
            return self._call_value(expr, codes)
        raise NoFix(f"`{short(self.module, expr)}` cannot be lifted")

    def _call_value(self, call: cst.Call, codes: List[str]) -> Value:
        func = call.func
        name = call_name(call) or ""
        dotted = dotted_name(func) or ""
        if isinstance(func, cst.Attribute) and dotted.split(".")[0] == self.torch and dotted.count(".") == 1:
            if name not in _TORCH_FUNCTIONS or not call.args:
                raise NoFix(f"calls `{dotted}`, which the rewrite cannot lift")
            first = self.tensor(call.args[0].value, codes)
            rest = call.with_changes(func=cst.Attribute(cst.Name("_"), cst.Name(name)), args=call.args[1:])
            return self._method_value(name, first, rest, codes)
        if not isinstance(func, cst.Attribute):
            raise NoFix(f"calls `{dotted or short(self.module, func)}`, which the rewrite cannot lift")
        if name.endswith("_") and not name.startswith("_"):  # an in-place chain used as a value
            return self._inplace_chain(call, codes)
        if name == "clone" and not call.args:
            inner = self.tensor(func.value, codes)
            return TList(f"[t.clone() for t in {inner.code}]", fresh=True, named=False)
        if not self.mentions_tensor(func.value):
            raise NoFix(f"calls `{dotted or short(self.module, func)}`, which the rewrite cannot lift")
        receiver = self.tensor(func.value, codes)
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
            return self._out_of_place("lerp", receiver, [self.tensor(end, codes), self.scalar(weight)], {}, codes)
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
            codes.append(self.call(op + "_", TList(name), values, keywords))
            return TList(name, fresh=True)
        return TList(self.call(op, receiver, values, keywords), fresh=True, named=False)

    def _bind_fresh(self, value: TList, codes: List[str]) -> str:
        name = self.preferred_name
        self.preferred_name = None
        if name is None:
            name = self.names.fresh("updates")
        codes.append(f"{name} = {value.code}")
        return name

    def mentions_tensor(self, expr: cst.BaseExpression) -> bool:
        for node in walk(expr):
            if isinstance(node, cst.Name) and (node.value in self.env and self.env[node.value]):
                return True
            if isinstance(node, (cst.Name, cst.Attribute, cst.Subscript)) and self.body.is_tensor_root(node):
                return True
        return False

    # scalars
    def scalar(self, expr: cst.BaseExpression, role: str = "scalars") -> Scalar:
        """A scalar argument: as written where it is the same for every parameter, else a list per parameter
        (``role`` names a list collected for a whole expression, e.g. ``addcdiv_values``)."""
        if self.mentions_tensor(expr):
            raise NoFix(f"`{short(self.module, expr)}` is used as a scalar but holds a tensor")
        if not self.body.is_host_expr(expr):
            raise NoFix(f"`{short(self.module, expr)}` cannot be lifted as a scalar")
        per_param = [n for n in sorted(names_read(expr)) if n in self.body.hosts and self.body.hosts[n].per_param]
        state_reads = [node for node in walk(expr) if isinstance(node, cst.Subscript) and self.body.is_state_entry(node)]
        if state_reads:
            raise NoFix(f"`{short(self.module, expr)}` reads a state scalar directly; bind it to a name first")
        if expr.lpar:  # an argument needs no parentheses
            expr = expr.with_changes(lpar=[], rpar=[])
        text = code(self.module, expr).strip()
        if not per_param:
            return Scalar(text)
        if isinstance(expr, cst.Name):
            return Scalar(self._collect_host(expr.value), per_param=True)
        if any(self.body.hosts[n].maybe_tensor for n in per_param) and not self._floats_at_leaves(expr, set(per_param)):
            # It may compute on 0-d tensors (rounding in float32): evaluate it as written in the first pass and
            # collect float() of it, which is what the op does with a 0-d tensor passed as a scalar.
            if text not in self.collected_exprs:
                self.collected_exprs[text] = self.names.fresh(role)
            return Scalar(self.collected_exprs[text], per_param=True)
        lists = [self._collect_host(n) for n in per_param]
        if len(per_param) == 1:
            return Scalar(f"[{text} for {per_param[0]} in {lists[0]}]", per_param=True)
        return Scalar(f"[{text} for {', '.join(per_param)} in zip({', '.join(lists)})]", per_param=True)

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
            self.collected_hosts[name] = self.names.fresh(plural(name))
        return self.collected_hosts[name]
