"""The shared device and precision facts: CUDA destinations, provable CPU devices, mixed-precision signs."""

import ast

import pytest

from torchlint.facts.index import AstIndex
from torchlint.facts.devices import (CPU, CUDA, cuda_evidence, mixed_precision_evidence, on_cpu,
                                     reduced_precision_calls, reduced_precision_evidence, to_destination)
from torchlint.facts.script import training_entry_calls


def index(source: str) -> AstIndex:
    return AstIndex(ast.parse(source), source)


@pytest.mark.parametrize(
    "setup, move, expected",
    [
        ("", "x.cuda()", CUDA),
        ("", "x.to('cuda:1')", CUDA),
        ("", "x.to('cpu')", CPU),
        ("device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')", "x.to(device)", CUDA),
        ("device = torch.device('cpu')", "x.to(device)", CPU),
        ("device = 'mps'", "x.to(device=device)", CPU),
        ("", "x.to(args.device)", CUDA),  # a device-looking name: plausibly CUDA
        ("", "x.to(torch.float16)", None),  # a dtype, not a device
        ("", "x.to(other)", None),  # a tensor or anything: unknown
        ("", "x.to(0)", CUDA),
    ],
)
def test_to_destination(setup, move, expected):
    found = index(f"import torch\n{setup}\n{move}\n")
    [last] = [info for info in found.calls if info.node.lineno == 3]  # the move, on the last line
    assert to_destination(found, last.node, found.tree) == expected


def test_cuda_evidence_finds_the_first_move_and_ignores_cpu_only_files():
    assert cuda_evidence(index("import torch\nmodel.to('cpu')\nx = torch.zeros(3)\n")) is None
    found = cuda_evidence(index("import torch\nx = torch.zeros(3, device='cuda')\nmodel.cuda()\n"))
    assert found is not None and ast.unparse(found).startswith("torch.zeros")


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nwith torch.autocast('cuda'):\n    y = model(x)\n",
        "from torch.cuda.amp import autocast\nwith autocast():\n    pass\n",
        "import torch\nscaler = torch.cuda.amp.GradScaler()\n",
        "import torch\nmodel = model.half()\n",
        "import torch as t\nmodel.to(t.bfloat16)\n",
        "import torch\nx = torch.zeros(3, dtype=torch.float16)\n",
        "from accelerate import Accelerator\naccelerator = Accelerator()\n",
        "import lightning as L\ntrainer = L.Trainer(precision='bf16-mixed')\n",
        "import torch\nfrom functools import partial\namp_autocast = partial(torch.autocast, device_type='cuda')\n",
    ],
)
def test_mixed_precision_evidence(source):
    assert mixed_precision_evidence(index(source)) is not None


def test_a_precision_framework_imported_and_never_used_is_no_evidence():
    source = "import torch\ntry:\n    from apex import amp\nexcept ImportError:\n    pass\nmodel = model.cuda()\n"
    assert mixed_precision_evidence(index(source)) is None


def test_no_mixed_precision_in_a_plain_fp32_script():
    source = "import torch\nx = torch.zeros(3, dtype=torch.float32)\nmodel.to(device)\nloss.backward()\n"
    assert mixed_precision_evidence(index(source)) is None


# The default rule set (Rule.default_enabled) lives in config.selected_codes; tested here beside the other
# shared facts that the opinionated rules rely on.
from torchlint.config import Settings, selected_codes  # noqa: E402


def test_default_set_leaves_out_opt_in_rules_until_selected():
    codes, defaults = ["TL101", "TL302", "TL503"], ["TL101"]
    assert selected_codes(Settings(), codes, default_codes=defaults) == ("TL101",)
    assert selected_codes(Settings(extend_select=("TL302",)), codes, default_codes=defaults) == ("TL101", "TL302")
    assert selected_codes(Settings(select=("ALL",)), codes, default_codes=defaults) == tuple(codes)
    assert selected_codes(Settings(select=("TL5",)), codes, default_codes=defaults) == ("TL503",)
    assert selected_codes(Settings(ignore=("TL1",)), codes, default_codes=defaults) == ()




@pytest.mark.parametrize(
    "source, expected",
    [
        ("import torch\nwith torch.autocast('cuda'):\n    pass\n", True),
        ("import torch\nmodel = model.bfloat16()\n", True),
        ("import torch\nx = torch.zeros(3, dtype=torch.half)\n", True),
        ("from accelerate import Accelerator\n", False),  # may as well be fp32: mixed_precision_evidence only
        ("import lightning as L\ntrainer = L.Trainer(precision='32')\n", False),
        ("import torch\nx = torch.zeros(3)\n", False),
    ],
)
def test_reduced_precision_evidence_needs_the_file_itself_to_compute_in_fp16_or_bf16(source, expected):
    assert (reduced_precision_evidence(index(source)) is not None) is expected
    if expected:
        assert mixed_precision_evidence(index(source)) is not None  # the stricter fact implies the broader one


def test_reduced_precision_calls_are_every_sign_less_the_disabled_autocasts():
    source = ("import torch\nwith torch.autocast('cuda', enabled=False):\n    pass\n"
              "scaler = torch.cuda.amp.GradScaler(enabled=args.amp)\nnet = net.half()\n")
    assert [ast.unparse(call) for call in reduced_precision_calls(index(source))] == [
        "torch.cuda.amp.GradScaler(enabled=args.amp)", "net.half()"]
    assert reduced_precision_calls(index("import torch\nwith torch.autocast('cuda', enabled=False):\n    pass\n")) == []
    fp8 = "import transformer_engine.pytorch as te\nwith te.autocast(enabled=True):\n    pass\n"
    assert reduced_precision_calls(index(fp8)) == [] and reduced_precision_evidence(index(fp8)) is not None


@pytest.mark.parametrize(
    "source, expected",
    [
        ("w = torch.tensor([1.0, -2.0])", True),
        ("w = torch.zeros(2, 3, device='cpu')", True),
        ("w = torch.zeros(2)\nw = torch.ones(2)", True),
        ("w = torch.tensor([1.0], device='cuda')", False),
        ("w = torch.tensor(other)", False),  # a tensor given as data keeps its device
        ("w = torch.zeros(2)\nw = w.to(device)", False),
        ("w = torch.zeros(2)\nv = w.cuda()", False),  # the file moves it (or a copy): not shown to stay
        ("w = torch.zeros(2)\nw.data = w.data.cuda()", False),
        ("w = torch.zeros(2)\ndef f(w):\n    return w", False),  # a parameter of the same name
        ("w = torch.zeros(2)\ndef f():\n    global w\n    w = g()", False),
        ("w = torch.zeros(2)\nfor w in batches:\n    pass", False),
        ("torch.set_default_device('cuda')\nw = torch.zeros(2)", False),
        ("with torch.device('cuda'):\n    w = torch.zeros(2)", False),
        ("from helpers import *\nw = torch.zeros(2)", False),
        ("w = torch.zeros_like(x)", False),
        ("w = tok(text, return_tensors='pt')", True),  # a Hugging Face batch is made on the CPU
        ("w = tok(text, return_tensors='pt').to(device)", False),
        ("w = tok(text, return_tensors='np')", False),
        ("torch.set_default_device('cuda')\nw = tok(text, return_tensors='pt')", False),
    ],
)
def test_on_cpu(source, expected):
    found = index(f"import torch\n{source}\nw[0].item()\n")
    [read] = [info.node for info in found.calls if info.node.lineno == source.count("\n") + 3]
    assert on_cpu(found, read.func.value) is expected


@pytest.mark.parametrize(
    "source, expected",
    [
        ("def train():\n    for x in data:\n        loss(x).backward()\ntrain()", 1),
        ("def step(x):\n    loss(x).backward()\ndef epoch():\n    for x in data:\n        step(x)\n"
         "def run():\n    for e in range(3):\n        epoch()\nrun()", 0),  # `epoch`'s loop trains only through a call
        ("def one():\n    for x in data:\n        loss(x).backward()\ndef run():\n    one()\nfor e in range(3):\n    run()", 1),
        ("def train():\n    for x in data:\n        loss(x).backward()\nif __name__ == '__main__':\n    train()", 0),
        ("def train():\n    for x in data:\n        loss(x).backward()\ndef helper():\n    pass\nhelper()", 0),
        ("def train():\n    for x in data:\n        loss(x).backward()\ntrain = other\ntrain()", 0),
        ("from lib import train\ntrain()", 0),
    ],
)
def test_training_entry_calls(source, expected):
    assert len(training_entry_calls(index(source))) == expected


def test_on_cpu_reads_a_tokenizer_call_itself():
    found = index("import torch\nids = tok(text, return_tensors='pt')['input_ids'][0].tolist()\n"
                  "moved = tok(text, return_tensors='pt').to(device)['input_ids'].tolist()\n")
    reads = [info.node for info in found.calls if ast.unparse(info.node.func).endswith(".tolist")]
    assert [on_cpu(found, read.func.value) for read in reads] == [True, False]


from torchlint.facts.devices import runs_on_cpu  # noqa: E402
from torchlint.rule import IndexContext  # noqa: E402


@pytest.mark.parametrize("source,path,expected", [
    # a notebook is a program: one that names no CUDA runs on the CPU, also where a helper runs its training
    ("import d2l\nimport torch\n\ndef sgd(params, lr):\n    for p in params:\n        p.data -= lr * p.grad\n\n"
     "d2l.train(sgd, 0.1)\n", "lesson.ipynb", True),
    # the same code as a module: a helper others may run on a GPU
    ("import d2l\nimport torch\n\ndef sgd(params, lr):\n    for p in params:\n        p.data -= lr * p.grad\n\n"
     "d2l.train(sgd, 0.1)\n", "lesson.py", False),
    # a notebook that names CUDA
    ("import torch\nx = torch.ones(2).cuda()\n", "lesson.ipynb", False),
])
def test_runs_on_cpu_takes_a_notebook_that_names_no_cuda_for_a_cpu_program(source, path, expected):
    index = AstIndex(ast.parse(source), source)
    assert runs_on_cpu(IndexContext(index, Settings(), path)) is expected
