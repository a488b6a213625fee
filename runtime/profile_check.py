"""``torchlint bench --profile``: PyTorch's own profiler as a second opinion on every rewrite.

For each workload, one ``run`` of the "before" and one of the "after" form (each after a fresh ``setup``) is
recorded under ``torch.profiler.profile(record_shapes=True, with_stack=True)``, and the profile goes to
``torch.profiler._pattern_matcher.report_all_anti_patterns`` ("TorchTidy"), which writes the anti-patterns it
matched to a JSON report. The row's cell says which of them the "before" form triggers and whether the
"after" form is free of them: ``grad zeroed: removed``, ``conv bias + BN: still there``, ``none``...

Some patterns mean nothing on a CPU, and the cell says ``needs CUDA`` for them instead of a fake pass:

- ``FP32 MatMul``: TF32 exists only on CUDA GPUs of compute capability 8.0+. On a CPU-only build the matcher
  even reports it for every CPU matmul (its check ``all(arch >= sm_80 for arch in get_arch_list())`` is true
  for an empty list), so its CPU matches are dropped.
- ``single-tensor optimizer``: on the CPU ``foreach=None`` keeps the single-tensor path by design, so the
  pattern stays whatever the code says.
- ``extra CUDA copy`` and ``unaligned fp16 matmul``: a host-to-device copy, and tensor-core alignment.

On a GPU the matcher has one blind spot of its own: it skips ``FP32 MatMul`` unless *every* architecture the
PyTorch build was compiled for is sm_80 or newer (builds that also target older GPUs never report it). The
cell then says ``fp32 matmul: skipped by the matcher`` rather than claiming the fix removed it.
"""

from __future__ import annotations

import json
import os
import tempfile
import types
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, List, Tuple

import torch

# The matcher's pattern names -> the short labels of the table.
LABELS = {
    "Extra CUDA Copy Pattern": "extra CUDA copy",
    "FP32 MatMul Pattern": "fp32 matmul",
    "Optimizer Single Tensor Pattern": "single-tensor optimizer",
    "Synchronized DataLoader Pattern": "synchronized DataLoader",
    "Gradient Set To Zero Instead of None Pattern": "grad zeroed",
    "Enabling Bias in Conv2d Followed By BatchNorm Pattern": "conv bias + BN",
    "Matrix Multiplication Dimension Not Aligned Pattern": "unaligned fp16 matmul",
}
NEEDS_CUDA = {
    "Extra CUDA Copy Pattern", "FP32 MatMul Pattern", "Optimizer Single Tensor Pattern",
    "Matrix Multiplication Dimension Not Aligned Pattern",
}
# The pattern each rule's fix is about, where the profiler has one: named in the cell even when the
# "before" form does not trigger it here (e.g. "needs CUDA").
RULE_PATTERNS = {
    "TL201": "Gradient Set To Zero Instead of None Pattern",
    "TL301": "Enabling Bias in Conv2d Followed By BatchNorm Pattern",
    "TL501": "Optimizer Single Tensor Pattern",
    "TL702": "FP32 MatMul Pattern",
    "TL703": "Matrix Multiplication Dimension Not Aligned Pattern",
}


@dataclass
class ProfileCheck:
    """What the profiler's matcher said about one workload's two forms."""

    before: List[str] = field(default_factory=list)  # pattern names matched in "before" (trusted on this device)
    after: List[str] = field(default_factory=list)
    needs_cuda: List[str] = field(default_factory=list)  # the rule's own pattern, where this device cannot judge it
    unjudged: List[str] = field(default_factory=list)  # other CUDA-only patterns the matcher reported off CUDA
    skipped: List[str] = field(default_factory=list)  # patterns the matcher skipped on this device
    error: str = ""

    def cell(self) -> str:
        """The table cell: each pattern of the "before" form and what the fix did to it."""
        if self.error:
            return f"profiler error: {self.error}"
        parts = []
        for name in self.before:
            parts.append(f"{LABELS.get(name, name)}: {'still there' if name in self.after else 'removed'}")
        for name in self.after:
            if name not in self.before:
                parts.append(f"{LABELS.get(name, name)}: new in the fixed form")
        parts += [f"{LABELS.get(name, name)}: needs CUDA" for name in self.needs_cuda]
        parts += [f"{LABELS.get(name, name)}: skipped by the matcher" for name in self.skipped]
        return "; ".join(parts) if parts else "none"


def matched_patterns(prof: Any) -> List[str]:
    """The pattern names ``report_all_anti_patterns`` writes to its JSON report for this profile."""
    from torch.profiler._pattern_matcher import report_all_anti_patterns

    with tempfile.TemporaryDirectory(prefix="torchtidy_") as folder:  # the report merges into an existing file
        report_all_anti_patterns(prof, should_benchmark=False, print_enable=False, json_report_dir=folder)
        path = os.path.join(folder, "torchtidy_report.json")
        report = json.loads(open(path, encoding="utf-8").read()) if os.path.exists(path) else {}
    names = {entry["name"] for entries in report.values() for entry in entries}
    order = list(LABELS)
    return sorted(names, key=lambda n: (order.index(n) if n in order else len(order), n))


def skipped_by_matcher(prof: Any, device: str) -> List[str]:
    """Patterns that the matcher skips on this device although they apply to it (see the module docstring)."""
    if not device.startswith("cuda"):
        return []
    from torch.profiler._pattern_matcher import FP32MatMulPattern

    capable = torch.cuda.get_device_capability(torch.device(device)) >= (8, 0)
    return ["FP32 MatMul Pattern"] if capable and FP32MatMulPattern(prof).skip else []


def profile_run(run: Callable[[], Any], device: str) -> Any:
    """One call of ``run`` under the profiler, with what the matcher needs (shapes and Python stacks)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=activities, record_shapes=True, with_stack=True) as prof:
        run()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    return prof


def check_forms(runs: Tuple[Callable[[], Any], Callable[[], Any]], device: str, rule: str) -> ProfileCheck:
    """Profile the "before" and "after" callables and compare what the matcher finds in each."""
    result = ProfileCheck()
    try:
        found = []
        for run in runs:
            prof = profile_run(run, device)
            found.append(matched_patterns(prof))
            result.skipped = sorted(set(result.skipped) | set(skipped_by_matcher(prof, device)))
    except Exception as exc:  # the matcher is a private module: say so rather than fail the bench
        result.error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        return result
    on_cuda = device.startswith("cuda")
    usable = [[n for n in names if on_cuda or n not in NEEDS_CUDA] for names in found]
    result.before, result.after = usable
    own = RULE_PATTERNS.get(rule)
    if not on_cuda:
        # The cell names the rule's own pattern as "needs CUDA"; other CUDA-only matches (the matcher's false
        # fp32-matmul reports, the CPU's single-tensor optimizers) go to the JSON details only.
        result.needs_cuda = [own] if own in NEEDS_CUDA else []
        result.unjudged = sorted({n for names in found for n in names if n in NEEDS_CUDA} - {own})
    result.skipped = [n for n in result.skipped if n not in result.before]
    return result


def profile_workload(before: types.ModuleType, after: types.ModuleType, device: str, size: str, rule: str,
                     fresh_state: Callable[[types.ModuleType, str, str], Any]) -> ProfileCheck:
    """The harness's hook: one profiled ``run`` per form, each from a fresh ``setup`` (not profiled)."""
    states = [fresh_state(module, device, size) for module in (before, after)]
    runs = (lambda: before.run(states[0]), lambda: after.run(states[1]))
    return check_forms(runs, device, rule)


def add_profiles(rows: List[Any], workloads: List[Any], device: str, size: str, fixer: Any) -> None:
    """Fill ``row.profile`` (the cell) and ``row.profile_check`` (the details, for --json) for every workload
    whose two forms gave the same results; rows that failed keep an empty cell."""
    from torchlint.runtime import harness

    by_name = {(w.code, w.name): w for w in workloads}
    for row in rows:
        workload = by_name.get((row.rule, row.workload))
        if workload is None or row.error or not row.match:
            continue
        try:
            after_text, _, _ = harness.make_after(workload, fixer)
            before = harness.load_module(workload.text, f"<{workload.code} {workload.name} before>")
            after = harness.load_module(after_text, f"<{workload.code} {workload.name} after>")
            check = profile_workload(before, after, device, size, workload.code, harness._fresh_state)
        except Exception as exc:  # a workload that ran once already should not fail here; if it does, say so
            check = ProfileCheck(error=f"{type(exc).__name__}: {exc}".splitlines()[0])
        row.profile = check.cell()
        row.profile_check = asdict(check)
