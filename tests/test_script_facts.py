"""Training scripts and settings made on every run (torchlint.script_facts), in both tree forms."""

from __future__ import annotations

import ast
import textwrap

import libcst as cst
import pytest

from torchlint.analysis import FileAnalysis
from torchlint.script_facts import ast_has_training_loop, condition_around, first_training_loop, runs_on_every_run


def analyse(source: str) -> FileAnalysis:
    source = textwrap.dedent(source)
    return FileAnalysis(cst.parse_module(source), source)


def marked(analysis: FileAnalysis) -> cst.Call:
    (call,) = analysis.calls_by_name["mark"]
    return call


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
        "for epoch in range(3):\n    train_one_epoch()\n",  # no training call in this loop
        "loss.backward()\n",
        "for x in xs:\n    def inner():\n        loss.backward()\n",
    ],
)
def test_ast_training_loop_is_a_superset_of_the_analysis(source):
    a = analyse(source)
    if first_training_loop(a) is not None:
        assert ast_has_training_loop(ast.parse(source))


def test_ast_training_loop_rejects_files_without_one():
    assert not ast_has_training_loop(ast.parse("loss.backward()\nopt.step()\n"))
    assert not ast_has_training_loop(ast.parse("for x in xs:\n    def f():\n        loss.backward()\n"))
    assert ast_has_training_loop(ast.parse("for x in xs:\n    loss(x).backward()\n"))
