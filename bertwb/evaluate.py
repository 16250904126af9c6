"""evaluate: masked-LM and next-sentence accuracy of one checkpoint on the held-out (valid) pairs.

The valid pairs carry fixed masks (static masking), so numbers compare across runs and checkpoints.
With ``pairs.masking: dynamic`` the valid split is masked once here, with the same function the
pairs stage and the loader use and a generator seeded by ``pairs.seed``: fixed as well.

Reported: MLM accuracy, loss and perplexity (exp of the mean loss over masked tokens), NSP accuracy
and loss, counts, and MLM accuracy by what the input held at the target position: ``[MASK]``, a
random token, or the original token kept.

The stage's key holds ``evaluate.checkpoint`` and the identity (path, size, mtime) of the weights it
resolves to, so ``latest`` re-evaluates after more training and any directory — a mid-run checkpoint,
an export, an imported or published model — can be evaluated against the same pairs.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bertwb import modelio, ui
from bertwb.config import Config
from bertwb.data import PairArrays, collate, _ranges
from bertwb.errors import BertwbError
from bertwb.masking import KIND_NAMES, mask_batch
from bertwb.pairs import load_pairs
from bertwb.workspace import Workspace

METRICS_FILE = "metrics.json"


def run(cfg: Config, build: Any) -> dict[str, Any]:
    """Evaluate the chosen checkpoint on the valid pairs; write ``metrics.json``; return the metrics."""
    started = time.perf_counter()
    ws = build.workspace
    model_dir = modelio.resolve_checkpoint(cfg, ws, cfg.evaluate.checkpoint)
    modelio.check_vocab_matches(model_dir, build.upstream_dir("vocab"))
    pairs, kinds = _valid_pairs(build.upstream_dir("pairs"), cfg)
    if len(pairs) == 0:
        raise BertwbError("the valid split has no pairs; raise ingest.valid_fraction so some documents are held out")

    from bertwb.pretrain import resolve_device  # noqa: PLC0415 - one device rule for every command

    device = resolve_device(cfg.evaluate.device)
    model, _ = modelio.load_model(model_dir, device, kind="pretraining")
    if model.config.max_position_embeddings < int(pairs.lengths.max()):
        raise BertwbError(f"{model_dir.path}: the model has {model.config.max_position_embeddings} positions, "
                          f"the pairs are up to {int(pairs.lengths.max())} tokens; rebuild pairs shorter")
    totals = evaluate_pairs(model, pairs, kinds, cfg.evaluate.batch_size, device)
    metrics = {"checkpoint": str(model_dir.path), "step": model_dir.step, **totals,
               "seconds": round(time.perf_counter() - started, 3)}
    (build.out_dir / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics


def _valid_pairs(pairs_dir: Path, cfg: Config) -> tuple[PairArrays, np.ndarray]:
    """The valid split with its masks, and the replacement kind of every masked position."""
    data = load_pairs(pairs_dir, "valid")
    pairs = PairArrays(tokens=data.input_ids, offsets=data.offsets,
                       segment_a_len=data.len_a.astype(np.int64) + 2, is_random_next=data.is_random_next)
    if data.static:
        pairs.masked_positions, pairs.masked_ids = data.masked_positions, data.masked_ids
        pairs.masked_offsets = data.mask_offsets
        return pairs, np.asarray(data.masked_kinds)
    masked = mask_batch(np.asarray(data.input_ids), np.asarray(data.offsets), data.masking_rules(),
                        np.random.default_rng([cfg.pairs.seed, 7]))  # 7: a stream of its own, fixed
    pairs.tokens = masked.input_ids
    pairs.masked_positions, pairs.masked_ids = masked.masked_positions, masked.masked_ids
    pairs.masked_offsets = masked.mask_offsets
    return pairs, masked.masked_kinds


@torch.no_grad()
def evaluate_pairs(model: torch.nn.Module, pairs: PairArrays, kinds: np.ndarray, batch_size: int,
                   device: torch.device) -> dict[str, Any]:
    """Sums over every pair in ``pairs``, then the rates: losses, accuracies, perplexity, by kind."""
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
            mlm_logits, nsp_logits = out.mlm_logits.float(), out.nsp_logits.float()
            mlm_loss += F.cross_entropy(mlm_logits, batch.mlm_labels, reduction="sum").item()
            nsp_loss += F.cross_entropy(nsp_logits, batch.nsp_labels, reduction="sum").item()
            hits = (mlm_logits.argmax(-1) == batch.mlm_labels).cpu().numpy()
            mlm_correct += int(hits.sum())
            nsp_correct += int((nsp_logits.argmax(-1) == batch.nsp_labels).sum())
            # kinds in collate's order: each row's masked slice, rows in ``indices`` order
            counts = pairs.masked_offsets[indices + 1] - pairs.masked_offsets[indices]
            batch_kinds = kinds[_ranges(pairs.masked_offsets[indices], counts)]
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
        "nsp_acc": round(nsp_correct / max(n_pairs, 1), 6),
        "nsp_loss": round(nsp_loss / max(n_pairs, 1), 6),
        "pairs": n_pairs,
        "masked_tokens": n_masked,
        "tokens": int(pairs.lengths.sum()),
        "by_kind": by_kind,
    }


def report(metrics: dict[str, Any]) -> None:
    """The metrics as one table: overall MLM and NSP, then MLM accuracy by replacement kind."""
    rows = [["MLM accuracy", _pct(metrics["mlm_acc"]), f"{metrics['masked_tokens']:,} masked tokens"],
            ["MLM loss", f"{metrics['mlm_loss']:.4f}", f"perplexity {metrics['perplexity']:,.2f}"],
            ["NSP accuracy", _pct(metrics["nsp_acc"]), f"{metrics['pairs']:,} pairs"],
            ["NSP loss", f"{metrics['nsp_loss']:.4f}", ""]]
    labels = {"mask": "[MASK]", "random": "random token", "keep": "kept token"}
    for kind, values in metrics["by_kind"].items():
        rows.append([f"MLM accuracy at {labels[kind]}", _pct(values["mlm_acc"]), f"{values['positions']:,} positions"])
    step = f" (step {metrics['step']:,})" if metrics.get("step") is not None else ""
    ui.table(f"evaluate: {metrics['checkpoint']}{step}", ["metric", "value", "over"], rows)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}%"


def read_metrics(ws: Workspace) -> dict[str, Any]:
    """The metrics the last evaluate run wrote."""
    path = ws.stage_dir("evaluate") / METRICS_FILE
    if not path.is_file():
        raise BertwbError(f"{path} is missing; run `bertwb evaluate`")
    return json.loads(path.read_text())
