"""TL501's rewrite, step three (rules/_foreach/emit.py): the two loops that replace the original.

The first pass keeps the filters, state and host scalars and collects the tensors into lists per (device,
dtype); the second runs the foreach calls once per set of lists. The text is pinned for one list, several, a
lerp's end and a line that wraps; running it shows one group per (device, dtype) and the loop's own results.
"""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from foreach_support import HEADER, loop_in, render, step_loop

from torchlint.rules._foreach import NoFix, rewrite_loop

COMMENT = "# Batched with torch._foreach_*: collect the tensors per (device, dtype), then one call per op.\n"


def _rewritten(body: str, header: str = "for p in params:") -> str:
    return render(rewrite_loop(*step_loop(body, header)))


def test_one_list():
    assert _rewritten("p.mul_(0.5)") == COMMENT + textwrap.dedent("""\
        buckets = {}
        for p in params:
            param_list = buckets.setdefault((p.device, p.dtype), [])
            param_list.append(p)
        for param_list in buckets.values():
            torch._foreach_mul_(param_list, 0.5)
    """)


def test_several_lists_after_the_filters():
    assert _rewritten("if p.grad is None:\n    continue\np.add_(p.grad, alpha=-lr)") == COMMENT + textwrap.dedent("""\
        buckets = {}
        for p in params:
            if p.grad is None:
                continue
            param_list, grads = buckets.setdefault((p.device, p.dtype), ([], []))
            param_list.append(p)
            grads.append(p.grad)
        for param_list, grads in buckets.values():
            torch._foreach_add_(param_list, grads, alpha=-lr)
    """)


def test_a_lerp_groups_by_the_average_and_converts_its_end():
    assert _rewritten("e.mul_(b1).add_(p, alpha=1 - b1)", "for e, p in zip(ema, params):") == COMMENT + \
        textwrap.dedent("""\
        buckets = {}
        for e, p in zip(ema, params):
            ema_values, param_list = buckets.setdefault((e.device, e.dtype), ([], []))
            ema_values.append(e)
            param_list.append(p.to(e.dtype))
        for ema_values, param_list in buckets.values():
            torch._foreach_lerp_(ema_values, param_list, 1 - b1)
    """)


def test_collecting_inside_a_guard_and_a_bucket_line_that_wraps():
    source = ("state = opt.state[p]\nif len(state) == 0:\n    state['step'] = 0\n"
              "    state['first_moment_estimate'] = torch.zeros_like(p)\n"
              "    state['second_moment_estimate'] = torch.zeros_like(p)\n"
              "state['step'] += 1\nstep = state['step']\n"
              "first_moment_estimate = state['first_moment_estimate']\n"
              "second_moment_estimate = state['second_moment_estimate']\n"
              "first_moment_estimate.mul_(b1).add_(p.grad, alpha=1 - b1)\n"
              "second_moment_estimate.mul_(b1).addcmul_(p.grad, p.grad, value=1 - b1)\n"
              "p.addcdiv_(first_moment_estimate, second_moment_estimate.sqrt(), value=-lr)")
    lines = textwrap.indent(source, " " * 12)
    text = render(rewrite_loop(*loop_in(f"{HEADER}    for p in params:\n        if p.grad is not None:\n{lines}\n")))
    assert text == COMMENT + textwrap.dedent("""\
        buckets = {}
        for p in params:
            if p.grad is not None:
                state = opt.state[p]
                if len(state) == 0:
                    state['step'] = 0
                    state['first_moment_estimate'] = torch.zeros_like(p)
                    state['second_moment_estimate'] = torch.zeros_like(p)
                state['step'] += 1
                step = state['step']
                first_moment_estimate = state['first_moment_estimate']
                second_moment_estimate = state['second_moment_estimate']
                first_moment_estimates, grads, second_moment_estimates, param_list = buckets.setdefault(
                    (p.device, p.dtype), ([], [], [], [])
                )
                first_moment_estimates.append(first_moment_estimate)
                grads.append(p.grad)
                second_moment_estimates.append(second_moment_estimate)
                param_list.append(p)
        for first_moment_estimates, grads, second_moment_estimates, param_list in buckets.values():
            torch._foreach_mul_(first_moment_estimates, b1)
            torch._foreach_add_(first_moment_estimates, grads, alpha=1 - b1)
            torch._foreach_mul_(second_moment_estimates, b1)
            torch._foreach_addcmul_(second_moment_estimates, grads, grads, value=1 - b1)
            torch._foreach_addcdiv_(param_list, first_moment_estimates, torch._foreach_sqrt(second_moment_estimates), value=-lr)
    """)


def test_refused_when_every_tensor_is_converted_to_another_ones_dtype():
    # each is a lerp's end, converted to the other's dtype: no tensor is left whose device and dtype key a group
    with pytest.raises(NoFix) as refused:
        _rewritten("x.mul_(b1).add_(y, alpha=1 - b1)\ny.mul_(b1).add_(x, alpha=1 - b1)", "for x, y in zip(xs, ys):")
    assert str(refused.value) == "no per-parameter tensor to group by device and dtype"


@pytest.mark.parametrize("dtypes, groups", [(("float32", "float32"), 1), (("float32", "float64"), 2)])
def test_the_emitted_loops_run_one_group_per_device_and_dtype(dtypes, groups):
    torch = pytest.importorskip("torch")
    body = "if p.grad is None:\n    continue\np.grad.mul_(b1)\np.add_(p.grad, alpha=-lr)"
    lines = textwrap.indent(body, " " * 8)
    # `return locals()`: the rewritten function's buckets, to count its groups
    source = f"{HEADER}    for p in params:\n{lines}\n    return locals()\n"
    loop, ctx = loop_in(source)
    fixed = ctx.analysis.module.deep_replace(loop, cst.FlattenSentinel(rewrite_loop(loop, ctx))).code

    def run(code):
        namespace = {}
        exec(compile(code, "<loop>", "exec"), namespace)
        generator = torch.Generator().manual_seed(0)
        params = [torch.randn(3, 4, generator=generator, dtype=getattr(torch, dtype)) for dtype in dtypes]
        params.append(torch.randn(2, generator=generator))  # no gradient: filtered out
        for p in params[:-1]:
            p.grad = torch.randn(p.shape, generator=generator, dtype=p.dtype)
        names = namespace["step"](params, None, 0.1, 0.9, 0.0)
        return params, names

    before, _ = run(source)
    after, names = run(fixed)
    assert len(names["buckets"]) == groups
    assert sum(len(lists[0]) for lists in names["buckets"].values()) == len(dtypes)
    for b, a in zip(before, after):
        assert torch.equal(a, b) and (a.grad is None or torch.equal(a.grad, b.grad))
