"""The table of benchmarks/gpu_proof.sh: its harness and bench_optim results as one table, printed and
written to RESULTS/gpu_proof_<device>_<date>.txt with the date, the device's name and the torch and CUDA
versions (and the raw results beside it as .json).

    python benchmarks/gpu_proof_table.py WORK DEVICE RESULTS SECONDS
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any, List


def _speedup(row: Any) -> str:
    return f"{row['speedup']:.2f}x" if row.get("speedup") else "-"


def _ms(timing: Any) -> str:
    return f"{timing['median'] * 1000:.2f}" if timing else "-"


TORCH_FOREACH = "torch foreach=True"  # bench_optim's reference variant: torch.optim.AdamW(foreach=True)


def main(argv: List[str]) -> int:
    work, device, results, seconds = Path(argv[0]), argv[1], Path(argv[2]), int(argv[3])
    import torch

    from torchlint import __version__

    harness = json.loads((work / "harness.json").read_text()) if (work / "harness.json").exists() else {}
    name = torch.cuda.get_device_name(0) if device == "cuda" and torch.cuda.is_available() else "CPU"
    today = dt.date.today().isoformat()
    lines = [
        f"GPU proof ({device}) {dt.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"device: {name} | torch {torch.__version__} | CUDA {torch.version.cuda or 'none'} | "
        f"torchlint {__version__} | Python {sys.version.split()[0]} | {seconds} s in all",
        f"command: benchmarks/gpu_proof.sh --device {device}",
        "",
        "| what | workload or shapes | before ms | after ms | speed-up | verdict | profiler patterns |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    rows = harness.get("rows", [])
    for row in rows:
        problem = row["error"] or row["mismatch"]
        verdict = row["verdict"] + (f" ({problem})" if problem else "")
        lines.append(f"| {row['rule']} fix | {row['workload']} | {_ms(row.get('before'))} | {_ms(row.get('after'))} "
                     f"| {_speedup(row)} | {verdict} | {row.get('profile') or '-'} |")
    failed = (work / "failed").read_text().split("\n") if (work / "failed").exists() else []
    for entry in filter(None, failed):
        step, rc = entry.split()
        why = "cut short by its time limit" if rc in ("124", "137") else f"exit code {rc}"
        lines.append(f"| {step} | {why} | - | - | - | - | - |")
    optim = json.loads((work / "optim.json").read_text()) if (work / "optim.json").exists() else {}
    for shapes, variants in optim.get("results_ms_per_step", {}).items():
        reference = variants.get(TORCH_FOREACH)
        for variant, ms in variants.items():
            lines.append(f"| AdamW step | {shapes}: {variant} | {reference:.3f} | {ms:.3f} | {reference / ms:.2f}x "
                         f"| vs {TORCH_FOREACH} | - |")
    if not optim:
        lines.append("| AdamW step | bench_optim gave no results | - | - | - | - | - |")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    results.mkdir(parents=True, exist_ok=True)
    out = results / f"gpu_proof_{device}_{today}.txt"
    out.write_text(text, encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps({"device_name": name, "harness": harness,
                                                    "bench_optim": optim}, indent=2) + "\n", encoding="utf-8")
    print(f"written to {out}", file=sys.stderr)
    return 0 if rows and optim else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
