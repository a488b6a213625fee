"""TL601: a convolutional training script that never lets cuDNN autotune."""

from __future__ import annotations

import ast
import re
from typing import List, Optional

from torchlint.facts.index import AstIndex, call_name
from torchlint.config import Settings
from torchlint.facts.devices import cuda_evidence
from torchlint.facts.modules import classes_building
from torchlint.facts.script import first_training_loop, loop_header
from torchlint.rule import IndexContext, Rule
from torchlint.facts.text_gates import TRAINING_WORDS, any_of, lowered, may_train, may_use_cuda

_CONV = re.compile(r"^(Lazy)?Conv(Transpose)?[123]d$")
_MODEL_ZOOS = ("torchvision.models.", "timm.")
_ZOO_FACTORY = re.compile(r"^[a-z]\w*$")
_NOT_FACTORIES = {"get_model_weights", "get_weight", "list_models", "list_pretrained", "is_model", "load_checkpoint"}
# Detection and optical-flow models take inputs of a different size every step: autotuning would re-run.
_VARIABLE_SHAPE_ZOOS = ("torchvision.models.detection.", "torchvision.models.optical_flow.")
# Frameworks that set cudnn.benchmark themselves (from a Trainer argument or a config key).
_FRAMEWORKS = {"lightning", "pytorch_lightning", "detectron2", "mmengine", "mmcv", "mmdet", "ultralytics"}
# Any mention of cuDNN (code or comment) or of a `benchmark=` option: the author or a framework decides.
# `cudnn|\bbenchmark\s*=`, any case: see `_decided`.
_BENCHMARK_OPTION_TEXT = re.compile(r"\bbenchmark\s*=", re.IGNORECASE)


def _decided(text: str) -> bool:
    """A case-insensitive regex scans slowly; on the lowered text two substring tests answer nearly always.
    (Every character ``re`` matches to a letter of "cudnn" or "benchmark" ignoring case lowers to it.)"""
    low = lowered(text)
    if "cudnn" in low:
        return True
    return "benchmark" in low and bool(_BENCHMARK_OPTION_TEXT.search(text))


class CudnnBenchmarkOff(Rule):
    """## What it does
    Flags a training script that trains convolutions on a CUDA device and never sets
    `torch.backends.cudnn.benchmark = True`. Convolutions are found as `nn.Conv1d/2d/3d`,
    `nn.ConvTranspose*d` and `nn.LazyConv*d` layers built in the file, or a `torchvision.models` /
    `timm.create_model` model it builds. It reports once per file: on the line that builds the model
    (a call of a class of the file that holds convolutions, or the model-zoo call), else on the first
    training loop.

    Silent where the file mentions cuDNN at all (it sets `cudnn.benchmark` or `cudnn.deterministic`, or a
    comment explains why not), passes a `benchmark=` option (Lightning's `Trainer(benchmark=...)`), imports
    a framework that sets it from its configuration (Lightning, detectron2, MMEngine/MMCV, Ultralytics),
    builds torchvision's detection or optical-flow models (their input sizes vary), and in tests, in files
    without a training loop (model definitions) and in files with no sign of CUDA.

    This rule is **off by default** (opt in with `--extend-select TL601` or `select = ["ALL"]`): whether
    autotuning pays depends on the input shapes, which the rule cannot see.

    ## Why is this slow?
    For each convolution cuDNN offers several algorithms (implicit GEMM, FFT, Winograd...), whose speed
    depends on the layer shape, batch size and GPU. By default PyTorch picks one with cuDNN's heuristics.
    With `cudnn.benchmark = True`, the first time a convolution sees a new input shape, cuDNN times the
    candidates and caches the fastest for that shape: later steps with the same shape use it. For
    convolutional networks with fixed input sizes this commonly makes each step 10-30% faster, sometimes
    more, for a one-time cost of a few seconds.

    ## Example
    ```python
    model = torchvision.models.resnet50().cuda()
    for images, labels in loader:
        loss = criterion(model(images.cuda()), labels.cuda())
        ...
    ```

    ## Use instead
    ```python
    torch.backends.cudnn.benchmark = True  # input shapes are fixed: let cuDNN time its algorithms once
    model = torchvision.models.resnet50().cuda()
    for images, labels in loader:
        loss = criterion(model(images.cuda()), labels.cuda())
        ...
    ```

    When not to: if input shapes change from step to step (variable image sizes in detection, variable
    sequence lengths through 1-D convolutions, multi-scale training, a last batch of another size is fine),
    each new shape triggers a new round of timing and the run gets slower, and the autotuner's workspace
    can raise peak memory. Benchmarking can also pick different algorithms from run to run, so results are
    not bitwise reproducible; keep it off where you need determinism, and say so in a comment (any mention
    of cuDNN silences this rule).

    ## Fix safety
    No fix: whether the shapes are fixed is not visible in the source, and the setting belongs once at
    the script's entry point.

    ## PyTorch versions
    `torch.backends.cudnn.benchmark` exists in every supported version and defaults to False. Since
    PyTorch 1.12 cuDNN convolutions may use TF32 on Ampere and newer GPUs independently of this setting
    (`torch.backends.cudnn.allow_tf32`, default True). PyTorch Lightning's `Trainer(benchmark=None)`
    leaves the global setting unchanged in Lightning 2.x (older Lightning versions set it to False).
    """

    code = "TL601"
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)
    name = "cudnn-benchmark-off"
    message = (
        "convolutions train on CUDA without `torch.backends.cudnn.benchmark = True`: cuDNN uses heuristics "
        "instead of timing its algorithms once per input shape; set it at startup if input shapes are fixed"
    )
    summary = "Convolutional CUDA training without torch.backends.cudnn.benchmark = True"
    default_enabled = False
    # Text stage (may_fire): convolutions or a model zoo, a training loop, a device, no cuDNN decision.

    text_gate = (("Conv", "torchvision", "timm"), TRAINING_WORDS)

    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        return (any_of(text, "Conv", "torchvision", "timm") and may_train(text) and may_use_cuda(text)
                and not _decided(text))

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        if _decided(ctx.source):
            return
        if any(target.split(".")[0] in _FRAMEWORKS for target in index.imports.values()):
            return
        loop = first_training_loop(index)
        if loop is None or cuda_evidence(index) is None:
            return
        anchor = _conv_model_anchor(index)
        if anchor is None:
            return
        ctx.report(anchor if anchor is not index.tree else loop_header(loop))


def _conv_model_anchor(index: AstIndex) -> Optional[ast.AST]:
    """Where the file builds a convolutional model: the model-zoo call or the first instantiation of a
    class of this file that holds convolutions; the module when there are convolutions but no such line
    (the caller then points at the training loop); None without convolutions, or with a model zoo whose
    inputs vary in size."""
    builds: List[ast.Call] = []
    conv_layers: List[ast.Call] = []
    for info in index.calls:
        call = info.node
        func = call.func.value if isinstance(call.func, ast.Subscript) else call.func
        qualified = index.qualified_name(func) or ""
        if qualified.startswith(_VARIABLE_SHAPE_ZOOS):
            return None
        last = qualified.rsplit(".", 1)[-1]
        if qualified.startswith("torch.nn.") and _CONV.match(last):
            conv_layers.append(call)
        elif (isinstance(call.func, ast.Subscript) and qualified.startswith("torchvision.models")) or (
            qualified.startswith(_MODEL_ZOOS) and _ZOO_FACTORY.match(last) and last not in _NOT_FACTORIES
            and (qualified.startswith("torchvision.") or last == "create_model")
        ):  # `models.resnet50()`, `models.__dict__[args.arch]()`, `timm.create_model(...)`
            (conv_layers if index.in_class(call) else builds).append(call)  # inside a class: the class is the model
    if not builds and not conv_layers:
        return None
    conv_classes = classes_building(index, conv_layers)
    build_ids = {id(call) for call in builds}
    for info in index.calls:
        call = info.node
        if id(call) in build_ids:
            return call
        if (call_name(call) in conv_classes and isinstance(call.func, ast.Name) and not index.in_class(call)):
            return call
    if conv_layers and not conv_classes:  # nn.Sequential(nn.Conv2d(...), ...) built in a function or at top level
        statement = index.enclosing_statement(conv_layers[0])
        return statement if statement is not None else index.tree
    return index.tree
