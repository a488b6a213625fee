"""Suppressions.parse tokenizes only texts that can hold a ``noqa`` comment, and finds the same ones."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from torchlint.report import suppression
from torchlint.config import Settings
from torchlint.engine import lint_source, needs_libcst
from torchlint.registry import all_rules, rules_by_code
from torchlint.rule import Applicability
from torchlint.report.suppression import Suppressions

ALL = Settings(select=("ALL",))


def test_a_text_without_noqa_is_not_tokenized(monkeypatch):
    def fail(source):
        raise AssertionError("tokenized")

    monkeypatch.setattr(suppression, "comments_by_line", fail)
    s = Suppressions.parse("import torch  # no suppression here\nx = 'no qa'\n")
    assert not s.file_codes and not s.line_codes
    assert not s.is_suppressed("TL101", 1, 2)


@pytest.mark.parametrize("comment", ["# NOQA", "# NoQa: TL101", "#noqa:tl101", "# torchlint: NOQA"])
def test_noqa_in_any_case_is_still_found(comment):
    s = Suppressions.parse(f"x = 1\n{'y = 2  ' if 'torchlint' not in comment else ''}{comment}\n")
    assert s.is_suppressed("TL101", 2, 2)


def test_tokenizing_stops_after_the_last_noqa_line(monkeypatch):
    source = "import os  # noqa: F401\n" + "x = 1\n" * 50 + "s = '''\n# noqa in a string\n'''\n"
    seen = []
    real = suppression.tokenize.generate_tokens

    def counting(readline):
        for token in real(readline):
            seen.append(token.start[0])
            yield token

    monkeypatch.setattr(suppression.tokenize, "generate_tokens", counting)
    s = Suppressions.parse(source)
    assert s.line_codes == {1: frozenset({"F401"})}  # the one in the string is no comment
    assert max(seen) == 54  # the tokenizer stopped at the token after the last "noqa" line (the string's)


@pytest.mark.parametrize("source", [
    "a = 1  # noqa\nb = '# noqa'\nc = 3  # NOQA: TL101\n",
    "x = '''\n# noqa: TL101\n'''  # noqa: TL102\n# torchlint: noqa: TL103\n",
    "a = 1\r\nb = 2  # noqa: TL104\r\nc = 3\r\n",
    "def f():\n    return (1,  # noqa: TL105\n            2)\n",
])
def test_the_comments_found_equal_a_whole_tokenization(source):
    last_line = suppression._last_noqa_line(source)
    full = {line: c for line, c in suppression.comments_by_line(source).items() if line <= last_line}
    assert suppression.comments_by_line(source, last_line) == full
    assert all(line <= last_line for line in suppression.comments_by_line(source, last_line))


# A line holding only a `\` leaves no trace in LibCST's tree: comments placed from the module's code are a
# line short below it, so TL900 would call a used noqa unused and its fix would let the finding be fixed.
CONTINUATION_ONLY = (
    "import torch\nmodel = torch.nn.Linear(4, 2)\n\\\n"
    "slow = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)  # noqa: TL501\n"
)


def test_tl900_is_silent_where_a_line_holds_only_a_continuation():
    from torchlint.config import Settings
    from torchlint.engine import fix_source, lint_source
    from torchlint.registry import all_rules

    rules, settings = [rule() for rule in all_rules()], Settings(select=("ALL",))
    assert lint_source(CONTINUATION_ONLY, "m.py", rules, settings).diagnostics == []
    assert fix_source(CONTINUATION_ONLY, "m.py", rules, settings, unsafe=True).source == CONTINUATION_ONLY
    unused = CONTINUATION_ONLY.replace("foreach=False", "foreach=True")  # the noqa silences nothing here...
    assert lint_source(unused, "m.py", rules, settings).diagnostics == []  # ...but the rule cannot tell
    plain = unused.replace("\\\n", "")
    assert [d.code for d in lint_source(plain, "m.py", rules, settings).diagnostics] == ["TL900"]


# An unused `# noqa: TL101 <reason>` under the default rules: the fix keeps the reason as a comment (it used
# to build a comment without `#`, an internal error); the project's own TL900 fixture is the first case.
@pytest.mark.parametrize("source, fixed_line", [
    (open(Path(__file__).parent.parent / "fixtures/TL900/clean_used_or_foreign.py").read(),
     "z = 3  # (TL101 is not selected here: it cannot be judged)"),
    ("import torch\nx = 1  # noqa: TL101 because reasons\n", "x = 1  # because reasons"),
    ("import torch\nx = 1  # noqa:TL101,TL102\n", "x = 1"),
])
def test_tl900_fix_keeps_the_reason_after_an_unused_code(source, fixed_line):
    from torchlint.config import Settings
    from torchlint.engine import fix_source, lint_source
    from torchlint.registry import all_rules

    rules, settings = [rule() for rule in all_rules()], Settings()
    codes = [d.code for d in lint_source(source, "m.py", rules, settings).diagnostics]
    assert "TL000" not in codes and "TL900" in codes
    fixed = fix_source(source, "m.py", rules, settings, unsafe=False).source
    assert fixed_line in fixed.splitlines()
    assert fix_source(fixed, "m.py", rules, settings, unsafe=False).source == fixed


# TL900 places its findings where the suppression scan (tokenize) found each comment, and its fix finds the
# comment in LibCST's tree by that place: the two must agree on every comment's line and columns.
_COMMENT_CASES = [
    "x = 1  # noqa: TL101   \r\ny = [1,  # noqa: TL202\n  2]\n",
    "def f():\n    return {'a': 1,  # noqa: TL501\n            'b': 2}  # noqa: TL101\n# noqa: TL999\n",
    "s = 'é'  # noqa: TL301, E501\nt = '''\n# noqa: TL101 in a string\n'''  # noqa: TL104\n",
    "if x:\n\tpass  # noqa: TL201\n\x0c# noqa: TL202\n",
    "# noqa: TL900 in the header\n\nimport torch\n",
]


def _libcst_comment_places(source):
    import libcst as cst

    from torchlint.fix.positions import node_spans

    module = cst.parse_module(source)
    found = []

    class Comments(cst.CSTVisitor):
        def visit_Comment(self, node):
            found.append(node)

    module.visit(Comments())
    spans = node_spans(module, found)
    return {(spans[c][0], spans[c][1], spans[c][3], c.value) for c in found}


@pytest.mark.parametrize("source", _COMMENT_CASES + [
    path.read_text(encoding="utf-8") for path in sorted((Path(__file__).parent.parent / "fixtures").rglob("*.py"))
    if "noqa" in path.read_text(encoding="utf-8").lower()])
def test_the_directives_are_placed_as_libcst_places_its_comments(source):
    found = Suppressions.parse(source).directives
    ours = {(line, column, column + len(text), text) for line, (column, text) in found.items()}
    assert ours and ours == {place for place in _libcst_comment_places(source)
                             if suppression.LINE_NOQA.search(place[3])}


def test_tl900_needs_no_libcst_parse_to_judge_a_file():
    tl900 = rules_by_code()["TL900"]()
    source = "import torch\nslow = torch.optim.SGD([], lr=0.1, foreach=False)  # noqa: TL501\n"
    assert tl900.may_fire(source, ALL) and not needs_libcst(source)


def test_tl900_still_judges_a_file_cpython_cannot_parse():
    # Syntax newer than this interpreter's (a 3.12 type parameter) that LibCST parses: there is no index,
    # and TL900 reads only the text and the suppressions.
    source = "import torch\n\ndef first[T](items):  # noqa: TL101\n    return items[0]\n"
    try:
        ast.parse(source)
        pytest.skip("this interpreter parses the syntax")
    except SyntaxError:
        pass
    [finding] = lint_source(source, "m.py", [rule() for rule in all_rules()], ALL).diagnostics
    assert (finding.code, finding.line, finding.column, finding.fix) == ("TL900", 3, 23, Applicability.SAFE)
