"""What the current config makes of a stage: its key, whether its manifest holds it, and the run it trains in.

`current_key` keys a stage as `bertwb run` would now (one no run has while an upstream's manifest is behind
the config); `current_run_dir` names the run a training stage's current config trains in (its checkpoints are
``latest``), so whatever reads those weights (evaluate, embed, report, fill-mask) keys on them without running
the engine. It reaches every stage through the registry (:mod:`bertwb.stages`), so it sits above the stage
modules: a stage that reads a run declares it (`Stage.reads_run`) and is handed it. Nothing here writes.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Callable

from bertwb import stages
from bertwb.config import Config
from bertwb.keys import input_fingerprints, stage_key
from bertwb.stage import Stage
from bertwb.train.runs import run_dir_of
from bertwb.workspace import Workspace


def current_key(name: str, cfg: Config, ws: Workspace) -> str:
    """The key stage ``name`` has under the current config and upstream manifests.

    While an upstream's manifest is behind the config (vocab rebuilt, pairs not yet), the key is one no
    run has: no checkpoint was trained on what that upstream is about to build, so none is "latest".
    """
    stage = stages.get(name, cfg)
    key = stage_key(stage, cfg, ws, input_fingerprints(stage, cfg, ws, runs(cfg, ws)))[0]
    behind = [dep for dep in stage.deps if not manifest_current(stages.get(dep, cfg), cfg, ws)]
    return hashlib.sha256(f"{key} before {behind} rebuild".encode()).hexdigest() if behind else key


def current_run_dir(cfg: Config, ws: Workspace, stage: str = "pretrain") -> Path:
    """The run directory the current config's ``stage`` trains in (it may not exist yet): `current_key`'s."""
    return run_dir_of(ws, stage, current_key(stage, cfg, ws))


def runs(cfg: Config, ws: Workspace) -> Callable[[str], Path]:
    """`current_run_dir` for ``cfg`` and ``ws``, by stage name: what a stage that reads a run is handed."""
    return functools.partial(current_run_dir, cfg, ws)


def manifest_current(stage: Stage, cfg: Config, ws: Workspace) -> bool:
    """Whether the stage's manifest, and every upstream one, holds the key the config now gives it."""
    manifest = ws.read_manifest(stage.name)
    return manifest is not None and all(manifest_current(stages.get(dep, cfg), cfg, ws) for dep in stage.deps) \
        and manifest.get("key") == stage_key(stage, cfg, ws, input_fingerprints(stage, cfg, ws, runs(cfg, ws)))[0]
