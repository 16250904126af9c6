"""The model a pre-training run starts from, and the words its summary uses for it.

A new model of ``model.preset`` (with the sizes and dropouts the config overrides), or the ``model.init_from``
model with its own sizes and our dropouts, its MLM and NSP heads made new where it has none (a fine-tuned
model gives its encoder). The run, the budget recipe and benchmarks build models here, so a preset means
the same model wherever it is named.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

from bertwb import ui
from bertwb.artifacts import IMPORT_FILE
from bertwb.config import Config
from bertwb.model import modeldir
from bertwb.model.bert import BertConfig, BertForPreTraining
from bertwb.train.model_choice import user_path


def model_source(cfg: Config) -> Callable[[BertConfig], dict[str, str]]:
    """The summary's words for the model: its shape, and where it came from; ``preset`` only where the preset
    made it (a model.init_from model keeps its own sizes, and "preset tiny" would misname an imported MiniLM)."""
    if not cfg.model.init_from:
        return lambda config: {"preset": cfg.model.preset, "model": f"{config.shape} (preset {cfg.model.preset})"}
    imported = (user_path(cfg, cfg.model.init_from) / IMPORT_FILE).is_file()
    return lambda config: {"model": f"{config.shape} ({'imported' if imported else 'from model.init_from'})"}


def build_model(cfg: Config, meta: dict[str, Any], vocab_dir: Path, announce: bool = True,
                positions: int = 0, length_key: str = "pairs.max_seq_length") -> BertForPreTraining:
    """A new model of the configured size (with at least ``positions`` positions, for the longest phase),
    or the ``model.init_from`` model (its own sizes, our dropouts), which must have them (``length_key``:
    the setting that asks for that many)."""
    if not cfg.model.init_from:
        return BertForPreTraining(build_model_config(cfg, meta["vocab_size"], max(meta["max_seq_length"], positions)))
    source = modeldir.open_model_dir(user_path(cfg, cfg.model.init_from), "model.init_from")
    modeldir.check_vocab_matches(source, vocab_dir)
    modeldir.check_length(source, max(meta["max_seq_length"], positions), length_key)
    dropouts = {name: getattr(cfg.model, name) for name in ("hidden_dropout", "attention_dropout")
                if getattr(cfg.model, name) is not None}
    source = dataclasses.replace(source, config=dataclasses.replace(source.config, **dropouts))
    # a fine-tuned model gives its encoder: its task head is left out, the MLM and NSP heads start anew
    model, report = modeldir.load_model(source, kind="pretraining", convert=True)
    if announce:
        notes = [f"{report.layout} layout"]
        if report.converted_from:
            notes.append(f"{source.description}: its head left out")
        if report.initialised_heads:
            notes.append(f"new {', '.join(report.initialised_heads)}")
        ui.stage_line("pretrain", f"initialised from {source.path} ({'; '.join(notes)})")
    return model


def build_model_config(cfg: Config, vocab_size: int, max_seq_length: int) -> BertConfig:
    """The preset named in ``model.preset`` with the sizes and dropouts the config overrides."""
    m = cfg.model
    overrides = {name: getattr(m, name) for name in ("num_layers", "hidden_size", "num_heads", "intermediate_size",
                                                      "hidden_dropout", "attention_dropout")
                 if getattr(m, name) is not None}
    if m.hidden_size is not None and m.intermediate_size is None:
        overrides["intermediate_size"] = 4 * m.hidden_size
    return BertConfig.from_preset(m.preset, vocab_size, max_position_embeddings=max(512, max_seq_length),
                                  **overrides)
