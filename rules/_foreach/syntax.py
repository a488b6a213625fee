"""Small readers of LibCST nodes that the classifier, the op mapper and the emitter share."""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

import libcst as cst


def code(module: cst.Module, node: cst.CSTNode) -> str:
    return module.code_for_node(node)


def short(module: cst.Module, node: cst.CSTNode) -> str:
    """``node``'s source on one line, cut at 60 characters: how a refusal's reason quotes it."""
    text = " ".join(code(module, node).split())
    return text if len(text) <= 60 else text[:57] + "..."


def names_read(node: cst.CSTNode) -> Set[str]:
    """Plain names read in ``node`` (not attribute names, keyword names or comprehension targets)."""
    out: Set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name):
            out.add(current.value)
        elif isinstance(current, cst.Attribute):
            stack.append(current.value)
            continue
        elif isinstance(current, cst.Arg):
            stack.append(current.value)
            continue
        stack.extend(current.children)
    return out


def string_key(node: cst.BaseExpression) -> Optional[str]:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def subscript_index(node: cst.Subscript) -> Optional[cst.BaseExpression]:
    if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
        return node.slice[0].slice.value
    return None


def small_statements(statement: cst.CSTNode) -> List[cst.CSTNode]:
    """The statements of one line (``a; b``), or the compound statement itself."""
    if isinstance(statement, cst.SimpleStatementLine):
        return list(statement.body)
    return [statement]


def block_statements(block: cst.BaseSuite) -> List[cst.CSTNode]:
    """Every small or compound statement of an indented block, in order."""
    assert isinstance(block, cst.IndentedBlock)
    return [small for statement in block.body for small in small_statements(statement)]


def if_branches(node: cst.If) -> List[Sequence[cst.BaseStatement]]:
    """The statements of each branch: the body, each ``elif``'s, then the ``else:``'s."""
    branches = [node.body.body]
    orelse = node.orelse
    while orelse is not None:
        if isinstance(orelse, cst.Else):
            branches.append(orelse.body.body)
            break
        branches.append(orelse.body.body)
        orelse = orelse.orelse
    return branches


def branch_statements(node: cst.If) -> Iterator[cst.CSTNode]:
    """Every small statement of every branch of ``node``, in order."""
    for branch in if_branches(node):
        for statement in branch:
            yield from small_statements(statement)


def is_exit(statement: cst.CSTNode) -> bool:
    """A line that is one ``continue`` or ``raise``: the body of a filter."""
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(
        statement.body[0], (cst.Continue, cst.Raise)
    )


def split_args(args: Sequence[cst.Arg]) -> Tuple[List[cst.Arg], Dict[str, cst.BaseExpression]]:
    """A call's positional arguments and its keyword arguments by name."""
    positional = [a for a in args if a.keyword is None]
    keywords = {a.keyword.value: a.value for a in args if a.keyword is not None}
    return positional, keywords

