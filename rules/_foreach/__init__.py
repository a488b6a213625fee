"""TL501's fix: lift a per-parameter update loop into ``torch._foreach_*`` calls over lists.

Three steps, one module each, as torch.optim's ``_multi_tensor_*`` functions are laid out:

* ``classify``: read the loop body as one iteration's straight-line program and sort its statements into the
  first pass (filters, state, host scalars) and the tensor statements;
* ``ops``: map each tensor statement to ``torch._foreach_*`` calls on whole lists (``lerp``: an EMA's spellings
  to one ``_foreach_lerp_``);
* ``emit``: the two loops that replace the original, grouping the lists by device and dtype.

``context`` says where the loop stands in its file; ``values`` holds the lists, scalars and their names.
Anything the rewrite cannot lift exactly raises ``NoFix`` with the reason, which the finding's message repeats.
"""

from __future__ import annotations

from typing import List

import libcst as cst

from .classify import LoopBody
from .context import LoopContext, loop_context
from .emit import two_loops
from .nofix import NoFix
from .ops import OpMapper
from .values import Names

__all__ = ["LoopContext", "NoFix", "loop_context", "rewrite_loop"]

_MIN_TORCH = (2, 1)  # torch._foreach_copy_ and the scalar-list lerp/pow overloads


def rewrite_loop(loop: cst.For, ctx: LoopContext) -> List[cst.BaseStatement]:
    """The statements that replace ``loop``; raises ``NoFix`` with the reason where it cannot be lifted."""
    if ctx.torch_version < _MIN_TORCH:
        raise NoFix("the rewrite needs PyTorch 2.1 or later (`torch._foreach_copy_`, scalar-list overloads)")
    if loop.orelse is not None:
        raise NoFix("the loop has an `else:` clause")
    body = LoopBody(loop, ctx)
    split = body.classify()
    ops = OpMapper(body, Names(ctx.taken_names, body.body_bound))
    return two_loops(ops, split, ops.translate(split.tensor_statements))
