"""TL707: a CUDA training script that never compiles its model."""

from __future__ import annotations

import ast
from typing import Optional

from torchlint.facts.index import AstIndex, AstLoopInfo, dotted_name, keyword_value
from torchlint.config import Settings
from torchlint.facts.devices import cuda_evidence
from torchlint.facts.script import loop_header
from torchlint.rule import IndexContext, Rule
from torchlint.facts.text_gates import TRAINING_WORDS, may_train, may_use_cuda

COMPILE_SINCE = (2, 0)
# Compilers of a model or a step, called or used as decorators: any of them means the author has chosen.
_COMPILERS = ("torch.compile", "torch._dynamo.optimize", "torch.jit.script", "torch.jit.trace")
# Modules whose use means compilation is configured somewhere (`torch._inductor.config`, `torch.compiler`'s
# markers), or handed to a framework whose launch configuration can compile (accelerate's `dynamo_backend`).
_COMPILE_MODULES = ("torch._dynamo", "torch._inductor", "torch.compiler", "accelerate", "thunder", "torch_tensorrt")
_COMPILE_ATTRIBUTES = ("torch._dynamo", "torch._inductor", "torch.compiler", "torch.jit.script", "torch.jit.trace")
# Keywords that hand the choice to a framework: `Trainer(compile=True)`, `TrainingArguments(torch_compile=...)`.
_COMPILE_KEYWORDS = ("compile", "torch_compile")


class NotCompiled(Rule):
    """## What it does
    Flags a CUDA training script (a file that puts work on a CUDA device and has a training loop that steps
    an optimizer and runs `backward()` in its body) in which nothing is compiled with `torch.compile`. It reports once per file, on the header
    of the first such loop.

    Anything compiled counts, in any spelling: `model = torch.compile(model)`, `model.compile()`, `@torch.compile`
    on the model's class, its `forward` or the step function, `torch.compile(train_step)`, `from torch import
    compile`, and the older compilers `torch._dynamo.optimize(...)`, `torch.jit.script` and `torch.jit.trace`.
    So does a choice made elsewhere: a `.compile` setting read (`if args.compile:`, `cfg.get("compile")`,
    `getattr(args, "compile")`), a `compile=` or
    `torch_compile=` argument passed to a framework, `torch._inductor` / `torch._dynamo` / `torch.compiler`
    used, or `accelerate` imported (its launch configuration can compile the model).

    Silent in files without a training loop that steps an optimizer and runs a backward pass (model
    definitions, a profiler that times `backward()` of layers, a loop whose step is left to a helper such as
    a loss scaler, a library that steps optimizers in a backward hook), without a
    sign of CUDA, in tests, and for a configured `torch-version` before 2.0. Silent where the model is built
    elsewhere, so that the choice is made there: the loop runs a model its function receives
    (`def train_one_epoch(model, loader, ...)`) and nothing in the file calls that function, or the model
    is rebound to what a function of another project returns for it (`model = parallelize_model(model,
    mesh, args)`, which may compile it). Silent too where the file
    differentiates a backward pass (`torch.autograd.grad(..., create_graph=True)`, `backward(create_graph=True)`:
    gradient penalties, second-order methods): `torch.compile`'s AOTAutograd raises "does not currently
    support double backward" there (torch 2.13 too).

    This rule is **off by default** (opt in with `--extend-select TL707` or `select = ["ALL"]`): compiling costs
    seconds to minutes at start-up and again on every recompilation (new shapes, a changed Python value), some
    models break the graph or fail to compile, and short runs, debugging sessions and dynamic-shape models are
    often faster without it; a project may have declined it on purpose.

    ## Why is this slow?
    In eager mode every operation is its own kernel launch, reading its inputs from and writing its output
    to GPU memory. `torch.compile` traces the model into graphs and generates fused kernels (with
    TorchInductor's Triton backend on CUDA): elementwise chains, normalisations and activations run as one
    kernel, intermediate tensors stay in registers, and Python overhead per operation disappears. PyTorch
    2.0's launch measured training 43% faster on average over 163 open-source models on an A100 (Hugging
    Face, timm and TorchBench); nanoGPT's step went from 250 ms to 135 ms.

    ## Example
    ```python
    model = GPT(config).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for x, y in loader:
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    model = GPT(config).cuda()
    model = torch.compile(model)  # or model.compile(), which keeps the module's state_dict keys
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for x, y in loader:
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    ```
    Keep the first steps out of any timing: they compile. Pass `dynamic=True` (or mark dynamic dimensions)
    where shapes change from step to step, and try `mode="max-autotune"` for the last few percent.

    ## Fix safety
    No fix: compiling is not a mechanical rewrite. `torch.compile(model)` returns an `OptimizedModule` whose
    `state_dict()` keys start with `_orig_mod.` (`model.compile()` compiles in place and keeps them);
    data-dependent Python control flow, `.item()` and unsupported operations break the graph; numerics differ
    at the level of rounding (fused kernels reorder reductions); and the first steps, and each
    recompilation, take seconds. Verify the loss curve and the checkpoints after turning it on.

    ## PyTorch versions
    `torch.compile` exists since 2.0; `nn.Module.compile()`, which compiles in place, came in a later 2.x
    release (torch 2.13 has it). Before 2.0, `torch._dynamo.optimize` was a preview. `mode="reduce-overhead"`
    adds CUDA graphs. The rule is silent for a configured `torch-version` before 2.0.
    """

    code = "TL707"
    name = "not-compiled"
    message = ("this CUDA training script never compiles its model: `model = torch.compile(model)` fuses its "
               "operations into fewer kernels (43% faster training on average over 163 models at PyTorch 2.0's "
               "launch; the first steps pay for the compilation: see the rule's docs)")
    summary = "CUDA training script whose model is never passed to `torch.compile`"
    default_enabled = False
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)
    # Text stage (may_fire): a training loop and a device, on a torch that has `torch.compile`.
    text_gate = (TRAINING_WORDS,)

    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        return settings.torch_version >= COMPILE_SINCE and may_train(text) and may_use_cuda(text)

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        if ctx.torch_version < COMPILE_SINCE:
            return
        loop = _first_optimizer_loop(index)
        if loop is None or cuda_evidence(index) is None or compile_evidence(index) is not None:
            return
        if any(_builds_double_backward(call.node) for call in index.calls):
            return  # torch.compile's AOTAutograd raises on a double backward (2.13 still does)
        if _model_from_another_file(index, loop) or _model_through_a_helper(index):
            return
        ctx.report(loop_header(loop))


def _builds_double_backward(call: ast.Call) -> bool:
    """``torch.autograd.grad(..., create_graph=True)``, ``loss.backward(create_graph=True)``: a gradient
    penalty or a second-order method differentiates the backward pass."""
    value = keyword_value(call, "create_graph")
    return value is not None and not (isinstance(value, ast.Constant) and not value.value)


def _model_from_another_file(index: AstIndex, loop: AstLoopInfo) -> bool:
    """The loop runs a model its function receives (``def train_one_epoch(model, loader, ...)``) and nothing
    in this file calls that function: the model is built, and compiled or not, in the file that does."""
    function = loop.function
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or index.calls_by_name.get(function.name):
        return False
    arguments = function.args
    parameters = {arg.arg for arg in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)}
    return any(isinstance(call.func, ast.Name) and call.func.id in parameters for call in loop.direct_calls)


def _model_through_a_helper(index: AstIndex) -> bool:
    """A model rebound to what a function of another project returns for it (``model =
    parallelize_model(model, mesh, args)``): that function may compile it. The model is what the file calls
    ``.parameters()`` on; torch's own wrappers (``DistributedDataParallel``) compile nothing."""
    models = {dotted_name(call.func.value) for call in (info.node for info in index.calls_by_name.get("parameters", ()))
              if isinstance(call.func, ast.Attribute)}
    models.discard(None)
    for call, target in index.assigned_to.items():
        name = dotted_name(target)
        if name not in models or not any(dotted_name(arg) == name for arg in call.args):
            continue
        qualified = index.qualified_name(call.func)
        if qualified is not None and qualified.split(".")[0] != "torch":
            return True
    return False


def _first_optimizer_loop(index: AstIndex) -> Optional[AstLoopInfo]:
    """The first training loop that steps an optimizer itself and runs a backward pass in its body: a loop
    that only calls `backward()` (a profiler of layers), a step left to a helper such as a loss scaler, and
    a loop over optimizers alone (a library stepping optimizers in a backward hook) say nothing about a
    model trained here."""
    for loop in index.loops:
        if not loop.is_training or not any(index.is_optimizer_step(call, loop.function) for call in loop.direct_calls):
            continue
        if any(index.is_backward_call(info.node) for info in index.calls_in(loop.node)):
            return loop
    return None
def compile_evidence(index: AstIndex) -> Optional[ast.AST]:
    """The first sign that the file compiles something or leaves compiling to a setting or a framework
    (the module for an import), or None."""
    for target in index.imports.values():
        if target in _COMPILERS or any(target == m or target.startswith(m + ".") for m in _COMPILE_MODULES):
            return index.tree
    for attribute in index.attributes_named("compile"):
        qualified = index.qualified_name(attribute)
        # `re.compile` and the like are other modules' functions; an object's `.compile` is a model's
        # method or a setting (`args.compile`)
        if qualified is None or qualified.startswith("torch."):
            return attribute
    for info in index.calls:
        call = info.node
        if index.qualified_name(call.func) in _COMPILERS:
            return call
        if any(keyword.arg in _COMPILE_KEYWORDS for keyword in call.keywords):
            return call
        # a setting read by its key: `cfg.get("compile", False)`, `getattr(args, "compile")`
        if any(isinstance(arg, ast.Constant) and arg.value in _COMPILE_KEYWORDS for arg in call.args):
            return call
    # `torch._inductor.config.x = ...`, `@torch.jit.script` (an attribute, not a call)
    for name in ("_dynamo", "_inductor", "compiler", "script", "trace"):
        for attribute in index.attributes_named(name):
            if index.qualified_name(attribute) in _COMPILE_ATTRIBUTES:
                return attribute
    return None
