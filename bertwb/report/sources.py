"""What the report reads from a workspace: only files and a read-only database connection, never the lock.

Training curves come from a run's ``metrics.jsonl``, which the trainer appends one whole line to at
every log: a reader racing it sees at most a torn last line, which is skipped, so a run that is still
going is read as far as it got. The run shown for a stage is the one the current config trains in
(`bertwb.train.runs.current_run_dir`), else the newest run directory that has metrics, else the
stage's own copy of them.

The pairs histograms come from the pairs stage's arrays (what training reads; the same numbers as the
``pairs_length_hist`` and ``pairs_mask_kinds`` views), so they draw while another bertwb process holds
the database. Fertility needs the ``tokens`` table: a read-only connection opened and closed at once;
when a writer holds the database it raises `BertwbError` and the report says why that figure is missing.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertwb.config import Config
from bertwb.errors import BertwbError
from bertwb.train.runs import current_run_dir, run_dir_of
from bertwb.workspace import Workspace

# The trainer's and the finetune stage's file names; their modules import torch, which the report does not need.
METRICS_LINES = "metrics.jsonl"
TASK_RESULTS = "metrics.json"
FERTILITY_SAMPLE = 50_000  # sentences; enough for a stable histogram, quick on any corpus
_CHUNK = 1 << 22  # array elements per histogram chunk: memory stays flat however many pairs there are


@dataclass
class TrainingLog:
    """The metrics.jsonl lines of one run of a training stage, in step order."""

    stage: str
    path: Path
    lines: list[dict[str, Any]]
    finished: bool  # the stage's manifest records this run, at this last step

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


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of a metrics file, sorted by step; a torn line (one being written) is skipped."""
    lines = []
    for text in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if isinstance(line, dict) and isinstance(line.get("step"), int):
            lines.append(line)
    return sorted(lines, key=lambda line: line["step"])


def training_log(cfg: Config, ws: Workspace, stage: str) -> TrainingLog | None:
    """The log of the run ``stage`` (``pretrain`` or ``finetune/<task>``) trains in now, or its newest one."""
    try:
        current = current_run_dir(cfg, ws, stage) / METRICS_LINES
    except BertwbError:  # a task no longer in the config: its runs are still shown
        current = None
    every_run = run_dir_of(ws, stage, "*")
    newest_first = sorted(every_run.parent.glob(f"{every_run.name}/{METRICS_LINES}"),
                          key=lambda path: path.stat().st_mtime_ns, reverse=True)
    stage_copy = ws.stage_dir(stage) / METRICS_LINES
    for path in ([current] if current else []) + newest_first + [stage_copy]:
        lines = read_lines(path) if path.is_file() else []
        if lines:
            manifest = ws.read_manifest(stage) or {}
            done = (manifest.get("summary") or {}).get("steps_done")
            same_run = path == stage_copy or (manifest.get("key") or "")[:16] == path.parent.name
            return TrainingLog(stage, path, lines, finished=same_run and done == lines[-1]["step"])
    return None


def evaluate_metrics(ws: Workspace) -> dict[str, Any] | None:
    """What the last evaluate run wrote, or None."""
    from bertwb.stages.evaluate import read_metrics  # noqa: PLC0415 - the stage modules load on demand

    try:
        return read_metrics(ws)
    except (BertwbError, ValueError):
        return None


def task_names(cfg: Config, ws: Workspace) -> list[str]:
    """The config's fine-tuning tasks, then any other task with results or runs in the workspace."""
    names = list(cfg.finetune.tasks)
    for folder in (ws.root / "finetune", ws.root / "finetune-runs"):
        if folder.is_dir():
            names += sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name not in names)
    return list(dict.fromkeys(names))


def task_results(ws: Workspace, task: str) -> dict[str, Any] | None:
    """A fine-tuned task's dev/test metrics (with the labels and a classifier's confusion matrices), or None."""
    path = ws.stage_dir(f"finetune/{task}") / TASK_RESULTS
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@dataclass
class PairStats:
    """Per split: pairs by length in tokens (index = length), and masked positions by replacement kind."""

    lengths: dict[str, np.ndarray]
    kinds: dict[str, dict[str, int]]  # empty with dynamic masking: masks are drawn while training
    masking: str


def pair_stats(ws: Workspace) -> PairStats | None:
    """Length and mask-kind counts of the pairs stage's arrays, in chunks; None when pairs has not run."""
    from bertwb.data.pairs import SPLITS, load_pairs  # noqa: PLC0415

    stage_dir = ws.stage_dir("pairs")
    if ws.read_manifest("pairs") is None or not (stage_dir / "meta.json").is_file():
        return None
    lengths, kinds, masking = {}, {}, "static"
    for split in SPLITS:
        data = load_pairs(stage_dir, split)
        masking = data.meta["masking"]
        size = data.meta["max_seq_length"] + 1
        counts = np.zeros(size, dtype=np.int64)
        for start in range(0, len(data), _CHUNK):
            counts += np.bincount(np.diff(data.offsets[start:start + _CHUNK + 1]), minlength=size)[:size]
        lengths[split] = counts
        if data.static and len(data.masked_kinds):
            names = data.meta["kinds"]  # {"mask": 0, "random": 1, "keep": 2}
            by_id = np.zeros(max(names.values()) + 1, dtype=np.int64)
            for start in range(0, len(data.masked_kinds), _CHUNK):
                by_id += np.bincount(data.masked_kinds[start:start + _CHUNK], minlength=len(by_id))[:len(by_id)]
            kinds[split] = {name: int(by_id[kind_id]) for name, kind_id in names.items()}
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
