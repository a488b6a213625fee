"""TL102 tensor-created-then-moved and TL103 blocking-host-to-device-copy: fix safety, silence, pre-filters."""

from __future__ import annotations

import pytest

from fixture_support import fix, lint
from torchlint.rule import Applicability

HEADER = "import torch\n"


def _one(source: str, code: str, path: str = "train.py"):
    diagnostics = lint(source, code, path=path)
    assert len(diagnostics) == 1, [d.message for d in diagnostics]
    return diagnostics[0]


# --- TL102 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "move, applicability",
    [
        ("torch.zeros(3).cuda()", Applicability.SAFE),
        ("torch.zeros(3).to('cuda')", Applicability.SAFE),
        ("torch.zeros(3).to(device=dev)", Applicability.SAFE),  # a device= keyword is certainly a device
        ("torch.zeros(3).to(torch.device('cuda', 1))", Applicability.SAFE),
        ("torch.arange(0, 10, 2).cuda()", Applicability.SAFE),  # integer literals
        ("torch.arange(n, dtype=torch.long).cuda()", Applicability.SAFE),
        ("torch.zeros(3).to(device)", Applicability.UNSAFE),  # a parameter that only looks like a device
        ("torch.rand(3).cuda()", Applicability.UNSAFE),  # another generator
        ("torch.randint(0, 5, (3,)).cuda()", Applicability.UNSAFE),
        ("torch.arange(n).cuda()", Applicability.UNSAFE),  # n may be a float
        ("torch.linspace(0, 1, 5).cuda()", Applicability.UNSAFE),
    ],
)
def test_tl102_applicability(move, applicability):
    source = HEADER + f"def f(n, device, dev):\n    return {move}\n"
    assert _one(source, "TL102").fix is applicability


def test_tl102_device_bound_in_the_file_is_certain():
    source = (HEADER + "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
              "def f():\n    x = torch.ones(2).to(device)\n")
    assert _one(source, "TL102").fix is Applicability.SAFE
    assert fix(source, "TL102", unsafe=False).endswith("    x = torch.ones(2, device=device)\n")


def test_tl102_requires_grad_is_reported_without_fix():
    source = HEADER + "def f():\n    w = torch.zeros(3, requires_grad=True).cuda()\n"
    assert _one(source, "TL102").fix is None and "leaf" in _one(source, "TL102").message
    kept_default = HEADER + "def f():\n    w = torch.zeros(3, requires_grad=False).cuda()\n"
    assert fix(kept_default, "TL102").endswith('w = torch.zeros(3, requires_grad=False, device="cuda")\n')


def test_tl102_cuda_with_unknown_device_is_reported_without_fix():
    # `.cuda(None)` is the current device, `device=None` the CPU: the argument cannot be carried over
    source = HEADER + "def f(gpu):\n    return torch.zeros(3).cuda(gpu)\n"
    assert _one(source, "TL102").fix is None
    assert fix(source, "TL102") == source


def test_tl102_legacy_tensor_with_sizes_becomes_empty_and_imports_torch():
    source = "from torch import Tensor\ndef f():\n    x = Tensor(2, 3).cuda()\n"
    fixed = fix(source, "TL102")
    assert "import torch\n" in fixed and fixed.endswith('x = torch.empty(2, 3, device="cuda")\n')
    compile(fixed, "fixed", "exec")


def test_tl102_drops_non_blocking_and_keeps_parentheses():
    source = HEADER + "def f():\n    x = (torch.ones(4)\n         .to('cuda:1', non_blocking=True))\n"
    assert fix(source, "TL102") == HEADER + "def f():\n    x = (torch.ones(4, device='cuda:1'))\n"


@pytest.mark.parametrize("path", ["tests/test_model.py", "test_train.py", "pkg/tests/helpers.py"])
def test_tl102_and_tl103_silent_in_tests(path):
    moves = HEADER + "def f():\n    return torch.zeros(3).cuda()\n"
    assert lint(moves, "TL102", path=path) == []
    assert len(lint(moves, "TL102", path="train.py")) == 1
    source = HEADER + "def f(train_loader, device):\n    for x in train_loader:\n        x.to(device)\n"
    assert lint(source, "TL103", path=path) == []
    assert len(lint(source, "TL103", path="train.py")) == 1


@pytest.mark.parametrize(
    "source, found",
    [
        ("x = torch.zeros(3)\ny = x.to(device)\n", 0),  # made, then moved later: not chained
        ("import torch\ndef f(device):\n    return torch.zeros(3).to(device)\n", 1),
        ("import torch\ny = torch.zeros(3).to(device)\n", 0),  # module level: runs once, not every step
        ("y = torch.zeros(3).to(device)\n", 0),  # the factory's name through the import table
        ("import torch\ny = torch.zeros(3).to('cpu')\n", 0),  # a move that may go to CUDA
    ],
)
def test_tl102_needs_a_torch_factory_chained_into_a_move_to_cuda(source, found):
    assert len(lint(source, "TL102")) == found


# --- TL103 ---------------------------------------------------------------------------------------

LOADER_FILE = HEADER + """from torch.utils.data import DataLoader


def train(model, optimizer, loader, device):
    for x, y in loader:
        {body}
        model(x, y).backward()
        optimizer.step()


def main(dataset, model, optimizer, device):
    train_loader = DataLoader(dataset, batch_size=8, pin_memory=True)
    train(model, optimizer, train_loader, device)
"""


def test_tl103_batch_of_a_loader_built_here_is_safe():
    source = LOADER_FILE.format(body="x = x.to(device)")
    assert _one(source, "TL103").fix is Applicability.SAFE
    assert "x = x.to(device, non_blocking=True)" in fix(source, "TL103", unsafe=False)


def test_tl103_source_written_after_the_copy_is_unsafe():
    source = LOADER_FILE.format(body="x_gpu = x.to(device); x.mul_(2)")
    diagnostic = _one(source, "TL103")
    assert diagnostic.fix is Applicability.UNSAFE and "writes to the source tensor" in diagnostic.message
    source = LOADER_FILE.format(body="x_gpu = x.cuda(); x += 1")
    assert _one(source, "TL103").fix is Applicability.UNSAFE


def test_tl103_rebinding_the_name_to_the_copy_is_not_a_write():
    source = LOADER_FILE.format(body="x = x.to(device); x.mul_(2)")
    assert _one(source, "TL103").fix is Applicability.SAFE


@pytest.mark.parametrize(
    "body",
    [
        "x = x.to(device, torch.float32, True)",  # non_blocking passed by position
        "x = x.cuda(0, True)",
        "x = x.to('cpu')",
        "x = x.cpu()",
        "x = x.to(torch.float16)",
        "x = x.float().to(device)",  # a converted copy, not the batch itself
        "x = x.to(**opts)",
    ],
)
def test_tl103_silent(body):
    assert lint(LOADER_FILE.format(body=body), "TL103") == []


def test_tl103_follows_a_progress_bar_name():
    source = HEADER + (
        "from tqdm import tqdm\n"
        "def train(train_loader, device):\n"
        "    pbar = tqdm(enumerate(train_loader))\n"
        "    for i, (x, y) in pbar:\n"
        "        x = x.to(device)\n"
    )
    assert _one(source, "TL103").fix is Applicability.UNSAFE  # a loader by name only


@pytest.mark.parametrize(
    "source, found",
    [
        ("train_loader = make_loader()\nfor x in train_loader:\n    x = x.to(device)\n", 1),
        ("train_loader = make_loader()\nfor x in train_loader:\n    x = x.to(device, non_blocking=True)\n", 0),
        ("samples = make_loader()\nfor x in samples:\n    x = x.to(device)\n", 0),  # neither built here nor named like a loader
        ("for x in train_loader:\n    x = x.to(device)\n", 0),  # bound nowhere: NameError, dead code
    ],
)
def test_tl103_needs_a_loader_loop_and_a_blocking_move(source, found):
    assert len(lint(source, "TL103")) == found


@pytest.mark.parametrize(
    "text, expected",
    [
        ("x = torch.zeros(3).cuda()", True),
        ("x = torch.zeros(f(3), g(4))\\\n    .to(device)", True),
        ("x = (torch.ones(3)).cuda()", True),
        ("x = torch.zeros(3, name=')').cuda()", True),  # a parenthesis in a string
        ("x = torch.zeros(3)\ny = x.cuda()", False),
        ("x = torch.zeros(3).float().cuda()", True),  # a conversion, a fill, a view: looked through
        ("x = torch.FloatTensor(3, 4).zero_().to(device)", True),  # a typed legacy constructor
        ("x = torch.zeros(3).add(1).cuda()", False),
    ],
)
def test_tl102_text_stage_is_a_superset_of_chained_factories(text, expected):
    from torchlint.facts.text_gates import may_chain_factory_into_move

    assert may_chain_factory_into_move(text) is expected


@pytest.mark.parametrize("text, expected", [("train_loader", True), ("DataLoader", True), ("VAL_LOADER", True),
                                            ("val_dl", True), ("dl", True), ("handle", False), ("batches", False)])
def test_tl103_text_stage_matches_every_loader_name(text, expected):
    from torchlint.facts.loaders import LOADER_NAME
    from torchlint.facts.text_gates import may_name_a_loader

    assert may_name_a_loader(f"for x in {text}:\n") is expected
    assert bool(LOADER_NAME.search(text)) is expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("x = torch.zeros(3, name=')')\ny = x.cuda()", False),  # the string's parenthesis is skipped
        ("x = torch.zeros(3,  # a comment (with a parenthesis\n    4).cuda()", True),
        ("x = torch.zeros(3, name='''\n)''').to(d)", True),
        ("x = torch.zeros(3, name='unterminated\n", True),  # cannot follow: counted as a match
    ],
)
def test_tl102_text_stage_skips_strings_and_comments(text, expected):
    from torchlint.facts.text_gates import may_chain_factory_into_move

    assert may_chain_factory_into_move(text) is expected


def test_tl102_device_bound_several_times_to_devices_is_certain():
    source = HEADER + (
        "def main(args, rank):\n"
        "    device = torch.device(f'cuda:{rank}')\n"
        "    if args.single:\n"
        "        device = torch.device('cuda' if args.cuda else 'cpu')\n"
        "    return torch.zeros(3).to(device)\n"
    )
    assert _one(source, "TL102").fix is Applicability.SAFE
    rebound = source.replace("        device = torch.device('cuda' if args.cuda else 'cpu')\n", "        device = args.device\n")
    assert _one(rebound, "TL102").fix is Applicability.UNSAFE


def test_tl102_knows_the_dtype_of_every_legacy_constructor_its_gate_lets_through():
    from torchlint.rules.tl102_tensor_created_then_moved import _LEGACY_DTYPES
    from torchlint.facts.text_gates import LEGACY_TENSOR_TYPES

    assert list(_LEGACY_DTYPES) == list(LEGACY_TENSOR_TYPES)
    assert _LEGACY_DTYPES["FloatTensor"] == "float32" and _LEGACY_DTYPES["BoolTensor"] == "bool"
