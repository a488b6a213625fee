"""Per-step time of AdamW implementations on a few parameter-shape lists.

    python -m torchlint.runtime.bench_optim [--device cpu|cuda|auto] [--steps N]
        [--warmup N] [--shapes small|all] [--threads N] [--json FILE] [--crossover]

Variants: the seed-style loop (ReferenceAdamW), our AdamW (foreach=False: the
loop, foreach=True, fused=True, and the default, which is fused wherever torch
has the kernel), torch.optim.AdamW (foreach=False, foreach=True, fused=True).
``--crossover`` instead measures our loop against our foreach path per tensor
size: the table behind ``CPU_FOREACH_MAX_NUMEL`` (the choice with fused=False). Each step is timed on its own (CUDA events on CUDA,
``time.perf_counter`` on the CPU); the variants are interleaved round-robin so
that drifting noise hits all of them alike; the median over steps is reported.

All variants of one shape set share the same parameter and gradient tensors
(each has its own optimizer state), which keeps memory at params + grads +
2-3 x params per variant. Gradients are random with a fixed seed.

``--shapes small`` (the default on the CPU, so a run stays within ~2 minutes on
2 cores) scales GPT-2 down to 2 blocks and a 4,096-token vocabulary; ``all``
(the default on CUDA) uses the full GPT-2-small parameter list.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from .adamw import AdamW, uses_fused_by_default
from .reference import ReferenceAdamW

Shape = Tuple[int, ...]


def gpt2_shapes(n_layer: int = 12, n_embd: int = 768, vocab: int = 50257, n_ctx: int = 1024) -> List[Shape]:
    """GPT-2's parameter shapes (HF GPT2Model order); defaults are GPT-2 small (124M)."""
    d = n_embd
    block = [
        (d,), (d,),  # ln_1 weight, bias
        (d, 3 * d), (3 * d,),  # attn.c_attn
        (d, d), (d,),  # attn.c_proj
        (d,), (d,),  # ln_2
        (d, 4 * d), (4 * d,),  # mlp.c_fc
        (4 * d, d), (d,),  # mlp.c_proj
    ]
    return [(vocab, d), (n_ctx, d)] + block * n_layer + [(d,), (d,)]  # wte, wpe, blocks, ln_f


def shape_sets(which: str) -> Dict[str, List[Shape]]:
    if which == "tiny":  # for the smoke test
        return {"tiny": [(8,), (4, 4), (3,)]}
    if which == "small":
        return {
            "many_small 1000x4096": [(4096,)] * 1000,
            "gpt2 2 blocks, vocab 4096": gpt2_shapes(n_layer=2, vocab=4096),
            "few_large 8x4M": [(4_000_000,)] * 8,
        }
    if which == "all":
        return {
            "many_small 1000x4096": [(4096,)] * 1000,
            "gpt2-small (124M)": gpt2_shapes(),
            "few_large 8x4M": [(4_000_000,)] * 8,
        }
    raise ValueError(f"unknown shape set {which!r}")


def variants(device: torch.device) -> Dict[str, Callable[[List[torch.Tensor]], torch.optim.Optimizer]]:
    out: Dict[str, Callable[[List[torch.Tensor]], torch.optim.Optimizer]] = {
        "seed loop (ReferenceAdamW)": lambda ps: ReferenceAdamW(ps),
        "ours foreach=False": lambda ps: AdamW(ps, foreach=False),
        "ours foreach=True": lambda ps: AdamW(ps, foreach=True),
        "torch foreach=False": lambda ps: torch.optim.AdamW(ps, foreach=False),
        "torch foreach=True": lambda ps: torch.optim.AdamW(ps, foreach=True),
    }
    fused = uses_fused_by_default(torch.zeros(1, device=device))
    if fused:  # torch 2.4+ has a CPU fused kernel too
        out["ours fused=True"] = lambda ps: AdamW(ps, fused=True)
    out["ours default" + (" (fused)" if fused else " (foreach/loop)")] = lambda ps: AdamW(ps)
    if fused:
        out["torch fused=True"] = lambda ps: torch.optim.AdamW(ps, fused=True)
    return out


# The per-tensor sizes of the crossover table in adamw.py (numel, count): about the same total work each.
CROSSOVER_SHAPES = [(256, 400), (4096, 200), (8192, 100), (16384, 100), (65536, 40), (1_000_000, 8), (4_000_000, 8)]


def crossover(device: torch.device, steps: int, warmup: int) -> List[Tuple[int, int, float, float]]:
    """(numel, count, loop ms, foreach ms) per size for our AdamW with fused=False: where foreach stops paying."""
    rows = []
    for numel, count in CROSSOVER_SHAPES:
        gen = torch.Generator(device="cpu").manual_seed(0)
        params = [torch.randn(numel, generator=gen).to(device).requires_grad_() for _ in range(count)]
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen).to(device)
        optimizers = {"loop": AdamW(params, foreach=False), "foreach": AdamW(params, foreach=True)}
        timer = _Timer(device)
        times: Dict[str, List[float]] = {name: [] for name in optimizers}
        for i in range(warmup + steps):
            for name, opt in optimizers.items():
                ms = timer(opt.step)
                if i >= warmup:
                    times[name].append(ms)
        rows.append((numel, count, statistics.median(times["loop"]), statistics.median(times["foreach"])))
        del params, optimizers
    return rows


class _Timer:
    """Times one call: CUDA events on CUDA (device time incl. launch gaps), perf_counter on CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def __call__(self, fn: Callable[[], object]) -> float:
        if self.cuda:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3


def bench_shape_set(
    shapes: Sequence[Shape], device: torch.device, steps: int, warmup: int, seed: int = 0
) -> Dict[str, float]:
    """Median ms/step per variant, variants interleaved round-robin."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    params = [torch.randn(s, generator=gen).to(device).requires_grad_() for s in shapes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen).to(device)
    optimizers = {name: make(params) for name, make in variants(device).items()}
    timer = _Timer(device)
    for _ in range(warmup):  # allocates state, warms caches and the allocator
        for opt in optimizers.values():
            timer(opt.step)
    times: Dict[str, List[float]] = {name: [] for name in optimizers}
    for _ in range(steps):
        for name, opt in optimizers.items():
            times[name].append(timer(opt.step))
    return {name: statistics.median(ts) for name, ts in times.items()}


def format_table(results: Dict[str, Dict[str, float]]) -> str:
    lines = [f"{'shape set':<28} {'variant':<28} {'ms/step':>10} {'/torch foreach':>15} {'seed loop/x':>12}"]
    for shape_name, per_variant in results.items():
        torch_foreach = per_variant["torch foreach=True"]
        seed_loop = per_variant["seed loop (ReferenceAdamW)"]
        for name, ms in per_variant.items():
            lines.append(
                f"{shape_name:<28} {name:<28} {ms:>10.3f} {ms / torch_foreach:>14.2f}x {seed_loop / ms:>11.2f}x"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda", "auto"], default="auto")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per variant (default 30 cpu, 50 cuda)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--shapes", choices=["small", "all", "tiny"], default=None,
                        help="default: small on the CPU, all on CUDA")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument("--crossover", action="store_true", help="measure the loop/foreach crossover instead")
    args = parser.parse_args(argv)

    device_name = args.device
    if device_name == "auto":
        device_name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device_name)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    steps = args.steps if args.steps is not None else (50 if device.type == "cuda" else 30)
    which = args.shapes or ("all" if device.type == "cuda" else "small")

    header = (
        f"AdamW step time | torch {torch.__version__} | device {device}"
        + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
        + f" | threads {torch.get_num_threads()} | shapes {which}"
        + (" (GPT-2 scaled down: 2 blocks, vocab 4096)" if which == "small" else "")
        + f" | median of {steps} steps after {args.warmup} warm-up, variants interleaved"
    )
    if args.crossover:
        print(f"AdamW loop vs foreach (ours, fused=False) | torch {torch.__version__} | device {device} | "
              f"threads {torch.get_num_threads()} | median of {steps} steps after {args.warmup} warm-up, interleaved")
        print(f"{'numel per tensor x count':>26} {'loop ms':>9} {'foreach ms':>11} {'loop/foreach':>13}")
        for numel, count, loop_ms, foreach_ms in crossover(device, steps, args.warmup):
            print(f"{numel:>15,} x {count:>6} {loop_ms:>11.2f} {foreach_ms:>11.2f} {loop_ms / foreach_ms:>13.2f}", flush=True)
        return {}
    print(header)
    print("'/torch foreach' = time / torch.optim.AdamW(foreach=True) time (lower is better); "
          "'seed loop/x' = speedup over the seed-style loop")
    print()
    results: Dict[str, Dict[str, float]] = {}
    for shape_name, shapes in shape_sets(which).items():
        results[shape_name] = bench_shape_set(shapes, device, steps, args.warmup)
        print(format_table({shape_name: results[shape_name]}), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"header": header, "results_ms_per_step": results}, f, indent=2)
    return results


if __name__ == "__main__":
    main()
    sys.exit(0)
