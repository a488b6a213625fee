"""Rules that say nothing about test code are left out for test files by the engine, before any stage."""

from __future__ import annotations

import pytest

from fixture_support import flagged_fixtures, lint
from torchlint.config import Settings
from torchlint.engine import rules_for_path
from torchlint.registry import all_rules

SILENT = sorted(rule.code for rule in all_rules() if rule.silent_in_test_files)
SPEAKS = sorted(rule.code for rule in all_rules() if not rule.silent_in_test_files)


def test_the_rules_about_training_speed_are_silent_in_tests():
    assert {"TL102", "TL301", "TL401", "TL502", "TL701"} <= set(SILENT)


@pytest.mark.parametrize("path", ["tests/train.py", "pkg/test/loop.py", "torch/testing/_internal/big.py",
                                  "test_train.py", "train_test.py", "conftest.py"])
def test_a_test_file_gets_none_of_them(path):
    kept = {rule.code for rule in rules_for_path([rule() for rule in all_rules()], path)}
    assert kept == set(SPEAKS)


@pytest.mark.parametrize("path", ["train.py", "contest.py", "latest/train.py", "testdata_loader.py", ""])
def test_other_files_get_every_rule(path):
    assert len(rules_for_path([rule() for rule in all_rules()], path)) == len(all_rules())


@pytest.mark.parametrize("code,fixture", [(c, p) for c, p in flagged_fixtures() if c in SILENT],
                         ids=lambda v: v if isinstance(v, str) else v.name)
def test_a_flagged_fixture_is_silent_as_a_test_file(code, fixture):
    source = fixture.read_text(encoding="utf-8")
    assert [d for d in lint(source, code) if d.code == code], "the fixture must be flagged where it is"
    assert not [d for d in lint(source, code, path=f"tests/{fixture.name}") if d.code == code]


def test_a_folder_named_test_above_the_project_does_not_make_its_files_tests(tmp_path):
    """An editor sends absolute paths: /home/u/test/proj/train.py is the project's train.py, not test code."""
    root = tmp_path / "test" / "proj"
    settings = Settings(project_root=root)
    every_rule = [rule() for rule in all_rules()]
    assert len(rules_for_path(every_rule, str(root / "train.py"), settings)) == len(every_rule)
    kept = {rule.code for rule in rules_for_path(every_rule, str(root / "tests" / "train.py"), settings)}
    assert kept == set(SPEAKS)
    outside = rules_for_path(every_rule, str(tmp_path / "test" / "other.py"), settings)
    assert len(outside) == len(every_rule)  # not below the project: judged by its name alone
