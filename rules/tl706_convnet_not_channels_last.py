"""TL706: a convolutional model trained in mixed precision on CUDA in the default NCHW layout."""

from __future__ import annotations

import ast
import re
from typing import Optional

from torchlint.facts.index import AstIndex, AstLoopInfo, call_name
from torchlint.config import Settings
from torchlint.facts.devices import cuda_evidence, reduced_precision_calls
from torchlint.facts.modules import classes_building
from torchlint.facts.script import first_training_loop, runs_on_every_run
from torchlint.rule import IndexContext, Rule
from torchlint.facts.text_gates import TRAINING_WORDS, any_of, may_train, may_use_cuda

_CONV2D = re.compile(r"^(Lazy)?Conv(Transpose)?2d$")
# torchvision's constructors of 2-D convolutional classification and segmentation networks (its
# detection and video models are left out: variable image sizes and 3-D convolutions).
_TORCHVISION_CONVNET = re.compile(
    r"^torchvision\.models\.(?:(?:resnet|vgg|densenet|efficientnet|mobilenetv2|mobilenetv3|regnet|convnext"
    r"|shufflenetv2|squeezenet|mnasnet|googlenet|inception|alexnet|segmentation)\.)?"
    r"(?:resnet\d+|resnext\d+_\w+|wide_resnet\d+_\d+|vgg\d+(?:_bn)?|densenet\d+|efficientnet_\w+"
    r"|mobilenet_v[23]\w*|regnet_[xy]_\w+|convnext_\w+|shufflenet_v2_\w+|squeezenet1_[01]|mnasnet\d_\d+"
    r"|googlenet|inception_v3|alexnet|(?:deeplabv3|fcn|lraspp)_\w+)$")
# Every text reduced_precision_evidence can answer for holds one of these words.
_REDUCED_WORDS = ("autocast", "GradScaler", "half", "bfloat16", "float16")


class ConvnetNotChannelsLast(Rule):
    """## What it does
    Flags a training script that trains a 2-D convolutional model (`nn.Conv2d`, `nn.ConvTranspose2d` or
    their lazy forms built in the file, or a torchvision classification or segmentation convnet such as
    `torchvision.models.resnet50()`; not its transformers, detectors or video networks, nor a model
    picked by name with `get_model`) in reduced precision (autocast, a GradScaler, a `.half()` or
    bfloat16 model) on a CUDA device, and never uses `torch.channels_last` or passes a `memory_format=`
    anywhere. It reports once per file, on the line that builds the model: the first call of a class of the
    file that holds the convolutions, or the statement that builds them in the training loop's function.

    Silent in files with no training loop that runs when the script runs (a trainer class or function the
    file never calls, a loop under a flag), no sign of CUDA, or no reduced precision of their own that runs
    on every run (autocast under `if args.amp:` may train in fp32; `enabled=False` keeps fp32; a framework
    that manages precision is not enough: its layout settings are its own), in tests, and wherever the code
    names `channels_last` or a `memory_format` (the author decided, under a flag or not).

    This rule is **off by default** (opt in with `--extend-select TL706` or `select = ["ALL"]`): the gain
    depends on the layers (depthwise and grouped convolutions, odd channel counts) and on custom operations
    that may not accept channels-last tensors, which the rule cannot see.

    ## Why is this slow?
    cuDNN's Tensor Core convolution kernels for fp16 and bf16 work on NHWC data. With the default
    `torch.contiguous_format` (NCHW) PyTorch transposes activations into NHWC and back around each
    convolution, or picks slower NCHW kernels. Converting the model's weights once with
    `model.to(memory_format=torch.channels_last)` makes convolutions produce channels-last outputs that the
    next layers (BatchNorm, ReLU, pooling) keep, so the whole network runs without those transposes. The
    PyTorch memory-format tutorial measures over 22% on ResNet-50 with AMP on a V100.

    ## Example
    ```python
    model = ResNet().cuda()
    scaler = torch.cuda.amp.GradScaler()
    for images, labels in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(images.cuda()), labels.cuda())
        ...
    ```

    ## Use instead
    ```python
    model = ResNet().cuda().to(memory_format=torch.channels_last)
    scaler = torch.cuda.amp.GradScaler()
    for images, labels in loader:
        images = images.cuda(non_blocking=True).to(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(images), labels.cuda())
        ...
    ```

    The inputs follow the model's layout after the first convolution; converting them too saves that one
    transpose. Measure: a network dominated by depthwise convolutions or with channel counts that are not
    multiples of 8 may gain little, and `.view()` on a channels-last tensor may then need `.reshape()`.

    ## Fix safety
    No fix: the layout changes the strides that code after the model sees (`.view()` can fail on a
    channels-last tensor where it worked before, custom CUDA extensions may expect NCHW), which the rule
    cannot check, and the conversion belongs where the model is built.

    ## PyTorch versions
    `torch.channels_last` and `Module.to(memory_format=...)` exist from PyTorch 1.5; `torch.autocast`
    from 1.10 (`torch.cuda.amp.autocast` from 1.6). cuDNN's channels-last convolutions need cuDNN 7.6.3 or
    newer (shipped with every PyTorch 2.x build); `torch.channels_last_3d` is the layout for `Conv3d`,
    which this rule does not cover.
    """

    code = "TL706"
    name = "convnet-not-channels-last"
    message = (
        "a convolutional model trains in mixed precision on CUDA in the default NCHW layout: cuDNN's fp16/bf16 "
        "Tensor Core convolutions run on channels-last data; convert the model once with "
        "`model.to(memory_format=torch.channels_last)` (and the inputs) and measure"
    )
    summary = "Convolutional mixed-precision CUDA training without channels_last"
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)
    default_enabled = False
    text_gate = (("Conv", "torchvision"), _REDUCED_WORDS, TRAINING_WORDS)

    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        return (any_of(text, "Conv", "torchvision") and any_of(text, *_REDUCED_WORDS) and may_train(text)
                and may_use_cuda(text))

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        if _decides_layout(index):
            return
        loop = first_training_loop(index)
        if loop is None or not runs_on_every_run(index, loop.node):
            return  # a library's trainer, or training under a flag: the model it gets may be built elsewhere
        if cuda_evidence(index) is None or not any(
                runs_on_every_run(index, call) for call in reduced_precision_calls(index)):
            return
        anchor = _conv_model(index, loop)
        if anchor is not None:
            ctx.report(anchor)


def _decides_layout(index: AstIndex) -> bool:
    """The code names ``channels_last`` (an attribute, an import, a flag) or passes a ``memory_format=``."""
    if index.attributes_named("channels_last") or any(
            target.endswith("channels_last") for target in index.imports.values()):
        return True
    return any(keyword.arg == "memory_format" for info in index.calls for keyword in info.node.keywords)


def _builds_conv2d(index: AstIndex, call: ast.Call) -> bool:
    """``nn.Conv2d(...)`` (and its transposed and lazy forms), or a torchvision convnet (``resnet50()``)."""
    qualified = index.qualified_name(call.func) or ""
    if qualified.startswith("torch.nn."):
        return bool(_CONV2D.match(call_name(call) or ""))
    return bool(_TORCHVISION_CONVNET.match(qualified))


def _conv_model(index: AstIndex, loop: AstLoopInfo) -> Optional[ast.AST]:
    """Where the file builds the 2-D convolutional model it trains: the first call, outside a class, of a
    class of the file that builds convolutions; else the statement of a convolution built in the function
    of the training loop (``nn.Sequential(nn.Conv2d(...), ...)`` in ``main``); None otherwise (a helper
    that swaps a layer builds no model)."""
    layers = [info.node for info in index.calls if _builds_conv2d(index, info.node)]
    if not layers:
        return None
    classes = classes_building(index, layers)
    for info in index.calls:
        call = info.node
        if isinstance(call.func, ast.Name) and call.func.id in classes and not index.in_class(call):
            return call
    beside = next((layer for layer in layers
                   if not index.in_class(layer) and index.function_of(layer) is loop.function), None)
    return index.enclosing_statement(beside) if beside is not None else None
