"""Source positions of chosen nodes, from code generation of only the statements that hold them.

LibCST's PositionProvider builds a CodeRange for every node while it regenerates the module, which costs
about ten times the code generation itself. Diagnostics need positions for a handful of nodes, so this
records token indices (plain ints) during code generation and turns only the requested ones into lines
and columns. The ranges equal PositionProvider's (syntactic positions; tested).

Regenerating the whole module for a few nodes still costs as much as a tree walk, so a node is located
from its innermost enclosing statement: that statement alone is regenerated (with the indentation of the
blocks around it) and its text looked for in the source, at the start of a line. Where the text occurs at
exactly one line start, that is the statement's place, because a parsed module regenerates its source
exactly. A node in a compound statement's header (a loop's iterable, a decorator) is placed from the
header alone, generated up to the body. Where the text occurs more than once (``loss.backward()`` twice)
the whole statement, then the next enclosing one is tried; where none is unique, or the source is one of
the few LibCST does not reproduce byte for byte (a form feed, a lone carriage return), the whole module is
regenerated as before. Without a final newline, nodes that end on the newline LibCST adds also are.
"""

from __future__ import annotations

import bisect
import itertools
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

import libcst as cst
from libcst._nodes.internal import CodegenState

_NEWLINE = re.compile(r"\r\n?|\n")

# (line, column, end_line, end_column): lines 1-based, columns 0-based as in libcst's CodeRange
Span = Tuple[int, int, int, int]

# Statements are regenerated until their text adds up to this many times the source's; the nodes left then
# take one pass over the whole module, so locating never costs much more than that pass.
_STATEMENT_BUDGET = 1.0
# Finding a statement's text scans the source (``str.find``, in C), about this many times cheaper per
# character than generating code: each search counts against the budget by the source's length over this,
# so a file with thousands of reported statements falls back to the one pass too.
_SEARCH_COST_RATIO = 50


class _Stop(Exception):
    """Code generation reached the node it was to stop before."""


@dataclass(frozen=False)
class _TokenRangeState(CodegenState):
    ranges: Dict[cst.CSTNode, Tuple[int, int]] = field(default_factory=dict)
    starts: List[int] = field(default_factory=list)
    stop_before: Optional[cst.CSTNode] = None

    def before_codegen(self, node: cst.CSTNode) -> None:
        if node is self.stop_before:
            raise _Stop
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


class _Located:
    """The code generated for one node (the module, a statement or a statement's header), placed at
    ``offset`` of the source, on line ``first_line``, column 0. Nodes that would end past ``limit`` are not
    located here."""

    def __init__(self, state: _TokenRangeState, text: str, first_line: int, offset: int = 0,
                 limit: Optional[int] = None) -> None:
        self.ranges = state.ranges
        self.offsets = list(itertools.accumulate(map(len, state.tokens), initial=0))
        self.line_starts = [0] + [m.end() for m in _NEWLINE.finditer(text)]
        self.first_line = first_line
        self.offset, self.limit = offset, limit

    def span(self, node: cst.CSTNode) -> Optional[Span]:
        token_range = self.ranges.get(node)
        if token_range is None:
            return None
        start, end = token_range
        if self.limit is not None and self.offset + self.offsets[end] > self.limit:
            return None
        return (*self._locate(self.offsets[start]), *self._locate(self.offsets[end]))

    def _locate(self, offset: int) -> Tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, offset)
        return self.first_line + line - 1, offset - self.line_starts[line - 1]


def generate_code(module: cst.Module, node: cst.CSTNode, indents: Sequence[str] = (),
                  stop_before: Optional[cst.CSTNode] = None) -> _TokenRangeState:
    """The code of ``node`` as token ranges; with ``stop_before``, only the code that comes before it."""
    state = _TokenRangeState(default_indent=module.default_indent, default_newline=module.default_newline,
                             stop_before=stop_before)
    state.indent_tokens.extend(indents)
    try:
        node._codegen(state)
    except _Stop:
        pass
    return state


@dataclass(frozen=False)
class _StatementRangeState(CodegenState):
    """Records the token range of every statement (``_statement_types``) while the module is generated."""
    ranges: Dict[cst.CSTNode, Tuple[int, int]] = field(default_factory=dict)
    starts: List[int] = field(default_factory=list)
    kinds: frozenset = frozenset()

    def before_codegen(self, node: cst.CSTNode) -> None:
        if type(node) in self.kinds:
            self.starts.append(len(self.tokens))

    def after_codegen(self, node: cst.CSTNode) -> None:
        if type(node) in self.kinds:
            self.ranges[node] = (self.starts.pop(), len(self.tokens))


def code_and_statement_offsets(module: cst.Module) -> Tuple[str, Optional[Dict[cst.CSTNode, Tuple[int, int]]]]:
    """``module.code``, generated once, and the (start, end) character offsets there of each of its
    statements (simple statement lines and compound statements, at every depth): where the code is the text
    the module was parsed from, a statement's code as ``generate_code`` gives it (with the indentation of
    the blocks around it) is that slice, as LibCST generates each statement alone in its block. None for
    the offsets of a module without a final newline (LibCST drops the last token it generated)."""
    state = _StatementRangeState(default_indent=module.default_indent, default_newline=module.default_newline,
                                 kinds=_statement_types())
    module._codegen(state)
    code = "".join(state.tokens)
    if not module.has_trailing_newline:
        return code, None
    offsets = list(itertools.accumulate(map(len, state.tokens), initial=0))
    return code, {node: (offsets[start], offsets[end]) for node, (start, end) in state.ranges.items()}


_STATEMENT_TYPES: List[frozenset] = []


def _statement_types() -> frozenset:
    if not _STATEMENT_TYPES:  # (built on first use: no LibCST class is touched at import time)
        kinds = {cst.SimpleStatementLine, cst.If, cst.For, cst.While, cst.With, cst.Try, cst.FunctionDef,
                 cst.ClassDef}
        kinds.update(getattr(cst, name) for name in ("TryStar", "Match") if hasattr(cst, name))
        _STATEMENT_TYPES.append(frozenset(kinds))
    return _STATEMENT_TYPES[0]


def node_spans(
    module: cst.Module, nodes: Iterable[cst.CSTNode],
    parents: Optional[Mapping[cst.CSTNode, Optional[cst.CSTNode]]] = None, source: Optional[str] = None,
) -> Dict[cst.CSTNode, Span]:
    """The span of each node. With ``parents`` (every node's parent, as ``FileAnalysis.parents``) and the
    ``source`` the module was parsed from, only the statements around the nodes are regenerated."""
    nodes = list(nodes)
    spans: Dict[cst.CSTNode, Span] = {}
    if parents is not None and source is not None and reproduced_exactly(module, source):
        locator = StatementLocator(module, parents, source)
        for node in nodes:
            if locator.generated >= len(source) * _STATEMENT_BUDGET:
                break  # many nodes in many statements: one pass over the module is cheaper
            span = locator.span(node)
            if span is not None:
                spans[node] = span
    rest = [node for node in nodes if node not in spans]
    if rest:
        state = generate_code(module, module)
        whole = _Located(state, "".join(state.tokens), first_line=1)
        for node in rest:
            span = whole.span(node)
            if span is None:
                raise KeyError(node)
            spans[node] = span
    return spans


def reproduced_exactly(module: cst.Module, source: str) -> bool:
    """False for the sources LibCST's code generation is known not to reproduce byte for byte: a form feed
    is dropped, a lone carriage return may be, and a file without a final newline mixing line endings may
    not end with the newline it is given."""
    if "\f" in source:
        return False
    crlf = source.count("\r\n")
    if source.count("\r") != crlf:
        return False
    return module.has_trailing_newline or crlf == 0 or crlf == source.count("\n")


# A line holding only a backslash continuation: LibCST's tree keeps no trace of it, so the code of a statement
# around it is not its text, and may be found elsewhere (the same code in a string, or a twin statement), and
# positions taken from the whole module's code are a line short below it. Fix edits take the whole-module path
# for such files (carried back byte for byte) and TL900 stays silent in them.
_CONTINUATION_ONLY_LINE = re.compile(r"^[ \t]*\\\r?\n", re.MULTILINE)


def has_continuation_only_line(source: str) -> bool:
    return ("\\\n" in source or "\\\r\n" in source) and _CONTINUATION_ONLY_LINE.search(source) is not None


def _headed_types() -> Tuple[type, ...]:
    """Compound statements whose header (``for x in y:``, decorators and ``def f(a):``) is generated before
    their body, and nothing of the statement's but ``orelse`` after it."""
    return (cst.For, cst.While, cst.If, cst.With, cst.FunctionDef, cst.ClassDef)


class StatementLocator:
    def __init__(self, module: cst.Module, parents: Mapping[cst.CSTNode, Optional[cst.CSTNode]], source: str):
        self.module = module
        self.parents = parents
        self.source = source
        # Without a final newline, LibCST's code for the last statement ends with the module's newline,
        # which its code generation then drops: look for the code in the source with that newline added,
        # and leave the nodes that end on it to the whole-module pass (as before).
        self.haystack = source if module.has_trailing_newline else source + module.default_newline
        self.statements: Dict[cst.CSTNode, Optional[_Located]] = {}  # None where the code is not unique
        self.headers: Dict[cst.CSTNode, Optional[_Located]] = {}
        self.generated = 0  # characters of code generated so far

    def span(self, node: cst.CSTNode) -> Optional[Span]:
        for statement, indents, in_header in self._enclosing_statements(node):
            if in_header and statement not in self.statements:  # its header alone may place it
                located = self._located(self.headers, statement, indents, statement.body)
                span = located.span(node) if located is not None else None
                if span is not None:
                    return span
            located = self._located(self.statements, statement, indents, None)
            if located is not None:
                return located.span(node)
        return None

    def _enclosing_statements(self, node: cst.CSTNode) -> Iterator[Tuple[cst.CSTNode, List[str], bool]]:
        """The statements of a body (the module's or a block's) around ``node`` (itself included), innermost
        first, each with the indentation LibCST's code generation has in effect there, and whether ``node``
        is in the statement's header."""
        chain = [node]
        parent = self.parents.get(node, node)  # node itself: not in the tree the walk saw
        while parent is not None and parent is not node:
            chain.append(parent)
            parent = self.parents.get(parent, node)
        if parent is node or chain[-1] is not self.module:
            return  # a node outside the walked tree (a comment, whitespace): the whole module locates it
        headed = _headed_types()
        indents: List[str] = []
        statements: List[Tuple[cst.CSTNode, List[str], bool]] = []
        for index in range(len(chain) - 2, -1, -1):
            inner, outer = chain[index], chain[index + 1]
            if type(outer) is cst.Module or type(outer) is cst.IndentedBlock:
                child = chain[index - 1] if index else None
                in_header = (child is not None and type(inner) in headed and child is not inner.body
                             and child is not getattr(inner, "orelse", None))
                statements.append((inner, list(indents), in_header))
            if type(inner) is cst.IndentedBlock or type(inner) is cst.Match:  # the two that indent
                indent = inner.indent
                indents.append(self.module.default_indent if indent is None else indent)
        yield from reversed(statements)

    def _located(self, cache: Dict[cst.CSTNode, Optional[_Located]], statement: cst.CSTNode,
                 indents: List[str], stop_before: Optional[cst.CSTNode]) -> Optional[_Located]:
        if statement in cache:
            return cache[statement]
        state = generate_code(self.module, statement, indents, stop_before)
        text = "".join(state.tokens)
        self.generated += len(text) + len(self.haystack) // _SEARCH_COST_RATIO
        start = only_line_start(self.haystack, text) if text else None
        located = None
        if start is not None:
            located = _Located(state, text, self.haystack.count("\n", 0, start) + 1, start, len(self.source))
        cache[statement] = located
        return located


def only_line_start(source: str, text: str) -> Optional[int]:
    """Where ``text`` occurs in ``source`` at the start of a line, if it occurs at exactly one."""
    found = line_starts_of(source, text, limit=2)
    return found[0] if len(found) == 1 else None


def line_starts_of(source: str, text: str, limit: Optional[int] = None) -> List[int]:
    """The offsets at line starts of ``source`` where ``text`` occurs, in order (the first ``limit``)."""
    found = [0] if source.startswith(text) else []
    needle = "\n" + text
    at = source.find(needle)
    while at >= 0 and (limit is None or len(found) < limit):
        found.append(at + 1)
        at = source.find(needle, at + 1)
    return found
