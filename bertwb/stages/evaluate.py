"""evaluate: masked-LM and next-sentence accuracy of one checkpoint on the held-out (valid) pairs.

The valid pairs keep fixed masks (with ``pairs.masking: dynamic``, masked once by a generator seeded with
``pairs.seed``), so numbers compare across runs and checkpoints. It depends on pairs, not on pretrain:
``evaluate.checkpoint`` may name any model directory, and the identity of the weights it picks (``latest``: of
pretrain's current run, handed over as `Stage.reads_run` asks) is in the key, so more training evaluates again.
`evaluate_pairs` computes the metrics in ``pretrain.precision`` (in no key); this writes ``metrics.json``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from bertwb import faults, ui
from bertwb.artifacts import RESULTS_FILE, weights_file, weights_identity, write_json
from bertwb.config import Config
from bertwb.data.pairs import load_pairs, pair_set
from bertwb.errors import BertwbError
from bertwb.stage import Build, Stage
from bertwb.train import model_choice
from bertwb.workspace import Workspace

if TYPE_CHECKING:
    from bertwb.data.pair_batches import PairArrays


def run(cfg: Config, build: Build) -> dict[str, Any]:
    """Evaluate the chosen checkpoint on the valid pairs; write ``metrics.json``; return the metrics."""
    from bertwb import fast  # torch loads only when the stage runs
    from bertwb.model import modeldir
    from bertwb.tasks.pretraining.evaluation import evaluate_pairs
    from bertwb.train.device import choose_precision, model_shapes, resolve_device

    started = time.perf_counter()
    model_dir = modeldir.open_model_dir(_checkpoint(cfg, build.workspace, build.current_run))
    modeldir.check_vocab_matches(model_dir, build.upstream_dir("vocab"))
    pairs, kinds = _valid_pairs(pair_set(build.upstream_dir("pairs")), cfg)  # with phases, the last phase's
    if len(pairs) == 0:
        raise BertwbError("the valid split has no pairs; raise ingest.valid_fraction so some documents are held out")
    device = resolve_device(cfg.evaluate.device, str(cfg.origin("evaluate.device")))
    model = fast.for_inference(modeldir.load_model(model_dir, device, kind="pretraining")[0], device,
                               cfg.pretrain.cpu_fast_paths)
    if model.config.max_position_embeddings < int(pairs.lengths.max()):
        raise BertwbError(f"{model_dir.path}: the model has {model.config.max_position_embeddings} positions, "
                          f"the pairs are up to {int(pairs.lengths.max())} tokens; rebuild pairs shorter")
    precision = choose_precision(cfg.pretrain.precision, device, *model_shapes(model))  # evaluate has none of its own
    with precision.autocast():
        totals = evaluate_pairs(model, pairs, kinds, cfg.evaluate.batch_size, device, nsp=cfg.pretrain.nsp)
    metrics = {"checkpoint": str(model_dir.path), "step": model_dir.step, **totals, "precision": precision.name,
               "seconds": round(time.perf_counter() - started, 3)}
    faults.point("work")
    write_json(build.out_dir / RESULTS_FILE, metrics)
    return metrics


def _valid_pairs(pairs_dir: Path, cfg: Config) -> tuple[PairArrays, np.ndarray]:
    """The valid split with its masks, and the replacement kind of every masked position.

    Pairs stored unmasked (``pairs.masking: dynamic``) are masked once, with the loader's function and a
    generator seeded by ``pairs.seed``: the same masks every time.
    """
    from bertwb.data.pair_batches import load_split  # torch loads only when the stage runs

    pairs, _ = load_split(pairs_dir, "valid")
    if pairs.static:
        return pairs, np.asarray(load_pairs(pairs_dir, "valid").masked_kinds)
    return pairs.masked(None, np.random.default_rng([cfg.pairs.seed, 7]))  # 7: a stream of its own, fixed


def evaluated_weights(cfg: Config, ws: Workspace, current_run: Callable[[], Path]) -> list[dict[str, Any]]:
    """The identity of the weights ``evaluate.checkpoint`` picks (``latest`` and steps: of ``current_run()``, the
    run the current pretrain settings train in); nothing when there are none yet."""
    try:
        weights = weights_file(_checkpoint(cfg, ws, current_run, quiet=True))
    except BertwbError:
        return []  # `bertwb status` still works; running the stage says what is missing
    return [weights_identity(weights)] if weights is not None else []


def _checkpoint(cfg: Config, ws: Workspace, current_run: Callable[[], Path], quiet: bool = False) -> Path:
    """The model directory ``evaluate.checkpoint`` names; ``latest`` and steps are of the current pretrain run."""
    return model_choice.checkpoint_dir(cfg, ws, cfg.evaluate.checkpoint, current_run, quiet)


def report(metrics: dict[str, Any]) -> None:
    """The metrics as one table: overall MLM and NSP (when trained), then MLM accuracy by replacement kind."""
    rows = [["MLM accuracy", _pct(metrics["mlm_acc"]), f"{metrics['masked_tokens']:,} masked tokens"],
            ["MLM loss", f"{metrics['mlm_loss']:.4f}", f"perplexity {metrics['perplexity']:,.2f}"]]
    if "nsp_acc" in metrics:
        rows += [["NSP accuracy", _pct(metrics["nsp_acc"]), f"{metrics['pairs']:,} pairs"],
                 ["NSP loss", f"{metrics['nsp_loss']:.4f}", ""]]
    labels = {"mask": "[MASK]", "random": "random token", "keep": "kept token"}
    for kind, values in metrics["by_kind"].items():
        rows.append([f"MLM accuracy at {labels[kind]}", _pct(values["mlm_acc"]), f"{values['positions']:,} positions"])
    step = f" (step {metrics['step']:,})" if metrics.get("step") is not None else ""
    precision = f", {metrics['precision']}" if "precision" in metrics else ""  # older results did not say
    ui.table(f"evaluate: {metrics['checkpoint']}{step}{precision}", ["metric", "value", "over"], rows)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}%"


STAGE = Stage(
    "evaluate", version=3, order=50, run=run, sections=("evaluate",), deps=("pairs",), has_files=True,
    reads_run="pretrain", fingerprint=evaluated_weights, report=report,
    headline=("MLM accuracy {mlm_acc:.1%}, NSP accuracy {nsp_acc:.1%}", "MLM accuracy {mlm_acc:.1%} (no NSP)"),
    help="MLM and NSP accuracy, loss and perplexity of a checkpoint on the valid pairs (cached).")

