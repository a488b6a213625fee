"""Carry a fix over to the original text, so that no byte outside the fixed lines changes.

LibCST regenerates a whole module when it writes a fix, and its round trip is not exact for every file: a
form feed in an indentation is dropped or repeated, a file with CR-only line endings loses its last ``\\r``.
``carry_fixes`` applies the lines the fixes changed (base -> fixed, where base is LibCST's round trip of the
original) to the original itself; a fix that touches a line the round trip altered cannot be carried.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from difflib import SequenceMatcher
from typing import Dict, Iterator, List, Optional, Set, Tuple

from torchlint.run.fileio import split_lines


def altered_lines(original: str, base: str) -> Set[int]:
    """The lines of ``original`` (1-based) that its round trip ``base`` does not keep: a fix there cannot be
    carried."""
    original_lines = split_lines(original)
    kept = set(_kept(original_lines, split_lines(base)).values())
    return {line + 1 for line in range(len(original_lines)) if line not in kept}


def _kept(original_lines: List[str], base_lines: List[str]) -> Dict[int, int]:
    """Base line -> the identical original line, for every line the round trip kept."""
    same: Dict[int, int] = {}
    for tag, i1, i2, j1, _ in _opcodes(base_lines, original_lines):
        if tag == "equal":
            same.update((i1 + k, j1 + k) for k in range(i2 - i1))
    return same


def carry_fixes(original: str, base: str, fixed: str, same: Optional[Dict[int, int]] = None) -> Optional[str]:
    """``original`` with the changes from ``base`` to ``fixed``, or None where a change touches a line that
    differs between ``original`` and ``base``. ``same``: base line -> original line, where the caller knows
    it (``base`` is some of ``original``'s lines); else the lines the two have in common."""
    if original == base:
        return fixed
    original_lines, base_lines, fixed_lines = split_lines(original), split_lines(base), split_lines(fixed)
    # ``same`` given: base is statements LibCST parsed alone. Lines inserted between two of them that are
    # apart in the original may end the first (a statement added after a loop) or begin the second (a
    # decorator): the diff cannot tell, and after the first would decorate whatever def follows it there.
    apart_statements = same is not None
    if same is None:
        same = _kept(original_lines, base_lines)
    replacements: Dict[int, tuple] = {}  # original line -> (how many original lines it replaces, new lines)
    for tag, i1, i2, j1, j2 in _opcodes(base_lines, fixed_lines):
        if tag == "equal":
            continue
        if i1 < i2:  # replaced or deleted base lines: all kept by the round trip, and adjacent in the original
            if any(i not in same for i in range(i1, i2)) or same[i2 - 1] - same[i1] != i2 - i1 - 1:
                return None
            if apart_statements and j2 - j1 > i2 - i1 and (_apart(same, i1 - 1, i1) or _apart(same, i2 - 1, i2)):
                return None  # lines added beside a statement apart from its neighbour: as an insertion
            at, count = same[i1], i2 - i1
        elif i1 > 0 and i1 - 1 in same and not _apart(same, i1 - 1, i1):
            at, count = same[i1 - 1] + 1, 0  # inserted after a kept line (and before the next, if kept)
        elif i1 in same and not (apart_statements and _apart(same, i1 - 1, i1)):
            at, count = same[i1], 0  # inserted before a kept line
        else:
            return None  # between two statements apart in the original: which one it goes with is unknown
        if at in replacements:
            return None
        replacements[at] = (count, fixed_lines[j1:j2])
    out: List[str] = []
    index = 0
    while index <= len(original_lines):
        if index in replacements:
            count, lines = replacements[index]
            out.extend(lines)
            if count:
                index += count
                continue
        if index < len(original_lines):
            out.append(original_lines[index])
        index += 1
    return "".join(out)


def _apart(same: Dict[int, int], first: int, second: int) -> bool:
    """Base lines ``first`` and ``second`` both stand for original lines, and those are not adjacent."""
    return first in same and second in same and same[second] != same[first] + 1


def _opcodes(a: List[str], b: List[str]) -> Iterator[Tuple[str, int, int, int, int]]:
    """``SequenceMatcher(None, a, b, autojunk=False).get_opcodes()``, matched piece by piece between the
    lines that occur once in each text, in order (a patience diff's anchors): fixes change a few lines of
    a long text, and one matcher over the whole is quadratic in its repeated lines (a 144 KB file's fix
    spent 3.6 s here)."""
    once_a = {line for line, count in Counter(a).items() if count == 1}
    once_b = {line: j for j, line in enumerate(b) if line in once_a}
    common = Counter(b)
    pairs = [(i, once_b[line]) for i, line in enumerate(a) if line in once_b and common[line] == 1]
    start_a = start_b = 0
    for i, j in (*_increasing(pairs), (len(a), len(b))):
        if i > start_a or j > start_b:
            matcher = SequenceMatcher(None, a[start_a:i], b[start_b:j], autojunk=False)
            for tag, i1, i2, j1, j2 in matcher.get_opcodes():
                yield tag, i1 + start_a, i2 + start_a, j1 + start_b, j2 + start_b
        if i < len(a):
            yield "equal", i, i + 1, j, j + 1
        start_a, start_b = i + 1, j + 1


def _increasing(pairs: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """The longest run of ``pairs`` (sorted by their first) whose seconds increase too."""
    tails: List[int] = []  # tails[k]: the second of the last pair of the best run of length k + 1
    ends: List[int] = []  # ... and that pair's position in ``pairs``
    before: List[int] = []
    for position, (_, j) in enumerate(pairs):
        k = bisect_left(tails, j)
        before.append(ends[k - 1] if k else -1)
        if k == len(tails):
            tails.append(j)
            ends.append(position)
        else:
            tails[k], ends[k] = j, position
    run: List[Tuple[int, int]] = []
    position = ends[-1] if ends else -1
    while position >= 0:
        run.append(pairs[position])
        position = before[position]
    return run[::-1]
