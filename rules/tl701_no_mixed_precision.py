"""TL701: a CUDA training loop that runs entirely in float32."""

from __future__ import annotations

import re

from torchlint.config import Settings
from torchlint.facts.devices import cuda_evidence, mixed_precision_evidence
from torchlint.facts.script import first_training_loop, loop_header
from torchlint.rule import IndexContext, Rule
from torchlint.facts.text_gates import TRAINING_WORDS, lowered, may_train, may_use_cuda

# Any word about reduced precision (code, flags or comments, in any case): the author has considered it,
# or a flag or configuration decides it elsewhere (`args.amp`, `cfg.SOLVER.AMP`, `use_fp16`), or a framework
# does. Plain substring searches on the lowered text: a case-insensitive alternation is ten times slower.
_PRECISION_SUBSTRINGS = ("autocast", "gradscaler", "fp16", "bf16", "float16", ".half(")
_PRECISION_PHRASES = re.compile(r"mixed.?precision|half.precision|precision\s*=")
# Double precision is a requirement, not an oversight: mixed precision is not the advice there.
# `float64|\.double\(\)|torch\.double\b|set_default_dtype|set_default_tensor_type`: see `_requires_double`.
_TORCH_DOUBLE_TEXT = re.compile(r"torch\.double\b")


def _requires_double(text: str) -> bool:
    if any(word in text for word in ("float64", ".double()", "set_default_dtype", "set_default_tensor_type")):
        return True
    return "torch.double" in text and bool(_TORCH_DOUBLE_TEXT.search(text))


def mentions_reduced_precision(text: str) -> bool:
    low = lowered(text)
    if any(word in low for word in _PRECISION_SUBSTRINGS):
        return True
    if "precision" in low and _PRECISION_PHRASES.search(low):
        return True
    return _mentions_amp(low)


def _mentions_amp(low: str) -> bool:
    """``amp`` as a word or a part of a snake_case name (``use_amp``, ``amp_dtype``), not ``sample``."""
    start = low.find("amp")
    while start >= 0:
        before, after = low[start - 1:start], low[start + 3:start + 4]
        if not before.isalnum() and not after.isalnum():
            return True
        start = low.find("amp", start + 3)
    return False


# Sharded or tensor-parallel training takes its precision from the sharding policy (FSDP's `MixedPrecision`,
# set where the model is wrapped); reinforcement-learning agents are small models bound by kernel launches
# and by the environment, where reduced precision adds casts and gains nothing.
_SHARDED_WORDS = ("FSDP", "FullyShardedDataParallel", "fully_shard", "parallelize_module", "init_device_mesh",
                  "DeviceMesh")
_RL_IMPORT = re.compile(r"^[ \t]*(?:import|from)[ \t]+(?:gym|gymnasium|envpool|pettingzoo|procgen|isaacgym|dm_control)\b",
                        re.MULTILINE)


def decided_elsewhere(text: str) -> bool:
    if any(word in text for word in _SHARDED_WORDS):  # substring tests: faster than a regex alternation
        return True
    return any(word in text for word in ("gym", "envpool", "pettingzoo", "procgen", "dm_control")) and bool(
        _RL_IMPORT.search(text))


class NoMixedPrecision(Rule):
    """## What it does
    Flags a training script whose training loop runs on a CUDA device entirely in float32: the file moves
    the model or its batches to CUDA (`.cuda()`, `.to(device)`, `device="cuda"`) and nothing in it uses
    reduced precision (no `torch.autocast` / `torch.amp.autocast` / `torch.cuda.amp.autocast`, no
    `GradScaler`, no `.half()` / `.bfloat16()` model, no `dtype=torch.bfloat16`). It reports once per file,
    on the first training loop.

    Silent where precision is decided elsewhere or on purpose: a framework that manages it is imported and used
    (Lightning, accelerate, DeepSpeed, apex, composer) or any `precision=` argument is passed; the file
    mentions AMP, fp16, bf16 or mixed precision at all (a flag such as `args.amp`, a config key such as
    `cfg.SOLVER.AMP`, or a comment about it); the code trains in float64 (`.double()`, `torch.float64`,
    `set_default_dtype`); sharded or tensor-parallel training (FSDP, `fully_shard`, `parallelize_module`:
    the sharding policy sets the precision where the model is wrapped); reinforcement-learning scripts
    (they import `gym`, `gymnasium`, `envpool`, `pettingzoo`, `procgen`, `isaacgym` or `dm_control`: small
    networks bound by kernel launches and by the environment); and in tests, in files without a training loop (model definitions), and in files
    with no sign of CUDA.

    This rule is **off by default** (opt in with `--extend-select TL701` or `select = ["ALL"]`): mixed
    precision changes numerics, and many scripts stay in float32 on purpose (small models that are bound by
    kernel launches, not arithmetic, such as most reinforcement-learning agents).

    ## Why is this slow?
    On GPUs with tensor cores (Volta and newer), matrix multiplications and convolutions in float16 or
    bfloat16 run several times faster than in float32, and activations stored for the backward pass take
    half the memory (so larger batches fit). `torch.autocast` runs each op in the precision that suits it:
    matmuls and convolutions in reduced precision, reductions, softmax and losses in float32. Typical
    training speed-ups are 1.5x to 3x for convolutional and transformer models.

    ## Example
    ```python
    model = Net().cuda()
    for x, y in loader:
        x, y = x.cuda(), y.cuda()
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    model = Net().cuda()
    scaler = torch.amp.GradScaler("cuda")  # float16 needs loss scaling; bfloat16 does not
    for x, y in loader:
        x, y = x.cuda(), y.cuda()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```
    On Ampere and newer GPUs (A100, H100, RTX 30xx and later), `dtype=torch.bfloat16` has float32's
    range, so it needs no `GradScaler`: wrap the forward pass and the loss in
    `torch.autocast("cuda", dtype=torch.bfloat16)` and keep the rest of the loop unchanged.

    ## Fix safety
    No fix: mixed precision is not a mechanical rewrite. float16 has a narrow range, so gradients underflow
    without loss scaling: the `GradScaler` must wrap `backward()`, `step()` and `update()`, and gradient
    clipping needs `scaler.unscale_(optimizer)` first. Custom ops, losses computed outside the autocast
    region, and numerically sensitive code (large reductions, `exp`, custom normalisations) may need to stay
    in float32 (`torch.autocast(..., enabled=False)` around them). Results change at the level of rounding,
    and a few models diverge without tuning. Verify the loss curve against a float32 run.

    ## PyTorch versions
    `torch.cuda.amp.autocast` and `torch.cuda.amp.GradScaler` exist since 1.6; `torch.autocast(device_type)`
    since 1.10, with bfloat16 on CUDA. `torch.amp.GradScaler("cuda")` exists since 2.3, and the
    `torch.cuda.amp.autocast` / `torch.cuda.amp.GradScaler` spellings are deprecated in favour of
    `torch.amp.*` since 2.4. The rule is silent for a configured `torch-version` before 1.6.
    """

    code = "TL701"
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)
    name = "no-mixed-precision"
    message = (
        "this CUDA training loop runs entirely in float32; mixed precision (`torch.autocast(\"cuda\", "
        "dtype=torch.bfloat16)`, or float16 with `torch.amp.GradScaler`) is typically 1.5-3x faster on "
        "tensor-core GPUs (it changes numerics: see the rule's docs)"
    )
    summary = "CUDA training loop in full float32 (no autocast, half/bf16 model or precision setting)"
    default_enabled = False
    # Text stage (may_fire): a training loop and a device, and no word about precision.

    text_gate = (TRAINING_WORDS,)

    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        return (settings.torch_version >= (1, 6) and may_train(text) and may_use_cuda(text)
                and not _requires_double(text) and not decided_elsewhere(text)
                and not mentions_reduced_precision(text))

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        if ctx.torch_version < (1, 6):
            return
        source = ctx.source
        if _requires_double(source) or decided_elsewhere(source) or mentions_reduced_precision(source):
            return
        loop = first_training_loop(index)
        if loop is None or cuda_evidence(index) is None or mixed_precision_evidence(index) is not None:
            return
        message = self.message
        if ctx.torch_version < (1, 10):  # no torch.autocast and no bfloat16 autocast on CUDA yet
            message = message.replace(
                "`torch.autocast(\"cuda\", dtype=torch.bfloat16)`, or float16 with `torch.amp.GradScaler`",
                "float16 with `torch.cuda.amp.autocast` and `torch.cuda.amp.GradScaler`",
            )
        elif ctx.torch_version < (2, 3):
            message = message.replace("torch.amp.GradScaler", "torch.cuda.amp.GradScaler")
        ctx.report(loop_header(loop), message=message)

