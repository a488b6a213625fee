"""The program model's device and precision facts (torchlint/facts/devices.py) mean on the index what their
LibCST forms mean, on every fixture and on hand-made edge cases, while rules of both kinds use them (docs/architecture.md, "One
program model")."""

from __future__ import annotations

import ast

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from fixture_support import FIXTURES
from torchlint import device_facts
from torchlint.analysis import FileAnalysis
from torchlint.ast_index import AstIndex
from torchlint.facts import devices

CASES = [
    "import torch\nwith torch.autocast('cuda'):\n    pass\n",
    "from torch.cuda.amp import GradScaler\nscaler = GradScaler()\n",
    "model = model.half()\n",
    "trainer = Trainer(precision=16)\n",
    "import lightning.pytorch as pl\n",
    "from accelerate import *\n",  # a star import is not in the import table
    "from .accelerate import helper\n",  # a relative import is the project's own module
    "import torch\nx = torch.zeros(3, dtype=torch.float16)\n",
    "model = model.half(memory_format)\n",
    "from torch import autocast as ac\nwith ac('cuda'):\n    pass\n",
    "from torch import float16\nx = y.to(float16)\n",
    "import torch\nx = y.to(*[torch.bfloat16])\n",
    "import torch\nx = y.to(**kw)\n",
    "import torch\nd = torch.device(type='cuda')\nx = torch.zeros(3, device=d)\n",
    "import torch\nx = torch.zeros(3, device='cu' 'da')\n",  # a concatenation: LibCST cannot read it
    "import torch\nx = torch.zeros(3, device=0)\ny = torch.ones(2, device=True)\n",
    "import torch\nd = 'cuda' if torch.cuda.is_available() else 'cpu'\ndef f():\n    return x.to(d)\n",
    "def f(device):\n    g = lambda: x.to(device)\n    return g\n",
    "import torch\nfor b in loader:\n    loss.backward()\n    if i:\n        pass\n    else:\n        x.cuda()\n",
    "def main():\n    for b in data:\n        opt.step()\nif __name__ == '__main__':\n    main()\nelse:\n    main()\n",
    "def main():\n    while n():\n        loss.backward()\ntry:\n    main()\nexcept E:\n    main()\nelse:\n    x()\n",
    "def a():\n    a()\n    b()\ndef b():\n    if x: c()\n    elif __name__ == '__main__':\n        c()\nfor i in y:\n    z = i and b()\n",
]


def _samples():
    for path in sorted(FIXTURES.rglob("*.py")):
        yield pytest.param(path.read_text(encoding="utf-8"), id=f"{path.parent.name}/{path.name}")
    for number, source in enumerate(CASES):
        yield pytest.param(source, id=f"case{number}")


SAMPLES = list(_samples())


def _both(source: str):
    module = cst.parse_module(source)
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    analysis = FileAnalysis(module, source)
    index = AstIndex(ast.parse(source), source)

    def cst_place(node):
        if node is None:
            return None
        if node is module:
            return "module"
        r = positions[node]
        return r.start.line, r.start.column, r.end.line, r.end.column

    def ast_place(node):
        if node is None:
            return None
        return "module" if node is index.tree else index.span(node)

    return analysis, index, cst_place, ast_place


@pytest.mark.parametrize("source", SAMPLES)
def test_device_and_precision_facts_agree(source):
    analysis, index, cst_place, ast_place = _both(source)
    assert ast_place(devices.cuda_evidence(index)) == cst_place(device_facts.cuda_evidence(analysis))
    assert ast_place(devices.mixed_precision_evidence(index)) == cst_place(device_facts.mixed_precision_evidence(analysis))
    assert (ast_place(devices.reduced_precision_evidence(index))
            == cst_place(device_facts.reduced_precision_evidence(analysis)))
