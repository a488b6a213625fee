"""torchlint.facts.evaluation: where code runs without autograd, and where it switches a model to eval mode."""

from __future__ import annotations

import ast
import textwrap

import pytest

from torchlint.facts.index import index_of
from torchlint.facts.evaluation import (called_without_grad, decorated_grad_off, eval_receiver, grad_globally_off,
                                        grad_off_between, is_eval_loader, may_disable_grad, train_receiver)


def _index(source: str):
    source = textwrap.dedent(source)
    return index_of(ast.parse(source), source)


@pytest.mark.parametrize("head,disables", [
    ("torch.no_grad()", True),
    ("t.inference_mode()", True),  # through the alias
    ("torch.set_grad_enabled(False)", True),
    ("torch.set_grad_enabled(mode=False)", True),
    ("torch.set_grad_enabled(is_train)", True),  # named for grad mode: it manages it, whatever the value
    ("ctx", True),  # made elsewhere: it may be `torch.no_grad()`
    ("self.no_grad_context()", True),  # a project's own helper, named for it
    ("open(path) as f, torch.no_grad()", True),
    ("open(path) as f", False),
    ("torch.autocast('cuda')", False),
])
def test_may_disable_grad(head, disables):
    index = _index(f"import torch\nimport torch as t\nwith {head}:\n    pass\n")
    assert may_disable_grad(index, index.tree.body[-1]) is disables


def test_grad_off_between_stops_at_the_outer_node():
    index = _index("""\
        import torch
        with torch.no_grad():
            def f():
                model(x)
        def g():
            with torch.no_grad():
                model(x)
        """)
    inner, guarded = (info.node for info in index.calls_by_name["model"])
    f, g = index.functions
    assert not grad_off_between(index, inner, f)  # the block is outside the def
    assert grad_off_between(index, guarded, g)
    assert grad_off_between(index, guarded, g.body[0])  # the outer node counts too


@pytest.mark.parametrize("statement,off", [
    ("torch.set_grad_enabled(False)", True),
    ("torch.set_grad_enabled(mode=False)", True),
    ("if __name__ == '__main__':\n    torch.set_grad_enabled(False)", True),
    ("torch.set_grad_enabled(True)", False),
    ("def main():\n    torch.set_grad_enabled(False)", False),
    ("with torch.set_grad_enabled(False):\n    pass", False),
    ("set_grad_enabled(False)", False),  # not torch's
])
def test_grad_globally_off(statement, off):
    assert grad_globally_off(_index("import torch\n" + statement + "\n")) is off


def test_called_without_grad_follows_blocks_decorators_callers_and_wrappers():
    index = _index("""\
        import torch
        def in_block(): pass
        def from_decorated(): pass
        def through_caller(): pass
        def wrapped(): pass
        def plain(): pass
        def in_lambda(): pass
        @torch.no_grad()
        def decorated():
            from_decorated()
            run = lambda: in_lambda()
        def caller():
            through_caller()
        with torch.no_grad():
            in_block()
            caller()
        fast = torch.no_grad()(wrapped)
        plain()
        """)
    for name in ("in_block", "from_decorated", "through_caller", "wrapped", "in_lambda", "caller"):
        assert called_without_grad(index, name), name
    assert not called_without_grad(index, "plain")
    assert not called_without_grad(index, "decorated")  # never called


def test_decorated_grad_off_reads_the_decorators_names():
    index = _index("""\
        import torch
        @torch.inference_mode()
        def a(): pass
        @torch.no_grad
        def b(): pass
        @functools.lru_cache()
        def c(): pass
        """)
    assert [decorated_grad_off(f) for f in index.functions] == [True, True, False]


@pytest.mark.parametrize("call,eval_of,train_of", [
    ("model.eval()", "model", None),
    ("self.net.train(False)", "self.net", None),
    ("model.train(mode=False)", "model", None),
    ("model.train()", None, "model"),
    ("model.train(flag)", None, "model"),
    ("model.eval(x)", None, None),  # not nn.Module's eval()
    ("enc = Encoder().eval()", "enc", None),
    ("Encoder().eval()", None, None),  # bound to nothing
])
def test_eval_and_train_receivers(call, eval_of, train_of):
    index = _index(call + "\n")
    node = index.calls[0].node
    assert (eval_receiver(index, node), train_receiver(index, node)) == (eval_of, train_of)


@pytest.mark.parametrize("expr,loader", [
    ("val_loader", True), ("self.test_dl", True), ("valid_dataset", True), ("dev_batches", True),
    ("enumerate(val_loader)", True), ("tqdm.tqdm(test_loader)", True), ("zip(a, valid_dataset)", True),
    ("enumerate(*val_loaders)", True),
    ("train_loader", False), ("val_metrics", False), ("enumerate(iterable=val_loader)", False),
    ("interval_loader", False),
])
def test_is_eval_loader(expr, loader):
    assert is_eval_loader(ast.parse(expr, mode="eval").body) is loader


@pytest.mark.parametrize("source,off", [
    ("@torch.no_grad()\ndef step(ps):\n    for p in ps:\n        pass\n", True),
    ("@torch.no_grad\ndef step(ps):\n    for p in ps:\n        pass\n", True),  # the bare decorator (torch 2.0+)
    ("@t.inference_mode()\ndef step(ps):\n    for p in ps:\n        pass\n", True),
    ("def step(ps):\n    with torch.set_grad_enabled(False):\n        for p in ps:\n            pass\n", True),
    ("def step(ps):\n    with torch.autograd.no_grad():\n        for p in ps:\n            pass\n", True),
    ("def step(ps):\n    with torch.set_grad_enabled(is_train):\n        for p in ps:\n            pass\n", False),
    ("def step(ps):\n    with no_grad_helper():\n        for p in ps:\n            pass\n", False),  # a name decides nothing
    ("with torch.no_grad():\n    def step(ps):\n        for p in ps:\n            pass\n", False),  # the def runs later
    ("@functools.cache\ndef step(ps):\n    for p in ps:\n        pass\n", False),
])
def test_grad_off_in_function_reads_its_withs_and_its_decorators(source, off):
    from torchlint.facts.grad_mode import grad_off_in_function

    index = _index("import functools\nimport torch\nimport torch as t\n" + source)
    assert grad_off_in_function(index, index.loops[0].node) is off
