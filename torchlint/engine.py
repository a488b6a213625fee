"""Lint and fix one source text: pre-filter, parse, analyse, run the rules, locate, suppress, fix."""

from __future__ import annotations

import ast
import warnings

from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple, Type

import libcst as cst

from torchlint.analysis import FileAnalysis
from torchlint.config import Settings
from torchlint.positions import node_spans
from torchlint.rule import (
    Applicability, Diagnostic, Edit, ImportRequest, Report, Rule, RuleContext, RuleCrash, iter_reports,
)
from torchlint.suppression import Suppressions

ERROR_CODE = "TL000"  # a file torchlint could not check: never selectable, never suppressible
MAX_FIX_PASSES = 10


@dataclass
class LintOutcome:
    diagnostics: List[Diagnostic]
    parsed: bool  # False when the pre-filter ruled the file out


@dataclass
class FixOutcome:
    source: str  # the fixed text (the original where nothing applied)
    applied: Counter = field(default_factory=Counter)  # rule code -> fixes applied
    remaining: List[Diagnostic] = field(default_factory=list)  # what is still there after fixing
    errors: List[Diagnostic] = field(default_factory=list)  # fixes dropped because their output broke

    @property
    def changed(self) -> bool:
        return bool(self.applied)


def error_diagnostic(path: str, message: str, line: int = 1, column: int = 1) -> Diagnostic:
    return Diagnostic(ERROR_CODE, "error", message, path, line, column, line, column)


def rules_that_may_fire(rules: Sequence[Rule], source: str, settings: Settings) -> List[Rule]:
    """The rules that could report something in ``source``: a text stage, then, where every remaining rule
    has one, an ``ast`` stage (cheaper than the LibCST parse it can save)."""
    candidates = [rule for rule in rules if rule.may_fire(source, settings)]
    if candidates and all(rule.has_ast_prefilter for rule in candidates):
        tree = _stdlib_ast(source)
        if tree is not None:
            candidates = [rule for rule in candidates if rule.may_fire_in_ast(tree, source, settings)]
    return candidates


def _stdlib_ast(source: str) -> Optional[ast.Module]:
    try:
        with warnings.catch_warnings():  # invalid escape sequences and the like are not ours to report
            warnings.simplefilter("ignore")
            return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # LibCST decides (it also parses syntax newer than this interpreter's)


def parse(source: str, path: str) -> cst.Module:
    """Parse or raise ``SyntaxProblem`` with a located message."""
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise SyntaxProblem(f"syntax error: {exc.message}", exc.raw_line, exc.raw_column + 1) from None
    except (RecursionError, MemoryError) as exc:  # pathological nesting
        raise SyntaxProblem(f"cannot parse: {type(exc).__name__}", 1, 1) from None


class SyntaxProblem(Exception):
    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(message)
        self.line, self.column = line, column


def _run_rules(
    module: cst.Module, source: str, path: str, rules: Sequence[Rule], settings: Settings
) -> Tuple[FileAnalysis, List[Report], List[Diagnostic]]:
    """Reports that survive suppression, paired index-for-index with their diagnostics."""
    analysis = FileAnalysis(module, source, path)
    ctx = RuleContext(analysis, settings)
    crashes: List[RuleCrash] = []
    reports = list(iter_reports(rules, ctx, crashes))
    crash_diagnostics = [error_diagnostic(path, str(crash)) for crash in crashes]
    if not reports:
        return analysis, [], crash_diagnostics
    wanted = [r.node for r in reports] + [n for r in reports if r.fix for n in r.fix.replacements]
    positions = node_spans(module, wanted)
    suppressions = Suppressions.parse(source)
    kept: List[Tuple[Diagnostic, Report]] = []
    seen: Set[Tuple[str, int, int, str]] = set()
    for report in reports:
        line, column, end_line, end_column = positions[report.node]
        key = (report.rule.code, line, column, report.message)
        if key in seen:
            continue
        seen.add(key)
        if suppressions.is_suppressed(report.rule.code, line, end_line):
            continue
        diagnostic = Diagnostic(
            code=report.rule.code,
            name=report.rule.name,
            message=report.message,
            path=path,
            line=line,
            column=column + 1,
            end_line=end_line,
            end_column=end_column + 1,
            fix=report.fix.applicability if report.fix else None,
            edits=_edits(report, positions, module) if report.fix else (),
            imports=tuple(_import_text(i) for i in report.fix.imports) if report.fix else (),
        )
        kept.append((diagnostic, report))
    kept.sort(key=lambda pair: pair[0].sort_key)
    return analysis, [r for _, r in kept], crash_diagnostics + [d for d, _ in kept]


def _edits(report: Report, positions, module: cst.Module) -> Tuple[Edit, ...]:
    edits = []
    assert report.fix is not None
    for node, new in report.fix.replacements.items():
        line, column, end_line, end_column = positions[node]
        if isinstance(new, cst.RemovalSentinel):
            content = ""
        elif isinstance(new, cst.FlattenSentinel):
            content = "".join(module.code_for_node(n) for n in new.nodes)
        else:
            content = module.code_for_node(new)
        edits.append(Edit(line, column + 1, end_line, end_column + 1, content))
    return tuple(edits)


def _import_text(request: ImportRequest) -> str:
    return f"from {request.module} import {request.name}" if request.name else f"import {request.module}"


def lint_source(source: str, path: str, rules: Sequence[Rule], settings: Settings) -> LintOutcome:
    candidates = rules_that_may_fire(rules, source, settings)
    if not candidates:
        return LintOutcome([], parsed=False)
    try:
        module = parse(source, path)
    except SyntaxProblem as exc:
        return LintOutcome([error_diagnostic(path, str(exc), exc.line, exc.column)], parsed=True)
    _, _, diagnostics = _run_rules(module, source, path, candidates, settings)
    return LintOutcome(diagnostics, parsed=True)


def fix_source(source: str, path: str, rules: Sequence[Rule], settings: Settings, unsafe: bool) -> FixOutcome:
    """Apply fixes until none is left (bounded). A fix whose output does not parse is dropped."""
    from torchlint.fixer import FixApplier  # the fixer is only needed by `fix`

    allowed = {Applicability.SAFE, Applicability.UNSAFE} if unsafe else {Applicability.SAFE}
    outcome = FixOutcome(source)
    broken: Set[Tuple[str, str]] = set()  # (rule code, node code) of fixes that broke the file
    current = source
    for _ in range(MAX_FIX_PASSES):
        candidates = rules_that_may_fire(rules, current, settings)
        if not candidates:
            break
        try:
            module = parse(current, path)
        except SyntaxProblem as exc:
            if current == source:
                outcome.remaining = [error_diagnostic(path, str(exc), exc.line, exc.column)]
                return outcome
            raise AssertionError("a verified fix produced unparsable code") from exc
        analysis, reports, _ = _run_rules(module, current, path, candidates, settings)
        fixable = [
            r for r in reports
            if r.fix is not None and r.fix.applicability in allowed
            and (r.rule.code, module.code_for_node(r.node)) not in broken
        ]
        if not fixable:
            break
        applier = FixApplier(module, analysis, path)
        result = applier.apply(fixable)
        for report in result.broken:
            broken.add((report.rule.code, module.code_for_node(report.node)))
            outcome.errors.append(
                error_diagnostic(
                    path,
                    f"internal error: the fix of {report.rule.code} ({report.rule.name}) produced invalid code "
                    "and was not applied; please report it",
                )
            )
        if result.code == current:
            if not result.broken:
                break
            continue
        current = result.code
        outcome.applied.update(r.rule.code for r in result.applied)
    outcome.source = current
    outcome.remaining = lint_source(current, path, rules, settings).diagnostics
    return outcome
