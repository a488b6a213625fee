"""What `fix` reuses between its passes must equal what it would compute afresh.

`fix_source` keeps the tree the fixer's check parsed for the next pass, the last pass's diagnostics as the
findings that remain, and LibCST's round trip of the original from the first pass; the fixer enters only the
nodes above a replaced one. Each shortcut is checked here against the long way on every flagged fixture.
"""

from __future__ import annotations

from typing import List

import libcst as cst
import pytest

from fixture_support import fixture_rules, fixture_settings, flagged_fixtures
from torchlint.fix.analysis import FileAnalysis
from torchlint.config import Settings
from torchlint.engine import _run_rules, fix_source, lint_source
from torchlint.fix.fixer import FixApplier
from torchlint.registry import all_rules
from torchlint.rule import Applicability, Fix, Report, Rewrite, Rule

FLAGGED = flagged_fixtures()
FIXED = [(code, path) for code, path in FLAGGED if path.with_name(path.stem + ".fixed.py").exists()]
ALL_RULES = [rule() for rule in all_rules()]


@pytest.mark.parametrize("code,path", FLAGGED, ids=[f"{c}/{p.name}" for c, p in FLAGGED])
@pytest.mark.parametrize("unsafe", [True, False], ids=["unsafe", "safe"])
def test_the_findings_left_are_those_of_the_fixed_text(code, path, unsafe):
    source = path.read_text()
    rules, settings = fixture_rules(source, code), fixture_settings(source, code)
    outcome = fix_source(source, path.name, rules, settings, unsafe=unsafe)
    assert outcome.remaining == lint_source(outcome.source, path.name, rules, settings).diagnostics


@pytest.mark.parametrize("code,path", FLAGGED, ids=[f"{c}/{p.name}" for c, p in FLAGGED])
def test_every_rule_at_once_leaves_the_findings_of_the_fixed_text(code, path):
    source = path.read_text()
    settings = Settings(select=("ALL",), torch_version=fixture_settings(source, code).torch_version)
    outcome = fix_source(source, path.name, ALL_RULES, settings, unsafe=True)
    assert outcome.remaining == lint_source(outcome.source, path.name, ALL_RULES, settings).diagnostics


def _fixable_reports(source: str, code: str, path: str):
    module = cst.parse_module(source)
    rules, settings = fixture_rules(source, code), fixture_settings(source, code)
    analysis, reports, _ = _run_rules(module, source, path, rules, settings)
    return module, analysis, [r for r in reports if r.fix is not None]


@pytest.mark.parametrize("code,path", FIXED, ids=[f"{c}/{p.name}" for c, p in FIXED])
def test_entering_only_the_path_to_each_fix_renders_the_same_code(code, path):
    source = path.read_text()
    module, analysis, reports = _fixable_reports(source, code, path.name)
    assert reports, "a fixture with a fixed snapshot has a fix"
    applier = FixApplier(module, analysis, path.name)
    everywhere = _EveryNode(module, analysis, path.name)
    chosen: List[Report] = applier._non_overlapping(reports)
    assert applier.render(chosen) == everywhere.render(chosen)
    for report in reports:
        assert applier.render([report]) == everywhere.render([report])


@pytest.mark.parametrize("code,path", FIXED, ids=[f"{c}/{p.name}" for c, p in FIXED])
def test_fixes_put_in_place_equal_the_whole_module_rendered(code, path):
    source = path.read_text()
    module, analysis, reports = _fixable_reports(source, code, path.name)
    applier = FixApplier(module, analysis, path.name)
    chosen = applier._non_overlapping(reports)
    for group in [chosen, *([r] for r in reports)]:
        text, regions = applier.fixed_text(group, source)
        assert text == applier.render(group)
        assert (regions is None) == any(r.fix.imports for r in group)  # only added imports need the whole module here


def test_fixes_in_nested_statements_are_put_in_place_together():
    source = (
        "import torch\n\n\n"
        "def step(opt, model):\n"
        "    opt.zero_grad(set_to_none=False)\n"
        "    for p in model.parameters():\n"
        "        opt.zero_grad(set_to_none=False)\n"
    )

    class Both(Rule):
        code, name, message = "TL998", "both", "m"

        def detect(self, ctx):
            for info in ctx.index.calls_by_name["zero_grad"]:
                ctx.report(info.node, rewrite=Rewrite(
                    lambda call, a: Fix.replace(call, call.with_changes(args=[]), Applicability.SAFE), "{reason}",
                    call=info.node))
            ctx.report(ctx.index.loops[0].node, rewrite=Rewrite(
                lambda module, a: Fix.replace(a.loops[0].node.iter, cst.Name("params"), Applicability.SAFE), "{reason}"))

    module = cst.parse_module(source)
    analysis, reports, _ = _run_rules(module, source, "m.py", [Both()], Settings(select=("TL998",)))
    assert len(reports) == 3
    applier = FixApplier(module, analysis, "m.py")
    text, regions = applier.fixed_text(reports, source)
    assert regions is not None and text == applier.render(reports)
    assert text.count("zero_grad()") == 2 and "for p in params:" in text


class _EveryNode(FixApplier):
    """The fixer as it was: its transformer enters every node of the module."""

    def _path_to(self, targets):
        return None


def test_a_target_outside_the_analysed_tree_enters_every_node():
    module = cst.parse_module("x = 1\n")
    applier = FixApplier(module, FileAnalysis(module, "x = 1\n"), "m.py")
    stranger = cst.Name("y")
    assert applier._path_to({stranger: cst.Name("z")}) is None


def test_a_decorator_fixed_beside_a_repeated_statement_lands_on_its_own_def():
    """Two identical classes make the fixed statement's text occur twice, so the statements' tree is rendered
    whole and carried back by a line diff, where `@torch.no_grad()` sits between a narrowed `__init__`
    statement and `def evaluate`, lines apart in the file: carried after the first, it decorated `helper`
    (and still parsed)."""
    net = ("class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
           "        self.features = nn.Sequential(nn.Conv2d(3, 32, 3), nn.BatchNorm2d(32))\n")
    source = ("import torch\nimport torch.nn as nn\n\n\n" + net + "\n\ndef helper(x):\n    return x + 1\n\n\n"
              "def evaluate(loader):\n    model = Net()\n    model.eval()\n    correct = 0\n"
              "    for images, labels in loader:\n        correct += (model(images).argmax(1) == labels).sum()\n"
              "    return correct\n\n\n" + net)
    outcome = fix_source(source, "m.py", ALL_RULES, Settings(select=("ALL",)), unsafe=True)
    assert outcome.source.count("@torch.no_grad()") == 1
    assert "@torch.no_grad()\ndef evaluate(loader):" in outcome.source
    assert "def helper(x):\n    return x + 1\n\n\n@torch.no_grad()" in outcome.source
    assert outcome.source.count("bias=False") == 2
    assert fix_source(outcome.source, "m.py", ALL_RULES, Settings(select=("ALL",)), unsafe=True).source \
        == outcome.source
