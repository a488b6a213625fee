"""The cache's code fingerprint hashes every source that decides a diagnostic, subpackages included."""

from __future__ import annotations

from pathlib import Path

import torchlint
from torchlint.run import cache


def test_the_fingerprint_reads_the_facts_the_rules_use(monkeypatch):
    read = []
    original = Path.read_bytes

    def recording(path):
        read.append(path.resolve())
        return original(path)

    monkeypatch.setattr(Path, "read_bytes", recording)
    cache.code_fingerprint.__wrapped__()
    package = Path(torchlint.__file__).resolve().parent
    assert package / "facts" / "script.py" in read  # runs_on_every_run: TL203, TL602, TL706 read it
    assert package / "run" / "cache.py" in read
