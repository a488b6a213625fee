"""TL102: a tensor made on the CPU and at once copied to the GPU, where the factory could make it there."""

from __future__ import annotations

import ast
from functools import partial
from typing import TYPE_CHECKING, List, Optional, Tuple, Union

import libcst as cst

from torchlint.fix.arguments import with_keyword
from torchlint.facts.index import (AstCallInfo, AstIndex, call_arguments, call_name, has_star, is_integer,
                                 is_literal, keyword_value)
from torchlint.fix.comments import DROPS_COMMENT, loses_comment
from torchlint.config import Settings
from torchlint.facts.devices import CPU, CUDA, device_kind, to_destination
from torchlint.facts.steps import few_iterations, runs_once_in, runs_once_per_run, step_facts
from torchlint.rule import Applicability, Fix, FixAvailability, ImportRequest, IndexContext, Rewrite, Rule
from torchlint.facts.text_gates import (CONVERSION_METHODS, FACTORY_NAMES, FILL_METHODS, LEGACY_TENSOR_TYPES,
                                        RANDOM_FILL_METHODS, VIEW_METHODS, may_chain_factory_into_move, may_move_to_device)

if TYPE_CHECKING:
    from torchlint.fix.analysis import FileAnalysis

# Factories that fill their result the same way on every device.
# Not flagged: `torch.tensor(data)` and `torch.Tensor(data)` (with `device=` they still build the tensor on the
# host and copy it: nothing to gain) and the `*_like` factories (they follow their input's device, which may
# already be the GPU, so the move may be a no-op).
_DETERMINISTIC = {"zeros", "ones", "empty", "full", "eye"}
# Computed by the device's own kernel: floating-point values may differ from the CPU's in the last bit.
_COMPUTED = {"arange", "linspace", "logspace"}
# Drawn from the device's generator: other numbers than the CPU generator's.
_RANDOM = {"rand", "randn", "randint", "randperm"}
# The typed legacy constructors with sizes (`torch.FloatTensor(n, m)`, uninitialised): `torch.empty(n, m,
# dtype=...)`, whose dtype they fix (they take no `device=` but the CPU's).
# (the names are the text gate's, ``LEGACY_TENSOR_TYPES``, in its order)
_LEGACY_DTYPES = dict(zip(LEGACY_TENSOR_TYPES, ("float32", "float64", "float16", "bfloat16", "int64", "int32",
                                                "int16", "int8", "uint8", "bool")))
FACTORIES = _DETERMINISTIC | _COMPUTED | _RANDOM | {"Tensor"} | set(_LEGACY_DTYPES)
# What may stand between the factory and the move, the GPU tensor taking it as well: views, in-place fills
# (`torch.FloatTensor(n, m).zero_().cuda()`; a random one draws from the device's generator) and dtype
# conversions without arguments (`.float()`).
_PASSED_THROUGH = frozenset(VIEW_METHODS + FILL_METHODS + RANDOM_FILL_METHODS + CONVERSION_METHODS)
# Arguments of a factory that make the move part of the point, or that the fix cannot carry over.
_KEEP_AS_IS = {"pin_memory", "out", "layout"}
_FLOAT_DTYPES = {"float", "float32", "float64", "double", "half", "float16", "bfloat16"}


class TensorCreatedThenMoved(Rule):
    """## What it does
    Flags a tensor factory whose result is immediately moved to a CUDA device: `torch.zeros(...)`,
    `ones`, `empty`, `full`, `eye`, `arange`, `linspace`, `logspace` and the random `rand`, `randn`,
    `randint`, `randperm`, followed by `.cuda()`, `.to("cuda")`, `.to(device)` or `.to(device=...)`; also
    the legacy `torch.Tensor(n, m).cuda()` and the typed `torch.FloatTensor(n, m)`, `LongTensor`, ...
    with sizes. What stands between the factory and the move is looked through where the GPU tensor can take
    it as well: view methods (`unsqueeze`, `squeeze`, `view`, `reshape`, `flatten`, `unflatten`:
    `torch.arange(n).unsqueeze(0).to(device)`), in-place fills (`zero_`, `fill_`, and the random `normal_`,
    `uniform_`, `random_`, `bernoulli_`...: `torch.FloatTensor(b, n).zero_().to(device)`) and dtype
    conversions without arguments (`.float()`, `.long()`, `.bool()`...). Sizes unpacked into the factory
    (`torch.randn(count, *shape).to(device)`) are sizes too: a factory takes its device, dtype and generator
    only by keyword, so `*shape` cannot hold them.

    Silent when the destination is provably the CPU (`"cpu"`, `torch.device("cpu")`, a name bound to one)
    or cannot be read as a device at all (`.to(x)` where `x` may be a dtype or a tensor), when the factory
    takes `**kwargs` (they may name any of these), `out=`, `layout=` or `pin_memory=` (pinning before a
    copy is deliberate), a
    `generator=` (a CPU generator cannot draw on the GPU) or a `device=` that is not provably the CPU (the
    tensor may already be on the GPU: the move is then between devices, or none), and in tests (pytest
    files, `tests/` folders). Silent inside a loop where the line runs once: in a loop that leaves after its
    first iteration (`...; break`), a branch on the loop's counter that runs a few times (`if step == 0:`,
    `if i < 5:`), or a buffer made the first time it is missing (`if queue is None: queue =
    torch.zeros(n, d).cuda()`, where nothing in the loop sets it back to None or deletes it). Also silent, because there is nothing to gain or the claim could be wrong:
    - `torch.tensor(data).to(device)`, `torch.Tensor(data).to(device)`, `torch.from_numpy(a).cuda()`: with
      `device=`, `torch.tensor` still builds the tensor in host memory and copies it (the data is on the
      host); the two spellings cost the same. `torch.Tensor(*x)` is one of them: unpacked, `x` may hold
      sizes or rows of data.
    - host data through the typed legacy constructors or `from_numpy`, moved every step
      (`torch.FloatTensor(self.states[idx]).to(device)` in a replay buffer's `sample()`,
      `torch.from_numpy(schedule).to(t.device)[t]`): `torch.as_tensor(a, dtype=torch.float32,
      device=device)` is the same program at the same cost. It wraps the array as `from_numpy` does (sharing
      a float32 array's memory, as `FloatTensor(a)` does) and runs `.to(device, dtype)`, whose blocking
      copy converts a float64 array on the CPU before copying it, as `FloatTensor(a)` did: one conversion
      and one copy either way. What would pay, keeping the buffer or the schedule on the GPU, is a change of
      design: whether the array is the same in every step, or written between steps, is not in the call.
    - `torch.zeros_like(x).cuda()` and the other `*_like` factories: they make the tensor on `x`'s device,
      which may already be the GPU (then the move is a no-op).
    - `torch.normal(mean, std)`: its tensor overloads take no `device=`.
    - a move that runs once per run, not every step: in no loop, at module level or in the function that
      runs the training loop itself (`main()`'s set-up before `for epoch in ...`), unless that function
      also calls `backward()` or steps the optimizer outside its loops (a step that accumulates over
      micro-batches: it runs every step). Also outside a loop of a def that runs once per run: one whose
      every call in the file runs once (`init_memory(loader)` in `main()` before the epoch loop, `main()`
      called once at the end of the script, a helper called only from a constructor), its name used for
      nothing else (not handed on as a value, not called on an object the file cannot follow), and a
      class's `__init__`, where every build of the class (or of a subclass) in the file runs once, or the
      file builds it nowhere (another file's set-up builds the model, agent or runner). The calls other
      files of the project make count too (each file is still checked alone; what the files that import it
      run of its functions and methods comes from their summaries): a timing helper of `benchmark.py` that
      `train.py` calls once before its epochs, or `runner.sample()` called once from `main()`, runs once,
      and so does one called there from a module-level def that file never names (an entry point that yet
      another file hands to a launcher). It stays reported where the class is built in a loop, the def is
      also called in one (of its own file or another's) or reached by a training step, is handed on as a
      value, and in `forward` and other dunders (`nn.Module.__call__`, the `DataLoader` run them for you).
      A constructor another file runs every step is therefore missed, and so is a def that an entry point
      of another file calls once where a third file runs that entry point every step.
    - a move in loops that each run a few times (at most 32 iterations the code shows: `range(10)`,
      `range(1, n_classes)` with `n_classes = len(label_map)` and `label_map` a comprehension over a tuple
      of 20 names, a loop over a short list) where the outermost runs once per run: at module level (a
      notebook's ten samples drawn after training), or in a def that runs once as above (a mean-average-
      precision helper over the classes, called once after the test loop). A loop whose count the code
      does not show (`range(n_detections)`, a loop over a loader) stays reported.
    - `.expand(...)` or arithmetic between the factory and the move: the moved tensor is a fresh,
      writable copy, while an expanded view made on the GPU is not writable.
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
    state = torch.FloatTensor(batch, hidden).fill_(0).to(device)
    ```

    ## Use instead
    ```python
    mask = torch.ones(batch, seq_len, device="cuda")
    positions = torch.arange(seq_len, device=device)
    noise = torch.randn(batch, latent_dim, device=device)
    buffer = torch.empty(batch, 4, device="cuda")
    state = torch.empty(batch, hidden, dtype=torch.float32, device=device).fill_(0)
    ```

    ## Fix safety
    The fix moves the destination into the factory as `device=` (replacing a `device=` the factory already
    had) and drops the `.cuda()`/`.to()` (view methods in between stay, now on the GPU tensor:
    `torch.arange(n, device=device).unsqueeze(0)`, and so do fills and conversions); `torch.Tensor(n,
    m).cuda()` becomes `torch.empty(n, m, device="cuda")` (both uninitialised, both of the default dtype),
    and a typed constructor `torch.empty` with its dtype (`torch.FloatTensor(n, m)`: `dtype=torch.float32`,
    whatever the default dtype; `LongTensor`: `torch.int64`). `.cuda()` becomes `device="cuda"`,
    the current CUDA device, as `.cuda()` means.

    It is **safe** for the deterministic factories (`zeros`, `ones`, `empty`, `full`, `eye`, `torch.Tensor`
    and the typed constructors with sizes, and `arange` with integer literals or an integer `dtype=`), with
    deterministic fills and conversions only, when the destination is certainly
    a device: a string literal, `torch.device(...)`, an integer ordinal, a name bound in the file to one
    of those, or any `.to(device=...)` keyword.

    It is **unsafe** when:
    - the factory is random (`rand*`, `randint`, `randperm`) or a random fill follows it (`normal_`,
      `uniform_`...): the CUDA generator draws other
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

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        for name in ("cuda", "to"):
            for info in index.calls_by_name.get(name, ()):
                func = info.node.func
                if type(func) is ast.Attribute and type(func.value) is ast.Call:
                    factory, between = func.value, []
                    while _passed_through(factory):  # `torch.zeros(n).unsqueeze(0).to(device)`
                        between.append(factory.func.attr)  # type: ignore[attr-defined]
                        factory = factory.func.value  # type: ignore[attr-defined]
                    if type(factory) is ast.Call:
                        self._check(ctx, index, info, factory, between)

    def _check(self, ctx: IndexContext, index: AstIndex, info: AstCallInfo, factory: ast.Call,
               between: List[str]) -> None:
        move = info.node
        scope = info.function if info.function is not None else index.tree
        qualified = index.qualified_name(factory.func) or ""
        kind = qualified[len("torch."):] if qualified.startswith("torch.") else ""
        if kind not in FACTORIES or has_star(move) or any(keyword.arg is None for keyword in factory.keywords):
            return  # `**kwargs` may hold `device=`, `out=`, `generator=`...
        legacy = kind == "Tensor" or kind in _LEGACY_DTYPES
        if legacy and any(type(arg) is ast.Starred for arg in factory.args):
            return  # `torch.Tensor(*x)`: sizes or data, which the call does not say
        if any(keyword.arg in _KEEP_AS_IS for keyword in factory.keywords):
            return
        if to_destination(index, move, scope) != CUDA:
            return  # the CPU, or not readable as a device
        if runs_once_per_run(index, info.node, info.function):
            return  # set-up before (or after) the training loop: one copy per run is not worth a finding
        loop = next(index.enclosing_loops(move), None)
        if loop is None and info.function is not None and step_facts(index, ctx.project).runs_once(index, info.function):
            return  # in a set-up def (a constructor, `init_memory()` called once before the epochs)
        if loop is not None and runs_once_in(index, move, loop):
            return  # made once in the loop (`if step == 0:`, a loop that breaks after one batch): no per-step cost
        if loop is not None and _few_times_per_run(ctx, index, move, info.function):
            return  # a loop over a few classes in a metric run once, a notebook's 10 samples after training
        own_device = keyword_value(factory, "device")
        if own_device is not None and device_kind(index, own_device, scope) != CPU:
            return  # made on its own device (maybe the GPU already): not a CPU tensor being copied
        if keyword_value(factory, "generator") is not None:
            return  # a generator fixes where the numbers are drawn (a CPU one cannot draw on the GPU)
        random = kind in _RANDOM or any(method in RANDOM_FILL_METHODS for method in between)
        if random and _manages_cpu_rng(index, info):
            return  # forks or restores the RNG around the draw: the CPU numbers are the point
        if legacy and not _sizes_only(factory):
            return  # data, not sizes: it is built on the host either way
        statement = next(node for node in index.ancestors(move) if isinstance(node, ast.stmt))
        shown = f"`{index.code_for_node(factory.func, statement)}(...)`"
        message = f"{shown} makes the tensor on the CPU and then copies it to the GPU; pass `device=` to the factory"
        dtype = _LEGACY_DTYPES.get(kind)
        if legacy:
            typed = f"dtype=torch.{dtype}, " if dtype is not None else ""
            message = (f"{shown} makes the tensor on the CPU and then copies it to the GPU; use "
                       f"`torch.empty(..., {typed}device=...)`")
        requires_grad = keyword_value(factory, "requires_grad")
        if requires_grad is not None and not is_literal(requires_grad, False):
            ctx.report(move, message=(
                f"{shown} with `requires_grad=True` is moved to the GPU: the moved tensor is a non-leaf copy whose "
                "`.grad` stays None; create it with `device=` to get a leaf on the GPU (no fix: this changes meaning)"))
            return
        destination = _destination(index, move)
        if destination is None:
            ctx.report(move, message=message + " (no fix: the destination cannot be carried over as it is written)")
            return
        place, certain = destination
        refused = message + " ({reason})"  # the fix would drop a comment in the move's brackets
        if random:
            message += " (unsafe fix: the GPU's generator draws other numbers)"
        elif kind in _COMPUTED and not (kind == "arange" and _integer_arange(index, factory)):
            message += " (unsafe fix: the GPU kernel may round floating-point values differently)"
        elif not certain:
            device = call_arguments(move)[place][1]  # type: ignore[index]
            message += f" (unsafe fix: `{index.code_for_node(device, statement)}` may not be a device)"
        applicability = Applicability.UNSAFE if "unsafe fix" in message else Applicability.SAFE
        make = partial(_move_into_factory, place=place, rename_to="empty" if legacy else None,
                       applicability=applicability, views=len(between), dtype=dtype)
        ctx.report(move, message=message, rewrite=Rewrite(make, refused, move, reads=move))


def _passed_through(call: ast.expr) -> bool:
    """``x.unsqueeze(0)``, ``x.view(1, -1)``, ``x.zero_()``, ``x.float()``...: what gives the same values on
    either device, so the factory's tensor can take it on the GPU (not ``expand``: a moved copy of an expanded
    tensor is writable, the view is not; a conversion only without arguments: ``.long(memory_format=...)``
    is left alone)."""
    if not (type(call) is ast.Call and type(call.func) is ast.Attribute  # type: ignore[attr-defined]
            and call.func.attr in _PASSED_THROUGH and not has_star(call)):  # type: ignore[attr-defined]
        return False
    return call.func.attr not in CONVERSION_METHODS or not (call.args or call.keywords)  # type: ignore[attr-defined]


# Explicit management of the RNG state (a plain `manual_seed` at the start of a script is not: nearly every
# training script has one, and the CUDA generator is seeded by it too).
_RNG_CALLS = {"fork_rng", "set_rng_state", "get_rng_state"}


def _manages_cpu_rng(index: AstIndex, info: AstCallInfo) -> bool:
    """The function around the move (or the module) forks, saves or restores the RNG state itself."""
    function = info.function
    if function is None:
        calls = index.calls
    elif type(function) is ast.Lambda:
        calls = index.calls_in(function)
    else:
        calls = index.calls_within(function)
    return any(call_name(call.node) in _RNG_CALLS for call in calls)


def _destination(index: AstIndex, move: ast.Call) -> Optional[Tuple[Optional[int], bool]]:
    """Which of the move's arguments (by place, as LibCST lists them; None: ``"cuda"``, for a bare
    ``.cuda()``) the factory should get as ``device=``, and whether it is certainly a device; None when the
    move passes more than a device (a dtype, ``copy=``...) or a ``.cuda(x)`` the rule cannot carry over."""
    extra = [(place, keyword, value) for place, (keyword, value) in enumerate(call_arguments(move))
             if keyword != "non_blocking"]
    if call_name(move) == "cuda":
        if not extra:
            return None, True
        if len(extra) != 1:
            return None
        place, _, value = extra[0]
        if is_integer(value) or (index.literal_string(value) is not None
                                  and device_kind(index, value, index.tree) == CUDA):
            return place, True
        return None
    if len(extra) != 1:
        return None
    place, keyword, value = extra[0]
    if keyword is not None and keyword != "device":
        return None
    return place, keyword is not None or _certainly_a_device(index, value)


def _certainly_a_device(index: AstIndex, expr: ast.expr, depth: int = 0) -> bool:
    """A string literal, an integer, ``torch.device(...)``, a conditional of those, or a name bound once to one."""
    if depth > 4:
        return False
    kind = type(expr)
    if kind is ast.Constant:
        value = expr.value  # type: ignore[attr-defined]
        return type(value) is int or type(value) is bytes or index.literal_string(expr) is not None
    if kind is ast.Call:
        return index.qualified_name(expr.func) == "torch.device"  # type: ignore[attr-defined]
    if kind is ast.IfExp:
        return (_certainly_a_device(index, expr.body, depth + 1)  # type: ignore[attr-defined]
                and _certainly_a_device(index, expr.orelse, depth + 1))  # type: ignore[attr-defined]
    if kind is ast.Name:  # every binding of the name (in its scope, else at module level) is one
        name = expr.id  # type: ignore[attr-defined]
        values = index.values_of(name, index.scope_of(expr)) or index.values_of(name, index.tree)
        return bool(values) and all(v is not None and _certainly_a_device(index, v, depth + 1) for v in values)
    return False


def _sizes_only(factory: ast.Call) -> bool:
    """``torch.Tensor(3)``, ``torch.Tensor(n, 4)``: sizes, not data (one non-literal argument may be a list)."""
    if factory.keywords:
        return False
    if len(factory.args) >= 2:
        return True
    return len(factory.args) == 1 and is_integer(factory.args[0])


def _integer_arange(index: AstIndex, factory: ast.Call) -> bool:
    dtype = keyword_value(factory, "dtype")
    if dtype is not None:
        qualified = index.qualified_name(dtype) or ""
        return qualified.startswith("torch.") and qualified[len("torch."):] not in _FLOAT_DTYPES and (
            "int" in qualified or qualified.endswith("long"))
    return bool(factory.args) and all(is_integer(arg) for arg in factory.args)


# --- the rewrite, on LibCST's twin of the move ---------------------------------------------------------


def _move_into_factory(move: cst.Call, a: FileAnalysis, place: Optional[int], rename_to: Optional[str],
                       applicability: Applicability, views: int = 0, dtype: Optional[str] = None) -> Union[Fix, str]:
    """The factory with ``device=`` the move's argument at ``place`` (``"cuda"`` where None), in place of the
    move (its parentheses kept); the ``views`` calls between them (views, fills, conversions) stay on the
    factory's result; ``dtype``: the one a typed legacy constructor fixed, now passed to ``torch.empty``."""
    moved = move.func.value  # type: ignore[attr-defined]
    factory = moved
    for _ in range(views):
        factory = factory.func.value  # type: ignore[attr-defined]
    device = move.args[place].value if place is not None else cst.SimpleString('"cuda"')
    new_factory, imports = _with_device(a, factory, device, rename_to, dtype)
    if views:
        new_factory = moved.deep_replace(factory, new_factory)  # type: ignore[assignment]
    replacement = new_factory.with_changes(lpar=move.lpar, rpar=move.rpar)
    if loses_comment({move: replacement}):  # one in the move's brackets: `.cuda(  # note\n)`
        return DROPS_COMMENT
    return Fix.replace(move, replacement, applicability, imports)


def _with_device(
    a: FileAnalysis, factory: cst.Call, device: cst.BaseExpression, rename_to: Optional[str],
    dtype: Optional[str] = None,
) -> Tuple[cst.Call, Tuple[ImportRequest, ...]]:
    func = factory.func
    imports: Tuple[ImportRequest, ...] = ()
    module: Optional[cst.BaseExpression] = None  # how the file spells torch, where the fix names it
    if rename_to is not None:
        if isinstance(func, cst.Attribute):
            module = func.value
            func = func.with_changes(attr=cst.Name(rename_to))
        else:  # `from torch import Tensor`: spell the new factory through the module
            alias = a.module_alias("torch")
            if alias is None:
                alias, imports = "torch", (ImportRequest("torch"),)
            module = cst.Name(alias)
            func = cst.Attribute(value=module, attr=cst.Name(rename_to))
    new = factory
    if dtype is not None and module is not None:
        new = with_keyword(new, "dtype", cst.Attribute(value=module.deep_clone(), attr=cst.Name(dtype)))
    new = with_keyword(new, "device", device.deep_clone())
    return new.with_changes(func=func), imports


def _few_times_per_run(ctx: IndexContext, index: AstIndex, move: ast.Call, function) -> bool:
    """Every loop around ``move`` in its def runs a few times (``steps.few_iterations``), and the outermost of
    them runs once per run: at module level, or in a def that runs once (``StepFacts.runs_once``) or runs
    the training loop itself. A few copies per run are not worth a finding."""
    loops = list(index.enclosing_loops(move))
    if not all(few_iterations(index, loop) for loop in loops):
        return False
    if function is None:
        return True
    return runs_once_per_run(index, loops[-1].node, function) or step_facts(index, ctx.project).runs_once(index, function)
