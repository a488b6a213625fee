"""Emit the rewrite's two loops in place of the original one.

The first pass is the original loop with every tensor statement taken out: it keeps the filters
(``if p.grad is None: continue``), the lazy state initialisation and the host scalars, and appends each
parameter's tensors to lists, one set of lists per (device, dtype) because a ``torch._foreach_*`` call needs one
of each. The second loops over those buckets and runs the foreach section (``ops``) on each set of lists:

    buckets = {}
    for p in params:
        ...  # the filters, state and host scalars
        param_list, grads = buckets.setdefault((p.device, p.dtype), ([], []))
        param_list.append(p)
        grads.append(p.grad)
    for param_list, grads in buckets.values():
        torch._foreach_add_(param_list, grads, alpha=-lr)

(``tests/test_foreach_emit.py`` pins the text for one list, several, a lerp and a wrapped line.)
"""

from __future__ import annotations

from typing import List, Set, Tuple

import libcst as cst

from .classify import Split
from .nofix import NoFix
from .ops import OpMapper
from .values import Root

_WIDTH = 110  # the line length the bucket line is wrapped at (minus the loop body's indent)


def two_loops(ops: OpMapper, split: Split, foreach_body: List[cst.BaseStatement]) -> List[cst.BaseStatement]:
    """``buckets = {}``, the first pass that fills it, and the loop over its lists that runs ``foreach_body``."""
    body, module, loop = ops.body, ops.module, ops.body.loop
    roots = list(ops.roots.values())
    for root in roots:
        if root.key in body.tensor_targets and root.collect == root.key:
            # the loop variable itself: `.data`/`.detach()` as the loop writes it (see OpMapper.collect_spelling)
            root.collect = ops.collect_spelling(root.key)
    collected = _collected(ops, roots)
    list_names = [name for name, _ in collected]
    buckets = ops.names.fresh("buckets")
    key = _bucket_key(ops, roots)
    bucket_line, loop_target = _bucket_line(list_names, buckets, key, _WIDTH - _indent_width(ops))
    collect_lines = [bucket_line] + [f"{name}.append({expr})" for name, expr in collected]
    collect_statements = [cst.parse_statement(line + "\n", config=module.config_for_parsing) for line in collect_lines]

    # the first pass: the loop without its tensor statements, collecting the lists at the end of the update block
    new_body = _first_pass_block(split.block_path[-1], split.first_pass, collect_statements)
    for outer in reversed(split.block_path[:-1]):
        new_body = _replace_last(outer, new_body)
    comments = [cst.EmptyLine(comment=cst.Comment(
        f"# Batched with {ops.torch}._foreach_*: collect the tensors per (device, dtype), then one call per op."
    ))]
    init = cst.parse_statement(f"{buckets} = {{}}\n", config=module.config_for_parsing)
    init = init.with_changes(leading_lines=[*loop.leading_lines, *comments])
    first_loop = loop.with_changes(body=new_body, leading_lines=[])
    if foreach_body:  # no blank line right under the loop header
        first_statement = foreach_body[0]
        lines = list(getattr(first_statement, "leading_lines", ()))
        while lines and lines[0].comment is None:
            lines.pop(0)
        foreach_body = [first_statement.with_changes(leading_lines=lines), *foreach_body[1:]]
    foreach_loop = cst.parse_statement(
        f"for {loop_target} in {buckets}.values():\n    pass\n", config=module.config_for_parsing
    )
    assert isinstance(foreach_loop, cst.For)
    foreach_loop = foreach_loop.with_changes(body=foreach_loop.body.with_changes(body=foreach_body))
    return [init, first_loop, foreach_loop]


def _collected(ops: OpMapper, roots: List[Root]) -> List[Tuple[str, str]]:
    """(list name, what the first pass appends to it): the tensors, then the host scalars."""
    collected = [(root.list_name, _collected_expr(ops, root)) for root in roots]
    collected += ops.rebound_aliases
    collected += [(list_name, f"float({name})" if ops.body.hosts[name].maybe_tensor else name)
                  for name, list_name in ops.collected_hosts.items()]
    collected += [(list_name, f"float({code})") for code, list_name in ops.collected_exprs.items()]
    return collected


def _collected_expr(ops: OpMapper, root: Root) -> str:
    for target_key, end_key in ops.lerp_pairs:
        if end_key == root.key and ops.roots[end_key].keyed:
            target = ops.roots[target_key].collect
            return f"{root.collect}.to({target}.dtype)"
    return root.collect


def _bucket_key(ops: OpMapper, roots: List[Root]) -> str:
    """The device and dtype of each tensor the loop gets from outside (its targets, other dicts' values);
    gradients and state tensors follow their parameter. A lerp's end is converted to the average's dtype and
    must share its device (the loop's add_ needed that too)."""
    lerp_ends = {end for _, end in ops.lerp_pairs}
    key_parts = []
    for target in ops.body.tensor_targets:
        if target not in lerp_ends:
            key_parts += [f"{target}.device", f"{target}.dtype"]
    for root in roots:
        if "[" in root.key and root.key not in lerp_ends:
            key_parts += [f"{root.collect}.device", f"{root.collect}.dtype"]
    if not key_parts:
        raise NoFix("no per-parameter tensor to group by device and dtype")
    return f"({', '.join(key_parts)})"


def _bucket_line(list_names: List[str], buckets: str, key: str, width: int) -> Tuple[str, str]:
    """The line that gets a (device, dtype)'s lists from the buckets, and the second loop's target."""
    if len(list_names) == 1:
        return f"{list_names[0]} = {buckets}.setdefault({key}, [])", list_names[0]
    empties = ", ".join("[]" for _ in list_names)
    names = ", ".join(list_names)
    if len(names) + 4 > width:  # one name per line: long tuples read better that way
        names = "(\n" + "".join(f"    {name},\n" for name in list_names) + ")"
    bucket_line = f"{names} = {buckets}.setdefault({key}, ({empties}))"
    if len(bucket_line.splitlines()[-1]) > width:
        bucket_line = f"{names} = {buckets}.setdefault(\n    {key}, ({empties})\n)"
    return bucket_line, names


def _first_pass_block(block: cst.BaseSuite, keep: Set[int], collect: List[cst.BaseStatement]) -> cst.IndentedBlock:
    assert isinstance(block, cst.IndentedBlock)
    out: List[cst.BaseStatement] = []
    index = 0
    for statement in block.body:
        if isinstance(statement, cst.SimpleStatementLine):
            smalls = list(statement.body)
            kept = [s for i, s in enumerate(smalls, start=index) if i in keep]
            index += len(smalls)
            if not kept:
                continue
            if len(kept) != len(smalls):
                kept = [s.with_changes(semicolon=cst.MaybeSentinel.DEFAULT) if i == len(kept) - 1 else s
                        for i, s in enumerate(kept)]
                statement = statement.with_changes(body=kept)
            out.append(statement)
        else:
            if index in keep:
                out.append(statement)
            index += 1
    return block.with_changes(body=[*out, *collect])


def _replace_last(block: cst.BaseSuite, inner: cst.IndentedBlock) -> cst.IndentedBlock:
    assert isinstance(block, cst.IndentedBlock)
    last = block.body[-1]
    assert isinstance(last, cst.If)
    return block.with_changes(body=[*block.body[:-1], last.with_changes(body=inner)])


def _indent_width(ops: OpMapper) -> int:
    """About how deep the loop body is indented (for line lengths only)."""
    loop = ops.body.loop
    depth = sum(1 for a in ops.ctx.analysis.ancestors(loop) if isinstance(a, cst.IndentedBlock)) + 1
    return depth * len(ops.module.default_indent)
