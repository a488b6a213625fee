"""What a new user reads first: the install that works (torchlint is not on PyPI), errors that name the
missing package, the quick start, the Neovim 0.7 configuration (run in Neovim when one is on PATH) and the
changelog."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
GITHUB = "git+https://github.com/torchlint/torchlint"


def _user_facing_texts():
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "torchlint").glob("*.py")),
                 *sorted((ROOT / "runtime").glob("*.py"))]:
        yield path, path.read_text(encoding="utf-8")


def test_no_install_from_pypi_is_suggested():
    """`pip install torchlint` or `pip install 'torchlint[server]'` would find nothing (or another project)."""
    for path, text in _user_facing_texts():
        wrong = re.findall(r"pip install ['\"]?torchlint(?:\[[a-z,]+\])?['\"]?(?! @)(?=[\s`'\"),]|$)", text)
        assert not wrong, f"{path.relative_to(ROOT)} suggests {wrong}"


def test_the_quick_start_comes_first_and_installs_from_a_clone_or_github():
    first_block = README.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert len(first_block) == 3
    assert first_block[0].startswith("git clone https://github.com/torchlint/torchlint && cd torchlint")
    assert first_block[1].startswith("pip install . && torchlint check examples/")
    assert f'"torchlint[server] @ {GITHUB}"' in README


def test_the_cuda_download_warning_comes_before_the_command_that_triggers_it():
    warning = README.index("brings the CUDA libraries")
    for command in ("pip install '.[runtime]'", "pip install -e '.[test,server]'"):
        assert warning < README.index(command), command


def test_the_test_suite_is_under_development_with_its_time_and_a_fast_subset():
    development = README[README.index("## Development"):]
    assert "python -m pytest -q" in development and re.search(r"\d+ minutes", development)
    assert "fast subset" in development


@pytest.mark.parametrize("command, module, package", [
    ("server", "pygls", "pip install pygls"),
    ("bench", "torch", "pip install torch --index-url https://download.pytorch.org/whl/cpu"),
])
def test_a_missing_package_is_named_with_the_install_that_works(command, module, package):
    probe = f"import sys; sys.modules[{module!r}] = None\nfrom torchlint.cli import main\nmain([{command!r}])"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 2
    assert f"torchlint {command} needs {module}, which is not installed: {package}" in result.stderr
    assert GITHUB in result.stderr and "'torchlint[" not in result.stderr


def test_the_changelog_has_each_version():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert [line for line in changelog.splitlines() if line.startswith("## ")][:3] == [
        "## Unreleased", "## 0.2.0 (c65701f, 2026-11-30)", "## 0.1.0 (8b1e827, 2026-11-30)"]


def _neovim_version():
    if shutil.which("nvim") is None:
        return None
    out = subprocess.run(["nvim", "--version"], capture_output=True, text=True).stdout
    match = re.match(r"NVIM v(\d+)\.(\d+)", out)
    return (int(match.group(1)), int(match.group(2))) if match else None


PROBE = """
local ok = vim.wait(60000, function() return #vim.diagnostic.get(0) > 0 end, 50)
local found = {}
for _, d in ipairs(vim.diagnostic.get(0)) do table.insert(found, d.source .. " " .. d.message:sub(1, 30)) end
io.stdout:write((ok and "FOUND " or "NOTHING ") .. table.concat(found, "|") .. "\\n")
vim.cmd("qa!")
"""


@pytest.mark.skipif(not (_neovim_version() and (0, 7) <= _neovim_version() <= (0, 10)),
                    reason="needs Neovim 0.7 to 0.10 on PATH (Debian 12: apt-get install neovim)")
def test_the_neovim_07_configuration_shows_torchlint_diagnostics(tmp_path):
    section = README[README.index("**Neovim 0.7 to 0.10**"):]
    (tmp_path / "init.lua").write_text(section.split("```lua\n", 1)[1].split("```", 1)[0])
    (tmp_path / "probe.lua").write_text(PROBE)
    (tmp_path / "train.py").write_text("import torch\nopt = torch.optim.SGD([], lr=0.1, foreach=False)\n")
    server = Path(sys.executable).parent  # `torchlint` of this environment on PATH
    env = {"PATH": f"{server}:/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run(["nvim", "--headless", "-u", "init.lua", "train.py", "-c", "luafile probe.lua"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "FOUND torchlint " in result.stdout, result.stdout + result.stderr
