"""TL301 bias-before-batchnorm: alias handling, formatting of the fix, and silence on near misses."""

import pytest

from fixture_support import fix, lint

HEADER = "import torch\nimport torch.nn as nn\n"


def _codes(source):
    return [(d.line, d.fix.value if d.fix else None) for d in lint(source, "TL301")]


def test_from_import_alias_and_torch_alias():
    source = (
        "import torch as t\n"
        "from torch.nn import Conv3d as C3, BatchNorm3d\n"
        "block = t.nn.Sequential(C3(1, 8, 3), BatchNorm3d(8))\n"
    )
    assert _codes(source) == [(3, "unsafe")]
    assert "C3(1, 8, 3, bias=False)" in fix(source, "TL301")


def test_unknown_root_is_not_ours():
    # `nn` is not imported from torch here: no finding
    assert _codes("import mylib as nn\nb = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))\n") == []


def test_positional_bias_true_becomes_false():
    source = HEADER + "b = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 0, 1, 1, True), nn.BatchNorm2d(8))\n"
    assert "nn.Conv2d(3, 8, 3, 1, 0, 1, 1, False)" in fix(source, "TL301")


def test_fix_is_unsafe_only():
    source = HEADER + "b = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8))\n"
    assert fix(source, "TL301", unsafe=False) == source
    assert "nn.Linear(4, 8, bias=False)" in fix(source, "TL301", unsafe=True)


def test_multiline_call_without_trailing_comma():
    source = HEADER + "b = nn.Sequential(\n    nn.Conv2d(3, 8,\n              3\n    ),\n    nn.BatchNorm2d(8),\n)\n"
    fixed = fix(source, "TL301")
    compile(fixed, "x", "exec")
    assert "3, bias=False\n    )," in fixed


def test_literal_counts_must_match_keyword_or_positional():
    ok = HEADER + "b = nn.Sequential(nn.Conv2d(3, out_channels=8, kernel_size=3), nn.BatchNorm2d(num_features=8))\n"
    other_axis = HEADER + "b = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(num_features=10))\n"
    assert _codes(ok) == [(3, "unsafe")]
    assert _codes(other_axis) == []


def test_lazy_layers_and_dimension_mismatch():
    assert _codes(HEADER + "b = nn.Sequential(nn.LazyConv2d(8, 3), nn.LazyBatchNorm2d())\n") == [(3, "unsafe")]
    assert _codes(HEADER + "b = nn.Sequential(nn.Conv1d(3, 8, 3), nn.BatchNorm2d(8))\n") == []


def test_return_form_in_forward():
    source = HEADER + (
        "class M(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.conv = nn.Conv2d(3, 8, 3)\n"
        "        self.bn = nn.BatchNorm2d(8)\n"
        "    def forward(self, x):\n"
        "        x = self.conv(x)\n"
        "        return self.bn(x)\n"
    )
    assert _codes(source) == [(6, "unsafe")]


def test_conv_output_reused_after_bn_is_silent():
    source = HEADER + (
        "class M(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.conv = nn.Conv2d(3, 8, 3)\n"
        "        self.bn = nn.BatchNorm2d(8)\n"
        "    def forward(self, x):\n"
        "        x = self.conv(x)\n"
        "        return self.bn(x) + x\n"
    )
    assert _codes(source) == []


def test_the_first_unguarded_bias_use_in_source_order_is_named():
    source = HEADER + (
        "def init(m):\n"
        "    nn.init.zeros_(m.bias) if m.bias is not None else None\n"  # guarded: not named
        "    nn.init.constant_(m.bias, 0.0)\n"
        "    m.bias.data.zero_()\n"
        "b = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))\n"
    )
    [finding] = lint(source, "TL301")
    assert "`nn.init.constant_(m.bias, 0.0)` reads a `.bias`" in finding.message and finding.fix is None


@pytest.mark.parametrize("signature, flagged", [
    ("c, bias=True", True),
    ("c, *, bias=True", True),  # keyword-only
    ("c, bias=False", False),
    ("c, bias", False),  # no default: the callers decide
    ("c, bias=None", False),
    ("c, bias=True, norm=True", True),
])
def test_a_bias_parameter_is_reported_only_for_its_default_true(signature, flagged):
    source = (
        "import torch.nn as nn\n"
        f"def block({signature}):\n"
        "    return nn.Sequential(nn.Conv2d(c, c, 3, bias=bias), nn.BatchNorm2d(c))\n"
    )
    found = lint(source, "TL301")
    assert bool(found) is flagged
    if flagged:
        assert "`bias=True` by default in `block`" in found[0].message
        assert fix(source, "TL301") == source  # report only: a new default would change every caller


def test_a_bias_parameter_rebound_in_its_def_is_silent():
    source = (
        "import torch.nn as nn\n"
        "class Block(nn.Module):\n"
        "    def __init__(self, c, bias=True):\n"
        "        super().__init__()\n"
        "        if c > 8:\n"
        "            bias = False\n"
        "        self.body = nn.Sequential(nn.Conv2d(c, c, 3, bias=bias), nn.BatchNorm2d(c))\n"
    )
    assert lint(source, "TL301") == []
    assert lint(source.replace("        if c > 8:\n            bias = False\n", ""), "TL301")


@pytest.mark.parametrize("use, flagged", [
    ("y = model(x)\n", False),  # only evaluated: silent
    ("model.cuda()\ny = model(x)\n", False),
    ("model.train()\n", True),  # trained after all
    ("opt = torch.optim.SGD(model.parameters(), lr=0.1)\n", True),
    ("fit(model)\n", True),  # handed on: what the callee does is out of sight
    ("gpu = model.cuda()\n", True),  # the same module under another name
])
def test_a_sequential_built_in_eval_mode_is_silent_only_where_nothing_trains_it(use, flagged):
    source = HEADER + "model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)).eval()\nx = torch.randn(1, 3, 8, 8)\n" + use
    assert bool(_codes(source)) is flagged
