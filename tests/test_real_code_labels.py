"""benchmarks/real_code.py reads a reviewer's verdicts: paths as the repositories spell them (spaces, `#`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "real_code.py"


def _real_code():
    spec = importlib.util.spec_from_file_location("real_code_under_test", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_verdicts_on_paths_with_spaces_and_hashes(tmp_path):
    labels = tmp_path / "labels.txt"
    labels.write_text(
        "# a header comment\n"
        "\n"
        "repo/Char05 DDPG/DDPG.py:189 TL501 right  # soft update, every step\n"
        "repo/c#/train.py:12 TL101 wrong # CPU only\n"
        "repo/train.py:3 TL702 arguable\n"
    )
    assert _real_code().read_labels(labels) == {
        ("repo/Char05 DDPG/DDPG.py", 189, "TL501"): "right",
        ("repo/c#/train.py", 12, "TL101"): "wrong",
        ("repo/train.py", 3, "TL702"): "arguable",
    }


def test_a_line_that_is_no_verdict_is_named_with_its_line(tmp_path):
    labels = tmp_path / "labels.txt"
    labels.write_text("repo/train.py:3 TL702 arguable\nrepo/train.py TL101 right\n")
    with pytest.raises(SystemExit, match=r"labels.txt:2: not a verdict"):
        _real_code().read_labels(labels)
