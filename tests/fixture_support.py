"""Load rule fixtures and render snapshots, shared by the fixture tests and the snapshot updater.

A rule's folder ``fixtures/<CODE>/`` holds:
- ``flagged_*.py``: code the rule must flag; ``flagged_*.expected`` pins every diagnostic
  (``line:col: CODE [safe fix|unsafe fix] message``); ``flagged_*.fixed.py`` is the exact output of
  ``torchlint fix --apply --unsafe-fixes --select CODE`` (absent when no fix applies).
- ``clean_*.py``: near misses the rule must stay silent on.
- ``bench_*.py``: runnable workloads for the harness.
A fixture may start with ``# torchlint-fixture: torch-version=1.13`` to target another PyTorch version.

Regenerate snapshots after a deliberate change with ``TORCHLINT_UPDATE_SNAPSHOTS=1 pytest tests/test_rule_fixtures.py``,
then read the diff: a snapshot is only as good as its review.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import List, Sequence, Tuple

from torchlint.config import Settings, parse_torch_version
from torchlint.engine import fix_source, lint_source
from torchlint.registry import get_rule
from torchlint.rule import Diagnostic, Edit

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
_HEADER = re.compile(r"^#\s*torchlint-fixture:\s*(?P<options>.+)$", re.MULTILINE)


def fixture_settings(source: str, code: str) -> Settings:
    settings = Settings(select=(code,))
    match = _HEADER.search(source)
    if match:
        for option in match.group("options").split(","):
            key, _, value = option.strip().partition("=")
            if key == "torch-version":
                settings = replace(settings, torch_version=parse_torch_version(value))
            elif key == "also-select":  # other rules the fixture needs (TL900 judges their noqa comments)
                settings = replace(settings, select=settings.select + tuple(value.split()))
            else:
                raise ValueError(f"unknown fixture option {key!r}")
    return settings


def fixture_text(code: str, name: str) -> str:
    """The text of fixture ``name`` of rule ``code`` (``fixtures/TL101/clean_x.py``), for a test that varies it."""
    return (FIXTURES / code / name).read_text()


def rule_codes_with_fixtures() -> List[str]:
    return sorted(p.name for p in FIXTURES.iterdir() if p.is_dir() and re.match(r"^TL\d{3}$", p.name))


def flagged_fixtures() -> List[Tuple[str, Path]]:
    return [(code, p) for code in rule_codes_with_fixtures() for p in sorted((FIXTURES / code).glob("flagged_*.py"))
            if not p.name.endswith(".fixed.py")]


def clean_fixtures() -> List[Tuple[str, Path]]:
    return [(code, p) for code in rule_codes_with_fixtures() for p in sorted((FIXTURES / code).glob("clean_*.py"))]


def render_diagnostics(diagnostics: List[Diagnostic]) -> str:
    lines = []
    for d in diagnostics:
        fix = f" [{d.fix.value} fix]" if d.fix is not None else ""
        lines.append(f"{d.line}:{d.column}: {d.code}{fix} {d.message}")
    return "\n".join(lines) + "\n" if lines else ""


def fixture_rules(source: str, code: str) -> list:
    return [get_rule(selected)() for selected in fixture_settings(source, code).select]


def lint(source: str, code: str, path: str = "fixture.py") -> List[Diagnostic]:
    settings = fixture_settings(source, code)
    return lint_source(source, path, fixture_rules(source, code), settings).diagnostics


def fix(source: str, code: str, unsafe: bool = True, path: str = "fixture.py") -> str:
    settings = fixture_settings(source, code)
    outcome = fix_source(source, path, fixture_rules(source, code), settings, unsafe=unsafe)
    assert not outcome.errors, [e.message for e in outcome.errors]
    return outcome.source


def expected_paths(fixture: Path) -> Tuple[Path, Path]:
    stem = fixture.name[: -len(".py")]
    return fixture.with_name(stem + ".expected"), fixture.with_name(stem + ".fixed.py")


def apply_edits(source: str, edits: Sequence[Edit]) -> str:
    """The text with the edits applied, as an editor applies JSON's edits: 1-based lines and columns, lines
    ending at \\n, \\r\\n or \\r (a form feed is no line break)."""
    lines = re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", source)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    for edit in sorted(edits, key=lambda e: (e.line, e.column), reverse=True):
        start = starts[edit.line - 1] + edit.column - 1
        end = starts[edit.end_line - 1] + edit.end_column - 1
        source = source[:start] + edit.content + source[end:]
    return source
