"""``torchlint server``: a Language Server (LSP, over stdio) for editors, built on pygls.

It publishes torchlint's diagnostics when a Python file is opened, changed or saved, and offers each fix as
a code action: safe fixes as preferred quick fixes, unsafe ones as ``(unsafe)``-labelled rewrites, plus a
``source.fixAll.torchlint`` action that applies every safe fix, as ``torchlint fix --apply`` would. Settings
come from the configuration file closest to each document, as on the command line.

Install pygls beside torchlint (``pip install pygls``, or the ``[server]`` extra); it is imported only by this command.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from torchlint import __version__
from torchlint.config import ConfigError
from torchlint.config_tree import ConfigTree, forget_configuration_files
from torchlint.engine import fix_source, lint_source
from torchlint.rule import Applicability, Diagnostic, Edit
from torchlint.runner import rules_for

SOURCE = "torchlint"
FIX_ALL_KIND = "source.fixAll.torchlint"


@dataclass
class _Finding:
    lsp: types.Diagnostic
    diagnostic: Diagnostic
    edits: List[types.TextEdit]


class TorchlintServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("torchlint", __version__)
        self.findings: Dict[str, List[_Finding]] = {}

    # --- linting --------------------------------------------------------------------------------
    def document_path(self, uri: str) -> Optional[Path]:
        path = to_fs_path(uri)
        return Path(path) if path else None

    def lint(self, uri: str) -> None:
        document = self.workspace.get_text_document(uri)
        path = self.document_path(uri)
        if path is None or path.suffix not in (".py", ".pyi"):
            return
        try:
            settings = ConfigTree(cwd=path.parent.resolve()).for_path(path)
        except ConfigError as error:
            self.window_show_message(types.ShowMessageParams(types.MessageType.Error, f"torchlint: {error}"))
            return
        outcome = lint_source(document.source, str(path), rules_for(settings, path), settings, with_edits=True)
        lines = document.lines
        codec = document.position_codec
        findings = []
        for d in outcome.diagnostics:
            lsp_range = codec.range_to_client_units(lines, _range(d.line, d.column, d.end_line, d.end_column))
            severity = types.DiagnosticSeverity.Error if d.code == "TL000" else types.DiagnosticSeverity.Warning
            lsp = types.Diagnostic(
                range=lsp_range, message=d.message, severity=severity, code=d.code, source=SOURCE,
                code_description=types.CodeDescription(href=_url(d.code)),
            )
            edits = [types.TextEdit(codec.range_to_client_units(lines, _edit_range(e)), e.content) for e in d.edits]
            findings.append(_Finding(lsp, d, edits))
        self.findings[uri] = findings
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, version=document.version, diagnostics=[f.lsp for f in findings])
        )

    def forget(self, uri: str) -> None:
        self.findings.pop(uri, None)
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    # --- code actions ---------------------------------------------------------------------------
    def code_actions(self, params: types.CodeActionParams) -> List[types.CodeAction]:
        uri = params.text_document.uri
        wanted = [str(getattr(k, "value", k)) for k in params.context.only or []]
        actions: List[types.CodeAction] = []
        for finding in self.findings.get(uri, []):
            d = finding.diagnostic
            if not finding.edits or not _overlaps(finding.lsp.range, params.range):
                continue
            safe = d.fix is Applicability.SAFE
            kind = types.CodeActionKind.QuickFix if safe else types.CodeActionKind.RefactorRewrite
            if wanted and not any(kind.value.startswith(k) for k in wanted):
                continue
            title = f"Fix {d.code} ({d.name})" if safe else f"Fix {d.code} ({d.name}) (unsafe: can change behaviour)"
            actions.append(types.CodeAction(
                title=title, kind=kind, diagnostics=[finding.lsp], is_preferred=safe,
                edit=types.WorkspaceEdit(changes={uri: finding.edits}),
            ))
        if not wanted or any(FIX_ALL_KIND.startswith(k) for k in wanted):
            fix_all = self.fix_all(uri)
            if fix_all is not None:
                actions.append(fix_all)
        return actions

    def fix_all(self, uri: str) -> Optional[types.CodeAction]:
        if not any(f.diagnostic.fix is Applicability.SAFE for f in self.findings.get(uri, [])):
            return None
        document = self.workspace.get_text_document(uri)
        path = self.document_path(uri)
        if path is None:
            return None
        settings = ConfigTree(cwd=path.parent.resolve()).for_path(path)
        outcome = fix_source(document.source, str(path), rules_for(settings, path), settings, unsafe=False)
        if outcome.source == document.source or outcome.errors:
            return None
        lines = document.lines
        whole = types.Range(types.Position(0, 0), types.Position(len(lines), 0))
        return types.CodeAction(
            title="Fix all safe torchlint problems", kind=FIX_ALL_KIND,
            edit=types.WorkspaceEdit(changes={uri: [types.TextEdit(whole, outcome.source)]}),
        )


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
    from torchlint.docs import BASE_URL

    return f"{BASE_URL}/{code}.md"


def create_server() -> TorchlintServer:
    server = TorchlintServer()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: TorchlintServer, params: types.DidOpenTextDocumentParams) -> None:
        forget_configuration_files()
        ls.lint(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: TorchlintServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.lint(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: TorchlintServer, params: types.DidSaveTextDocumentParams) -> None:
        forget_configuration_files()  # a saved configuration file changes the settings
        ls.lint(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: TorchlintServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.forget(params.text_document.uri)

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[
            types.CodeActionKind.QuickFix, types.CodeActionKind.RefactorRewrite, FIX_ALL_KIND,
        ]),
    )
    def code_action(ls: TorchlintServer, params: types.CodeActionParams) -> List[types.CodeAction]:
        return ls.code_actions(params)

    return server


def main() -> None:
    create_server().start_io()
