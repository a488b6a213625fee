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


def test_recall_counts_instances_on_the_rules_line_and_shows_near_misses(tmp_path):
    recall = tmp_path / "recall.txt"
    recall.write_text(
        "# header\n"
        "repo/train.py:10 TL101  # loss.item() every step\n"
        "repo/train.py:20 TL402\n"
        "repo/nb.ipynb:cell3:2 TL502 # notebook: line in the cell\n"
        "repo/data.py:5 TL401\n"
    )
    findings = [
        {"path": "repo/train.py", "line": 10, "code": "TL101"},
        {"path": "repo/./train.py", "line": 22, "code": "TL402"},  # two lines away: shown, not counted
        {"path": "repo/nb.ipynb", "cell": 3, "line": 2, "code": "TL502"},
        {"path": "repo/data.py", "line": 5, "code": "TL402"},  # another rule on the line does not count
    ]
    real_code = _real_code()
    report = real_code.score_recall(real_code.read_recall(recall), findings)
    assert report[0] == "recall: 2 of 4 instances found (50%)"
    assert "  missed repo/train.py:20 TL402  (near: TL402 at line 22)" in report
    assert "  missed repo/data.py:5 TL401" in report
    assert "  repo/nb.ipynb: 1/1" in report


def test_labels_name_a_notebook_finding_by_its_cell(tmp_path):
    labels = tmp_path / "labels.txt"
    labels.write_text("repo/ch 5/nb.ipynb:cell12:4 TL101 right  # every step\n")
    real_code = _real_code()
    finding = {"path": "repo/ch 5/nb.ipynb", "cell": 12, "line": 4, "code": "TL101"}
    file, _, line = real_code.place(finding).rpartition(":")
    assert real_code.read_labels(labels) == {(file, int(line), "TL101"): "right"}


def test_a_fixed_notebook_is_judged_by_its_code_cells(tmp_path):
    import json

    real_code = _real_code()
    good = tmp_path / "good.ipynb"
    good.write_text(json.dumps({"cells": [
        {"cell_type": "code", "source": ["%matplotlib inline\n", "x = 1\n"]},
        {"cell_type": "code", "source": "%%bash\necho not python\n"},
        {"cell_type": "markdown", "source": "not ( python"},
        {"cell_type": "code", "source": "await run(x)\n"},
    ], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    assert real_code.compile_problem(good) is None
    bad = tmp_path / "bad.ipynb"
    bad.write_text(json.dumps({"cells": [{"cell_type": "code", "source": "def f(:\n"}], "nbformat": 4}))
    assert real_code.compile_problem(bad).startswith("cells do not compile")
    (tmp_path / "torn.ipynb").write_text('{"cells": [')
    assert real_code.compile_problem(tmp_path / "torn.ipynb").startswith("not a notebook")
    (tmp_path / "bad.py").write_text("def f(:\n")
    assert real_code.compile_problem(tmp_path / "bad.py") is not None
