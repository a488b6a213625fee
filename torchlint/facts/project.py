"""The project model: what a checked file uses of the other files of its project (docs/architecture.md).

A file's rules may follow a loader built by a factory of another project file (``train.py``: ``from data
import build_loader``). The runner hands them a ``ProjectModel``: the summaries (``facts.loaders.loader_summary``,
plain data) of the project files the checked file imports, found by ``resolve`` (relative imports, the
file's folder, the project root and ``src/``; only files under the project root; nothing is executed) and
read from disk even when only that one file is checked (pre-commit passes only the changed files). The
imports are read off the file's bytes (``IMPORTS``), before it is parsed, so that the cache key of its result
(``digest``) covers the summaries it may use: a change in ``data.py``'s loaders re-checks ``train.py``.
An import the scan misses (spelled across a line continuation) only loses that module's loaders: the rules
read the file's own import statements and ask the model only for the modules it holds.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from torchlint.facts.clocks import CLOCK_TEXTS

if TYPE_CHECKING:
    from torchlint.run.cache import Cache

# `from .data import build_loader`, `from pkg import (a, b)`, `import data, pkg.model as m`: the module named,
# its dots, and the names taken (which may be submodules: `from . import data`)
IMPORTS = re.compile(
    rb"^[ \t]*(?:from[ \t]+(\.*)[ \t]*([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]*)|import[ \t]+([^\n#;]+))",
    re.MULTILINE)
# The rules that follow a project file's loaders: their text gates are opened by a file that imports a
# project factory (`train.py` need not say `DataLoader`).
FOLLOWING_RULES = frozenset({"TL401", "TL402", "TL403"})
# ...and TL103, which reads the settings of the loaders a loop iterates (it leaves unpinned ones to TL402)
READING_RULES = FOLLOWING_RULES | {"TL103"}
# The rules that follow a training step into the classes of other project files (``facts.steps``): a loop of
# ``main.py`` that calls ``policy.train(...)`` of a class of ``TD3.py`` steps there, and ``TD3.py``'s methods it
# reaches run every step. They read the step summaries of the files a file imports, and the loops of the files
# that import it.
STEP_RULES = frozenset({"TL101", "TL105", "TL501", "TL502", "TL702"})
# ...of which TL105 reads only the clocks of imported classes: what it reports is always spelled in the file
# itself (`synchronize`), so another file never opens its text gate
_GATED_STEP_RULES = frozenset({"TL105"})
# The rules that ask how often another project file runs a def of the checked one (``StepFacts.runs_once``):
# TL102 is silent on a set-up def that file calls once per run (a timing helper called before the epochs).
ONCE_RULES = frozenset({"TL102"})
# The rules that ask whether an instance of a project class may be a model: TL202 takes no call on an instance
# of a class whose bases lead to no ``nn.Module`` for a forward pass (``facts.modules.class_summary``), wherever
# the class is defined in the project.
CLASS_RULES = frozenset({"TL202"})
# ...and TL301, which asks whether a project class only wraps a conv (``facts.modules.conv_wrapper``): built
# right before a BatchNorm, its bias is cancelled (``ConvNorm`` of ``layers.py`` in ``nn.Sequential(...)``)
WRAPPER_RULES = frozenset({"TL301"})
# TL401-TL403 follow only loops that train in the checked file (`backward()`, an optimizer's `step()`): a file
# without these words gets no project model (the torch tree's modules, helpers), and TL103 there judges its
# loops as it does without one.
_TRAINING_WORDS = (b"backward", b"step")
MAX_HOPS = 3  # re-exports followed (`pkg/__init__.py`: `from .build import build_loader`)
_CLASS_HOPS = 6  # files a class's bases and their re-exports are followed through (`class Base(Plain)` in another)
# A project with more Python files than this is not searched for the files that import a checked one (the
# torch tree's root is site-packages): its classes' methods are then followed only from its own loops.
MAX_PROJECT_FILES = 5000
_SOURCE_LIMIT = 2 * 1024 * 1024  # a larger imported file is not summarized

_RELATIVE_IMPORT = re.compile(r"^[ \t]*from[ \t]+\.", re.MULTILINE)
Module = Tuple[str, int]  # (dotted name, level of a relative import)


def imported_modules(data: bytes) -> List[Module]:
    """The modules the text may import, in order, each once: for ``from m import a`` both ``m`` and ``m.a``."""
    found: Dict[Module, None] = {}
    for match in _import_matches(data):
        dots, module, names, plain = match.groups()
        if plain is not None:
            for part in plain.split(b","):
                words = part.split()
                if words:
                    name = words[0].decode("ascii", "replace")
                    pieces = name.split(".")
                    for end in range(1, len(pieces) + 1):  # `import pkg.data`: pkg and pkg.data
                        found[(".".join(pieces[:end]), 0)] = None
            continue
        level = len(dots)
        module_name = module.decode("ascii", "replace")
        if module_name:
            found[(module_name, level)] = None
        for part in names.strip(b"()").split(b","):
            words = part.split()
            if words and words[0] != b"*":
                name = words[0].decode("ascii", "replace")
                found[(f"{module_name}.{name}" if module_name else name, level)] = None
    return [module for module in found if _is_module(module)]


def _is_module(module: Module) -> bool:
    """A (name, level) an import statement can load: dotted identifiers, or a relative import of a package."""
    return all(piece.isidentifier() for piece in module[0].split(".") if piece) and bool(module[0] or module[1])


def star_modules(data: bytes) -> List[Module]:
    """The modules the text may star-import (``from utils import *``, ``from .model import *``), in order."""
    found: Dict[Module, None] = {}
    for match in _import_matches(data):
        dots, module, names, plain = match.groups()
        if plain is None and names.strip().strip(b"()").strip() == b"*":
            found[(module.decode("ascii", "replace"), len(dots))] = None
    return [module for module in found if _is_module(module)]


def _import_matches(data: bytes):
    """``IMPORTS.finditer(data)``, tried only at the starts of the lines that hold ``import`` (found by
    ``bytes.find``; the expression matches at a line start and holds the word on that line), past the end of
    the previous match, as ``finditer`` resumes: the same matches for a fraction of the scan."""
    end = 0
    at = data.find(b"import")
    while at != -1:
        start = data.rfind(b"\n", 0, at) + 1
        if start >= end:
            match = IMPORTS.match(data, start)
            if match is not None:
                yield match
                end = match.end()
        at = data.find(b"import", max(at + 6, end))
    return


def resolve(module: str, level: int, importer: Path, root: Path) -> Optional[Path]:
    """The file of ``root`` that ``import module`` (``level`` dots) in ``importer`` loads, or None. Absolute
    imports are looked for beside the importer (a script's folder is first on ``sys.path``), at the root
    and in ``root/src``; a relative one from the importer's package."""
    found = _resolved(module, level, os.path.dirname(str(importer)), str(root))
    return Path(found) if found is not None else None


@lru_cache(maxsize=65536)  # a large tree asks tens of thousands (module, folder) pairs: 8,192 thrashed
def _resolved(module: str, level: int, folder: str, root: str) -> Optional[str]:
    """``resolve`` on strings, remembered for the run: every file of a tree asks for torch, numpy, its
    siblings, and most answers are "not in the project"."""
    parts = [part for part in module.split(".") if part]
    if level:
        base = folder
        for _ in range(level - 1):
            base = os.path.dirname(base)
        bases = [base]
    else:
        bases = [folder, root, os.path.join(root, "src")]
    for base in dict.fromkeys(bases):
        target = os.path.join(base, *parts)
        for candidate in ((target + ".py") if parts else None, os.path.join(target, "__init__.py")):
            if candidate is not None and os.path.isfile(candidate) and _inside(candidate, root):
                return candidate
    return None


@lru_cache(maxsize=65536)  # every file's digest names each summary it holds: one realpath per file a run, not per use
def _shown_path(file: str, root: str) -> str:
    """``file`` as a summary names it: relative to the project root, through links, in POSIX form."""
    try:
        return Path(os.path.realpath(file)).relative_to(root).as_posix()
    except ValueError:
        return Path(file).as_posix()


@lru_cache(maxsize=65536)
def _real_path(file: str) -> str:
    """``os.path.realpath(file)``, remembered for the run as ``_resolved`` is: the files a checked one may be
    imported by are each matched against it once for every import there (15,000 calls on the corpus)."""
    return os.path.realpath(file)


def _inside(path: str, root: str) -> bool:
    real = _real_path(path)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


class ProjectModel:
    """The summaries of the project files one checked file imports (and the files they re-export from)."""

    def __init__(self, importer: Path, root: Path, summaries: Dict[Path, dict], imports: Dict[Module, Path],
                 steps: Optional[Dict[Path, dict]] = None, callers: Optional[List[Caller]] = None,
                 loaders: bool = True, builds: Optional[List[Build]] = None,
                 classes: Optional[Dict[Path, Tuple[dict, dict]]] = None,
                 stars: Optional[List[Tuple[str, int, Optional[Path], dict]]] = None,
                 once: Optional[List[Once]] = None, handed: Optional[List[Handed]] = None,
                 cpu_importers: Sequence[str] = ()) -> None:
        self.importer, self.root = importer, root
        # the project modules the file star-imports, in order, each with its star summary
        # (``facts.modules.star_summary``): the names ``from utils import *`` binds there (``star_origins``);
        # a module from outside the project after one of them, with no file
        self.stars = stars or []
        self.summaries = summaries  # file -> its summary
        self.imports = imports  # what the checked file imports -> the project file it loads
        # (``loaders``: the loader rules follow the factories; without, the summaries serve re-exports only)
        self.loaders = loaders
        self.has_factories = loaders and any(summary.get("factories") for summary in summaries.values())
        self.steps = steps or {}  # file -> its step summary (``facts.steps.step_summary``), for those files
        # the loops of the files that import this one which run its classes' methods (``callers``)
        self._callers: List[Caller] = callers or []
        # the calls of the files that import this one which build its classes with a module they move to CUDA
        self._builds: List[Build] = builds or []
        # the calls of the files that import this one of its functions and methods, each with whether it runs
        # once per run there (``called_once``)
        self._once: List[Once] = once or []
        # the calls of the files that import this one which hand loaders to its classes and functions
        self._handed: List[Handed] = handed or []
        # the project files (notebooks included) that import this one, where there are some and none of them
        # nor the project modules they import mentions CUDA (``_cpu_importers``); else empty
        self.cpu_importers: List[str] = list(cpu_importers)
        self.has_device_functions = any(summary.get("devices") for summary in self.steps.values())
        self.has_imported_steps = any(summary.get("classes") for summary in self.steps.values())
        self.has_imported_functions = any(summary.get("functions") for summary in self.steps.values())
        # file -> its class summary (``facts.modules.class_summary``) and its re-exports (its loader summary), for
        # the files the checked one imports and those their classes' bases come from (``CLASS_RULES``)
        self.class_files = classes or {}
        self._plain: Dict[Tuple[Path, str], Optional[dict]] = {}

    def is_empty(self) -> bool:
        """Nothing of another file that the checked file's result may depend on."""
        return not self.summaries and not self.steps and not self._callers and not self._builds \
            and not self.class_files and not self.stars and not self._once and not self._handed \
            and not self.cpu_importers

    @classmethod
    def may_use(cls, data: bytes, codes: "set[str]") -> bool:
        """Whether a file of these bytes, checked with the rules ``codes``, may use what other files hold: where
        it trains (``backward``, ``step`` in its text) the loaders and steps of the files it imports and the loops
        of those that import it; else, for a step rule, the loops of other files that call its functions
        (``may_be_reached``)."""
        if not READING_RULES.isdisjoint(codes) or not STEP_RULES.isdisjoint(codes):
            if b"import" in data and any(word in data for word in _TRAINING_WORDS):
                return True
        return not STEP_RULES.isdisjoint(codes) and may_be_reached(data)

    @classmethod
    def counts_calls(cls, data: bytes, codes: "set[str]") -> bool:
        """Whether a file of these bytes, checked with the rules ``codes``, may ask how often other files call
        its defs (``ONCE_RULES``: a def that may move a tensor to a device)."""
        return not ONCE_RULES.isdisjoint(codes) and b"def " in data and (b".cuda(" in data or b".to(" in data)

    @classmethod
    def trains(cls, data: bytes) -> bool:
        """A file of these bytes may train itself (``backward``, ``step`` in its text): it may use the loaders
        and steps of the files it imports."""
        return any(word in data for word in _TRAINING_WORDS)

    @classmethod
    def follows_loaders(cls, data: bytes, codes: "set[str]") -> bool:
        """Whether the loader rules (``READING_RULES``) may follow a loader of another file in these bytes."""
        return not READING_RULES.isdisjoint(codes) and b"import" in data \
            and any(word in data for word in _TRAINING_WORDS)

    @classmethod
    def reads_classes(cls, data: bytes, codes: "set[str]") -> bool:
        """Whether a file of these bytes, checked with the rules ``codes``, may build an instance of another
        project file's class that a rule asks about (``CLASS_RULES``: TL202, on a file its text gate lets in)."""
        return (not CLASS_RULES.isdisjoint(codes) or not WRAPPER_RULES.isdisjoint(codes)) and b"import" in data \
            and b"torch" in data

    @classmethod
    def empty(cls, path: Path) -> "ProjectModel":
        return cls(Path(os.path.abspath(path)), Path(os.path.abspath(path)).parent, {}, {})

    @classmethod
    def for_file(cls, path: Path, data: bytes, root: Path, cache: Optional["Cache"] = None,
                 max_size: int = _SOURCE_LIMIT, steps: bool = False, loaders: bool = True,
                 imported: bool = True, classes: bool = False, once: bool = False) -> "ProjectModel":
        """The model of ``path`` (its bytes: ``data``) in the project at ``root``; ``steps``: with the step
        summaries of the files it imports and the loops of the files that import it (``STEP_RULES``);
        ``loaders``: with their loader factories (``follows_loaders``); ``imported``: with anything of the files
        it imports (``trains``), else only the loops of those that import it; ``classes``: with the class
        summaries of the files it imports and of those their bases come from (``reads_classes``); ``once``: with
        the calls of the files that import it of its defs (``counts_calls``)."""
        root = Path(os.path.realpath(root))
        importer = Path(os.path.abspath(path))
        # (a module's device is its importers' where it names none itself: read only then)
        cpu = _cpu_importers(importer, root, max_size) \
            if (steps or loaders) and cls.trains(data) and not _names_a_gpu(data) else []
        cls = functools.partial(cls, cpu_importers=cpu)  # type: ignore[assignment]
        if not imported and not classes:  # only what other files' loops run of it
            callers, builds, called, _ = _callers_of(importer, data, root, cache, max_size, steps, once)
            return cls(importer, root, {}, {}, {}, callers, loaders=False, builds=builds, once=called)
        imports: Dict[Module, Path] = {}
        summaries: Dict[Path, dict] = {}
        for module in imported_modules(data):
            found = resolve(*module, importer, root)
            if found is not None and found != importer:
                imports[module] = found
        stars = _stars_of(data, importer, root, imports, cache, max_size)
        pending = list(dict.fromkeys(imports.values()))
        # what is read below of the files of ``summaries``, made with their loader summaries while each one's tree
        # is kept (run.guard): made in passes of their own, a model of many imports parsed each file again for
        # each. The class summaries of those the checked file may build a class of, the step summaries not empty.
        built: Dict[Path, dict] = {}
        step_summaries: Dict[Path, dict] = {}
        for _ in range(MAX_HOPS + 1):  # each file's summary, then the files it re-exports from
            following = []
            for file in pending:
                if file in summaries:
                    continue
                summary = summaries[file] = summary_of(file, cache, max_size)
                if classes and _builds_a_class_of(file, data, max_size):
                    built[file] = summary_of(file, cache, max_size, "classes")
                made = summary_of(file, cache, max_size, "steps") if imported and steps else None
                if made:
                    step_summaries[file] = made
                following.extend(found for found in _reexported_from(file, root, summary) if found not in summaries)
            pending = following
        class_files = _class_files(summaries, built, root, cache, max_size) if classes else {}
        if not imported:  # the classes of the files it imports, and what other files' loops run of it
            callers, builds, called, _ = _callers_of(importer, data, root, cache, max_size, steps, once)
            return cls(importer, root, summaries, imports, {}, callers, loaders=False, builds=builds,
                       classes=class_files, stars=stars, once=called)
        if not steps:
            _, _, called, handed = _callers_of(importer, data, root, cache, max_size, False, once, loaders)
            return cls(importer, root, summaries, imports, loaders=loaders, classes=class_files, stars=stars,
                       once=called, handed=handed)
        callers, builds, called, handed = _callers_of(importer, data, root, cache, max_size, True, once, loaders)
        return cls(importer, root, summaries, imports, step_summaries, callers, loaders, builds, class_files, stars,
                   called, handed)

    def opens_gate(self, code: str) -> bool:
        """Whether rule ``code`` must run on the file though its text gate says no: it imports a project
        file's loader factory, which the rule follows (``FOLLOWING_RULES``), or is handed a loader by one (and
        TL103 reads its settings: ``READING_RULES``), or a class whose methods train
        or a function that returns a CUDA device, or another file's loops run its classes' methods
        (``STEP_RULES``: the step, or the device, may be in the other file)."""
        if code in STEP_RULES and code not in _GATED_STEP_RULES:
            return self.has_imported_steps or self.has_imported_functions or self.has_device_functions \
                or bool(self._callers) or (code == "TL502" and bool(self._builds))
        # (TL103 too where a loader is handed in: `fit_one_epoch(..., gen, ...)` iterates a pinned loader of
        # `train.py` under a parameter name that its text gate, a loader's spelling, cannot see)
        return (self.has_factories and code in FOLLOWING_RULES) or (bool(self._handed) and code in READING_RULES)

    def factory(self, module: str, level: int, name: str) -> Optional[dict]:
        """The summary of the loader factory ``name`` of ``module`` (as the checked file imports it), with
        each entry's ``path`` (relative to the root), or None."""
        if not self.loaders:
            return None
        for file, name in self._reexport_chain(module, level, name, self.summaries.get):
            summary = self.summaries.get(file)
            if summary is None:
                return None
            found = summary.get("factories", {}).get(name)
            if found is not None:
                shown = self._shown(file)
                return {"tuple": found["tuple"],
                        "sites": [dict(entry, path=shown) if entry else None for entry in found["sites"]]}
        return None

    def _reexport_chain(self, module: str, level: int, name: str,
                        exports_of: Callable[[Path], Optional[dict]]) -> Iterator[Tuple[Path, str]]:
        """``reexport_chain`` from the file the checked one loads for ``module``."""
        return reexport_chain(self.imports.get((module, level)), name, self.root, exports_of)

    def _step_entry(self, module: str, level: int, name: str, kind: str) -> Optional[Tuple[Path, dict, object]]:
        """The file a name imported from ``module`` is defined in (following re-exports), its step summary
        and its entry there under ``kind`` ("classes" or "devices")."""
        for file, name in self._reexport_chain(module, level, name, lambda file: self.summaries.get(file, {})):
            summary = self.steps.get(file, {})
            entries = summary.get(kind, [] if kind == "devices" else {})
            if name in entries:
                return file, summary, True if kind == "devices" else entries[name]
        return None

    def class_steps(self, module: str, level: int, name: str) -> Optional[dict]:
        """The step summary of class ``name`` of ``module`` (as the checked file imports it), or None: its
        ``steps`` (methods that run a training step), ``cuda`` (line and statement where it moves work to CUDA,
        if any), with ``path`` (its file, relative to the root), ``name`` and ``reduced`` (its file computes
        in reduced or double precision somewhere)."""
        found = self._step_entry(module, level, name, "classes")
        if found is None:
            return None
        file, summary, entry = found
        return dict(entry, path=self._shown(file), name=name, reduced=summary.get("reduced", True))  # type: ignore[arg-type]

    def function_steps(self, module: str, level: int, name: str) -> Optional[dict]:
        """The step summary of the module-level function ``name`` of ``module`` (as the checked file imports
        it), or None: ``kind`` "steps" (one training step a call: ``def train_step(...)``) or "trains" (a
        training loop of its own: ``def train_epoch(...)``), with ``path``, ``name`` and ``reduced``."""
        found = self._step_entry(module, level, name, "functions")
        if found is None:
            return None
        file, summary, kind = found
        return {"kind": kind, "path": self._shown(file), "name": name, "reduced": summary.get("reduced", True)}

    def calls_parameter(self, module: str, level: int, name: str) -> List[int]:
        """The positions of the parameters that the module-level function ``name`` of ``module`` calls once
        every time it runs (``gpu_timer(closure)``: ``result = closure()``; ``facts.steps.calls_parameter``)."""
        found = self._step_entry(module, level, name, "calls")
        return list(found[2]) if found is not None else []  # type: ignore[arg-type]

    def loop_methods(self, module: str, level: int, name: str) -> Optional[Tuple[str, List[list]]]:
        """The file (as shown) of the module-level function ``name`` of ``module`` and the methods it calls in a
        loop on its parameters (``[position, method, line]``; ``facts.steps.loop_methods``), or None."""
        found = self._step_entry(module, level, name, "loop_methods")
        return (self._shown(found[0]), list(found[2])) if found is not None else None  # type: ignore[arg-type]

    def clock_methods(self, module: str, level: int, name: str) -> List[str]:
        """The methods of class ``name`` of ``module`` that read a clock themselves (``facts.steps.step_summary``'s
        ``clocks``: a timer's ``tic()``/``toc()``)."""
        found = self._step_entry(module, level, name, "clocks")
        return list(found[2]) if found is not None else []  # type: ignore[arg-type]

    def device_function(self, module: str, level: int, name: str) -> bool:
        """``name`` of ``module`` is a function that returns a CUDA device, or one when available."""
        return self._step_entry(module, level, name, "devices") is not None

    def plain_class(self, module: str, level: int, name: str) -> Optional[dict]:
        """The class ``name`` of ``module`` (as the checked file imports it) derives from no ``nn.Module``: a
        project class whose bases, followed through the project's files (re-exports too), are all builtin
        classes, the standard library's or such project classes (``facts.modules.plain_class``), or a class of
        the standard library. Then its ``methods`` and ``modal`` methods (``facts.modules.class_summary``);
        None where it is, or may be, a Module: a base from another package, or one the model does not hold."""
        from torchlint.facts.modules import plain_outside

        file = self.imports.get((module, level))
        if file is None:
            return plain_outside((module, level, name)) if not self._is_project_module(module, level) else None
        return self._plain_in(file, name, 0)

    def star_origins(self) -> Dict[str, Tuple[str, int, Optional[str]]]:
        """The names the file's star imports of project modules bind, as ``facts.index.import_origins`` gives
        them (local name -> module, level, name taken, or None for the module itself): a name the star-imported
        module defines is taken from it (``from utils import *``: ``get_loader`` -> ``("utils", 0, "get_loader")``),
        a name it imports absolutely is that import's (``torch`` -> ``("torch", 0, None)``); a later star import
        rebinds a name, as Python does. A name it imports relatively is left out (unknown)."""
        found: Dict[str, Tuple[str, int, Optional[str]]] = {}
        for module, level, file, summary in self.stars:
            if file is None:  # a star import from outside the project after them: any name may be rebound
                found.clear()
            for name, origin in summary.get("names", {}).items():
                if origin is None:
                    found[name] = (module, level, name)
                elif not origin[1]:
                    found[name] = (origin[0], 0, origin[2])
                else:
                    found.pop(name, None)
        return found

    def conv_wrapper(self, module: str, level: int, name: str) -> Optional[dict]:
        """The ``wraps`` entry of the project class ``name`` of ``module`` (as the checked file imports it;
        re-exports followed) where its forward returns a conv's output (``facts.modules.conv_wrapper``), with
        ``path``; None for any other class, and for one the model does not hold."""
        def exports_of(file: Path) -> Optional[dict]:
            held = self.class_files.get(file)
            return held[1] if held is not None else None

        for file, name in self._reexport_chain(module, level, name, exports_of):
            held = self.class_files.get(file)
            if held is None:
                return None
            entry = held[0].get("classes", {}).get(name)
            if entry is not None:
                return dict(entry["wraps"], path=self._shown(file)) if "wraps" in entry else None
        return None

    def _is_project_module(self, module: str, level: int) -> bool:
        return bool(level) or resolve(module, level, self.importer, self.root) is not None

    def _plain_in(self, file: Path, name: str, depth: int) -> Optional[dict]:
        key = (file, name)
        if key in self._plain:
            return self._plain[key]
        self._plain[key] = None  # (a cycle of bases, or of re-exports, is no answer)
        from torchlint.facts.modules import plain_class, plain_outside

        held = self.class_files.get(file)
        found = None
        if held is not None and depth <= _CLASS_HOPS:
            classes, exports = held

            def imported(origin: Sequence) -> Optional[dict]:
                home = resolve(origin[0], origin[1], file, self.root)
                if home is None:
                    return plain_outside(origin) if not origin[1] else None
                return self._plain_in(home, origin[2], depth + 1)

            if name in classes.get("classes", {}):
                found = plain_class(classes["classes"], name, imported)
            elif name in exports.get("reexports", {}):
                found = imported(exports["reexports"][name])
        self._plain[key] = found
        return found

    def callers(self) -> List["Caller"]:
        """The loops of the project files that import the checked one and call methods of its classes or its
        module-level functions every iteration: (file relative to the root, line, whether it is a step loop
        there, [(class, method)] and [(function, "", where its value goes: ``facts.steps.result_uses``)])."""
        return self._callers

    def called_once(self) -> Dict[Tuple[str, str], List[bool]]:
        """(function, "") or (class, method) of the checked file -> for each file that imports it and runs it,
        whether every run of it there is once per run (``facts.steps.uses_summary``'s ``once``)."""
        found: Dict[Tuple[str, str], List[bool]] = {}
        for _file, name, method, once in self._once:
            found.setdefault((name, method), []).append(once)
        return found

    def cuda_builds(self, name: str) -> List["Build"]:
        """The calls of the files that import the checked one which build its class ``name``, or call its
        module-level function ``name`` (by any name a package re-exports it under), with their arguments that
        are modules moved to CUDA there: (file relative to the root, name, [[position, line of the move]],
        [[keyword, line]]) (``facts.steps.uses_summary``'s ``built``)."""
        return [build for build in self._builds if build[1] == name]

    def handed_loaders(self) -> List[Handed]:
        """The calls of the project files that import the checked one which hand loaders to its classes and
        module-level functions (``Solver(config, train_loader)``: ``facts.loaders.handed_summary``), each
        loader as the summary entry of its ``DataLoader(...)`` with the file it is built in."""
        return self._handed

    def digest(self) -> str:
        """What the file's result may depend on: each summary and the file it came from."""
        digest = hashlib.blake2b(digest_size=16)
        for part in sorted(self._summary_digest(file, summary) for file, summary in self.summaries.items()):
            digest.update(part.encode())
        for part in sorted(self._summary_digest(file, summary, "steps") for file, summary in self.steps.items()):
            digest.update(part.encode())
        for part in sorted(self._summary_digest(file, held[0], "classes") for file, held in self.class_files.items()):
            digest.update(part.encode())
        for part in sorted(self._summary_digest(file, held[1]) for file, held in self.class_files.items()
                           if file not in self.summaries):
            digest.update(part.encode())
        for module, level, file, summary in self.stars:  # (in order: a later star import rebinds a name)
            held = self._summary_digest(file, summary, "star") if file is not None else ""
            digest.update(f"{module}:{level}:{held}".encode())
        digest.update(json.dumps(self._callers, sort_keys=True).encode())
        if self._builds:
            digest.update(json.dumps(self._builds, sort_keys=True).encode())
        if self._once:
            digest.update(json.dumps(["once", self._once], sort_keys=True).encode())
        if self._handed:
            digest.update(json.dumps(["handed", self._handed], sort_keys=True).encode())
        if self.cpu_importers:
            digest.update(json.dumps(["cpu", self.cpu_importers]).encode())
        return digest.hexdigest()

    def _summary_digest(self, file: Path, summary: dict, kind: str = "summary") -> str:
        # remembered per summary made: every importer of a package's __init__ hashes the same summary
        known = _digests.get((file, self.root, kind))
        if known is None or known[0] is not summary:
            blob = json.dumps([kind, self._shown(file), summary], sort_keys=True)
            known = _digests[(file, self.root, kind)] = (
                summary, hashlib.blake2b(blob.encode(), digest_size=16).hexdigest())
        return known[1]

    def _shown(self, file: Path) -> str:
        return _shown_path(str(file), str(self.root))


# Summaries made in this process, by file and its size and time: a tree run without a cache summarizes an
# imported file once, not once per importer. With each summary (by identity), the files its re-exports
# resolve to and its digest: a package's __init__ re-exports hundreds of names, read by every importer.
_made: Dict[Tuple[str, Path, int, int, int], dict] = {}
_reexports: Dict[Tuple[Path, Path], Tuple[dict, List[Path]]] = {}
_digests: Dict[Tuple[Path, Path, str], Tuple[dict, str]] = {}
_class_names: Dict[Tuple[str, Path, int, int, int], List[bytes]] = {}
# The project files under a root, each with the modules its text may import (``imported_modules``), read once
# per process: the files that import a checked one are found there. None for a project over MAX_PROJECT_FILES.
_import_tables: Dict[str, Optional[Dict[str, List[Tuple[str, str, int]]]]] = {}
_notebook_tables: Dict[str, Dict[str, List[Module]]] = {}  # root -> its notebooks' imports (``_notebook_imports``)
# (file, line, whether a step loop there, [(class, method) or (function, "", where its value goes)])
Caller = Tuple[str, int, bool, List[tuple]]
# (file, class, [[position, line]], [[keyword, line]]): a call there that builds the class with CUDA modules
Build = Tuple[str, str, list, list]
# (file, function or class, method or "", whether every run of it there is once per run)
Once = Tuple[str, str, str, bool]
# (file, function or class, line of the call there, [[position, loader entry]], [[keyword, loader entry]]): a
# call there that hands loaders to it, each loader as the summary entry of its DataLoader, with its path
Handed = Tuple[str, str, int, list, list]


def _stars_of(data: bytes, importer: Path, root: Path, imports: Dict[Module, Path], cache: Optional["Cache"],
              max_size: int) -> List[Tuple[str, int, Optional[Path], dict]]:
    """The project modules ``data`` star-imports, each with its star summary; the project modules those import
    names from absolutely (``from data import get_loader`` in ``utils.py``) join ``imports``, as if the checked
    file imported them (their loader summaries are then read)."""
    stars = []
    for module, level in star_modules(data):
        found = resolve(module, level, importer, root)
        if found is None or found == importer:
            if stars:  # a module from outside the project may rebind any name the ones before bound
                stars.append((module, level, None, {}))
            continue
        summary = summary_of(found, cache, max_size, "star")
        stars.append((module, level, found, summary))
        for origin in summary.get("names", {}).values():
            if origin is not None and not origin[1] and (origin[0], 0) not in imports:
                home = resolve(origin[0], 0, found, root)
                if home is not None and home != importer:
                    imports[(origin[0], 0)] = home
    return stars


def _reexported_from(file: Path, root: Path, summary: dict) -> List[Path]:
    """The project files ``summary`` (``file``'s) re-exports names from."""
    known = _reexports.get((file, root))
    if known is None or known[0] is not summary:
        targets = []
        for module, level, _name in summary.get("reexports", {}).values():
            found = resolve(module, level, file, root)
            if found is not None:
                targets.append(found)
        known = _reexports[(file, root)] = (summary, list(dict.fromkeys(targets)))
    return known[1]


def _class_files(summaries: Dict[Path, dict], built: Dict[Path, dict], root: Path, cache: Optional["Cache"],
                 max_size: int) -> Dict[Path, Tuple[dict, dict]]:
    """The class summary and the re-exports of each file in ``summaries`` (the files a checked file imports and
    those they re-export from), and of the project files their classes' bases come from, in turn. ``built``:
    the class summaries of the files of ``summaries`` some of whose classes the checked file calls by name
    (``Env(``: ``_builds_a_class_of``); the others are not parsed for them (an empty class summary): the checked
    file builds none of their classes."""
    found: Dict[Path, Tuple[dict, dict]] = {}
    pending = list(summaries)
    for _ in range(_CLASS_HOPS + 1):
        following: List[Path] = []
        for file in pending:
            if file in found:
                continue
            classes = built.get(file, {}) if file in summaries else summary_of(file, cache, max_size, "classes")
            exports = summaries[file] if file in summaries else summary_of(file, cache, max_size)
            found[file] = (classes, exports)
            for entry in classes.get("classes", {}).values():
                for base in entry["bases"]:
                    home = resolve(base[0], base[1], file, root) if type(base) is list else None
                    if home is not None and home not in found:
                        following.append(home)
            if file not in summaries:
                following.extend(home for home in _reexported_from(file, root, exports) if home not in found)
        pending = following
        if not pending:
            break
    return found


def _builds_a_class_of(file: Path, data: bytes, max_size: int) -> bool:
    """``data`` calls a class of ``file`` by its name (``Env(``, ``envs.Env(``): a superset of the instances of
    its classes the checked file may build."""
    called = _called_words(data)
    return any(name in called for name in _class_names_of(file, max_size))


_CALLED_RUN = re.compile(rb"\b(\w+)\(")  # (\b: each run from its start; scans twice as fast as a look-behind)


@lru_cache(maxsize=4)  # (the checked file's bytes, asked of each file it imports)
def _called_words(data: bytes) -> frozenset:
    """The words ``w`` of word characters for which ``w + b"("`` is in ``data``: the tails of each run of word
    characters right before a ``(``. One scan of the checked file instead of one per class name of each
    file it imports (11,000 names on the corpus)."""
    found: set = set()
    for run in set(_CALLED_RUN.findall(data)):
        found.update(run[start:] for start in range(len(run)))
    return frozenset(found)


def _class_names_of(file: Path, max_size: int) -> List[bytes]:
    """The names of the classes ``file`` defines (``_CLASS_NAMES``), read once per version of the file in a
    run: every file that imports it asks."""
    from torchlint.run.fileio import SourceError, read_regular

    try:
        status = os.stat(file)
        memo = ("class names", file, status.st_size, status.st_mtime_ns, status.st_ino)
        if memo in _class_names:
            return _class_names[memo]
        text, _ = read_regular(file, min(max_size, _SOURCE_LIMIT))
    except (SourceError, OSError):
        return []
    if len(_class_names) > 8192:
        _class_names.clear()
    names = _class_names[memo] = _CLASS_NAMES.findall(text) if b"class" in text else []
    return names


def summary_of(path: Path, cache: Optional["Cache"], max_size: int, kind: str = "summary") -> dict:
    """The summary of the project file ``path``: from this process's memory, from the cache (by the file's
    bytes), or made by parsing it. An unreadable or invalid file has an empty summary. ``kind``: "summary"
    (its loaders and re-exports), "steps" (``facts.steps.step_summary``), "uses"
    (``facts.steps.uses_summary``), "classes" (``facts.modules.class_summary``) or "star"
    (``facts.modules.star_summary``)."""
    from torchlint.run.fileio import SourceError, decode_source, read_regular

    try:
        status = os.stat(path)
        memo = (kind, path, status.st_size, status.st_mtime_ns, status.st_ino)
        if memo in _made:
            return _made[memo]
        data, _ = read_regular(path, min(max_size, _SOURCE_LIMIT))
    except (SourceError, OSError):
        return {}
    if kind not in ("summary", "star") and not _may_hold(data, kind):
        _made[memo] = {}
        return {}
    key = cache.data_key(data, kind) if cache is not None else None
    summary = cache.get_data(key) if cache is not None and key is not None else None
    if not isinstance(summary, dict):
        try:
            text = decode_source(data).text
            summary = summarize(text) if kind == "summary" else summarize_steps(text, kind)
        except (SourceError, RecursionError, MemoryError, ValueError):  # a file too odd to summarize: nothing
            summary = {}
        if cache is not None and key is not None:
            cache.put_data(key, summary)
    if len(_made) > 8192:
        _made.clear()
        _reexports.clear()
        _digests.clear()
    _made[memo] = summary
    return summary


def summarize(text: str) -> dict:
    """``loader_summary`` of a source text (empty where CPython cannot parse it, or it builds no loader)."""
    if "DataLoader" not in text and not _RELATIVE_IMPORT.search(text):
        return {}  # neither a loader nor a re-export
    from torchlint.facts.loaders import loader_summary, reexport_summary
    from torchlint.run.guard import borrowed_index, stdlib_tree

    # (the tree and index are shared with the file's own check, and with its other summaries: run.guard)
    tree = stdlib_tree(text)
    if tree is None:
        return {}
    if "DataLoader" not in text:
        return reexport_summary(tree)  # (no index: most summaries are a package's re-exports)
    with borrowed_index(text) as index:
        return loader_summary(index)


def _may_hold(data: bytes, kind: str) -> bool:
    """Whether a step summary of a file of these bytes can hold anything: a class or function that may train
    or a function that may return a device ("steps"), a call of an imported name ("uses"), a class
    ("classes")."""
    if kind == "uses":
        return b"import" in data
    if kind == "classes":
        return b"class" in data
    return b".backward(" in data or b".step(" in data or (b"device(" in data and b"return" in data) \
        or _may_call_parameter(data) or (b"class" in data and any(text in data for text in _CLOCK_TEXTS))


# a class whose methods may read a clock (a timer: ``facts.clocks``)
_CLOCK_TEXTS = tuple(text.encode() for text in CLOCK_TEXTS)


# a module-level def's parameters (a superset: the text up to the first `)` after the name)
_DEF_PARAMETERS = re.compile(rb"^(?:async[ \t]+)?def[ \t]+\w+[ \t]*\(([^)]*)", re.MULTILINE)
_WORD = re.compile(rb"[A-Za-z_]\w*")


def _may_call_parameter(data: bytes) -> bool:
    """Whether a module-level def of these bytes may call one of its parameters (``def gpu_timer(closure):
    ... closure()``): some word of a def's parameter list is followed by ``(`` somewhere in the text."""
    if b"\ndef " not in data and not data.startswith((b"def ", b"async def ")) and b"\nasync def " not in data:
        return False
    for match in _DEF_PARAMETERS.finditer(data):
        for word in _WORD.findall(match.group(1)):
            if word in (b"self", b"cls"):
                continue
            if _calls_bare(data, word + b"("):  # `closure(`, not `max(` for a parameter `x` nor `self.closure(`
                return True
    return False


def summarize_steps(text: str, kind: str) -> dict:
    """``step_summary``, ``uses_summary`` or ``class_summary`` of a source text (empty where CPython cannot
    parse it)."""
    if kind in ("classes", "star"):
        from torchlint.facts.modules import class_summary, star_summary
        from torchlint.run.guard import stdlib_tree

        tree = stdlib_tree(text)  # (no index: shared with the file's own check while kept, as the tree is)
        if tree is None:
            return {}
        return class_summary(tree) if kind == "classes" else star_summary(tree)
    from torchlint.facts.steps import step_summary, uses_summary
    from torchlint.run.guard import borrowed_index

    with borrowed_index(text) as index:  # (shared with the file's own check and its other summaries: run.guard)
        if index is None:
            return {}
        return step_summary(index) if kind == "steps" else uses_summary(index)


_CLASS_NAMES = re.compile(rb"^[ \t]*class[ \t]+(\w+)", re.MULTILINE)
# what a function that another file's step reaches may be reported for (TL101's syncs, TL501's per-parameter
# loops): a file without any of these is not searched for the loops that call its functions
_REACHED_TEXTS = (b".item(", b".tolist(", b".cpu(", b".numpy(", b".parameters(")


def may_be_reached(data: bytes) -> bool:
    """Whether a loop of another file may run a module-level function of a file of these bytes with something
    the step rules report in it."""
    return (data.startswith((b"def ", b"async def ")) or b"\ndef " in data or b"\nasync def " in data) \
        and (any(text in data for text in _REACHED_TEXTS) or _calls_bare(data, b"float("))


def _calls_bare(data: bytes, called: bytes) -> bool:
    """``called`` (``b"float("``) occurs as a call of a plain name: not ``x.float(`` nor ``to_float(``."""
    at = data.find(called)
    while at != -1:
        before = data[at - 1:at]
        if not before or not (before.isalnum() or before in b"_."):
            return True
        at = data.find(called, at + 1)
    return False


_FUNCTION_NAMES = re.compile(rb"^(?:async[ \t]+)?def[ \t]+(\w+)", re.MULTILINE)  # module-level defs


def _callers_of(path: Path, data: bytes, root: Path, cache: Optional["Cache"], max_size: int, loops: bool = True,
                once: bool = False, loaders: bool = False
                ) -> Tuple[List[Caller], List[Build], List[Once], List[Handed]]:
    """The loops of the project files that import ``path`` (by any module name that resolves to it) which
    call methods of classes of ``path`` every iteration (``uses_summary``), as ``ProjectModel.callers``; and
    the calls there that build its classes with modules moved to CUDA (``ProjectModel.cuda_builds``) (those two
    only with ``loops``); with ``once``, the runs there of its functions and methods, each with whether it is
    once per run (``ProjectModel.called_once``); with ``loaders``, the loaders those calls hand to its classes
    and functions (``ProjectModel.handed_loaders``)."""
    from torchlint.run.fileio import SourceError, read_regular

    trains = b".backward(" in data or b".step(" in data
    # the importer must build one of its classes (`TD3.TD3(`, `Trainer(` in its text), where one can train, or
    # call one of its module-level functions (`calculate_accuracy(`), from a loop that trains there or that
    # calls one that trains
    built = [name + b"(" for name in _CLASS_NAMES.findall(data)] if loops and trains and b"class" in data else []
    called = [name + b"(" for name in _FUNCTION_NAMES.findall(data)] if loops and may_be_reached(data) else []
    # ...or, for how often it runs them, name one of its functions or classes
    named = list(dict.fromkeys(_FUNCTION_NAMES.findall(data) + _CLASS_NAMES.findall(data))) if once else []
    # ...or, for the loaders it hands them, call one of its functions or classes, where one can train
    receivers = [name + b"(" for name in _FUNCTION_NAMES.findall(data) + _CLASS_NAMES.findall(data)] \
        if loaders and trains else []
    table = _import_table(str(root)) if built or called or named or receivers else None
    if not table:
        return [], [], [], []
    target = os.path.realpath(path)
    found: List[Caller] = []
    builds: List[Build] = []
    runs: List[Once] = []
    handed: List[Handed] = []
    importers = _importers(table, path, target, root)
    # a package's `__init__.py` that re-exports names of the file (`from .a2c_acktr import A2C_ACKTR`): the
    # files that import them from the package (`from pkg import algo` then `algo.A2C_ACKTR(...)`) call them too
    through: List[Tuple[str, Dict[str, str]]] = []
    for file in importers:
        if os.path.basename(file) == "__init__.py":
            package = Path(file)
            names = {exported: original for exported, (module, level, original)
                     in summary_of(package, cache, max_size).get("reexports", {}).items()
                     if _resolves_to(module, level, package, root, target)}
            if names:
                through.append((file, names))
    sources: List[Tuple[str, str, Optional[Dict[str, str]]]] = [(file, target, None) for file in importers]
    for package, names in through:
        sources.extend((file, package, names) for file in _importers(table, Path(package), package, root)
                       if file != target)
    for file, resolved, names in sources:
        importer = Path(file)
        try:
            text, _ = read_regular(importer, max_size)
        except (SourceError, OSError):
            continue
        spelled_built = built + [name.encode() + b"(" for name in names or ()] if built else built
        looped = any(spelled in text for spelled in spelled_built) or (
            (trains or b".backward(" in text or b".step(" in text) and any(spelled in text for spelled in called))
        counted = bool(named) and any(name in text for name in named + [name.encode() for name in names or ()])
        hands = bool(receivers) and any(spelled in text for spelled in
                                        receivers + [name.encode() + b"(" for name in names or ()])
        if not looped and not counted and not hands:
            continue
        shown = os.path.relpath(file, str(root)).replace(os.sep, "/")
        uses = summary_of(importer, cache, max_size, "uses")
        if counted:
            runs.extend((shown, (names or {}).get(name, name), method, runs_once)
                        for module, level, name, method, runs_once in uses.get("once", ())
                        if (names is None or name in names) and _resolves_to(module, level, importer, root, resolved))
        if hands:
            handed.extend(_handed_from(uses, importer, shown, resolved, names, root, cache, max_size))
        if not looped:
            continue
        for line, steps, calls in uses.get("loops", ()):
            mine = []
            for entry in calls:
                if (names is not None and entry[2] not in names) \
                        or not _resolves_to(entry[0], entry[1], importer, root, resolved):
                    continue
                if len(entry) > 5:  # in a def the loop hands to a wrapper: only where the wrapper calls it
                    module, level, wrapper, position, stepping = entry[5]
                    home = resolve(module, level, importer, root)
                    if home is None or position not in summary_of(home, cache, max_size, "steps").get(
                            "calls", {}).get(wrapper, ()):
                        continue
                    steps = steps or stepping
                mine.append(((names or {}).get(entry[2], entry[2]), entry[3], *entry[4:5]))
            if mine:
                found.append((shown, line, steps, mine))
        if built or called:  # (a class's builds, or a function's calls: `set_optimizer(opt, model)`)
            builds.extend((shown, (names or {}).get(name, name), positions, keywords)
                          for module, level, name, positions, keywords in uses.get("built", ())
                          if (names is None or name in names) and _resolves_to(module, level, importer, root, resolved))
    return found, builds, runs, handed


def reexport_chain(file: Optional[Path], name: str, root: Path,
                   exports_of: Callable[[Path], Optional[dict]]) -> Iterator[Tuple[Path, str]]:
    """The files (and the name there) where ``name`` of ``file`` may be defined: that file, then, while
    ``exports_of(file)`` (a summary with ``reexports``) says the file takes the name from another, that file,
    up to ``MAX_HOPS`` re-exports."""
    for _ in range(MAX_HOPS + 1):
        if file is None:
            return
        yield file, name
        exports = exports_of(file)
        origin = exports.get("reexports", {}).get(name) if exports is not None else None
        if origin is None:
            return
        module, level, name = origin
        file = resolve(module, level, file, root)


def _handed_from(uses: dict, importer: Path, shown: str, resolved: str, names: Optional[Dict[str, str]], root: Path,
                 cache: Optional["Cache"], max_size: int) -> Iterator[Handed]:
    """The loaders the calls of ``importer`` (its uses summary: ``uses``) hand to names of the file ``resolved``
    (``names``: the names a package re-exports of it, as the importer spells them), each loader as the
    summary entry of its ``DataLoader(...)`` with its ``path``."""
    for module, level, name, line, positional, keywords in uses.get("handed", ()):
        if (names is not None and name not in names) or not _resolves_to(module, level, importer, root, resolved):
            continue
        given = [[at, entry] for at, entry in ((at, _handed_entry(loader, importer, shown, root, cache, max_size))
                                               for at, loader in positional) if entry is not None]
        named = [[keyword, entry] for keyword, entry in ((k, _handed_entry(loader, importer, shown, root, cache,
                                                                           max_size)) for k, loader in keywords)
                 if entry is not None]
        if given or named:
            yield shown, (names or {}).get(name, name), line, given, named


def _handed_entry(loader: dict, importer: Path, shown: str, root: Path, cache: Optional["Cache"],
                  max_size: int) -> Optional[dict]:
    """A loader of ``handed_summary`` as the summary entry of its ``DataLoader(...)``, with the file it is built
    in: the importer's own, or the one a loader factory of another project file builds there (followed through
    re-exports), or None where the factory is not one."""
    if "entry" in loader:
        return {**loader["entry"], "path": shown}
    module, level, name = loader["factory"]
    summary_at = functools.partial(summary_of, cache=cache, max_size=max_size)
    for home, defined in reexport_chain(resolve(module, level, importer, root), name, root, summary_at):
        factory = summary_at(home).get("factories", {}).get(defined)
        if factory is not None:
            break
    else:
        return None
    position = loader.get("position")
    if factory["tuple"] != (position is not None):
        return None
    sites = factory["sites"]
    entry = sites[position or 0] if (position or 0) < len(sites) else None
    return {**entry, "path": _shown_path(str(home), str(root))} if entry else None


# What marks a text as one that may run on a GPU (lower-cased): CUDA and NCCL, and the names of the frameworks
# that place work there themselves (``facts.devices.GPU_FRAMEWORKS``, without the import statement around them)
_GPU_WORDS = (b"cuda", b"nccl", b"accelerate", b"lightning", b"deepspeed", b"apex", b"composer", b"transformers",
              b"ignite", b"fastai", b"mmengine", b"mmcv", b"detectron2")


def _names_a_gpu(data: bytes) -> bool:
    lowered = data.lower()
    return any(word in lowered for word in _GPU_WORDS)


def _cpu_importers(path: Path, root: Path, max_size: int) -> List[str]:
    """The project files that import ``path``, shown relative to the root, where there is one at least, each is
    a program (a notebook, or a script with a ``__main__`` guard: a module's own callers would be out of
    sight), and neither they nor any project module they import (``path`` aside) names a GPU
    (``_names_a_gpu``): the module then runs where they do, on the CPU. Else empty."""
    from torchlint.run.fileio import SourceError, read_regular

    table = _import_table(str(root))
    if table is None:
        return []
    target = os.path.realpath(path)
    texts: Dict[str, Optional[bytes]] = {file: None for file in _importers(table, path, target, root)}
    name = path.parent.name if path.name == "__init__.py" else path.stem
    for file, modules in _notebook_imports(str(root)).items():
        if any(module.rsplit(".", 1)[-1] == name and _resolves_to(module, level, Path(file), root, target)
               for module, level in modules):
            code = _notebook_code(file)
            if code is None:
                return []
            texts[file] = code
    if not texts:
        return []
    for file, text in texts.items():
        if text is None:  # a .py importer: a script, not a module whose own callers are out of sight
            try:
                text = read_regular(Path(file), max_size)[0]
            except (SourceError, OSError):
                return []
            if b"__main__" not in text:
                return []
        if _names_a_gpu(text):
            return []
        for module, level in imported_modules(text):
            found = resolve(module, level, Path(file), root)
            if found is None or os.path.realpath(found) == target:
                continue
            try:
                if _names_a_gpu(read_regular(found, max_size)[0]):
                    return []
            except (SourceError, OSError):
                return []
    return sorted(_shown_path(file, str(root)) for file in texts)


def _notebook_imports(root: str) -> Dict[str, List[Module]]:
    """The modules each notebook under ``root`` may import (its real path -> ``imported_modules`` of its code
    cells), read once per process as the ``.py`` files' table is; none past MAX_PROJECT_FILES notebooks."""
    if root not in _notebook_tables:
        found = {}
        for file in _project_files(root, ".ipynb") or ():
            code = _notebook_code(file)
            if code is not None and b"import" in code:
                found[os.path.realpath(file)] = imported_modules(code)
        _notebook_tables[root] = found
    return _notebook_tables[root]


def _notebook_code(file: str) -> Optional[bytes]:
    """The code cells of a notebook, joined (UTF-8); None where it cannot be read as one."""
    from torchlint.run.fileio import SourceError, read_regular
    from torchlint.run.notebook import cell_source

    try:
        notebook = json.loads(read_regular(Path(file), _SOURCE_LIMIT)[0])
        cells = notebook.get("cells", []) if isinstance(notebook, dict) else []
        code = "\n".join(cell_source(cell) for cell in cells
                         if isinstance(cell, dict) and cell.get("cell_type") == "code")
    except (SourceError, OSError, ValueError, RecursionError, AttributeError, TypeError):
        return None
    return code.encode("utf-8", "surrogatepass")


def _project_files(root: str, suffix: str) -> Optional[List[str]]:
    """The files under ``root`` whose names end with ``suffix``, in walk order (hidden folders, such as
    ``.ipynb_checkpoints``, and ``__pycache__`` left out); None where there are more than MAX_PROJECT_FILES."""
    files: List[str] = []
    for folder, folders, names in os.walk(root):
        folders[:] = sorted(f for f in folders if not f.startswith(".") and f != "__pycache__")
        files.extend(os.path.join(folder, name) for name in sorted(names) if name.endswith(suffix))
        if len(files) > MAX_PROJECT_FILES:
            return None
    return files


def _importers(table: Dict[str, List[Tuple[str, str, int]]], path: Path, target: str, root: Path) -> List[str]:
    """The project files whose imports resolve to ``path`` (its real path: ``target``), in table order."""
    name = path.parent.name if path.name == "__init__.py" else path.stem
    return list(dict.fromkeys(file for file, module, level in table.get(name, ())
                              if file != target and _resolves_to(module, level, Path(file), root, target)))


def _resolves_to(module: str, level: int, importer: Path, root: Path, target: str) -> bool:
    found = _resolved(module, level, os.path.dirname(str(importer)), str(root))
    return found is not None and _real_path(found) == target


def _import_table(root: str) -> Optional[Dict[str, List[Tuple[str, str, int]]]]:
    """The modules the project's Python files under ``root`` may import, by the last part of the module's name
    (``fp16_util`` for ``from .fp16_util import Trainer``): each with the file (its real path) and the import's
    level; None where there are more than MAX_PROJECT_FILES (hidden folders and ``__pycache__`` left out)."""
    if root in _import_tables:
        return _import_tables[root]
    from torchlint.run.fileio import SourceError, read_regular

    files = _project_files(root, ".py")
    table: Optional[Dict[str, List[Tuple[str, str, int]]]] = {} if files is not None else None
    for file in files or ():
        try:
            data, _ = read_regular(Path(file), _SOURCE_LIMIT)
        except (SourceError, OSError):
            continue
        if b"import" in data:
            real = os.path.realpath(file)
            for module, level in imported_modules(data):
                table.setdefault(module.rsplit(".", 1)[-1], []).append((real, module, level))  # type: ignore[union-attr]
    _import_tables[root] = table
    return table
