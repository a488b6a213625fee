"""Writes a small project for the cross-file tests: one home for the helper they all use."""

from __future__ import annotations

from pathlib import Path
from typing import Dict


def write_tree(root: Path, files: Dict[str, str]) -> None:
    """Each ``name -> text`` as a file under ``root``, its folders made."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
