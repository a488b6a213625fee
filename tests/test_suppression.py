"""Suppressions.parse tokenizes only texts that can hold a ``noqa`` comment, and finds the same ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchlint import suppression
from torchlint.suppression import Suppressions


def test_a_text_without_noqa_is_not_tokenized(monkeypatch):
    def fail(source):
        raise AssertionError("tokenized")

    monkeypatch.setattr(suppression, "_comments", fail)
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
    full = {line: c for line, c in suppression._comments(source).items() if line <= last_line}
    assert suppression._comments(source, last_line) == full
    assert all(line <= last_line for line in suppression._comments(source, last_line))


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
