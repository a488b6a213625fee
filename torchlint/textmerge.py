"""Carry a fix over to the original text, so that no byte outside the fixed lines changes.

LibCST regenerates a whole module when it writes a fix, and its round trip is not exact for every file: a
form feed in an indentation is dropped or repeated, a file with CR-only line endings loses its last ``\\r``.
``carry_fixes`` applies the lines the fixes changed (base -> fixed, where base is LibCST's round trip of the
original) to the original itself; a fix that touches a line the round trip altered cannot be carried.
"""

from __future__ import annotations

from difflib import SequenceMatcher
from typing import Dict, List, Optional, Set

from torchlint.fileio import split_lines


def altered_lines(original: str, base: str) -> Set[int]:
    """The lines of ``original`` (1-based) that its round trip ``base`` does not keep: a fix there cannot be
    carried."""
    original_lines = split_lines(original)
    kept = set(_kept(original_lines, split_lines(base)).values())
    return {line + 1 for line in range(len(original_lines)) if line not in kept}


def _kept(original_lines: List[str], base_lines: List[str]) -> Dict[int, int]:
    """Base line -> the identical original line, for every line the round trip kept."""
    same: Dict[int, int] = {}
    for tag, i1, i2, j1, _ in SequenceMatcher(None, base_lines, original_lines, autojunk=False).get_opcodes():
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
    # Lines inserted between two base lines that are apart in the original (``same`` given: between two
    # statements LibCST parsed alone) go after the first, as a statement inserted after another would.
    after_first = same is not None
    if same is None:
        same = _kept(original_lines, base_lines)
    replacements: Dict[int, tuple] = {}  # original line -> (how many original lines it replaces, new lines)
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, base_lines, fixed_lines, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if i1 < i2:  # replaced or deleted base lines: all kept by the round trip, and adjacent in the original
            if any(i not in same for i in range(i1, i2)) or same[i2 - 1] - same[i1] != i2 - i1 - 1:
                return None
            at, count = same[i1], i2 - i1
        elif i1 > 0 and i1 - 1 in same and (after_first or i1 not in same):  # inserted after a kept line
            at, count = same[i1 - 1] + 1, 0
        elif i1 in same:  # inserted before a kept line
            at, count = same[i1], 0
        else:
            return None
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
