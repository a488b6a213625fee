"""Code CPython's parser takes but its compiler refuses (issue 27, the fuzz report's m137): a TL000 with
CPython's message and place, never linted or fixed, as a syntax error is. The index's walk notes where such
code may be (``AstIndex.may_not_compile``); only those files are compiled (``engine.compile_problem``)."""

from __future__ import annotations

import ast
import json
import warnings

import pytest
from robustness_support import invoke, with_finding

from torchlint.facts.index import AstIndex
from test_robustness_parsing import check_text

# (what, code that `ast.parse` takes and `compile()` refuses, CPython's message)
REFUSED = [
    ("a keyword argument repeated (m137)", "f(a=1, a=2)", "keyword argument repeated: a"),
    ("a class keyword repeated", "class C(metaclass=A, metaclass=B):\n    pass", "keyword argument repeated: metaclass"),
    ("return at module level", "return 1", "'return' outside function"),
    ("return in a class body in a def", "def f():\n    class C:\n        return 1", "'return' outside function"),
    ("return with a value in an async generator", "async def f():\n    yield 1\n    return 2",
     "'return' with value in async generator"),
    ("yield at module level", "yield 1", "'yield' outside function"),
    ("yield in a class body", "class C:\n    x = yield", "'yield' outside function"),
    ("yield in a def's default (the outer scope)", "def f(a=(yield)):\n    pass", "'yield' outside function"),
    ("yield in a module-level annotation", "x: (yield) = 1", "'yield' outside function"),
    ("yield in a comprehension", "def f():\n    return [(yield x) for x in y]", "'yield' inside list comprehension"),
    ("yield from in an async def", "async def f():\n    yield from x", "'yield from' inside async function"),
    ("yield in an annotation under `annotations`", "def f(x: (yield)):\n    pass",
     "'yield expression' can not be used within an annotation"),
    ("nonlocal at module level", "nonlocal x", "nonlocal declaration not allowed at module level"),
    ("nonlocal for an unbound name", "def f():\n    nonlocal x", "no binding for nonlocal 'x' found"),
    ("global of a parameter", "def f(x):\n    global x", "name 'x' is parameter and global"),
    ("global after an assignment", "def f():\n    x = 1\n    global x",
     "name 'x' is assigned to before global declaration"),
    ("duplicate parameters", "def f(a, a):\n    pass", "duplicate argument 'a' in function definition"),
    ("duplicate keyword-only parameter", "def f(a, *, a):\n    pass", "duplicate argument 'a' in function definition"),
    ("duplicate lambda parameters", "g = lambda a, a: 0", "duplicate argument 'a' in function definition"),
    ("await at module level", "await x", "'await' outside function"),
    ("await in a def", "def f():\n    await x", "'await' outside async function"),
    ("await in a lambda in an async def", "async def f():\n    return lambda: await x",
     "'await' outside async function"),
    ("await in a comprehension in a def", "def f():\n    return [await x for x in y]",
     "asynchronous comprehension outside of an asynchronous function"),
    ("async for in a def", "def f():\n    async for x in y:\n        pass", "'async for' outside async function"),
    ("async with in a def", "def f():\n    async with x:\n        pass", "'async with' outside async function"),
    ("break at module level", "break", "'break' outside loop"),
    ("continue at module level", "continue", "'continue' not properly in loop"),
    ("break in a loop's else", "for x in y:\n    pass\nelse:\n    break", "'break' outside loop"),
    ("break in a def in a loop", "for x in y:\n    def f():\n        break", "'break' outside loop"),
    ("break in a class in a loop", "while x:\n    class C:\n        break", "'break' outside loop"),
    ("assignment to __debug__", "__debug__ = 1", "cannot assign to __debug__"),
    ("a keyword named __debug__", "f(__debug__=1)", "cannot assign to __debug__"),
    ("deleting __debug__", "del __debug__", "cannot delete __debug__"),
    ("a starred target alone", "*a = 1", "starred assignment target must be in a list or tuple"),
    ("a starred value alone", "x = *a", "can't use starred expression here"),
    ("two starred targets", "*a, *b = c", "multiple starred expressions in assignment"),
    ("a starred expression statement", "*a", "can't use starred expression here"),
    ("a starred for target", "for *a in b:\n    pass", "starred assignment target must be in a list or tuple"),
    ("a bare except before the last", "try:\n    pass\nexcept:\n    pass\nexcept E:\n    pass",
     "default 'except:' must be last"),
    ("import * in a def", "def f():\n    from m import *", "import * only allowed at module level"),
    ("a late __future__ import", "x = 1\nfrom __future__ import division",
     "from __future__ imports must occur at the beginning of the file"),
    ("an unknown __future__ feature", "from __future__ import nope", "future feature nope is not defined"),
    ("a walrus in a comprehension's iterable", "[x for x in (y := [1])]",
     "assignment expression cannot be used in a comprehension iterable expression"),
    ("a walrus rebinding a comprehension variable", "[x := 1 for x in y]",
     "assignment expression cannot rebind comprehension iteration variable 'x'"),
    ("a walrus in a comprehension in a class", "class C:\n    [(z := x) for x in y]",
     "assignment expression within a comprehension cannot be used in a class body"),
    ("21 nested loops", "".join("    " * i + f"for x{i} in y:\n" for i in range(21)) + "    " * 21 + "pass",
     "too many statically nested blocks"),
]
if hasattr(ast, "Match"):
    REFUSED.append(("an irrefutable case before another", "match x:\n    case a:\n        pass\n    case 1:\n        pass",
                    "name capture 'a' makes remaining patterns unreachable"))
if hasattr(ast, "TryStar"):
    REFUSED.append(("break in except*", "for x in y:\n    try:\n        pass\n    except* E:\n        break",
                    "'break', 'continue' and 'return' cannot appear in an except* block"))

# Their neighbours that CPython compiles: the walk must not send these to the compiler (the common ones) or the
# compiler must take them (the rest); either way they are checked like any file.
COMPILED_UNTOLD = [  # never compiled: the walk tells they are fine
    "def f():\n    return 1",
    "def f():\n    for x in y:\n        if x:\n            break\n        continue\n    else:\n        return 2",
    "for x in y:\n    try:\n        pass\n    finally:\n        break",
    "def f():\n    yield 1\n    yield from g()",
    "g = lambda: (yield)",
    "async def f():\n    await x\n    async for a in b:\n        pass\n    async with c:\n        pass\n    yield 1",
    "f(a=1, b=2, **c, **d)",
    "def f(a, b, *c, d, **e):\n    pass",
    "class C(A, metaclass=M):\n    def f(self):\n        return [x for x in self]",
    "print(*a, *b)",
    "from __future__ import annotations\nimport torch as t",
    '"""doc"""\nfrom __future__ import division, annotations',
    "(y := 1)\nclass C:\n    z = (w := 2)",
]
COMPILED_TOLD = [  # may be compiled: the compiler takes them
    "async def f():\n    return [await x for x in y]",
    "x = [*a, *b]",
    "a, *b = c",
    "x[*a]",
    "def f():\n    global g\n    g = 1",
    "def f():\n    x = 1\n    def g():\n        nonlocal x\n        x = 2",
    "def f():\n    return (x async for x in y)",
    "x = 1 if __debug__ else 2",
]


def _cpython_error(source: str) -> SyntaxError:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ast.parse(source)  # the parser takes it
        with pytest.raises(SyntaxError) as error:
            compile(source, "t.py", "exec", dont_inherit=True)
    return error.value


def _source(what: str, code: str) -> str:
    """``code`` in a file with a finding; a leading docstring or `__future__` import stays first."""
    if "under `annotations`" in what:
        return "from __future__ import annotations\n" + with_finding(code)
    if code.startswith(("from __future__", '"""')):
        head, _, rest = code.rpartition("from __future__")
        first, _, tail = rest.partition("\n")
        return head + "from __future__" + first + "\n" + with_finding(tail)
    return with_finding(code)


@pytest.mark.parametrize("what, code, message", REFUSED, ids=[r[0] for r in REFUSED])
def test_what_the_compiler_refuses_is_one_tl000_at_cpythons_place(what, code, message):
    source = _source(what, code)
    error = _cpython_error(source)
    assert error.msg == message
    diagnostics = check_text(source)
    assert [(d.code, d.message, d.line, d.column) for d in diagnostics] == [
        ("TL000", f"syntax error: {message}", error.lineno, error.offset)]  # ASCII: the byte column is the character's


NEVER_FIXED = [r for r in REFUSED if r[0].startswith(("a keyword argument", "return at", "break at", "duplicate p"))]


@pytest.mark.parametrize("what, code, message", NEVER_FIXED, ids=[r[0] for r in NEVER_FIXED])
def test_what_the_compiler_refuses_is_never_fixed(tmp_path, monkeypatch, what, code, message):
    monkeypatch.chdir(tmp_path)
    data = with_finding(code).encode()
    (tmp_path / "bad.py").write_bytes(data)
    for args in (("fix", "--apply", "--unsafe-fixes"), ("check", "--output-format", "json")):
        result = invoke(*args, "--no-cache", "bad.py")
        assert f"syntax error: {message}" in result.output and "TL501" not in result.output, result.output
    assert (tmp_path / "bad.py").read_bytes() == data


def test_the_column_counts_characters_where_cpython_counts_bytes():
    source = with_finding('x = "éé"; f(a=1, a=2)')
    assert _cpython_error(source).offset == 20  # bytes, plus one
    assert [(d.line, d.column) for d in check_text(source)] == [(2, 18)]


@pytest.mark.parametrize("what, code, message", REFUSED, ids=[r[0] for r in REFUSED])
def test_the_walk_sends_every_refused_kind_to_the_compiler(what, code, message):
    source = _source(what, code)
    assert AstIndex(ast.parse(source), source).may_not_compile


@pytest.mark.parametrize("code", COMPILED_UNTOLD)
def test_the_walk_tells_common_valid_code_compiles_without_compiling_it(code):
    source = _source("", code)
    compile(source, "t.py", "exec", dont_inherit=True)
    assert not AstIndex(ast.parse(source), source).may_not_compile


@pytest.mark.parametrize("code", COMPILED_UNTOLD + COMPILED_TOLD)
def test_valid_neighbours_are_checked_as_usual(code):
    assert [d.code for d in check_text(_source("", code))] == ["TL501"]


def test_a_notebook_may_await_at_the_top_level(tmp_path, monkeypatch):
    """IPython runs a cell's top-level `await`; a .py file cannot."""
    monkeypatch.chdir(tmp_path)
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
            # (`p.cuda()`: a GPU notebook, TL501 is silent on the CPU)
            "source": "import torch\nawait asyncio.sleep(0)\n" + "opt = torch.optim.Adam(p.cuda(), foreach=False)\n"}
    (tmp_path / "nb.ipynb").write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4,
                                                   "nbformat_minor": 5}))
    (tmp_path / "t.py").write_text(cell["source"])
    out = invoke("check", "--no-cache", "nb.ipynb", "t.py").output
    assert "nb.ipynb:cell 1:3:" in out and "TL501" in out
    assert "t.py:2:1: TL000 syntax error: 'await' outside function" in out and "t.py:3" not in out
    # fix leaves the file alone and fixes the notebook
    invoke("fix", "--apply", "--no-cache", "nb.ipynb", "t.py")
    assert "foreach=False" in (tmp_path / "t.py").read_text()
    assert "foreach=False" not in "".join(json.loads((tmp_path / "nb.ipynb").read_text())["cells"][0]["source"])
