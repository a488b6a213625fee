"""Code that reads a clock: timing and benchmark code.

A step that reads the wall clock (``time.perf_counter()``) or a CUDA event's time (``start.elapsed_time(end)``)
measures itself, and code that measures GPU work must wait for it first: a ``torch.cuda.synchronize()``
there is what makes the reading true, not a slowdown. Decided from the calls, never from names.
"""

from __future__ import annotations

import ast
from typing import Optional

from torchlint.facts.index import AstIndex, AstScope, call_name, keyword_value

# The standard library's clocks (`timeit.default_timer` is `time.perf_counter`).
CLOCK_FUNCTIONS = (
    "time.time", "time.time_ns", "time.perf_counter", "time.perf_counter_ns", "time.monotonic",
    "time.monotonic_ns", "time.process_time", "time.process_time_ns", "time.thread_time", "timeit.default_timer",
    "datetime.datetime.now", "datetime.datetime.utcnow",
)
# What a text that reads one of these clocks, or times an event, must hold (an exact gate: each clock's call
# spells one of them, however its module is imported)
CLOCK_TEXTS = ("time(", "_ns(", "perf_counter", "monotonic", "default_timer", "now(", "elapsed_time", "Event(")
# Events that can time GPU work: `torch.cuda.Event(enable_timing=True)`, the device-generic `torch.Event`.
TIMING_EVENTS = ("torch.cuda.Event", "torch.Event", "torch.xpu.Event", "torch.mps.event.Event")


def reads_clock(index: AstIndex, call: ast.Call, scope: Optional[AstScope]) -> bool:
    """``call`` reads a clock: a standard-library clock in any spelling, ``<event>.elapsed_time(...)``, a
    timing event made (``torch.cuda.Event(enable_timing=True)``) or recorded (``start.record()`` where
    ``start`` is bound to one in ``scope`` or the module)."""
    qualified = index.qualified_name(call.func)
    if qualified in CLOCK_FUNCTIONS or is_timing_event(index, call):
        return True
    name = call_name(call)
    if not isinstance(call.func, ast.Attribute):
        return False
    if name == "elapsed_time":
        return True
    if name == "record" and isinstance(call.func.value, ast.Name):
        event = index.single_value(call.func.value.id, scope)
        return isinstance(event, ast.Call) and is_timing_event(index, event)
    return False


def is_timing_event(index: AstIndex, call: ast.Call) -> bool:
    """``torch.cuda.Event(enable_timing=True)`` (``torch.Event`` too): an event whose time can be read."""
    qualified = index.qualified_name(call.func)
    if qualified not in TIMING_EVENTS:
        return False
    timing = keyword_value(call, "enable_timing")
    if timing is None and call.args and qualified == "torch.cuda.Event":
        timing = call.args[0]  # torch.cuda.Event(enable_timing=False, ...); torch.Event's first is the device
    return timing is not None and not (isinstance(timing, ast.Constant) and not timing.value)


def reads_clock_in(index: AstIndex, function: ast.AST) -> bool:
    """The def ``function`` reads a clock itself, outside any def nested in it (a timer's ``tic()``:
    ``self.start = time.time()``)."""
    return any(reads_clock(index, info.node, function) for info in index.calls_in(function)
               if info.function is function)
