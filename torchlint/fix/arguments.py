"""Rewrite a call's keyword arguments while keeping its layout (one line, or one argument per line)."""

from __future__ import annotations

from typing import List

import libcst as cst

from torchlint.fix.comments import has_comment, without_comment


def keyword(name: str, value: cst.BaseExpression) -> cst.Arg:
    """``name=value``, written without spaces as PEP 8 asks for keywords."""
    no_space = cst.SimpleWhitespace("")  # built here: modules on the check path touch no LibCST at import
    return cst.Arg(keyword=cst.Name(name), value=value,
                   equal=cst.AssignEqual(whitespace_before=no_space, whitespace_after=no_space))


def with_keyword(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    """``call`` with ``name=value``: the existing keyword's value replaced, or a new last argument.

    A new argument follows the call's layout: after a trailing comma that ends a line, it goes on a line
    of its own (with the separator the other arguments use) and keeps the trailing comma.
    """
    args: List[cst.Arg] = list(call.args)
    for index, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == name:
            args[index] = arg.with_changes(value=value)
            return call.with_changes(args=args)
    new_arg = keyword(name, value)
    if not args:
        return call.with_changes(args=[new_arg])
    last = args[-1]
    trailing = last.comma
    if trailing is cst.MaybeSentinel.DEFAULT:
        # `f(\n    a, b\n)`: what follows the last argument (the line break before `)`, a comment on its
        # line) now follows the new one; one argument per line stays one per line
        after_last = last.whitespace_after_arg
        separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        line_break = None  # the break and indent that put an argument on a line of its own
        if len(args) >= 2 and isinstance(args[-2].comma, cst.Comma) \
                and isinstance(args[-2].comma.whitespace_after, cst.ParenthesizedWhitespace):
            line_break = _bare_line_break(args[-2].comma.whitespace_after)
            separator = cst.Comma(whitespace_after=line_break)
        elif isinstance(call.whitespace_before_args, cst.ParenthesizedWhitespace):
            line_break = _bare_line_break(call.whitespace_before_args)
        if has_comment(after_last) and isinstance(after_last, cst.ParenthesizedWhitespace) and line_break is not None:
            # `b  # note\n)`: the note stays after `b`, the new argument goes on the next line
            separator = cst.Comma(whitespace_after=after_last.with_changes(last_line=line_break.last_line))
            after_last = without_comment(after_last)
        args[-1] = last.with_changes(comma=separator, whitespace_after_arg=cst.SimpleWhitespace(""))
        new_arg = new_arg.with_changes(whitespace_after_arg=after_last)
    else:
        if len(args) >= 2 and isinstance(args[-2].comma, cst.Comma):
            separator = args[-2].comma
        elif isinstance(call.whitespace_before_args, cst.ParenthesizedWhitespace):  # `f(\n    x,\n)`
            separator = cst.Comma(whitespace_after=call.whitespace_before_args)
        else:
            separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        # the layout is copied, not a comment it holds (`f(  # note\n    x,\n)`: the note stays where it is;
        # `x  # note\n    , y`: a comma put on the next line by a comment goes back after its argument)
        before = separator.whitespace_before
        separator = separator.with_changes(
            whitespace_before=cst.SimpleWhitespace("") if has_comment(before) else before,
            whitespace_after=without_comment(separator.whitespace_after))
        args[-1] = last.with_changes(comma=separator)
        new_arg = new_arg.with_changes(comma=trailing)
    args.append(new_arg)
    return call.with_changes(args=args)


def _bare_line_break(whitespace: cst.ParenthesizedWhitespace) -> cst.ParenthesizedWhitespace:
    """The line break and the next line's indent, without what ends the line before it (trailing spaces, a
    comment) or the blank and comment lines between."""
    return whitespace.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[])
