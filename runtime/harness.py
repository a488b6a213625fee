"""Prove each rewrite on hardware: run the slow and the fixed form of a workload, compare, time.

    torchlint bench [--device cuda|cpu|auto] [--size small|full] [--select TL201,...]
                    [--repeats N] [--warmup N] [--json FILE] [--plot FILE.png] [--require-faster]
    python -m torchlint.runtime.harness ...   (the same)

For every rule with a fix, each workload ``fixtures/<CODE>/bench_<what>.py`` is the slow form. The fast form
is produced by torchlint's real fixer, in process (``fix_source`` with only that rule selected and unsafe
fixes on: the harness proves the rewrite whether it is safe or not). Nothing "after" is ever written by hand,
except in rows explicitly marked ``extra`` (see ``EXTRA`` below), which compare two implementations.

Workload contract
-----------------
A workload is plain, importable PyTorch code written in the slow form. It defines:

``setup(device: str, size: str) -> state``
    Builds the model and data with a fixed seed (``torch.manual_seed``, ``np.random.default_rng(0)``...) and
    returns any object. Not timed. ``size`` is ``"small"`` (well under a second per run on a laptop CPU; what the
    tests use) or ``"full"`` (a few seconds per run on an H200, sized to show the effect).
``run(state) -> dict[str, Tensor | float | int | list/tuple of those]``
    Does the work (the code the rule rewrites lives here, or in what ``setup`` builds) and returns what must match
    between the slow and the fixed form: final parameters, losses, outputs. Only ``run`` is timed, and each
    repetition gets a fresh ``setup`` (``run`` may mutate its state: train the model).

Module-level constants (all optional but ``TOLERANCE``):

``TOLERANCE = {"rtol": 0, "atol": 0}``
    Passed to ``torch.testing.assert_close`` for every returned value. ``0, 0`` is bitwise: use it where the
    rewrite must be exact; otherwise state an fp32 tolerance with a comment saying why results may differ.
``TOLERANCE_CUDA``
    Overrides ``TOLERANCE`` on CUDA (e.g. TF32 convolutions or non-deterministic kernels).
``TOLERANCE_PER_KEY = {"running_loss": {"rtol": ..., "atol": ...}}``
    Overrides the tolerance for some top-level keys of ``run``'s result (e.g. a sum whose accumulation dtype
    the fix changes, while the parameters stay bitwise).
``REPEATS``, ``WARMUP``
    Timed repetitions and untimed warm-up runs per form (defaults: 5/1 on ``small``, 10/2 on ``full``; the
    command line's ``--repeats``/``--warmup`` win).
``MEASURE_MEMORY = True``
    Also report peak memory of one ``run`` per form (see below).
``NEEDS_CUDA = True``
    The rewrite only changes speed on a CUDA device (pinned memory, non-blocking copies, tensors made on the
    device). Elsewhere the harness still fixes the workload and compares the results, then gives the verdict
    ``needs CUDA`` instead of timing two forms that do the same work there.
``EXTRA = {"label": ..., "replace": {old_text: new_text, ...}}``
    Marks an extra comparison that is *not* a fixer rewrite (e.g. the seed's per-parameter AdamW against
    ``torchlint.runtime.AdamW``): the "after" text is made by those literal replacements and the row says so.

What the harness does per workload
----------------------------------
1. Fix the text with the real fixer. It is an error when the text is unchanged (the rule did not fire), when
   the fixer reports an error, or when the workload fails to load or run.
2. Load "before" and "after" as separate modules from source text (``exec`` of ``compile(text, "<CODE before>")``),
   run each once from ``setup`` and compare every returned value with ``assert_close`` at the stated tolerance.
   A mismatch is the verdict ``different results`` (a failure); nothing is timed then. A ``NEEDS_CUDA``
   workload on another device stops here with the verdict ``needs CUDA`` (not a failure).
3. Time: ``WARMUP`` untimed runs, then ``REPEATS`` timed runs of each form, interleaved (before, after, before,
   ...) so that drift hits both alike. On CUDA each run is bracketed by ``torch.cuda.synchronize()`` and timed
   with CUDA events; on the CPU with ``time.perf_counter``. The median is reported with the interquartile range.
4. Verdict, the noise rule: the forms are ``same`` when their medians differ by no more than the larger of the two
   interquartile ranges, and never by less than 3% of the slower median (``NOISE_FLOOR``); otherwise ``faster``
   or ``slower`` (after relative to before).
5. Memory (``MEASURE_MEMORY``): on CUDA, ``torch.cuda.max_memory_allocated()`` during one ``run`` (peak statistics
   reset after ``setup``) minus what was allocated when ``run`` started. On the CPU, one ``run`` in a fresh
   subprocess per form: after ``setup`` the kernel's peak-RSS counter is reset (``/proc/self/clear_refs``), and
   the peak RSS reached during ``run`` (``VmHWM``) minus the RSS when it started is reported. That is real process
   memory (allocator included), not an estimate; where ``clear_refs`` is unavailable, ``ru_maxrss`` growth is used
   and the row says so. Being the process's first ``run``, it includes one-time lazy initialisation (thread
   pools, kernel workspaces) that is the same for both forms: compare the two numbers, not their absolute size.

Exit code: 0 when every rewrite gives the same results (and, with ``--require-faster``, none is slower); 1 when
any rewrite gives different results, a workload is broken or its rule does not fire (or a rewrite is slower
under ``--require-faster``); 2 for a usage error.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import difflib
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import traceback
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from torchlint.config import ConfigError, parse_selectors

def _default_fixtures() -> Path:
    """The checkout's fixtures/ (source or editable install), else the workloads installed with the package."""
    checkout = Path(__file__).resolve().parent.parent / "fixtures"
    if checkout.is_dir():
        return checkout
    import torchlint.fixtures

    return Path(list(torchlint.fixtures.__path__)[0])


FIXTURES = _default_fixtures()
NOISE_FLOOR = 0.03  # relative: medians closer than 3% are never called faster or slower
DEFAULT_REPEATS = {"small": 5, "full": 10}
DEFAULT_WARMUP = {"small": 1, "full": 2}
NOISE_RULE = (
    "same = the medians differ by no more than the larger interquartile range of the two forms, "
    f"and never by less than {NOISE_FLOOR:.0%} of the slower median"
)
NEEDS_CUDA = "needs CUDA"  # the results match; the speed only differs on a CUDA device
VERDICTS = ("faster", "same", "slower", NEEDS_CUDA, "different results", "error")

# (code, before text, path) -> (after text, number of fixes applied)
Fixer = Callable[[str, str, str], Tuple[str, int]]


# --- workloads -----------------------------------------------------------------------------------


@dataclass
class Workload:
    code: str  # the rule, e.g. "TL201"
    name: str  # the file stem, e.g. "bench_zero_grad"
    path: Path
    text: str

    @property
    def label(self) -> str:
        return f"{self.code} {self.name[len('bench_'):] if self.name.startswith('bench_') else self.name}"


def discover(fixtures: Path = FIXTURES, select: Sequence[str] = ()) -> List[Workload]:
    """Every ``fixtures/TLNNN/bench_*.py``, sorted by rule then name; ``select`` filters by code prefix."""
    found = []
    if not fixtures.is_dir():
        return found
    for folder in sorted(p for p in fixtures.iterdir() if p.is_dir() and re.match(r"^TL\d{3}$", p.name)):
        if select and not any(folder.name.startswith(s) for s in select):
            continue
        for path in sorted(folder.glob("bench_*.py")):
            found.append(Workload(folder.name, path.stem, path, path.read_text(encoding="utf-8")))
    return found


def real_fixer(code: str, text: str, path: str) -> Tuple[str, int]:
    """torchlint's fixer with only ``code`` selected, unsafe fixes included. Raises on fixer errors."""
    from torchlint.config import Settings
    from torchlint.engine import fix_source
    from torchlint.registry import get_rule

    outcome = fix_source(text, path, [get_rule(code)()], Settings(select=(code,)), unsafe=True)
    if outcome.errors:
        raise FixerError("; ".join(e.message for e in outcome.errors))
    return outcome.source, outcome.applied.get(code, 0)


class FixerError(Exception):
    pass


class WorkloadError(Exception):
    pass


def load_module(text: str, name: str) -> types.ModuleType:
    """A fresh module from source text (``name`` shows in tracebacks, e.g. ``<TL201 before>``)."""
    module = types.ModuleType(re.sub(r"\W", "_", name))
    module.__file__ = name
    exec(compile(text, name, "exec"), module.__dict__)
    for attr in ("setup", "run"):
        if not callable(getattr(module, attr, None)):
            raise WorkloadError(f"{name}: a workload must define {attr}(); see `torchlint bench --help`")
    if not isinstance(getattr(module, "TOLERANCE", None), dict):
        raise WorkloadError(f"{name}: a workload must define TOLERANCE = {{'rtol': ..., 'atol': ...}}")
    return module


def make_after(workload: Workload, fixer: Fixer) -> Tuple[str, int, str]:
    """(after text, fixes applied, kind): the real fixer, or the literal replacements of an EXTRA row."""
    extra = _extra_spec(workload.text)
    if extra is not None:
        block = _EXTRA_BLOCK.search(workload.text)
        assert block is not None
        head, rest = workload.text[: block.start()], workload.text[block.end():]
        for old, new in extra["replace"].items():  # everywhere but in the EXTRA literal itself
            if old not in head and old not in rest:
                raise WorkloadError(f"EXTRA replacement {old!r} does not occur in {workload.path.name}")
            head, rest = head.replace(old, new), rest.replace(old, new)
        return head + block.group(0) + rest, len(extra["replace"]), "extra"
    after, applied = fixer(workload.code, workload.text, str(workload.path))
    return after, applied, "fix"


_EXTRA_BLOCK = re.compile(r"^EXTRA\s*=.*?^\}", re.MULTILINE | re.DOTALL)


def _extra_spec(text: str) -> Optional[Dict[str, Any]]:
    if not re.search(r"^EXTRA\s*=", text, re.MULTILINE):
        return None
    namespace: Dict[str, Any] = {}
    # Only the EXTRA assignment is evaluated here, so that a module that fails to import still says why later.
    match = _EXTRA_BLOCK.search(text)
    if match is None:
        raise WorkloadError("EXTRA must be a dict literal ending with a '}' line")
    exec(match.group(0), namespace)
    return namespace["EXTRA"]


# --- running and comparing -----------------------------------------------------------------------


def _seed_all(seed: int = 0) -> None:
    import random

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover
        pass


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _fresh_state(module: types.ModuleType, device: str, size: str) -> Any:
    _seed_all()
    state = module.setup(device, size)
    _sync(device)
    return state


def run_once(module: types.ModuleType, device: str, size: str) -> Dict[str, Any]:
    state = _fresh_state(module, device, size)
    _seed_all(1)
    out = module.run(state)
    _sync(device)
    if not isinstance(out, dict) or not out:
        raise WorkloadError("run() must return a non-empty dict of the values to compare")
    return out


def timed_run(module: types.ModuleType, device: str, size: str) -> float:
    """Seconds of one ``run`` call, after a fresh ``setup``."""
    state = _fresh_state(module, device, size)
    _seed_all(1)
    if device.startswith("cuda"):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        module.run(state)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0
    t0 = time.perf_counter()
    module.run(state)
    return time.perf_counter() - t0


def _flatten(value: Any, prefix: str, out: Dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _flatten(v, f"{prefix}[{i}]", out)
    else:
        out[prefix] = value


def _as_tensor(value: Any) -> torch.Tensor:
    """Python numbers and 0-d tensors compare as float64 scalars (a fix may turn a float into a tensor)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        if value.dim() == 0 and value.is_floating_point():
            return value.to(torch.float64)
        return value
    if isinstance(value, bool):
        return torch.tensor(value)
    if isinstance(value, (int, float)):
        return torch.tensor(float(value), dtype=torch.float64)
    try:
        import numpy as np

        if isinstance(value, np.ndarray):
            return torch.from_numpy(np.array(value))
        if isinstance(value, np.generic):
            return torch.tensor(float(value), dtype=torch.float64)
    except ImportError:  # pragma: no cover
        pass
    raise WorkloadError(f"cannot compare a value of type {type(value).__name__}")


def compare(
    before: Dict[str, Any],
    after: Dict[str, Any],
    tolerance: Dict[str, float],
    per_key: Optional[Dict[str, Dict[str, float]]] = None,
) -> Tuple[bool, float, str]:
    """(match, max abs difference over all values, first mismatch message).

    ``per_key`` maps a top-level key of the returned dict to its own tolerance.
    """
    per_key = per_key or {}
    flat_b: Dict[str, Any] = {}
    flat_a: Dict[str, Any] = {}
    _flatten(before, "", flat_b)
    _flatten(after, "", flat_a)
    if flat_b.keys() != flat_a.keys():
        missing = sorted(set(flat_b) ^ set(flat_a))
        return False, float("inf"), f"the forms return different keys: {missing}"
    max_diff = 0.0
    problem = ""
    for key in flat_b:
        b, a = _as_tensor(flat_b[key]), _as_tensor(flat_a[key])
        if b.shape == a.shape and b.numel():
            diff = (b.to(torch.float64) - a.to(torch.float64)).abs()
            diff = diff[~(b.to(torch.float64).isnan() & a.to(torch.float64).isnan())]
            if diff.numel():
                max_diff = max(max_diff, float(diff.max()))
        tol = per_key.get(re.split(r"[.\[]", key, maxsplit=1)[0], tolerance)
        try:
            torch.testing.assert_close(a, b, rtol=tol["rtol"], atol=tol["atol"], equal_nan=True)
        except AssertionError as exc:
            if b.shape != a.shape:
                max_diff = float("inf")
            if not problem:
                problem = f"{key}: " + str(exc).strip().splitlines()[0] + " " + " ".join(
                    line.strip() for line in str(exc).strip().splitlines()[1:4]
                )
    return not problem, max_diff, problem


def _tolerance(module: types.ModuleType, device: str) -> Dict[str, float]:
    tol = dict(module.TOLERANCE)
    if device.startswith("cuda") and isinstance(getattr(module, "TOLERANCE_CUDA", None), dict):
        tol = dict(module.TOLERANCE_CUDA)
    return {"rtol": float(tol.get("rtol", 0.0)), "atol": float(tol.get("atol", 0.0))}


def _per_key_tolerance(module: types.ModuleType) -> Dict[str, Dict[str, float]]:
    table = getattr(module, "TOLERANCE_PER_KEY", None) or {}
    return {k: {"rtol": float(v.get("rtol", 0.0)), "atol": float(v.get("atol", 0.0))} for k, v in table.items()}


# --- memory --------------------------------------------------------------------------------------


def _cuda_peak_bytes(module: types.ModuleType, device: str, size: str) -> int:
    state = _fresh_state(module, device, size)
    _seed_all(1)
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    module.run(state)
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated() - start)


def _cpu_peak_bytes(text: str, name: str, size: str) -> Tuple[int, str]:
    """Peak RSS growth of one ``run`` in a fresh interpreter (see the module docstring)."""
    payload = json.dumps({"text": text, "name": name, "size": size})
    proc = subprocess.run(
        [sys.executable, "-m", "torchlint.runtime._harness_memory"],
        input=payload, capture_output=True, text=True, timeout=600,
    )
    if proc.returncode != 0:
        raise WorkloadError(f"memory subprocess failed: {proc.stderr.strip().splitlines()[-1:]}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return int(data["peak_bytes"]), data["method"]


# --- one workload --------------------------------------------------------------------------------


@dataclass
class Timing:
    median: float
    q1: float
    q3: float
    min: float
    max: float
    samples: List[float]

    @classmethod
    def of(cls, samples: List[float]) -> "Timing":
        s = sorted(samples)
        if len(s) >= 2:
            q1, _, q3 = statistics.quantiles(s, n=4, method="inclusive")
        else:
            q1 = q3 = s[0]
        return cls(statistics.median(s), q1, q3, s[0], s[-1], samples)

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1


@dataclass
class Row:
    rule: str
    workload: str
    label: str
    kind: str = "fix"  # "fix": the real fixer's rewrite; "extra": a stated comparison of two implementations
    extra_label: str = ""
    changed: bool = False
    fixes_applied: int = 0
    match: Optional[bool] = None
    tolerance: Dict[str, float] = field(default_factory=dict)
    tolerance_per_key: Dict[str, Dict[str, float]] = field(default_factory=dict)
    max_abs_diff: Optional[float] = None
    mismatch: str = ""
    before: Optional[Timing] = None
    after: Optional[Timing] = None
    speedup: Optional[float] = None
    verdict: str = "error"
    memory_before_bytes: Optional[int] = None
    memory_after_bytes: Optional[int] = None
    memory_method: str = ""
    error: str = ""
    diff: str = ""
    profile: str = ""  # --profile: what PyTorch's profiler matcher says (runtime/profile_check.py)
    profile_check: Optional[Dict[str, Any]] = None

    def to_json(self) -> Dict[str, Any]:
        data = asdict(self)
        if self.max_abs_diff is not None and self.max_abs_diff == float("inf"):
            data["max_abs_diff"] = None
        return data


def judge(before: Timing, after: Timing) -> str:
    noise = max(before.iqr, after.iqr, NOISE_FLOOR * max(before.median, after.median))
    if abs(before.median - after.median) <= noise:
        return "same"
    return "faster" if after.median < before.median else "slower"


def bench_workload(
    workload: Workload,
    device: str,
    size: str,
    repeats: Optional[int] = None,
    warmup: Optional[int] = None,
    fixer: Fixer = real_fixer,
    memory: bool = True,
    tick: Callable[[], None] = lambda: None,
) -> Row:
    """Fix, check, time and judge one workload. Never raises for a broken workload: the row says ``error``."""
    row = Row(workload.code, workload.name, workload.label)
    try:
        after_text, applied, row.kind = make_after(workload, fixer)
        if row.kind == "extra":
            row.extra_label = str((_extra_spec(workload.text) or {}).get("label", ""))
    except Exception as exc:  # the rule is missing, the fixer failed...
        row.error = f"fixer: {type(exc).__name__}: {exc}"
        return row
    row.fixes_applied = applied
    row.changed = after_text != workload.text
    row.diff = "".join(difflib.unified_diff(
        workload.text.splitlines(keepends=True), after_text.splitlines(keepends=True),
        f"{workload.path.name} (before)",
        f"{workload.path.name} (after {'EXTRA replacements' if row.kind == 'extra' else workload.code + ' fix'})",
    ))
    if not row.changed:
        row.error = f"the {workload.code} fix did not change {workload.path.name}: the rule did not fire"
        return row
    try:
        before = load_module(workload.text, f"<{workload.code} {workload.name} before>")
        after = load_module(after_text, f"<{workload.code} {workload.name} after>")
        row.tolerance = _tolerance(before, device)
        row.tolerance_per_key = _per_key_tolerance(before)
        out_before = run_once(before, device, size)
        out_after = run_once(after, device, size)
    except Exception as exc:
        row.error = f"workload failed: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-3)}"
        return row
    row.match, row.max_abs_diff, row.mismatch = compare(out_before, out_after, row.tolerance, row.tolerance_per_key)
    if not row.match:
        row.verdict = "different results"
        return row
    if getattr(before, "NEEDS_CUDA", False) and not device.startswith("cuda"):
        row.verdict = NEEDS_CUDA
        return row
    n = repeats if repeats is not None else int(getattr(before, "REPEATS", DEFAULT_REPEATS[size]))
    w = warmup if warmup is not None else int(getattr(before, "WARMUP", DEFAULT_WARMUP[size]))
    try:
        for _ in range(w):
            timed_run(before, device, size)
            timed_run(after, device, size)
            tick()
        times_b, times_a = [], []
        for _ in range(max(1, n)):
            times_b.append(timed_run(before, device, size))
            times_a.append(timed_run(after, device, size))
            tick()
        if memory and getattr(before, "MEASURE_MEMORY", False):
            if device.startswith("cuda"):
                row.memory_before_bytes = _cuda_peak_bytes(before, device, size)
                row.memory_after_bytes = _cuda_peak_bytes(after, device, size)
                row.memory_method = "torch.cuda.max_memory_allocated during run() minus allocated at its start"
            else:
                row.memory_before_bytes, row.memory_method = _cpu_peak_bytes(workload.text, before.__file__, size)
                row.memory_after_bytes, _ = _cpu_peak_bytes(after_text, after.__file__, size)
    except Exception as exc:
        row.error = f"workload failed while timing: {type(exc).__name__}: {exc}"
        return row
    row.before, row.after = Timing.of(times_b), Timing.of(times_a)
    row.speedup = row.before.median / row.after.median if row.after.median > 0 else float("inf")
    row.verdict = judge(row.before, row.after)
    return row


# --- reporting -----------------------------------------------------------------------------------


def _fmt_time(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} us"


def _fmt_bytes(n: Optional[int]) -> str:
    if n is None:
        return ""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return ""  # pragma: no cover


def _fmt_diff(row: Row) -> str:
    if row.max_abs_diff is None:
        return "-"
    if row.max_abs_diff == float("inf"):
        return "shape"
    return "0 (bitwise)" if row.max_abs_diff == 0 else f"{row.max_abs_diff:.2e}"


def device_description(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def device_label(meta: Dict[str, Any]) -> str:
    """The device, named once: its name, plus the index where there can be several (``cuda:1``)."""
    device = meta["device"]
    return f"{meta['device_name']} ({device})" if device.startswith("cuda") else meta["device_name"]


def format_table(rows: List[Row], meta: Dict[str, Any]) -> str:
    header = ["rule / workload", "before (median ± IQR)", "after (median ± IQR)", "peak memory before -> after",
              "speed-up", "max |diff|", "tolerance", "verdict"]
    profiled = any(r.profile for r in rows)
    if profiled:
        header.append("profiler patterns (before: after the fix)")
    lines = []
    for r in rows:
        tol = "bitwise" if r.tolerance == {"rtol": 0.0, "atol": 0.0} else (
            f"rtol={r.tolerance['rtol']:g} atol={r.tolerance['atol']:g}" if r.tolerance else "-")
        if r.tolerance_per_key:
            tol += " (" + ", ".join(f"{k}: rtol={v['rtol']:g} atol={v['atol']:g}"
                                    for k, v in r.tolerance_per_key.items()) + ")"
        mem = (f"{_fmt_bytes(r.memory_before_bytes)} -> {_fmt_bytes(r.memory_after_bytes)}"
               if r.memory_before_bytes is not None else "")
        label = r.label + (" (extra)" if r.kind == "extra" else "")
        lines.append([
            label,
            f"{_fmt_time(r.before.median)} ± {_fmt_time(r.before.iqr)}" if r.before else "-",
            f"{_fmt_time(r.after.median)} ± {_fmt_time(r.after.iqr)}" if r.after else "-",
            mem,
            f"{r.speedup:.2f}x" if r.speedup is not None else "-",
            _fmt_diff(r),
            tol,
            r.verdict,
        ] + ([r.profile or "-"] if profiled else []))
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(header)]
    out = [
        f"torchlint bench on {device_label(meta)}, size {meta['size']}, torch {meta['torch_version']}, {meta['date']}",
        f"timing: median of {meta['repeats_note']} after warm-up; {NOISE_RULE}.",
        "",
        "  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip(),
        "  ".join("-" * w for w in widths),
    ]
    out += ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines]
    notes = []
    for r in rows:
        if r.error:
            notes.append(f"{r.label}: ERROR: {r.error.strip().splitlines()[0]}")
        elif r.verdict == "different results":
            notes.append(f"{r.label}: DIFFERENT RESULTS: {r.mismatch}")
        if r.verdict == NEEDS_CUDA:
            notes.append(f"{r.label}: the results match; not timed: the rewrite only changes speed on a CUDA device")
        if r.kind == "extra":
            notes.append(f"{r.label}: extra row, not a fixer rewrite: {r.extra_label or 'the after swaps the implementation'}")
        if r.memory_method:
            notes.append(f"{r.label}: peak memory = {r.memory_method}")
    if notes:
        out += [""] + notes
    return "\n".join(out) + "\n"


VERDICT_COLORS = {"faster": "tab:green", "same": "tab:gray", "slower": "tab:red"}
OTHER_COLOR = "tab:purple"


def speedup_axis_limits(values: Sequence[float]) -> Tuple[float, float]:
    """Log-axis limits symmetric about 1x, so 0.5x and 2x stand equally far from it (at least 0.5x..2x)."""
    reach = max([abs(math.log10(v)) for v in values if v > 0] + [math.log10(2)]) * 1.25
    return 10 ** -reach, 10 ** reach


def speedup_label(value: float) -> str:
    return f"{value:g}x"


def write_plot(rows: List[Row], meta: Dict[str, Any], path: Path) -> None:
    """Speed-up per workload on a log axis (bars grow up from 1x when faster, down when slower), coloured
    by verdict with a legend, and beside it the peak memory before and after where it was measured."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
    except ImportError as exc:
        raise PlotUnavailable(
            f"--plot needs matplotlib, which is not installed: pip install matplotlib ({exc})"
        ) from None
    shown = [r for r in rows if r.speedup is not None]
    with_memory = [r for r in shown if r.memory_before_bytes is not None and r.memory_after_bytes is not None]
    panels = 2 if with_memory else 1
    fig, axes = plt.subplots(1, panels, figsize=(max(6.0, 1.1 * len(shown) + 2) + 3.5 * (panels - 1), 4.8),
                             gridspec_kw={"width_ratios": [max(len(shown), 1), max(len(with_memory), 1)][:panels]},
                             squeeze=False)
    ax = axes[0][0]
    labels = [r.label + (" (extra)" if r.kind == "extra" else "") for r in shown]
    values = [r.speedup for r in shown]
    # error bars from the IQRs: speed-up at (before q1 / after q3) .. (before q3 / after q1)
    low = [r.speedup - r.before.q1 / r.after.q3 for r in shown]  # type: ignore[union-attr]
    high = [r.before.q3 / r.after.q1 - r.speedup for r in shown]  # type: ignore[union-attr]
    bars = ax.bar(range(len(shown)), [v - 1 for v in values], bottom=1,
                  color=[VERDICT_COLORS.get(r.verdict, OTHER_COLOR) for r in shown])
    ax.errorbar(range(len(shown)), values, yerr=[[max(0, v) for v in low], [max(0, v) for v in high]],
                fmt="none", ecolor="black", capsize=3, linewidth=0.8)
    ax.set_yscale("log")
    bottom, top = speedup_axis_limits(values)
    ax.set_ylim(bottom, top)
    ticks = [t for t in (0.1, 0.2, 0.25, 0.5, 1, 2, 4, 5, 10) if bottom <= t <= top]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: speedup_label(v)))
    for bar, value in zip(bars, values):
        ax.annotate(f"{value:.2f}x", (bar.get_x() + bar.get_width() / 2, value), ha="center",
                    va="bottom" if value >= 1 else "top", fontsize=8,
                    xytext=(0, 3 if value >= 1 else -3), textcoords="offset points")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(shown)))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("speed-up, before / after median (log scale)")
    used = [v for v in VERDICT_COLORS if any(r.verdict == v for r in shown)]
    handles = [Patch(color=VERDICT_COLORS[v], label=v) for v in used]
    if any(r.verdict not in VERDICT_COLORS for r in shown):
        handles.append(Patch(color=OTHER_COLOR, label="other"))
    ax.legend(handles=handles, title="after vs before:", fontsize=7, title_fontsize=7, loc="lower left",
              bbox_to_anchor=(0.0, 1.0), ncol=len(handles) + 1, frameon=False)
    broken = [r.label for r in rows if r.speedup is None]
    if broken:
        ax.text(0.01, 0.02, "not timed: " + ", ".join(broken), transform=ax.transAxes, va="bottom", fontsize=7,
                color="tab:red")
    if with_memory:
        mem = axes[0][1]
        xs = range(len(with_memory))
        mib = 1024 * 1024
        mem.bar([x - 0.2 for x in xs], [r.memory_before_bytes / mib for r in with_memory], width=0.4,
                color="tab:orange", label="before")
        mem.bar([x + 0.2 for x in xs], [r.memory_after_bytes / mib for r in with_memory], width=0.4,
                color="tab:blue", label="after")
        mem.set_xticks(list(xs))
        mem.set_xticklabels([r.label for r in with_memory], rotation=30, ha="right", fontsize=8)
        mem.set_ylabel("peak memory of one run (MiB)")
        mem.legend(fontsize=7)
    fig.suptitle(f"torchlint fixes on {device_label(meta)} ({meta['size']}, torch {meta['torch_version']}, "
                 f"{meta['date'][:10]})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


class PlotUnavailable(Exception):
    pass


# --- command line --------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="torchlint bench",
        description=(
            "For every fixture workload fixtures/<CODE>/bench_*.py (the slow form), produce the fast form with "
            "torchlint's real fixer (only that rule, unsafe fixes included), check that both give the same "
            "results at the workload's stated tolerance, then time both and report the speed-up."
        ),
        epilog=(
            f"Verdicts: faster, same, slower, different results (a failure), error. {NOISE_RULE}. "
            "Exit code 1 when a rewrite gives different results, a workload is broken or its rule does not fire, "
            "or (with --require-faster) a rewrite is slower; 2 for usage errors. "
            "The workload contract is documented in torchlint/runtime/harness.py."
        ),
    )
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                   help="auto: CUDA when available (default: %(default)s)")
    p.add_argument("--size", choices=["small", "full"], default="small",
                   help="small: seconds on a CPU (the tests); full: sized for a GPU (default: %(default)s)")
    p.add_argument("--select", action="append", default=[],
                   help="only these rules (codes or prefixes, comma separated, repeatable)")
    p.add_argument("--fixtures", type=Path, default=FIXTURES,
                   help="the fixtures folder whose bench_*.py workloads are run; their code is executed, so give "
                        "only code you trust (default: the project's)")
    p.add_argument("--repeats", type=int, help="timed runs per form (default: the workload's, else 5 small / 10 full)")
    p.add_argument("--warmup", type=int, help="untimed runs per form first (default: the workload's, else 1 / 2)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurements")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON")
    p.add_argument("--plot", type=Path, metavar="FILE.png",
                   help="also draw the speed-ups as a bar chart (needs matplotlib: torchlint[plot])")
    p.add_argument("--require-faster", action="store_true", help="exit 1 when a rewrite is slower")
    p.add_argument("--show-diff", action="store_true", help="print the fixer's diff of each workload")
    p.add_argument("--list", action="store_true", help="list the workloads and exit")
    p.add_argument("--profile", action="store_true",
                   help="also run each form once under torch.profiler and report which of PyTorch's profiler "
                        "anti-patterns (TorchTidy) the slow form triggers and whether the fix removed them")
    return p


def resolve_device(choice: str) -> str:
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: CUDA is not available in this PyTorch build or on this machine")
    return choice


class UsageError(Exception):
    pass


def exit_code(rows: List[Row], require_faster: bool) -> int:
    if any(r.verdict in ("different results", "error") for r in rows):
        return 1
    if require_faster and any(r.verdict == "slower" for r in rows):
        return 1
    return 0


def main(argv: Optional[Sequence[str]] = None, fixer: Fixer = real_fixer) -> int:
    """``torchlint bench``: returns the exit code (see the module docstring)."""
    parser = _parser()
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:  # --help or a usage error
        return int(exc.code or 0)
    try:
        device = resolve_device(args.device)
        try:  # the linter's own selector rules: codes, prefixes or ALL, each matching some rule
            select = parse_selectors(args.select, "--select")
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
        select = () if "ALL" in select else select
        if args.plot is not None and args.plot.suffix.lower() != ".png":
            raise UsageError("--plot: the file name must end with .png")
        for flag in ("repeats", "warmup"):
            value = getattr(args, flag)
            if value is not None and value < (1 if flag == "repeats" else 0):
                raise UsageError(f"--{flag}: must be at least {1 if flag == 'repeats' else 0}")
        workloads = discover(args.fixtures, select)
        if not workloads:
            raise UsageError(f"no workloads fixtures/TLNNN/bench_*.py found under {args.fixtures}"
                             + (f" for {', '.join(select)}" if select else ""))
    except UsageError as exc:
        print(f"torchlint bench: error: {exc}", file=sys.stderr)
        return 2
    if args.list:
        for w in workloads:
            print(f"{w.code}  {w.path}")
        return 0

    rows = _run_all(workloads, device, args, fixer)
    if args.profile:
        from torchlint.runtime.profile_check import add_profiles

        add_profiles(rows, workloads, device, args.size, fixer)
    meta = metadata(device, args.size, args.repeats, args.warmup)
    table = format_table(rows, meta)
    print(table, end="")
    if args.show_diff:
        for r in rows:
            print(r.diff)
    if args.json is not None:
        payload = {**meta, "noise_rule": NOISE_RULE, "command": "torchlint bench " + " ".join(argv or sys.argv[1:]),
                   "rows": [r.to_json() for r in rows], "table": table}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    if args.plot is not None:
        try:
            args.plot.parent.mkdir(parents=True, exist_ok=True)
            write_plot(rows, meta, args.plot)
        except PlotUnavailable as exc:
            print(f"torchlint bench: error: {exc}", file=sys.stderr)
            return 2
    return exit_code(rows, args.require_faster)


def _run_all(workloads: List[Workload], device: str, args: argparse.Namespace, fixer: Fixer) -> List[Row]:
    rows: List[Row] = []
    show_bar = sys.stderr.isatty()
    if not show_bar:  # piped or logged (CI): one line per workload as it starts and as it ends
        for index, w in enumerate(workloads, start=1):
            print(f"[{index}/{len(workloads)}] {w.label} ...", file=sys.stderr, flush=True)
            row = bench_workload(w, device, args.size, args.repeats, args.warmup, fixer, not args.no_memory)
            print(f"[{index}/{len(workloads)}] {w.label}: {progress_outcome(row)}", file=sys.stderr, flush=True)
            rows.append(row)
        return rows
    import click

    # One step per workload and per timed round; rounds are estimated from the defaults/--repeats.
    per = (args.repeats or DEFAULT_REPEATS[args.size]) + (args.warmup if args.warmup is not None
                                                           else DEFAULT_WARMUP[args.size])
    with click.progressbar(length=len(workloads) * (per + 1), label="torchlint bench", file=sys.stderr,
                           item_show_func=lambda item: item) as bar:
        for w in workloads:
            bar.update(0, w.label)
            done = [0]

            def tick() -> None:
                if done[0] < per:
                    done[0] += 1
                    bar.update(1, w.label)

            rows.append(bench_workload(w, device, args.size, args.repeats, args.warmup, fixer,
                                       not args.no_memory, tick))
            bar.update(per - done[0] + 1, w.label)
    return rows


def progress_outcome(row: Row) -> str:
    if row.error:
        return "error"
    if row.speedup is None:
        return row.verdict
    return f"{row.verdict} ({row.speedup:.2f}x)"


def metadata(device: str, size: str, repeats: Optional[int], warmup: Optional[int]) -> Dict[str, Any]:
    from torchlint import __version__

    if repeats is None:
        note = f"the workload's REPEATS (default {DEFAULT_REPEATS[size]}) runs"
    else:
        note = f"{repeats} runs"
    return {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "device": device,
        "device_name": device_description(device),
        "size": size,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "torchlint_version": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "threads": torch.get_num_threads(),
        "repeats": repeats,
        "warmup": warmup,
        "repeats_note": note,
        "hostname_cpu_count": os.cpu_count(),
    }


if __name__ == "__main__":
    sys.exit(main())
