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
from typing import TYPE_CHECKING, List, Optional, Set, Tuple

from torchlint.facts.index import (
    AstIndex, AstLoopInfo, AstScope, argument_for, call_arguments, call_name, called_origin, dotted_name, every_node, has_star,
    import_origins, is_literal, is_parameter, keyword_value, may_be_project, parameter_default, walk,
)
from torchlint.facts.script import runs_itself

if TYPE_CHECKING:
    from torchlint.facts.project import ProjectModel
    from torchlint.rule import IndexContext

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
        # bound more than once, each time to a device the code shows (`device = torch.device("cpu")`, then
        # `device = torch.device("cuda:0")` under `if torch.cuda.is_available():`): CUDA where one binding is,
        # as for the one-line `"cuda" if ... else "cpu"`
        values = index.values_of(expr.id, where)  # type: ignore[attr-defined]
        if len(values) > 1 and all(value is not None for value in values):
            kinds = {device_kind(index, value, where, depth + 1) for value in values}  # type: ignore[arg-type]
            if kinds == {CUDA, CPU}:
                return CUDA
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
    of a CUDA device), or None where it certainly or plausibly does not: also where a `.to(device)` only
    looks like a GPU move by its name in a CPU program (``never_uses_cuda``)."""
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
        if name in ("set_default_device", "set_default_tensor_type") and _sets_cuda_default(index, call, scope):
            found = call  # every factory without `device=` makes its tensor on CUDA from here on
            break
    if found is not None and never_uses_cuda(index):
        found = None
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
    """``torch.float16`` / ``torch.bfloat16`` (``torch.half``), or a name bound once to one chosen where CUDA
    is there: ``dtype = torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else
    torch.float32`` is reduced wherever the program runs on a GPU."""
    qualified = index.qualified_name(expr) or ""
    if qualified.startswith("torch.") and qualified.rsplit(".", 1)[-1] in REDUCED_DTYPES:
        return True  # (also a name imported so: `from torch import half`)
    if type(expr) is ast.Name:
        value = index.single_value(expr.id, index.scope_of(expr))  # type: ignore[attr-defined]
        return type(value) is ast.IfExp and _reduced_on_cuda(index, value)  # type: ignore[arg-type]
    return False


# Tests that hold wherever the program has a CUDA device: what it checks, alone or as a part of an `and`.
_CUDA_TESTS = {"torch.cuda.is_available", "torch.cuda.is_bf16_supported"}


def _reduced_on_cuda(index: AstIndex, choice: ast.IfExp) -> bool:
    """``a if <test> else b`` with ``a`` a reduced dtype and ``test`` requiring CUDA (``torch.cuda.is_available()``,
    alone or as a part of an ``and``)."""
    parts = choice.test.values if type(choice.test) is ast.BoolOp and type(choice.test.op) is ast.And \
        else [choice.test]  # type: ignore[attr-defined]
    return type(choice.body) is not ast.Name and is_reduced_dtype(index, choice.body) and any(
        type(part) is ast.Call and index.qualified_name(part.func) in _CUDA_TESTS for part in parts)  # type: ignore[attr-defined]


def mixed_precision_evidence(index: AstIndex) -> Optional[ast.AST]:
    """Any sign that the file already trains in reduced precision or leaves precision to a framework:
    autocast or a GradScaler, a `.half()` / `.bfloat16()` model, a reduced `dtype=`, `.to(torch.float16)`,
    a `precision=` argument, autocast passed as a value (`partial(torch.autocast, ...)`), or a framework that
    manages precision (accelerate, Lightning, DeepSpeed, apex) imported and used: the module for an import.
    None where there is no sign at all."""
    memo = index.shared.get("mixed_precision_evidence", False)
    if memo is not False:
        return memo  # type: ignore[return-value]
    index.shared["mixed_precision_evidence"] = found = _mixed_precision_evidence(index)
    return found


def _mixed_precision_evidence(index: AstIndex) -> Optional[ast.AST]:
    # a framework counts where the file uses what it imports from it (`try: from apex import amp` with `amp`
    # never read is a leftover, and the script trains in fp32)
    if any(qualified.split(".")[0] in PRECISION_FRAMEWORKS and any(
            type(name.ctx) is ast.Load for name, _ in index.names_named(local))
           for local, qualified in index.imports.items()):
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


def reduced_precision_calls(index: AstIndex) -> List[ast.Call]:
    """Every place ``reduced_precision_evidence`` would count, in source order, less the autocasts and
    GradScalers given `enabled=False` (a region kept in fp32) and those of an imported library other than
    torch (TransformerEngine's `te.autocast` is fp8 for its own layers): for a rule that asks where they run."""
    found = []
    for info in index.calls:
        call = info.node
        if not _computes_in_reduced_precision(index, call) or is_literal(keyword_value(call, "enabled"), False):
            continue
        qualified = index.qualified_name(call.func)
        if call_name(call) in {"autocast", "GradScaler"} and qualified is not None \
                and qualified not in AUTOCAST_NAMES:
            continue
        found.append(call)
    return found


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


# Imports of frameworks that place models and batches on a GPU themselves, and of torch's multi-GPU APIs.
GPU_FRAMEWORKS = PRECISION_FRAMEWORKS + ("transformers", "ignite", "fastai", "mmengine", "mmcv", "detectron2")
_MULTI_GPU_MODULES = ("torch.distributed", "torch.nn.parallel", "torch.cuda", "torch.backends.cuda",
                      "torch.backends.cudnn")


def never_uses_cuda(index: AstIndex) -> bool:
    """True where the file is a CPU program: it runs on its own (``facts.script.runs_itself``: a ``__main__``
    guard, a training loop at module level, or a module-level call of a function of the file that runs
    one), and nothing in it can reach a CUDA device: no ``.cuda`` attribute (``.cuda()``,
    ``torch.cuda.*``), no string that names CUDA or NCCL, no integer device, no import of a framework that
    places work on a GPU or of torch's CUDA / multi-GPU modules, and no device that could be CUDA (a
    ``device`` parameter of a function this file never calls, a device read from a config; an argparse
    option ``--device`` counts only by its default: ``default="cpu"`` with no "cuda" anywhere is the CPU).
    A file that only defines a training function for others to call is not known to be one: False."""
    return runs_itself(index) and uses_no_cuda(index)


def uses_no_cuda(index: AstIndex) -> bool:
    """Nothing in the file can reach a CUDA device (``never_uses_cuda``'s test, whether it runs itself or not)."""
    memo = index.shared.get("uses_no_cuda")
    if memo is None:
        memo = index.shared["uses_no_cuda"] = not _mentions_cuda(index) \
            and not any(_may_be_cuda_device(index, info.node, info.function or index.tree) for info in index.calls)
    return memo  # type: ignore[return-value]


def runs_on_cpu(ctx: "IndexContext") -> bool:
    """``never_uses_cuda``; or a notebook that uses no CUDA (a notebook is always a program, also one whose
    training runs in a helper of the project: `d2l.train_ch7(sgd_momentum, ...)`); or a module that does not
    run itself but uses no CUDA and whose every importer in the project (notebooks included), and the project
    modules those import, mention none either (``ProjectModel.cpu_importers``: a tutorial's ``helper.py``
    that only CPU notebooks call)."""
    index, project = ctx.index, ctx.project
    if never_uses_cuda(index):
        return True
    notebook = ctx.path.endswith(".ipynb")
    return (notebook or (project is not None and bool(project.cpu_importers))) and uses_no_cuda(index)


def _mentions_cuda(index: AstIndex) -> bool:
    for qualified in index.imports.values():
        if qualified.split(".")[0] in GPU_FRAMEWORKS or qualified.startswith(_MULTI_GPU_MODULES):
            return True
    if index.attributes_named("cuda"):
        return True
    lowered = index.source.lower()
    if "cuda" not in lowered and "nccl" not in lowered:
        return False  # neither word in the text: no string can hold it
    return any("cuda" in text or "nccl" in text for text in code_strings(index.tree))


def code_strings(tree: ast.AST):
    """The lower-cased string constants of the code: not docstrings or other bare string statements, nor
    `help=` texts (prose about the program, not a device it uses)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is ast.Constant:
            if isinstance(node.value, str):  # type: ignore[attr-defined]
                yield node.value.lower()  # type: ignore[attr-defined]
            continue
        if kind is ast.Expr and type(node.value) is ast.Constant:  # type: ignore[attr-defined]
            continue
        if kind is ast.keyword and node.arg == "help":  # type: ignore[attr-defined]
            continue
        stack.extend(ast.iter_child_nodes(node))


def _may_be_cuda_device(index: AstIndex, call: ast.Call, scope: AstScope) -> bool:
    """``call`` moves or makes something on a device that is CUDA or may be: ``.to(0)``, ``.to(device)`` of
    a device the file cannot show to be the CPU, ``device=<such>``."""
    targets = []
    if call_name(call) == "to" and isinstance(call.func, ast.Attribute):
        target = keyword_value(call, "device")
        arguments = call_arguments(call)
        if target is None and arguments and arguments[0][0] is None:
            target = arguments[0][1]
        if target is not None and (to_destination(index, call, scope) == CUDA or type(target) is ast.Call):
            targets.append(target)  # a device-like name, or what a call returns (`.to(get_device())`)
    device = keyword_value(call, "device")
    if device is not None:
        targets.append(device)
    return any(not _cpu_device(index, target, scope) for target in targets)


def may_place_on_cuda(index: AstIndex, call: ast.Call, scope: AstScope) -> bool:
    """``call`` moves a tensor to, or makes one on, a device that is CUDA or may be: ``x.cuda()``, ``x.to(0)``,
    ``x.to(device)`` / ``torch.tensor(..., device=d)`` with a device the file cannot show to be the CPU
    (``_may_be_cuda_device``)."""
    if call_name(call) == "cuda" and isinstance(call.func, ast.Attribute):
        return True
    return _may_be_cuda_device(index, call, scope)


def _cpu_device(index: AstIndex, expr: ast.expr, scope: AstScope, depth: int = 0) -> bool:
    """``expr`` (a device) is the CPU as far as this file shows: its value is a CPU device, a parameter of a
    function this file calls (its callers are this file's), or an argparse option whose default is not
    CUDA."""
    kind = device_kind(index, expr, scope)
    if kind is not UNKNOWN or depth > 4:
        return kind == CPU
    if type(expr) is ast.Constant and expr.value is None:  # type: ignore[attr-defined]
        return True  # `device=None`: the default device
    if type(expr) is ast.Call and index.qualified_name(expr.func) == "torch.device":  # type: ignore[attr-defined]
        arguments = call_arguments(expr)  # type: ignore[arg-type]
        return bool(arguments) and _cpu_device(index, arguments[0][1], scope, depth + 1)
    if type(expr) is ast.Name:
        for where in (scope, index.tree):
            values = index.values_of(expr.id, where)  # type: ignore[attr-defined]
            if values:
                return all(_cpu_device(index, value, where, depth + 1) if value is not None
                           else _cpu_parameter(index, where, expr.id, depth + 1) for value in values)
        return False
    if type(expr) is ast.Attribute:
        return _cpu_option(index, expr.attr)  # type: ignore[attr-defined]
    return False


def _cpu_parameter(index: AstIndex, function: AstScope, name: str, depth: int) -> bool:
    """``name``, bound without a value in ``function``, is a parameter of it that every call of it in this
    file passes a CPU device (or leaves at a CPU default). A function this file never calls, a call with
    ``*args`` / ``**kwargs``, or a name that is no parameter (a loop target): not known, False."""
    passed = _passed_for(index, function, name, defaults=True)
    return passed is not None and all(_cpu_device(index, value, where, depth) for value, where in passed)


def _passed_for(index: AstIndex, function: AstScope, name: str, defaults: bool,
                builds: bool = False) -> Optional[List[Tuple[ast.expr, AstScope]]]:
    """What each call of the def ``function`` in this file passes for its parameter ``name``, with the scope the
    value is read in; the calls are those of the def's name (``obj.method(...)`` binds ``self``), or with
    ``builds``, for a class's ``__init__``, the builds of the class (``SAC(..., device)``). ``defaults``: a call
    that passes nothing gives the parameter's default, read at module level. None where that is not known: no
    such parameter, no call, a call with ``*args`` / ``**kwargs``, a call that passes nothing without a default
    to use."""
    if not is_parameter(function, name):
        return None
    positional = [a.arg for a in function.args.posonlyargs + function.args.args]  # type: ignore[union-attr]
    initializer = builds and function.name == "__init__"  # type: ignore[union-attr]
    klass = index.class_of.get(function) if initializer else None  # type: ignore[arg-type]
    calls = index.calls_by_name.get(klass.name if klass is not None else function.name, ())  # type: ignore[union-attr]
    if not calls:
        return None
    passed: List[Tuple[ast.expr, AstScope]] = []
    for info in calls:
        call = info.node
        if has_star(call):
            return None
        binds_self = klass is not None or (type(call.func) is ast.Attribute and positional[:1] == ["self"])
        value = argument_for(function, name, call.args, call.keywords, 1 if binds_self else 0)
        if value is not None:
            passed.append((value, info.function or index.tree))
            continue
        default = parameter_default(function, name) if defaults else None
        if default is None:
            return None
        passed.append((default, index.tree))
    return passed


def _cpu_option(index: AstIndex, option: str) -> bool:
    """``parser.add_argument("--<option>", default=<not CUDA>)`` in this file (dashes or underscores)."""
    spellings = {"--" + option, "--" + option.replace("_", "-")}
    for info in index.calls_by_name.get("add_argument", ()):
        call = info.node
        if any(type(arg) is ast.Constant and arg.value in spellings for arg in call.args):
            default = keyword_value(call, "default")
            return default is None or (type(default) is ast.Constant and (
                default.value is None or device_kind(index, default, info.function or index.tree) == CPU))
    return False


def moves_to_cuda(index: AstIndex, call: ast.Call, scope: Optional[AstScope], project=None) -> bool:
    """``x.cuda()``, or ``x.to(d)`` / ``device=d`` with a device ``d`` the code shows to be CUDA, or CUDA when
    one is available (``torch.device("cuda" if torch.cuda.is_available() else "cpu")``; ``self.device`` of a
    class that binds it so: ``_cuda_attribute``; with ``project``, also
    what a project function that returns one gives: ``dist_util.dev()``), not a device known only by its name,
    as ``to_destination`` takes one."""
    if call_name(call) == "cuda" and isinstance(call.func, ast.Attribute):
        return True
    target = _device_argument(call)
    if target is None:
        return False
    if device_kind(index, target, scope if scope is not None else index.tree) == CUDA:
        return True
    if _cuda_attribute(index, target, scope):
        return True
    if _cuda_parameter(index, target, scope):
        return True
    return project is not None and _project_device(index, target, project)


def _cuda_parameter(index: AstIndex, target: ast.expr, scope: Optional[AstScope]) -> bool:
    """``target`` is a parameter of ``scope`` that every call of it in this file passes a device the code shows
    to be CUDA, or CUDA when available (``_passed_for``: ``agent = SAC(state_dim, ..., device)`` with ``device =
    torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")`` at the top of a notebook, also a
    name bound more than once, each time so)."""
    if type(target) is not ast.Name or type(scope) not in (ast.FunctionDef, ast.AsyncFunctionDef):
        return False
    klass = index.class_of.get(scope)  # type: ignore[arg-type]
    nested = klass is None and index.function_of(scope) is not None
    if nested or (klass is not None and scope.name != "__init__"):  # type: ignore[union-attr]
        return False  # (a nested def, a method: their calls are not all in sight by a name)
    passed = _passed_for(index, scope, target.id, defaults=False, builds=True)  # type: ignore[arg-type]
    if passed is None:
        return False
    for value, where in passed:
        if device_kind(index, value, where) == CUDA:
            continue
        # a name bound more than once, each time to such a device (a notebook that sets `device` in two cells)
        bound = index.values_of(value.id, where) or index.values_of(value.id, index.tree) \
            if type(value) is ast.Name else []
        if not bound or any(v is None or device_kind(index, v, where) != CUDA for v in bound):  # type: ignore[arg-type]
            return False
    return True


def _cuda_attribute(index: AstIndex, target: ast.expr, scope: Optional[AstScope]) -> bool:
    """``target`` is ``self.<name>`` in a method of a class every binding of whose ``self.<name>`` is a device
    the code shows, one of them CUDA or CUDA on a condition (``self.device = torch.device("cuda" if args.cuda
    else "cpu")``, as ``device_kind`` takes a device chosen by a test)."""
    if not (type(target) is ast.Attribute and type(target.value) is ast.Name and target.value.id == "self"):  # type: ignore[attr-defined]
        return False
    klass = index.class_of.get(scope) if scope is not None else None  # type: ignore[arg-type]
    values = index.self_attributes.get((klass, target.attr), ()) if klass is not None else ()  # type: ignore[attr-defined]
    if not values or any(value is None for value in values):
        return False
    kinds = {device_kind(index, value, index.scope_of(value)) for value in values}  # type: ignore[arg-type]
    return CUDA in kinds and kinds <= {CUDA, CPU}


def _device_argument(call: ast.Call) -> Optional[ast.expr]:
    """The device ``call`` is given: ``device=d``, or the first argument of ``x.to(d)``."""
    target = keyword_value(call, "device")
    if target is None and call_name(call) == "to" and isinstance(call.func, ast.Attribute):
        arguments = call_arguments(call)
        target = arguments[0][1] if arguments and arguments[0][0] is None else None
    return target


def _project_device(index: AstIndex, target: ast.expr, project) -> bool:
    """``target`` is a call of a function of another project file that returns a CUDA device, or one when
    available (``ProjectModel.device_function``)."""
    if type(target) is not ast.Call or not project.has_device_functions:
        return False
    written = dotted_name(target.func)  # type: ignore[attr-defined]
    origins = index.shared.get("import_origins")
    if origins is None:
        origins = index.shared["import_origins"] = import_origins(index)
    origin = called_origin(origins, written) if written is not None else None  # type: ignore[arg-type]
    return origin is not None and project.device_function(*origin)


def returns_cuda_device(index: AstIndex, function: ast.AST) -> bool:
    """Every ``return`` of ``function`` gives a device the code shows, and at least one is CUDA:
    ``def dev(): if torch.cuda.is_available(): return torch.device("cuda"); return torch.device("cpu")``
    (CUDA when one is available). A constant f-string counts as its text (``torch.device(f"cuda")``)."""
    kinds = set()
    stack = list(function.body)  # type: ignore[attr-defined]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef):
            continue
        if kind is ast.Return:
            value = node.value  # type: ignore[attr-defined]
            if value is None:
                return False
            kinds.add(_device_value(index, value, function))
            continue
        stack.extend(ast.iter_child_nodes(node))
    return CUDA in kinds and kinds <= {CUDA, CPU}


def _device_value(index: AstIndex, expr: ast.expr, scope: AstScope) -> Optional[str]:
    if type(expr) is ast.Call and index.qualified_name(expr.func) == "torch.device":  # type: ignore[attr-defined]
        arguments = call_arguments(expr)  # type: ignore[arg-type]
        first = arguments[0][1] if arguments and arguments[0][0] is None else None
        if type(first) is ast.JoinedStr and first.values and type(first.values[0]) is ast.Constant:  # type: ignore[attr-defined]
            return CUDA if str(first.values[0].value).startswith("cuda") else CPU  # type: ignore[attr-defined]
        if first is None:
            return UNKNOWN
    kind = device_kind(index, expr, scope)
    return kind


def project_cuda_evidence(index: AstIndex, project) -> Optional[ast.Call]:
    """``cuda_evidence``, or the first ``.to(f())`` / ``device=f()`` where ``f`` is a function of another
    project file that returns a CUDA device, or one when available (``.to(dist_util.dev())``;
    ``ProjectModel.device_function``). None in a CPU program (``never_uses_cuda``)."""
    found = cuda_evidence(index)
    if found is not None or project is None or not project.has_device_functions:
        return found
    memo = index.shared.get("project_cuda_evidence", False)
    if memo is not False:
        return memo  # type: ignore[return-value]
    found = next((info.node for info in index.calls if (target := _device_argument(info.node)) is not None
                  and _project_device(index, target, project)), None)
    if found is not None and never_uses_cuda(index):
        found = None
    index.shared["project_cuda_evidence"] = found
    return found


_FP64_TEXT = re.compile(r"\btorch\.(float64|double)\b|set_default_dtype")


def uses_fp64(index: AstIndex) -> bool:
    """The file computes in double precision, or sets the default dtype: ``.double()``, ``torch.float64``."""
    if any(not info.node.args and not info.node.keywords for info in index.calls_by_name.get("double", ())):
        return True
    return bool(_FP64_TEXT.search(index.source))


# torch factories whose result lives on the default device (the CPU unless the code changes it), unless
# given a `device=`; `torch.tensor(...)` / `torch.as_tensor(...)` only of literal data (a tensor given as data
# keeps its own device).
_CPU_FACTORIES = {"zeros", "ones", "full", "empty", "rand", "randn", "randint", "arange", "linspace", "logspace",
                  "eye", "randperm"}
_LITERAL_DATA_FACTORIES = {"tensor", "as_tensor"}
# What changes the device a factory without `device=` uses, or moves a tensor where it is.
_DEFAULT_DEVICE_CALLS = {"torch.set_default_device", "torch.set_default_tensor_type"}
_DEVICE_MOVES = {"to", "cuda", "set_", "type", "share_memory_"}
_PARAMETERS = {"torch.nn.Parameter", "torch.nn.parameter.Parameter"}


def on_cpu(index: AstIndex, expr: ast.AST) -> bool:
    """``expr`` (a name, or a subscript or attribute chain of one: ``w``, ``w[0]``, ``w.grad``) is a tensor the
    file shows lives on the CPU: every binding of the name anywhere in the file is an assignment of a torch
    factory without a device or with a CPU one (``w = torch.tensor([1.0, 1.0])``, ``torch.zeros(3)``), nothing
    in the file moves it (``w.to(...)``, ``w.cuda()``, ``w.data = ...``, ``w.set_(...)``), and the file changes
    no default device (``torch.set_default_device``, ``with torch.device(...)``) and star-imports nothing; or a
    subscript or attribute chain of such a factory's call itself (``tok(text, return_tensors="pt")["input_ids"]``);
    through tensor methods other than moves (``w.sum(1)``, ``torch.zeros(3).float()``)."""
    names = _cpu_names(index)
    if names is None:
        return False
    root = expr
    while True:  # down the chain: tensor methods other than moves keep the device (`w.sum(1)`, `w.float()`)
        kind = type(root)
        if kind in (ast.Attribute, ast.Subscript):
            root = root.value  # type: ignore[attr-defined]
        elif kind is ast.Call:
            if _cpu_factory(index, root):  # type: ignore[arg-type]
                return True
            func = root.func  # type: ignore[attr-defined]
            if type(func) is not ast.Attribute or func.attr in _DEVICE_MOVES:
                return False
            root = func.value
        else:
            return kind is ast.Name and root.id in names  # type: ignore[attr-defined]


def cpu_loop(index: AstIndex, loop: AstLoopInfo) -> bool:
    """A loop outside every def (a script's or a notebook's top level) that can only compute on the CPU: nothing
    in it, nor in a module-level def of the file it calls, moves or makes anything on a device (``.to(...)``,
    ``.cuda()``, a ``device=`` that is not the CPU), and no module-level name it reads (the model, the loader,
    the data) has such a move in its last binding before the loop or is moved after that binding and before
    the loop, in a file that changes no default device: a tutorial notebook's training cell whose model only
    goes to the GPU in a later cell. (A name bound only in a branch or a loop counts by its last binding in
    the text: the cells of a notebook, and a script's top level, run in that order.)"""
    if loop.function is not None:
        return False
    memo = index.shared.setdefault("cpu_loops", {})
    if loop.node in memo:
        return memo[loop.node]  # type: ignore[no-any-return]
    memo[loop.node] = found = _cpu_loop(index, loop)
    return found


def _cpu_loop(index: AstIndex, loop: AstLoopInfo) -> bool:
    if _cpu_names(index) is None:
        return False  # a default device set somewhere: a factory without `device=` may make CUDA tensors
    functions = {f.name: f for f in index.functions if index.parent(f) is index.tree}
    origins = import_origins(index) if index.import_statements else {}
    bodies: List[ast.AST] = [loop.node]
    read = set()
    for body in bodies:  # the loop, then the module-level defs it calls (and those they call)
        for node in ast.walk(body):  # (``walk`` yields no plain name)
            if type(node) is ast.Name and type(node.ctx) is ast.Load:  # type: ignore[attr-defined]
                read.add(node.id)  # type: ignore[attr-defined]
            if type(node) is not ast.Call:
                continue
            if _places_on_a_device(index, node) or _runs_project_code(origins, node):
                return False  # (another project file's code may place the work itself: TD3's `policy.train`)
            if type(node.func) is ast.Name and node.func.id in functions \
                    and functions[node.func.id] not in bodies:  # type: ignore[attr-defined]
                bodies.append(functions[node.func.id])  # type: ignore[attr-defined]
    start = (loop.node.lineno, loop.node.col_offset)  # type: ignore[attr-defined]
    # a name the loop binds on a line above its first read there is the loop's own (`loss = ...` then
    # `loss.item()`): what it held before the loop is not read
    first_store: dict = {}
    first_load: dict = {}
    for node in ast.walk(loop.node):
        if type(node) is ast.Name:
            table = first_load if type(node.ctx) is ast.Load else first_store  # type: ignore[attr-defined]
            table[node.id] = min(table.get(node.id, node.lineno), node.lineno)  # type: ignore[attr-defined]
    read = {name for name in read if name not in first_store or first_load.get(name, 0) <= first_store[name]}
    moves = [(info.node, _moved_name(info.node)) for method in ("to", "cuda")
             for info in index.calls_by_name.get(method, ()) if info.function is None]
    seen: Set[Tuple[str, Tuple[int, int]]] = set()
    return not any(_may_be_on_a_device(index, origins, moves, name, start, seen, 0) for name in read)


def _may_be_on_a_device(index: AstIndex, origins: dict, moves: list, name: str, before: Tuple[int, int],
                        seen: Set[Tuple[str, Tuple[int, int]]], depth: int) -> bool:
    """What the module-level name ``name`` holds at ``before`` may be on a device: its last binding above there
    places something on one or builds something of another project file, or reads a name that may be (the
    model wrapped again: ``model = torch.compile(model)``), or a statement moves it after that binding
    (``net.cuda()``)."""
    if (name, before) in seen or depth > 6:
        return False
    seen.add((name, before))
    stores = [(use, holder) for use, holder in index.names_named(name)
              if type(use.ctx) is ast.Store and (use.lineno, use.col_offset) < before]
    if not stores:  # bound nowhere above (a name the file takes from elsewhere): moved above, or not in sight
        return any(moved == name and (call.lineno, call.col_offset) < before for call, moved in moves)
    use, holder = max(stores, key=lambda pair: (pair[0].lineno, pair[0].col_offset))
    statement = next((a for a in (holder, *index.ancestors(holder)) if isinstance(a, ast.stmt)), None)
    if statement is None or index.function_of(statement) is not None:
        return False  # (a def's own variable of that name)
    bound = (use.lineno, use.col_offset)
    if any(moved == name and bound < (call.lineno, call.col_offset) < before for call, moved in moves):
        return True  # `net.cuda()` after the binding, before the loop
    if type(statement) in (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.If, ast.Try):
        parts: List[ast.AST] = [statement.target if type(statement) in (ast.For, ast.AsyncFor) else statement]  # type: ignore[attr-defined]
        if type(statement) in (ast.For, ast.AsyncFor):
            parts.append(statement.iter)  # type: ignore[attr-defined]
        elif type(statement) in (ast.With, ast.AsyncWith):
            parts = [item.context_expr for item in statement.items]  # type: ignore[attr-defined]
    else:
        parts = [statement]
    for part in parts:
        for node in ast.walk(part):
            if type(node) is ast.Call and (_places_on_a_device(index, node) or _runs_project_code(origins, node)):
                return True  # (an instance of another project file's class may hold its modules on a GPU)
            if type(node) is ast.Name and type(node.ctx) is ast.Load and _may_be_on_a_device(  # type: ignore[attr-defined]
                    index, origins, moves, node.id, bound, seen, depth + 1):  # type: ignore[attr-defined]
                return True
    return False


def _moved_name(call: ast.Call) -> Optional[str]:
    """The name at the root of what ``call`` (a ``.to(...)`` / ``.cuda()``) moves: ``net`` of ``net.fc.cuda()``."""
    receiver = call.func.value if type(call.func) is ast.Attribute else None  # type: ignore[attr-defined]
    while type(receiver) in (ast.Attribute, ast.Subscript):
        receiver = receiver.value  # type: ignore[union-attr]
    return receiver.id if type(receiver) is ast.Name else None  # type: ignore[union-attr]


def _runs_project_code(origins: dict, call: ast.Call) -> bool:
    """``call`` names something the file imports from a module that may be of the project (``TD3.TD3(...)``)."""
    written = dotted_name(call.func)
    origin = called_origin(origins, written) if written is not None else None
    return origin is not None and may_be_project(origin[0], origin[1])


def _places_on_a_device(index: AstIndex, call: ast.Call) -> bool:
    """``x.to(...)`` (but ``.to(torch.float16)`` or another dtype), ``x.cuda()``, or a ``device=`` not the CPU."""
    name = call_name(call)
    if name == "cuda" and type(call.func) is ast.Attribute:
        return True
    if name == "to" and type(call.func) is ast.Attribute:
        arguments = call_arguments(call)
        return not (arguments and all(keyword in (None, "dtype") and _is_dtype(index, value)
                                      for keyword, value in arguments))
    device = keyword_value(call, "device")
    return device is not None and device_kind(index, device, index.scope_of(call)) != CPU


def _is_dtype(index: AstIndex, expr: ast.expr) -> bool:
    return (index.qualified_name(expr) or "").startswith("torch.") and type(expr) is ast.Attribute \
        and expr.attr in {"float16", "half", "bfloat16", "float32", "float", "float64", "double", "int64", "long",
                          "int32", "int", "bool", "uint8"}


def made_on_cpu(index: AstIndex, name: ast.Name) -> bool:
    """``name``'s one binding in its scope is a tensor made on the CPU (a torch factory without a device, or
    ``nn.Parameter`` of one: ``patch = nn.Parameter(torch.zeros(3, h, w))``) that nothing in that scope moves
    (``patch.to(...)``, ``patch.data = ...``), in a file that changes no default device (``on_cpu``'s test, for
    one scope: a parameter of that name elsewhere is another variable)."""
    if _cpu_names(index) is None:
        return False
    scope = index.scope_of(name)
    values = index.values_of(name.id, scope)
    if len(values) != 1 or type(values[0]) is not ast.Call:
        return False
    value = values[0]
    if index.qualified_name(value.func) in _PARAMETERS and value.args:  # type: ignore[attr-defined]
        value = value.args[0]  # type: ignore[attr-defined]
    if type(value) is not ast.Call or not _cpu_factory(index, value):
        return False
    for node in walk(scope):
        if index.scope_of(node) is not scope:
            continue
        if type(node) is ast.Call and type(node.func) is ast.Attribute and node.func.attr in _DEVICE_MOVES \
                and type(node.func.value) is ast.Name and node.func.value.id == name.id:
            return False
        if type(node) in (ast.Assign, ast.AugAssign) and any(
                type(target) is ast.Attribute and type(target.value) is ast.Name and target.value.id == name.id
                for target in (node.targets if type(node) is ast.Assign else [node.target])):
            return False
    return True


def _cpu_names(index: AstIndex) -> Optional[frozenset]:
    """``_cpu_tensor_names``, made once per file."""
    if "cpu_tensor_names" not in index.shared:
        index.shared["cpu_tensor_names"] = _cpu_tensor_names(index)
    return index.shared["cpu_tensor_names"]  # type: ignore[no-any-return]


def _cpu_tensor_names(index: AstIndex) -> Optional[frozenset]:
    """The names ``on_cpu`` takes; None where the file changes the default device or star-imports."""
    if any(index.qualified_name(info.node.func) in _DEFAULT_DEVICE_CALLS and not _keeps_the_cpu(index, info.node)
           for info in index.calls):
        return None
    factory_targets = set()  # the Name nodes an assignment of a CPU factory binds
    bound: dict = {}  # name -> every node that binds it
    moved = set()
    for node in every_node(index.tree):  # (the order is no matter: sets, and lists read by ``all``)
        kind = type(node)
        if kind is ast.Name:
            if type(node.ctx) is not ast.Load:  # type: ignore[attr-defined]
                bound.setdefault(node.id, []).append(node)  # type: ignore[attr-defined]
        elif kind is ast.Assign:
            if type(node.value) is ast.Call and _cpu_factory(index, node.value):  # type: ignore[attr-defined]
                factory_targets.update(t for t in node.targets if type(t) is ast.Name)  # type: ignore[attr-defined]
            for target in node.targets:  # type: ignore[attr-defined]
                if type(target) is ast.Attribute and type(target.value) is ast.Name:
                    moved.add(target.value.id)  # `w.data = w.data.cuda()`
        elif kind is ast.Call:
            func = node.func  # type: ignore[attr-defined]
            if type(func) is ast.Attribute and func.attr in _DEVICE_MOVES:
                root = func.value
                while type(root) in (ast.Attribute, ast.Subscript):
                    root = root.value
                if type(root) is ast.Name:
                    moved.add(root.id)
        elif kind in (ast.With, ast.AsyncWith):
            if any(type(item.context_expr) is ast.Call  # type: ignore[attr-defined]
                   and index.qualified_name(item.context_expr.func) == "torch.device"
                   for item in node.items):  # type: ignore[attr-defined]
                return None
        elif kind is ast.ImportFrom:
            if any(alias.name == "*" for alias in node.names):  # type: ignore[attr-defined]
                return None
            for alias in node.names:  # type: ignore[attr-defined]
                bound.setdefault(alias.asname or alias.name, []).append(alias)
        elif kind is ast.Import:
            for alias in node.names:  # type: ignore[attr-defined]
                bound.setdefault(alias.asname or alias.name.split(".")[0], []).append(alias)
        elif kind is ast.arg:
            bound.setdefault(node.arg, []).append(node)  # type: ignore[attr-defined]
        elif kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            bound.setdefault(node.name, []).append(node)  # type: ignore[attr-defined]
        elif kind in (ast.Global, ast.Nonlocal):
            for name in node.names:  # type: ignore[attr-defined]
                bound.setdefault(name, []).append(node)
        elif kind is ast.ExceptHandler or kind.__name__ in ("MatchAs", "MatchStar", "MatchMapping"):
            name = getattr(node, "name", None) or getattr(node, "rest", None)
            if name:
                bound.setdefault(name, []).append(node)
    return frozenset(name for name, nodes in bound.items()
                     if name not in moved and all(n in factory_targets for n in nodes))


def _sets_cuda_default(index: AstIndex, call: ast.Call, scope: AstScope) -> bool:
    """``torch.set_default_device(<a CUDA device>)`` or ``torch.set_default_tensor_type`` of a CUDA tensor type
    (``'torch.cuda.FloatTensor'``, ``torch.cuda.FloatTensor``)."""
    qualified = index.qualified_name(call.func)
    if qualified not in _DEFAULT_DEVICE_CALLS:
        return False
    arguments = call_arguments(call)
    if len(arguments) != 1 or arguments[0][0] not in (None, "device", "t"):
        return False
    value = arguments[0][1]
    if qualified == "torch.set_default_device":
        return device_kind(index, value, scope) == CUDA
    text = index.literal_string(value)
    if text is None and type(value) is ast.Attribute:
        text = index.qualified_name(value)
    return text is not None and text.startswith("torch.cuda.")


def _keeps_the_cpu(index: AstIndex, call: ast.Call) -> bool:
    """A default-device call that names a CPU type or device: ``torch.set_default_tensor_type('torch.DoubleTensor')``
    (a dtype, on the CPU), ``torch.set_default_device("cpu")``."""
    arguments = call_arguments(call)
    if len(arguments) != 1:
        return False
    value = arguments[0][1]
    text = index.literal_string(value)
    if text is None and type(value) is ast.Attribute:
        text = index.qualified_name(value)
    return text is not None and "cuda" not in text.lower() and (
        text.startswith("torch.") if index.qualified_name(call.func) == "torch.set_default_tensor_type"
        else text == "cpu")


def _cpu_factory(index: AstIndex, call: ast.Call) -> bool:
    """``call`` makes a tensor on the CPU (the default device): a torch factory with no ``device=`` or a CPU
    one, and no ``out=``; ``torch.tensor`` / ``torch.as_tensor`` only of literal numbers; a call given
    ``return_tensors="pt"`` (a Hugging Face tokenizer's or processor's batch, made on the CPU)."""
    asked = keyword_value(call, "return_tensors")
    if type(asked) is ast.Constant and asked.value == "pt":  # type: ignore[attr-defined]
        return True  # a Hugging Face tokenizer or processor: its `BatchEncoding` is made on the CPU
    qualified = index.qualified_name(call.func) or ""
    if not qualified.startswith("torch.") or qualified.count(".") != 1:
        return False
    name = qualified[len("torch."):]
    if name not in _CPU_FACTORIES and name not in _LITERAL_DATA_FACTORIES:
        return False
    if any(keyword.arg is None or keyword.arg == "out" for keyword in call.keywords) \
            or any(type(arg) is ast.Starred for arg in call.args):
        return False
    device = keyword_value(call, "device")
    if device is not None and device_kind(index, device, index.scope_of(call)) != CPU:
        return False
    if name in _LITERAL_DATA_FACTORIES:
        return bool(call.args) and _literal_numbers(call.args[0])
    return True


def _literal_numbers(node: ast.AST) -> bool:
    kind = type(node)
    if kind is ast.Constant:
        return type(node.value) in (int, float, bool, complex)  # type: ignore[attr-defined]
    if kind is ast.UnaryOp:
        return _literal_numbers(node.operand)  # type: ignore[attr-defined]
    if kind in (ast.List, ast.Tuple):
        return all(_literal_numbers(e) for e in node.elts)  # type: ignore[attr-defined]
    return False
