"""benchmarks/ddp_no_sync.py, TL303's workload: two gloo processes on the CPU train with gradient accumulation
with and without `no_sync()`; the parameters agree and `no_sync()` around forward and backward all-reduces once
per optimizer step, while around `backward()` alone it all-reduces as often as without it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
    reason="torch.distributed with the gloo backend is not available")

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "ddp_no_sync.py"


def _run(tmp_path, *args):
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, str(SCRIPT), *args, "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    return done, json.loads(out.read_text()) if out.exists() else None


def test_no_sync_equal_results_and_fewer_all_reduces(tmp_path):
    # Run as a script: torch.multiprocessing.spawn pickles the worker by its module's import name.
    done, report = _run(tmp_path, "--accum", "3", "--steps", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    forms = report["forms"]
    assert all(form["equal_within_tolerance"] for form in forms.values()), forms
    assert forms["plain"]["all_reduces"] == 3 * forms["no_sync"]["all_reduces"] > 0
    assert forms["backward_only"]["all_reduces"] == forms["plain"]["all_reduces"]  # the docstring's warning
    assert "gloo CPU: ok" in done.stdout
