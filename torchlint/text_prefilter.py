"""Fast exact forms of the regex tests that text stages make on whole files.

Python's ``re`` finds a pattern that starts with a literal (``range\\s*\\(``) with a fast scan for that
literal, but a pattern that starts with ``\\b``, a class or an alternation is tried at every position of the
text: several times slower on a 200 KB file. So text stages search for the literal-prefix pattern and test
the word boundary by hand (``search_word``), and put a plain ``in`` test of a word every match must contain
before a regex whose matches are rare.
"""

from __future__ import annotations

import re
from typing import Iterator, Optional


def is_word_char(char: str) -> bool:
    """What ``re``'s ``\\w`` matches in a str pattern (checked for every code point)."""
    return char.isalnum() or char == "_"


def search_word(pattern: "re.Pattern[str]", text: str, pos: int = 0) -> Optional["re.Match[str]"]:
    """``re.search(r"\\b" + pattern, text, pos)`` for a pattern that starts with a word character: the
    first match of ``pattern`` not preceded by a word character."""
    match = pattern.search(text, pos)
    while match is not None:
        start = match.start()
        if start == 0 or not is_word_char(text[start - 1]):
            return match
        match = pattern.search(text, start + 1)
    return None


def finditer_word(pattern: "re.Pattern[str]", text: str) -> Iterator["re.Match[str]"]:
    """``re.finditer(r"\\b" + pattern, text)`` for a pattern that starts with a word character and never
    matches the empty string."""
    match = search_word(pattern, text)
    while match is not None:
        yield match
        match = search_word(pattern, text, match.end())
