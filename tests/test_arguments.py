"""with_keyword: a new keyword argument follows the call's layout and keeps every comment where it was."""

import libcst as cst
import pytest

from torchlint.fix.arguments import with_keyword


@pytest.mark.parametrize(
    "before, after",
    [
        ("f(a, b=1)", "f(a, b=1, pin=True)"),
        ("f()", "f(pin=True)"),
        # the closing bracket on a line of its own stays there
        ("f(\n    a, b=1\n)", "f(\n    a, b=1, pin=True\n)"),
        # one argument per line, with and without a trailing comma, or aligned under the first
        ("f(\n    a,\n    b=1,\n)", "f(\n    a,\n    b=1,\n    pin=True,\n)"),
        ("f(\n    a,\n    b=1\n)", "f(\n    a,\n    b=1,\n    pin=True\n)"),
        ("f(a,\n  b=1)", "f(a,\n  b=1,\n  pin=True)"),
        # a comment after the last argument stays after it
        ("f(\n    a, b=1  # note\n)", "f(\n    a, b=1,  # note\n    pin=True\n)"),
        ("f(\n    a,  # one\n    b=1  # two\n)", "f(\n    a,  # one\n    b=1,  # two\n    pin=True\n)"),
        # an existing keyword gets the new value
        ("f(a, pin=False)", "f(a, pin=True)"),
    ],
)
def test_new_keyword_follows_the_layout(before, after):
    module = cst.parse_module(before + "\n")
    call = module.body[0].body[0].value
    assert module.code_for_node(with_keyword(call, "pin", cst.Name("True"))) == after
