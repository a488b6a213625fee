"""Where a file's tensors live and in what precision it trains, on LibCST's tree, for the rules that still
detect there (the index's forms are in ``torchlint/facts/devices.py``; ``tests/test_facts.py`` holds them
equal until the last of these rules moves).

Rules about host-to-device copies, pinned memory, mixed precision, TF32 and fused optimizers all ask the
same questions: does this file put work on a CUDA device, and does it already train in reduced precision?
They are answered here, once, from the shared analysis, and every answer is conservative in the direction
that keeps a rule silent: "certainly CPU" only for a provable CPU device, "mixed precision" for any sign
of it (autocast, a half/bf16 model, a framework that manages precision).
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from torchlint.analysis import FileAnalysis, call_name, dotted_name, keyword_arg, receiver

# The vocabulary has one home, beside the index's forms of these facts.
from torchlint.facts.devices import AUTOCAST_NAMES as _AUTOCAST_NAMES, CPU, CUDA, DEVICE_NAME, UNKNOWN  # noqa: F401
from torchlint.facts.devices import PRECISION_FRAMEWORKS as _PRECISION_FRAMEWORKS
from torchlint.facts.devices import REDUCED_DTYPES as _REDUCED_DTYPES
def device_kind(analysis: FileAnalysis, expr: cst.BaseExpression, depth: int = 0) -> Optional[str]:
    """CUDA, CPU or UNKNOWN for an expression used as a device."""
    if depth > 4:
        return UNKNOWN
    if isinstance(expr, (cst.SimpleString, cst.ConcatenatedString)):
        text = expr.evaluated_value if isinstance(expr, cst.SimpleString) else None
        if isinstance(text, bytes) or text is None:
            return UNKNOWN
        return CUDA if text.strip().startswith("cuda") else CPU
    if isinstance(expr, cst.Integer):  # `.to(0)`, `device=0`: a CUDA ordinal
        return CUDA
    if isinstance(expr, cst.IfExp):  # "cuda" if torch.cuda.is_available() else "cpu"
        kinds = {device_kind(analysis, expr.body, depth + 1), device_kind(analysis, expr.orelse, depth + 1)}
        return CUDA if CUDA in kinds else (CPU if kinds == {CPU} else UNKNOWN)
    if isinstance(expr, cst.Call):
        if analysis.is_qualified(expr.func, "torch.device") and expr.args:
            return device_kind(analysis, expr.args[0].value, depth + 1)
        if analysis.is_qualified(expr.func, "torch.cuda.current_device"):
            return CUDA
        return UNKNOWN
    if isinstance(expr, cst.Name):
        value = analysis.single_value(expr.value, analysis.scope_of(expr))
        if value is not None:
            return device_kind(analysis, value, depth + 1)
    return UNKNOWN


def to_destination(analysis: FileAnalysis, call: cst.Call) -> Optional[str]:
    """Where ``x.cuda()`` / ``x.to(...)`` sends ``x``: CUDA, CPU, or UNKNOWN (a dtype, a tensor, a name
    the analysis cannot read). A bare name that looks like a device (``device``, ``args.device``) is taken
    as a plausible CUDA destination, as training scripts use it."""
    name = call_name(call)
    if name == "cuda" and receiver(call) is not None:
        return CUDA
    if name != "to" or receiver(call) is None:
        return UNKNOWN
    device = keyword_arg(call, "device")
    target = device.value if device is not None else (call.args[0].value if call.args and call.args[0].keyword is None else None)
    if target is None:
        return UNKNOWN
    kind = device_kind(analysis, target)
    if kind is not UNKNOWN:
        return kind
    written = dotted_name(target)
    if written is not None and DEVICE_NAME.search(written.split(".")[-1]):
        return CUDA
    return UNKNOWN


def cuda_evidence(analysis: FileAnalysis) -> Optional[cst.CSTNode]:
    """The first place the file puts work on a CUDA device (a `.cuda()`, a `.to(<cuda>)`, a `device=`
    of a CUDA device), or None where it certainly or plausibly does not."""
    for call in analysis.calls:
        name = call_name(call)
        if name in {"cuda", "to"} and to_destination(analysis, call) == CUDA:
            return call
        device = keyword_arg(call, "device")
        if device is not None and device_kind(analysis, device.value) == CUDA:
            return call
    return None


def is_reduced_dtype(analysis: FileAnalysis, expr: cst.BaseExpression) -> bool:
    qualified = analysis.qualified_name(expr) or ""
    return qualified.startswith("torch.") and qualified.rsplit(".", 1)[-1] in _REDUCED_DTYPES


def mixed_precision_evidence(analysis: FileAnalysis) -> Optional[cst.CSTNode]:
    """Any sign that the file already trains in reduced precision or leaves precision to a framework:
    autocast or a GradScaler, a `.half()` / `.bfloat16()` model, a reduced `dtype=`, `.to(torch.float16)`,
    a `precision=` argument, autocast passed as a value (`partial(torch.autocast, ...)`), or an import of a
    framework that manages precision (accelerate, Lightning, DeepSpeed, apex). None where there is no sign
    at all."""
    for local, qualified in analysis.imports.items():
        if qualified.split(".")[0] in _PRECISION_FRAMEWORKS:
            return analysis.module
    for call in analysis.calls:
        if _computes_in_reduced_precision(analysis, call):
            return call
        # autocast handed on rather than called: `partial(torch.autocast, device_type="cuda")`
        if any(analysis.qualified_name(arg.value) in _AUTOCAST_NAMES for arg in call.args):
            return call
        if keyword_arg(call, "precision") is not None:
            return call
    return None


def _computes_in_reduced_precision(analysis: FileAnalysis, call: cst.Call) -> bool:
    """An autocast or GradScaler call, a `.half()` / `.bfloat16()` call, a reduced `dtype=`, or
    `.to(torch.float16)`: the signs both precision facts count."""
    qualified = analysis.qualified_name(call.func) or ""
    if qualified in _AUTOCAST_NAMES or call_name(call) in {"autocast", "GradScaler"}:
        return True
    if call_name(call) in {"half", "bfloat16"} and receiver(call) is not None and not call.args:
        return True
    dtype = keyword_arg(call, "dtype")
    if dtype is not None and is_reduced_dtype(analysis, dtype.value):
        return True
    return call_name(call) == "to" and any(a.keyword is None and is_reduced_dtype(analysis, a.value) for a in call.args)


def reduced_precision_evidence(analysis: FileAnalysis) -> Optional[cst.CSTNode]:
    """The first place the file itself certainly computes in fp16/bf16: autocast or a GradScaler, a
    `.half()` / `.bfloat16()` call, a reduced `dtype=`, or `.to(torch.float16)`. Unlike
    ``mixed_precision_evidence`` it does not count a framework import or a `precision=` argument, which may
    as well mean fp32: use it where a rule needs reduced precision to be true, not merely possible."""
    return next((call for call in analysis.calls if _computes_in_reduced_precision(analysis, call)), None)
