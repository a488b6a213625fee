"""The harness's "needs CUDA" verdict, and the workloads of the input-pipeline rules (issue 9)."""

import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torchlint.runtime import harness  # noqa: E402

WORKLOAD = textwrap.dedent('''
    import torch
    TOLERANCE = {"rtol": 0, "atol": 0}
    NEEDS_CUDA = True

    def setup(device, size):
        return device

    def run(device):
        return {"x": torch.ones(3).to(device)}
''')


def test_needs_cuda_workload_on_the_cpu_is_compared_but_not_timed(tmp_path: Path):
    def fixer(code, text, path):
        return text.replace("torch.ones(3).to(device)", "torch.ones(3, device=device)"), 1

    workload = harness.Workload("TL102", "bench_x", tmp_path / "bench_x.py", WORKLOAD)
    row = harness.bench_workload(workload, "cpu", "small", repeats=1, warmup=0, fixer=fixer, memory=False)
    assert row.error == "" and row.match is True
    assert row.verdict == harness.NEEDS_CUDA and row.before is None and row.speedup is None
    assert harness.exit_code([row], require_faster=True) == 0
    assert "needs CUDA" in harness.format_table([row], harness.metadata("cpu", "small", 1, 0))


def test_needs_cuda_workload_with_different_results_still_fails(tmp_path: Path):
    def fixer(code, text, path):
        return text.replace("torch.ones(3).to(device)", "torch.zeros(3, device=device)"), 1

    workload = harness.Workload("TL102", "bench_x", tmp_path / "bench_x.py", WORKLOAD)
    row = harness.bench_workload(workload, "cpu", "small", repeats=1, warmup=0, fixer=fixer, memory=False)
    assert row.verdict == "different results"


@pytest.mark.parametrize("code, name", [("TL102", "bench_step_masks"), ("TL103", "bench_loader_copies"),
                                        ("TL402", "bench_pageable_batches")])
def test_pipeline_workloads_need_cuda_and_their_fix_gives_the_after_form(code, name):
    (workload,) = [w for w in harness.discover(select=[code]) if w.name == name]
    after, applied = harness.real_fixer(code, workload.text, str(workload.path))
    assert applied >= 1
    expected = {"TL102": "torch.ones(batch, seq, width, device=device)",
                "TL103": "images = images.to(device, non_blocking=True)",
                "TL402": "shuffle=False, pin_memory=True)"}[code]
    assert expected in after
    assert "NEEDS_CUDA = True" in workload.text


def test_every_input_pipeline_rule_with_a_fix_ships_a_workload():
    assert {"TL102", "TL103", "TL402", "TL403"} <= {w.code for w in harness.discover()}
