"""Where ``.to()`` / ``.cuda()`` send a tensor, on LibCST's tree, for the code that still detects there (TL102,
and ``torchlint/loaders.py`` for TL103). Every other device and precision fact, and the index's forms of
these two, are in ``torchlint/facts/devices.py``; ``tests/test_facts.py`` holds the two forms equal until the
last LibCST user moves. Answers are conservative in the direction that keeps a rule silent: "certainly
CPU" only for a provable CPU device.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from torchlint.analysis import FileAnalysis, call_name, dotted_name, keyword_arg, receiver

# The vocabulary has one home, beside the index's forms of these facts.
from torchlint.facts.devices import CPU, CUDA, DEVICE_NAME, UNKNOWN


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
