"""What runs in every training step (torchlint.facts.steps) and whether a file is a CPU program
(torchlint.facts.devices.never_uses_cuda), on the index."""

from __future__ import annotations

import ast
import textwrap

import pytest

from torchlint.facts.index import AstIndex
from torchlint.facts.devices import cuda_evidence, never_uses_cuda
from torchlint.facts.steps import runs_once_in, step_facts


def analyse(source: str) -> AstIndex:
    source = textwrap.dedent(source)
    return AstIndex(ast.parse(source), source)


def test_step_functions_and_their_calls():
    index = analyse(
        """
        def backward_pass(loss):
            loss.backward()

        async def update(self):
            self.optimizer.step()

        def schedule():
            scheduler.step()

        def one_epoch(loader):
            for x in loader:
                x.backward()

        run = lambda loss: loss.backward()

        class Trainer:
            def fit(self, loader):
                for x in loader:
                    backward_pass(x)
                    self.update()
                    other.update()
                    schedule()
                    one_epoch(x)
        """
    )
    steps = step_facts(index)
    # `one_epoch` steps inside a loop of its own: a call of it is an epoch, not a step
    assert steps.step_functions == {"backward_pass", "update"}
    fit_loop = index.loops[-1]
    assert [steps.calls_step(call) for call in fit_loop.direct_calls] == [True, True, False, False, False]
    assert fit_loop.node in steps.step_loops


REACH = """
def norm(model):
    return [p.norm() for p in model.parameters()]

def deeper(model):
    return norm(model)

def again(n):
    if n:
        again(n - 1)  # recursion
        ping(n)

def ping(n):
    again(n)  # a cycle

def setup(model):
    print(model)

def logged(model):
    print(model)

def epoch(model, loader):
    for x in loader:
        model(x).backward()
    wrap_up(model)

def wrap_up(model):
    print(model)

def finish(model):
    print(model)

class Meter:
    def add(self, loss):
        self.show(loss)

    def show(self, loss):
        print(loss)

def train(model, loader, opt):
    setup(model)
    meter = Meter()
    for step, x in enumerate(loader):
        loss = model(x)
        loss.backward()
        opt.step()
        deeper(model)
        again(3)
        meter.add(loss)
        if step % 100 == 0:
            logged(model)
        if step == 0:
            setup(model)
        for setup in hooks:
            setup(model)  # a loop target, not the file's `def setup`
        if step >= 100:
            finish(model)  # the way out of the loop: once
            break
    for e in range(3):
        epoch(model, loader)
"""


def test_the_functions_a_step_reaches():
    index = analyse(REACH)
    steps = step_facts(index)
    reached = {function.name: loop.node.lineno for function, loop in steps.reached.items()}
    loop_line = next(loop.node.lineno for loop in index.loops if type(loop.node.target) is ast.Tuple)
    assert reached == {name: loop_line for name in ("deeper", "norm", "again", "ping", "add", "show")}
    # set-up before the loop, a logging interval, the first step only, an epoch function with its own
    # training loop, and what that one calls after its loop: none runs every step
    for name in ("setup", "logged", "epoch", "wrap_up", "train", "finish"):
        assert name not in reached


@pytest.mark.parametrize(
    "branch, once",
    [
        ("if i == 0:", True),
        ("if i < 5:", True),
        ("if 3 >= i:", True),
        ("if not step:", True),
        ("if i in (0, 1):", True),
        ("if epoch == 0 and i == 0:", True),
        ("if step == 1000:", True),  # one step of the run
        ("if i == len(loader) - 1:", True),  # the last batch of each epoch
        ("if step == total_steps:", True),
        ("if step == next_eval:", False),  # a bound the loop moves
        ("if i == step:", False),
        ("if epoch == 0:", False),  # every step of the first epoch
        ("if i < 1000:", False),
        ("if i < warmup:", False),
        ("if i > 5:", False),
        ("if i == 0 or flag:", False),
        ("if True:", False),
    ],
)
def test_branches_that_run_a_few_times(branch, once):
    index = analyse(f"""
        step = 0
        for epoch in range(3):
            for i, x in enumerate(loader):
                x.backward()
                {branch}
                    mark()
                step += 1
                next_eval = step + 10
        """)
    (call,) = index.calls_by_name["mark"]
    assert runs_once_in(index, call.node, index.loops[1]) is once


@pytest.mark.parametrize("block, once", [
    ("if done:\n            mark()\n            break", True),  # the way out of the loop: taken once
    ("if done:\n            mark()\n            return", True),
    ("if done:\n            pass\n        else:\n            mark()\n            break", True),
    ("if done:\n            for y in x:\n                mark()\n                break", False),  # leaves the inner loop
    ("if done:\n            mark()", False),
])
def test_a_branch_that_leaves_the_loop_runs_once(block, once):
    index = analyse("def train(loader):\n    for x in loader:\n        x.backward()\n        " + block + "\n")
    (call,) = index.calls_by_name["mark"]
    assert runs_once_in(index, call.node, index.loops[0]) is once


@pytest.mark.parametrize("ending, once", [("break", True), ("return", True), ("if x: break", False)])
def test_a_loop_that_leaves_after_one_batch_runs_once(ending, once):
    index = analyse(f"""
        def peek(loader):
            for x in loader:
                x.backward()
                mark()
                {ending}
        """)
    (call,) = index.calls_by_name["mark"]
    assert runs_once_in(index, call.node, index.loops[0]) is once
    assert (index.loops[0].node in step_facts(index).step_loops) is not once


SCRIPT = """
import argparse
import torch

def train(model, loader, device):
    for x in loader:
        model(x.to(device)).backward()

if __name__ == "__main__":
    {main}
"""


@pytest.mark.parametrize(
    "main, cpu",
    [
        ('p = argparse.ArgumentParser(); p.add_argument("--device", default="cpu"); a = p.parse_args(); '
         'train(m.to(a.device), l, a.device)', True),
        ('p = argparse.ArgumentParser(); p.add_argument("--device", default="cpu", help="or cuda"); '
         'a = p.parse_args(); train(m, l, a.device)', True),  # the help text is prose, not a device
        ('train(m, l, torch.device("cpu"))', True),
        ('train(m, l, "mps")', True),
        ('p = argparse.ArgumentParser(); p.add_argument("--device", default="cpu", choices=["cpu", "cuda"]); '
         'a = p.parse_args(); train(m, l, a.device)', False),
        ('train(m, l, "cuda" if torch.cuda.is_available() else "cpu")', False),
        ('train(m.cuda(), l, 0)', False),
        ('train(m, l, cfg.device)', False),  # read from a config: may be CUDA
        ('train(m.to(get_device()), l, "cpu")', False),
        ('import accelerate; train(m, l, "cpu")', False),
    ],
)
def test_never_uses_cuda(main, cpu):
    index = analyse(SCRIPT.replace("{main}", main))
    assert never_uses_cuda(index) is cpu
    if cpu:
        assert cuda_evidence(index) is None  # `.to(device)` looked like a GPU move by its name only


def test_a_file_that_only_defines_training_is_not_known_to_be_cpu():
    # no `__main__`, no module-level loop: whoever calls `train` may pass a CUDA device
    index = analyse(SCRIPT.split("if __name__")[0])
    assert not never_uses_cuda(index)


INSTANCES = """
class Meter:
    def add(self, loss):
        self.seen = loss

class Learner:
    def __init__(self, model, opt, log):
        self.model, self.opt = model, opt
        self.meter = Meter()
        self.log = log

    def update(self, batch):
        self._apply(self.model(batch).sum())

    def _apply(self, loss):
        loss.backward()
        self.opt.step()
        self.meter.add(loss)
        self.log.add(loss)

    def score(self, batch):
        return self.model(batch)

def run(model, opt, data, log):
    learner = Learner(model, opt, log)
    for batch in data:
        learner.update(batch)
    probe = Learner(model, opt, log) if data else None
    for batch in data:
        probe.score(batch)
    for batch in data:
        Learner(model, opt, log).score(batch)
"""


def test_a_method_called_on_an_instance_of_a_class_steps():
    index = analyse(INSTANCES)
    steps = step_facts(index)
    by_name = {function.name: function for function in index.functions}
    # `update` steps through `self._apply(...)`: the loop that calls it on `learner = Learner(...)` trains
    assert {by_name["update"], by_name["_apply"]} <= steps.stepping and by_name["score"] not in steps.stepping
    loops = [loop.node.lineno for loop in index.loops]
    assert [loop.node.lineno for loop in steps.step_loops.values()] == loops[:1]
    # the meter the class builds (`self.meter = Meter()`) is reached; `self.log`, handed in, is not a class
    reached = {function.name for function in steps.reached}
    assert reached == {"update", "_apply", "add"}
    add = next(f for f in index.functions if f.name == "add")
    assert index.class_of[add].name == "Meter"


def test_a_receiver_bound_to_something_else_is_not_followed():
    index = analyse(INSTANCES.replace("self.meter = Meter()", "self.meter = Meter()\n        self.meter = None"))
    assert "add" not in {function.name for function in step_facts(index).reached}


def _once(source: str) -> dict:
    index = analyse(source)
    facts = step_facts(index)
    return {f"{index.class_of[f].name}.{f.name}" if index.class_of.get(f) else f.name: facts.runs_once(index, f)
            for f in index.functions}


def test_a_def_called_once_before_the_epochs_runs_once():
    assert _once(
        """
        def prepare(loader):
            return list(loader)

        def fit(model, loader, opt):
            for x in loader:
                model(x).sum().backward()
                opt.step()

        def main(loader):
            data = prepare(loader)
            for epoch in range(3):
                fit(None, data, None)

        main([])
        """) == {"prepare": True, "fit": False, "main": True}


@pytest.mark.parametrize("source", [
    "def f(n):\n    return f(n - 1) if n else 0\n\nf(3)\n",  # it calls itself
    "def f():\n    return g()\n\ndef g():\n    return f()\n\nf()\n",  # around a circle
    "import functools\n\n@functools.lru_cache\ndef f():\n    pass\n\nf()\n",  # a decorator that may call it again
    "def f():\n    pass\n\ncallbacks = [f]\nf()\n",  # handed on as a value
    "def f():\n    pass\n\nfor i in range(3):\n    f()\n",  # called in a loop
    "def f():\n    pass\n",  # never called in the file
])
def test_a_def_that_may_run_again_is_not_once(source):
    assert _once(source)["f"] is False


def test_constructors_run_once_unless_built_again():
    found = _once(
        """
        class Agent:
            def __init__(self):
                self.refresh()

            def refresh(self):
                pass

        class Beam:
            def __init__(self):
                pass

        class Wide(Beam):
            pass

        class Cell:
            def __init__(self):
                pass

        def main(steps, others):
            agent = Agent()
            for step in range(steps):
                beam = Wide()
                for other in others:
                    other.refresh()
            return isinstance(agent, Cell), Cell

        main(10, [])
        """)
    # Agent is built once, but `refresh` is also called on receivers the file cannot follow; Beam's subclass is
    # built in the loop; Cell is handed on as a value
    assert found == {"Agent.__init__": True, "Agent.refresh": False, "Beam.__init__": False,
                     "Cell.__init__": False, "main": True}
