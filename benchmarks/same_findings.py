"""Hold a change to "findings, messages, fix availability and fixed text identical" on whole trees.

    python benchmarks/same_findings.py --baseline CHECKOUT TREE... [--select ALL] [--jobs N]

Runs this checkout's torchlint and the baseline checkout's (e.g. `git worktree add ../base main`) on every
TREE, every rule on, without the cache: `check --output-format json --unsafe-fixes` (each finding's code,
message, span, fix applicability and the edits its fix makes) and `fix --diff --unsafe-fixes` (the text every fix,
unsafe ones included, writes after all passes), and `check`'s default text, whose `[*]` marks are made
without the fixes' text (`torchlint.fix.rewrites`). Prints the count per rule and every difference; exits 1
when there is one. Migrating a rule onto the index (docs/architecture.md, "One program model") is done
when this prints "identical" on the fixtures, the installed torch tree and the training-code corpus.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List, Sequence

HERE = Path(__file__).resolve().parent.parent


def run(checkout: Path, args: Sequence[str]) -> bytes:
    """torchlint of ``checkout``, run from the root folder so that both checkouts print the same paths."""
    command = [sys.executable, "-m", "torchlint", *args]
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run(command, cwd="/", env=env, capture_output=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{checkout}: {' '.join(command)} exited {done.returncode}:\n{done.stderr.decode()[-2000:]}")
    return done.stdout


def findings(checkout: Path, trees: List[str], select: str, jobs: str) -> List[dict]:
    out = run(checkout, ["check", *trees, "--select", select, "--output-format", "json", "--no-cache",
                         "--unsafe-fixes", "--exit-zero", "--jobs", jobs])
    return sorted(json.loads(out or b"[]"), key=lambda d: (d["path"], d["line"], d["column"], d["code"], d["message"]))


def concise(checkout: Path, trees: List[str], select: str, jobs: str) -> List[str]:
    """The text `check` prints by default, `[*]` marks and all (made without the fixes' text edits)."""
    out = run(checkout, ["check", *trees, "--select", select, "--output-format", "concise", "--no-cache",
                         "--unsafe-fixes", "--exit-zero", "--jobs", jobs])
    return sorted(out.decode("utf-8", "replace").splitlines())


def fix_diff(checkout: Path, trees: List[str], select: str, jobs: str) -> List[str]:
    out = run(checkout, ["fix", *trees, "--select", select, "--diff", "--unsafe-fixes", "--no-cache", "--jobs", jobs])
    return out.decode("utf-8", "replace").splitlines()


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("trees", nargs="+")
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--select", default="ALL")
    parser.add_argument("--jobs", default="2")
    args = parser.parse_args(argv or None)
    trees = [str(Path(tree).resolve()) for tree in args.trees]
    ours, theirs = (findings(c, trees, args.select, args.jobs) for c in (HERE, args.baseline.resolve()))
    counts = collections.Counter(d["code"] for d in ours)
    print(f"{len(ours):,} findings ({', '.join(f'{c} {n}' for c, n in sorted(counts.items()))})")
    key = lambda d: json.dumps(d, sort_keys=True)  # noqa: E731 - every field: span, message, fix, edits
    lost = collections.Counter(map(key, theirs)) - collections.Counter(map(key, ours))
    new = collections.Counter(map(key, ours)) - collections.Counter(map(key, theirs))
    for label, rows in (("only in the baseline", lost), ("only in this checkout", new)):
        for row in sorted(rows):
            d = json.loads(row)
            print(f"{label}: {d['path']}:{d['line']}:{d['column']} {d['code']} fix={d['fix'] and d['fix']['applicability']} {d['message'][:100]}")
    ours_text, theirs_text = (concise(c, trees, args.select, args.jobs) for c in (HERE, args.baseline.resolve()))
    for label, lines in (("only in the baseline", set(theirs_text) - set(ours_text)),
                         ("only in this checkout", set(ours_text) - set(theirs_text))):
        for line in sorted(lines):
            print(f"{label} (check's text): {line[:160]}")
    same_fixes = fix_diff(HERE, trees, args.select, args.jobs) == fix_diff(args.baseline.resolve(), trees, args.select, args.jobs)
    print("findings:", "identical" if not lost and not new else f"{sum(lost.values())} lost, {sum(new.values())} new")
    print("check's text (fix marks):", "identical" if ours_text == theirs_text else "DIFFERS")
    print("fixed text (fix --diff --unsafe-fixes):", "identical" if same_fixes else "DIFFERS")
    return 0 if (not lost and not new and ours_text == theirs_text and same_fixes) else 1


if __name__ == "__main__":
    sys.exit(main())
