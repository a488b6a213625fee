"""torchlint.facts.modules: which module a file applies right before another, and a module class's
``self.<attr>`` facts."""

from __future__ import annotations

import ast
import textwrap

import pytest

from torchlint.facts.index import AstIndex
from torchlint.facts.modules import applied_next, applied_to_output_of, class_attributes, classes_building, module_before

HEAD = "import collections\nimport torch.nn as nn\n"


def _index(source: str) -> AstIndex:
    source = HEAD + textwrap.dedent(source)
    return AstIndex(ast.parse(source), source)


def _before(source: str, name: str = "BatchNorm2d"):
    """What ``module_before`` answers for the first call of ``name``: the module's code and the guard's."""
    index = _index(source)
    found = module_before(index, index.calls_by_name[name][0].node)
    if found is None:
        return None
    return ast.unparse(found.module), ast.unparse(found.guard.test) if found.guard is not None else None


@pytest.mark.parametrize("source, expected", [
    ("b = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))\n", ("nn.Conv2d(3, 8, 3)", None)),
    ("b = nn.Sequential(conv, nn.BatchNorm2d(8))\n", ("conv", None)),
    ("b = nn.Sequential(collections.OrderedDict(conv=c, bn=nn.BatchNorm2d(8)))\n", ("c", None)),
    ("b = nn.Sequential(collections.OrderedDict([('conv', c), ('bn', nn.BatchNorm2d(8))]))\n", ("c", None)),
    ("layers = [c]\nlayers.append(nn.BatchNorm2d(8))\nb = nn.Sequential(*layers)\n", ("c", None)),
    ("layers = [c]\nif norm:\n    layers.append(nn.BatchNorm2d(8))\nb = nn.Sequential(*layers)\n", ("c", "norm")),
    ("layers = []\nlayers += [c, nn.BatchNorm2d(8)]\nb = nn.Sequential(*layers)\n", ("c", None)),
    ("s = nn.Sequential()\ns.add_module('c', c)\ns.add_module('bn', nn.BatchNorm2d(8))\n", ("c", None)),
    ("def block(n):\n    layers = [c]\n    layers.extend([nn.BatchNorm2d(n)])\n    return layers\n"
     "b = nn.Sequential(*block(8))\n", ("c", None)),
])
def test_the_module_right_before_is_found_in_each_form(source, expected):
    assert _before(source) == expected


@pytest.mark.parametrize("source", [
    "b = nn.Sequential(nn.BatchNorm2d(8), c)\n",  # first: nothing before it
    "b = nn.ModuleList([c, nn.BatchNorm2d(8)])\n",  # a list never applied in order
    "layers = [c]\nlayers.append(nn.BatchNorm2d(8))\n",  # never passed to nn.Sequential
    "layers = [c]\nif norm:\n    layers.append(nn.BatchNorm2d(8))\nelse:\n    pass\nb = nn.Sequential(*layers)\n",
    "layers = [c]\nif norm: layers.append(x); layers.append(nn.BatchNorm2d(8))\nb = nn.Sequential(*layers)\n",
    "b = x[c, nn.BatchNorm2d(8)]\n",  # subscript elements, no tuple
    "b = nn.Sequential(*[c], nn.BatchNorm2d(8))\n",
])
def test_no_module_right_before_where_the_file_does_not_show_one(source):
    assert _before(source) is None


FORWARD = """\
class Block(nn.Module):
    def __init__(self):
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        self.other = nn.Conv2d(8, 8, 1)
    def forward(self, x):
        y = self.bn(self.conv(x))
        x = self.other(x)
        x = self.bn(x)
        return self.conv.weight, y
"""


def test_forward_tells_which_module_feeds_which():
    index = _index(FORWARD)
    bn_direct, bn_after = [info.node for info in index.calls_by_name["bn"]]
    assert applied_to_output_of(index, bn_direct) == "conv"
    assert applied_to_output_of(index, bn_after) == "other"
    other = index.calls_by_name["other"][0].node
    assert applied_next(index, other) == [bn_after]
    conv = index.calls_by_name["conv"][0].node
    assert applied_next(index, conv) == [bn_direct]


def test_class_attributes_are_read_once_per_class():
    index = _index(FORWARD)
    klass = next(node for node in index.tree.body if isinstance(node, ast.ClassDef))
    facts = class_attributes(index, klass)
    assert class_attributes(index, klass) is facts
    assert sorted(facts.assigned) == ["bn", "conv", "other"]
    assert [len(facts.calls[name]) for name in ("bn", "conv", "other")] == [2, 1, 1]
    assert facts.attributes_read == {"conv": {"weight"}} and facts.other_uses == {"conv": 1}


def test_the_classes_building_layers_include_the_classes_that_use_them():
    source = textwrap.dedent("""
        import torch.nn as nn
        class Block(nn.Module):
            def __init__(self):
                self.conv = nn.Conv2d(3, 3, 3)
        class Net(nn.Module):
            def __init__(self):
                self.blocks = nn.Sequential(Block(), Block())
        class Head(nn.Module):
            def __init__(self):
                self.fc = nn.Linear(3, 3)
        model = Net()
    """)
    index = AstIndex(ast.parse(source), source)
    convs = [info.node for info in index.calls_by_name["Conv2d"]]
    assert classes_building(index, convs) == {"Block", "Net"}
    assert classes_building(index, []) == set()
