"""Run torchlint on a folder of real code and say, per rule, what it found and whether its fixes hold up.

    python benchmarks/real_code.py DIR [DIR ...] [--select CODES] [--jobs N] [--build-check] [--findings FILE]
                                   [--labels FILE] [--recall FILE]

Works on a temporary copy of the ``.py`` and ``.ipynb`` files, with the ``pyproject.toml`` and ``requirements*.txt``
files that declare the torch version (the folders themselves are never written). Steps:

1. ``torchlint check --unsafe-fixes`` (JSON): findings and fixable findings per rule;
2. ``torchlint fix --apply --unsafe-fixes``: the files it changed;
3. ``compile()`` (as py_compile) on every changed file: a file that no longer compiles counts against each rule that had a
   fix in it; a changed notebook must still be JSON, and its code cells (as torchlint reads them: IPython lines and
   cell magics left out, top-level ``await`` allowed) must compile where they compiled before the fix;
4. with ``--build-check`` (needs torch): each changed file is imported before and after the fix in a fresh
   interpreter (packages this machine lacks, e.g. torchvision, import as mocks, so a script's top level runs
   with empty loaders), and each ``nn.Module`` subclass it defines is built (required arguments set to 8); a
   module or class that worked before and fails after counts as broken (this catches e.g. ``bias=False`` on
   a layer whose ``.bias`` an init loop still touches);
5. ``check`` again: fixable findings still left (each one a change the next run would make), and a second
   ``fix --apply --unsafe-fixes``: files it changed (must be 0).

``--findings FILE`` writes every finding (``path:line:col: CODE message``, paths relative to the given
folders; in a notebook ``path:cell<N>:line:col``, the line counted in the cell) for reading. ``--labels FILE`` reads
a reviewer's verdicts, one per line ``<path>:<line> <CODE> right|arguable|wrong [note]`` (notebooks:
``<path>:cell<N>:<line>``), and adds the counts per rule to the table. ``--recall FILE`` reads a hand-made list of the
instances a reader found, one per line ``<path>:<line> <CODE> [# note]``, and prints how many of them a finding of
that rule on that line reports, each miss with the same rule's findings up to three lines away (a reader and the
tool may place one instance on different lines of a statement: judge those by eye).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

SKIP_DIRS = {".git", ".venv", "venv", "__pycache__", "node_modules", ".ipynb_checkpoints"}
SUFFIXES = (".py", ".ipynb")
# Where a project declares its torch (and its own torchlint settings): copied too, so that the copy is checked
# as the project itself is (a `torch==1.5` requirement turns fixes off that the API lacks there).
DECLARATIONS = {"pyproject.toml", "environment.yml", "environment.yaml"}  # the files that may declare torch
DECLARED_REQUIREMENTS = re.compile(r"^requirements.*\.txt$")


def copy_python_tree(sources: Sequence[Path], dest: Path) -> int:
    """Copies each folder's ``.py`` and ``.ipynb`` files (with its ``pyproject.toml``, ``requirements*.txt`` and
    conda ``environment.yml`` files: what declares the torch version) under ``dest/<folder name>``; returns the
    ``.py`` lines."""
    lines = 0
    for source in sources:
        for root, dirs, files in os.walk(source):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
            for name in files:
                if not (name.endswith(SUFFIXES) or name in DECLARATIONS or DECLARED_REQUIREMENTS.match(name)):
                    continue
                path = Path(root) / name
                target = dest / source.name / path.relative_to(source)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
                if name.endswith(".py"):
                    with path.open("rb") as f:
                        lines += sum(1 for _ in f)
    return lines


def tree_files(tree: Path) -> List[Path]:
    return sorted(p for suffix in SUFFIXES for p in tree.rglob("*" + suffix))


def digests(tree: Path) -> Dict[str, str]:
    return {str(p.relative_to(tree)): hashlib.sha1(p.read_bytes()).hexdigest() for p in tree_files(tree)}


def compile_problem(path: Path) -> Optional[str]:
    """Why a file does not compile (a notebook: why it is no notebook, or why its code cells do not), or None."""
    data = path.read_bytes()
    if path.suffix != ".ipynb":
        try:  # what py_compile does, without writing a .pyc
            compile(data, str(path), "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as error:
            return str(error)
        return None
    from torchlint.run.notebook import NotebookError, NotebookProgram  # the cells as torchlint reads them

    try:
        program = NotebookProgram.parse(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, NotebookError) as error:
        return f"not a notebook: {error}"
    try:
        compile(program.text, str(path), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    except (SyntaxError, ValueError) as error:
        return f"cells do not compile: {error}"
    return None


SELECT: List[str] = []  # --select, passed to every torchlint run


def torchlint(args: List[str], cwd: Path, jobs: int) -> Tuple[subprocess.CompletedProcess, float]:
    command = [sys.executable, "-m", "torchlint", *args, *SELECT, "--no-cache", "--jobs", str(jobs), "."]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode == 2 and "internal error" not in result.stdout + result.stderr:
        sys.exit(f"torchlint failed: {' '.join(command)}\n{result.stdout}\n{result.stderr}")
    return result, elapsed


def check_json(tree: Path, jobs: int) -> Tuple[List[dict], float]:
    result, elapsed = torchlint(["check", "--unsafe-fixes", "--output-format", "json", "--exit-zero"], tree, jobs)
    return json.loads(result.stdout or "[]"), elapsed


# Imports a file (by path, with its folder and the folders above it on sys.path, as a script would have) and
# builds every nn.Module subclass it defines that takes no required arguments. Prints a JSON summary.
BUILD_PROBE = r"""
import importlib.abc, importlib.machinery, importlib.util, inspect, json, os, sys, types, warnings
from unittest import mock
warnings.simplefilter("ignore")
path = os.path.abspath(sys.argv[1])
for parent in reversed([os.path.dirname(path)] + [str(p) for p in __import__("pathlib").Path(path).parents][1:4]):
    sys.path.insert(0, parent)


class Stubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    # Packages this machine lacks (torchvision, gym, matplotlib...) import as mocks, so that the file's own
    # code still runs; torch itself is real.
    def find_spec(self, name, target_path=None, target=None):
        top = name.split(".")[0]
        if top in ("torch", "numpy", "probe_target") or top in sys.stdlib_module_names or top.startswith("_"):
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        module = mock.MagicMock(name=spec.name)
        module.__path__, module.__spec__, module.__name__ = [], spec, spec.name
        return module

    def exec_module(self, module):
        pass


sys.meta_path.append(Stubs())
out = {"imported": False, "built": {}}
module = None
try:
    import torch
    torch.set_num_threads(1)
    spec = importlib.util.spec_from_file_location("probe_target", path)
    module = importlib.util.module_from_spec(spec)
    sys.argv = [path]
    spec.loader.exec_module(module)
    out["imported"] = True
except BaseException as error:
    out["error"] = f"{type(error).__name__}: {error}"[:200]
for name, cls in (vars(module).items() if module is not None else ()):
    if not (inspect.isclass(cls) and issubclass(cls, torch.nn.Module) and cls.__module__ == "probe_target"):
        continue
    try:
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError):
        continue
    # Required arguments get a small int (channel counts, sizes): compared before/after, any build that
    # worked on the original is a fair probe of the fixed file.
    required = {p.name: 8 for p in params
                if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if len(required) > 6:
        continue
    try:
        cls(**required)
        out["built"][name] = "ok"
    except BaseException as error:
        out["built"][name] = f"{type(error).__name__}: {error}"[:200]
print("PROBE" + json.dumps(out))
"""


def probe(path: Path, timeout: float) -> dict:
    try:
        result = subprocess.run(
            [sys.executable, "-c", BUILD_PROBE, str(path)], capture_output=True, text=True, timeout=timeout,
            cwd=path.parent, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return {"imported": False, "error": "timeout", "built": {}}
    for line in reversed(result.stdout.splitlines()):
        if line.startswith("PROBE"):
            return json.loads(line[5:])
    return {"imported": False, "error": (result.stderr or "no output")[-200:], "built": {}}


def build_regressions(before: Path, after: Path, timeout: float) -> List[str]:
    """What worked in ``before`` and fails in ``after``: the import, or building a class."""
    old, new = probe(before, timeout), probe(after, timeout)
    if old["imported"] and not new["imported"]:
        return [f"import (running the file's top level): {new.get('error')}"]
    return [
        f"{name}(): {new['built'].get(name)}"
        for name, state in old["built"].items()
        if state == "ok" and new["built"].get(name, "ok") != "ok"
    ]


# `<path>:<line> <CODE> right|arguable|wrong  # note`; a path may hold spaces (`Char05 DDPG/DDPG.py`) or `#`
_LABEL = re.compile(r"^(?P<file>.+?):(?P<line>\d+)\s+(?P<code>TL\d{3})\s+(?P<verdict>right|arguable|wrong)\b")


def place(finding: dict) -> str:
    """A finding's ``path:line``, as labels and recall lists name it (in a notebook ``path:cell<N>:line``)."""
    path = os.path.normpath(finding["path"])
    cell = finding.get("cell")
    return f"{path}:cell{cell}:{finding['line']}" if cell is not None else f"{path}:{finding['line']}"


_INSTANCE = re.compile(r"^(?P<file>.+?):(?P<line>\d+)\s+(?P<code>TL\d{3})\b")


def _matched_lines(path: Path, pattern: "re.Pattern[str]", form: str) -> Iterator["re.Match[str]"]:
    """Each line of ``path`` matched by ``pattern``; ``#`` lines and blank lines skipped, any other line an error
    that names its line and the ``form`` expected."""
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        match = pattern.match(raw.strip())
        if match is None:
            raise SystemExit(f"{path}:{number}: not {form}: {raw!r}")
        yield match


def read_recall(path: Path) -> List[Tuple[str, int, str]]:
    """A reader's instances: ``<path>:<line> <CODE> [# note]`` a line."""
    return [(m["file"], int(m["line"]), m["code"])
            for m in _matched_lines(path, _INSTANCE, "an instance (<path>:<line> <CODE>)")]


def score_recall(instances: Sequence[Tuple[str, int, str]], findings: Sequence[dict]) -> List[str]:
    """Report lines: found/total per file and in all, then each miss with the same rule's findings near it."""
    at: Dict[Tuple[str, str], List[int]] = defaultdict(list)
    for f in findings:
        file, _, line = place(f).rpartition(":")
        at[(file, f["code"])].append(int(line))
    per_file: Dict[str, Counter] = defaultdict(Counter)
    misses = []
    for file, line, code in instances:
        lines = at.get((os.path.normpath(file), code), [])
        found = line in lines
        per_file[re.sub(r":cell\d+$", "", file)]["found" if found else "missed"] += 1  # a notebook: all its cells
        if not found:
            near = sorted(n for n in lines if abs(n - line) <= 3)
            misses.append(f"  missed {file}:{line} {code}" + (f"  (near: {code} at line {', '.join(map(str, near))})"
                                                               if near else ""))
    found = sum(c["found"] for c in per_file.values())
    report = [f"recall: {found} of {len(instances)} instances found"
              + (f" ({100 * found / len(instances):.0f}%)" if instances else "")]
    report += [f"  {file}: {c['found']}/{c['found'] + c['missed']}" for file, c in sorted(per_file.items())]
    return report + misses


def read_labels(path: Path) -> Dict[Tuple[str, int, str], str]:
    return {(m["file"], int(m["line"]), m["code"]): m["verdict"]
            for m in _matched_lines(path, _LABEL, "a verdict (<path>:<line> <CODE> right|arguable|wrong)")}


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--build-check", action="store_true", help="import and build each changed file (torch)")
    parser.add_argument("--build-timeout", type=float, default=60.0)
    parser.add_argument("--select", help="rule codes or prefixes, as torchlint's --select (default: all)")
    parser.add_argument("--findings", type=Path, help="write every finding here")
    parser.add_argument("--labels", type=Path, help="a reviewer's verdicts, to count right/arguable/wrong")
    parser.add_argument("--recall", type=Path, help="a reader's hand-found instances, to count those found")
    args = parser.parse_args(list(argv) or None)
    if args.select:
        SELECT[:] = ["--select", args.select]

    with tempfile.TemporaryDirectory(prefix="torchlint-real-") as tmp:
        work, original = Path(tmp) / "work", Path(tmp) / "original"
        lines = copy_python_tree([f.resolve() for f in args.folders], work)
        shutil.copytree(work, original)
        notebooks = len(list(work.rglob("*.ipynb")))
        print(f"{len(list(work.rglob('*.py')))} files, {lines:,} lines, {notebooks} notebooks from "
              f"{', '.join(map(str, args.folders))}")

        findings, check_time = check_json(work, args.jobs)
        before = digests(work)
        fix_result, fix_time = torchlint(["fix", "--apply", "--unsafe-fixes"], work, args.jobs)
        after = digests(work)
        changed = sorted(p for p in after if after[p] != before.get(p))
        left, _ = check_json(work, args.jobs)
        torchlint(["fix", "--apply", "--unsafe-fixes"], work, args.jobs)
        second = sorted(p for p, h in digests(work).items() if h != after[p])

        # Undo the second run so the build check sees the first run's output.
        for path in second:
            shutil.copyfile(original / path, work / path)
        if second:
            torchlint(["fix", "--apply", "--unsafe-fixes"], work, args.jobs)

        def norm(path: str) -> str:
            return os.path.normpath(path)

        fixable_in: Dict[str, Set[str]] = defaultdict(set)
        for f in findings:
            if f["fix"]:
                fixable_in[norm(f["path"])].add(f["code"])

        not_compiling: Counter = Counter()
        not_building: Counter = Counter()
        broken_notes: List[str] = []
        for path in changed:
            rules = fixable_in.get(norm(path), {"?"})
            problem = compile_problem(work / path)
            if problem is not None and compile_problem(original / path) is None:
                not_compiling.update(rules)
                broken_notes.append(f"does not compile: {path} ({', '.join(sorted(rules))}): {problem}")
                continue
            if args.build_check and path.endswith(".py"):
                for problem in build_regressions(original / path, work / path, args.build_timeout):
                    not_building.update(rules)
                    broken_notes.append(f"no longer builds: {path} ({', '.join(sorted(rules))}): {problem}")

    count = Counter(f["code"] for f in findings)
    fixable = Counter(f["code"] for f in findings if f["fix"])
    fixable_left = Counter(f["code"] for f in left if f["fix"])
    codes = sorted(count | fixable_left)
    labels = read_labels(args.labels) if args.labels else {}
    verdicts: Dict[str, Counter] = defaultdict(Counter)
    for f in findings:
        file, _, line = place(f).rpartition(":")
        verdicts[f["code"]][labels.get((file, int(line), f["code"]), "unread")] += 1

    header = ["rule", "findings", "fixable", "fixed", "not compiling", "not building", "fixable left"]
    if labels:
        header[2:2] = ["right", "arguable", "wrong", "unread"]
    rows = []
    for code in codes:
        row = [code, count[code], fixable[code], fixable[code] - fixable_left[code], not_compiling[code],
               not_building[code] if args.build_check else "-", fixable_left[code]]
        if labels:
            v = verdicts[code]
            row[2:2] = [v["right"], v["arguable"], v["wrong"], v["unread"]]
        rows.append(row)
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]
    for row in [header, *rows]:
        print("  ".join(str(x).rjust(w) for x, w in zip(row, widths)))
    print(f"check: {check_time:.1f} s; fix --apply --unsafe-fixes: {fix_time:.1f} s (jobs={args.jobs}); "
          f"files changed: {len(changed)}; files a second fix run changed: {len(second)}")
    for note in broken_notes:
        print(note)
    for path in second:
        print(f"changed again by a second fix run: {path}")
    if "internal error" in fix_result.stdout + fix_result.stderr:
        print("internal errors during fix:\n" + (fix_result.stdout + fix_result.stderr)[-2000:])
    if args.findings:
        ordered = sorted(findings, key=lambda f: (f["code"], f["path"], f["line"]))
        args.findings.write_text("".join(
            f"{place(f)}:{f['column']}: {f['code']}{' [fix]' if f['fix'] else ''} {f['message']}\n"
            for f in ordered
        ))
    if args.recall:
        print("\n".join(score_recall(read_recall(args.recall), findings)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
