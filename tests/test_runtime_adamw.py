"""torchlint.runtime.AdamW / ReferenceAdamW against torch.optim.AdamW (issue 4).

Tolerances: our AdamW runs the same op sequence as torch's own loop with the
same host-side scalars, so on the CPU it matches ``torch.optim.AdamW(
foreach=False)`` bit for bit; those comparisons use ``rtol=0, atol=0`` (tighter
than the ``assert_close`` defaults). ReferenceAdamW computes the moments in a
different order (``mul_().add_()`` instead of ``lerp_``, ``sqrt(v / bc2)``
instead of ``sqrt(v) / sqrt(bc2)``), so it is held to the ``assert_close``
defaults (fp32: rtol 1.3e-6, atol 1e-5; fp64: rtol 1e-7, atol 1e-7). The
fused kernel computes in fp32 registers without intermediate rounding, so it
is held to the defaults as well.
"""

import copy
import functools

import pytest

torch = pytest.importorskip("torch")

from torchlint.runtime import AdamW, ReferenceAdamW  # noqa: E402
from torchlint.runtime import adamw as adamw_module  # noqa: E402
from torchlint.runtime import bench_optim  # noqa: E402

EXACT = dict(rtol=0, atol=0)
STEPS = 20


def torch_twin(foreach):
    """The torch.optim.AdamW that ours matches bit for bit: the loop, or with neither foreach nor fused given
    (our default picks torch's fused kernel where this torch has one for the CPU) torch's fused path."""
    if foreach is None and adamw_module.uses_fused_by_default(torch.zeros(1)):
        return dict(fused=True)
    return dict(foreach=False)

# (shape, dtype) per parameter: mixed shapes (incl. 0-d and empty), fp32/fp64/bf16.
PARAM_SPECS = [
    ((3, 5), torch.float32),
    ((7,), torch.float64),
    ((2, 3, 4), torch.bfloat16),
    ((), torch.float32),
    ((4, 4), torch.float64),
    ((0, 3), torch.float32),
    ((6,), torch.bfloat16),
    ((11,), torch.float32),
]


def make_params(specs=PARAM_SPECS, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype).requires_grad_() for shape, dtype in specs]


def set_random_grads(params, gen):
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype)


def param_groups(params, group_options):
    """Split params round-robin into len(group_options) groups with their own options."""
    n = len(group_options)
    return [dict(params=params[i::n], **opts) for i, opts in enumerate(group_options)]


def run(optimizer_cls, group_options, steps=STEPS, grad_seed=1, specs=PARAM_SPECS, **kwargs):
    params = make_params(specs)
    opt = optimizer_cls(param_groups(params, group_options), **kwargs)
    gen = torch.Generator().manual_seed(grad_seed)
    for _ in range(steps):
        set_random_grads(params, gen)
        opt.step()
    return params, opt


def assert_same_run(params_a, opt_a, params_b, opt_b, **tol):
    for pa, pb in zip(params_a, params_b):
        torch.testing.assert_close(pa, pb, **tol)
        sa, sb = opt_a.state[pa], opt_b.state[pb]
        assert sorted(sa) == sorted(sb)
        for key in sa:
            torch.testing.assert_close(sa[key], sb[key], **tol)
            assert sa[key].dtype == sb[key].dtype and sa[key].device == sb[key].device, key


GROUP_CONFIGS = {
    "defaults": [dict()],
    "two_groups_wd": [dict(lr=1e-2, weight_decay=0.1), dict(lr=3e-3, weight_decay=0.0, betas=(0.8, 0.99))],
    "amsgrad": [dict(amsgrad=True, weight_decay=0.05)],
    "maximize": [dict(maximize=True)],
    "amsgrad_maximize_no_wd": [dict(amsgrad=True, maximize=True, weight_decay=0.0)],
    "mixed_three_groups": [dict(amsgrad=True), dict(maximize=True, eps=1e-6), dict(lr=0.05, weight_decay=0.2)],
}


@pytest.mark.parametrize("foreach", [False, True, None])
@pytest.mark.parametrize("config", sorted(GROUP_CONFIGS))
def test_matches_torch_adamw(config, foreach):
    ours = run(AdamW, GROUP_CONFIGS[config], foreach=foreach)
    theirs = run(torch.optim.AdamW, GROUP_CONFIGS[config], **torch_twin(foreach))
    assert_same_run(*ours, *theirs, **EXACT)


@pytest.mark.parametrize("foreach", [False, True, None])
def test_tensor_lr_matches_torch(foreach):
    # torch's own foreach rejects a tensor lr without capturable; ours reads it on the host.
    groups = [dict(lr=torch.tensor(0.01)), dict(lr=torch.tensor(3e-3), amsgrad=True, weight_decay=0.3)]
    ours = run(AdamW, groups, foreach=foreach)
    theirs = run(torch.optim.AdamW, groups, **torch_twin(foreach))
    assert_same_run(*ours, *theirs, **EXACT)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_foreach_weight_decay_in_low_precision_matches_loop(dtype):
    # Regression: on the CPU, _foreach_mul_(list, 0.98) rounds 0.98 to the list's dtype
    # (bf16: 0.98046875), unlike Tensor.mul_(0.98); torch 2.13's foreach AdamW inherits that.
    specs = [((64,), dtype), ((), dtype)]
    groups = [dict(lr=0.1, weight_decay=0.2)]
    foreach = run(AdamW, groups, steps=5, specs=specs, foreach=True)
    loop = run(torch.optim.AdamW, groups, steps=5, specs=specs, foreach=False)
    assert_same_run(*foreach, *loop, **EXACT)


def test_cpu_chunked_foreach_matches_loop(monkeypatch):
    # Force several chunks (incl. a tensor larger than a chunk) on tiny tensors.
    monkeypatch.setattr(adamw_module, "CPU_FOREACH_CHUNK_NUMEL", 20)
    assert adamw_module._cpu_chunks([torch.zeros(n) for n in (5, 10, 30, 4, 4)], 20) == [
        slice(0, 2), slice(2, 3), slice(3, 5)]
    for config in ("amsgrad_maximize_no_wd", "mixed_three_groups"):
        foreach = run(AdamW, GROUP_CONFIGS[config], foreach=True)
        loop = run(torch.optim.AdamW, GROUP_CONFIGS[config], foreach=False)
        assert_same_run(*foreach, *loop, **EXACT)


def test_foreach_matches_single_tensor_with_different_steps():
    # A param group added later has smaller step counts: each tensor needs its own bias correction.
    def go(foreach):
        params = make_params()
        opt = AdamW(params[:4], foreach=foreach, amsgrad=True)
        gen = torch.Generator().manual_seed(3)
        for i in range(8):
            if i == 3:
                opt.add_param_group(dict(params=params[4:]))
            set_random_grads(params, gen)
            opt.step()
        return params, opt

    loop, foreach = go(False), go(True)
    assert_same_run(*foreach, *loop, **EXACT)
    assert foreach[1].state[foreach[0][0]]["step"].item() == 8
    assert foreach[1].state[foreach[0][-1]]["step"].item() == 5


def test_complex_params_match_torch():
    specs = [((3, 2), torch.complex64), ((4,), torch.float32)]
    for foreach in (False, True):
        ours = run(AdamW, [dict(amsgrad=True)], steps=5, specs=specs, foreach=foreach)
        theirs = run(torch.optim.AdamW, [dict(amsgrad=True)], steps=5, specs=specs, foreach=False)
        assert_same_run(*ours, *theirs, **EXACT)


@pytest.mark.parametrize("config", ["defaults", "amsgrad_maximize_no_wd", "mixed_three_groups"])
def test_fused_matches_torch_fused(config):
    specs = [s for s in PARAM_SPECS if s[1] != torch.float64] + [((5,), torch.float64)]
    ours = run(AdamW, GROUP_CONFIGS[config], specs=specs, fused=True)
    fused = run(torch.optim.AdamW, GROUP_CONFIGS[config], specs=specs, fused=True)
    assert_same_run(*ours, *fused, **EXACT)
    # ... and the fused kernel agrees with the loop to assert_close defaults (fp32/fp64 params).
    loop = run(torch.optim.AdamW, GROUP_CONFIGS[config], specs=specs, foreach=False)
    for p_ours, p_loop in zip(ours[0], loop[0]):
        if p_ours.dtype != torch.bfloat16:
            torch.testing.assert_close(p_ours, p_loop)


def test_fused_and_foreach_together_rejected():
    with pytest.raises(RuntimeError, match="cannot be `True` together"):
        AdamW(make_params(), fused=True, foreach=True)


@pytest.mark.parametrize("foreach", [False, True, None])
def test_params_without_grad_are_skipped(foreach):
    params = make_params()
    before = [p.detach().clone() for p in params]
    opt = AdamW(params, foreach=foreach, weight_decay=0.1)
    gen = torch.Generator().manual_seed(0)
    set_random_grads(params, gen)
    params[1].grad = None
    params[4].grad = None
    opt.step()
    opt.step()
    for i in (1, 4):
        assert len(opt.state[params[i]]) == 0
        torch.testing.assert_close(params[i], before[i], **EXACT)  # weight decay did not touch it either
    assert opt.state[params[0]]["step"].item() == 2


def test_step_with_no_grads_at_all_is_a_no_op():
    params = make_params()
    opt = AdamW(params)
    opt.step()
    assert len(opt.state) == 0


@pytest.mark.parametrize("foreach", [False, True, None])
def test_sparse_grad_raises(foreach):
    p = torch.zeros(5, 3, requires_grad=True)
    p.grad = torch.sparse_coo_tensor([[0, 2]], torch.ones(2, 3), (5, 3), check_invariants=True)
    with pytest.raises(RuntimeError, match="sparse"):
        AdamW([p], foreach=foreach).step()


def test_reference_sparse_grad_raises():
    p = torch.zeros(5, 3, requires_grad=True)
    p.grad = torch.sparse_coo_tensor([[0, 2]], torch.ones(2, 3), (5, 3), check_invariants=True)
    with pytest.raises(RuntimeError, match="sparse"):
        ReferenceAdamW([p]).step()


@pytest.mark.parametrize("foreach", [False, True, None])
def test_nan_and_inf_grads_behave_like_torch(foreach):
    def go(optimizer_cls, **kwargs):
        params = make_params()
        opt = optimizer_cls(params, amsgrad=True, **kwargs)
        gen = torch.Generator().manual_seed(5)
        for i in range(4):
            set_random_grads(params, gen)
            if i == 1:
                params[0].grad[0, 0] = float("nan")
                params[4].grad[1, 1] = float("inf")
            opt.step()
        return params, opt

    ours, theirs = go(AdamW, foreach=foreach), go(torch.optim.AdamW, **torch_twin(foreach))
    assert torch.isnan(ours[0][0]).any()  # propagated, not masked
    for pa, pb in zip(ours[0], theirs[0]):
        torch.testing.assert_close(pa, pb, equal_nan=True, **EXACT)
        for key in ours[1].state[pa]:
            torch.testing.assert_close(ours[1].state[pa][key], theirs[1].state[pb][key], equal_nan=True, **EXACT)


# --- checkpoints interchange with torch.optim.AdamW ----------------------------

CKPT_GROUPS = [dict(lr=1e-2, amsgrad=True), dict(lr=5e-3, weight_decay=0.0, maximize=True)]


def _train(opt_cls, params, steps, gen, state_dict=None, **kwargs):
    opt = opt_cls(param_groups(params, CKPT_GROUPS), **kwargs)
    if state_dict is not None:
        opt.load_state_dict(state_dict)
    for _ in range(steps):
        set_random_grads(params, gen)
        opt.step()
    return opt


@pytest.mark.parametrize("first,second", [("ours", "torch"), ("torch", "ours")])
@pytest.mark.parametrize("foreach", [False, True])
def test_checkpoint_round_trip_with_torch(first, second, foreach):
    classes = {"ours": functools.partial(AdamW, foreach=foreach), "torch": functools.partial(torch.optim.AdamW, foreach=False)}

    # Uninterrupted run with torch's AdamW: 10 steps.
    gen = torch.Generator().manual_seed(7)
    straight_params = make_params()
    straight = _train(classes["torch"], straight_params, 10, gen)

    # 5 steps with `first`, checkpoint (deep-copied, as if through torch.save), 5 steps with `second`.
    gen = torch.Generator().manual_seed(7)
    params = make_params()
    checkpoint = copy.deepcopy(_train(classes[first], params, 5, gen).state_dict())
    assert checkpoint["state"][0]["step"].dtype == torch.float32 and checkpoint["state"][0]["step"].device.type == "cpu"
    resumed = _train(classes[second], params, 5, gen, state_dict=checkpoint)

    assert_same_run(params, resumed, straight_params, straight, **EXACT)
    assert resumed.state[params[0]]["step"].item() == 10


def test_state_dict_layout_equals_torch():
    ours = run(AdamW, CKPT_GROUPS, steps=2)[1].state_dict()
    theirs = run(torch.optim.AdamW, CKPT_GROUPS, steps=2)[1].state_dict()
    assert [sorted(g) for g in ours["param_groups"]] == [sorted(g) for g in theirs["param_groups"]]
    assert ours["state"].keys() == theirs["state"].keys()
    for i in ours["state"]:
        assert sorted(ours["state"][i]) == sorted(theirs["state"][i])
        step_ours, step_theirs = ours["state"][i]["step"], theirs["state"][i]["step"]
        assert (step_ours.dtype, step_ours.device, step_ours.shape) == (step_theirs.dtype, step_theirs.device, step_theirs.shape)


def test_old_style_python_number_step_is_converted_on_load():
    params = make_params()
    opt = AdamW(params)
    set_random_grads(params, torch.Generator().manual_seed(0))
    opt.step()
    sd = copy.deepcopy(opt.state_dict())
    for s in sd["state"].values():
        s["step"] = 1  # checkpoints from old torch versions store an int
    opt2 = AdamW(params)
    opt2.load_state_dict(sd)
    assert all(torch.is_tensor(s["step"]) and s["step"].dtype == torch.float32 for s in opt2.state.values())
    opt2.step()


# --- the foreach=None choice ------------------------------------------------------


def test_default_path_selection():
    limit = adamw_module.CPU_FOREACH_MAX_NUMEL
    assert limit == 8192  # below the measured crossover documented in adamw.py
    choose = adamw_module.uses_foreach_by_default
    assert choose(torch.zeros(limit))  # small CPU tensor: foreach
    assert choose(torch.nn.Parameter(torch.zeros(16, 16)))
    assert not choose(torch.zeros(limit + 1))  # large CPU tensor: loop
    assert not choose(torch.zeros(1000, 1000))
    assert not choose(torch.zeros(3, device="meta"))  # no foreach kernels, not cpu: loop
    if torch.cuda.is_available():
        assert choose(torch.zeros(10_000_000, device="cuda"))  # CUDA: always foreach


def test_default_splits_a_group_between_paths(monkeypatch):
    calls = {}

    def spy(name, real):
        def wrapper(params, *rest, **kwargs):
            calls.setdefault(name, []).append([tuple(p.shape) for p in params])
            return real(params, *rest, **kwargs)

        return wrapper

    monkeypatch.setattr(adamw_module, "_multi_tensor_adamw", spy("foreach", adamw_module._multi_tensor_adamw))
    monkeypatch.setattr(adamw_module, "_single_tensor_adamw", spy("loop", adamw_module._single_tensor_adamw))
    small, large = torch.zeros(10, requires_grad=True), torch.zeros(100, 100, requires_grad=True)
    small.grad, large.grad = torch.ones_like(small), torch.ones_like(large)
    AdamW([small, large], amsgrad=True, fused=False).step()
    assert calls == {"foreach": [[(10,)]], "loop": [[(100, 100)]]}


def test_default_is_torchs_fused_kernel_where_this_torch_has_one(monkeypatch):
    fused_calls = []
    real = adamw_module._fused_adamw
    monkeypatch.setattr(adamw_module, "_fused_adamw", lambda params, *a, **k: fused_calls.append(len(params)) or real(params, *a, **k))
    params = make_params()
    set_random_grads(params, torch.Generator().manual_seed(0))
    opt = AdamW(params)
    opt.step()
    has_cpu_kernel = hasattr(torch, "_fused_adamw_") and "cpu" in adamw_module._fused_devices()
    assert fused_calls == ([len(params)] if has_cpu_kernel else [])
    assert adamw_module.uses_fused_by_default(torch.zeros(3)) == has_cpu_kernel
    assert not adamw_module.uses_fused_by_default(torch.zeros(3, dtype=torch.int64))  # floating point only
    fused_calls.clear()
    AdamW(params, foreach=False).step()  # an explicit path is kept
    AdamW(params, fused=False).step()
    assert fused_calls == []


def test_default_fused_resumes_a_loop_checkpoint():
    # A checkpoint written by the loop path (a CPU step) continues on the fused default like torch's fused.
    gen = torch.Generator().manual_seed(7)
    params = make_params()
    checkpoint = copy.deepcopy(_train(functools.partial(AdamW, foreach=False), params, 3, gen).state_dict())
    resumed = _train(AdamW, params, 3, gen, state_dict=checkpoint)
    gen = torch.Generator().manual_seed(7)
    twin_params = make_params()
    twin_checkpoint = copy.deepcopy(_train(functools.partial(torch.optim.AdamW, foreach=False), twin_params, 3, gen).state_dict())
    twin = _train(functools.partial(torch.optim.AdamW, **torch_twin(None)), twin_params, 3, gen, state_dict=twin_checkpoint)
    assert_same_run(params, resumed, twin_params, twin, **EXACT)


# --- the seed-style reference ------------------------------------------------------


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_reference_adamw_matches_torch(weight_decay):
    specs = [s for s in PARAM_SPECS if s[1] != torch.bfloat16]
    groups = [dict(lr=1e-2, weight_decay=weight_decay), dict(lr=3e-3, betas=(0.8, 0.99))]
    ref = run(ReferenceAdamW, groups, specs=specs)
    theirs = run(torch.optim.AdamW, groups, specs=specs, foreach=False)
    assert_same_run(*ref, *theirs)  # assert_close defaults: different (equivalent) op order


def test_reference_checkpoint_loads_into_torch():
    params = make_params([((4, 3), torch.float32)])
    opt = ReferenceAdamW(params)
    set_random_grads(params, torch.Generator().manual_seed(0))
    opt.step()
    torch_opt = torch.optim.AdamW(params)
    torch_opt.load_state_dict(copy.deepcopy(opt.state_dict()))
    torch_opt.step()
    assert torch_opt.state[params[0]]["step"].item() == 2


# --- benchmark smoke test ------------------------------------------------------------


def test_bench_optim_main_smoke(tmp_path, capsys):
    out = tmp_path / "bench.json"
    results = bench_optim.main(["--device", "cpu", "--steps", "2", "--warmup", "1", "--shapes", "tiny", "--json", str(out)])
    assert set(results["tiny"]) >= {"seed loop (ReferenceAdamW)", "ours foreach=True", "torch foreach=True"}
    assert "torch " + torch.__version__ in capsys.readouterr().out
    assert out.exists()


def test_gpt2_shapes_is_gpt2_small():
    assert sum(torch.Size(s).numel() for s in bench_optim.gpt2_shapes()) == 124_439_808


# --- layouts and torch's argument checks (issue 27, item 10) -----------------------------------------------


def _layout_case(kind):
    """(param, a gradient per step) where the gradient's memory layout differs from the parameter's."""
    gen = torch.Generator().manual_seed(3)
    if kind == "transposed grad":
        param = torch.randn(16, 24, generator=gen)
        grads = [torch.randn(24, 16, generator=gen).t() for _ in range(4)]
    else:  # a channels_last parameter with the contiguous gradients autograd often gives
        param = torch.randn(4, 8, 5, 5, generator=gen).to(memory_format=torch.channels_last)
        grads = [torch.randn(4, 8, 5, 5, generator=gen) for _ in range(4)]
    return param, grads


def _after_four_steps(make, param, grads, dtype):
    p = param.detach().clone(memory_format=torch.preserve_format).to(dtype).requires_grad_()
    opt = make([p])
    for g in grads:
        p.grad = g.to(dtype)
        opt.step()
    return p.detach().double()


@pytest.mark.parametrize("kind", ["transposed grad", "channels_last param"])
def test_default_path_is_exact_when_grad_layout_differs(kind):
    param, grads = _layout_case(kind)
    reference = _after_four_steps(functools.partial(torch.optim.AdamW, lr=1e-2, foreach=False), param, grads,
                                  torch.float64)
    ours = _after_four_steps(functools.partial(AdamW, lr=1e-2), param, grads, torch.float32)
    torchs = _after_four_steps(functools.partial(torch.optim.AdamW, lr=1e-2), param, grads, torch.float32)
    torch_error = (torchs - reference).abs().max().item()
    # torch's default path is off by rounding only (about 3e-7 here); a fused step mispairs the entries (1e-3).
    assert (ours - reference).abs().max().item() <= max(10 * torch_error, 1e-6)
    assert not AdamW._uses_fused({"fused": None, "foreach": None, "params": [_with_grad(param, grads[0])]})


def _with_grad(param, grad):
    p = param.detach().clone(memory_format=torch.preserve_format).requires_grad_()
    p.grad = grad
    return p


def test_same_layout_still_takes_the_fused_default_where_torch_has_it():
    p = torch.randn(4, 8, 5, 5).to(memory_format=torch.channels_last).requires_grad_()
    p.grad = torch.randn_like(p)  # channels_last like its parameter
    assert AdamW._uses_fused({"fused": None, "foreach": None, "params": [p]}) == adamw_module.uses_fused_by_default(p)
    q = torch.randn(6, 6)[:, ::2].requires_grad_()  # a view with gaps: not dense
    q.grad = torch.randn(6, 6)[:, ::2]
    assert not AdamW._uses_fused({"fused": None, "foreach": None, "params": [q]})


@pytest.mark.parametrize("kwargs", [
    dict(lr=torch.tensor(1e-3), foreach=True),
    dict(betas=(torch.tensor(0.9), torch.tensor(0.999)), foreach=True),
    dict(betas=(0.9, torch.tensor(0.999))),
    dict(betas=(torch.tensor([0.9, 0.8]), torch.tensor(0.999))),
    dict(fused=True, differentiable=True),
])
def test_argument_checks_match_torch(kwargs):
    with pytest.raises(Exception) as theirs:
        torch.optim.AdamW([torch.zeros(2, requires_grad=True)], **kwargs)
    with pytest.raises(type(theirs.value), match=f"^{__import__('re').escape(str(theirs.value))}$"):
        AdamW([torch.zeros(2, requires_grad=True)], **kwargs)


def test_tensor_lr_and_betas_with_capturable_are_accepted_as_torch_does():
    kwargs = dict(lr=torch.tensor(1e-3), betas=(torch.tensor(0.9), torch.tensor(0.999)), foreach=True, capturable=True)
    torch.optim.AdamW([torch.zeros(2, requires_grad=True)], **kwargs)
    group = AdamW([torch.zeros(2, requires_grad=True)], **kwargs).param_groups[0]
    assert group["capturable"] is True and group["differentiable"] is False


def test_differentiable_step_matches_torch_and_carries_grad():
    def run(make):
        w = torch.randn(5, generator=torch.Generator().manual_seed(1))
        lr = torch.tensor(0.1, requires_grad=True)
        p = w.requires_grad_().clone()  # differentiable steps update non-leaf tensors, as in torch's tests
        p.grad = torch.full((5,), 0.5)
        opt = make([p], lr=lr, differentiable=True)
        opt.step()
        return p

    ours, theirs = run(AdamW), run(torch.optim.AdamW)
    torch.testing.assert_close(ours, theirs, **EXACT)
    assert ours.grad_fn is not None and theirs.grad_fn is not None  # the update is part of the graph
