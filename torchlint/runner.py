"""Run check or fix over many files: per-file settings, error isolation, optional processes and cache."""

from __future__ import annotations

import os
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import pathspec

from torchlint.config import Settings, selected_codes
from torchlint.config_tree import ConfigTree
from torchlint.discovery import display_path
from torchlint.engine import error_diagnostic, fix_source, lint_source
from torchlint.cache import Cache
from torchlint.fileio import SourceError, SourceText, decode_source, read_bytes, write_atomic
from torchlint.registry import all_rules, rules_by_code
from torchlint.rule import Applicability, Diagnostic, Rule


@dataclass
class FileResult:
    path: str
    diagnostics: List[Diagnostic] = field(default_factory=list)  # after fixing, in fix mode
    applied: Counter = field(default_factory=Counter)  # rule code -> number of fixes
    original: Optional[str] = None  # set in fix mode when the text changed
    fixed: Optional[str] = None
    written: bool = False

    @property
    def changed(self) -> bool:
        return self.fixed is not None and self.fixed != self.original


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
        settings = self.tree.for_path(path)
        return replace(self, settings=settings, unsafe=settings.unsafe_fixes if self.mode == "fix" else self.unsafe)


@lru_cache(maxsize=64)
def _rule_instances(codes: Tuple[str, ...]) -> Tuple[Rule, ...]:
    table = rules_by_code()
    return tuple(table[code]() for code in codes)


@lru_cache(maxsize=256)
def _glob(pattern: str) -> pathspec.PathSpec:
    return pathspec.GitIgnoreSpec.from_lines([pattern])


def rules_for(settings: Settings, path: Optional[Path]) -> Tuple[Rule, ...]:
    extra: List[str] = []
    if path is not None and settings.per_file_ignores:
        absolute = path.resolve()
        try:
            relative = absolute.relative_to(settings.root).as_posix()
        except ValueError:
            relative = absolute.as_posix()
        for pattern, codes in settings.per_file_ignores:
            if _glob(pattern).match_file(relative) or _glob(pattern).match_file(absolute.name):
                extra.extend(codes)
    rules = all_rules()
    codes = selected_codes(settings, [r.code for r in rules], extra, [r.code for r in rules if r.default_enabled])
    return _rule_instances(codes)


def process_source(source: SourceText, shown: str, path: Optional[Path], job: Job) -> FileResult:
    rules = rules_for(job.settings, path)
    if job.mode == "check":
        return FileResult(shown, lint_source(source.text, shown, rules, job.settings, job.with_edits).diagnostics)
    outcome = fix_source(source.text, shown, rules, job.settings, unsafe=job.unsafe)
    result = FileResult(shown, outcome.errors + outcome.remaining, outcome.applied)
    if outcome.source != source.text:
        result.original, result.fixed = source.text, outcome.source
    return result


def process_file(path: Path, job: Job) -> FileResult:
    job = job.for_file(path)
    if path.suffix == ".ipynb":
        from torchlint.notebook import process_notebook

        return process_notebook(path, job)
    shown = display_path(path)
    try:
        data = read_bytes(path)
        source = decode_source(data)
    except SourceError as exc:
        return FileResult(shown, [error_diagnostic(shown, str(exc), exc.line, exc.column)])
    cache, key = None, ""
    if job.cache_dir is not None:
        cache = Cache(job.cache_dir)
        key = cache.key(data, [r.code for r in rules_for(job.settings, path)], job.settings.torch_version,
                        "lint+edits" if job.with_edits else "lint")
        cached = cache.get(key, shown)
        # A file with nothing to fix needs no fix pass: fix mode can use check results too.
        if cached is not None and (job.mode == "check" or not _has_applicable_fix(cached, job.unsafe)):
            return FileResult(shown, cached)
    try:
        result = process_source(source, shown, path, job)
    except RecursionError:
        return FileResult(shown, [error_diagnostic(shown, "too deeply nested for torchlint to analyse")])
    if cache is not None and job.mode == "check":
        cache.put(key, result.diagnostics)
    if job.apply and result.changed:
        try:
            write_atomic(Path(os.path.realpath(path)), source.encode(result.fixed or ""))
            result.written = True
        except (OSError, UnicodeEncodeError) as exc:
            result.diagnostics.insert(0, error_diagnostic(shown, f"cannot write the fixed file: {exc}"))
    return result


def _has_applicable_fix(diagnostics: Sequence[Diagnostic], unsafe: bool) -> bool:
    return any(d.fix is Applicability.SAFE or (unsafe and d.fix is Applicability.UNSAFE) for d in diagnostics)


# Parsing a file takes about 500 bytes of memory per byte of source (LibCST's tree): two workers on two of
# the largest files at once would double the peak. So one worker takes all files above this size, in turn,
# while the others share the rest.
LARGE_FILE_BYTES = 320 * 1024
TRIM_AFTER_BYTES = 32 * 1024  # after a file this big, give its memory back before the next one


def release_memory() -> None:
    """Hand freed heap back to the OS. glibc keeps it otherwise, and a worker that parsed one large file
    would hold its whole peak for the rest of the run."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            import ctypes

            _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim = None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _process_many(paths: Sequence[Path], job: Job) -> List[FileResult]:
    results = []
    for path in paths:
        results.append(process_file(path, job))
        if _size(path) > TRIM_AFTER_BYTES:
            release_memory()
    return results


def schedule(sizes: Dict[Path, int], jobs: int) -> List[List[Path]]:
    """Work units, in the order the workers should take them: first all large files as one unit (so no
    two are ever parsed at once), then the other files largest first, one per unit, so the workers finish
    together."""
    by_size = sorted(sizes, key=lambda p: -sizes[p])
    large = [p for p in by_size if sizes[p] > LARGE_FILE_BYTES]
    units = [large] if large else []
    return units + [[p] for p in by_size if sizes[p] <= LARGE_FILE_BYTES]


def run(paths: Sequence[Path], job: Job, jobs: int = 1) -> List[FileResult]:
    """Results in the order of ``paths``, the same whether run in one process or many."""
    if jobs <= 1 or len(paths) < 2 * jobs:
        return _process_many(paths, job)
    units = schedule({p: _size(p) for p in paths}, jobs)
    by_path: Dict[Path, FileResult] = {}
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(_process_many, unit, job) for unit in units]
        for unit, future in zip(units, futures):
            by_path.update(zip(unit, future.result()))
    return [by_path[p] for p in paths]
