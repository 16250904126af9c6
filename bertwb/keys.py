"""Stage keys: a hash of a stage's settings, its upstreams' identities and its input fingerprints.

`stage_key` is what `bertwb status` and `bertwb run` compare with a manifest; `current_key` and
`current_run_dir` name the run a training stage's current config trains in (its checkpoints are
``latest``), so a stage that reads another's weights (evaluate) keys on them without the engine.
Nothing here writes, and nothing loads torch: `status` keys every stage.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from bertwb import stages
from bertwb.config import Config
from bertwb.stage import Stage
from bertwb.train.runs import run_dir_of
from bertwb.workspace import Workspace

WORKSPACE_PREFIX = "<workspace>/"  # how a key names the workspace's own files: wherever it is, the same


def stage_key(stage: Stage, cfg: Config, ws: Workspace, inputs: list[dict[str, Any]]) -> tuple[str, dict]:
    """The stage's key and the parts hashed into it."""
    parts = {
        "stage": stage.name,
        "version": stage.version,
        "params": {**{section: cfg.cache_params(section) for section in stage.sections},
                   **(stage.params(cfg) if stage.params else {})},
        "deps": {dep: (ws.read_manifest(dep) or {}).get("identity") for dep in stage.deps},
        "inputs": inputs,
    }
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest(), parts


def input_fingerprints(stage: Stage, cfg: Config, ws: Workspace) -> list[dict[str, Any]]:
    """Identities of what a stage reads from outside the workspace's stages (files, checkpoints), each path
    named as `portable_path` names it."""
    found = stage.fingerprint(cfg, ws) if stage.fingerprint else []
    return [{**row, "path": portable_path(row["path"], ws, cfg.base_dir)} if "path" in row else row for row in found]


def portable_path(path: str | Path, ws: Workspace, base_dir: Path | None = None) -> str:
    """``path`` as a key names it: a file in the workspace relative to it (``<workspace>/pretrain/model.safetensors``),
    one in the config's folder (``base_dir``) relative to that (``data/train.csv``, as ingest names its inputs),
    any other by its absolute path. A project copied with ``cp -a`` (or moved) keeps every key, so its stages
    stay fresh there; the sizes and modification times beside the path still catch a changed file."""
    text = str(path)
    if not os.path.isabs(text):
        return text
    absolute = Path(os.path.abspath(text))
    for base, prefix in ((ws.root, WORKSPACE_PREFIX), (base_dir, "")):
        if base is not None and absolute.is_relative_to(os.path.abspath(base)):
            return prefix + absolute.relative_to(os.path.abspath(base)).as_posix()
    return text


def current_key(name: str, cfg: Config, ws: Workspace) -> str:
    """The key stage ``name`` has under the current config and upstream manifests.

    While an upstream's manifest is behind the config (vocab rebuilt, pairs not yet), the key is one no
    run has: no checkpoint was trained on what that upstream is about to build, so none is "latest".
    """
    stage = stages.get(name, cfg)
    key = stage_key(stage, cfg, ws, input_fingerprints(stage, cfg, ws))[0]
    behind = [dep for dep in stage.deps if not manifest_current(stages.get(dep, cfg), cfg, ws)]
    return hashlib.sha256(f"{key} before {behind} rebuild".encode()).hexdigest() if behind else key


def current_run_dir(cfg: Config, ws: Workspace, stage: str = "pretrain") -> Path:
    """The run directory the current config's ``stage`` trains in (it may not exist yet): `current_key`'s."""
    return run_dir_of(ws, stage, current_key(stage, cfg, ws))


def manifest_current(stage: Stage, cfg: Config, ws: Workspace) -> bool:
    """Whether the stage's manifest, and every upstream one, holds the key the config now gives it."""
    manifest = ws.read_manifest(stage.name)
    return manifest is not None and all(manifest_current(stages.get(dep, cfg), cfg, ws) for dep in stage.deps) \
        and manifest.get("key") == stage_key(stage, cfg, ws, input_fingerprints(stage, cfg, ws))[0]
