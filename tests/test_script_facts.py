"""Training scripts and settings made on every run (torchlint.facts.script), on the index."""

from __future__ import annotations

import ast
import textwrap

import pytest

from torchlint.facts.index import AstIndex
from torchlint.facts.script import condition_around, first_training_loop, runs_on_every_run


def analyse(source: str) -> AstIndex:
    source = textwrap.dedent(source)
    return AstIndex(ast.parse(source), source)


def marked(index: AstIndex) -> ast.Call:
    (call,) = index.calls_by_name["mark"]
    return call.node


@pytest.mark.parametrize(
    "source, expected",
    [
        ("mark()\n", True),
        ("if __name__ == '__main__':\n    mark()\n", True),
        ("if __name__ == '__main__':\n    pass\nelse:\n    mark()\n", False),
        ("if args.debug:\n    mark()\n", False),
        ("x = mark() if flag else None\n", False),
        ("flag and mark()\n", False),
        ("try:\n    pass\nexcept ValueError:\n    mark()\n", False),
        ("def helper():\n    mark()\n", False),  # never called here: its callers are elsewhere
        ("def helper():\n    mark()\n\nhelper()\n", True),
        ("def helper():\n    mark()\n\nif flag:\n    helper()\n", False),
        ("def helper():\n    mark()\n\ndef main():\n    helper()\n\nif __name__ == '__main__':\n    main()\n", True),
        ("def loop():\n    mark()\n    loop()\n", False),  # only calls itself
        ("import torch.multiprocessing as mp\ndef worker(rank):\n    mark()\n\nmp.spawn(worker, nprocs=2)\n", True),
        ("import torch\ndef worker(rank):\n    mark()\n\ntorch.multiprocessing.spawn(fn=worker)\n", True),
        ("import torch.multiprocessing as mp\ndef worker(rank):\n    mark()\n\nif flag:\n    mp.spawn(worker)\n", False),
        ("import mp\ndef worker(rank):\n    mark()\n\nmp.spawn(worker)\n", False),  # not torch's
        ("import torch.multiprocessing as mp\ndef worker(rank):\n    mark()\n\nmp.spawn(other)\n", False),
    ],
)
def test_runs_on_every_run(source, expected):
    a = analyse(source)
    assert runs_on_every_run(a, marked(a)) is expected


def test_condition_around_stops_at_the_function():
    a = analyse("if flag:\n    def f():\n        mark()\n")
    assert condition_around(a, marked(a)) is None


@pytest.mark.parametrize(
    "source",
    [
        "for x in loader:\n    loss(x).backward()\n",
        "while True:\n    opt.step()\n",
        "def train():\n    for epoch in range(3):\n        for x in loader:\n            loss(x).backward()\n",
    ],
)
def test_a_loop_that_calls_backward_or_steps_an_optimizer_trains(source):
    assert first_training_loop(analyse(source)) is not None


@pytest.mark.parametrize(
    "source",
    [
        "for epoch in range(3):\n    train_one_epoch()\n",  # no training call in this loop
        "loss.backward()\nopt.step()\n",
        "for x in xs:\n    def inner():\n        loss.backward()\n",  # the def runs nothing per iteration
    ],
)
def test_a_training_loop_needs_its_call_in_the_loop_itself(source):
    assert first_training_loop(analyse(source)) is None
