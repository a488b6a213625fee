"""Objects of project classes that derive from no ``nn.Module`` (issue 24, TL202's precision): an environment
wrapper with its own ``train()``/``eval()``, a weight-averaging helper, defined in another file of the project
than the evaluation code that calls them. The project model holds each imported file's class summary
(``facts.modules.class_summary``: bases, methods, the ``train``/``eval`` methods that make calls), follows the
bases through the project's files (``ProjectModel.plain_class``), and TL202 takes no call on such an object for
a forward pass, nor its ``eval()`` for a switch of a model. A base from another package may be a Module: as
before."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import List

from torchlint.config import Settings
from torchlint.facts.modules import class_summary
from torchlint.facts.project import ProjectModel
from torchlint.run import runner
from project_tree import write_tree

PLAIN_ENV = """\
import torch


class Arena{bases}:
    def __init__(self, seed):
        self.seed = seed
        self.training = True

    def reset(self):
        return torch.zeros(4)

    def step(self, action):
        return self.advance(action), 0.0, True

    def advance(self, action):
        return torch.full((4,), float(action))

    def train(self):
        self.training = True

    def eval(self):
        self.training = False
"""

EVALUATION = """\
import torch

{imports}


def test(choose, episodes):
    arena = {built}(0)
    arena.eval()
    total = 0.0
    for _ in range(episodes):
        state, done = arena.reset(), False
        while not done:
            state, reward, done = arena.step(choose(state))
            total += reward
    return total
"""

SHADOW = """\
class WeightShadow(object):
    def __init__(self, decay=0.999):
        self.decay = decay
        self.shadow = {}

    def register(self, module):
        for name, param in module.named_parameters():
            self.shadow[name] = param.data.clone()

    def ema(self, module):
        for name, param in module.named_parameters():
            param.data.copy_(self.shadow[name])
"""

SAMPLER = """\
import torch

from models.shadow import WeightShadow


class Runner:
    def __init__(self, net, config):
        self.net = net
        self.config = config

    def sample(self, states):
        net = self.net
        if self.config.shadow:
            helper = WeightShadow()
            helper.register(net)
            helper.load_state_dict(states[-1])
            helper.ema(net)
        else:
            helper = None
        net.eval()
        return self.draw(net)

    def draw(self, net):
        with torch.no_grad():
            return net(torch.randn(2, 4))
"""


def _check(root: Path, name: str, cache: bool = False, select=("TL202",)) -> List[str]:
    job = runner.Job(Settings(select=select, root=root, project_root=root),
                     cache_dir=root / ".cache" if cache else None)
    return [f"{Path(d.path).name}:{d.line} {d.message}" for result in runner.run([root / name], job)
            for d in result.diagnostics]


def test_an_environment_of_another_file_is_no_model(tmp_path):
    write_tree(tmp_path, {"arena.py": PLAIN_ENV.format(bases=""),
                     "evaluate.py": EVALUATION.format(imports="from arena import Arena", built="Arena")})
    assert _check(tmp_path, "evaluate.py") == []
    assert _check(tmp_path, "evaluate.py", select=("ALL",)) == []


def test_imports_spelled_other_ways_and_a_package_that_re_exports_the_class(tmp_path):
    write_tree(tmp_path, {"envs/arena.py": PLAIN_ENV.format(bases="(object)"), "envs/__init__.py": "from .arena import Arena\n",
                     "a.py": EVALUATION.format(imports="import envs.arena", built="envs.arena.Arena"),
                     "b.py": EVALUATION.format(imports="from envs import Arena", built="Arena"),
                     "c.py": EVALUATION.format(imports="from envs import arena as worlds", built="worlds.Arena")})
    for name in ("a.py", "b.py", "c.py"):
        assert _check(tmp_path, name) == [], name


def test_bases_followed_through_other_project_files(tmp_path):
    write_tree(tmp_path, {"base.py": "import abc\n\n\nclass Recorder(abc.ABC):\n    def record(self, x):\n        return x\n",
                     "arena.py": "from base import Recorder\n" + PLAIN_ENV.format(bases="(Recorder)"),
                     "evaluate.py": EVALUATION.format(imports="from arena import Arena", built="Arena")})
    assert _check(tmp_path, "evaluate.py") == []


def test_a_helper_whose_method_is_named_like_a_model_is_no_model(tmp_path):
    write_tree(tmp_path, {"models/__init__.py": "", "models/shadow.py": SHADOW, "runners/sampler.py": SAMPLER})
    assert _check(tmp_path, "runners/sampler.py") == []


def test_a_class_that_derives_from_a_module_through_another_project_file_stays_flagged(tmp_path):
    write_tree(tmp_path, {"base.py": "import torch.nn as nn\n\n\nclass Body(nn.Module):\n    pass\n",
                     "arena.py": "from base import Body\n" + PLAIN_ENV.format(bases="(Body)"),
                     "evaluate.py": EVALUATION.format(imports="from arena import Arena", built="Arena")})
    assert _check(tmp_path, "evaluate.py") == [
        "evaluate.py:6 `test()` evaluates `arena.step(...)` with autograd on; decorate it with `@torch.no_grad()`"]


def test_a_base_from_another_package_or_out_of_sight_may_be_a_module(tmp_path):
    for base_file in ("from simkit import Wrapper\n", "from .missing import Wrapper\n", "Wrapper = object\n"):
        write_tree(tmp_path, {"arena.py": base_file + PLAIN_ENV.format(bases="(Wrapper)"),
                         "evaluate.py": EVALUATION.format(imports="from arena import Arena", built="Arena")})
        assert len(_check(tmp_path, "evaluate.py")) == 1, base_file


def test_an_agent_whose_eval_switches_its_network_stays_flagged(tmp_path):
    agent = PLAIN_ENV.format(bases="").replace("self.training = False", "self.net.eval()")
    write_tree(tmp_path, {"arena.py": agent,
                     "evaluate.py": EVALUATION.format(imports="from arena import Arena", built="Arena")})
    assert len(_check(tmp_path, "evaluate.py")) == 1


def test_a_change_of_a_base_in_a_third_file_rechecks_the_cached_evaluation(tmp_path):
    plain = "class Body:\n    pass\n"
    module = "import torch.nn as nn\n\n\nclass Body(nn.Module):\n    pass\n"
    write_tree(tmp_path, {"base.py": plain, "arena.py": "from base import Body\n" + PLAIN_ENV.format(bases="(Body)"),
                     "evaluate.py": EVALUATION.format(imports="from arena import Arena", built="Arena")})
    assert _check(tmp_path, "evaluate.py", cache=True) == []
    (tmp_path / "base.py").write_text(module)
    assert len(_check(tmp_path, "evaluate.py", cache=True)) == 1
    (tmp_path / "base.py").write_text(plain)
    assert _check(tmp_path, "evaluate.py", cache=True) == []


def test_the_class_summary_is_plain_data():
    text = ("import abc\nimport torch.nn as nn\nfrom .base import Plain\nfrom typing import Generic, TypeVar\n\n"
            "T = TypeVar('T')\n\n\n"
            "class A(object):\n    def eval(self):\n        self.training = False\n\n"
            "class B(A, Plain):\n    def train(self, mode=True):\n        self.net.train(mode)\n\n"
            "class C(nn.Module, abc.ABC, Generic[T]):\n    pass\n\n"
            "class D(make_base()):\n    pass\n")
    summary = class_summary(ast.parse(text))
    assert json.loads(json.dumps(summary)) == summary
    assert summary == {"classes": {
        "A": {"bases": [], "methods": ["eval"], "modal": []},
        "B": {"bases": ["A", ["base", 1, "Plain"]], "methods": ["train"], "modal": ["train"]},
        "C": {"bases": [["torch.nn", 0, "Module"], ["abc", 0, "ABC"], ["typing", 0, "Generic"]], "methods": [],
              "modal": []},
        "D": {"bases": ["?"], "methods": [], "modal": []}}}


def test_only_a_file_checked_with_tl202_reads_the_classes_of_the_files_it_imports():
    data = b"import torch\nfrom arena import Arena\n"
    assert ProjectModel.reads_classes(data, {"TL202"})
    assert not ProjectModel.reads_classes(data, {"TL101", "TL401"})
    assert not ProjectModel.reads_classes(b"import numpy\n", {"TL202"})
