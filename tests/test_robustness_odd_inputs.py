"""One odd input never stops the whole run (issue 27, item 7): each becomes a TL000 for its own file, or is
skipped where git or the interpreter skips it, or (only for torchlint's own configuration) a clear
configuration error; every other file is still checked."""

from __future__ import annotations

import json
import os

import pytest
from robustness_support import invoke, with_finding


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    (tmp_path / ".git").mkdir()  # .gitignore files apply from the repository's root
    (tmp_path / "ok.py").write_text(with_finding())
    return tmp_path


def run(*args):
    result = invoke(*args[:1], "--no-cache", "--jobs", "1", *args[1:])
    assert "internal error" not in result.output and result.exit_code == 1, result.output
    assert "ok.py:5:48: TL501" in result.output or "ok.py: fixed 1" in result.output, result.output  # still checked
    return result.output


@pytest.mark.parametrize("line", ["!", "\\", "[z-a]"])
def test_gitignore_lines_git_ignores_are_ignored(project, line):
    (project / ".gitignore").write_text(f"{line}\nskipped.py\n")
    (project / "skipped.py").write_text(with_finding())
    assert "skipped.py" not in run("check", ".")  # the valid line after it still applies


@pytest.mark.parametrize("codec", ["rot13", "hex", "base64", "zlib", "punycode", "undefined"])
def test_a_cookie_naming_a_codec_python_rejects_is_a_tl000(project, codec):
    (project / "c.py").write_text(f"# coding: {codec}\nx = 1\n")
    with pytest.raises(SyntaxError):
        compile((project / "c.py").read_bytes(), "c.py", "exec")  # the interpreter rejects it too
    assert f"c.py:1:1: TL000 its coding cookie names '{codec}'" in run("check", ".")


def _notebook(source) -> str:
    cell = {"cell_type": "code", "source": source, "metadata": {}, "outputs": [], "execution_count": None}
    return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


@pytest.mark.parametrize("text, message", [
    ("[" * 50_000 + "]" * 50_000, "nested too deeply"),
    (_notebook([1, 2]), "the source of cell 1 is not text"),
    (_notebook(with_finding('x = "\ud800"')), "cell 1 holds a lone surrogate ('\\ud800')"),
])
@pytest.mark.parametrize("command", [("check",), ("fix", "--apply")])
def test_a_notebook_that_cannot_be_read_as_python_is_a_tl000(project, text, message, command):
    (project / "n.ipynb").write_bytes(text.encode("utf-8", "surrogatepass"))
    out = run(*command, ".")
    assert "n.ipynb:1:1: TL000 " in out and message in out


GPU_PROGRAM = "x = torch.ones(1).cuda()"  # a notebook that names CUDA: TL501 is silent in CPU programs


def test_a_cell_holding_torchlints_placeholder_text_is_not_fixed(project):
    original = _notebook(with_finding(GPU_PROGRAM) + "pass  # torchlint-magic 3\n")
    (project / "n.ipynb").write_text(original)
    assert "n.ipynb:1:1: TL000 fixes not applied to this notebook" in run("fix", "--apply", ".")
    assert (project / "n.ipynb").read_text() == original


def test_a_notebook_whose_owner_a_write_would_change_is_a_tl000(project, monkeypatch):
    original = _notebook(with_finding(GPU_PROGRAM))
    (project / "n.ipynb").write_text(original)

    def not_permitted(*args):  # what a user who does not own the file gets (the tests may run as root)
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "fchown", not_permitted)
    os.chown(project / "n.ipynb", os.getuid(), os.getgid() + 1) if os.getuid() == 0 else None
    if os.stat(project / "n.ipynb").st_gid == os.getgid():
        pytest.skip("cannot give the notebook another group here")
    assert "n.ipynb:1:1: TL000 writing it would change its owner or group" in run("fix", "--apply", ".")
    assert (project / "n.ipynb").read_text() == original


@pytest.mark.parametrize("data", [b'[project]\nname = "\xff"\n', b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n"])
def test_a_foreign_pyproject_that_is_not_toml_is_passed_over(project, data):
    (project / "pyproject.toml").write_bytes(data)  # no [tool.torchlint]: another tool's problem
    (project / "sub").mkdir()
    (project / "sub" / "ok.py").write_text(with_finding())
    os.chdir(project / "sub")
    run("check", ".")


def test_our_own_configuration_that_is_not_toml_is_a_configuration_error(project):
    (project / "pyproject.toml").write_bytes(b'[tool.torchlint]\nselect = ["\xff"]\n')
    result = invoke("check", "--no-cache", ".")
    assert result.exit_code == 2 and "pyproject.toml: not valid TOML: not UTF-8" in result.output
    assert "internal error" not in result.output


def test_a_max_file_size_over_any_memory_means_no_limit(project):
    (project / "torchlint.toml").write_text("max-file-size = 99999999999999999999999999\n")
    run("check", ".")


def test_an_extend_chain_of_500_files_is_followed(project):
    for i in range(500):
        (project / f"c{i}.toml").write_text(f'extend = "c{i + 1}.toml"\n')
    (project / "c500.toml").write_text('select = ["TL5"]\n')
    (project / "torchlint.toml").write_text('extend = "c0.toml"\n')
    (project / "other.py").write_text("import torch\nx = torch.zeros(3).cuda()\n")  # TL102: not selected
    assert "other.py" not in run("check", ".")
