"""Which models a file wraps in ``DistributedDataParallel``, and where their gradient sync is turned off.

DDP all-reduces the gradients in every ``backward()`` that follows a forward run with
``require_backward_grad_sync`` set (the forward decides: ``DistributedDataParallel.forward`` prepares the
reducer). ``model.no_sync()`` clears it for the forward and backward inside it; Accelerate's
``accelerator.no_sync(model)`` and ``accelerator.accumulate(model)`` use it; nanoGPT assigns
``model.require_backward_grad_sync`` itself.
"""

from __future__ import annotations

import ast
from typing import Dict, List, Optional, Set

from torchlint.facts.index import AstIndex, AstScope, call_name, dotted_name, walk

DDP = ("torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel")
# Calls that keep a module while wrapping it: `torch.compile(DDP(model))` is still the DDP model.
_KEEPS_MODULE = ("torch.compile",)
# Context managers that turn the sync off (DDP's own, Accelerate's), and the attribute nanoGPT sets.
NO_SYNC_CONTEXTS = ("no_sync", "accumulate")
SYNC_FLAG = "require_backward_grad_sync"


def ddp_models(index: AstIndex) -> Dict[str, List[ast.Call]]:
    """The names (``model``, ``self.model``) the file binds to a ``DistributedDataParallel(...)``, with the
    wrapping calls: ``model = DDP(model, device_ids=[rank])``, ``model = DDP(m) if ddp else m``,
    ``model = torch.compile(DDP(m))``. Keyed by the dotted name, file-wide: the wrapped model is usually
    passed on under the same name (``train(model, loader)``). A local helper that returns the wrap
    (``def wrap_model(m): return DDP(m, ...)``) counts at each ``model = wrap_model(model)``."""
    known = index.shared.get("distributed.ddp_models")
    if known is None:
        known = index.shared["distributed.ddp_models"] = {}
        wraps = index.calls_to(*DDP)
        helpers = {function.name for function in (_returned_by(index, info.node) for info in wraps) if function}
        wraps = wraps + [info for name in helpers for info in index.calls_by_name.get(name, ())
                         if isinstance(info.node.func, ast.Name)]
        for info in wraps:
            target = _bound_to(index, info.node)
            name = dotted_name(target) if target is not None else None
            if name is not None:
                known.setdefault(name, []).append(info.node)  # type: ignore[union-attr]
    return known  # type: ignore[return-value]


def _returned_by(index: AstIndex, call: ast.Call) -> Optional[ast.AST]:
    """The def that returns ``call`` itself (``return DDP(model, ...)``), else None."""
    parent = index.parent(call)
    return index.function_of(parent) if isinstance(parent, ast.Return) else None


def _bound_to(index: AstIndex, call: ast.Call) -> Optional[ast.expr]:
    node: ast.AST = call
    while True:
        target = index.assigned_to.get(node) if isinstance(node, ast.Call) else None
        if target is not None:
            return target
        parent = index.parent(node)
        if isinstance(parent, ast.IfExp) and node is not parent.test:
            node = parent
        elif (isinstance(parent, ast.Call) and node in parent.args
              and index.qualified_name(parent.func) in _KEEPS_MODULE):
            node = parent
        elif isinstance(parent, ast.Assign) and len(parent.targets) == 1:
            return parent.targets[0]
        elif isinstance(parent, ast.AnnAssign):  # `model: LlamaForCausalLM = DDP(model, ...)`
            return parent.target
        else:
            return None


def calls_module(call: ast.Call, models: Set[str]) -> bool:
    """``call`` runs one of ``models`` forward: ``model(x)``, or takes it as an argument
    (``loss = step(model, batch)``, ``criterion(model(x), y)`` is the inner call)."""
    if dotted_name(call.func) in models:
        return True
    return any(dotted_name(arg) in models for arg in call.args) or any(
        dotted_name(k.value) in models for k in call.keywords)


def no_sync_context(item: ast.withitem) -> Optional[ast.Call]:
    """The ``X.no_sync()`` / ``accelerator.no_sync(model)`` / ``accelerator.accumulate(model)`` call a
    ``with`` item opens, else None."""
    expr = item.context_expr
    if isinstance(expr, ast.Call) and call_name(expr) in NO_SYNC_CONTEXTS and isinstance(expr.func, ast.Attribute):
        return expr
    return None


def handles_sync(index: AstIndex, scope: AstScope, models: Set[str]) -> bool:
    """``scope`` (a def, or the module for top-level code) may turn DDP's sync off: a ``no_sync`` or
    ``accumulate`` context in any form (also chosen ahead, ``ctx = model.no_sync if ... else nullcontext``),
    an assignment of ``require_backward_grad_sync`` (nanoGPT), or a ``with`` whose context takes the model
    (``with misc.ddp_sync(ddp, last_round):``, EDM's helper, which this file does not show). Where it
    does, the author manages the sync; what it covers is not followed further."""
    for node in walk(scope):
        if isinstance(node, ast.Attribute) and (node.attr == SYNC_FLAG or node.attr in NO_SYNC_CONTEXTS):
            return True
        if isinstance(node, (ast.With, ast.AsyncWith)) and any(
                isinstance(item.context_expr, ast.Call) and calls_module(item.context_expr, models)
                for item in node.items):
            return True
    return False
