"""torchlint.fix.positions gives exactly LibCST's PositionProvider ranges, at a fraction of the cost."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from torchlint.fix import positions
from torchlint.fix.analysis import FileAnalysis, walk
from torchlint.fix.positions import node_spans

SAMPLE = textwrap.dedent(
    '''\
    """Doc."""
    import torch as t  # comment


    @t.no_grad()
    @decorate(
        1,
    )
    def f(a, *args, b: int = 2, **kw) -> "x":
        x = [i for i in range(3) if i] ; y = {k: v for k, v in kw.items()}
        z = (a if b else
             (lambda q: q)(a))
        with t.no_grad(), open("f") as g:
            for p in params:  # loop
                p.grad = None
        return f"{x!r:>10}" + 'é' * 2


    class C(Base, metaclass=M):
        async def g(self):
            await self.h()[1:2, ...]
    '''
)

# Blocks in every position a statement can hold one, statements repeated word for word (so the innermost
# statement is not unique and an outer one locates it), comments and blank lines between statements.
NESTED = textwrap.dedent(
    '''\
    # leading comment

    import torch
    x = 1; y = 2;  z = 3  # three on a line
    total = 1 + \\
        2 + \\
            3


    # a comment before a decorated class
    @dataclass  # trailing
    # between decorator and class

    @other
    class Model(torch.nn.Module):
        """Doc."""

        # comment line
        def forward(self, x):

            for (i, j), k in zip(a, b):  # a header with a target
                loss.backward()
                if i:
                    loss.backward()
                elif j:
                    loss.backward()  # same text, other block
                else:
                    loss.backward()
            else:
                loss.backward()
            while x:
                loss.backward()
            else:
                pass
            try:
                loss.backward()
            except (ValueError, TypeError) as error:
                loss.backward()
            except Exception:
                raise
            else:
                loss.backward()
            finally:
                loss.backward()
            with torch.no_grad() as g, open("f") as h:
                loss.backward()
            if x: a = 1; b = 2
            async def inner():
                async for q in aiter():
                    await q
                async with lock as held:
                    loss.backward()
            return x
            # comment at the end of a block

    def loop():
        for step in range(10):
            loss.backward()
            optimizer.step()
        for step in range(10):
            loss.backward()
            optimizer.step()

    for step in range(10):
        loss.backward()
        optimizer.step()
    for step in range(10):
        loss.backward()
        optimizer.step()
    match command:
        case [x, *rest] if x:
            loss.backward()
        case {"a": 1, **kw}:
            loss.backward()
        case Point(x=0) | None:
            pass
        case _:
            loss.backward()
    # comment at the end of the module
    '''
)

TABS = "class A:\n\tdef f(self):\n\t\tif x:\n\t\t\ty = 1\n\t\telse:\n\t\t\ty = 2\n\t\treturn y\n"

MIXED_INDENT = "def f():\n    if a:\n      b = 1\n      if c:\n          d = 2\n    return [\n  1,\n]\n"


def _assert_same_as_position_provider(source: str) -> int:
    module = cst.parse_module(source)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    analysis = FileAnalysis(module, source)
    mine = node_spans(module, list(expected), analysis.parents, source)
    for node, r in expected.items():
        assert mine[node] == (r.start.line, r.start.column, r.end.line, r.end.column), type(node).__name__
    return len(expected)


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_spans_equal_position_provider(newline):
    source = SAMPLE.replace("\n", newline)
    module = cst.parse_module(source)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    mine = node_spans(module, list(expected))  # no parents: the whole module is regenerated
    assert len(expected) > 200
    for node, r in expected.items():
        assert mine[node] == (r.start.line, r.start.column, r.end.line, r.end.column), type(node).__name__


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("source", [SAMPLE, NESTED, TABS, MIXED_INDENT], ids=["sample", "nested", "tabs", "mixed"])
def test_statement_spans_equal_position_provider(source, newline):
    assert _assert_same_as_position_provider(source.replace("\n", newline)) > 30


@pytest.mark.parametrize("source", [
    NESTED.rstrip("\n"),  # no newline at the end: the last statement's text is not in the source
    NESTED.replace("# leading comment", "\f# leading comment"),  # LibCST drops the form feed
    NESTED.replace("x = 1; y = 2", "x = 1\ry = 2"),  # a lone carriage return
    "\n\n",
], ids=["no-final-newline", "form-feed", "lone-cr", "blank"])
def test_sources_not_reproduced_exactly_fall_back(source):
    module = cst.parse_module(source)
    analysis = FileAnalysis(module, source)
    nodes = [node for node in analysis.parents if node is not module]  # without a final newline, the
    # module's own span and its last Newline's differ from PositionProvider's: the same as ever
    assert node_spans(module, nodes, analysis.parents, source) == node_spans(module, nodes)
    if module.has_trailing_newline:
        _assert_same_as_position_provider(source)


def _generated(monkeypatch):
    generated = []
    original = positions.generate_code

    def spy(module, node, indents=(), stop_before=None):
        generated.append(node if stop_before is None else ("header", node))
        return original(module, node, indents, stop_before)

    monkeypatch.setattr(positions, "generate_code", spy)
    return generated


def test_only_the_statements_around_the_nodes_are_regenerated(monkeypatch):
    module = cst.parse_module(NESTED)
    analysis = FileAnalysis(module, NESTED)
    attribute = next(n for n in walk(module) if isinstance(n, cst.Attribute) and n.attr.value == "no_grad")
    calls = [n for n in walk(module) if isinstance(n, cst.Call) and cst.Module([]).code_for_node(n) == "loss.backward()"]
    generated = _generated(monkeypatch)
    spans = node_spans(module, [attribute, calls[1]], analysis.parents, NESTED)
    assert module not in generated
    with_statement = analysis.enclosing_statement(attribute)
    assert isinstance(with_statement, cst.With) and ("header", with_statement) in generated  # `with ...:` alone
    assert with_statement not in generated
    # the second `loss.backward()` line is not unique: the `if i:` around it is regenerated to place it
    assert analysis.enclosing_statement(calls[1]) in generated
    assert isinstance(generated[-1], cst.If)
    assert spans[calls[1]] == (24, 16, 24, 31)


def test_a_statement_repeated_at_top_level_needs_the_whole_module(monkeypatch):
    source = "for step in range(10):\n    loss.backward()\nfor step in range(10):\n    loss.backward()\n"
    module = cst.parse_module(source)
    analysis = FileAnalysis(module, source)
    second = [n for n in walk(module) if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)][1]
    generated = _generated(monkeypatch)
    assert node_spans(module, [second], analysis.parents, source) == {second: (4, 4, 4, 19)}
    assert generated[-1] is module


@pytest.mark.parametrize("source", [
    "for x in y:\n    loss.backward()\nz = f(1)",
    "def f():\n    for x in y:\n        loss.backward()",
    "if a: b()\r\nelse: c()",
    "class A:\n    def f(self): return g(1)",
])
def test_without_a_final_newline_nodes_on_the_last_line_are_as_before(source):
    module = cst.parse_module(source)
    analysis = FileAnalysis(module, source)
    for node in analysis.parents:
        try:
            before = node_spans(module, [node])
        except IndexError:  # a node that ends on the newline LibCST drops: no position, as ever
            with pytest.raises(IndexError):
                node_spans(module, [node], analysis.parents, source)
            continue
        assert node_spans(module, [node], analysis.parents, source) == before


def test_a_node_in_a_header_regenerates_the_header_only(monkeypatch):
    source = "def step(params):\n    for p in params:  # once\n        p.add_(1)\n        p.mul_(2)\n"
    module = cst.parse_module(source)
    analysis = FileAnalysis(module, source)
    loop = module.body[0].body.body[0]
    generated = _generated(monkeypatch)
    assert node_spans(module, [loop.iter, loop.target], analysis.parents, source) == {
        loop.iter: (2, 13, 2, 19), loop.target: (2, 8, 2, 9)}
    assert generated == [("header", loop)]
    assert node_spans(module, [loop], analysis.parents, source) == {loop: (2, 4, 4, 17)}
    assert generated[-1] is loop
    assert node_spans(module, [loop]) == {loop: (2, 4, 4, 17)}


def test_nodes_outside_the_walk_are_located_from_the_whole_module():
    source = "x = 1  # a comment\n"
    module = cst.parse_module(source)
    comment = module.body[0].trailing_whitespace.comment
    assert node_spans(module, [comment], FileAnalysis(module, source).parents, source) == {comment: (1, 7, 1, 18)}


def test_past_the_budget_the_rest_is_located_from_the_whole_module(monkeypatch):
    monkeypatch.setattr(positions, "_STATEMENT_BUDGET", 0.0)
    module = cst.parse_module(NESTED)
    analysis = FileAnalysis(module, NESTED)
    nodes = list(analysis.parents)
    generated = _generated(monkeypatch)
    assert node_spans(module, nodes, analysis.parents, NESTED) == node_spans(module, nodes)
    assert generated[0] is module  # nothing was regenerated statement by statement


def test_searching_the_source_counts_against_the_budget(monkeypatch):
    """Thousands of one-line statements: each is tiny to regenerate, but finding each scans the source, so
    the locator must give up on statements long before it has searched for all of them."""
    source = "".join(f"y{i} = f(x{i})\n" for i in range(3000))
    module = cst.parse_module(source)
    analysis = FileAnalysis(module, source)
    calls = [node for node in analysis.parents if isinstance(node, cst.Call)]
    searches = []
    real = positions.only_line_start
    monkeypatch.setattr(positions, "only_line_start", lambda *args: searches.append(1) or real(*args))
    assert node_spans(module, calls, analysis.parents, source) == node_spans(module, calls)
    assert 0 < len(searches) < len(calls) // 10


def _statements_with_indents(module: cst.Module, analysis: FileAnalysis):
    """Every statement of a body (the module's or a block's), with the indentation its code is generated in."""
    locator = positions.StatementLocator(module, analysis.parents, analysis.source)
    for node in walk(module):
        chain = list(locator._enclosing_statements(node))
        if chain and chain[0][0] is node:
            yield node, chain[0][1]


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("source", [SAMPLE, NESTED, TABS, MIXED_INDENT], ids=["sample", "nested", "tabs", "mixed"])
def test_statement_offsets_give_each_statements_own_code(source, newline):
    """``code_and_statement_offsets``: the module's code, and each statement's slice of it is the code
    ``generate_code`` gives the statement alone in its block (what fix passes read as its old text)."""
    source = source.replace("\n", newline)
    module = cst.parse_module(source)
    code, offsets = positions.code_and_statement_offsets(module)
    assert code == module.code == source
    assert offsets is not None
    analysis = FileAnalysis(module, source)
    checked = 0
    for statement, indents in _statements_with_indents(module, analysis):
        start, end = offsets[statement]
        assert code[start:end] == "".join(positions.generate_code(module, statement, indents).tokens)
        checked += 1
    assert checked > 5


def test_statement_offsets_of_a_module_without_a_final_newline_are_not_given():
    module = cst.parse_module(NESTED.rstrip("\n"))
    code, offsets = positions.code_and_statement_offsets(module)
    assert code == module.code and offsets is None
