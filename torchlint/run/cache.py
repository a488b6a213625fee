"""A content-addressed cache of diagnostics in ``.torchlint_cache/``.

An entry's key hashes the file's bytes with torchlint's version and the settings that decide its
diagnostics (the rules selected for that file, the target PyTorch version), so a moved or copied file hits
and any change misses. Entries are written atomically; one that cannot be read is ignored, never fatal.

The folder stays in the project, as Ruff's ``.ruff_cache`` does (with a ``.gitignore`` of ``*``), but each
entry carries an HMAC under a secret key of this machine's user, kept outside every project
(``machine_key_path``): an entry committed to a repository, copied from another machine or written by hand
(an empty one would hide every finding of its file) is a miss, as the key is unknown there.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from torchlint import __version__
from torchlint.rule import Applicability, Diagnostic, Edit

CACHE_DIR_NAME = ".torchlint_cache"
_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by torchlint.\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n"
)


@lru_cache(maxsize=None)
def code_fingerprint() -> str:
    """torchlint's version plus a hash of its engine and rule sources, subpackages included (the facts a rule
    reads live in ``torchlint/facts/``): editing a rule or a fact invalidates the cache."""
    import torchlint
    import torchlint.rules

    digest = hashlib.blake2b(__version__.encode(), digest_size=16)
    for package in (torchlint, torchlint.rules):
        for folder in package.__path__:
            for source in sorted(Path(folder).rglob("*.py")):
                try:
                    digest.update(source.read_bytes())
                except OSError:
                    pass
    return digest.hexdigest()


def machine_key_path() -> Path:
    """Where this user's cache key lives: the user cache folder (``$XDG_CACHE_HOME``, ``~/.cache``, or
    ``%LOCALAPPDATA%`` on Windows), never a project."""
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        base = Path(os.environ["LOCALAPPDATA"])
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "torchlint" / "cache-key"


@lru_cache(maxsize=None)
def _machine_key(path: Path) -> Optional[bytes]:
    """The secret key at ``path``, made on first use (32 random bytes, readable by this user only); None
    where it can be neither read nor made: the cache is then off, as no entry could be trusted."""
    try:
        return _read_key(path)
    except OSError:
        pass
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(32))
    except FileExistsError:
        pass  # another run made it first: use theirs
    except OSError:
        return None
    try:
        return _read_key(path)
    except OSError:
        return None


def _read_key(path: Path) -> bytes:
    key = path.read_bytes()
    if len(key) < 32:
        raise OSError("cache key too short")  # half-written by a killed run: never trust a short key
    return key


def _mac(secret: bytes, key: str, payload: bytes) -> str:
    return hmac.new(secret, key.encode("ascii") + b"\n" + payload, hashlib.sha256).hexdigest()


@lru_cache(maxsize=256)
def _key_suffix(rule_codes: Tuple[str, ...], torch_version: tuple, mode: str) -> bytes:
    return repr((code_fingerprint(), rule_codes, torch_version, mode)).encode()


class Cache:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._prepared = False
        self._secret = _machine_key(machine_key_path())

    def key(self, data: bytes, rule_codes: Sequence[str], torch_version: tuple, mode: str) -> str:
        digest = hashlib.blake2b(data, digest_size=20)
        digest.update(_key_suffix(tuple(rule_codes), tuple(torch_version), mode))
        return digest.hexdigest()

    def with_project(self, key: str, project_digest: str) -> str:
        """The key of a result that used the summaries of other project files (``ProjectModel.digest``)."""
        return hashlib.blake2b(f"{key}:{project_digest}".encode("ascii"), digest_size=20).hexdigest()

    def data_key(self, data: bytes, kind: str) -> str:
        """The key of plain data derived from a file's bytes alone (``kind``: "summary")."""
        digest = hashlib.blake2b(data, digest_size=20)
        digest.update(_key_suffix((), (), kind))
        return digest.hexdigest()

    def get_data(self, key: str) -> object:
        """The JSON value stored under ``key`` by ``put_data``, or None."""
        if self._secret is None:
            return None
        try:
            with self._entry(key).open("rb") as f:
                blob = f.read(_MAX_ENTRY_BYTES + 1)
            payload = _checked_payload(blob, key, self._secret)
            return json.loads(payload) if payload is not None else None
        except (OSError, ValueError, RecursionError, MemoryError):
            return None

    def put_data(self, key: str, value: object) -> None:
        self._write(key, _encode_payload(key, json.dumps(value).encode("utf-8"), self._secret))

    def _entry(self, key: str) -> Path:
        return self.folder / f"v{__version__}" / key[:2] / key

    def get(self, key: str, path: str) -> Optional[List[Diagnostic]]:
        """The entry's diagnostics, or None (a miss) for anything but an intact entry of this key."""
        if self._secret is None:
            return None
        try:
            with self._entry(key).open("rb") as f:
                blob = f.read(_MAX_ENTRY_BYTES + 1)
            return _decode_entry(blob, key, path, self._secret)
        except (OSError, ValueError, KeyError, TypeError, RecursionError, MemoryError):
            return None

    def put(self, key: str, diagnostics: Sequence[Diagnostic]) -> None:
        if self._secret is not None:
            self._write(key, _encode_entry(key, diagnostics, self._secret))

    def _write(self, key: str, blob: bytes) -> None:
        if self._secret is None:
            return
        tmp = None
        try:
            self._prepare()
            entry = self._entry(key)
            _own_folder(entry.parent.parent)
            _own_folder(entry.parent)
            fd, tmp = tempfile.mkstemp(dir=str(entry.parent), prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, entry)
            tmp = None
        except OSError:
            pass  # a read-only or full disk (or a folder in the entry's place) must not fail the lint
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass

    def _prepare(self) -> None:
        if self._prepared:
            return
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        _own_folder(self.folder)
        for name, text in (("CACHEDIR.TAG", _TAG), (".gitignore", "# Created by torchlint\n*\n")):
            try:  # O_EXCL: never through a link left in its place (a dangling one would create its target)
                fd = os.open(self.folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
        self._prepared = True


def _own_folder(path: Path) -> None:
    """Make ``path`` a folder, or raise OSError where a symbolic link (or anything else) stands there: the
    cache is written only into folders of its own, never through a link out of the tree (one committed in
    ``.torchlint_cache/``, or the cache folder itself a link)."""
    try:
        os.mkdir(path)
    except FileExistsError:
        pass
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        raise NotADirectoryError(f"{path} is not a folder (a symbolic link?); the cache is not written")


# An entry: one header line {"schema", "key", "hmac" of the key and the rest under this machine's secret},
# then the diagnostics as JSON. An entry whose header, MAC or fields do not check out is a miss: a damaged or
# forged cache can cost time, never results.
SCHEMA = 3
_MAX_ENTRY_BYTES = 64 * 1024 * 1024
_MAX_HEADER_BYTES = 512
_FIELDS = {"code": str, "name": str, "message": str, "line": int, "column": int, "end_line": int,
           "end_column": int, "fix": (str, type(None)), "edits": list, "cell": (int, type(None))}


def _encode_entry(key: str, diagnostics: Sequence[Diagnostic], secret: bytes) -> bytes:
    return _encode_payload(key, json.dumps([_to_json(d) for d in diagnostics]).encode("utf-8"), secret)


def _encode_payload(key: str, payload: bytes, secret: Optional[bytes]) -> bytes:
    header = {"schema": SCHEMA, "key": key, "hmac": _mac(secret or b"", key, payload)}
    return json.dumps(header).encode("utf-8") + b"\n" + payload


def _checked_payload(blob: bytes, key: str, secret: bytes) -> Optional[bytes]:
    """The payload of an intact entry of ``key``, or None."""
    header_bytes, newline, payload = blob.partition(b"\n")
    if not newline or len(header_bytes) > _MAX_HEADER_BYTES or len(blob) > _MAX_ENTRY_BYTES:
        return None
    header = json.loads(header_bytes)
    if not isinstance(header, dict) or header.get("schema") != SCHEMA or header.get("key") != key:
        return None
    mac = header.get("hmac")
    if not isinstance(mac, str) or not hmac.compare_digest(mac, _mac(secret, key, payload)):
        return None
    return payload


def _decode_entry(blob: bytes, key: str, path: str, secret: bytes) -> Optional[List[Diagnostic]]:
    payload = _checked_payload(blob, key, secret)
    if payload is None:
        return None
    items = json.loads(payload)
    if not isinstance(items, list) or not all(_well_formed(item) for item in items):
        return None
    return [_from_json(item, path) for item in items]


def _well_formed(item: object) -> bool:
    if not isinstance(item, dict) or set(item) != set(_FIELDS):
        return False
    if not all(isinstance(item[name], kind) and not isinstance(item[name], bool) for name, kind in _FIELDS.items()):
        return False
    if min(item["line"], item["column"], item["end_line"], item["end_column"]) < 1:
        return False
    return all(isinstance(e, list) and len(e) == 5 and all(type(v) is int for v in e[:4]) and isinstance(e[4], str)
               for e in item["edits"])


def _to_json(d: Diagnostic) -> dict:
    return {
        "code": d.code, "name": d.name, "message": d.message, "line": d.line, "column": d.column,
        "end_line": d.end_line, "end_column": d.end_column, "fix": d.fix.value if d.fix else None,
        "edits": [[e.line, e.column, e.end_line, e.end_column, e.content] for e in d.edits], "cell": d.cell,
    }


def _from_json(item: dict, path: str) -> Diagnostic:
    return Diagnostic(
        code=item["code"], name=item["name"], message=item["message"], path=path, line=item["line"],
        column=item["column"], end_line=item["end_line"], end_column=item["end_column"],
        fix=Applicability(item["fix"]) if item["fix"] else None,
        edits=tuple(Edit(*e) for e in item["edits"]), cell=item.get("cell"),
    )
