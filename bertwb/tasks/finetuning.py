"""Fine-tuning: any task's examples as features, and its run on the one trainer.

A task type (:mod:`bertwb.tasks.classify`, :mod:`~bertwb.tasks.tag`, :mod:`~bertwb.tasks.qa`) reads its
files, turns examples into *features* — token sequences ``[CLS] A [SEP] (B [SEP])`` with their targets,
several per example where a QA context needs several windows — and turns the model's outputs on the
features back into one prediction per example, which its metrics score. This module holds what they
share:

* `Features`: every feature of a split as flat arrays (as the pre-training pairs are), batched by
  :class:`bertwb.data.batching.Batches` with length bucketing (short texts do not pay for long ones)
  and collated into `TaskBatch` tensors;
* `TaskObjective`: the trainer's objective for a task, whose validation is the task's real metrics on
  the whole dev set (`collect` runs the model over any split, on every rank, and gathers the outputs);
* `train`: one task's run — data, the model it starts from with a new head, the trainer, then the
  best (or last) weights scored on dev and test and written as a model directory that predicts, exports
  and loads in `transformers` by itself.

:mod:`bertwb.tasks.prediction` answers new inputs with such a directory (``bertwb predict``).
"""

from __future__ import annotations

import json
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import safetensors.torch
import torch

from bertwb import fast, ui
from bertwb.artifacts import RESULTS_FILE, TASK_FILE, write_json
from bertwb.config import Config, FinetuneTaskConfig
from bertwb.data.batching import Batches, TensorBatch, round_up
from bertwb.data.tokenizer import write_tokenizer_files
from bertwb.errors import BertwbError
from bertwb.model import modeldir
from bertwb.model.hf_names import hf_config_of
from bertwb.train import checkpoint
from bertwb.train.device import autocast
from bertwb.train.distributed import Dist
from bertwb.train.objective import Objective
from bertwb.train.runs import checkpoint_path
from bertwb.train.trainer import BEST_DIR, METRICS_FILE, Trainer

IGNORE = -100  # a target nothing is predicted for (cross-entropy's ignore_index)


# --- features and batches ---------------------------------------------------------------------------

@dataclass
class Features:
    """A split's features, unpadded, as flat arrays; feature ``i`` is ``tokens[offsets[i]:offsets[i+1]]``.

    Targets, by task type: ``labels`` one per feature (class ids, or floats for regression);
    ``token_labels`` one per token (-100 where nothing is predicted); ``start``/``end`` the answer's
    token positions (0, the [CLS], when the answer is not in this window).
    """

    tokens: np.ndarray  # (total,) int32
    offsets: np.ndarray  # (n + 1,) int64
    type_ids: np.ndarray  # (total,) int8: 0 for [CLS] A [SEP], 1 for B [SEP]
    example: np.ndarray  # (n,) int64: the example each feature came from
    labels: np.ndarray | None = None
    token_labels: np.ndarray | None = None
    start: np.ndarray | None = None
    end: np.ndarray | None = None
    meta: list[Any] | None = None  # per feature, what its task's decoder needs (word starts, answer offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @classmethod
    def from_encodings(cls, ids: list[list[int]], type_ids: list[list[int]], example: list[int],
                       token_labels: list[list[int]] | None = None, meta: list[Any] | None = None,
                       **targets: Any) -> Features:
        """Features from per-feature lists of ids and type ids (and per-token labels, per-feature targets)."""
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        offsets = np.zeros(len(ids) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.fromiter((t for row in ids for t in row), dtype=np.int32, count=int(offsets[-1]))
        types = np.fromiter((t for row in type_ids for t in row), dtype=np.int8, count=int(offsets[-1]))
        token_targets = None if token_labels is None else \
            np.fromiter((t for row in token_labels for t in row), dtype=np.int64, count=int(offsets[-1]))
        return cls(flat, offsets, types, np.asarray(example, np.int64), token_labels=token_targets, meta=meta,
                   **{name: np.asarray(values) for name, values in targets.items()})

    def micro_batches(self, rows: np.ndarray, parts: list[np.ndarray], seed: int, epoch: int, index: int,
                      pad_multiple: int = 1) -> list[TaskBatch]:
        return [collate(self, rows[slots], pad_multiple) for slots in parts if len(slots)]


@dataclass
class TaskBatch(TensorBatch):
    """One padded micro-batch of features, ready for a task model's forward."""

    input_ids: torch.Tensor  # (B, T) int64
    token_type_ids: torch.Tensor  # (B, T) int64
    attention_mask: torch.Tensor | None  # (B, T) 1 = token, 0 = pad; None when no row is padded
    features: torch.Tensor  # (B,) int64: which features these rows are
    labels: torch.Tensor | None  # (B,) int64 or float32
    token_labels: torch.Tensor | None  # (B, T) int64, -100 on pad and unlabelled pieces
    start_positions: torch.Tensor | None  # (B,) int64
    end_positions: torch.Tensor | None  # (B,) int64
    n_tokens: int
    n_padded: int
    n_targets: int  # what the loss averages over: rows, or labelled tokens (counted on the host)


def collate(features: Features, rows: np.ndarray, pad_multiple: int = 1) -> TaskBatch:
    """Pad features ``rows`` to the longest, rounded up to ``pad_multiple``."""
    starts = features.offsets[rows]
    lengths = features.offsets[rows + 1] - starts
    width = int(round_up(lengths.max(), pad_multiple))
    real = np.arange(width)[None, :] < lengths[:, None]  # (B, T)
    gather = np.where(real, starts[:, None] + np.arange(width)[None, :], 0)

    def padded(values: np.ndarray, fill: int) -> torch.Tensor:
        return torch.from_numpy(np.where(real, values[gather], fill).astype(np.int64))

    def per_row(values: np.ndarray | None) -> torch.Tensor | None:
        return None if values is None else torch.from_numpy(np.ascontiguousarray(values[rows]))

    token_labels = None if features.token_labels is None else padded(features.token_labels, IGNORE)
    return TaskBatch(
        input_ids=padded(features.tokens, 0), token_type_ids=padded(features.type_ids, 0),
        attention_mask=torch.from_numpy(real.astype(np.int64)) if (lengths < width).any() else None,
        features=torch.from_numpy(rows.astype(np.int64)), labels=per_row(features.labels),
        token_labels=token_labels, start_positions=per_row(features.start), end_positions=per_row(features.end),
        n_tokens=int(lengths.sum()), n_padded=len(rows) * width,
        n_targets=len(rows) if token_labels is None else int((token_labels != IGNORE).sum()))


# --- task types -------------------------------------------------------------------------------------

class TaskType(Protocol):
    """What a task type provides (see the module docstring); implemented in classify.py, tag.py, qa.py."""

    model_kind: str  # a key of bertwb.model.heads.MODEL_KINDS
    main_metric: str  # the dev metric that picks the best checkpoint (higher is better)

    def read(self, path: Path, labelled: bool = True) -> list[Any]: ...
    def label_names(self, train: list[Any], path: Path) -> list[str] | None: ...
    def check_labels(self, examples: list[Any], label_names: list[str] | None, path: Path) -> None: ...
    def featurize(self, examples: list[Any], tokenizer: Any, label_names: list[str] | None) -> Features: ...
    def objective(self, label_names: list[str] | None) -> TaskObjective: ...
    def outputs(self, out: Any, batch: TaskBatch) -> list[Any]: ...
    def decode(self, examples: list[Any], features: Features, outputs: dict[int, Any],
               label_names: list[str] | None) -> list[dict[str, Any]]: ...
    def score(self, examples: list[Any], predictions: list[dict[str, Any]],
              label_names: list[str] | None) -> dict[str, Any]: ...
    def from_lines(self, lines: list[tuple[int, str]]) -> list[Any]: ...  # (line number in stdin, text)
    def row(self, example: Any, prediction: dict[str, Any]) -> dict[str, Any]: ...
    def gold(self, example: Any) -> Any: ...  # the example's label in the input, None when it has none


def task_type(settings: FinetuneTaskConfig, setting: str, recorded: dict[str, Any] | None = None) -> TaskType:
    """The task type a task's ``type`` names, set up with its settings (and what training recorded about its data,
    ``TaskType.recorded``, when predicting)."""
    if settings.type is None:
        raise BertwbError(f"{setting}.type is not set; give classify, tag or qa")
    if settings.type == "classify":
        from bertwb.tasks.classify import ClassifyTask as cls  # noqa: PLC0415 - each type imports its own libraries
    elif settings.type == "tag":
        from bertwb.tasks.tag import TagTask as cls  # noqa: PLC0415
    else:
        from bertwb.tasks.qa import QATask as cls  # noqa: PLC0415
    return cls(settings, setting, recorded or {})


class TaskObjective(Objective):
    """A task's training objective: its loss is the task's; its validation, the task's metrics on dev.

    Subclasses give ``sums``, ``counts``, ``count``, ``forward``, ``loss`` and ``rates``; `evaluate` runs the
    model over the whole dev split, decodes one prediction per example and scores them.
    """

    def __init__(self, task: TaskType, label_names: list[str] | None):
        self.task, self.label_names = task, label_names
        self.main_metric = task.main_metric
        self.dev: tuple[list[Any], Features] | None = None  # dev examples and features, set by `train`

    def evaluate(self, trainer: Trainer) -> dict[str, float]:
        examples, features = self.dev
        results = score_split(self, trainer.model, trainer.valid, examples, features, trainer.p.precision,
                              trainer.dist)
        return {f"valid_{name}": value for name, value in results.items() if isinstance(value, (int, float))}

    def progress(self, metrics: dict[str, Any]) -> tuple[list[str], list[str]]:
        train = [f"loss {metrics['loss']:.4f}"] + ([f"acc {100 * metrics['acc']:.1f}%"] if "acc" in metrics else [])
        main = f"valid_{self.main_metric}"
        valid = [f"valid loss {metrics['valid_loss']:.4f} {self.main_metric} {metrics[main]:.4g}"] \
            if main in metrics else []
        return train, valid


@torch.no_grad()
def collect(objective: TaskObjective, model: torch.nn.Module, batches: Batches, precision: str,
            dist: Dist) -> tuple[dict[int, Any], dict[str, float]]:
    """The model's per-feature outputs over every batch of ``batches`` (gathered from every rank), and the
    objective's loss statistics summed over them."""
    model.eval()
    device = dist.device
    outputs: dict[int, Any] = {}
    sums = torch.zeros(len(objective.sums), dtype=torch.float64, device=device)
    counts = np.zeros(len(objective.counts))
    with ui.progress("evaluating", total=len(batches), unit="features") if dist.rank == 0 else nullcontext() as bar:
        for index in range(batches.steps_per_epoch):
            micro = batches.micro_batches(0, index)
            totals = [sum(column) for column in zip(*(objective.count(b) for b in micro), strict=True)]
            for batch in micro:
                batch = batch.to(device, non_blocking=True)
                with autocast(precision, device):
                    out = objective.forward(model, batch)
                sums += objective.loss(out, batch, totals)[1]
                counts += objective.count(batch)
                outputs.update(zip(batch.features.tolist(), objective.task.outputs(out, batch), strict=True))
                if bar is not None:
                    bar.advance(len(batch.features) * dist.world_size)
    model.train()
    for part in dist.gather(outputs):
        outputs.update(part)
    totals = dist.all_reduce(torch.cat([sums, torch.tensor(counts, dtype=torch.float64, device=device)]))
    return outputs, dict(zip((*objective.sums, *objective.counts), totals.tolist(), strict=True))


def score_split(objective: TaskObjective, model: torch.nn.Module, batches: Batches, examples: list[Any],
                features: Features, precision: str, dist: Dist) -> dict[str, Any]:
    """The task's metrics on one split, plus the mean loss."""
    outputs, totals = collect(objective, model, batches, precision, dist)
    predictions = objective.task.decode(examples, features, outputs, objective.label_names)
    return {"loss": objective.rates(totals)["loss"],
            **objective.task.score(examples, predictions, objective.label_names)}


# --- one task's run ---------------------------------------------------------------------------------

@dataclass
class Plan:
    """What rank 0 tells every rank before training: the task, where its run is, what it starts from."""

    task: str
    run_dir: str
    model_dir: str
    tokenizer_dir: str


@dataclass
class _Split:
    examples: list[Any]
    features: Features
    batches: Batches


def train(cfg: Config, plan: Plan, dist: Dist, out_dir: Path | None = None) -> dict[str, Any]:
    """Fine-tune the task from its starting model to the requested step; rank 0 writes ``out_dir``."""
    started = time.perf_counter()
    setting = f"finetune.tasks.{plan.task}"
    settings = cfg.finetune.tasks[plan.task]
    task = task_type(settings, setting)
    check_paths(cfg, plan.task)
    source = modeldir.open_model_dir(Path(plan.model_dir))
    tokenizer = modeldir.load_tokenizer(source, folder=Path(plan.tokenizer_dir))
    modeldir.check_length(source, settings.max_seq_length, f"{setting}.max_seq_length")
    if not settings.train:
        raise BertwbError(f"{setting}.train is not set; give the task's training file")
    train_examples = task.read(cfg.resolve(settings.train))
    label_names = task.label_names(train_examples, cfg.resolve(settings.train))
    pad_multiple = 8 if dist.device.type == "cuda" else 1

    def split(path: str, drop_last: bool) -> _Split:
        examples = task.read(cfg.resolve(path)) if path != settings.train else train_examples
        task.check_labels(examples, label_names, cfg.resolve(path))
        features = task.featurize(examples, tokenizer, label_names)
        training = {"batch_tokens": settings.batch_tokens, "grad_accum": settings.grad_accum} if drop_last else {}
        batches = Batches(features, settings.batch_size, settings.seed, bucket_batches=settings.bucket_batches,
                          world_size=dist.world_size, rank=dist.rank, pad_multiple=pad_multiple, drop_last=drop_last,
                          setting=setting, **training)
        return _Split(examples, features, batches)

    training = split(settings.train, drop_last=True)
    if training.batches.steps_per_epoch == 0:
        raise BertwbError(f"{setting}.batch_size {settings.batch_size} is more than the {len(training.features)} "
                          f"training features of {settings.train}; lower it")
    dev = split(settings.dev, drop_last=False) if settings.dev else None
    test = split(settings.test, drop_last=False) if settings.test else None

    torch.manual_seed(settings.seed)
    model, report = modeldir.load_model(source, kind=task.model_kind, label_names=label_names, convert=True)
    if dist.rank == 0:
        new = f"; new {', '.join(report.initialised_heads)}" if report.initialised_heads else ""
        ui.stage_line(f"finetune/{plan.task}", f"starting from {source.label} ({report.layout} layout{new})")
    objective = task.objective(label_names)
    objective.fast = fast.choose(model, dist.device, settings.cpu_fast_paths)  # this task built the model
    objective.dev = (dev.examples, dev.features) if dev else None
    run_dir = Path(plan.run_dir)
    trainer = Trainer(settings, objective, model, training.batches, valid=dev.batches if dev else None, dist=dist,
                      run_dir=run_dir, name=f"finetune/{plan.task}",
                      state={"task": plan.task, "label_names": label_names, "config": asdict(settings)},
                      keep_best=settings.keep_best and dev is not None, patience=settings.patience if dev else 0)
    trainer.fit()

    final = run_dir / BEST_DIR if trainer.best and trainer.keep_best else checkpoint_path(run_dir, trainer.done)
    if not (final / "model.safetensors").is_file():  # removed by hand: a crash's leftovers are repaired before
        raise BertwbError(f"{final / 'model.safetensors'} is missing, the weights this run kept; run "
                          f"`bertwb finetune {plan.task} --force` to train the task again")
    safetensors.torch.load_model(trainer.model, str(final / "model.safetensors"), device=str(dist.device))
    results = {name: score_split(objective, trainer.model, part.batches, part.examples, part.features,
                                 settings.precision, dist)
               for name, part in (("dev", dev), ("test", test)) if part is not None}
    summary = {
        "task": plan.task, "type": settings.type, "labels": label_names,
        "train_examples": len(training.examples), "train_features": len(training.features),
        "dev_examples": len(dev.examples) if dev else 0,
        "steps_done": trainer.total_steps, "stopped_early_at": trainer.stopped_early_at,
        "steps_per_epoch": training.batches.steps_per_epoch,
        "best_step": trainer.best.get("step"), "weights": "best" if final.name == BEST_DIR else "last",
        "main_metric": task.main_metric, "main_value": results.get("dev", {}).get(task.main_metric),
        "started_from": str(source.path), "pad_fraction": round(training.batches.padding_fraction(0), 4),
        **{f"{split_name}_{name}": value for split_name, metrics in results.items()
           for name, value in metrics.items() if isinstance(value, (int, float))},
        "seconds": round(time.perf_counter() - started, 3),
    }
    if out_dir is not None and dist.rank == 0:
        checkpoint.link_weights(final, out_dir)
        (out_dir / "config.json").write_text(json.dumps(hf_config_of(trainer.model), indent=2) + "\n")
        write_tokenizer_files(tokenizer, out_dir, modeldir.max_length(source)[0])
        write_json(out_dir / TASK_FILE, {"task": plan.task, **task_settings(settings), "recorded": task.recorded()})
        write_json(out_dir / RESULTS_FILE, {"task": plan.task, "type": settings.type, "labels": label_names,
                                            "main_metric": task.main_metric, **results})
        if (run_dir / METRICS_FILE).exists():
            (out_dir / METRICS_FILE).write_bytes((run_dir / METRICS_FILE).read_bytes())
        write_json(out_dir / "training.json", summary)
    return summary


def check_paths(cfg: Config, task: str) -> None:
    """One line naming the key when a task's train, dev or test file is missing or a folder, before
    anything is read (the readers name only the file)."""
    setting = f"finetune.tasks.{task}"
    settings = cfg.finetune.tasks[task]
    for role in ("train", "dev", "test"):
        value = getattr(settings, role)
        path = cfg.resolve(value) if value else None
        if path is not None and not path.is_file():
            what = "is a folder, not a file" if path.is_dir() else "no such file"
            raise BertwbError(f"{setting}.{role}: {path}: {what}; give the task's {role} file "
                              f"({'CSV, TSV, JSONL, Parquet, CoNLL or SQuAD JSON'})")


def task_settings(settings: FinetuneTaskConfig) -> dict[str, Any]:
    """What predicting needs to know about a task besides its model: how its inputs become features."""
    keys = ("type", "format", "text_column", "text_pair_column", "label_column", "regression", "token_column",
            "tag_column", "max_seq_length", "doc_stride", "max_query_length", "max_answer_length", "n_best",
            "null_threshold")
    return {key: getattr(settings, key) for key in keys}


def example_ranges(features: Features, n_examples: int) -> list[np.ndarray]:
    """Each example's features, in order (a QA example has one per window of its context)."""
    order = np.argsort(features.example, kind="stable")
    bounds = np.searchsorted(features.example[order], np.arange(n_examples + 1))
    return [order[bounds[i]:bounds[i + 1]] for i in range(n_examples)]
