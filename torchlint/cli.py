"""The command line: ``torchlint check``, ``fix``, ``rules``, ``explain`` and ``bench``."""

from __future__ import annotations

import os
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

import click

from torchlint import __version__
from torchlint.cache import CACHE_DIR_NAME
from torchlint.config import (
    ConfigError, Settings, parse_selectors, parse_size, parse_torch_version, resolve_settings,
)
from torchlint.discovery import discover
from torchlint.engine import error_diagnostic
from torchlint.fileio import SourceError, SourceText, decode_source, too_large_message
from torchlint.registry import all_rules, get_rule
from torchlint.reporters import (
    color_diff,
    fixable_counts,
    format_json,
    format_text,
    statistics_json,
    statistics_lines,
    summary_line,
    unified_diff,
)
from torchlint.rule import Diagnostic, FixAvailability
from torchlint.runner import FileResult, Job, process_source, run

EXIT_CLEAN, EXIT_PROBLEMS, EXIT_ERROR = 0, 1, 2


def use_color() -> bool:
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("NO_COLOR"):
        return False
    return sys.stdout.isatty()


def _settings_from_options(opts: dict, paths: Sequence[str]) -> Settings:
    """The config file's settings with the command line on top; validates every selector."""
    start = Path(paths[0]) if paths and paths[0] != "-" else Path.cwd()
    start = start if start.is_dir() else (start.parent if str(start.parent) else Path.cwd())
    config = Path(opts["config"]) if opts.get("config") else None
    if config is not None and not config.is_file():
        raise ConfigError(f"--config: no such file: {config}")
    settings = resolve_settings(config, start if start.exists() else Path.cwd())
    changes: dict = {}
    if opts.get("select"):
        # As in Ruff, a selection on the command line replaces the file's whole selection, ignores included.
        changes["select"] = parse_selectors(opts["select"], "--select")
        settings = replace(settings, ignore=(), extend_select=())
    if opts.get("extend_select"):
        changes["extend_select"] = settings.extend_select + parse_selectors(opts["extend_select"], "--extend-select")
    if opts.get("ignore"):
        changes["ignore"] = settings.ignore + parse_selectors(opts["ignore"], "--ignore")
    if opts.get("torch_version"):
        changes["torch_version"] = parse_torch_version(opts["torch_version"])
    if opts.get("unsafe_fixes") is not None:
        changes["unsafe_fixes"] = opts["unsafe_fixes"]
    if opts.get("max_file_size"):
        changes["max_file_size"] = parse_size(opts["max_file_size"])
    return replace(settings, **changes)


def common_options(func: Callable) -> Callable:
    options = [
        click.argument("paths", nargs=-1, type=click.Path()),
        click.option("--select", multiple=True, help="Rule codes or prefixes to enable (e.g. TL2, TL101, ALL)."),
        click.option("--extend-select", multiple=True, help="Rules to enable on top of the selection."),
        click.option("--ignore", multiple=True, help="Rule codes or prefixes to disable."),
        click.option("--config", type=click.Path(dir_okay=False), help="Read settings from this TOML file."),
        click.option("--torch-version", help="The PyTorch version the checked code targets, e.g. 1.13 or 2.4."),
        click.option("--unsafe-fixes/--no-unsafe-fixes", default=None,
                     help="Also apply (fix) or count (check) fixes that can change behaviour."),
        click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True),
        click.option("--exit-zero", is_flag=True, help="Exit 0 even when problems remain."),
        click.option("--statistics", is_flag=True, help="Show counts per rule instead of each problem."),
        click.option("--quiet", "-q", is_flag=True, help="Print problems only: no summary."),
        click.option("--force-exclude", is_flag=True, help="Apply exclusions to paths given on the command line too."),
        click.option("--stdin-filename", type=click.Path(), help="The path to report for source read from '-'."),
        click.option("--no-cache", is_flag=True, help="Neither read nor write .torchlint_cache/."),
        click.option("--cache-dir", type=click.Path(file_okay=False),
                     help="Where to keep the cache (default: .torchlint_cache/ beside the configuration)."),
        click.option("--max-file-size", metavar="SIZE",
                     help="Skip larger files with a TL000 (bytes, or e.g. 512KiB, 4MiB; default 2MiB)."),
        click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
                     help="Processes to use (default: all cores)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="torchlint")
def cli() -> None:
    """Find and fix slow PyTorch training code."""


def _collect(paths: Tuple[str, ...], settings: Settings, opts: dict, job: Job) -> List[FileResult]:
    found = discover(paths or (".",), settings, force_exclude=opts["force_exclude"])
    results = [FileResult(p, [error_diagnostic(p, "no such file or directory")]) for p in found.missing]
    results += [FileResult(p, [error_diagnostic(p, why)]) for p, why in found.problems]
    jobs = opts.get("jobs") or os.cpu_count() or 1
    results += run(found.files, job, jobs=jobs)
    return results


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
    if len(data) > job.settings.max_file_size:
        return FileResult(shown, [error_diagnostic(shown, too_large_message(len(data), job.settings.max_file_size))]), None
    try:
        source = decode_source(data)
    except SourceError as exc:
        return FileResult(shown, [error_diagnostic(shown, str(exc), exc.line, exc.column)]), None
    path = Path(opts["stdin_filename"]) if opts.get("stdin_filename") else None
    result = process_source(source, shown, path, job)
    result.original = result.original if result.original is not None else source.text
    return result, source


def _emit_diagnostics(diagnostics: List[Diagnostic], opts: dict, settings: Settings, err: bool = False) -> None:
    color = use_color() and not err
    if opts["output_format"] == "json":
        click.echo(statistics_json(diagnostics, settings.unsafe_fixes) if opts["statistics"] else format_json(diagnostics))
        return
    if opts["statistics"]:
        for line in statistics_lines(diagnostics, settings.unsafe_fixes):
            click.echo(line, err=err)
    else:
        for d in diagnostics:
            click.echo(format_text(d, color, settings.unsafe_fixes), color=color, err=err)
    if not opts["quiet"]:
        click.echo(summary_line(diagnostics, settings.unsafe_fixes), err=err)
        fixable, _ = fixable_counts(diagnostics, settings.unsafe_fixes)
        if fixable and not err:
            click.echo("Run `torchlint fix --apply` to fix them." if not settings.unsafe_fixes
                       else "Run `torchlint fix --apply --unsafe-fixes` to fix them.")


def _guarded(body: Callable[[], int]) -> None:
    """Exit codes like Ruff's: 0 clean, 1 problems, 2 usage, configuration or internal error."""
    try:
        code = body()
    except ConfigError as exc:
        click.echo(f"torchlint: error: {exc}", err=True)
        code = EXIT_ERROR
    except click.exceptions.Exit:
        raise
    except Exception as exc:  # an internal error must still say what happened, never exit 1
        import traceback

        click.echo(f"torchlint: internal error: {type(exc).__name__}: {_describe(exc)}", err=True)
        click.echo("".join(traceback.format_exc(limit=-20)), err=True)  # the innermost frames: never megabytes
        click.echo("Please report this at https://github.com/torchlint/torchlint/issues", err=True)
        code = EXIT_ERROR
    sys.exit(code)


def _describe(exc: BaseException) -> str:
    try:
        return str(exc)[:2000]
    except (RecursionError, MemoryError):
        return "(its message cannot be shown)"


@cli.command()
@common_options
def check(paths: Tuple[str, ...], **opts) -> None:
    """Report slow PyTorch patterns in PATHS (default: the current folder); '-' reads stdin."""

    def body() -> int:
        settings = _settings_from_options(opts, paths)
        job = Job(settings, mode="check", cache_dir=_cache_dir(opts, settings),
                  with_edits=opts["output_format"] == "json" and not opts["statistics"])
        results = [_stdin_result(opts, job)] if paths == ("-",) else _collect(paths, settings, opts, job)
        diagnostics = sorted((d for r in results for d in r.diagnostics), key=lambda d: d.sort_key)
        _emit_diagnostics(diagnostics, opts, settings)
        return EXIT_PROBLEMS if diagnostics and not opts["exit_zero"] else EXIT_CLEAN

    _guarded(body)


@cli.command()
@common_options
@click.option("--apply", is_flag=True, help="Write the fixes (default: show them as a diff and write nothing).")
def fix(paths: Tuple[str, ...], apply: bool, **opts) -> None:
    """Fix slow patterns in PATHS: show a diff, or write the files with --apply."""

    def body() -> int:
        settings = _settings_from_options(opts, paths)
        job = Job(settings, mode="fix", apply=apply and paths != ("-",), unsafe=settings.unsafe_fixes,
                  cache_dir=_cache_dir(opts, settings))
        if paths == ("-",):
            return _fix_stdin(job, opts, settings, apply)
        results = _collect(paths, settings, opts, job)
        return _report_fix(results, opts, settings, apply)

    _guarded(body)


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
            diff = unified_diff(r.path, r.original or "", r.fixed or "")
            click.echo(color_diff(diff) if color else diff, nl=False, color=color)
        if not opts["quiet"]:
            total = sum(applied.values())
            files = len(changed)
            click.echo(f"Would fix {total} problem{'s' if total != 1 else ''} in {files} file{'s' if files != 1 else ''}"
                       f"{_hidden_note(remaining, settings)}.", err=True)
        return EXIT_PROBLEMS if changed and not opts["exit_zero"] else EXIT_CLEAN
    if opts["output_format"] == "text" and not opts["quiet"]:
        for r in results:
            for code, count in sorted(r.applied.items()):
                click.echo(f"{r.path}: fixed {count} x {code} ({get_rule(code).name})")
    _emit_diagnostics(remaining, opts, settings)
    if not opts["quiet"] and opts["output_format"] == "text":
        total = sum(applied.values())
        files = sum(1 for r in results if r.written)
        click.echo(f"Fixed {total} problem{'s' if total != 1 else ''} in {files} file{'s' if files != 1 else ''}.")
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

        click.echo(json.dumps([
            {"code": r.code, "name": r.name, "fix": r.fix_availability.value, "summary": r.summary, "url": r.url()}
            for r in rules
        ], indent=2))
        return
    fix_label = {FixAvailability.NONE: "", FixAvailability.SOMETIMES: "fix (sometimes)", FixAvailability.ALWAYS: "fix"}
    name_width = max((len(r.name) for r in rules), default=4)
    for r in rules:
        click.echo(f"{r.code}  {r.name:<{name_width}}  {fix_label[r.fix_availability]:<15}  {r.summary}")


@cli.command()
@click.argument("code")
def explain(code: str) -> None:
    """Print the full documentation of rule CODE (e.g. TL201)."""

    def body() -> int:
        rule = get_rule(code)
        click.echo(f"# {rule.code} {rule.name}\n")
        click.echo(f"Fix: {rule.fix_availability.value}\n")
        click.echo(rule.doc())
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
        click.echo(f"torchlint bench needs PyTorch: pip install 'torchlint[runtime]' ({exc})", err=True)
        sys.exit(EXIT_ERROR)
    sys.exit(harness.main(list(ctx.args)))


def main(argv: Optional[Sequence[str]] = None) -> None:
    cli.main(args=list(argv) if argv is not None else None, prog_name="torchlint")


if __name__ == "__main__":
    main()
