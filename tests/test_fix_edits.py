"""torchlint.fix.edits: a report's edits from the changed statement alone. Applied to the source they give the
module rendered with the fix; on every fixture they equal the edits of the whole-module diff."""

from __future__ import annotations

import textwrap
from typing import List, Sequence, Tuple

import libcst as cst
import pytest

from fixture_support import apply_edits, fixture_settings, flagged_fixtures
from torchlint.config import Settings
from torchlint.engine import _run_rules, lint_source, parse
from torchlint.fix.edits import text_edits
from torchlint.fix.edits import FixEdits
from torchlint.fix.fixer import FixApplier
from torchlint.registry import get_rule
from torchlint.rule import Applicability, Fix, FixAvailability, IndexContext, Report, Rewrite, Rule


def _fixable_reports(source: str, rules: Sequence[Rule], settings: Settings, path: str = "t.py"):
    module = parse(source, path)
    analysis, reports, _ = _run_rules(module, source, path, rules, settings)
    return module, analysis, [r for r in reports if r.fix is not None]


def _compare(source: str, rules: Sequence[Rule], settings: Settings) -> List[Tuple[Report, bool]]:
    """Each fixable report, and whether the statement path (not the whole module) gave its edits; fails
    where the edits, applied, do not give the module rendered with the fix."""
    module, analysis, reports = _fixable_reports(source, rules, settings)
    assert reports, "the case must have a fixable report"
    maker = FixEdits(module, analysis, "t.py", source)
    outcome = []
    for report in reports:
        fixed = FixApplier(module, analysis, "t.py").render([report])
        assert fixed != source, "a fix that changes nothing tests nothing"
        assert apply_edits(source, maker.edits(report)) == fixed
        outcome.append((report, maker._local_edits(report) is not None))
    return outcome


def _compare_code(source: str, code: str) -> List[Tuple[Report, bool]]:
    settings = Settings(select=(code,))
    return _compare(source, [get_rule(code)()], settings)


# -- every fixture -----------------------------------------------------------------------------------------

FIXTURES = [(code, path) for code, path in flagged_fixtures()
            if path.with_name(path.stem + ".fixed.py").exists()]


@pytest.mark.parametrize("code,path", FIXTURES, ids=[f"{c}-{p.stem}" for c, p in FIXTURES])
def test_fixture_edits_equal_the_whole_module_path(code, path):
    source = path.read_text(encoding="utf-8")
    settings = fixture_settings(source, code)
    rules = [get_rule(selected)() for selected in settings.select]
    module, analysis, reports = _fixable_reports(source, rules, settings)
    maker = FixEdits(module, analysis, "t.py", source)
    for report in reports:
        assert maker.edits(report) == text_edits(source, FixApplier(module, analysis, "t.py").render([report]))


def test_most_fixture_reports_take_the_statement_path():
    """Not a vacuous comparison: the statement path answers for nearly every fixture report."""
    local = total = 0
    for code, path in FIXTURES:
        source = path.read_text(encoding="utf-8")
        settings = fixture_settings(source, code)
        module, analysis, reports = _fixable_reports(source, [get_rule(c)() for c in settings.select], settings)
        maker = FixEdits(module, analysis, "t.py", source)
        for report in reports:
            total += 1
            local += maker._local_edits(report) is not None
    assert total > 50 and local >= 0.9 * total


def test_json_output_carries_the_same_edits():
    """The engine's call site: the edits in lint output are the whole-module path's."""
    code, path = next((c, p) for c, p in FIXTURES if c == "TL201")
    source = path.read_text(encoding="utf-8")
    settings = fixture_settings(source, code)
    rules = [get_rule(c)() for c in settings.select]
    diagnostics = [d for d in lint_source(source, "t.py", rules, settings, with_edits=True).diagnostics if d.fix]
    module, analysis, reports = _fixable_reports(source, rules, settings)
    assert len(diagnostics) == len(reports) > 0
    for diagnostic, report in zip(diagnostics, reports):
        assert diagnostic.edits == text_edits(source, FixApplier(module, analysis, "t.py").render([report]))


# -- hand-written cases ------------------------------------------------------------------------------------

TRAIN = textwrap.dedent(
    """\
    import torch


    def train(model, loader, optimizer):
        for epoch in range(3):
            for x, y in loader:
                optimizer.zero_grad(set_to_none=False)
                loss = model(x, y)
                loss.backward()
                optimizer.step()
    """
)


def test_fix_inside_nested_blocks():
    [(report, local)] = _compare_code(TRAIN, "TL201")
    assert local


def test_crlf_line_endings():
    [(_, local)] = _compare_code(TRAIN.replace("\n", "\r\n"), "TL201")
    assert local


def test_tab_indentation():
    [(_, local)] = _compare_code(TRAIN.replace("    ", "\t"), "TL201")
    assert local


def test_no_final_newline():
    _compare_code(TRAIN.rstrip("\n"), "TL201")  # the last statement holds the fix: the whole module renders it


def test_form_feed_and_lone_carriage_return():
    for source in (TRAIN.replace("import torch\n", "import torch\n\f\n"), TRAIN.replace("torch\n\n", "torch\r\r"),
                   TRAIN.replace("loss.backward()", "loss.backward()  \f# a form feed in a comment")):
        _compare_code(source, "TL201")


def test_statement_repeated_word_for_word():
    """The fixed statement occurs twice: an enclosing statement that is unique places it."""
    source = TRAIN + "\n\n" + TRAIN.replace("def train(", "def train_again(").replace("import torch\n", "")
    outcome = _compare_code(source, "TL201")
    assert len(outcome) == 2 and all(local for _, local in outcome)


def test_statement_repeated_with_nothing_unique_around_it():
    """The same def twice, word for word: the index's line for each fix places its own copy."""
    source = TRAIN + "\n\n" + TRAIN.replace("import torch\n", "")
    outcome = _compare_code(source, "TL201")
    assert len(outcome) == 2 and all(local for _, local in outcome)


def test_two_reports_in_one_statement():
    source = textwrap.dedent(
        """\
        import torch


        def masks(n):
            both = torch.zeros(n).cuda() + torch.ones(n, n).cuda()
            return both
        """
    )
    outcome = _compare_code(source, "TL102")
    assert len(outcome) == 2 and all(local for _, local in outcome)


def test_fix_replacing_a_whole_for_statement():
    source = textwrap.dedent(
        """\
        import torch


        def train(model, batches, lr=0.01):
            for x, y in batches:
                loss = model(x).sum()
                loss.backward()
                with torch.no_grad():
                    for p in model.parameters():
                        p -= lr * p.grad
        """
    )
    outcome = _compare_code(source, "TL501")
    report, local = outcome[0]
    assert local and any(isinstance(node, cst.For) for node in report.fix.replacements)


def test_module_level_for_statement_replaced():
    source = textwrap.dedent(
        """\
        import torch

        model = torch.nn.Linear(2, 2).cuda()
        for x in range(3):
            model(torch.ones(2)).sum().backward()
            for p in model.parameters():
                p.data -= 0.1 * p.grad
        print("done")
        """
    )
    outcome = _compare_code(source, "TL501")
    assert all(local for _, local in outcome)


def test_fix_that_adds_an_import_takes_the_whole_module_path():
    source = textwrap.dedent(
        """\
        from torch import Tensor


        def make(n):
            return Tensor(2, n).cuda()
        """
    )
    [(report, local)] = _compare_code(source, "TL102")
    assert report.fix.imports and not local


# -- statements removed or multiplied (test rules) ---------------------------------------------------------

class DropCall(Rule):
    """Removes every ``drop()`` statement (test rule)."""

    code, name, message, summary = "TL992", "drop-call", "drop it", "test"
    fix_availability = FixAvailability.ALWAYS
    required_patterns = (r"drop",)

    def detect(self, ctx: IndexContext) -> None:
        for info in ctx.index.calls_by_name.get("drop", []):
            ctx.report(info.node, rewrite=Rewrite(_drop, "{reason}", call=info.node))


class TwiceCall(Rule):
    """Writes every ``twice()`` statement line two times (test rule)."""

    code, name, message, summary = "TL993", "twice-call", "twice", "test"
    fix_availability = FixAvailability.ALWAYS
    required_patterns = (r"twice",)

    def detect(self, ctx: IndexContext) -> None:
        for info in ctx.index.calls_by_name.get("twice", []):
            ctx.report(info.node, rewrite=Rewrite(_twice, "{reason}", call=info.node))


def _drop(call: cst.Call, analysis) -> Fix:
    statement = analysis.parent(analysis.parent(call))
    return Fix.replace(statement, cst.RemovalSentinel.REMOVE, Applicability.SAFE)


def _twice(call: cst.Call, analysis) -> Fix:
    line = analysis.parent(analysis.parent(call))
    return Fix.replace(line, cst.FlattenSentinel([line, line]), Applicability.SAFE)


def _compare_rule(source: str, rule: Rule) -> List[Tuple[Report, bool]]:
    return _compare(source, [rule], Settings(select=(rule.code,)))


def test_removed_statement_renders_its_block():
    source = "def f():\n    drop()\n\n\ndef g():\n    x = 1\n    drop()\n    return x\n"
    outcome = _compare_rule(source, DropCall())
    assert len(outcome) == 2 and all(local for _, local in outcome)  # the first block becomes `pass`


def test_statement_removed_at_module_level():
    _compare_rule("import os\ndrop()\nprint(os)\n", DropCall())


def test_statement_written_twice():
    source = "x = 1\nif x:\n    twice()\n    y = 2\ntwice()\n"
    outcome = _compare_rule(source, TwiceCall())
    assert len(outcome) == 2 and all(local for _, local in outcome)


def test_file_that_repeats_itself():
    """Runs of identical lines around the change: a whole-file diff may align the inserted text with another
    repeat; the edits here stay inside the changed statement, and apply all the same."""
    block = "x = f(1)\ny = g(x)\n\n"
    for before, after in ((1, 40), (40, 1), (3, 3), (0, 25), (25, 0)):
        source = block * before + "twice()\n" + block * after
        for report, local in _compare_rule(source, TwiceCall()):
            assert local
        _compare_rule(block * before + "drop()\n" + block * after + "z = 3\n", DropCall())


def test_edits_apply_to_the_fixed_text():
    source = TRAIN
    settings = Settings(select=("TL201",))
    module, analysis, [report] = _fixable_reports(source, [get_rule("TL201")()], settings)
    edits = FixEdits(module, analysis, "t.py", source).edits(report)
    assert apply_edits(source, edits) == FixApplier(module, analysis, "t.py").render([report])
