"""Checkpoints of a training run: written atomically, read back newest-first, bit-exact on resume.

A checkpoint is the folder ``<run>/checkpoints/step-NNNNNNNN/`` (named by :mod:`bertwb.train.runs`): the
weights in ``model.safetensors`` (bertwb's names, a tied tensor once), ``trainer.pt`` (optimizer, schedule,
metric window, every rank's RNG states, the best evaluation) and ``state.json`` (step, data position, world
size, architecture, the stage's extras), written last, so a folder without it is incomplete. It is built
beside its place and renamed in (`bertwb.workspace.building`); saving is collective, and rank 0 writes.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import safetensors
import safetensors.torch
import torch

from bertwb import faults, ui
from bertwb.errors import BertwbError
from bertwb.train.distributed import Dist
from bertwb.train.runs import checkpoint_path, list_checkpoints, step_of
from bertwb.workspace import building

# What reading a damaged checkpoint can raise: torn or missing files, bad JSON, a truncated pickle or zip.
UNREADABLE = (OSError, ValueError, RuntimeError, KeyError, EOFError, pickle.UnpicklingError,
              safetensors.SafetensorError)


def save(run_dir: Path, step: int, model: torch.nn.Module, dist: Dist, keep: int, trainer: dict[str, Any],
         state: dict[str, Any]) -> Path:
    """Write checkpoint ``step`` (``trainer`` into trainer.pt, ``state`` into state.json) and keep the newest
    ``keep``. Collective: call it on every rank."""
    rng_states = dist.gather(rng_state())
    final = checkpoint_path(run_dir, step)
    if dist.rank == 0:
        with building(final, what="checkpoint") as tmp:
            safetensors.torch.save_model(model, str(tmp / "model.safetensors"))  # drops a tied alias
            torch.save({**trainer, "rng": rng_states}, tmp / "trainer.pt")
            faults.point("checkpoint")  # a test kills or fills the disk here: a checkpoint half written
            (tmp / "state.json").write_text(json.dumps(
                {"step": step, "world_size": dist.world_size, **state,
                 "written_at": time.strftime("%Y-%m-%dT%H:%M:%S")}, indent=2) + "\n")
            _fsync_files(tmp)
        for old in list_checkpoints(run_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    dist.barrier()
    return final


def resume(run_dir: Path, total_steps: int, dist: Dist,
           restore: Callable[[Path], dict[str, Any]]) -> dict[str, Any] | None:
    """Restore the newest readable checkpoint at or below ``total_steps``; None to start from scratch.

    ``restore(path)`` loads one checkpoint into the run (see `load`) and returns its state.json. Rank 0
    tries them newest first, reporting and skipping unreadable ones; the others restore its choice.
    """
    chosen = None
    if dist.rank == 0:
        candidates = [c for c in reversed(list_checkpoints(run_dir)) if step_of(c) <= total_steps]
        for path in candidates:
            try:
                chosen = {"path": str(path), "step": restore(path)["step"]}
                break
            except UNREADABLE as exc:
                reason = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
                later = [c.name for c in candidates if step_of(c) < step_of(path)]
                ui.warn(f"checkpoint {path} is unreadable ({reason}); "
                        + (f"falling back to {later[0]}" if later else "no older checkpoint left"))
        if candidates and chosen is None:
            dist.broadcast(None)
            raise BertwbError(f"no readable checkpoint in {run_dir / 'checkpoints'}; delete that folder "
                              "to start this run over")
        dist.broadcast(chosen)
        return chosen
    chosen = dist.broadcast(None)
    if chosen is not None:
        restore(Path(chosen["path"]))
    return chosen


def load(path: Path, model: torch.nn.Module, dist: Dist) -> tuple[dict[str, Any], dict[str, Any]]:
    """Load a checkpoint's weights into ``model`` and this rank's RNG states; return (trainer.pt, state.json)."""
    state = json.loads((path / "state.json").read_text())
    trainer = torch.load(path / "trainer.pt", map_location="cpu", weights_only=True)
    missing, unexpected = safetensors.torch.load_model(model, str(path / "model.safetensors"),
                                                       device=str(dist.device))
    if missing or unexpected:
        raise ValueError(f"model tensors do not match (missing {missing[:3]}, unexpected {unexpected[:3]})")
    rng = trainer["rng"]
    if len(rng) == dist.world_size:
        set_rng_state(rng[dist.rank])
    elif dist.rank == 0:
        ui.warn(f"{path} was written by {len(rng)} processes, not {dist.world_size}; "
                "dropout draws differ from an uninterrupted run")
    return trainer, state


def link_weights(checkpoint: Path, out_dir: Path) -> None:
    """A checkpoint's weights as ``out_dir/model.safetensors``: a hard link, or a copy across filesystems."""
    try:
        os.link(checkpoint / "model.safetensors", out_dir / "model.safetensors")
    except OSError:
        shutil.copy2(checkpoint / "model.safetensors", out_dir / "model.safetensors")


def rng_state() -> dict[str, Any]:
    """Every generator a training step draws from: Python's, numpy's, torch's and CUDA's."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"python": random.getstate(),
             "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": pos,
                       "has_gauss": has_gauss, "cached": cached},
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(_as_tuple(state["python"]))
    numpy_state = state["numpy"]
    np.random.set_state((numpy_state["name"], numpy_state["keys"].numpy().astype(np.uint32), numpy_state["pos"],
                         numpy_state["has_gauss"], numpy_state["cached"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _as_tuple(value: Any) -> Any:
    """random.setstate wants tuples; a round trip through torch.load may hand back lists."""
    return tuple(_as_tuple(v) for v in value) if isinstance(value, (list, tuple)) else value


def _fsync_files(folder: Path) -> None:
    for path in folder.iterdir():
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
