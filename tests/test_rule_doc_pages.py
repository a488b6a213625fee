"""docs/rules/ is generated from the rules' docstrings, and `explain`'s Fix line is held to the fixtures."""

from __future__ import annotations

import re

import pytest

from fixture_support import expected_paths, flagged_fixtures
from torchlint.report import docs
from torchlint.registry import all_rules, get_rule
from torchlint.rule import Applicability, FixAvailability


def test_docs_pages_match_the_docstrings():
    """Regenerated from the registry: a new or edited rule fails here until `python -m torchlint.report.docs` runs."""
    assert docs.drift() == [], "docs/rules/ is out of date: run `python -m torchlint.report.docs`"


def test_drift_detects_an_edited_page(tmp_path):
    docs.write(tmp_path)
    assert docs.drift(tmp_path) == []
    page = tmp_path / "TL201.md"
    page.write_text(page.read_text() + "edited by hand\n")
    (tmp_path / "TL999.md").write_text("a rule that is gone\n")
    assert docs.drift(tmp_path) == ["TL201.md", "TL999.md"]


def test_diagnostic_url_points_at_the_page():
    for rule in all_rules():
        assert rule.url().endswith(f"/docs/rules/{rule.code}.md")
        assert (docs.DOCS_DIR / f"{rule.code}.md").is_file()


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.code)
def test_rules_with_fixes_declare_their_applicabilities(rule):
    if rule.fix_availability is FixAvailability.NONE:
        assert rule.fix_applicabilities == ()
    else:
        assert rule.fix_applicabilities, f"{rule.code}: set fix_applicabilities (what `torchlint explain` says)"


_FIX_KIND = re.compile(r"^\d+:\d+: TL\d{3} \[(safe|unsafe) fix\]", re.MULTILINE)


@pytest.mark.parametrize("code", sorted({code for code, _ in flagged_fixtures()}))
def test_fixtures_fixes_have_the_declared_applicabilities(code):
    seen = set()
    for fixture_code, fixture in flagged_fixtures():
        expected, _ = expected_paths(fixture)
        if fixture_code == code and expected.is_file():
            seen |= {Applicability(kind) for kind in _FIX_KIND.findall(expected.read_text())}
    assert seen <= set(get_rule(code).fix_applicabilities), f"{code}: fixtures show {sorted(seen)}"
