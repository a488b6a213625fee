"""TL704 python-loop-over-tensor-elements: where loops count, what the body may do, and the suggested form."""

import pytest

from fixture_support import lint
from torchlint.engine import lint_source
from torchlint.config import Settings
from torchlint.registry import get_rule

PRE = "import torch\nimport torch.nn.functional as F\n\nclass M(torch.nn.Module):\n    def forward(self, x, w, y):\n"


def _forward(body_lines, prelude="        out = torch.empty_like(x)\n"):
    return PRE + prelude + "".join(f"        {line}\n" for line in body_lines)


@pytest.mark.parametrize(
    "loop, suggestion",
    [
        (["for i in range(x.shape[0]):", "    out[i] = x[i] * w[i]"], "`out = x * w`"),
        (["for i in range(x.size(0)):", "    out[i] = F.relu(x[i, 2])"], "`out = F.relu(x[:, 2])`"),
        (["for i in range(x.shape[0]):", "    out[i] = x[i, y[i]]"], "`out = x[torch.arange(x.shape[0]), y]`"),
    ],
)
def test_suggested_whole_tensor_expression(loop, suggestion):
    [finding] = lint(_forward(loop), "TL704")
    assert suggestion in finding.message


def test_reductions_get_no_concrete_rewrite():
    [finding] = lint(_forward(["for i in range(x.shape[0]):", "    out[i] = x[i].sum()"]), "TL704")
    assert "`out = x.sum()`" not in finding.message and "dim=" in finding.message


@pytest.mark.parametrize(
    "loop",
    [
        ["for i in range(x.shape[0]):", "    out[i] = x[i].item()"],          # a sync, not tensor arithmetic
        ["for i in range(x.shape[0]):", "    out[i] = out[i - 1] + x[i]"],   # a recurrence
        ["for i in range(x.shape[0]):", "    out[y[i]] = x[i]"],             # a scatter
        ["for i in range(x.shape[0]):", "    out[i] = x[i] * out.mean()"],   # reads the tensor it fills
        ["for i in range(x.shape[0]):", "    t = x[i] * 2", "    out[i] = t + s", "    s = t"],  # carried name
        ["for i in range(x.shape[0]):", "    self.buf[i] = x[i]"],           # writes module state
        ["for i in range(w.shape[0]):", "    out[i] = x[i] * 2"],            # the bound is another tensor's
        ["for i in range(x.shape[0]):", "    out[i] = x[i] * 2", "else:", "    pass"],
    ],
)
def test_silent_where_the_loop_is_not_a_plain_map(loop):
    assert lint(_forward(loop), "TL704") == []


def test_len_bound_needs_a_tensor_being_filled():
    loop = ["for i in range(len(x)):", "    out[i] = x[i] * w[i]"]
    assert lint(_forward(loop, prelude="        out = list(x)\n"), "TL704") == []
    assert len(lint(_forward(loop, prelude="        out = torch.zeros_like(x)\n"), "TL704")) == 1


def test_only_in_forward_or_training_and_not_in_tests():
    source = "import torch\n\ndef prepare(x):\n    out = torch.empty_like(x)\n    for i in range(x.shape[0]):\n        out[i] = x[i] * 2\n    return out\n"
    assert lint(source, "TL704") == []
    forward = _forward(["for i in range(x.shape[0]):", "    out[i] = x[i] * 2"])
    settings = Settings(select=("TL704",))
    assert lint_source(forward, "tests/test_model.py", [get_rule("TL704")()], settings).diagnostics == []


_LOOP = "        out = torch.zeros_like(x)\n        for i in range(x.shape[0]):\n            out[i] = x[i] * 2\n"


@pytest.mark.parametrize(
    "source, lines",
    [
        # a model's forward: a method, `async def` too, and a def nested in a method (still the class's)
        ("import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n" + _LOOP, [5]),
        ("import torch\nclass M(torch.nn.Module):\n    async def forward(self, x):\n" + _LOOP, [5]),
        ("import torch\nclass M(torch.nn.Module):\n    def build(self, x):\n      def forward(x):\n" + _LOOP, [6]),
        ("import torch\nclass M(torch.nn.Module):\n    def build(self, x):\n" + _LOOP, []),
        ("import torch\ndef forward(x):\n" + _LOOP.replace("        ", "    "), []),  # no class: not a model's
        ("import torch\ndef training_step(x):\n" + _LOOP.replace("        ", "    "), [4]),
        # under a loop that runs a training step (`async for` too), however deep
        ("import torch\ndef train(data, opt):\n    for x in data:\n" + _LOOP + "        opt.step()\n", [5]),
        ("import torch\nasync def train(data, loss):\n    async for x in data:\n" + _LOOP + "        loss.backward()\n",
         [5]),
        ("import torch\nfor epoch in range(3):\n    for x in data:\n      if x:\n" + _LOOP + "    loss.backward()\n", [6]),
        ("import torch\ndef train(data, sched):\n    for x in data:\n" + _LOOP + "        sched.step()\n", []),
        # `async for` over the elements, and a body on the header's line, are no such loop
        ("import torch\nclass M(torch.nn.Module):\n    async def forward(self, x):\n"
         + _LOOP.replace("for i", "async for i"), []),
        ("import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n        out = torch.zeros_like(x)\n"
         "        for i in range(x.shape[0]): \\\n            out[i] = x[i] * 2\n", []),
    ],
)
def test_loops_count_in_a_forward_pass_or_a_training_step(source, lines):
    assert [d.line for d in lint(source, "TL704")] == lines


def test_the_text_gate_asks_for_the_range_a_length_and_a_context():
    rule = get_rule("TL704")
    source = _forward(["for i in range(x.shape[0]):", "    out[i] = x[i] * w[i]"])
    assert rule.may_fire(source, Settings()) and len(lint(source, "TL704")) == 1
    for word, other in [("range", "rang"), ("shape", "shap"), ("forward", "forwar")]:
        assert not rule.may_fire(source.replace(word, other), Settings()), word
    spaced = source.replace("x.shape[0]", "(\n            x  # rows\n            . shape[0])").replace("\n", "\r")
    assert rule.may_fire(spaced, Settings()) and len(lint(spaced, "TL704")) == 1


def test_messages_quote_the_code_as_written():
    loop = ["for i in range(  # rows", "        x . shape[0]):", "    (out)[i] = (torch.sigmoid(x[i])", "        * w[(i)])"]
    [finding] = lint(_forward(loop), "TL704")
    assert finding.message.startswith("Python loop `for i in range(  # rows\n        x . shape[0])` over")
    # as LibCST's code_for_node writes them: a line continued in brackets loses its statement's indentation
    assert "(`(out) = (torch.sigmoid(x)\n    * w)`, shapes permitting)" in finding.message
