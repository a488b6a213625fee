"""Hold two torchlint installs to the same output: findings, messages, fix availability and fixed text.

    python benchmarks/same_output.py --before BASE/bin/torchlint [--after torchlint] [--select CODES] PATH [PATH ...]

For a refactor that must not change behaviour (issue 23's migration, the split of TL501's rewrite), run the
same commands with both installs, from the same folder and over the same paths, and compare their output byte
for byte:

* ``check --output-format json --unsafe-fixes``: every finding, its position and message, and whether it has a
  fix and how safe it is;
* ``fix --diff --unsafe-fixes``: the fixed text of every file.

Both run with ``--no-cache`` and ``--exit-zero`` (nothing is written). Prints one row per command and path with
the findings, fixable findings and diff lines of each side, then ``identical`` or the first lines that differ;
exit status 1 on any difference.

The before side is usually a plain install of main at the commit the change starts from, e.g.

    git -C /work/main archive REV | tar -x -C /tmp/base && python -m venv /tmp/base-venv \\
        && /tmp/base-venv/bin/pip install -q /tmp/base
"""

from __future__ import annotations

import argparse
import difflib
import json
import subprocess
import sys
from typing import List, Sequence, Tuple


def _run(torchlint: str, args: Sequence[str]) -> Tuple[str, str]:
    done = subprocess.run([torchlint, *args, "--no-cache", "--exit-zero"], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{torchlint} {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout, done.stderr


def _counts(kind: str, output: str) -> str:
    if kind == "check":
        findings = json.loads(output) if output.strip() else []
        fixable = sum(1 for finding in findings if finding.get("fix"))
        return f"{len(findings)} findings, {fixable} fixable"
    changed = sum(1 for line in output.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---"))
    return f"{changed} diff lines"


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the torchlint executable of the base install")
    parser.add_argument("--after", default="torchlint", help="the torchlint executable of the change")
    parser.add_argument("--select", default="ALL", help="the rules to compare (default: all)")
    parser.add_argument("paths", nargs="+")
    options = parser.parse_args(argv)

    commands = {
        "check": ["check", "--select", options.select, "--output-format", "json", "--unsafe-fixes"],
        "fix": ["fix", "--diff", "--unsafe-fixes", "--select", options.select],
    }
    differ = False
    for path in options.paths:
        for kind, args in commands.items():
            before, before_err = _run(options.before, [*args, path])
            after, after_err = _run(options.after, [*args, path])
            same = before == after and before_err == after_err
            verdict = "identical" if same else "DIFFERENT"
            print(f"{kind:5} {path}: {verdict} ({_counts(kind, before)} before, {_counts(kind, after)} after)")
            if not same:
                differ = True
                for stream, old, new in (("stdout", before, after), ("stderr", before_err, after_err)):
                    delta = list(difflib.unified_diff(old.splitlines(), new.splitlines(), "before", "after",
                                                      lineterm="", n=1))
                    if delta:
                        print(f"  {stream}:\n    " + "\n    ".join(delta[:40]))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
