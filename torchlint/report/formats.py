"""Output formats for CI systems and people, as Ruff names them (``--output-format``).

- ``concise`` (alias ``text``): ``path:line:col: CODE message``, one line each (torchlint's default).
- ``full``: the same line, then the source lines with the finding underlined and its fix as a diff.
- ``json``: one array; ``json-lines``: one object per line (same objects).
- ``github``: GitHub Actions workflow commands (``::error file=...``), escaped as GitHub requires.
- ``sarif``: SARIF 2.1.0 for code scanning: every rule (id, name, descriptions, help, help URI), results
  with relative URIs, regions, stable fingerprints and fixes.
- ``gitlab``: GitLab Code Quality (a JSON array of issues with unique fingerprints).
- ``junit``: JUnit XML, one test suite per file and one failed test case per finding.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple
from urllib.parse import quote

from torchlint import __version__
from torchlint.report.reporters import diagnostic_json, printable
from torchlint.rule import Applicability, Diagnostic

FORMATS = ("concise", "text", "full", "json", "json-lines", "github", "sarif", "gitlab", "junit")
# Formats whose output carries each fix's text edits (the engine renders them only when asked).
NEEDS_EDITS = frozenset({"full", "json", "json-lines", "sarif"})
TEXT_FORMATS = frozenset({"concise", "text", "full"})  # followed by the summary line


# --- source text (full, sarif, gitlab fingerprints) ------------------------------------------------
class SourceLines:
    """The lines of each reported file (or notebook cell), read once; empty where unreadable."""

    def __init__(self) -> None:
        self._cache: Dict[Tuple[str, Optional[int]], List[str]] = {}

    def get(self, d: Diagnostic) -> List[str]:
        key = (d.path, d.cell)
        if key not in self._cache:
            self._cache[key] = _read_lines(d.path, d.cell)
        return self._cache[key]

    def line(self, d: Diagnostic, number: int) -> str:
        lines = self.get(d)
        return lines[number - 1] if 0 < number <= len(lines) else ""


def _read_lines(path: str, cell: Optional[int]) -> List[str]:
    from torchlint.run.fileio import SourceError, decode_source, split_lines

    try:
        data = Path(path).read_bytes()
        if cell is None:
            text = decode_source(data).text
        else:
            from torchlint.run.notebook import cell_source

            text = cell_source(json.loads(data.decode("utf-8-sig"))["cells"][cell - 1])
        return [line.rstrip("\r\n") for line in split_lines(text)]  # numbered as the findings are
    except (OSError, SourceError, ValueError, KeyError, IndexError, TypeError):
        return []


# --- full -------------------------------------------------------------------------------------------
def format_full(d: Diagnostic, header: str, sources: SourceLines) -> str:
    """Ruff's full format: the finding's line with one line of context, the span underlined, the fix."""
    lines = sources.get(d)
    if not lines or d.line > len(lines):
        return header
    first, last = max(1, d.line - 1), min(len(lines), d.end_line + 1)
    width = len(str(last))
    out = [header, f"{'':>{width}} |"]
    for number in range(first, last + 1):
        text = lines[number - 1]
        out.append(f"{number:>{width}} | {text}".rstrip())
        if d.line <= number <= d.end_line:
            start = d.column - 1 if number == d.line else len(text) - len(text.lstrip())
            end = d.end_column - 1 if number == d.end_line else len(text)
            if end > start:
                marks = " " * start + "^" * (end - start)
                out.append(f"{'':>{width}} | {marks}" + (f" {d.code}" if number == d.end_line else ""))
    out.append(f"{'':>{width}} |")
    fix = _fix_preview(d, lines)
    if fix:
        kind = "safe fix" if d.fix is Applicability.SAFE else "unsafe fix (--unsafe-fixes)"
        out.append(f"{'':>{width}} = {kind}:")
        out.extend(f"{'':>{width}}   {line}".rstrip() for line in fix)
    return "\n".join(out) + "\n"


def _fix_preview(d: Diagnostic, lines: List[str]) -> List[str]:
    """The lines the fix touches, before (-) and after (+), one hunk per group of nearby edits (an added
    import far above the finding is its own hunk)."""
    groups: List[List] = []
    for edit in sorted(d.edits, key=lambda e: (e.line, e.column)):
        if groups and edit.line <= max(e.end_line for e in groups[-1]) + 1:
            groups[-1].append(edit)
        else:
            groups.append([edit])
    out: List[str] = []
    for group in groups:
        hunk = _hunk(group, lines)
        if not hunk:
            return []
        out += ([f"@@ line {group[0].line} @@"] if len(groups) > 1 else []) + hunk
    return out


def _hunk(edits: List, lines: List[str]) -> List[str]:
    first = min(e.line for e in edits)
    last = max(e.end_line for e in edits)
    if last > len(lines):
        return []
    before = lines[first - 1:last]
    text = "\n".join(before)
    offsets = [0]
    for line in before:
        offsets.append(offsets[-1] + len(line) + 1)

    def offset(line: int, column: int) -> int:
        return offsets[line - first] + column - 1

    for edit in sorted(edits, key=lambda e: (e.line, e.column), reverse=True):
        text = text[:offset(edit.line, edit.column)] + edit.content + text[offset(edit.end_line, edit.end_column):]
    return [f"- {line}" for line in before] + [f"+ {line}" for line in text.split("\n")]


# --- json-lines ---------------------------------------------------------------------------------------
def format_json_lines(diagnostics: Sequence[Diagnostic]) -> str:
    return "".join(json.dumps(diagnostic_json(d)) + "\n" for d in diagnostics)


# --- github -------------------------------------------------------------------------------------------
def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def format_github(diagnostics: Sequence[Diagnostic]) -> str:
    out = []
    for d in diagnostics:
        title = f"torchlint ({d.code})"
        where = f"cell {d.cell}:" if d.cell is not None else ""
        properties = [f"title={_escape_property(title)}", f"file={_escape_property(d.path)}"]
        if d.cell is None:  # a notebook cell's lines are not the file's: annotate the file
            properties += [f"line={d.line}", f"col={d.column}", f"endLine={d.end_line}", f"endColumn={d.end_column}"]
        message = f"{d.path}:{where}{d.line}:{d.column}: {d.code} {d.message}"
        out.append(f"::error {','.join(properties)}::{_escape_data(message)}\n")
    return "".join(out)


# --- fingerprints -------------------------------------------------------------------------------------
def fingerprints(diagnostics: Sequence[Diagnostic], sources: SourceLines) -> List[str]:
    """A stable identity per finding: rule, file, cell, message and the text of its line, plus the
    occurrence count among identical ones, but not the line number (moving code keeps it)."""
    seen: Counter = Counter()
    out = []
    for d in diagnostics:
        basis = (d.code, d.path.replace(os.sep, "/"), d.cell, d.message, sources.line(d, d.line).strip())
        seen[basis] += 1
        digest = hashlib.blake2b(repr((basis, seen[basis])).encode(), digest_size=16)
        out.append(digest.hexdigest())
    return out


# --- sarif --------------------------------------------------------------------------------------------
def _uri(path: str) -> str:
    return quote(Path(path).as_posix())


def _region(line: int, column: int, end_line: int, end_column: int) -> dict:
    return {"startLine": line, "startColumn": column, "endLine": end_line, "endColumn": end_column}


def format_sarif(diagnostics: Sequence[Diagnostic], sources: SourceLines) -> str:
    from torchlint.report.docs import all_docs

    docs = all_docs()
    index = {doc.code: i for i, doc in enumerate(docs)}
    rules = [
        {
            "id": doc.code,
            "name": doc.name,
            "shortDescription": {"text": doc.summary},
            "fullDescription": {"text": doc.body.split("\n## ", 1)[0].replace("## What it does\n", "").strip()},
            "help": {"text": doc.body, "markdown": doc.markdown()},
            "helpUri": doc.url,
            "defaultConfiguration": {"level": "error"},
            "properties": {"fix": doc.fix},
        }
        for doc in docs
    ]
    results = []
    for d, fingerprint in zip(diagnostics, fingerprints(diagnostics, sources)):
        location: dict = {"artifactLocation": {"uri": _uri(d.path), "uriBaseId": "%SRCROOT%"}}
        if d.cell is None:
            location["region"] = _region(d.line, d.column, d.end_line, d.end_column)
        result = {
            "ruleId": d.code,
            "ruleIndex": index.get(d.code, 0),
            "level": "error",
            "message": {"text": d.message if d.cell is None else f"cell {d.cell}:{d.line}:{d.column}: {d.message}"},
            "locations": [{"physicalLocation": location}],
            "fingerprints": {"torchlint/v1": fingerprint},
        }
        if d.cell is not None:
            result["properties"] = {"cell": d.cell, "line": d.line, "column": d.column}
        if d.edits and d.cell is None:
            result["fixes"] = [{
                "description": {"text": f"{d.fix.value if d.fix else ''} fix".strip()},
                "artifactChanges": [{
                    "artifactLocation": {"uri": _uri(d.path), "uriBaseId": "%SRCROOT%"},
                    "replacements": [
                        {"deletedRegion": _region(e.line, e.column, e.end_line, e.end_column),
                         "insertedContent": {"text": e.content}}
                        for e in d.edits
                    ],
                }],
            }]
        results.append(result)
    log = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "torchlint",
                "version": __version__,
                "informationUri": "https://github.com/torchlint/torchlint",
                "rules": rules,
            }},
            "originalUriBaseIds": {"%SRCROOT%": {"uri": Path.cwd().resolve().as_uri() + "/"}},
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    }
    return json.dumps(log, indent=2) + "\n"


# --- gitlab -------------------------------------------------------------------------------------------
def format_gitlab(diagnostics: Sequence[Diagnostic], sources: SourceLines) -> str:
    issues = []
    for d, fingerprint in zip(diagnostics, fingerprints(diagnostics, sources)):
        where = f"cell {d.cell}:{d.line}:{d.column}: " if d.cell is not None else ""
        location: dict = {"path": Path(d.path).as_posix()}
        if d.cell is None:
            location["positions"] = {"begin": {"line": d.line, "column": d.column},
                                     "end": {"line": d.end_line, "column": d.end_column}}
        else:
            location["lines"] = {"begin": 1}
        issues.append({
            "type": "issue",
            "check_name": d.code,
            "description": f"{where}({d.code}) {d.message}",
            "categories": ["Performance"] if d.code != "TL000" else ["Bug Risk"],
            "severity": "major",
            "fingerprint": fingerprint,
            "location": location,
        })
    return json.dumps(issues, indent=2) + "\n"


# --- junit --------------------------------------------------------------------------------------------
def format_junit(diagnostics: Sequence[Diagnostic]) -> str:
    """One test suite per file, one failed test case per finding; a clean run is one passing test case.
    ``line=`` is a line of the file as CI views show it: in a notebook, the line of the ``.ipynb`` text that
    holds the finding's source line (``notebook.file_line``); the failure's text gives the cell's own line."""
    from xml.etree import ElementTree

    by_file: Dict[str, List[Diagnostic]] = defaultdict(list)
    for d in diagnostics:
        by_file[d.path].append(d)
    root = ElementTree.Element("testsuites", name="torchlint", tests=str(max(len(diagnostics), 1)),
                               failures=str(len(diagnostics)), errors="0")
    if not diagnostics:
        suite = ElementTree.SubElement(root, "testsuite", name="torchlint", tests="1", failures="0", errors="0")
        ElementTree.SubElement(suite, "testcase", name="No problems found")
    for raw_path, found in by_file.items():
        path = printable(raw_path)  # XML 1.0 cannot hold most control characters, even escaped
        suite = ElementTree.SubElement(root, "testsuite", name=path, tests=str(len(found)),
                                       failures=str(len(found)), errors="0")
        raw = _notebook_text(raw_path) if any(d.cell is not None for d in found) else None
        for d in found:
            where = f"cell {d.cell}, " if d.cell is not None else ""
            line = d.line if d.cell is None else _notebook_file_line(raw, d)
            case = ElementTree.SubElement(suite, "testcase", name=f"torchlint.{d.code}",
                                          classname=Path(path).with_suffix("").as_posix().replace("/", "."),
                                          file=path, line=str(line))
            message = printable(d.message)
            failure = ElementTree.SubElement(case, "failure", message=message, type=d.code)
            failure.text = f"{where}line {d.line}, col {d.column}, {message}"
    ElementTree.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(root, encoding="unicode") + "\n"


def _notebook_text(path: str) -> Optional[str]:
    try:
        return Path(path).read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return None


def _notebook_file_line(raw: Optional[str], d: Diagnostic) -> int:
    """The finding's line in the notebook's file; line 1 (the file) where the file cannot be read back."""
    from torchlint.run.notebook import file_line

    assert d.cell is not None
    return (file_line(raw, d.cell, d.line) if raw is not None else None) or 1


def render(diagnostics: Sequence[Diagnostic], output_format: str) -> str:
    """Every format but the text ones (which the CLI prints line by line with colour and a summary)."""
    sources = SourceLines()
    if output_format == "json-lines":
        return format_json_lines(diagnostics)
    if output_format == "github":
        return format_github(diagnostics)
    if output_format == "sarif":
        return format_sarif(diagnostics, sources)
    if output_format == "gitlab":
        return format_gitlab(diagnostics, sources)
    if output_format == "junit":
        return format_junit(diagnostics)
    raise ValueError(f"not a machine format: {output_format}")
