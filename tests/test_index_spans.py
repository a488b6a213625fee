"""The index places nodes where LibCST does: findings detected on the stdlib ast report the same lines and
columns as LibCST's PositionProvider gives (characters, not bytes; parentheses left out)."""

from __future__ import annotations

import ast
import textwrap
from collections import Counter

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from fixture_support import FIXTURES
from torchlint.fix.analysis import FileAnalysis
from torchlint.facts.index import AstIndex

SAMPLES = sorted(FIXTURES.rglob("*.py"))

TRICKY = textwrap.dedent(
    """\
    import torch
    x = (torch.zeros(3)).cuda() ; y = 2  # c
    for a in (loader):
        pass
    if x: f((a), b); g()
    s = 'é' + f("ü", k=(1), *a)
    t, u = (a, b), ((c, d))
    z = f(x for x in y)
    w = [h(i) for i in range(3)]
    with (open(x)) as f, g() as h:
        m = f.read()
    @dec(1)
    def f():
        return q(1)
    try:
        r()
    except E:
        r(2)
    else:
        r(3)
    finally:
        r(4)
    while n(): o(); p()
    v = (a.
         b(1))
    """
)

_TYPES = {ast.Tuple: cst.Tuple, ast.GeneratorExp: cst.GeneratorExp, ast.Attribute: cst.Attribute,
          ast.Subscript: cst.Subscript, ast.ListComp: cst.ListComp}


def _spans(source: str):
    module = cst.parse_module(source)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)

    def of(node):
        r = positions[node]
        return r.start.line, r.start.column, r.end.line, r.end.column

    analysis = FileAnalysis(module, source)
    index = AstIndex(ast.parse(source), source)
    cst_calls = [of(call) for call in analysis.calls]
    ast_calls = [index.span(info.node) for info in index.calls]
    cst_statements = [of(analysis.enclosing_statement(call)) for call in analysis.calls]
    ast_statements = [index.span(index.enclosing_statement(info.node)) for info in index.calls]
    def in_import(node):  # LibCST spells `import a.b` with an Attribute; ast with a string
        return any(isinstance(a, (cst.Import, cst.ImportFrom)) for a in analysis.ancestors(node))

    # `x[:, 1]`: a Tuple in ast, subscript elements in LibCST
    slices = {n.slice for n in ast.walk(index.tree) if isinstance(n, ast.Subscript)}
    by_type = {}
    for ast_type, cst_type in _TYPES.items():
        by_type[ast_type.__name__] = (
            Counter(of(n) for n in positions if type(n) is cst_type and not in_import(n)),
            Counter(index.span(n) for n in ast.walk(index.tree) if type(n) is ast_type and not (ast_type is ast.Tuple and n in slices)),
        )
    return (cst_calls, ast_calls), (cst_statements, ast_statements), by_type


def _assert_same(source: str) -> None:
    (cst_calls, ast_calls), (cst_statements, ast_statements), by_type = _spans(source)
    assert ast_calls == cst_calls
    assert ast_statements == cst_statements
    for name, (cst_spans, ast_spans) in by_type.items():
        assert ast_spans == cst_spans, name


def test_tricky_shapes_are_placed_as_libcst_places_them():
    _assert_same(TRICKY)


def test_columns_count_characters_not_bytes():
    index = AstIndex(ast.parse("s = 'é' + f(x)\n"), "s = 'é' + f(x)\n")
    assert index.span(index.calls[0].node) == (1, 10, 1, 14)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_fixture_is_placed_as_libcst_places_it(path):
    source = path.read_text(encoding="utf-8")
    try:
        ast.parse(source)
    except SyntaxError:
        pytest.skip("not valid Python for this interpreter")
    _assert_same(source)
