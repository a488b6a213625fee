"""Which ``nn.Module`` a file applies right before another: inside an ``nn.Sequential``, and from
``__init__`` to ``forward``.

The file shows the order in which modules run in a few forms only: adjacent arguments of
``nn.Sequential(...)`` (positional, or the pairs of an ``OrderedDict``), adjacent items of a list that
is later passed as ``nn.Sequential(*layers)`` (a literal, ``layers.append(...)``, ``layers.extend([...])``,
``layers += [...]``, also a list a block helper returns and the file splices in), consecutive
``add_module(...)`` calls on an ``nn.Sequential``; and in a module class, ``self.<attr>`` modules assigned
once and applied in ``forward`` as ``self.b(self.a(x))`` or ``x = self.a(x)`` then ``x = self.b(x)``.
Anything else between two modules (an activation, a condition with an ``else``) and the pair is not one.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

from torchlint.facts.index import (Argument, AstIndex, AstScope, arguments, call_name, called_origin, dotted_name,
                                   parameter_default,
                                   origins_of, walk)

SEQUENTIAL = "torch.nn.Sequential"
_ORDERED_DICT = ("collections.OrderedDict", "typing.OrderedDict")
_APPENDERS = ("append", "extend")
_SIMPLE_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class Layer:
    """A torch layer TL301 knows: a producer (Conv, Linear) or a BatchNorm, and where its arguments are."""

    kind: str  # "conv" | "linear" | "bn"
    dim: Optional[int]  # 1/2/3; None for SyncBatchNorm (any)
    count_index: Optional[int]  # positional index of out_channels/out_features/num_features
    count_keyword: Optional[str]
    bias_index: Optional[int] = None  # positional index of `bias` (producers only)


def _layer_table() -> Dict[str, Layer]:
    table: Dict[str, Layer] = {}
    for d in (1, 2, 3):
        table[f"Conv{d}d"] = Layer("conv", d, 1, "out_channels", 7)
        table[f"ConvTranspose{d}d"] = Layer("conv", d, 1, "out_channels", 7)
        table[f"LazyConv{d}d"] = Layer("conv", d, 0, "out_channels", 6)
        table[f"LazyConvTranspose{d}d"] = Layer("conv", d, 0, "out_channels", 6)
        table[f"BatchNorm{d}d"] = Layer("bn", d, 0, "num_features")
        table[f"LazyBatchNorm{d}d"] = Layer("bn", d, None, None)
    table["Linear"] = Layer("linear", 1, 1, "out_features", 2)
    table["LazyLinear"] = Layer("linear", 1, 0, "out_features", 1)
    table["SyncBatchNorm"] = Layer("bn", None, 0, "num_features")
    return {f"torch.nn.{name}": layer for name, layer in table.items()}


LAYERS = _layer_table()


def argument_of(index: AstIndex, node: ast.expr) -> Optional[Tuple[ast.Call, int, Argument]]:
    """The call that takes ``node`` as an argument (``*node`` and ``key=node`` included, not as its
    ``func``), with the argument's place in ``arguments(call)``."""
    parent = index.parent(node)
    holder = index.parent(parent) if type(parent) in (ast.Starred, ast.keyword) else parent
    if type(holder) is not ast.Call or holder.func is node:  # type: ignore[union-attr]
        return None
    for position, argument in enumerate(arguments(holder)):  # type: ignore[arg-type]
        if argument.value is node:
            return holder, position, argument  # type: ignore[return-value]
    return None


def is_sequential(index: AstIndex, node: Optional[ast.AST]) -> bool:
    return type(node) is ast.Call and index.qualified_name(node.func) == SEQUENTIAL  # type: ignore[union-attr]


def self_attribute(node: Optional[ast.AST]) -> Optional[str]:
    """``attr`` for ``self.<attr>``."""
    if type(node) is ast.Attribute and type(node.value) is ast.Name and node.value.id == "self":  # type: ignore[union-attr]
        return node.attr  # type: ignore[union-attr]
    return None


def names_spelled(nodes: List[ast.AST], name: str) -> int:
    """How often ``name`` is written as a name in ``nodes``: variables, attribute and keyword names,
    parameters, defs, imports (LibCST's ``Name`` nodes)."""
    count = 0
    for top in nodes:
        for node in ast.walk(top):
            kind = type(node)
            if kind is ast.Name:
                count += node.id == name  # type: ignore[attr-defined]
            elif kind is ast.Attribute:
                count += node.attr == name  # type: ignore[attr-defined]
            elif kind is ast.keyword or kind is ast.arg:
                count += node.arg == name  # type: ignore[attr-defined]
            elif kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler, ast.MatchAs,
                          ast.MatchStar):
                count += node.name == name  # type: ignore[attr-defined]
            elif kind is ast.alias:
                count += name in node.name.split(".") + [node.asname]  # type: ignore[attr-defined]
            elif kind is ast.MatchMapping:
                count += node.rest == name  # type: ignore[attr-defined]
            elif kind is ast.MatchClass:
                count += node.kwd_attrs.count(name)  # type: ignore[attr-defined]
            elif kind is ast.ImportFrom:
                count += name in (node.module or "").split(".")  # type: ignore[attr-defined]
            elif kind is ast.Global or kind is ast.Nonlocal:
                count += node.names.count(name)  # type: ignore[attr-defined]
    return count


# --- nn.Sequential(...), OrderedDict, lists passed to nn.Sequential(*layers), add_module -----------------
@dataclass(frozen=True)
class Before:
    """The module applied right before another: ``module`` (a call, or a name bound to one) written in
    ``holder`` (the call, list or statement that shows the order; ``module``'s names are in its scope), and
    the ``if`` under whose test the second one follows (``if normalize: layers.append(bn)``), if any."""

    module: ast.expr
    holder: ast.AST
    guard: Optional[ast.If] = None


def module_before(index: AstIndex, node: ast.Call) -> Optional[Before]:
    """The expression applied right before ``node`` in a Sequential, an OrderedDict or a layer list."""
    argument = argument_of(index, node)
    if argument is not None:
        holder, position, arg = argument
        if arg.star:
            return None
        if is_sequential(index, holder) and arg.keyword is None:
            return _previous_argument(holder, position, keywords=False)
        if arg.keyword is not None and _is_ordered_dict_in_sequential(index, holder):
            return _previous_argument(holder, position, keywords=True)
        count = len(holder.args) + len(holder.keywords)
        if call_name(holder) == "append" and arg.keyword is None and count == 1:
            return _previous_statement_item(index, holder)
        if call_name(holder) == "add_module" and count == 2 and position == 1:
            return _previous_add_module(index, holder)
        return None
    container = index.parent(node)
    if type(container) not in (ast.List, ast.Tuple) or _is_subscript_elements(index, container):
        return None
    elements = container.elts  # type: ignore[union-attr]
    at = next(i for i, e in enumerate(elements) if e is node)
    if type(container) is ast.Tuple and len(elements) == 2 and at == 1:
        return _ordered_dict_pair_before(index, container)  # type: ignore[arg-type]
    if not _flows_into_sequential(index, container):  # type: ignore[arg-type]
        return None
    if at > 0:
        previous = elements[at - 1]
        return None if type(previous) is ast.Starred else Before(previous, container)  # type: ignore[arg-type]
    return _previous_statement_item(index, container)  # type: ignore[arg-type]


def _is_subscript_elements(index: AstIndex, container: ast.AST) -> bool:
    """``x[a, b]``: LibCST's subscript elements, no tuple (``x[(a, b)]`` is one)."""
    parent = index.parent(container)
    return (type(parent) is ast.Subscript and parent.slice is container  # type: ignore[union-attr]
            and not index.has_own_brackets(container))  # type: ignore[arg-type]


def _previous_argument(call: ast.Call, position: int, keywords: bool) -> Optional[Before]:
    if position == 0:
        return None
    previous = arguments(call)[position - 1]
    if previous.star or (previous.keyword is not None) != keywords:
        return None
    return Before(previous.value, call)


def _previous_add_module(index: AstIndex, call: ast.Call) -> Optional[Before]:
    """``seq.add_module("bn", BatchNorm2d(n))`` right after ``seq.add_module("conv", Conv2d(...))``, where
    ``seq`` is an ``nn.Sequential`` (``self`` in a subclass of it): the order added is the order applied."""
    small = index.parent(call)
    owner = call.func.value if type(call.func) is ast.Attribute else None  # type: ignore[attr-defined]
    if type(small) is not ast.Expr or owner is None or not _is_sequential_object(index, owner, call):
        return None
    previous = index.simple_statement_next_to(small, -1)  # type: ignore[arg-type]
    if not (type(previous) is ast.Expr and type(previous.value) is ast.Call):  # type: ignore[union-attr]
        return None
    before: ast.Call = previous.value  # type: ignore[union-attr]
    given = arguments(before)
    if call_name(before) != "add_module" or len(given) != 2 or any(arg.star for arg in given):
        return None
    receiver = before.func.value if type(before.func) is ast.Attribute else None  # type: ignore[attr-defined]
    if type(receiver) is not ast.Name or receiver.id != owner.id:  # type: ignore[union-attr,attr-defined]
        return None
    return Before(given[1].value, before)


def _is_sequential_object(index: AstIndex, owner: ast.expr, call: ast.Call) -> bool:
    if type(owner) is not ast.Name:
        return False
    if owner.id == "self":  # type: ignore[attr-defined]
        klass = next((n for n in index.ancestors(call) if type(n) is ast.ClassDef), None)
        return klass is not None and any(index.qualified_name(base) == SEQUENTIAL for base in klass.bases)  # type: ignore[attr-defined]
    return is_sequential(index, index.single_value(owner.id, index.scope_of(call)))  # type: ignore[attr-defined]


def _is_ordered_dict_in_sequential(index: AstIndex, call: ast.Call) -> bool:
    func = call.func
    if not (index.qualified_name(func) in _ORDERED_DICT or (type(func) is ast.Name and func.id == "OrderedDict")):
        return False
    argument = argument_of(index, call)
    return (argument is not None and not argument[2].star and argument[2].keyword is None
            and is_sequential(index, argument[0]))


def _ordered_dict_pair_before(index: AstIndex, pair: ast.Tuple) -> Optional[Before]:
    """``OrderedDict([("conv", Conv2d(...)), ("bn", BatchNorm2d(...))])``: the module of the pair before."""
    outer = index.parent(pair)
    if type(outer) not in (ast.List, ast.Tuple) or _is_subscript_elements(index, outer):  # type: ignore[arg-type]
        return None
    argument = argument_of(index, outer)  # type: ignore[arg-type]
    if argument is None or argument[2].star or argument[2].keyword is not None:
        return None
    holder = argument[0]
    if not _is_ordered_dict_in_sequential(index, holder):
        return None
    elements = outer.elts  # type: ignore[union-attr]
    at = next(i for i, e in enumerate(elements) if e is pair)
    if at == 0:
        return None
    previous = elements[at - 1]
    previous = previous.value if type(previous) is ast.Starred else previous
    if type(previous) is not ast.Tuple or len(previous.elts) != 2:
        return None
    element = previous.elts[1]
    return Before(element.value if type(element) is ast.Starred else element, holder)


def _list_name_of(index: AstIndex, node: ast.expr) -> Optional[Tuple[str, ast.stmt]]:
    """For a list literal or an ``x.append(...)`` call: the list's name and the statement."""
    parent = index.parent(node)
    if type(node) is ast.Call:  # layers.append(module)
        target = node.func.value if type(node.func) is ast.Attribute else None  # type: ignore[attr-defined]
        if type(target) is ast.Name and type(parent) is ast.Expr:
            return target.id, parent  # type: ignore[union-attr,return-value]
        return None
    kind = type(parent)
    if kind is ast.Assign and parent.value is node and len(parent.targets) == 1 \
            and type(parent.targets[0]) is ast.Name:  # type: ignore[union-attr]
        return parent.targets[0].id, parent  # type: ignore[union-attr,return-value]
    if kind is ast.AugAssign and parent.value is node and type(parent.op) is ast.Add \
            and type(parent.target) is ast.Name:  # type: ignore[union-attr]
        return parent.target.id, parent  # type: ignore[union-attr,return-value]
    argument = argument_of(index, node)
    if argument is not None and not argument[2].star and argument[2].keyword is None:
        call = argument[0]
        if call_name(call) == "extend" and len(call.args) + len(call.keywords) == 1:
            return _list_name_of(index, call)
    return None


def _flows_into_sequential(index: AstIndex, container: ast.expr) -> bool:
    argument = argument_of(index, container)
    if argument is not None and argument[2].star == "*" and is_sequential(index, argument[0]):
        return True
    found = _list_name_of(index, container)
    if found is None:
        return False
    return _passed_to_sequential(index, found[0], index.scope_of(container))


def _passed_to_sequential(index: AstIndex, name: str, scope: AstScope, follow_returns: bool = True) -> bool:
    """``nn.Sequential(*name)`` in ``scope`` (not in a def inside it), or ``scope`` a helper that returns
    the list ``name`` and the file splices its result into one."""
    calls = index.calls if scope is index.tree else index.calls_in(scope)
    function = None if scope is index.tree else scope
    for info in calls:
        if info.function is not function or not is_sequential(index, info.node):
            continue
        if any(type(arg) is ast.Starred and type(arg.value) is ast.Name and arg.value.id == name  # type: ignore[attr-defined]
               for arg in info.node.args):
            return True
    return (follow_returns and type(scope) in _SIMPLE_FUNCTIONS and _returns_name(scope, name)  # type: ignore[arg-type]
            and _spliced_into_sequential(index, scope.name))  # type: ignore[union-attr]


def _returns_name(function: ast.AST, name: str) -> bool:
    return any(type(node) is ast.Return and type(node.value) is ast.Name and node.value.id == name  # type: ignore[attr-defined]
               for statement in function.body for node in ast.walk(statement))  # type: ignore[attr-defined]


def _spliced_into_sequential(index: AstIndex, helper: str) -> bool:
    """``nn.Sequential(*helper(...), ...)`` somewhere in the file: the helper's list is a layer sequence."""
    for info in index.calls_by_name.get(helper, ()):
        call = info.node
        argument = argument_of(index, call)
        if argument is not None and argument[2].star == "*" and is_sequential(index, argument[0]):
            return True
        # layers.extend(helper(...)) / layers += helper(...), then nn.Sequential(*layers)
        parent = index.parent(call)
        found = None
        if argument is not None and not argument[2].star and argument[2].keyword is None:
            holder = argument[0]
            if call_name(holder) == "extend" and len(holder.args) + len(holder.keywords) == 1:
                found = _list_name_of(index, holder)
        elif type(parent) is ast.AugAssign and type(parent.op) is ast.Add and parent.value is call \
                and type(parent.target) is ast.Name:  # type: ignore[union-attr]
            found = (parent.target.id, parent)  # type: ignore[union-attr]
        if found is not None and _passed_to_sequential(index, found[0], index.scope_of(call), follow_returns=False):
            return True
    return False


def _previous_statement_item(index: AstIndex, node: ast.expr) -> Optional[Before]:
    """``node`` (a list literal or ``layers.append`` call) starts a statement that adds to a layer list: the
    last module the statement right before it added to the same list."""
    found = _list_name_of(index, node)
    if found is None:
        return None
    name, small = found
    if type(small) is ast.Assign:
        return None  # `layers = [bn, ...]` starts the list
    if not _passed_to_sequential(index, name, index.scope_of(node)):
        return None
    previous = index.simple_statement_next_to(small, -1)
    guard = None
    if previous is None:
        # `if normalize:` / `if bn:` right after the module, holding only this statement, with no else
        guard = index.parent(small)
        if not (type(guard) is ast.If and guard.body == [small] and not guard.orelse):  # type: ignore[union-attr]
            return None
        previous = index.simple_statement_next_to(guard, -1)  # type: ignore[arg-type]
        if previous is None:
            return None
    last = _last_added(previous, name)
    return None if last is None else Before(last, previous, guard)  # type: ignore[arg-type]


def _last_added(statement: ast.stmt, name: str) -> Optional[ast.expr]:
    """The last module ``statement`` adds to the list ``name``, if it is one of the forms followed."""
    sequence = None
    kind = type(statement)
    if kind is ast.Expr and type(statement.value) is ast.Call:  # type: ignore[attr-defined]
        call: ast.Call = statement.value  # type: ignore[attr-defined]
        func = call.func
        if (type(func) is ast.Attribute and type(func.value) is ast.Name and func.value.id == name
                and func.attr in _APPENDERS and len(call.args) == 1 and not call.keywords
                and type(call.args[0]) is not ast.Starred):
            if func.attr == "append":
                return call.args[0]
            sequence = call.args[0]
    elif kind is ast.AugAssign:
        if type(statement.target) is ast.Name and statement.target.id == name and type(statement.op) is ast.Add:  # type: ignore[attr-defined]
            sequence = statement.value  # type: ignore[attr-defined]
    elif kind is ast.Assign:
        targets = statement.targets  # type: ignore[attr-defined]
        if len(targets) == 1 and type(targets[0]) is ast.Name and targets[0].id == name:
            sequence = statement.value  # type: ignore[attr-defined]
    if type(sequence) in (ast.List, ast.Tuple) and sequence.elts:  # type: ignore[union-attr]
        last = sequence.elts[-1]  # type: ignore[union-attr]
        return None if type(last) is ast.Starred else last
    return None


# --- modules assigned in __init__ and applied in forward --------------------------------------------
@dataclass
class ClassAttributes:
    """The ``self.<attr>`` facts of one class body (decorators and bases included)."""

    assigned: Dict[str, List[ast.expr]] = field(default_factory=dict)  # the values `self.<attr> = ...` gives
    calls: Dict[str, List[ast.Call]] = field(default_factory=dict)  # `self.<attr>(...)`, in source order
    other_uses: Dict[str, int] = field(default_factory=dict)  # references that are neither call nor assignment
    attributes_read: Dict[str, Set[str]] = field(default_factory=dict)  # `self.<attr>.<name>`: attr -> names


def class_attributes(index: AstIndex, klass: ast.ClassDef) -> ClassAttributes:
    """``klass``'s ``self.<attr>`` facts, found once per class and file."""
    known: Dict[ast.ClassDef, ClassAttributes] = index.shared.setdefault("modules.class_attributes", {})  # type: ignore[assignment]
    facts = known.get(klass)
    if facts is None:
        facts = known[klass] = _class_attributes(klass)
    return facts


def _class_attributes(klass: ast.ClassDef) -> ClassAttributes:
    from torchlint.facts.index import source_order

    facts = ClassAttributes()
    nodes = sorted((n for n in walk(klass) if hasattr(n, "lineno")), key=source_order)
    accounted: Set[int] = set()  # self.<attr> nodes already counted as an assignment or a call
    for node in nodes:
        kind = type(node)
        if kind is ast.Assign:
            for target in node.targets:  # type: ignore[attr-defined]
                attr = self_attribute(target)
                if attr is not None:
                    facts.assigned.setdefault(attr, []).append(node.value)  # type: ignore[attr-defined]
                    accounted.add(id(target))
        elif kind is ast.AnnAssign:
            attr = self_attribute(node.target)  # type: ignore[attr-defined]
            if attr is not None and node.value is not None:  # type: ignore[attr-defined]
                facts.assigned.setdefault(attr, []).append(node.value)  # type: ignore[attr-defined]
                accounted.add(id(node.target))  # type: ignore[attr-defined]
        elif kind is ast.Call:
            attr = self_attribute(node.func)  # type: ignore[attr-defined]
            if attr is not None:
                facts.calls.setdefault(attr, []).append(node)  # type: ignore[arg-type]
                accounted.add(id(node.func))  # type: ignore[attr-defined]
    for node in nodes:
        if type(node) is not ast.Attribute or id(node) in accounted:
            continue
        inner = self_attribute(node.value)  # type: ignore[attr-defined]
        if inner is not None:
            facts.attributes_read.setdefault(inner, set()).add(node.attr)  # type: ignore[attr-defined]
        attr = self_attribute(node)
        if attr is not None:
            facts.other_uses[attr] = facts.other_uses.get(attr, 0) + 1
    return facts


def applied_to_output_of(index: AstIndex, use: ast.Call) -> Optional[str]:
    """For a call ``self.b(...)``: the ``self.<attr>`` module whose output it takes directly, as
    ``self.b(self.a(x))``, or ``x = self.a(x)`` right before ``x = self.b(x)`` / ``return self.b(x)`` that
    uses ``x`` only there."""
    if len(use.args) + len(use.keywords) != 1 or not use.args or type(use.args[0]) is ast.Starred:
        return None
    value = use.args[0]
    if type(value) is ast.Call:  # self.bn(self.conv(x))
        return self_attribute(value.func)
    if type(value) is not ast.Name:
        return None
    name = value.id
    small = next((n for n in index.ancestors(use) if isinstance(n, ast.stmt)), None)
    if type(small) is ast.Assign:
        if not (len(small.targets) == 1 and type(small.targets[0]) is ast.Name and small.targets[0].id == name):  # type: ignore[union-attr]
            return None
    elif type(small) is not ast.Return:
        return None
    if small.value is None or names_spelled([small.value], name) != 1:  # type: ignore[union-attr]
        return None
    previous = index.simple_statement_next_to(small, -1)  # type: ignore[arg-type]
    if not (type(previous) is ast.Assign and len(previous.targets) == 1 and type(previous.targets[0]) is ast.Name
            and previous.targets[0].id == name and type(previous.value) is ast.Call):  # type: ignore[union-attr]
        return None
    return self_attribute(previous.value.func)  # type: ignore[union-attr]


def applied_next(index: AstIndex, use: ast.Call) -> List[ast.Call]:
    """For a call ``self.a(...)``: the calls ``self.<attr>(...)`` that may take its output right away
    (``applied_to_output_of`` answers for each): the call around it, or the calls of the next statement."""
    parent = index.parent(use)
    argument = argument_of(index, use)
    if argument is not None:  # self.bn(self.conv(x))
        outer = argument[0]
        return [outer] if self_attribute(outer.func) is not None and applied_to_output_of(index, outer) is not None else []
    if type(parent) is not ast.Assign:
        return []
    following = index.simple_statement_next_to(parent, 1)  # type: ignore[arg-type]
    if following is None:
        return []
    return [info.node for info in index.calls_in(following)
            if self_attribute(info.node.func) is not None and applied_to_output_of(index, info.node) is not None]


def classes_building(index: AstIndex, layers: List[ast.Call]) -> Set[str]:
    """Names of the file's classes that build one of ``layers`` (calls such as ``nn.Conv2d(...)``), directly
    or through other such classes (``Net`` uses ``Block``, ``Block`` holds the ``Conv2d``)."""
    def class_of(node: ast.AST) -> Optional[str]:
        return next((a.name for a in index.ancestors(node) if isinstance(a, ast.ClassDef)), None)

    names = {name for name in map(class_of, layers) if name is not None}
    for _ in range(3):
        users = {class_of(info.node) for name in names for info in index.calls_by_name.get(name, ())
                 if isinstance(info.node.func, ast.Name)}
        users = {u for u in users if u is not None} - names
        if not users:
            break
        names |= users
    return names


# --- which classes derive from no ``nn.Module``: their bases, through the file and the project --------------
# Standard-library modules: no class of theirs derives from a torch Module (a fixed list, not the interpreter's,
# so that the answer does not depend on the Python that runs torchlint)
_PLAIN_MODULES = frozenset({
    "abc", "argparse", "collections", "contextlib", "dataclasses", "enum", "io", "json", "logging",
    "multiprocessing", "numbers", "queue", "threading", "types", "typing", "unittest",
})
_MODE_METHODS = ("train", "eval")  # `x.train()` / `x.eval()` switch modules where a class's own method does
UNKNOWN_BASE = "?"


def class_summary(tree: ast.Module) -> dict:
    """What other files of the project may need of this one's module-level classes, as plain data (JSON,
    from this file's tree alone, no index: a summary of an imported file need not walk it): per class, its
    ``bases`` as the file names them (the name of another module-level class of the file; ``[module, level,
    name]`` of a name the file imports at module level, ``nn.Module`` included; ``"?"`` for anything else;
    ``object`` and the other builtin classes left out), its ``methods`` (the defs of its body) and ``modal``:
    which of its own ``train`` / ``eval`` methods make a call (``self.net.eval()``), and so may switch a
    module's mode (``def eval(self): self.training = False`` switches none). ``in_file_classes`` keeps it
    for the file's own check."""
    statements = list(_module_level(tree.body))
    origins = origins_of([s for s in statements if type(s) in (ast.Import, ast.ImportFrom)])
    top = [statement for statement in tree.body if type(statement) is ast.ClassDef]
    names = [klass.name for klass in top]
    bound = _bound_at_module_level(statements)

    def base_of(base: ast.expr) -> Optional[object]:
        if type(base) is ast.Subscript:  # `Generic[T]`
            base = base.value  # type: ignore[attr-defined]
        if type(base) is ast.Name and base.id not in origins:  # type: ignore[attr-defined]
            if base.id in names:  # type: ignore[attr-defined]
                return base.id  # type: ignore[attr-defined]
            known = getattr(builtins, base.id, None)  # type: ignore[attr-defined]
            return None if isinstance(known, type) and base.id not in bound else UNKNOWN_BASE  # type: ignore[attr-defined]
        written = dotted_name(base)
        origin = called_origin(origins, written) if written is not None and origins else None
        return list(origin) if origin is not None else UNKNOWN_BASE

    classes: Dict[str, dict] = {}
    for klass in top:
        defs = [statement for statement in klass.body if type(statement) in _SIMPLE_FUNCTIONS]
        bases = [found for found in map(base_of, klass.bases) if found is not None]
        if names.count(klass.name) > 1 or klass.name in bound:
            bases = [UNKNOWN_BASE]  # made twice, or bound to something else too: which one is unknown
        classes[klass.name] = {
            "bases": bases, "methods": list(dict.fromkeys(d.name for d in defs)),
            "modal": sorted({d.name for d in defs if d.name in _MODE_METHODS  # type: ignore[attr-defined]
                             and any(type(node) is ast.Call for node in ast.walk(d))})}
        wraps = conv_wrapper(klass, origins) if names.count(klass.name) == 1 and klass.name not in bound else None
        if wraps is not None:
            classes[klass.name]["wraps"] = wraps
    return {"classes": classes} if classes else {}


def conv_wrapper(klass: ast.ClassDef, origins: Dict[str, Tuple[str, int, Optional[str]]]) -> Optional[dict]:
    """Where the class's ``forward(self, x)`` returns the output of a torch conv it builds in ``__init__``
    (``self.conv = nn.Conv1d(...)``, assigned once there and nowhere else; ``return self.conv(x)``, also through
    one local name), what its bias is, as plain data: ``layer`` (its qualified name), ``line``, ``bias``
    (``True``: always on; or ``[parameter, position, default]``: ``bias=<parameter>`` of ``__init__`` passed on
    unchanged, its position after ``self`` (None: keyword-only) and its default, ``True``/``False`` or ``"?"``
    for another or none) and ``exact``: nothing else in the class names the conv or a ``.bias``, so that passing
    ``bias=False`` to the class changes that conv's bias only (an init of its ``.weight`` aside). None for any other class (an activation after the
    conv, a bias the class computes, ``*args`` or ``**kwargs`` at the conv)."""
    defs = {d.name: d for d in klass.body if type(d) is ast.FunctionDef}
    init, forward = defs.get("__init__"), defs.get("forward")
    if init is None or forward is None or len(defs) != sum(type(d) is ast.FunctionDef for d in klass.body):
        return None  # (a def given twice: which one runs is the last; left out)
    attribute = _returned_attribute(forward)
    if attribute is None:
        return None
    built = [s for s in init.body if type(s) is ast.Assign and len(s.targets) == 1
             and _self_attribute_named(s.targets[0]) == attribute]
    if len(built) != 1 or type(built[0].value) is not ast.Call:
        return None
    call: ast.Call = built[0].value  # type: ignore[assignment]
    written = dotted_name(call.func)
    origin = called_origin(origins, written) if written is not None else None
    qualified = f"{origin[0]}.{origin[2]}" if origin is not None and not origin[1] else None
    layer = LAYERS.get(qualified) if qualified is not None else None
    if layer is None or layer.kind != "conv" or any(type(a) is ast.Starred for a in call.args) \
            or any(k.arg is None for k in call.keywords):
        return None
    given = next((k.value for k in call.keywords if k.arg == "bias"), None)
    if given is None and layer.bias_index is not None and layer.bias_index < len(call.args):
        given = call.args[layer.bias_index]
    bias: object
    if given is None or (type(given) is ast.Constant and given.value is True):
        bias = True
    elif type(given) is ast.Name and _never_rebound(init, given.id):
        parameters = [a.arg for a in (*init.args.posonlyargs, *init.args.args)][1:]
        if given.id in parameters:
            position: Optional[int] = parameters.index(given.id)
        elif given.id in [a.arg for a in init.args.kwonlyargs]:
            position = None
        else:
            return None  # a name of another scope
        default = parameter_default(init, given.id)
        bias = [given.id, position, default.value if type(default) is ast.Constant and type(default.value) is bool
                else "?"]
    else:
        return None  # `bias=False`, or a value the class computes
    # the conv is named twice in the class (built, applied) besides reads of its `.weight` (an init), and no
    # `.bias` is read: the bias is the parameter's alone
    weights = {id(node.value) for node in ast.walk(klass) if type(node) is ast.Attribute and node.attr == "weight"}
    named = sum(1 for node in ast.walk(klass) if _self_attribute_named(node) == attribute and id(node) not in weights)
    reads_bias = any(type(node) is ast.Attribute and node.attr == "bias" for node in ast.walk(klass))
    return {"layer": qualified, "line": call.lineno, "bias": bias, "exact": named == 2 and not reads_bias}


def _self_attribute_named(node: ast.AST) -> Optional[str]:
    if type(node) is ast.Attribute and type(node.value) is ast.Name and node.value.id == "self":  # type: ignore[attr-defined]
        return node.attr  # type: ignore[attr-defined]
    return None


def _returned_attribute(forward: ast.FunctionDef) -> Optional[str]:
    """``self.<attribute>`` where ``forward(self, x)`` only returns ``self.<attribute>(x)`` (directly, or bound
    to one name first): its output is that module's."""
    parameters = [*forward.args.posonlyargs, *forward.args.args]
    if len(parameters) != 2 or forward.args.vararg or forward.args.kwonlyargs or forward.args.kwarg \
            or forward.decorator_list:
        return None
    given = parameters[1].arg
    body = list(forward.body)
    if body and type(body[0]) is ast.Expr and type(body[0].value) is ast.Constant \
            and isinstance(body[0].value.value, str):
        body = body[1:]  # its docstring
    if len(body) == 2 and type(body[0]) is ast.Assign and len(body[0].targets) == 1 \
            and type(body[0].targets[0]) is ast.Name and type(body[1]) is ast.Return \
            and type(body[1].value) is ast.Name and body[1].value.id == body[0].targets[0].id:
        value: Optional[ast.expr] = body[0].value
    elif len(body) == 1 and type(body[0]) is ast.Return:
        value = body[0].value
    else:
        return None
    if type(value) is not ast.Call or value.keywords or len(value.args) != 1 \
            or type(value.args[0]) is not ast.Name or value.args[0].id != given:
        return None
    return _self_attribute_named(value.func)


def _never_rebound(function: ast.FunctionDef, name: str) -> bool:
    """No statement of ``function`` binds ``name`` (its parameter keeps the value the caller passed)."""
    for node in ast.walk(function):
        if type(node) is ast.Name and node.id == name and type(node.ctx) is not ast.Load:  # type: ignore[attr-defined]
            return False
        if type(node) in (ast.Global, ast.Nonlocal) and name in node.names:  # type: ignore[attr-defined]
            return False
    return True



def star_summary(tree: ast.Module) -> dict:
    """What ``from <this module> import *`` binds, as Python decides it, as plain data from the file's tree:
    the names of a literal ``__all__`` where the module has one, else its public module-level names (defs,
    classes, assignments and the names it imports: ``torch``, ``nn``), each with where it comes from
    (``[module, level, name taken or None]`` for an import, None for a name the module binds itself). A name
    bound twice at module level (``try: import x`` / ``except: x = None``), one only another statement binds,
    and a module whose ``__all__`` is not one literal are left out (unknown, as every star import was)."""
    bound: Dict[str, list] = {}
    declared: Optional[List[str]] = None
    for statement in _module_level(tree.body):
        kind = type(statement)
        if kind is ast.Import:
            for alias in statement.names:  # type: ignore[attr-defined]
                if alias.asname:
                    bound.setdefault(alias.asname, []).append([alias.name, 0, None])
                else:
                    root = alias.name.split(".")[0]
                    bound.setdefault(root, []).append([root, 0, None])
        elif kind is ast.ImportFrom:
            for alias in statement.names:  # type: ignore[attr-defined]
                if alias.name == "*":
                    return {}  # what it brings in turn is not known here
                bound.setdefault(alias.asname or alias.name, []).append(
                    [statement.module or "", statement.level, alias.name])  # type: ignore[attr-defined]
        elif kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            bound.setdefault(statement.name, []).append(None)  # type: ignore[attr-defined]
        elif kind in (ast.Assign, ast.AnnAssign, ast.AugAssign):
            targets = statement.targets if kind is ast.Assign else [statement.target]  # type: ignore[attr-defined]
            for target in targets:
                for node in ast.walk(target):
                    if type(node) is ast.Name:
                        bound.setdefault(node.id, []).append(None)
            if any(type(t) is ast.Name and t.id == "__all__" for t in targets):
                value = statement.value  # type: ignore[attr-defined]
                names = [e.value for e in value.elts] if kind is ast.Assign and type(value) in (ast.List, ast.Tuple) \
                    and all(type(e) is ast.Constant and type(e.value) is str for e in value.elts) else None
                if names is None or declared is not None:
                    return {}  # an `__all__` the file computes, or extends: which names is unknown
                declared = names
    chosen = declared if declared is not None else [name for name in bound if not name.startswith("_")]
    names = {name: bound[name][0] for name in chosen if len(bound.get(name, ())) == 1}
    return {"names": names} if names else {}


def in_file_classes(index: AstIndex) -> Dict[str, dict]:
    """``class_summary``'s classes of the index's file, made once per file."""
    memo = index.shared.get("modules.class_summary")
    if memo is None:
        memo = index.shared["modules.class_summary"] = class_summary(index.tree).get("classes", {})
    return memo  # type: ignore[return-value]


def _module_level(body: List[ast.stmt]):
    """The statements run at module level: ``body`` and the blocks of its ``if`` / ``try`` / ``with``, not defs."""
    for statement in body:
        yield statement
        kind = type(statement)
        if kind is ast.If or kind in _TRY or kind is ast.With:
            for block in ("body", "orelse", "finalbody"):
                yield from _module_level(getattr(statement, block, []))
            for handler in getattr(statement, "handlers", []):
                yield from _module_level(handler.body)


_TRY = tuple(t for t in (ast.Try, getattr(ast, "TryStar", None)) if t is not None)


def _bound_at_module_level(statements: List[ast.stmt]) -> Set[str]:
    """The names module-level statements bind otherwise than by a class or an import: assignments, defs,
    loop targets."""
    bound: Set[str] = set()
    for statement in statements:
        kind = type(statement)
        targets = (statement.targets if kind is ast.Assign else [statement.target] if kind in (  # type: ignore[attr-defined]
            ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor) else [])
        for target in targets:
            bound.update(node.id for node in ast.walk(target) if type(node) is ast.Name)  # type: ignore[attr-defined]
        if kind in _SIMPLE_FUNCTIONS:
            bound.add(statement.name)  # type: ignore[attr-defined]
    return bound


def plain_class(classes: Dict[str, dict], name: str, imported, seen: Optional[Set[str]] = None
                ) -> Optional[dict]:
    """The class ``name`` of a file whose ``class_summary`` holds ``classes`` derives from no ``nn.Module``:
    every base is a builtin class, a class of the file or one ``imported(origin)`` answers for (a base the
    file imports: a project class or the standard library's), each in turn. Then its ``methods`` and the
    ``modal`` ones among them (``class_summary``), its bases' included (those it does not define itself);
    None where any base is, or may be, a Module (``torch.nn.Module``, another package's class, unknown)."""
    entry = classes.get(name)
    seen = set() if seen is None else seen
    if entry is None or name in seen:
        return None
    seen.add(name)
    methods, modal = set(entry["methods"]), set(entry["modal"])
    for base in entry["bases"]:
        if base == UNKNOWN_BASE:
            return None
        found = plain_class(classes, base, imported, seen) if type(base) is str else imported(base)
        if found is None:
            return None
        modal |= found["modal"] - set(entry["methods"])
        methods |= found["methods"]
    return {"methods": methods, "modal": modal}


def plain_outside(origin: Sequence) -> Optional[dict]:
    """A base imported from outside the project (``origin``: module, level, name): a class of the standard
    library derives from no Module (no methods known); anything else may (None)."""
    module, level = origin[0], origin[1]
    return {"methods": set(), "modal": set()} if not level and module.split(".")[0] in _PLAIN_MODULES else None


def plain_instance(index: AstIndex, targets: Sequence, project=None) -> Optional[dict]:
    """The classes ``targets`` (a class of this file, or ``(module, level, name)`` of an imported one: what an
    instance was built by, ``facts.steps.instance_classes``) all derive from no ``nn.Module`` (``plain_class``;
    another project file's through ``project``, ``facts.project.ProjectModel.plain_class``): their methods and
    modal methods together, else None."""
    if not targets:
        return None
    classes = in_file_classes(index)

    def imported(origin: Sequence) -> Optional[dict]:
        return project.plain_class(*origin) if project is not None else plain_outside(origin)

    methods: Set[str] = set()
    modal: Set[str] = set()
    for target in targets:
        if type(target) is ast.ClassDef:
            found = plain_class(classes, target.name, imported) if target in index.tree.body else None  # type: ignore[attr-defined]
        else:
            found = imported(target)
        if found is None:
            return None
        methods |= found["methods"]
        modal |= found["modal"]
    return {"methods": methods, "modal": modal}


def module_subclasses(index: AstIndex) -> Set[str]:
    """Module-level classes of the file that subclass a torch Module by their bases' names (``nn.Module``,
    ``pl.LightningModule``, or such a class of the file defined before)."""
    out: Set[str] = set()
    for statement in index.tree.body:  # type: ignore[attr-defined]
        if type(statement) is ast.ClassDef:
            for base in statement.bases:
                base = base.value if type(base) is ast.Starred else base  # type: ignore[attr-defined]
                qualified = index.qualified_name(base) or dotted_name(base) or ""
                if qualified.endswith("Module") or qualified in out:
                    out.add(statement.name)
    return out
