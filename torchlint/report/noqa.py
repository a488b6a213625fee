"""``--add-noqa``: write ``# noqa: TLxxx`` on every line with a finding, to adopt torchlint on a large codebase
and fix the backlog later (as Ruff's ``--add-noqa``)."""

from __future__ import annotations

import ast
import warnings
from collections import defaultdict
from typing import Dict, List, Sequence, Set, Tuple

from torchlint.run.fileio import split_lines
from torchlint.rule import Diagnostic
from torchlint.report.suppression import LINE_NOQA, comments_by_line

SKIPPED_CODES = {"TL000", "TL900"}  # errors cannot be silenced; a noqa for TL900 would silence itself


def _lines_ending_in_strings(source: str) -> Set[int]:
    """Lines whose end lies inside a multi-line string: a comment there would be part of the string."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    inside: Set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Constant, ast.JoinedStr)) and node.end_lineno and node.end_lineno > node.lineno:
            inside.update(range(node.lineno, node.end_lineno))
    return inside


def add_noqa(source: str, diagnostics: Sequence[Diagnostic]) -> Tuple[str, int]:
    """The source with a ``# noqa`` for every finding (merged into an existing one), and how many codes
    were added. Lines that cannot carry a comment (inside a string, after a backslash) are skipped."""
    lines = split_lines(source)  # numbered as the findings are: only CR, LF and CRLF end a line
    in_string = _lines_ending_in_strings(source)
    wanted: Dict[int, List[str]] = defaultdict(list)
    for d in diagnostics:
        if d.code in SKIPPED_CODES or d.cell is not None:
            continue
        for line in dict.fromkeys((d.line, d.end_line)):
            text = lines[line - 1].rstrip("\r\n") if 0 < line <= len(lines) else None
            if text is not None and line not in in_string and not text.endswith("\\"):
                if d.code not in wanted[line]:
                    wanted[line].append(d.code)
                break
    comments = comments_by_line(source)
    added = 0
    for line, codes in wanted.items():
        raw = lines[line - 1]
        body = raw.rstrip("\r\n")
        ending = raw[len(body):]
        comment = comments.get(line, ("", False))[0]
        match = LINE_NOQA.search(comment) if comment and body.endswith(comment) else None
        if match and not match.group("codes"):
            continue  # a bare `# noqa` already silences everything
        if match:
            present = {c.upper() for c in match.group("codes").replace(",", " ").split()}
            new = [c for c in codes if c not in present]
            if not new:
                continue
            at = len(body) - len(comment) + match.end("codes")
            body = body[:at] + ", " + ", ".join(new) + body[at:]
        else:
            new = codes
            body = f"{body}  # noqa: {', '.join(sorted(new))}"
        lines[line - 1] = body + ending
        added += len(new)
    return "".join(lines), added
