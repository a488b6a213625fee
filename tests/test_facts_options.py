"""facts.options: the default of the argparse option an attribute reads, where the file shows the namespace."""

from __future__ import annotations

import ast
import textwrap

import pytest

from torchlint.facts.index import index_of
from torchlint.facts.options import option_default

HEAD = "import argparse\nimport torch.multiprocessing as mp\n"


def _default(code: str):
    source = HEAD + textwrap.dedent(code)
    tree = ast.parse(source)
    index = index_of(tree, source)
    holder = next(info.node for info in index.calls if getattr(info.node.func, "id", None) == "use")
    found = option_default(index, holder.args[0], index.scope_of(holder))
    return found.value if found is not None else None


PARSER = "p = argparse.ArgumentParser()\np.add_argument('-j', '--workers', type=int, default=7)\n"


@pytest.mark.parametrize("code, expected", [
    (PARSER + "a = p.parse_args()\nuse(a.workers)\n", 7),
    # through a parameter of a function every call of which passes the namespace
    (PARSER + "def run(a):\n    use(a.workers)\nrun(p.parse_args())\n", 7),
    # through spawn, which passes the process index first
    (PARSER + "def run(i, a):\n    use(a.workers)\ndef main():\n    a = p.parse_args()\n"
     "    mp.spawn(run, args=(a,))\n    run(0, a)\n", 7),
    # dest= and groups
    ("p = argparse.ArgumentParser()\ng = p.add_argument_group('data')\n"
     "g.add_argument('-n', dest='workers', default=3)\na = p.parse_args()\nuse(a.workers)\n", 3),
    # reassigned somewhere in the file
    (PARSER + "a = p.parse_args()\na.workers = a.workers // 2\nuse(a.workers)\n", None),
    # set_defaults, subparsers
    (PARSER + "p.set_defaults(workers=0)\na = p.parse_args()\nuse(a.workers)\n", None),
    (PARSER + "p.add_subparsers()\na = p.parse_args()\nuse(a.workers)\n", None),
    # a function also handed elsewhere: its other callers are not in sight
    (PARSER + "def run(a):\n    use(a.workers)\nrun(p.parse_args())\nhooks.append(run)\n", None),
    # a parameter nobody here fills
    (PARSER + "def run(a):\n    use(a.workers)\n", None),
    # not a parser of argparse
    ("p = make_parser()\np.add_argument('--workers', default=7)\na = p.parse_args()\nuse(a.workers)\n", None),
    # an option of another parser that happens to have the same name, in another function: not this one's
    ("def other():\n    p = argparse.ArgumentParser()\n    p.add_argument('--workers', default=9)\n"
     "p = argparse.ArgumentParser()\na = p.parse_args()\nuse(a.workers)\n", None),
    # the options of a parser listed in `parents=`, also one a function of the file returns
    ("def base():\n    q = argparse.ArgumentParser(add_help=False)\n    q.add_argument('--workers', default=5)\n"
     "    return q\np = argparse.ArgumentParser(parents=[base()])\na = p.parse_args()\nuse(a.workers)\n", 5),
    # store_const and friends make no plain default
    ("p = argparse.ArgumentParser()\np.add_argument('--workers', action='store_const', const=4, default=0)\n"
     "a = p.parse_args()\nuse(a.workers)\n", None),
])
def test_option_default(code, expected):
    assert _default(code) == expected


@pytest.mark.parametrize("code, expected", [
    # a function of the file that parses and returns the namespace, directly or through a name
    ("def parse_option():\n    p = argparse.ArgumentParser()\n    p.add_argument('--workers', type=int, default=16)\n"
     "    opt = p.parse_args()\n    return opt\ndef main():\n    opt = parse_option()\n    use(opt.workers)\n", 16),
    ("def parse_option():\n    p = argparse.ArgumentParser()\n    p.add_argument('--workers', type=int, default=16)\n"
     "    return p.parse_args()\ndef build(opt):\n    use(opt.workers)\nbuild(parse_option())\n", 16),
    # a function that may return something else too
    ("def parse_option(raw):\n    p = argparse.ArgumentParser()\n    p.add_argument('--workers', type=int, default=16)\n"
     "    if raw:\n        return raw\n    return p.parse_args()\nopt = parse_option(None)\nuse(opt.workers)\n", None),
])
def test_option_default_through_a_parsing_function(code, expected):
    assert _default(code) == expected
