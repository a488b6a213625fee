"""TL502: Adam, AdamW or SGD on CUDA without the fused implementation."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING, Dict, Optional, Tuple, Union

import libcst as cst

from torchlint.facts.index import OPTIMIZER_NAME, AstIndex, call_arguments, dotted_name, is_literal, keyword_value
from torchlint.fix.comments import has_comment
from torchlint.config import Settings
from torchlint.facts.devices import cpu_loop, framework_placement, made_on_cpu, moves_to_cuda, project_cuda_evidence
from torchlint.facts.script import first_training_loop
from torchlint.facts.steps import ForeignStep, step_facts, step_place
from torchlint.rule import Applicability, Fix, FixAvailability, IndexContext, Rewrite, Rule
from torchlint.facts.text_gates import TRAINING_WORDS, any_of, may_train, may_use_cuda

if TYPE_CHECKING:
    from torchlint.fix.analysis import FileAnalysis

# The first PyTorch version with a fused CUDA implementation of each optimizer.
FUSED_SINCE: Dict[str, Tuple[int, int]] = {"Adam": (1, 13), "AdamW": (2, 0), "SGD": (2, 3)}
CPU_FUSED_SINCE = (2, 4)  # before it, fused=True raises on a CPU parameter
# From these versions the fused kernel also exists on the CPU and on MPS (Apple GPUs), the devices a
# script falls back to: only then is adding it unable to break a run on another machine.
EVERY_DEVICE_SINCE: Dict[str, Tuple[int, int]] = {"Adam": (2, 4), "AdamW": (2, 4), "SGD": (2, 5)}
_QUALIFIED = {f"torch.optim.{name}": name for name in FUSED_SINCE}
_QUALIFIED.update({"torch.optim.adam.Adam": "Adam", "torch.optim.adamw.AdamW": "AdamW", "torch.optim.sgd.SGD": "SGD"})
# Arguments that decide the implementation, or make fused=True an error.
_EXCLUSIVE = ("fused", "foreach", "differentiable")
# The fused kernels take real floating-point, dense parameters and gradients: complex parameters and
# sparse gradients (nn.Embedding(sparse=True)) raise. The code decides (`_unsupported`), not a word in it.
_COMPLEX_DTYPES = {f"torch.{name}" for name in ("complex32", "complex64", "complex128", "cfloat", "cdouble", "chalf")}
_COMPLEX_METHODS = ("cfloat", "cdouble", "chalf")
_COMPLEX_DTYPE_NAMES = sorted({name.split(".")[-1] for name in _COMPLEX_DTYPES})


def _unsupported(index: AstIndex) -> bool:
    """The file may train complex parameters or sparse gradients: it names a complex dtype (`torch.cfloat`,
    `from torch import complex64`), converts with `.cfloat()` and the like, or passes `sparse=True`.
    (Complex values inside `forward`, as `torch.view_as_complex` in rotary embeddings, are not parameters.)"""
    if any(target in _COMPLEX_DTYPES for target in index.imports.values()):
        return True
    if any(isinstance(info.node.func, ast.Attribute) for name in _COMPLEX_METHODS
           for info in index.calls_by_name.get(name, ())):
        return True
    if any(keyword.arg == "sparse" and is_literal(keyword.value, True) for info in index.calls
           for keyword in info.node.keywords):
        return True
    # (an attribute's qualified name ends with its own name: only attributes named like a complex dtype)
    return any(index.qualified_name(node) in _COMPLEX_DTYPES
               for name in _COMPLEX_DTYPE_NAMES for node in index.attributes_named(name))


def _may_train_sparse(index: AstIndex) -> Optional[str]:
    """How the file may train sparse gradients though it never passes a literal `sparse=True`: `sparse=` a value
    that may be true (`sparse=sample_softmax > 0`), or a `SparseAdam`, which takes sparse gradients only. Which
    optimizer holds them the file may not show (a list it fills itself): the finding is then reported
    without a fix."""
    memo = index.shared.get("tl502_sparse", False)
    if memo is False:
        flagged = next(((info, keyword) for info in index.calls for keyword in info.node.keywords
                        if keyword.arg == "sparse" and not is_literal(keyword.value, False)), None)
        if flagged is not None:
            info, keyword = flagged
            statement = next(a for a in index.ancestors(info.node) if isinstance(a, ast.stmt))
            memo = f"`sparse={index.code_for_node(keyword.value, statement)}`"
        else:
            memo = "a `SparseAdam`" if index.calls_to("torch.optim.SparseAdam") else None
        index.shared["tl502_sparse"] = memo
    return memo  # type: ignore[return-value]


# Devices whose fused support the rule does not track: no fix where the file may run on them. (MPS is
# covered by EVERY_DEVICE_SINCE.)
# Any case: `DistributedType.XLA`, `"xla"`, `TPU` (TPUs run through XLA).
_OTHER_DEVICE_TEXT = re.compile(r"(?<![A-Za-z])(xla|tpu|xpu|hpu|npu|mtia|privateuse1)(?![A-Za-z])", re.IGNORECASE)


class OptimizerNotFused(Rule):
    """## What it does
    Flags `torch.optim.Adam`, `AdamW` and `SGD` built without `fused=` in a file that trains on a CUDA
    device (it has a training loop and moves the model or its batches to CUDA, or hands the model to
    Accelerate's `accelerator.prepare(...)` or Lightning Fabric's `fabric.setup(...)`, which put it on
    CUDA where the machine has a GPU), for the optimizers that
    have a fused implementation in the configured `torch-version`: Adam since 1.13, AdamW since 2.0, SGD
    since 2.3. A training loop is one that calls `backward()` or steps an optimizer, or calls a function
    or a method that does (`agent.update(batch)` with `agent = Agent(...)`), or a function or method of another
    project file that runs a training loop of its own (an epoch loop that calls `train_epoch(model, loader,
    optimizer)` of `training.py`: the optimizer built here is stepped there); a device may also come from a
    function of another project file that returns a CUDA device, or one when available
    (`.to(dist_util.dev())`).

    A class of a file with no training loop of its own whose method a loop of another project file runs
    every iteration as its step (`policy.train(batch)` in `main.py`, `policy = TD3.TD3(...)`; or an object of
    the class that the file hands to a function of another project file whose loop calls that method:
    `rl_utils.train_off_policy_agent(env, agent, ...)` with `agent = SAC(...)`, its episode loop calling
    `agent.update(...)`, in a script or a notebook): the optimizers
    its `__init__` builds over the parameters of a module the class moves to CUDA (`self.actor =
    Actor(...).to(device)` with `device` CUDA, or CUDA when available or when a flag says so, `"cuda" if
    args.cuda else "cpu"`, also held as `self.device` where every binding of it in the class is such a device;
    or a parameter of `__init__` that every build of the class in the file passes such a device, `SAC(...,
    device)`; a device known only by its name does not count here), or over a list of tensors the class makes there
    (`Adam([self.log_alpha])` with `self.log_alpha = torch.zeros(1, requires_grad=True, device=self.device)`;
    one made without `device=` does not count), are reported, naming the loop (`main.py:112`); that file checked alone reads the loop
    off `main.py`. A method only called once, at set-up, or under a logging guard is no such step.

    A class that is handed its module (`def __init__(self, actor_critic, ...)`, the optimizer over
    `actor_critic.parameters()` or over `self.actor_critic` bound only to it) trains on CUDA where the files
    that build it move that module there first: `actor_critic.to(device)` (after its every binding, in the
    same function, with a device the code shows to be CUDA, or CUDA when available or on a flag) or
    `policy = Policy(...).to(device)`, then `agent = algo.PPO(actor_critic, ...)`. Its optimizers are reported
    where every such build (by position or keyword) in the files that build it with a CUDA module passes one,
    naming the move (`main.py:48`); silent where one of them passes a module it did not move there, or
    `__init__` binds the name again. A module-level function of a file without a training loop that builds
    an optimizer over its parameter's `.parameters()` (`def set_optimizer(opt, model)` in `util.py`) is read
    the same way at its calls: `model, criterion = set_model(opt)` in `main.py`, where `set_model` returns the
    model it moved to CUDA (`if torch.cuda.is_available(): model = model.cuda()`), makes it on CUDA.

    Silent for an optimizer stepped only in top-level loops that can only compute on the CPU (as TL101 tells
    one: a notebook's first model, moved to the GPU in a later cell), and over a list of tensors made on the
    CPU and never moved (`SGD([patch])` with
    `patch = nn.Parameter(torch.zeros(3, h, w))`: an adversarial patch trained against a GPU model updates on
    the CPU), and where `fused=` or `foreach=` is already passed (the author chose an implementation; `fused` and
    `foreach` cannot both be set), with `differentiable=`, with `**kwargs` or `*args` (they may set
    either), where the file has complex parameters or sparse gradients (`sparse=True`: the fused kernels
    reject both; where sparse gradients are only possible, `sparse=<a flag>` or a `SparseAdam` beside the
    optimizer, it reports without a fix), in tests, in files without a training loop (optimizer factories in
    library code, unless the project's calls show their module on CUDA, as above), in
    files with no sign of CUDA, and in CPU programs: a script (a `__main__` guard or a module-level training
    loop) in which nothing can reach a CUDA device, so that its `.to(device)` only looks like a GPU move by
    the name (a `--device` option defaulting to `"cpu"`, no `"cuda"` anywhere but in prose). Silent too for a
    plain `SGD` (no `momentum`, no `weight_decay`, no `maximize`, or each a literal 0) in a file that builds no
    `GradScaler`: its default foreach step is a single `_foreach_add_` over all parameters, as many launches as
    the fused kernel, so fusing gains nothing (with a `GradScaler` the fused kernel also does the unscaling and
    inf check the scaler would otherwise run as separate passes, and the finding stays).

    This rule is **on by default**: on public training code (GANs, reinforcement learning, image
    classification, detection) every finding was an optimizer that trains on CUDA with the fused kernel
    available. Its fix is unsafe (see Fix safety), so `fix --apply` alone never adds `fused=True`.

    ## Why is this slow?
    Since PyTorch 2.0 these optimizers use the multi-tensor (foreach) implementation on CUDA by default:
    each elementwise operation of the update is one launch over all parameters, so an AdamW step is about
    a dozen launches and reads and writes the parameters, gradients and both moments several times. The
    fused implementation does the whole update for a list of tensors in one kernel (horizontal and vertical
    fusion): one read and one write of each tensor per step. On large models the optimizer step is memory
    bound, and fusing typically makes it 1.5-3x faster; it also keeps `step` on the device, avoiding a
    host sync.

    ## Example
    ```python
    model = GPT(config).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1)
    ```

    ## Use instead
    ```python
    model = GPT(config).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1, fused=True)
    ```

    ## Fix safety
    The fix adds `fused=True`. It is **unsafe**:
    - Every parameter must be a floating-point tensor on a device with fused kernels: CUDA; since
      PyTorch 2.4 the CPU, and Apple GPUs (MPS) for Adam/AdamW; MPS for SGD since 2.5. A script that
      falls back to another device (`"cuda" if torch.cuda.is_available() else "cpu"`) would raise there,
      so the fix is offered only from those versions (2.4 for Adam/AdamW, 2.5 for SGD); before them the
      rule reports without a fix. Files that mention XLA (or TPU), XPU, HPU, NPU or MTIA devices, in any
      case (`DistributedType.XLA`), get no fix either, nor do files that hand the model to Accelerate or
      Fabric (the device is the one the run is launched on, which may be a TPU).
    - `fused=True` cannot be combined with `foreach=True` or `differentiable=True` (no finding then).
    - Resuming from a checkpoint: `optimizer.load_state_dict(...)` restores each parameter group's saved
      settings, including `fused` (`None` in a checkpoint saved without it). After loading such a
      checkpoint the optimizer runs the foreach path again and the fix silently does nothing; set
      `group["fused"] = True` for each group after loading, or save a new checkpoint. Where the file calls
      `optimizer.load_state_dict(...)`, the message says so.
    - Results are not bitwise equal to the foreach path (the same formulas, fused differently), so a run
      is not bit-reproducible against one recorded without it.

    ## PyTorch versions
    Fused CUDA implementations: Adam since 1.13, AdamW since 2.0, SGD since 2.3; CPU support for all three
    since 2.4; MPS support for Adam/AdamW since 2.4 and for SGD since 2.5. The foreach implementation is the CUDA default since 2.0 (before it, the default was the
    per-parameter loop). Adagrad also has a fused implementation in recent releases; the rule does not
    cover it.
    """

    code = "TL502"
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)
    name = "optimizer-not-fused"
    message = (
        "optimizer on CUDA without `fused=True`: the fused kernel does the whole update in one launch per "
        "tensor list instead of one per operation"
    )
    summary = "Adam/AdamW/SGD trained on CUDA without fused=True"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicabilities = (Applicability.UNSAFE,)
    # Text gate (may_fire): an optimizer's name, a training loop's calls, a device.

    text_gate = (("Adam", "SGD"), TRAINING_WORDS)

    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        return (settings.torch_version >= FUSED_SINCE["Adam"] and any_of(text, "Adam", "SGD") and may_train(text)
                and (may_use_cuda(text) or any_of(text, "Accelerator", "Fabric")))  # `framework_placement`

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        if _unsupported(index):
            return
        steps = step_facts(index, ctx.project)
        if first_training_loop(index) is None and not steps.step_loops and not steps.epoch_loops:
            self._detect_in_foreign_step(ctx, steps)
            self._detect_in_factories(ctx)
            return
        # a framework that places the model (Accelerate, Fabric) may launch it on a TPU: no fix then
        framework = framework_placement(index)
        on_cuda = project_cuda_evidence(index, ctx.project) is not None or framework is not None
        other_device = _OTHER_DEVICE_TEXT.search(ctx.source)
        for info in index.calls_to(*_QUALIFIED):  # however imported: `from torch.optim import AdamW as Opt`
            call = info.node
            optimizer = _QUALIFIED[index.qualified_name(call.func) or ""]
            if not _fusing_gains(ctx, call, optimizer) or _over_cpu_tensors(index, call) \
                    or _stepped_on_the_cpu(index, call):
                continue
            if on_cuda:
                self._report(ctx, call, optimizer, other_device, framework)
                continue
            built = _built_on_cuda(index, call, ctx.project)  # the module comes from a caller that moved it
            if built is not None:
                self._report(ctx, call, optimizer, other_device, None, built)

    def _detect_in_foreign_step(self, ctx: IndexContext, steps) -> None:
        """A file with no step loop of its own whose class trains in a loop of another project file
        (``policy.train(...)`` in ``main.py``, ``policy = TD3.TD3(...)``): the optimizers built in that class's
        ``__init__`` over the parameters of a module the class moves to CUDA (``self.actor =
        Actor(...).to(device)`` with ``device`` CUDA, or CUDA when available)."""
        index = ctx.index
        stepped = {}  # class -> (its method a foreign loop runs, that loop): one that steps, if any
        for function, loop in steps.reached.items():
            klass = index.class_of.get(function)
            if type(loop) is ForeignStep and klass is not None and (
                    klass not in stepped or (function in steps.stepping and stepped[klass][0] not in steps.stepping)):
                stepped[klass] = (function, loop)
        if not stepped:
            return
        other_device = _OTHER_DEVICE_TEXT.search(ctx.source)
        for info in index.calls_to(*_QUALIFIED):
            call, function = info.node, info.function
            klass = index.class_of.get(function) if function is not None else None
            if klass not in stepped or getattr(function, "name", None) != "__init__" \
                    or index.function_of(function) is not None:
                continue
            optimizer = _QUALIFIED[index.qualified_name(call.func) or ""]
            if not _fusing_gains(ctx, call, optimizer):
                continue
            own = _over_cuda_module(index, call, klass, ctx.project)  # a module the class moves to CUDA itself
            built = None if own else _built_on_cuda(index, call, ctx.project)  # else one its builders moved there
            if not own and built is None:
                continue
            method, loop = stepped[klass]
            note = (f" (`{klass.name}.{method.name}()` steps it every iteration of the training loop at "
                    f"{step_place(loop)})") + (built or "")
            self._report(ctx, call, optimizer, other_device, None, note)

    def _detect_in_factories(self, ctx: IndexContext) -> None:
        """A file with no training loop of its own whose module-level def builds an optimizer over
        ``model.parameters()`` of its parameter, where every call of it in the training files of the project
        passes a module moved to CUDA there (``set_optimizer(opt, model)`` in ``util.py``, ``model =
        model.cuda()`` in ``main.py``'s ``set_model``)."""
        index = ctx.index
        if ctx.project is None:
            return
        other_device = _OTHER_DEVICE_TEXT.search(ctx.source)
        for info in index.calls_to(*_QUALIFIED):
            call, function = info.node, info.function
            if function is None or index.parent(function) is not index.tree:
                continue
            optimizer = _QUALIFIED[index.qualified_name(call.func) or ""]
            if not _fusing_gains(ctx, call, optimizer):
                continue
            built = _built_on_cuda(index, call, ctx.project)
            if built is not None:
                self._report(ctx, call, optimizer, other_device, None, built)

    def _report(self, ctx: IndexContext, call: ast.Call, optimizer: str, other_device,
                framework: Optional[ast.Call], note: str = "") -> None:
        message = (
            f"`{optimizer}` on CUDA without `fused=True`: the fused kernel does the whole update in one launch "
            "per tensor list instead of one per operation" + note
        )
        if ctx.torch_version < CPU_FUSED_SINCE:
            ctx.report(call.func, message=(
                f"{message}; before PyTorch 2.4 it raises for CPU parameters, so pass it where the model is "
                "always on CUDA (not fixed automatically)"
            ))
            return
        if ctx.torch_version < EVERY_DEVICE_SINCE[optimizer]:
            ctx.report(call.func, message=(
                f"{message} (not fixed automatically: before PyTorch 2.5 fused `SGD` raises on Apple GPUs (MPS), "
                "which a script may fall back to)"
            ))
            return
        sparse = _may_train_sparse(ctx.index)
        if sparse is not None:
            ctx.report(call.func, message=(
                f"{message} (not fixed automatically: the file may train sparse gradients ({sparse}), which the "
                "fused kernels reject: pass it where this optimizer's parameters are dense)"
            ))
            return
        if other_device is not None:
            ctx.report(call.func, message=(
                f"{message} (not fixed automatically: the file may run on `{other_device.group(1)}`, whose "
                "fused support this rule does not check)"
            ))
            return
        if framework is not None:
            placed = framework.func.attr  # type: ignore[attr-defined]
            ctx.report(call.func, message=(
                f"{message} (not fixed automatically: `{placed}(...)` puts the model on the device the run is "
                "launched on, which may be one whose fused support this rule does not check, such as a TPU)"
            ))
            return
        refused = message + " (not fixed automatically: {reason})"
        if _resumes_optimizer(ctx.index):
            message += (
                "; after `load_state_dict` of a checkpoint saved without it, set `group[\"fused\"] = True` in "
                "each param group, or the restored settings turn it off again"
            )
        ctx.report(call.func, message=message, rewrite=Rewrite(_pass_fused, refused, call, reads=call))


def _pass_fused(call: cst.Call, analysis: FileAnalysis) -> Union[Fix, str]:
    new_call = append_keyword(call, "fused", cst.Name("True"))
    return Fix.replace(call, new_call, Applicability.UNSAFE) if new_call is not None else "it would move a comment"


def _over_cuda_module(index: AstIndex, call: ast.Call, klass: ast.ClassDef, project) -> bool:
    """The optimizer's parameters are ``self.<module>.parameters()`` of a module that the methods of ``klass``
    move to CUDA: ``self.actor = Actor(...).to(device)``, or ``self.actor.to(device)`` / ``.cuda()``."""
    arguments = call_arguments(call)
    params = arguments[0][1] if arguments and arguments[0][0] in (None, "params") else keyword_value(call, "params")
    if type(params) in (ast.List, ast.Tuple):  # `[self.log_alpha]`: tensors the class makes on CUDA
        return bool(params.elts) and all(_cuda_tensor_attribute(index, element, klass, project)  # type: ignore[attr-defined]
                                         for element in params.elts)  # type: ignore[attr-defined]
    if not (type(params) is ast.Call and type(params.func) is ast.Attribute and params.func.attr == "parameters"
            and not params.args and not params.keywords):
        return False
    module = params.func.value
    if not (type(module) is ast.Attribute and type(module.value) is ast.Name and module.value.id == "self"):
        return False
    for info in index.calls:
        function = info.function
        if function is None or index.class_of.get(function) is not klass \
                or not moves_to_cuda(index, info.node, function, project):
            continue
        moved = info.node.func.value if type(info.node.func) is ast.Attribute else None
        target = index.assigned_to.get(info.node)
        if any(type(node) is ast.Attribute and node.attr == module.attr and type(node.value) is ast.Name
               and node.value.id == "self" for node in (moved, target)):
            return True
    return False


def _stepped_on_the_cpu(index: AstIndex, call: ast.Call) -> bool:
    """The optimizer is bound to a name whose ``.step()`` the file calls only in top-level loops that can only
    compute on the CPU (``facts.devices.cpu_loop``: a notebook's first model, moved to the GPU in a later cell)."""
    target = index.assigned_to.get(call)
    name = dotted_name(target) if target is not None else None
    if name is None:
        return False
    loops = [info.loop for info in index.calls_by_name.get("step", ()) if info.loop is not None
             and type(info.node.func) is ast.Attribute and dotted_name(info.node.func.value) == name]
    return bool(loops) and all(cpu_loop(index, loop) for loop in loops)


def _over_cpu_tensors(index: AstIndex, call: ast.Call) -> bool:
    """The optimizer's parameters are a list of tensors made on the CPU and never moved there
    (``facts.devices.made_on_cpu``: ``patch = nn.Parameter(torch.zeros(3, h, w))``, then ``SGD([patch], ...)``)."""
    arguments = call_arguments(call)
    params = arguments[0][1] if arguments and arguments[0][0] in (None, "params") else keyword_value(call, "params")
    return type(params) in (ast.List, ast.Tuple) and bool(params.elts) \
        and all(type(element) is ast.Name and made_on_cpu(index, element) for element in params.elts)  # type: ignore[union-attr]


def _built_on_cuda(index: AstIndex, call: ast.Call, project) -> Optional[str]:
    """The optimizer is built in ``__init__`` of a module-level class over ``m.parameters()`` of a parameter
    ``m`` of that ``__init__`` (or of ``self.m`` bound only to it), or in a module-level def over its parameter
    ``m``, and every call of another project file that builds the class or calls the def (at least one) passes
    a module it moved to CUDA there (``algo.PPO(actor_critic, ...)`` after ``actor_critic.to(device)`` in
    ``main.py``; ``set_optimizer(opt, model)``): the note that says where, else None."""
    if project is None:
        return None
    function = index.function_of(call)
    if type(function) in (ast.FunctionDef, ast.AsyncFunctionDef) and index.parent(function) is index.tree:
        klass, skip, built = None, 0, function.name  # type: ignore[union-attr]
    else:
        klass = index.class_of.get(function) if function is not None else None
        if klass is None or getattr(function, "name", None) != "__init__" or index.function_of(function) is not None \
                or index.function_of(klass) is not None or index.in_class(klass):
            return None
        skip, built = 1, klass.name
    arguments = call_arguments(call)
    params = arguments[0][1] if arguments and arguments[0][0] in (None, "params") else keyword_value(call, "params")
    if not (type(params) is ast.Call and type(params.func) is ast.Attribute and params.func.attr == "parameters"
            and not params.args and not params.keywords):
        return None
    module = params.func.value
    if klass is not None and type(module) is ast.Attribute and type(module.value) is ast.Name \
            and module.value.id == "self":
        values = index.self_attributes.get((klass, module.attr), ())
        if len(values) != 1 or type(values[0]) is not ast.Name:
            return None
        module = values[0]
    if type(module) is not ast.Name:
        return None
    init = function.args  # type: ignore[union-attr]
    positional = [argument.arg for argument in (*init.posonlyargs, *init.args)][skip:]  # (a method: without `self`)
    if module.id not in positional and module.id not in [argument.arg for argument in init.kwonlyargs]:
        return None
    if any(value is not None for value in index.values_of(module.id, function)):  # type: ignore[arg-type]
        return None  # bound again in `__init__`
    builds = project.cuda_builds(built)
    if not builds:
        return None
    places = []
    for file, _name, positions, keywords in builds:
        lines = [line for at, line in positions if module.id in positional and positional.index(module.id) == at]
        lines += [line for keyword, line in keywords if keyword == module.id]
        if not lines:
            return None  # a build that does not pass a CUDA module there
        places.append(f"{file}:{lines[0]}")
    shown = ", ".join(dict.fromkeys(places))
    return f" (`{module.id}` is a module moved to CUDA at {shown} before `{built}(...)` gets it)"


def _cuda_tensor_attribute(index: AstIndex, element: ast.expr, klass: ast.ClassDef, project) -> bool:
    """``element`` is ``self.<name>`` and every binding of it in ``klass`` is a call that makes a tensor on a
    CUDA device (``self.log_alpha = torch.zeros(1, requires_grad=True, device=self.device)``)."""
    if not (type(element) is ast.Attribute and type(element.value) is ast.Name and element.value.id == "self"):
        return False
    values = index.self_attributes.get((klass, element.attr), ())
    return bool(values) and all(
        type(value) is ast.Call and keyword_value(value, "device") is not None  # type: ignore[arg-type]
        and moves_to_cuda(index, value, index.scope_of(value), project) for value in values)  # type: ignore[arg-type]


def _resumes_optimizer(index: AstIndex) -> bool:
    """The file restores an optimizer's state: ``optimizer.load_state_dict(...)``."""
    for info in index.calls_by_name.get("load_state_dict", ()):
        func = info.node.func
        owner = dotted_name(func.value) if isinstance(func, ast.Attribute) else None
        if owner is not None and OPTIMIZER_NAME.search(owner.split(".")[-1]):
            return True
    return False


def _fusing_gains(ctx: IndexContext, call: ast.Call, optimizer: str) -> bool:
    """The fused kernel exists in the configured torch, no argument chooses the implementation, and it does
    less than the default foreach step: not a plain ``SGD`` (no momentum, no weight decay, no ``maximize``)
    in a file without a ``GradScaler``, whose foreach step is one ``_foreach_add_`` over the parameters, as
    many launches as the fused kernel (a fused optimizer also takes a ``GradScaler``'s unscaling into its
    kernel, so with one the fused step still saves a pass)."""
    if ctx.torch_version < FUSED_SINCE[optimizer] or not _decides_nothing(call):
        return False
    if optimizer != "SGD" or ctx.index.calls_to(*_GRAD_SCALERS):
        return True
    arguments = call_arguments(call)
    for name, position in (("momentum", 2), ("weight_decay", 4), ("maximize", 6)):
        value = keyword_value(call, name)
        if value is None and len(arguments) > position and arguments[position][0] is None:
            value = arguments[position][1]
        if value is not None and not (type(value) is ast.Constant and type(value.value) in (int, float, bool)
                                      and value.value == 0):
            return True  # (`momentum=0.9`, `weight_decay=args.wd`: the foreach step does more)
    return False


_GRAD_SCALERS = ("torch.cuda.amp.GradScaler", "torch.amp.GradScaler", "torch.GradScaler",
                 "torch.amp.grad_scaler.GradScaler", "torch.cuda.amp.grad_scaler.GradScaler")


def _decides_nothing(call: ast.Call) -> bool:
    """No argument that chooses the implementation or could (``**kwargs``, ``*args``, param-group keys)."""
    if any(isinstance(arg, ast.Starred) for arg in call.args):
        return False
    if any(keyword.arg is None or keyword.arg in _EXCLUSIVE for keyword in call.keywords):
        return False
    arguments = call_arguments(call)
    first = arguments[0][1] if arguments and arguments[0][0] is None else None
    if isinstance(first, (ast.List, ast.Tuple)):
        for element in first.elts:
            if isinstance(element, ast.Dict) and any(
                isinstance(key, ast.Constant) and key.value in _EXCLUSIVE for key in element.keys
            ):
                return False
    return True


def append_keyword(call: cst.Call, name: str, value: cst.BaseExpression) -> Optional[cst.Call]:
    """``call`` with ``name=value`` added last, in the call's own layout; None where a comment would move."""
    if has_comment(call):  # a real comment: a `#` in a string moves nothing
        return None
    keyword = cst.Arg(
        keyword=cst.Name(name), value=value,
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    args = list(call.args)
    if not args:
        return call.with_changes(args=[keyword])
    last = args[-1]
    # The whitespace between two arguments, as the call writes it (", " or a newline and an indent).
    between = (args[-2].comma.whitespace_after if len(args) > 1 and isinstance(args[-2].comma, cst.Comma)
               else cst.SimpleWhitespace(" "))
    if isinstance(last.comma, cst.Comma):  # a trailing comma: `lr=1e-3,\n)`
        args[-1] = last.with_changes(comma=last.comma.with_changes(whitespace_after=between))
        args.append(keyword.with_changes(comma=last.comma))
    else:  # `lr=1e-3)` or `lr=1e-3\n)`
        args[-1] = last.with_changes(
            comma=cst.Comma(whitespace_after=between), whitespace_after_arg=cst.SimpleWhitespace("")
        )
        args.append(keyword.with_changes(whitespace_after_arg=last.whitespace_after_arg))
    return call.with_changes(args=args)

