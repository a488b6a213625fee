"""The cache, the analysis's cost, the workers' lifetime and AdamW's tensor betas (issue 15, 5/11/13/14)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from robustness_support import REPO, with_finding

from torchlint.run.cache import Cache
from torchlint.config import Settings
from torchlint.run.fileio import decode_source
from torchlint.rule import Applicability, Diagnostic
from torchlint.run.runner import Job, process_source

DIAGNOSTIC = Diagnostic("TL501", "per-parameter-optimizer-loop", "msg", "a.py", 5, 48, 5, 70, Applicability.SAFE)


def _entry(cache: Cache, key: str) -> Path:
    return cache.folder / next(p for p in cache.folder.iterdir() if p.name.startswith("v")).name / key[:2] / key


@pytest.mark.parametrize("damage", [
    lambda e: e.write_text("[" * 100_000 + "]" * 100_000),  # once an uncaught RecursionError
    lambda e: e.write_text("{}"),
    lambda e: e.write_text("[]"),  # once read as "no findings": fix --apply then skipped the file
    lambda e: e.write_bytes(e.read_bytes().replace(b'"line": 5', b'"line": 6')),  # once wrong positions
    lambda e: e.write_bytes(e.read_bytes()[:-5]),
])
def test_a_damaged_cache_entry_is_a_miss(tmp_path, damage):
    cache = Cache(tmp_path / "cache")
    key = cache.key(b"source", ["TL501"], (2, 13), "lint")
    cache.put(key, [DIAGNOSTIC])
    assert cache.get(key, "a.py") == [DIAGNOSTIC]
    damage(_entry(cache, key))
    assert cache.get(key, "a.py") is None


def test_an_entry_under_another_key_is_a_miss(tmp_path):
    cache = Cache(tmp_path / "cache")
    key, other = (cache.key(data, ["TL501"], (2, 13), "lint") for data in (b"one", b"two"))
    cache.put(key, [DIAGNOSTIC])
    (_entry(cache, other)).parent.mkdir(parents=True, exist_ok=True)
    _entry(cache, other).write_bytes(_entry(cache, key).read_bytes())
    assert cache.get(other, "a.py") is None


def test_a_folder_in_place_of_an_entry_leaks_no_temporary_file(tmp_path):
    cache = Cache(tmp_path / "cache")
    key = cache.key(b"source", ["TL501"], (2, 13), "lint")
    cache.put(key, [])
    entry = _entry(cache, key)
    entry.unlink()
    entry.mkdir()
    cache.put(key, [DIAGNOSTIC])
    assert cache.get(key, "a.py") is None
    assert [p.name for p in entry.parent.iterdir()] == [key]


def test_rebinding_a_name_costs_linear_time(monkeypatch):
    """A generated script rebinding one name n times, each binding used: the work grows with n, not n*n
    (counted in binding look-ups, not timed)."""
    from torchlint.facts.index import AstIndex  # TL104 detects on the index

    calls = {"n": 0}
    real = AstIndex.values_of

    def counting(self, name, scope):
        calls["n"] += 1
        return real(self, name, scope)

    monkeypatch.setattr(AstIndex, "values_of", counting)
    counts = []
    for n in (100, 400):
        calls["n"] = 0
        text = with_finding("import numpy as np\n" + "x = np.zeros(3)\nt = torch.tensor(x)\n" * n)
        diagnostics = process_source(decode_source(text.encode()), "g.py", Path("g.py"), Job(Settings())).diagnostics
        assert len([d for d in diagnostics if d.code == "TL104"]) == n
        counts.append(calls["n"])
    assert counts[1] < 5 * counts[0]  # quadratic would be 16x


def test_workers_die_with_their_parent(tmp_path):
    script = textwrap.dedent("""
        import os, sys, time
        from concurrent.futures import ProcessPoolExecutor
        from torchlint.run.runner import die_with_parent
        pool = ProcessPoolExecutor(max_workers=2, initializer=die_with_parent, initargs=(os.getpid(),))
        list(pool.map(int, [0, 0]))  # both workers started
        print(" ".join(str(p) for p in pool._processes), flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO)
    workers = [int(p) for p in proc.stdout.readline().split()]
    assert len(workers) == 2
    proc.send_signal(signal.SIGKILL)  # the parent cannot clean up: the kernel must end its workers
    proc.wait()
    deadline = time.monotonic() + 30
    alive = workers
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in workers if _running(pid)]
        time.sleep(0.1)
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    assert alive == []


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_adamw_with_tensor_betas_matches_torch_bitwise():
    torch = pytest.importorskip("torch")
    from torchlint.runtime import AdamW

    torch.manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        ours_params = [torch.randn(64, dtype=dtype, requires_grad=True) for _ in range(3)]
        torch_params = [p.detach().clone().requires_grad_() for p in ours_params]
        betas = (torch.tensor(0.9), torch.tensor(0.999))
        ours = AdamW(ours_params, lr=1e-3, betas=betas, weight_decay=0.01, foreach=False)
        reference = torch.optim.AdamW(torch_params, lr=1e-3, betas=betas, weight_decay=0.01, foreach=False)
        for _ in range(5):
            for p, q in zip(ours_params, torch_params):
                p.grad = torch.randn_like(p)
                q.grad = p.grad.clone()
            ours.step()
            reference.step()
        for p, q in zip(ours_params, torch_params):
            assert torch.equal(p, q), dtype
