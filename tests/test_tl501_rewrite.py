"""TL501's rewrite into torch._foreach_* calls, proven by running it.

Each supported input shape is a fixture (``fixtures/TL501/flagged_*.py``). Its original text and the text
``torchlint fix --unsafe-fixes`` makes of it are loaded side by side, and both train the same small model on the
same data for 10 steps; then every parameter and every piece of optimizer or EMA state is compared.

Tolerances: the optimizer rewrites apply the same ATen op to each tensor as the loop did (the CPU
``_foreach_*`` kernels loop over the list calling it), so on the CPU they must match **bitwise**
(``rtol=0, atol=0``). EMA loops become one ``torch._foreach_lerp_``, which computes ``e + w * (p - e)`` instead of
``d * e + (1 - d) * p``: the last bit differs, so those are held to ``rtol=1e-6, atol=1e-7`` after 10 steps
(tighter than the 1e-5 the issue asks for).
The model has a float64 parameter beside the float32 ones, so every rewrite runs with two (device, dtype) groups.
"""

from __future__ import annotations

import functools
from typing import Tuple

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from fixture_support import FIXTURES, fix, lint  # noqa: E402

STEPS = 10
EXACT = dict(rtol=0, atol=0)
LERP = dict(rtol=1e-6, atol=1e-7)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 2))
        self.scale = nn.Parameter(torch.ones(2, dtype=torch.float64))  # a second dtype: two groups

    def forward(self, x):
        return self.body(x) * self.scale.float()


def _load(source: str, label: str) -> dict:
    namespace = {"__name__": label}
    exec(compile(source, label, "exec"), namespace)
    return namespace


def _state_tensors(state) -> list:
    out = []
    for param_state in state.values():
        for key in sorted(param_state):
            value = param_state[key]
            out.append(value if isinstance(value, torch.Tensor) else torch.tensor(float(value)))
    return out


def _optimizer(cls_name, **kwargs):
    def driver(ns, model):
        optimizer = ns[cls_name](model.parameters(), **kwargs)
        return optimizer.step, lambda: _state_tensors(optimizer.state)
    return driver


def _function(name, make_args):
    def driver(ns, model):
        return (lambda: ns[name](*make_args(model))), lambda: []
    return driver


def _ema(build, update):
    """An EMA helper updated after a plain SGD step; its averages are the state compared."""
    def driver(ns, model):
        ema = build(ns, model)
        sgd = torch.optim.SGD(model.parameters(), lr=0.1)

        def step():
            sgd.step()
            update(ema, model)
        return step, lambda: [t.detach().clone() for t in _averages(ema)]
    return driver


def _averages(ema):
    if hasattr(ema, "shadow"):
        return list(ema.shadow)
    return list(ema.ema.state_dict().values())


CASES = {
    "seed_adamw": ("flagged_seed_adamw", _optimizer("LoopAdamW", lr=1e-2, weight_decay=0.1), EXACT),
    "reference_adamw": ("flagged_reference_adamw", _optimizer("ReferenceAdamW", lr=1e-2), EXACT),
    "reference_adamw_no_decay": (
        "flagged_reference_adamw", _optimizer("ReferenceAdamW", lr=1e-2, weight_decay=0.0), EXACT
    ),
    "sgd_momentum": ("flagged_sgd_momentum", _optimizer("SGD", lr=0.05), EXACT),
    "sgd_nesterov": ("flagged_sgd_momentum", _optimizer("SGD", lr=0.05, nesterov=True), EXACT),
    "sgd_no_weight_decay": ("flagged_sgd_momentum", _optimizer("SGD", lr=0.05, weight_decay=0.0), EXACT),
    "rmsprop": ("flagged_rmsprop_adagrad", _optimizer("RMSprop", lr=1e-2), EXACT),
    "adagrad": ("flagged_rmsprop_adagrad", _optimizer("Adagrad", lr=1e-2, lr_decay=0.01), EXACT),
    "lion": ("flagged_lion", _optimizer("Lion", lr=1e-3, weight_decay=0.1), EXACT),
    "momentum_sgd_data": ("flagged_manual_sgd", _optimizer("MomentumSGD", lr=0.05), EXACT),
    "free_sgd": ("flagged_free_sgd", _function("sgd_step", lambda m: (m, 0.05)), EXACT),
    "free_sgd_data": ("flagged_free_sgd", _function("sgd_step_data", lambda m: (m, 0.05)), EXACT),
    "free_sgd_clipped": (
        "flagged_free_sgd", _function("clipped_sgd_step", lambda m: (list(m.parameters()), 0.05, 0.01)), EXACT
    ),
    "ema_parameters": (
        "flagged_ema", _ema(lambda ns, m: ns["ModelEMA"](m, decay=0.9), lambda e, m: e.update(m)), LERP
    ),
    "ema_state_dict_values_lerp": (
        "flagged_ema", _ema(lambda ns, m: ns["ModelEMA"](m, decay=0.9), lambda e, m: e.update_lerp(m)), EXACT
    ),
    "ema_state_dict_items": (
        "flagged_ema_state_dict", _ema(lambda ns, m: ns["ModelEMA"](m, decay=0.9, tau=3), lambda e, m: e.update(m)),
        LERP,
    ),
    "ema_state_dict_by_name": (
        "flagged_ema_state_dict_by_name", _ema(lambda ns, m: ns["StateAverage"](m, decay=0.9), lambda e, m: e.update(m)),
        LERP,
    ),
    "ema_shadow_list": (
        "flagged_ema_state_dict", _ema(lambda ns, m: ns["ShadowAverage"](m.parameters(), decay=0.9),
                                       lambda e, m: e.update()), LERP,
    ),
}


@functools.lru_cache(maxsize=None)
def _fixed(fixture: str) -> Tuple[str, str]:
    source = (FIXTURES / "TL501" / f"{fixture}.py").read_text(encoding="utf-8")
    return source, fix(source, "TL501")


def _train(source: str, label: str, driver) -> list:
    ns = _load(source, label)
    torch.manual_seed(0)
    model = Net()
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(STEPS, 16, 8, generator=generator)
    targets = torch.randn(STEPS, 16, 2, generator=generator)
    update, state = driver(ns, model)
    for x, y in zip(inputs, targets):
        model.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()
        update()
    return [p.detach().clone() for p in model.parameters()] + state()


@pytest.mark.parametrize("case", sorted(CASES))
def test_rewrite_matches_the_loop_after_ten_steps(case):
    fixture, driver, tolerance = CASES[case]
    source, fixed = _fixed(fixture)
    assert "torch._foreach_" in fixed or "t._foreach_" in fixed
    before = _train(source, f"{fixture} (loop)", driver)
    after = _train(fixed, f"{fixture} (foreach)", driver)
    assert len(before) == len(after) > 0
    torch.manual_seed(0)
    initial = [p.detach() for p in Net().parameters()]
    assert not all(torch.equal(b, i) for b, i in zip(before, initial))  # the update ran
    for b, a in zip(before, after):
        torch.testing.assert_close(a, b, **tolerance)


@pytest.mark.parametrize("fixture", sorted({fixture for fixture, _, _ in CASES.values()}))
def test_rewritten_loops_are_not_reported_again(fixture):
    source, fixed = _fixed(fixture)
    report_only = [d.message for d in lint(source, "TL501") if d.fix is None]
    assert [d.message for d in lint(fixed, "TL501")] == report_only
