"""The engine with hand-made rules: fix passes, overlaps, broken fixes, suppression, positions."""

from __future__ import annotations

import ast

import libcst as cst

from torchlint.config import Settings
from torchlint.engine import fix_source, lint_source
from torchlint.rule import Applicability, Fix, FixAvailability, ImportRequest, IndexContext, Rewrite, Rule
from torchlint.report.suppression import Suppressions


class RenameFoo(Rule):
    """Renames calls of ``foo`` to ``bar`` (test rule)."""

    code, name, message, summary = "TL990", "foo-call", "call bar, not foo", "test"
    fix_availability = FixAvailability.ALWAYS
    required_patterns = (r"foo",)

    def detect(self, ctx: IndexContext) -> None:
        for info in ctx.index.calls_by_name.get("foo", []):
            if isinstance(info.node.func, ast.Name):
                ctx.report(info.node, rewrite=Rewrite(
                    lambda call, a: Fix.replace(call.func, cst.Name("bar"), Applicability.SAFE), "{reason}",
                    call=info.node))


class WrapInTorchNoGrad(Rule):
    """Wraps each ``bar(...)`` call as ``torch.no_grad_call(bar(...))``: nests, so needs several passes."""

    code, name, message, summary = "TL991", "wrap-bar", "wrap it", "test"
    fix_availability = FixAvailability.ALWAYS
    required_patterns = (r"bar",)

    def detect(self, ctx: IndexContext) -> None:
        for info in ctx.index.calls_by_name.get("bar", []):
            parent = ctx.index.parent(info.node)
            if isinstance(parent, ast.Call) and ctx.index.qualified_name(parent.func) == "torch.wrapped":
                continue
            ctx.report(info.node, rewrite=Rewrite(_wrapped, "{reason}", call=info.node))


def _wrapped(call: cst.Call, analysis) -> Fix:
    new = cst.parse_expression(f"torch.wrapped({analysis.module.code_for_node(call)})")
    return Fix.replace(call, new, Applicability.UNSAFE, [ImportRequest("torch")])


class BreaksCode(Rule):
    """A buggy fix that produces invalid code."""

    code, name, message, summary = "TL992", "breaks-code", "broken", "test"
    fix_availability = FixAvailability.ALWAYS
    required_patterns = (r"baz",)

    def detect(self, ctx: IndexContext) -> None:
        for info in ctx.index.calls_by_name.get("baz", []):
            # parses, but `yield` outside a function does not compile
            ctx.report(info.node, rewrite=Rewrite(
                lambda call, a: Fix.replace(call, cst.Yield(cst.Integer("2")), Applicability.SAFE), "{reason}",
                call=info.node))


SETTINGS = Settings()


def test_positions_are_one_based_and_suppression_applies():
    source = "x = 1\ny = foo(2)\nz = foo(3)  # noqa: TL990\n"
    (d,) = lint_source(source, "m.py", [RenameFoo()], SETTINGS).diagnostics
    assert (d.line, d.column, d.end_line, d.end_column) == (2, 5, 2, 11)
    assert d.fix is Applicability.SAFE


def test_prefilter_skips_parsing():
    outcome = lint_source("this is not python", "m.py", [RenameFoo()], SETTINGS)
    assert outcome.diagnostics == [] and not outcome.parsed
    outcome = lint_source("foo(", "m.py", [RenameFoo()], SETTINGS)
    assert outcome.diagnostics[0].code == "TL000"


def test_fixes_keep_comments_and_formatting():
    source = "y = foo(  # keep me\n    2,\n)\n"
    assert fix_source(source, "m.py", [RenameFoo()], SETTINGS, unsafe=False).source == source.replace("foo", "bar")


def test_unsafe_fix_needs_opt_in_and_imports_are_added_once():
    source = "import numpy as np\n\nbar(1)\nbar(2)\n"
    assert fix_source(source, "m.py", [WrapInTorchNoGrad()], SETTINGS, unsafe=False).source == source
    out = fix_source(source, "m.py", [WrapInTorchNoGrad()], SETTINGS, unsafe=True)
    assert out.source == "import numpy as np\nimport torch\n\ntorch.wrapped(bar(1))\ntorch.wrapped(bar(2))\n"
    assert out.applied["TL991"] == 2


def test_overlapping_fixes_apply_over_several_passes_and_converge():
    source = "import torch\nfoo(foo(1))\n"
    out = fix_source(source, "m.py", [RenameFoo(), WrapInTorchNoGrad()], SETTINGS, unsafe=True)
    assert out.source == "import torch\ntorch.wrapped(bar(torch.wrapped(bar(1))))\n"
    again = fix_source(out.source, "m.py", [RenameFoo(), WrapInTorchNoGrad()], SETTINGS, unsafe=True)
    assert again.source == out.source and not again.applied


def test_a_fix_that_breaks_the_code_is_dropped_and_named():
    source = "foo(1)\nbaz(2)\n"
    out = fix_source(source, "m.py", [RenameFoo(), BreaksCode()], SETTINGS, unsafe=True)
    assert out.source == "bar(1)\nbaz(2)\n"
    assert any("TL992" in e.message and "internal error" in e.message for e in out.errors)


def test_noqa_parsing():
    s = Suppressions.parse("a  # noqa\nb  # NoQA:TL101,TL202\nc  # noqa: tl101 tl2\n# torchlint: noqa: TL301\n")
    assert s.is_suppressed("TL999", 1, 1)
    assert s.is_suppressed("TL202", 2, 2) and not s.is_suppressed("TL201", 2, 2)
    assert s.is_suppressed("TL101", 3, 3)
    assert s.is_suppressed("TL301", 9, 9) and not s.is_suppressed("TL302", 9, 9)
    assert s.is_suppressed("TL101", 5, 3)  # a noqa on the last line of a multi-line finding


def test_noqa_inside_strings_does_not_count():
    s = Suppressions.parse('"""\n# torchlint: noqa\n"""\nx = "# noqa"; y = 1\nz = 2  # note  # noqa: TL101\n')
    assert not s.is_suppressed("TL101", 2, 2)
    assert not s.is_suppressed("TL101", 4, 4)
    assert s.is_suppressed("TL101", 5, 5)


class Crashes(Rule):
    """A rule with a bug."""

    code, name, message, summary = "TL993", "crashes", "crash", "test"
    required_patterns = (r"foo",)

    def detect(self, ctx: IndexContext) -> None:
        raise ValueError("oops")


def test_a_crashing_rule_is_an_internal_error_for_that_file_only():
    diagnostics = lint_source("foo(1)\n", "m.py", [Crashes(), RenameFoo()], SETTINGS).diagnostics
    assert [d.code for d in diagnostics] == ["TL000", "TL990"]
    assert "internal error in TL993" in diagnostics[0].message and "ValueError: oops" in diagnostics[0].message


class BreaksModuleOnIndex(Rule):
    """A rule on the index whose fix, made on the module, produces invalid code."""

    code, name, message, summary = "TL993", "breaks-module", "broken ({reason})", "test"
    fix_availability = FixAvailability.ALWAYS
    required_patterns = (r"qux",)

    def detect(self, ctx: IndexContext) -> None:
        for info in ctx.index.calls_by_name.get("qux", []):
            ctx.report(info.node, rewrite=Rewrite(_yield_at_module_level, self.message))


def _yield_at_module_level(module: cst.Module, analysis) -> Fix:
    first = module.body[0]
    return Fix.replace(first, first.with_changes(body=[cst.Expr(cst.Yield(cst.Integer("2")))]), Applicability.SAFE)


def test_a_module_fix_on_the_index_that_breaks_the_code_is_dropped_and_named():
    source = "qux(1)\n"
    out = fix_source(source, "m.py", [BreaksModuleOnIndex()], SETTINGS, unsafe=True)
    assert out.source == source
    assert any("TL993" in e.message and "internal error" in e.message for e in out.errors)
