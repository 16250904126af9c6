"""Where training runs live and what is inside one, found without importing torch (`bertwb status` stays quick).

A training stage's run is ``.bertwb/<stage>-runs/<key[:16]>/`` (``finetune-runs/<task>/<key[:16]>/`` for a
task), keyed like the stage, so a changed setting starts a new run while an interrupted one is found again;
its checkpoints are ``checkpoints/step-NNNNNNNN/`` (:mod:`bertwb.train.checkpoint`). A phased pre-training
keeps one such folder per phase in its run, listed in order by ``phases.json``; each phase counts its own
steps. Which run a command uses is :mod:`bertwb.train.model_choice`'s to say; :mod:`bertwb.artifacts` reads files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertwb.artifacts import METRICS_FILE, MetricsLog, read_metrics_log, read_phases
from bertwb.workspace import Workspace

CHECKPOINT_PREFIX = "step-"


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


def run_dir_of(ws: Workspace, stage: str, key: str) -> Path:
    """``<stage>-runs/<key[:16]>`` under the workspace; ``finetune-runs/<task>/<key[:16]>`` for an instance."""
    template, _, instance = stage.partition("/")
    return ws.root / f"{template}-runs" / instance / key[:16]


def phase_dirs(run_dir: Path) -> dict[str | None, Path]:
    """The folders a run trains in, in order: ``{None: run_dir}``, or one per phase of a phased run."""
    try:
        names = read_phases(run_dir)
    except (OSError, ValueError):  # a damaged listing: the run is read as one folder
        names = None
    return {None: run_dir} if not names else {name: run_dir / name for name in names}


def run_logs(run_dir: Path) -> dict[str | None, MetricsLog]:
    """The metrics log of each folder the run trains in (`phase_dirs`), in order."""
    return {phase: read_metrics_log(folder / METRICS_FILE) for phase, folder in phase_dirs(run_dir).items()}


def joined_metrics(logs: dict[str | None, MetricsLog]) -> list[dict[str, Any]]:
    """A run's metrics lines from its `run_logs`: a phased run's phases one after another, each line with
    its ``phase`` and ``phase_step`` and a ``step`` counted from the start of the first phase."""
    lines: list[dict[str, Any]] = []
    offset = 0
    for phase, log in logs.items():
        if phase is None:
            return log.lines
        lines += [{**line, "phase": phase, "phase_step": line["step"], "step": offset + line["step"]}
                  for line in log.lines]
        offset += log.lines[-1]["step"] if log.lines else 0
    return lines


def run_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """A run's metrics lines (`joined_metrics` of its `run_logs`)."""
    return joined_metrics(run_logs(run_dir))


def newest_checkpoints(run_dir: Path) -> tuple[Path, list[Path]]:
    """The folder of the run's newest checkpoints and its checkpoints: the run's own, or the latest
    phase's that has any (the first phase's folder when none has)."""
    folders = list(phase_dirs(run_dir).values())
    for folder in reversed(folders):
        if checkpoints := list_checkpoints(folder):
            return folder, checkpoints
    return folders[0], []
