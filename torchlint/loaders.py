"""The DataLoaders a file builds, the loops that iterate them and the batches those loops move to a device.

Facts shared by the input-pipeline rules (TL103, TL401, TL402, TL403). A loader is tied to a loop only
through what the file shows: the loop iterates the name the loader was assigned to (``train_loader``,
``self.train_loader``), possibly through ``enumerate``/``tqdm``/``zip`` or a helper function of the same
file that takes the loader as a parameter. A loader built in another module (``data.py``) cannot be tied
to the loop that trains on it (``train.py``): the rules stay silent there rather than guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Set, Tuple

import libcst as cst

from torchlint.analysis import (
    FileAnalysis, FunctionInfo, LoopInfo, call_name, dotted_name, keyword_arg, receiver, target_names, walk,
)
from torchlint.device_facts import device_kind, to_destination
from torchlint.facts.devices import CUDA

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
_UNREADABLE = object()


def is_dataloader_call(a: FileAnalysis, call: cst.Call) -> bool:
    return a.qualified_name(call.func) in _DATALOADER_NAMES


def loader_argument(call: cst.Call, name: str) -> object:
    """The ``cst.Arg`` that sets DataLoader parameter ``name``, None when it is not passed, or
    ``UNREADABLE`` when ``*args``/``**kwargs`` may set it."""
    found = keyword_arg(call, name)
    if found is not None:
        return found
    if any(arg.star for arg in call.args):
        return _UNREADABLE
    if name in DATALOADER_POSITIONAL:
        index = DATALOADER_POSITIONAL.index(name)
        positional = [arg for arg in call.args if arg.keyword is None]
        if index < len(positional):
            return positional[index]
    return None


UNREADABLE = _UNREADABLE


def int_value(a: FileAnalysis, expr: cst.BaseExpression) -> Optional[int]:
    """The value of an integer literal, or of a name bound once (in scope or at module level) to one."""
    if isinstance(expr, cst.Integer):
        return int(expr.evaluated_value)
    if isinstance(expr, cst.Name):
        value = a.single_value(expr.value, a.scope_of(expr))
        if isinstance(value, cst.Integer):
            return int(value.evaluated_value)
    return None


@dataclass
class LoaderSite:
    """One ``DataLoader(...)`` call and what the file does with it."""

    call: cst.Call
    name: Optional[str]  # the last part of the name it is assigned to, e.g. "train_loader"
    target: Optional[str] = None  # that name as written: "train_loader", "self.train_loader"
    loops: List[LoopInfo] = field(default_factory=list)  # loops that iterate it
    # per loop, the calls of a helper function that put the loop in place (the loop is in the helper)
    via_calls: Dict[int, List[cst.Call]] = field(default_factory=dict)


class LoaderFacts:
    """Computed once per file (``loader_facts(analysis)``)."""

    def __init__(self, a: FileAnalysis) -> None:
        self.a = a
        self._trains: Dict[int, bool] = {}
        self._dataset_on_cuda: Optional[bool] = None
        self._training_functions = self._functions_that_train()
        self.sites = self._sites()

    # --- which loops iterate what --------------------------------------------------------------
    def iterated(self, loop: LoopInfo) -> List[cst.BaseExpression]:
        """The iterables a for loop walks: ``loader`` in ``enumerate(tqdm(loader))``; a name bound once to
        such a wrapper (``pbar = tqdm(loader)``) is followed."""
        if not isinstance(loop.node, cst.For):
            return []
        return list(self._unwrap(loop.node.iter, depth=0))

    def _unwrap(self, expr: cst.BaseExpression, depth: int) -> Iterator[cst.BaseExpression]:
        if depth > 3:
            return
        if isinstance(expr, cst.Call) and call_name(expr) in WRAPPERS and isinstance(expr.func, (cst.Name, cst.Attribute)):
            for arg in expr.args:
                if arg.keyword is None and not arg.star:
                    yield from self._unwrap(arg.value, depth + 1)
            return
        if isinstance(expr, cst.Name):
            value = self.a.single_value(expr.value, self.a.scope_of(expr))
            if isinstance(value, cst.Call) and call_name(value) in WRAPPERS:
                yield from self._unwrap(value, depth + 1)
                return
        yield expr

    def _sites(self) -> List[LoaderSite]:
        a = self.a
        sites = []
        by_name: Dict[str, List[LoaderSite]] = {}
        direct: Dict[int, LoaderSite] = {}
        for call in a.calls_by_name.get("DataLoader", ()):
            if not is_dataloader_call(a, call):
                continue
            target = _assigned_target(a, call)
            site = LoaderSite(call, _last_part(target) if target is not None else None)
            site.target = dotted_name(target) if target is not None else None
            sites.append(site)
            direct[id(call)] = site
            if site.target is not None:
                by_name.setdefault(site.target, []).append(site)
        if not sites:
            return sites
        for loop in a.loops:
            for expr in self.iterated(loop):
                if isinstance(expr, cst.Call) and id(expr) in direct:
                    direct[id(expr)].loops.append(loop)
                    continue
                tied = [site for site in by_name.get(dotted_name(expr) or "", ()) if self._same_binding(site, expr)]
                for site in tied:
                    site.loops.append(loop)
                # the loop iterates a parameter: tie it to the loaders passed to that function
                for call, argument in self._arguments_for_parameter(loop.function, expr):
                    if id(argument) in direct:
                        targets = [direct[id(argument)]]
                    else:
                        targets = [site for site in by_name.get(dotted_name(argument) or "", ())
                                   if self._same_binding(site, argument)]
                    for site in targets:
                        if site not in tied:
                            site.loops.append(loop)
                            tied.append(site)
                        site.via_calls.setdefault(id(loop.node), []).append(call)
        return sites

    def _same_binding(self, site: LoaderSite, use: cst.BaseExpression) -> bool:
        """Does ``use`` (a name or ``self.x``) refer to what the loader was assigned to? A plain name must be
        assigned in the same scope, or at module level and not rebound in the using scope; an attribute
        (``self.train_loader``) is matched by its spelling anywhere in the file."""
        a = self.a
        if not isinstance(use, cst.Name):
            return True
        site_scope, use_scope = a.scope_of(site.call), a.scope_of(use)
        if site_scope is use_scope:
            return True
        return site_scope is a.module and not a.values_of(use.value, use_scope)

    def _arguments_for_parameter(
        self, function: Optional[FunctionInfo], expr: cst.BaseExpression
    ) -> Iterator[Tuple[cst.Call, cst.BaseExpression]]:
        """(call, argument) for each same-file call of ``function`` that passes the parameter ``expr`` names."""
        if function is None or not isinstance(expr, cst.Name) or not isinstance(function.node, cst.FunctionDef):
            return
        params = [p.name.value for p in (*function.node.params.posonly_params, *function.node.params.params)]
        kwonly = {p.name.value for p in function.node.params.kwonly_params}
        if expr.value not in params and expr.value not in kwonly:
            return
        is_method = function.class_name is not None and params[:1] in (["self"], ["cls"])
        for call in self.a.calls_by_name.get(function.name, ()):
            if is_method != isinstance(call.func, cst.Attribute) or any(arg.star for arg in call.args):
                continue
            chosen = keyword_arg(call, expr.value)
            if chosen is None and expr.value in params:
                index = params.index(expr.value) - (1 if is_method else 0)
                positional = [arg for arg in call.args if arg.keyword is None]
                if 0 <= index < len(positional):
                    chosen = positional[index]
            if chosen is not None:
                yield call, chosen.value

    # --- training ------------------------------------------------------------------------------
    def _functions_that_train(self) -> Set[str]:
        """Names of the file's functions that call ``backward()`` or step an optimizer."""
        a = self.a
        return {
            info.name for info in a.functions
            if any(a.is_backward_call(c) or a.is_optimizer_step(c) for c in a.calls_in(info.node))
        }

    def loop_trains(self, loop: LoopInfo) -> bool:
        """The loop runs a training step per iteration: ``backward()``/``optimizer.step()`` in its body, or a
        call of a function of this file that does (``train_step(batch)``, ``self.training_step(batch)``)."""
        key = id(loop.node)
        if key not in self._trains:
            self._trains[key] = loop.is_training or any(
                call_name(c) in self._training_functions
                and (isinstance(c.func, cst.Name) or (isinstance(c.func, cst.Attribute) and dotted_name(c.func.value) == "self"))
                for c in loop.direct_calls
            )
        return self._trains[key]

    def training_loops(self, site: LoaderSite) -> List[LoopInfo]:
        return [loop for loop in site.loops if self.loop_trains(loop)]

    def repeated_iteration(self, site: LoaderSite, loop: LoopInfo) -> Optional[LoopInfo]:
        """An outer loop that runs ``loop`` (and so iterates the loader) again and again, such as an epoch
        loop, while the loader itself is built once outside it. None where there is none."""
        a = self.a
        for outer in a.enclosing_loops(loop.node):
            if outer is not loop and not a.contains(outer.node, site.call):
                return outer
        for call in site.via_calls.get(id(loop.node), ()):
            function = loop.function
            if function is not None and a.contains(function.node, site.call):
                continue
            for outer in a.enclosing_loops(call):
                if not a.contains(outer.node, site.call):
                    return outer
        if loop.function is not None and not a.contains(loop.function.node, site.call):
            # a helper that iterates its parameter, called once per epoch elsewhere in the file
            for call in a.calls_by_name.get(loop.function.name, ()):
                for outer in a.enclosing_loops(call):
                    if not a.contains(outer.node, site.call):
                        return outer
        return None

    # --- batches ---------------------------------------------------------------------------------
    def batch_names(self, loop: LoopInfo) -> Set[str]:
        """Names that hold (part of) the current batch in ``loop``: its targets, and names the body unpacks
        or indexes from them (``x, y = batch``, ``x = batch["image"]``)."""
        if not isinstance(loop.node, cst.For):
            return set()
        names = set(target_names(loop.node.target))
        for node in walk(loop.node.body):
            if isinstance(node, cst.Assign) and _root_name(node.value) in names and _is_batch_part(node.value):
                for target in node.targets:
                    names.update(target_names(target.target))
        return names

    def batch_moves(self, loop: LoopInfo) -> List[cst.Call]:
        """``.to(<CUDA>)``/``.cuda()`` calls in the loop body whose receiver is (part of) the batch, or the
        value of a comprehension over it (``{k: v.to(device) for k, v in batch.items()}``)."""
        a = self.a
        if not isinstance(loop.node, cst.For):
            return []
        names = self.batch_names(loop)
        if not names:
            return []
        comprehension_names = set()
        for node in walk(loop.node.body):
            if isinstance(node, cst.CompFor) and _root_name(node.iter) in names:
                comprehension_names.update(target_names(node.target))
        moves = []
        for call in a.calls_in(loop.node.body):
            if call_name(call) not in {"to", "cuda"}:
                continue
            owner = receiver(call)
            if owner is None or not _is_batch_part(owner):
                continue
            root = _root_name(owner)
            if root not in names and root not in comprehension_names:
                continue
            if to_destination(a, call) == CUDA:
                moves.append(call)
        return moves

    def is_in_memory_dataset(self, site: LoaderSite) -> bool:
        """The loader's dataset is a ``TensorDataset`` (or a name bound to one): nothing to load in workers."""
        dataset = loader_argument(site.call, "dataset")
        if not isinstance(dataset, cst.Arg):
            return False
        value = dataset.value
        if isinstance(value, cst.Name):
            value = (self.a.single_value(value.value, self.a.scope_of(value))
                     or self._value_reaching(value, site.call) or value)
        if not isinstance(value, cst.Call):
            return False
        if self.a.qualified_name(value.func) in _IN_MEMORY_DATASETS:
            return True
        # `load_split(path)`, a function of this file whose every `return` builds a TensorDataset
        if isinstance(value.func, cst.Name):
            for info in self.a.functions:
                if info.name == value.func.value and info.class_name is None:
                    returns = [n for n in walk(info.node) if isinstance(n, cst.Return)]
                    return bool(returns) and all(
                        isinstance(r.value, cst.Call) and self.a.qualified_name(r.value.func) in _IN_MEMORY_DATASETS
                        for r in returns)
        return False

    def _value_reaching(self, name: cst.Name, use: cst.CSTNode) -> Optional[cst.BaseExpression]:
        """For a name bound several times (``ds = load(...)`` in an ``if``, ``ds = TensorDataset(...)`` in its
        ``else``), the value of the last binding before ``use`` in a block that holds ``use``; None where a
        binding elsewhere in between (another branch, a loop) could be the one that reaches it."""
        a = self.a
        values = a.values_of(name.value, a.scope_of(name))
        if any(v is None for v in values):
            return None  # a binding whose place is unknown (unpacking, a loop target) may come in between
        earlier = [v for v in values if a.comes_before(v, use)]
        if not earlier:
            return None
        last = max(earlier, key=lambda v: a.order[v])
        statement = a.enclosing_statement(last)
        block = a.parent(statement) if statement is not None else None
        if block is None or not a.contains(block, use):
            return None
        return last

    def dataset_on_cuda(self) -> bool:
        """A ``Dataset`` class of the file moves data to a CUDA device (``self.x = x.cuda()``, ``.to(device)``
        in ``__getitem__``): its batches may already be on the GPU, where pinning and CUDA in forked workers
        both fail."""
        if self._dataset_on_cuda is None:
            a = self.a
            self._dataset_on_cuda = False
            for node in a.module.body:  # module-level classes: where datasets are defined
                if isinstance(node, cst.ClassDef) and any(
                    (_last_part(base.value) or "").endswith("Dataset") for base in node.bases
                ):
                    if any(_moves_to_cuda(a, call) for call in a.calls_in(node)):
                        self._dataset_on_cuda = True
                        break
        return self._dataset_on_cuda


def _moves_to_cuda(a: FileAnalysis, call: cst.Call) -> bool:
    if call_name(call) in {"to", "cuda"} and to_destination(a, call) == CUDA:
        return True
    device = keyword_arg(call, "device")
    return device is not None and device_kind(a, device.value) == CUDA


def loader_facts(a: FileAnalysis) -> LoaderFacts:
    """The file's loader facts, computed once and shared by every rule that asks."""
    facts = a.shared.get("loader_facts")
    if facts is None:
        facts = a.shared["loader_facts"] = LoaderFacts(a)
    return facts  # type: ignore[return-value]


def _assigned_target(a: FileAnalysis, call: cst.Call) -> Optional[cst.BaseExpression]:
    """``train_loader`` in ``train_loader = DataLoader(...)``, ``self.train_loader`` in ``self.train_loader = ...``."""
    parent = a.parent(call)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
        target = parent.targets[0].target
    elif isinstance(parent, cst.AnnAssign):
        target = parent.target
    else:
        return None
    return target if dotted_name(target) is not None else None


def _last_part(expr: cst.BaseExpression) -> Optional[str]:
    written = dotted_name(expr)
    return written.split(".")[-1] if written is not None else None


def _root_name(expr: cst.BaseExpression) -> Optional[str]:
    """``batch`` in ``batch``, ``batch[0]``, ``batch["x"].y``, ``batch.items()``."""
    while True:
        if isinstance(expr, cst.Name):
            return expr.value
        if isinstance(expr, cst.Attribute):
            expr = expr.value
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and call_name(expr) in {"items", "values"}:
            expr = expr.func.value
        else:
            return None


def _is_batch_part(expr: cst.BaseExpression) -> bool:
    """A name, or a subscript/attribute chain of one: a part of the batch, not something computed from it."""
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        expr = expr.value
    return isinstance(expr, cst.Name)
