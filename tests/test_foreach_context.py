"""TL501's rewrite: where the loop stands (rules/_foreach/context.py).

New names the lift writes avoid every name the module level uses. Those names are read off the index (the
rewrite may see LibCST's tree of just the loop's statements), and must be the ``Name`` nodes LibCST has
outside the file's defs and lambdas.
"""

from __future__ import annotations

import ast

import libcst as cst
import pytest

from fixture_support import FIXTURES

from torchlint.fix.analysis import iter_children
from torchlint.facts.index import AstIndex
from torchlint.rules._foreach.context import module_level_names


def libcst_module_level_names(source: str) -> set:
    names, stack = set(), [cst.parse_module(source)]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Name):
            names.add(node.value)
        elif isinstance(node, (cst.FunctionDef, cst.Lambda)):
            continue
        stack.extend(iter_children(node))
    return names


SHAPES = {
    "imports": "import a.b.c as d\nfrom x.y import z as w, v\nfrom . import q\nfrom .r import s\nfrom t import *\n",
    "class": "@dec(k=1)\nclass A(Base, metaclass=M):\n    x: int = f(y=2)\n    def m(self, p=D):\n        return p\n",
    "constants": "flag = True\nnothing = None\nif not False:\n    pass\n",
    "global": "def f():\n    global g\nglobal h\nh = 1\n",
    "except": "try:\n    pass\nexcept E as err:\n    raise Other from err\n",
    "match": "match v:\n    case Point(x=0, y=yy) as pt:\n        pass\n    case [first, *rest]:\n        pass\n    case {'k': kv, **others}:\n        pass\n    case _:\n        pass\n",
    "lambda": "key = lambda item, inner=outer: item.size\nvalues = [w.attr for w in ws if w]\n",
    "fstring": "msg = f'{loss.item():.3f} {step!r} {width:{fill}}'\n",
    "decorated def": "@register(name=n)\ndef g(a: T = default) -> R:\n    return a\n",
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_module_level_names_are_libcsts_on_each_shape(name):
    source = SHAPES[name]
    assert module_level_names(AstIndex(ast.parse(source), source)) == libcst_module_level_names(source)


@pytest.mark.parametrize("path", sorted(FIXTURES.rglob("*.py")), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_module_level_names_are_libcsts_on_every_fixture(path):
    source = path.read_text(encoding="utf-8")
    try:
        tree = ast.parse(source)
    except SyntaxError:
        pytest.skip("not valid Python")
    assert module_level_names(AstIndex(tree, source)) == libcst_module_level_names(source)
