"""Tests generated from every rule's fixtures (see tests/fixture_support.py for the layout)."""

from __future__ import annotations

import os

import pytest

from fixture_support import (
    apply_edits, clean_fixtures, expected_paths, fix, fixture_rules, fixture_settings, flagged_fixtures, lint,
    render_diagnostics,
)
from torchlint.engine import lint_source

UPDATE = os.environ.get("TORCHLINT_UPDATE_SNAPSHOTS") == "1"


def _id(item):
    code, path = item
    return f"{code}/{path.name}"


@pytest.mark.parametrize("item", flagged_fixtures(), ids=_id)
def test_flagged_fixture_matches_snapshot(item):
    code, path = item
    source = path.read_text(encoding="utf-8")
    expected_file, fixed_file = expected_paths(path)
    diagnostics = lint(source, code, path=path.name)
    rendered = render_diagnostics(diagnostics)
    fixed = fix(source, code, unsafe=True, path=path.name)
    if UPDATE:
        expected_file.write_text(rendered, encoding="utf-8")
        if fixed != source:
            fixed_file.write_text(fixed, encoding="utf-8")
        elif fixed_file.exists():
            fixed_file.unlink()
    assert diagnostics, f"{path} is a flagged fixture but {code} found nothing"
    assert all(d.code == code for d in diagnostics)
    assert rendered == expected_file.read_text(encoding="utf-8")
    if fixed_file.exists():
        assert fixed == fixed_file.read_text(encoding="utf-8")
    else:
        assert fixed == source, f"{code} fixed {path.name} but there is no {fixed_file.name} to compare with"


@pytest.mark.parametrize("item", flagged_fixtures(), ids=_id)
def test_fixing_twice_changes_nothing(item):
    code, path = item
    source = path.read_text(encoding="utf-8")
    for unsafe in (False, True):
        once = fix(source, code, unsafe=unsafe)
        compile(once, str(path), "exec")
        assert fix(once, code, unsafe=unsafe) == once


@pytest.mark.parametrize("item", flagged_fixtures(), ids=_id)
def test_fixed_output_has_no_fixable_finding_left(item):
    code, path = item
    fixed = fix(path.read_text(encoding="utf-8"), code, unsafe=True)
    assert [d for d in lint(fixed, code) if d.fix is not None] == []


@pytest.mark.parametrize("item", clean_fixtures(), ids=_id)
def test_clean_fixture_is_silent(item):
    code, path = item
    diagnostics = lint(path.read_text(encoding="utf-8"), code, path=path.name)
    assert render_diagnostics(diagnostics) == ""


@pytest.mark.parametrize("item", flagged_fixtures(), ids=_id)
def test_json_edits_of_each_fix_give_valid_code(item):
    """An editor applying one finding's edits (as JSON gives them) gets what `fix` would write for it."""
    code, path = item
    source = path.read_text(encoding="utf-8")
    diagnostics = lint_source(source, path.name, fixture_rules(source, code), fixture_settings(source, code), True).diagnostics
    fixable = [d for d in diagnostics if d.fix is not None]
    for d in fixable:
        assert d.edits, d
        fixed = apply_edits(source, d.edits)
        assert fixed != source
        compile(fixed, f"{path.name} after the edits of {d.line}:{d.column}", "exec")
    if len(fixable) == 1:
        assert apply_edits(source, fixable[0].edits) == fix(source, code, unsafe=True)
