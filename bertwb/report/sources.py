"""What the report reads from a workspace: only files and a read-only database connection, never the lock.

A stage's curves come from the ``metrics.jsonl`` of the run its current config trains (`bertwb.current`), else
its newest run with metrics, else the stage's own copy; a torn or damaged line is skipped and counted, for
the report to say so. The pairs histograms read the pairs arrays, so they draw while another process holds
the database; fertility opens the ``tokens`` table read-only and briefly, and a busy database raises
`BertwbError`, which the report turns into a note. Files are read through :mod:`bertwb.artifacts`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertwb.artifacts import METRICS_FILE, MetricsLog, read_metrics_log, read_results
from bertwb.config import Config
from bertwb.current import current_run_dir
from bertwb.data.pairs import SPLITS, load_pairs, pair_sets
from bertwb.errors import BertwbError
from bertwb.train.runs import joined_metrics, phase_dirs, run_dir_of, run_logs
from bertwb.workspace import Workspace

FERTILITY_SAMPLE = 50_000  # sentences; enough for a stable histogram, quick on any corpus
_CHUNK = 1 << 22  # array elements per histogram chunk: memory stays flat however many pairs there are


@dataclass
class TrainingLog:
    """The metrics.jsonl lines of one run of a training stage, in step order."""

    stage: str
    path: Path
    lines: list[dict[str, Any]]
    finished: bool  # the stage's manifest records this run, at this last step
    damaged: list[MetricsLog]  # the run's files with lines skipped (torn or damaged), for a warning

    @property
    def last_step(self) -> int:
        return int(self.lines[-1]["step"])

    def series(self, name: str) -> tuple[list[int], list[float]]:
        """(steps, values) of the lines that hold ``name`` (validation names only at validation steps)."""
        points = [(line["step"], line[name]) for line in self.lines
                  if isinstance(line.get(name), (int, float)) and math.isfinite(line[name])]
        return [s for s, _ in points], [v for _, v in points]

    def last(self, name: str) -> float | None:
        _, values = self.series(name)
        return values[-1] if values else None


def training_log(cfg: Config, ws: Workspace, stage: str) -> TrainingLog | None:
    """The log of the run ``stage`` (``pretrain`` or ``finetune/<task>``) trains in now, or its newest one
    (a phased pre-training's phases one after another, `bertwb.train.runs.joined_metrics`)."""
    try:
        current = current_run_dir(cfg, ws, stage)
    except BertwbError:  # a task no longer in the config: its runs are still shown
        current = None
    every_run = run_dir_of(ws, stage, "*")
    runs = [path for path in every_run.parent.glob(every_run.name) if path.is_dir()]
    newest_first = sorted(runs, key=_last_logged, reverse=True)
    stage_copy = ws.stage_dir(stage)
    for run_dir in ([current] if current else []) + newest_first + [stage_copy]:
        logs = run_logs(run_dir) if run_dir != stage_copy else {None: read_metrics_log(stage_copy / METRICS_FILE)}
        lines = joined_metrics(logs)
        if lines:
            manifest = ws.read_manifest(stage) or {}
            done = (manifest.get("summary") or {}).get("steps_done")
            same_run = run_dir == stage_copy or (manifest.get("key") or "")[:16] == run_dir.name
            return TrainingLog(stage, run_dir, lines, finished=same_run and done == lines[-1]["step"],
                               damaged=[log for log in logs.values() if log.skipped])
    return None


def _last_logged(run_dir: Path) -> int:
    """When a run last wrote metrics (any of its phases): the newest run first."""
    logs = [folder / METRICS_FILE for folder in phase_dirs(run_dir).values()]
    return max((log.stat().st_mtime_ns for log in logs if log.is_file()), default=0)


def evaluate_metrics(ws: Workspace) -> dict[str, Any] | None:
    """What the last evaluate run wrote, or None."""
    return read_results(ws.stage_dir("evaluate"))


def task_names(cfg: Config, ws: Workspace) -> list[str]:
    """The config's fine-tuning tasks, then any other task with results or runs in the workspace."""
    names = list(cfg.finetune.tasks)
    for folder in (ws.root / "finetune", ws.root / "finetune-runs"):
        if folder.is_dir():
            names += sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name not in names)
    return list(dict.fromkeys(names))


def task_results(ws: Workspace, task: str) -> dict[str, Any] | None:
    """A fine-tuned task's dev/test metrics (with the labels and a classifier's confusion matrices), or None."""
    return read_results(ws.stage_dir(f"finetune/{task}"))


@dataclass
class PairStats:
    """Per split: pairs by length in tokens (index = length), and masked positions by replacement kind."""

    lengths: dict[str, np.ndarray]
    kinds: dict[str, dict[str, int]]  # empty with dynamic masking: masks are drawn while training
    masking: str


def pair_stats(ws: Workspace) -> PairStats | None:
    """Length and mask-kind counts of the pairs stage's arrays, in chunks; None when pairs has not run.
    Each split of each pair set counts apart (``train``, or ``seq128 train`` with phases)."""
    stage_dir = ws.stage_dir("pairs")
    sets = pair_sets(stage_dir)
    if ws.read_manifest("pairs") is None or not all((folder / "meta.json").is_file() for folder in sets.values()):
        return None
    lengths, kinds, masking = {}, {}, "static"
    for phase, folder in sets.items():
        for split in SPLITS:
            label = f"{phase} {split}" if phase else split
            data = load_pairs(folder, split)
            masking = data.meta["masking"]
            size = data.meta["max_seq_length"] + 1
            counts = np.zeros(size, dtype=np.int64)
            for start in range(0, len(data), _CHUNK):
                counts += np.bincount(np.diff(data.offsets[start:start + _CHUNK + 1]), minlength=size)[:size]
            lengths[label] = counts
            if data.static and len(data.masked_kinds):
                names = data.meta["kinds"]  # {"mask": 0, "random": 1, "keep": 2}
                by_id = np.zeros(max(names.values()) + 1, dtype=np.int64)
                for start in range(0, len(data.masked_kinds), _CHUNK):
                    by_id += np.bincount(data.masked_kinds[start:start + _CHUNK], minlength=len(by_id))[:len(by_id)]
                kinds[label] = {name: int(by_id[kind_id]) for name, kind_id in names.items()}
    return PairStats(lengths, kinds, masking)


@dataclass
class Fertility:
    """WordPieces per word over a sample of sentences: ``words_by_pieces[k]`` words took k pieces."""

    words_by_pieces: np.ndarray
    sentences: int
    of_sentences: int
    tokens: int
    words: int

    @property
    def mean(self) -> float:
        return self.tokens / max(self.words, 1)


def fertility(ws: Workspace) -> Fertility | None:
    """Pieces per word of a deterministic sample of ~`FERTILITY_SAMPLE` tokenised sentences (a hash of the
    sentence's id picks them, spread over the whole corpus); a word starts at every piece without ``##``.

    None when vocab has not run; `BertwbError` when the database is busy.
    """
    import pyarrow.compute as pc  # noqa: PLC0415

    if ws.read_manifest("vocab") is None:
        return None
    con = ws.connect(read_only=True)
    try:
        total = con.execute("select count(*) from tokens").fetchall()[0][0]
        per_million = math.ceil(1_000_000 * min(1.0, FERTILITY_SAMPLE / max(total, 1)))
        ids = con.sql("select ids from tokens where len(ids) > 0 and hash(doc_id, sent_idx) % 1000000 < ?",
                      params=[per_million]).to_arrow_table().column("ids").combine_chunks()
        vocab = con.execute("select starts_with(token, '##') from vocab order by token_id").fetchnumpy()
    finally:
        con.close()
    continuation = np.asarray(list(vocab.values())[0], dtype=bool)
    flat = pc.list_flatten(ids).to_numpy().astype(np.int64)
    starts = ~continuation[flat]
    sentence_starts = np.concatenate([[0], np.cumsum(pc.list_value_length(ids).to_numpy())[:-1]]).astype(np.int64)
    starts[sentence_starts[sentence_starts < len(flat)]] = True  # a sentence never continues the one before
    pieces = np.bincount(np.cumsum(starts) - 1) if len(flat) else np.zeros(0, dtype=np.int64)
    return Fertility(np.bincount(pieces) if len(pieces) else np.zeros(1, dtype=np.int64), sentences=len(ids),
                     of_sentences=int(total), tokens=len(flat), words=int(starts.sum()))
