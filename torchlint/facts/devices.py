"""Where a file's tensors live and in what precision it trains: facts several rules share.

Rules about host-to-device copies, pinned memory, mixed precision, TF32 and fused optimizers all ask the
same questions: does this file put work on a CUDA device, and does it already train in reduced precision?
They are answered here, once, from the file's index, and every answer is conservative in the direction
that keeps a rule silent: "certainly CPU" only for a provable CPU device, "mixed precision" for any sign
of it (autocast, a half/bf16 model, a framework that manages precision).
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from torchlint.ast_index import AstIndex, AstScope, call_arguments, call_name, dotted_name, keyword_value

CUDA = "cuda"
CPU = "cpu"  # any device that is provably not a CUDA device ("cpu", "mps", "meta", ...)
UNKNOWN = None

# Names that, when nothing else is known, plausibly hold an accelerator device (a `.to(device)` on them is
# how nearly every training script moves its batches).
DEVICE_NAME = re.compile(r"(^|_)(device|dev|gpu|cuda|rank|local_rank)s?($|_|\d)", re.IGNORECASE)
REDUCED_DTYPES = {"float16", "half", "bfloat16"}
# Imports that hand precision to a framework the rules cannot read.
PRECISION_FRAMEWORKS = ("accelerate", "lightning", "pytorch_lightning", "deepspeed", "apex", "composer")
AUTOCAST_NAMES = {
    "torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast", "torch.cpu.amp.autocast",
    "torch.amp.GradScaler", "torch.cuda.amp.GradScaler", "torch.GradScaler",
}


def device_kind(index: AstIndex, expr: ast.expr, scope: AstScope, depth: int = 0) -> Optional[str]:
    """CUDA, CPU or UNKNOWN for an expression used as a device (``scope``: the def or module it is in)."""
    if depth > 4:
        return UNKNOWN
    kind = type(expr)
    if kind is ast.Constant:
        value = expr.value  # type: ignore[attr-defined]
        if isinstance(value, str):
            text = index.literal_string(expr)
            if text is None:
                return UNKNOWN  # `"cu" "da"`: one constant to ast, a concatenation to LibCST
            return CUDA if text.strip().startswith("cuda") else CPU
        if type(value) is int:  # `.to(0)`, `device=0`: a CUDA ordinal
            return CUDA
        return UNKNOWN
    if kind is ast.IfExp:  # "cuda" if torch.cuda.is_available() else "cpu"
        kinds = {device_kind(index, expr.body, scope, depth + 1),  # type: ignore[attr-defined]
                 device_kind(index, expr.orelse, scope, depth + 1)}  # type: ignore[attr-defined]
        return CUDA if CUDA in kinds else (CPU if kinds == {CPU} else UNKNOWN)
    if kind is ast.Call:
        qualified = index.qualified_name(expr.func)  # type: ignore[attr-defined]
        if qualified == "torch.device":
            arguments = call_arguments(expr)  # type: ignore[arg-type]
            return device_kind(index, arguments[0][1], scope, depth + 1) if arguments else UNKNOWN
        return CUDA if qualified == "torch.cuda.current_device" else UNKNOWN
    if kind is ast.Name:
        value, where = index.single_value_and_scope(expr.id, scope)  # type: ignore[attr-defined]
        if value is not None:
            return device_kind(index, value, where, depth + 1)
    return UNKNOWN


def to_destination(index: AstIndex, call: ast.Call, scope: AstScope) -> Optional[str]:
    """Where ``x.cuda()`` / ``x.to(...)`` sends ``x``: CUDA, CPU, or UNKNOWN (a dtype, a tensor, a name
    the analysis cannot read). A bare name that looks like a device (``device``, ``args.device``) is taken
    as a plausible CUDA destination, as training scripts use it."""
    name = call_name(call)
    if not isinstance(call.func, ast.Attribute):
        return UNKNOWN
    if name == "cuda":
        return CUDA
    if name != "to":
        return UNKNOWN
    target = keyword_value(call, "device")
    if target is None:
        arguments = call_arguments(call)
        target = arguments[0][1] if arguments and arguments[0][0] is None else None
    if target is None:
        return UNKNOWN
    kind = device_kind(index, target, scope)
    if kind is not UNKNOWN:
        return kind
    written = dotted_name(target)
    if written is not None and DEVICE_NAME.search(written.split(".")[-1]):
        return CUDA
    return UNKNOWN


def cuda_evidence(index: AstIndex) -> Optional[ast.Call]:
    """The first place the file puts work on a CUDA device (a `.cuda()`, a `.to(<cuda>)`, a `device=`
    of a CUDA device), or None where it certainly or plausibly does not."""
    memo = index.shared.get("cuda_evidence", False)
    if memo is not False:
        return memo  # type: ignore[return-value]
    found = None
    for info in index.calls:
        call = info.node
        scope = info.function if info.function is not None else index.tree
        name = call_name(call)
        if name in {"cuda", "to"} and to_destination(index, call, scope) == CUDA:
            found = call
            break
        device = keyword_value(call, "device")
        if device is not None and device_kind(index, device, scope) == CUDA:
            found = call
            break
    index.shared["cuda_evidence"] = found
    return found


# Frameworks that move what they are handed onto the accelerator the run is launched on (CUDA where there
# is one): `accelerator.prepare(model, optimizer, ...)`, `fabric.setup(model, optimizer)`.
_PLACING_FRAMEWORKS = {"accelerate.Accelerator": "prepare", "lightning.Fabric": "setup",
                       "lightning.fabric.Fabric": "setup", "lightning_fabric.Fabric": "setup"}


def framework_placement(index: AstIndex) -> Optional[ast.Call]:
    """The first ``accelerator.prepare(...)`` (Accelerate) or ``fabric.setup(...)`` (Lightning Fabric) of an
    ``Accelerator(...)`` / ``Fabric(...)`` built in the file: it moves the model to the launch's device,
    CUDA where there is one (``"cuda" if available else "cpu"`` by another name). None where there is none
    or the framework is told to use the CPU (``Accelerator(cpu=True)``, ``Fabric(accelerator="cpu")``)."""
    for method in set(_PLACING_FRAMEWORKS.values()):
        for info in index.calls_by_name.get(method, ()):
            func = info.node.func
            if not (type(func) is ast.Attribute and type(func.value) is ast.Name and info.node.args):
                continue
            built = index.single_value(func.value.id, info.function if info.function is not None else index.tree)
            if type(built) is not ast.Call or _PLACING_FRAMEWORKS.get(index.qualified_name(built.func) or "") != method:
                continue
            cpu = keyword_value(built, "cpu")
            accelerator = keyword_value(built, "accelerator")
            if (cpu is not None and type(cpu) is ast.Constant and cpu.value is True) or (
                    accelerator is not None and index.literal_string(accelerator) == "cpu"):
                continue
            return info.node
    return None


def is_reduced_dtype(index: AstIndex, expr: ast.expr) -> bool:
    qualified = index.qualified_name(expr) or ""
    return qualified.startswith("torch.") and qualified.rsplit(".", 1)[-1] in REDUCED_DTYPES


def mixed_precision_evidence(index: AstIndex) -> Optional[ast.AST]:
    """Any sign that the file already trains in reduced precision or leaves precision to a framework:
    autocast or a GradScaler, a `.half()` / `.bfloat16()` model, a reduced `dtype=`, `.to(torch.float16)`,
    a `precision=` argument, autocast passed as a value (`partial(torch.autocast, ...)`), or an import of a
    framework that manages precision (accelerate, Lightning, DeepSpeed, apex): the module for an import.
    None where there is no sign at all."""
    memo = index.shared.get("mixed_precision_evidence", False)
    if memo is not False:
        return memo  # type: ignore[return-value]
    index.shared["mixed_precision_evidence"] = found = _mixed_precision_evidence(index)
    return found


def _mixed_precision_evidence(index: AstIndex) -> Optional[ast.AST]:
    if any(qualified.split(".")[0] in PRECISION_FRAMEWORKS for qualified in index.imports.values()):
        return index.tree
    for info in index.calls:
        call = info.node
        if _computes_in_reduced_precision(index, call):
            return call
        # autocast handed on rather than called: `partial(torch.autocast, device_type="cuda")`
        if any(index.qualified_name(value) in AUTOCAST_NAMES for _, value in call_arguments(call)):
            return call
        if keyword_value(call, "precision") is not None:
            return call
    return None


def reduced_precision_evidence(index: AstIndex) -> Optional[ast.Call]:
    """The first place the file itself certainly computes in fp16/bf16: autocast or a GradScaler, a
    `.half()` / `.bfloat16()` call, a reduced `dtype=`, or `.to(torch.float16)`. Unlike
    ``mixed_precision_evidence`` it does not count a framework import or a `precision=` argument, which may
    as well mean fp32: use it where a rule needs reduced precision to be true, not merely possible."""
    return next((info.node for info in index.calls if _computes_in_reduced_precision(index, info.node)), None)


def _computes_in_reduced_precision(index: AstIndex, call: ast.Call) -> bool:
    """An autocast or GradScaler call, a `.half()` / `.bfloat16()` call, a reduced `dtype=`, or
    `.to(torch.float16)`: the signs both precision facts count."""
    name = call_name(call)
    if (index.qualified_name(call.func) or "") in AUTOCAST_NAMES or name in {"autocast", "GradScaler"}:
        return True
    if name in {"half", "bfloat16"} and isinstance(call.func, ast.Attribute) and not call.args and not call.keywords:
        return True
    dtype = keyword_value(call, "dtype")
    if dtype is not None and is_reduced_dtype(index, dtype):
        return True
    return name == "to" and any(keyword is None and is_reduced_dtype(index, value)
                                for keyword, value in call_arguments(call))
