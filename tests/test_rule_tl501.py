"""TL501 per-parameter-optimizer-loop: loop classification, foreach=False fixes and torch versions."""

import os
import subprocess
import sys

import pytest

from fixture_support import fix, lint

HEADER = "import torch\n"


def _lint(source):
    return [(d.line, d.fix.value if d.fix else None, d.message) for d in lint(source, "TL501")]


def test_foreach_false_dropped_safely_in_the_middle_and_first():
    source = HEADER + "from torch.optim import SGD as S\nopt = S(params, foreach=False, lr=0.1)\n"
    assert [(line, f) for line, f, _ in _lint(source)] == [(3, "safe")]
    assert fix(source, "TL501", unsafe=False).endswith("opt = S(params, lr=0.1)\n")


def test_foreach_true_none_and_schedulers_are_silent():
    source = HEADER + (
        "a = torch.optim.Adam(params, foreach=True)\n"
        "b = torch.optim.Adam(params, foreach=None)\n"
        "c = torch.optim.Adam(params, fused=True, foreach=False)\n"
        "d = torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=False)\n"
    )
    assert _lint(source) == []


def test_old_torch_asks_for_foreach_true_without_fix():
    source = "# torchlint-fixture: torch-version=1.13\n" + HEADER + "opt = torch.optim.SGD(params, foreach=False)\n"
    [(line, applicability, message)] = _lint(source)
    assert applicability is None and "foreach=True" in message
    assert fix(source, "TL501") == source


def test_loop_reported_once_with_launch_count():
    source = HEADER + (
        "def step(model, lr):\n"
        "    for p in model.parameters():\n"
        "        p.grad.mul_(0.5)\n"
        "        p.data.add_(p.grad, alpha=-lr)\n"
    )
    [(line, applicability, message)] = _lint(source)
    assert line == 3 and applicability == "unsafe"  # lifted into torch._foreach_* calls
    assert "about 2 kernel launches per parameter" in message


def test_params_list_bound_to_name():
    source = HEADER + (
        "def step(model, lr):\n"
        "    trainable = [p for p in model.parameters() if p.requires_grad]\n"
        "    for w in trainable:  # resolved through the binding; the loop line names no params\n"
        "        w.sub_(lr * w.grad)\n"
        "    for group in opt.param_groups:\n"
        "        for w in group['params']:\n"
        "            w.add_(w.grad, alpha=-lr)\n"
    )
    assert [line for line, _, _ in _lint(source)] == [4, 7]


def test_read_only_and_unrelated_loops_are_silent():
    source = HEADER + (
        "def stats(model, batches):\n"
        "    n = sum(p.numel() for p in model.parameters())\n"
        "    for p in model.parameters():\n"
        "        print(p.grad.norm())\n"
        "    for x in batches:\n"
        "        x.mul_(2)\n"
        "    for name in param_names:\n"
        "        name.strip()\n"
    )
    assert _lint(source) == []


def test_weight_copy_that_computes_is_an_update():
    source = HEADER + (
        "@torch.no_grad()\n"
        "def ema(ema_model, model, d):\n"
        "    for e, p in zip(ema_model.parameters(), model.parameters()):\n"
        "        e.copy_(d * e + (1 - d) * p)\n"
    )
    [(_, _, message)] = _lint(source)
    assert "_foreach_lerp_" in message


LOOP = HEADER + (
    "@torch.no_grad()\n"
    "def step(model, lr):\n"
    "    for p in model.parameters():\n"
    "        p.add_(p.grad, alpha=-lr)\n"
)


@pytest.mark.parametrize("path", ["tests/test_optim.py", "pkg/tests/helpers.py", "test_sgd.py", "sgd_test.py",
                                  "conftest.py"])
def test_loops_in_test_files_are_silent(path):
    assert lint(LOOP, "TL501", path=path) == []
    assert len(lint(LOOP, "TL501", path="train/sgd.py")) == 1


def test_loop_is_rewritten_into_foreach_calls_grouped_by_device_and_dtype():
    fixed = fix(LOOP, "TL501")
    assert "buckets.setdefault((p.device, p.dtype), ([], []))" in fixed
    assert "torch._foreach_add_(params, grads, alpha=-lr)" in fixed
    assert fix(fixed, "TL501") == fixed  # the collecting loop is not reported again
    assert lint(fixed, "TL501") == []


def test_rewrite_uses_the_files_torch_alias_and_free_names():
    source = (
        "import torch as T\n"
        "@T.no_grad()\n"
        "def step(params, lr, buckets):\n"
        "    for p in params:\n"
        "        p.sub_(p.grad * lr)\n"
    )
    fixed = fix(source, "TL501")
    assert "T._foreach_sub_(param_list, T._foreach_mul(grads, lr))" in fixed
    assert "bucket_list = {}" in fixed  # `buckets` and `params` are taken


def test_loop_in_a_training_function_named_like_a_test_helper_is_still_reported():
    source = LOOP.replace("def step", "def latest_step")
    assert len(lint(source, "TL501")) == 1


@pytest.mark.parametrize("source, reason", [
    ("    for p in params:\n        if p.grad.sum() > 0:\n            p.add_(p.grad)\n", "depends on tensor values"),
    ("    for p in params:\n        p.add_(noise(p))\n", "calls `noise`"),
    ("    for p in params:\n        p.data = p.data - lr * p.grad\n", "assigns `.data`"),
    ("    for p in params:\n        p.add_(p.grad)\n    print(p)\n", "`p` is read after the loop"),
    ("    for p in params:\n        p.add_(p.grad)\n        break\n", "`break`"),
    ("    for p in params:\n        p.copy_(lr / p.grad)\n", "a scalar over a tensor"),
])
def test_report_only_loops_say_why(source, reason):
    full = HEADER + "@torch.no_grad()\ndef step(params, lr, noise):\n" + source
    [(_, applicability, message)] = _lint(full)
    assert applicability is None
    assert "no automatic fix" in message and reason in message, message


def test_old_torch_gets_no_rewrite():
    source = "# torchlint-fixture: torch-version=2.0\n" + LOOP
    [(_, applicability, message)] = _lint(source)
    assert applicability is None and "PyTorch 2.1" in message


def test_metadata_of_a_temporary_is_not_moved_into_the_collecting_loop():
    source = HEADER + (
        "@torch.no_grad()\n"
        "def step(params, lr):\n"
        "    for p in params:\n"
        "        denom = p.grad.abs().add_(1e-8)\n"
        "        n = denom.numel()\n"
        "        p.addcdiv_(p.grad, denom, value=-lr / n)\n"
    )
    [(_, applicability, message)] = _lint(source)
    assert applicability is None and "no automatic fix" in message


def test_a_filter_after_an_update_keeps_the_loop():
    source = HEADER + (
        "@torch.no_grad()\n"
        "def step(params, lr):\n"
        "    for p in params:\n"
        "        p.mul_(0.99)\n"
        "        if p.grad is None:\n"
        "            continue\n"
        "        p.add_(p.grad, alpha=-lr)\n"
    )
    [(_, applicability, message)] = _lint(source)
    assert applicability is None and "skips parameters after some of their updates" in message


def test_a_moment_updated_in_two_statements_keeps_its_mul_and_add():
    """`exp_avg.mul_(b1)` then `exp_avg.add_(grad, alpha=1 - b1)` has an EMA's shape but averages no weights: it
    stays two exact ops, as the one-statement chain does (it was a TL000 crash, a TypeError in the rewrite)."""
    source = HEADER + (
        "@torch.no_grad()\n"
        "def step(self, lr, b1):\n"
        "    for p in self.params:\n"
        "        state = self.state[p]\n"
        "        if len(state) == 0:\n"
        "            state['exp_avg'] = torch.zeros_like(p)\n"
        "        exp_avg = state['exp_avg']\n"
        "        exp_avg.mul_(b1)\n"
        "        exp_avg.add_(p.grad, alpha=1 - b1)\n"
        "        p.add_(exp_avg, alpha=-lr)\n"
    )
    [(line, applicability, message)] = _lint(source)
    assert (line, applicability) == (4, "unsafe"), message
    assert (
        "        torch._foreach_mul_(exp_avgs, b1)\n"
        "        torch._foreach_add_(exp_avgs, grads, alpha=1 - b1)\n"
        "        torch._foreach_add_(param_list, exp_avgs, alpha=-lr)\n"
    ) in fix(source, "TL501")


def test_list_names_are_never_keywords():
    """The list for `a` is not `as` (nor `i`'s `is`), which would not parse (it was a TL000 crash)."""
    source = HEADER + (
        "@torch.no_grad()\n"
        "def update(ema, model, d):\n"
        "    for a, b in zip(ema.parameters(), model.parameters()):\n"
        "        a.mul_(d).add_(b, alpha=1 - d)\n"
        "    for i in model.parameters():\n"
        "        i.mul_(d)\n"
    )
    assert [(line, applicability) for line, applicability, _ in _lint(source)] == [(4, "unsafe"), (6, "unsafe")]
    fixed = fix(source, "TL501")
    assert "torch._foreach_lerp_(a_list, bs, 1 - d)" in fixed and "torch._foreach_mul_(i_list, d)" in fixed


def test_a_reason_that_names_one_of_several_variables_is_the_same_in_every_process(tmp_path):
    """The names a statement reads are a set: the reason named whichever came first in its hash order, so the
    message changed from run to run (PYTHONHASHSEED). It names the first in sorted order."""
    path = tmp_path / "step.py"
    path.write_text(HEADER + (
        "@torch.no_grad()\n"
        "def step(params, lr):\n"
        "    for p in params:\n"
        "        first = lr * 2\n"
        "        second = lr * 3\n"
        "        third = lr * 4\n"
        "        p.add_(p.grad, alpha=first * second * third)\n"
        "        first = lr\n"
        "        second = lr\n"
        "        third = lr\n"
    ))
    messages = set()
    for seed in range(4):  # seed 2 gave `third` before
        done = subprocess.run(
            [sys.executable, "-m", "torchlint", "check", "--select", "TL501", "--no-cache", "-q", str(path)],
            capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": str(seed)},
        )
        messages.add(done.stdout.split("no automatic fix: ", 1)[-1].strip())
    assert messages == {"`first` is changed after `p.add_(p.grad, alpha=first * second * third)` uses it"}


def test_loops_inside_match_cases_are_read():
    """A `case` has no position of its own: the foreach-branch test must still find the loop under it."""
    source = HEADER + (
        "def step(params, mode, foreach=False):\n"
        "    match mode:\n"
        "        case 'sgd':\n"
        "            for p in params:\n"
        "                p.add_(p.grad, alpha=-0.1)\n"
    )
    [(line, applicability, _)] = _lint(source)
    assert line == 5 and applicability == "unsafe"


def test_a_comment_that_names_grad_makes_no_training_step():
    """The builder test and the clipping hint read `.grad` in the code, not in a comment."""
    builder = HEADER + (
        "def shrink(layer, factor):\n"
        "    for w in layer.parameters():\n"
        "        w.detach().mul_(factor)  # the weights, not their .grad\n"
        "    return layer\n"
    )
    assert _lint(builder) == []
    bounds = HEADER + (
        "def bound(params):\n"
        "    for p in params:\n"
        "        p.clamp_(-1.0, 1.0)  # weights, unlike the .grad clipping elsewhere\n"
    )
    [(_, _, message)] = _lint(bounds)
    assert "gradient clipping" not in message


def test_a_params_key_written_as_two_strings_is_a_params_list():
    """`group["par" "ams"]` is `group["params"]`: the key is read as Python reads it."""
    source = HEADER + (
        "def step(opt, lr):\n"
        "    for group in opt.param_groups:\n"
        "        for w in group['par' 'ams']:\n"
        "            w.add_(w.grad, alpha=-lr)\n"
    )
    [(line, _, _)] = _lint(source)
    assert line == 4


def test_a_step_key_written_as_two_strings_is_a_step_count():
    """`state["st" "ep"] += 1` bumps the step counter as `state["step"] += 1` does: no update of its own."""
    source = HEADER + (
        "def step(opt):\n"
        "    for p in opt.param_groups[0]['params']:\n"
        "        state = opt.state[p]\n"
        "        state['st' 'ep'] += 1\n"
    )
    assert _lint(source) == []


@pytest.mark.parametrize("head", ["with torch.set_grad_enabled(False):", "with torch.autograd.no_grad():"])
def test_a_loop_where_autograd_is_off_in_any_spelling_collects_the_parameters_themselves(head):
    """Without autograd `p.data` and `p` are one tensor: the lift collects `p`, as under `torch.no_grad()`
    (the index's grad-mode facts decide, in every spelling they know)."""
    source = f"import torch\n\n\ndef sgd(params, lr):\n    {head}\n        for p in params:\n            p.data.add_(p.grad, alpha=-lr)\n"
    fixed = fix(source, "TL501")
    assert "param_list.append(p)\n" in fixed and "torch._foreach_add_(param_list, grads, alpha=-lr)" in fixed


STATE_DICT_EMA = HEADER + (
    "@torch.no_grad()\n"
    "def update(ema, model, d):\n"
    "    shadow = ema.state_dict()\n"
    "    live = model.state_dict()\n"
    "{loop}"
)


def test_an_ema_over_state_dicts_kept_in_names_is_reported():
    by_key = "    for key in live.keys():\n        shadow[key].mul_(d).add_(live[key], alpha=1 - d)\n"
    [(line, applicability, message)] = _lint(STATE_DICT_EMA.format(loop=by_key))
    assert line == 6 and applicability is None and "for an EMA" in message


def test_a_state_dict_in_a_name_needs_the_float_guard_before_the_rewrite():
    unguarded = "    for key, value in shadow.items():\n        value.mul_(d).add_(live[key], alpha=1 - d)\n"
    [(_, applicability, message)] = _lint(STATE_DICT_EMA.format(loop=unguarded))
    assert applicability is None and "num_batches_tracked" in message
    guarded = ("    for key, value in shadow.items():\n        if value.dtype.is_floating_point:\n"
               "            value.mul_(d).add_(live[key], alpha=1 - d)\n")
    [(_, applicability, _)] = _lint(STATE_DICT_EMA.format(loop=guarded))
    assert applicability == "unsafe"
    assert "torch._foreach_lerp_" in fix(STATE_DICT_EMA.format(loop=guarded), "TL501")


def test_copying_state_dict_entries_by_key_is_silent():
    copy = "    for key in live:\n        shadow[key].copy_(live[key])\n"
    assert _lint(STATE_DICT_EMA.format(loop=copy)) == []
