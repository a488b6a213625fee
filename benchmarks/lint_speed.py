"""How fast torchlint checks a large real tree, beside TorchFix and Ruff in the same run.

    python benchmarks/lint_speed.py [--tree DIR] [--jobs N] [--torchfix EXE] [--ruff EXE]

The default tree is the installed ``torch`` package (found without importing it). TorchFix checks about
2,000 lines/s, so it runs on a subtree (``--torchfix-subtree``, default ``nn``) beside torchlint on the
same subtree; its ratio is taken there. Every tool runs as its own subprocess; peak memory is the largest proportional set size (Pss) summed over the tool's process tree, sampled
every 200 ms from /proc. Times are medians of ``--repeat`` runs. Prints a table, then the slowest files.
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
from typing import List, Optional, Sequence, Tuple


def default_tree() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        sys.exit("torch is not installed here: pass --tree DIR")
    return Path(spec.origin).parent


def _torch_version(tree: Path) -> str:
    version_file = tree / "version.py"
    if version_file.is_file():
        for line in version_file.read_text().splitlines():
            if line.startswith("__version__"):
                return line.split("=", 1)[1].strip().strip("'\"")
    return ""


def count_tree(tree: Path) -> Tuple[int, int]:
    files = lines = 0
    for path in tree.rglob("*.py"):
        files += 1
        with path.open("rb") as f:
            lines += sum(1 for _ in f)
    return files, lines


def _tree_rss_kib(root_pid: int) -> int:
    """Memory of a process and all its descendants, following /proc/<pid>/task/*/children. Proportional
    set size (Pss): pages that forked workers share with their parent count once, not once per process."""
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    stack.extend(int(child) for child in f.read().split())
        except (OSError, ValueError):
            continue
    return total


def timed_run(cmd: Sequence[str], cwd: Optional[Path] = None) -> Tuple[float, float, int]:
    """(wall seconds, peak MiB over the process tree, exit code)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = [0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], _tree_rss_kib(proc.pid))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    wall = time.perf_counter() - start
    sampler.join()
    if proc.returncode not in (0, 1):
        print(f"warning: {cmd[0]} exited {proc.returncode}: {err.decode(errors='replace')[-500:]}", file=sys.stderr)
    return wall, peak[0] / 1024, proc.returncode


def median_run(cmd: Sequence[str], repeat: int, cwd: Optional[Path] = None, before=None) -> Tuple[float, float]:
    walls, peaks = [], []
    for _ in range(repeat):
        if before is not None:
            before()
        wall, peak, _ = timed_run(cmd, cwd)
        walls.append(wall)
        peaks.append(peak)
    return statistics.median(walls), max(peaks)


def slowest_files(tree: Path, count: int) -> List[Tuple[float, str]]:
    """Time each file alone in this process (serial, no cache): where a cold run spends its time."""
    from torchlint.config import Settings
    from torchlint.runner import Job, process_file

    job = Job(Settings(root=tree), mode="check")
    timings = []
    for path in sorted(tree.rglob("*.py")):
        start = time.perf_counter()
        process_file(path, job)
        timings.append((time.perf_counter() - start, str(path.relative_to(tree))))
    return sorted(timings, reverse=True)[:count]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, default=None, help="folder to check (default: the installed torch)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (median)")
    parser.add_argument("--torchfix", default=shutil.which("torchfix"), help="TorchFix executable")
    parser.add_argument("--ruff", default=shutil.which("ruff"), help="Ruff executable")
    parser.add_argument("--slowest", type=int, default=5, help="how many of the slowest files to list")
    parser.add_argument("--torchfix-subtree", default="nn", help="part of the tree to compare TorchFix on")
    args = parser.parse_args(argv)

    source_tree = (args.tree or default_tree()).resolve()
    torchlint = [sys.executable, "-m", "torchlint"]
    common = ["check", "--select", "ALL", "--exit-zero", "--quiet"]
    files, lines = count_tree(source_tree)
    sub_files, sub_lines = count_tree(source_tree / args.torchfix_subtree)
    rows = []  # (label, lines checked, wall s, peak MiB)

    with tempfile.TemporaryDirectory() as scratch:
        # A private copy, so the one-file-changed run can edit a file and the cache lives beside it.
        tree = Path(scratch) / "tree"
        shutil.copytree(source_tree, tree, ignore=shutil.ignore_patterns("__pycache__"))
        cache = Path(scratch) / "cache"

        def measure(label: str, cmd: Sequence[str], checked: int = lines, before=None, repeat: int = args.repeat):
            wall, peak = median_run(cmd, repeat, before=before)
            rows.append((label, checked, wall, peak))
            print(f"  measured {label}: {wall:.2f} s", file=sys.stderr)

        measure("torchlint cold, 1 job", [*torchlint, *common, "--no-cache", "-j", "1", str(tree)])
        measure(f"torchlint cold, {args.jobs} jobs", [*torchlint, *common, "--no-cache", "-j", str(args.jobs), str(tree)])
        warm_cmd = [*torchlint, *common, "--cache-dir", str(cache), "-j", str(args.jobs), str(tree)]
        timed_run(warm_cmd)  # fill the cache
        measure("torchlint warm cache", warm_cmd)
        victim = tree / "nn" / "modules" / "conv.py"
        counter = [0]

        def touch_one_file() -> None:
            counter[0] += 1
            with victim.open("a", encoding="utf-8") as f:
                f.write(f"# edit {counter[0]}\n")

        measure("torchlint warm, 1 file changed", warm_cmd, before=touch_one_file)
        if args.ruff:
            measure("Ruff --select ALL --no-cache",
                    [args.ruff, "check", "--select", "ALL", "--no-cache", "--exit-zero", "--quiet", str(tree)])
        subtree = tree / args.torchfix_subtree
        measure(f"torchlint cold, {args.jobs} jobs, {args.torchfix_subtree}/ only",
                [*torchlint, *common, "--no-cache", "-j", str(args.jobs), str(subtree)], checked=sub_lines)
        if args.torchfix:
            measure(f"TorchFix -j {args.jobs}, {args.torchfix_subtree}/ only",
                    [args.torchfix, "--select", "ALL", "-j", str(args.jobs), str(subtree)], checked=sub_lines, repeat=1)

    torchfix_rate = next((n / wall for label, n, wall, _ in rows if label.startswith("TorchFix")), None)
    print(f"\nTree: {source_tree.name} {_torch_version(source_tree)} ({files} files, {lines:,} lines; "
          f"{args.torchfix_subtree}/: {sub_files} files, {sub_lines:,} lines); {os.cpu_count()} cores; "
          f"python {sys.version.split()[0]}; median of {args.repeat} runs (TorchFix: 1)")
    header = f"{'run':<40} {'lines':>10} {'wall s':>8} {'lines/s':>10} {'peak MiB':>9} {'vs TorchFix':>12}"
    print(header)
    print("-" * len(header))
    for label, checked, wall, peak in rows:
        ratio = f"{(checked / wall) / torchfix_rate:.1f}x" if torchfix_rate else "n/a"
        print(f"{label:<40} {checked:>10,} {wall:>8.2f} {checked / wall:>10,.0f} {peak:>9.0f} {ratio:>12}")
    print("(vs TorchFix: lines/s over TorchFix's lines/s on the subtree)")
    if args.slowest:
        print("\nSlowest files (serial, in-process, cold):")
        for seconds, name in slowest_files(source_tree, args.slowest):
            print(f"  {seconds * 1000:8.1f} ms  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
