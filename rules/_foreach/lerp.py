"""An exponential moving average of weights, in any of its spellings, as one ``torch._foreach_lerp_``.

``e.mul_(d).add_(p, alpha=1 - d)``, the same in two statements (``e.mul_(d)`` / ``e *= d``, then
``e.add_(p, alpha=1 - d)`` / ``e += (1 - d) * p`` / ``e.add_((1 - d) * p)``), and ``e.copy_(d * e + (1 - d) * p)``
(terms and products in either order) all become ``torch._foreach_lerp_(ema_values, params, 1 - d)``, which rounds
differently from the loop in the last bit. Only averages of the loop's own tensors (its targets, another dict's
values) are matched: an optimizer's moment keeps its exact ``mul_``/``add_``, so those rewrites stay bitwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Tuple

import libcst as cst

from torchlint.fix.analysis import call_name

from .syntax import code, split_args
from .values import TList

if TYPE_CHECKING:
    from .ops import OpMapper


def is_one_minus(weight: cst.BaseExpression, decay: cst.BaseExpression, module: cst.Module) -> bool:
    """``1 - d`` / ``1. - d`` / ``(1.0 - d)`` for the decay ``d`` written the same way."""
    if not (isinstance(weight, cst.BinaryOperation) and isinstance(weight.operator, cst.Subtract)):
        return False
    left = weight.left
    if not (isinstance(left, (cst.Integer, cst.Float)) and float(left.value) == 1.0):
        return False
    return code(module, weight.right).strip("() ") == code(module, decay).strip("() ")


def match_ema(ops: OpMapper, first: cst.CSTNode, second: Optional[cst.CSTNode]) -> Optional[Tuple[str, bool]]:
    """The ``lerp_`` call for ``first`` alone, or with ``second`` (then True: both are consumed), else None."""
    single = _ema_single(ops, first)
    if single is not None:
        return single, False
    if second is None:
        return None
    decay = _scale_of(ops, first)
    if decay is None:
        return None
    target, d = decay
    found = _added_of(ops, second, target)
    if found is None:
        return None
    end, weight = found
    if not is_one_minus(weight, d, ops.module):
        return None
    call = _lerp_code(ops, target, end, weight)
    return None if call is None else (call, True)  # None: a moment, not an average; its mul_/add_ stay


def _ema_single(ops: OpMapper, node: cst.CSTNode) -> Optional[str]:
    if not (isinstance(node, cst.Expr) and isinstance(node.value, cst.Call)):
        return None
    call = node.value
    if call_name(call) == "add_" and isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Call):
        inner = call.func.value
        if call_name(inner) == "mul_" and len(inner.args) == 1 and inner.args[0].keyword is None:
            target, d = inner.func.value, inner.args[0].value  # type: ignore[union-attr]
            found = _add_args(ops, call, target)
            if found and is_one_minus(found[1], d, ops.module):
                return _lerp_code(ops, target, found[0], found[1])
        return None
    if call_name(call) == "copy_" and len(call.args) == 1 and isinstance(call.func, cst.Attribute):
        target = call.func.value
        parts = _weighted_sum(ops, call.args[0].value, target)
        if parts is not None:
            return _lerp_code(ops, target, *parts)
    return None


def _weighted_sum(ops: OpMapper, expr: cst.BaseExpression, target: cst.BaseExpression):
    """``d * e + (1 - d) * p`` (products and terms in either order) -> (p, 1 - d), with e being ``target``."""
    if not (isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add)):
        return None
    first, second = _product(ops, expr.left), _product(ops, expr.right)
    if first is None or second is None:
        return None
    (a_tensor, a_scalar), (b_tensor, b_scalar) = first, second
    if _same_root(ops, b_tensor, target):  # `tau * p + (1 - tau) * e`: the average's term second
        (a_tensor, a_scalar), (b_tensor, b_scalar) = (b_tensor, b_scalar), (a_tensor, a_scalar)
    if not _same_root(ops, a_tensor, target) or _same_root(ops, b_tensor, target):
        return None
    # d * e + (1 - d) * p, or (1 - tau) * e + tau * p: lerp(e, p, weight of p)
    if is_one_minus(b_scalar, a_scalar, ops.module) or is_one_minus(a_scalar, b_scalar, ops.module):
        return b_tensor, b_scalar
    return None


def _product(ops: OpMapper, expr: cst.BaseExpression):
    if not (isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply)):
        return None
    for tensor, scalar in ((expr.left, expr.right), (expr.right, expr.left)):
        if _is_root_tensor(ops, tensor) and not ops.mentions_tensor(scalar):
            return tensor, scalar
    return None


def _is_root_tensor(ops: OpMapper, expr: cst.BaseExpression) -> bool:
    if not ops.body.is_tensor_root(expr):
        return False
    return not (isinstance(expr, cst.Name) and ops.env.get(expr.value))


def _same_root(ops: OpMapper, a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
    ra, rb = ops.body.known_root(a), ops.body.known_root(b)
    return ra is not None and rb is not None and ra[0] == rb[0]


def _scale_of(ops: OpMapper, node: cst.CSTNode):
    """``e.mul_(d)`` or ``e *= d``: (e, d)."""
    if isinstance(node, cst.Expr) and isinstance(node.value, cst.Call) and call_name(node.value) == "mul_":
        call = node.value
        if len(call.args) == 1 and call.args[0].keyword is None and isinstance(call.func, cst.Attribute):
            target = call.func.value
            if _is_root_tensor(ops, target) and not ops.mentions_tensor(call.args[0].value):
                return target, call.args[0].value
    if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.MultiplyAssign):
        if _is_root_tensor(ops, node.target) and not ops.mentions_tensor(node.value):
            return node.target, node.value
    return None


def _added_of(ops: OpMapper, node: cst.CSTNode, target: cst.BaseExpression):
    """``e.add_(p, alpha=w)`` / ``e += w * p`` / ``e.add_(w * p)`` on the same ``e``: (p, w)."""
    if isinstance(node, cst.Expr) and isinstance(node.value, cst.Call) and call_name(node.value) == "add_":
        call = node.value
        if isinstance(call.func, cst.Attribute) and _same_root(ops, call.func.value, target):
            return _add_args(ops, call, target)
    if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.AddAssign):
        if _same_root(ops, node.target, target):
            product = _product(ops, node.value)
            if product is not None and not _same_root(ops, product[0], target):
                return product
    return None


def _add_args(ops: OpMapper, call: cst.Call, target: cst.BaseExpression):
    positional, keywords = split_args(call.args)
    if len(positional) == 1 and set(keywords) == {"alpha"}:
        end = positional[0].value
        if _is_root_tensor(ops, end) and not _same_root(ops, end, target):
            return end, keywords["alpha"]
    if len(positional) == 1 and not keywords:
        product = _product(ops, positional[0].value)
        if product is not None and not _same_root(ops, product[0], target):
            return product
    return None


def _lerp_code(ops: OpMapper, target: cst.BaseExpression, end: cst.BaseExpression, weight: cst.BaseExpression) -> Optional[str]:
    # Only an average of the weights themselves (EMA, Polyak): an optimizer's moment (`exp_avg.mul_(b1)
    # .add_(grad, alpha=1 - b1)`) keeps its exact mul_/add_, so the rewrite stays bitwise on the CPU.
    if not (_is_keyed_root(ops, target) and _is_keyed_root(ops, end)):
        return None
    weight_value = ops.scalar(weight)
    if weight_value.per_param:
        return None
    codes: List[str] = []
    target_list = ops.tensor(target, codes, need_name=True)
    ops.mark_updated(target)
    end_root = ops.root_for(end)
    # lerp_ needs the end in the EMA's dtype, where mul_/add_ promoted it: collect it converted
    target_root = ops.root_for(target)
    ops.lerp_pairs.append((target_root.key, end_root.key))
    return ops.call("lerp_", target_list, [TList(end_root.list_name), weight_value])


def _is_keyed_root(ops: OpMapper, expr: cst.BaseExpression) -> bool:
    found = ops.body.root_key(expr)
    return found is not None and (found[0] in ops.body.tensor_targets or "[" in found[0])
