"""TL501's rewrite, step two (rules/_foreach/ops.py, lerp.py): which ``torch._foreach_*`` call each tensor
statement maps to, and the statements it refuses with the reason the finding repeats.

Each case is one small loop body under ``for p in params:`` in a ``@torch.no_grad()`` function whose
parameters include ``params`` (so the parameters' list is ``param_list``), ``lr``, ``b1`` and ``wd``.
"""

from __future__ import annotations

from typing import Tuple

import pytest

from foreach_support import body_of, render

from torchlint.rules._foreach import NoFix
from torchlint.rules._foreach.ops import OpMapper
from torchlint.rules._foreach.values import Names


def _mapped(body: str, header: str = "for p in params:") -> Tuple[OpMapper, str]:
    """The mapper after translating the body, and the foreach section's code."""
    loop_body = body_of(body, header)
    split = loop_body.classify()
    ops = OpMapper(loop_body, Names(loop_body.ctx.taken_names, loop_body.body_bound))
    return ops, render(ops.translate(split.tensor_statements))


@pytest.mark.parametrize(
    "body, calls",
    [
        ("p.mul_(0.5)", "torch._foreach_mul_(param_list, 0.5)"),
        ("p.add_(p.grad, alpha=-lr)", "torch._foreach_add_(param_list, grads, alpha=-lr)"),
        ("p.copy_(p.grad)", "torch._foreach_copy_(param_list, grads)"),
        ("p.lerp_(p.grad, 0.1)", "torch._foreach_lerp_(param_list, grads, 0.1)"),
        # augmented assignment, out-of-place operands inline
        ("p -= lr * p.grad", "torch._foreach_sub_(param_list, torch._foreach_mul(grads, lr))"),
        ("p.sub_(-p.grad)", "torch._foreach_sub_(param_list, torch._foreach_neg(grads))"),
        ("p.mul_(2 ** p.grad)", "torch._foreach_mul_(param_list, torch._foreach_pow(2, grads))"),
        # a chain runs link by link; clamp is two ops, an absent bound none
        ("p.mul_(0.5).add_(p.grad)", "torch._foreach_mul_(param_list, 0.5)\ntorch._foreach_add_(param_list, grads)"),
        ("p.grad.clamp_(-1, 1)", "torch._foreach_clamp_min_(grads, -1)\ntorch._foreach_clamp_max_(grads, 1)"),
        ("p.grad.clamp_(max=1)", "torch._foreach_clamp_max_(grads, 1)"),
        # a temporary used as an operand is bound first (and then updated in place)
        ("p.addcdiv_(p.grad, p.grad.abs().add(1e-8), value=-lr)",
         "updates = torch._foreach_abs(grads)\ntorch._foreach_add_(updates, 1e-8)\n"
         "torch._foreach_addcdiv_(param_list, grads, updates, value=-lr)"),
        # a name bound to an out-of-place result becomes a list named after it
        ("d_p = p.grad.add(p, alpha=wd)\np.add_(d_p, alpha=-lr)",
         "d_ps = torch._foreach_add(grads, param_list, alpha=wd)\ntorch._foreach_add_(param_list, d_ps, alpha=-lr)"),
        ("v = torch.sqrt(p.grad)\np.sub_(v)", "values = torch._foreach_sqrt(grads)\ntorch._foreach_sub_(param_list, values)"),
        ("u = p.grad.sign()\np.sub_(u * lr)",
         "us = torch._foreach_sign(grads)\ntorch._foreach_sub_(param_list, torch._foreach_mul(us, lr))"),
        # an `if` on a loop-invariant condition stays around its calls
        ("if lr > 0:\n    p.add_(p.grad, alpha=-lr)\np.mul_(0.5)",
         "if lr > 0:\n    torch._foreach_add_(param_list, grads, alpha=-lr)\ntorch._foreach_mul_(param_list, 0.5)"),
    ],
)
def test_each_tensor_statement_maps_to_its_foreach_call(body, calls):
    assert _mapped(body)[1] == calls + "\n"


def test_the_lists_each_root_is_collected_into():
    ops, code = _mapped("d_p = p.grad.add(p, alpha=wd)\np.add_(d_p, alpha=-lr)")
    assert {key: (root.collect, root.list_name) for key, root in ops.roots.items()} == {
        "p.grad": ("p.grad", "grads"), "p": ("p", "param_list"),
    }
    # an alias rebound by a tensor statement is collected under its own list, which the statements update
    ops, code = _mapped("d_p = p.grad\nd_p = d_p.add(p, alpha=wd)\np.add_(d_p, alpha=-lr)")
    assert ops.rebound_aliases == [("d_ps", "d_p")]
    assert code == "d_ps = torch._foreach_add(d_ps, param_list, alpha=wd)\n" \
                       "torch._foreach_add_(param_list, d_ps, alpha=-lr)\n"


STATE_STEP = "state = opt.state[p]\nif len(state) == 0:\n    state['step'] = 0\nstate['step'] += 1\nstep = state['step']\n"


def test_per_parameter_scalars_become_scalar_lists():
    # a number: its list is collected as is and the expression computed per element
    ops, code = _mapped(STATE_STEP + "p.mul_(1 - lr * step)")
    assert code == "torch._foreach_mul_(param_list, [1 - lr * step for step in steps])\n"
    assert ops.collected_hosts == {"step": "steps"} and ops.collected_exprs == {}
    # maybe a 0-d tensor (it computes on `b1`, of unknown type): the first pass collects float() of the expression
    ops, code = _mapped(STATE_STEP + "bias = 1 - b1 ** step\np.mul_(lr / bias)")
    assert code == "torch._foreach_mul_(param_list, scalars)\n"
    assert ops.collected_exprs == {"lr / bias": "scalars"}


@pytest.mark.parametrize(
    "body",
    ["e.mul_(b1).add_(p, alpha=1 - b1)", "e.mul_(b1)\ne.add_(p, alpha=1 - b1)", "e *= b1\ne += (1 - b1) * p",
     "e.copy_(b1 * e + (1 - b1) * p)", "e.copy_((1 - b1) * p + b1 * e)"],
)
def test_an_ema_in_each_spelling_is_one_lerp(body):
    ops, code = _mapped(body, "for e, p in zip(ema, params):")
    assert code == "torch._foreach_lerp_(ema_values, param_list, 1 - b1)\n"
    assert ops.lerp_pairs == [("e", "p")]


@pytest.mark.parametrize("body", ["p.grad.mul_(b1).add_(p, alpha=1 - b1)", "p.grad.mul_(b1)\np.grad.add_(p, alpha=1 - b1)"])
def test_an_optimizer_moment_keeps_its_exact_mul_and_add(body):
    ops, code = _mapped(body)
    assert code == "torch._foreach_mul_(grads, b1)\ntorch._foreach_add_(grads, param_list, alpha=1 - b1)\n"
    assert ops.lerp_pairs == []


@pytest.mark.parametrize(
    "body, reason",
    [
        ("p.foo_()", "`.foo()` has no `torch._foreach_*` twin the rewrite knows"),
        ("p.add_(p.grad.norm(), alpha=2)", "`.norm()` has no `torch._foreach_*` twin the rewrite knows"),
        ("p.add_(p.grad, beta=3)", "`p.add_(p.grad, beta=3)`: arguments the rewrite does not know"),
        ("p.sqrt_(2)", "`p.sqrt_(2)` passes arguments"),
        ("p.clamp_min_(p.grad)", "`p.clamp_min_(p.grad)` with a tensor argument"),
        ("p.copy_(1 - p.grad)", "`1 - p.grad`: a scalar minus a tensor has no exact foreach form"),
        ("p %= 2", "`p %= 2` uses an operator without a foreach twin"),
        ("print(p)", "calls `print`, which the rewrite cannot lift"),
        ("p.add_(p.grad, alpha=p.grad)", "`p.grad` is used as a scalar but holds a tensor"),
        ("p.add_(y)\ny = p * 2", "`y` is read before the loop body binds it"),
        ("x = p.grad * 2\np.add_(x)\nif lr > 0:\n    y = p * 2", "`y` is bound only when `lr > 0` holds"),
    ],
)
def test_refusals_say_why(body, reason):
    with pytest.raises(NoFix) as refused:
        _mapped(body)
    assert str(refused.value) == reason
