"""The command line: ``torchlint check``, ``fix``, ``rules``, ``explain`` and ``bench``."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import replace
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, List, NoReturn, Optional, Sequence, Tuple

import click

from torchlint.fix.deferred import defer_import

defer_import("libcst")  # before anything imports it: loaded when the first file reaches LibCST
defer_import("libcst.matchers")

from torchlint import __version__  # noqa: E402 - after defer_import
from torchlint.run.cache import CACHE_DIR_NAME
from torchlint.config import (
    DEFAULT_TORCH_VERSION, ConfigError, Settings, parse_inline, parse_selectors, parse_size,
    parse_torch_version,
)
from torchlint.config.tree import CliOverrides, ConfigTree, forget_configuration_files
from torchlint.run.progress import Progress
from torchlint.run.discovery import cached_spec, discover, display_path, exclude_patterns
from torchlint.engine import error_diagnostic
from torchlint.run.fileio import (NOTEBOOK_READ_FACTOR, SourceError, SourceText, decode_source, notebook_too_large,
                                  too_large_message)
from torchlint.report.formats import FORMATS, NEEDS_EDITS, TEXT_FORMATS, SourceLines, format_full, render
from torchlint.registry import all_rules, get_rule
from torchlint.report.reporters import (
    color_diff,
    fixable_counts,
    format_json,
    format_text,
    printable,
    statistics_json,
    statistics_lines,
    summary_line,
    unified_diff,
)
from torchlint.rule import Diagnostic, FixAvailability
from torchlint.run.job import FileResult, Job
from torchlint.run.runner import process_source, run

EXIT_CLEAN, EXIT_PROBLEMS, EXIT_ERROR = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a program that Ctrl-C stopped


def use_color() -> bool:
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("NO_COLOR"):
        return False
    return sys.stdout.isatty()


def _tree_from_options(opts: dict) -> ConfigTree:
    """Per-file settings: the closest configuration file (or --config for all), the command line on top."""
    forget_configuration_files()
    config, inline = _config_arguments(opts.get("config") or ())
    if opts.get("exit_zero") and opts.get("exit_non_zero_on_fix"):
        raise ConfigError("--exit-non-zero-on-fix cannot be used with --exit-zero")  # as in Ruff
    if config is not None and opts.get("isolated"):
        raise ConfigError(f"--config {config} cannot be used with --isolated, which ignores all configuration files")
    overrides = CliOverrides(
        inline=inline,
        select=parse_selectors(opts["select"], "--select") if opts.get("select") else None,
        extend_select=parse_selectors(opts.get("extend_select") or (), "--extend-select"),
        ignore=parse_selectors(opts.get("ignore") or (), "--ignore"),
        torch_version=parse_torch_version(opts["torch_version"]) if opts.get("torch_version") else None,
        unsafe_fixes=opts.get("unsafe_fixes"),
        max_file_size=parse_size(opts["max_file_size"]) if opts.get("max_file_size") else None,
    )
    return ConfigTree(overrides, config.resolve() if config is not None else None, Path.cwd().resolve(),
                      isolated=bool(opts.get("isolated")))


def _config_arguments(values: Sequence[str]) -> Tuple[Optional[Path], Tuple[Tuple[Tuple[str, object], ...], ...]]:
    """``--config``, as Ruff's: a configuration file, or a TOML ``KEY = VALUE`` pair; repeatable, with at
    most one file. Returns the file and each pair's settings, in order."""
    files = [Path(value) for value in values if os.path.isfile(value)]
    if len(files) > 1:
        raise ConfigError(f"--config: give at most one configuration file, got {', '.join(map(str, files))}")
    inline = tuple(tuple(parse_inline(value).items()) for value in values if not os.path.isfile(value))
    return (files[0] if files else None), inline


def _settings_from_options(opts: dict, paths: Sequence[str]) -> Settings:
    """The settings of the first path (they place the cache and word the summary); validates every selector."""
    start = Path(paths[0]) if paths and paths[0] != "-" else Path.cwd()
    return _tree_from_options(opts).for_path(start if start.exists() else Path.cwd())


def common_options(func: Callable) -> Callable:
    options = [
        # readable=False: click would stop the whole run over one unreadable file; it gets a TL000 instead
        click.argument("paths", nargs=-1, type=click.Path(readable=False)),
        click.option("--select", multiple=True, help="Rule codes or prefixes to enable (e.g. TL2, TL101, ALL)."),
        click.option("--extend-select", multiple=True, help="Rules to enable on top of the selection."),
        click.option("--ignore", multiple=True, help="Rule codes or prefixes to disable."),
        click.option("--config", multiple=True, metavar="FILE | KEY=VALUE",
                     help="Read settings from this TOML file instead of the nearest one, or override one setting "
                          "(TOML, e.g. 'torch-version = \"2.4\"'); repeatable."),
        click.option("--isolated", is_flag=True, help="Ignore all configuration files."),
        click.option("--torch-version", help="The PyTorch version the checked code targets (any PEP 440 version: "
                     "2.4, 2.4.0+cu121); default: the lowest the project's torch requirement allows, else "
                     f"{'.'.join(map(str, DEFAULT_TORCH_VERSION))}."),
        click.option("--unsafe-fixes/--no-unsafe-fixes", default=None,
                     help="Also apply (fix) or count (check) fixes that can change behaviour."),
        click.option("--output-format", type=click.Choice(FORMATS), default="concise", show_default=True,
                     help="How to show findings (concise is the text default; see the README for each format)."),
        click.option("--output-file", "-o", type=click.Path(dir_okay=False, readable=False), help="Write the report to this file."),
        click.option("--exit-zero", is_flag=True, help="Exit 0 even when problems remain."),
        click.option("--statistics", is_flag=True, help="Show counts per rule instead of each problem."),
        click.option("--quiet", "-q", is_flag=True, help="Print problems only: no summary."),
        click.option("--force-exclude", is_flag=True, help="Apply exclusions to paths given on the command line too."),
        click.option("--stdin-filename", type=click.Path(readable=False), help="The path to report for source read from '-'."),
        click.option("--no-cache", is_flag=True, help="Neither read nor write .torchlint_cache/."),
        click.option("--cache-dir", type=click.Path(file_okay=False),
                     help="Where to keep the cache (default: .torchlint_cache/ beside the configuration)."),
        click.option("--max-file-size", metavar="SIZE",
                     help="Skip larger files with a TL000 (bytes, or e.g. 512KiB, 4MiB; default 2MiB)."),
        click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
                     help="Processes to use (default: all cores)."),
        click.option("--exit-non-zero-on-fix", is_flag=True,
                     help="Exit 1 if any file was fixed, even if no problem remains."),
        click.option("--show-files", is_flag=True, help="List the files that would be checked, then exit."),
        click.option("--show-settings", is_flag=True,
                     help="Show the settings of the first file that would be checked, then exit."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="torchlint")
def cli() -> None:
    """Find and fix slow PyTorch training code."""


def _collect(paths: Tuple[str, ...], settings: Settings, opts: dict, job: Job) -> List[FileResult]:
    files, results = _discover(paths, settings, opts, job.tree or ConfigTree())
    if not files and not results:
        click.echo("warning: No Python files found under the given path(s)", err=True)
    jobs = opts.get("jobs") or os.cpu_count() or 1
    progress = Progress.for_terminal(len(files), quiet=opts.get("quiet", False))
    return results + run(files, job, jobs=jobs, progress=progress)


def _discover(paths: Tuple[str, ...], settings: Settings, opts: dict, tree: ConfigTree) -> Tuple[List[Path], List[FileResult]]:
    """The files to check, in order, and a TL000 for each path that cannot be checked."""
    files: Dict[Path, Path] = {}
    results: List[FileResult] = []
    for raw in paths or (".",):
        # Each path is discovered with its own configuration's exclusions, whatever the argument order.
        here = tree.for_path(Path(raw)) if Path(raw).exists() else settings
        found = discover((raw,), here, force_exclude=opts["force_exclude"])
        results += [FileResult(p, [error_diagnostic(p, "no such file or directory")]) for p in found.missing]
        results += [FileResult(p, [error_diagnostic(p, "not a Python file or notebook (.py, .pyi, .ipynb); not checked")])
                    for p in found.unsupported]
        results += [FileResult(p, [error_diagnostic(p, why)]) for p, why in found.problems]  # loops, FIFOs
        explicit = Path(raw).is_file()
        for path in found.files:
            own = tree.for_file(path)  # also validates every configuration file before any work starts
            if not explicit and own.config_path != here.config_path and _excluded_by(own, path):
                continue  # a nested configuration file excludes it
            files.setdefault(path.resolve(), path)
    return sorted(files.values(), key=str), results


def _excluded_by(settings: Settings, path: Path) -> bool:
    spec = cached_spec(exclude_patterns(settings))
    try:
        relative = path.resolve().relative_to(settings.root).as_posix()
    except ValueError:
        return False
    return spec.match_file(relative)


def _cache_dir(opts: dict, settings: Settings) -> Optional[Path]:
    if opts.get("no_cache"):
        return None
    return Path(opts["cache_dir"]).resolve() if opts.get("cache_dir") else settings.root / CACHE_DIR_NAME


def _read_stdin() -> bytes:
    stream = sys.stdin
    data = getattr(stream, "buffer", stream).read()
    return data.encode("utf-8") if isinstance(data, str) else data


def _stdin_result(opts: dict, job: Job, data: Optional[bytes] = None) -> FileResult:
    result, _ = _stdin_source_result(opts, job, _read_stdin() if data is None else data)
    return result


def _stdin_source_result(opts: dict, job: Job, data: bytes) -> Tuple[FileResult, Optional[SourceText]]:
    shown = opts.get("stdin_filename") or "-"
    limit = job.settings.max_file_size
    if shown.endswith(".ipynb") and len(data) > NOTEBOOK_READ_FACTOR * limit:
        return FileResult(shown, [error_diagnostic(shown, notebook_too_large(len(data), limit))]), None
    if not shown.endswith(".ipynb") and len(data) > limit:
        return FileResult(shown, [error_diagnostic(shown, too_large_message(len(data), limit))]), None
    if shown.endswith(".ipynb"):  # a notebook's JSON, not Python source (its code is held to the limit)
        from torchlint.run.notebook import decode_notebook, process_notebook_data

        path = Path(shown)
        result = process_notebook_data(data, shown, path, job.for_file(path), project_files=False)
        try:
            source = decode_notebook(data)
        except UnicodeDecodeError:
            return result, None  # reported by process_notebook_data; the input goes back unchanged
        result.original = result.original if result.original is not None else source.text
        return result, source
    try:
        source = decode_source(data)
    except SourceError as exc:
        return FileResult(shown, [error_diagnostic(shown, str(exc), exc.line, exc.column)]), None
    path = Path(opts["stdin_filename"]) if opts.get("stdin_filename") else None
    job = job.for_file(path) if path is not None else job
    result = process_source(source, shown, path, job)
    result.original = result.original if result.original is not None else source.text
    return result, source


def _emit_diagnostics(diagnostics: List[Diagnostic], opts: dict, settings: Settings, err: bool = False) -> None:
    stream = None if err else opts.get("_stream")  # --output-file
    color = use_color() and not err and stream is None

    def echo(text: str, **kw) -> None:
        click.echo(text, err=err, file=stream, **kw)

    output_format = opts["output_format"]
    if output_format == "json":
        echo(statistics_json(diagnostics, settings.unsafe_fixes) if opts["statistics"] else format_json(diagnostics))
        return
    if output_format not in TEXT_FORMATS and not opts["statistics"]:
        echo(render(diagnostics, output_format), nl=False)
        return
    if opts["statistics"]:
        for line in statistics_lines(diagnostics, settings.unsafe_fixes):
            echo(line)
    else:
        sources = SourceLines()
        for d in diagnostics:
            line = format_text(d, color, settings.unsafe_fixes)
            echo(format_full(d, line, sources) if output_format == "full" else line, color=color)
    if not opts["quiet"]:
        echo(summary_line(diagnostics, settings.unsafe_fixes))
        fixable, _ = fixable_counts(diagnostics, settings.unsafe_fixes)
        if fixable and not err:
            echo("Run `torchlint fix --apply` to fix them." if not settings.unsafe_fixes
                 else "Run `torchlint fix --apply --unsafe-fixes` to fix them.")


def _with_output_file(opts: dict, body: Callable[[], int]) -> Callable[[], int]:
    """--output-file: the report goes to that file (written even when there is nothing to report)."""
    if not opts.get("output_file"):
        return body

    def wrapped() -> int:
        with open(opts["output_file"], "w", encoding="utf-8") as stream:
            opts["_stream"] = stream
            return body()

    return wrapped


def _guarded(body: Callable[[], int]) -> None:
    """Exit codes like Ruff's: 0 clean, 1 problems, 2 usage, configuration or internal error."""
    try:
        code = body()
    except ConfigError as exc:
        click.echo(f"torchlint: error: {exc}", err=True)
        code = EXIT_ERROR
    except (click.exceptions.Exit, BrokenPipeError):
        raise  # a reader that went away (`| head`): click ends quietly with exit code 1
    except KeyboardInterrupt as exc:  # Ctrl-C: the run stopped at once (runner.Interrupted)
        click.echo(_interrupted_message(getattr(exc, "written", None)), err=True)
        code = EXIT_INTERRUPTED
    except Exception as exc:  # an internal error must still say what happened, never exit 1
        import traceback

        click.echo(f"torchlint: internal error: {type(exc).__name__}: {_describe(exc)}", err=True)
        click.echo("".join(traceback.format_exc(limit=-20)), err=True)  # the innermost frames: never megabytes
        click.echo("Please report this at https://github.com/torchlint/torchlint/issues", err=True)
        code = EXIT_ERROR
    sys.exit(code)


def _interrupted_message(written: Optional[List[str]]) -> str:
    if written is None:
        return "torchlint: interrupted"
    if not written:
        return "torchlint: interrupted; no file was written"
    listed = "".join(f"\n  {path}" for path in sorted(written))
    return f"torchlint: interrupted; {len(written)} file{'s were' if len(written) != 1 else ' was'} written before it:{listed}"


def _describe(exc: BaseException) -> str:
    try:
        return str(exc)[:2000]
    except (RecursionError, MemoryError):
        return "(its message cannot be shown)"


@cli.command()
@common_options
@click.option("--fix/--no-fix", "fix_", default=False, help="Apply the safe fixes, as `torchlint fix --apply`.")
@click.option("--diff", is_flag=True, help="Show the fixes as a diff and write nothing, as `torchlint fix`.")
@click.option("--show-fixes", is_flag=True, help="With --fix: list the fixes applied per file.")
@click.option("--add-noqa", is_flag=True, help="Write `# noqa: CODE` on every line with a finding.")
@click.option("--watch", is_flag=True, help="Check again whenever a checked file or configuration file changes.")
def check(paths: Tuple[str, ...], fix_: bool, diff: bool, show_fixes: bool, add_noqa: bool, watch: bool, **opts) -> None:
    """Report slow PyTorch patterns in PATHS (default: the current folder); '-' reads stdin."""
    _show_and_exit(paths, opts)
    if add_noqa and not (fix_ or diff):
        _guarded(lambda: _add_noqa_body(paths, opts))

    def lint() -> int:
        settings = _settings_from_options(opts, paths)
        job = Job(settings, mode="check", cache_dir=_cache_dir(opts, settings),
                  with_edits=opts["output_format"] in NEEDS_EDITS and not opts["statistics"], tree=_tree_from_options(opts))
        results = [_stdin_result(opts, job)] if paths == ("-",) else _collect(paths, settings, opts, job)
        diagnostics = sorted((d for r in results for d in r.diagnostics), key=lambda d: d.sort_key)
        _emit_diagnostics(diagnostics, opts, settings)
        return EXIT_PROBLEMS if diagnostics and not opts["exit_zero"] else EXIT_CLEAN

    # --fix and --diff: Ruff's spelling of `fix --apply` and `fix`
    body = (lambda: _fix_body(paths, fix_ and not diff, opts)) if fix_ or diff else lint
    if watch:
        _guarded(lambda: _watch(paths, opts, _with_output_file(opts, body)))
    _guarded(_with_output_file(opts, body))


def _show_and_exit(paths: Tuple[str, ...], opts: dict) -> None:
    """--show-files and --show-settings, as Ruff's: what a run would check, or with which settings."""
    if not (opts.get("show_files") or opts.get("show_settings")):
        return
    from torchlint.config.report import file_lines, settings_lines

    def body() -> int:
        settings = _settings_from_options(opts, paths)
        tree = _tree_from_options(opts)
        files, _ = _discover(tuple(p for p in paths if p != "-"), settings, opts, tree)
        if opts.get("show_files"):
            lines = file_lines(files, tree)
        else:
            named = opts.get("stdin_filename") if paths == ("-",) else None
            target = Path(named) if named else files[0] if files else Path(paths[0] if paths else ".")
            lines = settings_lines(target, tree, _cache_dir(opts, tree.for_path(target)))
        for line in lines:
            click.echo(line)
        return EXIT_CLEAN

    _guarded(body)


WATCH_INTERVAL = 0.5  # seconds between looks at the files' times and sizes


def _watch(paths: Tuple[str, ...], opts: dict, body: Callable[[], int]) -> int:
    """Ruff's --watch: run, then run again after any checked file or configuration file changes (a file added,
    removed or edited), until Ctrl-C. A bad configuration is reported and waited out."""
    import time

    if paths == ("-",):
        raise ConfigError("--watch cannot read stdin")

    def say(text: str) -> None:
        click.echo(f"[{time.strftime('%H:%M:%S')}] {text}")

    say("Starting linter in watch mode...")
    while True:
        before = _watch_snapshot(paths, opts)
        try:
            body()
        except ConfigError as exc:
            click.echo(f"torchlint: error: {exc}", err=True)
        say("Watching for file changes.")
        sys.stdout.flush()
        while _watch_snapshot(paths, opts) == before:
            time.sleep(WATCH_INTERVAL)
        say("File change detected...")


def _watch_snapshot(paths: Tuple[str, ...], opts: dict) -> object:
    """The times and sizes of the files a run would check and of their configuration files."""
    try:
        tree = _tree_from_options(opts)
        files, _ = _discover(paths, _settings_from_options(opts, paths), opts, tree)
        watched = {*files, *(s.config_path for s in map(tree.for_file, files) if s.config_path is not None)}
        if tree.config is not None:
            watched.add(tree.config)
    except ConfigError as exc:  # a configuration being edited: a change will come
        return str(exc)
    stamps = {}
    for path in watched:
        try:
            status = os.stat(path)
            stamps[str(path)] = (status.st_mtime_ns, status.st_size)
        except OSError:
            stamps[str(path)] = None
    return stamps


@cli.command()
@common_options
@click.option("--apply", is_flag=True, help="Write the fixes (default: show them as a diff and write nothing).")
@click.option("--diff", is_flag=True, help="Show the fixes as a diff and write nothing (the default; wins over --apply).")
@click.option("--show-fixes", is_flag=True, help="List the fixes applied per file (the default with --apply).")
def fix(paths: Tuple[str, ...], apply: bool, diff: bool, show_fixes: bool, **opts) -> None:
    """Fix slow patterns in PATHS: show a diff, or write the files with --apply."""
    _show_and_exit(paths, opts)
    _guarded(_with_output_file(opts, lambda: _fix_body(paths, apply and not diff, opts)))


def _add_noqa_body(paths: Tuple[str, ...], opts: dict) -> int:
    from torchlint.run.fileio import NotWritten, not_round_trip_message, read_regular, write_back
    from torchlint.report.noqa import add_noqa

    if paths == ("-",):
        raise ConfigError("--add-noqa writes files: it cannot read stdin")
    settings = _settings_from_options(opts, paths)
    job = Job(settings, mode="check", cache_dir=_cache_dir(opts, settings), tree=_tree_from_options(opts))
    by_path: Dict[str, List[Diagnostic]] = {}
    for result in _collect(paths, settings, opts, job):
        by_path.setdefault(result.path, []).extend(result.diagnostics)
    added = 0
    for shown, diagnostics in sorted(by_path.items()):
        if shown.endswith(".ipynb") or not diagnostics:
            continue
        path = Path(shown)
        try:
            data, status = read_regular(path)
            source = decode_source(data)
            text, count = add_noqa(source.text, diagnostics)
            if not count or not _still_compiles(source.text, text):
                continue
            if not source.round_trips:
                raise NotWritten(not_round_trip_message(source.encoding))
            write_back(path, source.encode(text), (data, status), job.for_file(path).settings.root)
            added += count
        except (SourceError, NotWritten, OSError, UnicodeEncodeError) as exc:
            click.echo(f"warning: {shown}: no noqa added: {exc}", err=True)
    click.echo(f"Added {added} noqa directive{'s' if added != 1 else ''}.", err=True)
    return EXIT_CLEAN


def _still_compiles(before: str, after: str) -> bool:
    try:
        compile(before, "<before>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return True  # it did not compile before either: nothing to compare with
    try:
        compile(after, "<after>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def _fix_body(paths: Tuple[str, ...], apply: bool, opts: dict) -> int:
    settings = _settings_from_options(opts, paths)
    job = Job(settings, mode="fix", apply=apply and paths != ("-",), unsafe=settings.unsafe_fixes,
              cache_dir=_cache_dir(opts, settings), tree=_tree_from_options(opts))
    if paths == ("-",):
        return _fix_stdin(job, opts, settings, apply)
    results = _collect(paths, settings, opts, job)
    return _report_fix(results, opts, settings, apply)


def _fix_stdin(job: Job, opts: dict, settings: Settings, apply: bool) -> int:
    data = _read_stdin()
    if not apply:
        return _report_fix([_stdin_result(opts, job, data)], opts, settings, apply=False)
    # An editor replaces its buffer with stdout: stdout is always a whole file, the input byte for byte
    # (same encoding, BOM and line endings) unless a fix applied, and the unchanged input on any error.
    output = data
    try:
        result, source = _stdin_source_result(opts, job, data)
        if source is not None and result.changed:
            try:
                output = source.encode(result.fixed or "")
            except UnicodeEncodeError as exc:
                shown = result.path
                unfixed = _stdin_result(opts, replace(job, mode="check"), data)
                result = FileResult(shown, [error_diagnostic(shown, f"the fixed text cannot be encoded as "
                                                                    f"{source.encoding}: {exc.reason}; not fixed")]
                                    + unfixed.diagnostics)
    except Exception:
        _write_stdout(data)
        raise
    _write_stdout(output)
    _emit_diagnostics(result.diagnostics, {**opts, "output_format": "text"}, settings, err=True)
    return EXIT_PROBLEMS if result.diagnostics and not opts["exit_zero"] else EXIT_CLEAN


def _write_stdout(data: bytes) -> None:
    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is not None:
        buffer.write(data)
        buffer.flush()
    else:  # a text-only stream (tests): the bytes as Latin-1 keep every byte value
        sys.stdout.write(data.decode("latin-1"))
        sys.stdout.flush()


def _report_fix(results: List[FileResult], opts: dict, settings: Settings, apply: bool) -> int:
    color = use_color()
    remaining = sorted((d for r in results for d in r.diagnostics), key=lambda d: d.sort_key)
    applied: Counter = Counter()
    for r in results:
        applied.update(r.applied)
    if not apply:
        changed = [r for r in results if r.changed]
        for r in changed:
            cell_changes = getattr(r, "cell_changes", None)  # a notebook: one diff per changed cell
            diff = "".join(unified_diff(f"{r.path}:cell {n}", a, b) for n, a, b in cell_changes) if cell_changes \
                else unified_diff(r.path, r.original or "", r.fixed or "")
            click.echo(color_diff(diff) if color else diff, nl=False, color=color)
        if not opts["quiet"]:
            total = sum(applied.values())
            files = len(changed)
            click.echo(f"Would fix {total} problem{'s' if total != 1 else ''} in {files} file{'s' if files != 1 else ''}"
                       f"{_hidden_note(remaining, settings)}.", err=True)
        return EXIT_PROBLEMS if changed and not opts["exit_zero"] else EXIT_CLEAN
    if opts["output_format"] in TEXT_FORMATS and not opts["quiet"]:
        for r in results:
            for code, count in sorted(r.applied.items()):
                click.echo(f"{printable(r.path)}: fixed {count} x {code} ({get_rule(code).name})")
    _emit_diagnostics(remaining, opts, settings)
    if not opts["quiet"] and opts["output_format"] in TEXT_FORMATS:
        total = sum(applied.values())
        files = sum(1 for r in results if r.written)
        click.echo(f"Fixed {total} problem{'s' if total != 1 else ''} in {files} file{'s' if files != 1 else ''}.")
    if opts.get("exit_non_zero_on_fix") and any(r.written for r in results):
        return EXIT_PROBLEMS  # Ruff's meaning: a fix was written, even if nothing remains
    return EXIT_PROBLEMS if remaining and not opts["exit_zero"] else EXIT_CLEAN


def _hidden_note(remaining: List[Diagnostic], settings: Settings) -> str:
    _, hidden = fixable_counts(remaining, settings.unsafe_fixes)
    return f" ({hidden} more with --unsafe-fixes)" if hidden else ""


@cli.command(name="rules")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def list_rules(output_format: str) -> None:
    """List every rule: code, name, fix availability and summary."""
    rules = all_rules()
    if output_format == "json":
        import json

        from torchlint.report.docs import fix_line

        click.echo(json.dumps([
            {"code": r.code, "name": r.name, "fix": r.fix_availability.value, "default": r.default_enabled,
             "fix_applicabilities": [a.value for a in r.fix_applicabilities], "fix_summary": fix_line(r),
             "summary": r.summary, "url": r.url()}
            for r in rules
        ], indent=2))
        return
    fix_label = {FixAvailability.NONE: "", FixAvailability.SOMETIMES: "fix (sometimes)", FixAvailability.ALWAYS: "fix"}
    name_width = max((len(r.name) for r in rules), default=4)
    for r in rules:
        default = "" if r.default_enabled else "opt-in"
        click.echo(f"{r.code}  {r.name:<{name_width}}  {fix_label[r.fix_availability]:<15}  {default:<6}  {r.summary}")


@cli.command()
@click.argument("code", required=False)
@click.option("--all", "all_", is_flag=True, help="Print every rule's documentation, TL000 included.")
def explain(code: Optional[str], all_: bool) -> None:
    """Print the full documentation of a rule, by code (TL201) or name (zero-grad-keeps-zeros)."""
    from torchlint.report.docs import all_docs, find_doc

    def body() -> int:
        if all_ == bool(code):
            raise ConfigError("explain: give a rule code or name, or --all")
        docs = all_docs() if all_ else [find_doc(code or "")]
        click.echo("\n".join(doc.markdown() for doc in docs), nl=False)
        return EXIT_CLEAN

    _guarded(body)


@cli.command()
def clean() -> None:
    """Remove the caches: every .torchlint_cache/ in the current folder and below (as `ruff clean`), and the
    one the current folder's configuration uses."""

    def body() -> int:
        root = ConfigTree(cwd=Path.cwd().resolve()).for_path(Path(".")).root
        found = {root / CACHE_DIR_NAME}
        for folder, dirnames, _ in os.walk("."):
            if CACHE_DIR_NAME in dirnames:
                found.add(Path(os.path.abspath(os.path.join(folder, CACHE_DIR_NAME))))
            dirnames[:] = [d for d in dirnames if d not in (CACHE_DIR_NAME, ".git")]
        for cache in sorted(p for p in found if p.is_dir() or p.is_symlink()):
            click.echo(f"Removing cache at: {display_path(cache)}", err=True)
            if cache.is_symlink():  # the link, never what it points to
                cache.unlink()
            else:
                shutil.rmtree(cache)
        return EXIT_CLEAN

    _guarded(body)


@cli.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []})
@click.pass_context
def bench(ctx: click.Context) -> None:
    """Prove each fix on hardware: run slow and fixed workloads, compare results and time (needs torch).

    All arguments go to ``python -m torchlint.runtime.harness``; see ``torchlint bench --help``.
    """
    try:
        from torchlint.runtime import harness  # imports torch: only here, never on check/fix
    except ImportError as exc:
        _missing("bench", exc, "runtime")
    sys.exit(harness.main(list(ctx.args)))


@cli.command()
def server() -> None:
    """Run the Language Server for editors (LSP over stdio; needs pygls, the [server] extra)."""
    try:
        from torchlint.server import main as serve  # imports pygls: only here
    except ImportError as exc:
        _missing("server", exc, "server")
    serve()


# What to install for a module an extra brings (pygls brings lsprotocol); torch from its CPU index, since
# PyPI's Linux wheels bring several GB of CUDA libraries.
_PACKAGE_OF = {"lsprotocol": "pygls", "torch": "torch --index-url https://download.pytorch.org/whl/cpu"}
GITHUB = "git+https://github.com/torchlint/torchlint"  # there is no torchlint on PyPI


def _missing(command: str, error: ImportError, extra: str) -> NoReturn:
    """Exit 2 naming the package that is not installed and the install that works."""
    module = (error.name or "").split(".")[0]
    if not module or module == "torchlint":  # not a missing package: torchlint's own import failed
        click.echo(f"torchlint {command}: internal error while importing: {error}; please report it", err=True)
        sys.exit(EXIT_ERROR)
    install = _PACKAGE_OF.get(module, module)
    click.echo(f"torchlint {command} needs {module}, which is not installed: pip install {install} (or install "
               f"torchlint with its extra: pip install \"torchlint[{extra}] @ {GITHUB}\", in a clone "
               f"pip install '.[{extra}]')", err=True)
    sys.exit(EXIT_ERROR)


def main(argv: Optional[Sequence[str]] = None) -> None:
    cli.main(args=list(argv) if argv is not None else None, prog_name="torchlint")


if __name__ == "__main__":
    main()
