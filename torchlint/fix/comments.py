"""Comments and fixes: every fix keeps every comment of the code it replaces, exactly once.

A rule builds its fix, then asks ``loses_comment``: where the replacement would drop a comment (or repeat
one), the rule reports the finding without a fix and says why (``DROPS_COMMENT``). Comments are LibCST
``Comment`` nodes, so a ``#`` inside a string is no comment. ``without_comment`` gives a copy of whitespace
whose layout a fix reuses elsewhere (a separator between arguments) minus the comment it holds.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import TYPE_CHECKING, Dict, Iterable, Mapping, Tuple

import libcst as cst

if TYPE_CHECKING:
    from torchlint.rule import Replacement

DROPS_COMMENT = "not fixed automatically: it would drop a comment"


def comments_in(nodes: Iterable[cst.CSTNode]) -> "Counter[str]":
    """The text of every comment in ``nodes`` and below, with how often it occurs."""
    found: Counter = Counter()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is cst.Comment:
            found[node.value] += 1  # type: ignore[attr-defined]
            continue
        for name in _fields(kind):  # (LibCST's ``node.children`` runs a visitor: ten times slower)
            value = getattr(node, name)
            if type(value) is list or type(value) is tuple:
                stack.extend(item for item in value if isinstance(item, cst.CSTNode))
            elif isinstance(value, cst.CSTNode):
                stack.append(value)
    return found


_FIELDS: Dict[type, Tuple[str, ...]] = {}


def _fields(kind: type) -> Tuple[str, ...]:
    """Every dataclass field of a node type, whitespace included (where comments are)."""
    names = _FIELDS.get(kind)
    if names is None:
        names = _FIELDS[kind] = tuple(field.name for field in dataclasses.fields(kind))
    return names


def has_comment(node: cst.CSTNode) -> bool:
    return bool(comments_in([node]))


def loses_comment(replacements: "Mapping[cst.CSTNode, Replacement]") -> bool:
    """True where a comment of the replaced nodes is missing from their replacements, or repeated there.

    Counted over the whole fix, so a comment may move from one replaced node to another (a removed
    statement's comment kept above the next one). Comments the fix adds on its own are not counted.
    """
    before = comments_in(replacements)
    if not before:
        return False
    new: list = []
    for replacement in replacements.values():
        if isinstance(replacement, cst.FlattenSentinel):
            new.extend(replacement.nodes)
        elif isinstance(replacement, cst.CSTNode):
            new.append(replacement)
    after = comments_in(new)
    return any(after[text] != count for text, count in before.items())


def without_comment(whitespace: cst.BaseParenthesizableWhitespace) -> cst.BaseParenthesizableWhitespace:
    """``whitespace``'s line break and indent without its comments (and the comment-only lines)."""
    if isinstance(whitespace, cst.ParenthesizedWhitespace) and has_comment(whitespace):
        return whitespace.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[
            line for line in whitespace.empty_lines if line.comment is None])
    return whitespace
