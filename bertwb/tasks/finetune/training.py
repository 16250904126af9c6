"""One task's run on the one trainer, and the model directory it leaves.

`train` reads the task's splits into features, loads the model it starts from with a new head, trains
it (resumable, every rank), scores the best (or last) weights on dev and test, and on rank 0 writes a
model directory that predicts, exports and loads in ``transformers`` by itself: weights, config.json,
the tokenizer, ``task.json`` (how inputs become features), ``metrics.json`` and ``training.json``.
Nothing is written before training ends; the stage commits the directory.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import safetensors.torch
import torch

from bertwb import fast, ui
from bertwb.artifacts import METRICS_FILE, RESULTS_FILE, TASK_FILE, write_json
from bertwb.config import Config, FeatureTaskConfig, FinetuneTaskConfig
from bertwb.data.batching import Batches
from bertwb.data.tokenizer import write_tokenizer_files
from bertwb.errors import BertwbError
from bertwb.model import modeldir
from bertwb.model.hf_names import hf_config_of
from bertwb.tasks.finetune.batches import TaskExamples
from bertwb.tasks.finetune.evaluation import score_split
from bertwb.tasks.finetune.features import Features
from bertwb.tasks.finetune.objectives import objective_for
from bertwb.tasks.finetune.tasktypes import TaskType, task_type
from bertwb.train import checkpoint
from bertwb.train.distributed import Dist
from bertwb.train.runs import checkpoint_path
from bertwb.train.trainer import BEST_DIR, Trainer



@dataclass
class FinetunePlan:
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


@dataclass
class _Data:
    """A task's splits as features and batches, and the label names its training set gives."""

    label_names: list[str] | None
    training: _Split
    dev: _Split | None
    test: _Split | None


def train(cfg: Config, plan: FinetunePlan, dist: Dist, out_dir: Path | None = None) -> dict[str, Any]:
    """Fine-tune the task from its starting model to the requested step; rank 0 writes ``out_dir``."""
    started = time.perf_counter()
    config_key = f"finetune.tasks.{plan.task}"
    settings = cfg.finetune.tasks[plan.task]
    task = task_type(settings, config_key)
    check_paths(cfg, plan.task)
    source = modeldir.open_model_dir(Path(plan.model_dir))
    tokenizer = modeldir.load_tokenizer(source, folder=Path(plan.tokenizer_dir))
    modeldir.check_length(source, settings.max_seq_length, str(cfg.origin(f"{config_key}.max_seq_length")))
    layers = _feature_layers(cfg, settings, config_key, source.config.num_layers)
    data = _read_data(cfg, task, settings, config_key, tokenizer, dist)
    trainer = _fit(plan, settings, task, source, data, dist, layers)
    final = _kept_weights(trainer, plan, dist)
    results = {name: score_split(trainer.objective, trainer.model, part.batches, part.examples, part.features,
                                 trainer.precision, dist)
               for name, part in (("dev", data.dev), ("test", data.test)) if part is not None}
    summary = {
        "task": plan.task, "type": settings.type, "labels": data.label_names,
        "train_examples": len(data.training.examples), "train_features": len(data.training.features),
        "dev_examples": len(data.dev.examples) if data.dev else 0,
        "steps_done": trainer.total_steps, "stopped_early_at": trainer.stopped_early_at,
        "steps_per_epoch": data.training.batches.steps_per_epoch,
        "best_step": trainer.best.get("step"), "weights": "best" if final.name == BEST_DIR else "last",
        "main_metric": task.main_metric, "main_value": results.get("dev", {}).get(task.main_metric),
        "started_from": str(source.path), "precision": trainer.precision.name,
        "pad_fraction": round(data.training.batches.padding_fraction(0), 4),
        **{f"{split_name}_{name}": value for split_name, metrics in results.items()  # per_type: dev_per_type.X.f1
           for name, value in metrics.items() if isinstance(value, (int, float, dict))},
        "seconds": round(time.perf_counter() - started, 3),
    }
    if out_dir is not None and dist.rank == 0:
        _write_model_dir(out_dir, plan, settings, task, trainer, final, tokenizer, source, data.label_names,
                         results, summary)
    return summary


def check_paths(cfg: Config, task: str) -> None:
    """One line naming the key when a task's train, dev or test file is missing or a folder, before
    anything is read (the readers name only the file)."""
    config_key = f"finetune.tasks.{task}"
    settings = cfg.finetune.tasks[task]
    for role in ("train", "dev", "test"):
        value = getattr(settings, role)
        path = cfg.resolve(value) if value else None
        if path is not None and not path.is_file():
            what = "is a folder, not a file" if path.is_dir() else "no such file"
            raise BertwbError(f"{config_key}.{role}: {path}: {what}; give the task's {role} file "
                              f"({'CSV, TSV, JSONL, Parquet, CoNLL or SQuAD JSON'})")


def _read_data(cfg: Config, task: TaskType, settings: FinetuneTaskConfig, config_key: str, tokenizer: Any,
               dist: Dist) -> _Data:
    """The train, dev and test splits as features and batches; the labels come from the train split."""
    if not settings.train:
        raise BertwbError(f"{config_key}.train is not set; give the task's training file")
    train_examples = task.read(cfg.resolve(settings.train))
    label_names = task.label_names(train_examples, cfg.resolve(settings.train))
    pad_multiple = 8 if dist.device.type == "cuda" else 1

    def split(path: str, drop_last: bool) -> _Split:
        examples = task.read(cfg.resolve(path)) if path != settings.train else train_examples
        task.check_labels(examples, label_names, cfg.resolve(path))
        features = task.featurize(examples, tokenizer, label_names)
        training = {"batch_tokens": settings.batch_tokens, "grad_accum": settings.grad_accum} if drop_last else {}
        batches = Batches(TaskExamples(features), settings.batch_size, settings.seed,
                          bucket_batches=settings.bucket_batches, world_size=dist.world_size, rank=dist.rank,
                          pad_multiple=pad_multiple, drop_last=drop_last,
                          origin=lambda name: cfg.origin(f"{config_key}.{name}"), **training)
        return _Split(examples, features, batches)

    training = split(settings.train, drop_last=True)
    if training.batches.steps_per_epoch == 0:
        raise BertwbError(f"{cfg.origin(f'{config_key}.batch_size')} {settings.batch_size} is more than the "
                          f"{len(training.features)} training features of {settings.train}; lower it")
    dev = split(settings.dev, drop_last=False) if settings.dev else None
    test = split(settings.test, drop_last=False) if settings.test else None
    return _Data(label_names, training, dev, test)


def _feature_layers(cfg: Config, settings: FinetuneTaskConfig, config_key: str, num_layers: int) -> tuple[int, ...]:
    """The hidden states a feature-based head reads (empty: the usual head), each one the model has, once."""
    layers = tuple(getattr(settings, "feature_layers", None) or ())
    wrong = [i for i in layers if not -(num_layers + 1) <= i <= num_layers]
    if wrong:
        raise BertwbError(f"{cfg.origin(f'{config_key}.feature_layers')} has layer {wrong[0]}, but the model it starts "
                          f"from has {num_layers} layers; give -{num_layers + 1} to {num_layers} (0 is the "
                          "embeddings, -1 the last layer)")
    if len({i % (num_layers + 1) for i in layers}) != len(layers):
        raise BertwbError(f"{cfg.origin(f'{config_key}.feature_layers')} {list(layers)} names a layer twice; name "
                          "each once")
    return layers


def _fit(plan: FinetunePlan, settings: FinetuneTaskConfig, task: TaskType, source: modeldir.ModelDir, data: _Data,
         dist: Dist, feature_layers: tuple[int, ...] = ()) -> Trainer:
    """The model ``source`` with a new head for the task (reading ``feature_layers`` when given, on a frozen
    encoder with ``freeze_encoder``), trained (or resumed) to the requested step."""
    torch.manual_seed(settings.seed)
    model, report = modeldir.load_model(source, kind=task.model_kind, label_names=data.label_names, convert=True,
                                        feature_layers=feature_layers)
    frozen = getattr(settings, "freeze_encoder", False)
    if frozen:
        model.freeze_encoder()
    if dist.rank == 0:
        new = f"; new {', '.join(report.initialised_heads)}" if report.initialised_heads else ""
        how = ", encoder frozen" if frozen else ""
        how += f", head on layers {', '.join(map(str, feature_layers))}" if feature_layers else ""
        ui.stage_line(f"finetune/{plan.task}", f"starting from {source.label} ({report.layout} layout{new}{how})")
    objective = objective_for(task, data.label_names, (data.dev.examples, data.dev.features) if data.dev else None,
                              fast=fast.choose(model, dist.device, settings.cpu_fast_paths))  # this task built it
    trainer = Trainer(settings, objective, model, data.training.batches, valid=data.dev.batches if data.dev else None,
                      dist=dist, run_dir=Path(plan.run_dir), name=f"finetune/{plan.task}",
                      state={"task": plan.task, "label_names": data.label_names, "config": asdict(settings),
                             **({"bertwb_feature_layers": list(feature_layers)} if feature_layers else {})},
                      keep_best=settings.keep_best and data.dev is not None,
                      patience=settings.patience if data.dev else 0)
    trainer.fit()
    return trainer


def _kept_weights(trainer: Trainer, plan: FinetunePlan, dist: Dist) -> Path:
    """The checkpoint whose weights the run keeps (the best, or the last), loaded into the trainer's model."""
    run_dir = Path(plan.run_dir)
    final = run_dir / BEST_DIR if trainer.best and trainer.keep_best else checkpoint_path(run_dir, trainer.done)
    if not (final / "model.safetensors").is_file():  # removed by hand: a crash's leftovers are repaired before
        raise BertwbError(f"{final / 'model.safetensors'} is missing, the weights this run kept; run "
                          f"`bertwb finetune {plan.task} --force` to train the task again")
    safetensors.torch.load_model(trainer.model, str(final / "model.safetensors"), device=str(dist.device))
    return final


def _write_model_dir(out_dir: Path, plan: FinetunePlan, settings: FinetuneTaskConfig, task: TaskType, trainer: Trainer,
                     final: Path, tokenizer: Any, source: modeldir.ModelDir, label_names: list[str] | None,
                     results: dict[str, Any], summary: dict[str, Any]) -> None:
    """The stage's model directory: the kept weights, their config and tokenizer, and what the run learnt."""
    run_dir = Path(plan.run_dir)
    checkpoint.link_weights(final, out_dir)
    (out_dir / "config.json").write_text(json.dumps(hf_config_of(trainer.model), indent=2) + "\n")
    write_tokenizer_files(tokenizer, out_dir, modeldir.max_length(source)[0])
    write_json(out_dir / TASK_FILE, {"task": plan.task, **featurizing_settings(settings), "recorded": task.recorded()})
    write_json(out_dir / RESULTS_FILE, {"task": plan.task, "type": settings.type, "labels": label_names,
                                        "main_metric": task.main_metric, **results})
    if (run_dir / METRICS_FILE).exists():
        (out_dir / METRICS_FILE).write_bytes((run_dir / METRICS_FILE).read_bytes())
    write_json(out_dir / "training.json", summary)


def featurizing_settings(settings: FinetuneTaskConfig) -> dict[str, Any]:
    """What predicting needs to know about a task besides its model: its type, the type's own options (how
    inputs become features and predictions) and the longest input. How the head was trained (frozen, on which
    layers) is the model's: its config.json says which layers."""
    shared = {f.name for f in dataclasses.fields(FeatureTaskConfig)}
    own = [f.name for f in dataclasses.fields(settings) if f.name not in shared]
    return {key: getattr(settings, key) for key in ("type", *own, "max_seq_length")}
