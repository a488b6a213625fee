"""Where the fixes that findings on the index propose are made: on LibCST's tree of the file, or, where only
whether a fix exists is wanted (`check`'s ``[*]``, its counts of fixable findings), on LibCST's tree of just
the top-level statements that hold the findings' calls, with the file's imports before them. A file with
something LibCST refuses (``guard.parse_problem``; a form feed, which its tokenizer reads otherwise than
CPython) is parsed whole, so that `check` reports it as `fix` will.

LibCST parses about six times slower than ``ast`` and most findings sit in one function of a long file, so
`check` parses a few statements where it used to parse the file. A rewrite sees the same statement, the same
function, the same class and the same imports either way; ``tests/test_rewrites.py`` holds the two answers
equal, finding by finding, on every fixture. A rewrite of a def or loop (``Rewrite.block``) gets its
twin by its place among the statements' defs or loops; a rewrite names the other top-level statements it
reads (``Rewrite.statements``), and a module rewrite without them needs the whole file. A rewrite that reads
less than its top-level statement names what it reads (``Rewrite.reads``: its call, its def, the first
statement of the block it inserts before): then just that statement is parsed, under the headers of the
defs, classes and blocks around it (a 300-line `main()` with one `Adam(...)` in it: a few lines).
"""

from __future__ import annotations

import ast
import bisect
import io
import re
import tokenize
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint.fix.analysis import FileAnalysis
from torchlint.facts.index import COMPOUND_STATEMENTS, AstIndex, Extent
from torchlint.fix.fast_parse import parse_module as trusted_parse
from torchlint.run.guard import parse_problem
from torchlint.rule import Report


def make_rewrites(reports: Sequence[Report], index: Optional[AstIndex], analysis: FileAnalysis) -> None:
    """Each report's fix, made on the LibCST twin of its rewrite's call in the whole file's tree, or on
    the module, or its ``refused`` message where the rewrite cannot be made. ``index`` is None where
    CPython's parser rejects the file: only module rewrites (TL900's) are made there."""
    altered: Set[int] = set()
    if "\f" in analysis.source and analysis.module.code != analysis.source:
        from torchlint.fix.textmerge import altered_lines

        altered = altered_lines(analysis.source, analysis.module.code)
    twins: Dict[int, Optional[cst.CSTNode]] = {}
    if index is not None:
        if any(report.rewrite.call is not None for report in reports):  # type: ignore[union-attr]
            twins.update(_twins(index, analysis))
        if any(report.rewrite.block is not None for report in reports):  # type: ignore[union-attr]
            twins.update(_block_twins(index.functions, _loops(index), analysis))
    _make(reports, twins, analysis, index, altered)  # type: ignore[arg-type]


@dataclass
class StatementTree:
    """LibCST's tree of some of a file's lines: ``text``, the lines it was parsed from, and ``file_lines``,
    the file's line (0-based) of each of its lines."""

    analysis: FileAnalysis
    text: str
    file_lines: List[int]

    def carried(self, source: str, fixed: str,
                regions: Optional[Sequence[Tuple[int, int, str]]] = None) -> Optional[str]:
        """``source`` (the file) with the changes the fixes made to ``text`` (now ``fixed``) in place, or
        None where a change spans lines that are not adjacent in the file. ``regions``: the changed
        statements of ``text`` (``FixEdits.spliced``: whole lines each), each put in place of its lines in
        the file; else the changed lines are found by a line diff."""
        from torchlint.run.fileio import split_lines

        if regions is None:
            from torchlint.fix.textmerge import carry_fixes

            return carry_fixes(source, self.text, fixed, dict(enumerate(self.file_lines)))
        starts = [0]
        for line in split_lines(self.text):
            starts.append(starts[-1] + len(line))
        lines = split_lines(source)
        out, at = [], 0  # the file's lines before ``at`` are out
        for start, end, new in regions:
            first, last = bisect.bisect_left(starts, start), bisect.bisect_left(starts, end) - 1
            if starts[first] != start or starts[last + 1] != end:
                return None  # never seen: a region is whole lines
            there = self.file_lines[first]
            if self.file_lines[last] - there != last - first or there < at:
                return None  # a statement over lines apart in the file
            out += lines[at:there]
            out.append(new)
            at = there + last - first + 1
        out += lines[at:]
        return "".join(out)


def make_rewrites_in_statements(reports: Sequence[Report], index: AstIndex,
                                exact: bool = False) -> Optional[StatementTree]:
    """As ``make_rewrites``, on a LibCST parse of the top-level statements that hold the reports' calls
    (and the file's top-level imports), or where a rewrite says it reads less (``Rewrite.reads``), of just
    that statement under the headers around it: the tree, or None, with nothing made, where that cannot
    answer as the whole file would: a module rewrite, or statements LibCST does not parse alone (the caller
    parses the file). ``exact``: the fixes will be written, so LibCST must write these statements back as
    they are."""
    if any(report.rewrite is None or (report.rewrite.call is None and report.rewrite.block is None
                                      and report.rewrite.reads is None and not report.rewrite.statements)
           for report in reports):
        return None
    if "\f" in index.source or parse_problem(index.source) is not None:
        return None  # what LibCST refuses anywhere in the file: the whole file's parse reports it, as before
    if any(report.rewrite.reads is not None for report in reports):  # type: ignore[union-attr]
        tree = _statement_tree(reports, index, exact, narrow=True)  # (``Rewrite.reads``)
        if tree is not None:
            return tree
    return _statement_tree(reports, index, exact, narrow=False)


def _statement_tree(reports: Sequence[Report], index: AstIndex, exact: bool, narrow: bool) -> Optional[StatementTree]:
    tops = {id(node): node for node in index.tree.body if isinstance(node, (ast.Import, ast.ImportFrom))}
    paths: List[Tuple[int, int]] = []
    for report in reports:
        rewrite = report.rewrite
        assert rewrite is not None
        tops.update((id(top), top) for top in rewrite.statements)
        if narrow and rewrite.reads is not None:
            paths.extend(_path_lines(index, rewrite.reads))
            continue
        target = rewrite.reads or rewrite.call or rewrite.block
        if target is not None:
            top = _top_level(index, target)
            tops[id(top)] = top
    ranges = _merged(sorted([_line_range(index, node) for node in tops.values()] + paths))
    text = "".join(index.lines_text(first, last) for first, last in ranges)
    try:
        module = trusted_parse(text)
    except (cst.ParserSyntaxError, RecursionError, MemoryError):  # e.g. a line that continues the one before
        return None
    offsets = None
    if exact:
        from torchlint.fix.positions import code_and_statement_offsets

        code, offsets = code_and_statement_offsets(module)
        if code != text:  # (a lone carriage return at the end)
            return None
    if (module.default_indent, module.default_newline) != _layout(index):
        return None  # code a fix writes (a new block) follows the file's first indent and newline, not these
    lines = [line for first, last in ranges for line in range(first, last + 1)]
    held = set(lines)
    inside = [info for info in index.calls if info.node.lineno in held]
    analysis = FileAnalysis(module, text, "")
    analysis.statement_offsets = offsets
    if len(inside) != len(analysis.calls):
        return None
    twins: Dict[int, Optional[cst.CSTNode]] = {id(info.node): twin for info, twin in zip(inside, analysis.calls)}
    if any(report.rewrite.block is not None for report in reports):  # type: ignore[union-attr]
        defs = [node for node in index.functions if node.lineno in held]
        loops = [node for node in _loops(index) if node.lineno in held]
        if len(defs) != len(analysis.functions) or len(loops) != len(analysis.loops):
            return None
        twins.update(_block_twins(defs, loops, analysis))
    # the whole file's import table (``tests/test_ast_index.py`` holds the index's equal to LibCST's): an
    # import inside a function or a `try:` elsewhere names modules here too
    analysis.imports = dict(index.own_imports())  # (a fix adds `import torch` rather than lean on a star import)
    tree_line = {line: at for at, line in enumerate(lines, 1)}
    _make(reports, twins, analysis, index, set(), tree_line.get)
    return StatementTree(analysis, text, [line - 1 for line in lines])


# The compound statements whose header alone, with the statement of their body that leads to a call, is
# still Python: the other statements of the body are left out (an `else:`, `except:` or `case` branch is not
# narrowed: its statement is taken whole).
_NARROWED = frozenset({ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.For, ast.AsyncFor, ast.While,
                       ast.With, ast.AsyncWith, ast.If, ast.Try, *((ast.TryStar,) if hasattr(ast, "TryStar") else ())})


def _path_lines(index: AstIndex, node: ast.AST) -> List[Tuple[int, int]]:
    """The lines LibCST needs to see ``node`` in its statement: the headers of the defs, classes, loops and
    blocks around it (from the top level in), and its own statement (its line of statements) whole."""
    chain = [above for above in (node, *index.ancestors(node)) if isinstance(above, ast.stmt)]
    chain.reverse()  # the top-level statement first
    ranges = []
    for outer, inner in zip(chain, chain[1:]):
        body = outer.body if type(outer) in _NARROWED else ()  # type: ignore[attr-defined]
        if not any(statement is inner for statement in body):  # (a `match`, an `else:` branch)
            ranges.append(_whole_lines(outer))
            return ranges
        first_body_line = _first_line(body[0])
        if first_body_line <= outer.lineno:  # `if x: y = f()`: header and body on one line
            ranges.append(_whole_lines(outer))
            return ranges
        ranges.append((_first_line(outer), first_body_line - 1))
    innermost = chain[-1]
    if type(innermost) in COMPOUND_STATEMENTS:  # a block, or a call in its header (`for b in f(x):`)
        ranges.append(_whole_lines(innermost))
    else:
        line = index.statement_line(innermost)
        first, last = (line.first, line.last) if isinstance(line, Extent) else (line, line)
        ranges.append((first.lineno, last.end_lineno))  # type: ignore[attr-defined]
    return ranges


def _first_line(statement: ast.stmt) -> int:
    return min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", ()))])


def _whole_lines(statement: ast.stmt) -> Tuple[int, int]:
    return _first_line(statement), statement.end_lineno  # type: ignore[return-value]


def refuse_rewrites(reports: Sequence[Report], reason: str) -> None:
    """No fix for these reports, and why: each reads its rewrite's ``refused`` message."""
    for report in reports:
        _refuse(report, reason)


def _refuse(report: Report, reason: str) -> None:
    assert report.rewrite is not None
    report.message = report.rewrite.refused.replace("{reason}", reason)


def _make(reports: Sequence[Report], twins: Dict[int, Optional[cst.CSTNode]], analysis: FileAnalysis,
          index: AstIndex, altered: Set[int], line_in_text: Callable[[int], Optional[int]] = lambda line: line) -> None:
    """``twins``: the LibCST twin of each rewrite's call or block, by the ``id`` of the index's node.
    ``altered``: the lines LibCST's round trip of the file does not keep (``textmerge.altered_lines``);
    a fix to a statement there could not be written back, so it is refused. ``line_in_text``: a file's
    line -> its line in the analysed text (a statements' tree holds some of the file's lines)."""
    for report in reports:
        rewrite = report.rewrite
        assert rewrite is not None
        target = rewrite.call or rewrite.block
        twin = twins.get(id(target)) if target is not None else analysis.module
        if twin is None:
            continue  # reported without a fix, as found
        if rewrite.call is not None:
            report.node = twin
            if altered and _statement_lines(index, rewrite.call) & altered:
                _refuse(report, ROUND_TRIP)
                continue
        made = rewrite.make(twin, analysis)
        if isinstance(made, str):
            _refuse(report, made)
        else:
            report.fix = made
            if target is not None:
                line = line_in_text(target.lineno)
                if line is not None:
                    analysis.anchor_lines[twin] = line
            if rewrite.call is None:  # a fix of a block or elsewhere in the module: its node names it (a fix that broke)
                report.node = next(iter(made.replacements))


# LibCST repeats or drops a form feed in an indentation when it writes a block (``torchlint.fix.textmerge``)
ROUND_TRIP = "LibCST would not write back the form feed in this block's indentation as it was"


def _statement_lines(index: AstIndex, call: ast.Call) -> Set[int]:
    statement = index.enclosing_statement(call)
    first, _, last, _ = index.span(statement if statement is not None else call)
    return set(range(first, last + 1))


def _twins(index: AstIndex, analysis: FileAnalysis) -> Dict[int, Optional[cst.Call]]:
    """The index's calls -> LibCST's: the same place in the file's calls in source order
    (``tests/test_index_spans.py`` holds the two lists equal call for call)."""
    if len(index.calls) == len(analysis.calls):
        return {id(info.node): twin for info, twin in zip(index.calls, analysis.calls)}
    # never seen: the two parsers disagree on the calls; match them by place instead
    from torchlint.fix.positions import node_spans

    by_span = {span: node for node, span in node_spans(analysis.module, analysis.calls, analysis.parents,
                                                       analysis.source).items()}
    return {id(info.node): by_span.get(index.span(info.node)) for info in index.calls}


def _loops(index: AstIndex) -> List[ast.stmt]:
    return [info.node for info in index.loops]


def _block_twins(defs: Sequence[ast.stmt], loops: Sequence[ast.stmt],
                 analysis: FileAnalysis) -> Dict[int, Optional[cst.CSTNode]]:
    """The index's defs and loops -> LibCST's: both list them in source order, ``for`` and ``while`` alike
    (``tests/test_rewrites.py`` holds the twins equal by place on every fixture). None where the counts
    differ (never seen): the finding keeps no fix."""
    twins: Dict[int, Optional[cst.CSTNode]] = {}
    for ours, theirs in ((defs, [info.node for info in analysis.functions]),
                         (loops, [info.node for info in analysis.loops])):
        same = len(ours) == len(theirs)
        twins.update((id(node), twin if same else None) for node, twin in zip(ours, theirs))
    return twins


def _layout(index: AstIndex) -> Tuple[str, str]:
    """The file's default indent and newline as LibCST reads them: the indentation of the first indented
    block, else four spaces, and the first line end, else a newline."""
    layout = index.shared.get("rewrites.layout")
    if layout is None:
        newline = _FIRST_NEWLINE.search(index.source)
        layout = index.shared["rewrites.layout"] = (_first_indent(index.source), newline.group(0) if newline else "\n")
    return layout  # type: ignore[no-any-return]


def _first_indent(source: str) -> str:
    """The whitespace of the first ``INDENT`` token (it opens at the top level, so it is the whole
    indentation of its line); tokens are read only up to it."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.INDENT:
                return token.string
    except (tokenize.TokenError, SyntaxError):
        return ""  # matches no parsed module's indent: the caller parses the whole file
    return "    "


_FIRST_NEWLINE = re.compile(r"\r\n?|\n")


def _top_level(index: AstIndex, node: ast.AST) -> ast.stmt:
    top = node
    for above in index.ancestors(node):
        if isinstance(above, ast.Module):
            break
        top = above
    assert isinstance(top, ast.stmt)
    return top


def _line_range(index: AstIndex, statement: ast.stmt) -> Tuple[int, int]:
    """A top-level statement's lines, with the comments and blank lines above it (LibCST's leading lines
    of the statement): a line a fix inserts before it (a decorator) then has a line of the file on either
    side, and one it inserts after the statement before it lands above those lines, as in the file."""
    ends = index.__dict__.get("_top_level_ends")
    if ends is None:
        body = index.tree.body
        ends = index.__dict__["_top_level_ends"] = {id(b): a.end_lineno for a, b in zip(body, body[1:])}
    return min(_first_line(statement), ends.get(id(statement), 0) + 1), statement.end_lineno  # type: ignore[return-value]


def _merged(ranges: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """Sorted line ranges, those that share a line (``a = 1; b = f()``) or touch joined."""
    merged: List[Tuple[int, int]] = []
    for first, last in ranges:
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(last, merged[-1][1]))
        else:
            merged.append((first, last))
    return merged
