"""TL303's workload: gradient accumulation under DDP with and without ``no_sync()``, two CPU processes (gloo).

    python benchmarks/ddp_no_sync.py [--accum N] [--steps N] [--json FILE]

The harness (``runtime/harness.py``) runs one process and proves fixer rewrites; TL303 has no fix and needs
two processes, so it is proved here. Each rank trains the same model on its own shard with ``accum``
micro-batches per optimizer step, three ways: no ``no_sync`` (what TL303 reports), ``no_sync()`` around the
forward and backward of the non-stepping micro-batches (the message's shape), and ``no_sync()`` around the
backward alone (TL303's second case). A DDP communication hook counts the all-reduced buckets. It checks that
the parameters after training agree across the forms within fp32 tolerance (summing gradients locally and
all-reducing once is a different order of additions than all-reducing each micro-batch) and that the counts
are 1/``accum`` of the plain form's for the right shape and unchanged for the backward-only one.
Prints one line per form and exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

WORLD = 2
FORMS = ("plain", "no_sync", "backward_only")


def _counting_hook(counter, bucket):
    counter["all_reduces"] += 1
    # What DDP's default (allreduce_hook) does: average over the processes.
    fut = dist.all_reduce(bucket.buffer().div_(dist.get_world_size()), async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


def _train(form: str, accum: int, steps: int):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    model = DDP(net)  # same initial weights on every rank (DDP broadcasts rank 0's)
    counter = {"all_reduces": 0}
    model.register_comm_hook(counter, _counting_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(1 + dist.get_rank())  # each rank its own shard
    for i in range(steps * accum):
        x = torch.randn(16, 32, generator=data)
        y = torch.randn(16, 8, generator=data)
        stepping = (i + 1) % accum == 0
        if form == "plain":
            loss = nn.functional.mse_loss(model(x), y) / accum
            loss.backward()
        elif form == "no_sync":
            with contextlib.nullcontext() if stepping else model.no_sync():
                loss = nn.functional.mse_loss(model(x), y) / accum
                loss.backward()
        else:
            loss = nn.functional.mse_loss(model(x), y) / accum
            with contextlib.nullcontext() if stepping else model.no_sync():
                loss.backward()
        if stepping:
            optimizer.step()
            optimizer.zero_grad()
    return [p.detach().clone() for p in model.parameters()], counter["all_reduces"]


def _worker(rank: int, store: str, accum: int, steps: int, out: str) -> None:
    # a file store, not a TCP port: no port picked here can be taken by another process before the workers bind it
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        results = {form: _train(form, accum, steps) for form in FORMS}
        if rank == 0:
            torch.save({form: (params, count) for form, (params, count) in results.items()}, out)
        # both ranks leave together: a rank that tears gloo down while its peer still talks to it aborts
        # ("terminate called without an active exception"), seen on a loaded 2-core machine
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run(accum: int = 4, steps: int = 5) -> dict:
    """Train the three forms on two gloo processes; the parameters' largest difference and the counts."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.pt")
        store = os.path.join(tmp, "store")
        mp.spawn(_worker, args=(store, accum, steps, out), nprocs=WORLD, join=True)
        results = torch.load(out)
    plain_params, plain_count = results["plain"]
    report = {"accum": accum, "steps": steps, "forms": {}}
    for form in FORMS:
        params, count = results[form]
        diff = max((a - b).abs().max().item() for a, b in zip(params, plain_params))
        close = all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(params, plain_params))
        report["forms"][form] = {"all_reduces": count, "max_param_diff": diff, "equal_within_tolerance": close}
    forms = report["forms"]
    report["ok"] = (all(f["equal_within_tolerance"] for f in forms.values())
                    and forms["no_sync"]["all_reduces"] * 2 <= plain_count
                    and forms["no_sync"]["all_reduces"] * accum == plain_count
                    and forms["backward_only"]["all_reduces"] == plain_count)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accum", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    report = run(args.accum, args.steps)
    for form, facts in report["forms"].items():
        print(f"{form:14} all-reduced buckets {facts['all_reduces']:4d}   max |param - plain| "
              f"{facts['max_param_diff']:.2e}   equal: {facts['equal_within_tolerance']}")
    print(f"accum={report['accum']} steps={report['steps']} world=2 gloo CPU: {'ok' if report['ok'] else 'FAILED'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
