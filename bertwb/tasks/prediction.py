"""``bertwb predict``: a fine-tuned model directory answering new inputs, and the rows it writes.

The directory is what :func:`bertwb.tasks.finetune.training.train` wrote (or any fine-tuned BERT with a
``task.json``, or one the task's config describes): weights, labels, tokenizer and how the task turns
inputs into features. Inputs are read whole, then featurised, predicted and written a chunk
(`PREDICT_CHUNK` examples) at a time, so the features and outputs in memory stay one chunk's and output
starts early; rows go out as JSON lines or CSV, to stdout or to a file that appears whole at the end.
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Iterator

import torch

from bertwb import fast, ui
from bertwb.artifacts import TASK_FILE, read_task_file
from bertwb.config import Config, FinetuneTaskConfig
from bertwb.data.batching import Batches
from bertwb.errors import BertwbError, cannot_write_output
from bertwb.model import modeldir
from bertwb.tasks.finetune.batches import TaskExamples
from bertwb.tasks.finetune.evaluation import TaskObjective
from bertwb.tasks.finetune.objectives import objective_for
from bertwb.tasks.finetune.tasktypes import TASK_TYPES, settings_class, task_settings, task_type
from bertwb.tasks.readers import FormatError
from bertwb.train import model_choice
from bertwb.train.device import Precision, choose_precision, model_shapes, resolve_device
from bertwb.workspace import writing_atomic

PREDICT_CHUNK = 2048  # examples featurised, predicted and written at a time
READING_KEYS = ("format", "text_column", "label_column", "token_column", "tag_column")  # how a file is read


class TaskPredictor:
    """A fine-tuned model directory with its tokenizer and task, answering examples in batches."""

    def __init__(self, model_dir: modeldir.ModelDir, settings: FinetuneTaskConfig, device: torch.device,
                 batch_size: int = 64, recorded: dict[str, Any] | None = None, config_key: str = "task",
                 **options: Any):
        """``options``: the task type's own keywords (`task_type`), such as a tag task's ``word_labels``."""
        self.task, self.name = task_type(settings, config_key, recorded, **options), config_key.rsplit(".", 1)[-1]
        self.source = model_dir
        self.tokenizer = modeldir.load_tokenizer(model_dir)
        self.model = fast.for_inference(modeldir.load_model(model_dir, device, kind=self.task.model_kind)[0], device,
                                        settings.cpu_fast_paths)
        self.label_names = model_dir.label_names
        self.device, self.batch_size = device, batch_size
        self.precision = choose_precision(settings.precision, device, *model_shapes(self.model))

    def read(self, path: Path | None = None, lines: list[tuple[int, str]] | None = None) -> list[Any]:
        """The examples of ``path`` (the task's format, labels optional) or of ``lines`` (stdin's, numbered)."""
        if path is None:
            return self.task.from_lines(lines or [])
        try:
            return self.task.read(path, labelled=False)
        except FormatError as exc:  # plain lines of text are what stdin is for
            raise FormatError(f"{exc} (for plain text, one input per line, give it on stdin: "
                              f"bertwb predict {self.name} < {path})") from None

    def stream(self, examples: list[Any]) -> Iterator[list[dict[str, Any]]]:
        """Output rows for ``examples``, in their order, `PREDICT_CHUNK` at a time.

        Each chunk is featurised, length-bucketed, predicted and handed on alone, so the features and
        outputs held at once are one chunk's, and output begins while the rest is still to do. Every row
        has the same keys: ``gold`` (the input's own label, None where an example has none) is in all of
        them when any example of the input has one, so a CSV header taken from the first row fits all.
        """
        with_gold = any(self.task.gold(example) is not None for example in examples)
        with ui.progress("predicting", total=len(examples), unit="examples") as bar:
            for start in range(0, len(examples), PREDICT_CHUNK):
                part = examples[start:start + PREDICT_CHUNK]
                rows = []
                for example, prediction in zip(part, self.predict(part, bar), strict=True):
                    row = self.task.row(example, prediction)
                    rows.append({**row, "gold": self.task.gold(example)} if with_gold else row)
                yield rows

    def predict(self, examples: list[Any], bar: Any = None) -> list[dict[str, Any]]:
        """One prediction per example, in order; ``bar`` (a `ui.progress`) advances by examples done."""
        features = self.task.featurize(examples, self.tokenizer, None)
        batches = Batches(TaskExamples(features), self.batch_size, 0, bucket_batches=10_000, drop_last=False)
        objective = objective_for(self.task, self.label_names)
        outputs = _predict_outputs(objective, self.model, batches, self.precision, self.device,
                                   _ExampleCounter(bar, len(examples), len(features)))
        return self.task.decode(examples, features, outputs, self.label_names)


class _ExampleCounter:
    """Advances a progress bar counted in examples while batches of features go by (a QA example can
    have several features, one per window of its context)."""

    def __init__(self, bar: Any, n_examples: int, n_features: int):
        self.bar, self.n_examples, self.n_features = bar, n_examples, max(n_features, 1)
        self.features = self.shown = 0

    def features_done(self, n: int) -> None:
        self.features += n
        examples = self.n_examples * self.features // self.n_features
        if self.bar is not None and examples > self.shown:
            self.bar.advance(examples - self.shown)
            self.shown = examples


@torch.no_grad()
def _predict_outputs(objective: TaskObjective, model: torch.nn.Module, batches: Batches, precision: Precision,
                     device: torch.device, counter: _ExampleCounter) -> dict[int, Any]:
    model.eval()
    outputs: dict[int, Any] = {}
    for index in range(batches.steps_per_epoch):
        for batch in batches.micro_batches(0, index):
            batch = batch.to(device)
            with precision.autocast():
                out = objective.forward(model, batch)
            outputs.update(zip(batch.features.tolist(), objective.task.outputs(out, batch), strict=True))
            counter.features_done(len(batch.features))
    return outputs


def open_predictor(cfg: Config, ws: Any, task: str, checkpoint: str | None, device: str,
                   batch_size: int, word_labels: bool = False) -> TaskPredictor:
    """``bertwb predict``'s model: the task's stage output, or ``checkpoint`` (any fine-tuned model directory,
    a relative path first against the config's folder, as `bertwb.train.model_choice.user_path` says).

    The directory's ``task.json``, when it has one, says how inputs become features, as in training.
    ``word_labels`` (``--words``) asks a tag task for each word's label on raw text too; other types have none.
    """
    if not checkpoint:
        task_settings(cfg, task)  # an unknown task is named first
    folder = model_choice.task_dir(cfg, ws, task, checkpoint)
    model_dir = modeldir.open_model_dir(folder, "--checkpoint" if checkpoint else None)
    settings, recorded = _prediction_settings(cfg, task, folder)
    if word_labels and settings.type != "tag":
        raise BertwbError(f"--words gives a tag task's labels word by word; {task} is a {settings.type} task")
    options = {"word_labels": True} if word_labels else {}
    return TaskPredictor(model_dir, settings, resolve_device(device), batch_size, recorded, f"finetune.tasks.{task}",
                         **options)


def _prediction_settings(cfg: Config, task: str, folder: Path) -> tuple[FinetuneTaskConfig, dict[str, Any]]:
    """The task's settings (the config's, with what the model directory's task.json says about featurising),
    and what training recorded about its data."""
    settings = cfg.finetune.tasks.get(task) or FinetuneTaskConfig()
    saved = read_task_file(folder)
    if settings.type and saved.get("type") and saved["type"] != settings.type:
        ui.warn(f"{folder} is a {saved['type']} model, but finetune.tasks.{task} is {settings.type}: predicting as "
                f"the model was trained ({saved['type']})")
    type_name = saved.get("type") or settings.type
    if type_name is not None and type_name not in TASK_TYPES:
        raise BertwbError(f"{folder / TASK_FILE}: task type {type_name!r} is not one this bertwb has "
                          f"({', '.join(TASK_TYPES)}); predict with the bertwb that trained it")
    cls = settings_class(type_name)  # the config's values where the type has the key, then the model's own
    known = {f.name for f in fields(cls)}
    # How to read the input (its format, its columns) is the user's to say of this file: what the config or
    # --set gives explicitly wins over what the training file was; featurising stays as training did.
    given = {key: value for key, value in asdict(settings).items()
             if key in READING_KEYS and cfg.origin(f"finetune.tasks.{task}.{key}").place is not None}
    settings = cls(**{k: v for k, v in {**asdict(settings), **saved, **given}.items() if k in known})
    if settings.type is None:
        raise BertwbError(f"{folder}: no task.json and no task {task!r} in finetune.tasks, so the task type is "
                          "unknown; add the task to the config")
    return settings, saved.get("recorded", {})


def write_rows(chunks: Iterator[list[dict[str, Any]]], fmt: str, handle: Any) -> int:
    """Write prediction rows to the text ``handle`` as each chunk comes: JSON lines, or CSV with nested
    values flattened (``probabilities.positive``) under a header taken from the first row. The number
    of rows written."""
    count, writer = 0, None
    for rows in chunks:
        for row in rows:
            if fmt == "jsonl":
                handle.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")  # a Parquet date as text
                continue
            flat = dict(_flat_items(row))
            if writer is None:
                writer = csv.DictWriter(handle, list(flat), lineterminator="\n")
                writer.writeheader()
            writer.writerow(flat)
        count += len(rows)
    return count


def _flat_items(row: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for name, value in row.items():
        if isinstance(value, dict):
            yield from _flat_items(value, f"{prefix}{name}.")
        else:
            listed = isinstance(value, list)
            yield prefix + name, json.dumps(value, ensure_ascii=False, default=str) if listed else value


def write_predictions(predictor: TaskPredictor, examples: list[Any], fmt: str, output: str | None, stdout: Any) -> int:
    """Predict ``examples`` into ``output`` (whole, via a temporary file; a link, device or pipe in place)
    or, without one, onto ``stdout`` as the rows come; the number of rows."""
    if not output:
        return write_rows(predictor.stream(examples), fmt, stdout)
    try:
        with writing_atomic(Path(output), in_place=True) as handle:
            return write_rows(predictor.stream(examples), fmt, handle)
    except OSError as exc:  # the input was read before: an error here is the output's
        raise cannot_write_output(output, exc) from None
