"""``torchlint server``: a Language Server (LSP, over stdio) for editors, built on pygls.

It publishes torchlint's diagnostics when a Python file is opened, changed or saved, and offers each fix as
a code action: safe fixes as preferred quick fixes, unsafe ones as ``(unsafe)``-labelled rewrites, plus a
``source.fixAll.torchlint`` action that applies every safe fix, as ``torchlint fix --apply`` would. Settings
come from the configuration file closest to each document, as on the command line.

Install pygls beside torchlint (``pip install pygls``, or the ``[server]`` extra); it is imported only by this command.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Tuple

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace import PositionCodec

from torchlint import __version__
from torchlint.config import ConfigError
from torchlint.config.tree import ConfigTree, forget_configuration_files
from torchlint.engine import fix_source, lint_source
from torchlint.run.fileio import split_lines
from torchlint.rule import Applicability, Diagnostic, Edit
from torchlint.run.job import rules_for

SOURCE = "torchlint"
FIX_ALL_KIND = "source.fixAll.torchlint"
DEBOUNCE_S = 0.3  # keystrokes closer together than this are linted once, after the last
LINT_THREADS = 4  # so a slow document never holds up another's answer


@dataclass(frozen=True)
class _Document:
    """The editor's text of one document, exactly (a new one for every change, so a run can tell whether
    the text it linted is still the current one)."""

    text: str
    version: Optional[int]

    @property
    def lines(self) -> List[str]:
        return split_lines(self.text)


@dataclass
class _Finding:
    lsp: types.Diagnostic
    diagnostic: Diagnostic


class TorchlintServer(LanguageServer):
    """Keeps its own copy of each open document (pygls's splits lines where ``str.splitlines`` does, at form
    feeds and \\u2028 too, so an edit below one lands on the wrong line; LSP, like Python, ends lines only at
    LF, CRLF and CR), and lints on a pool of threads: each document's changes wait ``DEBOUNCE_S`` for the
    next keystroke, one run per document at a time, and a run whose text changed meanwhile is dropped and
    followed by one run on the latest text."""

    def __init__(self) -> None:
        super().__init__("torchlint", __version__)
        self.documents: Dict[str, _Document] = {}
        self.findings: Dict[str, Tuple[_Document, List[_Finding]]] = {}  # with the text they were found in
        # each fixable finding's edits, made when code actions are first asked for a text (a keystroke's
        # run makes fixes on LibCST's tree of just their statements, and renders none)
        self._edits: Dict[str, Tuple[_Document, Dict[tuple, List[types.TextEdit]]]] = {}
        self._timers: Dict[str, asyncio.TimerHandle] = {}
        self._running: Set[str] = set()  # documents with a run in flight
        self._pool = ThreadPoolExecutor(max_workers=LINT_THREADS, thread_name_prefix="torchlint-lint")

    @property
    def codec(self) -> PositionCodec:
        return self.workspace.position_codec

    # --- the documents --------------------------------------------------------------------------
    def open(self, uri: str, text: str, version: Optional[int]) -> None:
        self.documents[uri] = _Document(text, version)
        self.schedule(uri, 0.0)

    def change(self, params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        document = self.documents.get(uri)
        if document is None:
            return  # never opened: nothing to lint
        text = document.text
        for change in params.content_changes:
            text = apply_change(text, change, self.codec)
        self.documents[uri] = _Document(text, params.text_document.version)
        self.schedule(uri, DEBOUNCE_S)

    def close(self, uri: str) -> None:
        timer = self._timers.pop(uri, None)
        if timer is not None:
            timer.cancel()
        self.documents.pop(uri, None)
        self.findings.pop(uri, None)
        self._edits.pop(uri, None)
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    # --- linting --------------------------------------------------------------------------------
    def document_path(self, uri: str) -> Optional[Path]:
        path = to_fs_path(uri)
        return Path(path) if path else None

    def schedule(self, uri: str, delay: float) -> None:
        """Lint ``uri`` after ``delay`` seconds, in place of any run planned and not yet started."""
        timer = self._timers.pop(uri, None)
        if timer is not None:
            timer.cancel()
        self._timers[uri] = asyncio.get_running_loop().call_later(delay, self._start, uri)

    def _start(self, uri: str) -> None:
        self._timers.pop(uri, None)
        document = self.documents.get(uri)
        if document is None or uri in self._running:
            return  # closed; or a run is in flight, after which the latest text is linted (_finished)
        self._running.add(uri)
        future = self._pool.submit(self._lint, uri, document)
        loop = asyncio.get_running_loop()
        future.add_done_callback(lambda done: loop.call_soon_threadsafe(self._finished, uri, document, done))

    def _finished(self, uri: str, document: _Document, done: "Future[Optional[List[_Finding]]]") -> None:
        self._running.discard(uri)
        current = self.documents.get(uri)
        if current is not document:  # changed or closed while it ran: its answer is stale
            if current is not None and uri not in self._timers:
                self._start(uri)
            return
        try:
            findings = done.result()
        except Exception as error:  # noqa: BLE001 - a configuration error, or a crash: said, never fatal
            why = str(error) if isinstance(error, ConfigError) else f"internal error: {type(error).__name__}: {error}"
            self.window_show_message(types.ShowMessageParams(types.MessageType.Error, f"torchlint: {why}"))
            return
        if findings is None:
            return
        self.findings[uri] = (document, findings)
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
            uri=uri, version=document.version, diagnostics=[f.lsp for f in findings]))

    def _lint(self, uri: str, document: _Document) -> Optional[List[_Finding]]:
        """The findings of one text (on a lint thread); None for a file torchlint does not check."""
        path = self.document_path(uri)
        if path is None or path.suffix not in (".py", ".pyi"):
            return None
        settings, rules = _configured(path)
        outcome = lint_source(document.text, str(path), rules, settings)
        lines = document.lines
        codec = self.codec
        findings = []
        for d in outcome.diagnostics:
            lsp_range = codec.range_to_client_units(lines, _range(d.line, d.column, d.end_line, d.end_column))
            severity = types.DiagnosticSeverity.Error if d.code == "TL000" else types.DiagnosticSeverity.Warning
            lsp = types.Diagnostic(
                range=lsp_range, message=d.message, severity=severity, code=d.code, source=SOURCE,
                code_description=types.CodeDescription(href=_url(d.code)),
            )
            findings.append(_Finding(lsp, d))
        return findings

    def edits_of(self, uri: str, document: _Document) -> Dict[tuple, List[types.TextEdit]]:
        """Each fixable finding's edits in ``document`` (on a lint thread), by ``_key``; made once per text."""
        made_for, edits = self._edits.get(uri, (None, {}))
        if made_for is document:
            return edits
        path = self.document_path(uri)
        edits = {}
        if path is not None:
            settings, rules = _configured(path)
            outcome = lint_source(document.text, str(path), rules, settings, with_edits=True)
            lines, codec = document.lines, self.codec
            for d in outcome.diagnostics:
                if d.edits:
                    edits[_key(d)] = [types.TextEdit(codec.range_to_client_units(lines, _edit_range(e)), e.content)
                                      for e in d.edits]
        self._edits[uri] = (document, edits)
        return edits

    # --- code actions ---------------------------------------------------------------------------
    async def code_actions(self, params: types.CodeActionParams) -> List[types.CodeAction]:
        uri = params.text_document.uri
        wanted = [str(getattr(k, "value", k)) for k in params.context.only or []]
        document = self.documents.get(uri)
        found_in, findings = self.findings.get(uri, (None, []))
        fresh = found_in is document
        if not fresh:
            findings = []  # found in an older text: their edits would land in the wrong places
        wanted_here = [f for f in findings if f.diagnostic.fix is not None and _overlaps(f.lsp.range, params.range)]
        edits: Dict[tuple, List[types.TextEdit]] = {}
        if wanted_here and document is not None:
            edits = await asyncio.get_running_loop().run_in_executor(self._pool, self.edits_of, uri, document)
        actions: List[types.CodeAction] = []
        for finding in wanted_here:
            d = finding.diagnostic
            if not edits.get(_key(d)):
                continue
            safe = d.fix is Applicability.SAFE
            kind = types.CodeActionKind.QuickFix if safe else types.CodeActionKind.RefactorRewrite
            if wanted and not any(kind.value.startswith(k) for k in wanted):
                continue
            title = f"Fix {d.code} ({d.name})" if safe else f"Fix {d.code} ({d.name}) (unsafe: can change behaviour)"
            actions.append(types.CodeAction(
                title=title, kind=kind, diagnostics=[finding.lsp], is_preferred=safe,
                edit=types.WorkspaceEdit(changes={uri: edits[_key(d)]}),
            ))
        # Fix all on save comes right after the last keystroke, before its run: it fixes the latest text itself
        worth_trying = not fresh or any(f.diagnostic.fix is Applicability.SAFE for f in findings)
        if document is not None and worth_trying and (not wanted or any(FIX_ALL_KIND.startswith(k) for k in wanted)):
            fix_all = await asyncio.get_running_loop().run_in_executor(self._pool, self.fix_all, uri, document)
            if fix_all is not None:
                actions.append(fix_all)
        return actions

    def fix_all(self, uri: str, document: _Document) -> Optional[types.CodeAction]:
        """Every safe fix as one edit of the whole text (on a lint thread)."""
        path = self.document_path(uri)
        if path is None:
            return None
        settings, rules = _configured(path)
        outcome = fix_source(document.text, str(path), rules, settings, unsafe=False)
        if outcome.source == document.text or outcome.errors:
            return None
        whole = types.Range(types.Position(0, 0), types.Position(len(document.lines), 0))
        return types.CodeAction(
            title="Fix all safe torchlint problems", kind=FIX_ALL_KIND,
            edit=types.WorkspaceEdit(changes={uri: [types.TextEdit(whole, outcome.source)]}),
        )


def apply_change(text: str, change: types.TextDocumentContentChangeEvent, codec: PositionCodec) -> str:
    """``text`` with one LSP content change applied, lines counted as LSP counts them."""
    if not isinstance(change, types.TextDocumentContentChangePartial):
        return change.text  # the whole document
    lines = split_lines(text)
    start, end = (_offset(lines, position, codec) for position in (change.range.start, change.range.end))
    return text[:start] + change.text + text[max(start, end):]


def _offset(lines: Sequence[str], position: types.Position, codec: PositionCodec) -> int:
    """The character offset of an LSP position (in the client's code units; one past a line's end means
    its end, as LSP says)."""
    if position.line >= len(lines):
        return sum(map(len, lines))
    body = lines[position.line].rstrip("\r\n")
    column = units = 0
    while column < len(body) and units < position.character:
        units += codec.client_num_units(body[column])
        column += 1
    return sum(map(len, lines[: position.line])) + column


def _configured(path: Path):
    """The settings of the configuration file closest to ``path``, as on the command line, and its rules."""
    settings = ConfigTree(cwd=path.parent.resolve()).for_path(path)
    return settings, rules_for(settings, path)


def _key(d: Diagnostic) -> tuple:
    """A finding the same in a run with edits and one without."""
    return d.code, d.line, d.column, d.end_line, d.end_column, d.message


def _range(line: int, column: int, end_line: int, end_column: int) -> types.Range:
    """A 1-based, end-exclusive torchlint span as an LSP range in code points (converted by the caller)."""
    return types.Range(types.Position(line - 1, column - 1), types.Position(end_line - 1, end_column - 1))


def _edit_range(edit: Edit) -> types.Range:
    return _range(edit.line, edit.column, edit.end_line, edit.end_column)


def _overlaps(a: types.Range, b: types.Range) -> bool:
    def key(p: types.Position) -> Tuple[int, int]:
        return (p.line, p.character)

    return key(a.start) <= key(b.end) and key(b.start) <= key(a.end)


def _url(code: str) -> str:
    from torchlint.report.docs import BASE_URL

    return f"{BASE_URL}/{code}.md"


def create_server() -> TorchlintServer:
    server = TorchlintServer()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: TorchlintServer, params: types.DidOpenTextDocumentParams) -> None:
        forget_configuration_files()
        ls.open(params.text_document.uri, params.text_document.text, params.text_document.version)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: TorchlintServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.change(params)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: TorchlintServer, params: types.DidSaveTextDocumentParams) -> None:
        forget_configuration_files()  # a saved configuration file changes the settings
        if params.text_document.uri in ls.documents:
            ls.schedule(params.text_document.uri, 0.0)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: TorchlintServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.close(params.text_document.uri)

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[
            types.CodeActionKind.QuickFix, types.CodeActionKind.RefactorRewrite, FIX_ALL_KIND,
        ]),
    )
    async def code_action(ls: TorchlintServer, params: types.CodeActionParams) -> List[types.CodeAction]:
        return await ls.code_actions(params)

    return server


def main() -> None:
    create_server().start_io()
