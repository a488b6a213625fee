"""The progress counter: only on a terminal, only for long runs, throttled, erased before the report."""

from __future__ import annotations

import io

import pytest

from torchlint.run.progress import DELAY_S, Progress


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_quick_run_prints_nothing():
    stream, clock = io.StringIO(), FakeClock()
    progress = Progress(10, stream, clock)
    clock.now += DELAY_S / 2
    progress.update(5)
    progress.close()
    assert stream.getvalue() == ""


def test_a_long_run_shows_a_counter_throttled_then_erases_it():
    stream, clock = io.StringIO(), FakeClock()
    progress = Progress(1000, stream, clock)
    clock.now += DELAY_S
    progress.update(10)
    progress.update(11)  # the same instant: not redrawn
    clock.now += 1.0
    progress.update(500)
    shown = stream.getvalue()
    assert shown.count("\r") == 2
    assert "10/1,000 files checked (1%)" in shown and "500/1,000 files checked (50%)" in shown
    assert "11/" not in shown
    progress.close()
    assert stream.getvalue().endswith("\r" + " " * len("torchlint: 500/1,000 files checked (50%)") + "\r")


def test_no_counter_where_no_one_watches(monkeypatch):
    monkeypatch.setattr("sys.stderr", io.StringIO())  # not a terminal: a pipe, a file, a CI log
    assert Progress.for_terminal(1000) is None


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_counter_unless_quiet_or_dumb(monkeypatch):
    monkeypatch.setattr("sys.stderr", FakeTerminal())
    monkeypatch.setenv("TERM", "xterm")
    assert Progress.for_terminal(1000) is not None
    assert Progress.for_terminal(1000, quiet=True) is None
    assert Progress.for_terminal(1) is None
    monkeypatch.setenv("TERM", "dumb")
    assert Progress.for_terminal(1000) is None


class CountingProgress:
    def __init__(self) -> None:
        self.seen: list = []
        self.closed = False

    def update(self, done: int) -> None:
        self.seen.append(done)

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_runner_reports_every_file_done_and_closes_the_counter(tmp_path, jobs):
    from torchlint.config import Settings
    from torchlint.run.runner import Job, run

    paths = []
    for i in range(6):
        path = tmp_path / f"m{i}.py"
        path.write_text("import torch\nx = torch.zeros(3)\n")
        paths.append(path)
    progress = CountingProgress()
    results = run(paths, Job(Settings(root=tmp_path)), jobs=jobs, progress=progress)
    assert len(results) == 6
    assert progress.seen[-1] == 6 and progress.seen == sorted(progress.seen)
    assert progress.closed
