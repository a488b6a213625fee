"""LibCST's tree of a file (or of some of its statements), as the fixes see it.

Rules detect on the stdlib ``ast`` index (``torchlint.facts.index``); a fix is made on LibCST's tree, and
``FileAnalysis`` is what the rewrite side navigates there: one walk records the parent and pre-order number
of every node, the import table, the calls, defs and loops in source order (the twins of the index's, found
by place: ``torchlint.fix.rewrites``). There is no LibCST scope analysis: the import table answers the
questions the rewrites ask.
"""

from __future__ import annotations

import bisect
import dataclasses
import typing
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Tuple, Union

import libcst as cst

from torchlint.facts.index import alias_of, qualify

# Nothing here touches libcst at import time: the command line defers loading it until a file reaches the
# LibCST stage (most runs of `torchlint check one_file.py` never do; see docs/architecture.md).
if TYPE_CHECKING:
    ScopeNode = Union[cst.Module, cst.FunctionDef, cst.Lambda]
    LoopNode = Union[cst.For, cst.While]
else:  # only annotations use these names
    ScopeNode = "Union[cst.Module, cst.FunctionDef, cst.Lambda]"
    LoopNode = "Union[cst.For, cst.While]"


@dataclass
class FunctionInfo:
    node: Union[cst.FunctionDef, cst.Lambda] = field(repr=False)
    name: str
    class_name: Optional[str]
    parent: Optional["FunctionInfo"] = field(repr=False)
    decorators: Tuple[str, ...] = ()  # dotted names as written, e.g. "torch.no_grad", "t.inference_mode"


@dataclass
class LoopInfo:
    node: LoopNode = field(repr=False)
    function: Optional[FunctionInfo] = field(repr=False)
    parent: Optional["LoopInfo"] = field(repr=False)  # the enclosing loop in the same function, if any


def dotted_name(node: cst.CSTNode) -> Optional[str]:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def call_name(call: cst.Call) -> Optional[str]:
    """The called name's last part: ``loss.item()`` -> "item", ``float(x)`` -> "float"."""
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    if isinstance(func, cst.Name):
        return func.value
    return None


def keyword_arg(call: cst.Call, name: str) -> Optional[cst.Arg]:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


# Fields that hold only punctuation and whitespace: no rule asks about them, and skipping them makes the
# walk several times cheaper than a LibCST visitor (which also rebuilds every node it visits).
_SKIPPED_FIELDS = {
    "lpar", "rpar", "lbrace", "rbrace", "lbracket", "rbracket", "comma", "semicolon", "equal", "colon", "dot",
    "star", "asynchronous", "leading_lines", "lines_after_decorators", "trailing_whitespace", "header",
    "footer", "newline", "indent", "encoding", "default_indent", "default_newline", "has_trailing_newline",
}
@lru_cache(maxsize=None)
def _source_order() -> Dict[type, Tuple[str, ...]]:
    """Where a node's dataclass fields are not in source order."""
    return {
        cst.FunctionDef: ("decorators", "name", "type_parameters", "params", "returns", "body"),
        cst.ClassDef: ("decorators", "name", "type_parameters", "bases", "keywords", "body"),
        cst.IfExp: ("body", "test", "orelse"),
        cst.Arg: ("keyword", "value"),
    }


_CHILD_FIELDS: Dict[type, Tuple[str, ...]] = {}


def _child_fields(node_type: type) -> Tuple[str, ...]:
    """The fields of ``node_type`` that can hold a child node, in source order."""
    names = _CHILD_FIELDS.get(node_type)
    if names is None:
        annotations = {f.name: f.type for f in dataclasses.fields(node_type)}
        names = _source_order().get(node_type) or tuple(
            name for name in annotations
            if name not in _SKIPPED_FIELDS and not name.startswith("whitespace")
        )
        # `Name.value: str`, `Arg.star: Literal["", "*", "**"]`: reading them finds no node, so skip them
        names = _CHILD_FIELDS[node_type] = tuple(name for name in names if _may_hold_node(annotations[name]))
    return names


def _may_hold_node(annotation: object) -> bool:
    """False only where a field's annotation rules out a node (``str``, ``bool``, a ``Literal``...)."""
    if isinstance(annotation, type):
        return issubclass(annotation, cst.CSTNode)
    if typing.get_origin(annotation) is typing.Literal:
        return False
    arguments = typing.get_args(annotation)
    return not arguments or any(_may_hold_node(argument) for argument in arguments)


_CHILD_FIELDS_LAST_FIRST: Dict[type, Tuple[str, ...]] = {}  # the walk's order of reading them
_IS_NODE: Dict[type, bool] = {}


def _is_node_type(value_type: type) -> bool:
    known = _IS_NODE.get(value_type)
    if known is None:  # isinstance against LibCST's ABCs is slow: decide once per type
        known = _IS_NODE[value_type] = issubclass(value_type, cst.CSTNode)
    return known


def iter_children(node: cst.CSTNode) -> List[cst.CSTNode]:
    """The child nodes that matter to rules, in source order (no whitespace or punctuation)."""
    names = _CHILD_FIELDS.get(type(node))
    if names is None:
        names = _child_fields(type(node))
    children = []
    for name in names:
        value = getattr(node, name, None)
        value_type = type(value)
        if value_type is list or value_type is tuple:
            children.extend(item for item in value if _is_node_type(type(item)))
        elif _is_node_type(value_type):
            children.append(value)
    return children


_LEAVING = object()  # marks, on the walk's stack, that the node below it is being left


class _Indexer:
    """The one pass over the tree. It records; it does not interpret."""

    def __init__(self, analysis: "FileAnalysis") -> None:
        self.a = analysis
        self.functions: List[FunctionInfo] = []
        self.loops: List[LoopInfo] = []
        self.class_names: List[str] = []
        # the loop whose body holds the walk: reset when entering a function or class
        self.loop_stack: List[Optional[LoopInfo]] = [None]

    def walk(self, module: cst.Module) -> None:
        """Pre-order walk without recursion (deep expressions must not hit the recursion limit).

        Records each node's parent and pre-order number; only the few node types with a leave handler
        get a second stack entry, so the walk allocates almost nothing per node.
        """
        parents, order = self.a.parents, self.a.order
        visit_table, leave_table = _handlers()
        last_first, is_node = _CHILD_FIELDS_LAST_FIRST, _IS_NODE
        parents[module] = None
        counter = 0
        stack: List[object] = [module]
        pop, push = stack.pop, stack.append
        while stack:
            node = pop()
            if node is _LEAVING:
                node = pop()
                leave_table[type(node)](self, node)
                continue
            order[node] = counter
            counter += 1
            node_type = type(node)
            visit = visit_table.get(node_type)
            if visit is not None:
                visit(self, node)
                if node_type in leave_table:
                    push(node)
                    push(_LEAVING)
            names = last_first.get(node_type)
            if names is None:
                names = last_first[node_type] = _child_fields(node_type)[::-1]
            # iter_children, inlined (this loop runs for every node of the file): the children go on the
            # stack last first, so that they come off it in source order
            for name in names:
                value = getattr(node, name, None)
                value_type = type(value)
                if value_type is tuple or value_type is list:
                    for item in reversed(value):
                        item_type = type(item)
                        known = is_node.get(item_type)
                        if known or (known is None and _is_node_type(item_type)):
                            parents[item] = node
                            push(item)
                else:
                    known = is_node.get(value_type)
                    if known or (known is None and _is_node_type(value_type)):
                        parents[value] = node
                        push(value)

    # --- per-type handlers ---------------------------------------------------------------
    def visit_call(self, node: cst.Call) -> None:
        a = self.a
        a.calls.append(node)

    def visit_function(self, node: Union[cst.FunctionDef, cst.Lambda]) -> None:
        parent = self.functions[-1] if self.functions else None
        if isinstance(node, cst.FunctionDef):
            decorators = tuple(
                filter(None, (dotted_name(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator)
                              for d in node.decorators))
            )
            info = FunctionInfo(node, node.name.value, self.class_names[-1] if self.class_names else None, parent, decorators)
            self.a.functions.append(info)
        else:
            info = FunctionInfo(node, "<lambda>", None, parent)
        self.a.function_info[node] = info
        self.functions.append(info)
        self.loop_stack.append(None)

    def leave_function(self, node: cst.CSTNode) -> None:
        self.functions.pop()
        self.loop_stack.pop()

    def visit_class(self, node: cst.ClassDef) -> None:
        self.class_names.append(node.name.value)
        self.loop_stack.append(None)

    def leave_class(self, node: cst.ClassDef) -> None:
        self.class_names.pop()
        self.loop_stack.pop()

    def visit_loop(self, node: LoopNode) -> None:
        function = self.functions[-1] if self.functions else None
        info = LoopInfo(node, function, self.loop_stack[-1])
        self.a.loops.append(info)
        self.a.loop_info[node] = info
        self.loop_stack.append(info)

    def leave_loop(self, node: LoopNode) -> None:
        self.loop_stack.pop()

    def visit_import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted_name(alias.name)
            if full is None:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self.a.imports[alias.asname.name.value] = full
            else:
                root = full.split(".")[0]
                self.a.imports[root] = root

    def visit_import_from(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        module = dotted_name(node.module)
        for alias in node.names:
            name = dotted_name(alias.name)
            if module is None or name is None:
                continue
            local = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) else name
            self.a.imports[local] = f"{module}.{name}"

def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """``node`` and everything below it that matters to rules, in source order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(iter_children(current)))


@lru_cache(maxsize=None)
def _handlers():
    """The walk's (visit, leave) handlers by node type, built on first use (they name libcst's classes)."""
    return _visit_handlers(), _leave_handlers()


def _visit_handlers():
    return {
        cst.Call: _Indexer.visit_call,
        cst.FunctionDef: _Indexer.visit_function,
        cst.Lambda: _Indexer.visit_function,
        cst.ClassDef: _Indexer.visit_class,
        cst.For: _Indexer.visit_loop,
        cst.While: _Indexer.visit_loop,
        cst.Import: _Indexer.visit_import,
        cst.ImportFrom: _Indexer.visit_import_from,
    }


def _leave_handlers():
    return {
        cst.FunctionDef: _Indexer.leave_function,
        cst.Lambda: _Indexer.leave_function,
        cst.ClassDef: _Indexer.leave_class,
        cst.For: _Indexer.leave_loop,
        cst.While: _Indexer.leave_loop,
    }


class _Spans:
    """``spans[node]`` is ``(first, end)``: the pre-order numbers its subtree occupies, end exclusive.

    The end is found on demand from the node's last descendant, so the walk stores one number per node.
    """

    def __init__(self, analysis: "FileAnalysis") -> None:
        self._order = analysis.order
        self._ends: Dict[cst.CSTNode, int] = {}

    def __getitem__(self, node: cst.CSTNode) -> Tuple[int, int]:
        end = self._ends.get(node)
        if end is None:
            last = node
            while True:
                children = iter_children(last)
                if not children:
                    break
                last = children[-1]
            end = self._ends[node] = self._order[last] + 1
        return self._order[node], end


class FileAnalysis:
    """Facts about one parsed file, shared by all rules. Build with ``FileAnalysis(module, source)``."""

    def __init__(self, module: cst.Module, source: str = "", path: str = "<string>") -> None:
        self.module = module
        self.source = source
        self.path = path
        self.parents: Dict[cst.CSTNode, Optional[cst.CSTNode]] = {}
        self.order: Dict[cst.CSTNode, int] = {}  # pre-order number of every node
        self.spans = _Spans(self)  # node -> (first, end) pre-order numbers of its subtree
        self.imports: Dict[str, str] = {}  # local name -> qualified name
        self.calls: List[cst.Call] = []  # in source order
        self.functions: List[FunctionInfo] = []  # FunctionDefs only, in source order
        self.function_info: Dict[cst.CSTNode, FunctionInfo] = {}
        self.loops: List[LoopInfo] = []  # for and while, in source order
        self.loop_info: Dict[cst.CSTNode, LoopInfo] = {}
        # a fix's node -> its line in ``source``, from the index (``rewrites._make``): it places a statement
        # whose text occurs more than once (``FixEdits``)
        self.anchor_lines: Dict[cst.CSTNode, int] = {}
        # Facts the rewrites compute once per file and share (TL900's comments). They may refer back to
        # this analysis: ``release`` drops them when the rewrites are done, so that no reference cycle keeps
        # the file's tree alive (the runner pauses the cyclic collector while it checks a file).
        self.shared: Dict[str, object] = {}
        # where ``module``'s code is ``source`` (checked by generating it): each statement's (start, end) in
        # ``source`` (``positions.code_and_statement_offsets``), so that its old text need not be generated
        self.statement_offsets: Optional[Dict[cst.CSTNode, Tuple[int, int]]] = None
        _Indexer(self).walk(module)
        self._call_starts = [self.order[c] for c in self.calls]

    # --- tree navigation -------------------------------------------------------------------------
    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self.parents.get(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        node = self.parents.get(node)
        while node is not None:
            yield node
            node = self.parents.get(node)

    def contains(self, outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
        """True when ``inner`` is ``outer`` or lies inside it."""
        o, i = self.spans[outer], self.spans[inner]
        return o[0] <= i[0] and i[1] <= o[1]

    def comes_before(self, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        return self.order[a] < self.order[b]

    def calls_in(self, node: cst.CSTNode) -> List[cst.Call]:
        """All calls inside ``node`` (itself included), in source order."""
        start, end = self.spans[node]
        lo = bisect.bisect_left(self._call_starts, start)
        hi = bisect.bisect_left(self._call_starts, end)
        return self.calls[lo:hi]

    def enclosing_statement(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        """The simple or compound statement that holds ``node``."""
        for candidate in (node, *self.ancestors(node)):
            if isinstance(candidate, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
                if isinstance(candidate, cst.BaseSmallStatement):
                    line = self.parents.get(candidate)
                    return line if isinstance(line, cst.SimpleStatementLine) else candidate
                return candidate
        return None

    def release(self) -> None:
        """Drop the facts rules shared through ``shared`` (called by the engine once every rule has run)."""
        self.shared.clear()

    def function_of(self, node: cst.CSTNode) -> Optional[FunctionInfo]:
        """The innermost def or lambda around ``node`` (not ``node`` itself)."""
        for ancestor in self.ancestors(node):
            info = self.function_info.get(ancestor)
            if info is not None:
                return info
        return None

    def scope_of(self, node: cst.CSTNode) -> ScopeNode:
        info = self.function_of(node)
        return info.node if info is not None else self.module

    def enclosing_loops(self, node: cst.CSTNode) -> Iterator[LoopInfo]:
        """Loops around ``node``, innermost first, stopping at the first def, lambda or class."""
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return
            info = self.loop_info.get(ancestor)
            if info is not None and not self._in_loop_header(info.node, node):
                yield info

    def _in_loop_header(self, loop: LoopNode, node: cst.CSTNode) -> bool:
        header = loop.iter if isinstance(loop, cst.For) else loop.test
        return self.contains(header, node) or (isinstance(loop, cst.For) and self.contains(loop.target, node))

    # --- names -----------------------------------------------------------------------------------
    def qualified_name(self, node: cst.CSTNode) -> Optional[str]:
        """``t.nn.Conv2d`` -> "torch.nn.Conv2d" through the import table; None if the root is not imported."""
        return qualify(self.imports, dotted_name(node))

    def module_alias(self, module: str) -> Optional[str]:
        """The local name that refers to ``module`` (e.g. "t" for ``import torch as t``), if any."""
        return alias_of(self.imports, module)
