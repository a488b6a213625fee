"""The trusted parse builds the same trees as LibCST's and leaves validation on for everything else."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from torchlint.fix.fast_parse import parse_module

FIXTURES = sorted((Path(__file__).parent.parent / "fixtures").rglob("*.py"))


@pytest.mark.parametrize("path", FIXTURES[::7], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_same_tree_as_libcst_builds(path):
    source = path.read_text(encoding="utf-8")
    trusted, checked = parse_module(source), cst.parse_module(source)
    assert trusted.deep_equals(checked)
    assert trusted.code == source


def test_nodes_built_after_a_parse_are_still_validated():
    parse_module("x = 1\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")


def test_validation_comes_back_after_a_parse_that_fails():
    with pytest.raises(cst.ParserSyntaxError):
        parse_module("def (:\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("1x")
