"""Build TL501's rewrite stages on a small hand-written loop, shared by the tests of rules/_foreach/."""

from __future__ import annotations

import ast
import textwrap
from typing import Tuple

import libcst as cst

from torchlint.fix.analysis import FileAnalysis, walk
from torchlint.facts.index import AstIndex
from torchlint.facts.grad_mode import grad_off_in_function
from torchlint.rules._foreach import loop_context
from torchlint.rules._foreach.classify import LoopBody
from torchlint.rules._foreach.context import LoopContext

HEADER = "import torch\n\n\n@torch.no_grad()\ndef step(params, opt, lr, b1, wd):\n"


def loop_in(source: str, torch_version=(2, 13)) -> Tuple[cst.For, LoopContext]:
    """The first ``for`` loop of ``source`` and where it stands."""
    analysis = FileAnalysis(cst.parse_module(source), source)
    loop = next(node for node in walk(analysis.module) if isinstance(node, cst.For))
    index = AstIndex(ast.parse(source), source)
    ast_loop = index.loops[0].node  # the first in source order, as LibCST's walk above
    ctx = loop_context(analysis, loop, torch_version, index, grad_off_in_function(index, ast_loop))
    assert ctx is not None
    return loop, ctx


def step_loop(body: str, header: str = "for p in params:") -> Tuple[cst.For, LoopContext]:
    """``header`` with ``body`` (lines, dedented) as the loop of a ``@torch.no_grad()`` step function."""
    lines = textwrap.indent(textwrap.dedent(body).strip("\n"), " " * 8)
    return loop_in(f"{HEADER}    {header}\n{lines}\n")


def body_of(body: str, header: str = "for p in params:") -> LoopBody:
    return LoopBody(*step_loop(body, header))


def render(statements) -> str:
    return cst.Module(body=list(statements)).code
