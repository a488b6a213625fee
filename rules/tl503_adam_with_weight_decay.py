"""TL503: L2 regularisation through Adam's moments instead of decoupled weight decay."""

from __future__ import annotations

import ast
from typing import Optional

import libcst as cst

from torchlint.analysis import FileAnalysis, is_literal, keyword_arg
from torchlint.config import Settings
from torchlint.rule import Rule, RuleContext
from torchlint.script_facts import ast_facts

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
    required_patterns = (r"Adam",)  # the ast stage finds the calls that pass a decay
    text_gate = (("Adam",),)

    has_ast_prefilter = True

    @classmethod
    def may_fire_in_ast(cls, tree: ast.Module, text: str, settings: Settings) -> bool:
        for info in ast_facts(tree).calls_by_name.get("Adam", ()):
            node = info.node
            if any(k.arg is None or k.arg == "decoupled_weight_decay" for k in node.keywords):
                continue
            if (len(node.args) > _WEIGHT_DECAY_POSITION or any(k.arg == "weight_decay" for k in node.keywords)
                    or (node.args and isinstance(node.args[0], (ast.List, ast.Tuple)))):
                return True
        return False

    def check(self, ctx: RuleContext) -> None:
        a = ctx.analysis
        for call in a.calls_by_name.get("Adam", ()):
            if not a.is_qualified(call.func, *_ADAM):
                continue
            if keyword_arg(call, "decoupled_weight_decay") is not None or any(arg.star == "**" for arg in call.args):
                continue
            decay = _weight_decay(a, call)
            if decay is not None:
                ctx.report(decay)


def _weight_decay(a: FileAnalysis, call: cst.Call) -> Optional[cst.CSTNode]:
    """The non-zero weight decay given to this Adam call, or None."""
    keyword = keyword_arg(call, "weight_decay")
    positional = [arg for arg in call.args if arg.keyword is None]
    if any(arg.star for arg in positional):
        return None
    if keyword is None and len(positional) > _WEIGHT_DECAY_POSITION:
        keyword = positional[_WEIGHT_DECAY_POSITION]
    if keyword is not None:
        return keyword if _is_nonzero_constant(a, keyword.value) else None
    groups = positional[0].value if positional else None
    if isinstance(groups, (cst.List, cst.Tuple)):
        for element in groups.elements:
            if isinstance(element.value, cst.Dict):
                for entry in element.value.elements:
                    if (isinstance(entry, cst.DictElement) and isinstance(entry.key, cst.SimpleString)
                            and entry.key.evaluated_value == "weight_decay" and _is_nonzero_constant(a, entry.value)):
                        return entry
    return None


def _is_nonzero_constant(a: FileAnalysis, expr: cst.BaseExpression, depth: int = 0) -> bool:
    """A non-zero number (a literal or arithmetic on literals), or a name bound once to one (``decay = 1e-4``)."""
    value = _number(expr)
    if value is not None:
        return value != 0.0
    if isinstance(expr, cst.Name) and depth < 3 and not is_literal(expr, "None"):
        value = a.single_value(expr.value, a.scope_of(expr))
        return value is not None and _is_nonzero_constant(a, value, depth + 1)
    return False


def _number(expr: cst.BaseExpression) -> Optional[float]:
    """The value of a number literal or of arithmetic on literals (``2.5 * 1e-5``), else None."""
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        inner = _number(expr.expression)
        return None if inner is None else (-inner if isinstance(expr.operator, cst.Minus) else inner)
    if isinstance(expr, (cst.Integer, cst.Float)):
        try:
            return float(expr.value.replace("_", ""))
        except ValueError:
            return None
    if isinstance(expr, cst.BinaryOperation):
        left, right = _number(expr.left), _number(expr.right)
        if left is None or right is None:
            return None
        if isinstance(expr.operator, cst.Multiply):
            return left * right
        if isinstance(expr.operator, cst.Divide) and right != 0:
            return left / right
        if isinstance(expr.operator, cst.Add):
            return left + right
        if isinstance(expr.operator, cst.Subtract):
            return left - right
    return None
