"""Stage keys: a hash of a stage's settings, its upstreams' identities and its input fingerprints.

`stage_key` is what `bertwb status` and `bertwb run` compare with a manifest; `input_fingerprints` are the
identities of what a stage reads from outside the workspace's stages, each path as `portable_path` names it.
Which run a training stage's current config trains in is :mod:`bertwb.current`'s question, asked through the
stage registry; a stage that reads such a run is handed it here (``current_run``), never looks it up.
Nothing here writes, and nothing loads torch: `status` keys every stage.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable

from bertwb.config import Config
from bertwb.stage import Stage
from bertwb.workspace import Workspace

WORKSPACE_PREFIX = "<workspace>/"  # how a key names the workspace's own files: wherever it is, the same


def stage_key(stage: Stage, cfg: Config, ws: Workspace, inputs: list[dict[str, Any]]) -> tuple[str, dict]:
    """The stage's key and the parts hashed into it."""
    parts = {
        "stage": stage.name,
        "version": stage.version,
        "params": {**{section: cfg.key_params(section) for section in stage.sections},
                   **(stage.params(cfg) if stage.params else {})},
        "deps": {dep: (ws.read_manifest(dep) or {}).get("identity") for dep in stage.deps},
        "inputs": inputs,
    }
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest(), parts


def input_fingerprints(stage: Stage, cfg: Config, ws: Workspace,
                       current_run: Callable[[str], Path]) -> list[dict[str, Any]]:
    """Identities of what a stage reads from outside the workspace's stages (files, checkpoints), each path
    named as `portable_path` names it. ``current_run`` gives the run directory a training stage's current
    config trains in (`bertwb.current.current_run_dir`), for a stage that reads one (`Stage.reads_run`)."""
    hook = stage.fingerprint
    if hook is not None and stage.reads_run:
        hook = functools.partial(hook, current_run=functools.partial(current_run, stage.reads_run))
    found = hook(cfg, ws) if hook is not None else []
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
