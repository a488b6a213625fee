"""TL501's rewrite, step one (rules/_foreach/classify.py): what the classifier says about each statement shape.

Each loop body is sorted statement by statement into a first-pass kind ("filter", "state", "init", "alias",
"host", ...) or None (a tensor statement, lifted into ``torch._foreach_*`` calls), or refused with a reason.
"""

from __future__ import annotations

import pytest

from foreach_support import body_of

from torchlint.rules._foreach import NoFix

ADAM = """
if p.grad is None:
    continue
grad = p.grad
state = opt.state[p]
if len(state) == 0:
    state["step"] = 0
    state["exp_avg"] = torch.zeros_like(p)
exp_avg = state["exp_avg"]
state["step"] += 1
step = state["step"]
bias = 1 - b1 ** step
exp_avg.mul_(b1).add_(grad, alpha=1 - b1)
p.add_(exp_avg, alpha=-lr / bias)
"""


def test_an_adam_step_sorted_statement_by_statement():
    body = body_of(ADAM)
    split = body.classify()
    assert split.kinds == ["filter", "alias", "state", "init", "alias", "host", "host", "host", None, None]
    assert [index for index, _ in split.tensor_statements] == [8, 9]
    assert split.first_pass == set(range(8))
    assert body.aliases == {"grad": "p.grad", "exp_avg": "state:exp_avg"}
    assert body.state_dicts == {"state"} and body.state_entries == {"step": "number", "exp_avg": "tensor"}
    # `step` is a per-parameter number; `bias` computes on `b1`, whose type it cannot see: maybe a 0-d tensor
    assert (body.hosts["step"].per_param, body.hosts["step"].maybe_tensor) == (True, False)
    assert (body.hosts["bias"].per_param, body.hosts["bias"].maybe_tensor) == (True, True)


@pytest.mark.parametrize(
    "header, body, kinds, guards",
    [
        ("for p in params:", "if p.grad is None:\n    continue\np.mul_(0.5)", ["filter", None], 0),
        # an `if` on a loop-invariant condition with tensor statements is lifted around the foreach calls
        ("for p in params:", "if lr > 0:\n    p.add_(p.grad, alpha=-lr)\np.mul_(0.5)", [None, None], 0),
        # one that binds host scalars only stays in the first pass
        ("for p in params:", "if wd:\n    scale = lr * wd\np.mul_(1 - scale)", ["host", None], 0),
        # a last `if` on metadata is a guard: the updates inside it run for the parameters it lets through
        ("for p in params:", "if p.ndim > 1:\n    p.mul_(0.5)", [None], 1),
        ("for k, v in esd.items():", "if v.dtype.is_floating_point:\n    v.mul_(b1).add_(msd[k], alpha=1 - b1)",
         [None], 1),
        ("for e, p in zip(ema, params):", "e.mul_(b1).add_(p, alpha=1 - b1)", [None], 0),
        ("for p in params:", "x = p.grad.norm()", [None], 0),
    ],
)
def test_statement_kinds(header, body, kinds, guards):
    split = body_of(body, header).classify()
    assert split.kinds == kinds
    assert len(split.block_path) == 1 + guards


def test_loop_targets_and_keys():
    body = body_of("if v.dtype.is_floating_point:\n    v.mul_(b1)", "for k, v in esd.items():")
    body.classify()
    assert (body.tensor_targets, body.key_targets) == (["v"], ["k"])
    body = body_of("e.mul_(b1)", "for e, p in zip(ema, params):")
    body.classify()
    assert (body.tensor_targets, body.key_targets) == (["e", "p"], [])


@pytest.mark.parametrize(
    "header, body, reason",
    [
        ("for p in params:", "if p.grad.sum() > 0:\n    continue\np.mul_(0.5)",
         "`if p.grad.sum() > 0:` depends on tensor values"),
        ("for p in params:", "p.mul_(0.5)\nif p.grad is None:\n    continue\np.add_(p.grad)",
         "`if p.grad is None: continue` skips parameters after some of their updates"),
        ("for p in params:", "if p.ndim > 1:\n    p.mul_(0.5)\np.add_(p.grad)",
         "`if p.ndim > 1:` takes a different branch for some parameters"),
        ("for p in params:", "p.data = p.data - lr * p.grad",
         "the loop assigns `.data` (a new tensor per parameter); `.copy_()` could be lifted"),
        ("for p in params:", "try:\n    p.mul_(0.5)\nexcept Exception:\n    pass", "the loop body has a `try` block"),
        ("for p in params:", "for q in p:\n    q.mul_(0.5)", "the loop body has a nested loop"),
        ("for p in params:", "p.mul_((s := 0.5))", "the loop body uses `:=`"),
        ("for p in params:", "p.mul_(0.5)\nreturn", "the loop body has a `return` statement"),
        ("for p in params:", "a = b = p.grad\np.add_(a)", "`a = b = p.grad` assigns several targets"),
        ("for k, p in sorted(x):", "p.mul_(0.5)",
         "the loop target unpacks something other than `zip`, `.items()` or `enumerate`"),
        ("for p, p in zip(a, b):", "p.mul_(0.5)", "the loop target repeats a name"),
        ("for k, v in sd.state_dict().items():", "v.mul_(0.5)",
         "the loop runs over a `state_dict()`, which also holds integer buffers (`num_batches_tracked`); "
         "skip them with `if v.dtype.is_floating_point:` first"),
        ("for p in params:", "state = opt.state[p]\nbuf = state['momentum']\np.add_(buf)",
         "state['momentum'] is not created by the loop's lazy initialisation (`if len(state) == 0:`), so the "
         "rewrite cannot tell a tensor from a number"),
        ("for p in params:",
         "state = opt.state[p]\nif len(state) == 0:\n    state['step'] = torch.zeros((), device=p.device)\n"
         "state['step'] += 1\np.mul_(0.5)",
         "state['step'] is a scalar tensor on the parameter's device"),
        ("for p in params:", "t = lr * 2\np.mul_(t)\nt = lr * 3", "`t` is changed after `p.mul_(t)` uses it"),
        ("for p in params:", "if p.ndim > 1:\n    continue", "no tensor statement to lift"),
    ],
)
def test_refusals_say_why(header, body, reason):
    with pytest.raises(NoFix) as refused:
        body_of(body, header).classify()
    assert str(refused.value) == reason
