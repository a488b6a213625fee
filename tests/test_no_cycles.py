"""Checking or fixing a file leaves no reference cycles behind: its trees are freed by reference counting as
soon as the file is done. The runner pauses the cyclic garbage collector while it checks a file
(runner._collections_paused), so a cycle through a tree would keep that tree alive until the next
collection, and walking it again is what the pause saves."""

from __future__ import annotations

import gc
from collections import Counter
from typing import Callable

from fixture_support import fixture_settings, flagged_fixtures

from torchlint.engine import fix_source, lint_source
from torchlint.registry import get_rule


def _garbage_of(work: Callable[[], None]) -> Counter:
    """The objects ``work`` left in reference cycles, counted by the top-level package of their type. It
    runs once first, so that what earlier tests left behind (the last tree's cached index, an exception
    that a deliberate crash left with the worker thread) is dropped before the count."""
    work()
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        work()
        gc.collect()
        return Counter(type(o).__module__.split(".")[0] for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()


def test_checking_and_fixing_every_flagged_fixture_leaves_no_cycles():
    def work() -> None:
        for code, path in flagged_fixtures():
            source = path.read_text(encoding="utf-8")
            settings = fixture_settings(source, code)
            rules = [get_rule(selected)() for selected in settings.select]
            lint_source(source, path.name, rules, settings, with_edits=True)
            fix_source(source, path.name, rules, settings, unsafe=True)

    garbage = _garbage_of(work)
    # ast.literal_eval's own closures are cycles of plain functions and cells: not ours, and small
    assert {package: garbage[package] for package in ("torchlint", "libcst", "ast") if garbage[package]} == {}
