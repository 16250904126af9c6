"""Model directories: find one, read its weights in bertwb or Hugging Face layout, write one.

A *model directory* is any folder with BERT weights and the architecture beside them:

- a pretrain checkpoint (``.bertwb/pretrain-runs/<key>/checkpoints/step-N``: ``model.safetensors`` in
  bertwb names, the architecture in ``state.json``);
- the pretrain stage output (``.bertwb/pretrain``), an ``import-hf`` result: bertwb names plus a
  Hugging Face ``config.json``;
- a Hugging Face checkpoint or a ``bertwb export``: HF names, ``config.json``, weights in
  ``model.safetensors`` (or sharded with ``model.safetensors.index.json``) or, only through
  ``torch.load(weights_only=True)``, ``pytorch_model.bin``.

The layout of the weights is told from their names, so every command that takes a checkpoint takes
all of them. Its tokenizer is the directory's own ``tokenizer.json`` / ``vocab.txt`` when it has one,
else the workspace's vocab stage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import safetensors
import safetensors.torch
import torch
from tokenizers import Tokenizer

from bertwb import engine, ui
from bertwb.config import Config
from bertwb.errors import BertwbError
from bertwb.model import BertConfig, BertForPreTraining, config_from_hf_dict, from_hf_state_dict, hf_config_dict
from bertwb.workspace import Workspace

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
# Names only bertwb's state dict has; Hugging Face names never contain them.
_BERTWB_MARKERS = ("bert.layers.", "bert.embeddings.tokens.", "mlm_head.", "nsp_head.")


@dataclass
class ModelDir:
    """An opened model directory: where its weights are, its architecture, and its tokenizer."""

    path: Path
    weights: Path
    config: BertConfig
    tokenizer_dir: Path | None  # None: the workspace's vocab stage
    step: int | None = None  # pretrain step, for checkpoints and the stage output

    @property
    def label(self) -> str:
        return f"{self.path}" + (f" (step {self.step:,})" if self.step is not None else "")


@dataclass
class LoadReport:
    """What loading found besides the weights it used."""

    layout: str  # "bertwb" or "hf"
    initialised: list[str] = field(default_factory=list)  # HF names of tensors the source lacked
    dropped: list[str] = field(default_factory=list)  # source tensors with no place in BertForPreTraining

    @property
    def initialised_heads(self) -> list[str]:
        """The source's missing parts, by module: pooler, MLM head, NSP head, or parameter names."""
        groups = {"bert.pooler.": "pooler", "cls.predictions.": "MLM head", "cls.seq_relationship.": "NSP head"}
        named = []
        for name in self.initialised:
            label = next((label for prefix, label in groups.items() if name.startswith(prefix)), name)
            if label not in named:
                named.append(label)
        return named


def open_model_dir(path: Path) -> ModelDir:
    """Check that ``path`` holds weights and an architecture; raise a one-line error naming what is missing."""
    if not path.is_dir():
        raise BertwbError(f"{path}: no such model directory; pass a checkpoint, an export or a Hugging Face "
                          "model folder")
    weights = next((path / name for name in WEIGHT_FILES if (path / name).is_file()), None)
    if weights is None:
        raise BertwbError(f"{path}: no model.safetensors or pytorch_model.bin; is it a model directory?")
    step = None
    if (path / "config.json").is_file():
        config = config_from_hf_dict(_read_json(path / "config.json"))
        training = path / "training.json"
        if training.is_file():
            step = _read_json(training).get("steps_done")
    elif (path / "state.json").is_file():
        state = _read_json(path / "state.json")
        try:
            config = BertConfig(**state["model"])
        except (KeyError, TypeError) as exc:
            raise BertwbError(f"{path / 'state.json'}: no model architecture in it ({exc}); the checkpoint "
                              "is incomplete, use an older one") from None
        step = state.get("step")
    else:
        raise BertwbError(f"{path}: no config.json (or state.json) describing the model; copy the model's "
                          "config.json next to its weights")
    has_tokenizer = (path / "tokenizer.json").is_file() or (path / "vocab.txt").is_file()
    return ModelDir(path, weights, config, path if has_tokenizer else None, step)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BertwbError(f"{path}: unreadable JSON ({str(exc).splitlines()[0]}); restore or rewrite the file") \
            from None
    if not isinstance(data, dict):
        raise BertwbError(f"{path}: expected a JSON object")
    return data


def read_state_dict(weights: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a weights file (or sharded index) on CPU; a one-line error when it is unreadable."""
    try:
        if weights.name.endswith(".index.json"):
            shards = sorted(set(_read_json(weights).get("weight_map", {}).values()))
            if not shards:
                raise BertwbError(f"{weights}: no weight_map; the index is empty or not a safetensors index")
            state: dict[str, torch.Tensor] = {}
            for shard in shards:
                state.update(safetensors.torch.load_file(str(weights.parent / shard)))
            return state
        if weights.suffix == ".safetensors":
            return safetensors.torch.load_file(str(weights))
        # weights_only: a pickle that wants anything but tensors is refused, never executed
        loaded = torch.load(weights, map_location="cpu", weights_only=True)
    except BertwbError:
        raise
    except Exception as exc:  # noqa: BLE001 - safetensors, pickle and OS errors all mean "unreadable"
        reason = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise BertwbError(f"{weights}: unreadable weights ({reason}); the file is corrupt or not a checkpoint") \
            from None
    if isinstance(loaded, dict) and isinstance(loaded.get("state_dict"), dict):
        loaded = loaded["state_dict"]
    if not isinstance(loaded, dict) or not all(isinstance(t, torch.Tensor) for t in loaded.values()):
        raise BertwbError(f"{weights}: not a state dict of tensors")
    return loaded


def load_model(model_dir: ModelDir, device: torch.device | str = "cpu") -> tuple[BertForPreTraining, LoadReport]:
    """A ``BertForPreTraining`` with the directory's weights; parts the source lacks are initialised.

    bertwb-layout weights must be complete (a missing tensor means a damaged file); Hugging Face
    ones may lack heads (a ``BertModel`` has no MLM/NSP heads, a ``BertForMaskedLM`` no pooler or NSP).
    """
    state = read_state_dict(model_dir.weights)
    model = BertForPreTraining(model_dir.config)
    if any(name.startswith(_BERTWB_MARKERS) for name in state):
        report = LoadReport("bertwb")
        expected = model.state_dict()
        # one tensor under two names; safetensors' save_model keeps only one of them
        tied = state.get("bert.embeddings.tokens.weight", state.get("mlm_head.decoder.weight"))
        if tied is not None:
            state["bert.embeddings.tokens.weight"] = state["mlm_head.decoder.weight"] = tied
        missing = [name for name in expected if state.get(name) is None]
        unexpected = [name for name in state if name not in expected]
        if missing or unexpected:
            raise BertwbError(f"{model_dir.weights}: tensors do not match the model (missing {missing[:3]}, "
                              f"unexpected {unexpected[:3]}); the checkpoint is damaged or from another version")
        for name, tensor in state.items():
            if tuple(tensor.shape) != tuple(expected[name].shape):
                raise BertwbError(f"{model_dir.weights}: tensor {name} has shape {tuple(tensor.shape)}, the "
                                  f"config needs {tuple(expected[name].shape)}; config and weights disagree")
    else:
        try:
            state, missing, unexpected = from_hf_state_dict(state, model_dir.config)
        except BertwbError as exc:
            raise BertwbError(f"{model_dir.path}: {exc}") from None
        if not state:
            raise BertwbError(f"{model_dir.weights}: no BERT tensor in it; is it a BERT checkpoint?")
        report = LoadReport("hf", initialised=missing, dropped=unexpected)
        backbone = [name for name in missing if name.startswith("bert.") and not name.startswith("bert.pooler.")]
        if backbone:
            raise BertwbError(f"{model_dir.weights}: the encoder lacks {backbone[0]} (+{len(backbone) - 1} more); "
                              "the checkpoint is incomplete")
    model.load_state_dict(state, strict=False)  # absent heads keep their BERT initialisation
    return model.to(device), report


def load_tokenizer(model_dir: ModelDir, ws: Workspace | None) -> Tokenizer:
    """The directory's own tokenizer, else the workspace's vocab stage; special tokens always whole."""
    from bertwb.vocab import SPECIAL_TOKENS, add_bert_template, build_tokenizer  # noqa: PLC0415 - pyarrow/duckdb only when needed

    folder = model_dir.tokenizer_dir
    if folder is None:
        if ws is None:
            raise BertwbError(f"{model_dir.path}: no tokenizer.json or vocab.txt beside the model")
        folder = engine.stage_path(ws, "vocab")
    if (folder / "tokenizer.json").is_file():
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    else:
        lines = (folder / "vocab.txt").read_text(encoding="utf-8").splitlines()
        lowercase = _read_json(folder / "tokenizer_config.json").get("do_lower_case", True) \
            if (folder / "tokenizer_config.json").is_file() else True
        tokenizer = build_tokenizer({token: i for i, token in enumerate(lines)}, lowercase)
    tokenizer.add_special_tokens([t for t in SPECIAL_TOKENS if tokenizer.token_to_id(t) is not None])
    if tokenizer.post_processor is None:
        add_bert_template(tokenizer)
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if size != model_dir.config.vocab_size:
        raise BertwbError(f"{folder}: the tokenizer has {size:,} tokens but the model {model_dir.config.vocab_size:,}; "
                          "they do not belong together")
    return tokenizer


def check_vocab_matches(model_dir: ModelDir, vocab_dir: Path) -> None:
    """The model must speak the workspace's vocabulary (``vocab_dir``: its vocab stage; pairs are its ids)."""
    ours = (vocab_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    if model_dir.config.vocab_size != len(ours):
        raise BertwbError(f"{model_dir.path}: the model has {model_dir.config.vocab_size:,} tokens, the workspace "
                          f"vocabulary {len(ours):,}; set vocab.from_file to the model's vocab.txt and rerun")
    if model_dir.tokenizer_dir is not None and (model_dir.tokenizer_dir / "vocab.txt").is_file():
        theirs = (model_dir.tokenizer_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
        if theirs != ours:
            first = next(i for i, (a, b) in enumerate(zip(theirs, ours, strict=False)) if a != b)
            raise BertwbError(f"{model_dir.path}: its vocab.txt differs from the workspace's at id {first} "
                              f"({theirs[first]!r} vs {ours[first]!r}); set vocab.from_file to "
                              f"{model_dir.tokenizer_dir / 'vocab.txt'} and rerun")


# --- which checkpoint ----------------------------------------------------------------------------------

def pretrain_run_dir(cfg: Config, ws: Workspace) -> Path:
    """The run directory the current config's pretrain stage trains in (it may not exist yet)."""
    from bertwb.pretrain import RUNS_DIR  # noqa: PLC0415

    spec = engine.STAGES["pretrain"]
    key, _ = engine.stage_key(spec, cfg, ws, spec.module().fingerprint_inputs(cfg))
    return ws.root / RUNS_DIR / key[:16]


def resolve_checkpoint(cfg: Config, ws: Workspace, choice: str | None, quiet: bool = False) -> ModelDir:
    """``choice``: None or "latest" (newest checkpoint of the current run, else the pretrain output),
    a step number of the current run, or a path to any model directory."""
    from bertwb.pretrain import list_checkpoints  # noqa: PLC0415

    choice = (choice or "latest").strip()
    if choice == "latest" or choice.isdigit():
        run_dir = pretrain_run_dir(cfg, ws)
        checkpoints = list_checkpoints(run_dir)
        if choice.isdigit():
            wanted = [c for c in checkpoints if c.name.endswith(f"{int(choice):08d}")]
            if not wanted:
                have = ", ".join(str(int(c.name.split("-")[-1])) for c in checkpoints) or "none"
                raise BertwbError(f"no checkpoint at step {int(choice)} in {run_dir / 'checkpoints'} "
                                  f"(kept: {have}); pass one of those or a directory")
            return open_model_dir(wanted[0])
        if checkpoints:
            return open_model_dir(checkpoints[-1])
        stage = ws.stage_dir("pretrain")
        if ws.read_manifest("pretrain") and (stage / "model.safetensors").is_file():
            if not quiet:
                ui.warn(f"no checkpoint of the current pretrain settings; using the last trained model in {stage}")
            return open_model_dir(stage)
        others = sorted(run_dir.parent.glob("*/checkpoints/*"))
        hint = (f"; checkpoints of other settings exist, e.g. {others[-1]}, usable with --checkpoint"
                if others else "")
        raise BertwbError("no checkpoint of the current settings: run `bertwb pretrain` first, or pass "
                          "--checkpoint DIR (a checkpoint, an export or a Hugging Face model folder)" + hint)
    path = cfg.resolve(choice) if not Path(choice).is_absolute() else Path(choice)
    if not path.exists() and Path(choice).exists():
        path = Path(choice).resolve()  # relative to where the command runs, as shells expect
    return open_model_dir(path)


def fingerprint(model_dir: ModelDir) -> dict[str, Any]:
    """Identity of a model's weights for a stage key: path, size and modification time."""
    stat = model_dir.weights.stat()
    return {"path": str(model_dir.weights), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


# --- writing ---------------------------------------------------------------------------------------------

def save_model_dir(model: BertForPreTraining, out: Path, extra: dict[str, Any] | None = None) -> None:
    """``model.safetensors`` (bertwb names, the tied decoder once) and a Hugging Face ``config.json``."""
    out.mkdir(parents=True, exist_ok=True)
    safetensors.torch.save_model(model, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps({**hf_config_dict(model.config), **(extra or {})}, indent=2) + "\n")
