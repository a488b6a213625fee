"""The text stages read tokens, not spellings: Python lets spaces, `\\` continuations and, inside brackets,
line breaks and comments stand between any two tokens, and parentheses around any expression. A file spelled
so must reach every rule whose check reports in it (a cheap stage may say "maybe" too often, never "nothing
here" where there is a finding).

Each flagged fixture is respelled in two fixed ways and every rule's check is run on the respelled file
without the stages: where it reports, the text and ast stages must keep the rule. Then hand-written snippets
pin each spelling a text stage once missed."""

from __future__ import annotations

import io
import textwrap
import tokenize
from dataclasses import replace

import libcst as cst
import pytest

from fixture_support import fixture_settings, flagged_fixtures
from torchlint.config import Settings
from torchlint.engine import reports_without_stages, rules_that_may_fire
from torchlint.registry import all_rules, get_rule

_LAYOUT = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER,
           tokenize.ENCODING}


def _insert_before_tokens(source: str, where) -> str:
    """``source`` with ``where(token, previous, depth)`` (a string or None) inserted before each token;
    ``depth`` is the bracket depth the token stands in."""
    inserts = []
    depth, previous = 0, None
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in _LAYOUT:
            if token.type == tokenize.NEWLINE:
                previous = None
            continue
        if token.type == tokenize.OP and token.string in ")]}":
            depth -= 1
        if previous is not None:
            text = where(token, previous, depth)
            if text:
                inserts.append((token.start, text))
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
        previous = token
    lines = source.splitlines(keepends=True)
    for (row, column), text in sorted(inserts, reverse=True):
        lines[row - 1] = lines[row - 1][:column] + text + lines[row - 1][column:]
    return "".join(lines)


class _Parenthesise(cst.CSTTransformer):
    """Parentheses around every receiver (`(x).item()`), assigned value, argument and callee (`(f)(x)`)."""

    def visit_Import(self, node: cst.Import) -> bool:
        return False  # dotted module names are no expressions

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    @staticmethod
    def _wrap(node):
        return node.with_changes(lpar=[cst.LeftParen(), *node.lpar], rpar=[*node.rpar, cst.RightParen()])

    def leave_Attribute(self, original, node):
        return node.with_changes(value=self._wrap(node.value))

    def leave_Assign(self, original, node):
        return node.with_changes(value=self._wrap(node.value))

    def leave_Arg(self, original, node):
        return node if node.star else node.with_changes(value=self._wrap(node.value))

    def leave_Call(self, original, node):
        return node.with_changes(func=self._wrap(node.func))


def spaced(source: str) -> str:
    """Spaces around every dot and before every `(`; parentheses around receivers, values and callees."""
    source = cst.parse_module(source).visit(_Parenthesise()).code

    def space(token, previous, depth):
        dot_or_call = token.type == tokenize.OP and token.string in (".", "(")
        return " " if dot_or_call or (previous.type == tokenize.OP and previous.string == ".") else None
    return _insert_before_tokens(source, space)


def broken(source: str) -> str:
    """A comment and a line break before every token inside brackets, a `\\` continuation before every
    other token of a line."""
    def split(token, previous, depth):
        if depth > 0:
            return "  # note\n        "
        same_line = previous.start[0] == token.start[0]
        return " \\\n    " if same_line and tokenize.STRING not in (token.type, previous.type) else None
    return _insert_before_tokens(source, split)


CHECKED_RULES = [rule() for rule in all_rules() if not rule.runs_after_suppression]


def _assert_stages_keep_every_reporting_rule(source: str, settings: Settings) -> int:
    reporting = 0
    for rule in CHECKED_RULES:
        crashes: list = []
        if reports_without_stages([rule], source, replace(settings, select=(rule.code,)), crashes):
            reporting += 1
            assert rules_that_may_fire([rule], source, settings), f"{rule.code}'s stages skip:\n{source}"
        assert not crashes
    return reporting


@pytest.mark.parametrize("respell", [spaced, broken], ids=["spaced", "broken"])
@pytest.mark.parametrize("code,path", flagged_fixtures(), ids=lambda v: getattr(v, "name", v))
def test_respelled_fixture_reaches_every_rule_that_reports(code, path, respell):
    source = respell(path.read_text(encoding="utf-8"))
    compile(source, str(path), "exec")  # still Python
    _assert_stages_keep_every_reporting_rule(source, fixture_settings(source, code))


def test_respelling_keeps_the_findings_of_a_plain_fixture():
    """The respelled files still hold findings (so the test above checks something): the fixture's own rule
    reports in each respelling of this one."""
    from fixture_support import FIXTURES

    source = (FIXTURES / "TL101" / "flagged_accumulate_loss.py").read_text(encoding="utf-8")
    for respell in (spaced, broken):
        assert _assert_stages_keep_every_reporting_rule(respell(source), fixture_settings(source, "TL101")) >= 1


# (rule, snippet) pairs: each is a spelling a text stage missed, in a file where the rule's check reports.
GAPS = [
    ("TL101", """\
        model.cuda()  # a GPU program: TL101 is silent in CPU-only ones
        for x, y in loader:
            loss = criterion(model(x), y)
            loss . backward ()
            optimizer.step()
            losses.append(loss .item ())
        """),
    ("TL101", """\
        model.cuda()  # a GPU program: TL101 is silent in CPU-only ones
        for x, y in loader:
            loss = criterion(model(x), y)
            (loss
             .backward())
            optimizer.step()
            print (loss)
        """),
    ("TL101", """\
        model.cuda()  # a GPU program: TL101 is silent in CPU-only ones
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            bar.set_postfix_str(F"{loss}")
        """),
    ("TL102", """\
        import torch
        from torch import zeros as blank
        def masks():
            return blank(8, 8).cuda()
        """),
    ("TL102", """\
        import torch
        def masks():
            return (torch.ones(8, 8)  # all visible
                    .cuda())
        """),
    ("TL103", """\
        import torch
        from torch.utils.data import DataLoader
        loader = DataLoader(ds, batch_size=32, pin_memory=True, num_workers=4)
        for x, y in loader:
            x = x . to (device)
            loss = model(x).sum()
            loss.backward()
            opt.step()
        """),
    ("TL104", """\
        import numpy as np
        import torch
        frame = torch.tensor \\
            (np.zeros((4, 4)))
        """),
    ("TL201", """\
        import torch
        for x in loader:
            for p in model.parameters():
                p.grad = (torch.zeros_like(p))
            model(x).sum().backward()
            optimizer.step()
        """),
    ("TL201", """\
        import torch
        for x in loader:
            for p in model.parameters():
                p . grad . zero_ ()
            model(x).sum().backward()
            optimizer.step()
        """),
    ("TL201", """\
        import torch
        for x in loader:
            optimizer.zero_grad(  # see reset() below
                set_to_none=False)
            model(x).sum().backward()
            optimizer.step()
        """),
    ("TL202", """\
        import torch

        def run(model, batch):
            model . eval ()
            return model(batch)
        """),
    ("TL403", """\
        import torch
        from torch.utils.data import DataLoader, Subset
        loader = DataLoader(Subset(ds, range(100)), 64, True, None, None, 4)
        for epoch in range(10):
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                opt.step()
        """),
    ("TL501", """\
        import torch
        def sgd_step(model, lr):
            ps = list(model.parameters())
            with torch.no_grad():
                for p in ps:
                    p.add_(p.grad, alpha=-lr)
        """),
    ("TL501", """\
        import torch
        def sgd_step(model, lr):
            with torch.no_grad():
                for p in (
                        model.parameters()):
                    p -= lr * p.grad
        """),
    ("TL501", """\
        import torch
        def sgd_step(model, lr):
            ws = model.parameters()
            chosen = list(ws)
            with torch.no_grad():
                for w in chosen:
                    w.sub_(lr * w.grad)
        """),
    ("TL501", """\
        import torch
        ws = list(net.parameters())

        def sgd_step(lr):
            with torch.no_grad():
                for w in ws:
                    w.sub_(lr * w.grad)
        """),
    ("TL501", """\
        import torch
        def sgd_step(PARAMS, lr):
            with torch.no_grad():
                for p in PARAMS:
                    p.mul_ (0.9)
        """),
    ("TL602", """\
        import torch
        torch.backends.cudnn.deterministic = torch.backends.cudnn.benchmark = True
        for x in loader:
            model(x).sum().backward()
            opt.step()
        """),
    ("TL702", """\
        import torch
        model.to (0)
        for x in loader:
            model(x).sum() . backward()
            opt . step ()
        """),
    ("TL703", """\
        import torch
        from torch import (
            float32,
            half,
        )
        layer = torch.nn.Linear(100, 100, dtype=half)
        """),
    ("TL704", """\
        import torch
        class Model(torch.nn.Module):
            def forward(self, x, w):
                out = torch.empty_like(x)
                for i in range(
                        x . shape[0]):
                    out[i] = (torch.sigmoid(x[i])
                    if True else w[i])
                return out
        """),
]


@pytest.mark.parametrize("code,snippet", GAPS, ids=[f"{code}-{n}" for n, (code, _) in enumerate(GAPS)])
def test_spelling_reaches_the_check(code, snippet):
    source = textwrap.dedent(snippet)
    rule = get_rule(code)()
    settings = fixture_settings(source, code)
    assert reports_without_stages([rule], source, settings, []), "the check must report here, or the case tests nothing"
    assert rule.may_fire(source, settings), "the text stage says nothing here"
    assert rules_that_may_fire([rule], source, settings), "the stages say nothing here"
