"""Lint and fix one source text: pre-filter, parse, analyse, run the rules, locate, suppress, fix."""

from __future__ import annotations

import ast
import os
import warnings

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import FrozenSet, List, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint.analysis import FileAnalysis
from torchlint.ast_index import forget_last_index
from torchlint.config import Settings
from torchlint.discovery import is_test_file
from torchlint.fast_parse import parse_module as trusted_parse
from torchlint.fileio import split_lines
from torchlint.guard import parse_problem, stdlib_tree
from torchlint.rule import (
    Applicability, Diagnostic, Edit, Report, Rule, RuleContext, RuleCrash, iter_reports,
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


def rules_that_may_fire(rules: Sequence[Rule], source: str, settings: Settings, path: str = "") -> List[Rule]:
    """The rules that could report something in ``source`` (at ``path``; "" where there is none): the rules
    for its kind of file, then a text stage, then, where every remaining rule has one, an ``ast`` stage
    (cheaper than the LibCST parse it can save)."""
    candidates = [rule for rule in rules_for_path(rules, path, settings) if rule.may_fire(source, settings)]
    if candidates and all(rule.has_ast_prefilter for rule in candidates):
        tree = _stdlib_ast(source)
        if tree is not None:
            candidates = [rule for rule in candidates if rule.may_fire_in_ast(tree, source, settings)]
    return candidates


def rules_for_path(rules: Sequence[Rule], path: str, settings: Optional[Settings] = None) -> Sequence[Rule]:
    """Rules silent in test code are left out for a test file (``Rule.silent_in_test_files``), as the
    ``test-paths`` settings say, judged from the project root (``discovery.is_test_file``)."""
    if path and is_test_file(path, settings if settings is not None else Settings()):
        return [rule for rule in rules if not rule.silent_in_test_files]
    return rules


def _stdlib_ast(source: str) -> Optional[ast.Module]:
    return stdlib_tree(source)  # None: LibCST decides (it also parses syntax newer than this interpreter's)


def parse(source: str, path: str) -> cst.Module:
    """Parse or raise ``SyntaxProblem`` with a located message."""
    problem = parse_problem(source)  # code that would crash or stall LibCST's native parser, or is not Python
    forget_last_index()  # the stdlib tree need not live beside LibCST's
    if problem is not None:
        raise SyntaxProblem(*problem)
    try:
        return trusted_parse(source)
    except cst.ParserSyntaxError as exc:
        # CPython's message and position are clearer ("'(' was never closed" at the paren).
        python_error = _python_syntax_error(source)
        if python_error is not None:
            raise python_error from None
        if stdlib_tree(source) is not None:  # valid Python that LibCST's grammar does not take
            raise SyntaxProblem(f"torchlint's parser (LibCST) cannot parse this valid Python, so it was not "
                                f"checked: {exc.message}", exc.raw_line, exc.raw_column + 1) from None
        raise SyntaxProblem(f"syntax error: {exc.message}", exc.raw_line, exc.raw_column + 1) from None
    except (RecursionError, MemoryError) as exc:  # pathological nesting
        raise SyntaxProblem(f"cannot parse: {type(exc).__name__}", 1, 1) from None


def _python_syntax_error(source: str) -> Optional["SyntaxProblem"]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, "<torchlint>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        return SyntaxProblem(f"syntax error: {error.msg}", error.lineno or 1, error.offset or 1)
    except (ValueError, RecursionError, MemoryError):
        return None
    return None


class SyntaxProblem(Exception):
    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(message)
        self.line, self.column = line, column


def _run_rules(
    module: cst.Module, source: str, path: str, rules: Sequence[Rule], settings: Settings, with_edits: bool = False,
    selected: FrozenSet[str] = frozenset(),
) -> Tuple[FileAnalysis, List[Report], List[Diagnostic]]:
    """Reports that survive suppression, paired index-for-index with their diagnostics. ``selected``: the
    codes of every rule selected for the file (``rules`` are those the pre-filter left)."""
    analysis = FileAnalysis(module, source, path)
    ctx = RuleContext(analysis, settings)
    crashes: List[RuleCrash] = []
    after = [rule for rule in rules if rule.runs_after_suppression]
    reports = list(iter_reports([rule for rule in rules if not rule.runs_after_suppression], ctx, crashes))
    if not reports and not after:
        analysis.release()
        return analysis, [], [error_diagnostic(path, str(crash)) for crash in crashes]
    suppressions = Suppressions.parse(source)
    kept: List[Tuple[Diagnostic, Report]] = []
    seen: Set[Tuple[str, int, int, str]] = set()

    def keep(found: List[Report]) -> None:
        from torchlint.fix_edits import FixEdits  # loads the fixer: only where there is something to show
        from torchlint.positions import node_spans

        wanted = [r.node for r in found] + [n for r in found if r.fix for n in r.fix.replacements]
        positions = node_spans(module, wanted, analysis.parents, source)
        fix_edits = FixEdits(module, analysis, path, source) if with_edits else None
        for report in found:
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
                edits=fix_edits.edits(report) if report.fix and fix_edits is not None else (),
            )
            kept.append((diagnostic, report))

    keep(reports)
    if after:
        used = frozenset(suppressions.used)
        start = len(ctx.reports)
        for rule in after:
            ctx._rule = rule
            try:
                rule.check_suppressions(ctx, used, selected or frozenset(r.code for r in rules))
            except RecursionError:
                raise
            except Exception as error:  # noqa: BLE001 - as in iter_reports
                crashes.append(RuleCrash(rule, error))
        keep(ctx.reports[start:])
    kept.sort(key=lambda pair: pair[0].sort_key)
    analysis.release()  # every rule has run: what they shared may refer back to the analysis
    crash_diagnostics = [error_diagnostic(path, str(crash)) for crash in crashes]
    return analysis, [r for _, r in kept], crash_diagnostics + [d for d, _ in kept]


def _text_edits(before: str, after: str) -> Tuple[Edit, ...]:
    """The changes from ``before`` to ``after`` as non-overlapping edits, trimmed to what differs."""
    old_lines = split_lines(before)  # Python's lines: a form feed inside one is no line end
    new_lines = split_lines(after)
    starts = [0]
    for line in old_lines:
        starts.append(starts[-1] + len(line))
    edits = []
    import difflib

    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        old, new = "".join(old_lines[i1:i2]), "".join(new_lines[j1:j2])
        prefix = len(os.path.commonprefix([old, new]))
        suffix = len(os.path.commonprefix([old[prefix:][::-1], new[prefix:][::-1]]))
        start, end = starts[i1] + prefix, starts[i2] - suffix
        edits.append(Edit(*_line_col(before, start), *_line_col(before, end), new[prefix:len(new) - suffix]))
    return tuple(edits)


def _line_col(text: str, offset: int) -> Tuple[int, int]:
    """1-based line and column of a character offset."""
    line_start = max(text.rfind("\n", 0, offset), text.rfind("\r", 0, offset)) + 1
    line = text.count("\n", 0, offset) + text.count("\r", 0, offset) - text.count("\r\n", 0, offset) + 1
    return line, offset - line_start + 1


def lint_source(
    source: str, path: str, rules: Sequence[Rule], settings: Settings, with_edits: bool = False
) -> LintOutcome:
    """Diagnostics for one text; ``with_edits`` also renders each fix as text edits (for JSON output)."""
    candidates = rules_that_may_fire(rules, source, settings, path)
    if not candidates:
        return LintOutcome([], parsed=False)
    try:
        module = parse(source, path)
    except SyntaxProblem as exc:
        return LintOutcome([error_diagnostic(path, str(exc), exc.line, exc.column)], parsed=True)
    selected = frozenset(rule.code for rule in rules)
    _, _, diagnostics = _run_rules(module, source, path, candidates, settings, with_edits, selected)
    return LintOutcome(diagnostics, parsed=True)


def fix_source(source: str, path: str, rules: Sequence[Rule], settings: Settings, unsafe: bool) -> FixOutcome:
    """Apply fixes until none is left (bounded). A fix whose output does not parse is dropped."""
    allowed = {Applicability.SAFE, Applicability.UNSAFE} if unsafe else {Applicability.SAFE}
    selected = frozenset(rule.code for rule in rules)
    outcome = FixOutcome(source)
    broken: Set[Tuple[str, str]] = set()  # (rule code, node code) of fixes that broke the file
    current = source
    module: Optional[cst.Module] = None  # LibCST's tree of `current` where the fixer's check parsed it
    round_trip: Optional[str] = None  # LibCST's code for `source` (what fixes are carried back against)
    rendered = False  # some pass rendered the whole module (else every fix was put in place in the text)
    remaining: Optional[List[Diagnostic]] = None  # the diagnostics of `current`, where a pass linted it
    for _ in range(MAX_FIX_PASSES):
        candidates = rules_that_may_fire(rules, current, settings, path)
        if not candidates:
            remaining = []
            break
        if module is None:
            try:
                module = parse(current, path)
            except SyntaxProblem as exc:
                if current == source:
                    outcome.remaining = [error_diagnostic(path, str(exc), exc.line, exc.column)]
                    return outcome
                raise AssertionError("a verified fix produced unparsable code") from exc
        else:
            forget_last_index()  # as `parse` does: the stdlib tree need not live beside LibCST's
        analysis, reports, remaining = _run_rules(module, current, path, candidates, settings, selected=selected)
        fixable = [
            r for r in reports
            if r.fix is not None and r.fix.applicability in allowed
            and not (broken and (r.rule.code, module.code_for_node(r.node)) in broken)
        ]
        if not fixable:
            break
        from torchlint.fixer import FixApplier

        result = FixApplier(module, analysis, path).apply(fixable, current)
        if result.whole_module:
            rendered = True
            if current == source:  # this pass's tree is the source's
                round_trip = module.code
        for report in result.broken:
            broken.add((report.rule.code, module.code_for_node(report.node)))
            outcome.errors.append(
                error_diagnostic(
                    path,
                    f"internal error: the fix of {report.rule.code} ({report.rule.name}) produced invalid code "
                    "and was not applied; please report it",
                )
            )
        module = result.module
        if result.code == current:
            if not result.broken:
                break
            continue  # the same text again, without the broken fixes
        current = result.code
        remaining = None
        outcome.applied.update(r.rule.code for r in result.applied)
    if current != source and rendered:
        carried = _carry_to_original(source, round_trip, current, path, outcome)
        if carried != current:
            current, remaining = carried, None
    outcome.source = current
    outcome.remaining = remaining if remaining is not None else lint_source(current, path, rules, settings).diagnostics
    return outcome


def _carry_to_original(source: str, round_trip: Optional[str], fixed: str, path: str, outcome: FixOutcome) -> str:
    """The fixes applied to ``source`` itself, byte for byte outside the fixed lines (LibCST's round trip
    ``round_trip`` is not exact for every file); where that cannot be done, no fix at all."""
    from torchlint.textmerge import carry_fixes

    if round_trip is None:  # not kept by the caller: LibCST's code for the source, again
        round_trip = cst.parse_module(source).code
    carried = carry_fixes(source, round_trip, fixed)
    if carried is not None and (carried == fixed or _still_valid(source, carried)):
        return carried
    outcome.applied.clear()
    outcome.errors.append(error_diagnostic(
        path, "fixes not applied: torchlint's parser does not reproduce this file's bytes exactly next to them "
        "(a form feed or a lone carriage return); please report it"))
    return source


def _still_valid(source: str, carried: str) -> bool:
    try:
        cst.parse_module(carried)
    except Exception:
        return False
    return _python_syntax_error(carried) is None or _python_syntax_error(source) is not None
