"""Star imports of project modules (issue 24): ``from utils import *`` binds what Python binds, the module's
``__all__`` where it has one, else its public module-level names, the ones it imports itself included
(``torch``, a loader factory, a model class). The project model reads each star-imported file's star summary
(``facts.modules.star_summary``) and the check sees those names in its import table
(``ProjectModel.star_origins``, ``AstIndex.with_star_names``); a star import of a third-party module stays
unknown."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import List

from torchlint.config import Settings
from torchlint.facts.modules import star_summary
from torchlint.run import runner
from project_tree import write_tree

UTILS = """\
import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms
{extra}

def get_loader(root, batch_size):
    data = datasets.ImageFolder(root, transform=transforms.ToTensor())
    return DataLoader(data, batch_size=batch_size, shuffle=True)
"""

TRAIN = """\
{imports}


def main():
    model = Net().cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for x, y in get_loader("images", 16):
        loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
        opt.zero_grad()
        loss.backward()
        opt.step()
"""

MODEL = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 1)

    def forward(self, x):
        return self.fc(x)
"""


def _check(root: Path, name: str, select=("TL401", "TL402", "TL502"), cache: bool = False) -> List[str]:
    job = runner.Job(Settings(select=select, root=root, project_root=root),
                     cache_dir=root / ".cache" if cache else None)
    return sorted(f"{d.code} {d.line}" for result in runner.run([root / name], job) for d in result.diagnostics)


def test_a_loader_factory_and_torch_through_star_imports(tmp_path):
    write_tree(tmp_path, {"utils.py": UTILS.format(extra=""), "pkg/__init__.py": "", "pkg/model.py": MODEL,
                     "train.py": TRAIN.format(imports="from utils import *\nfrom pkg.model import *"),
                     "other.py": TRAIN.format(imports="from somelib import *\nfrom utils import *")})
    assert _check(tmp_path, "train.py") == ["TL401 8", "TL402 8", "TL502 7"]
    # a star import from outside the project stays unknown: it may rebind `torch`, after `utils`'s
    assert _check(tmp_path, "other.py") == ["TL401 8", "TL402 8", "TL502 7"]
    (tmp_path / "other.py").write_text(TRAIN.format(imports="from utils import *\nfrom somelib import *"))
    assert _check(tmp_path, "other.py") == []


def test_a_relative_star_import_in_a_package(tmp_path):
    write_tree(tmp_path, {"app/__init__.py": "", "app/utils.py": UTILS.format(extra=""), "app/model.py": MODEL})
    # (with Windows line ends, as some projects keep them)
    (tmp_path / "app/train.py").write_bytes(
        TRAIN.format(imports="from .utils import *\nfrom .model import *").replace("\n", "\r\n").encode())
    assert _check(tmp_path, "app/train.py") == ["TL401 8", "TL402 8", "TL502 7"]


def test_all_decides_what_a_star_import_binds(tmp_path):
    write_tree(tmp_path, {"utils.py": UTILS.format(extra='__all__ = ["torch"]\n'), "model.py": MODEL,
                     "train.py": TRAIN.format(imports="from utils import *\nfrom model import Net")})
    assert _check(tmp_path, "train.py") == ["TL502 7"]  # `get_loader` is not in `__all__`: unknown




def test_a_change_of_the_star_imported_module_rechecks_the_cached_file(tmp_path):
    write_tree(tmp_path, {"utils.py": UTILS.format(extra=""), "model.py": MODEL,
                     "train.py": TRAIN.format(imports="from utils import *\nfrom model import Net")})
    assert _check(tmp_path, "train.py", cache=True) == ["TL401 8", "TL402 8", "TL502 7"]
    (tmp_path / "utils.py").write_text(UTILS.format(extra='__all__ = ["get_loader"]\n'))
    assert _check(tmp_path, "train.py", cache=True) == ["TL401 8", "TL402 8"]
    (tmp_path / "utils.py").write_text(UTILS.format(extra=""))
    assert _check(tmp_path, "train.py", cache=True) == ["TL401 8", "TL402 8", "TL502 7"]


def test_the_star_summary_follows_python():
    text = ("import torch\nimport torch.nn as nn\nfrom .data import build\nfrom os import path as _path\n"
            "try:\n    import apex\nexcept ImportError:\n    apex = None\n"
            "SCALE = 2\n_hidden = 1\n\n\ndef get_loader():\n    pass\n\n\nclass Net:\n    pass\n")
    summary = star_summary(ast.parse(text))
    assert json.loads(json.dumps(summary)) == summary
    assert summary == {"names": {"torch": ["torch", 0, None], "nn": ["torch.nn", 0, None], "build": ["data", 1, "build"],
                                 "SCALE": None, "get_loader": None, "Net": None}}
    assert star_summary(ast.parse(text + "__all__ = ['Net', 'apex']\n")) == {"names": {"Net": None}}
    assert star_summary(ast.parse(text + "__all__ = names()\n")) == {}
    assert star_summary(ast.parse("from torch.nn import *\nimport torch\n")) == {}
