"""TL702: a script trains on CUDA in fp32 and never lets matmuls use TF32 tensor cores."""

from __future__ import annotations

import ast
import re
from functools import partial
from typing import TYPE_CHECKING, Optional, Union

import libcst as cst

from torchlint.facts.index import AstIndex
from torchlint.config import Settings
from torchlint.facts.devices import mixed_precision_evidence, project_cuda_evidence, uses_fp64
from torchlint.facts.steps import step_facts
from torchlint.facts.script import loop_header
from torchlint.rule import Applicability, Fix, FixAvailability, ImportRequest, IndexContext, Rewrite, Rule
from torchlint.facts.text_gates import TRAINING_WORDS, may_train, may_use_cuda, with_newline_ends

if TYPE_CHECKING:
    from torchlint.fix.analysis import FileAnalysis

# Any mention of a TF32 / fp32-precision setting, even in a comment or with a value we cannot read, means the
# author has decided (on, off, or from a flag): not ours to second-guess.
_TF32_SETTING_TEXT = re.compile(r"allow_tf32|float32_matmul_precision|fp32_precision|\b[tT][fF]32\b")
# Ways to start multiprocessing workers that do not run the script's `if __name__ == "__main__":` block.
# A statement at column 0 that is or can hold a loop outside any def (`try:`/`if ...:`/`with` around the
# loop, or a class body, which runs at import too).
_TOP_LOOP_TEXT = re.compile(r"(?m:^(?:for|while|if|try|with|match|class)\b)")
_TOP_STATEMENT_STARTS = ("for", "while", "if", "try", "with", "match", "class")
_SPAWN_CALLS = {"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes", "multiprocessing.Process",
                "torch.multiprocessing.Process", "multiprocessing.Pool", "torch.multiprocessing.Pool",
                "multiprocessing.get_context", "torch.multiprocessing.get_context"}
_FP64 = {"double", "float64"}


class Fp32MatmulWithoutTf32(Rule):
    """## What it does
    Flags a training script (a file with a training loop and an entry point: an
    `if __name__ == "__main__":` block or a loop at module level) that puts its work on a CUDA device,
    trains in plain fp32 (no autocast, GradScaler, `.half()`/`.bfloat16()` model, reduced `dtype=`, or a
    framework that manages precision) and never sets how fp32 matmuls may run: no
    `torch.set_float32_matmul_precision(...)`, `torch.backends.cuda.matmul.allow_tf32`, or the
    `fp32_precision` settings of PyTorch 2.9+. A file that mentions any of these, even in a comment or with a
    value read from a flag, has decided and is left alone; so are test files, fp64 code (`.double()`,
    `torch.float64`), and library modules without an entry point (the setting belongs to the script that runs
    them). The training loop may train through a function or a method (`agent.update(batch)` with `agent =
    Agent(...)`), also of a class of another project file (`policy.train(batch)` with `policy =
    TD3.TD3(...)`): where only that class moves work to CUDA (`self.actor = Actor(...).to(device)`, a device
    the code shows to be CUDA, or CUDA when available), the message quotes it with its file and line; where
    the class's file computes in reduced or double precision anywhere, the script is left alone. The finding
    stands on the entry point (the `if __name__ == "__main__":` line, or the first
    module-level training loop) and quotes where the file moves work to CUDA.

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
    level, right after its leading imports. From then on fp32 matmuls on Ampere+ GPUs round their inputs to
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
    True since 1.7 and still does, so a convolution-only network already gets TF32 and gains little here (the
    message says so where the file builds no `nn.Linear`, `matmul`, `bmm` or attention). PyTorch 2.9 added the
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
    # block or a module-level loop, maybe inside a module-level `try:`/`if`/`with`), no TF32 setting.
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
                    and _TOP_LOOP_TEXT.search(text)))):
            return False
        return not ("32" in text and _TF32_SETTING_TEXT.search(text))

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        if ctx.torch_version < (1, 12) or _TF32_SETTING_TEXT.search(ctx.source):
            return
        steps = step_facts(index, ctx.project)
        # a loop that trains itself, or whose step is a function or a method of a class (of this file or of
        # another project file: `policy.train(batch)` with `policy = TD3.TD3(...)`)
        training = [loop for loop in index.loops if loop.is_training or loop.node in steps.step_loops]
        if not training:
            return
        guard = _main_guard_on_index(index)
        # loops outside every def, other than in the `__main__` block: the setting goes before them
        top_loops = [loop for loop in training
                     if loop.function is None and not (guard is not None and index.contains(guard, loop.node))]
        module_level = bool(top_loops)
        if not module_level and guard is None:
            return  # a library module: the script that runs it decides
        # the classes of other project files whose methods are this script's steps
        imported = [steps.imported_steps[call] for loop in training for call in loop.direct_calls
                    if call in steps.imported_steps]
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
        if not _has_matmuls(index, ctx.source) and _has_convolutions(index):
            message += " (this file builds convolutions, which use TF32 by default already, and no matmul layers)"
        in_guard = guard is not None and not module_level
        # Reported at the entry point, where the fix goes and where a `# noqa: TL702` reads naturally.
        anchor = guard.test if in_guard else loop_header(top_loops[0])
        spawns = any(index.qualified_name(info.node.func) in _SPAWN_CALLS for info in index.calls)
        # what the fix reads besides the imports: the `__main__` block, or the statements that start the file
        reads = (guard,) if in_guard else _leading_statements(index)
        rewrite = Rewrite(partial(self._fix, in_guard=in_guard, spawns=spawns),
                          message + " (not fixed automatically: {reason})", statements=reads)
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


def _main_guard_on_index(index: AstIndex) -> Optional[ast.If]:
    """The module-level ``if __name__ == "__main__":`` (as ``_main_guard`` finds it on LibCST's tree)."""
    for statement in index.tree.body:
        if isinstance(statement, ast.If) and isinstance(statement.test, ast.Compare):
            parts = [statement.test.left, *statement.test.comparators]
            if any(isinstance(p, ast.Name) and p.id == "__name__" for p in parts) and any(
                isinstance(p, ast.Constant) and p.value == "__main__" for p in parts
            ):
                return statement
    return None


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
    """True when an ``import torch`` at module level comes no later than ``anchor``."""
    if anchor is None:
        return False
    for statement in a.module.body:
        if _is_import_line(statement) and any(
            isinstance(s, cst.Import) and any(alias.name.value == "torch" if isinstance(alias.name, cst.Name) else False
                                              for alias in s.names) for s in statement.body):
            return not a.comes_before(anchor, statement)
    return False


_MATMUL_CALLS = {"Linear", "matmul", "mm", "bmm", "linear", "einsum", "MultiheadAttention", "scaled_dot_product_attention",
                 "Transformer", "TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder",
                 "LSTM", "GRU", "RNN", "addmm", "baddbmm", "Bilinear"}


def _has_convolutions(index: AstIndex) -> bool:
    return any(name in index.calls_by_name for name in ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose2d", "conv2d"))


def _has_matmuls(index: AstIndex, source: str) -> bool:
    if "@" in source and re.search(r"\w\s*@\s*\w", source):
        return True
    return any(name in index.calls_by_name for name in _MATMUL_CALLS)
