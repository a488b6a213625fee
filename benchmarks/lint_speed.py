"""How fast torchlint checks a real tree, side by side in one run with its yardsticks.

    python benchmarks/lint_speed.py [--tree DIR ...] [--jobs N] [--repeat N] [--ruff EXE]
                                    [--baseline CHECKOUT] [--torchfix EXE] [--slowest N]

For each tree (default: the installed ``torch`` package, found without importing it) it measures, each as its
own subprocess, median of ``--repeat`` runs:

- the floor: reading and ``ast.parse`` of every file, one core (what any Python-based linter pays);
- torchlint cold (``--no-cache``) with one job and with ``--jobs`` jobs; warm (a filled cache) with both;
- ``--baseline``: the same cold one-job run of another torchlint checkout (e.g. the commit before a change);
- ``torchlint fix --diff`` (every fix, unsafe ones included), cold, one job, and the baseline's: the diffs
  must be identical;
- Ruff ``--select ALL``, one thread, no cache, one line per finding (``--output-format concise``), honestly
  comparable: Ruff's default output prints code snippets;
- TorchFix (``--torchfix``), on the ``--torchfix-subtree`` only (it checks about 2,000 lines/s).

Peak memory is the largest proportional set size (Pss) summed over the tool's process tree, sampled every
100 ms from /proc. It also counts the files each stage lets through (text, stdlib-ast, LibCST) and the files
with a finding, and checks that the findings equal the baseline's (``--baseline``), rule for rule. Ratios are
what to quote on a shared machine: every row of a tree is measured in the same run.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

# A subprocess that times the floor: read and ast.parse every file, one core.
_AST_FLOOR = """
import ast, pathlib, sys, warnings
warnings.simplefilter("ignore")
for path in sorted(pathlib.Path(sys.argv[1]).rglob("*.py")):
    try:
        ast.parse(path.read_bytes())
    except (SyntaxError, ValueError):
        pass
"""


def default_tree() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        sys.exit("torch is not installed here: pass --tree DIR")
    return Path(spec.origin).parent


def count_tree(tree: Path) -> Tuple[int, int]:
    files = lines = 0
    for path in tree.rglob("*.py"):
        files += 1
        with path.open("rb") as f:
            lines += sum(1 for _ in f)
    return files, lines


def _tree_pss_kib(root_pid: int) -> int:
    """Memory of a process and all its descendants (Pss: pages shared with a forked parent count once)."""
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    stack.extend(int(child) for child in f.read().split())
        except (OSError, ValueError, StopIteration):
            continue
    return total


def timed_run(cmd: Sequence[str], cwd: Optional[Path] = None, env: Optional[dict] = None) -> Tuple[float, float, bytes]:
    """(wall seconds, peak MiB over the process tree, stdout)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak = [0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], _tree_pss_kib(proc.pid))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    sampler.join()
    if proc.returncode not in (0, 1):
        print(f"warning: {cmd[:3]} exited {proc.returncode}: {err.decode(errors='replace')[-800:]}", file=sys.stderr)
    return wall, peak[0] / 1024, out


def median_run(cmd: Sequence[str], repeat: int, cwd=None, env=None, before=None) -> Tuple[float, float, bytes]:
    walls, peaks, out = [], [], b""
    for _ in range(repeat):
        if before is not None:
            before()
        wall, peak, out = timed_run(cmd, cwd, env)
        walls.append(wall)
        peaks.append(peak)
    return statistics.median(walls), max(peaks), out


def findings(output: bytes, tree: Path, cwd: Path) -> List[Tuple[str, str]]:
    """(code, the whole line with the path relative to the tree) per finding: path, position, message and fix
    marker. Paths are shown relative to the run's working folder."""
    out = []
    for line in output.decode(errors="replace").splitlines():
        shown, _, rest = line.partition(":")
        line = f"{os.path.relpath((cwd / shown).resolve(), tree.resolve())}:{rest}"
        code = next((word for word in line.split() if word[:2] == "TL" and word[2:5].isdigit()), "?")
        out.append((code, line))
    return sorted(out)


def diff_lines(output: bytes, tree: Path) -> List[str]:
    """A ``fix --diff`` output with each file's header reduced to its path in the tree (runs from other
    folders show other relative paths)."""
    marker = f"/{tree.name}/"
    lines = []
    for line in output.decode(errors="replace").splitlines():
        if line.startswith(("--- a/", "+++ b/")) and marker in line:
            line = line[:6] + line.split(marker, 1)[1]
        lines.append(line)
    return lines


def stage_costs(tree: Path) -> Dict[str, float]:
    """Where a cold, serial run spends its time, stage by stage, and how many files each stage lets through
    (in this process, every rule selected, no profiler: each stage timed around its own calls)."""
    from torchlint.facts.index import index_of
    from torchlint.config import Settings
    from torchlint.fix.analysis import FileAnalysis
    from torchlint.engine import _stdlib_ast, parse, rules_for_path
    from torchlint.fix.rewrites import make_rewrites, make_rewrites_in_statements
    from torchlint.rule import IndexContext, iter_reports
    from torchlint.run.fileio import SourceError, decode_source
    from torchlint.run.guard import call_with_deep_stack
    from torchlint.registry import all_rules
    from torchlint.run.runner import _collections_paused

    settings = Settings(root=tree, project_root=tree)  # as the CLI judges test files in a repository at tree
    rules = [rule() for rule in all_rules()]
    out = {name: 0.0 for name in ("files", "text stage", "with a finding", "LibCST (statements)",
                                  "LibCST (whole file)", "LibCST statements' share", "text s", "ast.parse s",
                                  "index s", "detect s", "rewrites s")}

    def clock(key: str, func, *args):
        start = time.perf_counter()
        try:
            return func(*args)
        finally:
            out[key] += time.perf_counter() - start

    def one_file(text: str, path: Path) -> None:
        shown = os.path.relpath(path)  # as the command line names it (test files leave some rules out)
        kept = rules_for_path(rules, shown, settings)  # as the engine judges test files
        candidates = clock("text s", lambda: [r for r in kept if r.may_fire(text, settings)])
        if not candidates:
            return
        out["text stage"] += 1
        # as engine.lint_source: the index for every file past the text gate, every rule's detect on it, then
        # the fixes the findings propose, made on LibCST's tree of just their statements (or of the file)
        parsed = clock("ast.parse s", _stdlib_ast, text)
        if parsed is None:
            return  # CPython rejects it: LibCST names the syntax error (a TL000)
        index = clock("index s", index_of, parsed, text)
        found = clock("detect s", lambda: list(iter_reports(candidates, IndexContext(index, settings, shown), [])))
        out["with a finding"] += bool(found)
        pending = [report for report in found if report.rewrite is not None]
        if not pending:
            return
        start = time.perf_counter()
        statements = make_rewrites_in_statements(pending, index)
        if statements is None:
            out["LibCST (whole file)"] += 1
            try:
                make_rewrites(pending, index, FileAnalysis(parse(text, shown), text, shown))
            except Exception:  # a TL000 file: counted, nothing to make
                pass
        else:
            out["LibCST (statements)"] += 1
            out["LibCST statements' share"] += len(statements.text) / max(len(text), 1)
        out["rewrites s"] += time.perf_counter() - start

    for path in sorted(tree.rglob("*.py")):
        out["files"] += 1
        try:
            text = decode_source(path.read_bytes()).text
        except (SourceError, OSError):
            continue
        with _collections_paused():  # as the runner checks each file
            call_with_deep_stack(one_file, text, path)
    return out


def slowest_files(tree: Path, count: int) -> List[Tuple[float, str]]:
    """Each file alone in this process (serial, no cache): where a cold run spends its time."""
    from torchlint.config import Settings
    from torchlint.run.runner import Job, process_file

    job = Job(Settings(root=tree), mode="check")
    timings = []
    for path in sorted(tree.rglob("*.py")):
        start = time.perf_counter()
        process_file(path, job)
        timings.append((time.perf_counter() - start, str(path.relative_to(tree))))
    return sorted(timings, reverse=True)[:count]


def bench_tree(source_tree: Path, args: argparse.Namespace) -> None:
    torchlint = [sys.executable, "-m", "torchlint"]
    common = ["check", "--select", "ALL", "--exit-zero", "--quiet"]  # one line per finding, no summary
    files, lines = count_tree(source_tree)
    rows: List[Tuple[str, float, float]] = []  # (label, wall s, peak MiB)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed torchlint has its bytecode cached

    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch) / "tree"  # a private copy: the cache lives beside it, nothing else writes there
        shutil.copytree(source_tree, tree, ignore=shutil.ignore_patterns("__pycache__", ".torchlint_cache"))
        cache = Path(scratch) / "cache"

        def measure(label: str, cmd: Sequence[str], cwd=None, repeat: int = args.repeat) -> bytes:
            wall, peak, out = median_run(cmd, repeat, cwd=cwd, env=env)
            rows.append((label, wall, peak))
            print(f"  {source_tree.name}: {label}: {wall:.2f} s, {peak:.0f} MiB", file=sys.stderr, flush=True)
            return out

        timed_run([*torchlint, "--version"], env=env)  # write bytecode before timing anything
        measure("ast.parse of every file, 1 core", [sys.executable, "-c", _AST_FLOOR, str(tree)])
        cold_one = measure("torchlint cold, 1 job", [*torchlint, *common, "--no-cache", "-j", "1", str(tree)])
        measure(f"torchlint cold, {args.jobs} jobs", [*torchlint, *common, "--no-cache", "-j", str(args.jobs), str(tree)])
        warm = [*torchlint, *common, "--cache-dir", str(cache)]
        timed_run([*warm, "-j", str(args.jobs), str(tree)], env=env)  # fill the cache
        measure("torchlint warm, 1 job", [*warm, "-j", "1", str(tree)])
        measure(f"torchlint warm, {args.jobs} jobs", [*warm, "-j", str(args.jobs), str(tree)])
        ours, before = findings(cold_one, tree, Path.cwd()), None
        if args.baseline:
            baseline_out = measure(f"baseline ({args.baseline.name}) cold, 1 job",
                                   [sys.executable, "-m", "torchlint", *common, "--no-cache", "-j", "1", str(tree)],
                                   cwd=args.baseline, repeat=args.baseline_repeat)
            before = findings(baseline_out, tree, args.baseline)
        fix_args = ["fix", "--select", "ALL", "--unsafe-fixes", "--diff", "--no-cache", "-j", "1", str(tree)]
        fix_diff = measure("torchlint fix --diff, cold, 1 job", [*torchlint, *fix_args])
        same_fixes = None
        if args.baseline:
            baseline_diff = measure(f"baseline ({args.baseline.name}) fix --diff", [sys.executable, "-m", "torchlint",
                                    *fix_args], cwd=args.baseline, repeat=args.baseline_repeat)
            same_fixes = diff_lines(fix_diff, tree) == diff_lines(baseline_diff, tree)
        if args.ruff:
            ruff_env = dict(env, RAYON_NUM_THREADS="1")
            wall, peak, _ = median_run([args.ruff, "check", "--select", "ALL", "--no-cache", "--exit-zero",
                                        "--output-format", "concise", str(tree)], args.repeat, env=ruff_env)
            rows.append(("Ruff --select ALL, 1 thread, concise", wall, peak))
        torchfix_rows = []
        if args.torchfix:
            subtree = tree / args.torchfix_subtree
            sub_files, sub_lines = count_tree(subtree)
            ours, _, _ = median_run([*torchlint, *common, "--no-cache", "-j", str(args.jobs), str(subtree)], args.repeat, env=env)
            theirs, _, _ = timed_run([args.torchfix, "--select", "ALL", "-j", str(args.jobs), str(subtree)], env=env)
            torchfix_rows = [(f"torchlint, {args.torchfix_subtree}/ ({sub_lines:,} lines)", ours),
                             (f"TorchFix, {args.torchfix_subtree}/", theirs)]

    stages = stage_costs(source_tree)
    floor = rows[0][1]
    print(f"\nTree: {source_tree} ({files:,} files, {lines:,} lines); {os.cpu_count()} cores; python "
          f"{sys.version.split()[0]}; median of {args.repeat} runs (baseline: {args.baseline_repeat})")
    header = f"{'run':<44} {'wall s':>8} {'x ast.parse':>12} {'lines/s':>11} {'peak MiB':>9}"
    print(header)
    print("-" * len(header))
    for label, wall, peak in rows:
        print(f"{label:<44} {wall:>8.2f} {wall / floor:>11.2f}x {lines / wall:>11,.0f} {peak:>9.0f}")
    for label, wall in torchfix_rows:
        print(f"{label:<44} {wall:>8.2f}")
    with_finding = len({line.split(":", 1)[0] for _, line in ours})
    share = stages["LibCST statements' share"] / max(stages["LibCST (statements)"], 1)
    print(f"Files: {stages['files']:,.0f}; past the text stage {stages['text stage']:,.0f}; with a finding "
          f"{with_finding:,}; LibCST parsed {stages['LibCST (statements)']:,.0f} files' statements (on average "
          f"{share:.0%} of the file) and {stages['LibCST (whole file)']:,.0f} whole files; findings {len(ours):,} "
          + " ".join(f"{code}={sum(1 for f in ours if f[0] == code)}" for code in sorted({f[0] for f in ours})))
    print("Stages of a cold serial run (.py files, in-process), seconds and x ast.parse of every file: "
          + "; ".join(f"{name[:-2]} {stages[name]:.2f} ({stages[name] / floor:.2f}x)" for name in
                      ("text s", "ast.parse s", "index s", "detect s", "rewrites s")) + ".")
    if before is not None:
        if before == ours:
            print(f"Findings identical to the baseline's ({len(ours):,}).")
        else:
            lost, new = sorted(set(before) - set(ours)), sorted(set(ours) - set(before))
            print(f"FINDINGS DIFFER from the baseline's: {len(lost)} lost, {len(new)} new")
            for item in lost[:10]:
                print(f"  lost: {item}")
            for item in new[:10]:
                print(f"  new:  {item}")
    if same_fixes is not None:
        print("Fixes (`fix --diff`) identical to the baseline's." if same_fixes
              else "FIXES DIFFER from the baseline's (`fix --diff`).")
    if args.slowest:
        print("Slowest files (serial, in-process, cold):")
        for seconds, name in slowest_files(source_tree, args.slowest):
            print(f"  {seconds * 1000:8.1f} ms  {name}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, action="append", help="folder to check (repeatable; default: torch)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (median)")
    parser.add_argument("--baseline", type=Path, default=None, help="another torchlint checkout to compare with")
    parser.add_argument("--baseline-repeat", type=int, default=1)
    parser.add_argument("--ruff", default=shutil.which("ruff"), help="Ruff executable")
    parser.add_argument("--torchfix", default=None, help="TorchFix executable")
    parser.add_argument("--torchfix-subtree", default="nn")
    parser.add_argument("--slowest", type=int, default=0, help="list the N slowest files")
    args = parser.parse_args(argv)
    if args.baseline is not None:
        args.baseline = args.baseline.resolve()
    for tree in args.tree or [default_tree()]:
        bench_tree(tree.resolve(), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
