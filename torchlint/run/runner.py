"""Run check or fix over many files: per-file settings, error isolation, optional processes and cache."""

from __future__ import annotations

import gc
import os
import signal
import threading
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, Iterator, List, Optional, Sequence

from torchlint.run.discovery import display_path
from torchlint.engine import error_diagnostic, fix_source, lint_source
from torchlint.run.cache import Cache
from torchlint.facts.project import ProjectModel
from torchlint.run.guard import call_with_deep_stack
from torchlint.run.job import FileResult, Job, prepare_write, project_of, rules_for
from torchlint.run.fileio import (
    NotWritten, SourceError, SourceText, decode_source, links_out_of, not_round_trip_message, read_regular,
    remove_stale_temp_files, write_back,
)
from torchlint.rule import Applicability, Diagnostic

if TYPE_CHECKING:
    from torchlint.run.progress import Progress


class Interrupted(KeyboardInterrupt):
    """Ctrl-C: the queued work was dropped. ``written``: the files written before it (None: not writing)."""

    def __init__(self, written: Optional[List[str]]) -> None:
        super().__init__()
        self.written = written


def process_source(source: SourceText, shown: str, path: Optional[Path], job: Job,
                   project: Optional[ProjectModel] = None) -> FileResult:
    """Check or fix one text (``project``: the summaries of the project files it imports). Deep code
    recurses deeply (LibCST's parser and tree walks): it runs on a thread with a large stack, and a
    RecursionError still left is one TL000, never a crash."""
    try:
        return call_with_deep_stack(_process_source, source, shown, path, job, project)
    except (RecursionError, MemoryError) as exc:
        return FileResult(shown, [error_diagnostic(
            shown, f"too deeply nested for torchlint to analyse ({type(exc).__name__}); the file was not checked")])


def _process_source(source: SourceText, shown: str, path: Optional[Path], job: Job,
                    project: Optional[ProjectModel]) -> FileResult:
    with _collections_paused():
        return _check_or_fix(source, shown, path, job, project)


@contextmanager
def _collections_paused() -> Iterator[None]:
    """No cyclic garbage collection while one file is checked. The file's trees are built and dropped within
    the call (freed by reference counting: they hold no reference cycles, tests/test_no_cycles.py), so a
    collection in between would only walk them again: on the training-code corpus the collector took 1.3 s
    of a 10.5 s cold run once the cycles were gone (2.3-2.8 s before), 0.24 s with this pause
    (``gc.callbacks``). Collections resume between files."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _check_or_fix(source: SourceText, shown: str, path: Optional[Path], job: Job,
                  project: Optional[ProjectModel]) -> FileResult:
    rules = rules_for(job.settings, path)
    if job.mode == "check" or not source.round_trips:
        diagnostics = lint_source(source.text, shown, rules, job.settings, job.with_edits, project).diagnostics
        if job.mode == "check":
            return FileResult(shown, diagnostics)
        return FileResult(shown, [error_diagnostic(shown, not_round_trip_message(source.encoding))] + diagnostics)
    outcome = fix_source(source.text, shown, rules, job.settings, unsafe=job.unsafe, project=project)
    result = FileResult(shown, outcome.errors + outcome.remaining, outcome.applied)
    if outcome.source != source.text:
        result.original, result.fixed = source.text, outcome.source
    return result


def process_file(path: Path, job: Job) -> FileResult:
    job = job.for_file(path)
    if path.suffix == ".ipynb":
        from torchlint.run.notebook import process_notebook

        return process_notebook(path, job)
    shown = display_path(path)
    try:
        data, status = read_regular(path, job.settings.max_file_size)
    except SourceError as exc:
        return FileResult(shown, [error_diagnostic(shown, str(exc), exc.line, exc.column)])
    cache, key = None, ""
    if job.cache_dir is not None:
        cache = Cache(job.cache_dir)
    with _collections_paused():  # (its summaries build no cycle either)
        project = project_of(path, data, job, cache)
    if cache is not None:
        key = _cache_key(cache, data, path, job, project)
        cached = _usable(cache.get(key, shown), job)
        if cached is not None:
            return FileResult(shown, cached)
    try:
        source = decode_source(data)  # (after the cache: an undecodable file is never cached)
    except SourceError as exc:
        return FileResult(shown, [error_diagnostic(shown, str(exc), exc.line, exc.column)])
    result = process_source(source, shown, path, job, project)
    if cache is not None and job.mode == "check":
        cache.put(key, result.diagnostics)
    if job.apply and result.changed:
        check_job = replace(job, mode="check", apply=False)
        result = prepare_write(result, path, lambda: source.encode(result.fixed or ""), (data, status), job,
                               lambda: process_source(source, shown, path, check_job, project).diagnostics)
    return result


def write_pending(result: FileResult, job: Job, written: List[str]) -> FileResult:
    """Write ``result``'s fixed file, if any (main process only), and add it to ``written``. A Ctrl-C during
    the write takes effect once it is done: a file is written whole and listed, or not written at all. Where
    it cannot be written, the file as it still is (``not_written``)."""
    pending, result.pending = result.pending, None
    if pending is None:
        return result
    try:
        with _interrupts_deferred():
            write_back(pending.path, pending.data, pending.original, pending.root)
            result.written = True
            written.append(result.path)
    except (NotWritten, OSError) as exc:
        reason = str(exc) if isinstance(exc, NotWritten) else f"cannot write the fixed file: {exc}"
        return not_written(result, pending.path, pending.original[0], job, reason)
    return result


def not_written(result: FileResult, path: Path, data: bytes, job: Job, reason: str) -> FileResult:
    """Nothing was fixed: report the file as it still is (``data``), never the fixed text's leftovers."""
    check = replace(job.for_file(path), mode="check", apply=False)
    if path.suffix == ".ipynb":
        from torchlint.run.notebook import process_notebook_data

        unfixed = process_notebook_data(data, result.path, path, check)
    else:
        unfixed = process_source(decode_source(data), result.path, path, check)
    return FileResult(result.path, [error_diagnostic(result.path, reason)] + unfixed.diagnostics)


@contextmanager
def _interrupts_deferred() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread receives signals
        return
    caught: List[int] = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: caught.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            raise KeyboardInterrupt


def _cache_key(cache: Cache, data: bytes, path: Path, job: Job, project: ProjectModel) -> str:
    key = cache.key(data, [r.code for r in rules_for(job.settings, path)], job.settings.torch_version,
                    "lint+edits" if job.with_edits else "lint")
    # a result that may have used other files' summaries is keyed by them too: a change there re-checks it
    return cache.with_project(key, project.digest()) if not project.is_empty() else key


def _usable(cached: Optional[List[Diagnostic]], job: Job) -> Optional[List[Diagnostic]]:
    """A file with nothing to fix needs no fix pass: fix mode can use check results too."""
    if cached is not None and (job.mode == "check" or not _has_applicable_fix(cached, job.unsafe)):
        return cached
    return None


def cached_results(paths: Sequence[Path], job: Job) -> Dict[Path, FileResult]:
    """The files whose results the cache already holds, looked up here in the main process: a warm run then
    starts no worker for them (sending a file to a worker costs more than reading its cache entry)."""
    if job.cache_dir is None:
        return {}
    cache = Cache(job.cache_dir)
    hits: Dict[Path, FileResult] = {}
    for path in paths:
        if path.suffix == ".ipynb":
            continue  # notebooks go their own way (process_notebook)
        file_job = job.for_file(path)
        try:
            data, _ = read_regular(path, file_job.settings.max_file_size)
        except SourceError:
            continue  # process_file reports it
        shown = display_path(path)
        key = _cache_key(cache, data, path, file_job, project_of(path, data, file_job, cache))
        cached = _usable(cache.get(key, shown), file_job)
        if cached is not None:
            hits[path] = FileResult(shown, cached)
    return hits


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


def _process_many(paths: Sequence[Path], job: Job, progress: Optional["Progress"] = None,
                  finish: Callable[[FileResult], FileResult] = lambda result: result) -> List[FileResult]:
    results = []
    with _collections_paused():  # between files too (``collect_now_and_then``)
        for path in paths:
            results.append(finish(process_file(path, job)))
            if _size(path) > TRIM_AFTER_BYTES:
                release_memory()
            collect_now_and_then()
            if progress is not None:
                progress.update(len(results))
    return results


# The cyclic collector stays off while a run checks its files, in the main process and in each worker
# (``start_worker``), and collects once every this many files. With it on between files (and during the
# project model's summaries, which ran outside the pause), its collections walked every object the run
# keeps (the rules' modules, LibCST's, the summaries) again and again: 6.5 s of CPU time of a 31 s cold serial
# run over the torch tree, 0.4 s with this. Nothing a file's check builds is in a cycle
# (tests/test_no_cycles.py), so these collections only bound what something else may leave in one.
COLLECT_EVERY_FILES = 500
_files_since_collection = [0]


def collect_now_and_then() -> None:
    """Count a file done; a full collection once every ``COLLECT_EVERY_FILES``."""
    _files_since_collection[0] += 1
    if _files_since_collection[0] >= COLLECT_EVERY_FILES:
        _files_since_collection[0] = 0
        gc.collect()


def schedule(sizes: Dict[Path, int], jobs: int) -> List[List[Path]]:
    """Work units, in the order the workers should take them: first all large files as one unit (so no
    two are ever parsed at once), then the other files largest first, one per unit, so the workers finish
    together."""
    by_size = sorted(sizes, key=lambda p: -sizes[p])
    large = [p for p in by_size if sizes[p] > LARGE_FILE_BYTES]
    units = [large] if large else []
    return units + [[p] for p in by_size if sizes[p] <= LARGE_FILE_BYTES]


def run(paths: Sequence[Path], job: Job, jobs: int = 1, progress: Optional["Progress"] = None) -> List[FileResult]:
    """Results in the order of ``paths``, the same whether run in one process or many. ``progress`` is
    told how many files are done (in this process, as results come back). Fixed files are written here, as
    their results come in; a Ctrl-C drops the queued work, ends the workers and raises ``Interrupted``."""
    written: List[str] = []

    def finish(result: FileResult) -> FileResult:
        return write_pending(result, job, written)

    try:
        if job.apply:  # temporary files a killed run left beside the files it was writing (never out of the tree)
            remove_stale_temp_files({Path(os.path.realpath(p)).parent for p in paths
                                     if not links_out_of(p, job.for_file(p).settings.root)})
        hits = cached_results(paths, job) if jobs > 1 else {}  # one process looks entries up as it goes
        if not hits:
            return _run_files(paths, job, jobs, finish, progress)
        rest = [p for p in paths if p not in hits]
        fresh = dict(zip(rest, _run_files(rest, job, jobs, finish, progress))) if rest else {}
        return [hits[p] if p in hits else fresh[p] for p in paths]
    except KeyboardInterrupt:
        raise Interrupted(written if job.apply else None) from None
    finally:
        if progress is not None:
            progress.close()


def _run_files(paths: Sequence[Path], job: Job, jobs: int, finish: Callable[[FileResult], FileResult],
               progress: Optional["Progress"] = None) -> List[FileResult]:
    if jobs <= 1 or len(paths) < 2 * jobs:
        return _process_many(paths, job, progress, finish)
    from concurrent.futures import ProcessPoolExecutor, as_completed  # loaded for parallel runs only
    from concurrent.futures.process import BrokenProcessPool

    units = schedule({p: _size(p) for p in paths}, jobs)
    by_path: Dict[Path, FileResult] = {}
    lost: List[Path] = []  # files of units whose worker died (a crash in native code): retried one by one
    done = 0
    pool = ProcessPoolExecutor(max_workers=jobs, initializer=start_worker, initargs=(os.getpid(),))
    try:
        with _sigint_held():
            unit_of = {pool.submit(_process_many, unit, job): unit for unit in units}
        for future in as_completed(unit_of):
            unit = unit_of[future]
            try:
                by_path.update(zip(unit, map(finish, future.result())))
            except BrokenProcessPool:
                lost.extend(unit)
            done += len(unit)
            if progress is not None:
                progress.update(done)
    except BaseException:
        stop_workers(pool)
        raise
    pool.shutdown()
    for path in lost:
        by_path[path] = finish(_process_isolated(path, job))
    return [by_path[p] for p in paths]


def _process_isolated(path: Path, job: Job) -> FileResult:
    """One file in a process of its own: if that process dies too, the file gets one TL000 and the run
    goes on. (A dead worker breaks a whole pool, so every file it held is retried this way.)"""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    pool = ProcessPoolExecutor(max_workers=1, initializer=start_worker, initargs=(os.getpid(),))
    try:
        with _sigint_held():
            future = pool.submit(process_file, path, job)
        return future.result()
    except BrokenProcessPool:
        shown = display_path(path)
        return FileResult(shown, [error_diagnostic(
            shown, "torchlint crashed while checking this file (its process died); the file was not "
            "checked; please report it")])
    except BaseException:
        stop_workers(pool)
        raise
    finally:
        pool.shutdown()


def stop_workers(pool) -> None:
    """Drop the queued work and end the workers now (a Ctrl-C): nothing they would still compute is used."""
    terminate = getattr(pool, "terminate_workers", None)  # Python 3.14
    processes = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)  # (shutdown forgets it)
    pool.shutdown(wait=False, cancel_futures=True)
    _not_woken_at_exit(manager)
    if terminate is not None:
        terminate()
        return
    for process in processes:
        process.terminate()


def _not_woken_at_exit(thread) -> None:
    """At exit, ``concurrent.futures`` wakes each pool's manager ``thread`` through a pipe; once its workers
    are killed that pipe may be broken, and the wakeup's BrokenPipeError traceback would follow the Ctrl-C
    message. A stopped pool needs no wakeup."""
    import concurrent.futures.process as futures_process

    wakeups = getattr(futures_process, "_threads_wakeups", None)
    if thread is not None and wakeups is not None:
        wakeups.pop(thread, None)


@contextmanager
def _sigint_held() -> Iterator[None]:
    """SIGINT waits while workers start, so that none starts with Python's handler (a Ctrl-C then would
    print its traceback): ``start_worker`` ignores it, and here it is delivered (KeyboardInterrupt) after."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def start_worker(parent_pid: int) -> None:
    """Worker initializer. Ctrl-C reaches the whole process group: the main process alone decides what it
    means (``stop_workers``), so a worker ignores it rather than die mid-file and break the pool."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.disable()  # for good: a worker only checks files (``collect_now_and_then``)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    die_with_parent(parent_pid)


def die_with_parent(parent_pid: int) -> None:
    """Worker initializer: a worker must not outlive the run that started it (killed with SIGKILL, the
    parent cannot stop its pool). Linux: the kernel sends SIGKILL when the parent dies."""
    try:
        import ctypes
        import signal

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the watchdog below still ends the worker
        _start_parent_watchdog(parent_pid)
        return
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)


def _start_parent_watchdog(parent_pid: int) -> None:
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="torchlint-parent-watchdog", daemon=True).start()
