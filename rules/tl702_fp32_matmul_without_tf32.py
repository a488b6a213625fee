"""TL702: a script trains on CUDA in fp32 and never lets matmuls use TF32 tensor cores."""

from __future__ import annotations

import ast
import builtins
import re
import sys
from functools import partial
from typing import TYPE_CHECKING, Optional, Union

import libcst as cst

from torchlint.facts.index import (
    COMPOUND_STATEMENTS, AstIndex, AstLoopInfo, AstScope, call_arguments, is_parameter, spells_name,
)
from torchlint.config import Settings
from torchlint.facts.devices import code_strings, cpu_loop, mixed_precision_evidence, project_cuda_evidence, uses_fp64
from torchlint.facts.steps import step_facts
from torchlint.facts.script import loop_header, main_guard, training_entry_calls
from torchlint.rule import Applicability, Fix, FixAvailability, ImportRequest, IndexContext, Rewrite, Rule
from torchlint.facts.text_gates import TRAINING_WORDS, may_train, may_use_cuda, with_newline_ends

if TYPE_CHECKING:
    from torchlint.fix.analysis import FileAnalysis

# Any mention of a TF32 / fp32-precision setting, even in a comment or with a value we cannot read, means the
# author has decided (on, off, or from a flag): not ours to second-guess.
# Ways to start multiprocessing workers that do not run the script's `if __name__ == "__main__":` block.
# A statement at column 0 that is or can hold a loop outside any def (`try:`/`if ...:`/`with` around the
# loop, or a class body, which runs at import too).
_TOP_LOOP_TEXT = re.compile(r"(?m:^(?:for|while|if|try|with|match|class)\b)")
_TOP_STATEMENT_STARTS = ("for", "while", "if", "try", "with", "match", "class")
# A module-level statement that may call a function of the file (`train()` at the end of a notebook):
# anything at column 0 but a def or an import (a def's defaults run in the def's own scope to the index).
_TOP_CALL_TEXT = re.compile(r"(?m:^(?!(?:def|async|import|from)\b)[A-Za-z_@(\[])")
_SPAWN_CALLS = {"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes", "multiprocessing.Process",
                "torch.multiprocessing.Process", "multiprocessing.Pool", "torch.multiprocessing.Pool",
                "multiprocessing.get_context", "torch.multiprocessing.get_context"}
_FP64 = {"double", "float64"}


class Fp32MatmulWithoutTf32(Rule):
    """## What it does
    Flags a training script (a file with a training loop and an entry point: an
    `if __name__ == "__main__":` block, a loop at module level, or, without either, a module-level call of a
    function of the file that runs a training loop, in its body or through the file's other functions: the
    `train()` at the end of a notebook) that puts its work on a CUDA device,
    trains in plain fp32 (no autocast, GradScaler, `.half()`/`.bfloat16()` model, reduced `dtype=` (also a
    dtype chosen reduced where CUDA is there: `dtype = torch.bfloat16 if torch.cuda.is_available() and
    torch.cuda.is_bf16_supported() else torch.float32`, then `model.to(dtype)`), or a
    framework that manages precision, imported and used) and never sets how fp32 matmuls may run: no
    `torch.set_float32_matmul_precision(...)`, `torch.backends.cuda.matmul.allow_tf32`, or the
    `fp32_precision` settings of PyTorch 2.9+. A file whose code names any of these, also with a value read
    from a flag, or holds `tf32` in an identifier or a string (`args.tf32`, `tf32=True`,
    `os.environ["NVIDIA_TF32_OVERRIDE"]`) has decided and is left alone; so is a script whose every training
    loop is a top-level one that can only compute on the CPU (as TL101 tells one: a notebook that trains its
    first model on the CPU and moves it to the GPU only afterwards) (a comment, a docstring or a `help=`
    text that mentions TF32 decides nothing); so is a file that computes gradients but updates no weight
    (no `.step()` call, no write of a `.data`, no in-place write of a `.grad`: `w -= lr * w.grad`), such
    as a saliency map or an adversarial attack run on a trained model; so are test files, fp64 code (`.double()`,
    `torch.float64`), and library modules without an entry point (the setting belongs to the script that runs
    them). The training loop may train through a function or a method (`agent.update(batch)` with `agent =
    Agent(...)`), also of a class of another project file (`policy.train(batch)` with `policy =
    TD3.TD3(...)`), or through a function of another project file (`train_step(model, batch, opt)`), and a loop
    that calls another project file's function or method that runs a training loop of its own
    (`train_epoch(...)` of `training.py` every epoch, `agent.update()` that loops over its own epochs, under a
    guard or not) makes the file train too: where only that class moves work to CUDA (`self.actor = Actor(...).to(device)`, a device
    the code shows to be CUDA, or CUDA when available or when a flag says so, `"cuda" if args.cuda else
    "cpu"`, also a name bound once to a CPU and once to a CUDA device, and `self.device` where every binding
    of it in the class is such a device), the message quotes it with its file and line; where the file of that class or function computes
    in reduced or double precision anywhere, the script is left alone. The finding
    stands on the entry point (the `if __name__ == "__main__":` line, or the first
    module-level training loop, or the first such call) and quotes where the file moves work to CUDA.

    This is not TL701 (train in mixed precision): it is the step for a project that keeps fp32 on purpose.
    TF32 changes no dtype, no checkpoint and no code path; it only lets cuBLAS use tensor cores for fp32
    matmuls.

    ## Why is this slow?
    Since PyTorch 1.12, fp32 matmuls (`nn.Linear`, `@`, `bmm`, attention projections) run in full fp32 on
    CUDA by default, on the GPU's slow fp32 pipeline. On Ampere and newer GPUs (compute capability 8.0+,
    A100, H100, RTX 30xx/40xx) TF32 tensor cores do the same matmuls with fp32 inputs and outputs and fp32
    accumulation, only rounding the inputs to 10 mantissa bits: NVIDIA quotes up to 8x the fp32 matmul
    throughput on an A100 (156 vs 19.5 TFLOPS), and a transformer or MLP trained in fp32 typically gets
    1.5-3x faster steps. PyTorch's own profiler flags these matmuls ("FP32 MatMul Pattern").

    ## Example
    ```python
    import torch

    def main():
        model = Net().cuda()
        for x, y in loader:
            loss = loss_fn(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()

    if __name__ == "__main__":
        main()
    ```

    ## Use instead
    ```python
    if __name__ == "__main__":
        torch.set_float32_matmul_precision("high")
        main()
    ```

    ## Fix safety
    The fix is **unsafe**: it inserts `torch.set_float32_matmul_precision("high")` once, as the first
    statement of the `if __name__ == "__main__":` block, or, for a script whose training loop runs at module
    level or is run by a module-level call, right after its leading imports. From then on fp32 matmuls on Ampere+ GPUs round their inputs to
    TF32 (10 mantissa bits instead of 23; fp32's range and fp32 accumulation stay): results change in the low
    bits (relative error around 1e-3 per matmul instead of 1e-6), runs are not bit-identical to earlier ones,
    and code that needs full fp32 matmul precision (some scientific code, ill-conditioned solves done with
    matmuls) can lose accuracy. Deep-learning training is generally insensitive to it; PyTorch's own docs
    recommend it for training and it is what most GPT-style training scripts set. On older GPUs the setting
    changes nothing. It is process-wide: it also covers matmuls outside training (evaluation, metrics), and
    since PyTorch 2.9 it sets `torch.backends.mkldnn.matmul.fp32_precision` to "tf32" as well, so oneDNN may
    use TF32 for CPU matmuls on CPUs that support it (on the 2.13 CPU build checked here, x86 without such
    support, CPU results stayed bitwise identical). No fix is offered where the script starts workers with
    `torch.multiprocessing.spawn` or `multiprocessing` (they do not run the `__main__` block: set it at the
    start of each worker), or where `torch` is imported only after the insertion point.

    ## PyTorch versions
    `torch.backends.cuda.matmul.allow_tf32` defaulted to True from 1.7 to 1.11, so with a `--torch-version`
    below 1.12 the rule is silent (matmuls already used TF32). It has defaulted to False since 1.12, which also
    added `torch.set_float32_matmul_precision` ("highest", the default; "high" allows TF32; "medium" also
    allows bf16). cuDNN convolutions are a different story: `torch.backends.cudnn.allow_tf32` has defaulted to
    True since 1.7 and still does, so a convolution-only network already gets TF32 and gains nothing here. The
    rule is silent where the program provably runs no matmul: the file names no `nn.Linear`, `matmul`, `mm`,
    `bmm`, `einsum`, `linear`, `@`, attention or recurrent layer (nor a `torch` matmul function imported under
    another name), and every module its optimizers train and every callable its training loops call is
    built, through the file's own classes, functions and lambdas, only from `torch` functions, builtins, the
    standard library (`math`) and `torch.nn` layers: any layer where the file builds convolutions, else only
    layers that run no matmul (`nn.Embedding`, norms, activations, pooling, dropout, `nn.Flatten`,
    containers, losses: a bigram model that is one embedding lookup and a cross-entropy). Where part of it
    comes from elsewhere (a torchvision or timm model, a class of another file of the project, a module
    passed in as a parameter, `torch.load`, a call of another package in the step, another `torch.nn` layer
    in a program without convolutions) it cannot tell: the finding stays, and where the file builds
    convolutions the message notes that it builds them and no matmul layers.
    PyTorch 2.9 added the
    `fp32_precision` settings (`torch.backends.cuda.matmul.fp32_precision = "tf32"`,
    `torch.backends.cudnn.conv.fp32_precision`, `torch.backends.fp32_precision`) and plans to deprecate the
    `allow_tf32` flags; `torch.set_float32_matmul_precision("high")` sets the new matmul setting to "tf32"
    and raises no warning (checked with 2.13), so the fix uses it on every version from 1.12.
    """

    code = "TL702"
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)
    name = "fp32-matmul-without-tf32"
    message = (
        "this script trains on CUDA in fp32 and never enables TF32: `torch.set_float32_matmul_precision(\"high\")` "
        "runs its fp32 matmuls on tensor cores (Ampere or newer), keeping fp32 weights and ranges"
    )
    summary = "fp32 CUDA training script that never enables TF32 matmuls"
    fix_availability = FixAvailability.SOMETIMES
    # On by default: one finding per script, only where it demonstrably trains fp32 on CUDA with no precision
    # decision in sight (no wrong finding in 75 on the training scripts tried); the fix is unsafe (opt-in).
    default_enabled = True
    fix_applicabilities = (Applicability.UNSAFE,)
    # The text stage: a device (`may_use_cuda`), a training call (`may_train`), an entry point (a `__main__`
    # block or a module-level loop, maybe inside a module-level `try:`/`if`/`with`).
    text_gate = (TRAINING_WORDS,)

    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        """Each regex behind a literal its matches must hold."""
        if settings.torch_version < (1, 12):
            return False
        text = with_newline_ends(text)  # `^` only follows a `\n`
        if not (may_use_cuda(text) and may_train(text)
                and ("__main__" in text or (
                    (any("\n" + word in text for word in _TOP_STATEMENT_STARTS) or text.startswith(_TOP_STATEMENT_STARTS))
                    and _TOP_LOOP_TEXT.search(text)) or ("def" in text and _TOP_CALL_TEXT.search(text)))):
            return False
        return True  # (a TF32 setting is read off the code, not off its prose: ``_decides_tf32``)

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        if ctx.torch_version < (1, 12) or _decides_tf32(index, ctx.source):
            return
        steps = step_facts(index, ctx.project)
        # a loop that trains itself, or whose step is a function or a method of a class (of this file or of
        # another project file: `policy.train(batch)` with `policy = TD3.TD3(...)`), or that runs a training loop of
        # another project file, one epoch a call (`train_epoch(...)` of `training.py`)
        training = [loop for loop in index.loops if (loop.is_training or loop.node in steps.step_loops
                    or loop.node in steps.epoch_loops) and not cpu_loop(index, loop)]
        if not training:
            return  # (also where every training loop is a top-level one that computes on the CPU)
        if not (steps.imported_steps or steps.imported_trainers or _updates_parameters(index)):
            return  # gradients, but no weights updated: a saliency map or an attack, no training to speed up
        guard = main_guard(index)
        # loops outside every def, other than in the `__main__` block: the setting goes before them; without
        # one, the module-level calls of a function of the file that runs a training loop (`train()` at the
        # end of a notebook)
        top_loops = [loop for loop in training
                     if loop.function is None and not (guard is not None and index.contains(guard, loop.node))]
        entry_calls = [] if top_loops else training_entry_calls(index, training)
        module_level = bool(top_loops or entry_calls)
        if not module_level and guard is None:
            return  # a library module: the script that runs it decides
        # the classes of other project files whose methods are this script's steps
        imported = [found for loop in training for call in loop.direct_calls
                    for found in (steps.imported_steps.get(call), steps.imported_trainers.get(call)) if found]
        if mixed_precision_evidence(index) is not None or uses_fp64(index) or any(
                summary["reduced"] for summary in imported):
            return  # the script or a class that runs its steps computes in reduced (or double) precision
        evidence = project_cuda_evidence(index, ctx.project)
        if evidence is not None:
            statement = next(a for a in index.ancestors(evidence) if isinstance(a, ast.stmt))
            where = index.code_for_node(evidence, statement).split("\n")[0]
            where = where if len(where) <= 50 else where[:47] + "..."
        else:  # the class that runs the step moves its modules to CUDA: `self.actor = Actor(...).to(device)`
            moving = next((summary for summary in imported if "cuda" in summary), None)
            if moving is None:
                return
            line, where = moving["cuda"]
            where = f"{where}` in `{moving['path']}:{line}"
        message = (
            f"this script trains on CUDA (`{where}`) in fp32 and never enables TF32: "
            "`torch.set_float32_matmul_precision(\"high\")` at its start runs fp32 matmuls on tensor cores "
            "(Ampere or newer), keeping fp32 weights and ranges"
        )
        if not _has_matmuls(index, ctx.source):
            convolutions = _has_convolutions(index)
            if _MatmulFree(index, any_layer=convolutions).holds():
                # convolutions (which cuDNN runs in TF32 by default) or lookups, norms, activations, pooling
                # only: the setting changes nothing
                return
            if convolutions:
                message += " (this file builds convolutions, which use TF32 by default already, and no matmul layers)"
        in_guard = guard is not None and not module_level
        # Reported at the entry point, where the fix goes and where a `# noqa: TL702` reads naturally.
        anchor = guard.test if in_guard else (loop_header(top_loops[0]) if top_loops else entry_calls[0])
        spawns = any(index.qualified_name(info.node.func) in _SPAWN_CALLS for info in index.calls)
        # what the fix reads besides the imports: the `__main__` block's header and first statement (it goes
        # before that), or the statements that start the file, of the first one past the imports only its kind
        if in_guard:
            statements, first = (), guard.body[0]
        else:
            statements = _leading_statements(index)
            first = None
            if statements and type(statements[-1]) in COMPOUND_STATEMENTS and getattr(statements[-1], "body", None):
                statements, first = statements[:-1], statements[-1].body[0]
        rewrite = Rewrite(partial(self._fix, in_guard=in_guard, spawns=spawns),
                          message + " (not fixed automatically: {reason})", statements=statements, reads=first)
        ctx.report(anchor, message=message, rewrite=rewrite)

    @staticmethod
    def _fix(module: cst.Module, a: FileAnalysis, in_guard: bool, spawns: bool) -> Union[Fix, str]:
        """The setting as the first statement of the `__main__` block (``in_guard``), else after the leading
        imports; or why it cannot go there."""
        guard = _main_guard(module) if in_guard else None
        if spawns:
            return "its worker processes do not run the `__main__` block; set it at the start of each worker"
        alias = a.module_alias("torch")
        imports = () if alias is not None else (ImportRequest("torch"),)
        statement = cst.parse_statement(f'{alias or "torch"}.set_float32_matmul_precision("high")\n')
        if guard is not None:
            if alias is not None and not _imports_torch_by(a, guard):
                return "`torch` is not imported at module level before the `__main__` block"
            body = guard.body
            if not isinstance(body, cst.IndentedBlock):
                return "the `__main__` block is on one line"
            new_guard = guard.with_changes(body=body.with_changes(body=[statement, *body.body]))
            return Fix({guard: new_guard}, Applicability.UNSAFE, imports)
        anchor = _last_leading_import(module)
        if alias is not None and not _imports_torch_by(a, anchor):
            return "`torch` is imported after the script's first statements"
        if anchor is None:
            first = module.body[0] if module.body else None
            if first is None or _is_docstring(first):
                return "the script has no leading imports to put it after"
            return Fix({first: cst.FlattenSentinel([statement, first])}, Applicability.UNSAFE, imports)
        statement = statement.with_changes(leading_lines=[cst.EmptyLine()])  # set apart from the imports
        return Fix({anchor: cst.FlattenSentinel([anchor, statement])}, Applicability.UNSAFE, imports)


def _leading_statements(index: AstIndex) -> tuple:
    """A docstring, the run of imports after it and the first statement past them: what
    ``_last_leading_import`` and ``_is_docstring`` read on LibCST's tree."""
    body = index.tree.body
    start = 1 if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else 0
    end = next((i for i in range(start, len(body)) if not isinstance(body[i], (ast.Import, ast.ImportFrom))), None)
    return tuple(body[:len(body) if end is None else end + 1])


def _main_guard(module: cst.Module) -> Optional[cst.If]:
    for statement in module.body:
        if isinstance(statement, cst.If) and isinstance(statement.test, cst.Comparison):
            test = statement.test
            parts = [test.left, *(c.comparator for c in test.comparisons)]
            if any(isinstance(p, cst.Name) and p.value == "__name__" for p in parts) and any(
                isinstance(p, cst.SimpleString) and p.evaluated_value == "__main__" for p in parts
            ):
                return statement
    return None


def _is_docstring(statement: cst.CSTNode) -> bool:
    return (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr) and isinstance(statement.body[0].value, cst.SimpleString))


def _is_import_line(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body)


def _last_leading_import(module: cst.Module) -> Optional[cst.SimpleStatementLine]:
    """The last import of the run of imports (after a docstring) that starts the module."""
    last = None
    for index, statement in enumerate(module.body):
        if index == 0 and _is_docstring(statement):
            continue
        if not _is_import_line(statement):
            break
        last = statement
    return last


def _imports_torch_by(a: FileAnalysis, anchor: Optional[cst.CSTNode]) -> bool:
    """True when an import that binds ``torch`` at module level (``import torch``, ``import torch as t``, and
    ``import torch.optim``, which binds ``torch`` too) comes no later than ``anchor``."""
    if anchor is None:
        return False
    for statement in a.module.body:
        if _is_import_line(statement) and any(
                isinstance(s, cst.Import) and any(_binds_torch(alias) for alias in s.names) for s in statement.body):
            return not a.comes_before(anchor, statement)
    return False


def _binds_torch(alias: cst.ImportAlias) -> bool:
    name = alias.name
    if isinstance(name, cst.Name):
        return name.value == "torch"
    while isinstance(name, cst.Attribute):  # `import torch.optim`: the root is bound, unless `as` renames it
        name = name.value
    return alias.asname is None and isinstance(name, cst.Name) and name.value == "torch"


_MATMUL_CALLS = {"Linear", "matmul", "mm", "bmm", "linear", "einsum", "MultiheadAttention", "scaled_dot_product_attention",
                 "Transformer", "TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder",
                 "LSTM", "GRU", "RNN", "addmm", "baddbmm", "Bilinear",
                 # as much matmul work, by other names
                 "LazyLinear", "TransformerDecoder", "LSTMCell", "GRUCell", "RNNCell", "AdaptiveLogSoftmaxWithLoss",
                 "bilinear", "multi_head_attention_forward", "mv", "addmv", "addbmm", "tensordot", "chain_matmul",
                 "multi_dot", "cdist"}
# `torch.nn` layers (by their last name) that run no matmul: what a program without convolutions may be built
# from and still provably run none (lookups, norms, activations, pooling, dropout, reshaping, containers, losses).
_NO_MATMUL_LAYERS = frozenset({
    "Module", "Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict", "Parameter", "Identity",
    "Flatten", "Unflatten", "Embedding", "EmbeddingBag",
    "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm", "RMSNorm", "LocalResponseNorm",
    "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
    "ReLU", "ReLU6", "LeakyReLU", "PReLU", "RReLU", "ELU", "SELU", "CELU", "GELU", "SiLU", "Mish", "Sigmoid",
    "Tanh", "Hardtanh", "Hardswish", "Hardsigmoid", "Softplus", "Softsign", "Softmax", "LogSoftmax", "GLU",
    "Threshold", "Tanhshrink", "Softshrink", "Hardshrink", "LogSigmoid",
    "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
    "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout",
    "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "BCELoss", "BCEWithLogitsLoss",
    "KLDivLoss",
})


def _has_convolutions(index: AstIndex) -> bool:
    return any(name in index.calls_by_name for name in ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose2d", "conv2d"))


def _has_matmuls(index: AstIndex, source: str) -> bool:
    if "@" in source and (index.binary_operations(ast.MatMult) or "@=" in source):
        return True  # `a @ b` (a decorator is no matmul); `a @= b` by its text
    return any(name in index.calls_by_name for name in _MATMUL_CALLS)


# --- a program whose step provably runs no matmul ------------------------------------------------------------
# torch functions that bring in a module the file does not show (a pickled or downloaded model).
_OPAQUE_TORCH = ("torch.load", "torch.hub.", "torch.jit.load", "torch.jit.script", "torch.package.",
                 "torch.export.load", "torch.compile")
_BUILTINS = frozenset(dir(builtins))
# Tensor methods that only reshape or read a tensor's layout: no matmul, whatever tensor a parameter holds.
_RESHAPING_METHODS = frozenset({"view", "reshape", "flatten", "permute", "transpose", "contiguous", "size", "dim",
                                "unsqueeze", "squeeze", "long", "float", "to"})
_NOT_OPTIMIZERS = ("torch.optim.lr_scheduler.", "torch.optim.swa_utils.")  # they take the optimizer, not modules
_NUMBER_BUILTINS = frozenset({"int", "float", "bool", "str", "len", "round", "abs", "complex"})  # never a module
_STDLIB = frozenset(sys.stdlib_module_names)


class _MatmulFree:
    """Whether the training steps of a file that builds convolutions and names no matmul provably run none:
    the modules its optimizers train and the callables its training loops call are built, through the
    file's own classes and functions, only from `torch.nn` layers (none of them a matmul layer: the file
    names none), `torch` functions, builtins and the standard library. Anything else (an imported model, a
    class of another project file, a parameter whose value the file does not show, `torch.load`) cannot
    be told: the answer is no."""

    def __init__(self, index: AstIndex, any_layer: bool = True) -> None:
        self.index = index
        # True: any `torch.nn` layer the file builds (a file that names no matmul layer and builds convolutions);
        # False: only the layers that run no matmul (`_NO_MATMUL_LAYERS`)
        self.any_layer = any_layer
        self.classes = {node.name: node for node in index.tree.body if type(node) is ast.ClassDef}
        self.defs = {node.name: node for node in index.tree.body
                     if type(node) in (ast.FunctionDef, ast.AsyncFunctionDef)}
        self.imported = {alias.asname or alias.name.split(".")[0]
                         for node in index.import_statements for alias in node.names}
        self._done: dict = {}  # a class, def or lambda -> its answer (False while being checked: no cycles)
        self._receivers: dict = {}  # (name, scope) -> whether the values it holds are no hidden module

    def holds(self) -> bool:
        index = self.index
        trained = [loop for loop in index.loops if loop.is_training]
        roots = [info for info in index.calls
                 if (index.qualified_name(info.node.func) or "").startswith("torch.optim.")
                 and not (index.qualified_name(info.node.func) or "").startswith(_NOT_OPTIMIZERS)]
        modules = [arg.func.value for info in roots for arg in info.node.args[:1]
                   if type(arg) is ast.Call and type(arg.func) is ast.Attribute and not arg.args
                   and arg.func.attr in ("parameters", "named_parameters")]
        if not trained or not modules or len(modules) != len(roots):
            return False
        return all(self._module(m, index.scope_of(m)) for m in modules) and all(
            self._call(info.node, info.function or index.tree, loop)
            for loop in trained for statement in loop.node.body for info in index.calls_in(statement))

    # a value that is (or builds) a module
    def _module(self, expr: ast.AST, scope: AstScope, depth: int = 0) -> bool:
        index = self.index
        if depth > 6:
            return False
        kind = type(expr)
        if kind is ast.Name:
            values = self._values(expr.id, scope)
            if values is None:
                return False
            # `model = model.to(device)` keeps what the name's other bindings hold: only those are followed
            fresh = [(value, where) for value, where in values if not _moves_itself(value, expr.id)]
            return bool(fresh) and all(
                value is not None and self._module(value, where, depth + 1) for value, where in fresh)
        if kind is ast.Call:
            func = expr.func
            if type(func) is ast.Attribute and func.attr in _KEEPS_MODULE:
                return self._module(func.value, scope, depth + 1)  # its arguments: a device, a dtype
            qualified = index.qualified_name(func) or ""
            if qualified.startswith("torch.nn.") and not qualified.startswith(_OPAQUE_TORCH):
                last = qualified.rsplit(".", 1)[-1]
                if last in _MATMUL_CALLS or not (self.any_layer or last in _NO_MATMUL_LAYERS):
                    return False
                return self._arguments(expr, scope, depth)
            if type(func) is ast.Name and func.id not in self.imported and func.id in self.classes \
                    and not self._bound_locally(func.id, scope):
                return self._definition(self.classes[func.id]) and self._arguments(expr, scope, depth)
            return False
        return False

    def _arguments(self, call: ast.Call, scope: AstScope, depth: int) -> bool:
        """Every module an argument may hand the built module is one of these too (``DDPM(eps_model=Net())``);
        numbers, strings and tuples of them hand none."""
        for _, value in call_arguments(call):
            if not self._plain_or_module(value, scope, depth + 1):
                return False
        return True

    def _plain_or_module(self, value: ast.AST, scope: AstScope, depth: int) -> bool:
        kind = type(value)
        if kind is ast.Constant:
            return True
        if kind in (ast.Tuple, ast.List):
            return all(self._plain_or_module(e, scope, depth) for e in value.elts)
        if kind is ast.UnaryOp:
            return self._plain_or_module(value.operand, scope, depth)
        if kind is ast.BinOp:
            return self._plain_or_module(value.left, scope, depth) and self._plain_or_module(value.right, scope, depth)
        if kind is ast.Name:
            values = self._values(value.id, scope)
            return values is not None and all(
                v is not None and self._plain_or_module(v, where, depth + 1) for v, where in values)
        if kind is ast.Call:
            func = value.func
            if type(func) is ast.Name and func.id in _NUMBER_BUILTINS and not self._bound_locally(func.id, scope) \
                    and func.id not in self.imported:
                return True  # `int(opt.ngpu)`: a number, whatever it reads
            return self._module(value, scope, depth)
        return False

    def _values(self, name: str, scope: AstScope) -> Optional[list]:
        """(value, scope) of each binding of ``name`` seen from ``scope``; None for an import or a name the
        file does not bind (a builtin, a global set elsewhere)."""
        index = self.index
        for where in (scope, index.tree):
            values = index.values_of(name, where)
            if values:
                return [(value, where) for value in values]
        return None

    def _bound_locally(self, name: str, scope: AstScope) -> bool:
        return bool(self.index.values_of(name, scope)) or bool(self.index.values_of(name, self.index.tree))

    # a class, def or lambda of the file
    def _definition(self, node: ast.AST) -> bool:
        done = self._done.get(node)
        if done is not None:
            return done
        self._done[node] = False
        index = self.index
        answer = True
        if type(node) is ast.ClassDef:
            for base in node.bases:
                qualified = index.qualified_name(base) or ""
                if not (qualified in ("torch.nn.Module", "object")
                        or (type(base) is ast.Name and base.id in self.classes and base.id not in self.imported
                            and self._definition(self.classes[base.id]))):
                    answer = False
            calls = index.calls_within(node)
        elif type(node) is ast.Lambda:
            calls = index.calls_in(node.body)
        else:
            calls = index.calls_within(node)  # type: ignore[arg-type]
        answer = answer and all(self._call(info.node, info.function or index.tree, None) for info in calls)
        self._done[node] = answer
        return answer

    def _call(self, call: ast.Call, scope: AstScope, loop: Optional[AstLoopInfo]) -> bool:
        """A call that runs no matmul the file does not show: a `torch` function or layer, a builtin, the
        standard library, a class or function of the file (checked in turn), a module the file builds so,
        or a method of a value that is no module the file cannot see (a tensor, an optimizer, the loader or
        progress bar the loop iterates)."""
        index = self.index
        func = call.func
        qualified = index.qualified_name(func) or ""
        root = _root_name(func)
        if root is not None and root in self.imported:
            if qualified.startswith("torch."):
                last = qualified.rsplit(".", 1)[-1]
                if last in _MATMUL_CALLS:
                    return False  # `from torch import matmul as mul_`: a matmul by another name
                if not self.any_layer and qualified.startswith("torch.nn.") and last[:1].isupper() \
                        and last not in _NO_MATMUL_LAYERS:
                    return False  # a layer built in the step
                return not qualified.startswith(_OPAQUE_TORCH)
            return qualified.split(".")[0] in _STDLIB
        if type(func) is ast.Name:
            name = func.id
            if name == "self" and type(scope) in (ast.FunctionDef, ast.AsyncFunctionDef) and index.in_class(scope):
                return True  # `self(x)` in a method runs the class's own forward: checked with the class
            if not self._bound_locally(name, scope):
                if name in self.classes:
                    return self._definition(self.classes[name])
                return name in _BUILTINS
            values = self._values(name, scope)
            if values is None:
                return False
            for value, where in values:
                if value is None and type(where) in (ast.FunctionDef, ast.AsyncFunctionDef) \
                        and where.name == name and where in self.defs.values():  # type: ignore[union-attr]
                    continue
                if value is None:
                    if name in self.defs and where is index.tree:
                        if not self._definition(self.defs[name]):
                            return False
                        continue
                    return False
                if type(value) is ast.Lambda:
                    if not self._definition(value):
                        return False
                elif not self._module(value, where):
                    return False
            return True
        if type(func) is ast.Attribute:
            receiver = func.value
            if type(receiver) is ast.Call:
                return self._call(receiver, scope, loop) if type(receiver.func) is not ast.Attribute \
                    or receiver.func.attr != "__init__" else True
            if type(receiver) is ast.Name:
                if receiver.id == "self" or receiver.id == "super":
                    return True  # the class's own modules and methods: checked with the class
                if func.attr in _RESHAPING_METHODS and self._parameter(receiver.id, scope):
                    return True  # `targets.view(B * T)` in `forward`: a tensor's reshaping, whatever it holds
                return self._receiver(receiver, scope, loop)
            if type(receiver) is ast.Attribute and _root_name(receiver) == "self":
                return True
            return _root_name(receiver) is None  # `x[0].to(...)`, `(a + b).sum()`: tensors
        return False

    def _parameter(self, name: str, scope: AstScope) -> bool:
        """``name`` is bound in ``scope`` as one of its parameters, and otherwise only to its own reshaping
        (``targets = targets.view(B * T)``)."""
        if type(scope) not in (ast.FunctionDef, ast.AsyncFunctionDef):
            return False
        values = self.index.values_of(name, scope)
        if values.count(None) != 1 or not all(
                value is None or (type(value) is ast.Call and type(value.func) is ast.Attribute
                                  and value.func.attr in _RESHAPING_METHODS and type(value.func.value) is ast.Name
                                  and value.func.value.id == name) for value in values):
            return False
        return is_parameter(scope, name)

    def _receiver(self, name: ast.Name, scope: AstScope, loop: Optional[AstLoopInfo]) -> bool:
        key = (name.id, scope)
        if key in self._receivers:
            return self._receivers[key]  # type: ignore[no-any-return]
        self._receivers[key] = True  # `x = x.to(device)`: the rebinding's own receiver is the earlier value
        answer = self._receiver_values(name, scope, loop)
        self._receivers[key] = answer
        return answer

    def _receiver_values(self, name: ast.Name, scope: AstScope, loop: Optional[AstLoopInfo]) -> bool:
        values = self._values(name.id, scope)
        if values is None:
            return name.id in _BUILTINS
        for value, where in values:
            if value is None:
                if is_parameter(where, name.id):
                    return False  # a parameter: its value comes from elsewhere
                continue  # a loop target or an unpacked value: a batch, a tensor
            if loop is not None and type(loop.node) is ast.For and spells_name(loop.node.iter, name.id):
                continue  # what the loop iterates: the data, not a module
            if type(value) is ast.Call:
                qualified = self.index.qualified_name(value.func) or ""
                if qualified.startswith("torch.") and not qualified.startswith(_OPAQUE_TORCH):
                    continue  # an optimizer, a tensor, a scaler
                if self._module(value, where) or self._call(value, where, None):
                    continue
                return False
        return True


def _root_name(node: ast.AST) -> Optional[str]:
    while type(node) is ast.Attribute:
        node = node.value
    return node.id if type(node) is ast.Name else None


def _decides_tf32(index: AstIndex, source: str) -> bool:
    """The code (not a comment, docstring or help text) decides how fp32 matmuls run: it names
    ``set_float32_matmul_precision``, ``allow_tf32`` or ``fp32_precision``, or an identifier or a string of
    the code holds ``tf32`` (``args.tf32``, ``tf32=True``, ``os.environ["NVIDIA_TF32_OVERRIDE"]``)."""
    if not _names_a_setting(source.lower()):
        return False  # (the words are nowhere in the text, so nowhere in the code)
    for node in ast.walk(index.tree):
        kind = type(node)
        spelled = node.attr if kind is ast.Attribute else node.id if kind is ast.Name \
            else node.arg if kind is ast.keyword else None  # type: ignore[attr-defined]
        if spelled and _names_a_setting(spelled.lower()):
            return True
    return any(_names_a_setting(text) for text in code_strings(index.tree))


def _names_a_setting(lowered: str) -> bool:
    return "tf32" in lowered or "float32_matmul_precision" in lowered or "fp32_precision" in lowered


_KEEPS_MODULE = ("to", "cuda", "train", "float", "half", "bfloat16")  # a module method that returns the module


def _moves_itself(value: Optional[ast.AST], name: str) -> bool:
    """``value`` is ``name.to(...)`` (``.cuda()``, ``.train()``, ``.float()``...): the binding keeps the module."""
    return type(value) is ast.Call and type(value.func) is ast.Attribute and value.func.attr in _KEEPS_MODULE \
        and type(value.func.value) is ast.Name and value.func.value.id == name


def _updates_parameters(index: AstIndex) -> bool:
    """The file may update weights: it calls a `.step(...)` (an optimizer's, also one reached through a call:
    `opt_rref.rpc_sync().step()`), writes a `.data` (`param.data -= lr * grad_mean.cuda()`), or writes a
    gradient into a tensor in place (`w -= lr * w.grad`, `p.add_(p.grad, alpha=-lr)`, `torch._foreach_add_(ps,
    grads)`). A file that only reads gradients (`image.grad` for a saliency map) trains nothing."""
    if index.calls_by_name.get("step"):
        return True
    for node in ast.walk(index.tree):
        kind = type(node)
        if kind is ast.AugAssign and (_reads_grad(node.value) or _is_data(node.target)):  # type: ignore[attr-defined]
            return True
        if kind is ast.Assign and any(_is_data(target) for target in node.targets):  # type: ignore[attr-defined]
            return True
        if kind is ast.Call and type(node.func) is ast.Attribute and node.func.attr.endswith("_") and (
                _is_data(node.func.value) or any(_reads_grad(arg) for arg in node.args)):  # type: ignore[attr-defined]
            return True
    return False


def _is_data(expr: ast.AST) -> bool:
    return type(expr) is ast.Attribute and expr.attr == "data"  # type: ignore[attr-defined]


def _reads_grad(expr: ast.AST) -> bool:
    return any(type(node) is ast.Attribute and node.attr == "grad" for node in ast.walk(expr))  # type: ignore[attr-defined]
