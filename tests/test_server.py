"""`torchlint server`: driven over stdio with real LSP messages, as an editor would."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("pygls", reason="the Language Server needs the `server` extra (pygls)")

SLOW = (
    "import torch\n"
    "\n"
    "model = torch.nn.Linear(4, 2)\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)  # café\n"
    "\n"
    "def train(opt, loader):\n"
    "    for x in loader:\n"
    "        opt.zero_grad(set_to_none=False)\n"
)
WAIT_S = 60  # a bound so a broken server fails the test instead of hanging it; not a speed assertion


class Client:
    def __init__(self, cwd: Path, command=(sys.executable, "-m", "torchlint", "server")) -> None:
        self.process = subprocess.Popen(list(command), cwd=cwd,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.messages: "queue.Queue[dict]" = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stream = self.process.stdout
        while True:
            length = None
            while True:
                line = stream.readline()
                if not line:
                    return
                if line in (b"\r\n", b"\n"):
                    break
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            self.messages.put(json.loads(stream.read(length)))

    def send(self, message: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        return self.wait(lambda m: m.get("id") == self.next_id and "method" not in m)

    def notify(self, method: str, params: dict) -> None:
        self.send({"method": method, "params": params})

    def wait(self, matches) -> dict:
        while True:
            message = self.messages.get(timeout=WAIT_S)
            if matches(message):
                return message

    def diagnostics(self, uri: str) -> list:
        message = self.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                            and m["params"]["uri"] == uri)
        return message["params"]["diagnostics"]

    def close(self) -> None:
        try:
            self.request("shutdown", None)
            self.notify("exit", None)
            self.process.wait(timeout=WAIT_S)
        finally:
            if self.process.poll() is None:
                self.process.kill()


@pytest.fixture
def client(tmp_path):
    started = Client(tmp_path)
    yield started
    started.close()


def test_diagnostics_on_open_change_and_save_and_fixes_as_code_actions(client, tmp_path):
    target = tmp_path / "train.py"
    target.write_text(SLOW, encoding="utf-8")
    uri = target.as_uri()
    init = client.request("initialize", {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}})
    capabilities = init["result"]["capabilities"]
    assert capabilities["codeActionProvider"]
    client.notify("initialized", {})

    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                            "text": SLOW}})
    found = client.diagnostics(uri)
    assert [(d["code"], d["range"]["start"]) for d in found] == [
        ("TL501", {"line": 3, "character": 50}),
        ("TL201", {"line": 7, "character": 8}),
    ]
    assert all(d["source"] == "torchlint" for d in found)
    assert found[0]["codeDescription"]["href"].endswith("docs/rules/TL501.md")

    actions = client.request("textDocument/codeAction", {
        "textDocument": {"uri": uri}, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 8, "character": 0}},
        "context": {"diagnostics": found},
    })["result"]
    by_title = {a["title"]: a for a in actions}
    safe = by_title["Fix TL501 (per-parameter-optimizer-loop)"]
    assert safe["kind"] == "quickfix" and safe["isPreferred"] is True
    assert safe["edit"]["changes"][uri] == [{"range": {"start": {"line": 3, "character": 48},
                                                       "end": {"line": 3, "character": 63}}, "newText": ""}]
    unsafe = by_title["Fix TL201 (zero-grad-keeps-zeros) (unsafe: can change behaviour)"]
    assert unsafe["kind"] == "refactor.rewrite" and not unsafe.get("isPreferred")
    fix_all = by_title["Fix all safe torchlint problems"]
    assert "foreach=False" not in fix_all["edit"]["changes"][uri][0]["newText"]
    assert "set_to_none=False" in fix_all["edit"]["changes"][uri][0]["newText"]  # unsafe: not in fix-all

    fixed = SLOW.replace(", foreach=False", "")
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                             "contentChanges": [{"text": fixed}]})
    assert [d["code"] for d in client.diagnostics(uri)] == ["TL201"]

    (tmp_path / "torchlint.toml").write_text('ignore = ["TL201"]\n')
    client.notify("textDocument/didSave", {"textDocument": {"uri": uri}})
    assert client.diagnostics(uri) == []  # the saved configuration applies


def test_positions_are_utf16_as_lsp_requires(client, tmp_path):
    text = 'x = "é😀"; opt = torch.optim.SGD(params, foreach=False)\nimport torch\n'
    target = tmp_path / "emoji.py"
    target.write_text(text, encoding="utf-8")
    client.request("initialize", {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}})
    client.notify("initialized", {})
    client.notify("textDocument/didOpen", {"textDocument": {"uri": target.as_uri(), "languageId": "python",
                                                            "version": 1, "text": text}})
    (finding,) = client.diagnostics(target.as_uri())
    column = text.index("foreach")  # code points
    assert finding["range"]["start"]["character"] == column + 1  # the emoji is two UTF-16 units


def start(client, root: Path) -> None:
    client.request("initialize", {"processId": None, "rootUri": root.as_uri(), "capabilities": {}})
    client.notify("initialized", {})


def insert(uri: str, version: int, line: int, text: str) -> dict:
    at = {"line": line, "character": 0}
    return {"textDocument": {"uri": uri, "version": version},
            "contentChanges": [{"range": {"start": at, "end": at}, "text": text}]}


def test_edits_below_form_feeds_and_line_separators_keep_the_editors_text(client, tmp_path):
    # str.splitlines() ends lines at \x0c, \x1c-\x1e, \x85 and \u2028 too; LSP and Python do not
    text = ('import torch\n\x0c\ns = "a\u2028b\x85c"\n'
            "opt = torch.optim.SGD(model.parameters(), foreach=False)\n")
    uri = (tmp_path / "train.py").as_uri()
    start(client, tmp_path)
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                            "text": text}})
    assert [d["range"]["start"]["line"] for d in client.diagnostics(uri)] == [3]
    client.notify("textDocument/didChange", insert(uri, 2, 2, "y = 3\n"))  # below the form feed line
    client.notify("textDocument/didChange", insert(uri, 3, 4, "z = 4\n"))  # below the line separator
    expected = ('import torch\n\x0c\ny = 3\ns = "a\u2028b\x85c"\nz = 4\n'
                "opt = torch.optim.SGD(model.parameters(), foreach=False)\n")
    found = client.diagnostics(uri)
    assert [(d["code"], d["range"]["start"]["line"]) for d in found] == [("TL501", 5)]
    actions = client.request("textDocument/codeAction", {
        "textDocument": {"uri": uri}, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 6, "character": 0}},
        "context": {"diagnostics": found, "only": ["source.fixAll"]},
    })["result"]
    (fix_all,) = actions
    assert fix_all["edit"]["changes"][uri][0]["newText"] == expected.replace(", foreach=False", "")
    client.notify("textDocument/didChange", insert(uri, 4, 0, "w = 5\n"))  # fix on save: before its lint run
    actions = client.request("textDocument/codeAction", {
        "textDocument": {"uri": uri}, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 7, "character": 0}},
        "context": {"diagnostics": [], "only": ["source.fixAll"]},
    })["result"]
    assert actions[0]["edit"]["changes"][uri][0]["newText"] == "w = 5\n" + expected.replace(", foreach=False", "")


SLOW_SERVER = """
import os, sys, time
import torchlint.server as server

real_lint = server.lint_source


def lint_slowly(text, *args, **kwargs):
    if "SLOW_DOCUMENT" in text:  # held until the test has the other document's answer
        with open("runs.log", "a") as log:
            log.write(str(len(text) - len(text.lstrip("#"))) + "\\n")  # the marker's leading "#" and one per keystroke
        deadline = time.monotonic() + float(sys.argv[1])
        while not os.path.exists("release") and time.monotonic() < deadline:
            time.sleep(0.01)
    return real_lint(text, *args, **kwargs)


server.lint_source = lint_slowly
server.main()
"""


def test_a_slow_document_neither_delays_another_nor_is_linted_per_keystroke(tmp_path):
    (tmp_path / "slow_server.py").write_text(SLOW_SERVER)
    client = Client(tmp_path, (sys.executable, str(tmp_path / "slow_server.py"), str(2 * WAIT_S)))
    try:
        start(client, tmp_path)
        slow, fast = (tmp_path / "slow.py").as_uri(), (tmp_path / "fast.py").as_uri()
        client.notify("textDocument/didOpen", {"textDocument": {"uri": slow, "languageId": "python", "version": 1,
                                                                "text": "# SLOW_DOCUMENT\n" + SLOW}})
        for version in range(2, 7):  # five keystrokes, each adding a "#"
            client.notify("textDocument/didChange", insert(slow, version, 0, "#"))
        client.notify("textDocument/didOpen", {"textDocument": {"uri": fast, "languageId": "python", "version": 1,
                                                                "text": SLOW}})
        first = client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics")
        assert first["params"]["uri"] == fast  # answered while the slow document's run is still held
        (tmp_path / "release").write_text("")
        answer = client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics")
        assert (answer["params"]["uri"], answer["params"]["version"]) == (slow, 6)  # the first run's is dropped
        assert [d["code"] for d in answer["params"]["diagnostics"]] == ["TL501", "TL201"]
        runs = (tmp_path / "runs.log").read_text().split()
        assert runs == ["1", "6"]  # the text it was opened with, then the last keystroke's: not one per keystroke
    finally:
        client.close()


def test_a_keystrokes_run_renders_no_fix_and_code_actions_make_the_edits_once(tmp_path, monkeypatch):
    from torchlint import server as module

    target = tmp_path / "train.py"
    target.write_text(SLOW, encoding="utf-8")
    runs = []
    real = module.lint_source
    monkeypatch.setattr(module, "lint_source", lambda *a, **k: runs.append(k.get("with_edits", False)) or real(*a, **k))
    from pygls.workspace import PositionCodec

    monkeypatch.setattr(module.TorchlintServer, "codec", property(lambda self: PositionCodec()))
    ls = module.TorchlintServer()
    document = module._Document(SLOW, 1)
    findings = ls._lint(target.as_uri(), document)
    assert [f.diagnostic.code for f in findings] == ["TL501", "TL201"] and runs == [False]
    edits = ls.edits_of(target.as_uri(), document)
    assert runs == [False, True] and {key[0] for key in edits} == {"TL501", "TL201"}
    assert ls.edits_of(target.as_uri(), document) is edits and runs == [False, True]  # once per text
