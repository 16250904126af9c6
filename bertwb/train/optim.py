"""The optimizer and the learning-rate schedule every training stage uses.

AdamW (fused where torch has the kernel) or LAMB (You et al. 2019); no decay on biases and LayerNorm
(tensors of fewer than two dimensions); with ``heads_first`` or ``heads_lr_scale``, the encoder and the
heads in groups apart, so `set_rates` can hold one or scale the other. The rate warms up linearly to its
peak, then decays linearly towards 0 at the last step, or, under a time budget, at the end of the hours:
there the share of the budget spent is the schedule's progress, not the step.
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
    groups = _param_groups(settings, model)
    betas = (p.adam_beta1, p.adam_beta2)
    if p.optimizer == "lamb":
        return Lamb(groups, lr=p.lr, betas=betas, eps=p.adam_eps)
    try:
        return torch.optim.AdamW(groups, lr=p.lr, betas=betas, eps=p.adam_eps, fused=True)
    except RuntimeError:  # no fused kernel for this device in this torch: the for-each / per-tensor update
        return torch.optim.AdamW(groups, lr=p.lr, betas=betas, eps=p.adam_eps)


def _param_groups(settings: TrainingConfig, model: torch.nn.Module) -> list[dict[str, Any]]:
    """Decayed and undecayed tensors; as the encoder's and the heads' when the two learn apart.

    The encoder is ``model.bert``, every model class's body; the MLM decoder's weight is its word embeddings
    (one tensor, tied), so a held encoder holds the decoder too. Without the two options: the two groups of
    before, so older checkpoints resume. A frozen tensor (``requires_grad`` off: a feature-based task's
    encoder) is in no group, so the optimizer keeps no state for it.
    """
    def split(tensors: list[torch.nn.Parameter], **extra: Any) -> list[dict[str, Any]]:
        return [{"params": [t for t in tensors if t.ndim >= 2], "weight_decay": settings.weight_decay, **extra},
                {"params": [t for t in tensors if t.ndim < 2], "weight_decay": 0.0, **extra}]

    tensors = [t for t in model.parameters() if t.requires_grad]  # each once: the tied decoder is the embedding
    if not settings.heads_first and settings.heads_lr_scale == 1.0:
        return split(tensors)
    encoder = {id(t) for t in model.bert.parameters()}
    return [*split([t for t in tensors if id(t) in encoder], encoder=True),
            *split([t for t in tensors if id(t) not in encoder], lr_scale=settings.heads_lr_scale)]


def set_rates(optimizer: torch.optim.Optimizer, lr: float, heads_only: bool) -> None:
    """The step's rate on every group: ``lr`` times the group's scale, and 0 on the encoder while ``heads_only``.

    A held encoder still computes its gradients and Adam's moments of them (lr 0 is the only hold that DDP
    and a resumed optimizer take as they are), so when it joins, its first updates are already well scaled.
    """
    for group in optimizer.param_groups:
        group["lr"] = 0.0 if heads_only and group.get("encoder") else lr * group.get("lr_scale", 1.0)


def schedule_for(settings: TrainingConfig, total_steps: int, timed: bool = False) -> LinearWarmupDecay:
    """The schedule of a run of ``total_steps``: ``warmup_steps``, or ``warmup_fraction`` of the run when 0.
    ``timed``: the run ends at a time budget, and `LinearWarmupDecay.lr` is given its progress; ``warmup_steps``
    then become the same share of the budget as of the steps (30 of 1,000: the first 3% of the hours), since
    a budget that buys fewer steps than the warm-up would end it with the rate still climbing. A warm-up as
    long as the run cannot end inside it: pre-training refuses that before it starts."""
    if timed:
        fraction = min(1.0, settings.warmup_steps / total_steps) if settings.warmup_steps else settings.warmup_fraction
        return LinearWarmupDecay(settings.lr, 0, total_steps, warmup_fraction=fraction)
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
