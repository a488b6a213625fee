"""``# noqa`` comments: per line, and ``# torchlint: noqa`` on a line of its own for a whole file.

Only real comments count (found with ``tokenize``), never text inside strings or docstrings. This runs only
for files that have findings, and tokenizes only those whose text holds "noqa" somewhere, up to its last line.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Optional, Set, Tuple

from torchlint.run.fileio import split_lines

_CODES = r"(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*)"
LINE_NOQA = re.compile(r"#\s*noqa(?::\s*" + _CODES + r")?", re.IGNORECASE)
_FILE_NOQA = re.compile(r"^#\s*torchlint\s*:\s*noqa(?::\s*" + _CODES + r")?\s*$", re.IGNORECASE)

_ANY_NOQA = re.compile(r"noqa", re.IGNORECASE)  # in every comment either pattern matches


def _last_noqa_line(source: str) -> int:
    """The line of the last "noqa" in any case (as the tokenizer numbers lines), or 0 where there is none."""
    last = None
    for last in _ANY_NOQA.finditer(source):
        pass
    return 0 if last is None else source.count("\n", 0, last.start()) + 1


ALL = frozenset({"*"})


def _codes(match: "re.Match[str]") -> FrozenSet[str]:
    codes = match.group("codes")
    return frozenset(re.split(r"[\s,]+", codes.strip().upper())) if codes else ALL


def comments_by_line(source: str, last_line: Optional[int] = None) -> Dict[int, tuple]:
    """line -> (comment text, whether the comment is alone on its line, its column in characters); with
    ``last_line``, up to that line (the tokenizer stops there: most files have their `# noqa` comments at
    the top, on imports)."""
    comments: Dict[int, tuple] = {}
    lines = split_lines(source)  # as the tokenizer numbers them
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if last_line is not None and token.start[0] > last_line:
                break
            if token.type == tokenize.COMMENT:
                line, column = token.start
                alone = not lines[line - 1][:column].strip() if line <= len(lines) else True
                comments[line] = (token.string, alone, column)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # the comments found so far still count
    return comments


@dataclass
class Suppressions:
    file_codes: FrozenSet[str]
    line_codes: Dict[int, FrozenSet[str]]
    used: Set[Tuple[int, str]] = field(default_factory=set)  # (line, code) of line comments that silenced
    # line -> (column, text) of each comment with a line directive (TL900 judges them), placed as LibCST
    # places its ``Comment`` nodes (tests/test_suppression.py holds the two equal)
    directives: Dict[int, Tuple[int, str]] = field(default_factory=dict)

    @classmethod
    def parse(cls, source: str) -> "Suppressions":
        file_codes: FrozenSet[str] = frozenset()
        line_codes: Dict[int, FrozenSet[str]] = {}
        directives: Dict[int, Tuple[int, str]] = {}
        last_line = _last_noqa_line(source)
        if not last_line:  # no comment can suppress: skip tokenizing
            return cls(file_codes, line_codes)
        for line, (comment, alone, column) in comments_by_line(source, last_line).items():
            whole_file = _FILE_NOQA.match(comment) if alone else None
            if whole_file:
                file_codes = file_codes | _codes(whole_file)
                continue
            match = LINE_NOQA.search(comment)
            if match:
                line_codes[line] = _codes(match)
                directives[line] = (column, comment)
        return cls(file_codes, line_codes, directives=directives)

    def is_suppressed(self, code: str, line: int, end_line: int) -> bool:
        """A ``# noqa`` on the first or the last line of the finding silences it, as does a file-level one."""
        if "*" in self.file_codes or code in self.file_codes:
            return True
        silenced = False
        for candidate in {line, end_line}:
            codes = self.line_codes.get(candidate)
            if codes is not None and ("*" in codes or code in codes):
                self.used.add((candidate, code if code in codes else "*"))
                silenced = True
        return silenced
