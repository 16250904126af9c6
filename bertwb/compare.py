"""``bertwb compare WORKDIR...``: one table of several runs' settings and results, from their manifests.

A sweep puts each setting's run in a workspace of its own (``--workdir runs/vocab-4096``); this reads
only their manifests (no database, no torch), so it works on finished and half-finished sweeps alike
and on workspaces copied from another machine. Columns: the settings that differ between the runs
(``vocab.vocab_size``, ``pairs.masked_lm_prob``, ...), then each stage's key results.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bertwb.artifacts import read_manifest_file
from bertwb.errors import BertwbError

# The results shown per stage: summary key -> column name.
RESULTS: dict[str, dict[str, str]] = {
    "vocab": {"vocab_size": "vocab size", "unk_rate": "[UNK] rate", "tokens_per_word": "tokens/word"},
    "pairs": {"instances_train": "train pairs", "mask_rate": "mask rate"},
    "pretrain": {"steps_done": "steps", "loss": "train loss", "valid_mlm_acc": "valid MLM acc",
                 "valid_nsp_acc": "valid NSP acc", "tokens_per_s": "tokens/s"},
    "evaluate": {"mlm_acc": "eval MLM acc", "perplexity": "perplexity", "nsp_acc": "eval NSP acc"},
}


def compare(workdirs: list[Path]) -> tuple[list[str], list[list[Any]]]:
    """The columns and one row per workspace: the differing settings, then the stages' results."""
    runs = []
    for workdir in workdirs:
        manifests = _manifests(workdir)
        if not manifests:
            raise BertwbError(f"{workdir}: no manifests; is it a bertwb workspace (a --workdir of a run)?")
        runs.append((workdir, manifests))
    settings = [_settings(manifests) for _, manifests in runs]
    differing = sorted(key for key in set().union(*settings) if len({json.dumps(s.get(key)) for s in settings}) > 1)
    results: list[dict[str, Any]] = []
    for _, manifests in runs:
        row: dict[str, Any] = {}
        for stage, manifest in manifests.items():
            summary = manifest.get("summary") or {}
            template = stage.split("/")[0]
            for key, column in RESULTS.get(template, {}).items():
                if key in summary:
                    row[column] = summary[key]
            if template == "finetune" and summary.get("main_metric"):
                row[f"{stage} dev {summary['main_metric']}"] = summary.get("main_value")
        results.append(row)
    result_columns = list(dict.fromkeys(column for row in results for column in row))
    columns = ["workspace", *differing, *result_columns]
    rows = [[str(workdir), *(s.get(key) for key in differing), *(r.get(c) for c in result_columns)]
            for (workdir, _), s, r in zip(runs, settings, results, strict=True)]
    return columns, rows


def _manifests(workdir: Path) -> dict[str, dict[str, Any]]:
    """Every readable manifest of a workspace by stage name (``finetune/sst`` for instances)."""
    folder = workdir / "manifests"
    found = {}
    for path in sorted(folder.rglob("*.json")) if folder.is_dir() else []:
        manifest, _ = read_manifest_file(path)
        if manifest is not None:  # an unreadable manifest is a stale stage: nothing to compare
            found[path.relative_to(folder).with_suffix("").as_posix()] = manifest
    return found


def _settings(manifests: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``section.key -> value`` for every setting that entered a stage key."""
    flat: dict[str, Any] = {}
    for manifest in manifests.values():
        for section, params in (manifest.get("params") or {}).items():
            for key, value in (params or {}).items():
                flat[f"{section}.{key}"] = value
    return flat
