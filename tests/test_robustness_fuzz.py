"""The fast subset of benchmarks/fuzz_faults.py: one case per kind of failure issue 15 found."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "fuzz_faults.py"


def _load():
    spec = importlib.util.spec_from_file_location("fuzz_faults", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_fast_fuzz_cases_all_survive(monkeypatch):
    repo = str(SCRIPT.parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])))
    fuzz = _load()
    results = fuzz.run_cases(fast=True)
    assert len(results) >= 5
    failures = [f"{category} / {name}: {reason}" for category, name, reason in results if reason is not None]
    assert failures == []
