"""The program model: one index of a file, built from the stdlib ``ast``, on which every rule detects.

One walk per file (``index_of(tree, source)``), shared by every rule: the import table (``qualified_name``,
``calls_to`` by qualified name, aliases included), calls in source order with the innermost def and loop that
run them, loops with the calls that run once per iteration, bindings per scope, parent links, and places and
code text in LibCST's terms (``span``, ``enclosing_statement``, ``code_for_node``), so that a finding detected
here is placed, quoted and fixed as LibCST sees it (``torchlint.fix.rewrites``). It records; rules and the shared
facts (``torchlint.facts``) interpret.
"""

from __future__ import annotations

import ast
import bisect
import io
import keyword
import re
import sys
import tokenize
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterator, List, Optional, Sequence, Tuple, Union

# What names say a variable holds, where nothing else tells (an optimizer's `.step()`, a loader).
OPTIMIZER_NAME = re.compile(r"(^|_)(opt|optim|optimizer|optimiser)s?($|_|\d)|optimi[sz]er", re.IGNORECASE)
SCHEDULER_NAME = re.compile(r"sched|lr_|warmup", re.IGNORECASE)
LOADER_NAME = re.compile(r"loader|dataloader|_dl$|^dl$|_dl_|^dl_", re.IGNORECASE)

AstFunction = Union[ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda]
AstScope = Union[ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda]
AstLoop = Union[ast.For, ast.AsyncFor, ast.While]
_LOOPS = (ast.For, ast.AsyncFor, ast.While)


@dataclass
class AstLoopInfo:
    node: AstLoop = field(repr=False)
    function: Optional[AstFunction] = field(repr=False)
    parent: Optional["AstLoopInfo"] = field(repr=False)  # the enclosing loop in the same function
    # Calls that run once per iteration (not in a nested loop, def, lambda or class); the header included,
    # as in FileAnalysis.
    direct_calls: List[ast.Call] = field(default_factory=list, repr=False)
    is_training: bool = False


@dataclass
class AstCallInfo:
    node: ast.Call = field(repr=False)
    function: Optional[AstFunction] = field(repr=False)  # the innermost def or lambda around it
    loop: Optional[AstLoopInfo] = field(repr=False)  # the innermost loop whose body (not header) holds it


def dotted_name(node: ast.AST) -> Optional[str]:
    """``a.b.c`` for a Name/Attribute chain, else None (as ``analysis.dotted_name``)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def call_name(call: ast.Call) -> Optional[str]:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def target_names(target: ast.AST) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from target_names(element)
    elif isinstance(target, ast.Starred):
        yield from target_names(target.value)


def paired_targets(target: ast.AST, value: Optional[ast.AST]) -> List[Tuple[ast.AST, Optional[ast.AST]]]:
    """The parts of an assignment's target with what each is bound to: ``x, (y, z) = a, (b, c)`` pairs ``x``
    with ``a``, ``y`` with ``b``, ``z`` with ``c``; a tuple target of any other value (``x, y = batch``), or
    with a starred part, gives its parts None; any other target the whole value."""
    kind = type(target)
    if kind is not ast.Tuple and kind is not ast.List:
        return [(target, value)]
    elements = target.elts  # type: ignore[attr-defined]
    values = value.elts if type(value) in (ast.Tuple, ast.List) else None  # type: ignore[union-attr]
    if values is None or len(values) != len(elements) \
            or any(type(part) is ast.Starred for part in (*elements, *values)):
        return [(element, None) for element in elements]
    return [pair for element, part in zip(elements, values) for pair in paired_targets(element, part)]


def names_spelled(node: ast.AST) -> Iterator[Tuple[str, ast.AST, str, Optional[ast.AST]]]:
    """Every name spelled under ``node`` (itself included), as LibCST's ``Name`` nodes count them:
    (spelling, node, how, parent), in no set order; ``parent`` is None for ``node`` itself. ``how`` is "name" for a variable, "attribute" for ``x.name`` (the node is the attribute),
    "keyword" for ``f(name=...)`` (the node is the keyword) and "other" for the names of parameters,
    defs, classes, imports, ``global`` / ``except ... as`` / ``match`` captures."""
    stack: List[Tuple[ast.AST, Optional[ast.AST]]] = [(node, None)]
    while stack:
        current, parent = stack.pop()
        kind = type(current)
        if kind is ast.Name:
            yield current.id, current, "name", parent  # type: ignore[attr-defined]
            continue
        if kind is ast.Attribute:
            yield current.attr, current, "attribute", parent  # type: ignore[attr-defined]
        elif kind is ast.keyword:
            if current.arg is not None:  # type: ignore[attr-defined]
                yield current.arg, current, "keyword", parent  # type: ignore[attr-defined]
        else:
            for spelling in _other_names_spelled(current):
                yield spelling, current, "other", parent
        stack.extend((child, current) for child in ast.iter_child_nodes(current))


def spells_name(node: ast.AST, name: str) -> bool:
    """Whether ``name`` is spelled under ``node`` (``names_spelled``: LibCST's ``names_in``)."""
    return any(spelling == name for spelling, *_ in names_spelled(node))


def _other_names_spelled(node: ast.AST) -> List[str]:
    kind = type(node)
    if kind is ast.arg:
        return [node.arg]  # type: ignore[attr-defined]
    if kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
        return [node.name]  # type: ignore[attr-defined]
    if kind is ast.alias:
        return node.name.split(".") + ([node.asname] if node.asname else [])  # type: ignore[attr-defined]
    if kind is ast.ImportFrom:
        return node.module.split(".") if node.module else []  # type: ignore[attr-defined]
    if kind in (ast.Global, ast.Nonlocal):
        return list(node.names)  # type: ignore[attr-defined]
    if kind is ast.ExceptHandler or kind in _MATCH_CAPTURES:
        return [node.name] if getattr(node, "name", None) else []  # type: ignore[attr-defined]
    if kind in _MATCH_MAPPING:
        return ([node.rest] if node.rest else [])  # type: ignore[attr-defined]
    if kind in _MATCH_CLASS:
        return list(node.kwd_attrs)  # type: ignore[attr-defined]
    return []


_MATCH_CAPTURES = tuple(getattr(ast, name) for name in ("MatchAs", "MatchStar") if hasattr(ast, name))
_MATCH_MAPPING = tuple(getattr(ast, name) for name in ("MatchMapping",) if hasattr(ast, name))
_MATCH_CLASS = tuple(getattr(ast, name) for name in ("MatchClass",) if hasattr(ast, name))


def is_literal(node: Optional[ast.AST], value: object) -> bool:
    """True for the constants True/False/None."""
    return isinstance(node, ast.Constant) and node.value is value


def is_integer(node: ast.AST) -> bool:
    """An integer literal (LibCST's ``Integer``; not ``True``, not ``-1``)."""
    return type(node) is ast.Constant and type(node.value) is int  # type: ignore[attr-defined]


def qualify(imports: Dict[str, str], name: Optional[str]) -> Optional[str]:
    """A dotted name through an import table (local name -> what it imports): ``t.nn.Conv2d`` ->
    "torch.nn.Conv2d"; None if its root is not imported. (LibCST's side, ``FileAnalysis``, asks it too.)"""
    if name is None:
        return None
    root, _, rest = name.partition(".")
    target = imports.get(root)
    if target is None:
        return None
    return f"{target}.{rest}" if rest else target


def alias_of(imports: Dict[str, str], module: str) -> Optional[str]:
    """The first local name an import table binds to ``module``, if any."""
    return next((local for local, target in imports.items() if target == module), None)


def import_origins(index: "AstIndex") -> Dict[str, Tuple[str, int, Optional[str]]]:
    """Local name -> (module, level, the name taken from it, or None where the name is the module itself),
    for every import of the file, relative ones included (``from .data import build_loader``)."""
    found = origins_of(index.import_statements)
    star = index.__dict__.get("star_origins")
    return {**star, **found} if star else found


def origins_of(statements) -> Dict[str, Tuple[str, int, Optional[str]]]:
    """``import_origins`` of these import statements, in their order."""
    found: Dict[str, Tuple[str, int, Optional[str]]] = {}
    for node in statements:
        if type(node) is ast.Import:
            for alias in node.names:
                if alias.asname:
                    found[alias.asname] = (alias.name, 0, None)
                else:
                    root = alias.name.split(".")[0]
                    found[root] = (root, 0, None)
        else:
            for alias in node.names:  # type: ignore[union-attr]
                if alias.name != "*":
                    found[alias.asname or alias.name] = (node.module or "", node.level, alias.name)  # type: ignore[union-attr]
    return found


# The first parts of module names that are never a file of the checked project: the standard library, the
# packages of the PyTorch stack and the plotting, progress and data libraries training scripts import
_NOT_PROJECT = frozenset(sys.stdlib_module_names) | {
    "torch", "numpy", "torchvision", "torchaudio", "torchtext", "IPython", "matplotlib", "tqdm", "sklearn",
    "scipy", "pandas", "PIL", "cv2", "seaborn", "tensorboard", "tensorboardX", "wandb", "yaml", "h5py", "einops",
    "skimage", "imageio", "visdom", "tabulate", "termcolor"}


def may_be_project(module: str, level: int) -> bool:
    """An import of ``module`` (``level`` dots) may load a project file: relative, or not a known package."""
    return bool(level) or module.split(".")[0] not in _NOT_PROJECT


def called_origin(origins: Dict[str, Tuple[str, int, Optional[str]]], written: str
                  ) -> Optional[Tuple[str, int, str]]:
    """(module, level, function) that a call written ``written`` (``build_loader``, ``data.build_loader``,
    ``pkg.data.build_loader``) names through the file's imports, or None."""
    parts = written.split(".")
    origin = origins.get(parts[0])
    if origin is None:
        return None
    module, level, taken = origin
    if taken is None:  # `import data` / `import pkg.data`: the rest is a path in the module
        path = [module, *parts[1:]]
    elif len(parts) == 1:
        return module, level, taken
    else:  # `from pkg import data` then `data.build_loader(...)`: `data` is a module of the package
        path = [f"{module}.{taken}" if module else taken, *parts[1:]]
    if len(path) < 2:
        return None
    return ".".join(path[:-1]), level, path[-1]


class AstIndex:
    def __init__(self, tree: ast.Module, source: str = "") -> None:
        self.tree = tree
        self.source = source  # the text ``tree`` was parsed from: spans and statement lines read it
        self.loop_info: Dict[ast.AST, AstLoopInfo] = {}
        # Facts rules compute once per file and share (``torchlint.facts``), by name.
        self.shared: Dict[str, object] = {}
        self.imports: Dict[str, str] = {}  # local name -> qualified name
        self.calls: List[AstCallInfo] = []
        self.calls_by_name: Dict[str, List[AstCallInfo]] = {}
        self.loops: List[AstLoopInfo] = []
        self.functions: List[Union[ast.FunctionDef, ast.AsyncFunctionDef]] = []
        self.lambdas: List[ast.Lambda] = []
        self.class_of: Dict[ast.AST, Optional[ast.ClassDef]] = {}  # function -> the class it is defined in
        self.classes: List[ast.ClassDef] = []  # every class, methods or not (`class Rows(Windows): pass`)
        self.bindings: Dict[ast.AST, Dict[str, List[Optional[ast.AST]]]] = {}
        self.block_of: Dict[ast.AST, List[ast.stmt]] = {}  # loop -> the statement list that holds it
        # `target = call(...)` with one target, and each call of `a, b = f(), g()`: call -> its target
        self.assigned_to: Dict[ast.Call, ast.expr] = {}
        # (class, attribute) -> every value a method of the class binds `self.<attribute>` to, in source order
        # (None for a binding without one: a tuple target, `+=`, a loop or `with` target)
        self.self_attributes: Dict[Tuple[ast.ClassDef, str], List[Optional[ast.AST]]] = {}
        self.import_statements: List[Union[ast.Import, ast.ImportFrom]] = []  # every import, in source order
        self._walk(tree)
        # The walk's order is not the source's; rules read "the first call" and "the last binding" in it.
        self.calls.sort(key=lambda info: source_order(info.node))
        self.loops.sort(key=lambda info: source_order(info.node))
        self.functions.sort(key=_position)
        for by_name in self.calls_by_name.values():
            by_name.sort(key=lambda info: source_order(info.node))
        for loop in self.loops:
            loop.direct_calls.sort(key=source_order)
        self._call_starts = [_position(info.node) for info in self.calls]
        for loop in self.loops:
            loop.is_training = any(self.is_backward_call(c) or self.is_optimizer_step(c, loop.function)
                                   for c in loop.direct_calls)

    # --- the walk ---------------------------------------------------------------------------------
    def _walk(self, tree: ast.Module) -> None:
        # Frames of (function, loop, body loop, class, nodes, where): the nodes share that context. ``loop`` takes
        # the calls that run once per iteration (its header's too); ``body loop`` is the innermost loop whose
        # body holds the node; ``where`` is what CPython's compiler judges them by (``_Compilable``). An
        # explicit stack: deep code must not hit the recursion limit.
        frames: List[tuple] = [(None, None, None, None, [tree], _AT_MODULE)]
        imports: List[Union[ast.Import, ast.ImportFrom]] = []
        bindings: List[Tuple[ast.AST, AstScope, str, Optional[ast.AST]]] = []  # (where, scope, name, value)
        attribute_bindings: List[Tuple[ast.ClassDef, ast.AST, Optional[ast.AST]]] = []  # (class, target, value)
        bind = bindings.append
        module = self.tree
        compilable = _Compilable()
        while frames:
            function, loop, body_loop, klass, nodes, where = frames.pop()
            scope = function if function is not None else module
            for node in nodes:
                kind = type(node)
                if kind not in _RECORDED_TYPES:  # two nodes in three: nothing to record, only children to visit
                    children = _children(node)
                    if children:
                        frames.append((function, loop, body_loop, klass, children, where))
                    continue
                children = _children(node)
                if kind in _COMPILER_CHECKED:  # recorded for the compiler's checks alone
                    inner = compilable.expression(node, where)
                    if children:
                        frames.append((function, loop, body_loop, klass, children, inner))
                    continue
                if kind in _BLOCK_TYPES:
                    self._note_blocks(node, where, compilable)
                if kind is ast.Call:
                    self._add_call(node, function, loop, body_loop)
                    keywords = node.keywords
                    if len(keywords) > 1 and len({k.arg for k in keywords}) != len(keywords):
                        compilable.repeated(keywords)
                elif kind in _FUNCTION_TYPES:
                    names = [arg.arg for arg in _all_args(node.args)]
                    if len(set(names)) != len(names):
                        compilable.suspect = True  # duplicate argument
                    if kind is ast.Lambda:
                        self.lambdas.append(node)
                        body = [node.body] if type(node.body) not in _LEAVES else []
                        inner = (_LAMBDA, False, 0)
                    else:
                        self.functions.append(node)
                        self.class_of[node] = klass
                        bind((node, scope, node.name, None))
                        for name in names:
                            bind((node, node, name, None))
                        body = node.body
                        inner = (_ASYNC_DEF if kind is ast.AsyncFunctionDef else _DEF, False, 0)
                    # the class stays: a def nested in a method still counts as the class's
                    # (FunctionInfo.class_name); decorators, defaults and annotations are the outer scope's
                    frames.append((node, None, None, klass, _outer_parts(node), where))
                    frames.append((node, None, None, klass, body, inner))
                    continue
                elif kind is ast.ClassDef:
                    self.classes.append(node)
                    keywords = node.keywords
                    if len(keywords) > 1 and len({k.arg for k in keywords}) != len(keywords):
                        compilable.repeated(keywords)
                    frames.append((function, None, None, node, _outer_parts(node), where))
                    frames.append((function, None, None, node, node.body, (_CLASS, False, 0)))
                    continue
                elif kind in _LOOP_TYPES:
                    info = AstLoopInfo(node, function, loop)
                    self.loops.append(info)
                    self.loop_info[node] = info
                    if kind is ast.While:
                        header: List[ast.AST] = [node.test]
                    else:
                        header = [node.target, node.iter]
                        for name in target_names(node.target):
                            bind((node, scope, name, None))
                        if klass is not None and function is not None and type(node.target) is not ast.Name:
                            attribute_bindings.append((klass, node.target, None))
                        if kind is ast.AsyncFor and where[0] != _ASYNC_DEF:
                            compilable.suspect = True
                    frames.append((function, info, body_loop, klass, header, where))
                    frames.append((function, info, info, klass, node.body, compilable.nested(where, 1, True)))
                    if node.orelse:
                        frames.append((function, info, info, klass, node.orelse, where))
                    continue
                elif kind is ast.Import or kind is ast.ImportFrom:
                    imports.append(node)
                    if kind is ast.ImportFrom:
                        compilable.import_from(node, where)
                    continue
                elif kind is ast.Assign:
                    if len(node.targets) == 1:
                        if type(node.value) is ast.Call:
                            self.assigned_to[node.value] = node.targets[0]
                        elif type(node.value) in (ast.Tuple, ast.List):
                            for part, value in paired_targets(node.targets[0], node.value):
                                if type(value) is ast.Call and type(part) not in (ast.Tuple, ast.List):
                                    self.assigned_to[value] = part  # type: ignore[assignment]
                    for target in node.targets:
                        if type(target) is ast.Name:
                            bind((node, scope, target.id, node.value))
                            continue
                        for part, value in paired_targets(target, node.value):  # `a, b = X(), Y()`
                            if type(part) is ast.Name:
                                bind((node, scope, part.id, value))  # type: ignore[attr-defined]
                            else:
                                for name in target_names(part):
                                    bind((node, scope, name, None))
                        if klass is not None and function is not None:
                            attribute_bindings.append(
                                (klass, target, node.value if len(node.targets) == 1 else None))
                elif kind is ast.AnnAssign:
                    if type(node.target) is ast.Name and node.value is not None:
                        bind((node, scope, node.target.id, node.value))
                    elif klass is not None and function is not None:
                        attribute_bindings.append((klass, node.target, node.value))
                elif kind is ast.AugAssign:
                    if type(node.target) is ast.Name:
                        bind((node, scope, node.target.id, None))
                    elif klass is not None and function is not None:
                        attribute_bindings.append((klass, node.target, None))
                elif kind is ast.With or kind is ast.AsyncWith:
                    for item in node.items:
                        if item.optional_vars is not None:
                            for name in target_names(item.optional_vars):
                                bind((node, scope, name, None))
                            if klass is not None and function is not None:
                                attribute_bindings.append((klass, item.optional_vars, None))
                    if kind is ast.AsyncWith and where[0] != _ASYNC_DEF:
                        compilable.suspect = True
                    frames.append((function, loop, body_loop, klass, children,
                                   compilable.nested(where, len(node.items), where[1])))
                    continue
                elif kind in _TRY_TYPES:
                    compilable.handlers(node)
                    frames.append((function, loop, body_loop, klass, children, compilable.nested(where, 3, where[1])))
                    continue
                if children:
                    frames.append((function, loop, body_loop, klass, children, where))
        # The walk's order is not the source's: bindings and imports are recorded in source order, so that
        # the first and last binding of a name are FileAnalysis's (`try: from x import A` / `except: from y
        # import B as A`). The sort is stable: the bindings one statement makes keep their order.
        bindings.sort(key=lambda entry: _position(entry[0]))
        for _, scope, name, value in bindings:
            self.bindings.setdefault(scope, {}).setdefault(name, []).append(value)
        if attribute_bindings:
            attribute_bindings.sort(key=lambda entry: _position(entry[1]))
            for klass, target, value in attribute_bindings:
                self._bind_attribute(klass, target, value)
        for statement in sorted(imports, key=_position):
            self._add_import(statement)
            self.import_statements.append(statement)
        self.may_not_compile = compilable.done(self)

    def _bind_attribute(self, klass: ast.ClassDef, target: ast.AST, value: Optional[ast.AST]) -> None:
        kind = type(target)
        if kind is ast.Attribute:
            if type(target.value) is ast.Name and target.value.id == "self":  # type: ignore[attr-defined]
                self.self_attributes.setdefault((klass, target.attr), []).append(value)  # type: ignore[attr-defined]
        elif kind is ast.Tuple or kind is ast.List:
            for part, paired in paired_targets(target, value):  # `self.a, self.b = X(), Y()`
                self._bind_attribute(klass, part, paired)
        elif kind is ast.Starred:
            self._bind_attribute(klass, target.value, None)  # type: ignore[attr-defined]

    def _add_import(self, node: Union[ast.Import, ast.ImportFrom]) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname is not None:
                    self.imports[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    self.imports[root] = root
        elif not node.level and node.module is not None:
            for alias in node.names:
                if alias.name != "*":
                    self.imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def _note_blocks(self, node: ast.AST, where: Tuple[int, bool, int], compilable: "_Compilable") -> None:
        """The loops of ``node``'s blocks (``block_of``), and the statements there the walk does not enter
        (leaves) that the compiler judges by where they stand: `break` and `continue` outside a loop's body,
        `global` and `nonlocal` (their names' uses before them)."""
        kind = type(node)
        in_loop = where[1]
        body_in_loop = True if kind in _LOOP_TYPES else False if kind in _NEW_SCOPES else in_loop
        for block, block_in_loop in ((node.body, body_in_loop), (getattr(node, "orelse", None), in_loop),  # type: ignore
                                     (getattr(node, "finalbody", None), in_loop)):
            if block:
                for statement in block:
                    statement_kind = type(statement)
                    if statement_kind in _LOOP_TYPES:
                        self.block_of[statement] = block
                    elif statement_kind in _JUDGED_LEAVES and (statement_kind in _SCOPE_STATEMENTS
                                                               or not block_in_loop):
                        compilable.suspect = True

    def _add_call(self, node: ast.Call, function: Optional[AstFunction], loop: Optional[AstLoopInfo],
                  body_loop: Optional[AstLoopInfo]) -> None:
        if loop is not None:
            loop.direct_calls.append(node)
        info = AstCallInfo(node, function, body_loop)
        self.calls.append(info)
        name = call_name(node)
        if name is not None:
            self.calls_by_name.setdefault(name, []).append(info)

    # --- questions, with the meaning FileAnalysis gives them ---------------------------------------
    @contextmanager
    def with_star_names(self, origins: Dict[str, Tuple[str, int, Optional[str]]]) -> Iterator[None]:
        """The names ``from <project module> import *`` binds (``origins``: local name -> module, level, name
        taken, or None for the module itself; ``facts.project.ProjectModel.star_origins``) in the import table
        while a check runs, where the file binds no such name at module level itself; the file's own table
        after (a kept index is the file's alone: ``run.guard``)."""
        own = self.imports
        taken = {name: origin for name, origin in origins.items()
                 if name not in own and not self.values_of(name, self.tree)}
        if not taken:
            yield
            return
        table = dict(own)
        for name, (module, level, imported) in taken.items():
            if not level:
                table.setdefault(name, module if imported is None else f"{module}.{imported}")
        self.imports, self.__dict__["star_origins"], self.__dict__["_own_imports"] = {**table, **own}, taken, own
        self.__dict__.pop("_calls_by_qualified", None)
        try:
            yield
        finally:
            self.imports = own
            self.__dict__.pop("star_origins", None)
            self.__dict__.pop("_own_imports", None)
            self.__dict__.pop("_calls_by_qualified", None)

    def own_imports(self) -> Dict[str, str]:
        """The import table of the file's own import statements (without ``with_star_names``'s)."""
        return self.__dict__.get("_own_imports", self.imports)  # type: ignore[return-value]

    def qualified_name(self, node: ast.AST) -> Optional[str]:
        return qualify(self.imports, dotted_name(node))

    def module_alias(self, module: str) -> Optional[str]:
        """The local name the file first binds to ``module`` ("t" for ``import torch as t``), if any."""
        return alias_of(self.imports, module)

    def imports_torch(self) -> bool:
        return any(target.split(".")[0] == "torch" for target in self.imports.values())

    def values_of(self, name: str, scope: Optional[AstScope]) -> List[Optional[ast.AST]]:
        return self.bindings.get(scope if scope is not None else self.tree, {}).get(name, [])

    def single_value(self, name: str, scope: Optional[AstScope]) -> Optional[ast.AST]:
        for candidate in (scope if scope is not None else self.tree, self.tree):
            values = self.values_of(name, candidate)
            if values:
                return values[0] if len(values) == 1 else None
        return None

    def single_value_and_scope(self, name: str, scope: Optional[AstScope]) -> Tuple[Optional[ast.AST], AstScope]:
        """``single_value`` and the scope whose binding gave it (the value's own names are looked up there)."""
        for candidate in (scope if scope is not None else self.tree, self.tree):
            values = self.values_of(name, candidate)
            if values:
                return (values[0] if len(values) == 1 else None), candidate
        return None, self.tree

    def is_backward_call(self, call: ast.Call) -> bool:
        if call_name(call) != "backward":
            return False
        return isinstance(call.func, ast.Attribute) or self.qualified_name(call.func) == "torch.autograd.backward"

    def is_optimizer_step(self, call: ast.Call, scope: Optional[AstScope]) -> bool:
        """As ``FileAnalysis.is_optimizer_step``; ``scope`` is the def or lambda around the call."""
        if call_name(call) != "step" or not isinstance(call.func, ast.Attribute):
            return False
        owner = dotted_name(call.func.value)
        if owner is None:
            return False
        last = owner.split(".")[-1]
        if SCHEDULER_NAME.search(last):
            return False
        if OPTIMIZER_NAME.search(last):
            return True
        if "scaler" in last.lower() and (call.args or call.keywords):
            return True
        if isinstance(call.func.value, ast.Name):
            value = self.single_value(call.func.value.id, scope)
            if isinstance(value, ast.Call):
                qualified = self.qualified_name(value.func) or ""
                return qualified.startswith("torch.optim.") and ".lr_scheduler" not in qualified
        return False

    def training_loop_of(self, call: AstCallInfo) -> Optional[AstLoopInfo]:
        loop = call.loop
        while loop is not None:
            if loop.is_training:
                return loop
            loop = loop.parent
        return None

    def is_loader_name(self, expr: ast.AST) -> bool:
        name = dotted_name(expr)
        return name is not None and bool(LOADER_NAME.search(name.split(".")[-1]))

    # --- the tree around a node ------------------------------------------------------------------
    @property
    def parents(self) -> Dict[ast.AST, ast.AST]:
        """node -> the node whose field holds it, for every node but the leaves (names, constants,
        contexts), built by one walk on first use: most files past the text gate never ask."""
        parents = self.__dict__.get("_parents")
        if parents is None:
            parents = self.__dict__["_parents"] = {}
            stack: List[ast.AST] = [self.tree]
            while stack:
                node = stack.pop()
                children = _children(node)
                for child in children:
                    parents[child] = node
                stack.extend(children)
        return parents

    # ``parents`` covers every node but the leaves (names, constants, contexts, operators): the questions
    # below start from calls, statements and other non-leaf nodes.
    def parent(self, node: ast.AST) -> Optional[ast.AST]:
        return self.parents.get(node)

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        node = self.parents.get(node)
        while node is not None:
            yield node
            node = self.parents.get(node)

    def function_of(self, node: ast.AST) -> Optional[AstFunction]:
        """The innermost def or lambda around ``node`` (not ``node`` itself)."""
        # remembered for every node on the way up: rules ask it of each ancestor of deep code (an elif
        # chain nests each branch in the last), which would cost depth x depth
        memo = self.__dict__.setdefault("_function_memo", {})
        path = []
        found: Optional[AstFunction] = None
        current = self.parents.get(node)
        while current is not None:
            if current in memo:
                found = memo[current]
                break
            path.append(current)
            if type(current) in _FUNCTION_TYPES:
                found = current  # type: ignore[assignment]
                break
            current = self.parents.get(current)
        for ancestor in path:  # memo: the innermost def or lambda that is or holds the node
            memo[ancestor] = found
        return found

    def scope_of(self, node: ast.AST) -> AstScope:
        """The innermost def or lambda around ``node``, else the module. For a leaf (a name), which has no
        parent link, the innermost one whose text holds it."""
        if node in self.parents or node is self.tree:
            function = self.function_of(node)
        else:
            function = self._function_holding(node)
        return function if function is not None else self.tree

    def _function_holding(self, node: ast.AST) -> Optional[AstFunction]:
        """The innermost def or lambda whose text holds ``node``: the last one to start before it, else
        the first of that one's enclosing functions that holds it (one that holds ``node`` and starts
        earlier holds the other's start too, so it encloses it)."""
        starts = self.__dict__.get("_function_starts")
        if starts is None:
            ordered = sorted((*self.functions, *self.lambdas), key=_position)
            starts = self.__dict__["_function_starts"] = ([_position(f) for f in ordered], ordered)
        at = bisect.bisect_right(starts[0], _position(node)) - 1
        function: Optional[AstFunction] = starts[1][at] if at >= 0 else None
        while function is not None and (function is node or not self.contains(function, node)):
            function = self.function_of(function)
        return function

    def functions_named(self, name: str) -> List[Union[ast.FunctionDef, ast.AsyncFunctionDef]]:
        """The defs named ``name``, in source order (as ``functions`` holds them): a rule asking this of
        each call must not scan every def of a long file each time."""
        by_name = self.__dict__.get("_functions_by_name")
        if by_name is None:
            by_name = self.__dict__["_functions_by_name"] = {}
            for function in self.functions:
                by_name.setdefault(function.name, []).append(function)
        return by_name.get(name, [])

    def in_class(self, node: ast.AST) -> bool:
        return any(type(ancestor) is ast.ClassDef for ancestor in self.ancestors(node))

    def enclosing_loops(self, node: ast.AST) -> Iterator[AstLoopInfo]:
        """Loops whose body (or ``else``) holds ``node``, innermost first, up to the first def, lambda or
        class (as ``FileAnalysis.enclosing_loops``: a loop's header is not in the loop)."""
        return iter(self._loops_around(node))

    def _loops_around(self, node: ast.AST) -> Tuple[AstLoopInfo, ...]:
        # remembered per (child, parent) step on the way up, as ``function_of``
        memo = self.__dict__.setdefault("_loops_memo", {})
        path = []
        loops: Tuple[AstLoopInfo, ...] = ()
        child = node
        ancestor = self.parents.get(node)
        while ancestor is not None:
            if child in memo:
                loops = memo[child]
                break
            kind = type(ancestor)
            if kind in _FUNCTION_TYPES or kind is ast.ClassDef:
                break
            path.append((child, self.loop_info[ancestor] if kind in _LOOP_TYPES
                         and child not in _loop_header(ancestor) else None))  # type: ignore[arg-type]
            child, ancestor = ancestor, self.parents.get(ancestor)
        for child, loop in reversed(path):  # memo[child]: the loops around child, innermost first
            if loop is not None:
                loops = (loop, *loops)
            memo[child] = loops
        return memo.get(node, loops)

    def contains(self, outer: ast.AST, inner: ast.AST) -> bool:
        """True when ``inner`` is ``outer`` or lies inside it (by their places in the source)."""
        return (_position(outer) <= _position(inner)
                and (inner.end_lineno, inner.end_col_offset) <= (outer.end_lineno, outer.end_col_offset))  # type: ignore[attr-defined]

    def calls_in(self, node: ast.AST) -> List[AstCallInfo]:
        """The calls inside ``node`` (itself included), in source order."""
        lo = bisect.bisect_left(self._call_starts, _position(node))
        end = (node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        hi = bisect.bisect_left(self._call_starts, end, lo)
        return [info for info in self.calls[lo:hi] if self.contains(node, info.node)]

    def calls_within(self, node: Union[ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef]) -> List[AstCallInfo]:
        """The calls in a def or class, its decorators' included (``ast`` places the node at its keyword;
        LibCST's node holds its decorators)."""
        return [info for decorator in node.decorator_list for info in self.calls_in(decorator)] + self.calls_in(node)

    def enclosing_statement(self, node: ast.AST) -> Optional[Union[ast.stmt, "StatementLine"]]:
        """What LibCST calls the statement that holds ``node``: a compound statement, a line of simple
        statements (``StatementLine``: ``a = 1; b = 2``), or a simple statement after a compound header on
        the same line (``if x: a = 1``)."""
        for candidate in (node, *self.ancestors(node)):
            if isinstance(candidate, ast.stmt):
                if type(candidate) in COMPOUND_STATEMENTS:
                    return candidate
                return self.statement_line(candidate)
        return None

    def statement_block(self, statement: ast.stmt) -> List[ast.stmt]:
        """The statement list that holds ``statement``: a body, an ``else``/``finally`` block, the module's
        (LibCST's ``IndentedBlock``, ``SimpleStatementSuite`` or ``Module`` around its statement line)."""
        return self._placed(statement)[0]

    def block_position(self, statement: ast.stmt) -> int:
        """Where ``statement`` stands in its ``statement_block`` (0: first)."""
        return self._placed(statement)[1]

    def _placed(self, statement: ast.stmt) -> Tuple[List[ast.stmt], int]:
        """``statement``'s block and its place there, kept for every statement of the blocks of its parent
        once one is asked: a scan of the block per question cost statements x block on a long module."""
        placed = self.__dict__.get("_placed_statements")
        if placed is None:
            placed = self.__dict__["_placed_statements"] = {}
        found = placed.get(id(statement))
        if found is not None:
            return found
        parent = self.parents.get(statement)
        if parent is None and type(statement) in _LEAVES:  # `pass`, `break`, `global x`: no parent link
            parent = self._statement_holding(statement)
        block = _block_holding(parent or self.tree, statement)
        for at, member in enumerate(block):
            placed[id(member)] = (block, at)
        return placed[id(statement)]

    def _statement_holding(self, statement: ast.stmt) -> Optional[ast.AST]:
        """The statement, handler or case whose block holds ``statement``, by a walk of the statements."""
        stack: List[ast.AST] = [self.tree]
        while stack:
            node = stack.pop()
            for name in ("body", "orelse", "finalbody", "handlers", "cases"):
                block = getattr(node, name, None)
                if type(block) is list:
                    if any(child is statement for child in block):
                        return node
                    stack.extend(block)
        return None

    def simple_statement_next_to(self, statement: ast.stmt, step: int) -> Optional[ast.stmt]:
        """The simple statement right before (``step`` -1) or after (+1) ``statement`` in its block, where
        both are on lines of simple statements (LibCST's ``SimpleStatementLine``: never a compound
        statement, nor a body on its header's line, ``if x: a; b``)."""
        if type(statement) not in COMPOUND_STATEMENTS and self.statement_line(statement) is statement:
            return None  # after a header on its line
        block, at = self._placed(statement)
        at += step
        if not 0 <= at < len(block) or type(block[at]) in COMPOUND_STATEMENTS:
            return None
        return block[at]

    def statement_line(self, statement: ast.stmt) -> Union[ast.stmt, "StatementLine"]:
        block, at = self._placed(statement)
        first = last = at
        while first > 0 and block[first - 1].end_lineno == block[first].lineno:
            first -= 1
        while last + 1 < len(block) and block[last + 1].lineno == block[last].end_lineno:
            last += 1
        head = block[first]
        if self.line_text(head.lineno)[: self._char_column(head.lineno, head.col_offset)].strip():
            return statement  # after `if x:` on its line: LibCST's statement is the simple statement itself
        return StatementLine(head, block[last])

    # --- where a node is, in LibCST's terms ----------------------------------------------------------
    def span(self, node: Union[ast.AST, "Extent"]) -> Tuple[int, int, int, int]:
        """(line, column, end line, end column) as LibCST's PositionProvider gives them: lines 1-based,
        columns 0-based in characters (``ast`` counts UTF-8 bytes), parentheses around the node left out
        (``ast`` counts a tuple's and a generator expression's own)."""
        first, last = (node.first, node.last) if isinstance(node, Extent) else (node, node)
        line, column = first.lineno, self._char_column(first.lineno, first.col_offset)  # type: ignore[attr-defined]
        end_line = last.end_lineno  # type: ignore[attr-defined]
        end_column = self._char_column(end_line, last.end_col_offset)  # type: ignore[attr-defined]
        kind = type(node)
        if (kind is ast.GeneratorExp or kind is ast.Tuple) and self.line_text(line)[column:column + 1] == "(":
            # LibCST leaves brackets out: a generator's span takes the call's, `f(x for x in y)`, a tuple's
            # only its own (not those of `(a), (b)`)
            inside = self._inside_brackets(line, column, end_line, end_column, kind is ast.Tuple)
            if inside is not None:
                return inside
        return line, column, end_line, end_column

    def has_own_brackets(self, node: ast.Tuple) -> bool:
        """Whether the tuple is written in brackets of its own: ``x[(a, b)]`` (one subscript element in
        LibCST) against ``x[a, b]`` (two) and ``x[(a), b]``."""
        return self.span(node)[:2] != (node.lineno, self._char_column(node.lineno, node.col_offset))

    def _inside_brackets(self, line: int, column: int, end_line: int, end_column: int,
                         own_only: bool) -> Optional[Tuple[int, int, int, int]]:
        """The span of what the bracket at (line, column) and its partner at the span's end hold, from its
        first token to its last (comments and line breaks around them left out); None where the bracket
        closes before the end (``own_only``) or the text does not tokenize."""
        text = "\n".join(self.line_text(n) for n in range(line, end_line + 1))
        text = text[column:len(text) - len(self.line_text(end_line)) + end_column]
        try:
            tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
                      if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.ENDMARKER,
                                        tokenize.INDENT, tokenize.DEDENT)]
        except (tokenize.TokenError, SyntaxError):
            return None
        if len(tokens) < 2:
            return None
        if own_only:
            depth = 0
            for token in tokens[:-1]:
                if token.type == tokenize.OP and token.string in "([{":
                    depth += 1
                elif token.type == tokenize.OP and token.string in ")]}":
                    depth -= 1
                    if depth == 0:
                        return None  # `(a), (b)`: the first bracket is an element's
        if len(tokens) == 2:  # `()`: an empty span after the bracket
            (first_row, first_col) = (last_row, last_col) = tokens[0].end
        else:
            (first_row, first_col), (last_row, last_col) = tokens[1].start, tokens[-2].end

        def place(row: int, col: int) -> Tuple[int, int]:
            return line + row - 1, col + column if row == 1 else col

        return (*place(first_row, first_col), *place(last_row, last_col))

    def literal_string(self, node: ast.AST) -> Optional[str]:
        """The value of a string constant written as one literal (LibCST's ``SimpleString``), else None
        (``"cu" "da"`` is one constant to ``ast``, a concatenation to LibCST)."""
        if type(node) is not ast.Constant or type(node.value) is not str:  # type: ignore[attr-defined]
            return None
        text = self._span_text(node)
        if text[:1] in ("'", '"') and text.count(text[0]) == 2 and "\\" not in text:
            return node.value  # type: ignore[attr-defined]  # `"cuda"`: the common case, without tokenizing
        try:
            strings = sum(t.type == tokenize.STRING for t in tokenize.generate_tokens(io.StringIO(text).readline))
        except (tokenize.TokenError, SyntaxError):
            return None
        return node.value if strings == 1 else None  # type: ignore[attr-defined]

    def _span_text(self, node: Union[ast.AST, "Extent"]) -> str:
        """The text of ``node``'s span (``code_for_node`` quotes a node as LibCST writes it)."""
        line, column, end_line, end_column = self.span(node)
        if line == end_line:
            return self.line_text(line)[column:end_column]
        lines = [self.line_text(line)[column:], *map(self.line_text, range(line + 1, end_line)),
                 self.line_text(end_line)[:end_column]]
        return "\n".join(lines)

    def line_text(self, line: int) -> str:
        """Line ``line`` of the source (1-based), without its line end."""
        lines = self.__dict__.get("_lines")
        if lines is None:
            lines = self.__dict__["_lines"] = _NEWLINE_SPLIT.split(self.source)
        return lines[line - 1] if 0 < line <= len(lines) else ""

    def _char_column(self, line: int, byte_column: int) -> int:
        text = self.line_text(line)
        if text.isascii():
            return byte_column
        return len(text.encode("utf-8")[:byte_column].decode("utf-8", "replace"))

    # --- a node's text in LibCST's terms ----------------------------------------------------------------
    def code_for_node(self, node: ast.AST, statement: ast.stmt, newline: Optional[str] = None) -> str:
        """``node``'s text as LibCST's ``Module.code_for_node`` writes it, for messages that quote the code:
        see ``StatementCode``. ``statement`` holds ``node`` in its first logical line (a simple statement,
        or a compound statement's header)."""
        code = self.statement_code(statement)
        return code.text(*code.place(node), newline=newline)

    def statement_code(self, statement: ast.stmt) -> "StatementCode":
        return StatementCode(self, statement)

    def body_on_header_line(self, statement: ast.stmt) -> bool:
        """Whether a compound statement's body follows its header on one logical line (``for x in y: f(x)``,
        also after a ``\\`` continuation): LibCST's ``SimpleStatementSuite``, not an ``IndentedBlock``."""
        first = statement.body[0]  # type: ignore[attr-defined]
        start = (first.lineno, self._char_column(first.lineno, first.col_offset))
        return any(token.start == start for token in StatementCode(self, statement).tokens)

    def owned_text(self, statement: ast.stmt) -> str:
        """A compound statement's whole text as LibCST's ``code_for_node`` writes it: the comment and blank
        lines before it that LibCST gives it (``leading_lines``: those after the statement before it and
        its footer; none for the module's first statement, whose lines are the module's header), its
        decorators, and after its last block the comment lines that block owns (its ``footer``: up to the
        last one indented at least as deep as the block)."""
        first = statement.decorator_list[0].lineno if getattr(statement, "decorator_list", None) else statement.lineno  # type: ignore[attr-defined]
        start = first
        while start > 1 and _is_empty_line(self.line_text(start - 1)):
            start -= 1
        block, at = self._placed(statement)
        if at == 0 and block is self.tree.body:
            start = first
        elif at > 0 and start < first:
            start = max(start, self._footer_end(block[at - 1]) + 1)
        return "".join(self.line_text(n) + "\n" for n in range(start, self._footer_end(statement) + 1))

    def _footer_end(self, statement: ast.stmt) -> int:
        """The last line of ``statement`` with the footer of its last block (see ``owned_text``)."""
        end = statement.end_lineno or statement.lineno
        block = _last_block(self, statement)
        if not block:
            return end
        head = block[0]
        indent = self.line_text(head.lineno)[: self._char_column(head.lineno, head.col_offset)]
        if indent.strip(" \t\f"):
            return end  # the block follows its header on one line: no footer
        last, line = end, end + 1
        while line <= self._line_count() and _is_empty_line(self.line_text(line)):
            if self.line_text(line).startswith(indent):
                last = line
            line += 1
        return last

    def _line_count(self) -> int:
        self.line_text(1)
        return len(self.__dict__["_lines"])

    def definition_name(self, node: Union[ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef]) -> ast.Name:
        """The name of a def or class as a node placed where LibCST's ``.name`` is (``ast`` keeps only the
        string): what a finding about the whole definition points at."""
        tokens = StatementCode(self, node).tokens
        token = next((t for t in tokens if t.type == tokenize.NAME and t.string == node.name), None)
        line, column = token.start if token is not None else (node.lineno, self._char_column(node.lineno, node.col_offset))
        before = self.line_text(line)[:column]
        byte_column = len(before.encode("utf-8"))
        return ast.Name(id=node.name, ctx=ast.Load(), lineno=line, col_offset=byte_column, end_lineno=line,
                        end_col_offset=byte_column + len(node.name.encode("utf-8")))
    def statement_line_first_line(self, line: "StatementLine") -> str:
        """The first line of LibCST's ``code_for_node`` of a line of simple statements once stripped
        (``code.strip().splitlines()[0]``): the topmost comment line LibCST gives the statements (their
        ``leading_lines``: the comment lines above them, less those the module's header or the footer of
        the block before them takes), else their own first line."""
        head = line.first
        for number in self._leading_lines(head):
            text = self.line_text(number).lstrip()
            if text:
                return text.splitlines()[0]
        text = self.line_text(head.lineno)[self._char_column(head.lineno, head.col_offset):]
        text = text.lstrip() if line.last.end_lineno > head.lineno else text.strip()  # type: ignore[attr-defined]
        return text.splitlines()[0] if text else ""

    def _leading_lines(self, statement: ast.stmt) -> range:
        """The numbers of the blank and comment lines above ``statement`` that LibCST puts in its
        ``leading_lines``. After a compound statement, its last block's footer takes those up to the last
        comment indented as deep as that block; the module's header takes all of those above its first
        statement."""
        block, at = self._placed(statement)
        if at == 0:
            if block is self.tree.body:
                return range(0)
            first = statement.lineno
            while first > 1 and (not self.line_text(first - 1).strip()
                                 or self.line_text(first - 1).lstrip().startswith("#")):
                first -= 1
            return range(first, statement.lineno)
        previous = block[at - 1]
        first = previous.end_lineno + 1  # type: ignore[operator]
        depth = self._footer_depth(previous) if type(previous) in COMPOUND_STATEMENTS else None
        if depth is not None:
            for number in range(first, statement.lineno):
                text = self.line_text(number)
                body = text.lstrip()
                if body.startswith("#") and len(text) - len(body) >= depth:
                    first = number + 1
        return range(first, statement.lineno)

    def _footer_depth(self, statement: ast.stmt) -> Optional[int]:
        """The indentation of the last block of a compound statement (LibCST's last ``IndentedBlock``, whose
        footer holds the comments indented as deep after it); None where that body follows its header on
        its line."""
        block = statement.body  # type: ignore[attr-defined]
        kind = type(statement)
        if kind is ast.If and statement.orelse:  # type: ignore[attr-defined]
            only = statement.orelse[0]  # type: ignore[attr-defined]
            if (len(statement.orelse) == 1 and type(only) is ast.If  # type: ignore[attr-defined]
                    and self.line_text(only.lineno)[self._char_column(only.lineno, only.col_offset):].startswith("elif")):
                return self._footer_depth(only)
            block = statement.orelse  # type: ignore[attr-defined]
        elif kind in (ast.For, ast.AsyncFor, ast.While) and statement.orelse:  # type: ignore[attr-defined]
            block = statement.orelse  # type: ignore[attr-defined]
        elif kind is ast.Try or kind is getattr(ast, "TryStar", None):
            block = (statement.finalbody or statement.orelse  # type: ignore[attr-defined]
                     or (statement.handlers[-1].body if statement.handlers else statement.body))  # type: ignore[attr-defined]
        elif kind is getattr(ast, "Match", None):
            block = statement.cases[-1].body  # type: ignore[attr-defined]
        head = block[0]
        text = self.line_text(head.lineno)
        before = text[: self._char_column(head.lineno, head.col_offset)]
        return None if before.strip() else len(before)

    def source_segment(self, node: ast.AST) -> str:
        """``ast.get_source_segment(source, node)``, from lines split once per file (the stdlib splits the
        whole source on every call)."""
        lines = self.__dict__.get("_lines_with_ends")
        if lines is None:
            lines = self.__dict__["_lines_with_ends"] = _LINE_WITH_END.findall(self.source)
        first, last = node.lineno - 1, node.end_lineno - 1  # type: ignore[attr-defined,operator]
        if not 0 <= first <= last < len(lines):
            return ""
        if first == last:
            return lines[first].encode()[node.col_offset:node.end_col_offset].decode()  # type: ignore[attr-defined]
        head = lines[first].encode()[node.col_offset:].decode()  # type: ignore[attr-defined]
        tail = lines[last].encode()[:node.end_col_offset].decode()  # type: ignore[attr-defined]
        return "".join([head, *lines[first + 1:last], tail])

    def lines_text(self, first: int, last: int) -> str:
        """Lines ``first`` to ``last`` of the source (1-based, inclusive), their line ends kept."""
        return self.source[self._offset(first, 0):self._offset(last + 1, 0)]

    def _offset(self, line: int, column: int) -> int:
        """The character offset in ``source`` of (line, character column)."""
        starts = self.__dict__.get("_line_starts")
        if starts is None:
            starts = self.__dict__["_line_starts"] = [0] + [m.end() for m in _NEWLINE_SPLIT.finditer(self.source)]
        return starts[line - 1] + column if line <= len(starts) else len(self.source)

    def attributes_named(self, name: str) -> List[ast.Attribute]:
        """Every ``<expr>.<name>`` in the file, in source order (the outer first of two that start
        together)."""
        return self._grouped("_attributes", ast.Attribute, _attribute_of).get(name, [])  # type: ignore[return-value]

    def parameter_names(self) -> FrozenSet[str]:
        """Every name a def of the file takes as a parameter (a lambda in a default included)."""
        names = self.__dict__.get("_parameter_names")
        if names is None:
            names = self.__dict__["_parameter_names"] = frozenset(
                arg.arg for function in self.functions for arg in ast.walk(function.args) if type(arg) is ast.arg)
        return names

    def has_star_import(self) -> bool:
        """Some ``from m import *`` of the file (at any depth) may bind any name."""
        found = self.__dict__.get("_has_star_import")
        if found is None:
            found = self.__dict__["_has_star_import"] = any(
                any(alias.name == "*" for alias in statement.names)
                for statement in self.import_statements if type(statement) is ast.ImportFrom)
        return found

    def names_named(self, name: str) -> List[Tuple[ast.Name, ast.AST]]:
        """Every use of the variable ``name`` in the file (``ast.Name``: loads, stores, deletes), each with the
        node that holds it, in source order (names are leaves: ``parents`` does not know them); the first
        question walks the tree once for every name."""
        by_name = self.__dict__.get("_names")
        if by_name is None:
            by_name = self.survey()
        return by_name.get(name, [])

    def survey(self) -> Dict[str, List[Tuple[ast.Name, ast.AST]]]:
        """Build ``names_named``'s table in one walk (``walk``'s, in its order), and with it ``parents`` and
        ``attributes_named``'s groups where not built yet: a file that asks for names asks for parents too,
        and half of them for attributes (the training-code corpus), and one walk for all three costs 40% of
        three. (Asked first by a caller that will ask all three, before ``parents`` builds its own walk.)"""
        if "_names" in self.__dict__:
            return self.__dict__["_names"]
        fields_of, leaves, name_type, attribute_type, node_type = _FIELDS, _LEAVES, ast.Name, ast.Attribute, ast.AST
        by_name: Dict[str, List[Tuple[ast.Name, ast.AST]]] = {}
        parents: Optional[Dict[ast.AST, ast.AST]] = {} if "_parents" not in self.__dict__ else None
        attributes: Optional[Dict[object, List[ast.AST]]] = {} if "_attributes" not in self.__dict__ else None
        stack: List[ast.AST] = [self.tree]
        pop, push = stack.pop, stack.append
        while stack:
            node = pop()
            kind = type(node)
            if kind is attribute_type and attributes is not None:
                attributes.setdefault(node.attr, []).append(node)  # type: ignore[attr-defined]
            fields = fields_of.get(kind)
            if fields is None:
                fields = fields_of[kind] = _fields_of(node)
            for field, is_list in fields:  # (``_children``'s, with the names it leaves out)
                value = getattr(node, field, None)
                for child in value if is_list or (is_list is None and type(value) is list) else (value,):
                    child_kind = type(child)
                    if child_kind is name_type:
                        by_name.setdefault(child.id, []).append((child, node))  # type: ignore[attr-defined]
                    elif child_kind not in leaves and isinstance(child, node_type):
                        if parents is not None:
                            parents[child] = node
                        push(child)
        for found in by_name.values():
            found.sort(key=lambda pair: source_order(pair[0]))
        self.__dict__["_names"] = by_name
        if parents is not None:
            self.__dict__["_parents"] = parents
        if attributes is not None:
            for group in attributes.values():
                group.sort(key=source_order)
            self.__dict__["_attributes"] = attributes
        return by_name

    def binary_operations(self, operator: type) -> List[ast.BinOp]:
        """Every ``a <op> b`` of this operator type (``ast.MatMult`` for ``a @ b``) in the file, in source
        order."""
        return self._grouped("_binary_operations", ast.BinOp, _operator_of).get(operator, [])  # type: ignore[return-value]

    def _grouped(self, slot: str, kind: type, key) -> Dict[object, List[ast.AST]]:
        """The file's nodes of type ``kind`` grouped by ``key(node)``, each group in source order; the first
        question walks the tree once for every key."""
        groups = self.__dict__.get(slot)
        if groups is None:
            groups = self.__dict__[slot] = {}
            for node in walk(self.tree):
                if type(node) is kind:
                    groups.setdefault(key(node), []).append(node)
            for found in groups.values():
                found.sort(key=source_order)
        return groups

    # --- calls by what they call -------------------------------------------------------------------
    def calls_to(self, *qualified: str) -> List[AstCallInfo]:
        """Calls of these qualified names, however the file spells them (``import torch as t``,
        ``from torch.cuda import synchronize as sync``), in source order."""
        by_qualified = self.__dict__.get("_calls_by_qualified")
        if by_qualified is None:
            by_qualified = self.__dict__["_calls_by_qualified"] = {}
            for info in self.calls:
                name = self.qualified_name(info.node.func)
                if name is not None:
                    by_qualified.setdefault(name, []).append(info)
        if len(qualified) == 1:
            return by_qualified.get(qualified[0], [])
        return sorted((info for name in qualified for info in by_qualified.get(name, ())),
                      key=lambda info: source_order(info.node))


def _attribute_of(node: ast.Attribute) -> str:
    return node.attr


def _operator_of(node: ast.BinOp) -> type:
    return type(node.op)


def _position(node: ast.AST) -> Tuple[int, int]:
    return node.lineno, node.col_offset  # type: ignore[attr-defined]


def source_order(node: ast.AST) -> Tuple[int, int, int, int]:
    """Pre-order in the source: by start, and of two nodes that start together (``a.b(x).c(y)`` and
    ``a.b(x)``) the outer first, as LibCST's walk meets them."""
    return node.lineno, node.col_offset, -node.end_lineno, -node.end_col_offset  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Argument:
    """One argument of a call as LibCST's ``Call.args`` lists it."""

    node: ast.AST  # the positional value, the ``Starred`` or the ``keyword``
    value: ast.expr  # what is passed (a ``Starred``'s value)
    star: str  # "", "*" or "**"
    keyword: Optional[str]


def arguments(call: ast.Call) -> List[Argument]:
    """The arguments in source order, keywords and stars included, as LibCST's ``Call.args``."""
    found = [Argument(arg, arg.value, "*", None) if type(arg) is ast.Starred else Argument(arg, arg, "", None)
             for arg in call.args]
    found += [Argument(given, given.value, "**" if given.arg is None else "", given.arg) for given in call.keywords]
    if call.keywords and call.args:
        found.sort(key=lambda argument: _position(argument.node))
    return found


def call_arguments(call: ast.Call) -> List[Tuple[Optional[str], ast.expr]]:
    """The arguments as LibCST's ``Call.args`` lists them: in source order, as (keyword, value), the keyword
    None for positional arguments and for ``*x`` and ``**x`` (as LibCST's ``Arg.keyword``)."""
    return [(argument.keyword, argument.value) for argument in arguments(call)]


def has_star(call: ast.Call) -> bool:
    """An ``*args`` or ``**kwargs`` argument: what the call passes cannot all be read."""
    return any(type(arg) is ast.Starred for arg in call.args) or any(k.arg is None for k in call.keywords)


def keyword_value(call: ast.Call, name: str) -> Optional[ast.expr]:
    """The value of the first ``name=`` argument, as ``analysis.keyword_arg(...).value``."""
    return next((keyword.value for keyword in call.keywords if keyword.arg == name), None)


def is_parameter(function: ast.AST, name: str) -> bool:
    """``name`` is a positional or keyword parameter of the def ``function`` (not ``*args`` / ``**kwargs``)."""
    if type(function) not in (ast.FunctionDef, ast.AsyncFunctionDef):
        return False
    arguments = function.args  # type: ignore[attr-defined]
    return any(a.arg == name for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs))


def parameter_default(function: ast.AST, name: str) -> Optional[ast.expr]:
    """The default value of the def ``function``'s parameter ``name``; None where it has none."""
    arguments = function.args  # type: ignore[attr-defined]
    positional = [*arguments.posonlyargs, *arguments.args]
    for parameter, default in (*zip(positional[len(positional) - len(arguments.defaults):], arguments.defaults),
                               *zip(arguments.kwonlyargs, arguments.kw_defaults)):
        if parameter.arg == name:
            return default  # (None for a keyword-only parameter without one)
    return None


def unpacked_from(index: "AstIndex", name: str, scope: AstScope) -> Optional[Tuple[ast.expr, int]]:
    """For a name a tuple assignment of ``scope`` binds (``model, criterion = set_model(opt)``): the value
    unpacked and the name's place in the target, from the first such assignment; None where there is none."""
    for node in walk(scope):
        if type(node) is ast.Assign and len(node.targets) == 1 and type(node.targets[0]) is ast.Tuple \
                and index.scope_of(node) is scope:
            names = [element.id if type(element) is ast.Name else None for element in node.targets[0].elts]
            if name in names:
                return node.value, names.index(name)
    return None


def module_function_returns(index: "AstIndex", name: str) -> Optional[Tuple[ast.AST, List[ast.Return]]]:
    """The module-level def ``name`` of the file and its own ``return`` statements (not those of defs nested
    in it), or None where it has no such def or no return."""
    function = next((f for f in index.functions if f.name == name and index.parent(f) is index.tree), None)
    if function is None:
        return None
    returns = [node for node in walk(function) if type(node) is ast.Return and index.function_of(node) is function]
    return (function, returns) if returns else None


def argument_for(function: ast.AST, name: str, args: Sequence[ast.expr], keywords: Sequence[ast.keyword] = (),
                 skip: int = 0) -> Optional[ast.expr]:
    """What a call of the def ``function`` given ``args`` and ``keywords`` passes for its parameter ``name``:
    the ``name=`` keyword, else the positional argument at the parameter's place, ``skip`` places earlier (1
    where the call binds ``self`` itself, as ``obj.f(...)`` does). None where it passes none: the default
    applies. Whether the call spreads ``*args`` / ``**kwargs`` is the caller's to check (``has_star``)."""
    value = next((keyword.value for keyword in keywords if keyword.arg == name), None)
    if value is not None:
        return value
    arguments = function.args  # type: ignore[attr-defined]
    positional = [a.arg for a in (*arguments.posonlyargs, *arguments.args)]
    if name not in positional:
        return None
    at = positional.index(name) - skip
    return args[at] if 0 <= at < len(args) else None


@dataclass(frozen=True)
class Extent:
    """The text from ``first``'s start to ``last``'s end, where no one node spans it (a dict entry
    ``"key": value``)."""

    first: ast.AST
    last: ast.AST


@dataclass(frozen=True)
class StatementLine(Extent):
    """Simple statements on one line (``a = 1; b = 2``): LibCST's ``SimpleStatementLine``, which rules
    report as one statement."""


_NEWLINE_SPLIT = re.compile(r"\r\n?|\n")
_LINE_WITH_END = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")  # each line and its end, as ``ast`` splits  # the line ends ``ast`` counts (a form feed is not one)


Place = Tuple[int, int]  # (line, column in characters)


class StatementCode:
    """The text of one statement's first logical line as LibCST writes its parts (``code_for_node``), read
    from its tokens: a node with the parentheses around it (LibCST's ``lpar``/``rpar``; ``ast`` leaves them
    out, but for a tuple's own), and each line continued inside brackets without the statement's
    indentation (LibCST keeps that on the block, so ``code_for_node`` writes none). A line continued by a
    ``\\`` or inside a string keeps its text as written."""

    def __init__(self, index: AstIndex, statement: ast.stmt) -> None:
        self.index = index
        first = index.line_text(statement.lineno)
        self.indent = first[: len(first) - len(first.lstrip(" \t"))]
        self.tokens: List[tokenize.TokenInfo] = []  # up to the logical line's end, layout left out
        self.broken_lines = set()  # lines that end inside brackets (LibCST's ParenthesizedWhitespace)
        line = statement.lineno

        def readline() -> str:
            nonlocal line
            start, end = index._offset(line, 0), index._offset(line + 1, 0)
            line += 1
            text = index.source[start:end]
            return text[:-1] + "\n" if text.endswith("\r") else text  # tokenize ends lines at "\n" only

        try:
            for token in tokenize.generate_tokens(readline):
                if token.type == tokenize.NL:
                    self.broken_lines.add(token.start[0] + statement.lineno - 1)
                elif token.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                    break
                elif token.type not in (tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
                    self.tokens.append(token._replace(start=(token.start[0] + statement.lineno - 1, token.start[1]),
                                                      end=(token.end[0] + statement.lineno - 1, token.end[1])))
        except (tokenize.TokenError, SyntaxError):  # the line starts inside another statement's string
            self.tokens = []

    def place(self, node: ast.AST) -> Tuple[Place, Place]:
        """Where ``node`` starts and ends with the parentheses LibCST gives it."""
        index = self.index
        start = (node.lineno, index._char_column(node.lineno, node.col_offset))  # type: ignore[attr-defined]
        end = (node.end_lineno, index._char_column(node.end_lineno, node.end_col_offset))  # type: ignore[attr-defined]
        tokens = self.tokens
        first = next((i for i, t in enumerate(tokens) if t.start == start), None)
        last = next((i for i, t in enumerate(tokens) if t.end == end), None)
        if first is None or last is None:
            return start, end
        if type(node) is ast.GeneratorExp and not self._groups(first):  # `f(x for x in y)`: the call's
            first, last = first + 1, last - 1
        while (first > 0 and last + 1 < len(tokens) and tokens[first - 1].string == "("
               and tokens[last + 1].string == ")" and self._groups(first - 1)):
            first, last = first - 1, last + 1  # balanced between them: the two match
        if type(node) is ast.Slice and tokens[last].string == ":" and last + 1 < len(tokens):
            return tokens[first].start, tokens[last + 1].start  # `x[1: , 2]`: the colon's space is the slice's
        return tokens[first].start, tokens[last].end

    def _groups(self, at: int) -> bool:
        """The bracket at ``tokens[at]`` groups an expression: it opens no call, def or class."""
        if at == 0:
            return True
        before = self.tokens[at - 1]
        if before.type == tokenize.NAME:
            return keyword.iskeyword(before.string)
        return not (before.type in (tokenize.STRING, tokenize.NUMBER) or before.string in (")", "]", "}"))

    def text(self, start: Place, end: Place, newline: Optional[str] = None,
             replacements: Sequence[Tuple[Place, Place, str]] = ()) -> str:
        """The text from ``start`` to ``end``, each of ``replacements`` (start, end, text; not overlapping)
        put in; ``newline``: what line breaks inside brackets become where they are the file's own
        (LibCST's ``Module([])`` writes "\\n"), else they stay as written."""
        out, at = [], start
        for where, until, new in sorted(replacements):
            out.append(self._between(at, where, newline))
            out.append(new)
            at = until
        out.append(self._between(at, end, newline))
        return "".join(out)

    def _between(self, start: Place, end: Place, newline: Optional[str]) -> str:
        index = self.index
        default = _NEWLINE_SPLIT.search(index.source)
        out = []
        for line in range(start[0], end[0] + 1):
            text = index.source[index._offset(line, 0): index._offset(line + 1, 0)]
            text = text[: end[1]] if line == end[0] else text
            if line == start[0]:
                text = text[start[1]:]
            elif line - 1 in self.broken_lines and text.startswith(self.indent):
                text = text[len(self.indent):]
            if (newline is not None and line != end[0] and line in self.broken_lines
                    and text.endswith(default.group() if default else "\n")):
                text = text[: len(text) - len(default.group() if default else "\n")] + newline
            out.append(text)
        return "".join(out)


def _loop_header(loop: AstLoop) -> Tuple[ast.AST, ...]:
    return (loop.test,) if type(loop) is ast.While else (loop.target, loop.iter)  # type: ignore[union-attr]


def _is_empty_line(text: str) -> bool:
    """A line LibCST keeps as an ``EmptyLine``: blank, or a comment alone."""
    stripped = text.strip(" \t\f")
    return not stripped or stripped.startswith("#")


def _last_block(index: AstIndex, statement: ast.stmt) -> Optional[List[ast.stmt]]:
    """The block a compound statement ends with (its ``else``, ``finally``, last ``except`` or ``case``,
    an ``elif``'s own), whose footer ends the statement's text; None for a simple statement."""
    kind = type(statement)
    if kind is ast.If:
        orelse = statement.orelse  # type: ignore[attr-defined]
        if len(orelse) == 1 and type(orelse[0]) is ast.If:
            elif_ = orelse[0]
            if index.line_text(elif_.lineno)[index._char_column(elif_.lineno, elif_.col_offset):].startswith("elif"):
                return _last_block(index, elif_)
        return orelse or statement.body  # type: ignore[attr-defined]
    if kind in _LOOP_TYPES:
        return statement.orelse or statement.body  # type: ignore[attr-defined]
    if kind is ast.Try or kind is getattr(ast, "TryStar", None):
        return (statement.finalbody or statement.orelse  # type: ignore[attr-defined]
                or (statement.handlers[-1].body if statement.handlers else statement.body))  # type: ignore[attr-defined]
    if kind is getattr(ast, "Match", None):
        return statement.cases[-1].body  # type: ignore[attr-defined]
    if kind in COMPOUND_STATEMENTS:
        return statement.body  # type: ignore[attr-defined]
    return None


def _block_holding(parent: ast.AST, statement: ast.stmt) -> List[ast.stmt]:
    for name in ("body", "orelse", "finalbody"):
        block = getattr(parent, name, None)
        if type(block) is list and any(s is statement for s in block):
            return block
    raise LookupError("statement not found in its parent's blocks")


COMPOUND_STATEMENTS = frozenset(t for t in (
    ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, getattr(ast, "TryStar", None),
    ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, getattr(ast, "Match", None)) if t is not None)
_FUNCTION_TYPES = frozenset({ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda})
_LOOP_TYPES = frozenset({ast.For, ast.AsyncFor, ast.While})
_BLOCK_TYPES = frozenset(t for t in vars(ast).values()
                         if isinstance(t, type) and issubclass(t, ast.AST) and "body" in getattr(t, "_fields", ())
                         and t not in (ast.Lambda, ast.IfExp, ast.Expression, ast.Interactive))
_TRY_TYPES = frozenset(t for t in (ast.Try, getattr(ast, "TryStar", None)) if t is not None)
COMPREHENSIONS = frozenset({ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp})  # (each its own scope)
# Node types the walk records only for what CPython's compiler checks (``_Compilable.expression``).
_COMPILER_CHECKED = COMPREHENSIONS | frozenset(t for t in (
    ast.Return, ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr, ast.Starred, ast.comprehension,
    getattr(ast, "Match", None)) if t is not None)
# Every node type `_walk` has a branch for; it only visits the children of the others. Add the type here
# when adding a branch (tests/test_ast_index.py checks that every type the walk compares `kind` with is here).
_RECORDED_TYPES = _BLOCK_TYPES | _FUNCTION_TYPES | _LOOP_TYPES | {
    ast.Call, ast.ClassDef, ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.With,
    ast.AsyncWith} | _TRY_TYPES | _COMPILER_CHECKED
assert not _COMPILER_CHECKED & (_BLOCK_TYPES | _FUNCTION_TYPES | _LOOP_TYPES), "those branches come first"


# --- what CPython's compiler refuses that its parser takes --------------------------------------------
# ``ast.parse`` takes code that ``compile()`` refuses: its symbol table and code generator judge where a
# statement stands (`return` outside a def, `break` outside a loop, `await` outside an async def, `nonlocal` at
# module level) and what its parser does not (a keyword argument or a parameter named twice, a misplaced `*`,
# an assignment to `__debug__`). Compiling every file costs about 0.8x its `ast.parse`; the walk instead notes
# where such code may be (``AstIndex.may_not_compile``, a superset: never a finding by itself), and only those
# files are compiled (``engine.compile_problem``), which says whether and where CPython refuses them.

# Where a node stands, as the compiler judges it: (scope, in a loop's body in that scope, how many blocks the
# compiler counts around it at most). The scopes, in this order:
_MODULE, _CLASS, _COMPREHENSION, _LAMBDA, _DEF, _ASYNC_DEF = range(6)
_AT_MODULE = (_MODULE, False, 0)
_IN_COMPREHENSION = (_COMPREHENSION, False, 0)
# CPython refuses 20 nested blocks; the walk counts each block's most (3 for a try statement: its body, a
# handler, its cleanup), and compiles from half that.
_MANY_BLOCKS = 10
_SCOPE_STATEMENTS = frozenset({ast.Global, ast.Nonlocal})  # their names' uses and bindings before them
_JUDGED_LEAVES = _SCOPE_STATEMENTS | {ast.Break, ast.Continue}
_NEW_SCOPES = frozenset({ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef})


def _outer_parts(node: ast.AST) -> List[ast.AST]:
    """The parts of a def, lambda or class that run in the scope around it: decorators, defaults,
    annotations, bases, keywords (``_children`` of the rest: the body)."""
    if type(node) is ast.ClassDef:
        parts = [*node.bases, *node.keywords, *node.decorator_list]  # type: ignore[attr-defined]
    elif type(node) is ast.Lambda:
        parts = [node.args]  # type: ignore[attr-defined]
    else:
        parts = [node.args, *node.decorator_list, node.returns]  # type: ignore[attr-defined]
    parts.extend(getattr(node, "type_params", ()))
    return [part for part in parts if part is not None and type(part) not in _LEAVES]


class _Compilable:
    """What the walk saw that CPython's compiler may refuse; ``suspect`` once it saw any."""

    __slots__ = ("suspect", "starred", "futures", "yield_like")

    def __init__(self) -> None:
        self.suspect = False
        self.starred = 0  # `*x` anywhere; those among a call's arguments are fine (counted in ``done``)
        self.futures: List[ast.ImportFrom] = []
        self.yield_like = False  # a yield, await or `:=` somewhere (an annotation cannot hold one)

    def expression(self, node: ast.AST, where: Tuple[int, bool, int]) -> Tuple[int, bool, int]:
        """Judge a node of ``_COMPILER_CHECKED``; the ``where`` of its children."""
        kind = type(node)
        scope = where[0]
        if kind is ast.Return:
            if scope < _DEF or (scope == _ASYNC_DEF and node.value is not None):  # type: ignore[attr-defined]
                self.suspect = True  # outside a def; a value in what may be an async generator
        elif kind is ast.Yield or kind is ast.YieldFrom:
            self.yield_like = True
            if scope < _LAMBDA or (kind is ast.YieldFrom and scope == _ASYNC_DEF):
                self.suspect = True  # at module or class level, in a comprehension; `yield from` in an async def
        elif kind is ast.Await:
            self.yield_like = True
            if scope != _ASYNC_DEF:
                self.suspect = True
        elif kind is ast.NamedExpr:
            self.yield_like = True
            if scope == _COMPREHENSION:
                self.suspect = True
        elif kind is ast.Starred:
            self.starred += 1
        elif kind is ast.comprehension:
            if node.is_async:  # type: ignore[attr-defined]
                self.suspect = True
        elif kind in COMPREHENSIONS:
            return _IN_COMPREHENSION
        else:  # a match statement: its patterns' names
            self.suspect = True
        return where

    def handlers(self, node: ast.AST) -> None:
        """A try statement: a bare `except:` before the last handler; `except*` (what its blocks may hold)."""
        if type(node) is not ast.Try or any(h.type is None for h in node.handlers[:-1]):  # type: ignore[attr-defined]
            self.suspect = True

    def repeated(self, keywords: List[ast.keyword]) -> None:
        """Keywords of which two have the same name or none (``**``): a name named twice?"""
        names = [k.arg for k in keywords if k.arg is not None]
        if len(set(names)) != len(names):
            self.suspect = True

    def nested(self, where: Tuple[int, bool, int], blocks: int, in_loop: bool) -> Tuple[int, bool, int]:
        depth = where[2] + blocks
        if depth >= _MANY_BLOCKS:
            self.suspect = True
        return (where[0], in_loop, depth)

    def import_from(self, node: ast.ImportFrom, where: Tuple[int, bool, int]) -> None:
        if node.module == "__future__" and not node.level:
            self.futures.append(node)
        if where[0] != _MODULE and any(alias.name == "*" for alias in node.names):
            self.suspect = True

    def done(self, index: "AstIndex") -> bool:
        if self.suspect or "__debug__" in index.source:  # assigned, deleted, a parameter or keyword named so
            return True
        if self.futures:
            import __future__

            body = index.tree.body
            start = 1 if body and _is_docstring(body[0]) else 0
            leading = 0
            while (start + leading < len(body) and type(body[start + leading]) is ast.ImportFrom
                   and body[start + leading] in self.futures):
                leading += 1
            names = {alias.name for node in self.futures for alias in node.names}
            if (leading != len(self.futures) or not names <= set(__future__.all_feature_names)
                    or "barry_as_FLUFL" in names or ("annotations" in names and self.yield_like)):
                return True
        if self.starred:
            in_calls = sum(type(arg) is ast.Starred for info in index.calls for arg in info.node.args)
            if self.starred > in_calls:  # in a display or an assignment's targets
                return True
        return False


def _is_docstring(statement: ast.stmt) -> bool:
    return (type(statement) is ast.Expr and type(statement.value) is ast.Constant  # type: ignore[attr-defined]
            and type(statement.value.value) is str)  # type: ignore[attr-defined]


def _leaf_types() -> frozenset:
    """Node types that hold no call, binding or statement: the walk never enters them."""
    leaves = {ast.Name, ast.Constant, ast.Pass, ast.Break, ast.Continue, ast.alias, ast.Global, ast.Nonlocal}
    for base in (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop):
        leaves.update(base.__subclasses__())
    return frozenset(leaves)


_LEAVES = _leaf_types()
# Per node type, its fields that may hold child nodes, in order, each with whether it is a list (None: not
# known yet, the first node of the type had None there). Fields that hold no node are left out: contexts and
# operators (leaves), comments, and names and numbers (``attr``, ``level``), as the first node of the type
# shows. This walk is most of the index's cost.
_FIELDS: Dict[type, Tuple[Tuple[str, Optional[bool]], ...]] = {}
_NO_NODE_FIELDS = frozenset({"ctx", "op", "ops", "type_comment"})


def _fields_of(node: ast.AST) -> Tuple[Tuple[str, Optional[bool]], ...]:
    fields = []
    for name in type(node)._fields:
        value = getattr(node, name, None)
        if name not in _NO_NODE_FIELDS and not isinstance(value, (str, int, bytes)):
            fields.append((name, None if value is None else type(value) is list))
    return tuple(fields)


def _children(node: ast.AST) -> List[ast.AST]:
    """``ast.iter_child_nodes`` without the leaves, as a list."""
    fields = _FIELDS.get(type(node))
    if fields is None:
        fields = _FIELDS[type(node)] = _fields_of(node)
    out = []
    for name, is_list in fields:
        value = getattr(node, name, None)
        if is_list or (is_list is None and type(value) is list):
            for item in value:
                if type(item) not in _LEAVES and isinstance(item, ast.AST):
                    out.append(item)
        elif type(value) not in _LEAVES and isinstance(value, ast.AST):
            out.append(value)
    return out


def walk(node: ast.AST) -> Iterator[ast.AST]:
    """``ast.walk`` without the leaves (contexts, operators), about twice as fast; any order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(_children(current))


_ALL_FIELDS: Dict[type, Tuple[str, ...]] = {}


def every_node(node: ast.AST) -> Iterator[ast.AST]:
    """``ast.walk`` without contexts and operators, leaves included (names, constants, ``alias``), in any
    order: about twice as fast."""
    fields_of = _ALL_FIELDS
    stack = [node]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        current = pop()
        yield current
        fields = fields_of.get(type(current))
        if fields is None:
            fields = fields_of[type(current)] = tuple(
                name for name in type(current)._fields if name not in _NO_NODE_FIELDS)
        for name in fields:
            value = getattr(current, name, None)
            if type(value) is list:
                extend(item for item in value if isinstance(item, ast.AST))
            elif isinstance(value, ast.AST):
                push(value)


def _all_args(args: ast.arguments) -> Iterator[ast.arg]:
    yield from args.posonlyargs
    yield from args.args
    yield from args.kwonlyargs
    if args.vararg is not None:
        yield args.vararg
    if args.kwarg is not None:
        yield args.kwarg


# The last tree's index, shared by every rule's stage for that file. Kept here, not on the tree: the index
# refers to its tree, and a reference cycle would leave every file's tree to the cyclic garbage collector.
_last_index: Optional[AstIndex] = None


def index_of(tree: ast.Module, source: Optional[str] = None) -> AstIndex:
    """The index of ``tree`` (parsed from ``source``), built on first use and shared until another tree is
    indexed."""
    global _last_index
    index = _last_index
    if index is None or index.tree is not tree:
        index = _last_index = AstIndex(tree, source or "")
    elif source is not None and not index.source:
        index.source = source
    return index
