"""Jupyter notebooks: check and fix the code cells of an ``.ipynb`` as one program.

A notebook runs top to bottom in one namespace (imports in cell 1, the training loop in cell 5), so its code
cells are joined into one Python text and analysed together. Each cell starts with a marker comment line
(``# torchlint-cell N``) that maps findings back to ``train.ipynb:cell N:line:col`` and, after fixing,
splits the text back into cells. IPython syntax is not Python: line magics, shell escapes and help
(``%time``, ``!pip``, ``x = !ls``, ``model?``) at the start of a logical line, as IPython reads them, and a
cell's one-line ``from __future__ import ...`` (legal at the top of any cell, not inside the joined program) stand
in the program as ``pass`` placeholders and are put back verbatim; cells that start with a cell magic (``%%bash``)
are left out entirely, and so is a code cell that does not parse alone (a Python 2 ``print x``, an exercise's
``criterion = # TODO``): it gets its own syntax error, never a change, and the others are still checked and
fixed (``failing_cells``). Writing back replaces only the sources of the cells that changed, and the JSON keeps
its key order, indentation, outputs and metadata: each changed source is spliced into the original text, so
every other byte stays as it was.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from torchlint.run.cache import Cache
from torchlint.run.discovery import display_path
from torchlint.engine import (SyntaxProblem, error_diagnostic, fix_source, lint_source, rules_that_may_fire,
                              syntax_problem)
from torchlint.run.fileio import (NOTEBOOK_READ_FACTOR, SourceError, SourceText, line_ending, notebook_too_large,
                                  read_regular, split_lines, too_large_message)
from torchlint.rule import LINE_REFERENCE, Diagnostic, Edit
from torchlint.run.job import FileResult, Job, prepare_write, project_of, rules_for

if TYPE_CHECKING:
    from torchlint.facts.project import ProjectModel

_MARKER = "# torchlint-cell {}"
_MARKER_LINE = re.compile(r"^# torchlint-cell (\d+)$")
_PLACEHOLDER = "pass  # torchlint-magic {}"
_PLACEHOLDER_LINE = re.compile(r"^(\s*)pass  # torchlint-magic (\d+)$")
# IPython-only lines: magics, shell escapes, help, and their assigned forms (`files = !ls`).
_MAGIC = re.compile(r"^\s*(?:[%!?]|[\w.]+\s*=\s*[%!])")
_HELP = re.compile(r"^\s*[\w.]+\s*\?\??\s*$")
# A one-line `from __future__ import ...`: IPython compiles each cell alone, where it may open any cell, but
# the cells' joined program refuses it after other statements; it stands there as a placeholder too.
_FUTURE = re.compile(r"^\s*from\s+__future__\s+import\s+[\w\s,]+$")


class NotebookError(Exception):
    """Not a notebook torchlint can read: reported as TL000."""


def is_ipython_line(line: str) -> bool:
    return bool(_MAGIC.match(line) or _HELP.match(line))


class _LogicalLines:
    """Where a cell's logical lines start, read line by line: IPython takes ``%``, ``!`` and ``?`` as its own only
    at the start of a logical line, so a line inside brackets, a triple-quoted string or after a ``\\`` is Python
    (``print("%d"\\n      % n)`` continues a call). A scanner of brackets, strings and comments, not a
    tokenizer: it only has to know whether a line ends inside something open."""

    def __init__(self) -> None:
        self._depth = 0
        self._string: Optional[str] = None  # the closing quotes of a string still open at the line's end
        self._continued = False  # the line ended with a backslash

    def starts_here(self) -> bool:
        return self._depth == 0 and self._string is None and not self._continued

    def read(self, line: str) -> None:
        i, n = 0, len(line)
        self._continued = False
        while i < n:
            if self._string is not None:
                i = self._past_string(line, i)
                if self._string is not None:
                    if len(self._string) == 1 and not line.endswith("\\"):
                        self._string = None  # an unterminated one-line string: CPython's error, not ours
                    return
                continue
            c = line[i]
            if c == "#":
                return
            if c in "([{":
                self._depth += 1
            elif c in ")]}":
                self._depth = max(0, self._depth - 1)
            elif c in "\"'":
                self._string = c * 3 if line.startswith(c * 3, i) else c
                i += len(self._string)
                continue
            elif c == "\\" and i == n - 1:
                self._continued = True
            i += 1

    def _past_string(self, line: str, i: int) -> int:
        """Past the end of the open string on ``line`` from ``i`` (closing it), or ``len(line)``."""
        quote, n = self._string, len(line)
        while i < n:
            if line[i] == "\\":
                i += 2  # an escaped character, the closing quote included (raw strings too)
            elif line.startswith(quote, i):  # type: ignore[arg-type]
                self._string = None
                return i + len(quote)  # type: ignore[arg-type]
            else:
                i += 1
        return n


def _is_text(source: Any) -> bool:
    """nbformat's multiline string: a string or a list of strings."""
    return isinstance(source, str) or (isinstance(source, list) and all(isinstance(s, str) for s in source))


def cell_source(cell: Dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


@dataclass
class NotebookProgram:
    """The code cells of one notebook as one Python text, with the map back to cells."""

    notebook: Dict[str, Any]
    raw: str
    text: str
    # program line (1-based; index 0 unused) -> (cell number, 1-based; line in that cell, 0 for the marker)
    line_map: List[Tuple[int, int]]
    cells: List[int]  # the cell numbers in the program, in order
    magics: List[str] = field(default_factory=list)  # placeholder number -> the original line, unindented
    # code cells left out of the program for their syntax error (``failing_cells``), in the cell's coordinates
    set_aside: Dict[int, SyntaxProblem] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: str) -> "NotebookProgram":
        try:
            notebook = json.loads(raw)
        except ValueError as exc:
            raise NotebookError(f"not a valid notebook: {exc}") from None
        except RecursionError:
            raise NotebookError("not a valid notebook: its JSON is nested too deeply to read") from None
        cells = notebook.get("cells") if isinstance(notebook, dict) else None
        if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
            raise NotebookError("not a valid notebook: no list of cells (nbformat 4 is required)")
        for index, cell in enumerate(cells):
            if not _is_text(cell.get("source", "")):
                raise NotebookError(f"not a valid notebook: the source of cell {index + 1} is not text")
        return cls._of(notebook, raw, {})

    def without(self, failing: Dict[int, SyntaxProblem]) -> "NotebookProgram":
        """The program of the other code cells: ``failing``'s are set aside, never checked nor written."""
        return self._of(self.notebook, self.raw, {**self.set_aside, **failing})

    @classmethod
    def _of(cls, notebook: Dict[str, Any], raw: str, set_aside: Dict[int, SyntaxProblem]) -> "NotebookProgram":
        lines: List[str] = []
        line_map: List[Tuple[int, int]] = [(0, 0)]
        program = cls(notebook, raw, "", line_map, [], set_aside=set_aside)
        for index, cell in enumerate(notebook["cells"]):
            source = cell_source(cell)
            if cell.get("cell_type") != "code" or source.lstrip().startswith("%%"):
                continue  # markdown, raw, or a cell magic (%%bash, %%timeit...): not Python
            number = index + 1
            if number in set_aside:
                continue
            program.cells.append(number)
            cell_lines = split_lines(source)  # each keeps its ending, so a fixed cell keeps CRLF or CR
            # the marker ends as the cell's lines do: LibCST gives the lines a fix adds the first ending it sees
            lines.append(_MARKER.format(number) + ((line_ending(cell_lines[0]) if cell_lines else "") or "\n"))
            line_map.append((number, 0))
            python = _LogicalLines()
            for line_number, line in enumerate(cell_lines, start=1):
                body, ending = line.rstrip("\r\n"), line_ending(line) or "\n"
                if python.starts_here() and (is_ipython_line(body) or _FUTURE.match(body)):
                    program.magics.append(body.lstrip())
                    body = body[: len(body) - len(body.lstrip())] + _PLACEHOLDER.format(len(program.magics) - 1)
                else:
                    python.read(body)
                lines.append(body + ending)
                line_map.append((number, line_number))
        program.text = "".join(lines)
        try:
            program.text.encode("utf-8")
        except UnicodeEncodeError as exc:  # JSON's "\ud800": no Python source can hold a lone surrogate
            line = len(split_lines(program.text[: exc.start + 1]))
            raise NotebookError(f"cell {line_map[line][0]} holds a lone surrogate ({program.text[exc.start]!r}), "
                                "which no Python source can contain") from None
        return program

    # --- positions -----------------------------------------------------------------------------
    def locate(self, line: int, column: int) -> Tuple[int, int, int]:
        """(cell, line, column) of a program position; a marker line stands for the start of its cell."""
        line = min(max(line, 1), len(self.line_map) - 1) if len(self.line_map) > 1 else 1
        cell, cell_line = self.line_map[line] if len(self.line_map) > 1 else (1, 1)
        return (cell, 1, 1) if cell_line == 0 else (cell, cell_line, column)

    def check(self, shown: str, rules, job: Job, project: Optional["ProjectModel"] = None) -> List[Diagnostic]:
        """The program's findings, in cell coordinates, after the syntax errors of the cells set aside."""
        if not self.text:  # every code cell set aside
            return self.in_cells(shown, [])
        return self.in_cells(shown, lint_source(self.text, shown, rules, job.settings, job.with_edits,
                                                top_level_await=True, project=project).diagnostics)

    def in_cells(self, shown: str, diagnostics: List[Diagnostic]) -> List[Diagnostic]:
        """The program's ``diagnostics`` in cell coordinates, with one TL000 for each cell set aside (at its
        syntax error), in the order of the cells."""
        errors = [replace(error_diagnostic(shown, str(problem), problem.line, problem.column), cell=cell)
                  for cell, problem in self.set_aside.items()]
        return sorted(errors + [self.to_cells(d) for d in diagnostics], key=lambda d: d.sort_key)

    def after_fix(self, fixed: str) -> "NotebookProgram":
        """This program with the text ``fixed``, whose lines a fix has moved: its findings are placed in the
        cells ``cell_sources`` writes (what a fix put above the first marker opens the first cell)."""
        line_map: List[Tuple[int, int]] = [(0, 0)]
        number, line_number, preamble, marked = self.cells[0] if self.cells else 1, 0, 0, False
        for line in split_lines(fixed):
            marker = _MARKER_LINE.match(line.rstrip("\r\n"))
            if marker:
                number, line_number = int(marker.group(1)), 0 if marked else preamble
                marked = True
                line_map.append((number, 0))
                continue
            line_number += 1
            preamble = preamble if marked else line_number
            line_map.append((number, line_number))
        return replace(self, text=fixed, line_map=line_map)

    def _cell_reference(self, match: "re.Match[str]") -> str:
        cell, line, _ = self.locate(int(match.group(1)), 1)
        return f"cell {cell}, line {line}"

    def to_cells(self, d: Diagnostic) -> Diagnostic:
        cell, line, column = self.locate(d.line, d.column)
        end_cell, end_line, end_column = self.locate(d.end_line, d.end_column)
        if end_cell != cell:
            end_line, end_column = line, column
        edits = tuple(self._edit(e, cell) for e in d.edits)
        return replace(d, message=LINE_REFERENCE.sub(self._cell_reference, d.message), cell=cell, line=line,
                       column=column, end_line=end_line, end_column=end_column, edits=() if None in edits else edits)

    def _edit(self, edit: Edit, cell: int) -> Optional[Edit]:
        start_cell, line, column = self.locate(edit.line, edit.column)
        end_cell, end_line, end_column = self.locate(edit.end_line, edit.end_column)
        if start_cell != cell or end_cell != cell:
            return None  # an edit outside the finding's cell cannot be given in its coordinates
        return Edit(line, column, end_line, end_column, edit.content)

    # --- writing back --------------------------------------------------------------------------
    def cell_sources(self, fixed: str) -> Optional[Dict[int, str]]:
        """Cell number -> new source, from a fixed program; None when the cells cannot be told apart."""
        chunks: Dict[int, List[str]] = {}
        order: List[int] = []
        preamble: List[str] = []
        current: Optional[List[str]] = None
        for line in split_lines(fixed):
            marker = _MARKER_LINE.match(line.rstrip("\r\n"))
            if marker:
                order.append(int(marker.group(1)))
                current = chunks.setdefault(order[-1], [])
                continue
            (current if current is not None else preamble).append(line)
        if order != self.cells:
            return None
        if preamble and order:  # something a fix put above the first marker (an import) opens the first cell
            chunks[order[0]] = preamble + chunks[order[0]]
        used: List[int] = []
        sources: Dict[int, str] = {}
        for number, lines in chunks.items():
            restored = []
            for line in lines:
                placeholder = _PLACEHOLDER_LINE.match(line.rstrip("\r\n"))
                if placeholder:
                    used.append(int(placeholder.group(2)))
                    if used[-1] >= len(self.magics):  # the cell's own text looks like a placeholder
                        return None
                    line = placeholder.group(1) + self.magics[used[-1]] + line_ending(line)
                restored.append(line)
            if restored and not line_ending(cell_source(self.notebook["cells"][number - 1])):
                restored[-1] = restored[-1].rstrip("\r\n")  # the ending the program gave the cell's last line
            sources[number] = "".join(restored)
        if sorted(used) != list(range(len(self.magics))):
            return None
        return sources

    def rewritten(self, fixed: str) -> Optional[str]:
        """The notebook's JSON text with the changed cells' sources replaced in place, every other byte
        kept; None if that cannot be done faithfully (the cells cannot be told apart after fixing)."""
        sources = self.cell_sources(fixed)
        if sources is None:
            return None
        expected = json.loads(self.raw)
        changes = []
        for number, text in sources.items():
            cell = expected["cells"][number - 1]
            if text != cell_source(cell):
                # a list holds the text split as nbformat splits it (str.splitlines): only the layout of the
                # JSON, as the items are joined back into one text
                cell["source"] = text.splitlines(keepends=True) if isinstance(cell.get("source"), list) else text
                changes.append((number - 1, cell["source"]))
        spans = _source_spans(self.raw)
        if spans is None or any(index not in spans for index, _ in changes):
            return None
        ensure_ascii = "\\u" in self.raw and self.raw.isascii()
        out = self.raw
        for index, value in sorted(changes, key=lambda change: -spans[change[0]][0]):
            start, end = spans[index]
            out = out[:start] + _encode_like(value, self.raw, start, end, ensure_ascii) + out[end:]
        return out if json.loads(out) == expected else None


_WHITESPACE = re.compile(r"[ \t\n\r]*")


def _source_spans(raw: str) -> Optional[Dict[int, Tuple[int, int]]]:
    """Where each cell's ``"source"`` value lies in the JSON text (cell index -> (start, end))."""
    decoder = json.JSONDecoder()
    spans: Dict[int, Tuple[int, int]] = {}

    def skip(i: int) -> int:
        return _WHITESPACE.match(raw, i).end()  # type: ignore[union-attr]

    def value_end(i: int) -> int:
        return decoder.raw_decode(raw, i)[1]

    def members(i: int, on_member) -> int:
        """Walk the object starting at ``raw[i] == "{"``; returns the index after its ``}``."""
        if raw[i] != "{":
            raise ValueError("expected an object")
        i = skip(i + 1)
        if raw[i] == "}":
            return i + 1
        while True:
            if raw[i] != '"':
                raise ValueError("expected a key")
            key, i = json.decoder.scanstring(raw, i + 1)
            i = skip(i)
            if raw[i] != ":":
                raise ValueError("expected ':'")
            i = skip(on_member(key, skip(i + 1)))
            if raw[i] == "}":
                return i + 1
            if raw[i] != ",":
                raise ValueError("expected ','")
            i = skip(i + 1)

    def top(key: str, i: int) -> int:
        if key != "cells" or raw[i] != "[":
            return value_end(i)
        i, index = skip(i + 1), 0
        if raw[i] == "]":
            return i + 1
        while True:
            def in_cell(name: str, j: int, index: int = index) -> int:
                end = value_end(j)
                if name == "source":
                    spans[index] = (j, end)
                return end

            i = skip(members(i, in_cell))
            index += 1
            if raw[i] == "]":
                return i + 1
            if raw[i] != ",":
                raise ValueError("expected ','")
            i = skip(i + 1)

    try:
        members(skip(0), top)
    except (ValueError, IndexError):
        return None
    return spans


def file_line(raw: str, cell: int, line: int) -> Optional[int]:
    """The line of the notebook's JSON text that holds line ``line`` of cell ``cell`` (both 1-based): what
    a view of the file (a CI report opening ``train.ipynb`` at a line) shows. A source kept as a list has
    one item per line, each on its own line of the file; a source kept as one string is on one line."""
    spans = _source_spans(raw)
    span = spans.get(cell - 1) if spans is not None else None
    if span is None:
        return None
    start, end = span
    decoder = json.JSONDecoder()
    i, first_line = start + 1 if raw[start] == "[" else start, 1
    while i < end:
        i = _WHITESPACE.match(raw, i).end()  # type: ignore[union-attr]
        if raw[i] != '"':
            i += 1  # the list's `,` or `]`
            continue
        item_start = i
        value, i = decoder.raw_decode(raw, i)
        last_line = first_line + value.count("\n") - (1 if value.endswith("\n") else 0)
        if line <= last_line:
            return raw.count("\n", 0, item_start) + 1
        first_line = last_line + 1
    return None


def _replace_items(old: str, lines: List[str], ensure_ascii: bool) -> Optional[str]:
    """The old JSON list with only its changed strings replaced, when it holds as many items as ``lines``."""
    decoder = json.JSONDecoder()
    spans = []
    i = _WHITESPACE.match(old, 1).end()  # type: ignore[union-attr]
    try:
        while old[i] != "]":
            item, end = decoder.raw_decode(old, i)
            spans.append((i, end, item))
            i = _WHITESPACE.match(old, end).end()  # type: ignore[union-attr]
            if old[i] == ",":
                i = _WHITESPACE.match(old, i + 1).end()  # type: ignore[union-attr]
    except (ValueError, IndexError):
        return None
    if len(spans) != len(lines):
        return None
    out = old
    for (begin, end, item), line in reversed(list(zip(spans, lines))):
        if item != line:
            out = out[:begin] + json.dumps(line, ensure_ascii=ensure_ascii) + out[end:]
    return out


def _encode_like(value: Any, raw: str, start: int, end: int, ensure_ascii: bool) -> str:
    """A cell's new source as JSON, laid out like the value it replaces (one item per line, same indents)."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=ensure_ascii)
    if not value:
        return "[]"
    old = raw[start:end]
    in_place = _replace_items(old, value, ensure_ascii)
    if in_place is not None:
        return in_place
    line_start = raw.rfind("\n", 0, start) + 1
    key_indent = re.match(r"[ \t]*", raw[line_start:start]).group(0)  # type: ignore[union-attr]
    unit = re.search(r"\n([ \t]+)\S", raw)
    item = re.search(r"\n([ \t]*)\S", old)
    close = re.search(r"\n([ \t]*)\]$", old)
    items = [json.dumps(line, ensure_ascii=ensure_ascii) for line in value]
    if "\n" not in raw:  # a notebook on one line
        return "[" + ",".join(items) + "]"
    item_indent = item.group(1) if item else key_indent + (unit.group(1) if unit else " ")
    close_indent = close.group(1) if close else key_indent
    return "[\n" + ",\n".join(item_indent + text for text in items) + "\n" + close_indent + "]"


@dataclass
class NotebookResult(FileResult):
    """A notebook's result: its fix shown as per-cell diffs."""

    cell_changes: List[Tuple[int, str, str]] = field(default_factory=list)  # (cell, before, after)


def failing_cells(program: NotebookProgram) -> Dict[int, SyntaxProblem]:
    """The code cells of ``program`` that do not parse alone, as the program is parsed (top-level ``await``
    allowed, magics as placeholders), each with its syntax error at its line and column in the cell. None
    where the whole program parses and compiles: the common case costs one parse, which the check reuses."""
    if syntax_problem(program.text, top_level_await=True) is None:
        return {}
    by_cell: Dict[int, List[str]] = {}
    for line, (cell, cell_line) in zip(split_lines(program.text), program.line_map[1:]):
        if cell_line:  # not the marker
            by_cell.setdefault(cell, []).append(line)
    failing = {}
    for cell, lines in by_cell.items():
        problem = syntax_problem("".join(lines), top_level_await=True)
        if problem is not None:
            failing[cell] = problem
    return failing


def process_notebook(path: Path, job: Job) -> FileResult:
    shown = display_path(path)
    limit = job.settings.max_file_size
    try:
        data, status = read_regular(path, NOTEBOOK_READ_FACTOR * limit)
    except SourceError as exc:
        if exc.size is not None:  # over the read limit
            return FileResult(shown, [error_diagnostic(shown, notebook_too_large(exc.size, limit))])
        return FileResult(shown, [error_diagnostic(shown, str(exc), exc.line, exc.column)])
    return process_notebook_data(data, shown, path, job, status)


def decode_notebook(data: bytes) -> SourceText:
    """A notebook's JSON text; encoded back, it keeps the BOM it was read with. Raises UnicodeDecodeError."""
    return SourceText(data.decode("utf-8-sig"), "utf-8-sig" if data.startswith(codecs.BOM_UTF8) else "utf-8")


def process_notebook_data(data: bytes, shown: str, path: Path, job: Job,
                          status: Optional[os.stat_result] = None, project_files: bool = True) -> FileResult:
    """Check or fix one notebook's bytes; with ``job.apply``, the result carries the file to write over
    ``path`` (``runner.write_pending``), if it is still the file that was read (``status``, as for .py files).
    ``project_files``: read the project files the code imports, as for a .py file at ``path`` (not for stdin,
    whose text has no file, as a .py on stdin)."""
    rules = rules_for(job.settings, path)
    cache = Cache(job.cache_dir) if job.cache_dir is not None else None
    try:  # (a notebook that does not parse is never cached)
        source = decode_notebook(data)
        program = NotebookProgram.parse(source.text)
    except UnicodeDecodeError:
        return FileResult(shown, [error_diagnostic(shown, "not a valid notebook: not UTF-8")])
    except NotebookError as exc:
        return FileResult(shown, [error_diagnostic(shown, str(exc))])
    if not program.text:
        return FileResult(shown, [])
    # the project files the notebook's code imports (`import rl_utils`, whose loop trains the agent a cell
    # builds), read as for a .py file in the notebook's folder
    project = (project_of(path, program.text.encode("utf-8", "surrogatepass"), job, cache) if project_files
               else None)
    key = ""
    if cache is not None:
        key = cache.key(data, [r.code for r in rules], job.settings.torch_version,
                        "notebook+edits" if job.with_edits else "notebook")
        key = cache.with_project(key, project.digest()) if project is not None and not project.is_empty() else key
        cached = cache.get(key, shown)
        if cached is not None and (job.mode == "check" or not any(d.fix for d in cached)):
            return FileResult(shown, cached)
    code_size = len(program.text.encode("utf-8", "surrogatepass"))
    if code_size > job.settings.max_file_size:
        return FileResult(shown, [error_diagnostic(
            shown, too_large_message(code_size, job.settings.max_file_size, "the notebook's code"))])
    if rules_that_may_fire(rules, program.text, job.settings, shown):  # (else nothing is parsed, as for a .py)
        failing = failing_cells(program)
        if failing:  # a cell IPython would refuse alone is reported alone; the others are still one program
            program = program.without(failing)
    if job.mode == "check":
        result = FileResult(shown, program.check(shown, rules, job, project))
        if cache is not None:
            cache.put(key, result.diagnostics)
        return result
    result = _fix(shown, program, rules, job, project)
    if job.apply and result.changed and status is not None:
        result = prepare_write(result, path, lambda: source.encode(result.fixed or ""), (data, status), job,
                               lambda: program.check(shown, rules, job, project))
    return result


def _fix(shown: str, program: NotebookProgram, rules, job: Job, project: Optional["ProjectModel"]) -> FileResult:
    if not program.text:  # every code cell set aside
        return NotebookResult(shown, program.in_cells(shown, []))
    outcome = fix_source(program.text, shown, rules, job.settings, unsafe=job.unsafe, top_level_await=True,
                         project=project)
    if outcome.source == program.text:
        return NotebookResult(shown, program.in_cells(shown, outcome.errors + outcome.remaining), outcome.applied)
    sources = program.cell_sources(outcome.source)
    rewritten = program.rewritten(outcome.source)
    if sources is None or rewritten is None:  # nothing is written: the findings are the notebook's own
        why = "its cells could not be told apart after fixing" if sources is None else (
            "its JSON could not be rewritten faithfully")
        return NotebookResult(shown, [error_diagnostic(shown, f"fixes not applied to this notebook: {why}")]
                              + program.check(shown, rules, job, project))
    # what is left is found in the fixed text, whose lines the fixes may have moved
    fixed = program.after_fix(outcome.source)
    result = NotebookResult(shown, fixed.in_cells(shown, outcome.errors + outcome.remaining), outcome.applied)
    result.original, result.fixed = program.raw, rewritten
    for number, text in sources.items():
        before = cell_source(program.notebook["cells"][number - 1])
        if text != before:
            result.cell_changes.append((number, before, text))
    return result
