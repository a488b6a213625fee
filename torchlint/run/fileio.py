"""Reading source files as Python does, and writing them back byte-for-byte faithful and atomically."""

from __future__ import annotations

import codecs
import errno
import io
import os
import re
import stat
import tempfile
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, List, Optional, Tuple


class SourceError(Exception):
    """A file that cannot be read or decoded. ``line``/``column`` are 1-based where known; ``size``: the size
    of a file refused for being over the size limit."""

    def __init__(self, message: str, line: int = 1, column: int = 1, size: Optional[int] = None) -> None:
        super().__init__(message)
        self.line = line
        self.column = column
        self.size = size


@dataclass(frozen=True)
class SourceText:
    text: str  # newlines untranslated, BOM removed
    encoding: str  # as tokenize reports it: "utf-8", "utf-8-sig" (a BOM), "latin-1"...
    # whether encoding the text gives the file's bytes back: not so for some codecs (unicode_escape
    # re-escapes every untouched line, utf-7 has several spellings of one text), whose files are never fixed
    round_trips: bool = True

    def encode(self, text: str) -> bytes:
        return text.encode(self.encoding)


def decode_source(data: bytes) -> SourceText:
    """Decode like the interpreter: a BOM or a PEP 263 cookie, else UTF-8."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        raise SourceError(f"bad encoding declaration: {exc.msg if hasattr(exc, 'msg') else exc}") from exc
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SourceError(
            f"not valid {encoding} (byte 0x{data[exc.start]:02x}); declare the encoding with a "
            "'# -*- coding: ... -*-' line",
            line,
            column,
        ) from exc
    except (LookupError, UnicodeError) as exc:  # rot13, hex, zlib: not text codecs; punycode, undefined: fail
        raise SourceError(f"its coding cookie names {encoding!r}, which cannot decode Python source "
                          f"(the interpreter rejects it too): {exc}") from exc
    return SourceText(text, encoding, _round_trips(text, encoding, data))


_EXACT_CODECS = {"utf-8", "utf-8-sig", "latin-1", "iso-8859-1", "ascii"}  # decoding then encoding is the identity
# Codecs whose output for a line depends on more than the line (escapes, shift states): a fixed line can
# come out spelled differently from how it was read, even where this file's text happens to round-trip.
_ESCAPING_CODECS = {"unicode-escape", "raw-unicode-escape", "utf-7"}


def _round_trips(text: str, encoding: str, data: bytes) -> bool:
    if encoding in _EXACT_CODECS:
        return True
    try:
        return codecs.lookup(encoding).name not in _ESCAPING_CODECS and text.encode(encoding) == data
    except (UnicodeError, LookupError):
        return False


def not_round_trip_message(encoding: str) -> str:
    return (f"the file's encoding ({encoding}) does not give its bytes back when the fixed text is written: "
            "fixing it would rewrite lines no fix touched; not fixed (convert it to UTF-8 to fix it)")


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def split_lines(text: str) -> List[str]:
    """Python's lines, each with its ending: only LF, CRLF and CR end a line (``str.splitlines`` also splits
    at form feeds, \\x1c-\\x1e, \\x85 and \\u2028, which Python and LSP read as part of a line)."""
    return _LINE.findall(text)


def line_ending(line: str) -> str:
    """The ending of one of ``split_lines``'s lines ("" for a last line without one)."""
    return line[len(line.rstrip("\r\n")):]


def read_bytes(path: Path, max_size: Optional[int] = None) -> bytes:
    return read_regular(path, max_size)[0]


def _read_up_to(f, limit: int, first: int) -> bytes:
    """At most ``limit`` bytes: ``first`` at once (the size it had, plus one to notice growth), the rest in
    steps; never one buffer of ``limit`` bytes, as a configured limit may exceed any memory."""
    data = f.read(min(first, limit))
    while len(data) < limit:
        more = f.read(min(limit - len(data), 1 << 20))
        if not more:
            break
        data += more
    return data


def read_regular(path: Path, max_size: Optional[int] = None) -> Tuple[bytes, os.stat_result]:
    """The bytes of a regular file and its status (to check before writing that it is still the same
    file). Anything else (a FIFO would block forever, /dev/zero never ends) and files over ``max_size``
    bytes raise ``SourceError`` without being read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError as exc:
        raise SourceError("file vanished before it could be read") from exc
    except IsADirectoryError as exc:
        raise SourceError("is a directory, not a Python file") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SourceError("a symbolic link loop: it leads back to itself, never to a file") from exc
        raise SourceError(f"cannot read: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as f:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise SourceError(f"not a regular file ({file_kind(status.st_mode)}); only files are read")
        if max_size is not None and status.st_size > max_size:
            raise SourceError(too_large_message(status.st_size, max_size), size=status.st_size)
        try:
            data = f.read() if max_size is None else _read_up_to(f, max_size + 1, status.st_size + 1)
        except OSError as exc:
            raise SourceError(f"cannot read: {exc.strerror or exc}") from exc
    if max_size is not None and len(data) > max_size:  # it grew while we read
        raise SourceError(too_large_message(len(data), max_size), size=len(data))
    return data, status


def too_large_message(size: int, limit: int, what: str = "file") -> str:
    return (f"{what} is {format_size(size)}, over the max-file-size limit of {format_size(limit)}; not checked "
            "(raise it with --max-file-size or max-file-size in the configuration)")


# A notebook's saved outputs (plots, tables, images) are most of its bytes: max-file-size applies to its
# code, and its JSON is read up to this many times the limit.
NOTEBOOK_READ_FACTOR = 16


def notebook_too_large(size: int, limit: int) -> str:
    return (f"notebook is {format_size(size)}, over {NOTEBOOK_READ_FACTOR} times the max-file-size limit of "
            f"{format_size(limit)} (its saved outputs included); not checked (clear its outputs, or raise it with "
            "--max-file-size or max-file-size in the configuration)")


def format_size(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


class NotWritten(Exception):
    """A fixed file that was deliberately not written: the message says why and what to do."""


# A temporary file is written beside the file and renamed over it: ``.NAME.XXXXXXXX.torchlint.tmp``.
TEMP_SUFFIX = ".torchlint.tmp"
_TEMP_NAME = re.compile(r"^\..+\.[A-Za-z0-9_]{8}" + re.escape(TEMP_SUFFIX) + "$")
STALE_TEMP_SECONDS = 600  # older than any write can take: left by a killed run


def write_back(path: Path, data: bytes, original: Tuple[bytes, os.stat_result], root: Path) -> None:
    """Write a fixed file over the file it was read from (``write_atomic`` with its checks), or raise
    ``NotWritten``. Through a symbolic link that leads out of the project (``root``) nothing is written: a
    link in a checked tree is no licence to change files elsewhere."""
    target = Path(os.path.realpath(path))
    if links_out_of(path, root):
        raise NotWritten(f"it is a symbolic link (or in a linked folder) to {target}, outside the project "
                         f"({root}); not written (fix the file itself)")
    write_atomic(target, data, original)


def links_out_of(path: Path, root: Path) -> bool:
    """Whether ``path`` leads through a symbolic link to a file outside ``root``. (A file outside named as
    it is, not through a link, is the user's own choice.)"""
    target = os.path.realpath(path)
    return not _inside(target, os.path.realpath(root)) and (
        os.path.islink(path) or _inside(os.path.abspath(path), str(root)))


def _inside(path: str, folder: str) -> bool:
    try:
        return os.path.commonpath([path, folder]) == folder
    except ValueError:  # another drive
        return False


def write_atomic(path: Path, data: bytes, original: Optional[Tuple[bytes, os.stat_result]] = None) -> None:
    """Write through a temporary file in the same folder, then rename: never a half-written file.

    With ``original`` (the bytes and status read before fixing), the file is written only if it is still
    that file (same inode, same bytes), it is writable, it has one link (a rename would split hard links),
    and its owner, group and mode can be kept; else ``NotWritten`` says why and nothing changes."""
    if original is not None:
        _check_unchanged(path, *original)
    status = original[1] if original is not None else (path.stat() if path.exists() else None)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=str(path.parent))
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            if status is not None:
                _keep_owner_and_mode(tmp.fileno(), status)
            os.fsync(tmp.fileno())
        if original is not None:
            _check_unchanged(path, *original)  # again, just before the rename: the window is the rename
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise


def _check_unchanged(path: Path, data: bytes, status: os.stat_result) -> None:
    try:
        now = os.stat(path)
    except FileNotFoundError:
        raise NotWritten("the file was deleted or renamed while torchlint was fixing it; not written") from None
    if (now.st_dev, now.st_ino) != (status.st_dev, status.st_ino):
        raise NotWritten("the file was replaced while torchlint was fixing it; not written")
    try:
        with open(path, "rb") as f:
            same = f.read(len(data) + 1) == data
    except OSError as exc:
        raise NotWritten(f"cannot read the file again before writing it: {exc.strerror or exc}; not written") from None
    if not same:
        raise NotWritten("the file changed while torchlint was fixing it; not written (run again)")
    if now.st_nlink > 1:
        raise NotWritten(f"the file has {now.st_nlink} hard links, which writing the fix would split; not written")
    if not now.st_mode & 0o222 or not os.access(path, os.W_OK):
        raise NotWritten("the file is read-only; not written (make it writable to fix it)")


def _keep_owner_and_mode(fd: int, status: os.stat_result) -> None:
    os.fchmod(fd, stat.S_IMODE(status.st_mode))
    mine = os.fstat(fd)
    if (mine.st_uid, mine.st_gid) != (status.st_uid, status.st_gid):
        try:
            os.fchown(fd, status.st_uid, status.st_gid)
        except PermissionError:
            raise NotWritten(
                f"writing it would change its owner or group (uid {status.st_uid}, gid {status.st_gid}) to "
                "yours; not written") from None
        os.fchmod(fd, stat.S_IMODE(status.st_mode))  # chown clears set-user-ID bits


def remove_stale_temp_files(folders: Iterable[Path], older_than: float = STALE_TEMP_SECONDS) -> None:
    """Delete the temporary files a killed run left (``.NAME.XXXXXXXX.torchlint.tmp``, older than
    ``older_than`` seconds, so a concurrent run's file in flight is never touched)."""
    cutoff = time.time() - older_than
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if not _TEMP_NAME.match(entry.name):
                continue
            try:
                if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < cutoff:
                    os.unlink(entry.path)
            except OSError:
                pass  # gone already, or not ours to remove
