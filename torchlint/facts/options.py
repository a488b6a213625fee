"""Command-line options: the default of the argparse option an expression reads (``args.workers``).

An attribute of a namespace counts as an option only where the file shows where the namespace comes from:
a name bound to ``parser.parse_args(...)`` of an ``argparse.ArgumentParser(...)`` of the file, or to a call of
a function of the file that returns that (``opt = parse_option()``), directly or through the parameters of the
file's functions that every call of them fills so (also through ``torch.multiprocessing.spawn(main_worker,
args=(..., args))``, which passes the process index first). The option is the one ``add_argument`` call on
that parser (on a group of it, or on a parser its ``parents=`` lists: a name, or a call of a function of the
file that returns one) whose destination is the attribute (``dest=``, else the first long option with dashes
made underscores, else the short one). It says nothing where the file may change the value: an assignment to
an attribute of that name anywhere in the file, ``set_defaults``, subparsers, an ``action`` or ``nargs`` that
makes it no plain value."""

from __future__ import annotations

import ast
from typing import List, Optional, Set, Tuple

from torchlint.facts.index import (
    AstIndex, AstScope, argument_for, has_star, is_parameter, keyword_value, module_function_returns, walk,
)

_PARSERS = {"argparse.ArgumentParser"}
_GROUPS = ("add_argument_group", "add_mutually_exclusive_group")
_SPAWNS = {"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"}


def option_default(index: AstIndex, expr: ast.AST, scope: AstScope) -> Optional[ast.expr]:
    """The ``default=`` of the option that ``expr`` (``args.<dest>``) reads, or None where the file does not
    show it (see the module's note)."""
    if type(expr) is not ast.Attribute or type(expr.value) is not ast.Name:  # type: ignore[attr-defined]
        return None
    dest = expr.attr  # type: ignore[attr-defined]
    if _reassigned(index, dest):
        return None
    parsers = _parsers_of(index, expr.value.id, scope, 0, set())  # type: ignore[attr-defined]
    if not parsers:
        return None
    defaults = [_default(index, parser, dest) for parser in parsers]
    if any(d is None for d in defaults) or len({ast.dump(d) for d in defaults}) != 1:  # type: ignore[arg-type]
        return None
    return defaults[0]


def _reassigned(index: AstIndex, dest: str) -> bool:
    """Some statement of the file assigns an attribute called ``dest`` (``args.workers = ...``)."""
    found = index.shared.get("option_assigned")
    if found is None:
        found = set()
        for node in walk(index.tree):
            targets = node.targets if type(node) is ast.Assign else (
                [node.target] if type(node) in (ast.AugAssign, ast.AnnAssign) else [])  # type: ignore[attr-defined]
            for target in targets:
                for part in walk(target) if type(target) in (ast.Tuple, ast.List) else [target]:
                    if type(part) is ast.Attribute:
                        found.add(part.attr)
        index.shared["option_assigned"] = found
    return dest in found  # type: ignore[operator]


def _parsers_of(index: AstIndex, name: str, scope: AstScope, depth: int, seen: Set[Tuple[str, int]]
                ) -> Optional[List[ast.Call]]:
    """The ``ArgumentParser(...)`` calls whose ``parse_args()`` the name ``name`` holds in ``scope``; None where
    any binding of it is something else."""
    key = (name, id(scope))
    if depth > 4 or key in seen:
        return None
    seen = seen | {key}
    values = index.values_of(name, scope) or (index.values_of(name, index.tree) if scope is not index.tree else [])
    where = scope if index.values_of(name, scope) else index.tree
    if not values:
        return None
    found: List[ast.Call] = []
    for value in values:
        if value is None:
            passed = _passed_for_parameter(index, where, name)
            if passed is None:
                return None
            for argument, caller in passed:
                if type(argument) is ast.Name:
                    parsers = _parsers_of(index, argument.id, caller, depth + 1, seen)
                else:
                    parsers = _parsed_by(index, argument, caller, depth + 1, seen)
                if parsers is None:
                    return None
                found += parsers
            continue
        parsers = _parsed_by(index, value, where, depth, seen)
        if parsers is None:
            return None
        found += parsers
    return found


def _parsed_by(index: AstIndex, value: ast.AST, scope: AstScope, depth: int = 0,
               seen: Set[Tuple[str, int]] = frozenset()) -> Optional[List[ast.Call]]:  # type: ignore[assignment]
    """The parser of ``parser.parse_args(...)``, or the parsers whose ``parse_args()`` a call of a module-level
    function of the file returns (``opt = parse_option()``, ``def parse_option(): ...; return
    parser.parse_args()``, also through a name bound in it)."""
    if type(value) is not ast.Call:
        return None
    func = value.func  # type: ignore[attr-defined]
    if type(func) is ast.Name:
        returned = module_function_returns(index, func.id)
        if returned is None or depth > 4:
            return None
        function, returns = returned
        found: List[ast.Call] = []
        for node in returns:
            parsers = _parsers_of(index, node.value.id, function, depth + 1, seen) if type(node.value) is ast.Name \
                else _parsed_by(index, node.value, function, depth + 1, seen)  # type: ignore[arg-type]
            if parsers is None:
                return None
            found += parsers
        return found or None
    if type(func) is not ast.Attribute or func.attr != "parse_args" or type(func.value) is not ast.Name:
        return None
    parser = _parser(index, func.value.id, scope)
    return [parser] if parser is not None else None


def _parser(index: AstIndex, name: str, scope: AstScope) -> Optional[ast.Call]:
    """The one ``argparse.ArgumentParser(...)`` the name is bound to, seen from ``scope``."""
    value = index.single_value(name, scope)
    if type(value) is ast.Call and index.qualified_name(value.func) in _PARSERS:  # type: ignore[attr-defined]
        return value  # type: ignore[return-value]
    return None


def _passed_for_parameter(index: AstIndex, function: AstScope, name: str
                          ) -> Optional[List[Tuple[ast.expr, AstScope]]]:
    """(argument, the caller's scope) for every way the file runs ``function`` with a value for its parameter
    ``name``: its calls by name, and ``torch.multiprocessing.spawn(function, args=(...))``. None where the
    name is no parameter, the function is used otherwise (handed elsewhere), or a call passes ``*args``."""
    if not is_parameter(function, name) or index.class_of.get(function) is not None:
        return None
    # every mention of the function's name: each call (or spawn) of it below accounts for one
    uses = sum(1 for node in ast.walk(index.tree) if type(node) is ast.Name and node.id == function.name)  # type: ignore[attr-defined]
    found: List[Tuple[ast.expr, AstScope]] = []
    for info in index.calls:
        call = info.node
        scope = info.function or index.tree
        if type(call.func) is ast.Name and call.func.id == function.name:  # type: ignore[attr-defined]
            passed: List[ast.expr] = list(call.args)
            offset = 0
        elif index.qualified_name(call.func) in _SPAWNS and call.args and type(call.args[0]) is ast.Name \
                and call.args[0].id == function.name:  # type: ignore[attr-defined]
            given = keyword_value(call, "args")
            if type(given) is not ast.Tuple:
                return None
            passed = list(given.elts)  # type: ignore[attr-defined]
            offset = 1  # the process index comes first
        else:
            continue
        if has_star(call) or any(type(p) is ast.Starred for p in passed):
            return None
        value = argument_for(function, name, passed, call.keywords if offset == 0 else (), offset)
        if value is None:
            return None  # left at its default, or passed in a way not read here
        found.append((value, scope))
    if not found or uses != len(found):
        return None  # also referred to otherwise: its other callers are not in sight
    return found


def _default(index: AstIndex, parser: ast.Call, dest: str) -> Optional[ast.expr]:
    """The default of the one option with destination ``dest`` that ``parser`` adds (itself, through a group
    of it, or through a parser of its ``parents=``)."""
    options = _options_of(index, parser, 0)
    if options is None:
        return None
    declared = [call for call in options if _destination(call) == dest]
    if len(declared) != 1:
        return None
    call = declared[0]
    if keyword_value(call, "action") is not None or keyword_value(call, "nargs") is not None or has_star(call):
        return None
    return keyword_value(call, "default")


def _options_of(index: AstIndex, parser: ast.Call, depth: int) -> Optional[List[ast.Call]]:
    """The ``add_argument`` calls on ``parser`` or a group of it, and those of the parsers its ``parents=``
    lists; None where it (or a parent) has subparsers or ``set_defaults``, or a parent the file does not show."""
    if depth > 3:
        return None
    options: List[ast.Call] = []
    for method in ("add_argument", "add_subparsers", "set_defaults"):
        for info in index.calls_by_name.get(method, ()):
            func = info.node.func
            if type(func) is not ast.Attribute or type(func.value) is not ast.Name:  # type: ignore[attr-defined]
                continue
            if _owner(index, func.value.id, info.function or index.tree, 0) is not parser:  # type: ignore[attr-defined]
                continue
            if method != "add_argument":
                return None
            options.append(info.node)
    parents = keyword_value(parser, "parents")
    if parents is not None:
        if type(parents) is not ast.List:
            return None
        for element in parents.elts:  # type: ignore[attr-defined]
            parent = _parent_parser(index, element, index.scope_of(parser))
            more = _options_of(index, parent, depth + 1) if parent is not None else None
            if more is None:
                return None
            options += more
    return options


def _owner(index: AstIndex, name: str, scope: AstScope, depth: int) -> Optional[ast.Call]:
    """The ``ArgumentParser(...)`` that ``name`` holds in ``scope``, directly or as a group of it."""
    value, where = index.single_value_and_scope(name, scope)
    if type(value) is not ast.Call or depth > 3:
        return None
    if index.qualified_name(value.func) in _PARSERS:  # type: ignore[attr-defined]
        return value  # type: ignore[return-value]
    func = value.func  # type: ignore[attr-defined]
    if type(func) is ast.Attribute and func.attr in _GROUPS and type(func.value) is ast.Name:
        return _owner(index, func.value.id, where, depth + 1)
    return None


def _parent_parser(index: AstIndex, expr: ast.expr, scope: AstScope) -> Optional[ast.Call]:
    """A parser listed in ``parents=``: a name bound to one, or a call of a module-level function of the file
    that returns one (``parents=[get_arguments()]``)."""
    if type(expr) is ast.Name:
        return _owner(index, expr.id, scope, 0)
    if type(expr) is not ast.Call or type(expr.func) is not ast.Name:  # type: ignore[attr-defined]
        return None
    returned = module_function_returns(index, expr.func.id)  # type: ignore[attr-defined]
    if returned is None:
        return None
    function, returns = returned
    found = {id(p): p for p in (_owner(index, r.value.id, function, 0) if type(r.value) is ast.Name else None
                                for r in returns)}
    return next(iter(found.values())) if len(found) == 1 else None


def _destination(call: ast.Call) -> Optional[str]:
    """Where ``add_argument(...)`` stores its value: ``dest=``, else the first long option (``--num-workers``:
    ``num_workers``), else the first short one, else the positional's name."""
    dest = keyword_value(call, "dest")
    if dest is not None:
        return dest.value if type(dest) is ast.Constant and type(dest.value) is str else None  # type: ignore[attr-defined]
    strings = [a.value for a in call.args if type(a) is ast.Constant and type(a.value) is str]  # type: ignore[attr-defined]
    if len(strings) != len(call.args) or not strings:
        return None
    long = [s for s in strings if s.startswith("--")]
    if long:
        return long[0][2:].replace("-", "_")
    short = [s for s in strings if s.startswith("-")]
    if short:
        return short[0].lstrip("-").replace("-", "_")
    return strings[0]
