"""What users of Ruff and pre-commit expect: per-file configuration, Ruff's flags, closed pipes, odd paths."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import sys
from pathlib import Path

import pytest

from test_cli import SLOW, UNSAFE_ONLY, invoke, project, write  # noqa: F401 - the fixture is used by name

REPO = Path(__file__).resolve().parent.parent


# --- files that are not Python ------------------------------------------------------------------------
def test_named_non_python_file_is_reported_not_passed(project):
    write(project / "notes.txt", "optimizer = torch.optim.SGD(params, foreach=False)\n")
    result = invoke("check", "notes.txt")
    assert result.exit_code == 1
    assert "notes.txt:1:1: TL000 not a Python file or notebook" in result.output
    assert "All checks passed!" not in result.output


def test_named_script_with_python_shebang_is_checked(project):
    write(project / "train", "#!/usr/bin/env python3\n" + SLOW)
    result = invoke("check", "train")
    assert "train:5:51: TL501" in result.output


def test_folder_without_python_files_warns(project):
    write(project / "data" / "readme.md", "# nothing\n")
    result = invoke("check", "data")
    assert result.exit_code == 0
    assert "warning: No Python files found under the given path(s)" in result.stderr


# --- per-file configuration ---------------------------------------------------------------------------
def test_each_file_uses_its_closest_configuration_whatever_the_order(project):
    write(project / "a.py", SLOW)
    write(project / "sub" / "b.py", SLOW)
    write(project / "sub" / "torchlint.toml", 'ignore = ["TL501"]\n')
    forward = invoke("check", "a.py", "sub/b.py").output
    backward = invoke("check", "sub/b.py", "a.py").output
    assert forward == backward
    assert "a.py:4:51: TL501" in forward and "sub/b.py" not in forward
    assert "sub/b.py" not in invoke("check", ".").output


def test_extend_inherits_and_config_flag_overrides_all(project):
    write(project / "pyproject.toml", '[tool.torchlint]\ntorch-version = "1.13"\n')
    write(project / "sub" / "torchlint.toml", 'extend = "../pyproject.toml"\nignore = ["TL501"]\n')
    bare_zero_grad = UNSAFE_ONLY.replace("set_to_none=False", "")
    write(project / "sub" / "train.py", bare_zero_grad + SLOW.replace("import torch\n", ""))
    out = invoke("check", "sub").output
    assert "TL201" in out  # torch 1.13 from the extended file
    assert "TL501" not in out  # this file's ignore
    write(project / "ci.toml", 'select = ["TL501"]\n')
    out = invoke("check", "--config", "ci.toml", "sub").output
    assert "TL501" in out and "TL201" not in out


def test_extend_cycle_is_a_configuration_error(project):
    write(project / "torchlint.toml", 'extend = "sub/torchlint.toml"\n')
    write(project / "sub" / "torchlint.toml", 'extend = "../torchlint.toml"\n')
    write(project / "sub" / "a.py", SLOW)
    result = invoke("check", ".")
    assert result.exit_code == 2 and "cycle" in result.stderr


def test_nested_configuration_excludes_apply_to_its_folder(project):
    write(project / "a.py", SLOW)
    write(project / "sub" / "torchlint.toml", 'extend-exclude = ["generated/"]\n')
    write(project / "sub" / "generated" / "g.py", SLOW)
    write(project / "sub" / "kept.py", SLOW)
    out = invoke("check", ".").output
    assert "sub/kept.py" in out and "generated" not in out


def test_cache_follows_per_file_settings(project):
    write(project / "a.py", SLOW)
    write(project / "sub" / "b.py", SLOW)
    args = ("check", ".", "--cache-dir", str(project / "cache"))
    from torchlint.cli import cli
    from test_cli import _runner

    first = _runner().invoke(cli, list(args)).output
    write(project / "sub" / "torchlint.toml", 'ignore = ["TL501"]\n')
    second = _runner().invoke(cli, list(args)).output
    assert "sub/b.py" in first and "sub/b.py" not in second and "a.py:4:51" in second


# --- Ruff's flags -----------------------------------------------------------------------------------
def test_check_fix_diff_and_show_fixes_as_ruff_users_type_them(project):
    target = write(project / "train.py", SLOW)
    result = invoke("check", "--diff", ".")
    assert result.exit_code == 1 and "+opt = torch.optim.SGD(model.parameters(), lr=0.1)" in result.output
    assert target.read_text() == SLOW
    result = invoke("check", "--fix", "--show-fixes", ".")
    assert result.exit_code == 0, result.output
    assert "fixed 1 x TL501" in result.output
    assert "foreach=False" not in target.read_text()
    assert invoke("fix", "--diff", "--apply", ".").exit_code == 0  # --diff wins: nothing left to show


# --- closed pipes -----------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [["explain", "TL101"], ["explain", "--all"], ["rules"], ["check", "--no-cache", "."]])
def test_closed_pipe_is_not_a_crash(project, args):
    write(project / "train.py", SLOW * 50)
    process = subprocess.Popen([sys.executable, "-m", "torchlint", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, cwd=project)
    process.stdout.close()  # the reader is gone before anything is written, as after `| head -1`
    stderr = process.stderr.read().decode()
    assert process.wait() in (0, 1)
    assert "internal error" not in stderr and "Traceback" not in stderr, stderr


# --- pre-commit hooks -------------------------------------------------------------------------------
def test_pre_commit_hooks_run_serially_on_python_and_notebooks():
    text = (REPO / ".pre-commit-hooks.yaml").read_text()
    hooks = text.split("- id: ")[1:]
    assert len(hooks) == 2
    for hook in hooks:
        assert "require_serial: true" in hook
        assert "types_or: [python, pyi, jupyter]" in hook


# --- explain ----------------------------------------------------------------------------------------
def test_explain_fix_line_comes_from_the_rule_applicability():
    assert "Fix: always available; unsafe" in invoke("explain", "TL201").output
    assert "Fix: sometimes available; safe (" in invoke("explain", "TL202").output
    assert "Fix: sometimes available; safe or unsafe" in invoke("explain", "TL104").output


def test_explain_tl000_by_name_and_all():
    result = invoke("explain", "TL000")
    assert result.exit_code == 0 and "## What it does" in result.output
    assert invoke("explain", "zero-grad-keeps-zeros").output == invoke("explain", "TL201").output
    everything = invoke("explain", "--all").output
    from torchlint.registry import all_rules

    for rule in all_rules():
        assert f"# {rule.code} {rule.name}\n" in everything
    assert invoke("explain").exit_code == 2


# --- adoption: --add-noqa and TL900 ------------------------------------------------------------------
def test_add_noqa_silences_every_finding_and_tl900_keeps_quiet(project):
    source = SLOW + (
        "opt2 = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)  # keep this comment\n"
        "opt3 = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)  # noqa: E501\n"
        'doc = """text\n'
        'opt4 = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)\n"""\n'
    )
    target = write(project / "train.py", source)
    result = invoke("check", "--add-noqa", ".")
    assert result.exit_code == 0 and "Added 3 noqa directives." in result.stderr
    text = target.read_text()
    assert "lr=0.1, foreach=False)  # noqa: TL501\n" in text
    assert "# keep this comment  # noqa: TL501\n" in text
    assert "# noqa: E501, TL501\n" in text
    assert invoke("check", ".").exit_code == 0  # everything silenced, and no TL900 either
    assert invoke("check", "--add-noqa", ".").stderr.startswith("Added 0 noqa directives.")


def test_unused_noqa_is_reported_and_fixed(project):
    target = write(project / "train.py", "import torch\nopt = torch.optim.AdamW(params, lr=1e-3)  # noqa: TL501, E501\n")
    out = invoke("check", ".").output
    assert "train.py:2:43: TL900 [*] unused `noqa` directive (unused: `TL501`); remove it" in out
    assert invoke("fix", "--apply", ".").exit_code == 0
    assert target.read_text().endswith("lr=1e-3)  # noqa: E501\n")


# --- unreadable paths ------------------------------------------------------------------------------------
def _as_unprivileged(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """torchlint run by a user who cannot read what mode 000 hides (root reads everything: run as nobody)."""
    command = [sys.executable, "-m", "torchlint", *args]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: no user to whom a file is unreadable")
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, env={**os.environ, "HOME": str(cwd)})


@pytest.fixture
def open_folder():
    """A folder any user can enter (pytest's tmp_path is root's own where root runs the tests)."""
    folder = Path(tempfile.mkdtemp(prefix="torchlint-unreadable-"))
    folder.chmod(0o777)
    yield folder
    for path in folder.rglob("*"):
        path.chmod(0o777) if path.is_dir() else None
    shutil.rmtree(folder)


def test_an_unreadable_file_named_on_the_command_line_is_a_tl000_and_the_run_goes_on(open_folder):
    write(open_folder / "ok.py", SLOW)
    write(open_folder / "secret.py", SLOW).chmod(0)
    write(open_folder / "locked" / "inner.py", SLOW)
    (open_folder / "locked").chmod(0)
    result = _as_unprivileged(open_folder, "check", "--no-cache", "secret.py", "ok.py", "locked", "missing.py")
    if "ok.py" not in result.stdout and "Permission denied" in result.stderr:
        pytest.skip("this user cannot run torchlint from the venv")
    assert result.returncode == 1, result.stderr
    assert "secret.py:1:1: TL000 cannot read: Permission denied" in result.stdout
    assert "locked:1:1: TL000 cannot read this folder: Permission denied" in result.stdout
    assert "missing.py:1:1: TL000 no such file or directory" in result.stdout  # as Ruff's E902
    assert "ok.py:4:51: TL501" in result.stdout
    assert "Invalid value" not in result.stderr
