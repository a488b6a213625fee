"""What a run hands each file and gets back: the job (settings, mode, cache), the rules a file gets, the
project files it may read, the file's result and the fixed file still to write. The runner and the notebook
handler both build on it."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Callable, List, Optional, Tuple

from torchlint.config import Settings, selected_codes
from torchlint.config.tree import ConfigTree
from torchlint.engine import error_diagnostic, rules_for_test_files
from torchlint.facts.project import STEP_RULES, ProjectModel
from torchlint.registry import default_codes, lazy_rule, rule_codes
from torchlint.rule import Diagnostic, Rule
from torchlint.run.discovery import cached_spec, is_test_file

if TYPE_CHECKING:
    from torchlint.run.cache import Cache


@dataclass
class FileResult:
    path: str
    diagnostics: List[Diagnostic] = field(default_factory=list)  # after fixing, in fix mode
    applied: Counter = field(default_factory=Counter)  # rule code -> number of fixes
    original: Optional[str] = None  # set in fix mode when the text changed
    fixed: Optional[str] = None
    written: bool = False
    pending: Optional["PendingWrite"] = None  # fix --apply: what ``write_pending`` writes, in the main process

    @property
    def changed(self) -> bool:
        return self.fixed is not None and self.fixed != self.original


@dataclass(frozen=True)
class PendingWrite:
    """A fixed file, computed (in a worker, maybe) but not yet written: only the main process writes, so a
    Ctrl-C stops every write at once and the report knows which files were written before it."""

    path: Path  # as found (fileio.write_back follows its links, within the project)
    data: bytes  # the fixed file
    original: Tuple[bytes, os.stat_result]  # what was read and its status: the file must still be that file
    root: Path  # the project (its settings' root): no write through a link out of it


@dataclass(frozen=True)
class Job:
    """Everything a worker process needs to handle files: picklable, and the same for every file."""

    settings: Settings
    mode: str = "check"  # "check" | "fix"
    apply: bool = False  # write fixes back (fix mode)
    unsafe: bool = False
    cache_dir: Optional[Path] = None  # None: no cache
    with_edits: bool = False  # render each fix as text edits (JSON output)
    tree: Optional[ConfigTree] = None  # per-file settings (the closest configuration file); None: ``settings``

    def for_file(self, path: Path) -> "Job":
        """This job with the settings of the configuration file closest to ``path``."""
        if self.tree is None:
            return self
        settings = self.tree.for_file(path)
        return replace(self, settings=settings, unsafe=settings.unsafe_fixes if self.mode == "fix" else self.unsafe)


@lru_cache(maxsize=64)
def _rule_instances(codes: Tuple[str, ...]) -> Tuple[Rule, ...]:
    # Stand-ins from the manifest: a rule's module is imported once a file passes its text gate.
    return tuple(lazy_rule(code) for code in codes)  # type: ignore[misc]


def rules_for(settings: Settings, path: Optional[Path]) -> Tuple[Rule, ...]:
    extra: List[str] = []
    if path is not None and settings.per_file_ignores:
        try:
            absolute = path.resolve()
        except (OSError, RuntimeError):  # a symlink loop: match the path as given
            absolute = path.absolute()
        try:
            relative = absolute.relative_to(settings.root).as_posix()
        except ValueError:
            relative = absolute.as_posix()
        for pattern, codes in settings.per_file_ignores:
            spec = cached_spec((pattern,))
            if spec.match_file(relative) or spec.match_file(absolute.name):
                extra.extend(codes)
    # Test files drop their silent rules here too, so that the cache key says whether the file is a test.
    is_test = path is not None and is_test_file(str(path), settings)
    return _rules(settings, tuple(extra), is_test)


@lru_cache(maxsize=256)
def _rules(settings: Settings, extra_ignores: Tuple[str, ...], is_test: bool) -> Tuple[Rule, ...]:
    """The rules for files of these settings, per-file ignores and kind: asked once per file, the same
    for nearly all of them."""
    rules = _rule_instances(selected_codes(settings, rule_codes(), extra_ignores, default_codes()))
    return tuple(rules_for_test_files(rules)) if is_test else rules


def prepare_write(result: FileResult, path: Path, encoded: Callable[[], bytes], original: Tuple[bytes, os.stat_result],
                  job: Job, unfixed: Callable[[], List[Diagnostic]]) -> FileResult:
    """``result`` with the fixed file to write over ``path`` (``write_pending`` writes it, in the main
    process); where it cannot be encoded, the file as it still is: a TL000 saying why and its findings
    (``unfixed``), never the fixed text's leftovers."""
    try:
        result.pending = PendingWrite(path, encoded(), original, job.settings.root)
        return result
    except UnicodeEncodeError as exc:
        return FileResult(result.path, [error_diagnostic(result.path, f"cannot write the fixed file: {exc}")] + unfixed())


def project_of(path: Path, data: bytes, job: Job, cache: Optional["Cache"]) -> ProjectModel:
    """The summaries of the project files ``path`` imports, read from disk (the project: its settings'
    project root, else their root); none for a file that cannot use them (``ProjectModel.may_use``)."""
    settings = job.settings
    codes = {rule.code for rule in rules_for(settings, path)}
    uses = ProjectModel.may_use(data, codes)
    classes = ProjectModel.reads_classes(data, codes)
    once = ProjectModel.counts_calls(data, codes)
    if not uses and not classes and not once:
        return ProjectModel.empty(path)
    return ProjectModel.for_file(path, data, settings.project_root or settings.root, cache, settings.max_file_size,
                                 steps=uses and not STEP_RULES.isdisjoint(codes),
                                 loaders=uses and ProjectModel.follows_loaders(data, codes),
                                 imported=uses and ProjectModel.trains(data), classes=classes, once=once)
