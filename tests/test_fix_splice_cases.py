"""`fix` puts each changed statement in place in the text (`FixEdits.spliced`); it must give exactly what the
whole-module path gives (the module rendered with the fixes, carried back onto the source byte for byte),
compile, and leave nothing to fix a second time. Hand-written shapes that stress the splice: line endings,
indentation, statements on one line, nested and repeated statements, removed and added statements, imports,
and sources LibCST does not reproduce byte for byte.
"""

from __future__ import annotations

from typing import Dict

import libcst as cst
import pytest

from torchlint.fix.analysis import FileAnalysis
from torchlint.config import Settings
from torchlint.engine import fix_source
from torchlint.fix.edits import FixEdits
from torchlint.fix.fixer import FixApplier
from torchlint.fix.positions import reproduced_exactly
from torchlint.registry import get_rule

CODES = ("TL102", "TL104", "TL201", "TL202", "TL301", "TL501", "TL900")
RULES = [get_rule(code)() for code in CODES]
SETTINGS = Settings(select=CODES)

CASES: Dict[str, str] = {
    "decorator and loop": (
        "import torch\n\n\n"
        "def deco(x):\n    return lambda f: f\n\n\n"
        "@deco(torch.zeros(3).cuda())\n"
        "def step(model):\n"
        "    for p in model.parameters():\n"
        "        p.grad.zero_()\n"
    ),
    "if elif else headers": (
        "import torch\n\n\n"
        "def run(n):\n"
        "    if torch.zeros(n).cuda().sum() > 0:\n        return 1\n"
        "    elif torch.ones(n).cuda().sum() > 0:\n        return torch.ones(n).cuda()\n"
        "    else:\n        return torch.full((n,), 2.0).to('cuda')\n"
    ),
    "with items": (
        "import torch\n\n\n"
        "def run(model, n):\n"
        "    with torch.no_grad(), open(str(torch.zeros(n).cuda())) as fh:\n"
        "        for p in model.parameters():\n"
        "            p.grad.zero_()\n"
    ),
    "match cases": (
        "import torch\n\n\n"
        "def run(kind, n):\n"
        "    match kind:\n"
        "        case 'a':\n            return torch.zeros(n).cuda()\n"
        "        case _:\n            x = torch.ones(n).cuda(); return x\n"
    ),
    "nested match statements indented unevenly": (
        "import torch\n\n\n"
        "def run(k):\n"
        "    match torch.zeros(3).cuda():\n"
        "      case [a, b] if a > torch.ones(1).cuda():\n"
        "          x = torch.zeros(3).cuda()\n"
        "      case _:\n"
        "              match k:\n"
        "               case 1:\n"
        "                 y = torch.zeros(3).cuda()\n"
    ),
    "try, loop else and async blocks": (
        "import torch\n\n\n"
        "async def f(a, k):\n"
        "    try:\n        x = torch.zeros(3).cuda()\n"
        "    except ValueError:\n        x = torch.zeros(3).cuda()\n"
        "    finally:\n        z = torch.ones(3).cuda()\n"
        "    for i in range(k):\n        pass\n"
        "    else:\n        y = torch.zeros(3).cuda()\n"
        "    async with a:\n        w = torch.zeros(3).cuda()\n"
        "    return x\n"
    ),
    "class body and methods": (
        "import torch\nfrom torch import nn\n\n\n"
        "class Net(nn.Module):\n"
        "    buf = torch.zeros(3).cuda()\n\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.conv = nn.Conv2d(3, 8, 3)\n"
        "        self.bn = nn.BatchNorm2d(8)\n\n"
        "    def forward(self, x):\n        return self.bn(self.conv(x))\n"
    ),
    "nested functions, lambda, comprehensions": (
        "import torch\n\n\n"
        "def outer(model, n):\n"
        "    def inner():\n"
        "        f = lambda k: torch.zeros(k).cuda()\n"
        "        return [torch.ones(n).cuda() for _ in range(2)], f\n"
        "    for p in model.parameters():\n"
        "        p.grad.zero_()\n"
        "    return inner\n"
    ),
    "one-line compound statements and semicolons": (
        "import torch\n\n\n"
        "def zero(model, params):\n"
        "    for p in model.parameters(): p.grad.zero_()\n"
        "    if params: x = torch.zeros(3).cuda(); y = torch.ones(3).cuda()\n"
        "    a = 1; b = torch.zeros(2).cuda(); c = 3\n"
    ),
    "the same statement twice": (
        "import torch\n\n\n"
        "def a(model):\n    for p in model.parameters():\n        p.grad.zero_()\n\n\n"
        "def b(model):\n    for p in model.parameters():\n        p.grad.zero_()\n\n\n"
        "class C:\n"
        "    def a(model):\n        for p in model.parameters():\n            p.grad.zero_()\n"
    ),
    "repeated statements: the enclosing ones render the fixes together": (
        "import torch\n\n\n"
        "def f(k):\n"
        "    if k:\n"
        "        x = torch.zeros(3).cuda()\n"
        "        y = torch.ones(3).cuda()\n"
        "    x = torch.zeros(3).cuda()\n"
        "    for _ in range(k):\n"
        "        x = torch.zeros(3).cuda()\n"
        "    return x\n"
    ),
    "a def repeated word for word: no statement around it is unique": (
        "import torch\n\n\n"
        "def zero(model):\n    for p in model.parameters():\n        p.grad.zero_()\n\n\n"
        "def zero(model):\n    for p in model.parameters():\n        p.grad.zero_()\n"
    ),
    "a statement repeated in a string, in a def repeated word for word": (
        "import torch\n\n\n"
        + "def make(n):\n    x = torch.zeros(n).cuda()\n    HELP = \"\"\"\n    x = torch.zeros(n).cuda()\n\"\"\"\n"
          "    x = torch.zeros(n).cuda()\n    return x, HELP\n\n\n" * 2
    ),
    "copies of one statement that overlap (a string holding the statement's first line)": (
        "import torch\n\n\n"
        + ("def make(n):\n" + "    y = torch.zeros(n).cuda(), \"\"\"\n" * 4 + "    return y\n\n\n") * 2
    ),
    "a removed statement and two fixes in one statement": (
        "import torch\n\n\n"
        "def train(model, batches):\n"
        "    for x, y in batches:\n"
        "        for p in model.parameters():\n"
        "            if p.grad is not None:\n"
        "                p.grad.detach_()\n"
        "                p.grad.zero_()\n"
        "        model(x).sum().backward()\n"
        "    return torch.zeros(2).cuda() + torch.ones(2).cuda()\n"
    ),
    "a loop turned into several statements": (
        "import torch\n\n\n"
        "def train(model, batches, lr=0.01):\n"
        "    for x, y in batches:\n"
        "        model(x).sum().backward()\n"
        "        with torch.no_grad():\n"
        "            for p in model.parameters():\n"
        "                p -= lr * p.grad\n"
    ),
    "module-level statements": (
        "import torch\n"
        "model = torch.nn.Linear(2, 2)\n"
        "for p in model.parameters():\n    p.grad.detach_()\n    p.grad.zero_()\n"
        "for p in model.parameters(): p.grad.zero_()\n"
        "x = torch.zeros(3).cuda(); y = torch.ones(3).cuda()\n"
    ),
    "a fix that adds an import": (
        "from torch import nn\n\n\n"
        "def evaluate(model, loader):\n"
        "    model.eval()\n"
        "    return sum(model(x).sum().item() for x, _ in loader)\n\n\n"
        "def train(model, loader, opt):\n"
        "    for x, y in loader:\n"
        "        opt.zero_grad()\n"
        "        model(x).sum().backward()\n"
        "        opt.step()\n"
        "    evaluate(model, loader)\n"
    ),
    "non-ASCII names, strings and comments": (
        "import torch\n\n\n"
        "def nullen(modèle, größe):\n"
        "    \"\"\"Gradienten löschen ☃\"\"\"\n"
        "    x = torch.zeros(größe).cuda()  # 漢字\n"
        "    for paramètre in modèle.parameters():\n"
        "        paramètre.grad.zero_()  # ünï\n"
        "    return 'ß' + str(x)\n"
    ),
    "noqa comments that suppress nothing": (
        "import torch\n"
        "x = torch.zeros(3)  # noqa: TL201\n\n\n"
        "def f():\n"
        "    y = 1  # noqa: TL501\n"
        "    return y  # noqa: TL999\n"
    ),
    "backslash continuations inside statements": (
        "import torch\n\n\n"
        "def f(n, model):\n"
        "    x = \\\n        torch.zeros(n).cuda()\n"
        "    for p in \\\n            model.parameters():\n"
        "        p.grad.zero_()\n"
        "    return x\n"
    ),
    "tabs, and a block indented differently": (
        "import torch\n\n\n"
        "def zero(model):\n"
        "\tfor p in model.parameters():\n"
        "\t\tp.grad.zero_()\n"
        "\tif model:\n"
        "\t  x = torch.zeros(3).cuda()\n"
    ),
    "form feeds (LibCST drops them)": (
        "import torch\n\n\n"
        "\fdef zero(model):\n"
        "    x = torch.zeros(3).cuda()\n"
        "\f\n"
        "    for p in model.parameters():\n"
        "        p.grad.zero_()\n"
        "    return x\n"
    ),
    # LibCST drops a line that holds only a continuation: the function's code then equals the example in
    # the string, which the splice took for it (it fixed the string; the next pass, the function)
    "a continuation-only line, and the code it hides in a string": (
        "import torch\n\n"
        "EXAMPLE = \"\"\"\n\n\n"
        "def zero(model):\n"
        "    model.eval()\n"
        "    for p in model.parameters():\n"
        "        p.grad.zero_()\n"
        "\"\"\"\n\n\n"
        "def zero(model):\n"
        "    model.eval()\n"
        "\\\n"
        "    for p in model.parameters():\n"
        "        p.grad.zero_()\n"
    ),
}

# How the source is written out: line endings, and whether the last line (a fixed statement in most cases)
# ends with a newline.
LAYOUTS = {
    "lf": lambda text: text,
    "crlf": lambda text: text.replace("\n", "\r\n"),
    "cr": lambda text: text.replace("\n", "\r"),
    "no final newline": lambda text: text.rstrip("\n"),
    "crlf, no final newline": lambda text: text.rstrip("\n").replace("\n", "\r\n"),
}


def _whole_module_fix(source: str, monkeypatch: pytest.MonkeyPatch):
    """`fix` the way it was: every pass renders the whole module, and the result is carried back."""
    with monkeypatch.context() as patch:
        patch.setattr(FixApplier, "fixed_text", lambda self, reports, text: (self.render(reports), None))
        return fix_source(source, "m.py", RULES, SETTINGS, unsafe=True)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", list(CASES))
def test_spliced_fixes_equal_the_whole_module_path(name, layout, monkeypatch):
    source = LAYOUTS[layout](CASES[name])
    fixed = fix_source(source, "m.py", RULES, SETTINGS, unsafe=True)
    old = _whole_module_fix(source, monkeypatch)
    assert fixed.source == old.source
    assert fixed.applied == old.applied
    assert [e.message for e in fixed.errors] == [e.message for e in old.errors]
    if layout != "cr":  # LibCST does not reproduce CR-only files: neither path can carry fixes back
        assert fixed.applied and not fixed.errors, [e.message for e in fixed.errors]
    compile(fixed.source, "m.py", "exec", dont_inherit=True)
    again = fix_source(fixed.source, "m.py", RULES, SETTINGS, unsafe=True)
    assert again.source == fixed.source and not again.applied


WHOLE_MODULE = {"a fix that adds an import", "form feeds (LibCST drops them)",
                "a continuation-only line, and the code it hides in a string"}


@pytest.mark.parametrize("layout", ["lf", "crlf"])
@pytest.mark.parametrize("name", list(CASES))
def test_only_imports_and_inexact_sources_render_the_whole_module(name, layout, monkeypatch):
    """Else the comparison above would hold trivially: every other case is put in place statement by statement."""
    rendered = []
    render = FixApplier.render
    monkeypatch.setattr(FixApplier, "render", lambda self, reports: rendered.append(reports) or render(self, reports))
    fix_source(LAYOUTS[layout](CASES[name]), "m.py", RULES, SETTINGS, unsafe=True)
    assert bool(rendered) == (name in WHOLE_MODULE)


def test_the_string_that_looks_like_a_hidden_function_is_left_alone():
    source = CASES["a continuation-only line, and the code it hides in a string"]
    fixed = fix_source(source, "m.py", RULES, SETTINGS, unsafe=True).source
    example = source[source.index('"""'):source.rindex('"""')]
    assert example in fixed  # the string is untouched
    assert fixed.count("p.grad = None") == 1 and fixed.endswith("\\\n    for p in model.parameters():\n"
                                                                "        p.grad = None\n")


def test_a_comment_ending_in_a_backslash_on_the_last_line(monkeypatch):
    """LibCST drops the file's final newline after such a comment, so the whole-module path could not carry
    the fix back and applied none; put in place, the statement keeps its newline and is fixed."""
    source = ("import torch\n\n\n"
              "def zero(model):\n"
              "    for p in model.parameters():\n"
              "        p.grad.zero_()  # see C:\\\n")
    fixed = fix_source(source, "m.py", RULES, SETTINGS, unsafe=True)
    assert fixed.source == source.replace("p.grad.zero_()", "p.grad = None") and not fixed.errors
    assert _whole_module_fix(source, monkeypatch).source == source  # the old path's refusal
    assert fix_source(fixed.source, "m.py", RULES, SETTINGS, unsafe=True).source == fixed.source


@pytest.mark.parametrize("source", [
    "x = 1\n\\\ny = 2\n",
    "def f():\n    x = 1\n    \\\n    y = 2\n",
    "x = 1\r\n\\\r\ny = 2\r\n",
], ids=["module level", "indented", "crlf"])
def test_a_line_holding_only_a_continuation_takes_the_whole_module_path(source):
    module = cst.parse_module(source)
    assert module.code != source  # LibCST keeps no trace of the line
    assert reproduced_exactly(module, source)  # positions still locate statements by their text here
    assert not FixEdits(module, FileAnalysis(module, source), "m.py", source).exact
    assert FixEdits(module, FileAnalysis(module, module.code), "m.py", module.code).exact
