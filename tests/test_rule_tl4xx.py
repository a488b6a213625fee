"""TL401-TL403 (DataLoader workers, pinning, persistent workers) and the loader facts they share."""

from __future__ import annotations

import ast

import pytest

from fixture_support import fix, lint
from torchlint.facts.index import index_of
from torchlint.config import Settings
from torchlint.engine import reports_without_stages
from torchlint.facts.loaders import loader_facts
from torchlint.registry import get_rule
from torchlint.rule import Applicability

HEADER = "import torch\nfrom torch.utils.data import DataLoader\n"

TRAIN = """
def train_one_epoch(model, optimizer, data, device):
    for x, y in data:
        model(x.to(device), y.to(device)).backward()
        optimizer.step()
"""


def facts(source: str):
    return loader_facts(index_of(ast.parse(source), source))


def test_loader_tied_through_a_helper_parameter_and_an_epoch_loop():
    source = HEADER + TRAIN + (
        "def main(ds, model, optimizer, device):\n"
        "    loader = DataLoader(ds, num_workers=2)\n"
        "    for epoch in range(3):\n"
        "        train_one_epoch(model, optimizer, loader, device)\n"
    )
    f = facts(source)
    (site,) = f.sites
    (loop,) = f.training_loops(site)
    assert f.repeated_iteration(site, loop) is not None
    assert f.batch_moves(loop)


def test_same_name_in_another_function_is_not_the_same_loader():
    source = HEADER + (
        "def evaluate(ds):\n    loader = DataLoader(ds)\n    return [x for x in loader]\n"
        "def train(model, optimizer, loaders):\n"
        "    for loader in loaders:\n"
        "        for x in loader:\n"
        "            model(x).backward()\n"
        "            optimizer.step()\n"
    )
    (site,) = facts(source).sites
    assert site.loops == []


def test_module_level_loader_used_in_a_function():
    source = HEADER + "loader = DataLoader(ds)\n" + (
        "def fit(model, optimizer):\n"
        "    for x in loader:\n"
        "        model(x).backward()\n"
        "        optimizer.step()\n"
    )
    assert len(lint(source, "TL401")) == 1


def test_loader_rebuilt_inside_the_per_epoch_helper_is_not_repeated():
    source = HEADER + (
        "def one_epoch(ds, model, optimizer):\n"
        "    loader = DataLoader(ds, num_workers=4)\n"
        "    for x in loader:\n"
        "        model(x).backward()\n"
        "        optimizer.step()\n"
        "for epoch in range(3):\n"
        "    one_epoch(ds, model, optimizer)\n"
    )
    assert lint(source, "TL403") == []
    assert lint(source, "TL401") == []


def test_dataloader_that_is_not_torchs_is_not_checked():
    source = "from .data import DataLoader\nloader = DataLoader(ds)\nfor x in loader:\n    model(x).backward()\n"
    assert lint(source, "TL401") == []


@pytest.mark.parametrize("code", ["TL401", "TL402", "TL403"])
def test_silent_in_tests(code):
    source = HEADER + TRAIN + (
        "loader = DataLoader(ds, num_workers=0 if SLOW else 0)\n"
        "for epoch in range(2):\n"
        "    train_one_epoch(model, optimizer, loader, 'cuda')\n"
    )
    source = source.replace("num_workers=0 if SLOW else 0", "num_workers=2" if code == "TL403" else "num_workers=0")
    assert len(lint(source, code, path="train.py")) == 1
    assert lint(source, code, path="tests/test_training.py") == []


def test_tl401_single_process_via_module_constant_and_not_for_other_values():
    base = HEADER + TRAIN + "loader = DataLoader(ds, num_workers={})\ntrain_one_epoch(m, o, loader, 'cuda')\n"
    assert len(lint("W = 0\n" + base.format("W"), "TL401")) == 1
    assert lint("W = 4\n" + base.format("W"), "TL401") == []
    assert lint(base.format("cfg.workers"), "TL401") == []


def test_tl402_positional_pin_memory_false_is_replaced():
    source = HEADER + TRAIN + "loader = DataLoader(ds, 8, True, None, None, 2, None, False)\ntrain_one_epoch(m, o, loader, 'cuda')\n"
    diagnostic = lint(source, "TL402")[0]
    assert diagnostic.fix is Applicability.UNSAFE
    assert "DataLoader(ds, 8, True, None, None, 2, None, True)" in fix(source, "TL402")
    assert fix(source, "TL402", unsafe=False) == source


def test_tl402_needs_a_cuda_move_of_the_batch():
    source = HEADER + TRAIN.replace("x.to(device), y.to(device)", "x, y") + "loader = DataLoader(ds)\ntrain_one_epoch(m, o, loader, 'cuda')\n"
    assert lint(source, "TL402") == []


def test_tl403_fix_needs_torch_1_7():
    source = HEADER + TRAIN + "loader = DataLoader(ds, num_workers=2)\nfor e in range(3):\n    train_one_epoch(m, o, loader, 'cuda')\n"
    assert "persistent_workers=True" in fix(source, "TL403")
    old = "# torchlint-fixture: torch-version=1.6\n" + source
    assert lint(old, "TL403")[0].fix is None


@pytest.mark.parametrize("code", ["TL401", "TL402", "TL403"])
def test_silent_without_training_or_with_kwargs(code):
    rule = get_rule(code)()

    def reports(source):
        return reports_without_stages([rule], source, Settings(), [])

    no_training = HEADER + "loader = DataLoader(ds, num_workers=2)\nfor x in loader:\n    print(x.cuda())\n"
    assert reports(no_training) == []
    kwargs = HEADER + TRAIN + (
        "loader = DataLoader(ds, **kw)\nfor e in range(3):\n    train_one_epoch(m, o, loader, 'cuda')\n")
    assert reports(kwargs) == []
    plain = kwargs.replace("**kw", "num_workers={}".format(2 if code == "TL403" else 0))
    assert len(reports(plain)) == 1


def test_batch_names_grow_in_source_order():
    # `a = x[0]` comes before `x` holds the batch: `a` is not (a part of) the batch, though `ast.walk`
    # (breadth first) would meet the top-level `x = batch[0]` first
    source = HEADER + (
        "loader = DataLoader(ds)\n"
        "for batch in loader:\n"
        "    if c:\n"
        "        a = x[0]\n"
        "    x = batch[0]\n"
        "    y = x[1]\n"
        "    a.cuda()\n"
        "    model(a).backward()\n"
        "    optimizer.step()\n"
    )
    f = facts(source)
    (site,) = f.sites
    (loop,) = f.training_loops(site)
    assert f.batch_names(loop) == {"batch", "x", "y"}
    assert f.batch_moves(loop) == []
    moved = facts(source.replace("a.cuda()", "y.cuda()"))
    assert moved.batch_moves(moved.training_loops(moved.sites[0])[0])


def test_a_decorator_that_trains_makes_its_function_train():
    # LibCST's calls of a def include its decorators'; `ast` places the def at its keyword
    source = HEADER + (
        "@hook(loss.backward())\n"
        "def step(x):\n    pass\n"
        "loader = DataLoader(ds)\n"
        "for x in loader:\n    step(x)\n"
    )
    assert len(lint(source, "TL401")) == 1


def test_a_move_of_a_converted_batch_counts_for_tl402_only():
    """``im.float().to(device)`` copies the batch (or a converted copy of it): TL402 follows it, with a note that
    a conversion that changes the dtype is not pinned; TL103's moves stay the batch's own."""
    source = HEADER + (
        "def fit(model, ds, optimizer, device='cuda'):\n"
        "    loader = DataLoader(ds, num_workers=2)\n"
        "    for im in loader:\n"
        "        im = im.float().to(device)\n"
        "        model(im).backward()\n"
        "        optimizer.step()\n"
    )
    f = facts(source)
    (loop,) = f.training_loops(f.sites[0])
    assert f.batch_moves(loop) == []
    assert len(f.batch_moves(loop, converted=True)) == 1
    (diagnostic,) = lint(source, "TL402")
    assert "`im.float()` before the move makes a new pageable tensor" in diagnostic.message
    assert "pin_memory=True" in fix(source, "TL402")
    plain = source.replace("im.float().to(device)", "im.to(device)")
    (diagnostic,) = lint(plain, "TL402")
    assert "before the move" not in diagnostic.message
    # an argument to the conversion is no dtype method without arguments: not followed
    assert lint(source.replace("im.float()", "im.float(1)"), "TL402") == []


def test_workers_from_an_option_get_a_condition_that_holds_with_no_workers():
    """`num_workers=args.workers` (default 3): the fix passes `persistent_workers=args.workers > 0`, which a run
    with `--workers 0` accepts, where `persistent_workers=True` raises."""
    source = HEADER + (
        "import argparse\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument('--workers', type=int, default=3)\n"
        "def fit(model, ds, optimizer, args):\n"
        "    loader = DataLoader(ds, num_workers=args.workers)\n"
        "    for epoch in range(2):\n"
        "        for x in loader:\n"
        "            model(x.cuda()).backward()\n"
        "            optimizer.step()\n"
        "fit(None, None, None, parser.parse_args())\n"
    )
    (diagnostic,) = lint(source, "TL403")
    assert "`args.workers` is 3 by default" in diagnostic.message
    fixed = fix(source, "TL403")
    assert "DataLoader(ds, num_workers=args.workers, persistent_workers=args.workers > 0)" in fixed
    torch = pytest.importorskip("torch")
    workers = 0  # what `--workers 0` gives
    torch.utils.data.DataLoader(list(range(4)), num_workers=workers, persistent_workers=workers > 0)
    with pytest.raises(ValueError):
        torch.utils.data.DataLoader(list(range(4)), num_workers=workers, persistent_workers=True)
    # reassigned after parsing: the count is not the default any more
    changed = source.replace("    loader =", "    args.workers = args.workers // 4\n    loader =")
    assert lint(changed, "TL403") == []


@pytest.mark.parametrize("copies, found", [(2, 2), (16, 16), (17, 0)])
def test_a_loop_over_a_name_bound_to_many_loaders_is_left_alone(copies, found):
    """A generated file that rebinds `train_loader` at module level many times over, each under an ``if``
    (so any of them may reach the loop; consecutive plain rebindings reach it only through the last): up to
    ``MAX_LOADERS_PER_LOOP`` bindings the loop is tied to each (each unpinned loader: a finding at each),
    beyond it the rules cannot tell which one the loop iterates (and tying every loop to every binding
    was quadratic: 560 copies of a script took 627,200 ties)."""
    from torchlint.facts.loaders import MAX_LOADERS_PER_LOOP

    assert MAX_LOADERS_PER_LOOP == 16
    source = "import torch\nfrom torch.utils.data import DataLoader\n" + "".join(
        f"if flag == {i}: train_loader = DataLoader(data, batch_size={i + 1}, num_workers=2)\n"
        for i in range(copies)) + (
        "model = torch.nn.Linear(2, 2).cuda()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for x in train_loader:\n    loss = model(x.cuda()).sum()\n    loss.backward()\n    opt.step()\n")
    assert [d.line for d in lint(source, "TL402")] == list(range(3, 3 + found))


GPU_DATASET = """
class Windows:
    def __init__(self, data, device):
        self.data, self.device = data, device

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.{method}(i)

    def cut(self, i):
        return {sample}

    def upload(self):
        return self.data.to(self.device)
"""


@pytest.mark.parametrize("sample, on_gpu", [
    ("self.data[i].to(self.device)", True),
    ("self.data[i].cuda()", True),
    ("torch.tensor(self.data[i], device='cuda')", True),
    ("torch.as_tensor(self.data[i]).to(0)", True),
    ("self.data[i].to(torch.float32)", False),  # a dtype, no device
    ("torch.zeros(3, device='cpu')", False),  # provably the CPU
    ("self.data[i]", False),  # only upload(), which __getitem__ never calls, moves data
])
def test_samples_on_gpu_follows_getitem_and_the_methods_it_calls(sample, on_gpu):
    source = HEADER + GPU_DATASET.format(sample=sample, method="cut") + TRAIN + (
        "def main(data, model, optimizer, device):\n"
        "    train_one_epoch(model, optimizer, DataLoader(Windows(data, device)), device)\n"
    )
    f = facts(source)
    (site,) = f.sites
    assert f.samples_on_gpu(site) is on_gpu
    assert bool(lint(source, "TL401")) is not on_gpu
    assert bool(lint(source, "TL402")) is not on_gpu


def test_samples_on_gpu_when_one_binding_or_a_wrapper_holds_such_a_dataset():
    gpu = GPU_DATASET.format(sample="self.data[i].cuda()", method="cut")
    cases = {
        "    ds = Windows(data, device) if flag else data\n    loader = DataLoader(ds)\n": True,
        "    ds = data\n    if flag:\n        ds = Windows(data, device)\n    loader = DataLoader(ds)\n": True,
        "    loader = DataLoader(Subset(Windows(data, device), range(8)))\n": True,
        "    loader = DataLoader(ConcatDataset([data, Windows(data, device)]))\n": True,
        "    loader = DataLoader(Subset(data, range(8)))\n": False,
    }
    for body, on_gpu in cases.items():
        source = HEADER + "from torch.utils.data import ConcatDataset, Subset\n" + gpu + (
            "def main(data, flag, model, optimizer, device):\n" + body
            + "    for x in loader:\n        model(x).backward()\n        optimizer.step()\n")
        f = facts(source)
        (site,) = f.sites
        assert f.samples_on_gpu(site) is on_gpu, body


def test_a_tuple_assignment_pairs_its_parts():
    # `image, target = sample["image"], sample["label"]`: each name holds one part of the batch; `n, meta =
    # len(sample), cache["k"]` holds none (a length, and a subscript of something else)
    source = HEADER + (
        "loader = DataLoader(ds)\n"
        "for sample in loader:\n"
        "    image, target = sample['image'], sample['label']\n"
        "    n, meta = len(sample), cache['k']\n"
        "    model(image.cuda(), target.cuda(), meta.cuda()).backward()\n"
        "    optimizer.step()\n"
    )
    f = facts(source)
    (loop,) = f.training_loops(f.sites[0])
    assert f.batch_names(loop) == {"sample", "image", "target"}
    assert [call.func.value.id for call in f.batch_moves(loop)] == ["image", "target"]


DATA_MODULE = HEADER + """
class Data:
    def __init__(self, items):
        self.items = items

    def train_dataloader(self):
        return DataLoader(self.items, batch_size=32, num_workers=4)


class Shifted(Data):
    pass
"""


def test_a_loader_that_a_method_of_a_class_of_the_file_returns():
    # `dm = Shifted(...)`: the inherited `train_dataloader()` builds the loader the training loop iterates
    source = DATA_MODULE + TRAIN + "\ndm = Shifted([])\ntrain_one_epoch(None, None, dm.train_dataloader(), 'cuda')\n"
    assert [(d.code, d.line) for d in lint(source, "TL402")] == [("TL402", 9)]
    assert "DataLoader(self.items, batch_size=32, num_workers=4, pin_memory=True)" in fix(source, "TL402")
    # a receiver bound to something else too: which class's method runs is not in the file
    other = source.replace("dm = Shifted([])", "dm = Shifted([]) if True else make_data()")
    assert lint(other, "TL402") == []


def test_a_loader_iterated_through_a_progress_bar_bound_by_with():
    source = HEADER + "from tqdm import tqdm\n" + """
def train(model, optimizer, dataset):
    loader = DataLoader(dataset, batch_size=64, num_workers=4)
    for epoch in range(10):
        with tqdm(loader) as bar:
            for x, y in bar:
                model(x.cuda(), y.cuda()).backward()
                optimizer.step()
"""
    assert [(d.code, d.line) for d in lint(source, "TL403")] == [("TL403", 6)]
    # a `with` that binds something else: not the loader
    other = source.replace("with tqdm(loader) as bar:", "with open('log') as bar:")
    assert lint(other, "TL403") == []
