"""The optimizer and the learning-rate schedule every training stage uses.

AdamW (decoupled weight decay; fused where torch has the kernel) or LAMB (You et al. 2019); no decay
on biases and LayerNorm (every parameter with fewer than two dimensions). The learning rate warms up
linearly to its peak, then decays linearly towards 0 at the last step, or, under a time budget, at the
end of the hours: there the share of the budget spent is the schedule's progress, not the step.
"""

from __future__ import annotations

from typing import Any

import torch

from bertwb.config import TrainingConfig


def build_optimizer(settings: TrainingConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    """AdamW (fused where torch has the kernel) or LAMB; weight decay only on tensors of two or more dimensions.

    The fused kernel (CUDA, and CPU since torch 2.4) is the same AdamW update in one pass over each
    tensor instead of a dozen, without temporaries the size of the (V, H) embedding.
    """
    p = settings
    decay = [t for t in model.parameters() if t.ndim >= 2]  # Linear and Embedding weights (tied one once)
    no_decay = [t for t in model.parameters() if t.ndim < 2]  # biases, LayerNorm weights and biases
    groups = [{"params": decay, "weight_decay": p.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    betas = (p.adam_beta1, p.adam_beta2)
    if p.optimizer == "lamb":
        return Lamb(groups, lr=p.lr, betas=betas, eps=p.adam_eps)
    try:
        return torch.optim.AdamW(groups, lr=p.lr, betas=betas, eps=p.adam_eps, fused=True)
    except RuntimeError:  # no fused kernel for this device in this torch: the for-each / per-tensor update
        return torch.optim.AdamW(groups, lr=p.lr, betas=betas, eps=p.adam_eps)


def schedule_for(settings: TrainingConfig, total_steps: int, timed: bool = False) -> LinearWarmupDecay:
    """The schedule of a run of ``total_steps``: ``warmup_steps``, or ``warmup_fraction`` of the run when 0.
    ``timed``: the run ends at a time budget, and `LinearWarmupDecay.lr` is given its progress."""
    if timed:
        fraction = 0.0 if settings.warmup_steps else settings.warmup_fraction
        return LinearWarmupDecay(settings.lr, settings.warmup_steps, total_steps, warmup_fraction=fraction)
    warmup = settings.warmup_steps or round(settings.warmup_fraction * total_steps)
    return LinearWarmupDecay(settings.lr, warmup, total_steps)


class LinearWarmupDecay:
    """Learning rate of the update from step ``s`` to ``s + 1``: linear warm-up, then linear decay.

    ``lr(s) = peak * (s + 1) / warmup`` while ``s < warmup``, then ``peak * (total - s) / (total - warmup)``,
    so the first update is not wasted at 0 and the last one is small but not 0.

    Given the ``progress`` of a timed run (the share of its budget spent, 0 to 1), the same shape runs on
    it: ``peak * min(warm-up, (1 - progress) / (1 - warmup_fraction))``, the warm-up ``(s + 1) / warmup`` by
    steps or ``progress / warmup_fraction``; the rate reaches 0 as the budget ends, however many steps fit.
    """

    def __init__(self, peak_lr: float, warmup_steps: int, total_steps: int, warmup_fraction: float = 0.0):
        self.peak_lr, self.warmup_steps, self.total_steps = peak_lr, warmup_steps, total_steps
        self.warmup_fraction = warmup_fraction

    def lr(self, step: int, progress: float | None = None) -> float:
        if progress is not None:
            if self.warmup_steps:
                warm = (step + 1) / self.warmup_steps
            else:
                warm = progress / self.warmup_fraction if self.warmup_fraction else 1.0
            return self.peak_lr * max(0.0, min(1.0, warm, (1.0 - progress) / max(1e-9, 1.0 - self.warmup_fraction)))
        if step < self.warmup_steps:
            return self.peak_lr * (step + 1) / self.warmup_steps
        return self.peak_lr * max(0.0, (self.total_steps - step) / max(1, self.total_steps - self.warmup_steps))

    def state_dict(self) -> dict[str, float]:
        return {"peak_lr": self.peak_lr, "warmup_steps": self.warmup_steps, "total_steps": self.total_steps,
                "warmup_fraction": self.warmup_fraction}


class Lamb(torch.optim.Optimizer):
    """LAMB: Adam's update plus decoupled weight decay, scaled per tensor by the trust ratio ‖w‖ / ‖update‖.

    You, Li, Reddi et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes"
    (arXiv:1904.00962), Algorithm 2 with bias correction and the identity scaling function.
    """

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(param)
                    state["exp_avg_sq"] = torch.zeros_like(param)
                state["step"] += 1
                t = state["step"].item()
                grad = param.grad
                state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                update = (state["exp_avg"] / (1 - beta1 ** t)) / \
                    ((state["exp_avg_sq"] / (1 - beta2 ** t)).sqrt() + group["eps"])
                if group["weight_decay"]:
                    update.add_(param, alpha=group["weight_decay"])
                weight_norm, update_norm = param.norm(), update.norm()
                trust = torch.where((weight_norm > 0) & (update_norm > 0), weight_norm / update_norm,
                                    torch.ones_like(weight_norm))
                param.sub_(update * (group["lr"] * trust))
