"""Lint and fix one source text: pre-filter, parse, analyse, run the rules, locate, suppress, fix."""

from __future__ import annotations

import ast
import warnings

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, FrozenSet, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from torchlint.config import Settings
from torchlint.run.discovery import is_test_file
from torchlint.run.guard import forget_answers, parse_problem, stdlib_index, stdlib_tree
from torchlint.facts.project import ProjectModel
from torchlint.rule import (
    Applicability, Diagnostic, IndexContext, Report, Rule, RuleCrash, iter_reports,
)
from torchlint.report.suppression import Suppressions

if TYPE_CHECKING:  # the index and the fixer's modules are loaded where a file needs them (a clean file: never)
    from torchlint.facts.index import AstIndex
    from torchlint.fix.analysis import FileAnalysis
    from torchlint.fix.rewrites import StatementTree

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


def rules_that_may_fire(rules: Sequence[Rule], source: str, settings: Settings, path: str = "",
                        project: Optional[ProjectModel] = None) -> List[Rule]:
    """The rules that could report something in ``source`` (at ``path``; "" where there is none): the rules
    for its kind of file whose exact text gate (``Rule.may_fire``) passes, or that follow what ``project``
    holds for the file (``ProjectModel.opens_gate``). The index is their detection."""
    return [rule for rule in rules_for_path(rules, path, settings)
            if rule.may_fire(source, settings) or (project is not None and project.opens_gate(rule.code))]


def needs_libcst(source: str) -> bool:
    """Whether the file needs LibCST's tree before any rule runs: CPython's parser rejects it (LibCST names
    the syntax error, or parses syntax newer than this interpreter's; no rule detects there)."""
    return _stdlib_ast(source) is None


def reports_without_stages(rules: Sequence[Rule], source: str, settings: Settings, crashes: list) -> List[Report]:
    """What ``rules`` detect on ``source`` with no text gate before them, before suppression (the tests hold
    the gates to this)."""
    index = _index_of(source)
    assert index is not None, "reports_without_stages needs valid Python"
    return list(iter_reports(rules, IndexContext(index, settings), crashes))


def rules_for_path(rules: Sequence[Rule], path: str, settings: Optional[Settings] = None) -> Sequence[Rule]:
    """Rules silent in test code are left out for a test file (``Rule.silent_in_test_files``), as the
    ``test-paths`` settings say, judged from the project root (``discovery.is_test_file``)."""
    if path and is_test_file(path, settings if settings is not None else Settings()):
        return rules_for_test_files(rules)
    return rules


def rules_for_test_files(rules: Sequence[Rule]) -> List[Rule]:
    return [rule for rule in rules if not rule.silent_in_test_files]


def _stdlib_ast(source: str) -> Optional[ast.Module]:
    return stdlib_tree(source)  # None: LibCST decides (it also parses syntax newer than this interpreter's)


def _index_of(source: str) -> Optional[AstIndex]:
    # (kept while the text is among the last parsed: the summaries other files read of it share it)
    return stdlib_index(source)


def parse(source: str, path: str) -> cst.Module:
    """Parse or raise ``SyntaxProblem`` with a located message."""
    from torchlint.fix.fast_parse import parse_module as trusted_parse

    # code that would crash or stall LibCST's native parser, or is not Python (it also drops the stdlib tree
    # and index of the text: they need not live beside LibCST's)
    problem = parse_problem(source)
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
                                f"checked: {exc.message}", exc.raw_line, exc.raw_column + 1, exc.message) from None
        raise SyntaxProblem(f"syntax error: {exc.message}", exc.raw_line, exc.raw_column + 1) from None
    except (RecursionError, MemoryError) as exc:  # pathological nesting
        raise SyntaxProblem(f"cannot parse: {type(exc).__name__}", 1, 1) from None


def compile_problem(index: AstIndex, top_level_await: bool = False) -> Optional["SyntaxProblem"]:
    """What CPython's compiler refuses in the file ``index`` holds although its parser took it (a keyword
    argument named twice, `return` outside a def, `break` outside a loop...), as the syntax error CPython
    reports; None where it compiles. Compiled only where the index's walk saw such code may be
    (``AstIndex.may_not_compile``). ``top_level_await``: a notebook's code, where IPython runs `await` at the
    top level."""
    if not index.may_not_compile:
        return None
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if top_level_await else 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(index.tree, "<torchlint>", "exec", flags=flags, dont_inherit=True)
    except SyntaxError as error:
        line = error.lineno or 1
        column = index._char_column(line, error.offset - 1) + 1 if error.offset else 1  # bytes, as `ast`'s
        return SyntaxProblem(f"syntax error: {error.msg}", line, column)
    except (ValueError, TypeError, RecursionError, MemoryError):  # not the compiler's judgement: lint it
        return None
    return None


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
    def __init__(self, message: str, line: int, column: int, reason: Optional[str] = None) -> None:
        super().__init__(message)
        self.line, self.column = line, column
        self.reason = reason  # LibCST's own words, where it refused valid Python


def _run_rules(
    module: Optional[cst.Module], source: str, path: str, rules: Sequence[Rule], settings: Settings,
    with_edits: bool = False, selected: FrozenSet[str] = frozenset(), index: Optional[AstIndex] = None,
    fixing: bool = False, statements: bool = True, project: Optional[ProjectModel] = None,
) -> Tuple[Optional[Union[FileAnalysis, StatementTree]], List[Report], List[Diagnostic]]:
    """``_run_rules_on``, with the names the file's star imports of project modules bind in the index's import
    table while it runs (``ProjectModel.star_origins``)."""
    origins = project.star_origins() if project is not None and project.stars else None
    if origins:
        if index is None:
            index = _index_of(source)
        if index is not None:
            with index.with_star_names(origins):
                return _run_rules_on(module, source, path, rules, settings, with_edits, selected, index, fixing,
                                     statements, project)
    return _run_rules_on(module, source, path, rules, settings, with_edits, selected, index, fixing, statements,
                         project)


def _run_rules_on(
    module: Optional[cst.Module], source: str, path: str, rules: Sequence[Rule], settings: Settings,
    with_edits: bool = False, selected: FrozenSet[str] = frozenset(), index: Optional[AstIndex] = None,
    fixing: bool = False, statements: bool = True, project: Optional[ProjectModel] = None,
) -> Tuple[Optional[Union[FileAnalysis, StatementTree]], List[Report], List[Diagnostic]]:
    """Reports that survive suppression, paired index-for-index with their diagnostics. ``selected``: the
    codes of every rule selected for the file (``rules`` are those the pre-filter left). The rules detect
    on the index (``index``, where the caller holds it already); ``module``: LibCST's tree of the file where
    the caller has it (a fix pass's output, a file CPython rejects), else None. The fixes
    findings on the index propose are made on LibCST's tree of just the statements that hold them
    (``torchlint.fix.rewrites``) where it can (``statements``; JSON's edits, ``with_edits``, need the whole
    file's tree), for `fix` (``fixing``) only where LibCST writes those statements back exactly. Returns the
    tree the fixes were made on first (None where LibCST parsed nothing)."""
    crashes: List[RuleCrash] = []
    reports: List[Report] = []
    if index is None:
        index = _index_of(source)
    if index is not None:
        reports.extend(iter_reports(rules, IndexContext(index, settings, path, project=project), crashes))
    analysis = None
    if module is not None:
        from torchlint.fix.analysis import FileAnalysis

        analysis = FileAnalysis(module, source, path)
    after = [rule for rule in rules if rule.runs_after_suppression]
    tree: Optional[StatementTree] = None

    def rewrite(found: List[Report]) -> Optional[StatementTree]:
        """Make the fixes that findings on the index propose on LibCST's tree: of just their statements
        where it can (not where a rule after suppression may propose more: TL900's need the whole file, and
        every fix of a pass is made on one tree), else of the file. Where LibCST refuses the whole file, the
        edits (``with_edits``) are those `fix` writes, made on the statements' tree: returned, the tree."""
        nonlocal module, analysis, tree
        pending = [report for report in found if report.rewrite is not None]
        if not pending:
            return None
        from torchlint.fix.analysis import FileAnalysis
        from torchlint.fix.rewrites import make_rewrites, make_rewrites_in_statements, refuse_rewrites

        if module is None and statements and not with_edits and not after:
            assert index is not None
            tree = make_rewrites_in_statements(pending, index, exact=fixing)
        if tree is None:
            if module is None:
                try:
                    module = parse(source, path)
                except SyntaxProblem as problem:  # valid Python (the index read it) that LibCST refuses
                    detail = f": {problem.reason}" if problem.reason else ""
                    reason = f"LibCST, which writes the fixes, cannot parse this file (line {problem.line}{detail})"
                    alone = make_rewrites_in_statements(pending, index, exact=True) if with_edits else None
                    # (`fix` makes a fix that adds an import on the whole file's tree: not here either)
                    refuse_rewrites([r for r in pending if alone is None or (r.fix is not None and r.fix.imports)],
                                    reason)
                    return alone
            if module is not None:
                if analysis is None:
                    analysis = FileAnalysis(module, source, path)
                make_rewrites(pending, index, analysis)
        return None

    alone = rewrite(reports)
    if not reports and not after:
        if analysis is not None:
            analysis.release()
        return tree or analysis, [], [error_diagnostic(path, str(crash)) for crash in crashes]
    suppressions = Suppressions.parse(source)
    kept: List[Tuple[Diagnostic, Report]] = []
    seen: Set[Tuple[str, int, int, str]] = set()

    def keep(found: List[Report], alone: Optional[StatementTree]) -> None:
        fix_edits = None
        if with_edits and any(r.fix for r in found):
            from torchlint.fix.edits import FixEdits  # loads the fixer: only where there is something to show

            fix_edits = (FixEdits(module, analysis, path, source) if alone is None
                         else FixEdits(alone.analysis.module, alone.analysis, path, alone.text, alone.file_lines))
        for report in found:
            assert report.span is not None  # placed by the index when reported
            line, column, end_line, end_column = report.span
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

    keep(reports, alone)
    if after:
        ctx = IndexContext(index, settings, path, source)  # type: ignore[arg-type]  # None: CPython rejects the file
        for rule in after:
            ctx._rule = rule
            try:
                rule.check_suppressions(ctx, suppressions, selected or frozenset(r.code for r in rules))
            except RecursionError:
                raise
            except Exception as error:  # noqa: BLE001 - as in iter_reports
                crashes.append(RuleCrash(rule, error))
        keep(ctx.reports, rewrite(ctx.reports))
    kept.sort(key=lambda pair: pair[0].sort_key)
    if analysis is not None:
        analysis.release()  # every rule has run: what they shared may refer back to the analysis
    crash_diagnostics = [error_diagnostic(path, str(crash)) for crash in crashes]
    return tree or analysis, [r for _, r in kept], crash_diagnostics + [d for d, _ in kept]


def _checked_tree(source: str, path: str, index: Optional[AstIndex], top_level_await: bool) -> Optional[cst.Module]:
    """LibCST's tree of ``source`` where CPython rejects it (else None: ``index`` holds the file), or
    ``SyntaxProblem``: what the compiler refuses (``compile_problem``), what no parser takes (``parse``)."""
    problem = compile_problem(index, top_level_await) if index is not None else None
    if problem is not None:
        raise problem
    return parse(source, path) if needs_libcst(source) else None


def syntax_problem(source: str, path: str = "", top_level_await: bool = False) -> Optional[SyntaxProblem]:
    """The syntax error ``lint_source`` reports for ``source`` (as ``TL000``, where a rule may fire), or None
    where it is checked."""
    index = _index_of(source)
    try:
        _checked_tree(source, path, index, top_level_await)
    except SyntaxProblem as problem:
        return problem
    finally:
        if index is not None:
            forget_answers(index)
    return None


def lint_source(
    source: str, path: str, rules: Sequence[Rule], settings: Settings, with_edits: bool = False,
    project: Optional[ProjectModel] = None, top_level_await: bool = False,
) -> LintOutcome:
    """Diagnostics for one text; ``with_edits`` also renders each fix as text edits (for JSON output);
    ``project``: the summaries of the project files it imports (``torchlint.facts.project``);
    ``top_level_await``: a notebook's code (``compile_problem``)."""
    candidates = rules_that_may_fire(rules, source, settings, path, project)
    if not candidates:
        return LintOutcome([], parsed=False)
    selected = frozenset(rule.code for rule in rules)
    # held here: parsing with LibCST drops the stages' shared index
    index = _index_of(source)
    try:
        module = _checked_tree(source, path, index, top_level_await)
        # (a finding on the index that proposes a fix parses the file in here, where `module` is None)
        analysis, _, diagnostics = _run_rules(module, source, path, candidates, settings, with_edits, selected, index,
                                              project=project)
    except SyntaxProblem as exc:
        return LintOutcome([error_diagnostic(path, str(exc), exc.line, exc.column)], parsed=True)
    finally:
        if index is not None:  # kept for the summaries other files read of this one (run.guard): not its facts
            forget_answers(index)
    return LintOutcome(diagnostics, parsed=analysis is not None)


def fix_source(source: str, path: str, rules: Sequence[Rule], settings: Settings, unsafe: bool,
               project: Optional[ProjectModel] = None, top_level_await: bool = False) -> FixOutcome:
    """Apply fixes until none is left (bounded). A fix whose output does not parse is dropped. A source
    CPython does not compile is left as it is, with its syntax error (``compile_problem``)."""
    from torchlint.fix.rewrites import StatementTree

    allowed = {Applicability.SAFE, Applicability.UNSAFE} if unsafe else {Applicability.SAFE}
    selected = frozenset(rule.code for rule in rules)
    outcome = FixOutcome(source)
    broken: Set[Tuple[str, str]] = set()  # (rule code, node code) of fixes that broke the file
    current = source
    module: Optional[cst.Module] = None  # LibCST's tree of `current` where the fixer's check parsed it
    round_trip: Optional[str] = None  # LibCST's code for `source` (what fixes are carried back against)
    rendered = False  # some pass rendered the whole module (else every fix was put in place in the text)
    remaining: Optional[List[Diagnostic]] = None  # the diagnostics of `current`, where a pass linted it
    statements = True  # fixes may be made on LibCST's tree of just their statements (``torchlint.fix.rewrites``)
    for _ in range(MAX_FIX_PASSES):
        candidates = rules_that_may_fire(rules, current, settings, path, project)
        if not candidates:
            remaining = []
            break
        index = _index_of(current)
        try:
            if current == source and index is not None:
                problem = compile_problem(index, top_level_await)
                if problem is not None:
                    raise problem
            if module is None and needs_libcst(current):
                module = parse(current, path)
            # (a finding on the index that proposes a fix parses the file here, where `module` is None)
            site, reports, remaining = _run_rules(module, current, path, candidates, settings, selected=selected,
                                                  index=index, fixing=True, statements=statements, project=project)
        except SyntaxProblem as exc:
            if current == source:
                outcome.remaining = [error_diagnostic(path, str(exc), exc.line, exc.column)]
                return outcome
            raise AssertionError("a verified fix produced unparsable code") from exc
        if site is None:
            break  # no finding proposes a fix: what was found stays
        analysis = site.analysis if isinstance(site, StatementTree) else site
        module = analysis.module
        fixable = [
            r for r in reports
            if r.fix is not None and r.fix.applicability in allowed
            and not (broken and (r.rule.code, module.code_for_node(r.node)) in broken)
        ]
        if not fixable:
            break
        from torchlint.fix.fixer import FixApplier

        if isinstance(site, StatementTree):
            if any(r.fix.imports for r in fixable):  # where LibCST adds an import depends on the whole file
                statements, module = False, None
                continue
            result = FixApplier(module, analysis, path).apply(fixable, site.text, next_pass_tree=False)
            carried = site.carried(current, result.code, result.regions) if result.code != site.text else current
            if carried is None or (carried != current and stdlib_tree(carried) is None):
                statements, module = False, None  # this pass again, on the whole file
                continue
            result.code, result.module = carried, None
        else:
            result = FixApplier(module, analysis, path).apply(fixable, current)
        if result.whole_module and not isinstance(site, StatementTree):
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
    outcome.remaining = (remaining if remaining is not None else lint_source(
        current, path, rules, settings, project=project, top_level_await=top_level_await).diagnostics)
    return outcome


def _carry_to_original(source: str, round_trip: Optional[str], fixed: str, path: str, outcome: FixOutcome) -> str:
    """The fixes applied to ``source`` itself, byte for byte outside the fixed lines (LibCST's round trip
    ``round_trip`` is not exact for every file); where that cannot be done, no fix at all."""
    from torchlint.fix.textmerge import carry_fixes

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
