"""``vocab.language_sampling``: the vocabulary's training text reweighted per script, as multilingual BERT did.

Each sentence belongs to the script most of its letters are in. A script with share p of the letters is given
share q = p^S / sum(p^S), S = `SMOOTHING` (Devlin et al., multilingual BERT's README), by reading each of its
sentences (p_max / p)^(1 - S) times: the largest script once, smaller ones more, so no text is thrown away and
the trainer's counts follow q. A fractional repeat is one more read or none, by a hash of the sentence's place.
"""

from __future__ import annotations

import numpy as np

from bertwb.data.scripts import NAMES, script_ids

SMOOTHING = 0.7
_FIRST_SCRIPT = NAMES.index("Other")  # indices below it (Common, Inherited) are not letters of a script


def dominant_scripts(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """For each text, the index (into `NAMES`) of the script most of its letters are in (ties: the lower index;
    Common when it has none), and how many letters it has."""
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    ids = script_ids()[np.frombuffer("".join(texts).encode("utf-32-le"), dtype=np.uint32)].astype(np.int64)
    owner = np.repeat(np.arange(len(texts)), lengths)
    letters = ids >= _FIRST_SCRIPT
    table = np.bincount(owner[letters] * len(NAMES) + ids[letters], minlength=len(texts) * len(NAMES))
    table = table.reshape(len(texts), len(NAMES))
    return table.argmax(axis=1), table.sum(axis=1)


def repeats(letters_by_script: np.ndarray, smoothing: float = SMOOTHING) -> np.ndarray:
    """How many times to read a sentence of each script (a float ≥ 1 per `NAMES` index), given the letters each
    script has in the text; 1 for Common and for scripts absent from it."""
    result = np.ones(len(NAMES))
    present = letters_by_script > 0
    if present.any():
        shares = letters_by_script[present] / letters_by_script.sum()
        result[present] = (shares.max() / shares) ** (1 - smoothing)
    return result


def smoothed_shares(letters_by_script: np.ndarray, smoothing: float = SMOOTHING) -> dict[str, tuple[float, float]]:
    """Each present script's share of the letters before and after smoothing, largest first."""
    present = [i for i in np.argsort(-letters_by_script, kind="stable") if letters_by_script[i] > 0]
    before = letters_by_script[present] / max(letters_by_script.sum(), 1)
    after = before ** smoothing / (before ** smoothing).sum() if present else before
    return {NAMES[i]: (float(b), float(a)) for i, b, a in zip(present, before, after, strict=True)}
