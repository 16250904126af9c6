"""Masked-LM masking: the one function that both the pairs stage (static masks) and the training loader
(dynamic masks, new every epoch) call, so the two can never drift apart.

The rules are the original ``create_masked_lm_predictions``': ``min(max_predictions_per_seq, max(1,
round(len(tokens) * masked_lm_prob)))`` positions ([CLS] and [SEP] counted, never chosen; with whole-word
masking a word that would overflow is skipped), each 80% ``[MASK]``, 10% unchanged, 10% a random non-special
token; the departures are in docs/data.md, "Pre-training pairs". Vectorised over flat ids plus offsets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KIND_MASK, KIND_RANDOM, KIND_KEEP = 0, 1, 2
KIND_NAMES = {KIND_MASK: "mask", KIND_RANDOM: "random", KIND_KEEP: "keep"}
MASK_PROB, KEEP_PROB = 0.8, 0.1  # the rest (0.1) becomes a random token

# Bits of the per-token flag array that MaskingRules is built from (saved beside the pairs shards).
FLAG_MASKABLE, FLAG_CONTINUATION, FLAG_REPLACEMENT = 1, 2, 4


@dataclass(frozen=True)
class MaskingRules:
    """Settings plus per-vocabulary lookup tables; build with :func:`rules_from_vocab`."""

    masked_lm_prob: float
    max_predictions_per_seq: int
    whole_word_mask: bool
    mask_id: int
    maskable: np.ndarray  # bool[vocab]: may be chosen (not [CLS]/[SEP]/[PAD])
    continuation: np.ndarray  # bool[vocab]: a ## piece that continues the word before it
    replacement_ids: np.ndarray  # int32[k]: the non-special tokens a "random" replacement draws from

    @property
    def token_flags(self) -> np.ndarray:
        """The lookup tables packed into one uint8 per token (FLAG_* bits), for saving."""
        flags = self.maskable.astype(np.uint8) * FLAG_MASKABLE
        flags |= self.continuation.astype(np.uint8) * FLAG_CONTINUATION
        flags[self.replacement_ids] |= FLAG_REPLACEMENT
        return flags


def rules_from_vocab(tokens: list[str], is_special: list[bool], *, masked_lm_prob: float,
                     max_predictions_per_seq: int, whole_word_mask: bool) -> MaskingRules:
    """Rules for a vocabulary given as token strings by id and the vocab table's ``is_special``."""
    flags = np.zeros(len(tokens), dtype=np.uint8)
    for token_id, (token, special) in enumerate(zip(tokens, is_special, strict=True)):
        if token not in ("[CLS]", "[SEP]", "[PAD]"):
            flags[token_id] |= FLAG_MASKABLE
        if token.startswith("##"):
            flags[token_id] |= FLAG_CONTINUATION
        if not special:
            flags[token_id] |= FLAG_REPLACEMENT
    return rules_from_flags(flags, tokens.index("[MASK]"), masked_lm_prob=masked_lm_prob,
                            max_predictions_per_seq=max_predictions_per_seq, whole_word_mask=whole_word_mask)


def rules_from_flags(flags: np.ndarray, mask_id: int, *, masked_lm_prob: float, max_predictions_per_seq: int,
                     whole_word_mask: bool) -> MaskingRules:
    """Rules from a saved FLAG_* array (see :attr:`MaskingRules.token_flags`)."""
    flags = np.asarray(flags, dtype=np.uint8)
    return MaskingRules(masked_lm_prob=float(masked_lm_prob), max_predictions_per_seq=int(max_predictions_per_seq),
                        whole_word_mask=bool(whole_word_mask), mask_id=int(mask_id),
                        maskable=(flags & FLAG_MASKABLE) > 0, continuation=(flags & FLAG_CONTINUATION) > 0,
                        replacement_ids=np.flatnonzero(flags & FLAG_REPLACEMENT).astype(np.int32))


@dataclass
class MaskedBatch:
    """The result of masking a batch; positions are within each instance and sorted."""

    input_ids: np.ndarray  # int32, same layout as the input, masks applied
    masked_positions: np.ndarray  # int16, flat over the batch
    masked_ids: np.ndarray  # int32, the original ids at those positions
    masked_kinds: np.ndarray  # uint8, KIND_MASK / KIND_RANDOM / KIND_KEEP
    mask_offsets: np.ndarray  # int64[n + 1]: instance i owns masked_*[mask_offsets[i]:mask_offsets[i + 1]]


def num_to_predict(lengths: np.ndarray, rules: MaskingRules) -> np.ndarray:
    """How many positions each instance of these lengths (specials included) should mask."""
    wanted = np.round(np.asarray(lengths, dtype=np.float64) * rules.masked_lm_prob).astype(np.int64)
    return np.minimum(rules.max_predictions_per_seq, np.maximum(1, wanted))


def mask_batch(input_ids: np.ndarray, offsets: np.ndarray, rules: MaskingRules,
               rng: np.random.Generator) -> MaskedBatch:
    """Mask every instance of a flat batch (instance i is ``input_ids[offsets[i]:offsets[i + 1]]``).

    Deterministic for a given ``rng`` state; ``input_ids`` is not modified.
    """
    input_ids = np.asarray(input_ids, dtype=np.int32)
    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    n_rows = len(lengths)
    if n_rows == 0:
        return MaskedBatch(input_ids.copy(), np.zeros(0, np.int16), np.zeros(0, np.int32), np.zeros(0, np.uint8),
                           np.zeros(1, np.int64))
    width = int(lengths.max())
    # A 2-D [instance, position] view turns "choose n of this row" into one row-wise (partial) sort.
    inside = np.arange(width) < lengths[:, None]
    ids2d = np.zeros((n_rows, width), dtype=np.int32)
    ids2d[inside] = input_ids[offsets[0]:offsets[-1]]
    candidate = inside & rules.maskable[ids2d]
    budget = num_to_predict(lengths, rules)
    keys = rng.random((n_rows, width), dtype=np.float32)
    if rules.whole_word_mask:
        chosen = _choose_whole_words(ids2d, candidate, keys, budget, rules)
    else:
        chosen = _choose_positions(candidate, keys, budget)

    rows, positions = np.nonzero(chosen)  # row-major, so positions come out sorted per instance
    flat_index = offsets[rows] + positions
    masked_ids = input_ids[flat_index]
    draw = rng.random(len(flat_index))
    kinds = np.full(len(flat_index), KIND_RANDOM, dtype=np.uint8)
    kinds[draw < MASK_PROB + KEEP_PROB] = KIND_KEEP
    kinds[draw < MASK_PROB] = KIND_MASK
    output = input_ids.copy()
    output[flat_index[kinds == KIND_MASK]] = rules.mask_id
    random_at = flat_index[kinds == KIND_RANDOM]
    output[random_at] = rules.replacement_ids[rng.integers(0, len(rules.replacement_ids), len(random_at))]
    mask_offsets = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_rows), out=mask_offsets[1:])
    return MaskedBatch(output, positions.astype(np.int16), masked_ids, kinds, mask_offsets)


def mask_instance(input_ids: np.ndarray, rules: MaskingRules, rng: np.random.Generator) -> MaskedBatch:
    """Mask one unpadded instance (a batch of one)."""
    input_ids = np.asarray(input_ids, dtype=np.int32)
    return mask_batch(input_ids, np.array([0, len(input_ids)]), rules, rng)


def _choose_positions(candidate: np.ndarray, keys: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """Each row's ``budget`` candidates with the smallest keys: a uniform draw without replacement.

    A partial sort (argpartition) to the largest budget, then a sort of those few columns only.
    """
    n_rows, width = candidate.shape
    keys = np.where(candidate, keys, np.float32(2.0))  # non-candidates sort last
    most = int(min(budget.max(), width))
    smallest = np.argpartition(keys, most - 1, axis=1)[:, :most] if most < width else \
        np.broadcast_to(np.arange(width), (n_rows, width))
    ranked = np.take_along_axis(smallest, np.argsort(np.take_along_axis(keys, smallest, axis=1), axis=1), axis=1)
    take = (np.arange(most) < budget[:, None]) & np.take_along_axis(candidate, ranked, axis=1)
    chosen = np.zeros((n_rows, width), dtype=bool)
    chosen[np.nonzero(take)[0], ranked[take]] = True
    return chosen


def _choose_whole_words(ids2d: np.ndarray, candidate: np.ndarray, keys: np.ndarray, budget: np.ndarray,
                        rules: MaskingRules) -> np.ndarray:
    """Whole words in a random order, each taken when it still fits the row's budget."""
    n_rows, width = candidate.shape
    previous_candidate = np.zeros_like(candidate)
    previous_candidate[:, 1:] = candidate[:, :-1]
    word_start = candidate & ~(rules.continuation[ids2d] & previous_candidate)
    word_index = np.cumsum(word_start, axis=1) - 1  # the word each candidate belongs to, per row
    n_words = word_start.sum(axis=1)
    # Word slot j of a row is its j-th word; a random order of the slots, padding slots last.
    keys = np.where(np.arange(width) < n_words[:, None], keys, np.float32(2.0))
    order = np.argsort(keys, axis=1)
    rows, cols = np.nonzero(candidate)
    word_length = np.bincount(rows * width + word_index[rows, cols], minlength=n_rows * width)
    taken_in_order = _greedy_fill(np.take_along_axis(word_length.reshape(n_rows, width), order, axis=1),
                                  budget, n_words)
    taken_word = np.zeros((n_rows, width), dtype=bool)
    np.put_along_axis(taken_word, order, taken_in_order, axis=1)
    return candidate & np.take_along_axis(taken_word, np.maximum(word_index, 0), axis=1)


def _greedy_fill(lengths_in_order: np.ndarray, budget: np.ndarray, n_words: np.ndarray) -> np.ndarray:
    """Walk each row's words in order, taking a word when it still fits the row's budget.

    Vectorised over rows, sequential over word slots; stops as soon as no row can take more.
    """
    n_rows, width = lengths_in_order.shape
    taken = np.zeros((n_rows, width), dtype=bool)
    filled = np.zeros(n_rows, dtype=np.int64)
    for slot in range(width):
        open_rows = (filled < budget) & (slot < n_words)
        if not open_rows.any():
            break
        fits = open_rows & (filled + lengths_in_order[:, slot] <= budget)
        taken[:, slot] = fits
        filled += np.where(fits, lengths_in_order[:, slot], 0)
    return taken
