"""The per-tensor (loop) path of runtime.AdamW, one version alone in its process: per-step time and page faults.

    python benchmarks/adamw_loop_alone.py OTHER_CHECKOUT other|this [steps]

``other`` loads ``runtime/adamw.py`` from another checkout (e.g. the commit before a change), ``this`` the
installed torchlint. 8 parameters of 4M fp32 elements, ``foreach=False``, on the CPU. Run each version in its
own process: two optimizers alive in one process share the allocator and hide its page faults."""
import importlib.util, resource, statistics, sys, time
import torch
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path); mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod); return mod
mod = load(sys.argv[1] + "/runtime/adamw.py", "adamw_before") if sys.argv[2] == "other" else __import__("torchlint.runtime.adamw", fromlist=["AdamW"])
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 30
torch.manual_seed(0)
ps = [torch.nn.Parameter(torch.randn(4 * 1024 * 1024)) for _ in range(8)]
for p in ps: p.grad = torch.randn_like(p)
opt = mod.AdamW(ps, lr=1e-3, weight_decay=0.01, foreach=False)
for _ in range(3): opt.step()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt; ts = []
for _ in range(steps):
    t = time.perf_counter(); opt.step(); ts.append(time.perf_counter() - t)
f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
print(f"{sys.argv[2]:7} {statistics.median(ts)*1000:7.1f} ms/step  {(f1-f0)/steps:9.0f} page faults/step")
