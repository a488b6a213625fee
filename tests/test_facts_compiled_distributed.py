"""torchlint.facts.distributed (the DDP-wrapped models, where their sync is turned off) and
torchlint.facts.compiled (which defs a file compiles, and what that compiled code runs)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from torchlint.facts.index import AstIndex
from torchlint.facts.compiled import compiled_functions, dynamo_setting
from torchlint.facts.distributed import ddp_models, handles_sync


def _index(source: str) -> AstIndex:
    source = textwrap.dedent(source)
    return AstIndex(ast.parse(source), source)


@pytest.mark.parametrize("source, expected", [
    ("from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(net)\n", {"model"}),
    ("import torch\nself.model = torch.nn.parallel.DistributedDataParallel(net)\n", {"self.model"}),
    ("import torch.nn as nn\nm: nn.Module = nn.parallel.DistributedDataParallel(net)\n", {"m"}),
    ("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nm = DDP(net) if ddp else net\n", {"m"}),
    ("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nm = torch.compile(DDP(net))\n", {"m"}),
    ("from torch.nn.parallel import DistributedDataParallel as DDP\ndef wrap(n):\n    return DDP(n)\nm = wrap(net)\n",
     {"m"}),
    # Not DDP: DataParallel, an unknown wrapper, a DDP passed on to a call whose result is not the module.
    ("import torch\nm = torch.nn.DataParallel(net)\n", set()),
    ("from utils import smart_DDP\nm = smart_DDP(net)\n", set()),
    ("from torch.nn.parallel import DistributedDataParallel as DDP\nm = Trainer(DDP(net))\n", set()),
])
def test_ddp_models(source, expected):
    assert set(ddp_models(_index(source))) == expected


@pytest.mark.parametrize("body, expected", [
    ("with model.no_sync():\n    model(x).backward()\n", True),
    ("ctx = model.no_sync if last else contextlib.nullcontext\n", True),
    ("model.require_backward_grad_sync = last\n", True),
    ("with accelerator.accumulate(model):\n    step()\n", True),
    ("with ddp_sync(model, last):\n    model(x).backward()\n", True),  # a helper context given the model
    ("with torch.autocast('cuda'):\n    model(x).backward()\n", False),
])
def test_handles_sync(body, expected):
    index = _index("def train(model, x, last):\n" + textwrap.indent(body, "    "))
    assert handles_sync(index, index.functions[0], {"model"}) is expected


COMPILED = """
import torch
import torch.nn as nn

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
    def forward(self, x):
        return self.fc(x)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(2)])
    def forward(self, x):
        return helper(self.embed(x))
    def embed(self, x):
        return x
    def unused(self, x):
        return x

def helper(x):
    return x

@torch.compiler.disable
def eager_only(x):
    return x

def step(x):
    return eager_only(x)

class Other(nn.Module):
    def forward(self, x):
        return x

@torch.compile(mode="max-autotune")
def decorated(x):
    return x

model = Net().cuda()
model = torch.compile(model)
compiled_step = torch.compile(step)
other = Other()
other.compile()
"""


def test_compiled_functions():
    index = _index(COMPILED)
    compiled = compiled_functions(index)
    entries = {(index.class_of.get(f).name if index.class_of.get(f) else "", f.name) for f in compiled.entries}
    reached = {(index.class_of.get(f).name if index.class_of.get(f) else "", f.name) for f in compiled.reached}
    assert entries == {("Net", "forward"), ("", "step"), ("Other", "forward"), ("", "decorated")}
    assert reached == entries | {("Net", "embed"), ("", "helper"), ("Block", "forward")}  # not unused, not eager_only


def test_compiled_functions_not_for_models_of_other_files():
    index = _index("import torch\nfrom models import Net\nmodel = torch.compile(Net())\nm2 = Net()\nm2.compile()\n")
    assert not compiled_functions(index).reached


@pytest.mark.parametrize("source, expected", [
    ("import torch\ntorch._dynamo.config.capture_scalar_outputs = True\n", True),
    ("import torch\n@torch._dynamo.config.patch(capture_scalar_outputs=True)\ndef f():\n    pass\n", True),
    ("import torch\n# capture_scalar_outputs = True\n", False),  # a comment decides nothing
])
def test_dynamo_setting(source, expected):
    assert dynamo_setting(_index(source), "capture_scalar_outputs") is expected


@pytest.mark.parametrize("text, passes", [
    ("model = torch.compile(model)", True),
    ("net.compile(mode='max-autotune')", True),
    ("from torch import compile\n", True),
    ("compile", True),
    ("re.compile(pattern)", True),  # the word is there: the index then finds nothing compiled
    ("x = _compile(fn)", False),
    ("was_compiled = True", False),
    ("recompile_limit = 8", False),
    ("compile_fx(gm)", False),
    ("torch.compiler.disable", False),
])
def test_tl708_text_gate_is_the_word_compile(text, passes):
    # The gate is written literal-first (fast); it must admit exactly the texts `\bcompile\b` admits.
    import re
    from torchlint.config import Settings
    from torchlint.registry import all_rules
    rule = next(r for r in all_rules() if r.code == "TL708")
    assert bool(re.search(r"\bcompile\b", text)) is passes
    assert rule.may_fire(text, Settings()) is passes
