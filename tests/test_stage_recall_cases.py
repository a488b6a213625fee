"""Spellings once hidden by a cheap stage: with every rule on, the pipeline (text and ast stages, then LibCST)
reports exactly what every rule reports on the LibCST tree with no stage. One case per stage bug, each found
by comparing both runs on rewritten sources (comments, line breaks, aliases, parentheses...)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from torchlint.config import Settings
from torchlint.engine import _run_rules, lint_source, parse
from torchlint.registry import all_rules

PATH = "train.py"

CASES = [
    # statement_end counted the `)` in the comment: the loop header looked complete at its first line and
    # TL501's text stage never saw `parameters()` in the iterable.
    pytest.param(
        "TL501",
        "import torch\n"
        "def sgd_step(model, lr):\n"
        "    for weight in (  # all of them :)\n"
        "            model.parameters()):\n"
        "        weight.add_(weight.grad, alpha=-lr)\n",
        id="statement_end-closing-bracket-in-comment",
    ),
    # The same with the bracket in a string.
    pytest.param(
        "TL501",
        "import torch\n"
        "def sgd_step(nets, lr):\n"
        "    for weight in nets.get(\":)\",\n"
        "                           nets).parameters():\n"
        "        weight.add_(weight.grad, alpha=-lr)\n",
        id="statement_end-closing-bracket-in-string",
    ),
    # TL501's literal gate looked for `aram` or `ARAM` only, while the check matches `param` in any case.
    pytest.param(
        "TL501",
        "import torch\n"
        "def sgd_step(netPArams, lr):\n"
        "    for weight in netPArams:\n"
        "        weight.add_(weight.grad, alpha=-lr)\n",
        id="TL501-mixed-case-param-name",
    ),
    # TL704's ast stage took only `def` methods for forward passes; `check` reads LibCST's FunctionDef,
    # which is `async def` too.
    pytest.param(
        "TL704",
        "import torch\n"
        "from torch import nn\n"
        "class Scale(nn.Module):\n"
        "    async def forward(self, x, w):\n"
        "        out = torch.empty_like(x)\n"
        "        for row in range(x.shape[0]):\n"
        "            out[row] = x[row] * w[row]\n"
        "        return out\n",
        id="TL704-async-forward",
    ),
    # TL704's ast stage took only `for` and `while` loops as training loops around the loop it reports;
    # LibCST's For, which `check` reads, is `async for` too.
    pytest.param(
        "TL704",
        "import torch\n"
        "async def train(model, opt, batches):\n"
        "    async for x, w in batches:\n"
        "        out = torch.empty_like(x)\n"
        "        for row in range(x.shape[0]):\n"
        "            out[row] = x[row] * w[row]\n"
        "        out.sum().backward()\n"
        "        opt.step()\n",
        id="TL704-async-for-training-loop",
    ),
    # loader_prefilter.may_train wanted a `for` loop: a loader read by `async for` only was ruled out.
    pytest.param(
        "TL401",
        "import torch\n"
        "from torch.utils.data import DataLoader\n"
        "async def train(model, opt, ds):\n"
        "    batches = DataLoader(ds, batch_size=32)\n"
        "    async for x, y in batches:\n"
        "        model(x).sum().backward()\n"
        "        opt.step()\n",
        id="loaders-async-for-training-loop",
    ),
    # TL704's text stage read the loop's lines by "\n" only: a file with old Mac line ends ("\r") was ruled out.
    pytest.param(
        "TL704",
        "import torch\r"
        "def train(model, opt, batches, weights):\r"
        "    for x, y in batches:\r"
        "        losses = model(x)\r"
        "        for i in range(losses.shape[0]):\r"
        "            losses[i] = losses[i] * weights[i]\r"
        "        losses.sum().backward()\r"
        "        opt.step()\r",
        id="TL704-carriage-return-line-ends",
    ),
    # call_with_text stopped at the first `)`: `True` after a nested call in the arguments was never seen.
    pytest.param(
        "TL602",
        "import os\n"
        "import torch\n"
        "torch.use_deterministic_algorithms(warn_only=bool(os.getenv('LAX')), mode=True)\n"
        "def train(model, opt, batches):\n"
        "    for x, y in batches:\n"
        "        model(x).sum().backward()\n"
        "        opt.step()\n",
        id="call_with_text-word-after-nested-call",
    ),
]


def _findings(diagnostics):
    return [(d.code, d.line, d.column, d.end_line, d.end_column, d.message, d.fix) for d in diagnostics]


@pytest.mark.parametrize("code,source", CASES)
def test_the_stages_hide_no_finding(code, source):
    rules = [rule() for rule in all_rules()]
    settings = replace(Settings(), select=("ALL",))
    _, _, unstaged = _run_rules(parse(source, PATH), source, PATH, rules, settings)
    assert code in {d.code for d in unstaged}, "the snippet must hold the finding the stage hid"
    staged = lint_source(source, PATH, rules, settings).diagnostics
    assert _findings(staged) == _findings(unstaged)
