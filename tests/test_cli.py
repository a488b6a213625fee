"""The command line as a user meets it: output, exit codes, configuration, fixing, bad input."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from torchlint.cli import cli

SLOW = textwrap.dedent(
    """\
    import torch

    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    """
)
UNSAFE_ONLY = textwrap.dedent(
    """\
    import torch

    def train(model, opt, loader):
        for x, y in loader:
            opt.zero_grad(set_to_none=False)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
    """
)
CLEAN = "import torch\n\nmodel = torch.nn.Linear(4, 2)\n"


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # click < 8.2
    except TypeError:
        return CliRunner()


def invoke(*args, input=None):
    return _runner().invoke(cli, [*map(str, args), "--no-cache"] if args and args[0] in ("check", "fix") else list(map(str, args)), input=input)


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    return tmp_path


def write(path: Path, text: str, **kw) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, **kw)
    return path


# --- check -----------------------------------------------------------------------------------------
def test_check_prints_located_diagnostics_and_summary(project):
    write(project / "train.py", SLOW)
    result = invoke("check", ".")
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0].startswith("train.py:4:51: TL501 [*] ")
    assert "Found 1 problem (1 fixable)." in result.output


def test_check_clean_tree_exits_zero(project):
    write(project / "ok.py", CLEAN)
    result = invoke("check")
    assert result.exit_code == 0
    assert "All checks passed!" in result.output


def test_exit_zero_and_quiet(project):
    write(project / "train.py", SLOW)
    result = invoke("check", "--exit-zero", "--quiet")
    assert result.exit_code == 0
    assert "Found" not in result.output and "TL501" in result.output


def test_unsafe_fixes_are_counted_separately(project):
    write(project / "train.py", UNSAFE_ONLY)
    result = invoke("check")
    assert "(0 fixable; 1 more with --unsafe-fixes)" in result.output


def test_unknown_rule_code_is_a_usage_error(project):
    write(project / "train.py", SLOW)
    result = invoke("check", "--select", "TL999")
    assert result.exit_code == 2
    assert "TL999" in result.stderr and "torchlint rules" in result.stderr
    assert invoke("check", "--select", "XYZ").exit_code == 2


def test_select_and_ignore_prefixes(project):
    write(project / "train.py", SLOW + UNSAFE_ONLY.replace("import torch\n", ""))
    assert "TL201" not in invoke("check", "--select", "TL5").output
    out = invoke("check", "--select", "ALL", "--ignore", "TL5").output
    assert "TL201" in out and "TL501" not in out
    out = invoke("check", "--select", "TL2", "--extend-select", "TL501").output
    assert "TL201" in out and "TL501" in out


def test_json_output_shape(project):
    write(project / "train.py", SLOW)
    result = invoke("check", "--output-format", "json")
    data = json.loads(result.output)
    assert result.exit_code == 1
    (item,) = data
    assert set(item) == {"code", "name", "message", "path", "line", "column", "end_line", "end_column", "fix", "url", "cell"}
    assert (item["code"], item["path"], item["line"], item["column"]) == ("TL501", "train.py", 4, 51)
    assert item["fix"]["applicability"] == "safe"
    (edit,) = item["fix"]["edits"]
    assert (edit["location"], edit["end_location"], edit["content"]) == (
        {"line": 4, "column": 49}, {"line": 4, "column": 64}, "")  # deletes ", foreach=False"


def test_statistics(project):
    write(project / "a.py", SLOW)
    write(project / "b.py", SLOW)
    result = invoke("check", "--statistics")
    assert result.output.splitlines()[0].startswith("2\tTL501\t[*] ")
    data = json.loads(invoke("check", "--statistics", "--output-format", "json").output)
    assert data == [{"code": "TL501", "name": "per-parameter-optimizer-loop", "count": 2, "fixable": 2}]


def test_color_only_when_forced(project, monkeypatch):
    write(project / "train.py", SLOW)
    assert "\x1b[" not in invoke("check").output
    monkeypatch.setenv("FORCE_COLOR", "1")
    result = _runner().invoke(cli, ["check", "--no-cache"], color=True)
    assert "\x1b[" in result.output


def test_rules_and_explain():
    listing = invoke("rules").output
    for code in ("TL101", "TL104", "TL201", "TL202", "TL301", "TL501"):
        assert code in listing
    result = invoke("explain", "tl201")
    assert result.exit_code == 0 and "## Fix safety" in result.output
    assert invoke("explain", "TL999").exit_code == 2


# --- fix -------------------------------------------------------------------------------------------
def test_fix_without_apply_prints_a_diff_and_writes_nothing(project):
    target = write(project / "train.py", SLOW)
    result = invoke("fix", ".")
    assert result.exit_code == 1
    assert "-opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)" in result.output
    assert "+opt = torch.optim.SGD(model.parameters(), lr=0.1)" in result.output
    assert target.read_text() == SLOW


def test_fix_apply_writes_and_second_run_is_a_no_op(project):
    target = write(project / "train.py", SLOW)
    result = invoke("fix", ".", "--apply")
    assert result.exit_code == 0, result.output
    assert "train.py: fixed 1 x TL501" in result.output
    fixed = target.read_text()
    assert "foreach" not in fixed
    again = invoke("fix", ".", "--apply")
    assert again.exit_code == 0 and target.read_text() == fixed
    assert invoke("fix", ".").exit_code == 0  # no diff left


def test_unsafe_fixes_need_the_flag(project):
    target = write(project / "train.py", UNSAFE_ONLY)
    result = invoke("fix", ".", "--apply")
    assert result.exit_code == 1 and target.read_text() == UNSAFE_ONLY
    result = invoke("fix", ".", "--apply", "--unsafe-fixes")
    assert "set_to_none=False" not in target.read_text()


def test_fix_keeps_mode_bom_crlf_and_encoding(project):
    target = project / "train.py"
    target.write_bytes(b"\xef\xbb\xbf" + SLOW.replace("\n", "\r\n").encode())
    os.chmod(target, 0o751)
    invoke("fix", "--apply")
    data = target.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf") and b"foreach" not in data
    assert data.count(b"\r\n") == SLOW.count("\n") and b"\n" not in data.replace(b"\r\n", b"")
    assert stat.S_IMODE(target.stat().st_mode) == 0o751

    latin = project / "latin.py"
    latin.write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + SLOW.encode())
    invoke("fix", "--apply", "latin.py")
    assert latin.read_bytes().startswith(b"# -*- coding: latin-1 -*-\n# caf\xe9\n")


def test_failed_write_leaves_the_file_whole(project, monkeypatch):
    target = write(project / "train.py", SLOW)

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    result = invoke("fix", "--apply", "-j", "1")
    assert target.read_text() == SLOW
    assert "cannot write the fixed file" in result.output
    assert sorted(p.name for p in project.iterdir()) == ["train.py"]


# --- configuration ---------------------------------------------------------------------------------
def test_pyproject_settings_and_cli_override(project):
    write(project / "pyproject.toml", '[tool.torchlint]\nignore = ["TL501"]\n')
    write(project / "train.py", SLOW)
    assert invoke("check").exit_code == 0
    assert invoke("check", "--select", "TL501", "--config", "pyproject.toml").exit_code == 1


def test_config_flag_reads_any_toml_file(project):
    write(project / "ci-settings.toml", 'select = ["TL104"]\n')
    write(project / "train.py", SLOW)
    assert invoke("check", "--config", "ci-settings.toml").exit_code == 0
    write(project / "bad.toml", 'bogus = 1\n')
    result = invoke("check", "--config", "bad.toml")
    assert result.exit_code == 2 and "unknown key 'bogus'" in result.stderr


def test_torchlint_toml_and_per_file_ignores(project):
    write(project / "torchlint.toml", '[per-file-ignores]\n"scripts/*" = ["TL5"]\n')
    write(project / "scripts" / "a.py", SLOW)
    write(project / "src" / "b.py", SLOW)
    out = invoke("check").output
    assert "src/b.py" in out and "scripts/a.py" not in out


@pytest.mark.parametrize(
    "body, expected",
    [
        ('selct = ["TL1"]', "unknown key 'selct'"),
        ('select = "TL1"', "expected a list of strings"),
        ('torch-version = "two"', "expected a PyTorch version"),
        ('select = ["TL09"]', "matches no rule"),
        ('unsafe-fixes = "yes"', "expected true or false"),
        ("select = [", "not valid TOML"),
    ],
)
def test_bad_config_is_exit_2_with_file_and_key(project, body, expected):
    write(project / "pyproject.toml", f"[tool.torchlint]\n{body}\n")
    write(project / "train.py", SLOW)
    result = invoke("check")
    assert result.exit_code == 2
    assert expected in result.stderr
    if "TOML" not in expected:
        assert "pyproject.toml" in result.stderr and body.split()[0] in result.stderr


def test_torch_version_flag(project):
    write(project / "train.py", UNSAFE_ONLY.replace("set_to_none=False", ""))
    assert invoke("check").exit_code == 0
    assert "TL201" in invoke("check", "--torch-version", "1.13").output
    assert invoke("check", "--torch-version", "latest").exit_code == 2


# --- discovery -------------------------------------------------------------------------------------
def test_discovery_skips_ignored_and_usual_folders(project):
    (project / ".git").mkdir()
    write(project / ".gitignore", "generated/\n")
    for folder in ("generated", ".venv", "build", "node_modules", "pkg/__pycache__"):
        write(project / folder / "x.py", SLOW)
    write(project / "pkg" / "real.py", SLOW)
    out = invoke("check").output
    assert "pkg/real.py" in out
    assert out.count("TL501") == 1


def test_explicit_path_is_checked_even_if_excluded_unless_forced(project):
    write(project / "pyproject.toml", '[tool.torchlint]\nextend-exclude = ["legacy.py"]\n')
    write(project / "legacy.py", SLOW)
    assert invoke("check").exit_code == 0
    assert invoke("check", "legacy.py").exit_code == 1
    assert invoke("check", "legacy.py", "--force-exclude").exit_code == 0


def test_symlinked_folder_is_not_followed(project, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    write(outside / "x.py", SLOW)
    (project / "src").mkdir()
    os.symlink(outside, project / "src" / "link")
    assert invoke("check").exit_code == 0


# --- suppression -----------------------------------------------------------------------------------
def test_noqa_line_and_file(project):
    write(project / "a.py", SLOW.replace("foreach=False)", "foreach=False)  # NOQA: TL501"))
    write(project / "b.py", SLOW.replace("foreach=False)", "foreach=False)  # noqa"))
    write(project / "c.py", SLOW.replace("foreach=False)", "foreach=False)  # noqa: TL101"))
    write(project / "d.py", "# torchlint: noqa: TL501\n" + SLOW)
    write(project / "e.py", "# torchlint: noqa\n" + SLOW)
    out = invoke("check").output
    assert "c.py" in out
    assert not any(name in out for name in ("a.py", "b.py", "d.py", "e.py"))


# --- stdin -----------------------------------------------------------------------------------------
def test_stdin_check_and_fix(project):
    result = invoke("check", "-", "--stdin-filename", "pkg/train.py", input=SLOW)
    assert result.exit_code == 1 and "pkg/train.py:4:51: TL501" in result.output
    result = invoke("fix", "-", "--apply", "--stdin-filename", "pkg/train.py", input=SLOW)
    assert result.exit_code == 0
    assert result.stdout == SLOW.replace(", foreach=False", "")


# --- bad input -------------------------------------------------------------------------------------
def test_bad_files_are_reported_and_the_run_goes_on(project):
    write(project / "a_syntax.py", "import torch\nopt = torch.optim.SGD(p, foreach=False\n")
    (project / "b_binary.py").write_bytes(b"import torch\nx = '\xff\xfe'\nfoo(foreach=False)\n")
    write(project / "c_good.py", SLOW)
    result = invoke("check")
    assert result.exit_code == 1
    assert "Traceback" not in result.output + result.stderr
    # CPython's own message and position (3.10+: "'(' was never closed" at the paren)
    assert "a_syntax.py:2:" in result.output and "TL000 syntax error: " in result.output
    if sys.version_info >= (3, 10):
        assert "a_syntax.py:2:22: TL000 syntax error: '(' was never closed" in result.output
    assert "b_binary.py:2:6: TL000 not valid utf-8" in result.output
    assert "c_good.py:4:51: TL501" in result.output


def test_missing_path_is_reported(project):
    result = invoke("check", "nope.py")
    assert result.exit_code == 1 and "nope.py:1:1: TL000 no such file or directory" in result.output


def test_fix_never_writes_a_file_that_does_not_parse(project):
    target = write(project / "bad.py", "import torch\nopt = torch.optim.SGD(p, foreach=False\n")
    invoke("fix", "--apply")
    assert target.read_text() == "import torch\nopt = torch.optim.SGD(p, foreach=False\n"


# --- processes and cache ---------------------------------------------------------------------------
def test_parallel_output_equals_serial(project):
    for i in range(12):
        write(project / f"m{i:02d}.py", SLOW * (i % 3 + 1))
    serial = invoke("check", "-j", "1").output
    parallel = invoke("check", "-j", "2").output
    assert serial == parallel and serial.count("TL501") == 24


def test_cache_hits_and_survives_corruption(project):
    write(project / "train.py", SLOW)
    runner = _runner()
    first = runner.invoke(cli, ["check"])
    cache = project / ".torchlint_cache"
    assert (cache / "CACHEDIR.TAG").exists() and (cache / ".gitignore").read_text().strip().endswith("*")
    entries = [p for p in cache.rglob("*") if p.is_file() and p.parent.parent.name.startswith("v")]
    assert entries
    assert runner.invoke(cli, ["check"]).output == first.output
    for entry in entries:
        entry.write_text("{not json")
    assert runner.invoke(cli, ["check"]).output == first.output


# --- the installed console script -----------------------------------------------------------------
def test_console_script_runs_and_never_imports_torch(project):
    write(project / "train.py", SLOW + UNSAFE_ONLY)
    exe = Path(sys.executable).with_name("torchlint")
    result = subprocess.run([str(exe), "check", "--no-cache", "."], capture_output=True, text=True)
    assert result.returncode == 1 and "TL501" in result.stdout
    probe = (
        "import sys\nfrom torchlint.cli import main\n"
        "try:\n    main(['check', '--no-cache', '--select', 'ALL', '.'])\nexcept SystemExit:\n    pass\n"
        "try:\n    main(['fix', '--no-cache', '--unsafe-fixes', '.'])\nexcept SystemExit:\n    pass\n"
        "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.stderr.strip().endswith("NO-TORCH"), result.stderr


def test_check_loads_no_fixer_machinery_until_a_file_needs_it(project):
    """Start-up time: `check` imports libcst (and its codemod, matchers, the fixer) only for a file that
    reaches the LibCST stage (nor the fixer's own modules); no rule module may touch libcst at import."""
    write(project / "clean.py", CLEAN)
    probe = (
        "import sys\nfrom torchlint.cli import main\n"
        "try:\n    main(['check', '--no-cache', sys.argv[1]])\nexcept SystemExit:\n    pass\n"
        "from torchlint.fix.deferred import is_loaded\n"
        "heavy = [m for m in ('libcst', 'libcst.codemod', 'libcst.matchers', 'torchlint.fix.fixer') if is_loaded(m)]\n"
        "heavy += [m for m in ('torchlint.fix.analysis', 'torchlint.fix.rewrites')"
        " if m in sys.modules]\n"
        "print('LOADED', heavy, file=sys.stderr)\n"
    )
    clean = subprocess.run([sys.executable, "-c", probe, str(project / "clean.py")], capture_output=True, text=True)
    assert clean.stderr.strip().endswith("LOADED []"), clean.stderr
    write(project / "train.py", SLOW)
    slow = subprocess.run([sys.executable, "-c", probe, str(project / "train.py")], capture_output=True, text=True)
    # the probe can see a load: the finding's fix (its `[*]`) is made on LibCST's tree
    assert "'libcst'" in slow.stderr, slow.stderr


def test_checking_one_named_file_loads_no_process_pool_gitignore_matcher_or_xml(project):
    """Start-up time: multiprocessing (a parallel run), pathspec (walking folders, per-file-ignores),
    xml (JUnit output) and difflib (diffs, fixes) cost about 30 ms of imports a single file never needs."""
    write(project / "clean.py", CLEAN)
    probe = (
        "import sys\nfrom torchlint.cli import main\n"
        "try:\n    main(['check', '--no-cache', sys.argv[1]])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('concurrent.futures.process', 'multiprocessing', 'pathspec', 'xml.etree', 'difflib')"
        " if m in sys.modules]\n"
        "print('LOADED', heavy, file=sys.stderr)\n"
    )
    clean = subprocess.run([sys.executable, "-c", probe, str(project / "clean.py")], capture_output=True, text=True)
    assert clean.stderr.strip().endswith("LOADED []"), clean.stderr
    folder = subprocess.run([sys.executable, "-c", probe, str(project)], capture_output=True, text=True)
    assert "'pathspec'" in folder.stderr, folder.stderr  # the probe can see a load
