"""Facts read off the index (``torchlint.facts``): NumPy-valued names, loops over loaders, logging guards,
host syncs and blocks where autograd is off."""

from __future__ import annotations

import ast
import textwrap

import pytest

from torchlint.facts.index import AstIndex, argument_for, is_parameter, parameter_default
from torchlint.facts.arrays import numpy_source
from torchlint.facts.grad_mode import disables_grad, turns_grad_off
from torchlint.facts.guards import is_logging_guard
from torchlint.facts.loaders import iterates_loader
from torchlint.facts.syncs import chain_has_sync, is_sync_call


def index_of(source: str) -> AstIndex:
    source = textwrap.dedent(source)
    return AstIndex(ast.parse(source), source)


def expr(source: str) -> ast.expr:
    return ast.parse(source, mode="eval").body


def test_numpy_valued_names():
    index = index_of(
        """
        import numpy as np
        import torch

        frames = np.load("x.npy")

        def f(t: torch.Tensor, n):
            arr = np.zeros((3, 4), dtype=np.float32)
            host = t.cpu().numpy()
            mixed = np.ones(3)
            mixed = [1, 2]
            total = np.sum(arr)
            noise = np.random.randn()
            batch = np.random.randn(4, 3)
            view = arr.astype(np.float64)
            return torch.tensor(arr), torch.tensor(frames)
        """
    )
    f = index.functions[0]
    arrays = {name for name in index.bindings[f] if numpy_source(index, ast.Name(name), f)}
    assert arrays == {"arr", "host", "batch", "view"}
    assert {name for name in index.bindings[index.tree] if numpy_source(index, ast.Name(name), index.tree)} == {
        "frames"}
    call = index.calls_by_name["tensor"][1].node
    assert numpy_source(index, call.args[0]) == "numpy.load"


def test_loops_over_loaders():
    index = index_of(
        """
        from torch.utils.data import DataLoader

        def fit(model, train_loader, ds, epochs):
            data = DataLoader(ds)
            for epoch in range(epochs):
                for x, y in train_loader:
                    pass
            for i, (x, y) in enumerate(tqdm(data)):
                pass
            for batch in zip(*val_loaders):
                pass
            while train_loader:
                pass
            for x in items:
                pass
        """
    )
    assert [iterates_loader(index, loop) for loop in index.loops] == [False, True, True, True, False, False]


@pytest.mark.parametrize("test,guard", [
    ("step % 100 == 0", True),
    ("(i + 1) % args.every == 0", True),
    ("divisible_by(step, every)", True),
    ("should_log", True),
    ("args.verbose", True),
    ("check(when=Debug)", True),
    ("epoch == last", False),
    ("loss_value > best", False),
    ("step // 100", False),
])
def test_logging_guards(test, guard):
    assert is_logging_guard(expr(test)) is guard


@pytest.mark.parametrize("source,sync", [
    ("x.item()", True), ("x.cpu()", True), ("x.tolist()", True), ("x.numpy()", True),
    ("x.cpu(0)", False), ("x.numpy(force=True)", False), ("item()", False), ("x.detach()", False),
])
def test_host_syncs(source, sync):
    assert is_sync_call(expr(source)) is sync


@pytest.mark.parametrize("source,synced", [
    ("x.cpu().numpy", True), ("x.cpu()[0].sum", True), ("x.item().real", True), ("f(x.item())", False),
    ("x.sum()", False), ("x.detach()[0]", False),
])
def test_chains_with_a_host_read(source, synced):
    assert chain_has_sync(expr(source)) is synced


def test_blocks_where_autograd_is_off():
    index = index_of(
        """
        import torch
        import torch.autograd as ag
        from torch import inference_mode as im
        with torch.no_grad(): pass
        with ag.inference_mode(): pass
        with im(), open(f): pass
        with torch.set_grad_enabled(False): pass
        with torch.autograd.set_grad_enabled(mode=False): pass
        with torch.set_grad_enabled(True): pass
        with torch.set_grad_enabled(training): pass
        with torch.enable_grad(): pass
        with no_grad(): pass
        """
    )
    blocks = [s for s in index.tree.body if isinstance(s, ast.With)]
    assert [disables_grad(index, s) for s in blocks] == [True, True, True, True, True, False, False, False, False]
    assert not turns_grad_off(index, expr("torch.no_grad"))


def test_argument_for_reads_keywords_positions_and_self():
    function = ast.parse("def f(a, /, b, c=1, *rest, d, **extra): pass").body[0]
    assert [name for name in ("a", "b", "c", "d", "rest", "extra", "e") if is_parameter(function, name)] \
        == ["a", "b", "c", "d"]
    call = expr("f(1, 2, d=4)")
    assert [ast.unparse(v) if v is not None else None
            for v in (argument_for(function, name, call.args, call.keywords) for name in "abcd")] \
        == ["1", "2", None, "4"]  # `c` is left at its default
    method_call = expr("obj.f(2, 3)")  # `obj` binds the first parameter
    assert ast.unparse(argument_for(function, "c", method_call.args, method_call.keywords, skip=1)) == "3"
    assert argument_for(function, "a", method_call.args, method_call.keywords, skip=1) is None
    assert not is_parameter(ast.parse("x = 1").body[0], "x")
    assert [ast.unparse(d) if d is not None else None for d in (parameter_default(function, n) for n in "abcd")] \
        == [None, None, "1", None]
    keyword_only = ast.parse("def g(x=2, *, y, z='cpu'): pass").body[0]
    assert [ast.unparse(d) if d is not None else None for d in (parameter_default(keyword_only, n) for n in "xyz")] \
        == ["2", None, "'cpu'"]
