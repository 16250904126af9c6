"""Which model ``bertwb embed --model M`` reads, and its identity: ``pretrain`` (the workspace's current
checkpoint), a fine-tuning task's name, or a folder (an import, an export, a Hugging Face or
sentence-transformers folder, whose transformer may sit in a subfolder). No torch: ``bertwb status``
re-resolves an embedding table's model to say whether the table is still what that model gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertwb import keys
from bertwb.artifacts import weights_file, weights_identity
from bertwb.config import Config
from bertwb.current import current_run_dir
from bertwb.embed.pooling import Pooling
from bertwb.errors import BertwbError
from bertwb.train import model_choice
from bertwb.workspace import Workspace


@dataclass(frozen=True)
class ModelSource:
    """A model choice resolved: the folder of its weights and the pooling its own files describe."""

    choice: str  # as recorded: "pretrain", a task's name, or a folder's absolute path
    folder: Path  # the model directory (weights and config.json or state.json)
    pooling: Pooling | None  # None: the folder has no sentence-transformers files

    def identity(self, ws: Workspace) -> dict[str, Any]:
        """What the vectors depend on besides the settings: the weights' and tokenizer's files, by path,
        size and modification time (as a stage keys a checkpoint); the workspace's own by their path in it."""
        weights = weights_file(self.folder)
        if weights is None:
            raise BertwbError(f"{self.folder}: no model.safetensors or pytorch_model.bin; is it a model directory?")
        own = next((self.folder / name for name in ("tokenizer.json", "vocab.txt") if (self.folder / name).is_file()),
                   None)
        tokenizer = own or model_choice.tokenizer_dir(ws, None) / "tokenizer.json"
        return {"weights": _portable(weights_identity(weights.resolve()), ws),
                "tokenizer": _portable(weights_identity(tokenizer.resolve()), ws) if tokenizer.is_file()
                else keys.portable_path(tokenizer, ws)}


def _portable(identity: dict[str, Any], ws: Workspace) -> dict[str, Any]:
    return {**identity, "path": keys.portable_path(identity["path"], ws)}


def find_model(cfg: Config, ws: Workspace, choice: str) -> ModelSource:
    """The model ``choice`` names; one line naming what it could have been when it names none."""
    choice = choice.strip()
    if choice == "pretrain":
        try:
            folder = model_choice.checkpoint_dir(cfg, ws, None, lambda: current_run_dir(cfg, ws, "pretrain"),
                                                 quiet=True)
        except BertwbError:
            raise BertwbError(f"--model pretrain: no pre-trained model of the current settings in {ws.root}; run "
                              "`bertwb pretrain`, or give --model a fine-tuning task or a model folder") from None
        return ModelSource("pretrain", folder, None)
    if choice in cfg.finetune.tasks:
        return ModelSource(choice, model_choice.task_dir(cfg, ws, choice, None), None)
    root = model_choice.user_path(cfg, choice)
    if not root.is_dir():
        tasks = ", ".join(cfg.finetune.tasks) or "none in the config"
        what = "a file, not a model folder" if root.exists() else "no such folder"
        raise BertwbError(f"--model {choice}: {what}; give pretrain, a fine-tuning task ({tasks}) or a model "
                          "folder (a checkpoint, an import, an export, a Hugging Face model)")
    pooling = Pooling.read(root)
    folder = root / pooling.transformer_path if pooling is not None else root
    return ModelSource(str(root), folder, pooling)
