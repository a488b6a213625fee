"""torchlint.positions gives exactly LibCST's PositionProvider ranges, at a fraction of the cost."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from torchlint.positions import node_spans

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


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_spans_equal_position_provider(newline):
    source = SAMPLE.replace("\n", newline)
    module = cst.parse_module(source)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    mine = node_spans(module, list(expected))
    assert len(expected) > 200
    for node, r in expected.items():
        assert mine[node] == (r.start.line, r.start.column, r.end.line, r.end.column), type(node).__name__
