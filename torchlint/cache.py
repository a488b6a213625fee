"""A content-addressed cache of diagnostics in ``.torchlint_cache/``.

An entry's key hashes the file's bytes with torchlint's version and the settings that decide its
diagnostics (the rules selected for that file, the target PyTorch version), so a moved or copied file hits
and any change misses. Entries are written atomically; one that cannot be read is ignored, never fatal.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import List, Optional, Sequence

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
    """torchlint's version plus a hash of its engine and rule sources: editing a rule invalidates the cache."""
    import torchlint
    import torchlint.rules

    digest = hashlib.blake2b(__version__.encode(), digest_size=16)
    for package in (torchlint, torchlint.rules):
        for folder in package.__path__:
            for source in sorted(Path(folder).glob("*.py")):
                try:
                    digest.update(source.read_bytes())
                except OSError:
                    pass
    return digest.hexdigest()


class Cache:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._prepared = False

    def key(self, data: bytes, rule_codes: Sequence[str], torch_version: tuple, mode: str) -> str:
        digest = hashlib.blake2b(data, digest_size=20)
        digest.update(repr((code_fingerprint(), tuple(rule_codes), tuple(torch_version), mode)).encode())
        return digest.hexdigest()

    def _entry(self, key: str) -> Path:
        return self.folder / f"v{__version__}" / key[:2] / key

    def get(self, key: str, path: str) -> Optional[List[Diagnostic]]:
        try:
            with self._entry(key).open("r", encoding="utf-8") as f:
                return [_from_json(item, path) for item in json.load(f)]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, key: str, diagnostics: Sequence[Diagnostic]) -> None:
        try:
            self._prepare()
            entry = self._entry(key)
            entry.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=str(entry.parent), prefix=".tmp-")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump([_to_json(d) for d in diagnostics], f)
            os.replace(tmp, entry)
        except OSError:
            pass  # a read-only or full disk must not fail the lint

    def _prepare(self) -> None:
        if self._prepared:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        for name, text in (("CACHEDIR.TAG", _TAG), (".gitignore", "# Created by torchlint\n*\n")):
            marker = self.folder / name
            if not marker.exists():
                marker.write_text(text, encoding="utf-8")
        self._prepared = True


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
