"""Pre-training BERT: the masked-LM + next-sentence objective, the model it starts from, and one run.

The loss is MLM cross-entropy over the masked tokens of the global batch divided by their global count, plus
NSP over its pairs divided by theirs (weighted 0 with ``pretrain.nsp`` false), so the gradient is the global
batch's whatever the processes, accumulation or batch shape; the MLM head runs only at masked positions. The
model is a new ``model.preset`` or the ``model.init_from`` model, with MLM/NSP heads initialised where it has
none. `train` runs one run on every rank; rank 0 writes the stage directory. `evaluate_pairs` sums the same.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from bertwb import fast, ui
from bertwb.artifacts import IMPORT_FILE, METRICS_FILE
from bertwb.config import Config
from bertwb.data.batching import Batches
from bertwb.data.masking import KIND_NAMES
from bertwb.data.pair_batches import PairArrays, PairBatch, collate, load_split
from bertwb.data.ragged import ranges
from bertwb.errors import BertwbError
from bertwb.model import modeldir
from bertwb.model.bert import BertConfig, BertForPreTraining
from bertwb.model.hf_names import hf_config_dict
from bertwb.tasks import losses
from bertwb.train import checkpoint
from bertwb.train.distributed import Dist
from bertwb.train.model_choice import user_path
from bertwb.train.objective import Objective
from bertwb.train.runs import checkpoint_path
from bertwb.train.trainer import Trainer


class PretrainingObjective(Objective):
    """MLM + NSP: summed cross-entropies over the masked tokens and the pairs, divided by their global counts."""

    sums = ("mlm_loss_sum", "nsp_loss_sum", "mlm_correct", "nsp_correct")
    counts = ("n_masked", "n_pairs")
    main_metric = "loss"
    higher_is_better = False

    def __init__(self, nsp: bool = True):
        self.nsp = nsp  # False: the NSP loss weighs 0, keeping its head in the graph (DDP wants every gradient)

    def count(self, batch: PairBatch) -> list[float]:
        return [len(batch.mlm_labels), len(batch.nsp_labels)]

    def forward(self, model: torch.nn.Module, batch: PairBatch) -> Any:
        return model(batch.input_ids, batch.token_type_ids, batch.attention_mask, batch.masked_positions)

    def loss(self, out: Any, batch: PairBatch, totals: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
        n_masked, n_pairs = totals
        mlm = losses.masked_lm(out.mlm_logits, batch.mlm_labels, self.fast)  # a fast one consumes the logits
        nsp = losses.next_sentence(out.nsp_logits, batch.nsp_labels)
        sums = torch.stack([mlm.loss.detach().double(), nsp.loss.detach().double(), mlm.correct.double(),
                            nsp.correct.double()])
        return losses.pretraining(mlm, nsp, n_masked, n_pairs, self.nsp), sums

    def rates(self, totals: dict[str, float]) -> dict[str, float]:
        masked, pairs = max(totals["n_masked"], 1), max(totals["n_pairs"], 1)
        mlm_loss, nsp_loss = totals["mlm_loss_sum"] / masked, totals["nsp_loss_sum"] / pairs
        rates = {"loss": round(mlm_loss + nsp_loss * self.nsp, 6), "mlm_loss": round(mlm_loss, 6),
                 "mlm_acc": round(totals["mlm_correct"] / masked, 6)}
        if self.nsp:  # an NSP head that weighs 0 learns nothing: its accuracy and loss would only mislead
            rates.update(nsp_loss=round(nsp_loss, 6), nsp_acc=round(totals["nsp_correct"] / pairs, 6))
        return rates

    def progress(self, metrics: dict[str, Any]) -> tuple[list[str], list[str]]:
        if not self.nsp:
            train = [f"mlm loss {metrics['mlm_loss']:.4f}", f"mlm acc {100 * metrics['mlm_acc']:.1f}%"]
        else:
            train = [f"loss {metrics['loss']:.4f} (mlm {metrics['mlm_loss']:.3f}, nsp {metrics['nsp_loss']:.3f})",
                     f"mlm acc {100 * metrics['mlm_acc']:.1f}%", f"nsp acc {100 * metrics['nsp_acc']:.1f}%"]
        valid = [f"valid loss {metrics['valid_loss']:.4f} mlm acc {100 * metrics['valid_mlm_acc']:.1f}%"] \
            if "valid_loss" in metrics else []
        return train, valid


@dataclass
class PretrainPlan:
    """What rank 0 tells every rank before training: where the run, the pairs and the vocabulary are,
    and, for one phase of a phased pre-training, which phase and the model it continues."""

    run_dir: str
    pairs_dir: str
    vocab_dir: str
    phase: str | None = None
    init_from: str | None = None  # the previous phase's model directory


def phase_config(cfg: Config, phase: str | None, init_from: str | None = None) -> Config:
    """``cfg`` as one phase trains with it: the phase's settings as ``pretrain``, its pairs settings as
    ``pairs``, and ``model.init_from`` the previous phase's model (the first phase keeps the config's)."""
    if phase is None:
        return cfg
    settings = {name: (training, pairs) for name, training, pairs in cfg.pretrain_phases()}
    training, pairs = settings[phase]
    model = dataclasses.replace(cfg.model, init_from=init_from) if init_from else cfg.model
    return dataclasses.replace(cfg, pretrain=training, pairs=pairs, model=model)


def _longest(cfg: Config) -> tuple[int, str]:
    """The longest instance of any phase, and its key: the phase's own max_seq_length, else pairs'."""
    length, name = max((pairs.max_seq_length, name or "") for name, _, pairs in cfg.pretrain_phases())
    own = name and cfg.pretrain.phases[name].max_seq_length is not None
    return length, f"pretrain.phases.{name}.max_seq_length" if own else "pairs.max_seq_length"


def train(cfg: Config, plan: PretrainPlan, dist: Dist, out_dir: Path | None = None) -> dict[str, Any]:
    """Train from the newest checkpoint of ``plan.run_dir`` (or from scratch) to the requested step.

    Every rank calls it; rank 0 writes checkpoints, metrics and (``out_dir``) the final model files.
    Ctrl-C or SIGTERM checkpoints at the end of the current step and raises KeyboardInterrupt.
    """
    started = time.perf_counter()
    longest, length_key = _longest(cfg)  # the positions every phase needs, and the setting that asks for them
    batch_key, warmup_key = (_setting_key(cfg, plan.phase, name) for name in ("batch_size", "warmup_steps"))
    nsp = cfg.pretrain.nsp  # the pretrain section's, whatever the phase
    named = _model_source(cfg)  # before a later phase's init_from (the phase before's model) replaces it
    cfg = phase_config(cfg, plan.phase, plan.init_from)
    p = cfg.pretrain
    device = dist.device
    run_dir = Path(plan.run_dir)
    train_pairs, meta = load_split(Path(plan.pairs_dir), "train")
    valid_pairs, _ = load_split(Path(plan.pairs_dir), "valid")
    if not len(train_pairs) or (not p.batch_tokens and len(train_pairs) < p.batch_size):
        raise BertwbError(f"{batch_key} {p.batch_size} is more than the {len(train_pairs)} train pairs; "
                          "lower it or build more pairs (pairs.dupe_factor, a bigger corpus)"
                          if len(train_pairs) else
                          "the pairs stage left no train pairs; build more (pairs.dupe_factor, a bigger corpus)")
    pad_multiple = 8 if device.type == "cuda" else 1  # tensor cores like multiples of 8; CPU does not care
    batches = Batches(train_pairs, p.batch_size, p.seed, batch_tokens=p.batch_tokens, bucket_batches=p.bucket_batches,
                      world_size=dist.world_size, rank=dist.rank, grad_accum=p.grad_accum, pad_multiple=pad_multiple)
    if p.max_hours and p.warmup_steps >= p.steps_wanted(batches.steps_per_epoch):
        raise BertwbError(f"{warmup_key} {p.warmup_steps:,} is not below the run's "
                          f"{p.steps_wanted(batches.steps_per_epoch):,} steps: the warm-up cannot end inside the "
                          f"{p.max_hours:g} h budget (the rate would climb until it ends); lower it, or set it to 0 "
                          "and warmup_fraction to the share of the hours to warm up in")
    valid = (Batches(valid_pairs, p.batch_size, p.seed, bucket_batches=p.bucket_batches, world_size=dist.world_size,
                     rank=dist.rank, pad_multiple=pad_multiple, drop_last=False) if len(valid_pairs) else None)

    torch.manual_seed(p.seed)
    model = build_model(cfg, meta, Path(plan.vocab_dir), announce=dist.rank == 0, positions=longest,
                        length_key=length_key)
    objective = PretrainingObjective(nsp)
    objective.fast = fast.choose(model, device, p.cpu_fast_paths)  # this task built the model: it picks its pieces
    name = f"pretrain {plan.phase}" if plan.phase else "pretrain"
    trainer = Trainer(p, objective, model, batches, valid=valid, dist=dist, run_dir=run_dir,
                      name=name, state={"config": {"model": asdict(cfg.model), "pretrain": asdict(p)}},
                      max_hours=p.max_hours)
    last = trainer.fit()
    total_steps = trainer.done
    summary = {
        "steps_done": total_steps,
        "max_hours": p.max_hours,
        # at the stop (eval follows); without a budget too, so a budget set later that it passed asks for nothing
        "train_hours": round((trainer.time_spent if p.max_hours else trainer.budget.reading()[0]) / 3600, 6),
        "stopped_at_budget": trainer.stopped_at_budget is not None,
        "steps_per_epoch": batches.steps_per_epoch,
        "pairs_per_step": round(len(batches.epoch_order(0).rows) / batches.steps_per_epoch, 2),
        "epochs_done": round(total_steps / batches.steps_per_epoch, 4),
        "resumed_from_step": trainer.start_step if trainer.resumed_from else None,
        **named(model.config),
        "parameters": sum(t.numel() for t in model.parameters()),
        "device": str(device),
        "precision": trainer.precision.name,
        "processes": dist.world_size,
        "optimizer": p.optimizer,
        "pad_fraction": round(batches.padding_fraction(0), 4),
        **{k: v for k, v in last.items() if k not in ("step", "eta_s", "elapsed_s")},
        "seconds": round(time.perf_counter() - started, 3),
        "checkpoint": str(checkpoint_path(run_dir, total_steps)),
    }
    if out_dir is not None and dist.rank == 0:
        checkpoint.link_weights(checkpoint_path(run_dir, total_steps), out_dir)
        (out_dir / "config.json").write_text(json.dumps(hf_config_dict(model.config), indent=2) + "\n")
        shutil.copy2(run_dir / METRICS_FILE, out_dir / METRICS_FILE)
        (out_dir / "training.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return summary


def _model_source(cfg: Config) -> Callable[[BertConfig], dict[str, str]]:
    """The summary's words for the model: its shape, and where it came from; ``preset`` only where the preset
    made it (a model.init_from model keeps its own sizes, and "preset tiny" would misname an imported MiniLM)."""
    if not cfg.model.init_from:
        return lambda config: {"preset": cfg.model.preset, "model": f"{config.shape} (preset {cfg.model.preset})"}
    imported = (user_path(cfg, cfg.model.init_from) / IMPORT_FILE).is_file()
    return lambda config: {"model": f"{config.shape} ({'imported' if imported else 'from model.init_from'})"}


def _setting_key(cfg: Config, phase: str | None, name: str) -> str:
    """Where a run's setting ``name`` is set: its phase's own, or (inherited, most likely) the pretrain section."""
    own = phase and getattr(cfg.pretrain.phases[phase], name) != getattr(cfg.pretrain, name)
    return f"pretrain.phases.{phase}.{name}" if own else f"pretrain.{name}"


def build_model(cfg: Config, meta: dict[str, Any], vocab_dir: Path, announce: bool = True,
                positions: int = 0, length_key: str = "pairs.max_seq_length") -> BertForPreTraining:
    """A new model of the configured size (with at least ``positions`` positions, for the longest phase),
    or the ``model.init_from`` model (its own sizes, our dropouts), which must have them (``length_key``:
    the setting that asks for that many)."""
    if not cfg.model.init_from:
        return BertForPreTraining(build_model_config(cfg, meta["vocab_size"], max(meta["max_seq_length"], positions)))
    source = modeldir.open_model_dir(user_path(cfg, cfg.model.init_from), "model.init_from")
    modeldir.check_vocab_matches(source, vocab_dir)
    modeldir.check_length(source, max(meta["max_seq_length"], positions), length_key)
    for name in ("hidden_dropout", "attention_dropout"):
        if getattr(cfg.model, name) is not None:
            setattr(source.config, name, getattr(cfg.model, name))
    # a fine-tuned model gives its encoder: its task head is left out, the MLM and NSP heads start anew
    model, report = modeldir.load_model(source, kind="pretraining", convert=True)
    if announce:
        notes = [f"{report.layout} layout"]
        if report.converted_from:
            notes.append(f"{source.description}: its head left out")
        if report.initialised_heads:
            notes.append(f"new {', '.join(report.initialised_heads)}")
        ui.stage_line("pretrain", f"initialised from {source.path} ({'; '.join(notes)})")
    return model


def build_model_config(cfg: Config, vocab_size: int, max_seq_length: int) -> BertConfig:
    """The preset named in ``model.preset`` with the sizes and dropouts the config overrides."""
    m = cfg.model
    overrides = {name: getattr(m, name) for name in ("num_layers", "hidden_size", "num_heads", "intermediate_size",
                                                      "hidden_dropout", "attention_dropout")
                 if getattr(m, name) is not None}
    if m.hidden_size is not None and m.intermediate_size is None:
        overrides["intermediate_size"] = 4 * m.hidden_size
    return BertConfig.from_preset(m.preset, vocab_size, max_position_embeddings=max(512, max_seq_length),
                                  **overrides)


@torch.no_grad()
def evaluate_pairs(model: torch.nn.Module, pairs: PairArrays, kinds: np.ndarray, batch_size: int,
                   device: torch.device, nsp: bool = True) -> dict[str, Any]:
    """Sums over every pair in ``pairs``, then the rates: losses, accuracies, perplexity, MLM accuracy by
    what the input held at the target (``kinds``: [MASK], a random token, the original kept). NSP's
    accuracy and loss only with ``nsp`` (``pretrain.nsp``): a head trained at weight 0 has none worth showing."""
    model.eval()
    order = np.argsort(pairs.lengths, kind="stable")  # similar lengths together: little padding
    mlm_loss = nsp_loss = 0.0
    mlm_correct = nsp_correct = 0
    kind_total = np.zeros(max(KIND_NAMES) + 1, np.int64)
    kind_correct = np.zeros_like(kind_total)
    with ui.progress("evaluate", total=len(pairs), unit="pairs") as bar:
        for start in range(0, len(order), batch_size):
            indices = order[start:start + batch_size]
            batch = collate(pairs, indices).to(device)
            out = model(batch.input_ids, batch.token_type_ids, batch.attention_mask, batch.masked_positions)
            masked = losses.masked_lm(out.mlm_logits, batch.mlm_labels)
            next_sentence = losses.next_sentence(out.nsp_logits, batch.nsp_labels)
            mlm_loss += masked.loss.item()
            nsp_loss += next_sentence.loss.item()
            mlm_correct += int(masked.correct)
            nsp_correct += int(next_sentence.correct)
            hits = losses.right(out.mlm_logits, batch.mlm_labels).cpu().numpy()  # per masked token, for the kinds
            # kinds in collate's order: each row's masked slice, rows in ``indices`` order
            counts = pairs.masked_offsets[indices + 1] - pairs.masked_offsets[indices]
            batch_kinds = kinds[ranges(pairs.masked_offsets[indices], counts)]
            kind_total += np.bincount(batch_kinds, minlength=len(kind_total))
            kind_correct += np.bincount(batch_kinds, weights=hits, minlength=len(kind_total)).astype(np.int64)
            bar.advance(len(indices))
    n_masked, n_pairs = int(kind_total.sum()), len(pairs)
    mean_mlm = mlm_loss / max(n_masked, 1)
    by_kind = {name: {"positions": int(kind_total[k]),
                      "mlm_acc": round(kind_correct[k] / kind_total[k], 6) if kind_total[k] else None}
               for k, name in KIND_NAMES.items()}
    return {
        "mlm_acc": round(mlm_correct / max(n_masked, 1), 6),
        "mlm_loss": round(mean_mlm, 6),
        "perplexity": round(math.exp(min(mean_mlm, 700.0)), 4),
        **({"nsp_acc": round(nsp_correct / max(n_pairs, 1), 6), "nsp_loss": round(nsp_loss / max(n_pairs, 1), 6)}
           if nsp else {}),
        "pairs": n_pairs,
        "masked_tokens": n_masked,
        "tokens": int(pairs.lengths.sum()),
        "by_kind": by_kind,
    }


def encoder_flops(config: BertConfig, length: int) -> float:
    """Forward matmul FLOPs of the encoder on one sequence of ``length`` tokens, no padding: per token and layer
    8·H² (Q, K, V and output projections) + 4·H·I (feed-forward) + 4·T·H (the scores and the weighted sum).
    Embeddings, LayerNorm, GELU and softmax are not counted (no matmul)."""
    H, L, inner = config.hidden_size, config.num_layers, config.intermediate_size
    return float(length * L * (8 * H * H + 4 * H * inner + 4 * length * H))


def useful_flops_per_pair(config: BertConfig, length: int, n_masked: int) -> float:
    """Training FLOPs (forward + backward = 3 × forward) of one pair of ``length`` tokens, no padding:
    `encoder_flops`, the MLM head at masked tokens only (2·H² + 2·H·V each), the pooler and NSP head
    (2·H² + 4·H) once."""
    H, V = config.hidden_size, config.vocab_size
    forward = encoder_flops(config, length) + n_masked * (2 * H * H + 2 * H * V) + 2 * H * H + 4 * H
    return 3.0 * forward
