"""TL707 not-compiled: what counts as compiled, and where the rule has nothing to say."""

import textwrap

import pytest

from fixture_support import lint
from torchlint.registry import get_rule

SCRIPT = """
import torch
{head}
model = Net().cuda()
optimizer = torch.optim.AdamW(model.parameters())
for x, y in loader:
    loss = model(x.cuda(), y.cuda())
    loss.backward()
    optimizer.step()
"""


def _found(head: str = "", header: str = ""):
    return lint(header + SCRIPT.format(head=textwrap.dedent(head)), "TL707")


def test_opt_in():
    assert get_rule("TL707").default_enabled is False


def test_an_eager_cuda_script_is_reported_at_its_loop():
    (finding,) = _found()
    assert (finding.line, finding.column) == (6, 13)  # `loader`


@pytest.mark.parametrize("head", [
    "model = torch.compile(Net())\n",
    "Net().compile()\n",
    "from torch import compile\n",
    "import torch as t\nstep = t.compile(train_step)\n",
    "@torch.compile\ndef forward(x):\n    return x\n",
    "@torch.compile(mode='max-autotune')\nclass Net(torch.nn.Module):\n    pass\n",
    "import torch._dynamo\ntorch._dynamo.config.cache_size_limit = 64\n",
    "m = torch.jit.script(Net())\n",
    "if args.compile:\n    pass\n",
    "use = cfg.get('compile', False)\n",
    "trainer = Trainer(compile=True)\n",
    "from accelerate import Accelerator\n",
    "g = torch.autograd.grad(out, x, create_graph=True)\n",  # double backward: compile rejects it
])
def test_silent(head):
    assert _found(head) == []


@pytest.mark.parametrize("head", [
    "import re\nWORD = re.compile('[a-z]+')\n",  # another module's compile
    "# model = torch.compile(model)\n",  # a comment decides nothing
    "g = torch.autograd.grad(out, x, create_graph=False)\n",
])
def test_still_reported(head):
    assert len(_found(head)) == 1


def test_silent_before_torch_2():
    assert _found(header="# torchlint-fixture: torch-version=1.13\n") == []


def test_silent_without_an_optimizer_step_in_the_loop():
    source = "import torch\nlayer = L().cuda()\nfor _ in range(10):\n    layer(x).sum().backward()\n"
    assert lint(source, "TL707") == []


EPOCH = """
import torch
def train_one_epoch(model, loader, optimizer):
    for x, y in loader:
        model(x.cuda(), y.cuda()).backward()
        optimizer.step()
"""


def test_a_model_received_from_a_caller_in_another_file_is_not_this_file_s_choice():
    assert lint(EPOCH, "TL707") == []
    called_here = EPOCH + "model = Net().cuda()\ntrain_one_epoch(model, loader, torch.optim.SGD(model.parameters(), 0.1))\n"
    assert len(lint(called_here, "TL707")) == 1


@pytest.mark.parametrize("head, found", [
    ("from mylib import wrap\nmodel = wrap(Net(), mesh)\nmodel = wrap(model, mesh)\n", 0),  # may compile it
    ("from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(Net().cuda())\nmodel = DDP(model)\n", 1),
    ("from mylib import report\nsummary = report(model)\n", 1),  # not the model rebound
])
def test_a_model_rebound_through_another_project_s_function(head, found):
    source = "import torch\n" + head + SCRIPT.split("import torch\n{head}\n", 1)[1].replace("model = Net().cuda()\n", "")
    assert len(lint(source, "TL707")) == found


def test_a_loop_over_optimizers_alone_trains_nothing_here():
    source = ("import torch\nx = torch.ones(1, device='cuda')\n"
              "def hook(param):\n    for optim in param._optimizers:\n        optim.step()\n")
    assert lint(source, "TL707") == []
