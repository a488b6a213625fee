"""Which of a file's functions ``torch.compile`` compiles, and what they call in the same file.

The entry points: ``@torch.compile`` (bare or with arguments) on a def; ``torch.compile(fn)`` of a def in
the file; ``torch.compile(model)`` or ``model.compile()`` of an instance of a class the file defines (its
``forward``). From there Dynamo inlines what runs: ``self.method(...)``, a module-level ``helper(...)``, and
the ``forward`` of the classes a compiled class builds in its ``__init__`` (its submodules). A def marked
``torch.compiler.disable`` is left out: the author keeps it eager on purpose.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Union

from torchlint.facts.index import AstIndex

COMPILE = "torch.compile"
_DISABLE = ("torch.compiler.disable", "torch._dynamo.disable", "torch._disable_dynamo")

Def = Union[ast.FunctionDef, ast.AsyncFunctionDef]


def compile_calls(index: AstIndex) -> List[ast.Call]:
    """``torch.compile(...)`` calls however spelled, and ``x.compile()`` of an instance of a local class."""
    found = [info.node for info in index.calls_to(COMPILE)]
    for info in index.calls_by_name.get("compile", ()):
        func = info.node.func
        if (isinstance(func, ast.Attribute) and not info.node.args
                and _local_class_instance(index, func.value, index.scope_of(info.node)) is not None):
            found.append(info.node)
    return found


@dataclass
class Compiled:
    entries: Dict[Def, ast.AST] = field(default_factory=dict)  # compiled directly: def -> decorator or call
    reached: Dict[Def, ast.AST] = field(default_factory=dict)  # the entries and what they run: def -> that site


def compiled_functions(index: AstIndex) -> Compiled:
    """The defs the file compiles, and every def compiled code runs, each with the place that compiles it
    (a decorator or a compile call), in the order found; found once per file."""
    known = index.shared.get("compiled.functions")
    if known is not None:
        return known  # type: ignore[return-value]
    compiled = index.shared["compiled.functions"] = Compiled()
    for function in index.functions:
        for decorator in function.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            if index.qualified_name(target) == COMPILE:
                compiled.entries.setdefault(function, decorator)
    for call in compile_calls(index):
        function = _compiled_def(index, call)
        if function is not None:
            compiled.entries.setdefault(function, call)
    pending = list(compiled.entries.items())
    while pending:
        function, site = pending.pop(0)
        if function in compiled.reached or _disabled(index, function):
            continue
        compiled.reached[function] = site
        pending.extend((callee, site) for callee in _callees(index, function) if callee not in compiled.reached)
    return compiled


def _compiled_def(index: AstIndex, call: ast.Call) -> Optional[Def]:
    """The def a compile call compiles: the function passed, or the ``forward`` of the local class whose
    instance is passed (``torch.compile(model)``) or compiled in place (``model.compile()``)."""
    scope = index.scope_of(call)
    if index.qualified_name(call.func) == COMPILE:
        target = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "model"), None)
    else:
        target = call.func.value  # type: ignore[attr-defined]
    if target is None:
        return None
    if isinstance(target, ast.Name):
        function = _local_def(index, target.id, scope)
        if function is not None:
            return function
    klass = _local_class_instance(index, target, scope)
    return _method(index, klass, "forward") if klass is not None else None


def _local_def(index: AstIndex, name: str, scope: ast.AST) -> Optional[Def]:
    """The def named ``name`` defined directly in ``scope`` (a def, or the module), else at module level;
    never a method."""
    def defined_in(where: ast.AST) -> Optional[Def]:
        owner = None if where is index.tree else where
        return next((f for f in index.functions if f.name == name and index.function_of(f) is owner
                     and not isinstance(index.parent(f), ast.ClassDef)), None)
    return defined_in(scope) or (defined_in(index.tree) if scope is not index.tree else None)


def _classes(index: AstIndex) -> Dict[str, ast.ClassDef]:
    known = index.shared.get("compiled.classes")
    if known is None:
        known = index.shared["compiled.classes"] = {}
        for klass in index.class_of.values():
            if klass is not None:
                known.setdefault(klass.name, klass)  # type: ignore[union-attr]
    return known  # type: ignore[return-value]


def _local_class_instance(index: AstIndex, expr: ast.expr, scope: ast.AST) -> Optional[ast.ClassDef]:
    """The local class ``expr`` is an instance of: ``Net(...)``, or a name bound only to one."""
    if isinstance(expr, ast.Name):
        values = [v for v in index.values_of(expr.id, scope) if v is not None]  # type: ignore[arg-type]
        if not values and scope is not index.tree:
            values = [v for v in index.values_of(expr.id, index.tree) if v is not None]
        classes = {_instantiated(index, v) for v in values} - {None}  # `model = torch.compile(model)` too
        return classes.pop() if len(classes) == 1 else None
    return _instantiated(index, expr)


# Methods that return the module they are called on: `Net().cuda()`, `Net().to(device)`.
_RETURNS_MODULE = {"to", "cuda", "cpu", "float", "half", "bfloat16", "double", "train", "eval", "requires_grad_"}


def _instantiated(index: AstIndex, expr: ast.AST) -> Optional[ast.ClassDef]:
    """The local class ``expr`` builds: ``Net(...)``, ``Net(...).cuda()``, ``Net(...).to(device)``."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _RETURNS_MODULE:
        expr = expr.func.value
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
        return _classes(index).get(expr.func.id)
    return None


def _method(index: AstIndex, klass: ast.ClassDef, name: str) -> Optional[Def]:
    return next((s for s in klass.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == name),
                None)


def _callees(index: AstIndex, function: Def) -> List[Def]:
    """The local defs ``function`` runs: its class's methods through ``self.m(...)``, module-level functions
    by name, and the ``forward`` of submodules (local classes built in its class's ``__init__``)."""
    klass = index.class_of.get(function)
    found: List[Def] = []
    for info in index.calls_in(function):
        if info.function is not function:
            continue
        func = info.node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self" \
                and klass is not None:
            method = _method(index, klass, func.attr)
            if method is not None:
                found.append(method)
        elif isinstance(func, ast.Name):
            helper = _local_def(index, func.id, index.tree)
            if helper is not None:
                found.append(helper)
    if klass is not None and function.name == "forward":
        init = _method(index, klass, "__init__")
        for info in index.calls_in(init) if init is not None else ():
            built = _instantiated(index, info.node)
            forward = _method(index, built, "forward") if built is not None and built is not klass else None
            if forward is not None:
                found.append(forward)
    return found


def _disabled(index: AstIndex, function: Def) -> bool:
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if index.qualified_name(target) in _DISABLE:
            return True
    return False


def dynamo_setting(index: AstIndex, name: str) -> bool:
    """The file sets Dynamo's ``name`` option: ``torch._dynamo.config.<name> = ...`` (or any other use of
    the attribute) or ``<name>=...`` passed to a call (``torch._dynamo.config.patch(<name>=True)``). Which
    value it sets is not read: where the file configures it, the author decided."""
    if index.attributes_named(name):
        return True
    return any(k.arg == name for info in index.calls for k in info.node.keywords)
