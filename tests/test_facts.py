"""The program model's device and loader facts (torchlint/facts/devices.py, loaders.py) on hand-made edge cases
(docs/architecture.md, "One program model"). These cases held the facts equal to their LibCST forms until the
last code on LibCST's tree moved to the index (TL102, TL103); the answers they agreed on are written here."""

from __future__ import annotations

import ast

import pytest

from torchlint.facts.index import AstIndex
from torchlint.facts import devices, loaders
from torchlint.facts.devices import CPU, CUDA, UNKNOWN

NO_DEVICE = "no device="
DEVICE_CASES = [
    # (source, each call with an answer: (its text, where it sends its tensor, the kind of its `device=`),
    #  (cuda_evidence, mixed_precision_evidence, reduced_precision_evidence): where each starts, or "module")
    ("import torch\nwith torch.autocast('cuda'):\n    pass\n",
     [], (None, (2, 5), (2, 5))),
    ("from torch.cuda.amp import GradScaler\nscaler = GradScaler()\n",
     [], (None, (2, 9), (2, 9))),
    ("model = model.half()\n",
     [], (None, (1, 8), (1, 8))),
    ("trainer = Trainer(precision=16)\n",
     [], (None, (1, 10), None)),
    ("import lightning.pytorch as pl\ntrainer = pl.Trainer()\n",
     [], (None, 'module', None)),
    ("import lightning.pytorch as pl\n",  # imported and never used: a leftover, no sign of anything
     [], (None, None, None)),
    ("from accelerate import *\n",  # a star import is not in the import table
     [], (None, None, None)),
    ("from .accelerate import helper\n",  # a relative import is the project's own module
     [], (None, None, None)),
    ("import torch\nx = torch.zeros(3, dtype=torch.float16)\n",
     [], (None, (2, 4), (2, 4))),
    ("model = model.half(memory_format)\n",
     [], (None, None, None)),
    ("from torch import autocast as ac\nwith ac('cuda'):\n    pass\n",
     [], (None, (2, 5), (2, 5))),
    ("from torch import float16\nx = y.to(float16)\n",
     [], (None, (2, 4), (2, 4))),
    ("import torch\nx = y.to(*[torch.bfloat16])\n",
     [], (None, None, None)),
    ("import torch\nx = y.to(**kw)\n",
     [], (None, None, None)),
    ("import torch\nd = torch.device(type='cuda')\nx = torch.zeros(3, device=d)\n",
     [('torch.zeros(3, device=d)', UNKNOWN, CUDA)], ((3, 4), None, None)),
    ("import torch\nx = torch.zeros(3, device='cu' 'da')\n",  # a concatenation: LibCST cannot read it
     [("torch.zeros(3, device='cu' 'da')", UNKNOWN, UNKNOWN)], (None, None, None)),
    ("import torch\nx = torch.zeros(3, device=0)\ny = torch.ones(2, device=True)\n",
     [('torch.zeros(3, device=0)', UNKNOWN, CUDA), ('torch.ones(2, device=True)', UNKNOWN, UNKNOWN)], ((2, 4), None, None)),
    ("import torch\nd = 'cuda' if torch.cuda.is_available() else 'cpu'\ndef f():\n    return x.to(d)\n",
     [('x.to(d)', CUDA, NO_DEVICE)], ((4, 11), None, None)),
    ("def f(device):\n    g = lambda: x.to(device)\n    return g\n",
     [('x.to(device)', CUDA, NO_DEVICE)], ((2, 16), None, None)),
    ("import torch\nfor b in loader:\n    loss.backward()\n    if i:\n        pass\n    else:\n        x.cuda()\n",
     [('x.cuda()', CUDA, NO_DEVICE)], ((7, 8), None, None)),
    ("def main():\n    for b in data:\n        opt.step()\nif __name__ == '__main__':\n    main()\nelse:\n    main()\n",
     [], (None, None, None)),
    ("def main():\n    while n():\n        loss.backward()\ntry:\n    main()\nexcept E:\n    main()\nelse:\n    x()\n",
     [], (None, None, None)),
    ("def a():\n    a()\n    b()\ndef b():\n    if x: c()\n    elif __name__ == '__main__':\n        c()\nfor i in y:\n    z = i and b()\n",
     [], (None, None, None)),
]


@pytest.mark.parametrize("source, answers, evidence", DEVICE_CASES, ids=[f"case{n}" for n in range(len(DEVICE_CASES))])
def test_device_facts(source, answers, evidence):
    """Where each call sends its tensor, the kind of each `device=` argument, and where the file first shows
    CUDA work and (reduced or mixed) precision."""
    index = AstIndex(ast.parse(source), source)
    found = []
    for info in index.calls:
        scope = info.function if info.function is not None else index.tree
        destination = devices.to_destination(index, info.node, scope)
        device = next((k.value for k in info.node.keywords if k.arg == "device"), None)
        if destination is not UNKNOWN or device is not None:
            kind = devices.device_kind(index, device, scope) if device is not None else NO_DEVICE
            found.append((ast.get_source_segment(source, info.node), destination, kind))
    assert found == answers

    def start(node):
        return None if node is None else "module" if node is index.tree else index.span(node)[:2]

    assert (start(devices.cuda_evidence(index)), start(devices.mixed_precision_evidence(index)),
            start(devices.reduced_precision_evidence(index))) == evidence


def test_a_cpu_device_is_told_from_an_unknown_one():
    source = "import torch\nx = torch.zeros(3, device=torch.device('cpu'))\n"
    index = AstIndex(ast.parse(source), source)
    [info] = [info for info in index.calls if info.node.keywords]
    assert devices.device_kind(index, info.node.keywords[0].value, index.tree) == CPU


LOADER_CASES = [
    # (source, ([(each loader's span, its target, in memory, [(each loop tied to it: its start, trains, the loop
    #  that repeats it, the batch moves' spans)])], a Dataset of the file moves data to CUDA))
    ("from torch.utils.data import DataLoader, TensorDataset\nif c:\n    ds = load(p)\nelse:\n    ds = TensorDataset(x)\n"
     "    loader = DataLoader(ds)\nfor e in range(2):\n    for x, y in loader:\n        x.cuda(); loss.backward()\n",
     ([((6, 13, 6, 27), 'loader', True, [((8, 4), True, (7, 0), [(9, 8, 9, 16)])])], False)),
    ("import torch.utils.data as tud\nclass T:\n    def __init__(self, ds):\n        self.dl = tud.DataLoader(ds, num_workers=W)\n"
     "    def fit(self):\n        for e in range(3):\n            for i, (x, y) in enumerate(tqdm(self.dl)):\n"
     "                self.step(x.to(self.device))\n    def step(self, x):\n        x.backward()\nW = 2\n",
     ([((4, 18, 4, 51), 'self.dl', False, [((7, 12), True, (6, 8), [(8, 26, 8, 43)])])], False)),
    ("from torch.utils.data import DataLoader\nclass D(torch.utils.data.Dataset):\n    def __init__(self):\n"
     "        self.x = x.to('cuda')\ndef run(loader, opt):\n    for batch in loader:\n"
     "        batch = {k: v.to(0) for k, v in batch.items()}\n        opt.step()\n"
     "train = DataLoader(D(), 4, True, None, None, 2)\nfor e in range(5):\n    run(train, opt)\n",
     ([((9, 8, 9, 47), 'train', False, [((6, 4), True, (10, 0), [(7, 20, 7, 27)])])], True)),
    ("from torch.utils.data import DataLoader\nasync def main(ds):\n    dl: DataLoader = DataLoader(ds)\n"
     "    async for b in zip(dl, other):\n        b.cuda(); loss.backward()\n",
     ([((3, 21, 3, 35), 'dl', False, [((4, 4), True, None, [(5, 8, 5, 16)])])], False)),
]


@pytest.mark.parametrize("source, expected", LOADER_CASES, ids=[f"loader{n}" for n in range(len(LOADER_CASES))])
def test_loader_facts(source, expected):
    """Every loader site, the loops tied to it, which of them train, repeat, and move the batch to CUDA."""
    index = AstIndex(ast.parse(source), source)
    facts = loaders.loader_facts(index)

    def place(node):
        return None if node is None else index.span(node)

    def start(node):
        return place(node)[:2] if node is not None else None

    described = [
        (place(site.call), site.target, facts.is_in_memory_dataset(site), [
            (start(loop.node), facts.loop_trains(loop), start(getattr(facts.repeated_iteration(site, loop), "node", None)),
             [place(call) for call in facts.batch_moves(loop)])
            for loop in site.loops])
        for site in facts.sites]
    assert (described, facts.dataset_on_cuda()) == expected


@pytest.mark.parametrize("source", [source for source, _, _ in DEVICE_CASES])
def test_no_loader_without_a_dataloader_call(source):
    index = AstIndex(ast.parse(source), source)  # held: the facts refer to it weakly
    facts = loaders.loader_facts(index)
    assert facts.sites == [] and facts.dataset_on_cuda() is False
