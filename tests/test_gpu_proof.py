"""benchmarks/gpu_proof.sh in its CPU mode (`--device cpu`: small sizes, under 2 minutes), so the command a
session lent a GPU runs as is keeps working: every harness workload (with --profile) and bench_optim, one
table written with the date, device, torch and CUDA versions. What it covers: the script's steps, flags and
table, not any GPU number (marked `gpu_proof`; deselect with `-m "not gpu_proof"`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_proof.sh"

pytest.importorskip("torch")


@pytest.mark.gpu_proof
@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash and timeout")
def test_gpu_proof_runs_on_the_cpu(tmp_path):
    from torchlint.runtime.harness import discover

    env = dict(os.environ, PYTHON=sys.executable, GPU_PROOF_RESULTS=str(tmp_path))
    result = subprocess.run([str(SCRIPT), "--device", "cpu"], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    written = list(tmp_path.glob("gpu_proof_cpu_*.txt"))
    assert len(written) == 1 and (written[0].with_suffix(".json")).exists()
    table = written[0].read_text()
    assert table == result.stdout  # the table printed is the table written
    assert re.match(r"GPU proof \(cpu\) \d{4}-\d\d-\d\dT", table)
    assert re.search(r"device: CPU \| torch \S+ \| CUDA (none|\S+) \|", table)
    rows = [line for line in table.splitlines() if line.startswith("| TL")]
    assert len(rows) == len(discover()), "one row per harness workload"
    assert not [row for row in rows if "error" in row or "different" in row], rows
    assert all(row.split("|")[7].strip() not in ("", "-") for row in rows), "--profile fills the patterns column"
    assert sum(line.startswith("| AdamW step | tiny: ") for line in table.splitlines()) >= 6
