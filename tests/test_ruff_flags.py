"""Ruff's command-line habits, with Ruff's meaning: --exit-non-zero-on-fix, --isolated, --config KEY=VALUE,
--show-settings, --watch and `clean` (--show-files: tests/test_test_paths.py)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from test_cli import SLOW, _runner, invoke, project, write  # noqa: F401 - the fixture is used by name
from torchlint.cli import cli

FINDING = "4:51: TL501"


def test_exit_non_zero_on_fix_fails_a_run_that_wrote_fixes(project):
    write(project / "train.py", SLOW)
    assert invoke("fix", "--apply", "train.py").exit_code == 0  # everything fixed, nothing remains
    write(project / "train.py", SLOW)
    result = invoke("fix", "--apply", "--exit-non-zero-on-fix", "train.py")
    assert result.exit_code == 1 and "Fixed 1 problem in 1 file." in result.output
    assert invoke("check", "--fix", "--exit-non-zero-on-fix", "train.py").exit_code == 0  # nothing left to fix
    write(project / "train.py", SLOW)
    assert invoke("check", "--fix", "--exit-non-zero-on-fix", "train.py").exit_code == 1
    conflict = invoke("fix", "--apply", "--exit-non-zero-on-fix", "--exit-zero", "train.py")
    assert conflict.exit_code == 2 and "cannot be used with --exit-zero" in conflict.stderr


def test_isolated_ignores_every_configuration_file(project):
    write(project / "torchlint.toml", 'ignore = ["TL501"]\n')
    write(project / "train.py", SLOW)
    assert FINDING not in invoke("check", "train.py").output
    assert f"train.py:{FINDING}" in invoke("check", "--isolated", "train.py").output
    both = invoke("check", "--isolated", "--config", "torchlint.toml", "train.py")
    assert both.exit_code == 2 and "cannot be used with --isolated" in both.stderr


def test_config_key_value_overrides_the_files_and_the_flags_override_it(project):
    write(project / "torchlint.toml", 'select = ["TL5"]\ntorch-version = "2.4"\n')
    write(project / "train.py", SLOW)
    assert f"train.py:{FINDING}" in invoke("check", "train.py").output
    assert FINDING not in invoke("check", "--config", 'ignore = ["TL501"]', "train.py").output
    shown = invoke("check", "--show-settings", "--config", 'torch-version = "1.13"', "--config", "unsafe-fixes = true",
                   "train.py").output
    assert 'torch-version = "1.13"' in shown and "unsafe-fixes = true" in shown and 'select = ["TL5"]' in shown
    shown = invoke("check", "--show-settings", "--config", 'torch-version = "1.13"', "--torch-version", "2.1",
                   "train.py").output
    assert 'torch-version = "2.1"' in shown  # a dedicated flag wins, as in Ruff
    write(project / "ci.toml", 'select = ["TL2"]\n')
    shown = invoke("check", "--show-settings", "--config", "ci.toml", "--config", 'extend-select = ["TL5"]', "train.py")
    assert f"Settings path: {project / 'ci.toml'}" in shown.output and 'extend-select = ["TL5"]' in shown.output
    bad = invoke("check", "--config", "line-length = 100", "train.py")
    assert bad.exit_code == 2 and "--config 'line-length = 100': unknown key 'line-length'" in bad.stderr
    missing = invoke("check", "--config", "nowhere.toml", "train.py")
    assert missing.exit_code == 2 and "no such configuration file: 'nowhere.toml'" in missing.stderr


def test_clean_removes_the_caches_and_nothing_else(project):
    write(project / "torchlint.toml", "")
    write(project / "train.py", SLOW)
    write(project / "sub" / "a.py", SLOW)
    _runner().invoke(cli, ["check", "."])
    write(project / "sub" / ".torchlint_cache" / "entry", "x")
    assert (project / ".torchlint_cache" / "CACHEDIR.TAG").is_file()
    os.chdir(project / "sub")  # the configuration's cache is above the current folder
    result = _runner().invoke(cli, ["clean"])
    assert result.exit_code == 0
    assert not (project / ".torchlint_cache").exists() and not (project / "sub" / ".torchlint_cache").exists()
    assert "Removing cache at: .torchlint_cache" in result.stderr
    assert sorted(p.name for p in project.rglob("*")) == ["a.py", "sub", "torchlint.toml", "train.py"]


def _lines(stream, into: "queue.Queue[str]") -> None:
    for line in stream:
        into.put(line)


def _read_until(lines: "queue.Queue[str]", marker: str, seen: list) -> str:
    """Lines up to the one containing ``marker`` (60 s at most: a hung watch fails, never blocks)."""
    deadline = time.monotonic() + 60
    out = []
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        out.append(line)
        seen.append(line)
        if marker in line:
            return "".join(out)
    pytest.fail(f"no {marker!r} in the watch output: {''.join(seen)!r}")


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="needs POSIX signals")
def test_watch_checks_again_when_a_file_changes(project):
    write(project / "train.py", "import torch\n")
    process = subprocess.Popen([sys.executable, "-m", "torchlint", "check", "--watch", "--no-cache", "."],
                               cwd=project, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    lines: "queue.Queue[str]" = queue.Queue()
    threading.Thread(target=_lines, args=(process.stdout, lines), daemon=True).start()
    seen: list = []
    try:
        first = _read_until(lines, "Watching for file changes.", seen)
        assert "Starting linter in watch mode..." in first and "All checks passed!" in first
        write(project / "train.py", SLOW)
        second = _read_until(lines, "Watching for file changes.", seen)
        assert "File change detected..." in second and f"train.py:{FINDING}" in second
        write(project / "torchlint.toml", 'ignore = ["TL501"]\n')  # a new configuration file is a change too
        third = _read_until(lines, "Watching for file changes.", seen)
        assert "All checks passed!" in third
    finally:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=60)
    assert process.returncode == 130
