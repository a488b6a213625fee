"""The "before" of the project's harness: the seed's per-parameter AdamW, corrected.

Deliberately kept as a plain python loop over parameters with several kernel
launches per parameter (the style torchlint flags); see ``adamw.AdamW`` for the
fast version. Fixes relative to the seed:

* state keys and ``step`` layout are torch's (``step`` a float32 0-d CPU
  tensor, ``exp_avg``, ``exp_avg_sq``), so checkpoints interchange with
  ``torch.optim.AdamW``;
* bias corrections are computed from the step as a python number instead of
  raising a 0-d tensor to a power for every parameter;
* weight decay is skipped when it is 0 (as torch does), and the update runs
  under ``no_grad``; sparse gradients are rejected.

``amsgrad`` and ``maximize`` are not supported (not needed for the harness).
"""

from __future__ import annotations

import torch

__all__ = ["ReferenceAdamW"]


class ReferenceAdamW(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"Invalid betas: {betas}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr = group["lr"]
            beta1, beta2 = group["betas"]
            weight_decay = group["weight_decay"]
            eps = group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                if grad.is_sparse:
                    raise RuntimeError("ReferenceAdamW does not support sparse gradients")
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = torch.tensor(0.0, dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                exp_avg = state["exp_avg"]
                exp_avg_sq = state["exp_avg_sq"]
                state["step"] += 1
                step = state["step"].item()  # a python number: no per-param tensor pow

                if weight_decay != 0:
                    p.mul_(1 - lr * weight_decay)
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                bias_correction1 = 1 - beta1**step
                bias_correction2 = 1 - beta2**step
                step_size = lr / bias_correction1
                denom = (exp_avg_sq / bias_correction2).sqrt().add_(eps)
                p.addcdiv_(exp_avg, denom, value=-step_size)
        return loss
