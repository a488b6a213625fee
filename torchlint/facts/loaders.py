"""The DataLoaders a file builds, the loops that iterate them and the batches those loops move to a device.

Facts shared by the input-pipeline rules (TL401, TL402, TL403), read off the file's index. A loader is tied
to a loop only through what the file shows: the loop iterates the name the loader was assigned to
(``train_loader``, ``self.train_loader``), possibly through ``enumerate``/``tqdm``/``zip`` or a helper
function of the same file that takes the loader as a parameter. A loader built in another module
(``data.py``) cannot be tied to the loop that trains on it (``train.py``): the rules stay silent there
rather than guess.
"""

from __future__ import annotations

import ast
import weakref
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Set, Tuple, Union

from torchlint.ast_index import (
    AstCallInfo, AstIndex, AstLoopInfo, AstScope, call_name, dotted_name, keyword_value, source_order, target_names,
    walk,
)
from torchlint.facts.devices import CUDA, device_kind, to_destination

# torch.utils.data.DataLoader's parameters that may be passed by position, in order (torch 1.7 to 2.x);
# prefetch_factor, persistent_workers and pin_memory_device are keyword-only.
DATALOADER_POSITIONAL = (
    "dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "num_workers", "collate_fn", "pin_memory",
    "drop_last", "timeout", "worker_init_fn", "multiprocessing_context", "generator",
)
_DATALOADER_NAMES = {"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"}
# Calls that wrap an iterable and still yield its items (possibly with an index).
WRAPPERS = {"enumerate", "tqdm", "iter", "zip", "trange", "track", "progress_bar", "Bar", "islice"}
# In-memory datasets: indexing them is a tensor slice, which worker processes only slow down.
_IN_MEMORY_DATASETS = {"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"}
UNREADABLE = object()  # an argument ``*args``/``**kwargs`` may set


def loader_argument(call: ast.Call, name: str) -> Union[None, ast.expr, object]:
    """The value that sets DataLoader parameter ``name``, None when it is not passed, or ``UNREADABLE``
    when ``*args``/``**kwargs`` may set it."""
    found = keyword_value(call, name)
    if found is not None:
        return found
    if _has_star(call):
        return UNREADABLE
    position = argument_position(call, name)
    return call.args[position] if position is not None else None


def argument_position(call: ast.Call, name: str) -> Optional[int]:
    """Where parameter ``name`` is passed by position in a call without ``*args``, else None. (With no
    star, positional arguments come first in the call, so this is also the LibCST twin's ``args`` index.)"""
    if name in DATALOADER_POSITIONAL and keyword_value(call, name) is None:
        index = DATALOADER_POSITIONAL.index(name)
        if index < len(call.args):
            return index
    return None


def int_value(index: AstIndex, expr: ast.expr) -> Optional[int]:
    """The value of an integer literal, or of a name bound once (in scope or at module level) to one."""
    if _is_integer(expr):
        return expr.value  # type: ignore[attr-defined]
    if type(expr) is ast.Name:
        value = index.single_value(expr.id, index.scope_of(expr))
        if value is not None and _is_integer(value):
            return value.value  # type: ignore[attr-defined]
    return None


def _is_integer(node: ast.AST) -> bool:
    return type(node) is ast.Constant and type(node.value) is int  # type: ignore[attr-defined]  # not True


@dataclass(eq=False)
class LoaderSite:
    """One ``DataLoader(...)`` call and what the file does with it."""

    call: ast.Call
    target: Optional[str] = None  # the name it is assigned to, as written: "train_loader", "self.train_loader"
    loops: List[AstLoopInfo] = field(default_factory=list)  # loops that iterate it
    # per loop, the calls of a helper function that put the loop in place (the loop is in the helper)
    via_calls: Dict[ast.AST, List[ast.Call]] = field(default_factory=dict)


class LoaderFacts:
    """Computed once per file (``loader_facts(index)``)."""

    def __init__(self, index: AstIndex) -> None:
        # a proxy: the facts live in ``index.shared``, and a strong link back would make every file's index
        # and tree a reference cycle, left to the cyclic collector (tests/test_no_cycles.py)
        self.index: AstIndex = weakref.proxy(index)  # type: ignore[assignment]
        self._trains: Dict[ast.AST, bool] = {}
        self._dataset_on_cuda: Optional[bool] = None
        self._training_functions = self._functions_that_train()
        self.sites = self._sites()

    # --- which loops iterate what --------------------------------------------------------------
    def iterated(self, loop: AstLoopInfo) -> List[ast.expr]:
        """The iterables a for loop walks: ``loader`` in ``enumerate(tqdm(loader))``; a name bound once to
        such a wrapper (``pbar = tqdm(loader)``) is followed."""
        if type(loop.node) is ast.While:
            return []
        return list(self._unwrap(loop.node.iter, depth=0))  # type: ignore[union-attr]

    def _unwrap(self, expr: ast.expr, depth: int) -> Iterator[ast.expr]:
        if depth > 3:
            return
        if type(expr) is ast.Call and call_name(expr) in WRAPPERS:  # call_name: a Name or Attribute callee
            for arg in expr.args:
                if type(arg) is not ast.Starred:
                    yield from self._unwrap(arg, depth + 1)
            return
        if type(expr) is ast.Name:
            value = self.index.single_value(expr.id, self.index.scope_of(expr))
            if type(value) is ast.Call and call_name(value) in WRAPPERS:  # type: ignore[arg-type]
                yield from self._unwrap(value, depth + 1)  # type: ignore[arg-type]
                return
        yield expr

    def _sites(self) -> List[LoaderSite]:
        index = self.index
        sites = []
        by_name: Dict[str, List[LoaderSite]] = {}
        direct: Dict[ast.AST, LoaderSite] = {}
        # by the called name as written: a loader imported under another name (`DL(...)`) is not followed
        for info in index.calls_by_name.get("DataLoader", ()):
            call = info.node
            if index.qualified_name(call.func) not in _DATALOADER_NAMES:
                continue
            target = _assigned_target(index, call)
            site = LoaderSite(call, dotted_name(target) if target is not None else None)
            sites.append(site)
            direct[call] = site
            if site.target is not None:
                by_name.setdefault(site.target, []).append(site)
        if not sites:
            return sites
        # name -> scope -> its loaders, in source order: a use is matched to its scope's and the module's
        by_scope: Dict[str, Dict[AstScope, List[LoaderSite]]] = {}
        for name, named in by_name.items():
            for site in named:
                by_scope.setdefault(name, {}).setdefault(index.scope_of(site.call), []).append(site)
        for loop in index.loops:
            for expr in self.iterated(loop):
                if expr in direct:
                    direct[expr].loops.append(loop)
                    continue
                tied = self._bound_to(by_name, by_scope, expr)
                for site in tied:
                    site.loops.append(loop)
                # the loop iterates a parameter: tie it to the loaders passed to that function
                for call, argument in self._arguments_for_parameter(loop.function, expr):
                    if argument in direct:
                        targets = [direct[argument]]
                    else:
                        targets = self._bound_to(by_name, by_scope, argument)
                    for site in targets:
                        if site not in tied:
                            site.loops.append(loop)
                            tied.append(site)
                        site.via_calls.setdefault(loop.node, []).append(call)
        return sites

    def _bound_to(self, by_name: Dict[str, List[LoaderSite]], by_scope: Dict[str, Dict[AstScope, List[LoaderSite]]],
                  use: ast.expr) -> List[LoaderSite]:
        """The loaders ``use`` (a name or ``self.x``) refers to, in source order. A plain name's loader is
        assigned in the same scope, or at module level and not rebound in the using scope; an attribute
        (``self.train_loader``) is matched by its spelling anywhere in the file."""
        name = dotted_name(use) or ""
        if type(use) is not ast.Name:
            return list(by_name.get(name, ()))
        index, scopes = self.index, by_scope.get(name)
        if not scopes:
            return []
        use_scope = index.scope_of(use)
        found = list(scopes.get(use_scope, ()))
        if use_scope is not index.tree and not index.values_of(use.id, use_scope):  # type: ignore[attr-defined]
            found += scopes.get(index.tree, ())
            found.sort(key=lambda site: source_order(site.call))
        return found

    def _arguments_for_parameter(
        self, function: Optional[AstScope], expr: ast.expr
    ) -> Iterator[Tuple[ast.Call, ast.expr]]:
        """(call, argument) for each same-file call of ``function`` that passes the parameter ``expr`` names."""
        if type(expr) is not ast.Name or type(function) not in (ast.FunctionDef, ast.AsyncFunctionDef):
            return
        name = expr.id  # type: ignore[attr-defined]
        arguments = function.args  # type: ignore[union-attr]
        params = [p.arg for p in (*arguments.posonlyargs, *arguments.args)]
        if name not in params and name not in {p.arg for p in arguments.kwonlyargs}:
            return
        is_method = self.index.class_of.get(function) is not None and params[:1] in (["self"], ["cls"])
        for info in self.index.calls_by_name.get(function.name, ()):  # type: ignore[union-attr]
            call = info.node
            if is_method != (type(call.func) is ast.Attribute) or _has_star(call):
                continue
            chosen = keyword_value(call, name)
            if chosen is None and name in params:
                position = params.index(name) - (1 if is_method else 0)
                if 0 <= position < len(call.args):
                    chosen = call.args[position]
            if chosen is not None:
                yield call, chosen

    # --- training ------------------------------------------------------------------------------
    def _functions_that_train(self) -> Set[str]:
        """Names of the file's functions that call ``backward()`` or step an optimizer."""
        index = self.index
        return {
            function.name for function in index.functions
            if any(index.is_backward_call(c.node) or index.is_optimizer_step(c.node, c.function)
                   for c in _calls_within(index, function))
        }

    def loop_trains(self, loop: AstLoopInfo) -> bool:
        """The loop runs a training step per iteration: ``backward()``/``optimizer.step()`` in its body, or a
        call of a function of this file that does (``train_step(batch)``, ``self.training_step(batch)``)."""
        key = loop.node
        if key not in self._trains:
            self._trains[key] = loop.is_training or any(
                call_name(c) in self._training_functions
                and (type(c.func) is ast.Name
                     or (type(c.func) is ast.Attribute
                         and dotted_name(c.func.value) == "self"))  # type: ignore[attr-defined]
                for c in loop.direct_calls
            )
        return self._trains[key]

    def training_loops(self, site: LoaderSite) -> List[AstLoopInfo]:
        return [loop for loop in site.loops if self.loop_trains(loop)]

    def repeated_iteration(self, site: LoaderSite, loop: AstLoopInfo) -> Optional[AstLoopInfo]:
        """An outer loop that runs ``loop`` (and so iterates the loader) again and again, such as an epoch
        loop, while the loader itself is built once outside it. None where there is none."""
        index = self.index
        for outer in index.enclosing_loops(loop.node):
            if outer is not loop and not index.contains(outer.node, site.call):
                return outer
        function = loop.function
        for call in site.via_calls.get(loop.node, ()):
            if function is not None and index.contains(function, site.call):
                continue
            for outer in index.enclosing_loops(call):
                if not index.contains(outer.node, site.call):
                    return outer
        if function is not None and not index.contains(function, site.call):
            # a helper that iterates its parameter, called once per epoch elsewhere in the file
            for info in index.calls_by_name.get(getattr(function, "name", "<lambda>"), ()):
                for outer in index.enclosing_loops(info.node):
                    if not index.contains(outer.node, site.call):
                        return outer
        return None

    # --- batches ---------------------------------------------------------------------------------
    def batch_names(self, loop: AstLoopInfo) -> Set[str]:
        """Names that hold (part of) the current batch in ``loop``: its targets, and names the body unpacks
        or indexes from them (``x, y = batch``, ``x = batch["image"]``), in source order."""
        if type(loop.node) is ast.While:
            return set()
        names = set(target_names(loop.node.target))  # type: ignore[union-attr]
        assignments = [node for statement in loop.node.body for node in walk(statement) if type(node) is ast.Assign]
        for node in sorted(assignments, key=lambda n: (n.lineno, n.col_offset)):
            if root_name(node.value) in names and is_batch_part(node.value):
                for target in node.targets:
                    names.update(target_names(target))
        return names

    def batch_moves(self, loop: AstLoopInfo) -> List[ast.Call]:
        """``.to(<CUDA>)``/``.cuda()`` calls in the loop body whose receiver is (part of) the batch, or the
        value of a comprehension over it (``{k: v.to(device) for k, v in batch.items()}``)."""
        index = self.index
        if type(loop.node) is ast.While:
            return []
        names = self.batch_names(loop)
        if not names:
            return []
        body = loop.node.body
        comprehension_names = set()
        for statement in body:
            for node in walk(statement):
                if type(node) is ast.comprehension and root_name(node.iter) in names:
                    comprehension_names.update(target_names(node.target))
        moves = []
        for info in (info for statement in body for info in index.calls_in(statement)):
            call = info.node
            if call_name(call) not in {"to", "cuda"} or type(call.func) is not ast.Attribute:
                continue
            owner = call.func.value  # type: ignore[attr-defined]
            if not is_batch_part(owner):
                continue
            root = root_name(owner)
            if root not in names and root not in comprehension_names:
                continue
            if to_destination(index, call, _scope(index, info)) == CUDA:
                moves.append(call)
        return moves

    def is_in_memory_dataset(self, site: LoaderSite) -> bool:
        """The loader's dataset is a ``TensorDataset`` (or a name bound to one): nothing to load in workers."""
        index = self.index
        value = loader_argument(site.call, "dataset")
        if not isinstance(value, ast.expr):
            return False
        if type(value) is ast.Name:
            value = (index.single_value(value.id, index.scope_of(value))
                     or self._value_reaching(value, site.call) or value)
        if type(value) is not ast.Call:
            return False
        if index.qualified_name(value.func) in _IN_MEMORY_DATASETS:  # type: ignore[attr-defined]
            return True
        # `load_split(path)`, a function of this file whose every `return` builds a TensorDataset
        func = value.func  # type: ignore[attr-defined]
        if type(func) is ast.Name:
            for function in index.functions:
                if function.name == func.id and index.class_of.get(function) is None:
                    returns = [n for n in walk(function) if type(n) is ast.Return]
                    return bool(returns) and all(
                        type(r.value) is ast.Call and index.qualified_name(r.value.func) in _IN_MEMORY_DATASETS
                        for r in returns)
        return False

    def _value_reaching(self, name: ast.Name, use: ast.AST) -> Optional[ast.AST]:
        """For a name bound several times (``ds = load(...)`` in an ``if``, ``ds = TensorDataset(...)`` in its
        ``else``), the value of the last binding before ``use`` in a block that holds ``use``; None where a
        binding elsewhere in between (another branch, a loop) could be the one that reaches it."""
        index = self.index
        values = index.values_of(name.id, index.scope_of(name))
        if any(v is None for v in values):
            return None  # a binding whose place is unknown (unpacking, a loop target) may come in between
        earlier = [v for v in values if source_order(v) < source_order(use)]  # type: ignore[arg-type]
        if not earlier:
            return None
        last = max(earlier, key=source_order)  # type: ignore[arg-type]
        statement = next((node for node in index.ancestors(last) if isinstance(node, ast.stmt)), None)
        if statement is None:
            return None
        if not any(index.contains(s, use) for s in index.statement_block(statement)):
            return None
        return last

    def dataset_on_cuda(self) -> bool:
        """A ``Dataset`` class of the file moves data to a CUDA device (``self.x = x.cuda()``, ``.to(device)``
        in ``__getitem__``): its batches may already be on the GPU, where pinning and CUDA in forked workers
        both fail."""
        if self._dataset_on_cuda is None:
            index = self.index
            self._dataset_on_cuda = False
            for node in index.tree.body:  # module-level classes: where datasets are defined
                if type(node) is ast.ClassDef and any(
                    (dotted_name(base) or "").split(".")[-1].endswith("Dataset") for base in node.bases
                ):
                    if any(_moves_to_cuda(index, info) for info in _calls_within(index, node)):
                        self._dataset_on_cuda = True
                        break
        return self._dataset_on_cuda


def loader_facts(index: AstIndex) -> LoaderFacts:
    """The file's loader facts, computed once and shared by every rule that asks."""
    facts = index.shared.get("loader_facts")
    if facts is None:
        facts = index.shared["loader_facts"] = LoaderFacts(index)
    return facts  # type: ignore[return-value]


def _moves_to_cuda(index: AstIndex, info: AstCallInfo) -> bool:
    call, scope = info.node, _scope(index, info)
    if call_name(call) in {"to", "cuda"} and to_destination(index, call, scope) == CUDA:
        return True
    device = keyword_value(call, "device")
    return device is not None and device_kind(index, device, scope) == CUDA


def _scope(index: AstIndex, info: AstCallInfo) -> AstScope:
    return info.function if info.function is not None else index.tree


def _calls_within(index: AstIndex,
                  node: Union[ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef]) -> List[AstCallInfo]:
    """The calls in a def or class, its decorators' included (``ast`` places the node at its keyword)."""
    return [info for decorator in node.decorator_list for info in index.calls_in(decorator)] + index.calls_in(node)


def _has_star(call: ast.Call) -> bool:
    return any(keyword.arg is None for keyword in call.keywords) or any(type(a) is ast.Starred for a in call.args)


def _assigned_target(index: AstIndex, call: ast.Call) -> Optional[ast.expr]:
    """``train_loader`` in ``train_loader = DataLoader(...)``, ``self.train_loader`` in ``self.train_loader = ...``."""
    target = index.assigned_to.get(call)
    if target is None:
        parent = index.parent(call)
        if type(parent) is ast.AnnAssign and parent.value is call:  # type: ignore[union-attr]
            target = parent.target  # type: ignore[union-attr]
    return target if target is not None and dotted_name(target) is not None else None


def root_name(expr: ast.AST) -> Optional[str]:
    """``batch`` in ``batch``, ``batch[0]``, ``batch["x"].y``, ``batch.items()``."""
    while True:
        kind = type(expr)
        if kind is ast.Name:
            return expr.id  # type: ignore[attr-defined]
        if kind is ast.Attribute or kind is ast.Subscript:
            expr = expr.value  # type: ignore[attr-defined]
        elif kind is ast.Call and type(expr.func) is ast.Attribute:  # type: ignore[attr-defined]
            if expr.func.attr not in {"items", "values"}:  # type: ignore[attr-defined]
                return None
            expr = expr.func.value  # type: ignore[attr-defined]
        else:
            return None


def is_batch_part(expr: ast.AST) -> bool:
    """A name, or a subscript/attribute chain of one: a part of the batch, not something computed from it."""
    while type(expr) in (ast.Attribute, ast.Subscript):
        expr = expr.value  # type: ignore[attr-defined]
    return type(expr) is ast.Name
