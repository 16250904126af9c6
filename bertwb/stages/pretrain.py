"""pretrain: train BERT (MLM + NSP) on the pairs; resumable, checkpointed, one process or many (DDP).

The training itself is :func:`bertwb.tasks.pretraining.train` on the one trainer
(:mod:`bertwb.train.trainer`); this module is the stage around it: its key, where its run lives,
what makes it stale, and how ``bertwb pretrain`` runs under torchrun.

**Where things live.**::

    .bertwb/pretrain-runs/<key[:16]>/   one run per stage key, kept across interruptions
        checkpoints/step-00000100/      model.safetensors, trainer.pt, state.json (bertwb.train.checkpoint)
        metrics.jsonl                   one line per logging step, with validation when it ran
    .bertwb/pretrain/                   the stage output, swapped in by the engine on success:
        model.safetensors, config.json  (Hugging Face config), metrics.jsonl, training.json
        vocab.txt, tokenizer.json, ...  the vocabulary it was trained with, so an export or fill-mask of
                                        this output never pairs it with a vocabulary rebuilt since

The engine swaps the stage directory in only on success, so checkpoints cannot live there; the run
directory is keyed like the stage, so a changed model or pretrain setting starts a new run while an
interrupted one is found again.

**Resume and continuation.** ``pretrain.steps`` and ``pretrain.epochs`` are not in the stage key; the
manifest's summary records ``steps_done`` and `steps_behind` says whether that is fewer than now
asked. So after Ctrl-C/SIGTERM (a checkpoint is written at the end of the current step, exit code
130) or a crash, ``bertwb pretrain`` resumes from the newest readable checkpoint, and raising
``pretrain.steps`` after a finished run continues it. Lowering it leaves the stage fresh; changing
anything else in ``model``/``pretrain`` (or upstream) changes the key and starts a new run.
``bertwb pretrain --force`` deletes the run's checkpoints and trains from step 0 (the stage output
of the previous run stays until the new one replaces it).

**Starting from another model.** ``model.init_from: DIR`` loads a model directory instead of a fresh
init; its vocabulary must be the workspace's (``vocab.from_file`` pointing at its tokenizer), and the
identity of its weights is part of the stage key (`init_from_weights`).

**Several processes.** ``torchrun --nproc-per-node N -m bertwb pretrain`` (`command`): rank 0 runs
the engine and sends every rank the run's plan (:func:`bertwb.train.distributed.launch`); each rank
reads its own share of every global batch; rank 0 logs and checkpoints.
"""

from __future__ import annotations

import shutil
from typing import Any

from bertwb import ui
from bertwb.config import Config
from bertwb.stage import Build, Stage
from bertwb.train.runs import fingerprint, list_checkpoints, run_dir_of, weights_file
from bertwb.workspace import Workspace


def run(cfg: Config, build: Build) -> dict[str, Any]:
    """Train (or resume, or continue) on rank 0 under the engine; return the stage summary."""
    from bertwb.data.tokenizer import FILES as TOKENIZER_FILES
    from bertwb.tasks.pretraining import Plan, train  # torch loads only when the stage runs
    from bertwb.train.distributed import Session

    session = Session.of(build.runtime, cfg.pretrain.device, "pretrain.device")
    run_dir = run_dir_of(build.workspace, "pretrain", build.key)
    if build.forced and run_dir.exists():  # --force trains from scratch: this run's checkpoints go
        checkpoints = len(list_checkpoints(run_dir))
        shutil.rmtree(run_dir)
        ui.stage_line("pretrain", f"--force: starting over; removed {run_dir} ({checkpoints} checkpoints)")
    plan = Plan(run_dir=str(run_dir), pairs_dir=str(build.upstream_dir("pairs")))
    session.send_plan(plan)
    summary = train(cfg, plan, session.dist, out_dir=build.out_dir)
    for name in TOKENIZER_FILES:
        shutil.copy2(build.upstream_dir("vocab") / name, build.out_dir / name)
    return summary


def command(cfg: Config, ws: Workspace, force: bool = False) -> dict[str, Any] | None:
    """``bertwb pretrain``: the stage under the engine on rank 0; on other torchrun ranks, training only."""
    from bertwb import engine
    from bertwb.tasks.pretraining import train
    from bertwb.train.distributed import launch

    return launch(lambda session: engine.run_pipeline(cfg, ws, ["pretrain"], force, runtime=session).get("pretrain"),
                  lambda plan, dist: train(cfg, plan, dist), cfg.pretrain.device, "pretrain.device")


def init_from_weights(cfg: Config, ws: Workspace) -> list[dict[str, Any]]:
    """The identity of ``model.init_from``'s weights (so replacing them retrains); none without it."""
    if not cfg.model.init_from:
        return []
    path = cfg.resolve(cfg.model.init_from)
    weights = weights_file(path) if path.is_dir() else None
    if weights is None:
        return [{"path": str(path), "missing": True}]  # `bertwb status` still works; training says what is wrong
    return [fingerprint(weights)]


def steps_behind(cfg: Config, manifest: dict[str, Any]) -> str | None:
    """Why a stage whose key matches is still stale: it ran fewer steps than now asked."""
    summary = manifest.get("summary") or {}
    done = summary.get("steps_done", 0)
    wanted = cfg.pretrain.steps or cfg.pretrain.epochs * summary.get("steps_per_epoch", 0)
    if done < wanted:
        return f"pretrain.steps {done} done < {wanted} asked; continuing from step {done}"
    return None


STAGE = Stage(
    "pretrain", version=2, order=40, run=run, sections=("model", "pretrain"), deps=("pairs",), has_files=True,
    fingerprint=init_from_weights, behind=steps_behind,
    headline="{steps_done:,} steps, loss {loss:.3f}, valid MLM accuracy {valid_mlm_acc:.1%}",
    help="Pre-train BERT on the pairs (MLM + NSP); resumes after Ctrl-C; works under torchrun.")
