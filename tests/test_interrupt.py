"""Ctrl-C: a real SIGINT to the process group of a real parallel run (as a terminal sends it) stops it at once:
the queued work is dropped, no file is written after it, the report lists the files written before it, exit 130.

No timings: "at once" is shown by what the run did not do (files left unfixed, cache entries never written),
with a generous timeout only so that a run that ignores the signal fails instead of hanging.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_cli import SLOW

pytestmark = pytest.mark.skipif(not hasattr(os, "killpg"), reason="needs POSIX process groups")

FILES = 300


def _project(root: Path) -> Path:
    root.mkdir()
    for i in range(FILES):
        (root / f"m{i:03}.py").write_text(SLOW)
    return root


def _start(project: Path, *args: str, jobs: str = "2") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "torchlint", *args, "--jobs", jobs, "."], cwd=project,
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(condition, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while not condition():
        assert process.poll() is None, "the run ended before it could be interrupted"
        assert time.monotonic() < deadline, "the run never got going"
        time.sleep(0.005)


def _interrupt(process: subprocess.Popen) -> str:
    os.killpg(process.pid, signal.SIGINT)  # the parent and its workers, as Ctrl-C in a terminal
    _, err = process.communicate(timeout=60)
    return err


def _fixed(project: Path) -> set:
    return {p.name for p in project.glob("*.py") if p.read_text() != SLOW}


@pytest.mark.parametrize("jobs", ["2", "1"])
def test_ctrl_c_stops_fix_apply_and_lists_what_was_written(tmp_path, jobs):
    project = _project(tmp_path / "proj")
    process = _start(project, "fix", "--apply", "--no-cache", jobs=jobs)
    _wait_for(lambda: _fixed(project), process)
    err = _interrupt(process)
    assert process.returncode == 130, err
    fixed_at_exit = _fixed(project)
    reported = {line.strip() for line in err.splitlines() if line.startswith("  ")}
    assert f"{len(fixed_at_exit)} file" in err and "written before it" in err, err
    assert reported == fixed_at_exit  # every file written is reported, and nothing else
    assert len(fixed_at_exit) < FILES // 2  # the queued files were dropped, not worked through
    time.sleep(1.0)  # workers that outlived the run would still be writing
    assert _fixed(project) == fixed_at_exit
    assert not list(project.glob(".*.torchlint.tmp"))  # no half-written file left behind


def test_ctrl_c_stops_check_at_once(tmp_path):
    project = _project(tmp_path / "proj")
    cache = project / ".torchlint_cache"
    entries = lambda: [p for p in cache.rglob("*") if p.is_file() and p.parent.parent.name.startswith("v")]
    process = _start(project, "check")
    _wait_for(lambda: cache.is_dir() and entries(), process)
    err = _interrupt(process)
    assert process.returncode == 130, err
    assert "torchlint: interrupted" in err and "Aborted!" not in err
    done = len(entries())
    assert done < FILES // 2  # the workers stopped with the run
    time.sleep(1.0)
    assert len(entries()) == done
