"""How `torchlint bench` shows its results: progress when piped, the table's header and columns, the plot."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")

from test_harness import SMALL_WORKLOAD, write_workload  # noqa: E402
from torchlint.runtime import harness  # noqa: E402


def fake_fixer(code, text, path):
    return text.replace("SCALE = 1", "SCALE = 1.0"), 1


def workloads(tmp_path):
    write_workload(tmp_path / "fx", "TL999", "fake", SMALL_WORKLOAD.replace("SCALE = 1.0", "SCALE = 1"))
    return ["--device", "cpu", "--fixtures", str(tmp_path / "fx"), "--repeats", "2", "--warmup", "0"]


def test_progress_goes_to_stderr_when_piped(tmp_path, capsys):
    assert harness.main(workloads(tmp_path), fixer=fake_fixer) == 0
    captured = capsys.readouterr()
    assert "[1/1] TL999 fake ...\n" in captured.err
    assert "[1/1] TL999 fake: " in captured.err
    assert "[1/1]" not in captured.out  # the table alone on stdout


def test_table_names_the_device_once_and_puts_memory_beside_time(tmp_path, capsys):
    harness.main(workloads(tmp_path), fixer=fake_fixer)
    out = capsys.readouterr().out
    lines = out.splitlines()
    header, columns = lines[0], lines[3]
    name = harness.device_description("cpu")
    assert header.startswith(f"torchlint bench on {name}, size small") and header.count(name) == 1
    assert "(cpu)" not in header
    assert columns.index("after (median") < columns.index("peak memory") < columns.index("speed-up")
    meta = {"device": "cuda:1", "device_name": "NVIDIA H200"}
    assert harness.device_label(meta) == "NVIDIA H200 (cuda:1)"


def test_speedup_axis_is_symmetric_in_log_space():
    bottom, top = harness.speedup_axis_limits([0.5, 1.5])
    assert math.isclose(math.log10(bottom), -math.log10(top))
    assert bottom < 0.5 and top > 2  # 0.5x and 2x both shown, equally far from 1x
    bottom, top = harness.speedup_axis_limits([8.0])
    assert top > 8 and math.isclose(bottom * top, 1.0)
    assert harness.speedup_label(0.5) == "0.5x" and harness.speedup_label(2) == "2x"


def test_plot_has_log_axis_legend_and_memory_panel(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    captured = {}
    monkeypatch.setattr(plt, "close", lambda fig: captured.setdefault("fig", fig))
    plot = tmp_path / "speedups.png"
    args = workloads(tmp_path) + ["--plot", str(plot)]
    assert harness.main(args, fixer=fake_fixer) == 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    speed, *others = captured["fig"].axes
    assert speed.get_yscale() == "log"
    assert [t.get_text() for t in speed.get_legend().get_texts()]
    assert "log scale" in speed.get_ylabel()
    if others:  # the small workload measures memory on this machine
        assert "peak memory" in others[0].get_ylabel()
