"""The program model's device and loader facts (torchlint/facts/devices.py, loaders.py) mean on the index what
their LibCST forms mean, on every fixture and on hand-made edge cases, while code on both trees uses them
(docs/architecture.md, "One program model")."""

from __future__ import annotations

import ast

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from fixture_support import FIXTURES
from torchlint import device_facts
from torchlint import loaders as cst_loaders
from torchlint.analysis import FileAnalysis
from torchlint.ast_index import AstIndex
from torchlint.facts import devices, loaders

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
def test_device_facts_agree(source):
    """Where each call sends its tensor, and the kind of each `device=` argument, on both trees."""
    analysis, index, cst_place, ast_place = _both(source)
    assert len(analysis.calls) == len(index.calls)
    for cst_call, info in zip(analysis.calls, index.calls):
        assert ast_place(info.node) == cst_place(cst_call)
        scope = info.function if info.function is not None else index.tree
        assert devices.to_destination(index, info.node, scope) == device_facts.to_destination(analysis, cst_call)
        cst_device = next((arg.value for arg in cst_call.args if arg.keyword is not None
                           and arg.keyword.value == "device"), None)
        ast_device = next((k.value for k in info.node.keywords if k.arg == "device"), None)
        assert (cst_device is None) == (ast_device is None)
        if ast_device is not None:
            assert devices.device_kind(index, ast_device, scope) == device_facts.device_kind(analysis, cst_device)


LOADER_CASES = [
    "from torch.utils.data import DataLoader, TensorDataset\nif c:\n    ds = load(p)\nelse:\n    ds = TensorDataset(x)\n"
    "    loader = DataLoader(ds)\nfor e in range(2):\n    for x, y in loader:\n        x.cuda(); loss.backward()\n",
    "import torch.utils.data as tud\nclass T:\n    def __init__(self, ds):\n        self.dl = tud.DataLoader(ds, num_workers=W)\n"
    "    def fit(self):\n        for e in range(3):\n            for i, (x, y) in enumerate(tqdm(self.dl)):\n"
    "                self.step(x.to(self.device))\n    def step(self, x):\n        x.backward()\nW = 2\n",
    "from torch.utils.data import DataLoader\nclass D(torch.utils.data.Dataset):\n    def __init__(self):\n"
    "        self.x = x.to('cuda')\ndef run(loader, opt):\n    for batch in loader:\n"
    "        batch = {k: v.to(0) for k, v in batch.items()}\n        opt.step()\n"
    "train = DataLoader(D(), 4, True, None, None, 2)\nfor e in range(5):\n    run(train, opt)\n",
    "from torch.utils.data import DataLoader\nasync def main(ds):\n    dl: DataLoader = DataLoader(ds)\n"
    "    async for b in zip(dl, other):\n        b.cuda(); loss.backward()\n",
]


@pytest.mark.parametrize("source", SAMPLES + [pytest.param(s, id=f"loader{n}") for n, s in enumerate(LOADER_CASES)])
def test_loader_facts_agree(source):
    """Every loader site, the loops tied to it, which of them train, repeat, and move the batch to CUDA."""
    analysis, index, cst_place, ast_place = _both(source)

    def start(place):
        return place[:2] if place is not None else None

    def described(facts, place):
        out = []
        for site in facts.sites:
            out.append((place(site.call), site.target, facts.is_in_memory_dataset(site), [
                (start(place(loop.node)), facts.loop_trains(loop),
                 start(place(getattr(facts.repeated_iteration(site, loop), "node", None))),
                 [place(call) for call in facts.batch_moves(loop)])
                for loop in site.loops]))
        return out, facts.dataset_on_cuda()

    assert described(loaders.loader_facts(index), ast_place) == described(cst_loaders.loader_facts(analysis), cst_place)
