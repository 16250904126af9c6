"""Where trained weights live on disk, found without importing torch, so `bertwb status` stays quick.

A pretraining run is ``.bertwb/pretrain-runs/<key[:16]>/``, keyed like the pretrain stage; its
checkpoints are ``checkpoints/step-NNNNNNNN/`` (see :mod:`bertwb.pretrain` for what they hold). A
model directory is any folder with one of `WEIGHT_FILES` (see :mod:`bertwb.modelio`, which opens and
checks them). This module names those paths, picks a checkpoint, and holds the freshness hooks of the
two stages that read weights (the engine calls them for every `bertwb status` and `bertwb run`):

* pretrain: the identity of ``model.init_from``'s weights, and whether a finished run did fewer steps
  than now asked (`init_from_weights`, `steps_behind`);
* evaluate: the identity of the weights ``evaluate.checkpoint`` picks (`evaluated_weights`).

An identity is the weights file's path, size and modification time: replacing the file changes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertwb import engine, ui
from bertwb.config import Config
from bertwb.errors import BertwbError
from bertwb.workspace import Workspace

RUNS_DIR = "pretrain-runs"
CHECKPOINT_PREFIX = "step-"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"{CHECKPOINT_PREFIX}{step:08d}"


def list_checkpoints(run_dir: Path) -> list[Path]:
    """The run's complete checkpoints, oldest first (temp dirs of unfinished writes are not listed)."""
    folder = run_dir / "checkpoints"
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and p.name.startswith(CHECKPOINT_PREFIX))


def step_of(path: Path) -> int:
    """The step of a checkpoint directory; -1 for a name that is not one."""
    try:
        return int(path.name[len(CHECKPOINT_PREFIX):])
    except ValueError:
        return -1


def weights_file(model_dir: Path) -> Path | None:
    """The file holding a model directory's weights (the first of `WEIGHT_FILES` present), or None."""
    return next((model_dir / name for name in WEIGHT_FILES if (model_dir / name).is_file()), None)


def fingerprint(weights: Path) -> dict[str, Any]:
    """Identity of a weights file for a stage key: path, size and modification time."""
    stat = weights.stat()
    return {"path": str(weights), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def pretrain_run_dir(cfg: Config, ws: Workspace) -> Path:
    """The run directory the current config's pretrain stage trains in (it may not exist yet)."""
    spec = engine.STAGES["pretrain"]
    key, _ = engine.stage_key(spec, cfg, ws, engine.input_fingerprints(spec, cfg, ws))
    return run_dir_of(ws, key)


def run_dir_of(ws: Workspace, pretrain_key: str) -> Path:
    return ws.root / RUNS_DIR / pretrain_key[:16]


def choose_checkpoint(cfg: Config, ws: Workspace, choice: str | None, quiet: bool = False) -> Path:
    """The model directory ``choice`` names: None or "latest" (newest checkpoint of the current run,
    else the pretrain output), a step number of the current run, or a path to any model directory."""
    choice = (choice or "latest").strip()
    if choice == "latest" or choice.isdigit():
        run_dir = pretrain_run_dir(cfg, ws)
        checkpoints = list_checkpoints(run_dir)
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
        if ws.read_manifest("pretrain") and (stage / "model.safetensors").is_file():
            if not quiet:
                ui.warn(f"no checkpoint of the current pretrain settings; using the last trained model in {stage}")
            return stage
        others = sorted(run_dir.parent.glob("*/checkpoints/*"))
        hint = (f"; checkpoints of other settings exist, e.g. {others[-1]}, usable with --checkpoint"
                if others else "")
        raise BertwbError("no checkpoint of the current settings: run `bertwb pretrain` first, or pass "
                          "--checkpoint DIR (a checkpoint, an export or a Hugging Face model folder)" + hint)
    path = cfg.resolve(choice) if not Path(choice).is_absolute() else Path(choice)
    if not path.exists() and Path(choice).exists():
        path = Path(choice).resolve()  # relative to where the command runs, as shells expect
    return path


# --- the engine's freshness hooks (StageSpec.fingerprint / StageSpec.behind) ----------------------------

def init_from_weights(cfg: Config, ws: Workspace) -> list[dict[str, Any]]:
    """pretrain: the identity of ``model.init_from``'s weights (so replacing them retrains); none without it."""
    if not cfg.model.init_from:
        return []
    path = cfg.resolve(cfg.model.init_from)
    weights = weights_file(path) if path.is_dir() else None
    if weights is None:
        return [{"path": str(path), "missing": True}]  # `bertwb status` still works; training says what is wrong
    return [fingerprint(weights)]


def steps_behind(cfg: Config, manifest: dict[str, Any]) -> str | None:
    """pretrain: why a stage whose key matches is still stale: it ran fewer steps than now asked."""
    summary = manifest.get("summary") or {}
    done = summary.get("steps_done", 0)
    wanted = cfg.pretrain.steps or cfg.pretrain.epochs * summary.get("steps_per_epoch", 0)
    if done < wanted:
        return f"pretrain.steps {done} done < {wanted} asked; continuing from step {done}"
    return None


def evaluated_weights(cfg: Config, ws: Workspace) -> list[dict[str, Any]]:
    """evaluate: the weights ``evaluate.checkpoint`` picks; nothing when there are none yet."""
    try:
        weights = weights_file(choose_checkpoint(cfg, ws, cfg.evaluate.checkpoint, quiet=True))
    except BertwbError:
        return []  # `bertwb status` still works; running the stage says what is missing
    return [fingerprint(weights)] if weights is not None else []
