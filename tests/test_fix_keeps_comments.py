"""Every fix keeps every comment: a property test over every flagged fixture that has a fix.

Comments (``# keep-me-<n>``) are inserted, by the tokens, where Python allows one in the statements a fix
touches (those holding a fixable finding or a line its ``.fixed.py`` snapshot changes): after an opening
bracket, after a comma inside brackets, on a line of their own before a closing bracket, at the end of the
statement's line and on the line before it. Each fixture gets one variant with up to two comments of each
kind (the first and last such place), so the test stays at a few seconds; a comment that would stop the
code compiling is left out. The real fixer (unsafe fixes included) must give code that compiles and holds
each inserted comment, and each of the fixture's own, exactly as often as before. A rule that cannot carry a
comment reports the finding without a fix and says why in its message (``torchlint.fix.comments.DROPS_COMMENT``,
or TL502's "it would move a comment").
"""

from __future__ import annotations

import ast
import difflib
import io
import tokenize
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import List, Sequence, Set, Tuple

import libcst as cst
import pytest

from fixture_support import expected_paths, fixture_rules, fixture_settings, flagged_fixtures
from torchlint.fix.comments import has_comment, loses_comment, without_comment
from torchlint.engine import fix_source

OPENING, CLOSING = "([{", ")]}"
KINDS = ("after-opening-bracket", "after-comma", "own-line-in-brackets", "end-of-line", "line-before")
PICKS_PER_KIND = 2  # comments of each kind in a fixture's variant: keeps the test at a few seconds


@dataclass(frozen=True)
class Site:
    kind: str
    offset: int  # where the comment goes in the source text
    indent: str  # the indentation of the statement it sits in

    def insert(self, source: str, text: str) -> str:
        if self.kind in ("after-opening-bracket", "after-comma"):
            piece = f"  {text}\n{self.indent}        "
        elif self.kind == "own-line-in-brackets":
            piece = f"\n{self.indent}    {text}\n{self.indent}"
        elif self.kind == "end-of-line":
            piece = f"  {text}"
        else:
            piece = f"{self.indent}{text}\n"
        return source[: self.offset] + piece + source[self.offset:]


def _line_starts(source: str) -> List[int]:
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def fixed_ranges(code: str, path: Path) -> List[Tuple[int, int]]:
    """The line ranges a fixture's fix touches: its fixable findings (from the ``.expected`` snapshot) and
    the lines its ``.fixed.py`` snapshot changes."""
    expected_file, fixed_file = expected_paths(path)
    ranges = [(int(line.split(":", 1)[0]),) * 2 for line in expected_file.read_text(encoding="utf-8").splitlines()
              if " fix] " in line]
    before = path.read_text(encoding="utf-8").splitlines()
    after = fixed_file.read_text(encoding="utf-8").splitlines()
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if tag != "equal":
            ranges.append((max(1, i1), max(i1 + 1, i2)))  # an insertion touches the lines around it
    return ranges


def touched_lines(source: str, ranges: Sequence[Tuple[int, int]]) -> Set[int]:
    """The lines of the statements that overlap ``ranges``: each simple statement whole, and the header of a
    compound one (``for ...:``), not its body."""
    lines: Set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.stmt):
            continue
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            first, last = node.lineno, max(node.lineno, body[0].lineno - 1)  # the header of a compound statement
            if hasattr(node, "decorator_list") and node.decorator_list:
                first = min(d.lineno for d in node.decorator_list)
        else:
            first, last = node.lineno, node.end_lineno or node.lineno
        if any(first <= hi and lo <= last for lo, hi in ranges):
            lines.update(range(first, last + 1))
    return lines


def comment_sites(source: str, lines: Set[int]) -> List[Site]:
    """Every place on ``lines`` where a comment may go, by the tokens (brackets are counted, strings are
    single tokens, so nothing lands inside a string)."""
    starts = _line_starts(source)
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    sites: List[Site] = []
    depth = 0
    indent = ""
    commented_lines = {t.start[0] for t in tokens if t.type == tokenize.COMMENT}
    statement_starts: Set[int] = set()
    at_statement_start = True
    for i, token in enumerate(tokens):
        row, col = token.start
        if token.type == tokenize.INDENT:
            indent = token.string
        elif token.type == tokenize.DEDENT:
            indent = " " * token.start[1]
        if token.type in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING):
            continue
        if at_statement_start and token.type != tokenize.ENDMARKER:
            at_statement_start = False
            if row in lines and row not in statement_starts:
                statement_starts.add(row)
                sites.append(Site("line-before", starts[row - 1], source[starts[row - 1]: starts[row - 1] + col]))
        if token.type == tokenize.NEWLINE:
            at_statement_start = True
            if row in lines and row not in commented_lines and token.string:
                sites.append(Site("end-of-line", starts[row - 1] + col, indent))
            continue
        if token.type != tokenize.OP:
            continue
        following = tokens[i + 1] if i + 1 < len(tokens) else None
        ends_line = following is None or following.type in (tokenize.NL, tokenize.COMMENT, tokenize.NEWLINE)
        end = starts[token.end[0] - 1] + token.end[1]
        if token.string in OPENING:
            depth += 1
            if row in lines and not ends_line:
                sites.append(Site("after-opening-bracket", end, indent))
        elif token.string in CLOSING:
            depth -= 1
            if row in lines:
                sites.append(Site("own-line-in-brackets", starts[row - 1] + col, indent))
        elif token.string == "," and depth > 0 and row in lines and not ends_line:
            sites.append(Site("after-comma", end, indent))
        elif token.string == ";" and depth == 0:
            at_statement_start = True
        elif token.string == ":" and depth == 0:
            at_statement_start = following is not None and following.type not in (tokenize.NEWLINE, tokenize.COMMENT)
    return sites


def _spread(n: int) -> List[int]:
    order: List[int] = []
    step = [0, n - 1]
    while len(order) < n:
        for index in step:
            if 0 <= index < n and index not in order:
                order.append(index)
        if len(order) < n:
            gaps = sorted(set(range(n)) - set(order))
            step = [gaps[len(gaps) // 2]]
    return order


def variant(code: str, path: Path, per_kind: int = PICKS_PER_KIND) -> Tuple[Tuple[Tuple[Site, str], ...], str]:
    """The fixture with up to ``per_kind`` comments of each kind (the first and last site, then the middle
    ones), as (the comments, the source with them). A comment that would stop the code compiling is
    left out."""
    source = path.read_text(encoding="utf-8")
    sites = comment_sites(source, touched_lines(source, fixed_ranges(code, path)))
    kept: List[Tuple[Site, str]] = []
    for kind in KINDS:
        options = [site for site in sites if site.kind == kind]
        for index in _spread(len(options))[:per_kind]:
            attempt = kept + [(options[index], f"# keep-me-{sites.index(options[index])}")]
            if _compiles(_insert_all(source, attempt)):
                kept = attempt
    return tuple(kept), _insert_all(source, kept)


def _insert_all(source: str, comments: Sequence[Tuple[Site, str]]) -> str:
    for site, text in sorted(comments, key=lambda item: item[0].offset, reverse=True):
        source = site.insert(source, text)
    return source


def _compiles(source: str) -> bool:
    try:
        compile(source, "variant.py", "exec", dont_inherit=True)
    except SyntaxError:
        return False
    return True


def comment_texts(source: str) -> "Counter[str]":
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return Counter(t.string for t in tokens if t.type == tokenize.COMMENT)


def _fixed_fixtures() -> List[Tuple[str, Path]]:
    """The flagged fixtures that have a fix (a ``.fixed.py`` snapshot)."""
    return [(code, path) for code, path in flagged_fixtures() if expected_paths(path)[1].exists()]


# Comments a rule's fix removes on purpose: TL900 drops unused `# noqa` codes.
_REMOVES_COMMENTS = {"TL900"}


@pytest.mark.parametrize("item", _fixed_fixtures(), ids=lambda item: f"{item[0]}/{item[1].name}")
def test_fix_keeps_every_comment(item):
    code, path = item
    comments, source = variant(code, path)
    assert comments, f"no place for a comment in the statements {code} fixes in {path.name}"
    outcome = fix_source(source, path.name, fixture_rules(source, code), fixture_settings(source, code), unsafe=True)
    assert not outcome.errors, [e.message for e in outcome.errors]
    compile(outcome.source, f"{path.name} fixed", "exec", dont_inherit=True)
    kept = comment_texts(outcome.source)
    for site, text in comments:
        what = "lost" if not kept[text] else "repeated" if kept[text] > 1 else "kept"
        assert what == "kept", f"{code}'s fix {what} `{text}` ({site.kind}):\n{outcome.source}"
    if code not in _REMOVES_COMMENTS:  # the fixture's own comments too
        lost = comment_texts(source) - kept
        assert not lost, f"{code}'s fix lost {sorted(lost)}:\n{outcome.source}"
    # A finding that lost its fix to a comment says so (the snapshot holds the findings that never had one).
    unfixed = {line.split(" ", 2)[2] for line in expected_paths(path)[0].read_text(encoding="utf-8").splitlines()
               if " fix] " not in line}
    for d in outcome.remaining:
        if d.fix is None and d.message not in unfixed:
            assert "comment" in d.message, f"{code} gave up a fix without saying why: {d.message}"


def test_every_kind_of_place_is_tried():
    """The generator reaches every kind of place somewhere (a regression in it would quietly test less)."""
    kinds = {site.kind for code, path in _fixed_fixtures() for site, _ in variant(code, path)[0]}
    assert kinds == set(KINDS)


def test_comment_helpers_see_real_comments_only():
    call = cst.parse_expression('f(a, "# not a comment")')
    assert not has_comment(call)
    noted = cst.parse_expression("f(a,  # note\n  b)")
    assert has_comment(noted)
    assert loses_comment({noted: noted.with_changes(args=noted.args[1:])})  # `f(b)`
    assert not loses_comment({noted: noted.with_changes(func=cst.Name("g"))})
    twice = cst.FlattenSentinel([cst.Expr(noted), cst.Expr(noted)])
    assert loses_comment({noted: twice})  # repeated is not kept
    separator = noted.args[0].comma.whitespace_after
    assert not has_comment(without_comment(separator)) and "\n" in cst.Module([]).code_for_node(without_comment(separator))
