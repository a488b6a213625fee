"""Source positions of chosen nodes, from one plain code generation pass.

LibCST's PositionProvider builds a CodeRange for every node while it regenerates the module, which costs
about ten times the code generation itself. Diagnostics need positions for a handful of nodes, so this
records token indices (plain ints) during code generation and turns only the requested ones into lines
and columns. The ranges equal PositionProvider's (syntactic positions; tested).
"""

from __future__ import annotations

import bisect
import itertools
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

import libcst as cst
from libcst._nodes.internal import CodegenState

_NEWLINE = re.compile(r"\r\n?|\n")

# (line, column, end_line, end_column): lines 1-based, columns 0-based as in libcst's CodeRange
Span = Tuple[int, int, int, int]


@dataclass(frozen=False)
class _TokenRangeState(CodegenState):
    ranges: Dict[cst.CSTNode, Tuple[int, int]] = field(default_factory=dict)
    starts: List[int] = field(default_factory=list)

    def before_codegen(self, node: cst.CSTNode) -> None:
        self.starts.append(len(self.tokens))

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self.starts.pop()
        if node not in self.ranges:  # a syntactic range recorded inside wins
            self.ranges[node] = (start, len(self.tokens))

    @contextmanager
    def record_syntactic_position(
        self, node: cst.CSTNode, *, start_node: Optional[cst.CSTNode] = None, end_node: Optional[cst.CSTNode] = None
    ) -> Iterator[None]:
        start = len(self.tokens)
        yield  # no try/finally: after an error inside (a RecursionError) there is no range to record
        end = len(self.tokens)
        if start_node is not None:
            start = self.ranges[start_node][0]
        if end_node is not None:
            end = self.ranges[end_node][1]
        self.ranges[node] = (start, end)


def node_spans(module: cst.Module, nodes: Iterable[cst.CSTNode]) -> Dict[cst.CSTNode, Span]:
    state = _TokenRangeState(default_indent=module.default_indent, default_newline=module.default_newline)
    module._codegen(state)
    offsets = list(itertools.accumulate(map(len, state.tokens), initial=0))
    text = "".join(state.tokens)
    line_starts = [0] + [m.end() for m in _NEWLINE.finditer(text)]

    def locate(offset: int) -> Tuple[int, int]:
        line = bisect.bisect_right(line_starts, offset)
        return line, offset - line_starts[line - 1]

    spans = {}
    for node in nodes:
        start, end = state.ranges[node]
        spans[node] = (*locate(offsets[start]), *locate(offsets[end]))
    return spans
