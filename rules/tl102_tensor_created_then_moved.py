"""TL102: a tensor made on the CPU and at once copied to the GPU, where the factory could make it there."""

from __future__ import annotations

import ast
from typing import Optional, Tuple

import libcst as cst

from torchlint.loader_prefilter import FACTORY_NAMES
from torchlint.arguments import with_keyword
from torchlint.ast_index import AstCallInfo, AstIndex, index_of
from torchlint.ast_index import dotted_name as ast_dotted_name
from torchlint.analysis import FileAnalysis, call_name, is_literal, keyword_arg, receiver
from torchlint.comments import DROPS_COMMENT, loses_comment
from torchlint.config import Settings
from torchlint.loader_prefilter import may_chain_factory_into_move, may_move_to_device
from torchlint.device_facts import device_kind, to_destination
from torchlint.facts.devices import CPU, CUDA, DEVICE_NAME
from torchlint.rule import Applicability, Fix, FixAvailability, ImportRequest, Rule, RuleContext

# Factories that fill their result the same way on every device.
# Not flagged: `torch.tensor(data)` and `torch.Tensor(data)` (with `device=` they still build the tensor on the
# host and copy it: nothing to gain) and the `*_like` factories (they follow their input's device, which may
# already be the GPU, so the move may be a no-op).
_DETERMINISTIC = {"zeros", "ones", "empty", "full", "eye"}
# Computed by the device's own kernel: floating-point values may differ from the CPU's in the last bit.
_COMPUTED = {"arange", "linspace", "logspace"}
# Drawn from the device's generator: other numbers than the CPU generator's.
_RANDOM = {"rand", "randn", "randint", "randperm"}
FACTORIES = _DETERMINISTIC | _COMPUTED | _RANDOM | {"Tensor"}
# Arguments of a factory that make the move part of the point, or that the fix cannot carry over.
_KEEP_AS_IS = {"pin_memory", "out", "layout"}
_FLOAT_DTYPES = {"float", "float32", "float64", "double", "half", "float16", "bfloat16"}


class TensorCreatedThenMoved(Rule):
    """## What it does
    Flags a tensor factory whose result is immediately moved to a CUDA device: `torch.zeros(...)`,
    `ones`, `empty`, `full`, `eye`, `arange`, `linspace`, `logspace` and the random `rand`, `randn`,
    `randint`, `randperm`, followed by `.cuda()`, `.to("cuda")`, `.to(device)` or `.to(device=...)`; also
    the legacy `torch.Tensor(n, m).cuda()` with sizes.

    Silent when the destination is provably the CPU (`"cpu"`, `torch.device("cpu")`, a name bound to one)
    or cannot be read as a device at all (`.to(x)` where `x` may be a dtype or a tensor), when the factory
    takes `**kwargs`, `out=`, `layout=` or `pin_memory=` (pinning before a copy is deliberate), a
    `generator=` (a CPU generator cannot draw on the GPU) or a `device=` that is not provably the CPU (the
    tensor may already be on the GPU: the move is then between devices, or none), and in tests (pytest
    files, `tests/` folders). Also silent, because there is nothing to gain or the claim
    could be wrong:
    - `torch.tensor(data).to(device)`, `torch.Tensor(data).to(device)`, `torch.from_numpy(a).cuda()`: with
      `device=`, `torch.tensor` still builds the tensor in host memory and copies it (the data is on the
      host); the two spellings cost the same.
    - `torch.zeros_like(x).cuda()` and the other `*_like` factories: they make the tensor on `x`'s device,
      which may already be the GPU (then the move is a no-op).
    - `torch.normal(mean, std)`: its tensor overloads take no `device=`.
    - a random factory in a function (or script) that forks, saves or restores the RNG state itself
      (`torch.random.fork_rng`, `get_rng_state`/`set_rng_state`): drawing on the CPU is then usually the
      point (the same numbers on every device and replica).

    ## Why is this slow?
    The factory allocates and fills the tensor in host memory, then `.to()` allocates it again on the GPU
    and copies it over the bus, a copy that blocks the host. Passing `device=` makes the tensor where it
    is used: a fill kernel on the GPU, no host allocation, no transfer. Inside a training step (masks,
    position ids, noise, targets built every iteration) the difference is paid every step.

    ## Example
    ```python
    mask = torch.ones(batch, seq_len).cuda()
    positions = torch.arange(seq_len).to(device)
    noise = torch.randn(batch, latent_dim).to(device)
    buffer = torch.Tensor(batch, 4).cuda()
    ```

    ## Use instead
    ```python
    mask = torch.ones(batch, seq_len, device="cuda")
    positions = torch.arange(seq_len, device=device)
    noise = torch.randn(batch, latent_dim, device=device)
    buffer = torch.empty(batch, 4, device="cuda")
    ```

    ## Fix safety
    The fix moves the destination into the factory as `device=` (replacing a `device=` the factory already
    had) and drops the `.cuda()`/`.to()`; `torch.Tensor(n, m).cuda()` becomes `torch.empty(n, m,
    device="cuda")` (both uninitialised, both of the default dtype). `.cuda()` becomes `device="cuda"`,
    the current CUDA device, as `.cuda()` means.

    It is **safe** for the deterministic factories (`zeros`, `ones`, `empty`, `full`, `eye`, `torch.Tensor`
    with sizes, and `arange` with integer literals or an integer `dtype=`) when the destination is certainly
    a device: a string literal, `torch.device(...)`, an integer ordinal, a name bound in the file to one
    of those, or any `.to(device=...)` keyword.

    It is **unsafe** when:
    - the factory is random (`rand*`, `randint`, `randperm`): the CUDA generator draws other
      numbers than the CPU generator, so the values change (and the CPU generator's state is no longer
      advanced, which shifts every later CPU draw);
    - the factory computes floating-point values (`linspace`, `logspace`, a float `arange`): the device
      kernel may round the last bit differently;
    - the destination is a name that only looks like a device (`.to(device)` where `device` is a
      parameter, `self.device`, `args.device`): if it were a dtype or a tensor at run time, `device=` would
      not accept it.

    There is no fix (the finding is reported only) when the factory has `requires_grad=True`: the moved
    tensor is a non-leaf copy whose `.grad` stays `None`, while the fixed one would be a leaf, a change in
    meaning (often the bug the code has); when `.to()` passes more than the device (a dtype, `copy=`,
    `memory_format=`); when `.cuda(x)` names a device the rule cannot read (`x` may be `None`, the
    current device, where `device=None` would mean the CPU); when the `.cuda()`/`.to()` call holds a comment
    (it goes away, and the comment with it). Comments inside the factory's brackets stay where they are.

    ## PyTorch versions
    Every factory takes `device=` in every supported version (1.x and 2.x). `torch.set_default_device`
    (2.0+) changes where a factory without `device=` allocates; the fix passes the device explicitly, so
    it does not depend on it. An integer device (`device=0`) means `cuda:0` in every version with CUDA.
    """

    code = "TL102"
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)
    name = "tensor-created-then-moved"
    message = "the tensor is made on the CPU and then copied to the GPU; pass `device=` to the factory instead"
    summary = "Tensor created on the CPU and immediately moved to the GPU"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicabilities = (Applicability.SAFE, Applicability.UNSAFE)
    text_gate = (FACTORY_NAMES,)

    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        """A ``.cuda(``/``.to(`` call (the cheap gate), then a factory call chained into one."""
        return may_move_to_device(text) and may_chain_factory_into_move(text)

    has_ast_prefilter = True

    @classmethod
    def may_fire_in_ast(cls, tree: ast.Module, text: str, settings: Settings) -> bool:
        index = index_of(tree)
        return any(_ast_may_report(index, info) for name in ("cuda", "to") for info in index.calls_by_name.get(name, ()))

    def check(self, ctx: RuleContext) -> None:
        a = ctx.analysis
        for name in ("cuda", "to"):
            for move in a.calls_by_name.get(name, ()):
                factory = receiver(move)
                if isinstance(factory, cst.Call):
                    self._check(ctx, a, move, factory)

    def _check(self, ctx: RuleContext, a: FileAnalysis, move: cst.Call, factory: cst.Call) -> None:
        qualified = a.qualified_name(factory.func) or ""
        kind = qualified[len("torch."):] if qualified.startswith("torch.") else ""
        if kind not in FACTORIES or any(arg.star for arg in factory.args) or any(arg.star for arg in move.args):
            return
        if any(arg.keyword is not None and arg.keyword.value in _KEEP_AS_IS for arg in factory.args):
            return
        if to_destination(a, move) != CUDA:
            return  # the CPU, or not readable as a device
        own_device = keyword_arg(factory, "device")
        if own_device is not None and device_kind(a, own_device.value) != CPU:
            return  # made on its own device (maybe the GPU already): not a CPU tensor being copied
        if keyword_arg(factory, "generator") is not None:
            return  # a generator fixes where the numbers are drawn (a CPU one cannot draw on the GPU)
        if kind in _RANDOM and _manages_cpu_rng(a, move):
            return  # forks or restores the RNG around the draw: the CPU numbers are the point
        shown = f"`{a.module.code_for_node(factory.func)}(...)`"
        message = f"{shown} makes the tensor on the CPU and then copies it to the GPU; pass `device=` to the factory"
        requires_grad = keyword_arg(factory, "requires_grad")
        if requires_grad is not None and not is_literal(requires_grad.value, "False"):
            ctx.report(move, message=(
                f"{shown} with `requires_grad=True` is moved to the GPU: the moved tensor is a non-leaf copy whose "
                "`.grad` stays None; create it with `device=` to get a leaf on the GPU (no fix: this changes meaning)"))
            return
        destination = _destination(a, move)
        if destination is None:
            ctx.report(move, message=message + " (no fix: the destination cannot be carried over as it is written)")
            return
        device, certain = destination
        if kind == "Tensor":
            if not _sizes_only(factory):
                return  # data, not sizes: it is built on the host either way
            message = f"{shown} makes the tensor on the CPU and then copies it to the GPU; use `torch.empty(..., device=...)`"
        new_factory, imports = _with_device(a, factory, device, rename_to="empty" if kind == "Tensor" else None)
        replacement = new_factory.with_changes(lpar=move.lpar, rpar=move.rpar)
        if loses_comment({move: replacement}):  # one in the move's brackets: `.cuda(  # note\n)`
            ctx.report(move, message=f"{message} ({DROPS_COMMENT})")
            return
        if kind in _RANDOM:
            message += " (unsafe fix: the GPU's generator draws other numbers)"
        elif kind in _COMPUTED and not (kind == "arange" and _integer_arange(a, factory)):
            message += " (unsafe fix: the GPU kernel may round floating-point values differently)"
        elif not certain:
            message += f" (unsafe fix: `{a.module.code_for_node(device)}` may not be a device)"
        safe = "unsafe fix" not in message
        ctx.report(move, message=message,
                   fix=Fix.replace(move, replacement, Applicability.SAFE if safe else Applicability.UNSAFE, imports))


# --- the ast stage: `_check`'s gates on the shared index ------------------------------------------------
# Not mirrored: `discovery.is_test_file` (the path is not known there) and `_manages_cpu_rng` (it only silences).


def _ast_may_report(index: AstIndex, info: AstCallInfo) -> bool:
    move = info.node
    factory = move.func.value if type(move.func) is ast.Attribute else None
    if type(factory) is not ast.Call:
        return False
    qualified = index.qualified_name(factory.func) or ""
    kind = qualified[len("torch."):] if qualified.startswith("torch.") else ""
    if kind not in FACTORIES or _ast_has_star(factory) or _ast_has_star(move):
        return False
    keywords = {k.arg: k.value for k in factory.keywords}
    if any(name in keywords for name in _KEEP_AS_IS) or "generator" in keywords:
        return False
    if "device" in keywords and not _ast_may_be_cpu(index, keywords["device"]):
        return False  # made on its own device (`device_kind(...) != CPU`)
    if kind == "Tensor" and not _ast_sizes_only(factory):
        return False
    return _ast_may_move_to_cuda(index, move, info.function)


def _ast_has_star(call: ast.Call) -> bool:
    return any(type(arg) is ast.Starred for arg in call.args) or any(k.arg is None for k in call.keywords)


def _ast_sizes_only(factory: ast.Call) -> bool:
    """``_sizes_only``."""
    if factory.keywords:
        return False
    if len(factory.args) >= 2:
        return True
    return len(factory.args) == 1 and type(factory.args[0]) is ast.Constant and type(factory.args[0].value) is int


def _ast_may_be_cpu(index: AstIndex, expr: ast.AST) -> bool:
    """False where ``device_kind`` is certainly not CPU: an ordinal, an attribute, a call other than
    ``torch.device``, a literal other than a string."""
    kind = type(expr)
    if kind is ast.Constant:
        return isinstance(expr.value, str) and not expr.value.strip().startswith("cuda")
    if kind is ast.Call:
        return index.qualified_name(expr.func) == "torch.device"
    return kind in (ast.Name, ast.IfExp)


def _ast_may_move_to_cuda(index: AstIndex, move: ast.Call, scope) -> bool:
    """False where ``to_destination`` is certainly not CUDA."""
    if move.func.attr == "cuda":  # type: ignore[attr-defined]
        return True
    device = next((k.value for k in move.keywords if k.arg == "device"), None)
    target = device if device is not None else (move.args[0] if move.args else None)
    if target is None:
        return False
    written = ast_dotted_name(target)
    if written is not None and DEVICE_NAME.search(written.split(".")[-1]):
        return True
    return _ast_may_be_cuda(index, target, scope, 0)


def _ast_may_be_cuda(index: AstIndex, expr: ast.AST, scope, depth: int) -> bool:
    """False where ``device_kind`` is certainly not CUDA."""
    if depth > 4:
        return False
    kind = type(expr)
    if kind is ast.Constant:
        value = expr.value
        return (isinstance(value, str) and value.strip().startswith("cuda")) or type(value) is int
    if kind is ast.IfExp:
        return _ast_may_be_cuda(index, expr.body, scope, depth + 1) or _ast_may_be_cuda(index, expr.orelse, scope, depth + 1)
    if kind is ast.Call:
        qualified = index.qualified_name(expr.func)
        if qualified == "torch.device":  # its first argument, as LibCST orders them
            first = expr.args[0] if expr.args else (expr.keywords[0].value if expr.keywords else None)
            first = first.value if type(first) is ast.Starred else first
            return first is not None and _ast_may_be_cuda(index, first, scope, depth + 1)
        return qualified == "torch.cuda.current_device"
    if kind is ast.Name:
        for candidate in (scope, None):  # `single_value`, knowing the scope the value comes from
            values = index.values_of(expr.id, candidate)
            if values:
                return len(values) == 1 and values[0] is not None and _ast_may_be_cuda(index, values[0], candidate, depth + 1)
    return False


# Explicit management of the RNG state (a plain `manual_seed` at the start of a script is not: nearly every
# training script has one, and the CUDA generator is seeded by it too).
_RNG_CALLS = {"fork_rng", "set_rng_state", "get_rng_state"}


def _manages_cpu_rng(a: FileAnalysis, move: cst.Call) -> bool:
    """The function around ``move`` (or the module) forks, saves or restores the RNG state itself."""
    function = a.function_of(move)
    scope = function.node if function is not None else a.module
    return any(call_name(call) in _RNG_CALLS for call in a.calls_in(scope))


def _destination(a: FileAnalysis, move: cst.Call) -> Optional[Tuple[cst.BaseExpression, bool]]:
    """The device expression the factory should get and whether it is certainly a device; None when the
    move passes more than a device (a dtype, ``copy=``...) or a ``.cuda(x)`` the rule cannot carry over."""
    extra = [arg for arg in move.args if not (arg.keyword is not None and arg.keyword.value == "non_blocking")]
    if call_name(move) == "cuda":
        if not extra:
            return cst.SimpleString('"cuda"'), True
        if len(extra) != 1:
            return None
        value = extra[0].value
        if isinstance(value, cst.Integer) or (isinstance(value, cst.SimpleString) and device_kind(a, value) == CUDA):
            return value, True
        return None
    if len(extra) != 1:
        return None
    arg = extra[0]
    if arg.keyword is not None and arg.keyword.value != "device":
        return None
    value = arg.value
    certain = arg.keyword is not None or _certainly_a_device(a, value)
    return value, certain


def _certainly_a_device(a: FileAnalysis, expr: cst.BaseExpression, depth: int = 0) -> bool:
    """A string literal, an integer, ``torch.device(...)``, a conditional of those, or a name bound once to one."""
    if depth > 4:
        return False
    if isinstance(expr, (cst.SimpleString, cst.Integer)):
        return True
    if isinstance(expr, cst.Call):
        return a.is_qualified(expr.func, "torch.device")
    if isinstance(expr, cst.IfExp):
        return _certainly_a_device(a, expr.body, depth + 1) and _certainly_a_device(a, expr.orelse, depth + 1)
    if isinstance(expr, cst.Name):  # every binding of the name (in its scope, else at module level) is one
        scope = a.scope_of(expr)
        values = a.values_of(expr.value, scope) or a.values_of(expr.value, a.module)
        return bool(values) and all(v is not None and _certainly_a_device(a, v, depth + 1) for v in values)
    return False


def _sizes_only(factory: cst.Call) -> bool:
    """``torch.Tensor(3)``, ``torch.Tensor(n, 4)``: sizes, not data (one non-literal argument may be a list)."""
    if any(arg.keyword is not None for arg in factory.args):
        return False
    if len(factory.args) >= 2:
        return True
    return len(factory.args) == 1 and isinstance(factory.args[0].value, cst.Integer)


def _integer_arange(a: FileAnalysis, factory: cst.Call) -> bool:
    dtype = keyword_arg(factory, "dtype")
    if dtype is not None:
        qualified = a.qualified_name(dtype.value) or ""
        return qualified.startswith("torch.") and qualified[len("torch."):] not in _FLOAT_DTYPES and (
            "int" in qualified or qualified.endswith("long"))
    positional = [arg for arg in factory.args if arg.keyword is None]
    return bool(positional) and all(isinstance(arg.value, cst.Integer) for arg in positional)


def _with_device(
    a: FileAnalysis, factory: cst.Call, device: cst.BaseExpression, rename_to: Optional[str]
) -> Tuple[cst.Call, Tuple[ImportRequest, ...]]:
    new = with_keyword(factory, "device", device.deep_clone())
    func = factory.func
    imports: Tuple[ImportRequest, ...] = ()
    if rename_to is not None:
        if isinstance(func, cst.Attribute):
            func = func.with_changes(attr=cst.Name(rename_to))
        else:  # `from torch import Tensor`: spell the new factory through the module
            alias = a.module_alias("torch")
            if alias is None:
                alias, imports = "torch", (ImportRequest("torch"),)
            func = cst.Attribute(value=cst.Name(alias), attr=cst.Name(rename_to))
    return new.with_changes(func=func), imports
