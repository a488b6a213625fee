"""``--show-files`` and ``--show-settings``: what a run would check, and with which settings (as Ruff's)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List, Optional, Sequence

from torchlint.config import Settings
from torchlint.config.tree import ConfigTree
from torchlint.run.discovery import exclude_patterns, is_test_file, test_path_patterns
from torchlint.run.job import rules_for


def file_lines(files: Sequence[Path], tree: ConfigTree) -> List[str]:
    """Each file as an absolute path, as Ruff prints them; test files (``test-paths``) say so."""
    lines = []
    for path in sorted(files, key=lambda p: os.path.abspath(p)):
        test = "  (test file)" if is_test_file(str(path), tree.for_file(path)) else ""
        lines.append(os.path.abspath(path) + test)
    return lines


def settings_lines(path: Path, tree: ConfigTree, cache_dir: Optional[Path]) -> List[str]:
    """The settings that apply to ``path`` (a file, or a folder's own), one ``key = value`` a line."""
    is_file = not path.is_dir()
    settings = tree.for_file(path) if is_file else tree.for_path(path)
    lines = [f"Resolved settings for: {os.path.abspath(path)}",
             f"Settings path: {settings.config_path or 'none (the defaults)'}", ""]
    if settings.project_root is not None:
        lines.append(f"project-root = {_toml(str(settings.project_root))}  # {_project_root_source(settings)}")
    if settings.select is None:
        lines.append("# select is not set: the default set (every rule not marked opt-in)")
    else:
        lines.append(f"select = {_toml(settings.select)}")
    lines += [
        f"extend-select = {_toml(settings.extend_select)}",
        f"ignore = {_toml(settings.ignore)}",
        "per-file-ignores = {" + ", ".join(f"{_toml(glob)} = {_toml(codes)}" for glob, codes in settings.per_file_ignores) + "}",
        f"exclude = {_toml(_without(exclude_patterns(settings), settings.extend_exclude))}",
        f"extend-exclude = {_toml(settings.extend_exclude)}",
        f"test-paths = {_toml(_without(test_path_patterns(settings), settings.extend_test_paths))}",
        f"extend-test-paths = {_toml(settings.extend_test_paths)}",
        f"torch-version = {_toml('.'.join(map(str, settings.torch_version)))}  # {settings.torch_version_origin}",
        f"unsafe-fixes = {_toml(settings.unsafe_fixes)}",
        f"max-file-size = {settings.max_file_size}",
        f"cache-dir = {_toml(str(cache_dir))}" if cache_dir is not None else "# cache-dir: none (--no-cache)",
    ]
    if is_file:
        lines.append(f"is-test-file = {_toml(is_test_file(str(path), settings))}")
    lines.append(f"rules = {_toml([rule.code for rule in rules_for(settings, path if is_file else None)])}"
                 + ("  # the rules that run on this file" if is_file else ""))
    return lines


def _project_root_source(settings: Settings) -> str:
    if settings.config_path is not None:
        return "the configuration file's folder"
    if os.path.lexists(Path(settings.project_root or ".") / ".git"):
        return "the repository root"
    return "above the file's top-level package (no configuration file, no repository)"


def _without(patterns: Sequence[str], extension: Sequence[str]) -> Sequence[str]:
    """The patterns in effect less their ``extend-*`` part (which comes last): the defaults or the setting."""
    return patterns[:len(patterns) - len(extension)]


def _toml(value: object) -> str:
    return json.dumps(list(value) if isinstance(value, tuple) else value)
