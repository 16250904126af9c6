"""Which model directory a command uses: a user's choice, ``pretrain``, a stage's output or a path, as a folder.

A relative path is relative to the config file's folder (docs/commands.md, "Configuration"), else to the working
directory when only that holds it. ``latest`` and a step name a checkpoint of the run the current config
trains, which the caller names: only the engine knows the current key. A stage's output counts once the
stage has run (`Workspace.has_run`). No torch here: `bertwb status` keys the model stages with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from bertwb import ui
from bertwb.config import Config
from bertwb.errors import BertwbError
from bertwb.train.runs import newest_checkpoints, step_of
from bertwb.workspace import Workspace


def user_path(cfg: Config, choice: str) -> Path:
    """The folder a user names: against the config file's folder, else the working directory's when
    only that one exists."""
    path = cfg.resolve(choice)
    if not path.exists() and Path(choice).exists():
        path = Path(choice).resolve()
    return path


def checkpoint_dir(cfg: Config, ws: Workspace, choice: str | None, current_run: Callable[[], Path],
                   quiet: bool = False) -> Path:
    """The model directory ``choice`` names: None or "latest" (newest checkpoint of ``current_run()``, the
    run the current pretrain settings train in, else the pretrain output), a step number of that run, or a
    path to any model directory."""
    choice = (choice or "latest").strip()
    if choice != "latest" and not choice.isdigit():
        return user_path(cfg, choice)
    run = current_run()
    run_dir, checkpoints = newest_checkpoints(run)
    if choice.isdigit():
        wanted = [c for c in checkpoints if step_of(c) == int(choice)]
        if not wanted:
            have = ", ".join(str(step_of(c)) for c in checkpoints) or "none"
            raise BertwbError(f"no checkpoint at step {int(choice)} in {run_dir / 'checkpoints'} "
                              f"(kept: {have}); pass one of those or a directory")
        return wanted[0]
    if checkpoints:
        return checkpoints[-1]
    stage = ws.stage_dir("pretrain")
    if ws.has_run("pretrain") and (stage / "model.safetensors").is_file():
        if not quiet:
            ui.warn(f"no checkpoint of the current pretrain settings; using the last trained model in {stage}")
        return stage
    others = sorted([*run.parent.glob("*/checkpoints/*"), *run.parent.glob("*/*/checkpoints/*")])
    hint = (f"; checkpoints of other settings exist, e.g. {others[-1]}, usable with --checkpoint"
            if others else "")
    raise BertwbError("no checkpoint of the current settings: run `bertwb pretrain` first, or pass "
                      "--checkpoint DIR (a checkpoint, an export or a Hugging Face model folder)" + hint)


def start_dir(cfg: Config, ws: Workspace, choice: str, origin: str) -> Path:
    """The model directory a fine-tuning starts from: ``pretrain`` (this workspace's pre-trained model)
    or a path; ``origin`` names where the key that chose it was given."""
    if choice != "pretrain":
        return user_path(cfg, choice)
    if not ws.has_run("pretrain"):
        raise BertwbError(f"{origin} is pretrain, but pretrain has not run in {ws.root}; "
                          "run `bertwb pretrain`, or set init_from to a model directory")
    return ws.stage_dir("pretrain")


def task_dir(cfg: Config, ws: Workspace, task: str, checkpoint: str | None) -> Path:
    """The fine-tuned model ``bertwb predict`` uses: ``checkpoint`` (a path), else task ``task``'s stage output."""
    if checkpoint:
        return user_path(cfg, checkpoint)
    if not ws.has_run(f"finetune/{task}"):
        raise BertwbError(f"finetune/{task} has not run in {ws.root}; run `bertwb finetune {task}` first, "
                          "or pass --checkpoint DIR")
    return ws.stage_dir(f"finetune/{task}")


def tokenizer_dir(ws: Workspace, own: Path | None) -> Path:
    """A model's tokenizer folder: its ``own`` (a folder with tokenizer.json or vocab.txt), else the
    workspace's vocab stage, which must have run."""
    if own is not None:
        return own
    if not ws.has_run("vocab"):
        raise BertwbError(f"vocab has not run in {ws.root}; run `bertwb vocab` first")
    return ws.stage_dir("vocab")
