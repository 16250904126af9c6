"""How token vectors become one vector per text, as data: `Pooling` read from and written to the
sentence-transformers files (``modules.json``, ``1_Pooling/config.json``, ``2_Normalize``), and the
`EmbedSettings` one ``bertwb embed`` resolves from its options and the model's own pooling.

A model without those files pools by mean over the attention mask, unnormalised. No torch here:
``bertwb status`` keys embedding tables with these settings.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bertwb.artifacts import write_json
from bertwb.errors import BertwbError

MODES = ("cls", "max", "mean", "mean_sqrt_len")  # sentence-transformers' order when several are concatenated
# the boolean keys of 1_Pooling/config.json as sentence-transformers before v6 wrote them, in MODES' order
_LEGACY_KEYS = {"cls": "pooling_mode_cls_token", "max": "pooling_mode_max_tokens",
                "mean": "pooling_mode_mean_tokens", "mean_sqrt_len": "pooling_mode_mean_sqrt_len_tokens"}
_ST_MODE_NAMES = {"cls": "cls", "max": "max", "mean": "mean", "mean_sqrt_len_tokens": "mean_sqrt_len"}
_UNSUPPORTED = {"pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
MODULES_FILE = "modules.json"
_ST_TYPES = {"transformer": "sentence_transformers.models.Transformer",
             "pooling": "sentence_transformers.models.Pooling", "normalize": "sentence_transformers.models.Normalize"}


@dataclass(frozen=True)
class Pooling:
    """A model's own pooling: the modes concatenated, whether vectors are scaled to length 1, the longest input
    (``max_seq_length``, None when unsaid) and the subfolder holding the transformer's weights ("" = here)."""

    modes: tuple[str, ...] = ("mean",)
    normalize: bool = False
    max_seq_length: int | None = None
    transformer_path: str = ""

    @classmethod
    def read(cls, folder: Path) -> Pooling | None:
        """The pooling ``folder``'s sentence-transformers files describe; None when it has no ``modules.json``."""
        modules_file = folder / MODULES_FILE
        if not modules_file.is_file():
            return None
        modules = _json(modules_file)
        if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
            raise BertwbError(f"{modules_file}: expected a list of modules; restore the model's modules.json")
        found: dict[str, str] = {}
        for module in modules:
            kind = str(module.get("type", "")).rsplit(".", 1)[-1].lower()
            if kind not in _ST_TYPES:
                raise BertwbError(f"{modules_file}: module {module.get('type')!r} is not one bertwb computes "
                                  "(Transformer, Pooling, Normalize); its vectors would differ, so use "
                                  "sentence-transformers for this model")
            found[kind] = str(module.get("path") or "")
        if "transformer" not in found:
            raise BertwbError(f"{modules_file}: no Transformer module; is it a sentence-transformers model?")
        modes = _read_modes(folder / found["pooling"] / "config.json") if "pooling" in found else ("mean",)
        side = folder / found["transformer"] / "sentence_bert_config.json"
        length = _json(side).get("max_seq_length") if side.is_file() else None
        return cls(modes, "normalize" in found, length if isinstance(length, int) else None, found["transformer"])

    def write(self, folder: Path, hidden_size: int) -> list[str]:
        """Write this pooling as sentence-transformers files into ``folder`` (the weights beside them); the
        names written. 1_Pooling/config.json takes the boolean keys every version reads where they say it."""
        modules = [{"idx": 0, "name": "0", "path": "", "type": _ST_TYPES["transformer"]},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": _ST_TYPES["pooling"]}]
        if tuple(m for m in MODES if m in self.modes) == self.modes:
            config: dict[str, Any] = {"word_embedding_dimension": hidden_size,
                                      **{key: mode in self.modes for mode, key in _LEGACY_KEYS.items()}}
        else:  # an order the boolean keys cannot say
            names = {ours: theirs for theirs, ours in _ST_MODE_NAMES.items()}
            config = {"embedding_dimension": hidden_size, "pooling_mode": [names[m] for m in self.modes]}
        (folder / "1_Pooling").mkdir(parents=True, exist_ok=True)
        write_json(folder / "1_Pooling" / "config.json", config)
        written = [MODULES_FILE, "1_Pooling", "sentence_bert_config.json"]
        if self.normalize:
            modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": _ST_TYPES["normalize"]})
            (folder / "2_Normalize").mkdir(exist_ok=True)
            write_json(folder / "2_Normalize" / "config.json", {})
            written.insert(2, "2_Normalize")
        (folder / MODULES_FILE).write_text(json.dumps(modules, indent=2) + "\n", encoding="utf-8")
        write_json(folder / "sentence_bert_config.json",
                   {"max_seq_length": self.max_seq_length or 512, "do_lower_case": False})
        return written


def _read_modes(config_file: Path) -> tuple[str, ...]:
    """The pooling modes of a 1_Pooling/config.json, in either version's keys."""
    config = _json(config_file) if config_file.is_file() else {}
    named = config.get("pooling_mode")
    if named is not None:
        names = [named] if isinstance(named, str) else list(named)
        wrong = [n for n in names if n not in _ST_MODE_NAMES]
        if wrong:
            raise BertwbError(f"{config_file}: pooling mode {wrong[0]!r} is not one bertwb computes "
                              f"({', '.join(_ST_MODE_NAMES)}); use sentence-transformers for this model")
        return tuple(_ST_MODE_NAMES[n] for n in names)
    unsupported = [name for key, name in _UNSUPPORTED.items() if config.get(key)]
    if unsupported:
        raise BertwbError(f"{config_file}: pooling mode {unsupported[0]!r} is not one bertwb computes "
                          f"({', '.join(MODES)}); use sentence-transformers for this model")
    return tuple(mode for mode, key in _LEGACY_KEYS.items() if config.get(key)) or ("mean",)


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BertwbError(f"{path}: unreadable JSON ({str(exc).splitlines()[0]}); restore the file") from None


@dataclass(frozen=True)
class EmbedSettings:
    """Everything that decides a vector besides the model and the text; what an embedding table is keyed on."""

    pooling: tuple[str, ...]  # modes of MODES, concatenated in this order
    layers: tuple[int, ...]  # hidden states by index (-1 the last layer, 0 the embeddings), as transformers counts
    combine: str  # concat | mean: how several layers' token vectors become one before pooling
    normalize: bool  # scaled to length 1 after pooling (and after averaging windows)
    max_length: int  # tokens per window, [CLS] and [SEP] included; longer texts are split
    dtype: str  # float32 | float16, as stored
    tokens: str | None = None  # pieces | words: a vector per word piece (or per word's first piece), unpooled
    precision: str = "fp32"  # fp32 | bf16 (autocast), as resolved for the device that computed them

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "pooling": list(self.pooling), "layers": list(self.layers)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EmbedSettings:
        return cls(**{**data, "pooling": tuple(data["pooling"]), "layers": tuple(data["layers"])})


def resolve(own: Pooling | None, pooling: str, layers: str, combine: str, normalize: bool | None,
            max_length: int | None, dtype: str, num_layers: int, limit: int,
            tokens: str | None = None, precision: str = "fp32") -> EmbedSettings:
    """The settings the options ask for, ``auto`` and unset ones taken from the model's ``own`` pooling
    (else mean, unnormalised, its whole ``limit``). ``num_layers`` and ``limit`` bound the layers and length.

    Token vectors (``tokens``) are not pooled, and normalised only when asked: a model's own normalisation is
    of its text vectors, as sentence-transformers leaves its token embeddings unnormalised."""
    own = own or Pooling()
    if tokens is not None and pooling != "auto":
        raise BertwbError(f"--pooling {pooling} with --tokens: token vectors are not pooled; leave --pooling out, "
                          "or --tokens out for one vector per text")
    modes = () if tokens is not None else own.modes if pooling == "auto" else (pooling,)
    chosen = _layers(layers, num_layers)
    length = max_length or min(own.max_seq_length or limit, limit)
    if length > limit:
        raise BertwbError(f"--max-length {length} is more than the {limit} tokens the model takes; lower it")
    if length < 3:
        raise BertwbError(f"--max-length {length} leaves no room for a token beside [CLS] and [SEP]; use 3 or more")
    if normalize is None:
        normalize = own.normalize and tokens is None
    return EmbedSettings(modes, chosen, combine, normalize, length, dtype, tokens, precision)


def _layers(text: str, num_layers: int) -> tuple[int, ...]:
    """``-1`` or ``-4,-3,-2,-1``: hidden-state indices, each within the model's ``num_layers`` + 1 states."""
    try:
        chosen = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise BertwbError(f"--layers {text!r}: give layer numbers separated by commas, e.g. -1 or -4,-3,-2,-1") \
            from None
    wrong = [i for i in chosen if not -(num_layers + 1) <= i <= num_layers]
    if wrong:
        raise BertwbError(f"--layers {wrong[0]}: the model has {num_layers} layers, so give -{num_layers + 1} to "
                          f"{num_layers} (0 is the embeddings, -1 the last layer)")
    if len(set(i % (num_layers + 1) for i in chosen)) != len(chosen):
        raise BertwbError(f"--layers {text}: a layer is named twice; name each once")
    return chosen
