"""How often another file runs a def of the checked one (issue 24, "frequency"): a timing helper of ``bench.py``
that ``train.py`` calls once before its epochs runs once per run, so its dummy input made on the CPU and moved
to the GPU is no per-step cost (TL102 silent); the same helper called from ``train.py``'s training loop runs
every step (reported). Each file is still checked alone: ``bench.py`` learns how its defs are called from the
uses summaries of the files that import it (``facts.steps.uses_summary``'s ``once``)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

from torchlint.config import Settings
from torchlint.run import runner

BENCH = """\
import torch


@torch.no_grad()
def time_forward(model, size):
    inputs = torch.zeros(8, 3, size, size).cuda()
    total = 0.0
    for _ in range(20):
        model(inputs)
        torch.cuda.synchronize()
    return total


def measure(model):
    return time_forward(model, 224)
"""

TRAIN = """\
import torch
import torch.nn as nn
import bench


def main():
    model = nn.Linear(8, 8).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
{before}
    for epoch in range(10):
        for step in range(100):
            x = torch.randn(4, 8, device="cuda")
            loss = model(x).sum()
            loss.backward()
            opt.step()
{inside}


if __name__ == "__main__":
    main()
"""

RUNNER = """\
import torch


class Runner:
    def __init__(self, device):
        self.device = device

    def sample(self, model):
        self.sample_grid(model)

    def sample_grid(self, model):
        alpha = torch.arange(0.0, 1.01, 0.1).to(self.device)
        for a in alpha:
            model(a)
"""

MAIN = """\
import torch
from runners.runner import Runner


def main():
    runner = Runner(torch.device("cuda"))
{body}


if __name__ == "__main__":
    main()
"""


def _tree(root: Path, files: Dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _check(root: Path, *names: str, select=("TL102",), cache: bool = False) -> List[str]:
    job = runner.Job(Settings(select=select, root=root, project_root=root),
                     cache_dir=root / ".cache" if cache else None)
    results = runner.run([root / name for name in names], job)
    return sorted(f"{Path(d.path).name}:{d.line} {d.code}" for result in results for d in result.diagnostics)


def test_a_helper_another_file_calls_once_before_its_epochs_runs_once(tmp_path):
    _tree(tmp_path, {"bench.py": BENCH, "train.py": TRAIN.format(before="    bench.measure(model)", inside="")})
    assert _check(tmp_path, "bench.py") == []
    # with the default rules too (the step rules' model holds the same summaries)
    job = runner.Job(Settings(root=tmp_path, project_root=tmp_path))
    assert not [d for result in runner.run([tmp_path / "bench.py"], job) for d in result.diagnostics
                if d.code == "TL102"]


def test_a_helper_another_file_calls_in_its_training_loop_runs_every_step(tmp_path):
    # near miss: the same call from the step loop (and once before it) runs every step
    _tree(tmp_path, {"bench.py": BENCH,
                     "train.py": TRAIN.format(before="    bench.measure(model)",
                                              inside="            bench.measure(model)")})
    assert _check(tmp_path, "bench.py") == ["bench.py:6 TL102"]


def test_a_helper_no_file_calls_or_one_handed_on_as_a_value_is_still_reported(tmp_path):
    _tree(tmp_path, {"bench.py": BENCH, "train.py": TRAIN.format(before="", inside="")})
    assert _check(tmp_path, "bench.py") == ["bench.py:6 TL102"]
    handed = "    bench.measure(model)\n    timers = [bench.measure]"
    _tree(tmp_path, {"train.py": TRAIN.format(before=handed, inside="")})
    assert _check(tmp_path, "bench.py") == ["bench.py:6 TL102"]


def test_an_entry_point_its_file_never_calls_runs_once(tmp_path):
    # `time_only()` is handed to a launcher by yet another file: a def its own file never names is taken for
    # an entry point, run once, as a class no file builds is taken for set-up
    entry = "\n\ndef time_only():\n    model = nn.Linear(8, 8).cuda()\n    bench.measure(model)\n"
    _tree(tmp_path, {"bench.py": BENCH, "train.py": TRAIN.format(before="", inside="") + entry})
    assert _check(tmp_path, "bench.py") == []


def test_a_method_another_file_calls_once_runs_once(tmp_path):
    _tree(tmp_path, {"runners/__init__.py": "", "runners/runner.py": RUNNER,
                     "main.py": MAIN.format(body="    runner.sample(torch.nn.Identity())")})
    assert _check(tmp_path, "runners/runner.py") == []
    looped = "    for step in range(100):\n        runner.sample(torch.nn.Identity())"
    _tree(tmp_path, {"main.py": MAIN.format(body=looped)})
    assert _check(tmp_path, "runners/runner.py") == ["runner.py:12 TL102"]


def test_a_changed_call_re_checks_the_helper(tmp_path):
    # the result of `bench.py` is keyed by the uses summaries it read: moving the call into the loop re-checks it
    _tree(tmp_path, {"bench.py": BENCH, "train.py": TRAIN.format(before="    bench.measure(model)", inside="")})
    assert _check(tmp_path, "bench.py", cache=True) == []
    _tree(tmp_path, {"train.py": TRAIN.format(before="", inside="            bench.measure(model)")})
    assert _check(tmp_path, "bench.py", cache=True) == ["bench.py:6 TL102"]


def test_a_helper_handed_on_through_a_module_imported_from_its_package_is_still_reported(tmp_path):
    # `from tools import bench` then `[bench.measure]`: a dotted name that starts at a name taken from a package
    # (the uses summary walks the tree for such names only where one starts a dotted name)
    train = TRAIN.replace("import bench", "from tools import bench")
    _tree(tmp_path, {"tools/__init__.py": "", "tools/bench.py": BENCH,
                     "train.py": train.format(before="    bench.measure(model)", inside="")})
    assert _check(tmp_path, "tools/bench.py") == []
    _tree(tmp_path, {"train.py": train.format(before="    bench.measure(model)\n    timers = [bench.measure]",
                                              inside="")})
    assert _check(tmp_path, "tools/bench.py") == ["bench.py:6 TL102"]
