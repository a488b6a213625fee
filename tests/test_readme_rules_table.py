"""The README's table of rules ("What it finds") lists every registered rule, by its code and name, and says
"none" in its fix column exactly for the rules that have no fix: adding a rule without its row fails here."""

from __future__ import annotations

import re
from pathlib import Path

from torchlint.registry import all_rules
from torchlint.rule import FixAvailability

README = Path(__file__).resolve().parent.parent / "README.md"
_ROW = re.compile(r"^\| (TL\d{3}) \| `([a-z0-9-]+)`(?: \(opt-in\))? \| .* \| (.+) \|$")


def _rows():
    text = README.read_text(encoding="utf-8")
    table = text[text.index("## What it finds"):text.index("### The default set")]
    return {match.group(1): (match.group(2), match.group(3))
            for match in map(_ROW.match, table.splitlines()) if match}


def test_every_rule_has_its_row_and_no_row_names_a_rule_that_is_not_there():
    rows = _rows()
    assert set(rows) == {rule.code for rule in all_rules()}
    for rule in all_rules():
        assert rows[rule.code][0] == rule.name, rule.code


def test_the_fix_column_says_none_exactly_where_a_rule_has_no_fix():
    rows = _rows()
    for rule in all_rules():
        says_none = rows[rule.code][1].startswith("none")
        assert says_none == (rule.fix_availability is FixAvailability.NONE), rule.code
