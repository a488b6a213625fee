"""Suppressions.parse tokenizes only texts that can hold a ``noqa`` comment, and finds the same ones."""

from __future__ import annotations

import pytest

from torchlint import suppression
from torchlint.suppression import Suppressions


def test_a_text_without_noqa_is_not_tokenized(monkeypatch):
    def fail(source):
        raise AssertionError("tokenized")

    monkeypatch.setattr(suppression, "_comments", fail)
    s = Suppressions.parse("import torch  # no suppression here\nx = 'no qa'\n")
    assert not s.file_codes and not s.line_codes
    assert not s.is_suppressed("TL101", 1, 2)


@pytest.mark.parametrize("comment", ["# NOQA", "# NoQa: TL101", "#noqa:tl101", "# torchlint: NOQA"])
def test_noqa_in_any_case_is_still_found(comment):
    s = Suppressions.parse(f"x = 1\n{'y = 2  ' if 'torchlint' not in comment else ''}{comment}\n")
    assert s.is_suppressed("TL101", 2, 2)
