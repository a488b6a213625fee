"""How results are shown: text lines, JSON, statistics, diffs and fix summaries."""

from __future__ import annotations

import json
from collections import Counter
from typing import Dict, List, Sequence

import click

from torchlint.run.fileio import split_lines
from torchlint.rule import Applicability, Diagnostic


def fixable_counts(diagnostics: Sequence[Diagnostic], unsafe: bool) -> tuple:
    """(fixable with the current settings, more that --unsafe-fixes would fix)."""
    safe = sum(d.fix is Applicability.SAFE for d in diagnostics)
    unsafe_only = sum(d.fix is Applicability.UNSAFE for d in diagnostics)
    return (safe + unsafe_only, 0) if unsafe else (safe, unsafe_only)


def printable(text: str) -> str:
    """``text`` with control and other unprintable characters escaped (``\\n``, ``\\x1b``, ``\\u2028``):
    a newline in a file name or a message must not start a line of its own, nor an escape sequence reach
    the terminal."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def format_text(d: Diagnostic, color: bool, unsafe: bool = False) -> str:
    shown = printable(d.path)
    path = click.style(shown, bold=True) if color else shown
    cell = f"cell {d.cell}:" if d.cell is not None else ""
    location = f"{path}:{cell}{d.line}:{d.column}:"
    code = click.style(d.code, fg="red", bold=True) if color else d.code
    marker = "[*] " if d.fix is Applicability.SAFE or (unsafe and d.fix is Applicability.UNSAFE) else ""
    return f"{location} {code} {marker}{printable(d.message)}"


def summary_line(diagnostics: Sequence[Diagnostic], unsafe: bool) -> str:
    if not diagnostics:
        return "All checks passed!"
    fixable, hidden = fixable_counts(diagnostics, unsafe)
    noun = "problem" if len(diagnostics) == 1 else "problems"
    extra = f"; {hidden} more with --unsafe-fixes" if hidden else ""
    return f"Found {len(diagnostics)} {noun} ({fixable} fixable{extra})."


def statistics_lines(diagnostics: Sequence[Diagnostic], unsafe: bool) -> List[str]:
    counts = Counter(d.code for d in diagnostics)
    names: Dict[str, str] = {d.code: d.name for d in diagnostics}
    fixable = {d.code for d in diagnostics if d.fix is Applicability.SAFE or (unsafe and d.fix is Applicability.UNSAFE)}
    width = max((len(str(n)) for n in counts.values()), default=1)
    return [
        f"{counts[code]:>{width}}\t{code}\t{'[*]' if code in fixable else '[ ]'} {names[code]}"
        for code in sorted(counts, key=lambda c: (-counts[c], c))
    ]


def statistics_json(diagnostics: Sequence[Diagnostic], unsafe: bool) -> str:
    counts = Counter(d.code for d in diagnostics)
    names = {d.code: d.name for d in diagnostics}
    fixable = Counter(d.code for d in diagnostics if d.fix is Applicability.SAFE or (unsafe and d.fix is Applicability.UNSAFE))
    return json.dumps([
        {"code": code, "name": names[code], "count": counts[code], "fixable": fixable[code]}
        for code in sorted(counts, key=lambda c: (-counts[c], c))
    ], indent=2)


def diagnostic_json(d: Diagnostic) -> dict:
    from torchlint.registry import manifest
    from torchlint.rule import rule_url

    fix = None
    if d.fix is not None:
        fix = {
            "applicability": d.fix.value,
            "edits": [
                {
                    "location": {"line": e.line, "column": e.column},
                    "end_location": {"line": e.end_line, "column": e.end_column},
                    "content": e.content,
                }
                for e in d.edits
            ],
        }
    return {
        "code": d.code,
        "name": d.name,
        "message": d.message,
        "path": d.path,
        "cell": d.cell,
        "line": d.line,
        "column": d.column,
        "end_line": d.end_line,
        "end_column": d.end_column,
        "fix": fix,
        "url": rule_url(d.code) if d.code in manifest() else None,
    }


def format_json(diagnostics: Sequence[Diagnostic]) -> str:
    return json.dumps([diagnostic_json(d) for d in diagnostics], indent=2)


def unified_diff(path: str, before: str, after: str) -> str:
    import difflib

    lines = difflib.unified_diff(
        split_lines(before), split_lines(after), fromfile=f"a/{printable(path)}", tofile=f"b/{printable(path)}"
    )  # Python's lines: a form feed inside a line is no line end
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def color_diff(text: str) -> str:
    out = []
    for line in split_lines(text):
        if line.startswith(("+++", "---")):
            out.append(click.style(line, bold=True))
        elif line.startswith("+"):
            out.append(click.style(line, fg="green"))
        elif line.startswith("-"):
            out.append(click.style(line, fg="red"))
        elif line.startswith("@@"):
            out.append(click.style(line, fg="cyan"))
        else:
            out.append(line)
    return "".join(out)
