"""Settings: defaults, ``[tool.torchlint]`` in pyproject.toml or torchlint.toml, then CLI flags."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# The newest PyTorch torchlint's rules were checked against; anything >= 2.0 behaves the same today.
DEFAULT_TORCH_VERSION = (2, 13)
DEFAULT_MAX_FILE_SIZE = 2 * 1024 * 1024
CONFIG_FILES = ("torchlint.toml", "pyproject.toml")
DEFAULT_ORIGIN = "default"  # no setting names a torch version (yet)
_SELECTOR = re.compile(r"^(ALL|TL\d{0,3})$")


class ConfigError(Exception):
    """A bad configuration file or flag: exit code 2, with a message that says what is allowed."""


@dataclass(frozen=True)
class Settings:
    select: Optional[Tuple[str, ...]] = None  # None: the default set (every rule with default_enabled)
    ignore: Tuple[str, ...] = ()
    extend_select: Tuple[str, ...] = ()
    exclude: Tuple[str, ...] = ()
    extend_exclude: Tuple[str, ...] = ()
    per_file_ignores: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()
    torch_version: Tuple[int, int] = DEFAULT_TORCH_VERSION
    # Where torch_version came from: a flag, a configuration file, the project's declared torch requirement
    # (``torch_requirement.py``), or DEFAULT_ORIGIN (then the requirement is read: ``with_declared_torch``).
    torch_version_origin: str = DEFAULT_ORIGIN
    unsafe_fixes: bool = False
    max_file_size: int = DEFAULT_MAX_FILE_SIZE  # bytes; larger files get one TL000 and are not read
    test_paths: Optional[Tuple[str, ...]] = None  # None: discovery.DEFAULT_TEST_PATHS
    extend_test_paths: Tuple[str, ...] = ()
    # Where the config file was found: relative exclude and per-file-ignores globs are anchored here.
    root: Path = field(default_factory=Path.cwd)
    config_path: Optional[Path] = None
    # Where test-paths are anchored: the configuration file's folder, else the repository root (.git), else the
    # folder above the file's top-level package; never the current folder. None (a bare Settings()): the path
    # as given.
    project_root: Optional[Path] = None


def parse_torch_version(value: str, where: str = "--torch-version") -> Tuple[int, int]:
    """Any PEP 440 version (``2.4``, ``2.4.0+cu121`` as ``torch.__version__`` prints it, ``2.5.0rc1``);
    rules only tell major.minor apart."""
    from torchlint.config.torch_requirement import major_minor, release

    numbers = release(str(value))
    if numbers is None:
        raise ConfigError(f"{where}: expected a PyTorch version such as '2.4', '1.13' or '2.4.0+cu121', "
                          f"got {value!r}")
    return major_minor(numbers)


def with_declared_torch(settings: Settings, start: Path) -> Settings:
    """Settings that name no torch version take the lowest one the project's torch requirement allows (read
    from ``start``, a resolved folder, upwards); the default stays, with the reason, where there is none."""
    if settings.torch_version_origin != DEFAULT_ORIGIN:
        return settings
    from torchlint.config.torch_requirement import declared_torch_version

    declared = declared_torch_version(start)
    if declared.version is None:
        version = ".".join(map(str, settings.torch_version))
        return replace(settings, torch_version_origin=f"default {version} ({declared.origin})")
    return replace(settings, torch_version=declared.version,
                   torch_version_origin=f"declared torch requirement: {declared.origin}")


def parse_selectors(values: Iterable[str], where: str) -> Tuple[str, ...]:
    """Codes, prefixes or ALL, comma-separated or repeated; each must select at least one rule."""
    from torchlint.registry import rule_codes  # the registry imports this module

    codes = rule_codes()
    out = []
    for raw in values:
        for part in str(raw).split(","):
            selector = part.strip().upper()
            if not selector:
                continue
            if not _SELECTOR.match(selector) or not any(selector_matches(selector, code) for code in codes):
                raise ConfigError(
                    f"{where}: unknown rule selector {part.strip()!r}: it matches no rule; expected a code such "
                    "as TL201, a prefix such as TL2, or ALL (run `torchlint rules`)"
                )
            out.append(selector)
    return tuple(out)


def _string_list(value: Any, where: str) -> Tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of strings, got {value!r}")
    return tuple(value)


def _per_file_ignores(value: Any, where: str) -> Tuple[Tuple[str, Tuple[str, ...]], ...]:
    if not isinstance(value, dict):
        raise ConfigError(f'{where}: expected a table of glob = ["CODE", ...], got {value!r}')
    return tuple(
        (glob, parse_selectors(_string_list(codes, f"{where}.{glob!r}"), f"{where}.{glob!r}"))
        for glob, codes in value.items()
    )


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    return value


_SIZE = re.compile(r"^\s*(\d+)\s*(|B|KB|KiB|MB|MiB|GB|GiB)\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "kb": 1000, "kib": 1024, "mb": 1000**2, "mib": 1024**2, "gb": 1000**3, "gib": 1024**3}


def parse_size(value: Any, where: str = "--max-file-size") -> int:
    """A size in bytes: an integer, or a string such as "512KiB" or "2MiB"."""
    match = _SIZE.match(str(value)) if isinstance(value, (int, str)) and not isinstance(value, bool) else None
    size = int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()] if match else 0
    if size < 1:
        raise ConfigError(f"{where}: expected a size in bytes such as 2097152, \"512KiB\" or \"2MiB\", got {value!r}")
    return size


# key in the file -> (Settings field, parser)
_KEYS = {
    "select": ("select", lambda v, w: parse_selectors(_string_list(v, w), w)),
    "ignore": ("ignore", lambda v, w: parse_selectors(_string_list(v, w), w)),
    "extend-select": ("extend_select", lambda v, w: parse_selectors(_string_list(v, w), w)),
    "exclude": ("exclude", _string_list),
    "extend-exclude": ("extend_exclude", _string_list),
    "per-file-ignores": ("per_file_ignores", _per_file_ignores),
    "torch-version": ("torch_version", lambda v, w: parse_torch_version(v, w)),
    "unsafe-fixes": ("unsafe_fixes", _bool),
    "max-file-size": ("max_file_size", parse_size),
    "test-paths": ("test_paths", _string_list),
    "extend-test-paths": ("extend_test_paths", _string_list),
}


def find_config(start: Path) -> Optional[Path]:
    """The nearest torchlint.toml, or pyproject.toml with a [tool.torchlint] table, at or above start."""
    start = start.resolve()
    for folder in (start, *start.parents):
        for name in CONFIG_FILES:
            candidate = folder / name
            if not os.path.isfile(candidate):  # False for a folder it may not look into, too
                continue
            if name == "torchlint.toml" or _has_torchlint_table(candidate):
                return candidate
    return None


def _has_torchlint_table(path: Path) -> bool:
    try:
        data = path.read_bytes()
    except OSError:
        return False
    try:
        return "torchlint" in _toml(data, path).get("tool", {})
    except ConfigError:  # it may hold our settings: running without them would mislead; else not ours
        if b"torchlint" in data:
            raise
        return False


def _toml(data: bytes, path: Path) -> Dict[str, Any]:
    """A TOML file's table; any way it fails to be TOML (bad syntax, not UTF-8, nested past the
    parser's recursion) is a ConfigError naming the file."""
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: not UTF-8 (byte {exc.start})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    except RecursionError:
        raise ConfigError(f"{path}: not valid TOML here: nested too deeply to read") from None


def load_config(path: Path) -> Settings:
    """A configuration file's settings over those of the files its ``extend`` chain names (as in Ruff).
    The chain is followed in a loop, not by recursion: hundreds of files deep is still a chain."""
    chain: List[Tuple[Path, Dict[str, Any]]] = []
    seen = set()
    while True:
        seen.add(path.resolve())
        table = _settings_table(path)
        chain.append((path, parse_table(table, str(path), allowed_extra=("extend",))))
        if "extend" not in table:
            break
        path = _extended(path, table["extend"], seen)
    settings = Settings()
    for path, values in reversed(chain):
        root = path.parent.resolve()
        settings = replace(merge_layer(settings, values), root=root, config_path=path, project_root=root)
    return settings


def _settings_table(path: Path) -> Dict[str, Any]:
    try:
        data = _toml(path.read_bytes(), path)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    # [tool.torchlint] wherever it is; else a pyproject.toml has no settings for us, and any other file
    # (torchlint.toml, or a file given with --config) holds them at its top level.
    table = data.get("tool", {}).get("torchlint")
    if table is None:
        table = {} if path.name == "pyproject.toml" else data
    return table


def parse_table(table: Dict[str, Any], where: str, allowed_extra: Tuple[str, ...] = ()) -> Dict[str, Any]:
    """A table of settings (a configuration file's, or ``--config KEY=VALUE``'s) as Settings fields."""
    values: Dict[str, Any] = {}
    for key, value in table.items():
        if key in allowed_extra:
            continue
        if key not in _KEYS:
            allowed = ", ".join(sorted([*_KEYS, *allowed_extra]))
            raise ConfigError(f"{where}: unknown key {key!r} in torchlint settings; allowed keys: {allowed}")
        attr, parse = _KEYS[key]
        values[attr] = parse(value, f"{where}: {key}")
    if "torch_version" in values:
        values["torch_version_origin"] = f"{where}: torch-version"
    return values


def parse_inline(text: str) -> Dict[str, Any]:
    """``--config 'KEY = VALUE'``: one setting in TOML, as Ruff's ``--config "line-length = 100"``."""
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        hint = (f"no such configuration file: {text!r}" if text.strip().endswith(".toml") else
                f"expected a configuration file or a TOML KEY = VALUE pair such as 'torch-version = \"2.4\"', "
                f"got {text!r} ({exc})")
        raise ConfigError(f"--config: {hint}") from exc
    return parse_table(table, f"--config {text!r}")


def _extended(path: Path, value: Any, seen: Set[Path]) -> Path:
    """The file named by ``extend`` (relative to this file)."""
    if not isinstance(value, str):
        raise ConfigError(f"{path}: extend: expected the path of another configuration file, got {value!r}")
    target = (path.parent / Path(value).expanduser()).resolve()
    if target in seen:
        raise ConfigError(f"{path}: extend: {value!r} extends itself in a cycle")
    if not target.is_file():
        raise ConfigError(f"{path}: extend: no such file: {value!r}")
    return target


def merge_layer(base: Settings, values: Dict[str, Any]) -> Settings:
    """Settings over others (a file over the file it extends, ``--config KEY=VALUE`` over a file): ``select``
    starts a new selection (dropping the base's ignores and extensions), ``ignore`` and the ``extend-*`` keys
    add, the rest replace."""
    if "select" in values:
        base = replace(base, ignore=(), extend_select=())
    merged = dict(values)
    for attr in ("ignore", "extend_select", "extend_exclude", "extend_test_paths"):
        if attr in values:
            merged[attr] = getattr(base, attr) + values[attr]
    return replace(base, **merged)


def selector_matches(selector: str, code: str) -> bool:
    return selector == "ALL" or code.startswith(selector)


def selected_codes(
    settings: Settings,
    all_codes: Sequence[str],
    extra_ignores: Sequence[str] = (),
    default_codes: Optional[Sequence[str]] = None,
) -> Tuple[str, ...]:
    """Ruff's order: select (without one, the default set), then extend-select adds, then ignore (and
    per-file ignores) removes."""
    if settings.select is None:
        chosen = set(all_codes if default_codes is None else default_codes)
    else:
        chosen = {c for c in all_codes if any(selector_matches(s, c) for s in settings.select)}
    chosen |= {c for c in all_codes if any(selector_matches(s, c) for s in settings.extend_select)}
    ignores = (*settings.ignore, *extra_ignores)
    chosen = {c for c in chosen if not any(selector_matches(s, c) for s in ignores)}
    return tuple(sorted(chosen))
