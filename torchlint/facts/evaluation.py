"""Where code runs without autograd, and where it puts a model in evaluation mode.

Grad mode: ``with torch.no_grad():`` / ``inference_mode()`` / ``set_grad_enabled(False)`` blocks (and a
project's own grad helpers, and context managers made elsewhere, which may be one), functions decorated
with them, functions the file calls only from such code, and a script that turns gradients off for good
with a module-level ``torch.set_grad_enabled(False)``. Evaluation mode: ``model.eval()``,
``model.train(False)``, ``model.train(mode=False)`` and the name each one switches, and loops over a
validation or test loader.
"""

from __future__ import annotations

import ast
import re
from typing import Dict, Optional, Sequence, Set, Union

from torchlint.facts.index import AstIndex, call_arguments, dotted_name, is_literal
from torchlint.facts.grad_mode import sets_grad_off, turns_grad_off

_EVAL_LOADER = re.compile(r"(^|_)(val|valid|validation|test|testing|eval|evaluation|dev|holdout)"
                          r"(?=$|_|\d|loader|dataloader|dl|ds|dataset|data|set|batch)", re.IGNORECASE)
_LOADER = re.compile(r"loader|(^|_)dl($|_)|dataloader|(^|_)ds($|_)|dataset|batches", re.IGNORECASE)
_WRAPPERS = frozenset({"enumerate", "tqdm", "iter", "zip"})

Def = Union[ast.FunctionDef, ast.AsyncFunctionDef]


# --- grad mode ----------------------------------------------------------------------------------------
def may_disable_grad(index: AstIndex, node: ast.AST) -> bool:
    """``node`` is a ``with`` that may turn autograd off: a no-grad / inference-mode / ``set_grad_enabled(False)``
    call, a call of something named for grad or inference (a project's own helper), or a context manager
    made elsewhere (``with ctx:``, ``ctx = torch.no_grad()``), which may be one."""
    if type(node) is not ast.With and type(node) is not ast.AsyncWith:
        return False
    for item in node.items:  # type: ignore[attr-defined]
        expr = item.context_expr
        if isinstance(expr, (ast.Name, ast.Attribute)):
            return True
        if not isinstance(expr, ast.Call):
            continue
        called = (dotted_name(expr.func) or "").lower()
        if "grad" in called or "inference" in called or turns_grad_off(index, expr):
            return True
    return False


def grad_off_between(index: AstIndex, node: ast.AST, outer: ast.AST) -> bool:
    """A grad-disabling ``with`` holds ``node``, up to and including ``outer``."""
    for ancestor in index.ancestors(node):
        if may_disable_grad(index, ancestor):
            return True
        if ancestor is outer:
            return False
    return may_disable_grad(index, outer)


def grad_off_anywhere_around(index: AstIndex, node: ast.AST) -> bool:
    """A grad-disabling ``with`` holds ``node``, however far out (a def inside the block included)."""
    return any(may_disable_grad(index, ancestor) for ancestor in index.ancestors(node))


def decorator_names(function: Def) -> Sequence[str]:
    """The decorators' dotted names as written (``torch.no_grad`` for ``@torch.no_grad()``)."""
    names = (dotted_name(d.func if isinstance(d, ast.Call) else d) for d in function.decorator_list)
    return [name for name in names if name is not None]


def decorated_grad_off(function: Union[Def, ast.Lambda]) -> bool:
    """Decorated with something named for grad or inference: ``@torch.no_grad()``, ``@inference_mode()``,
    a project's ``@no_grad_eval``."""
    if isinstance(function, ast.Lambda):
        return False
    return any("grad" in name or "inference" in name for name in decorator_names(function))


def grad_globally_off(index: AstIndex) -> bool:
    """``torch.set_grad_enabled(False)`` as a statement outside every def: the script never records graphs."""
    for info in index.calls_by_name.get("set_grad_enabled", ()):
        call = info.node
        if info.function is None and sets_grad_off(index, call) and type(index.parent(call)) is ast.Expr:
            return True
    return False


def called_without_grad(index: AstIndex, name: str) -> bool:
    """Some call of the file's function ``name`` runs without autograd: in a grad-disabling ``with``, in a
    function decorated so or itself called so (through lambdas to the def around them), as
    ``torch.no_grad()(name)``, or through a table of functions that holds it (``fn = [f, g][level]`` or
    ``fns = {"a": f}`` with ``fn(x)`` / ``fns[key](x)`` called so)."""
    memo: Dict[str, bool] = index.shared.setdefault("evaluation.called_without_grad", {})  # type: ignore[assignment]
    return _called_without_grad(index, name, memo, set())


def _called_without_grad(index: AstIndex, name: str, memo: Dict[str, bool], seen: set) -> bool:
    if name in memo:
        return memo[name]
    if name in seen:
        return False
    seen.add(name)
    result = False
    for info in (*index.calls_by_name.get(name, ()), *_table_calls(index).get(name, ())):
        if grad_off_anywhere_around(index, info.node):
            result = True
            break
        caller = info.function
        while isinstance(caller, ast.Lambda):
            caller = index.function_of(caller)
        if caller is not None and (decorated_grad_off(caller)
                                   or _called_without_grad(index, caller.name, memo, seen)):
            result = True
            break
    if not result:  # `fn = [infer_basic, infer_tta][level]` then `fn(x)` under no_grad: a call of each entry
        result = any(_called_without_grad(index, table, memo, seen) for table in _tables_holding(index).get(name, ()))
    if not result:  # torch.no_grad()(evaluate)
        for wrapper in ("no_grad", "inference_mode"):
            for info in index.calls_by_name.get(wrapper, ()):
                outer = index.parent(info.node)
                if isinstance(outer, ast.Call) and outer.func is info.node and any(
                        isinstance(value, (ast.Name, ast.Attribute)) and (dotted_name(value) or "").split(".")[-1] == name
                        for _, value in call_arguments(outer)):
                    result = True
    memo[name] = result
    return result


_DISPLAYS = (ast.List, ast.Tuple, ast.Set, ast.Dict)


def _tables_holding(index: AstIndex) -> Dict[str, Set[str]]:
    """function name -> the names bound to a table of functions that holds it by name: a list, tuple, set
    or dict display (``fns = [infer_basic, infer_tta]``, ``steps = {"a": f}``) or one entry picked from
    one (``fn = [infer_basic, infer_tta][level]``). Read off the index's bindings once per file."""
    tables: Optional[Dict[str, Set[str]]] = index.shared.get("evaluation.tables_holding")  # type: ignore[assignment]
    if tables is None:
        tables = {}
        for names in index.bindings.values():
            for bound, values in names.items():
                for value in values:
                    display = value.value if isinstance(value, ast.Subscript) else value
                    if not isinstance(display, _DISPLAYS):
                        continue
                    entries = display.values if isinstance(display, ast.Dict) else display.elts
                    for entry in entries:
                        if isinstance(entry, ast.Name):
                            tables.setdefault(entry.id, set()).add(bound)
        index.shared["evaluation.tables_holding"] = tables
    return tables


def _table_calls(index: AstIndex) -> Dict[str, list]:
    """table name -> the calls of one of its entries by subscript (``fns[level](x)``), once per file."""
    calls: Optional[Dict[str, list]] = index.shared.get("evaluation.table_calls")  # type: ignore[assignment]
    if calls is None:
        calls = {}
        if _tables_holding(index):
            for info in index.calls:
                func = info.node.func
                if isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name):
                    calls.setdefault(func.value.id, []).append(info)
        index.shared["evaluation.table_calls"] = calls
    return calls


# --- evaluation mode --------------------------------------------------------------------------------
def eval_receiver(index: AstIndex, call: ast.Call) -> Optional[str]:
    """``m`` for ``m.eval()`` / ``m.train(False)`` / ``m.train(mode=False)``; for ``enc = Encoder(...).eval()``
    the name it is bound to."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return None
    switched = func.attr == "eval" and not call.args and not call.keywords
    if func.attr == "train":
        arguments = call_arguments(call)
        switched = (len(arguments) == 1 and is_literal(arguments[0][1], False)
                    and arguments[0][0] in (None, "mode"))
    if not switched:
        return None
    if isinstance(func.value, ast.Call):
        target = index.assigned_to.get(call)
        return dotted_name(target) if target is not None else None
    return dotted_name(func.value)


def train_receiver(index: AstIndex, call: ast.Call) -> Optional[str]:
    """``m`` for ``m.train()`` / ``m.train(flag)``: any ``train`` call that is not a switch to eval mode."""
    if isinstance(call.func, ast.Attribute) and call.func.attr == "train" and eval_receiver(index, call) is None:
        return dotted_name(call.func.value)
    return None


def is_eval_loader(expr: ast.AST) -> bool:
    """A validation or test loader by its name (``val_loader``, ``self.test_dl``), also wrapped in
    ``enumerate``/``tqdm``/``iter``/``zip``."""
    if isinstance(expr, ast.Call):
        arguments = call_arguments(expr)
        if (arguments and isinstance(expr.func, ast.Name) and expr.func.id in _WRAPPERS) or (
                isinstance(expr.func, ast.Attribute) and expr.func.attr == "tqdm"):
            return any(is_eval_loader(value) for keyword, value in arguments if keyword is None)
    name = dotted_name(expr)
    if name is None:
        return False
    last = name.split(".")[-1]
    return bool(_EVAL_LOADER.search(last) and _LOADER.search(last))
