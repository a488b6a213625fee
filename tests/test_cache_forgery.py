"""A cache committed to a repository, copied from another machine or written by hand cannot hide findings,
and no file name or message can inject lines into text output (issue 27, item 9)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os

import pytest
from robustness_support import invoke, with_finding

from torchlint.run.cache import Cache
from torchlint.report.formats import format_junit
from torchlint.report.reporters import format_text, printable, unified_diff
from torchlint.rule import Diagnostic


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "this-machine"))
    (tmp_path / "ok.py").write_text(with_finding())
    return tmp_path


def _entries(project):
    return [p for p in (project / ".torchlint_cache").rglob("*") if p.is_file() and p.parent.name != ".torchlint_cache"]


def _unkeyed(key: str, payload: bytes) -> bytes:  # what anyone could compute before entries were keyed
    header = {"schema": 2, "key": key, "blake2b": hashlib.blake2b(payload, digest_size=20).hexdigest()}
    return json.dumps(header).encode() + b"\n" + payload


def _other_machine(key: str, payload: bytes) -> bytes:  # keyed, but with a secret this machine does not hold
    secret = os.urandom(32)
    mac = hmac.new(secret, key.encode() + b"\n" + payload, hashlib.sha256).hexdigest()
    header = {"schema": 3, "key": key, "hmac": mac}
    return json.dumps(header).encode() + b"\n" + payload


@pytest.mark.parametrize("forge", [_unkeyed, _other_machine])
def test_a_forged_empty_entry_hides_no_finding(project, forge):
    first = invoke("check", ".")
    assert "ok.py:5:48: TL501" in first.output
    entries = _entries(project)
    assert entries, "no cache entry was written"
    for entry in entries:
        entry.write_bytes(forge(entry.name, b"[]"))  # "this file has no findings"
    again = invoke("check", ".")
    assert again.exit_code == 1 and "ok.py:5:48: TL501" in again.output
    invoke("fix", "--apply", ".")
    assert "foreach=False" not in (project / "ok.py").read_text()  # fix did not skip the file


def test_entries_are_bound_to_this_machines_key(project, monkeypatch):
    cache = Cache(project / "cache")
    key = cache.key(b"data", ["TL501"], (2, 13), "lint")
    cache.put(key, [])
    assert cache.get(key, "a.py") == []  # a hit here
    assert (project / "this-machine" / "torchlint" / "cache-key").stat().st_mode & 0o077 == 0
    monkeypatch.setenv("XDG_CACHE_HOME", str(project / "another-machine"))
    assert Cache(project / "cache").get(key, "a.py") is None  # a miss anywhere else


def test_no_key_no_cache(project, monkeypatch):
    (project / "blocked").write_text("a file where the key's folder should be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(project / "blocked"))
    cache = Cache(project / "cache")
    key = cache.key(b"data", ["TL501"], (2, 13), "lint")
    cache.put(key, [])
    assert cache.get(key, "a.py") is None and not (project / "cache").exists()


def _diagnostic(path: str, message: str) -> Diagnostic:
    return Diagnostic(code="TL501", name="n", message=message, path=path, line=1, column=1, end_line=1, end_column=2)


def test_control_characters_are_escaped_in_text_output():
    d = _diagnostic("a\nb.py", "slow\nfake.py:1:1: TL000 injected\x1b[2J")
    line = format_text(d, color=False)
    assert "\n" not in line and "\x1b" not in line
    assert line == "a\\nb.py:1:1: TL501 slow\\nfake.py:1:1: TL000 injected\\x1b[2J"
    assert printable("caf\u00e9 \u2028") == "caf\u00e9 \\u2028"
    assert unified_diff("a\nb.py", "x\n", "y\n").splitlines()[:2] == ["--- a/a\\nb.py", "+++ b/a\\nb.py"]
    junit = format_junit([d])
    assert "\x1b" not in junit and "a\\nb.py" in junit


def test_a_file_named_with_a_newline_is_one_line_of_output(project):
    os.rename(project / "ok.py", project / "o\nk.py")
    result = invoke("check", "--no-cache", ".")
    assert "o\\nk.py:5:48: TL501" in result.output
    assert all(not line.startswith("k.py") for line in result.output.splitlines())
    fixed = invoke("fix", "--apply", "--no-cache", ".")
    assert "o\\nk.py: fixed 1 x TL501" in fixed.output
