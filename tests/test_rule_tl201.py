"""Focused tests for TL201 zero-grad-keeps-zeros: versions, aliases, load-bearing zeros, fix safety."""

from __future__ import annotations

import pytest

import textwrap

from fixture_support import fix, lint
from torchlint.config import Settings
from torchlint.rule import Applicability

OLD = "# torchlint-fixture: torch-version=1.13\n"


def src(code: str) -> str:
    return textwrap.dedent(code).lstrip("\n")


LOOP = src(
    """
    import torch as t
    from torch.optim import SGD

    def train(model, loader):
        opt = SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            opt.zero_grad()
            t.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    """
)


def test_bare_zero_grad_is_fine_on_torch_2():
    assert lint(LOOP, "TL201") == []


def test_bare_zero_grad_is_flagged_before_torch_2_with_an_unsafe_fix():
    diagnostics = lint(OLD + LOOP, "TL201")
    assert [(d.line, d.fix) for d in diagnostics] == [(8, Applicability.UNSAFE)]
    fixed = fix(OLD + LOOP, "TL201")
    assert "opt.zero_grad(set_to_none=True)" in fixed
    assert fix(OLD + LOOP, "TL201", unsafe=False) == OLD + LOOP  # nothing is safe


def test_set_to_none_true_and_variables_are_silent_on_every_version():
    code = LOOP.replace("opt.zero_grad()", "opt.zero_grad(set_to_none=True)")
    assert lint(code, "TL201") == [] and lint(OLD + code, "TL201") == []
    code = LOOP.replace("opt.zero_grad()", "opt.zero_grad(set_to_none=flag)")
    assert lint(OLD + code, "TL201") == []


def test_set_to_none_false_fix_depends_on_the_version():
    code = LOOP.replace("opt.zero_grad()", "opt.zero_grad(set_to_none=False)")
    assert "opt.zero_grad()\n" in fix(code, "TL201")
    assert "opt.zero_grad(set_to_none=True)" in fix(OLD + code, "TL201")


def test_bare_zero_grad_without_torch_is_not_ours():
    code = OLD + "class Acc:\n    def zero_grad(self): ...\n\nfor b in batches:\n    acc.zero_grad()\n    b.backward()\n"
    assert lint(code, "TL201") == []


def test_grad_read_after_wraparound_keeps_zeros():
    # the gradient is read at the top of the next iteration, before backward(): the zeros are needed
    code = src(
        """
        import torch
        def train(model, opt, loader):
            for x, y in loader:
                for p in model.parameters():
                    p.grad.mul_(0.9)
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
                opt.zero_grad(set_to_none=False)
        """
    )
    assert lint(code, "TL201") == []


def test_grad_reads_after_backward_do_not_silence():
    code = src(
        """
        import torch
        def train(model, opt, loader):
            for x, y in loader:
                opt.zero_grad(set_to_none=False)
                torch.nn.functional.mse_loss(model(x), y).backward()
                norms = [p.grad.norm() for p in model.parameters()]
                opt.step()
        """
    )
    assert len(lint(code, "TL201")) == 1


def test_parameter_server_reported_nowhere_even_before_torch_2():
    code = OLD + src(
        """
        import torch
        def apply(model, opt, grads):
            opt.zero_grad()
            for p, g in zip(model.parameters(), grads):
                p.grad += g
            opt.step()
        """
    )
    assert lint(code, "TL201") == []


def test_manual_zeroing_fix_output_runs_and_frees_grads():
    pytest.importorskip("torch")
    code = src(
        """
        import torch
        model = torch.nn.Linear(3, 1)
        model(torch.randn(2, 3)).sum().backward()
        for name, p in model.named_parameters():
            p.grad.detach_()
            p.grad.zero_()
        """
    )
    fixed = fix(code, "TL201")
    assert "p.grad = None" in fixed and "detach_" not in fixed
    scope: dict = {}
    exec(compile(fixed, "fixed", "exec"), scope)
    assert all(p.grad is None for p in scope["model"].parameters())


def test_zero_of_non_gradients_is_silent():
    code = src(
        """
        import torch
        def train(model, opt, loader, stats):
            for x, y in loader:
                for p in model.parameters():
                    p.data.zero_()
                stats.grad.zero_()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
        """
    )
    assert lint(code, "TL201") == []


def test_detects_on_the_index_and_fixes_the_statement_it_reports():
    """TL201 finds on the stdlib index, with no LibCST parse in `check`; a manual zeroing's fix is made on the
    statement around the LibCST twin of its zeroing call (the one before it in the line stays)."""
    from torchlint.engine import needs_libcst, reports_without_stages
    from torchlint.registry import rules_by_code

    code = src(
        """
        import torch
        def train(model, opt, loader):
            for x, y in loader:
                for p in model.parameters():
                    print(p); p.grad.zero_()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
        """
    )
    rule = rules_by_code()["TL201"]
    assert not needs_libcst(code)
    [report] = reports_without_stages([rule()], code, Settings(select=("TL201",)), [])
    assert report.span == (5, 22, 5, 36) and report.rewrite is not None
    assert "print(p); p.grad = None" in fix(code, "TL201", unsafe=True)
