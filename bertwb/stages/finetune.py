"""finetune: one cached stage per task of ``finetune.tasks``, ``finetune/<task>``: a fine-tuned model, its metrics.

Each instance is keyed by the task's settings (the finetune section's, with the task's overrides) and the
identity of its data files, of the weights it starts from and of their tokenizer (`fingerprint`), so a change
to one task reruns that task only. ``init_from`` is ``pretrain`` or any model directory (`source_dir`). The
training is :func:`bertwb.tasks.finetune.training.train` on the one trainer, under torchrun as pretrain is;
the stage directory is a complete model directory (docs/finetuning.md, "Fine-tuning tasks").
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from bertwb import ui
from bertwb.artifacts import weights_file, weights_identity
from bertwb.config import Config
from bertwb.data.tokenizer import tokenizer_identity
from bertwb.errors import BertwbError
from bertwb.stage import Build, Stage, Training
from bertwb.tasks.finetune.tasktypes import task_settings
from bertwb.train import model_choice
from bertwb.train.runs import list_checkpoints, run_dir_of
from bertwb.workspace import Workspace

VIEWS = (
    """create or replace view finetune_metrics as
       select split_part(stage, '/', 2) as task, name as metric, value, finished_at
       from stage_metrics where stage like 'finetune/%' and value is not null
       order by task, metric""",
)


def run(cfg: Config, build: Build) -> dict[str, Any]:
    """Fine-tune one task (or resume it) on rank 0 under the engine; return the summary."""
    from bertwb.model import modeldir  # torch loads only when the stage runs
    from bertwb.tasks.finetune.training import FinetunePlan, train
    from bertwb.train.distributed import Session

    task, ws = build.stage.instance, build.workspace
    settings = task_settings(cfg, task)
    session = Session.of(build.runtime, settings.device, str(cfg.origin(f"finetune.tasks.{task}.device")))
    run_dir = run_dir_of(ws, build.stage.name, build.key)
    if build.forced and run_dir.exists():
        checkpoints = len(list_checkpoints(run_dir))
        shutil.rmtree(run_dir)
        ui.stage_line(build.stage.name, f"--force: starting over; removed {run_dir} ({checkpoints} checkpoints)")
    source = modeldir.open_model_dir(source_dir(cfg, ws, task), str(cfg.origin(f"finetune.tasks.{task}.init_from")))
    plan = FinetunePlan(task=task, run_dir=str(run_dir), model_dir=str(source.path),
                tokenizer_dir=str(model_choice.tokenizer_dir(ws, source.tokenizer_dir)))
    session.send_plan(plan)
    return train(cfg, plan, session.dist, out_dir=build.out_dir)


def train_received_plan(cfg: Config, plan: Any, dist: Any) -> None:
    """Train a task's plan that rank 0 sent, on another torchrun rank (`bertwb finetune` under torchrun)."""
    from bertwb.tasks.finetune.training import train  # torch loads only when training

    train(cfg, plan, dist)


def command_device(cfg: Config, task: str | None) -> tuple[str, str]:
    """The device ``bertwb finetune [TASK]`` trains on and where it was set; one line naming the fix when it
    names no task there is."""
    if task is not None:
        return task_settings(cfg, task).device, str(cfg.origin(f"finetune.tasks.{task}.device"))
    if not cfg.finetune.tasks:
        raise BertwbError("no fine-tuning tasks: add one under finetune.tasks in the config "
                          "(type, train, dev; see docs/finetuning.md)")
    return cfg.finetune.device, str(cfg.origin("finetune.device"))


def source_dir(cfg: Config, ws: Workspace, task: str) -> Path:
    """The model directory task ``task`` starts from (``init_from``: `bertwb.train.model_choice.start_dir`)."""
    return model_choice.start_dir(cfg, ws, task_settings(cfg, task).init_from,
                                  str(cfg.origin(f"finetune.tasks.{task}.init_from")))


def fingerprint(cfg: Config, ws: Workspace, instance: str) -> list[dict[str, Any]]:
    """Identities of the task's data files, the weights it starts from and their tokenizer: the tokenizer's
    content as loaded (padding and truncation off), so features built through another tokenizer, or
    through one whose file padded them, are stale."""
    settings = task_settings(cfg, instance)
    paths = [cfg.resolve(p) for p in (settings.train, settings.dev, settings.test) if p]
    tokenizer = []
    try:
        model = source_dir(cfg, ws, instance)
        weights = weights_file(model)
        if weights is not None:
            paths.append(weights)
        own = next((model / name for name in ("tokenizer.json", "vocab.txt") if (model / name).is_file()), None)
        path = own or ws.stage_dir("vocab") / "tokenizer.json"
        tokenizer = [tokenizer_identity(path) if path.is_file() else {"path": str(path), "missing": True}]
    except BertwbError:
        pass  # `bertwb status` still works; running the stage says what is missing
    return [weights_identity(path) if path.is_file() else {"path": str(path), "missing": True}
            for path in paths] + tokenizer


def why_unfinished(cfg: Config, manifest: dict[str, Any], instance: str) -> str | None:
    """Why a task whose key matches is still stale: it ran fewer steps than now asked."""
    settings = task_settings(cfg, instance)
    summary = manifest.get("summary") or {}
    done = summary.get("steps_done", 0)
    wanted = settings.steps_wanted(summary.get("steps_per_epoch", 0))
    if done < wanted:
        return f"finetune.tasks.{instance}: {done} steps done < {wanted} asked; continuing from step {done}"
    return None


def report(summary: dict[str, Any]) -> None:
    """The task's dev (and test) metrics as a table."""
    rows = [[name, f"{value:.4f}" if isinstance(value, float) else value] for name, value in summary.items()
            if name.startswith(("dev_", "test_")) and not isinstance(value, (list, dict))]
    ui.table(f"finetune/{summary['task']} ({summary['type']}, {summary['weights']} weights"
             f"{', step ' + format(summary['best_step'], ',') if summary.get('best_step') else ''})",
             ["metric", "value"], rows)


STAGE = Stage(
    "finetune", version=4, order=60, run=run, sections=("finetune.tasks.{instance}",), views=VIEWS,
    has_files=True, fingerprint=fingerprint, unfinished=why_unfinished, report=report,
    headline="dev {main_metric} {main_value:.4g} ({weights} weights)",
    instances=lambda cfg: list(cfg.finetune.tasks),
    training=Training(train_received_plan=train_received_plan, device=command_device),
    help="Fine-tune a model for each task in finetune.tasks (classify, tag, qa); resumes after Ctrl-C.")
