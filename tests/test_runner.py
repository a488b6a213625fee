"""The parallel runner's scheduling: large files in one unit, the rest largest first."""

from __future__ import annotations

from pathlib import Path

from torchlint.runner import LARGE_FILE_BYTES, schedule


def test_large_files_share_one_unit_so_they_never_run_at_once():
    sizes = {Path(f"large{i}.py"): LARGE_FILE_BYTES * 2 - i for i in range(3)}
    sizes.update({Path(f"small{i:03d}.py"): 10_000 + i for i in range(50)})
    units = schedule(sizes, jobs=2)
    assert units[0] == [Path("large0.py"), Path("large1.py"), Path("large2.py")]
    assert all(len(unit) == 1 for unit in units[1:])
    assert [u[0] for u in units[1:]] == sorted((p for p in sizes if p.name.startswith("small")), key=lambda p: -sizes[p])


def test_without_large_files_every_file_is_its_own_unit():
    sizes = {Path("a.py"): 5, Path("b.py"): 50, Path("c.py"): 20}
    assert schedule(sizes, jobs=2) == [[Path("b.py")], [Path("c.py")], [Path("a.py")]]
