"""Which files to check: recurse into folders, honour excludes and .gitignore, never leave the tree."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

import pathspec

from torchlint.config import Settings

DEFAULT_EXCLUDE = (
    ".git", ".hg", ".svn", ".bzr", ".venv", "venv", ".tox", ".nox", ".eggs", "*.egg-info", "site-packages",
    "node_modules", "build", "dist", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache",
    ".torchlint_cache", ".ipynb_checkpoints",
)
SOURCE_SUFFIXES = (".py", ".pyi", ".ipynb")  # what a folder walk finds; a named file may also be a script


def _spec(patterns: Iterable[str]) -> pathspec.PathSpec:
    return pathspec.GitIgnoreSpec.from_lines(list(patterns))


@dataclass
class Discovery:
    files: List[Path] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)  # explicit paths that do not exist
    unsupported: List[str] = field(default_factory=list)  # explicit files that are neither Python nor notebooks


class _GitIgnores:
    """The .gitignore files that apply below a folder, each anchored at its own folder."""

    def __init__(self) -> None:
        self._by_dir: Dict[Path, Optional[pathspec.PathSpec]] = {}

    def _load(self, folder: Path) -> Optional[pathspec.PathSpec]:
        if folder not in self._by_dir:
            spec = None
            ignore_file = folder / ".gitignore"
            if ignore_file.is_file():
                try:
                    spec = _spec(ignore_file.read_text(encoding="utf-8", errors="replace").splitlines())
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
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return start


def discover(paths: Sequence[str], settings: Settings, force_exclude: bool = False) -> Discovery:
    exclude = _spec((*(settings.exclude or DEFAULT_EXCLUDE), *settings.extend_exclude))
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
            return bool(in_root) and exclude.match_file(in_root + suffix)

        return excluded

    gitignores = _GitIgnores()
    found: Dict[Path, Path] = {}  # resolved -> as given/walked (keeps relative display paths)
    result = Discovery()
    for raw in paths:
        given = Path(raw)
        absolute = given.resolve() if not given.is_absolute() else given
        if not given.exists():
            result.missing.append(raw)
            continue
        if given.is_file() and not is_source_file(given):
            result.unsupported.append(raw)
            continue
        if given.is_file():
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
        for folder, dirnames, filenames in os.walk(given, followlinks=False):
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
                found.setdefault(child.resolve() if (folder_path / name).is_symlink() else child, folder_path / name)
    result.files = sorted(found.values(), key=lambda p: display_path(p))
    return result


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
