"""Per-file settings, as Ruff resolves them: each file uses the closest configuration file above it.

``--config FILE`` overrides that for every file, and ``--isolated`` reads none. Command-line options go on top of whichever file applies,
so ``torchlint check a.py sub/b.py`` and ``torchlint check sub/b.py a.py`` give the same results.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional, Tuple

from torchlint.config import Settings, find_config, load_config, merge_layer, with_declared_torch
from torchlint.run.discovery import git_root, package_root
from torchlint.config.torch_requirement import declared_torch_version, project_folder


@dataclass(frozen=True)
class CliOverrides:
    """What the command line changes in every file's settings: first ``--config KEY=VALUE`` (as one more
    configuration layer), then the flags (Ruff's order: select replaces the file's whole selection, ignores
    included; extend-select and ignore add to it)."""

    inline: Tuple[Tuple[Tuple[str, Any], ...], ...] = ()  # each --config KEY=VALUE: ((Settings field, value), ...)
    select: Optional[Tuple[str, ...]] = None
    extend_select: Tuple[str, ...] = ()
    ignore: Tuple[str, ...] = ()
    torch_version: Optional[Tuple[int, int]] = None
    unsafe_fixes: Optional[bool] = None
    max_file_size: Optional[int] = None

    def apply(self, settings: Settings) -> Settings:
        for layer in self.inline:
            settings = merge_layer(settings, dict(layer))
        if self.select is not None:
            settings = replace(settings, select=self.select, ignore=(), extend_select=())
        changes: dict = {}
        if self.extend_select:
            changes["extend_select"] = settings.extend_select + self.extend_select
        if self.ignore:
            changes["ignore"] = settings.ignore + self.ignore
        if self.torch_version is not None:
            changes["torch_version"], changes["torch_version_origin"] = self.torch_version, "--torch-version"
        if self.unsafe_fixes is not None:
            changes["unsafe_fixes"] = self.unsafe_fixes
        if self.max_file_size is not None:
            changes["max_file_size"] = self.max_file_size
        return replace(settings, **changes)


@dataclass(frozen=True)
class ConfigTree:
    """Settings for any path; picklable, so worker processes resolve the same settings the parent did."""

    overrides: CliOverrides = CliOverrides()
    config: Optional[Path] = None  # --config: one file for every path
    cwd: Path = Path(".")  # where files without any configuration file are anchored (resolved)
    isolated: bool = False  # --isolated: no configuration file at all

    def for_path(self, path: Path) -> Settings:
        """The settings for a file or folder (a folder's own configuration file applies to it)."""
        folder = path if path.is_dir() else path.parent
        return _settings_for_folder(self, Path(folder).resolve() if str(folder) else self.cwd)

    def for_file(self, path: Path) -> Settings:
        """``for_path`` of a file, without a ``stat`` or ``resolve`` per file: one per folder."""
        return _settings_for_folder_as_given(self, str(path.parent))


@lru_cache(maxsize=4096)
def _settings_for_folder_as_given(tree: ConfigTree, folder: str) -> Settings:
    # Keyed on the folder as written: forget_configuration_files() clears it, as the working folder may change.
    return _settings_for_folder(tree, Path(folder).resolve() if folder else tree.cwd)


@lru_cache(maxsize=1024)
def _settings_for_folder(tree: ConfigTree, folder: Path) -> Settings:
    path = tree.config if tree.config is not None or tree.isolated else find_config(folder)
    if path is not None:
        settings = tree.overrides.apply(_load(path))
    else:
        # No configuration file: excludes and the cache are anchored at the current folder, as in Ruff; test
        # paths at the repository root, else above the file's top-level package, so that results never
        # depend on where torchlint runs.
        settings = tree.overrides.apply(Settings(root=tree.cwd, project_root=git_root(folder) or package_root(folder)))
    if tree.isolated:
        return settings  # no configuration read, nor the project's requirements
    # No torch version set: the project's own torch requirement, read from the configuration's folder (else
    # the file's) upwards.
    return with_declared_torch(settings, path.parent.resolve() if path is not None else folder)


@lru_cache(maxsize=256)
def _load(path: Path) -> Settings:
    return load_config(path)


def forget_configuration_files() -> None:
    """Read configuration files afresh (a new command in the same process: tests, the editor server)."""
    _settings_for_folder.cache_clear()
    _settings_for_folder_as_given.cache_clear()
    _load.cache_clear()
    declared_torch_version.cache_clear()
    project_folder.cache_clear()
