"""Every registered rule carries its documentation and its fixtures."""

from __future__ import annotations

import re
import sys

import pytest

from fixture_support import FIXTURES, expected_paths
from torchlint.registry import all_rules
from torchlint.rule import DOC_HEADINGS, RULE_CODE, FixAvailability

RULES = all_rules()


def test_there_are_rules():
    assert len(RULES) >= 6


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rule_metadata(rule):
    assert RULE_CODE.match(rule.code)
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", rule.name), rule.name
    assert rule.summary and rule.message
    module_file = sys.modules[rule.__module__].__file__
    assert re.search(rf"{rule.code.lower()}_\w+\.py$", module_file), "one module per rule, named tlNNN_<name>.py"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rule_documentation_has_every_heading_in_order(rule):
    doc = rule.doc()
    positions = [doc.find(heading) for heading in DOC_HEADINGS]
    assert all(p >= 0 for p in positions), f"{rule.code} lacks {[h for h, p in zip(DOC_HEADINGS, positions) if p < 0]}"
    assert positions == sorted(positions)
    assert "```python" in doc, "the Example and Use instead sections show code"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rule_has_fixtures(rule):
    folder = FIXTURES / rule.code
    flagged = [p for p in folder.glob("flagged_*.py") if not p.name.endswith(".fixed.py")]
    assert flagged, f"{folder} needs flagged_*.py fixtures"
    assert list(folder.glob("clean_*.py")), f"{folder} needs clean_*.py near misses"
    for fixture in flagged:
        assert expected_paths(fixture)[0].exists(), f"{fixture.name} needs its .expected snapshot"
    fixed = [p for p in flagged if expected_paths(p)[1].exists()]
    if rule.fix_availability is FixAvailability.NONE:
        assert not fixed
    else:
        assert fixed, f"{rule.code} has a fix but no fixture shows it"
