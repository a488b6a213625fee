"""The PyTorch version a project targets when its settings name none: the lowest version its own torch
requirement allows (``torch>=2.1,<3`` -> 2.1, ``torch==2.4.*`` -> 2.4).

The requirement is read where a project declares it: ``[project] dependencies`` and
``optional-dependencies`` in ``pyproject.toml``, the ``requirements*.txt`` files beside it, and the
``dependencies`` of a conda ``environment.yml`` (``pytorch==1.5.0``, ``pytorch=1.13``, its ``pip:`` list). This is a
small reader of PEP 440 versions and PEP 508 requirements for the forms that occur in such files, not a
full implementation (``packaging`` is not a dependency): anything it cannot read with certainty gives no
version, with the reason, and the caller keeps its default.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# PEP 440's public and local versions (epoch, release, pre, post, dev, local), case-insensitive.
_VERSION = re.compile(
    r"^v?(?:\d+!)?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_.]?\d*)?"
    r"(?:-\d+|[-_.]?(?:post|rev|r)[-_.]?\d*)?"
    r"(?:[-_.]?dev[-_.]?\d*)?"
    r"(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?$",
    re.IGNORECASE,
)
_CLAUSE = re.compile(r"^(~=|===|==|!=|<=|>=|<|>)\s*(\S+)$")
# PEP 508: a name, optional [extras], then a version specifier (optionally in parentheses) or `@ URL`, then
# an optional `; marker`.
_REQUIREMENT = re.compile(r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[[^\]]*\])?\s*(?P<rest>[^;]*)")


def release(version: str) -> Optional[Tuple[int, ...]]:
    """The release numbers of a PEP 440 version (``2.4.0+cu121`` -> (2, 4, 0)); None if it is not one."""
    match = _VERSION.match(version.strip())
    return tuple(int(part) for part in match.group("release").split(".")) if match else None


def major_minor(numbers: Sequence[int]) -> Tuple[int, int]:
    return numbers[0], numbers[1] if len(numbers) > 1 else 0


class Unsure(Exception):
    """A requirement this reader cannot turn into a lowest version with certainty; the message says why."""


def lowest_allowed(specifier: str) -> Optional[Tuple[int, int]]:
    """The major.minor of the lowest version a specifier set allows (``>=2.1,<3`` -> (2, 1)); None when it
    sets no lower bound (``""``, ``<3``). Raises ``Unsure`` for forms it cannot decide."""
    lower: Optional[Tuple[int, ...]] = None
    uppers: List[Tuple[str, Tuple[int, ...]]] = []
    excluded: List[Tuple[int, ...]] = []
    for raw in specifier.split(","):
        clause = raw.strip()
        if not clause:
            continue
        match = _CLAUSE.match(clause)
        if not match:
            raise Unsure(f"{clause!r} is not a version specifier")
        operator, version = match.groups()
        wildcard = version.endswith(".*") and operator in ("==", "!=")
        numbers = release(version[:-2] if wildcard else version)
        if numbers is None:
            raise Unsure(f"{version!r} is not a PEP 440 version")
        if operator in ("<", "<="):
            uppers.append((operator, numbers))
        elif operator == "!=":
            if wildcard:
                excluded.append(numbers)
        else:  # >=, >, ~=, ==, ===: the versions start at (or just above) this one
            lower = numbers if lower is None else max(lower, numbers)
    if lower is None:
        return None
    for operator, numbers in uppers:
        if _padded(numbers) < _padded(lower) or (operator == "<" and _padded(numbers) == _padded(lower)):
            raise Unsure(f"{specifier!r} allows no version")
    if any(len(prefix) <= 2 and major_minor(lower)[: len(prefix)] == prefix for prefix in excluded):
        raise Unsure(f"{specifier!r} excludes the series its lower bound names")
    return major_minor(lower)


def _padded(numbers: Tuple[int, ...]) -> Tuple[int, ...]:
    """Release numbers compared as PEP 440 does: 2.1 == 2.1.0."""
    return numbers + (0,) * (8 - len(numbers))


def torch_specifier(requirement: str) -> Optional[str]:
    """The version specifier of a requirement on torch (``""`` for a bare ``torch``); None for another
    package. Raises ``Unsure`` for a torch requirement given as a URL."""
    match = _REQUIREMENT.match(requirement.strip())
    if not match or re.sub(r"[-_.]+", "-", match.group("name")).lower() != "torch":
        return None
    rest = match.group("rest").strip()
    if rest.startswith("@"):
        raise Unsure("a URL names no version range")
    if rest.startswith("(") and rest.endswith(")"):
        rest = rest[1:-1]
    return rest


@dataclass(frozen=True)
class Declared:
    """What a project's files say of torch: the lowest version allowed, or None with the reason."""

    version: Optional[Tuple[int, int]]
    origin: str  # where the version came from, or why there is none


def requirement_lines(text: str) -> List[Tuple[int, str]]:
    """(line number, requirement) of a requirements file: comments, options (``-r``, ``--index-url``,
    ``-e``) and blank lines left out, backslash continuations joined."""
    out: List[Tuple[int, str]] = []
    pending, start = "", 0
    for number, line in enumerate(text.splitlines(), start=1):
        line = re.sub(r"(^|\s)#.*", "", line)
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined, pending = (pending + line).strip(), ""
        if joined and not joined.startswith("-"):
            out.append((start, joined))
    return out


# conda environment files: their `dependencies` name conda's `pytorch` package (or pip's `torch` in `pip:`)
_CONDA_FILES = ("environment.yml", "environment.yaml")
# a `dependencies` item: an optional `channel::`, the package, then conda's match spec
_CONDA_ITEM = re.compile(r"^(?:[\w.-]+::)?(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)\s*(?P<spec>[^#]*)")


def conda_requirements(text: str) -> List[Tuple[int, str]]:
    """(line number, requirement) for the torch of a conda environment file's ``dependencies`` (its ``pip:``
    list included), written as pip's: ``pytorch==1.5.0`` -> ``torch==1.5.0``; conda's one ``=`` matches a
    version prefix (``pytorch=1.13`` -> ``torch==1.13.*``); a build string after a second ``=`` is left out.
    Read line by line (no YAML library): the items under the top-level ``dependencies:`` key."""
    out: List[Tuple[int, str]] = []
    inside = False
    for number, line in enumerate(text.splitlines(), start=1):
        if line and not line[0].isspace() and not line.startswith("-"):
            inside = line.split("#", 1)[0].strip() == "dependencies:"
            continue
        item = line.strip()
        if not inside or not item.startswith("- "):
            continue
        match = _CONDA_ITEM.match(item[2:].strip().strip("'\""))
        if not match or match.group("name").lower() not in ("pytorch", "torch"):
            continue
        spec = match.group("spec").strip().strip("'\"").replace(" ", "")
        if spec.startswith("=") and not spec.startswith("=="):  # conda's prefix match, maybe with a build
            version = spec[1:].split("=", 1)[0]
            spec = f"=={version}" if version.endswith("*") else f"=={version}.*"
        elif spec.startswith("==") and "=" in spec[2:]:
            spec = spec.split("=")[0] + "==" + spec[2:].split("=", 1)[0]
        out.append((number, f"torch{spec}"))
    return out


def _declarations(root: Path) -> List[Tuple[str, str]]:
    """(where, requirement) for every requirement declared in ``root``'s pyproject.toml, requirements*.txt and
    conda environment file."""
    found: List[Tuple[str, str]] = []
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            with pyproject.open("rb") as f:
                project = tomllib.load(f).get("project", {})
        except (OSError, ValueError, RecursionError):  # not TOML, not UTF-8, nested too deep: another tool's
            project = {}                               # problem, and no declaration of ours
        if isinstance(project, dict):
            groups = [("dependencies", project.get("dependencies"))]
            optional = project.get("optional-dependencies")
            if isinstance(optional, dict):
                groups += [(f"optional-dependencies.{name}", deps) for name, deps in optional.items()]
            for group, deps in groups:
                if isinstance(deps, list):
                    found += [(f"{pyproject} [project] {group}", dep) for dep in deps if isinstance(dep, str)]
    for requirements in sorted(root.glob("requirements*.txt")):
        try:
            text = requirements.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        found += [(f"{requirements}:{number}", line) for number, line in requirement_lines(text)]
    for name in _CONDA_FILES:
        environment = root / name
        try:
            text = environment.read_text(encoding="utf-8", errors="replace") if environment.is_file() else ""
        except OSError:
            continue
        found += [(f"{environment}:{number}", line) for number, line in conda_requirements(text)]
    return found


@lru_cache(maxsize=1024)
def project_folder(folder: Path) -> Optional[Path]:
    """The nearest folder at or above ``folder`` that declares requirements (a pyproject.toml, a
    requirements*.txt or a conda environment file), not looking above a repository root (a folder holding
    ``.git``). Cached per folder, so the folders of a large tree share their parents' answers."""
    if (folder / "pyproject.toml").is_file() or any(folder.glob("requirements*.txt")) \
            or any((folder / name).is_file() for name in _CONDA_FILES):
        return folder
    if (folder / ".git").exists() or folder.parent == folder:
        return None
    return project_folder(folder.parent)


@lru_cache(maxsize=256)
def declared_torch_version(start: Path) -> Declared:
    """The lowest torch version the project around ``start`` (a resolved folder) declares it supports."""
    root = project_folder(start)
    if root is None:
        return Declared(None, "no pyproject.toml, requirements*.txt or environment.yml found")
    lowest: Optional[Tuple[Tuple[int, int], str]] = None
    bare: Optional[str] = None
    for where, requirement in _declarations(root):
        try:
            specifier = torch_specifier(requirement)
            if specifier is None:
                continue
            version = lowest_allowed(specifier)
        except Unsure as reason:
            return Declared(None, f"cannot tell the lowest version of {requirement!r} ({where}): {reason}")
        if version is None:
            bare = bare or f"{where}: {requirement!r} sets no lower bound"
        elif lowest is None or version < lowest[0]:
            lowest = (version, f"{where}: {requirement!r}")
    if lowest is not None:
        return Declared(*lowest)
    return Declared(None, bare or f"no torch requirement in {root}")
