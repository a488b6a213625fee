"""TL302: single-process multi-GPU training with nn.DataParallel."""

from __future__ import annotations

import re

from torchlint.config import Settings
from torchlint.facts.script import first_training_loop
from torchlint.rule import IndexContext, Rule
from torchlint.facts.text_gates import TRAINING_WORDS, any_of, may_train

_DATA_PARALLEL = {
    "torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel",
    "torch.nn.parallel.data_parallel",
}
# A file that already offers a distributed path (DataParallel is then its single-node fallback).
_DISTRIBUTED_TEXT = re.compile(r"DistributedDataParallel|FullyShardedDataParallel|\bfully_shard\b|\bDDP\b")


class DataParallel(Rule):
    """## What it does
    Flags `nn.DataParallel(model)` (also `torch.nn.parallel.DataParallel` and the functional
    `torch.nn.parallel.data_parallel`) in a training script (a file with a training loop).

    Silent in files that also use `DistributedDataParallel` or FSDP (DataParallel is then the
    single-process fallback the author chose to keep), in evaluation or inference scripts (no training loop),
    and in tests.

    This rule is **off by default** (opt in with `--extend-select TL302` or `select = ["ALL"]`): moving to
    DistributedDataParallel changes how the script is launched, which a project may have declined on purpose.

    ## Why is this slow?
    DataParallel runs one Python process that drives every GPU from threads. On every step it copies the
    model's parameters and buffers from the first GPU to the others, scatters the batch from the first
    GPU, runs the replicas in threads that contend for the GIL, gathers the outputs back to the first GPU
    and computes the loss there, so the first GPU does more work and holds more memory than the others.
    It typically scales far below N times on N GPUs. `DistributedDataParallel` runs one process per GPU: no
    GIL contention, no per-step replication (each process keeps its own replica), and gradients are
    all-reduced in buckets that overlap with the backward pass. PyTorch's own documentation recommends
    DistributedDataParallel over DataParallel even on a single machine.

    ## Example
    ```python
    model = Net().cuda()
    if torch.cuda.device_count() > 1:
        model = nn.DataParallel(model)
    for x, y in loader:
        ...
    ```

    ## Use instead
    ```python
    # launched with: torchrun --nproc_per_node=NUM_GPUS train.py
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data.distributed import DistributedSampler

    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(Net().cuda(local_rank), device_ids=[local_rank])
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=per_gpu_batch, sampler=sampler)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)  # a different shuffle each epoch
        for x, y in loader:
            ...
    dist.destroy_process_group()
    ```
    The move needs: a launcher (`torchrun`, or `torch.multiprocessing.spawn`), a process group
    (`init_process_group`, NCCL on GPUs), one device per process, a `DistributedSampler` (and
    `sampler.set_epoch(epoch)` every epoch) so each process sees its own shard, a per-process batch size
    (the global batch is now `world_size` times it), and logging, checkpointing and evaluation on rank 0 only.
    A checkpoint's keys lose DataParallel's `module.` prefix only if you save `model.module.state_dict()`
    (as with DataParallel).

    ## Fix safety
    No fix: the change is to the launch and the data pipeline, not one call.

    ## PyTorch versions
    `DistributedDataParallel` with NCCL has been the recommended multi-GPU path since PyTorch 1.0; `torchrun`
    exists since 1.10 (`python -m torch.distributed.launch` before). DataParallel is still available, with
    a documentation note recommending DistributedDataParallel instead.
    """

    code = "TL302"
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)
    name = "data-parallel"
    message = (
        "`DataParallel` drives all GPUs from one process: it replicates the model and scatters each batch every "
        "step, and its threads contend for the GIL; use `DistributedDataParallel` (one process per GPU, "
        "launched with `torchrun`)"
    )
    summary = "Multi-GPU training with nn.DataParallel instead of DistributedDataParallel"
    default_enabled = False
    # Text stage (may_fire): DataParallel, a training loop, and no distributed path.

    text_gate = (("DataParallel", "data_parallel"), TRAINING_WORDS)

    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        return (any_of(text, "DataParallel", "data_parallel") and may_train(text)
                and not _DISTRIBUTED_TEXT.search(text))

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        if _DISTRIBUTED_TEXT.search(ctx.source) or first_training_loop(index) is None:
            return
        for info in index.calls_to(*_DATA_PARALLEL):  # however imported: `from torch.nn import DataParallel as DP`
            ctx.report(info.node.func)
