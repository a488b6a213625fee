"""A correct, fast AdamW built on ``torch._foreach_*`` (issue 4).

Structured like ``torch/optim/adamw.py``: a small ``Optimizer`` subclass that
collects tensors per param group, plus free functions that do the math:

* ``_single_tensor_adamw``: one parameter at a time (the reference path);
* ``_multi_tensor_adamw``: the same math as a handful of ``torch._foreach_*``
  calls per (device, dtype) bucket, so the number of kernel launches does not
  grow with the number of parameters;
* ``_fused_adamw``: delegates to ``torch._fused_adamw_``: the default wherever
  this torch has the kernel for the parameters' device (CUDA; CPU since 2.4).

Semantics follow ``torch.optim.AdamW`` exactly (decoupled weight decay, bias
correction, ``amsgrad``, ``maximize``, per-group hyper-parameters), and the
state layout is the same (``step`` / ``exp_avg`` / ``exp_avg_sq`` /
``max_exp_avg_sq``, ``step`` a float32 0-d CPU tensor unless fused) so
checkpoints move freely between this class and ``torch.optim.AdamW``.

Keeping ``step`` on the host is deliberate: bias corrections are then python
floats computed without touching the device (``.item()`` on a CPU tensor is
not a device sync), and go to the kernels as scalar arguments.
"""

from __future__ import annotations

import functools
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor
from torch.optim.optimizer import Optimizer
from torch.utils._foreach_utils import _group_tensors_by_device_and_dtype

__all__ = ["AdamW", "uses_foreach_by_default", "uses_fused_by_default", "CPU_FOREACH_MAX_NUMEL"]

Scalar = Union[float, Tensor]

# --- choosing the implementation when ``foreach=None`` ----------------------
#
# On CUDA (and the other devices with real multi-tensor kernels) foreach always
# pays: one launch covers many tensors, and launches are the cost that matters.
#
# On the CPU there are no multi-tensor kernels: ``_foreach_*`` loops over the
# tensors in C++, calling the same per-tensor kernels. What it saves is the
# python/dispatcher overhead per tensor; what it costs is cache locality,
# because it runs one op over *all* tensors before the next op, so every op
# re-streams every tensor from memory, while the loop runs all ops on one
# tensor while it is still in cache. Measured here for torch.optim.AdamW
# (torch 2.13 CPU, 1 thread, median of 15 steps, 2-core AMD EPYC):
#
#     numel per tensor x count   loop ms   foreach ms   loop/foreach
#         1,000 x 200              5.41        2.96         1.82
#         4,000 x 200              6.50        5.84         1.11
#        16,000 x 100              4.93        7.85         0.63
#        64,000 x  40              5.25       10.50         0.50
#     1,000,000 x   8             31.51       32.57         0.97
#
# Our foreach path cuts CPU lists into L2-sized chunks (CPU_FOREACH_CHUNK_NUMEL
# below), which removes most of that penalty. Re-measured after the loop stopped
# keeping the previous tensor's temporaries alive (`python -m
# torchlint.runtime.bench_optim --crossover --threads 1 --steps 15`, ours with
# fused=False, on a shared 2-core machine under load 10-14: ratios only):
#
#     numel per tensor x count   loop ms   foreach ms   loop/foreach
#           256 x 400             62.79       44.87         1.40
#         4,096 x 200             73.19       63.29         1.16
#         8,192 x 100             55.48       37.36         1.49
#        16,384 x 100             68.14       71.73         0.95
#        65,536 x  40             75.75      100.85         0.75
#     1,000,000 x   8            195.53      199.60         0.98
#     4,000,000 x   8            815.86      811.91         1.00
#
# So on the CPU foreach pays for small tensors only; the crossover is still
# between 8k and 16k elements, and for large tensors the two now tie. When the
# fused kernel is not used, the default therefore decides per tensor: CPU
# tensors of at most CPU_FOREACH_MAX_NUMEL elements go through the foreach path,
# larger ones through the loop (both paths give the same numbers bit for bit on
# the CPU, so a group can be split between them). Where torch has a fused kernel
# for the device (CPU since 2.4), the default is fused instead: 2 to 6x faster
# than either on every shape measured (benchmarks/results/optim_cpu_*.txt).
CPU_FOREACH_MAX_NUMEL = 8192


@functools.lru_cache(maxsize=None)
def _foreach_devices() -> FrozenSet[str]:
    # Devices with real multi-tensor-apply kernels (cuda, xpu, ...; not cpu).
    from torch.optim.optimizer import _get_foreach_kernels_supported_devices

    return frozenset(_get_foreach_kernels_supported_devices())


_PLAIN_TENSOR_TYPES = (Tensor, torch.nn.Parameter)


@functools.lru_cache(maxsize=None)
def _fused_devices() -> FrozenSet[str]:
    # Devices where this torch has ``_fused_adamw_`` (cuda since 2.0, cpu since 2.4, mps, xpu...).
    if not hasattr(torch, "_fused_adamw_"):
        return frozenset()
    from torch.optim.optimizer import _get_fused_kernels_supported_devices

    return frozenset(_get_fused_kernels_supported_devices())


def uses_fused_by_default(param: Tensor) -> bool:
    """The ``fused=None`` choice for one parameter: torch's fused kernel wherever this torch has one for the
    parameter's device and dtype. It is the fastest path measured on every shape (CPU: 2 to 6x our foreach
    and loop paths, see benchmarks/results/optim_cpu_*.txt), and it computes the same update."""
    return (type(param) in _PLAIN_TENSOR_TYPES and torch.is_floating_point(param)
            and param.device.type in _fused_devices())


def uses_foreach_by_default(param: Tensor) -> bool:
    """The ``foreach=None`` choice for one parameter (see the table above)."""
    if type(param) not in _PLAIN_TENSOR_TYPES:
        return False  # subclasses (DTensor, ...) may not support _foreach ops
    if param.device.type in _foreach_devices():
        return True
    if param.device.type == "cpu":
        return param.numel() <= CPU_FOREACH_MAX_NUMEL
    return False


# --- small helpers ----------------------------------------------------------


def _host_float(x: Scalar) -> float:
    """A python float from a float or a 1-element tensor (a sync only if on device)."""
    return x.item() if isinstance(x, Tensor) else float(x)


def _as_torch_beta(beta: Scalar) -> Scalar:
    """A beta as torch's single-tensor loop uses it: floats as floats, tensors as 0-dim tensors."""
    if isinstance(beta, Tensor):
        return beta.squeeze() if beta.dim() != 0 else beta
    return beta


def _scalar_dtype() -> torch.dtype:
    # torch keeps a non-fused `step` in float32 (float64 if that is the default dtype).
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32


class _BiasCorrections:
    """Host-side scalars that depend only on the step count, cached per step value.

    All parameters of a group usually share one step count, so the powers are
    computed once per step instead of once per tensor.
    """

    def __init__(self, lr: Scalar, beta1: Scalar, beta2: Scalar) -> None:
        self.lr, self.beta1, self.beta2 = lr, beta1, beta2
        self._cache: Dict[float, Tuple[float, float]] = {}

    def __call__(self, step: float) -> Tuple[float, float]:
        """(-lr / (1 - beta1**t), sqrt(1 - beta2**t)) for step t."""
        cached = self._cache.get(step)
        if cached is None:
            bias_correction1 = 1 - self.beta1**step
            bias_correction2 = 1 - self.beta2**step
            # With a float32 tensor lr, `lr / bc1` rounds to float32 exactly as
            # torch's own loop does; with a float lr this is plain float math.
            neg_step_size = -_host_float(self.lr / bias_correction1)
            cached = (neg_step_size, bias_correction2**0.5)
            self._cache[step] = cached
        return cached


def _decay_factor(lr: Scalar, weight_decay: float) -> float:
    # Same expression as torch (`1 - lr * weight_decay`, float32 if lr is a tensor).
    return _host_float(1 - lr * weight_decay)


# --- the three implementations ----------------------------------------------


def _single_tensor_adamw(
    params: List[Tensor],
    grads: List[Tensor],
    exp_avgs: List[Tensor],
    exp_avg_sqs: List[Tensor],
    max_exp_avg_sqs: List[Tensor],
    state_steps: List[Tensor],
    *,
    amsgrad: bool,
    beta1: Scalar,
    beta2: Scalar,
    lr: Scalar,
    weight_decay: float,
    eps: float,
    maximize: bool,
) -> None:
    """Reference path: one parameter at a time, same op sequence as torch's loop."""
    corrections = _BiasCorrections(lr, beta1, beta2)
    decay = _decay_factor(lr, weight_decay) if weight_decay != 0 else 1.0
    # Tensor betas stay tensors, as in torch: beta1 cast to each parameter's device and dtype for the lerp,
    # beta2 and the bias corrections in the betas' own dtype (float32), never rounded through a Python float.
    beta1_by_key: Dict[Tuple[torch.device, torch.dtype], Tensor] = {}
    for i, param in enumerate(params):
        grad = -grads[i] if maximize else grads[i]
        exp_avg, exp_avg_sq, step_t = exp_avgs[i], exp_avg_sqs[i], state_steps[i]

        step_t += 1
        if weight_decay != 0:
            param.mul_(decay)  # decoupled: decay the weights, not the gradient
        device_beta1: Scalar = beta1
        if isinstance(beta1, Tensor):
            key = (param.device, param.dtype)
            if key not in beta1_by_key:
                beta1_by_key[key] = beta1.to(device=param.device, dtype=param.dtype, non_blocking=True)
            device_beta1 = beta1_by_key[key]
        exp_avg.lerp_(grad, 1 - device_beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)

        neg_step_size, bias_correction2_sqrt = corrections(step_t.item())
        if amsgrad:
            torch.maximum(max_exp_avg_sqs[i], exp_avg_sq, out=max_exp_avg_sqs[i])
            second_moment = max_exp_avg_sqs[i]
        else:
            second_moment = exp_avg_sq
        # div_ in place: same numbers as torch's `sqrt() / c`, one param-sized allocation less
        denom = second_moment.sqrt().div_(bias_correction2_sqrt).add_(eps)
        param.addcdiv_(exp_avg, denom, value=neg_step_size)
        # Free this tensor's temporaries before the next iteration allocates its own: otherwise two
        # param-sized buffers live at once, and for large tensors the allocator maps fresh pages each time
        # (8 x 4M fp32: ~19,500 page faults per step, 57 -> 35 ms measured).
        del grad, denom, second_moment


def _increment_steps(steps: List[Tensor]) -> None:
    if steps[0].is_cpu:
        # One wrapped tensor instead of re-wrapping the python 1 per tensor
        # (the CPU foreach fallback loops); alpha picks the right overload.
        torch._foreach_add_(steps, torch.tensor(1.0), alpha=1.0)
    else:
        torch._foreach_add_(steps, 1)


def _foreach_scale_(tensors: List[Tensor], factor: float) -> None:
    """``t.mul_(factor)`` for each t, rounding exactly like the single-tensor op.

    On the CPU, ``_foreach_mul_(list, python_scalar)`` rounds the scalar to the
    tensors' dtype first: for bf16 params 0.99 becomes 0.98828125 and a
    weight-decay factor like 1 - 1e-5 becomes 1.0 (torch 2.13's own foreach
    AdamW inherits this). For bf16/fp16 a float32 0-d tensor takes the Tensor
    overload, which multiplies in float32 like ``Tensor.mul_(float)`` does.
    (fp32/fp64 are unaffected, and a 0-d tensor there would change the
    promotion for 0-d params, so they keep the python scalar.)
    """
    if tensors[0].is_cpu and tensors[0].dtype in (torch.bfloat16, torch.float16):
        torch._foreach_mul_(tensors, torch.tensor(factor, dtype=torch.float32))
    else:
        torch._foreach_mul_(tensors, factor)


def _cpu_chunks(tensors: List[Tensor], max_numel: int) -> List[slice]:
    """Consecutive slices of ``tensors`` holding at most ``max_numel`` elements each
    (a tensor larger than that gets a slice of its own)."""
    chunks, start, total = [], 0, 0
    for i, t in enumerate(tensors):
        if i > start and total + t.numel() > max_numel:
            chunks.append(slice(start, i))
            start, total = i, 0
        total += t.numel()
    chunks.append(slice(start, len(tensors)))
    return chunks


# On the CPU the foreach ops loop over tensors op by op (see the table at the
# top), so a long list streams every tensor through memory once per op. Cutting
# the list into chunks whose working set (param, grad, 2-3 moments, denom, in
# fp32: ~6 x 4 bytes per element) stays in a core's L2 (2 MiB here) keeps the
# dispatch savings and restores the loop's cache locality. On CUDA the whole
# bucket goes in one call: launches are what cost there.
CPU_FOREACH_CHUNK_NUMEL = 64 * 1024


def _multi_tensor_adamw(
    params: List[Tensor],
    grads: List[Tensor],
    exp_avgs: List[Tensor],
    exp_avg_sqs: List[Tensor],
    max_exp_avg_sqs: List[Tensor],
    state_steps: List[Tensor],
    *,
    amsgrad: bool,
    beta1: float,
    beta2: float,
    lr: Scalar,
    weight_decay: float,
    eps: float,
    maximize: bool,
) -> None:
    """Foreach path: ~10 ``_foreach_*`` calls per (device, dtype) bucket (per chunk on the CPU)."""
    if not params:
        return
    corrections = _BiasCorrections(lr, beta1, beta2)
    decay = _decay_factor(lr, weight_decay) if weight_decay != 0 else 1.0
    buckets = _group_tensors_by_device_and_dtype(
        [params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps]  # type: ignore[list-item]
    )
    for bucket, _ in buckets.values():
        b_params = bucket[0]
        chunks = _cpu_chunks(b_params, CPU_FOREACH_CHUNK_NUMEL) if b_params[0].is_cpu else [slice(None)]
        for chunk in chunks:
            _foreach_update(
                *(lst[chunk] if (k != 4 or amsgrad) else lst for k, lst in enumerate(bucket)),
                corrections=corrections,
                amsgrad=amsgrad,
                beta1=beta1,
                beta2=beta2,
                decay=decay,
                eps=eps,
                maximize=maximize,
            )


def _foreach_update(
    params: List[Tensor],
    grads: List[Tensor],
    exp_avgs: List[Tensor],
    exp_avg_sqs: List[Tensor],
    max_exp_avg_sqs: List[Tensor],
    steps: List[Tensor],
    *,
    corrections: _BiasCorrections,
    amsgrad: bool,
    beta1: float,
    beta2: float,
    decay: float,
    eps: float,
    maximize: bool,
) -> None:
    """One AdamW step for lists of same-device, same-dtype tensors."""
    if maximize:
        grads = torch._foreach_neg(grads)  # new list: never touch .grad

    _increment_steps(steps)
    if decay != 1.0:
        _foreach_scale_(params, decay)
    torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
    _foreach_scale_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
    del grads  # free the negated copy (maximize) before allocating `denom`

    # Per-tensor host scalars: steps may differ between tensors (e.g. after
    # adding a parameter later), so each tensor gets its own correction.
    neg_step_sizes, bias_correction2_sqrts = zip(*(corrections(s.item()) for s in steps))

    if amsgrad:
        torch._foreach_maximum_(max_exp_avg_sqs, exp_avg_sqs)
        denom = torch._foreach_sqrt(max_exp_avg_sqs)
    else:
        denom = torch._foreach_sqrt(exp_avg_sqs)
    torch._foreach_div_(denom, list(bias_correction2_sqrts))  # in place; returns None
    torch._foreach_add_(denom, eps)
    torch._foreach_addcdiv_(params, exp_avgs, denom, list(neg_step_sizes))


def _fused_adamw(
    params: List[Tensor],
    grads: List[Tensor],
    exp_avgs: List[Tensor],
    exp_avg_sqs: List[Tensor],
    max_exp_avg_sqs: List[Tensor],
    state_steps: List[Tensor],
    *,
    amsgrad: bool,
    beta1: float,
    beta2: float,
    lr: Scalar,
    weight_decay: float,
    eps: float,
    maximize: bool,
) -> None:
    """Delegates to torch's fused kernel (steps live on the params' device here)."""
    if not params:
        return
    buckets = _group_tensors_by_device_and_dtype(
        [params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps]  # type: ignore[list-item]
    )
    for (device, _), ((b_params, b_grads, b_exp_avgs, b_exp_avg_sqs, b_max_sqs, b_steps), _) in buckets.items():
        device_lr = lr.to(device) if isinstance(lr, Tensor) else lr
        torch._foreach_add_(b_steps, 1)
        torch._fused_adamw_(
            b_params,
            b_grads,
            b_exp_avgs,
            b_exp_avg_sqs,
            b_max_sqs,
            b_steps,
            amsgrad=amsgrad,
            lr=device_lr,
            beta1=beta1,
            beta2=beta2,
            weight_decay=weight_decay,
            eps=eps,
            maximize=maximize,
            grad_scale=None,
            found_inf=None,
        )


# --- the optimizer ------------------------------------------------------------


class AdamW(Optimizer):
    """AdamW with torch's semantics and state layout, and a fast foreach path.

    Args:
        params: parameters or param groups (each group may override any
            hyper-parameter below).
        lr: learning rate, a float or a 1-element tensor. A tensor is read on
            the host once per step (keep it on the CPU to avoid a device sync).
        betas: (beta1, beta2), floats (1-element tensors are read on the host).
        eps: added to the denominator.
        weight_decay: decoupled weight decay coefficient.
        amsgrad: use the running maximum of the second moment.
        maximize: ascend instead of descend.
        foreach: True: foreach path; False: per-parameter loop; None: decide
            per parameter with :func:`uses_foreach_by_default` (foreach on
            CUDA, on the CPU only for small tensors) when not fused.
        fused: True delegates to ``torch._fused_adamw_`` (steps then live on the
            parameters' device as float32, as in torch). Cannot be combined
            with ``foreach=True``. None (the default) with ``foreach=None``:
            fused wherever :func:`uses_fused_by_default` holds for every
            parameter of the group (the fastest path measured on every shape),
            else the foreach/loop choice above. ``fused=False`` never fuses.
    """

    def __init__(
        self,
        params: Any,
        lr: Scalar = 1e-3,
        betas: Tuple[Scalar, Scalar] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach: Optional[bool] = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: Optional[bool] = None,
    ) -> None:
        # torch.optim.AdamW's checks, in its order and with its messages.
        if isinstance(lr, Tensor):
            if foreach and not capturable:
                raise ValueError("lr as a Tensor is not supported for capturable=False and foreach=True")
            if lr.numel() != 1:
                raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        for i, beta in enumerate(betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {beta}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not (all(isinstance(b, float) for b in betas) or all(isinstance(b, Tensor) for b in betas)):
            raise ValueError("betas must be either both floats or both Tensors")
        for i, beta in enumerate(betas):
            if isinstance(beta, Tensor):
                if not capturable and foreach:
                    raise ValueError(f"betas[{i}] as a Tensor is not supported for capturable=False and foreach=True")
                if beta.numel() != 1:
                    raise ValueError(f"Tensor betas[{i}] must be 1-element")
        if fused and differentiable:
            raise RuntimeError("`fused` does not support `differentiable`")
        if fused and foreach:
            raise RuntimeError("`fused` and `foreach` cannot be `True` together.")
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            amsgrad=amsgrad,
            maximize=maximize,
            foreach=foreach,
            fused=fused,
            # Same group keys as torch.optim.AdamW so param_groups (and thus
            # state dicts) are interchangeable. A group with capturable or
            # differentiable runs torch's own update (``_torch_adamw``).
            capturable=capturable,
            differentiable=differentiable,
            decoupled_weight_decay=True,
        )
        super().__init__(params, defaults)
        if fused:
            for group in self.param_groups:
                for p in group["params"]:
                    _check_fused_supported(p)

    def __setstate__(self, state: Dict[str, Any]) -> None:
        # Also runs inside load_state_dict: fill keys older/foreign checkpoints
        # lack, and turn a python-number step into torch's tensor form.
        super().__setstate__(state)
        for group in self.param_groups:
            for key, value in (("amsgrad", False), ("maximize", False), ("foreach", None), ("fused", None)):
                group.setdefault(key, value)
            group.setdefault("capturable", False)
            group.setdefault("differentiable", False)
            group["decoupled_weight_decay"] = True
            for p in group["params"]:
                p_state = self.state.get(p, {})
                if p_state and not torch.is_tensor(p_state["step"]):
                    p_state["step"] = _new_step(p, group, float(p_state["step"]))

    @staticmethod
    def _uses_fused(group: Dict[str, Any]) -> bool:
        """``fused=True``; or, with neither ``fused`` nor ``foreach`` given, every parameter with a grad on a
        device and dtype that have torch's fused kernel (``uses_fused_by_default``)."""
        if group["fused"] is not None or group["foreach"] is not None:
            return bool(group["fused"])
        with_grad = [p for p in group["params"] if p.grad is not None]
        return bool(with_grad) and all(uses_fused_by_default(p) and _same_layout(p, p.grad) for p in with_grad)

    def _collect(self, group: Dict[str, Any], fused: bool = False) -> Tuple[List[Tensor], ...]:
        """Lists of (param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step) for params with a grad.

        For the fused kernel a step must be a float32 tensor on the parameter's device (torch's layout for
        fused): a step made for another path (or loaded from a checkpoint) is moved there once."""
        params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps = [], [], [], [], [], []
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError("AdamW does not support sparse gradients, please consider SparseAdam instead")
            state = self.state[p]
            if len(state) == 0:
                state["step"] = _new_step(p, group, 0.0, fused)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                if group["amsgrad"]:
                    state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            as_real = torch.view_as_real if torch.is_complex(p) else (lambda t: t)
            params.append(as_real(p))
            grads.append(as_real(p.grad))
            exp_avgs.append(as_real(state["exp_avg"]))
            exp_avg_sqs.append(as_real(state["exp_avg_sq"]))
            if group["amsgrad"]:
                max_exp_avg_sqs.append(as_real(state["max_exp_avg_sq"]))
            if fused and (state["step"].device != p.device or state["step"].dtype != torch.float32):
                state["step"] = state["step"].to(device=p.device, dtype=torch.float32)
            steps.append(state["step"])
        return params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        """Perform one optimization step; ``closure`` re-evaluates the loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        for group in self.param_groups:
            if group["capturable"] or group["differentiable"]:
                tensors = self._collect(group, bool(group["fused"]))
                if tensors[0]:
                    _torch_adamw(group, tensors)
                continue
            fused = self._uses_fused(group)
            tensors = self._collect(group, fused)
            if not tensors[0]:
                continue
            beta1, beta2 = (_host_float(b) for b in group["betas"])
            # The single-tensor path takes tensor betas as torch's loop does (bit-exact with foreach=False).
            tensor_betas = dict(zip(("beta1", "beta2"), (_as_torch_beta(b) for b in group["betas"])))
            hyper = dict(
                amsgrad=group["amsgrad"],
                beta1=beta1,
                beta2=beta2,
                lr=group["lr"],
                weight_decay=group["weight_decay"],
                eps=group["eps"],
                maximize=group["maximize"],
            )
            if fused:
                _fused_adamw(*tensors, **hyper)
            elif group["foreach"] is None:
                on_foreach, on_loop = _split_by_default_path(tensors, group["amsgrad"])
                _multi_tensor_adamw(*on_foreach, **hyper)
                _single_tensor_adamw(*on_loop, **{**hyper, **tensor_betas})
            elif group["foreach"]:
                _multi_tensor_adamw(*tensors, **hyper)
            else:
                _single_tensor_adamw(*tensors, **{**hyper, **tensor_betas})
        return loss


def _torch_adamw(group: Dict[str, Any], tensors: Tuple[List[Tensor], ...]) -> None:
    """A capturable or differentiable group: torch's own functional AdamW (its choice of path included),
    with the grad mode torch's ``step`` gives it."""
    from torch.optim.adam import adam

    beta1, beta2 = group["betas"]
    with torch.set_grad_enabled(group["differentiable"]):
        adam(*tensors, foreach=group["foreach"], capturable=group["capturable"],
             differentiable=group["differentiable"], fused=group["fused"], decoupled_weight_decay=True,
             amsgrad=group["amsgrad"], beta1=beta1, beta2=beta2, lr=group["lr"],
             weight_decay=group["weight_decay"], eps=group["eps"], maximize=group["maximize"])


def _same_layout(param: Tensor, grad: Tensor) -> bool:
    """The gradient lies in memory as its parameter does, and both are dense: the fused kernel walks the
    tensors' storage in one order, so a transposed gradient, or a channels_last parameter with a contiguous
    gradient, would be paired element for element with the wrong entries' moments (torch's ``fused=True``
    is wrong there too; its default path is not)."""
    return (param.layout == grad.layout == torch.strided and param.shape == grad.shape
            and param.stride() == grad.stride() and _dense(param))


def _dense(t: Tensor) -> bool:
    """No gaps and no overlap: the strides, sorted, are the running products of the sizes."""
    expected = 1
    for stride, size in sorted((stride, size) for size, stride in zip(t.shape, t.stride()) if size != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _check_fused_supported(p: Tensor) -> None:
    from torch.optim.optimizer import _get_fused_kernels_supported_devices

    if not (p.device.type in _get_fused_kernels_supported_devices() and torch.is_floating_point(p)):
        raise RuntimeError(
            "`fused=True` requires floating point parameters on a device with fused kernels, "
            f"got {p.dtype} on {p.device.type}"
        )


def _new_step(p: Tensor, group: Dict[str, Any], value: float, fused: bool = False) -> Tensor:
    # torch's layout: on the param's device in float32 when fused/capturable,
    # otherwise a CPU scalar so reading it never syncs a device.
    if fused or group.get("fused") or group.get("capturable"):
        return torch.tensor(value, dtype=torch.float32, device=p.device)
    return torch.tensor(value, dtype=_scalar_dtype())


def _split_by_default_path(
    tensors: Sequence[List[Tensor]], amsgrad: bool
) -> Tuple[Tuple[List[Tensor], ...], Tuple[List[Tensor], ...]]:
    """Split the per-parameter lists into (foreach part, loop part) for ``foreach=None``."""
    params = tensors[0]
    choices = [uses_foreach_by_default(p) for p in params]
    if all(choices):
        return tuple(tensors), tuple([] for _ in tensors)
    if not any(choices):
        return tuple([] for _ in tensors), tuple(tensors)

    def pick(want: bool) -> Tuple[List[Tensor], ...]:
        out = []
        for k, lst in enumerate(tensors):
            if k == 4 and not amsgrad:  # max_exp_avg_sqs is empty without amsgrad
                out.append([])
            else:
                out.append([t for t, c in zip(lst, choices) if c == want])
        return tuple(out)

    return pick(True), pick(False)
