"""What the project model costs: `torchlint check one_file.py` in a generated 200-file project.

    python benchmarks/project_model.py [--files 200] [--runs 7]

Writes a project to a temporary folder: a package of modules that import one another (each imports five
others), a `data.py` with loader factories and a `train.py` that imports `data` and ten other modules, then
times (wall clock, each a fresh `python -m torchlint` process, the median and the fastest of ``--runs``):
checking `train.py` alone with a warm cache, after an edit of `data.py` that changes its summary (the entry of
`train.py` is re-checked), after an edit that does not, without the cache, and the whole tree warm and cold.
The issue's target: one file in a 200-file project under 300 ms warm.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, List, Optional, Tuple

HERE = Path(__file__).resolve().parent.parent
CHECKOUT = [HERE]  # whose torchlint the subprocesses run (--checkout: a baseline's, to compare)

DATA = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


def build_loader(dataset, batch_size):
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers={workers})


def build_loaders(train_set, val_set):
    return DataLoader(train_set, batch_size=64, num_workers=4), DataLoader(val_set, batch_size=64)
"""

MODULE = """\
import torch
from torch import nn
{imports}


class Block{n}(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return self.norm(torch.relu(self.linear(x)))


def helper{n}(values):
    total = 0
    for value in values:
        total += value * {n}
    return total
"""

TRAIN = """\
import torch
from pkg.data import build_loader, build_loaders
{imports}


def main(model, optimizer, dataset, val_set):
    loader = build_loader(dataset, 32)
    for epoch in range(10):
        for images, labels in loader:
            loss = model(images.cuda(), labels.cuda())
            loss.backward()
            optimizer.step()
"""


def write_project(root: Path, files: int) -> Path:
    package = root / "pkg"
    package.mkdir(parents=True)
    (root / "pyproject.toml").write_text("[tool.torchlint]\n")
    (package / "__init__.py").write_text("")
    (package / "data.py").write_text(DATA.format(workers=0))
    for n in range(files - 3):
        imports = "\n".join(f"from pkg.module{(n + k) % (files - 3)} import helper{(n + k) % (files - 3)}"
                            for k in range(1, 6))
        (package / f"module{n}.py").write_text(MODULE.format(n=n, imports=imports))
    imports = "\n".join(f"from pkg import module{k}" for k in range(10))
    train = package / "train.py"
    train.write_text(TRAIN.format(imports=imports))
    return train


def timed(command: List[str], cwd: Path, runs: int, before: Optional[Callable[[], None]] = None) -> List[float]:
    env = {**os.environ, "PYTHONPATH": str(CHECKOUT[0])}
    times = []
    for _ in range(runs):
        if before is not None:
            before()
        start = time.perf_counter()
        subprocess.run(command, cwd=cwd, env=env, capture_output=True, check=False)
        times.append((time.perf_counter() - start) * 1000)
    return times


def in_process(root: Path, train: Path, runs: int) -> List[Tuple[str, List[float]]]:
    """The same warm check of train.py without the interpreter's start: what the project model adds to it."""
    sys.path.insert(0, str(HERE))
    from torchlint.run import runner
    from torchlint.config import Settings

    job = runner.Job(Settings(root=root, project_root=root), cache_dir=root / ".torchlint_cache")
    data = train.read_bytes()

    def clock(action: Callable[[], object]) -> List[float]:
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            action()
            times.append((time.perf_counter() - start) * 1000)
        return times

    runner.run([train], job)
    return [("in process: train.py's project model (imports, summaries)",
             clock(lambda: runner.project_of(train, data, job, runner.Cache(job.cache_dir)))),
            ("in process: train.py alone, warm cache", clock(lambda: runner.run([train], job)))]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--checkout", type=Path, default=HERE, help="run this checkout's torchlint (a baseline)")
    args = parser.parse_args(argv)
    CHECKOUT[0] = args.checkout.resolve()
    check = [sys.executable, "-m", "torchlint", "check", "--exit-zero"]
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        train = write_project(root, args.files)
        data = root / "pkg" / "data.py"
        workers = iter(range(1, 10 ** 6))

        def summary_change() -> None:  # another worker count: another summary, so train.py is checked again
            data.write_text(DATA.format(workers=next(workers)))

        def other_change() -> None:  # a comment at the end: the same summary, train.py's entry still holds
            data.write_text(data.read_text() + "# edited\n")

        rel = str(train.relative_to(root))
        subprocess.run([*check, "."], cwd=root, env={**os.environ, "PYTHONPATH": str(CHECKOUT[0])}, capture_output=True)
        rows = [
            ("startup: `torchlint --version`", timed([sys.executable, "-m", "torchlint", "--version"], root, args.runs)),
            ("train.py alone, warm cache", timed([*check, rel], root, args.runs)),
            ("train.py alone, data.py's summary changed", timed([*check, rel], root, args.runs, summary_change)),
            ("train.py alone, data.py edited, same summary", timed([*check, rel], root, args.runs, other_change)),
            ("train.py alone, --no-cache", timed([*check, "--no-cache", rel], root, args.runs)),
            (f"whole tree ({args.files} files), warm cache", timed([*check, "."], root, args.runs)),
            (f"whole tree ({args.files} files), --no-cache", timed([*check, "--no-cache", "."], root, max(3, args.runs // 2))),
        ]
        if CHECKOUT[0] == HERE:
            rows += in_process(root, train, args.runs * 4)
    width = max(len(name) for name, _ in rows)
    print(f"| {'case'.ljust(width)} | median ms | fastest ms |")
    print(f"|{'-' * (width + 2)}|-----------|------------|")
    for name, times in rows:
        print(f"| {name.ljust(width)} | {statistics.median(times):9.0f} | {min(times):10.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
