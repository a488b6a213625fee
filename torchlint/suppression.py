"""``# noqa`` comments: per line, and ``# torchlint: noqa`` for a whole file."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Optional

_CODES = r"(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*)"
_LINE_NOQA = re.compile(r"#\s*noqa(?::\s*" + _CODES + r")?", re.IGNORECASE)
_FILE_NOQA = re.compile(r"^\s*#\s*torchlint\s*:\s*noqa(?::\s*" + _CODES + r")?\s*$", re.IGNORECASE | re.MULTILINE)

ALL = frozenset({"*"})


def _codes(match: "re.Match[str]") -> FrozenSet[str]:
    codes = match.group("codes")
    return frozenset(re.split(r"[\s,]+", codes.strip().upper())) if codes else ALL


@dataclass
class Suppressions:
    file_codes: FrozenSet[str]
    lines: List[str]
    _line_cache: Dict[int, Optional[FrozenSet[str]]]

    @classmethod
    def parse(cls, source: str) -> "Suppressions":
        file_codes: FrozenSet[str] = frozenset()
        for match in _FILE_NOQA.finditer(source):
            file_codes = file_codes | _codes(match)
        return cls(file_codes, source.splitlines(), {})

    def _line_codes(self, line: int) -> Optional[FrozenSet[str]]:
        if line not in self._line_cache:
            text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
            match = _LINE_NOQA.search(text) if "#" in text else None
            self._line_cache[line] = _codes(match) if match else None
        return self._line_cache[line]

    def is_suppressed(self, code: str, line: int, end_line: int) -> bool:
        """A ``# noqa`` on the first or the last line of the finding silences it, as does a file-level one."""
        if "*" in self.file_codes or code in self.file_codes:
            return True
        for candidate in {line, end_line}:
            codes = self._line_codes(candidate)
            if codes is not None and ("*" in codes or code in codes):
                return True
        return False
