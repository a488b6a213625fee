"""Carrying fixes back into the file by line (torchlint/fix/textmerge.py, StatementTree.carried)."""

from __future__ import annotations

import random
from difflib import SequenceMatcher

import pytest

from torchlint.fix.textmerge import _opcodes, carry_fixes


def _apply(a, b, opcodes):
    out, i, j = [], 0, 0
    for tag, i1, i2, j1, j2 in opcodes:
        assert (i1, j1) == (i, j)  # contiguous, in order
        if tag == "equal":
            assert a[i1:i2] == b[j1:j2]
            out += a[i1:i2]
        else:
            out += b[j1:j2]
        i, j = i2, j2
    assert (i, j) == (len(a), len(b))
    return out


@pytest.mark.parametrize("seed", range(200))
def test_the_anchored_diff_turns_one_text_into_the_other(seed):
    rng = random.Random(seed)
    a = [rng.choice("abcdefghij") + "\n" for _ in range(rng.randint(0, 40))]
    b = list(a)
    for _ in range(rng.randint(0, 6)):
        at = rng.randint(0, len(b))
        roll = rng.random()
        if roll < 0.4:
            b.insert(at, rng.choice("abcxyz") + "\n")
        elif b and roll < 0.7:
            del b[min(at, len(b) - 1)]
        elif b:
            b[min(at, len(b) - 1)] = "changed\n"
    assert _apply(a, b, list(_opcodes(a, b))) == b


def test_where_every_line_is_unique_it_is_sequence_matchers_diff():
    a = [f"line {n}\n" for n in range(50)]
    b = a[:10] + ["new\n"] + a[10:30] + a[31:]
    expected = SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    merged = []  # the anchored diff reports each anchor as its own equal run: join them to compare
    for opcode in _opcodes(a, b):
        if merged and opcode[0] == merged[-1][0] == "equal":
            merged[-1] = ("equal", merged[-1][1], opcode[2], merged[-1][3], opcode[4])
        else:
            merged.append(opcode)
    assert merged == expected


def test_a_long_repetitive_text_is_diffed_in_pieces():
    """1,000 copies of the same ten lines, each with a line of its own, and a fix in every copy."""
    block = [f"    line {n}\n" for n in range(10)]
    a = [line for copy in range(1000) for line in [f"def f{copy}():\n", *block]]
    b = [line.replace("line 3", "fixed 3") for line in a]
    assert _apply(a, b, list(_opcodes(a, b))) == b


def test_carrying_keeps_every_line_outside_the_fix():
    original = "a\r\nb\nc\n"
    base = "a\nb\nc\n"  # a round trip that lost the carriage return
    assert carry_fixes(original, base, "a\nB\nc\n") == "a\r\nB\nc\n"
    assert carry_fixes(original, base, "A\nb\nc\n") is None  # the altered line itself


def test_a_decorator_added_to_a_def_apart_from_the_line_before_lands_on_the_def():
    """The statements' tree holds the imports and a def that is apart from them in the file with no blank
    line above it: the changed def is put in place of its own lines, the decorator with it."""
    from torchlint.fix.rewrites import StatementTree

    source = "import torch\nx = 1\ndef f():\n    return 1\n"
    tree = StatementTree(analysis=None, text="import torch\ndef f():\n    return 1\n", file_lines=[0, 2, 3])
    start = len("import torch\n")
    regions = [(start, len(tree.text), "@torch.no_grad()\ndef f():\n    return 1\n")]
    fixed = tree.text[:start] + regions[0][2]
    assert tree.carried(source, fixed, regions) == "import torch\nx = 1\n@torch.no_grad()\ndef f():\n    return 1\n"
    # by a line diff alone the new line sits between two lines apart in the file: it may end the first or
    # begin the second, so it is not carried (the caller fixes the whole file instead; after the first, it
    # would decorate whatever follows that line in the file)
    assert tree.carried(source, fixed) is None
    after_loop = "import torch\nfor x in y:\n    f(x)\ntotal = float(total)\ndef g():\n    return 1\n"
    tree = StatementTree(analysis=None, text="import torch\nfor x in y:\n    f(x)\ndef g():\n    return 1\n",
                         file_lines=[0, 2, 3, 5, 6])
    assert tree.carried("import torch\nz = 0\nfor x in y:\n    f(x)\n\ndef g():\n    return 1\n", after_loop) is None
    # where the two are adjacent in the file, the line goes between them
    tree = StatementTree(analysis=None, text="import torch\ndef f():\n    return 1\n", file_lines=[0, 1, 2])
    assert tree.carried("import torch\ndef f():\n    return 1\n", fixed) == fixed
