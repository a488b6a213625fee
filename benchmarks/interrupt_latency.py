"""How fast Ctrl-C stops a parallel `torchlint fix --apply`, and what it writes after the signal.

    python benchmarks/interrupt_latency.py [--files 600] [--runs 3] [--jobs 2] [--baseline CHECKOUT]

Each run writes FILES copies of a script with one safe fix into a temporary folder, starts
`torchlint fix --apply --no-cache --jobs N .` in a session of its own, waits for the first fixed file, sends
SIGINT to the whole process group (as a terminal's Ctrl-C) and prints, per version (this tree, and with
--baseline an older version, put first on PYTHONPATH), the medians of:
seconds from the signal to the exit, files fixed on disk at the exit, files the interrupt message lists as
written before it (equal: nothing was written unreported), and the exit codes. Run it on an idle machine; the baseline and this tree alternate, run by run. A baseline folder
holds the older package with its rules inside it, as installed:

    mkdir /tmp/base && git archive REV torchlint rules | tar -x -C /tmp/base && ln -s ../rules /tmp/base/torchlint/rules
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SLOW = "import torch\n\nmodel = torch.nn.Linear(4, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)\n"


def one_run(files: int, jobs: int, pythonpath: str) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        for i in range(files):
            (root / f"m{i:04}.py").write_text(SLOW)
        fixed = lambda: sum(1 for p in root.glob("*.py") if p.read_text() != SLOW)  # noqa: E731
        env = {**os.environ, "PYTHONPATH": pythonpath} if pythonpath else dict(os.environ)
        process = subprocess.Popen([sys.executable, "-m", "torchlint", "fix", "--apply", "--no-cache", "--jobs",
                                    str(jobs), "."], cwd=root, env=env, start_new_session=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        while not fixed() and process.poll() is None:
            time.sleep(0.005)
        sent = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate()
        listed = sum(1 for line in err.splitlines() if line.startswith("  ") and line.strip().endswith(".py"))
        return {"seconds": time.monotonic() - sent, "at_exit": fixed(), "listed": listed, "rc": process.returncode}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=600)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--baseline", help="a folder holding an older torchlint package (see above)")
    args = parser.parse_args()
    versions = {"this tree": ""}
    if args.baseline:
        versions["baseline"] = str(Path(args.baseline).resolve())
    runs = {name: [] for name in versions}
    for _ in range(args.runs):
        for name, pythonpath in versions.items():
            runs[name].append(one_run(args.files, args.jobs, pythonpath))
    print(f"fix --apply over {args.files} files, --jobs {args.jobs}, SIGINT to the process group after the first "
          f"write; medians of {args.runs}")
    print("| version | exit after the signal | files fixed at the exit | listed as written before it | exit codes |")
    print("| --- | --- | --- | --- | --- |")
    for name, results in runs.items():
        median = lambda key: statistics.median(r[key] for r in results)  # noqa: E731
        codes = ", ".join(sorted({str(r["rc"]) for r in results}))
        print(f"| {name} | {median('seconds'):.2f} s | {median('at_exit'):.0f} | {median('listed'):.0f} | {codes} |")


if __name__ == "__main__":
    main()
