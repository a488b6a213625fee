"""A training step that is a method of a class in another project file than the loop (issue 24, "see the whole
training step"): ``run.py``'s loop calls ``learner.update(batch)`` with ``learner = agent.Learner(...)``, and the
backward pass, the optimizer and the per-parameter syncs are in ``agent.py``. Each file is still checked alone:
``agent.py`` learns of the loop from the summary of the file that imports it (``facts.steps.uses_summary``),
``run.py`` of the step from the summary of the file it imports (``facts.steps.step_summary``)."""

from __future__ import annotations

from pathlib import Path
from typing import List

from torchlint.config import Settings
from torchlint.facts.index import AstIndex
from torchlint.facts.steps import step_summary, uses_summary
from torchlint.run import runner

import ast
from project_tree import write_tree

AGENT = """\
import torch
import torch.nn as nn

device = torch.device({device})


class Learner:
    def __init__(self, width):
        self.net = nn.Linear(width, width).to(device)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=1e-3)
        self.steps = 0

    def update(self, batch):
        loss = self.net(batch.to(device)).pow(2).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.record()

    def record(self):
        total = 0.0
        for p in self.net.parameters():
            total += p.grad.norm().item()
        self.last = total

    def evaluate(self, batch):
        with torch.no_grad():
            score = self.net(batch.to(device)).mean()
        return score.item()

    def report(self, batch):
        print(self.net(batch.to(device)).mean().item())
"""

RUN = """\
import torch
import agent


def main():
    learner = agent.Learner(8)
{body}


if __name__ == "__main__":
    main()
"""

EVERY_STEP = """\
    for step in range(1000):
        batch = torch.randn(4, 8)
        learner.update(batch)"""


def _check(root: Path, *names: str, select=("TL101", "TL502", "TL702"), cache: bool = False) -> List[str]:
    job = runner.Job(Settings(select=select, root=root, project_root=root),
                     cache_dir=root / ".cache" if cache else None)
    results = runner.run([root / name for name in names], job)
    return sorted(f"{Path(d.path).name}:{d.line} {d.code}" for result in results for d in result.diagnostics)


def _messages(root: Path, name: str, code: str) -> List[str]:
    job = runner.Job(Settings(select=(code,), root=root, project_root=root))
    return [d.message for result in runner.run([root / name], job) for d in result.diagnostics]


CUDA_WHEN_AVAILABLE = '"cuda" if torch.cuda.is_available() else "cpu"'


def test_a_step_method_of_another_file_called_every_iteration(tmp_path):
    write_tree(tmp_path, {"agent.py": AGENT.format(device=CUDA_WHEN_AVAILABLE), "run.py": RUN.format(body=EVERY_STEP)})
    # the optimizer of the class (on CUDA when available), the per-parameter read the step reaches, the script
    assert _check(tmp_path, "agent.py", "run.py") == ["agent.py:10 TL502", "agent.py:23 TL101", "run.py:12 TL702"]
    # checked alone, each file still finds the other (pre-commit passes only the changed files)
    assert _check(tmp_path, "agent.py") == ["agent.py:10 TL502", "agent.py:23 TL101"]
    [sync] = _messages(tmp_path, "agent.py", "TL101")
    assert sync.endswith("(`record()` runs every step: the training loop at run.py:7 reaches it)")
    [optimizer] = _messages(tmp_path, "agent.py", "TL502")
    assert "(`Learner.update()` steps it every iteration of the training loop at run.py:7)" in optimizer
    [script] = _messages(tmp_path, "run.py", "TL702")
    assert "(`self.net = nn.Linear(width, width).to(device)` in `agent.py:9`)" in script


def test_a_method_called_once_at_set_up_is_no_step(tmp_path):
    once = "    learner.update(torch.randn(4, 8))\n    for step in range(1000):\n        print(step)"
    write_tree(tmp_path, {"agent.py": AGENT.format(device=CUDA_WHEN_AVAILABLE), "run.py": RUN.format(body=once)})
    assert _check(tmp_path, "agent.py", "run.py") == []


def test_an_evaluation_method_called_every_iteration_is_no_step(tmp_path):
    evaluating = ("    for step in range(1000):\n        batch = torch.randn(4, 8)\n"
                  "        scores.append(learner.evaluate(batch))\n        learner.report(batch)")
    write_tree(tmp_path, {"agent.py": AGENT.format(device=CUDA_WHEN_AVAILABLE),
                     "run.py": RUN.format(body="    scores = []\n" + evaluating)})
    assert _check(tmp_path, "agent.py", "run.py") == []


def test_a_logging_guard_or_a_few_iterations_do_not_make_a_step_per_iteration(tmp_path):
    guarded = ("    for step in range(1000):\n        batch = torch.randn(4, 8)\n"
               "        if step % 100 == 0:\n            learner.update(batch)\n"
               "        if step < 3:\n            learner.update(batch)")
    write_tree(tmp_path, {"agent.py": AGENT.format(device=CUDA_WHEN_AVAILABLE), "run.py": RUN.format(body=guarded)})
    # the script still trains (TL702, as for a loop that calls `backward()` under such a guard), but no
    # method of the class runs every step: neither its optimizer nor its reads are reported
    assert _check(tmp_path, "agent.py", "run.py") == ["run.py:15 TL702"]


def test_a_cpu_program_is_silent(tmp_path):
    write_tree(tmp_path, {"agent.py": AGENT.format(device='"cpu"'), "run.py": RUN.format(body=EVERY_STEP)})
    # no optimizer is on CUDA, the script does not train on CUDA, and the read the step reaches is on the
    # CPU: the only file that imports agent.py is a script that names no GPU
    assert _check(tmp_path, "agent.py", "run.py") == []


def test_a_device_known_only_by_its_name_is_not_cuda_for_a_class_trained_elsewhere(tmp_path):
    agent = AGENT.format(device=CUDA_WHEN_AVAILABLE).replace("device = torch.device(", "device = pick(")
    write_tree(tmp_path, {"agent.py": agent, "run.py": RUN.format(body=EVERY_STEP)})
    assert "agent.py:10 TL502" not in _check(tmp_path, "agent.py", "run.py")


def test_a_trainer_held_by_another_class_and_reached_through_its_methods(tmp_path):
    trainer = (
        "import torch\n\n\n"
        "class Trainer:\n"
        "    def __init__(self, model):\n        self.model = model\n\n"
        "    def backward(self, loss):\n        loss.backward()\n\n"
        "    def optimize(self, opt):\n        self._norms()\n        opt.step()\n        return True\n\n"
        "    def _norms(self):\n        total = 0.0\n        for p in self.model.parameters():\n"
        "            total += torch.norm(p).item() ** 2\n        return total\n")
    loop = (
        "import torch\nfrom .trainer import Trainer\n\n\n"
        "class Loop:\n"
        "    def __init__(self, model, data):\n        self.data = data\n        self.trainer = Trainer(model)\n"
        "        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4)\n        self.step = 0\n\n"
        "    def run(self):\n        while True:\n            self.run_step(next(self.data))\n            self.step += 1\n\n"
        "    def run_step(self, batch):\n        self.trainer.optimize(self.opt)\n")
    write_tree(tmp_path, {"pkg/__init__.py": "", "pkg/trainer.py": trainer, "pkg/loop.py": loop})
    assert _check(tmp_path, "pkg/trainer.py", select=("TL101",)) == ["trainer.py:19 TL101"]
    [sync] = _messages(tmp_path, "pkg/trainer.py", "TL101")
    assert sync.endswith("(`_norms()` runs every step: the training loop at pkg/loop.py:13 reaches it)")


DIST = """\
import torch


def dev():
    if torch.cuda.is_available():
        return torch.device(f"cuda")
    return torch.device("cpu")


def host():
    return torch.device("cpu")
"""

TRAIN = """\
import torch
import dist


def train(model, loader):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for x, y in loader:
        loss = model(x.to(dist.{function}())).sum()
        loss.backward()
        opt.step()
"""


def test_a_device_from_a_function_of_another_file(tmp_path):
    write_tree(tmp_path, {"dist.py": DIST, "train.py": TRAIN.format(function="dev")})
    assert _check(tmp_path, "train.py", select=("TL502",)) == ["train.py:6 TL502"]
    write_tree(tmp_path, {"train.py": TRAIN.format(function="host")})
    assert _check(tmp_path, "train.py", select=("TL502",)) == []


def test_a_changed_loop_re_checks_the_class_it_trains(tmp_path):
    write_tree(tmp_path, {"agent.py": AGENT.format(device=CUDA_WHEN_AVAILABLE), "run.py": RUN.format(body=EVERY_STEP)})
    assert _check(tmp_path, "agent.py", cache=True) == ["agent.py:10 TL502", "agent.py:23 TL101"]
    write_tree(tmp_path, {"run.py": RUN.format(body="    learner.update(torch.randn(4, 8))")})
    assert _check(tmp_path, "agent.py", cache=True) == []


def _index(text: str) -> AstIndex:
    return AstIndex(ast.parse(text), text)


def test_the_summaries():
    summary = step_summary(_index(AGENT.format(device=CUDA_WHEN_AVAILABLE)))
    assert summary == {"classes": {"Learner": {"steps": ["update"], "cuda": [9, "self.net = nn.Linear(width, width).to(device)"]}},
                       "reduced": False}
    assert step_summary(_index(DIST)) == {"devices": ["dev"]}
    uses = uses_summary(_index(RUN.format(body=EVERY_STEP + "\n        if step % 10 == 0:\n            learner.report(batch)")))
    # (each method entry ends with where its value goes there: `result_uses`, `[]` for a dropped value)
    assert uses == {"loops": [[7, False, [["agent", 0, "Learner", "update", []]]]],
                    # (each run of an imported name, and whether every one is once per run: the class is built
                    # once in `main()`, its methods run in the loop)
                    "once": [["agent", 0, "Learner", "", True], ["agent", 0, "Learner", "update", False],
                             ["agent", 0, "Learner", "report", False]]}


# --- a training loop in a function of another file (issue 24, recall): `main.py`'s epoch loop calls
# `run_epoch(...)` of `epochs.py`, which runs the batch loop; or its loop calls `fit_batch(...)`, one step

EPOCHS = """\
import torch


def run_epoch(net, batches, opt, device):
    net.train()
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(net(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()


def fit_batch(net, x, y, opt):
    loss = (net(x) - y).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def score(net, batches, device):
    with torch.no_grad():
        return sum(float(net(x.to(device)).mean()) for x, _ in batches)
"""

MAIN = """\
import torch
from epochs import run_epoch, fit_batch, score


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    net = torch.nn.Linear(8, 8).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, 5)
    batches = [(torch.randn(4, 8), torch.randn(4, 8))]
{body}
    sched.step()


if __name__ == "__main__":
    main()
"""


def test_an_epoch_loop_that_calls_another_files_training_loop(tmp_path):
    # (a file that says neither `backward` nor `step` reads no other file's steps: `sched.step()` here)
    body = "    for epoch in range(10):\n        run_epoch(net, batches, opt, device)"
    write_tree(tmp_path, {"epochs.py": EPOCHS, "main.py": MAIN.format(body=body)})
    # the optimizer built here is stepped there, and the script trains on CUDA
    assert _check(tmp_path, "main.py") == ["main.py:16 TL702", "main.py:8 TL502"]


def test_a_step_function_of_another_file_called_every_iteration(tmp_path):
    body = "    for x, y in batches * 100:\n        fit_batch(net, x.to(device), y.to(device), opt)"
    write_tree(tmp_path, {"epochs.py": EPOCHS, "main.py": MAIN.format(body=body)})
    assert _check(tmp_path, "main.py") == ["main.py:16 TL702", "main.py:8 TL502"]


def test_another_files_function_that_does_not_train_or_runs_outside_a_loop(tmp_path):
    # an evaluation function every epoch; a training function called once, outside any loop of this file
    # (silent: the model follows calls in loops), and a file whose own functions train in reduced precision
    evaluating = "    for epoch in range(10):\n        print(score(net, batches, device))"
    write_tree(tmp_path, {"epochs.py": EPOCHS, "main.py": MAIN.format(body=evaluating)})
    assert _check(tmp_path, "main.py") == []
    write_tree(tmp_path, {"main.py": MAIN.format(body="    run_epoch(net, batches, opt, device)")})
    assert _check(tmp_path, "main.py") == []
    reduced = EPOCHS.replace("        loss = torch", "        with torch.autocast('cuda'):\n            loss = torch")
    body = "    for epoch in range(10):\n        run_epoch(net, batches, opt, device)"
    write_tree(tmp_path, {"epochs.py": reduced, "main.py": MAIN.format(body=body)})
    assert _check(tmp_path, "main.py", select=("TL702",)) == []


AGENT_EPOCHS = """\
import torch
import torch.nn as nn

device = torch.device("cpu")
if torch.cuda.is_available():
    device = torch.device({device})


class Agent:
    def __init__(self):
        self.net = nn.Linear(4, 2).to(device)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=3e-4)
        self.memory = []

    def act(self, state):
        with torch.no_grad():
            return self.net(torch.as_tensor(state, device=device)).argmax().item()

    def learn(self):
        states = torch.tensor(self.memory, device=device)
        for _ in range(4):
            loss = self.net(states).pow(2).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
        self.memory.clear()
"""

PLAY = """\
import torch
from agent import Agent


def play(steps):
    agent = Agent()
    for t in range(1, steps + 1):
        agent.memory.append([0.0] * 4)
        agent.act([0.0] * 4)
        if t % 200 == 0:
            agent.learn()


if __name__ == "__main__":
    play(10000)
"""


def test_a_method_of_another_file_that_loops_over_its_own_epochs(tmp_path):
    # `learn()` runs its own loop of steps (every 200 moves): the script trains, on CUDA when available
    # (the device is bound twice in agent.py, once to CUDA under `torch.cuda.is_available()`)
    write_tree(tmp_path, {"agent.py": AGENT_EPOCHS.format(device='"cuda:0"'), "play.py": PLAY})
    assert _check(tmp_path, "play.py") == ["play.py:14 TL702"]
    [script] = _messages(tmp_path, "play.py", "TL702")
    assert "(`self.net = nn.Linear(4, 2).to(device)` in `agent.py:11`)" in script
    assert _check(tmp_path, "agent.py") == ["agent.py:12 TL502"]
    # bound twice, both times to the CPU: no CUDA
    write_tree(tmp_path, {"agent.py": AGENT_EPOCHS.format(device='"cpu"')})
    assert _check(tmp_path, "play.py") == []


def test_the_summaries_of_training_functions_and_methods():
    # (and the methods run_epoch calls on its parameters in its loop, for a file that hands it an object)
    assert step_summary(_index(EPOCHS)) == {"functions": {"run_epoch": "trains", "fit_batch": "steps"},
                                            "reduced": False,
                                            "loop_methods": {"run_epoch": [[2, "zero_grad", 6], [2, "step", 6]]}}
    summary = step_summary(_index(AGENT_EPOCHS.format(device='"cuda:0"')))
    assert summary == {"classes": {"Agent": {"steps": [], "trains": ["learn"],
                                             "cuda": [11, "self.net = nn.Linear(4, 2).to(device)"]}},
                       "reduced": False}


# --- a helper function of another file that a step loop calls every iteration (kenshohara's
# `calculate_accuracy` of utils.py, called by training.py's batch loop)

METRICS = """\
import torch


def hits(out, y):
    with torch.no_grad():
        right = out.argmax(1).eq(y).sum().item()
        return right / y.numel()


def spread(out):
    return out.std().item()
"""

FIT = """\
import torch
from metrics import hits, spread


def fit(net, batches, opt, meter):
    net.cuda()
    for step, (x, y) in enumerate(batches):
        out = net(x.cuda())
        loss = torch.nn.functional.cross_entropy(out, y.cuda())
        opt.zero_grad()
        loss.backward()
        opt.step()
{body}
"""


def test_a_helper_of_another_file_whose_value_the_step_only_records(tmp_path):
    body = ("        acc = hits(out, y.cuda())\n        meter.update(acc, len(y))\n"
            "        meter.update(spread(out))")
    write_tree(tmp_path, {"metrics.py": METRICS, "fit.py": FIT.format(body=body)})
    assert _check(tmp_path, "metrics.py", select=("TL101",)) == ["metrics.py:11 TL101", "metrics.py:6 TL101"]
    messages = _messages(tmp_path, "metrics.py", "TL101")
    assert all(m.endswith("runs every step: the training loop at fit.py:7 reaches it)") for m in messages)


def test_a_helper_of_another_file_whose_value_the_step_needs_or_sums(tmp_path):
    # a test on the value, a sum whose use is out of sight, and a call under a logging guard: silent
    body = ("        if hits(out, y.cuda()) > 0.99:\n            break\n"
            "        total = 0.0\n        total += spread(out)\n"
            "        if step % 100 == 0:\n            meter.update(hits(out, y.cuda()))")
    write_tree(tmp_path, {"metrics.py": METRICS, "fit.py": FIT.format(body=body)})
    assert _check(tmp_path, "metrics.py", select=("TL101",)) == []


def test_the_uses_summary_of_helper_calls():
    body = "        acc = hits(out, y)\n        meter.update(acc)\n        print(spread(out))"
    uses = uses_summary(_index(FIT.format(body=body)))
    # (`loss.backward()` is kept as the class-method entries are: `loss` is a call of an imported name)
    assert uses == {"loops": [[7, True, [["torch.nn.functional", 0, "cross_entropy", "backward", []],
                                         ["metrics", 0, "hits", "", [["arg", "meter.update"]]],
                                         ["metrics", 0, "spread", "", [["arg", "print"]]]]]],
                    # (`loss.backward()` is no run of a project name: `torch` is none)
                    "once": [["metrics", 0, "hits", "", False], ["metrics", 0, "spread", "", False]]}


# --- a device chosen by a flag and held on the instance, a tensor list trained, returned host values unpacked
# by the caller (pranz24/pytorch-soft-actor-critic's shape: `self.device = torch.device("cuda" if args.cuda
# else "cpu")` in the agent's `__init__`, `a, b = agent.learn(...)` in the script's loop, each only logged)

FLAGGED_AGENT = """\
import torch
import torch.nn as nn


class Critic:
    def __init__(self, args):
        self.device = {device}
        self.value = nn.Linear(6, 1).to(device=self.device)
        self.value_opt = torch.optim.Adam(self.value.parameters(), lr=1e-3)
        self.temperature = torch.ones(1, requires_grad=True{where})
        self.temperature_opt = torch.optim.Adam([self.temperature], lr=1e-3)

    def learn(self, states):
        states = states.to(self.device)
        loss = self.value(states).pow(2).mean()
        self.value_opt.zero_grad()
        loss.backward()
        self.value_opt.step()
        spread = (self.temperature * states).std()
        self.temperature_opt.zero_grad()
        spread.backward()
        self.temperature_opt.step()
        return loss.item(), spread.item()
"""

LEARN = """\
import argparse
import torch
from critic import Critic

parser = argparse.ArgumentParser()
parser.add_argument("--gpu", action="store_true")
args = parser.parse_args()
critic = Critic(args)
history = []
for step in range(10000):
{body}
"""

LOGGED = "    value_loss, spread = critic.learn(torch.randn(32, 6))\n    history.append(value_loss)\n    print(spread)"
FLAG = 'torch.device("cuda" if args.gpu else "cpu")'


def test_a_flag_chosen_device_on_the_instance_and_unpacked_logged_values(tmp_path):
    write_tree(tmp_path, {"critic.py": FLAGGED_AGENT.format(device=FLAG, where=", device=self.device"),
                     "learn.py": LEARN.format(body=LOGGED)})
    # both optimizers (the module's and the tensor list's), the returned reads, the script
    assert _check(tmp_path, "critic.py", "learn.py") == [
        "critic.py:11 TL502", "critic.py:23 TL101", "critic.py:9 TL502", "learn.py:10 TL702"]
    [script] = _messages(tmp_path, "learn.py", "TL702")
    assert "(`self.value = nn.Linear(6, 1).to(device=self.dev...` in `critic.py:8`)" in script
    [reads] = _messages(tmp_path, "critic.py", "TL101")
    assert reads.startswith("2 host-device syncs in one statement")
    assert reads.endswith("(`learn()` runs every step: the training loop at learn.py:10 reaches it)")


def test_a_device_the_instance_does_not_show_to_be_cuda(tmp_path):
    for device in ('torch.device("cpu")', "pick_device(args)", "args.device"):
        write_tree(tmp_path, {"critic.py": FLAGGED_AGENT.format(device=device, where=", device=self.device"),
                         "learn.py": LEARN.format(body=LOGGED)})
        assert _check(tmp_path, "critic.py", "learn.py", select=("TL502", "TL702")) == [], device
    # bound twice, once to a device the code does not show
    agent = FLAGGED_AGENT.format(device=FLAG, where=", device=self.device").replace(
        "    def learn(", "    def move(self, device):\n        self.device = device\n\n    def learn(")
    write_tree(tmp_path, {"critic.py": agent, "learn.py": LEARN.format(body=LOGGED)})
    assert _check(tmp_path, "critic.py", "learn.py", select=("TL502", "TL702")) == []


def test_a_tensor_list_made_without_a_device_is_not_on_cuda(tmp_path):
    write_tree(tmp_path, {"critic.py": FLAGGED_AGENT.format(device=FLAG, where=""), "learn.py": LEARN.format(body=LOGGED)})
    assert _check(tmp_path, "critic.py", select=("TL502",)) == ["critic.py:9 TL502"]


def test_returned_values_the_callers_need_or_do_not_unpack(tmp_path):
    # the loop tests the second value: only the first is a read the step waits for in vain
    body = "    value_loss, spread = critic.learn(torch.randn(32, 6))\n    print(value_loss)\n    if spread > 3:\n        break"
    write_tree(tmp_path, {"critic.py": FLAGGED_AGENT.format(device=FLAG, where=", device=self.device"),
                     "learn.py": LEARN.format(body=body)})
    [read] = _messages(tmp_path, "critic.py", "TL101")
    assert read.startswith("`loss.item()` waits for the GPU every training step")
    for body in (
            "    losses = critic.learn(torch.randn(32, 6))\n    history.append(losses)",
            "    value_loss, spread = critic.learn(torch.randn(32, 6))\n    history.append(value_loss + spread)",
            "    value_loss, *rest = critic.learn(torch.randn(32, 6))\n    print(value_loss)"):
        write_tree(tmp_path, {"critic.py": FLAGGED_AGENT.format(device=FLAG, where=", device=self.device"),
                         "learn.py": LEARN.format(body=body)})
        assert _check(tmp_path, "critic.py", select=("TL101",)) == [], body


ACTOR = """\
import torch
import torch.nn as nn


class ActorLearner:
    def __init__(self, net, lr):
        self.net = net
        self.optimizer = torch.optim.RMSprop(net.parameters(), lr=lr)

    def update(self, batch):
        out = self.net(batch)
        policy_loss = out[:, 0].mean()
        value_loss = out[:, 1].pow(2).mean()
        self.optimizer.zero_grad()
        (policy_loss + value_loss).backward()
        self.optimizer.step()
        return policy_loss.item(), value_loss.item()
"""

DRIVER = """\
import torch
import torch.nn as nn
from {package} import algos


def main():
    net = nn.Linear(6, 2).cuda()
    learner = algos.ActorLearner(net, lr=7e-4)
    for update in range(10000):
        batch = torch.randn(16, 6, device="cuda")
        policy_loss, value_loss = learner.update(batch)
        if update % 100 == 0:
            print("update {{}} policy {{:.3f}} value {{:.3f}}".format(update, policy_loss, value_loss))
{more}

if __name__ == "__main__":
    main()
"""


def test_a_method_of_a_class_re_exported_by_a_package_and_its_values_only_formatted(tmp_path):
    write_tree(tmp_path, {"rl/__init__.py": "", "rl/algos/__init__.py": "from .actor import ActorLearner\n",
                     "rl/algos/actor.py": ACTOR, "main.py": DRIVER.format(package="rl", more="")})
    assert _check(tmp_path, "rl/algos/actor.py", select=("TL101",)) == ["actor.py:17 TL101"]
    [read] = _messages(tmp_path, "rl/algos/actor.py", "TL101")
    assert read.endswith("(`update()` runs every step: the training loop at main.py:9 reaches it)")


def test_a_re_exported_name_of_another_file_or_a_formatted_value_the_loop_also_tests(tmp_path):
    # the package's ActorLearner is another file's class: the loop never runs this one
    write_tree(tmp_path, {"rl/__init__.py": "", "rl/algos/__init__.py": "from .other import ActorLearner\n",
                     "rl/algos/other.py": ACTOR, "rl/algos/actor.py": ACTOR,
                     "main.py": DRIVER.format(package="rl", more="")})
    assert _check(tmp_path, "rl/algos/actor.py", select=("TL101",)) == []
    assert _check(tmp_path, "rl/algos/other.py", select=("TL101",)) == ["other.py:17 TL101"]
    # formatted, and also tested: the step needs that number
    write_tree(tmp_path, {"rl/algos/__init__.py": "from .actor import ActorLearner\n",
                     "main.py": DRIVER.format(package="rl", more="        if value_loss < 1e-4:\n            break\n")})
    assert _check(tmp_path, "rl/algos/actor.py", select=("TL101",)) == []


LEARNER = """\
import torch


class Learner:
    def __init__(self, policy, epochs, lr=3e-4):
        self.policy = policy
        self.epochs = epochs
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=lr)

    def update(self, batches):
        for _ in range(self.epochs):
            for batch in batches:
                loss = self.policy(batch).pow(2).mean()
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
"""

OWNER = """\
import torch
import torch.nn as nn
from learner import Learner


def main(cuda):
    device = torch.device("cuda:0" if cuda else "cpu")
    policy = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 2))
    policy.to(device)
{build}
    for update in range(100):
        batches = [torch.randn(32, 4, device=device) for _ in range(4)]
        learner.update(batches)


if __name__ == "__main__":
    main(torch.cuda.is_available())
"""


def test_an_optimizer_over_a_module_the_caller_moved_to_cuda(tmp_path):
    write_tree(tmp_path, {"learner.py": LEARNER, "owner.py": OWNER.format(build="    learner = Learner(policy, 4)")})
    assert _check(tmp_path, "learner.py", select=("TL502",)) == ["learner.py:8 TL502"]
    [message] = _messages(tmp_path, "learner.py", "TL502")
    assert message.endswith("(`policy` is a module moved to CUDA at owner.py:9 before `Learner(...)` gets it)")
    # by keyword, and through `self.policy`
    write_tree(tmp_path, {"learner.py": LEARNER.replace("Adam(policy.", "Adam(self.policy."),
                     "owner.py": OWNER.format(build="    learner = Learner(epochs=4, policy=policy)")})
    assert _check(tmp_path, "learner.py", select=("TL502",)) == ["learner.py:8 TL502"]


def test_an_optimizer_over_a_module_some_caller_leaves_on_the_cpu(tmp_path):
    # a second build hands it a module never moved
    both = "    learner = Learner(policy, 4)\n    reference = Learner(nn.Linear(4, 2), 1)"
    write_tree(tmp_path, {"learner.py": LEARNER, "owner.py": OWNER.format(build=both)})
    assert _check(tmp_path, "learner.py", select=("TL502",)) == []
    # moved to a device the code does not show to be CUDA
    write_tree(tmp_path, {"learner.py": LEARNER, "owner.py": OWNER.format(build="    learner = Learner(policy, 4)").replace(
        'torch.device("cuda:0" if cuda else "cpu")', "torch.device(args.device)")})
    assert _check(tmp_path, "learner.py", select=("TL502",)) == []
    # the class replaces the module it was given
    write_tree(tmp_path, {"learner.py": LEARNER.replace("        self.policy = policy\n",
                                                   "        policy = policy.cpu()\n        self.policy = policy\n"),
                     "owner.py": OWNER.format(build="    learner = Learner(policy, 4)")})
    assert _check(tmp_path, "learner.py", select=("TL502",)) == []


TIMING = """\
import torch


def gpu_timed(closure, enabled=True):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    result = closure()
    end.record()
    return result, start, end


def keep(closure):
    hooks.append(closure)
    return closure


def layer_norms(named):
    found = {}
    for name, weight in named:
        if weight.grad is not None:
            found[name] = float(torch.norm(weight.grad))
    return found


hooks = []
"""

PRETRAIN = """\
import torch
import torch.nn as nn
from utils.timing import gpu_timed, keep, layer_norms


def main():
    encoder = nn.Linear(16, 16).cuda()
    optimizer = torch.optim.AdamW(encoder.parameters(), lr=1e-4, fused=True)
    for itr in range(1000):
        batch = torch.randn(8, 16, device="cuda")

        def train_step():
            loss = encoder(batch).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            stats = layer_norms(encoder.named_parameters())
            return loss.detach(), stats

        (loss, stats), _ = {wrapper}(train_step)


if __name__ == "__main__":
    main()
"""


def test_a_step_closure_handed_to_another_files_wrapper_that_calls_it(tmp_path):
    write_tree(tmp_path, {"utils/__init__.py": "", "utils/timing.py": TIMING,
                     "pretrain.py": PRETRAIN.format(wrapper="gpu_timed")})
    assert _check(tmp_path, "utils/timing.py", select=("TL101",)) == ["timing.py:22 TL101"]
    [read] = _messages(tmp_path, "utils/timing.py", "TL101")
    assert read.endswith("(`layer_norms()` runs every step: the training loop at pretrain.py:9 reaches it)")


def test_a_step_closure_handed_to_a_wrapper_that_keeps_it(tmp_path):
    write_tree(tmp_path, {"utils/__init__.py": "", "utils/timing.py": TIMING,
                     "pretrain.py": PRETRAIN.format(wrapper="keep").replace("(loss, stats), _ = ", "")})
    assert _check(tmp_path, "utils/timing.py", select=("TL101",)) == []


def test_a_plain_float_call_makes_a_helper_file_reachable_a_float_method_does_not():
    from torchlint.facts.project import may_be_reached

    assert may_be_reached(b"import torch\n\ndef norm(p):\n    return float(torch.norm(p.grad))\n")
    assert not may_be_reached(b"import torch\n\ndef cast(x):\n    return x.float() + to_float(x)\n")


RUNNING_TOTAL = FIT.replace("    net.cuda()\n", "    net.cuda()\n    total = 0.0\n") + "    return total / len(batches)\n"


def test_a_helper_of_another_file_summed_into_a_running_total_the_loop_reads_nowhere_else(tmp_path):
    write_tree(tmp_path, {"metrics.py": METRICS, "fit.py": RUNNING_TOTAL.format(body="        total += spread(out)")})
    assert _check(tmp_path, "metrics.py", select=("TL101",)) == ["metrics.py:11 TL101"]
    # the loop also tests the running value: the sum is needed on the host there
    body = "        total += spread(out)\n        if total > 10:\n            break"
    write_tree(tmp_path, {"fit.py": RUNNING_TOTAL.format(body=body)})
    assert _check(tmp_path, "metrics.py", select=("TL101",)) == []


def test_a_helper_taken_by_the_one_star_import_of_a_project_module(tmp_path):
    star = FIT.replace("from metrics import hits, spread", "from metrics import *")
    write_tree(tmp_path, {"metrics.py": METRICS, "fit.py": star.format(body="        meter.update(spread(out))")})
    assert _check(tmp_path, "metrics.py", select=("TL101",)) == ["metrics.py:11 TL101"]
    # two star imports: which module a name comes from is not in the file, so nothing is guessed
    two = FIT.replace("from metrics import hits, spread", "from metrics import *\nfrom helpers import *")
    assert _runs_spread(two) is False
    # a name the file binds itself is its own, whatever the star import holds
    own = star.replace("def fit(", "def spread(out):\n    return out\n\n\ndef fit(")
    assert _runs_spread(own) is False
    assert _runs_spread(star) is True


def _runs_spread(fit: str) -> bool:
    uses = uses_summary(_index(fit.format(body="        meter.update(spread(out))")))
    return any(entry[2] == "spread" for _, _, calls in uses.get("loops", ()) for entry in calls)


# A tutorial's helper module that trains (`fc_model.train(model, loader, ...)`) and names no device: where every
# file that imports it, notebooks included, and what those import, names no GPU either, it runs on the CPU.
HELPER = """\
import torch


def train(model, loader, optimizer, criterion):
    running = 0.0
    for images, labels in loader:
        optimizer.zero_grad()
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()
        running += loss.item()
    return running
"""


def _notebook(*cells: str) -> str:
    import json

    return json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                                  "source": cell} for cell in cells],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def test_a_helper_module_that_only_cpu_notebooks_and_scripts_import_runs_on_the_cpu(tmp_path):
    cpu = _notebook("import torch\nimport fc_model\nfrom data import loader", "fc_model.train(net, loader, opt, f)")
    write_tree(tmp_path, {"fc_model.py": HELPER, "lesson.ipynb": cpu, "data.py": "loader = []\n",
                          "script.py": "import fc_model\nif __name__ == '__main__':\n    fc_model.train(None, [], None, None)\n"})
    assert _check(tmp_path, "fc_model.py", select=("TL101",)) == []
    # one importer that names CUDA, or a project module an importer takes from that does: the GPU may be used
    # and an importer that is a module of its own, whose callers are out of sight
    for case, changed in enumerate(({"lesson.ipynb": cpu.replace("import torch", "import torch\\nnet = net.cuda()")},
                    {"data.py": "import torch\nloader = [torch.ones(2, device='cuda')]\n"},
                    {"loops.py": "import fc_model\n\n\ndef run(net, loader):\n    fc_model.train(net, loader, None, None)\n"})):
        root = tmp_path / f"case{case}"  # (a project's imports are read once per process)
        write_tree(root, {"fc_model.py": HELPER, "lesson.ipynb": cpu, "data.py": "loader = []\n", **changed})
        assert _check(root, "fc_model.py", select=("TL101",)) == ["fc_model.py:11 TL101"], changed
    # no importer in sight: its callers' device is unknown, so the module is judged as before
    write_tree(tmp_path / "alone", {"fc_model.py": HELPER})
    assert _check(tmp_path / "alone", "fc_model.py", select=("TL101",)) == ["fc_model.py:11 TL101"]


# An optimizer factory of a helper file (`util.set_optimizer(opt, model)`) that the training scripts call with a
# model a def of theirs moves to CUDA when one is available (`model, criterion = set_model(opt)`).
UTIL = """\
import torch.optim as optim


def set_optimizer(opt, model):
    optimizer = optim.SGD(model.parameters(), lr=opt.lr, momentum=0.9)
    return optimizer
"""

SCRIPT = """\
import torch
from util import set_optimizer


def set_model(opt):
    model = torch.nn.Linear(8, 2)
    criterion = torch.nn.CrossEntropyLoss()
    if torch.cuda.is_available():
        model = model.cuda()
    return model, criterion


def main(opt, loader):
    model, criterion = {build}
    optimizer = set_optimizer(opt, model)
    for x, y in loader:
        loss = criterion(model(x.cuda()), y.cuda())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main(None, [])
"""


def test_an_optimizer_factory_of_a_helper_file_called_with_a_model_moved_to_cuda(tmp_path):
    write_tree(tmp_path, {"util.py": UTIL, "main.py": SCRIPT.format(build="set_model(opt)")})
    assert _check(tmp_path, "util.py", select=("TL502",)) == ["util.py:5 TL502"]
    [message] = _messages(tmp_path, "util.py", "TL502")
    assert message.endswith("(`model` is a module moved to CUDA at main.py:9 before `set_optimizer(...)` gets it)")
    # a model no def of the caller's moves (built in place, never moved): silent
    root = tmp_path / "cpu"
    write_tree(root, {"util.py": UTIL, "main.py": SCRIPT.format(build="torch.nn.Linear(8, 2), None")})
    assert _check(root, "util.py", select=("TL502",)) == []


HANDED_AGENT_LOOP = """\
def train_agent(env, agent, episodes):
    for episode in range(episodes):
        state = env.reset()
        for step in range(200):
            action = agent.act(state)
            state, reward, done = env.step(action)
            agent.{method}(state, reward)
"""

HANDED_AGENT_MAIN = """\
import torch
import torch.nn as nn
import loop_utils

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Agent:
    def __init__(self):
        self.net = nn.Linear(4, 2).to(device)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-3)

    def act(self, state):
        return self.net(torch.as_tensor(state, device=device)).argmax().item()

    def update(self, state, reward):
        loss = self.net(torch.as_tensor(state, device=device)).sum() * reward
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        print(loss.item())


if __name__ == "__main__":
    loop_utils.train_agent(make_env(), Agent(), 100)
"""


def test_an_object_handed_to_another_files_loop_that_runs_its_stepping_method(tmp_path):
    """An RL tutorial's agent, built here and handed to a helper of another file whose episode loop calls
    `agent.update(...)` (`rl_utils.train_off_policy_agent(env, agent, ...)`): `update` steps, so that loop is
    its training loop, named by file and line; a helper that only calls `agent.act(...)` trains nothing."""
    write_tree(tmp_path, {"loop_utils.py": HANDED_AGENT_LOOP.format(method="update"), "main.py": HANDED_AGENT_MAIN})
    assert _check(tmp_path, "main.py") == ["main.py:11 TL502", "main.py:21 TL101"]
    assert all("loop_utils.py:4" in message for message in _messages(tmp_path, "main.py", "TL502"))
    write_tree(tmp_path, {"loop_utils.py": HANDED_AGENT_LOOP.format(method="act")})
    assert _check(tmp_path, "main.py") == []


def test_a_handed_agent_whose_modules_go_to_the_device_its_builder_passes(tmp_path):
    """The agent's `__init__` moves its networks to a `device` parameter, and every build of the class passes a
    CUDA-when-available device (bound twice, as two cells of a notebook do): its optimizers train on CUDA."""
    main = HANDED_AGENT_MAIN.replace("    def __init__(self):\n        self.net = nn.Linear(4, 2).to(device)",
                                     "    def __init__(self, where):\n        self.net = nn.Linear(4, 2).to(where)")
    main = main.replace("Agent(), 100)", "Agent(device), 100)").replace(
        'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n',
        'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n'
        'device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")\n')
    write_tree(tmp_path, {"loop_utils.py": HANDED_AGENT_LOOP.format(method="update"), "main.py": main})
    assert [line for line in _check(tmp_path, "main.py", select=("TL502",))] == ["main.py:12 TL502"]
    write_tree(tmp_path, {"main.py": main.replace("Agent(device), 100)", 'Agent("cpu"), 100)')})
    assert _check(tmp_path, "main.py", select=("TL502",)) == []
