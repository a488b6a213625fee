"""Which files are test code (``test-paths``, ``extend-test-paths``) is judged from the project root: the
configuration file's folder, else the repository root; never from the folder torchlint runs in."""

from __future__ import annotations

import pytest

from test_cli import SLOW, _runner, invoke, project, write  # noqa: F401 - the fixture is used by name
from torchlint.cli import cli
from torchlint.config import Settings
from torchlint.run.discovery import DEFAULT_TEST_PATHS, _spec, is_test_file

FINDING = "4:51: TL501"  # SLOW's finding; TL501 is silent in test files


@pytest.mark.parametrize("path", [
    "tests/test_train.py", "pkg/tests/helpers.py", "conftest.py", "model_test.py", "train.py",
    "contest/train.py", "torch/testing/_internal/common_fsdp.py", "test/proj/train.py", "test_x.pyi",
    "latest/train.py", "testdata_loader.py", "a/b/test_c.py", "tests", "a_test.py/x.py", "pkg/attest/x.py",
])
def test_the_defaults_without_pathspec_are_the_patterns(path):
    """The default patterns are matched without importing pathspec: the same answer as pathspec's."""
    assert is_test_file(path, Settings()) == _spec(DEFAULT_TEST_PATHS).match_file(path)


def test_the_same_file_gives_the_same_findings_from_any_folder(project, monkeypatch):
    (project / ".git").mkdir()  # the repository root: test/ below it makes test code
    write(project / "test" / "proj" / "train.py", SLOW)
    from_top = invoke("check", "test/proj/train.py")
    monkeypatch.chdir(project / "test" / "proj")
    from_inside = invoke("check", "train.py")
    assert from_top.exit_code == from_inside.exit_code == 0
    assert FINDING not in from_top.output + from_inside.output

    write(project / "test" / "proj" / "torchlint.toml", "")  # now the project is test/proj: train.py is not a test
    assert f"train.py:{FINDING}" in invoke("check", "train.py").output
    monkeypatch.chdir(project)
    assert f"test/proj/train.py:{FINDING}" in invoke("check", "test/proj/train.py").output


def test_test_paths_replace_and_extend_test_paths_add(project):
    (project / ".git").mkdir()
    write(project / "tests" / "train.py", SLOW)
    write(project / "bench" / "train.py", SLOW)
    write(project / "train.py", SLOW)
    out = invoke("check", ".").output
    assert f"bench/train.py:{FINDING}" in out and "tests/train.py" not in out
    write(project / "torchlint.toml", 'extend-test-paths = ["bench/"]\n')
    out = invoke("check", ".").output
    assert "bench/train.py" not in out and "tests/train.py" not in out and f"\ntrain.py:{FINDING}" in "\n" + out
    write(project / "torchlint.toml", "test-paths = []\n")  # no file is test code
    out = invoke("check", ".").output
    assert f"tests/train.py:{FINDING}" in out and f"bench/train.py:{FINDING}" in out
    write(project / "torchlint.toml", "test-paths = 1\n")
    bad = invoke("check", ".")
    assert bad.exit_code == 2 and "test-paths: expected a list of strings" in bad.stderr


def test_without_a_configuration_or_repository_the_package_decides(project, monkeypatch):
    write(project / "tests" / "helpers.py", SLOW)  # not a package: its own folder, so only names count
    write(project / "tests" / "test_a.py", SLOW)
    for folder in ("torch", "torch/testing", "torch/testing/_internal"):  # an installed package
        write(project / "lib" / folder / "__init__.py", "")
    write(project / "lib" / "torch" / "testing" / "_internal" / "common.py", SLOW)
    out = invoke("check", ".").output
    assert f"tests/helpers.py:{FINDING}" in out and "test_a.py" not in out and "common.py" not in out
    monkeypatch.chdir(project / "lib" / "torch" / "testing" / "_internal")
    assert invoke("check", "common.py").output == "All checks passed!\n"


def test_the_cache_knows_whether_a_file_is_a_test(project):
    write(project / "bench" / "train.py", SLOW)
    cached = lambda: _runner().invoke(cli, ["check", "."])  # noqa: E731 - invoke() adds --no-cache
    assert f"bench/train.py:{FINDING}" in cached().output
    write(project / "torchlint.toml", 'extend-test-paths = ["bench/"]\n')
    again = cached()
    assert again.exit_code == 0 and "bench/train.py" not in again.output
    assert any((project / ".torchlint_cache").rglob("*")), "the cache was in use"


def test_show_settings_and_show_files_say_which_files_are_tests(project):
    (project / ".git").mkdir()
    write(project / "tests" / "test_a.py", SLOW)
    write(project / "train.py", SLOW)
    files = invoke("check", "--show-files", ".")
    assert files.exit_code == 0
    assert files.output.splitlines() == [str(project / "tests" / "test_a.py") + "  (test file)", str(project / "train.py")]
    shown = invoke("check", "--show-settings", "tests/test_a.py")
    assert shown.exit_code == 0
    assert f"Resolved settings for: {project / 'tests' / 'test_a.py'}" in shown.output
    assert "Settings path: none (the defaults)" in shown.output
    assert f"project-root = {str(project)!r}" in shown.output.replace('"', "'")
    assert 'test-paths = ["test_*.py", "*_test.py", "conftest.py", "tests/", "test/", "testing/"]' in shown.output
    assert "is-test-file = true" in shown.output


def test_the_readme_names_the_rules_that_speak_in_test_files():
    from pathlib import Path

    from torchlint.registry import all_rules

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    speaks = [rule.code for rule in all_rules() if not rule.silent_in_test_files]
    listed = ", ".join(f"`{code}`" for code in speaks[:-1]) + f" and `{speaks[-1]}`"
    assert f"Every rule but {listed} says nothing about test code" in readme.replace("\n", " ")
