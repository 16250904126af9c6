"""Pre-training pairs on disk: the format the pairs stage writes and everything else reads.

One folder per split of flat binary arrays (``ARRAYS``) plus ``meta.json`` and the vocabulary's masking
flags, which :func:`load_pairs` maps into memory (no copy, whatever the corpus size). With ``pretrain.phases``
the stage directory holds one such *pair set* per phase, named after it, and ``phases.json`` lists them in
training order (:func:`pair_sets`). Training's view of a split is :mod:`bertwb.data.pair_batches`. Nothing
here imports torch, so the pairs stage and `bertwb status` stay light.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertwb.artifacts import read_json, read_phases
from bertwb.data.masking import MaskingRules, rules_from_flags
from bertwb.errors import BertwbError

FORMAT = 1
SPLITS = ("train", "valid")
# name → dtype of every array file in a split folder (flat arrays plus offsets, like Arrow lists).
ARRAYS = {
    "input_ids": np.int32,  # all instances' tokens, [CLS] A [SEP] B [SEP], masks applied when static
    "offsets": np.int64,  # [n + 1]: instance i is input_ids[offsets[i]:offsets[i + 1]]
    "len_a": np.int16,
    "len_b": np.int16,
    "is_random_next": np.uint8,
    "dupe": np.int16,
    "masked_positions": np.int16,  # static masking only; empty for dynamic
    "masked_ids": np.int32,
    "masked_kinds": np.uint8,
    "mask_offsets": np.int64,  # [n + 1], like offsets, into the three masked_* arrays
}
FLAGS_FILE = "token_flags.npy"


@dataclass
class PairsData:
    """One split's instances as the stage wrote them, memory-mapped.

    Instance i is ``input_ids[offsets[i]:offsets[i + 1]]``; token type ids are 0 for its first
    ``len_a + 2`` positions and 1 after. With static masking ``input_ids`` already holds the masks and
    ``masked_*[mask_offsets[i]:mask_offsets[i + 1]]`` says where and what; with dynamic masking the
    masked arrays are empty and :meth:`masking_rules` says how the loader masks.
    """

    input_ids: np.ndarray
    offsets: np.ndarray
    len_a: np.ndarray
    len_b: np.ndarray
    is_random_next: np.ndarray
    dupe: np.ndarray
    masked_positions: np.ndarray
    masked_ids: np.ndarray
    masked_kinds: np.ndarray
    mask_offsets: np.ndarray
    meta: dict[str, Any]
    token_flags: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def static(self) -> bool:
        return self.meta["masking"] == "static"

    def instance(self, index: int) -> dict[str, np.ndarray]:
        """One instance as arrays: input_ids, token_type_ids, masked positions/ids/kinds, is_random_next."""
        start, end = int(self.offsets[index]), int(self.offsets[index + 1])
        token_type_ids = np.zeros(end - start, dtype=np.int8)
        token_type_ids[int(self.len_a[index]) + 2:] = 1
        m_start, m_end = int(self.mask_offsets[index]), int(self.mask_offsets[index + 1])
        return {"input_ids": np.asarray(self.input_ids[start:end]), "token_type_ids": token_type_ids,
                "masked_positions": np.asarray(self.masked_positions[m_start:m_end]),
                "masked_ids": np.asarray(self.masked_ids[m_start:m_end]),
                "masked_kinds": np.asarray(self.masked_kinds[m_start:m_end]),
                "is_random_next": bool(self.is_random_next[index])}

    def masking_rules(self) -> MaskingRules:
        """The masking rules the stage used (static) or the loader must use (dynamic)."""
        m = self.meta
        return rules_from_flags(self.token_flags, m["special_ids"]["[MASK]"], masked_lm_prob=m["masked_lm_prob"],
                                max_predictions_per_seq=m["max_predictions_per_seq"],
                                whole_word_mask=m["whole_word_mask"])


def load_pairs(stage_dir: str | Path, split: str) -> PairsData:
    """Open the ``split`` ("train" or "valid") arrays a pairs stage wrote to ``stage_dir``, memory-mapped."""
    stage_dir = Path(stage_dir)
    meta_path = stage_dir / "meta.json"
    if not meta_path.is_file():
        raise BertwbError(f"{stage_dir}: no pairs output (meta.json missing); run `bertwb pairs` first")
    meta = read_json(meta_path, "rebuild the pairs (`bertwb pairs --force`)", {"splits": dict})
    if split not in meta.get("splits", {}):
        raise BertwbError(f"pairs split {split!r} unknown; choose one of {', '.join(meta.get('splits', {}))}")
    counts = meta["splits"][split]["array_lengths"]
    arrays = {name: _map_array(stage_dir / split / f"{name}.bin", dtype, counts[name])
              for name, dtype in ARRAYS.items()}
    return PairsData(**arrays, meta=meta, token_flags=np.load(stage_dir / FLAGS_FILE))


def _map_array(path: Path, dtype: Any, length: int) -> np.ndarray:
    if length == 0:  # mmap cannot map an empty file
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(length,))


def pair_sets(stage_dir: str | Path) -> dict[str | None, Path]:
    """The pair sets of a pairs output, in training order: ``{None: stage_dir}`` for one set, else
    ``{phase: stage_dir/phase}`` in the order of ``pretrain.phases``."""
    stage_dir = Path(stage_dir)
    names = read_phases(stage_dir)
    if names is None:
        return {None: stage_dir}
    return {name: stage_dir / name for name in names}


def pair_set(stage_dir: str | Path, phase: str | None = None) -> Path:
    """The folder of ``phase``'s pairs (None: the last phase's, which evaluation uses)."""
    sets = pair_sets(stage_dir)
    if phase is None:
        return list(sets.values())[-1]
    if phase not in sets:
        raise BertwbError(f"{stage_dir} has no pairs for phase {phase!r} (it has: {', '.join(map(str, sets))}); "
                          "run `bertwb pairs`")
    return sets[phase]
