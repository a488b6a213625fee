"""Focused tests for TL502 optimizer-not-fused: versions, call layouts, what makes it stay silent."""

from __future__ import annotations

import textwrap

import pytest

from fixture_support import fix, lint
from torchlint.rule import Applicability


def script(optimizer: str, header: str = "", extra: str = "") -> str:
    return header + textwrap.dedent(
        """
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
        model = Net().to(device)
        {extra}
        optimizer = {optimizer}
        for x, y in loader:
            optimizer.zero_grad()
            loss_fn(model(x.to(device)), y.to(device)).backward()
            optimizer.step()
        """
    ).format(optimizer=optimizer, extra=extra).lstrip("\n")


def version(v: str) -> str:
    return f"# torchlint-fixture: torch-version={v}\n"


@pytest.mark.parametrize(
    "v, optimizer, outcome",
    [
        ("1.12", "torch.optim.Adam(model.parameters())", None),  # no fused Adam yet
        ("1.13", "torch.optim.Adam(model.parameters())", "report"),  # fused, but CUDA-only: no fix
        ("1.13", "torch.optim.AdamW(model.parameters())", None),  # fused AdamW since 2.0
        ("2.2", "torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)", None),  # fused SGD since 2.3
        ("2.3", "torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)", "report"),
        ("2.4", "torch.optim.AdamW(model.parameters())", "fix"),
        ("2.4", "torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)", "report"),  # MPS fused SGD since 2.5
        ("2.5", "torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)", "fix"),
    ],
)
def test_versions(v, optimizer, outcome):
    diagnostics = lint(script(optimizer, version(v)), "TL502")
    if outcome is None:
        assert diagnostics == []
    else:
        (d,) = diagnostics
        assert d.fix == (Applicability.UNSAFE if outcome == "fix" else None)


@pytest.mark.parametrize(
    "optimizer",
    [
        "torch.optim.AdamW(model.parameters(), fused=False)",
        "torch.optim.AdamW(model.parameters(), foreach=True)",
        "torch.optim.AdamW(model.parameters(), differentiable=False)",
        "torch.optim.AdamW(model.parameters(), **kwargs)",
        "torch.optim.AdamW(*args)",
        "torch.optim.AdamW([{'params': model.parameters(), 'fused': False}])",
        "torch.optim.RMSprop(model.parameters())",
        "apex.optimizers.FusedAdam(model.parameters())",
    ],
)
def test_silent_where_the_implementation_is_chosen_or_unknown(optimizer):
    assert lint(script(optimizer), "TL502") == []


@pytest.mark.parametrize("extra", ["torch.set_default_dtype(torch.complex64)", "emb = nn.Embedding(10, 3, sparse=True)"])
def test_silent_where_fused_kernels_reject_the_parameters(extra):
    assert lint(script("torch.optim.Adam(model.parameters())", extra=extra), "TL502") == []


def test_silent_in_tests_and_cpu_only_code():
    source = script("torch.optim.Adam(model.parameters())")
    assert lint(source, "TL502", path="tests/test_train.py") == []
    assert lint(source.replace('"cuda" if torch.cuda.is_available() else "cpu"', '"cpu"'), "TL502") == []


def test_no_fix_where_the_file_may_run_on_an_untracked_device():
    (d,) = lint(script("torch.optim.Adam(model.parameters())", extra="import torch_xla.core.xla_model as xm"), "TL502")
    assert d.fix is None and "xla" in d.message


@pytest.mark.parametrize(
    "before, after",
    [
        ("torch.optim.Adam(params)", "torch.optim.Adam(params, fused=True)"),
        ("torch.optim.Adam()", "torch.optim.Adam(fused=True)"),
        ("torch.optim.Adam(params, lr=1e-3)", "torch.optim.Adam(params, lr=1e-3, fused=True)"),
        ("torch.optim.Adam(\n    params,\n    lr=1e-3,\n)", "torch.optim.Adam(\n    params,\n    lr=1e-3,\n    fused=True,\n)"),
        ("torch.optim.Adam(\n    params,\n    lr=1e-3\n)", "torch.optim.Adam(\n    params,\n    lr=1e-3,\n    fused=True\n)"),
        # aligned arguments: the new one is aligned like the others
        ("torch.optim.Adam(params,\n                 lr=1e-3)",
         "torch.optim.Adam(params,\n                 lr=1e-3,\n                 fused=True)"),
    ],
)
def test_fix_follows_the_call_layout_and_is_idempotent(before, after):
    fixed = fix(script(before), "TL502")
    assert f"optimizer = {after}\n" in fixed
    assert fix(fixed, "TL502") == fixed
    assert lint(fixed, "TL502") == []


def test_comment_inside_the_call_is_reported_without_a_fix():
    (d,) = lint(script("torch.optim.Adam(\n    params,  # all of them\n)"), "TL502")
    assert d.fix is None and "comment" in d.message


def test_resuming_scripts_are_told_that_load_state_dict_restores_the_old_flags():
    resume = "optimizer.load_state_dict(torch.load('ckpt.pt')['optimizer'])\n"
    (d,) = lint(script("torch.optim.AdamW(model.parameters())") + resume, "TL502")
    assert d.fix is Applicability.UNSAFE and "load_state_dict" in d.message
    (d,) = lint(script("torch.optim.AdamW(model.parameters())") + "model.load_state_dict(sd)\n", "TL502")
    assert "load_state_dict" not in d.message
