"""The text edits of one report's fix, at the cost of the statement it changes rather than the file.

JSON, SARIF and full output carry each fix as text edits. Rendering the whole module with the fix and
diffing it against the source, once per report, cost a transform of the whole tree, code generation of
every statement and a diff of every line. Here only the innermost statement that holds the fix's
replacements is rendered, before and after (with the indentation of its block, as ``positions.py`` locates
nodes); its old text is found at exactly one line start of the source, and the edits are the line diff of
that statement's two texts (``text_edits``), moved to where the statement starts. Applied to the
source, they give exactly the module rendered with the fix. Where the statement cannot be rendered alone
(the fix adds imports, removes a statement at module level, the text is not unique, LibCST does not
reproduce the source byte for byte), the whole-module path runs as before.

``fix`` applies a pass's fixes the same way (``FixEdits.spliced``): each changed statement is rendered and put
in place of its old text, and every other byte stays as it was, so neither the whole module nor LibCST's
round trip of the original (``engine._carry_to_original``) has to be generated.
"""

from __future__ import annotations

import bisect
import os
import re
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence, Tuple

import libcst as cst

from torchlint.run.fileio import split_lines
from torchlint.fix.fixer import FixApplier, Replacer, nodes_above
from torchlint.fix.positions import (StatementLocator, generate_code, has_continuation_only_line, line_starts_of,
                                     only_line_start, reproduced_exactly)
from torchlint.rule import Edit, Report

_NEWLINE = re.compile(r"\r\n?|\n")

if TYPE_CHECKING:
    from torchlint.fix.analysis import FileAnalysis


class FixEdits:
    """Edits of the reports of one parsed module; build once per file, then ``edits(report)`` per report."""

    def __init__(self, module: cst.Module, analysis: "FileAnalysis", path: str, source: str,
                 file_lines: Optional[Sequence[int]] = None) -> None:
        """``source``: the text ``module`` was parsed from; ``file_lines``: where it is some of a file's lines
        (``rewrites.StatementTree``), the file's line (0-based) of each, to give the edits in the file's lines."""
        self.module, self.analysis, self.path, self.source = module, analysis, path, source
        self.file_lines = file_lines
        self.exact = reproduced_exactly(module, source) and not has_continuation_only_line(source)
        self._locator: Optional[StatementLocator] = None
        self._old_texts: Dict[cst.CSTNode, str] = {}
        self._starts: Dict[str, Optional[int]] = {}
        self._occurrences: Dict[str, List[int]] = {}  # a repeated statement text -> its line starts, in order
        self._line_offsets: Optional[List[int]] = None  # of the source's lines

    def edits(self, report: Report) -> Tuple[Edit, ...]:
        assert report.fix is not None
        local = self._local_edits(report)
        if local is None:
            local = text_edits(self.source, FixApplier(self.module, self.analysis, self.path).render([report]))
        return local if self.file_lines is None else tuple(_in_file(edit, self.file_lines) for edit in local)

    def _local_edits(self, report: Report) -> Optional[Tuple[Edit, ...]]:
        fix = report.fix
        assert fix is not None
        if fix.imports or not self.exact or not fix.replacements:
            return None  # added imports go to the module's head; an inexact round trip diffs more than the fix
        region = self._changed_statement(fix.replacements, (report.node,))
        if region is None:
            return None
        offset, old, new = region
        if old == new:
            return ()
        return self._diff(offset, old, new)

    def spliced(self, reports: Sequence[Report]) -> Optional[List[Tuple[int, int, str]]]:
        """The fixes of ``reports`` (which do not overlap) as regions of the source, in order: (start, end,
        new text) of each changed statement, whole lines, rendered in place of its old text (fixes in one
        statement, or in statements nested in one another, rendered together); ``spliced_text`` applies
        them. None where some fix needs the whole module (see ``_local_edits``)."""
        if not self.exact:
            return None
        pending: List[Tuple[Dict[cst.CSTNode, object], Tuple[cst.CSTNode, ...]]] = []
        for report in reports:
            assert report.fix is not None
            if report.fix.imports or not report.fix.replacements:
                return None
            pending.append((dict(report.fix.replacements), (report.node,)))
        # Find each fix's statement first and render each merged region once: N fixes in one statement
        # whose text is not unique (the same line repeated in a loop) all land in the loop, which rendering
        # per fix made cost N times the loop.
        while True:
            regions: List[Tuple[int, int, Tuple[cst.CSTNode, List[str]],
                                Tuple[Dict[cst.CSTNode, object], Tuple[cst.CSTNode, ...]]]] = []
            for replacements, anchors in pending:
                found = self._statement_for(replacements, anchors)
                if found is None:
                    return None
                start, old, statement, indents = found
                regions.append((start, start + len(old), (statement, indents), (replacements, anchors)))
            regions.sort(key=lambda region: region[0])
            merged = regions[:1]
            for region in regions[1:]:
                last = merged[-1]
                if region[0] < last[1]:  # one statement holds the other: render both fixes in the outer one
                    merged[-1] = (last[0], max(last[1], region[1]), last[2],
                                  ({**last[3][0], **region[3][0]}, last[3][1] + region[3][1]))
                else:
                    merged.append(region)
            if len(merged) == len(regions):
                break
            pending = [fixes for _, _, _, fixes in merged]
        done: List[Tuple[int, int, str]] = []
        for start, end, (statement, indents), (replacements, _) in regions:
            new = self._rendered(statement, indents, replacements)
            if new is None:
                return None
            done.append((start, end, new))
        return done

    # -- rendering one statement ---------------------------------------------------------------------------

    def _changed_statement(self, replacements: Mapping[cst.CSTNode, object],
                           anchors: Sequence[cst.CSTNode] = ()) -> Optional[Tuple[int, str, str]]:
        """(offset in the source, old text, new text) of the innermost statement that holds every replaced
        node and whose place in the source is known: its code occurs there once, or the index places it
        (``_anchored``); None where there is none."""
        found = self._statement_for(replacements, anchors)
        if found is None:
            return None
        start, old, statement, indents = found
        new = self._rendered(statement, indents, replacements)
        return None if new is None else (start, old, new)

    def _statement_for(self, replacements: Mapping[cst.CSTNode, object], anchors: Sequence[cst.CSTNode] = ()
                       ) -> Optional[Tuple[int, str, cst.CSTNode, List[str]]]:
        """(offset, old text, statement, indents) of ``_changed_statement``'s statement, not rendered yet.
        ``anchors``: the fixes' own nodes (the twins of their findings' calls or blocks)."""
        if self._locator is None:
            self._locator = StatementLocator(self.module, self.analysis.parents, self.source)
        chains = []
        for node in replacements:
            chain = [(statement, indents) for statement, indents, _ in self._locator._enclosing_statements(node)]
            if not chain:
                return None  # a node outside the walked tree
            chains.append(chain)
        shared = set.intersection(*({id(statement) for statement, _ in chain} for chain in chains))
        for statement, indents in chains[0]:
            if id(statement) not in shared:
                continue
            old, start = self._old_text(statement, indents)
            if start is None:
                start = self._anchored(statement, old, anchors)
            if start is None:
                continue  # not unique, and not placed by the index: an enclosing statement may be
            if start + len(old) > len(self.source):
                return None  # the last statement of a file without a final newline: LibCST adds one
            if _removed(statement, replacements):
                continue  # its block's rendering may change (an empty one gets `pass`): the enclosing one renders it
            return start, old, statement, indents
        return None

    def _old_text(self, statement: cst.CSTNode, indents: Sequence[str]) -> Tuple[str, Optional[int]]:
        """A statement's code and its only line start in the source (None: not unique), once per statement
        and text: every fix in a loop asks about the loop."""
        old = self._old_texts.get(statement)
        if old is None:
            offsets = self.analysis.statement_offsets if self.analysis.source == self.source else None
            place = offsets.get(statement) if offsets is not None else None
            if place is not None:  # the module's code is the source: the statement's code is its slice there
                old = self.source[place[0]:place[1]]
            else:
                old = "".join(generate_code(self.module, statement, indents).tokens)
            self._old_texts[statement] = old
        if old not in self._starts:
            self._starts[old] = only_line_start(self._locator.haystack, old) if old else None
        return old, self._starts[old]

    def _anchored(self, statement: cst.CSTNode, old: str, anchors: Sequence[cst.CSTNode]) -> Optional[int]:
        """Where ``statement`` (code ``old``, which occurs at several line starts) starts in the source, from
        the lines the index gives the fixes' nodes inside it (``FileAnalysis.anchor_lines``): the one
        occurrence whose lines hold them all; None where no anchor is inside, or where any anchor's line is
        held by no occurrence or by two (overlapping copies of one text: a string's lines, say)."""
        lines = {self.analysis.anchor_lines.get(anchor) for anchor in anchors
                 if anchor in self.analysis.anchor_lines and self.analysis.contains(statement, anchor)}
        if not lines or not old:
            return None
        starts = self._occurrences.get(old)
        if starts is None:
            starts = self._occurrences[old] = line_starts_of(self._locator.haystack, old)
        if self._line_offsets is None:
            self._line_offsets = [0] + [match.end() for match in _NEWLINE.finditer(self._locator.haystack)]
        height = len(_NEWLINE.findall(old))  # ``old`` is whole lines, each ending in a newline
        places = set()
        for line in lines:
            if not 0 < line <= len(self._line_offsets):
                return None
            at = bisect.bisect_right(starts, self._line_offsets[line - 1]) - 1  # the last to start on or above
            if at < 0 or not self._holds(starts[at], height, line):
                return None
            if at > 0 and self._holds(starts[at - 1], height, line):
                return None  # two copies hold the line (the ones above start higher still, so end higher)
            places.add(starts[at])
        return places.pop() if len(places) == 1 else None

    def _holds(self, start: int, height: int, line: int) -> bool:
        """Whether ``height`` lines from the line start ``start`` hold the 1-based ``line``."""
        assert self._line_offsets is not None
        return bisect.bisect_right(self._line_offsets, start) + height > line

    def _rendered(self, statement: cst.CSTNode, indents: Sequence[str],
                  replacements: Mapping[cst.CSTNode, object]) -> Optional[str]:
        """The code of ``statement`` with the replacements, as it stands in its block; None where it is
        removed (then its block, in the enclosing statement, renders the change)."""
        if statement in replacements:
            replacement = replacements[statement]
            if isinstance(replacement, cst.FlattenSentinel):
                nodes = list(replacement.nodes)
            elif isinstance(replacement, cst.CSTNode):
                nodes = [replacement]
            else:
                return None
            if not nodes:
                return None
        else:
            # entering only the nodes above a replaced one (LibCST rebuilds each node a transformer enters)
            result = statement.visit(Replacer(dict(replacements), nodes_above(self.analysis, replacements)))
            if not isinstance(result, cst.CSTNode):
                return None
            nodes = [result]
        return "".join("".join(generate_code(self.module, node, indents).tokens) for node in nodes)

    # -- the diff ------------------------------------------------------------------------------------------

    def _diff(self, offset: int, old: str, new: str) -> Tuple[Edit, ...]:
        """The edits that turn ``old`` at ``offset`` (a line start) into ``new``, in the source's lines."""
        line, column = line_col(self.source, offset)
        assert column == 1
        return tuple(Edit(e.line + line - 1, e.column, e.end_line + line - 1, e.end_column, e.content)
                     for e in text_edits(old, new))


def spliced_text(source: str, regions: Sequence[Tuple[int, int, str]]) -> str:
    """``source`` with each (start, end, new text) region, in order and apart, put in place."""
    parts, at = [], 0
    for start, end, new in regions:
        parts += [source[at:start], new]
        at = end
    parts.append(source[at:])
    return "".join(parts)


def text_edits(before: str, after: str) -> Tuple[Edit, ...]:
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
        edits.append(Edit(*line_col(before, start), *line_col(before, end), new[prefix:len(new) - suffix]))
    return tuple(edits)


def _in_file(edit: Edit, file_lines: Sequence[int]) -> Edit:
    """An edit of some of a file's lines (``file_lines``: the file's 0-based line of each) in the file's
    lines. An edit stays within one top-level statement, whose lines follow one another in the file too; a
    place at a line's start after the last line of a run (where an edit ends, or inserts at its end) is
    just after that line in the file."""
    def place(line: int, column: int, after: bool) -> Tuple[int, int]:
        if column == 1 and line > 1 and (after or line > len(file_lines)):
            return file_lines[line - 2] + 2, 1
        return file_lines[line - 1] + 1, column

    line, column = place(edit.line, edit.column, after=False)
    end_line, end_column = place(edit.end_line, edit.end_column, after=(edit.end_line, edit.end_column) != (
        edit.line, edit.column))
    return Edit(line, column, end_line, end_column, edit.content)


def line_col(text: str, offset: int) -> Tuple[int, int]:
    """1-based line and column of a character offset."""
    line_start = max(text.rfind("\n", 0, offset), text.rfind("\r", 0, offset)) + 1
    line = text.count("\n", 0, offset) + text.count("\r", 0, offset) - text.count("\r\n", 0, offset) + 1
    return line, offset - line_start + 1



def _removed(statement: cst.CSTNode, replacements: Mapping[cst.CSTNode, object]) -> bool:
    """The fix removes ``statement`` (``_rendered`` gives None for it)."""
    if statement not in replacements:
        return False
    replacement = replacements[statement]
    if isinstance(replacement, cst.FlattenSentinel):
        return not replacement.nodes
    return not isinstance(replacement, cst.CSTNode)
