"""What one pre-training run trains: its folders, its phase, and the config as that phase sees it.

Rank 0 decides a `PretrainPlan` and sends it to every torchrun rank, so it is plain data; `phase_config`,
`longest_phase` and `phase_config_key` read ``pretrain.phases`` so that a phase's errors name the setting
that gave them. No torch: the stage module builds plans before training loads it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from bertwb.config import Config


@dataclass
class PretrainPlan:
    """What rank 0 tells every rank before training: where the run, the pairs and the vocabulary are,
    and, for one phase of a phased pre-training, which phase and the model it continues."""

    run_dir: str
    pairs_dir: str
    vocab_dir: str
    phase: str | None = None
    init_from: str | None = None  # the previous phase's model directory


def phase_config(cfg: Config, phase: str | None, init_from: str | None = None) -> Config:
    """``cfg`` as one phase trains with it: the phase's settings as ``pretrain``, its pairs settings as
    ``pairs``, and ``model.init_from`` the previous phase's model (the first phase keeps the config's)."""
    if phase is None:
        return cfg
    settings = {name: (training, pairs) for name, training, pairs in cfg.pretrain_phases()}
    training, pairs = settings[phase]
    model = dataclasses.replace(cfg.model, init_from=init_from) if init_from else cfg.model
    return dataclasses.replace(cfg, pretrain=training, pairs=pairs, model=model)


def longest_phase(cfg: Config) -> tuple[int, str]:
    """The longest instance of any phase, and its key: the phase's own max_seq_length, else pairs'."""
    length, name = max((pairs.max_seq_length, name or "") for name, _, pairs in cfg.pretrain_phases())
    own = name and cfg.pretrain.phases[name].max_seq_length is not None
    return length, f"pretrain.phases.{name}.max_seq_length" if own else "pairs.max_seq_length"


def phase_config_key(cfg: Config, phase: str | None, name: str) -> str:
    """Where a run's setting ``name`` is set: its phase's own, or (inherited, most likely) the pretrain section."""
    own = phase and getattr(cfg.pretrain.phases[phase], name) != getattr(cfg.pretrain, name)
    return f"pretrain.phases.{phase}.{name}" if own else f"pretrain.{name}"
