"""The rule manifest (torchlint/rule_manifest.py) lets a run import a rule's module only when a file passes
the rule's text gate. It is generated from the rule classes and must equal them; each gate must hold for
every text the rule's text stage accepts."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from fixture_support import FIXTURES
from test_prefilter import AST_STAGE_KEEPS
from test_stage_recall_cases import CASES
from torchlint.config import Settings
from torchlint.engine import lint_source
from torchlint.manifest import MANIFEST, entry_of, render
from torchlint.registry import all_rules, lazy_rule, manifest
from torchlint.rule import gate_passes

ROOT = Path(__file__).resolve().parent.parent
REGENERATE = "the manifest is out of date: regenerate it with `python -m torchlint.manifest` (never edit it)"


def test_the_manifest_equals_the_rule_classes():
    assert MANIFEST.read_text(encoding="utf-8") == render(), REGENERATE
    assert [entry.code for entry in manifest().values()] == [rule.code for rule in all_rules()], REGENERATE
    for rule in all_rules():
        assert manifest()[rule.code].__dict__ == entry_of(rule), REGENERATE


def _texts():
    """Every fixture, the sample, and the snippets the stage tests keep (each once a stage bug)."""
    for path in sorted(FIXTURES.rglob("*.py")) + sorted((ROOT / "examples").rglob("*.py")):
        yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")
    for number, case in enumerate([*CASES, *AST_STAGE_KEEPS]):
        values = getattr(case, "values", case)  # pytest.param or a plain (code, source) pair
        yield getattr(case, "id", None) or f"stage case {number}", values[1]


TEXTS = list(_texts())
SETTINGS = [Settings(torch_version=version) for version in ((1, 5), (1, 13), (2, 0), (2, 4), (2, 13))]


def _mangled(text: str, words) -> str:
    """The text with every occurrence of each word made unrecognisable (same length, same lines)."""
    for word in sorted(words, key=len, reverse=True):
        text = text.replace(word, "Q" * len(word))
    return text


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.code)
def test_the_text_gate_holds_wherever_the_text_stage_says_maybe(rule):
    """A gate stronger than the rule's own text stage would hide findings: on every text the stage accepts
    (under any torch version) the gate passes, and with one group's words made unrecognisable the stage
    says no, so the group names words the rule cannot fire without."""
    assert rule.text_gate, f"{rule.code} has no text_gate: every file would import its module"
    accepted = 0
    for name, text in TEXTS:
        for settings in SETTINGS:
            if not rule.may_fire(text, settings):
                continue
            accepted += 1
            assert gate_passes(rule.text_gate, text), f"{rule.code}'s text_gate rules out {name}"
            for group in rule.text_gate:
                assert not rule.may_fire(_mangled(text, group), settings), (
                    f"{rule.code}'s text stage accepts {name} without any of {group}: the gate would hide it")
    assert accepted, f"no text exercises {rule.code}'s gate"


def test_a_lazy_rule_finds_what_its_class_finds():
    """The engine with the manifest's stand-ins gives the diagnostics of the rule classes on every text."""
    settings = replace(Settings(), select=("ALL",))
    eager = [rule() for rule in all_rules()]
    lazy = [lazy_rule(rule.code) for rule in all_rules()]
    for name, text in TEXTS:
        assert lint_source(text, "train.py", lazy, settings).diagnostics == \
            lint_source(text, "train.py", eager, settings).diagnostics, name


def _modules_loaded(tmp_path: Path, source: str):
    script = tmp_path / "one.py"
    script.write_text(source)
    probe = textwrap.dedent(f"""
        import json, sys
        from torchlint.cli import main
        try:
            main(["check", "--no-cache", {str(script)!r}])
        except SystemExit:
            pass
        print(json.dumps(sorted(m.rsplit(".", 1)[1][:5].upper() for m in sys.modules
                                if m.startswith("torchlint.rules."))))
    """)
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_clean_file_imports_no_rule_module(tmp_path):
    assert _modules_loaded(tmp_path, "import os\n\n\ndef main():\n    print(os.getcwd())\n") == []


def test_only_the_rules_whose_gate_passes_are_imported(tmp_path):
    source = "from torch.utils.data import DataLoader\nfor batch in DataLoader([]):\n    batch.backward()\n"
    loaded = _modules_loaded(tmp_path, source)
    expected = sorted(code for code, entry in manifest().items() if entry.default_enabled
                      and gate_passes(entry.text_gate, source))
    assert loaded == expected and "TL401" in loaded and "TL201" not in loaded
