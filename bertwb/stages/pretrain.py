"""pretrain: train BERT (MLM + NSP) on the pairs; resumable, checkpointed, one process or many (DDP).

The stage around :func:`bertwb.tasks.pretraining.run.train`: its run (``pretrain-runs/<key[:16]>/``, found again
after an interruption: the stage directory is swapped in only on success), what leaves a matching key stale
(`why_unfinished`), the weights in its key (`init_from_weights`), the plan trained on every other torchrun rank
(`train_received_plan`), and ``pretrain.phases``, each in its own folder from the previous one's weights.
docs/pretraining.md: "Resuming and continuing training", "Pre-training in phases".
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from bertwb import ui
from bertwb.artifacts import METRICS_FILE, PHASES_FILE, weights_file, weights_identity
from bertwb.config import Config
from bertwb.data.pairs import pair_set
from bertwb.data.tokenizer import FILES as TOKENIZER_FILES
from bertwb.data.tokenizer import set_model_max_length
from bertwb.stage import Build, NothingBuilt, Stage, Training
from bertwb.tasks.pretraining.plan import PretrainPlan
from bertwb.train.model_choice import user_path
from bertwb.train.runs import list_checkpoints, phase_dirs, run_dir_of, run_metrics
from bertwb.workspace import Workspace, write_text_atomic


PHASE_MODEL = "model"  # a finished phase's model directory, inside its folder of the run
STARTED_FROM = "started_from.json"


def run(cfg: Config, build: Build) -> dict[str, Any]:
    """Train (or resume, or continue) on rank 0 under the engine; return the stage summary."""
    from bertwb.tasks.pretraining.run import train  # torch loads only when the stage runs
    from bertwb.train.distributed import Session

    session = Session.of(build.runtime, *command_device(cfg, None))
    run_dir = run_dir_of(build.workspace, "pretrain", build.key)
    if build.forced and run_dir.exists():  # --force trains from scratch: this run's checkpoints go
        checkpoints = sum(len(list_checkpoints(folder)) for folder in phase_dirs(run_dir).values())
        shutil.rmtree(run_dir)
        ui.stage_line("pretrain", f"--force: starting over; removed {run_dir} ({checkpoints} checkpoints)")
    if cfg.pretrain.phases:
        summary = _train_phases(cfg, build, session, run_dir)
    else:
        plan = PretrainPlan(run_dir=str(run_dir), pairs_dir=str(build.upstream_dir("pairs")),
                    vocab_dir=str(build.upstream_dir("vocab")))
        session.send_plan(plan)
        summary = train(cfg, plan, session.dist, out_dir=build.out_dir)
        _nothing_trained(summary, "pretrain")
    _copy_vocabulary(build, build.out_dir)
    return summary


def command_device(cfg: Config, _: str | None) -> tuple[str, str]:
    """The device pre-training runs on and where it was set (the file's line, or --set and --device)."""
    return cfg.pretrain.device, str(cfg.origin("pretrain.device"))


def _nothing_trained(summary: dict[str, Any], key: str) -> None:
    """Stop the commit when a resumed run found its budget spent: no step trained, and a manifest written again
    would tell Make and `status` that something changed (the run's time is saved with its checkpoints)."""
    if summary.get("stopped_at_budget") and summary.get("resumed_from_step") == summary.get("steps_done"):
        raise NothingBuilt(f"nothing trained: the run stands at step {summary['steps_done']:,} after "
                           f"{summary['train_hours']:g} h of training, and {key}.max_hours is "
                           f"{summary['max_hours']:g}; the stage stays as it was (raise max_hours to train on)")


def _train_phases(cfg: Config, build: Build, session: Any, run_dir: Path) -> dict[str, Any]:
    """Every phase in order, each from the one before; the last one's model is the stage output."""
    from bertwb.tasks.pretraining.run import train  # torch loads only when the stage runs

    phases = cfg.pretrain_phases()
    run_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(run_dir / PHASES_FILE, json.dumps({"phases": [name for name, _, _ in phases]}) + "\n")
    summaries: dict[str, dict[str, Any]] = {}
    init_from: Path | None = None  # the first phase starts as model.init_from says
    for index, (name, settings, _) in enumerate(phases):
        phase_dir, last = run_dir / name, index == len(phases) - 1
        out_dir = build.out_dir if last else phase_dir / PHASE_MODEL
        started_from = _identity(init_from, run_dir) if init_from else None
        _start_over_if_moved(name, phase_dir, started_from)
        summary = None if last else _finished(phase_dir / PHASE_MODEL, settings)
        if summary is None:
            phase_dir.mkdir(parents=True, exist_ok=True)
            write_text_atomic(phase_dir / STARTED_FROM, json.dumps(started_from) + "\n")
            plan = PretrainPlan(run_dir=str(phase_dir), pairs_dir=str(pair_set(build.upstream_dir("pairs"), name)),
                        vocab_dir=str(build.upstream_dir("vocab")), phase=name,
                        init_from=str(init_from) if init_from else None)
            session.send_plan(plan)
            if not last:
                shutil.rmtree(out_dir, ignore_errors=True)
                out_dir.mkdir()
            summary = train(cfg, plan, session.dist, out_dir=out_dir)
            if not last:
                _copy_vocabulary(build, out_dir)  # the next phase checks it starts from this vocabulary
        summaries[name] = summary
        init_from = out_dir
    # a phase that trains starts every later one over, so a last phase that trained nothing means none did
    _nothing_trained(summaries[phases[-1][0]], f"pretrain.phases.{phases[-1][0]}")
    lines = run_metrics(run_dir)
    (build.out_dir / METRICS_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))
    final = summaries[phases[-1][0]]
    summary = {**final, "steps_done": sum(s["steps_done"] for s in summaries.values()), "phases": summaries}
    (build.out_dir / "training.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return summary


def _identity(model_dir: Path, run_dir: Path) -> dict[str, Any]:
    """A phase's starting weights by path within the run, size and mtime (the workspace may move)."""
    identity = weights_identity(weights_file(model_dir))
    return {**identity, "path": str(Path(identity["path"]).relative_to(run_dir))}


def _start_over_if_moved(name: str, phase_dir: Path, started_from: dict[str, Any] | None) -> None:
    """Discard a phase's folder when the weights it started from are no longer the previous phase's."""
    marker = phase_dir / STARTED_FROM
    if not marker.is_file():
        return
    try:
        recorded = json.loads(marker.read_text())
    except ValueError:
        recorded = "unreadable"
    if recorded != started_from:
        shutil.rmtree(phase_dir)
        ui.stage_line("pretrain", f"phase {name}: the phase before it trained on; starting it over from its new "
                      "weights")


def _finished(model_dir: Path, settings: Any) -> dict[str, Any] | None:
    """The summary of a phase that finished every step now asked of it, or None when it has to train."""
    try:
        summary = json.loads((model_dir / "training.json").read_text())
    except (OSError, ValueError):
        return None
    if weights_file(model_dir) is None or _unfinished(summary, settings) is not None:
        return None
    return summary


def _unfinished(summary: dict[str, Any], settings: Any) -> str | None:
    """What a run (or phase) whose ``summary`` this is has not done of what ``settings`` now ask, or None.

    Under a time budget a run that stopped at its hours is done, unless max_hours grew since, and so is one that
    trained as long as the budget or longer (without one, then a budget set below the time it took).
    """
    done = summary.get("steps_done", 0)
    wanted = settings.steps_wanted(summary.get("steps_per_epoch", 0))
    if done >= wanted:
        return None
    if not settings.max_hours:
        return f"steps {done} done < {wanted} asked; continuing from step {done}"
    hours, spent = summary.get("max_hours") or 0, summary.get("train_hours")
    if summary.get("stopped_at_budget") and hours >= settings.max_hours or (spent or 0) >= settings.max_hours:
        return None
    return f"max_hours {hours:g} done < {settings.max_hours:g} asked; continuing from step {done}"


def _copy_vocabulary(build: Build, out_dir: Path) -> None:
    """The tokenizer files beside the weights, so a model is never paired with a vocabulary rebuilt since;
    their ``model_max_length`` is the model's positions (the vocab stage, which knows no model, wrote 512)."""
    for name in TOKENIZER_FILES:
        shutil.copy2(build.upstream_dir("vocab") / name, out_dir / name)
    if (out_dir / "config.json").is_file():
        set_model_max_length(out_dir, json.loads((out_dir / "config.json").read_text())["max_position_embeddings"])


def train_received_plan(cfg: Config, plan: Any, dist: Any) -> None:
    """Train a plan that rank 0 sent, on another torchrun rank (`bertwb pretrain` under torchrun)."""
    from bertwb.tasks.pretraining.run import train  # torch loads only when training

    train(cfg, plan, dist)


def init_from_weights(cfg: Config, ws: Workspace) -> list[dict[str, Any]]:
    """The identity of ``model.init_from``'s weights (so replacing them retrains); none without it."""
    if not cfg.model.init_from:
        return []
    path = user_path(cfg, cfg.model.init_from)
    weights = weights_file(path) if path.is_dir() else None
    if weights is None:
        return [{"path": str(path), "missing": True}]  # `bertwb status` still works; training says what is wrong
    return [weights_identity(weights)]


def why_unfinished(cfg: Config, manifest: dict[str, Any]) -> str | None:
    """Why a stage whose key matches is still stale: it (or one of its phases) ran fewer steps than now asked."""
    summary = manifest.get("summary") or {}
    for name, settings, _ in cfg.pretrain_phases():
        done_by = (summary.get("phases") or {}).get(name, {}) if name else summary
        unfinished = _unfinished(done_by, settings)
        if unfinished is not None:
            return f"pretrain.phases.{name}.{unfinished}" if name else f"pretrain.{unfinished}"
    return None


def phase_params(cfg: Config) -> dict[str, dict[str, Any]]:
    """Every phase's settings and their order, for the key (nothing without phases)."""
    if not cfg.pretrain.phases:
        return {}
    return {"pretrain.phases": {"order": list(cfg.pretrain.phases)},
            **{f"pretrain.phases.{name}": cfg.key_params(f"pretrain.phases.{name}") for name in cfg.pretrain.phases}}


STAGE = Stage(
    "pretrain", version=2, order=40, run=run, sections=("model", "pretrain"), params=phase_params, deps=("pairs",),
    has_files=True,
    fingerprint=init_from_weights, unfinished=why_unfinished,
    training=Training(train_received_plan=train_received_plan, device=command_device),
    headline="{steps_done:,} steps, loss {loss:.3f}, valid MLM accuracy {valid_mlm_acc:.1%}",
    help="Pre-train BERT on the pairs (MLM + NSP); resumes after Ctrl-C; works under torchrun.")
