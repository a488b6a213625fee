"""The text edits of one report's fix, at the cost of the statement it changes rather than the file.

The edits a report carries (JSON, SARIF, full output) are defined as the line diff (``engine._text_edits``)
between the source and the whole module rendered with that one fix. Rendering the module costs a transform
of the whole tree and code generation of every statement, and the diff compares every line: once per report.

Here only the statement that holds the fix's replacements is rendered, before and after (with the
indentation of its block, as ``positions.py`` locates nodes), and its old text is found at exactly one line
start of the source. The module with the fix is then the source with that text swapped for the new one.

The diff itself must equal the whole-file diff, and ``difflib`` does not give the same answer on a part of
a file as on all of it: it takes the longest matching run of lines first, so where a file repeats itself, a
run elsewhere can beat the lines around the change. ``_diff_blocks`` follows difflib's own recursion and
decides each step without scanning the file, where it can prove which run is longest: the unchanged prefix
run and the suffix run are the only candidates once the file is shown (by a few substring searches, in C)
to hold no repeated run of lines long enough to beat them (a run on any other alignment is made of a
repeat of the source, the changed lines and another repeat). Subproblems of about a statement's size are
handed to ``difflib`` itself. Where no step can be proven, difflib runs over the whole spliced text (still
no code generation); where the statement cannot be rendered alone (the fix adds imports, a statement is
removed at module level, the text is not unique, LibCST does not reproduce the source byte for byte), the
whole-module path runs as before. Both give exactly the edits of the whole-module path (tested on every
fixture).
"""

from __future__ import annotations

import bisect
import itertools
import os
from typing import TYPE_CHECKING, List, Mapping, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint.engine import _line_col, _text_edits
from torchlint.fixer import FixApplier, _Replacer
from torchlint.positions import _generate, _only_line_start, _reproduced_exactly, _StatementLocator
from torchlint.rule import Edit, Report

if TYPE_CHECKING:
    from torchlint.analysis import FileAnalysis

# A subproblem of the diff at most this many lines (both sides together) beyond the changed statement's
# own lines goes to difflib directly: it costs about the statement.
_DIRECT_DIFF_MARGIN = 100
# Proving that no long repeat exists searches the source once per window; past this many windows the
# whole-text diff is cheaper.
_MAX_WINDOWS = 64

Block = Tuple[int, int, int]  # (a index, b index, length), as difflib's matching blocks


class _Undecided(Exception):
    """The longest matching run of a diff step could not be proven without the whole-text diff."""


class FixEdits:
    """Edits of the reports of one parsed module; build once per file, then ``edits(report)`` per report."""

    def __init__(self, module: cst.Module, analysis: "FileAnalysis", path: str, source: str) -> None:
        self.module, self.analysis, self.path, self.source = module, analysis, path, source
        self.exact = _reproduced_exactly(module, source)
        self._locator: Optional[_StatementLocator] = None
        self._lines: Optional[List[str]] = None
        self._starts: List[int] = []
        self._repeats: Optional[_RepeatBound] = None

    def edits(self, report: Report) -> Tuple[Edit, ...]:
        assert report.fix is not None
        local = self._local_edits(report)
        if local is not None:
            return local
        return _text_edits(self.source, FixApplier(self.module, self.analysis, self.path).render([report]))

    def _local_edits(self, report: Report) -> Optional[Tuple[Edit, ...]]:
        fix = report.fix
        assert fix is not None
        if fix.imports or not self.exact or not fix.replacements:
            return None  # added imports go to the module's head; an inexact round trip diffs more than the fix
        region = self._changed_statement(fix.replacements)
        if region is None:
            return None
        offset, old, new = region
        if old == new:
            return ()
        return self._diff(offset, old, new)

    # -- rendering one statement ---------------------------------------------------------------------------

    def _changed_statement(self, replacements: Mapping[cst.CSTNode, object]) -> Optional[Tuple[int, str, str]]:
        """(offset in the source, old text, new text) of the innermost statement that holds every replaced
        node and whose code occurs once in the source; None where there is none."""
        if self._locator is None:
            self._locator = _StatementLocator(self.module, self.analysis.parents, self.source)
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
            old = "".join(_generate(self.module, statement, indents).tokens)
            start = _only_line_start(self._locator.haystack, old) if old else None
            if start is None:
                continue  # not unique: an enclosing statement may be
            if start + len(old) > len(self.source):
                return None  # the last statement of a file without a final newline: LibCST adds one
            new = self._rendered(statement, indents, replacements)
            if new is None:
                continue  # the statement is removed: its block's rendering may change (an empty one gets `pass`)
            return start, old, new
        return None

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
            result = statement.visit(_Replacer(dict(replacements)))
            if not isinstance(result, cst.CSTNode):
                return None
            nodes = [result]
        return "".join("".join(_generate(self.module, node, indents).tokens) for node in nodes)

    # -- the diff ------------------------------------------------------------------------------------------

    def _line_table(self) -> Tuple[List[str], List[int]]:
        if self._lines is None:
            self._lines = self.source.splitlines(keepends=True)  # as engine._text_edits splits them
            self._starts = list(itertools.accumulate(map(len, self._lines), initial=0))
            self._repeats = _RepeatBound(self.source, self._starts)
        return self._lines, self._starts

    def _diff(self, offset: int, old: str, new: str) -> Optional[Tuple[Edit, ...]]:
        """``_text_edits(source, source with old at offset replaced by new)``."""
        if not old.endswith("\n") or not new.endswith("\n"):
            return None  # the splice would not fall on line boundaries
        a, starts = self._line_table()
        first = bisect.bisect_left(starts, offset)
        last = bisect.bisect_left(starts, offset + len(old))
        if last >= len(starts) or starts[first] != offset or starts[last] != offset + len(old):
            return None
        new_lines = new.splitlines(keepends=True)
        b = a[:first] + new_lines + a[last:]
        assert self._repeats is not None
        try:
            blocks = _diff_blocks(a, b, first, last - first, len(new_lines), self._repeats)
        except _Undecided:
            import difflib

            blocks = difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
        return _edits_from_blocks(self.source, a, b, starts, blocks)


def _diff_blocks(a: List[str], b: List[str], first: int, old_count: int, new_count: int,
                 repeats: "_RepeatBound") -> List[Block]:
    """difflib's matching blocks of ``a`` and ``b`` (``autojunk=False``), where ``b`` is ``a`` with lines
    ``first:first + old_count`` replaced by ``new_count`` lines; raises ``_Undecided`` where a step cannot be
    proven without scanning every line pair."""
    n, m = len(a), len(b)
    shift = m - n
    # The run on the main diagonal from the start (the unchanged head, a[:head] == b[:head]) and the run on
    # the end diagonal to the end (a[n - tail:] == b[m - tail:]); each may reach into the changed lines.
    head = first
    while head < min(n, m) and a[head] == b[head]:
        head += 1
    tail = n - first - old_count
    while tail < min(n, m) and a[n - 1 - tail] == b[m - 1 - tail]:
        tail += 1
    direct_limit = 2 * (old_count + new_count) + _DIRECT_DIFF_MARGIN
    found: List[Block] = []

    def solve(alo: int, ahi: int, blo: int, bhi: int) -> None:
        if alo >= ahi or blo >= bhi:
            return
        if (ahi - alo) + (bhi - blo) <= direct_limit:
            import difflib  # about 10 ms to import: only for output that shows edits

            matcher = difflib.SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False)
            found.extend((alo + i, blo + j, k) for i, j, k in matcher.get_matching_blocks() if k)
            return
        # difflib takes the longest run (then the first in a, then in b). In this range, the head and tail
        # runs are cut to it; every other run is a repeat of a, at most new_count changed lines, and a
        # repeat of a again, so it is shorter than a candidate that beats twice the longest repeat plus those.
        candidates = []
        low, high = max(alo, blo), min(ahi, bhi, head)
        if low < high:
            candidates.append((high - low, low, low))
        low, high = max(alo, blo - shift, n - tail), min(ahi, bhi - shift, n)
        if low < high:
            candidates.append((high - low, low, low + shift))
        if not candidates:
            raise _Undecided
        size, i, j = min(candidates, key=lambda c: (-c[0], c[1], c[2]))
        if not repeats.shorter_than((size - new_count + 1) // 2):
            raise _Undecided
        found.append((i, j, size))
        solve(alo, i, blo, j)
        solve(i + size, ahi, j + size, bhi)

    solve(0, n, 0, m)
    found.sort()
    return found


class _RepeatBound:
    """Proofs that the source's lines hold no run repeated elsewhere (occurrences may overlap) of a given
    length: any run of ``2h - 1`` lines holds an aligned window of ``h`` lines (starting at a multiple of
    ``h``), so it is enough that no such window's text occurs anywhere else in the source."""

    def __init__(self, source: str, starts: List[int]) -> None:
        self.source = source
        self.starts = starts  # where each line starts, and the source's length
        self.proven_below: Optional[int] = None  # every repeated run is shorter than this
        self.failed: Set[int] = set()  # window lengths whose proof failed

    def shorter_than(self, length: int) -> bool:
        """Whether every repeated run of lines is proven shorter than ``length``."""
        if length < 1:
            return False
        if self.proven_below is not None and self.proven_below <= length:
            return True
        window = (length + 1) // 2  # a run of 2 * window - 1 <= length lines holds an aligned window
        if window in self.failed:
            return False
        starts = self.starts
        count = len(starts) - 1
        if count // window > _MAX_WINDOWS:
            self.failed.add(window)
            return False
        for begin in range(0, count - window + 1, window):
            text = self.source[starts[begin]:starts[begin + window]]
            at = self.source.find(text)
            if at == starts[begin]:
                at = self.source.find(text, at + 1)
            if at >= 0:  # a repeat, or text that merely occurs elsewhere: either way, no proof
                self.failed.add(window)
                return False
        bound = 2 * window - 1
        self.proven_below = bound if self.proven_below is None else min(self.proven_below, bound)
        return True


def _edits_from_blocks(source: str, a: List[str], b: List[str], starts: List[int],
                       blocks: Sequence[Block]) -> Tuple[Edit, ...]:
    """The edits ``engine._text_edits`` makes of these matching blocks (the same trimming, the same
    positions): one per gap between consecutive blocks."""
    edits = []
    i = j = 0
    for ai, bj, size in [*sorted(blocks), (len(a), len(b), 0)]:
        if i < ai or j < bj:
            old, new = "".join(a[i:ai]), "".join(b[j:bj])
            prefix = len(os.path.commonprefix([old, new]))
            suffix = len(os.path.commonprefix([old[prefix:][::-1], new[prefix:][::-1]]))
            start, end = starts[i] + prefix, starts[ai] - suffix
            edits.append(Edit(*_line_col(source, start), *_line_col(source, end), new[prefix:len(new) - suffix]))
        i, j = ai + size, bj + size
    return tuple(edits)
