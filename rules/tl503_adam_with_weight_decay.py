"""TL503: L2 regularisation through Adam's moments instead of decoupled weight decay."""

from __future__ import annotations

import ast
from typing import Optional, Union

from torchlint.facts.index import AstIndex, AstScope, Extent
from torchlint.rule import IndexContext, Rule

_ADAM = {"torch.optim.Adam", "torch.optim.adam.Adam"}
_WEIGHT_DECAY_POSITION = 4  # Adam(params, lr, betas, eps, weight_decay, ...)


class AdamWithWeightDecay(Rule):
    """## What it does
    Flags `torch.optim.Adam(..., weight_decay=<non-zero>)`: a literal, a name bound once to a literal, the
    fifth positional argument, or a `"weight_decay"` entry of a parameter-group dict written in the call.

    Silent where the value is zero, comes from a configuration (`weight_decay=args.wd`, `cfg.WD`: the rule
    cannot tell whether it is zero), where `decoupled_weight_decay=` is passed, where the arguments come
    through `**kwargs`, and in tests.

    This rule is **off by default** (opt in with `--extend-select TL503` or `select = ["ALL"]`): it concerns
    the training method, not the speed of a step, and L2 through Adam can be a deliberate choice.

    ## Why is this slow?
    Adam's `weight_decay` adds `weight_decay * param` to the gradient before the moments, so the decay is
    divided by the same adaptive denominator as the gradient: weights with large gradients are barely
    regularised, weights with small ones strongly. This is L2 regularisation, not the decoupled weight
    decay of AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization"), which shrinks every weight
    by `lr * weight_decay` directly. With Adam, a decay strong enough to regularise also distorts the update,
    so models usually train to a worse loss for the same number of steps (slower convergence), and the
    usual decay values (0.01 to 0.1 for AdamW) cannot be carried over.

    ## Example
    ```python
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4, weight_decay=1e-4)
    ```

    ## Use instead
    ```python
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=1e-2)  # retune the decay
    ```

    ## Fix safety
    No fix: switching to AdamW changes the optimisation method, not only its speed. The same
    `weight_decay` value means something else under AdamW (it multiplies `lr` directly instead of entering
    the gradient), so it usually needs retuning (AdamW's values are typically 10 to 100 times larger than
    Adam's L2 values), and results change. A checkpoint of Adam's state loads into AdamW (same state keys).

    ## PyTorch versions
    `torch.optim.AdamW` exists since PyTorch 1.2. In recent releases AdamW is implemented as
    `Adam(..., decoupled_weight_decay=True)`, which is accepted as another way to ask for it; the rule is
    silent where `decoupled_weight_decay=` is passed.
    """

    code = "TL503"
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)
    name = "adam-with-weight-decay"
    message = (
        "`Adam(weight_decay=...)` is L2 regularisation scaled by Adam's adaptive denominator, not decoupled "
        "weight decay; use `torch.optim.AdamW` (this changes the method: retune the decay value)"
    )
    summary = "Adam with weight_decay (L2 through the moments) instead of AdamW"
    default_enabled = False
    required_patterns = (r"Adam",)  # every finding is an `Adam(...)` call
    text_gate = (("Adam",),)

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        for info in index.calls_to(*_ADAM):  # however imported: `from torch.optim import Adam as A`
            call = info.node
            if any(k.arg is None or k.arg == "decoupled_weight_decay" for k in call.keywords):
                continue
            decay = _weight_decay(index, call)
            if decay is not None:
                ctx.report(decay)


def _weight_decay(index: AstIndex, call: ast.Call) -> Optional[Union[ast.AST, Extent]]:
    """The non-zero weight decay given to this Adam call (the argument, or a group's dict entry), or None."""
    if any(isinstance(arg, ast.Starred) for arg in call.args):
        return None
    scope = index.scope_of(call)
    keyword = next((k for k in call.keywords if k.arg == "weight_decay"), None)
    if keyword is not None:
        return keyword if _is_nonzero_constant(index, keyword.value, scope) else None
    if len(call.args) > _WEIGHT_DECAY_POSITION:
        value = call.args[_WEIGHT_DECAY_POSITION]
        return value if _is_nonzero_constant(index, value, scope) else None
    groups = call.args[0] if call.args else None
    if isinstance(groups, (ast.List, ast.Tuple)):
        for element in groups.elts:
            if isinstance(element, ast.Dict):
                for key, value in zip(element.keys, element.values):
                    if (isinstance(key, ast.Constant) and key.value == "weight_decay"
                            and _is_nonzero_constant(index, value, scope)):
                        return Extent(key, value)
    return None


def _is_nonzero_constant(index: AstIndex, expr: ast.expr, scope: AstScope, depth: int = 0) -> bool:
    """A non-zero number (a literal or arithmetic on literals), or a name bound once to one (``decay = 1e-4``)."""
    value = _number(expr)
    if value is not None:
        return value != 0.0
    if isinstance(expr, ast.Name) and depth < 3:
        bound, where = index.single_value_and_scope(expr.id, scope)
        return bound is not None and _is_nonzero_constant(index, bound, where, depth + 1)
    return False


_ARITHMETIC = {ast.Mult: lambda a, b: a * b, ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b}


def _number(expr: ast.expr) -> Optional[float]:
    """The value of a number literal or of arithmetic on literals (``2.5 * 1e-5``), else None."""
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.USub, ast.UAdd)):
        inner = _number(expr.operand)
        return None if inner is None else (-inner if isinstance(expr.op, ast.USub) else inner)
    if isinstance(expr, ast.Constant) and type(expr.value) in (int, float):
        return float(expr.value)
    if isinstance(expr, ast.BinOp):
        left, right = _number(expr.left), _number(expr.right)
        if left is None or right is None:
            return None
        if isinstance(expr.op, ast.Div):
            return left / right if right != 0 else None
        operation = _ARITHMETIC.get(type(expr.op))
        return operation(left, right) if operation is not None else None
    return None
