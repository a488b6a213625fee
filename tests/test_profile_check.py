"""`torchlint bench --profile`: the plumbing to PyTorch's profiler matcher, on the CPU, at the smallest size."""

import json
import textwrap

import pytest

torch = pytest.importorskip("torch")

from torchlint.runtime import harness, profile_check  # noqa: E402
from torchlint.runtime.profile_check import ProfileCheck, check_forms  # noqa: E402

CONV_BN = '''
import torch
from torch import nn

TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}


def setup(device, size):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 4, 3), nn.BatchNorm2d(4))
    torch.manual_seed(1)  # the same weights in both forms, whatever the biases' initialisation drew
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.normal_(m.weight, std=0.1)
    return model, torch.randn(2, 3, 8, 8)


def run(state):
    model, x = state
    return {"y": model(x)}
'''


def test_bench_profile_column_says_the_fix_removed_the_pattern(tmp_path):
    folder = tmp_path / "fx" / "TL301"
    folder.mkdir(parents=True)
    (folder / "bench_tiny_conv_bn.py").write_text(textwrap.dedent(CONV_BN))
    out = tmp_path / "bench.json"
    code = harness.main(["--device", "cpu", "--size", "small", "--fixtures", str(tmp_path / "fx"), "--repeats", "1",
                         "--warmup", "0", "--no-memory", "--profile", "--json", str(out)])
    data = json.loads(out.read_text())
    (row,) = data["rows"]
    assert code == 0, row["error"]
    assert row["profile"] == "conv bias + BN: removed"
    assert row["profile_check"]["before"] == ["Enabling Bias in Conv2d Followed By BatchNorm Pattern"]
    assert row["profile_check"]["after"] == []
    assert "profiler patterns" in data["table"] and "conv bias + BN: removed" in data["table"]


def test_without_profile_the_table_has_no_profiler_column(tmp_path):
    folder = tmp_path / "fx" / "TL301"
    folder.mkdir(parents=True)
    (folder / "bench_tiny_conv_bn.py").write_text(textwrap.dedent(CONV_BN))
    out = tmp_path / "bench.json"
    harness.main(["--device", "cpu", "--fixtures", str(tmp_path / "fx"), "--repeats", "1", "--warmup", "0",
                  "--no-memory", "--json", str(out)])
    data = json.loads(out.read_text())
    assert "profiler patterns" not in data["table"] and data["rows"][0]["profile"] == ""


def _fp32_training_step():
    model = torch.nn.Linear(16, 16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(4, 16)).sum().backward()
    optimizer.step()


def test_cuda_only_patterns_say_needs_cuda_on_the_cpu_never_a_pass():
    # The matcher reports "FP32 MatMul" for CPU matmuls on a CPU-only build, and single-tensor optimizers are
    # the CPU's default: neither may turn into "removed" or "still there" here.
    check = check_forms((_fp32_training_step, _fp32_training_step), "cpu", "TL702")
    assert check.cell() == "fp32 matmul: needs CUDA"
    assert "FP32 MatMul Pattern" not in check.before
    other = check_forms((_fp32_training_step, _fp32_training_step), "cpu", "TL104")
    assert other.cell() == "none"


def test_a_matcher_failure_is_reported_in_the_cell(monkeypatch):
    def broken(prof):
        raise ValueError("not enough values to unpack")

    monkeypatch.setattr(profile_check, "matched_patterns", broken)
    check = check_forms((_fp32_training_step, _fp32_training_step), "cpu", "TL201")
    assert check.cell() == "profiler error: ValueError: not enough values to unpack"


def test_cell_wording():
    assert ProfileCheck().cell() == "none"
    check = ProfileCheck(before=["Gradient Set To Zero Instead of None Pattern", "Synchronized DataLoader Pattern"],
                         after=["Synchronized DataLoader Pattern", "Extra CUDA Copy Pattern"],
                         skipped=["FP32 MatMul Pattern"])
    assert check.cell() == ("grad zeroed: removed; synchronized DataLoader: still there; "
                            "extra CUDA copy: new in the fixed form; fp32 matmul: skipped by the matcher")
