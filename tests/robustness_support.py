"""Helpers shared by the robustness tests: a file with one known finding, and a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from torchlint.cli import cli

FINDING = "opt = torch.optim.Adam(model.parameters(), foreach=False)"  # TL501, safe fix
FIXED = "opt = torch.optim.Adam(model.parameters())"
REPO = Path(__file__).resolve().parents[1]


def with_finding(body: str = "") -> str:
    return "import torch\n" + body + "\n\ndef build(model):\n    " + FINDING + "\n    return opt\n"


def invoke(*args, input=None):
    try:
        runner = CliRunner(mix_stderr=False)  # click < 8.2
    except TypeError:
        runner = CliRunner()
    return runner.invoke(cli, [*map(str, args)], input=input)


def torchlint_subprocess(args, cwd: Path, timeout: float = 120, input: bytes = b"") -> subprocess.CompletedProcess:
    """The real command line in its own process: a crash there is an exit status here, not a dead test run."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "torchlint", *args], cwd=cwd, capture_output=True, timeout=timeout,
                          input=input, env=env)
