"""Which files to check: recurse into folders, honour excludes and .gitignore, never leave the tree."""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence, Tuple

from torchlint.config import Settings

if TYPE_CHECKING:
    import pathspec

DEFAULT_EXCLUDE = (
    ".git", ".hg", ".svn", ".bzr", ".venv", "venv", ".tox", ".nox", ".eggs", "*.egg-info", "site-packages",
    "node_modules", "build", "dist", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache",
    ".torchlint_cache", ".ipynb_checkpoints",
)
SOURCE_SUFFIXES = (".py", ".pyi", ".ipynb")  # what a folder walk finds; a named file may also be a script
# Test code, whose speed does not matter (rules marked ``silent_in_test_files`` skip it): pytest's files and
# everything under a tests/, test/ or testing/ folder. Gitignore-style, relative to the project root.
DEFAULT_TEST_PATHS = ("test_*.py", "*_test.py", "conftest.py", "tests/", "test/", "testing/")
# The same files as DEFAULT_TEST_PATHS, so that judging a file with the defaults needs no pathspec (its
# import takes about 27 ms, more than the check of a small file); tests/test_test_paths.py holds them equal.
_DEFAULT_TEST_PATH = re.compile(r"(?:^|/)(?:(?:test_[^/]*|[^/]*_test|conftest)\.py(?:/|$)|(?:tests|test|testing)/)")


def _spec(patterns: Iterable[str]) -> "pathspec.PathSpec":
    import pathspec  # not needed to check one named file

    return pathspec.GitIgnoreSpec.from_lines(list(patterns))


@lru_cache(maxsize=256)
def cached_spec(patterns: Tuple[str, ...]) -> "pathspec.PathSpec":
    """One compiled spec per pattern list: excludes, per-file-ignore globs."""
    return _spec(patterns)


def exclude_patterns(settings: Settings) -> Tuple[str, ...]:
    return (*(settings.exclude or DEFAULT_EXCLUDE), *settings.extend_exclude)


def test_path_patterns(settings: Settings) -> Tuple[str, ...]:
    return (*(DEFAULT_TEST_PATHS if settings.test_paths is None else settings.test_paths), *settings.extend_test_paths)


def is_test_file(path: str, settings: Settings) -> bool:
    """Whether ``path`` is test code by the ``test-paths`` settings, judged from ``settings.project_root``
    (so the current folder never matters; a file outside the project is judged by its name alone). Asked
    two or three times per checked file: remembered (a relative path with the folder it is relative to)."""
    if not path:
        return False
    return _is_test_file(path, settings, "" if os.path.isabs(path) else os.getcwd())


@lru_cache(maxsize=8192)
def _is_test_file(path: str, settings: Settings, cwd: str) -> bool:
    relative = path
    if settings.project_root is not None:
        absolute = os.path.abspath(path)
        relative = _relative(Path(absolute), Path(os.path.abspath(settings.project_root))) or os.path.basename(absolute)
    patterns = test_path_patterns(settings)
    if patterns == DEFAULT_TEST_PATHS:
        return _DEFAULT_TEST_PATH.search(Path(relative).as_posix()) is not None
    return bool(patterns) and cached_spec(patterns).match_file(relative)


class _LazySpec:
    """A gitignore-style spec compiled on its first match (a single named file never needs it)."""

    def __init__(self, patterns: Tuple[str, ...]) -> None:
        self._patterns = patterns

    def match_file(self, path: str) -> bool:
        return cached_spec(self._patterns).match_file(path)


@dataclass
class Discovery:
    files: List[Path] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)  # explicit paths that do not exist
    unsupported: List[str] = field(default_factory=list)  # explicit files that are neither Python nor notebooks
    # (path as shown, why it is not checked): symlink loops, and FIFOs, sockets or devices named explicitly
    problems: List[Tuple[str, str]] = field(default_factory=list)


def _gitignore_spec(lines: List[str]) -> "pathspec.PathSpec":
    """A .gitignore's spec without the lines git itself ignores as invalid (`!`, a lone `\\`, `[z-a]`)."""
    try:
        return _spec(lines)
    except (ValueError, re.error):  # pathspec's pattern errors (ValueError), bad ranges: find the bad lines
        valid = []
        for line in lines:
            try:
                _spec([line])
            except (ValueError, re.error):
                continue
            valid.append(line)
        return _spec(valid)


class _GitIgnores:
    """The .gitignore files that apply below a folder, each anchored at its own folder."""

    def __init__(self) -> None:
        self._by_dir: Dict[Path, Optional["pathspec.PathSpec"]] = {}

    def _load(self, folder: Path) -> Optional["pathspec.PathSpec"]:
        if folder not in self._by_dir:
            spec = None
            ignore_file = folder / ".gitignore"
            if os.path.isfile(ignore_file):
                try:
                    spec = _gitignore_spec(ignore_file.read_text(encoding="utf-8", errors="replace").splitlines())
                except OSError:
                    spec = None
            self._by_dir[folder] = spec
        return self._by_dir[folder]

    def ignored(self, path: Path, is_dir: bool, top: Path) -> bool:
        """Checks the .gitignore of every folder from ``top`` down to ``path``'s parent."""
        for folder in (path.parent, *path.parent.parents):
            spec = self._load(folder)
            if spec is not None:
                relative = path.relative_to(folder).as_posix() + ("/" if is_dir else "")
                if spec.match_file(relative):
                    return True
            if folder == top:
                break
        return False


def _git_top(start: Path) -> Path:
    """The repository root above ``start`` (where .gitignore files start to apply), else ``start``."""
    return git_root(start) or start


def git_root(start: Path) -> Optional[Path]:
    """The folder at or above ``start`` (resolved) that holds ``.git``, if any."""
    for folder in (start, *start.parents):
        if os.path.lexists(folder / ".git"):  # False, not an error, in a folder this user cannot look into
            return folder
    return None


def package_root(folder: Path) -> Path:
    """The folder above the outermost Python package that holds ``folder`` (resolved), as Python imports it
    (``site-packages`` for ``site-packages/torch/testing``); ``folder`` itself when it is no package."""
    while os.path.isfile(folder / "__init__.py") and folder.parent != folder:
        folder = folder.parent
    return folder


def discover(paths: Sequence[str], settings: Settings, force_exclude: bool = False) -> Discovery:
    exclude = _LazySpec(exclude_patterns(settings))
    root = settings.root.resolve()

    def excluder(top: Path):
        """Patterns match below ``top`` (a path given on the command line); patterns anchored at the
        configuration's folder apply too, unless ``top`` itself lies in an excluded folder (explicit wins)."""
        top_in_root = _relative(top, root)
        use_root = top_in_root is not None and not (top_in_root and exclude.match_file(top_in_root + "/"))

        def excluded(path: Path, is_dir: bool) -> bool:
            suffix = "/" if is_dir else ""
            below_top = _relative(path, top)
            if below_top and exclude.match_file(below_top + suffix):
                return True
            in_root = _relative(path, root) if use_root else None
            # (below the root itself the two paths are one: matched once)
            return bool(in_root) and in_root != below_top and exclude.match_file(in_root + suffix)

        return excluded

    gitignores = _GitIgnores()
    found: Dict[Path, Path] = {}  # resolved -> as given/walked (keeps relative display paths)
    result = Discovery()

    def unreadable(exc: OSError) -> None:  # os.walk would skip a folder it cannot list without a word
        result.problems.append((display_path(Path(exc.filename)),
                                f"cannot read this folder: {exc.strerror or exc}; its files were not checked"))

    for raw in paths:
        given = Path(raw)
        kind = _kind(given)
        if kind in ("missing", "loop"):
            if kind == "loop":
                result.problems.append((display_path(given), _LOOP))
            else:
                result.missing.append(raw)
            continue
        if kind == "other":  # a FIFO would block the read forever, a device never ends
            result.problems.append((display_path(given), f"not a regular file ({_kind_name(given)}); not checked"))
            continue
        absolute = _resolve(given) if not given.is_absolute() else given
        if kind == "file" and not is_source_file(given):
            result.unsupported.append(raw)
            continue
        if kind == "file":
            excluded = excluder(root if _relative(absolute, root) is not None else absolute.parent)
            if not (force_exclude and (excluded(absolute, False) or gitignores.ignored(absolute, False, _git_top(absolute.parent)))):
                found.setdefault(absolute, given)
            continue
        if force_exclude and excluder(root)(absolute, True):
            continue
        excluded = excluder(absolute)
        top = _git_top(absolute)
        if top != absolute and gitignores.ignored(absolute, True, top):
            top = absolute  # an ignored folder given explicitly: only .gitignore files inside it apply
        for folder, dirnames, filenames in os.walk(given, followlinks=False, onerror=unreadable):
            folder_path = Path(folder)
            folder_abs = (absolute / folder_path.relative_to(given)).resolve() if folder_path != given else absolute
            keep = []
            for name in sorted(dirnames):
                child = folder_abs / name
                if (folder_path / name).is_symlink():
                    continue  # never follow a symlinked folder: it can lead out of the tree or loop
                if excluded(child, True) or gitignores.ignored(child, True, top):
                    continue
                keep.append(name)
            dirnames[:] = keep
            for name in sorted(filenames):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                child = folder_abs / name
                if excluded(child, False) or gitignores.ignored(child, False, top):
                    continue
                kind = _kind(folder_path / name)
                if kind == "loop":
                    result.problems.append((display_path(folder_path / name), _LOOP))
                if kind != "file":  # FIFOs, sockets, devices, dangling links (editor lock files): not source
                    continue
                found.setdefault(_resolve(child) if (folder_path / name).is_symlink() else child, folder_path / name)
    result.files = sorted(found.values(), key=lambda p: display_path(p))
    return result


_LOOP = "a symbolic link loop: it leads back to itself, never to a file; not checked"


def _kind(path: Path) -> str:
    """"file" (regular, after links), "dir", "missing", "loop" or "other" (FIFO, socket, device)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return "loop" if exc.errno == errno.ELOOP else "missing"
    return "file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode) else "other"


def _kind_name(path: Path) -> str:
    from torchlint.run.fileio import file_kind

    return file_kind(os.stat(path).st_mode)


def _resolve(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a loop further up: the path as it is still names the file
        return path.absolute()


def _relative(path: Path, base: Path) -> Optional[str]:
    try:
        relative = path.relative_to(base).as_posix()
    except ValueError:
        return None
    return "" if relative == "." else relative


def display_path(path: Path) -> str:
    """Relative to the current folder where possible, as Ruff and the compilers print it."""
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return str(path)


def is_source_file(path: Path) -> bool:
    """A Python file, stub or notebook by its name, or a script whose first line runs Python."""
    if path.suffix in SOURCE_SUFFIXES:
        return True
    try:
        with path.open("rb") as f:
            first = f.readline(200)
    except OSError:
        return True  # reading will report the problem
    return first.startswith(b"#!") and b"python" in first
