"""The parallel runner's scheduling: large files in one unit, the rest largest first."""

from __future__ import annotations

from pathlib import Path

from torchlint.run.runner import LARGE_FILE_BYTES, schedule


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


def test_a_warm_run_reads_the_cache_before_starting_workers(tmp_path, monkeypatch):
    import torchlint.run.runner as runner
    from torchlint.config import Settings

    sources = {
        "slow.py": "import torch\nopt = torch.optim.SGD(params, lr=0.1, foreach=False)\n",
        "clean.py": "import torch\nx = torch.zeros(3)\n",
    }
    paths = []
    for i in range(6):
        for name, text in sources.items():
            path = tmp_path / f"{i}_{name}"
            path.write_text(text)
            paths.append(path)
    job = runner.Job(Settings(root=tmp_path), cache_dir=tmp_path / ".cache")
    cold = runner.run(paths, job, jobs=1)  # fills the cache
    dispatched = []
    monkeypatch.setattr(runner, "_run_files", lambda rest, *args: dispatched.append(list(rest)) or [])
    warm = runner.run(paths, job, jobs=2)
    assert dispatched == []  # every file answered from the cache, no worker started
    assert [(r.path, r.diagnostics) for r in warm] == [(r.path, r.diagnostics) for r in cold]
    assert any(r.diagnostics for r in warm)
    paths[0].write_text(sources["clean.py"] + "# edited\n")
    monkeypatch.undo()
    calls = []
    real = runner._run_files
    monkeypatch.setattr(runner, "_run_files", lambda rest, *args: calls.append(list(rest)) or real(rest, *args))
    again = runner.run(paths, job, jobs=2)
    assert calls == [[paths[0]]]  # only the edited file is checked again
    assert again[0].diagnostics == [] and [r.diagnostics for r in again[1:]] == [r.diagnostics for r in cold[1:]]


def test_a_stopped_pool_is_not_woken_at_exit():
    """After a Ctrl-C the workers are killed; the wakeup ``concurrent.futures`` sends each pool's manager
    thread at exit may then hit a broken pipe and print a traceback after torchlint's message."""
    import concurrent.futures
    import concurrent.futures.process as futures_process

    from torchlint.run.runner import stop_workers

    pool = concurrent.futures.ProcessPoolExecutor(max_workers=1)
    pool.submit(abs, -1).result()
    thread = pool._executor_manager_thread
    assert thread in futures_process._threads_wakeups
    stop_workers(pool)
    assert thread not in futures_process._threads_wakeups


def test_the_collector_is_off_between_files_and_collects_now_and_then(tmp_path, monkeypatch):
    """A run keeps the cyclic collector off across its files (its collections walked every object the run
    keeps, again and again) and collects once every ``COLLECT_EVERY_FILES``; it is on again after the run."""
    import gc

    import torchlint.run.runner as runner
    from torchlint.config import Settings

    for n in range(5):
        (tmp_path / f"f{n}.py").write_text("import torch\nx = torch.zeros(3)\n")
    seen, collections = [], []
    real_process_file = runner.process_file

    def process_file(path, job):
        seen.append(gc.isenabled())
        return real_process_file(path, job)

    monkeypatch.setattr(runner, "process_file", process_file)
    monkeypatch.setattr(runner, "COLLECT_EVERY_FILES", 2)
    monkeypatch.setattr(runner, "_files_since_collection", [0])
    monkeypatch.setattr(gc, "collect", lambda *args: collections.append(args) or 0)
    assert gc.isenabled()
    runner.run(sorted(tmp_path.glob("*.py")), runner.Job(Settings(root=tmp_path)))
    assert seen == [False] * 5 and len(collections) == 2 and gc.isenabled()
