"""Reading source files as Python does, and writing them back byte-for-byte faithful and atomically."""

from __future__ import annotations

import io
import os
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path


class SourceError(Exception):
    """A file that cannot be read or decoded. ``line``/``column`` are 1-based where known."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.line = line
        self.column = column


@dataclass(frozen=True)
class SourceText:
    text: str  # newlines untranslated, BOM removed
    encoding: str  # as tokenize reports it: "utf-8", "utf-8-sig" (a BOM), "latin-1"...

    def encode(self, text: str) -> bytes:
        return text.encode(self.encoding)


def decode_source(data: bytes) -> SourceText:
    """Decode like the interpreter: a BOM or a PEP 263 cookie, else UTF-8."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        raise SourceError(f"bad encoding declaration: {exc.msg if hasattr(exc, 'msg') else exc}") from exc
    try:
        return SourceText(data.decode(encoding), encoding)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SourceError(
            f"not valid {encoding} (byte 0x{data[exc.start]:02x}); declare the encoding with a "
            "'# -*- coding: ... -*-' line",
            line,
            column,
        ) from exc


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise SourceError("file vanished before it could be read") from exc
    except IsADirectoryError as exc:
        raise SourceError("is a directory, not a Python file") from exc
    except OSError as exc:
        raise SourceError(f"cannot read: {exc.strerror or exc}") from exc


def write_atomic(path: Path, data: bytes) -> None:
    """Write through a temporary file in the same folder, then rename: never a half-written file."""
    mode = path.stat().st_mode & 0o7777 if path.exists() else None
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".torchlint.tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        if mode is not None:
            os.chmod(tmp_name, mode)
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
