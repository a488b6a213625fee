"""Clock reads (torchlint.facts.clocks): what makes a step timing code, decided from the calls."""

from __future__ import annotations

import ast
import textwrap

import pytest

from torchlint.facts.index import AstIndex
from torchlint.facts.clocks import reads_clock


def _clock_reads(source: str):
    source = textwrap.dedent(source)
    index = AstIndex(ast.parse(source), source)
    return [index.code_for_node(info.node, next(a for a in index.ancestors(info.node) if isinstance(a, ast.stmt)))
            for info in index.calls
            if reads_clock(index, info.node, info.function if info.function is not None else index.tree)]


@pytest.mark.parametrize("source, expected", [
    ("import time\nt = time.perf_counter()\n", ["time.perf_counter()"]),
    ("from time import monotonic as now\nt = now()\n", ["now()"]),
    ("from timeit import default_timer\nt = default_timer()\n", ["default_timer()"]),
    ("import datetime\nt = datetime.datetime.now()\n", ["datetime.datetime.now()"]),
    ("ms = start.elapsed_time(end)\n", ["start.elapsed_time(end)"]),
    # a timing event made, and recorded by the name bound to it
    ("import torch\ns = torch.cuda.Event(enable_timing=True)\ns.record()\n",
     ["torch.cuda.Event(enable_timing=True)", "s.record()"]),
    ("import torch\ns = torch.cuda.Event(True)\n", ["torch.cuda.Event(True)"]),
    # events that cannot be timed, and a record() of something else
    ("import torch\ne = torch.cuda.Event()\ne.record()\nf = torch.cuda.Event(enable_timing=False)\n", []),
    ("import torch\ne = torch.Event('cuda')\ne.record()\n", []),  # torch.Event's first argument is the device
    ("stream.record(ev)\nimport time as t\nt.sleep(1)\n", []),
    ("time = 3\nx = time.perf_counter()\n", []),  # not the module: no import
])
def test_clock_reads(source, expected):
    assert _clock_reads(source) == expected
