"""Start-up: how long a one-file `torchlint check` and the editor server's first diagnostics take.

    python benchmarks/startup.py [--baseline REV-OR-CHECKOUT] [--repeat N]

Prints one table of medians over N runs, this tree beside the baseline (a git revision of this repository,
such as `main`, or another checkout's folder), runs interleaved so that both see the same load:

- `python -c pass`: the interpreter alone, the floor;
- `torchlint check` of a clean one-line-of-work file and of a clean training script (which passes several
  rules' text gates), no cache;
- the rule modules such a check imports, and `python -X importtime`'s cumulative time of `torchlint.cli`
  (modules loaded with `importlib.import_module`, as the rules are, are not in importtime's list);
- the Language Server: from starting `torchlint server` and sending `initialize` at once, as an editor does,
  to the first `textDocument/publishDiagnostics` with a finding, over stdio.

Each tree is copied into the layout an installed package has (`torchlint/`, `torchlint/rules/`), bytecode
compiled by a warm-up run, so neither side pays for an editable install's finder.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Sequence

ROOT = Path(__file__).resolve().parent.parent
CLEAN = "import os\n\n\ndef main():\n    print(os.getcwd())\n"
CLEAN_TRAINING = """\
import torch
from torch.utils.data import DataLoader


def train(model, dataset, device):
    loader = DataLoader(dataset, batch_size=32, num_workers=4, pin_memory=True, persistent_workers=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    for epoch in range(10):
        for inputs, targets in loader:
            inputs = inputs.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(inputs), targets)
            loss.backward()
            optimizer.step()
"""
WITH_FINDING = "import torch\nopt = torch.optim.SGD([], lr=0.1, foreach=False)\n"
LOADED_PROBE = """
import sys
from torchlint.cli import main
try:
    main(["check", "--no-cache", sys.argv[1]])
except SystemExit:
    pass
print(sum(m.startswith("torchlint.rules.") for m in sys.modules), file=sys.stderr)
"""


def package_layout(source: Path, into: Path) -> Path:
    """``source`` (a checkout) as an installed package: torchlint/ with rules/ and runtime/ inside it."""
    package = into / "torchlint"
    shutil.copytree(source / "torchlint", package, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("rules", "runtime"):
        shutil.copytree(source / name, package / name, ignore=shutil.ignore_patterns("__pycache__"))
    return into


def checkout(baseline: str, into: Path) -> Path:
    if Path(baseline).is_dir():
        return Path(baseline).resolve()
    into.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", baseline], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def timed(cmd: Sequence[str], env: Dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def _frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def _read_frame(stream) -> dict:
    length = 0
    while True:
        line = stream.readline()
        if not line:
            raise EOFError("the server closed its output")
        if line in (b"\r\n", b"\n"):
            break
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return json.loads(stream.read(length))


def first_diagnostics(env: Dict[str, str], cwd: Path, document: Path) -> float:
    """Seconds from starting the server (and sending `initialize`) to its first published finding."""
    uri = document.as_uri()
    start = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "torchlint", "server"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    try:
        server.stdin.write(_frame({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                   "params": {"processId": os.getpid(), "rootUri": cwd.as_uri(), "capabilities": {}}}))
        server.stdin.flush()
        while _read_frame(server.stdout).get("id") != 1:
            pass
        server.stdin.write(_frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
        server.stdin.write(_frame({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": document.read_text()}}}))
        server.stdin.flush()
        while True:
            message = _read_frame(server.stdout)
            if message.get("method") == "textDocument/publishDiagnostics" and message["params"]["diagnostics"]:
                return time.perf_counter() - start
    finally:
        server.kill()
        server.wait()


def importtime_cli_ms(env: Dict[str, str], cwd: Path, path: Path) -> float:
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "torchlint", "check", "--no-cache", str(path)],
                            env=env, cwd=cwd, capture_output=True, text=True)
    for line in result.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip() == "torchlint.cli":
            return int(parts[1]) / 1000
    return float("nan")


def rule_modules_loaded(env: Dict[str, str], cwd: Path, path: Path) -> float:
    result = subprocess.run([sys.executable, "-c", LOADED_PROBE, str(path)], env=env, cwd=cwd,
                            capture_output=True, text=True)
    return float(result.stderr.strip().splitlines()[-1])


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", default=None, help="a git revision (e.g. main) or another checkout")
    parser.add_argument("--repeat", type=int, default=15, help="runs per measurement (median)")
    parser.add_argument("--server-repeat", type=int, default=7)
    args = parser.parse_args(list(argv) or None)
    try:
        import pygls  # noqa: F401
        with_server = True
    except ImportError:
        with_server = False
        print("pygls is not installed: no server row (pip install pygls)", file=sys.stderr)

    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        work = scratch / "work"
        work.mkdir()
        files = {"clean": work / "clean.py", "training": work / "clean_train.py", "finding": work / "finding.py"}
        for key, text in zip(files, (CLEAN, CLEAN_TRAINING, WITH_FINDING)):
            files[key].write_text(text)
        trees = {"this tree": package_layout(ROOT, scratch / "this")}
        if args.baseline:
            trees[f"baseline ({args.baseline})"] = package_layout(checkout(args.baseline, scratch / "base-src"),
                                                                   scratch / "base")
        envs = {}
        for label, tree in trees.items():
            env = dict(os.environ, PYTHONPATH=str(tree))
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            envs[label] = env
            timed([sys.executable, "-m", "torchlint", "check", "--no-cache", str(files["training"])], env, work)

        rows: List[tuple] = []

        def measure(name: str, run: Callable[[Dict[str, str]], float], repeat: int, unit: str = "s") -> None:
            samples: Dict[str, List[float]] = {label: [] for label in trees}
            for _ in range(repeat):
                for label in trees:  # interleaved: both trees see the same load
                    samples[label].append(run(envs[label]))
            rows.append((name, unit, [statistics.median(samples[label]) for label in trees]))
            print(f"  {name}: " + ", ".join(f"{label} {statistics.median(v):.3f}" for label, v in samples.items()),
                  file=sys.stderr, flush=True)

        measure("python -c pass", lambda env: timed([sys.executable, "-c", "pass"], env, work), args.repeat)
        for key, name in (("clean", "check one clean file"), ("training", "check one clean training script")):
            measure(f"{name}, no cache",
                    lambda env, key=key: timed([sys.executable, "-m", "torchlint", "check", "--no-cache",
                                                str(files[key])], env, work), args.repeat)
            measure(f"  rule modules it imports", lambda env, key=key: rule_modules_loaded(env, work, files[key]),
                    1, unit="modules")
        measure("  importtime of torchlint.cli (clean file)",
                lambda env: importtime_cli_ms(env, work, files["clean"]), max(3, args.repeat // 3), unit="ms")
        if with_server:
            measure("server: start + initialize -> first publishDiagnostics",
                    lambda env: first_diagnostics(env, work, files["finding"]), args.server_repeat)

    labels = list(trees)
    print(f"Start-up, median of {args.repeat} runs ({args.server_repeat} for the server), "
          f"Python {sys.version.split()[0]}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    header = "| measurement | " + " | ".join(labels) + (" | ratio |" if len(labels) == 2 else " |")
    print(header)
    print("|" + " --- |" * (header.count("|") - 1))
    for name, unit, values in rows:
        cells = [f"{v:.0f} {unit}" if unit != "s" else f"{v * 1000:.0f} ms" for v in values]
        ratio = f" | {values[0] / values[1]:.2f}x" if len(values) == 2 and values[1] else (" | -" if len(values) == 2 else "")
        print(f"| {name} | " + " | ".join(cells) + ratio + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
