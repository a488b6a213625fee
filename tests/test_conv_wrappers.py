"""TL301 through a project class that wraps a conv (issue 24): ``nn.Sequential(ConvNorm(...), nn.BatchNorm1d(n))``
where ``ConvNorm`` of another project file builds ``self.conv = nn.Conv1d(..., bias=bias)`` with ``bias=True``
by default and its forward returns ``self.conv(x)``. The class summary of that file says so
(``facts.modules.conv_wrapper``), and the cache key of the checked file covers it."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import List

from torchlint.config import Settings
from torchlint.facts.modules import class_summary
from torchlint.run import runner
from project_tree import write_tree

LAYERS = """\
import torch


class ConvNorm(torch.nn.Module):
    def __init__(self, c_in, c_out, kernel_size=1, bias={default}):
        super(ConvNorm, self).__init__()
        self.conv = torch.nn.Conv1d(c_in, c_out, kernel_size=kernel_size, bias=bias)
        torch.nn.init.xavier_uniform_(self.conv.weight)

    def forward(self, signal):
        conv_signal = self.conv(signal)
        return conv_signal
"""

MODEL = """\
import torch.nn as nn
{imports}


class Postnet(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.body = nn.Sequential({built}(80, n, kernel_size=5), nn.BatchNorm1d(n))

    def forward(self, x):
        return self.body(x)
"""


def _check(root: Path, name: str, cache: bool = False) -> List[str]:
    job = runner.Job(Settings(select=("TL301",), root=root, project_root=root),
                     cache_dir=root / ".cache" if cache else None)
    return [f"{Path(d.path).name}:{d.line} {d.message}" for result in runner.run([root / name], job)
            for d in result.diagnostics]


def test_a_wrapper_of_another_file_before_a_batchnorm_is_reported(tmp_path):
    write_tree(tmp_path, {"layers.py": LAYERS.format(default=True),
                     "model.py": MODEL.format(imports="from layers import ConvNorm", built="ConvNorm")})
    assert _check(tmp_path, "model.py") == [
        "model.py:8 `ConvNorm` feeds straight into `BatchNorm1d`, and its forward returns the output of its "
        "`Conv1d` (layers.py:7), whose bias is on: the BatchNorm cancels it; pass `bias=False`"]


def test_imports_spelled_other_ways_and_a_package_that_re_exports_it(tmp_path):
    write_tree(tmp_path, {"nets/layers.py": LAYERS.format(default=True), "nets/__init__.py": "from .layers import ConvNorm\n",
                     "nets/model.py": MODEL.format(imports="from .layers import ConvNorm", built="ConvNorm"),
                     "a.py": MODEL.format(imports="import nets.layers", built="nets.layers.ConvNorm"),
                     "b.py": MODEL.format(imports="from nets import ConvNorm", built="ConvNorm")})
    for name in ("nets/model.py", "a.py", "b.py"):
        found = _check(tmp_path, name)
        assert len(found) == 1 and "nets/layers.py:7" in found[0], name


def test_the_fix_passes_bias_false_at_the_construction(tmp_path):
    write_tree(tmp_path, {"layers.py": LAYERS.format(default=True),
                     "model.py": MODEL.format(imports="from layers import ConvNorm", built="ConvNorm")})
    shown = subprocess.run([sys.executable, "-m", "torchlint", "fix", "--unsafe-fixes", "--select", "TL301",
                            "--no-cache", "model.py"], cwd=tmp_path, check=False, capture_output=True, text=True)
    assert "+        self.body = nn.Sequential(ConvNorm(80, n, kernel_size=5, bias=False), nn.BatchNorm1d(n))" \
        in shown.stdout.splitlines()
    assert (tmp_path / "layers.py").read_text() == LAYERS.format(default=True)


def test_silent_for_a_wrapper_off_by_default_and_a_class_outside_the_project(tmp_path):
    write_tree(tmp_path, {"layers.py": LAYERS.format(default=False), "on.py": LAYERS.format(default=True),
                     "model.py": MODEL.format(imports="from layers import ConvNorm", built="ConvNorm"),
                     "other.py": MODEL.format(imports="from speechkit import ConvNorm", built="ConvNorm"),
                     "both.py": MODEL.format(imports="from on import ConvNorm", built="ConvNorm")})
    assert _check(tmp_path, "model.py") == []
    assert _check(tmp_path, "other.py") == []
    assert len(_check(tmp_path, "both.py")) == 1  # (the same class with its bias on is reported)


def test_a_change_of_the_wrapper_rechecks_the_cached_model(tmp_path):
    write_tree(tmp_path, {"layers.py": LAYERS.format(default=True),
                     "model.py": MODEL.format(imports="from layers import ConvNorm", built="ConvNorm")})
    assert len(_check(tmp_path, "model.py", cache=True)) == 1
    (tmp_path / "layers.py").write_text(LAYERS.format(default=False))
    assert _check(tmp_path, "model.py", cache=True) == []
    (tmp_path / "layers.py").write_text(LAYERS.format(default=True))
    assert len(_check(tmp_path, "model.py", cache=True)) == 1


def test_the_wrapper_summary_is_plain_data():
    summary = class_summary(ast.parse(LAYERS.format(default=True)))
    assert json.loads(json.dumps(summary)) == summary
    assert summary["classes"]["ConvNorm"]["wraps"] == {
        "layer": "torch.nn.Conv1d", "line": 7, "bias": ["bias", 3, True], "exact": True}
