"""The DataLoaders a file builds, the loops that iterate them and the batches those loops move to a device.

Facts shared by the input-pipeline rules (TL103, TL401, TL402, TL403), read off the file's index. A loader is tied
to a loop through what the file shows: the loop iterates the name the loader was assigned to
(``train_loader``, ``self.train_loader``), possibly through ``enumerate``/``tqdm``/``zip``, an alias
(``active = train_loader``), a helper function of the same file that takes the loader as a parameter, a
factory of the file that builds and returns it (``def build_loader(...): return DataLoader(...)``, also a
method of a class of the file: ``dm.train_dataloader()``), or draws
its batches with ``next()`` (or the iterator's ``.next()`` of torch < 1.13) from an iterator over it
(``it = iter(loader)``, or a generator of the file that yields from it: ``def cycle(dl): while True: yield
from dl``).

A factory of another file of the checked project (``from data import build_loader``) is followed through that
file's summary (``loader_summary``, handed in by the runner as ``ctx.project``): its site is the call in this
file, and it carries the summary's facts instead of a ``DataLoader(...)`` call to read. A loader another
project file builds and hands to a class or module-level function of this one (``Solver(config, train_loader)``
in ``main.py``: ``handed_summary`` of that file) is a site at the parameter that receives it. Loaders built in
another module in any other way (a module-level loader imported by name, a method of a class) are not tied to
the loop that trains on them: the rules stay silent there rather than guess.
"""

from __future__ import annotations

import ast
import bisect
import re
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

from torchlint.facts.index import (
    AstCallInfo, AstFunction, AstIndex, AstLoopInfo, AstScope, argument_for, call_name, called_origin, dotted_name,
    has_star, import_origins, is_integer, is_literal, is_parameter, keyword_value, may_be_project, paired_targets,
    source_order, target_names, unpacked_from, walk,
)
from torchlint.facts.devices import CUDA, device_kind, may_place_on_cuda, to_destination
from torchlint.facts.options import option_default

if TYPE_CHECKING:
    from torchlint.facts.project import ProjectModel

# A loop over a name bound to more loaders than this (a generated file that rebinds `train_loader` hundreds of
# times): the rules cannot tell which one it iterates, and tying each loop to each would be quadratic.
MAX_LOADERS_PER_LOOP = 16

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
_SEQUENCES = (ast.List, ast.Tuple, ast.ListComp)  # a dataset held as a Python sequence of its samples
UNREADABLE = object()  # an argument ``*args``/``**kwargs`` may set
# A loader setting as the rules read it (``LoaderFacts.setting``), the same for a ``DataLoader(...)`` of the file
# and one a project file's factory builds (its summary holds these values, as JSON)
ABSENT = "absent"  # not passed: the default
UNKNOWN = "?"  # passed a value the rules cannot read (a variable, ``**kwargs``)
SETTINGS = ("num_workers", "pin_memory", "persistent_workers")
# A name that says it holds a loader (TL103 takes a loop over one as a loop over batches). Case-sensitive, so
# that the text gate (``text_prefilter.may_name_a_loader``) can test it without lowering the whole text:
# `loader`, `train_loader`, `DataLoader`, `LOADER`, `val_dl`, `dl`.
LOADER_NAME = re.compile(r"[lL]oader|LOADER|_dl$|^dl$|_dl_|^dl_")


def loader_argument(call: ast.Call, name: str) -> Union[None, ast.expr, object]:
    """The value that sets DataLoader parameter ``name``, None when it is not passed, or ``UNREADABLE``
    when ``*args``/``**kwargs`` may set it."""
    found = keyword_value(call, name)
    if found is not None:
        return found
    if has_star(call):
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
    if is_integer(expr):
        return expr.value  # type: ignore[attr-defined]
    if type(expr) is ast.Name:
        value = index.single_value(expr.id, index.scope_of(expr))
        if value is not None and is_integer(value):
            return value.value  # type: ignore[attr-defined]
    return None


@dataclass(eq=False)
class LoaderSite:
    """One ``DataLoader(...)`` call and what the file does with it."""

    # the ``DataLoader(...)`` call; for a loader of another project file, the call of its factory here, or the
    # parameter (an ``ast.arg``) that receives it from the file that hands it over (``imported["handed"]``)
    call: ast.Call
    target: Optional[str] = None  # the name it is assigned to, as written: "train_loader", "self.train_loader"
    loops: List[AstLoopInfo] = field(default_factory=list)  # loops that iterate it
    # per loop, the calls of a helper function that put the loop in place (the loop is in the helper)
    via_calls: Dict[ast.AST, List[ast.Call]] = field(default_factory=dict)
    # per loop that draws batches with `next()` or from a generator: what starts the loader's iteration for it
    # (the `iter(loader)` call, the generator's loop over the loader)
    feeders: Dict[ast.AST, List[ast.AST]] = field(default_factory=dict)
    # a loader built by a factory of another project file: ``call`` is the factory's call here, and this is the
    # summary's entry for it ({"path", "line", "num_workers", "pin_memory", "persistent_workers", "in_memory",
    # "on_cuda"}, and "handed": [receiver, "file:line"] for one handed to this file); None for a ``DataLoader(...)``
    # of this file
    imported: Optional[dict] = None
    position: Optional[int] = None  # which item of a factory's returned tuple (None: the value itself)
    built_by: List[ast.Call] = field(default_factory=list)  # calls of a factory of this file that build it


@dataclass(eq=False)
class Drawn:
    """An iterator over a loader: the loader, and what starts its iteration."""

    site: LoaderSite
    feeder: ast.AST


_Bindings = Dict[str, Dict[AstScope, List[object]]]  # name as written -> scope -> what it holds there


class LoaderFacts:
    """Computed once per file (``loader_facts(index)``)."""

    def __init__(self, index: AstIndex, project: Optional["ProjectModel"] = None) -> None:
        # a proxy: the facts live in ``index.shared``, and a strong link back would make every file's index
        # and tree a reference cycle, left to the cyclic collector (tests/test_no_cycles.py)
        self.index: AstIndex = weakref.proxy(index)  # type: ignore[assignment]
        self.project = project
        self._trains: Dict[ast.AST, bool] = {}
        self._dataset_on_cuda: Optional[bool] = None
        self._classes: Optional[Dict[str, List[ast.ClassDef]]] = None  # the file's classes, by name
        self._gpu_classes: Dict[ast.ClassDef, bool] = {}
        self._names: _Bindings = {}  # names that hold loaders
        self._iterators: _Bindings = {}  # names that hold iterators over loaders (``Drawn``)
        self._generators: Dict[str, List[Tuple[str, ast.AST]]] = {}
        self._drawn_names: Dict[ast.AST, Set[str]] = {}  # loop -> names `x = next(it)` binds to a batch
        self._body_starts: Dict[int, List[Tuple[int, int]]] = {}  # id(a scope's body) -> its statements' starts
        self._drawn_calls: Dict[ast.AST, Set[ast.Call]] = {}  # loop -> its `next(it)` calls that draw a batch
        self._direct: Dict[ast.AST, LoaderSite] = {}
        self._factories: Dict[str, Dict[Optional[int], List[LoaderSite]]] = {}
        self._imported: Dict[ast.Call, List[Optional[LoaderSite]]] = {}
        self._training_functions = self._functions_that_train()
        self._tied: Set[Tuple[int, int]] = set()  # (id of a site, id of a loop in its ``loops``)
        self._sites_by_loop: Optional[Dict[int, List[LoaderSite]]] = None
        self._settings: Dict[Tuple[int, str], Union[int, bool, str]] = {}
        self.sites = self._sites()

    # --- which loops iterate what --------------------------------------------------------------
    def iterated(self, loop: AstLoopInfo) -> List[ast.expr]:
        """The iterables a for loop walks: ``loader`` in ``enumerate(tqdm(loader))``; a name bound once to
        such a wrapper (``pbar = tqdm(loader)``, also ``with tqdm(loader) as pbar:``) is followed."""
        if type(loop.node) is ast.While:
            return []
        return list(self._unwrap(loop.node.iter, depth=0, at=loop.node))  # type: ignore[union-attr]

    def _unwrap(self, expr: ast.expr, depth: int, at: Optional[ast.AST] = None) -> Iterator[ast.expr]:
        if depth > 3:
            return
        if type(expr) is ast.Call and call_name(expr) in WRAPPERS:  # call_name: a Name or Attribute callee
            for arg in expr.args:
                if type(arg) is not ast.Starred:
                    yield from self._unwrap(arg, depth + 1)
            return
        if type(expr) is ast.Name:
            value = self.index.single_value(expr.id, self.index.scope_of(expr))
            if value is None and at is not None:
                value = self._with_wrapper(expr, at)
            if type(value) is ast.Call and call_name(value) in WRAPPERS:  # type: ignore[arg-type]
                yield from self._unwrap(value, depth + 1)  # type: ignore[arg-type]
                return
        yield expr

    def _with_wrapper(self, name: ast.Name, at: ast.AST) -> Optional[ast.Call]:
        """The wrapper a ``with`` around ``at`` (the loop over ``name``) binds ``name`` to: ``with tqdm(loader) as
        bar:`` ... ``for b in bar:``."""
        for ancestor in self.index.ancestors(at):
            if type(ancestor) in (ast.With, ast.AsyncWith):
                for item in ancestor.items:  # type: ignore[attr-defined]
                    bound = item.optional_vars
                    if type(bound) is ast.Name and bound.id == name.id:
                        value = item.context_expr
                        return value if type(value) is ast.Call else None
        return None

    def _sites(self) -> List[LoaderSite]:
        index = self.index
        sites: List[LoaderSite] = []
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
        self._direct = direct
        self._factories = self._factory_returns(direct) if direct else {}
        self._imported = self._imported_factory_calls()
        for found in self._imported.values():
            sites.extend(site for site in found if site is not None)
        handed = self._handed_sites()
        sites.extend(handed)
        if not sites:
            return sites
        self._bind_names(direct, handed)
        self._bind_iterators()
        for loop in index.loops:
            for expr in self.iterated(loop):
                held = self._loader_sites(expr)
                if len(held) > MAX_LOADERS_PER_LOOP:
                    continue  # which of them the loop iterates is not in the code: no finding, and linear
                tied = {id(site) for site in held}  # (a set: a long file may pass thousands)
                for site in held:
                    self._tie(site, loop)
                for drawn in self._drawn_from(expr):  # `for batch in cycle(loader)`: a generator of the file
                    self._tie(drawn.site, loop, drawn.feeder)
                # the loop iterates a parameter: tie it to the loaders passed to that function
                for call, argument in self._arguments_for_parameter(loop.function, expr):
                    for site in self._loader_sites(argument):
                        if id(site) not in tied:
                            self._tie(site, loop)
                            tied.add(id(site))
                        site.via_calls.setdefault(loop.node, []).append(call)
        # a step loop that draws its batches with `next(it)` (`it = iter(loader)`, `it = cycle(loader)`), or
        # with the iterator's own method: `it.next()` (DataLoader iterators before torch 1.13), `it.__next__()`
        for info in (*index.calls_by_name.get("next", ()), *index.calls_by_name.get("__next__", ())):
            call = info.node
            if info.loop is None:
                continue
            if type(call.func) is ast.Name:
                if call.func.id != "next" or not call.args:
                    continue
                iterator = call.args[0]
            elif type(call.func) is ast.Attribute and not call.args and not call.keywords:
                iterator = call.func.value
            else:
                continue
            drawn = self._drawn_from(iterator)
            for entry in drawn:
                self._tie(entry.site, info.loop, entry.feeder)
            if drawn:
                self._drawn_calls.setdefault(info.loop.node, set()).add(call)
            target = index.assigned_to.get(call)
            if drawn and target is not None:
                self._drawn_names.setdefault(info.loop.node, set()).update(target_names(target))
        return sites

    def _tie(self, site: LoaderSite, loop: AstLoopInfo, feeder: Optional[ast.AST] = None) -> None:
        # a set beside the list: a loader a long file builds many times over may be tied to thousands of loops
        if (id(site), id(loop)) not in self._tied:
            self._tied.add((id(site), id(loop)))
            site.loops.append(loop)
        if feeder is not None:
            feeders = site.feeders.setdefault(loop.node, [])
            if feeder not in feeders:
                feeders.append(feeder)

    # --- what an expression holds: loaders, and iterators over them ------------------------------
    def _bind(self, names: "_Bindings", name: Optional[str], scope: AstScope, found: Sequence[object]) -> bool:
        """Record that ``name`` (as written) holds ``found`` in ``scope``; True when that is new."""
        if name is None or not found:
            return False
        known = names.setdefault(name, {}).setdefault(scope, [])
        new = [item for item in found if item not in known]
        known.extend(new)
        return bool(new)

    def _bind_names(self, direct: Dict[ast.AST, LoaderSite], handed: Sequence[LoaderSite] = ()) -> None:
        """Names that hold loaders: ``loader = DataLoader(...)``, ``loader = build_loader(...)`` (a factory of
        this file or of an imported project file), ``train_dl, val_dl = build_loaders(...)``, a parameter that
        another project file hands a loader to (and ``self.train_loader = train_loader`` in a class's
        ``__init__``), and aliases (``active_dataloader = train_dataloader``), followed a few steps."""
        index, names = self.index, self._names
        for site in direct.values():
            if site.target is not None:
                self._bind(names, site.target, index.scope_of(site.call), [site])
        for site in handed:
            function = index.function_of(site.call)
            self._bind(names, site.target, function, [site])
            klass = index.class_of.get(function)  # type: ignore[arg-type]
            if klass is None:
                continue
            for (owner, attribute), values in index.self_attributes.items():
                if owner is klass and any(type(value) is ast.Name and value.id == site.target  # type: ignore[attr-defined]
                                          and index.contains(function, value) for value in values):
                    self._bind(names, f"self.{attribute}", function, [site])
        for call, returned in self._factory_calls():
            for found in returned.values():
                for site in found:
                    if site is not None and site.imported is None and call not in site.built_by:
                        site.built_by.append(call)
            target = _assigned_target(index, call)
            scope = index.scope_of(call)
            if target is not None:
                self._bind(names, dotted_name(target), scope, [s for s in returned.get(None, ()) if s is not None])
                continue
            parent = index.parent(call)
            if type(parent) is ast.Assign and parent.value is call and len(parent.targets) == 1 \
                    and type(parent.targets[0]) is ast.Tuple:
                for position, element in enumerate(parent.targets[0].elts):
                    found = [s for s in returned.get(position, ()) if s is not None]
                    self._bind(names, dotted_name(element), scope, found)
        aliases = [(scope, name, value) for scope, bound in index.bindings.items() for name, values in bound.items()
                   for value in values if type(value) in (ast.Name, ast.Attribute)]
        for _ in range(3):  # an alias of an alias
            if not any([self._bind(names, name, scope, self._bound_to(names, value))  # type: ignore[arg-type]
                        for scope, name, value in aliases]):
                break

    def _factory_calls(self) -> Iterator[Tuple[ast.Call, Dict[Optional[int], List[Optional[LoaderSite]]]]]:
        """(call, what it returns) for each call of a loader factory: ``{None: sites}`` for a function that
        returns a loader, ``{0: [...], 1: [...]}`` for one that returns a tuple of them."""
        for name, returned in self._factories.items():
            for info in self.index.calls_by_name.get(name, ()):
                if type(info.node.func) is ast.Name:
                    yield info.node, returned
        for call, found in self._imported.items():
            if len(found) == 1 and found[0] is not None and found[0].position is None:
                yield call, {None: found}
            else:
                yield call, {site.position: [site] for site in found if site is not None}

    def _entry(self, site: LoaderSite) -> dict:
        """A summary's entry for the loader a factory returns."""
        entry: dict = {"line": site.call.lineno}
        for name in SETTINGS:
            entry[name] = self.setting(site, name)
        entry["in_memory"] = self.is_in_memory_dataset(site)
        entry["on_cuda"] = self.dataset_on_cuda()
        entry["gpu_samples"] = self.samples_on_gpu(site)
        entry["default_collate"] = loader_argument(site.call, "collate_fn") is None
        parameter = self._workers_parameter(site)
        if parameter is not None:
            entry["num_workers_parameter"] = parameter
        return entry

    def _workers_parameter(self, site: LoaderSite) -> Optional[dict]:
        """``num_workers=n`` where ``n`` is a parameter of the factory that builds the loader, never rebound
        in it: its name, place among the positional parameters (None: keyword-only) and integer default
        (None: none, or not an integer literal), for the caller's file to bind at the call."""
        index = self.index
        value = loader_argument(site.call, "num_workers")
        function = index.function_of(site.call)
        if type(value) is not ast.Name or type(function) not in (ast.FunctionDef, ast.AsyncFunctionDef):
            return None
        name = value.id  # type: ignore[attr-defined]
        if index.values_of(name, function) != [None]:
            return None  # rebound in the factory, or no parameter of it
        arguments = function.args  # type: ignore[union-attr]
        positional = [a.arg for a in (*arguments.posonlyargs, *arguments.args)]
        defaults = dict(zip(positional[len(positional) - len(arguments.defaults):], arguments.defaults))
        defaults.update((a.arg, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None)
        if name not in positional and name not in {a.arg for a in arguments.kwonlyargs}:
            return None
        default = defaults.get(name)
        return {"name": name, "position": positional.index(name) if name in positional else None,
                "default": default.value if default is not None and is_integer(default) else None}  # type: ignore[attr-defined]

    def worker_count(self, site: LoaderSite) -> Optional["WorkerCount"]:
        """The loader's ``num_workers`` where it is provably an integer in the default run: the value
        ``setting`` reads; the default of an argparse option of the file (``args.workers``, ``facts.options``:
        the command line may pass another value); for a project file's factory whose loader takes
        ``num_workers`` from a parameter, what the call here passes (or the parameter's default), read the
        same way (not for a loader another file hands to this one). None where it cannot tell."""
        workers = self.setting(site, "num_workers")
        if type(workers) is int:
            return WorkerCount(workers)
        if workers != UNKNOWN:
            return None
        index = self.index
        if site.imported is None:
            value = loader_argument(site.call, "num_workers")
            if not isinstance(value, ast.expr):
                return None
            found = _count_of(index, value, index.scope_of(site.call))
            if found is not None:
                return found
            # a factory of this file that passes its parameter on: every call of it here gives a positive count
            parameter = self._workers_parameter(site)
            if parameter is None or not site.built_by:
                return None
            counts = [self._count_at_call(call, parameter) for call in site.built_by]
            if any(count is None for count in counts):
                return None
            return WorkerCount(min(count.count for count in counts), None, parameter["name"])  # type: ignore[union-attr]
        parameter = site.imported.get("num_workers_parameter")
        if not parameter or "handed" in site.imported:
            return None  # (a handed loader's factory is called in the file that hands it: not read here)
        found = self._count_at_call(site.call, parameter)
        return WorkerCount(found.count, found.option, parameter["name"]) if found is not None else None

    def _count_at_call(self, call: ast.Call, parameter: dict) -> Optional["WorkerCount"]:
        """The count a call of a factory gives its ``num_workers`` parameter (``_workers_parameter``)."""
        if has_star(call):
            return None
        value = keyword_value(call, parameter["name"])
        position = parameter["position"]
        if value is None and position is not None and position < len(call.args):
            value = call.args[position]
        if value is None:
            default = parameter["default"]
            return WorkerCount(default) if type(default) is int else None
        return _count_of(self.index, value, self.index.scope_of(call))

    def _factory_returns(self, direct: Dict[ast.AST, LoaderSite]) -> Dict[str, Dict[Optional[int], List[LoaderSite]]]:
        """The file's module-level functions that build and return a loader (``def build_loader(...): return
        DataLoader(...)``, also through a local name, or a tuple of loaders), by name: what each returns."""
        index = self.index
        factories: Dict[str, Dict[Optional[int], List[LoaderSite]]] = {}
        for function in index.functions:
            if index.parent(function) is not index.tree:
                continue
            # one loader per returned place: which of `if train: return DataLoader(a, ...)` / `return
            # DataLoader(b)` a call gets depends on its arguments, which the facts do not evaluate
            returned = {at: sites for at, sites in self._returned_sites(function, direct).items() if len(sites) == 1}
            if returned:
                factories[function.name] = returned
        return factories

    def _returned_sites(self, function: AstFunction, direct: Dict[ast.AST, LoaderSite]
                        ) -> Dict[Optional[int], List[LoaderSite]]:
        index = self.index
        returned: Dict[Optional[int], List[LoaderSite]] = {}
        for node in walk(function):
            if type(node) in (ast.Yield, ast.YieldFrom):
                return {}  # a generator: its calls make no loader
            if type(node) is not ast.Return or node.value is None or index.function_of(node) is not function:
                continue
            values = node.value.elts if type(node.value) is ast.Tuple else [node.value]
            for position, value in enumerate(values):
                site = direct.get(value)
                if site is None and type(value) is ast.Name:
                    bound = index.values_of(value.id, function)
                    site = direct.get(bound[0]) if len(bound) == 1 else None  # type: ignore[arg-type]
                if site is not None:
                    key = position if type(node.value) is ast.Tuple else None
                    if site not in returned.setdefault(key, []):
                        returned[key].append(site)
        return returned

    def _imported_factory_calls(self) -> Dict[ast.Call, List[Optional[LoaderSite]]]:
        """Calls of a loader factory of another file of the checked project (``from data import
        build_loader``): a site each, at the call, with the facts of the loader the factory builds there."""
        project = self.project
        if project is None or not project.has_factories:
            return {}
        index = self.index
        origins = import_origins(index)
        found: Dict[ast.Call, List[Optional[LoaderSite]]] = {}
        for info in index.calls:
            call = info.node
            written = dotted_name(call.func)
            origin = called_origin(origins, written) if written is not None else None
            factory = project.factory(*origin) if origin is not None else None
            if factory is None:
                continue
            if factory["tuple"]:
                found[call] = [LoaderSite(call, None, imported=entry, position=at) if entry else None
                               for at, entry in enumerate(factory["sites"])]
            else:
                target = _assigned_target(index, call)
                found[call] = [LoaderSite(call, dotted_name(target) if target is not None else None,
                                          imported=factory["sites"][0])]
        return found

    def _method_returns(self, call: ast.Call) -> List[LoaderSite]:
        """The loader ``obj.train_dataloader()`` returns, where ``obj`` is bound only to instances of classes of
        the file (``dm = ToyDataModule(...)``) whose method of that name (its own or inherited) returns one
        ``DataLoader(...)`` of the file (a Lightning ``LightningDataModule``'s loaders)."""
        receiver = call.func.value  # type: ignore[attr-defined]
        if type(receiver) is not ast.Name or not self._direct:
            return []
        index = self.index
        values = index.values_of(receiver.id, index.scope_of(receiver)) or index.values_of(receiver.id, index.tree)
        classes = []
        for value in values:
            found = self._classes_named(value.func.id) if type(value) is ast.Call \
                and type(value.func) is ast.Name else []  # type: ignore[union-attr]
            if len(found) != 1:
                return []
            classes.append(found[0])
        sites: List[LoaderSite] = []
        for klass in dict.fromkeys(classes):
            method = self._method(klass, call.func.attr)  # type: ignore[attr-defined]
            returned = self._returned_sites(method, self._direct).get(None, []) if method is not None else []
            if len(returned) != 1:
                return []
            sites += [site for site in returned if site not in sites]
        return sites

    def _handed_sites(self) -> List[LoaderSite]:
        """The loaders other project files hand to this file's module-level functions and classes
        (``ProjectModel.handed_loaders``): a site each at the parameter that receives it (a class's through
        its ``__init__``), where that parameter is never rebound."""
        project = self.project
        if project is None or not project.handed_loaders():
            return []
        index = self.index
        receivers: Dict[str, Tuple[AstFunction, int]] = {}  # name -> the def that receives, positions skipped
        for node in index.tree.body:
            if type(node) in (ast.FunctionDef, ast.AsyncFunctionDef):
                receivers[node.name] = (node, 0)  # type: ignore[assignment]
            elif type(node) is ast.ClassDef:
                init = next((item for item in node.body if type(item) is ast.FunctionDef
                             and item.name == "__init__"), None)
                if init is not None:
                    receivers[node.name] = (init, 1)
        sites: Dict[Tuple[int, str, int], LoaderSite] = {}
        for file, name, line, positional, keywords in project.handed_loaders():
            receiver = receivers.get(name)
            if receiver is None:
                continue
            function, skip = receiver
            arguments = function.args
            parameters = [*arguments.posonlyargs, *arguments.args]
            named = {parameter.arg: parameter for parameter in (*parameters, *arguments.kwonlyargs)}
            given = [(parameters[at + skip] if at + skip < len(parameters) else None, entry)
                     for at, entry in positional]
            given += [(named.get(keyword), entry) for keyword, entry in keywords]
            for parameter, entry in given:
                if parameter is None or index.values_of(parameter.arg, function) != [None]:
                    continue  # no such parameter (a `*args`), or rebound in the def: not followed
                key = (id(parameter), entry.get("path", ""), entry.get("line", 0))
                if key not in sites:
                    sites[key] = LoaderSite(parameter, parameter.arg,  # type: ignore[arg-type]
                                            imported={**entry, "handed": [name, f"{file}:{line}"]})
        return list(sites.values())

    def _loader_sites(self, expr: ast.expr, depth: int = 0) -> List[LoaderSite]:
        """The loaders ``expr`` holds: a ``DataLoader(...)`` call, a factory's call, a name bound to one, or
        a parameter that the file's calls of its function pass one to (``loader = cycle(loader)`` in
        ``def train(loader)``)."""
        site = self._direct.get(expr)
        if site is not None:
            return [site]
        if type(expr) is ast.Call:
            imported = self._imported.get(expr)
            if imported is not None:
                return [s for s in imported if s is not None and s.position is None]
            if type(expr.func) is ast.Name and expr.func.id in self._factories:  # type: ignore[attr-defined]
                return list(self._factories[expr.func.id].get(None, ()))  # type: ignore[attr-defined]
            if type(expr.func) is ast.Attribute:  # type: ignore[attr-defined]
                return self._method_returns(expr)
            return []
        found: List[LoaderSite] = self._bound_to(self._names, expr)  # type: ignore[assignment]
        if not found and type(expr) is ast.Name and depth < 3:
            # what `found` holds (a set: a long file may pass thousands), made once a second argument
            # brings sites: most parameters get one argument, and a long file may pass thousands of sites
            known: Optional[Set[int]] = None
            for _, argument in self._arguments_for_parameter(self.index.scope_of(expr), expr):
                sites = self._loader_sites(argument, depth + 1)
                if not found:
                    found += sites
                    continue
                if known is None:
                    known = set(map(id, found))
                new = [site for site in sites if id(site) not in known]
                found += new
                known.update(map(id, new))
        return found

    def _bind_iterators(self) -> None:
        """Names that hold an iterator over a loader: ``it = iter(loader)``, ``batches = cycle(loader)``
        where ``cycle`` is a generator of this file that iterates its parameter."""
        index = self.index
        self._generators = self._generator_feeds()
        for name in ("iter", *self._generators):
            for info in index.calls_by_name.get(name, ()):
                call = info.node
                target = _assigned_target(index, call)
                if target is not None and type(call.func) is ast.Name:
                    self._bind(self._iterators, dotted_name(target), index.scope_of(call), self._drawn_from(call))

    def _generator_feeds(self) -> Dict[str, List[Tuple[str, ast.AST]]]:
        """Module-level generators of the file that yield from a parameter, by name: (parameter, the loop or
        ``yield from`` that iterates it)."""
        index = self.index
        feeds: Dict[str, List[Tuple[str, ast.AST]]] = {}
        for function in index.functions:
            if index.parent(function) is not index.tree:
                continue
            params = {p.arg for p in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)}
            found: List[Tuple[str, ast.AST]] = []
            yields = False
            for node in walk(function):
                kind = type(node)
                if kind is ast.Yield or kind is ast.YieldFrom:
                    yields = True
                    if kind is ast.YieldFrom and type(node.value) is ast.Name and node.value.id in params:
                        found.append((node.value.id, node))
                elif kind in (ast.For, ast.AsyncFor) and index.function_of(node) is function:
                    for expr in self.iterated(index.loop_info[node]):
                        if type(expr) is ast.Name and expr.id in params:
                            found.append((expr.id, node))
            if yields and found:
                feeds[function.name] = found
        return feeds

    def _drawn_from(self, expr: ast.expr) -> List["Drawn"]:
        """Iterators over loaders that ``expr`` holds, each with what starts the loader's iteration (its
        ``iter(...)`` call, or the generator's loop over it)."""
        if type(expr) is ast.Call and type(expr.func) is ast.Name:
            name = expr.func.id  # type: ignore[attr-defined]
            if name == "iter" and len(expr.args) == 1 and not expr.keywords:  # type: ignore[attr-defined]
                inner = expr.args[0]  # type: ignore[attr-defined]
                return ([Drawn(site, expr) for site in self._loader_sites(inner)]
                        or self._drawn_from(inner))  # `iter(cycle(loader))`
            feeds = self._generators.get(name)
            if feeds and not has_star(expr):  # type: ignore[arg-type]
                function = next(f for f in self.index.functions if f.name == name and self.index.parent(f) is self.index.tree)
                drawn = []
                for param, feeder in feeds:
                    argument = argument_for(function, param, expr.args, expr.keywords)  # type: ignore[attr-defined]
                    if argument is not None:
                        drawn += [Drawn(site, feeder) for site in self._loader_sites(argument)]
                return drawn
            return []
        if type(expr) in (ast.Name, ast.Attribute):
            return self._bound_to(self._iterators, expr)  # type: ignore[return-value]
        return []

    def _bound_to(self, names: "_Bindings", use: ast.expr) -> List[object]:
        """What ``use`` (a name or ``self.x``) holds by ``names``, in the order bound. A plain name's value
        is bound in the same scope, or at module level and not rebound in the using scope; an attribute
        (``self.train_loader``) is matched by its spelling anywhere in the file."""
        name = dotted_name(use) or ""
        scopes = names.get(name)
        if not scopes:
            return []
        if type(use) is not ast.Name:
            return [item for found in scopes.values() for item in found]
        index = self.index
        use_scope = index.scope_of(use)
        found = list(scopes.get(use_scope, ()))
        if len(found) > 1:
            found = self._reaching(use, use_scope, found)
        if use_scope is not index.tree and not index.values_of(use.id, use_scope):  # type: ignore[attr-defined]
            found += scopes.get(index.tree, ())
        return found

    def _reaching(self, use: ast.Name, scope: AstScope, found: List[object]) -> List[object]:
        """Of what ``use``'s name holds in ``scope`` (its own def or the module), what the binding that reaches
        ``use`` gave, where the code shows which one that is: ``use`` sits in a statement of the scope's own
        body, and the last earlier statement of that body that binds the name is a plain assignment of one of
        ``found`` (``loader = DataLoader(a)`` ... ``loader = DataLoader(b)`` ... ``train(loader)``: only
        ``b``'s loader). Anything else (a binding under an ``if`` or in a loop, the use's own statement
        binding it): all of ``found``."""
        body = getattr(scope, "body", None)
        if type(body) is not list:
            return found  # a lambda
        position = (use.lineno, use.col_offset)
        starts = self._body_starts.get(id(body))
        if starts is None:  # (a scan of the body per use cost uses x statements in a long module)
            starts = self._body_starts[id(body)] = [(statement.lineno, statement.col_offset) for statement in body]
        at: Optional[int] = bisect.bisect_right(starts, position) - 1
        if at < 0 or position > (body[at].end_lineno, body[at].end_col_offset):  # type: ignore[operator]
            at = None
        if at is None or _binds(body[at], use.id):
            return found
        for statement in reversed(body[:at]):
            if not _binds(statement, use.id):
                continue
            if type(statement) is not ast.Assign or len(statement.targets) != 1 \
                    or type(statement.targets[0]) is not ast.Name:
                return found
            given = [item for item in found if isinstance(item, LoaderSite) and item.call is statement.value]
            return given or found
        return found

    def _arguments_for_parameter(
        self, function: Optional[AstScope], expr: ast.expr
    ) -> Iterator[Tuple[ast.Call, ast.expr]]:
        """(call, argument) for each same-file call of ``function`` that passes the parameter ``expr`` names."""
        if type(expr) is not ast.Name or not is_parameter(function, expr.id):  # type: ignore[attr-defined]
            return
        name = expr.id  # type: ignore[attr-defined]
        arguments = function.args  # type: ignore[union-attr]
        params = [p.arg for p in (*arguments.posonlyargs, *arguments.args)]
        is_method = self.index.class_of.get(function) is not None and params[:1] in (["self"], ["cls"])
        for info in self.index.calls_by_name.get(function.name, ()):  # type: ignore[union-attr]
            call = info.node
            if is_method != (type(call.func) is ast.Attribute) or has_star(call):
                continue
            chosen = argument_for(function, name, call.args, call.keywords, 1 if is_method else 0)
            if chosen is not None:
                yield call, chosen

    # --- training ------------------------------------------------------------------------------
    def _functions_that_train(self) -> Set[str]:
        """Names of the file's functions that call ``backward()`` or step an optimizer."""
        index = self.index
        return {
            function.name for function in index.functions
            if any(index.is_backward_call(c.node) or index.is_optimizer_step(c.node, c.function)
                   for c in index.calls_within(function))
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
        feeders = site.feeders.get(loop.node)
        if feeders:  # batches drawn with `next()`: the loader is iterated again where its iterator is made again
            return next(filter(None, (self._restarts(site, feeder, index.function_of(feeder)) for feeder in feeders)),
                        None)
        built = self._built_in
        for outer in index.enclosing_loops(loop.node):
            if outer is not loop and not built(outer.node, site):
                return outer
        function = loop.function
        for call in site.via_calls.get(loop.node, ()):
            if function is not None and built(function, site):
                continue
            for outer in index.enclosing_loops(call):
                if not built(outer.node, site):
                    return outer
        return self._restarts_through_calls(site, function)

    def _restarts(self, site: LoaderSite, feeder: ast.AST, function: Optional[AstScope]) -> Optional[AstLoopInfo]:
        """A loop that runs ``feeder`` (an ``iter(loader)``, a generator's loop over the loader) again and again:
        around it (``except StopIteration: it = iter(loader)`` in the step loop, a generator's ``while True``),
        or around the calls of the function that holds it."""
        for outer in self.index.enclosing_loops(feeder):
            if outer.node is not feeder and not self._built_in(outer.node, site):
                return outer
        return self._restarts_through_calls(site, function)

    def _restarts_through_calls(self, site: LoaderSite, function: Optional[AstScope]) -> Optional[AstLoopInfo]:
        """A helper that iterates the loader, called once per epoch elsewhere in the file."""
        index = self.index
        if function is not None and not self._built_in(function, site):
            for info in index.calls_by_name.get(getattr(function, "name", "<lambda>"), ()):
                for outer in index.enclosing_loops(info.node):
                    if not self._built_in(outer.node, site):
                        return outer
        return None

    def _built_in(self, node: ast.AST, site: LoaderSite) -> bool:
        """The loader is built inside ``node``: its ``DataLoader(...)`` call, or a call of the factory that
        builds it."""
        index = self.index
        return index.contains(node, site.call) or any(index.contains(node, call) for call in site.built_by)

    # --- batches ---------------------------------------------------------------------------------
    def batch_names(self, loop: AstLoopInfo) -> Set[str]:
        """Names that hold (part of) the current batch in ``loop``: its targets, and names the body unpacks
        or indexes from them (``x, y = batch``, ``x = batch["image"]``), in source order."""
        drawn = self._drawn_names.get(loop.node, set())  # `images, labels = next(batches)`
        if type(loop.node) is ast.While:
            if not drawn:
                return set()
            names = set(drawn)
        else:
            names = set(target_names(loop.node.target)) | drawn  # type: ignore[union-attr]
        assignments = [node for statement in loop.node.body for node in walk(statement) if type(node) is ast.Assign]
        for node in sorted(assignments, key=lambda n: (n.lineno, n.col_offset)):
            for target in node.targets:
                # `x, y = s["x"], s["y"]`: each name its part; `x, y = batch`: both the whole batch's
                pairs = paired_targets(target, node.value) if type(node.value) in (ast.Tuple, ast.List) \
                    else [(target, node.value)]
                for bound, value in pairs:
                    if value is not None and root_name(value) in names and is_batch_part(value):
                        names.update(target_names(bound))
        return names

    def draws_with_next(self, loop: AstLoopInfo) -> bool:
        """``loop`` takes its batches with ``next()`` on an iterator over a loader (``next(batches)``)."""
        return loop.node in self._drawn_calls

    def batch_moves(self, loop: AstLoopInfo, converted: bool = False) -> List[ast.Call]:
        """``.to(<CUDA>)``/``.cuda()`` calls in the loop body whose receiver is (part of) the batch, or the
        value of a comprehension over it (``{k: v.to(device) for k, v in batch.items()}``). With
        ``converted``, also a move of a dtype conversion of it (``im.float().to(device)``, see
        ``conversion_before_move``)."""
        index = self.index
        names = self.batch_names(loop)
        drawn_calls = self._drawn_calls.get(loop.node, set())  # `next(batches).to(device)`
        if not names and not drawn_calls:
            return []
        body = loop.node.body
        comprehension_names = set()
        for statement in body:
            for node in walk(statement):
                if type(node) is ast.comprehension and root_name(node.iter) in names:
                    comprehension_names.update(target_names(node.target))
        moves = []
        on_device: Set[str] = set()  # names the body has rebound to a moved batch (`y = y.cuda()`) so far
        for statement in body:
            moved_here = None
            for info in index.calls_in(statement):
                call = info.node
                if call_name(call) not in {"to", "cuda"} or type(call.func) is not ast.Attribute:
                    continue
                owner = call.func.value  # type: ignore[attr-defined]
                if converted and conversion_before_move(call) is not None:
                    owner = owner.func.value  # type: ignore[attr-defined]
                if owner not in drawn_calls:
                    if not is_batch_part(owner):
                        continue
                    root = root_name(owner)
                    if root not in names and root not in comprehension_names:
                        continue
                if to_destination(index, call, _scope(index, info)) == CUDA:
                    if type(owner) is ast.Name and owner.id in on_device:  # type: ignore[attr-defined]
                        continue  # already on the GPU: `.cuda()` of it copies nothing
                    moves.append(call)
                    moved_here = call
            # `y = y.cuda()` as a statement of the body: later statements read `y` on the device (until a
            # statement binds `y` again, anywhere in it)
            if on_device:
                on_device.difference_update(node.id for node in ast.walk(statement)  # type: ignore[attr-defined]
                                            if type(node) is ast.Name and type(node.ctx) is not ast.Load)  # type: ignore[attr-defined]
            if moved_here is not None and type(statement) is ast.Assign and statement.value is moved_here \
                    and len(statement.targets) == 1 and type(statement.targets[0]) is ast.Name:
                on_device.add(statement.targets[0].id)  # type: ignore[attr-defined]
        return moves

    def setting(self, site: LoaderSite, name: str) -> Union[int, bool, str]:
        """The loader's ``name`` (one of ``SETTINGS``) as the rules read it: ``ABSENT``, ``UNKNOWN``, an int
        (``num_workers``) or a bool."""
        if site.imported is not None:
            return site.imported.get(name, UNKNOWN)  # type: ignore[no-any-return]
        key = (id(site), name)  # asked for each loop that iterates the loader: read once
        value = self._settings.get(key)
        if value is None:
            value = self._settings[key] = call_setting(self.index, site.call, name)
        return value

    def batches_may_be_on_cuda(self, site: LoaderSite) -> bool:
        """A ``Dataset`` class of this file, or of the file whose factory builds the loader, moves data to a
        CUDA device (``dataset_on_cuda``), or the loader's own dataset makes its samples on the GPU
        (``samples_on_gpu``)."""
        return (self.dataset_on_cuda() or bool(site.imported and site.imported.get("on_cuda"))
                or self.samples_on_gpu(site))

    # --- datasets whose samples are made on the GPU ----------------------------------------------
    def samples_on_gpu(self, site: LoaderSite) -> bool:
        """The loader's dataset is, or may be, an instance of a class of the file whose ``__getitem__``
        (``__getitems__``, ``__iter__``), or a method of its class that one calls (``self.sample(i)``), moves
        a tensor to a device that is CUDA or may be, or makes one there (``x.cuda()``, ``x.to(device)``,
        ``torch.tensor(..., device="cuda")``: ``may_place_on_cuda``): each sample comes out on the GPU.
        Worker processes cannot make CUDA tensors (CUDA does not survive a fork, and spawned workers each
        start their own context), and pinning a CUDA tensor raises. "May be": the dataset argument, a name
        any of whose bindings is such an instance, or a wrapper call's argument (``Subset(ds, ids)``,
        ``ConcatDataset([a, b])``) that is one. Read in this file only; a loader built by a factory of
        another file takes that file's answer (its summary's ``gpu_samples``)."""
        if site.imported is not None:
            return bool(site.imported.get("gpu_samples"))
        value = loader_argument(site.call, "dataset")
        if not isinstance(value, ast.expr):
            return False
        return any(self._class_samples_on_gpu(klass) for klass in self._instance_classes(value, 0))

    def _classes_named(self, name: str) -> List[ast.ClassDef]:
        if self._classes is None:
            self._classes = {}
            for klass in self.index.classes:
                self._classes.setdefault(klass.name, []).append(klass)
        return self._classes.get(name, [])

    def _instance_classes(self, expr: ast.AST, depth: int) -> Iterator[ast.ClassDef]:
        """The classes of the file ``expr`` is, or may be, an instance of, or may wrap one of."""
        if depth > 5:
            return
        index = self.index
        kind = type(expr)
        if kind is ast.Name:
            scope = index.scope_of(expr)
            values = index.values_of(expr.id, scope) or index.values_of(expr.id, index.tree)  # type: ignore[attr-defined]
            for value in values:
                if isinstance(value, ast.expr):
                    yield from self._instance_classes(value, depth + 1)
        elif kind is ast.Call:
            func = expr.func  # type: ignore[attr-defined]
            classes = self._classes_named(func.id) if type(func) is ast.Name else []
            if classes:
                yield from classes
                return
            for argument in (*expr.args, *(k.value for k in expr.keywords)):  # type: ignore[attr-defined]
                yield from self._instance_classes(argument, depth + 1)
        elif kind in (ast.List, ast.Tuple):
            for element in expr.elts:  # type: ignore[attr-defined]
                yield from self._instance_classes(element, depth + 1)
        elif kind is ast.IfExp:  # `Noise() if use_noise else Windows(...)`
            yield from self._instance_classes(expr.body, depth + 1)  # type: ignore[attr-defined]
            yield from self._instance_classes(expr.orelse, depth + 1)  # type: ignore[attr-defined]
        elif kind is ast.Starred:
            yield from self._instance_classes(expr.value, depth + 1)  # type: ignore[attr-defined]

    def _method(self, klass: ast.ClassDef, name: str, depth: int = 0) -> Optional[AstFunction]:
        """``klass``'s method ``name``, its own or one it inherits from a class of the file."""
        for node in klass.body:
            if type(node) in (ast.FunctionDef, ast.AsyncFunctionDef) and node.name == name:  # type: ignore[attr-defined]
                return node  # type: ignore[return-value]
        if depth < 4:
            for base in klass.bases:
                if type(base) is ast.Name:
                    for parent in self._classes_named(base.id):
                        if parent is not klass:
                            found = self._method(parent, name, depth + 1)
                            if found is not None:
                                return found
        return None

    def _class_samples_on_gpu(self, klass: ast.ClassDef) -> bool:
        known = self._gpu_classes.get(klass)
        if known is None:
            known = self._gpu_classes[klass] = self._makes_samples_on_gpu(klass)
        return known

    def _makes_samples_on_gpu(self, klass: ast.ClassDef) -> bool:
        index = self.index
        pending = [m for m in (self._method(klass, name) for name in _SAMPLE_METHODS) if m is not None]
        seen: Set[ast.AST] = set()
        while pending:
            method = pending.pop()
            if method in seen:
                continue
            seen.add(method)
            arguments = method.args.posonlyargs + method.args.args
            receiver = arguments[0].arg if arguments else None
            for info in index.calls_within(method):
                call = info.node
                if may_place_on_cuda(index, call, info.function if info.function is not None else index.tree):
                    return True
                func = call.func
                if (receiver is not None and type(func) is ast.Attribute and type(func.value) is ast.Name
                        and func.value.id == receiver and len(seen) < 16):
                    helper = self._method(klass, func.attr)
                    if helper is not None:
                        pending.append(helper)
        return False

    def sites_of(self, loop: AstLoopInfo) -> List[LoaderSite]:
        """The loaders ``loop`` iterates (those whose ``loops`` hold it), in the order of ``sites``."""
        if self._sites_by_loop is None:  # once per file: asked for each loop, a scan of every site was quadratic
            self._sites_by_loop = {}
            for site in self.sites:
                for known in site.loops:
                    self._sites_by_loop.setdefault(id(known), []).append(site)
        return self._sites_by_loop.get(id(loop), [])

    def unpinned(self, loop: AstLoopInfo) -> bool:
        """Every loader the loop is tied to is provably not pinned (``pin_memory`` not passed, or ``False``)."""
        sites = self.sites_of(loop)
        return bool(sites) and all(self.setting(site, "pin_memory") in (ABSENT, False) for site in sites)

    def is_in_memory_dataset(self, site: LoaderSite) -> bool:
        """The loader's dataset is a ``TensorDataset`` (or a name bound to one): nothing to load in workers."""
        if site.imported is not None:
            return bool(site.imported.get("in_memory"))
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
        func = value.func  # type: ignore[attr-defined]
        if type(func) is ast.Name:
            classes = self._classes_named(func.id)  # `Windows(tokens, 256)`: a class of the file
            if len(classes) == 1:
                return self._cuts_held_tensor(classes[0])
            # `load_split(path)`, a function of this file whose every `return` builds a TensorDataset
            for function in index.functions:
                if function.name == func.id and index.class_of.get(function) is None:
                    returns = [n for n in walk(function) if type(n) is ast.Return]
                    return bool(returns) and all(
                        type(r.value) is ast.Call and index.qualified_name(r.value.func) in _IN_MEMORY_DATASETS
                        for r in returns)
        return False

    def lists_its_samples(self, site: LoaderSite) -> bool:
        """The loader's dataset, in this file, is a Python list or tuple of samples (a display or a comprehension,
        also a name every binding of which is one: ``cifar2 = [(img, label) for img, label in cifar10 if label in
        (0, 2)]``): the samples exist already, and indexing a list is no work for a worker process. (Whether
        they are CPU tensors, which pinning needs, the list does not say.)"""
        if site.imported is not None:
            return False
        value = loader_argument(site.call, "dataset")
        if not isinstance(value, ast.expr):
            return False
        if type(value) is ast.Name:
            index = self.index
            values = index.values_of(value.id, index.scope_of(value)) or index.values_of(value.id, index.tree)
            return bool(values) and all(type(v) in _SEQUENCES for v in values)
        return type(value) in _SEQUENCES

    def _cuts_held_tensor(self, klass: ast.ClassDef) -> bool:
        """``klass`` hands out pieces of a tensor it holds, as a ``TensorDataset`` does: its ``__getitem__``
        (its own or inherited; no ``__getitems__`` / ``__iter__``) only assigns and returns names,
        constants, ``self.<attr>`` reads, subscripts, arithmetic, ``len``/``min``/``max``/``int`` and a random
        offset (``torch.randint``, ``random.randint``), and tensor methods that shape or convert
        (``.long()``, ``.size(0)``); and a slice of ``self.<attr>`` goes through a method only tensors have
        (``.long()``, ``.clone()``: NumPy arrays, memory maps and HDF5 datasets have none), so what it cuts
        is a tensor, already in memory."""
        if any(self._method(klass, name) is not None for name in _SAMPLE_METHODS[1:]):
            return False
        method = self._method(klass, "__getitem__")
        if method is None or len(method.args.args) != 2:
            return False
        receiver = method.args.args[0].arg
        index = self.index
        tensor_cut = False
        for statement in method.body:
            if type(statement) not in (ast.Assign, ast.Return) or getattr(statement, "value", None) is None:
                return False
            if type(statement) is ast.Assign and not all(type(t) is ast.Name for t in statement.targets):
                return False
            for node in walk(statement.value):  # type: ignore[arg-type]
                kind = type(node)
                if kind is ast.Call:
                    func = node.func  # type: ignore[attr-defined]
                    if type(func) is ast.Attribute and func.attr in _TENSOR_ONLY_METHODS:
                        cut = func.value.value if type(func.value) is ast.Subscript else None
                        tensor_cut = tensor_cut or (type(cut) is ast.Attribute and type(cut.value) is ast.Name
                                                    and cut.value.id == receiver)
                    elif not ((type(func) is ast.Attribute and func.attr in _SHAPING_METHODS)
                              or (type(func) is ast.Name and func.id in _CHEAP_BUILTINS)
                              or index.qualified_name(func) in _RANDOM_OFFSETS):
                        return False
                elif kind is ast.Attribute:
                    if type(node.value) is ast.Name and node.value.id != receiver:  # type: ignore[attr-defined]
                        if not (type(index.parent(node)) is ast.Call and index.parent(node).func is node):
                            return False  # another object's state: not known to be held
                elif kind not in _CUT_EXPRESSIONS:
                    return False
        return tensor_cut

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
                    if any(_moves_to_cuda(index, info) for info in index.calls_within(node)):
                        self._dataset_on_cuda = True
                        break
        return self._dataset_on_cuda


# the methods that make a dataset's samples: map-style (``__getitems__``: batched, torch 2.2+) and iterable
_SAMPLE_METHODS = ("__getitem__", "__getitems__", "__iter__")
# What a `__getitem__` that cuts a piece of a held tensor is made of (`LoaderFacts._cuts_held_tensor`).
_TENSOR_ONLY_METHODS = {"long", "float", "half", "bfloat16", "int", "double", "short", "byte", "bool", "clone"}
_SHAPING_METHODS = {"size", "view", "reshape", "contiguous", "unsqueeze", "squeeze", "flatten", "numel", "item"}
_CHEAP_BUILTINS = {"len", "min", "max", "int", "slice"}
_RANDOM_OFFSETS = {"torch.randint", "random.randint", "random.randrange"}
# (`walk` yields no operator or context; a name or a constant only as the value itself)
_CUT_EXPRESSIONS = {ast.Name, ast.Constant, ast.Subscript, ast.Slice, ast.BinOp, ast.UnaryOp, ast.Tuple, ast.keyword}


def loader_facts(index: AstIndex, project: Optional["ProjectModel"] = None) -> LoaderFacts:
    """The file's loader facts, computed once and shared by every rule that asks (``project``: the summaries of
    the project files it imports, ``IndexContext.project``; every rule of a file passes the same)."""
    facts = index.shared.get("loader_facts")
    if facts is None:
        facts = index.shared["loader_facts"] = LoaderFacts(index, project)
    return facts  # type: ignore[return-value]


def built_elsewhere(site: LoaderSite) -> str:
    """A message's note on where a loader of another project file is built, and which call of another file
    hands it to this one (empty for one of this file)."""
    if site.imported is None:
        return ""
    built = f"{site.imported.get('path', 'another file')}:{site.imported.get('line', 1)}"
    handed = site.imported.get("handed")
    if handed:
        return f" (the DataLoader is built in {built} and handed to `{handed[0]}` in {handed[1]})"
    return f" (the DataLoader is built in {built})"


def call_setting(index: AstIndex, call: ast.Call, name: str) -> Union[int, bool, str]:
    """``DataLoader(...)``'s ``name`` as ``LoaderFacts.setting`` reads it."""
    value = loader_argument(call, name)
    if value is None:
        return ABSENT
    if value is UNREADABLE:
        return UNKNOWN
    if name == "num_workers":
        number = int_value(index, value)  # type: ignore[arg-type]
        return number if number is not None else UNKNOWN
    if is_literal(value, True):  # type: ignore[arg-type]
        return True
    return False if is_literal(value, False) else UNKNOWN  # type: ignore[arg-type]


@dataclass(frozen=True)
class WorkerCount:
    """A loader's worker count as ``LoaderFacts.worker_count`` reads it."""

    count: int
    option: Optional[ast.expr] = None  # the option it is the default of (``args.workers``)
    parameter: Optional[str] = None  # the parameter of another file's factory that takes it there


def _count_of(index: AstIndex, value: ast.expr, scope: AstScope) -> Optional[WorkerCount]:
    """An integer ``value`` (``int_value``), or the integer default of the argparse option it reads."""
    number = int_value(index, value)
    if number is not None:
        return WorkerCount(number)
    default = option_default(index, value, scope)
    if default is not None and is_integer(default):
        return WorkerCount(default.value, value)  # type: ignore[attr-defined]
    return None


def loader_summary(index: AstIndex) -> dict:
    """What other files of the project may use of this one, as plain data (JSON): its module-level loader
    factories (``def build_loader(...): return DataLoader(...)``) with the settings of the loader each
    builds, and the names it takes from other modules by a relative import (``from .build import
    build_loader`` in a package's ``__init__.py``), which the project model follows."""
    facts = LoaderFacts(index)  # this file alone: a summary never depends on another file
    factories = {}
    for name, returned in facts._factories.items():
        if set(returned) == {None}:
            factories[name] = {"tuple": False, "sites": [facts._entry(returned[None][0])]}
        elif None not in returned:
            size = max(returned) + 1  # type: ignore[type-var]
            factories[name] = {"tuple": True, "sites": [facts._entry(returned[at][0]) if at in returned else None
                                                        for at in range(size)]}
    summary = reexport_summary(index.tree)
    if factories:
        summary["factories"] = factories
    return summary


def handed_summary(index: AstIndex) -> List[list]:
    """The loaders this file hands to a class or function of another project file, as plain data for that file
    (``uses_summary``'s "handed"): per call of an imported name that passes loaders (``Solver(config,
    train_loader)`` with ``from solver import Solver``), ``[module, level, name, line, [[position, loader]],
    [[keyword, loader]]]``, a loader being ``{"entry": ...}`` for one this file builds (``loader_summary``'s
    entry, without its path) or ``{"factory": [module, level, name], "position": at}`` for one a factory of
    another file builds here (``train_loader = get_loader(...)``), which the receiving file looks up."""
    origins = import_origins(index) if index.import_statements else {}
    if not origins:
        return []
    facts: Optional[LoaderFacts] = None
    handed: List[list] = []
    for info in index.calls:
        call = info.node
        written = dotted_name(call.func)
        origin = called_origin(origins, written) if written is not None else None
        if origin is None or not may_be_project(origin[0], origin[1]) or has_star(call):
            continue
        if facts is None:
            facts = LoaderFacts(index)  # this file alone: a summary never depends on another file
        positional = [[at, loader] for at, loader in ((at, _handed_loader(facts, origins, arg))
                                                      for at, arg in enumerate(call.args)) if loader]
        keywords = [[keyword.arg, loader] for keyword, loader in ((k, _handed_loader(facts, origins, k.value))
                                                                  for k in call.keywords) if loader]
        if positional or keywords:
            handed.append([*origin, call.lineno, positional, keywords])
    return handed


def _handed_loader(facts: LoaderFacts, origins: Dict[str, Tuple[str, int, Optional[str]]],
                   expr: ast.expr) -> Optional[dict]:
    """What ``handed_summary`` says of an argument that holds exactly one loader (or several built alike: a
    script that builds its loader again with the same settings after unfreezing the backbone), or None."""
    sites = facts._loader_sites(expr)
    if sites:
        entries = [facts._entry(site) for site in sites]
        if all({**entry, "line": 0} == {**entries[0], "line": 0} for entry in entries):
            return {"entry": entries[0]}  # (the first build names them all)
    if sites or type(expr) is not ast.Name:
        return None
    index = facts.index
    scope = index.scope_of(expr)
    if not index.values_of(expr.id, scope):
        scope = index.tree
    # (`loader = None` before the branch that builds it: None holds no loader to follow)
    values = [value for value in index.values_of(expr.id, scope) if not is_literal(value, None)]
    if len(values) != 1:
        return None
    value, position = values[0], None
    if value is None:  # `train_dl, val_dl = build_loaders(...)`: the call, and which item the name takes
        unpacked = unpacked_from(index, expr.id, scope)
        if unpacked is not None:
            value, position = unpacked
    if type(value) is not ast.Call:
        return None
    written = dotted_name(value.func)
    origin = called_origin(origins, written) if written is not None else None
    if origin is None or not may_be_project(origin[0], origin[1]):
        return None
    return {"factory": list(origin), "position": position}


def reexport_summary(tree: ast.Module) -> dict:
    """The part of ``loader_summary`` that needs no index: the names the module takes by a relative import,
    all a file that never names ``DataLoader`` can hold (no loader is built there, so no factory)."""
    reexports = {}
    for node in tree.body:
        if type(node) is ast.ImportFrom and node.level:
            for alias in node.names:
                if alias.name != "*":
                    reexports[alias.asname or alias.name] = [node.module or "", node.level, alias.name]
    return {"reexports": reexports} if reexports else {}


def _moves_to_cuda(index: AstIndex, info: AstCallInfo) -> bool:
    call, scope = info.node, _scope(index, info)
    if call_name(call) in {"to", "cuda"} and to_destination(index, call, scope) == CUDA:
        return True
    device = keyword_value(call, "device")
    return device is not None and device_kind(index, device, scope) == CUDA


def _scope(index: AstIndex, info: AstCallInfo) -> AstScope:
    return info.function if info.function is not None else index.tree


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


# Tensor methods that convert the dtype and take no argument: on a host tensor of another dtype each makes a new
# (pageable) host tensor; on one of that dtype already it returns the tensor itself.
DTYPE_METHODS = frozenset({"float", "double", "half", "bfloat16", "long", "int", "short", "byte", "char", "bool"})


def conversion_before_move(move: ast.Call) -> Optional[ast.Call]:
    """``im.float()`` in ``im.float().to(device)``: a dtype conversion without arguments that the move copies."""
    owner = move.func.value if type(move.func) is ast.Attribute else None  # type: ignore[attr-defined]
    if type(owner) is ast.Call and type(owner.func) is ast.Attribute and owner.func.attr in DTYPE_METHODS \
            and not owner.args and not owner.keywords:  # type: ignore[attr-defined]
        return owner  # type: ignore[return-value]
    return None


def _binds(statement: ast.stmt, name: str) -> bool:
    """``statement`` (or a def, class, loop or block in it) binds ``name`` in its scope, in any way."""
    for node in ast.walk(statement):
        kind = type(node)
        if kind is ast.Name:
            if node.id == name and type(node.ctx) is not ast.Load:  # type: ignore[attr-defined]
                return True
        elif kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            if node.name == name:  # type: ignore[attr-defined]
                return True
        elif kind in (ast.Import, ast.ImportFrom):
            if any((alias.asname or alias.name.split(".")[0]) == name for alias in node.names):  # type: ignore[attr-defined]
                return True
        elif kind in (ast.Global, ast.Nonlocal):
            if name in node.names:  # type: ignore[attr-defined]
                return True
    return False


def is_batch_part(expr: ast.AST) -> bool:
    """A name, or a subscript/attribute chain of one: a part of the batch, not something computed from it."""
    while type(expr) in (ast.Attribute, ast.Subscript):
        expr = expr.value  # type: ignore[attr-defined]
    return type(expr) is ast.Name


def iterates_loader(index: AstIndex, loop: AstLoopInfo) -> bool:
    """A ``for`` loop over a loader by what the code says of it: ``for x, y in train_loader``,
    ``enumerate(tqdm(dl))``, a name bound once to a ``DataLoader(...)``. Its batches are the loader's (on
    the host until moved). Looser than ``LoaderFacts``, which ties a loop to the loader calls it iterates."""
    node = loop.node
    if type(node) not in (ast.For, ast.AsyncFor):
        return False
    return _is_loader_expr(index, node.iter, loop.function or index.tree)  # type: ignore[union-attr]


def _is_loader_expr(index: AstIndex, expr: ast.expr, scope: AstScope) -> bool:
    if type(expr) is ast.Call and call_name(expr) in {"enumerate", "tqdm", "iter", "zip"}:
        # the positional arguments, `*x` and `**x` included (as LibCST's arguments without keywords)
        values = [arg.value if type(arg) is ast.Starred else arg for arg in expr.args]  # type: ignore[attr-defined]
        values += [keyword.value for keyword in expr.keywords if keyword.arg is None]  # type: ignore[attr-defined]
        return any(_is_loader_expr(index, value, scope) for value in values)
    if index.is_loader_name(expr):
        return True
    if type(expr) is ast.Name:
        value = index.single_value(expr.id, scope)  # type: ignore[attr-defined]
        if type(value) is ast.Call:
            return (index.qualified_name(value.func) or "").endswith("DataLoader")  # type: ignore[attr-defined]
    return False


# Batch iterators of other libraries that are no torch DataLoader, nor a subclass of one: torchtext's legacy
# iterators build each batch's tensors themselves (on the device their `device=` names), with no pinned memory.
_OTHER_BATCH_ITERATORS = frozenset(
    f"{package}.{klass}{method}"
    for package in ("torchtext.data", "torchtext.data.iterator", "torchtext.legacy.data",
                    "torchtext.legacy.data.iterator")
    for klass in ("Iterator", "BucketIterator", "BPTTIterator") for method in ("", ".splits"))


def built_by_other_iterator(index: AstIndex, expr: ast.expr, scope: AstScope, depth: int = 0) -> bool:
    """``expr`` (a name) certainly holds a batch iterator of another library that is no torch DataLoader
    (torchtext's ``BucketIterator(...)``, or one of what ``BucketIterator.splits(...)`` returns): every binding
    of the name seen from ``scope`` is such a call or unpacks one, or it is a parameter of a function of the
    file every call of which (there is at least one) passes such an iterator."""
    if type(expr) is not ast.Name or depth > 4:
        return False
    name = expr.id  # type: ignore[attr-defined]
    where = scope if index.values_of(name, scope) else index.tree
    values = index.values_of(name, where)
    if not values:
        return False
    unpacked = _iterator_unpackings(index).get((where, name), 0)
    unbound = 0
    for value in values:
        if value is None:
            unbound += 1
        elif not (type(value) is ast.Call and index.qualified_name(value.func) in _OTHER_BATCH_ITERATORS):
            return False
    if unbound == unpacked:
        return True
    return unbound == unpacked + 1 and _iterator_parameter(index, where, name, depth)


def _iterator_unpackings(index: AstIndex) -> dict:
    """(scope, name) -> how many times ``a, b, c = BucketIterator.splits(...)`` binds the name there."""
    memo = index.shared.get("iterator_unpackings")
    if memo is None:
        memo = index.shared["iterator_unpackings"] = {}
        for info in index.calls:
            if index.qualified_name(info.node.func) not in _OTHER_BATCH_ITERATORS:
                continue
            target = index.assigned_to.get(info.node)
            if target is None or type(target) is ast.Name:
                continue  # a plain `x = BucketIterator(...)` is a binding with its value
            statement = index.parent(info.node)
            if type(statement) is not ast.Assign or len(statement.targets) != 1:
                continue
            for name in target_names(target):
                key = (info.function or index.tree, name)
                memo[key] = memo.get(key, 0) + 1
    return memo


def _iterator_parameter(index: AstIndex, function: AstScope, name: str, depth: int) -> bool:
    """``name`` is a parameter of ``function`` (a plain def of the file) that every call of it in the file
    passes a batch iterator of another library (``built_by_other_iterator``)."""
    if not is_parameter(function, name) or index.in_class(function):
        return False
    calls = [info for info in index.calls_by_name.get(function.name, ())  # type: ignore[attr-defined]
             if type(info.node.func) is ast.Name]  # (`model.train()` is another object's method)
    if not calls:
        return False
    for info in calls:
        call = info.node
        if has_star(call):
            return False
        value = argument_for(function, name, call.args, call.keywords)
        if value is None or not built_by_other_iterator(index, value, info.function or index.tree, depth + 1):
            return False
    return True
