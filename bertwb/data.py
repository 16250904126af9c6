"""The training data path: unpadded pairs in, length-bucketed padded batches out.

Batching is **length bucketing**, not packing. Packing several pairs into one row would need a
block-diagonal attention mask and per-pair position ids and [CLS] slots, which the model (and its
one-to-one Hugging Face parity) does not have; bucketing keeps every row one pair and still cuts
padding to a few percent (measured in ``benchmarks/pretrain_cpu.py`` and in the stage summary).

A global batch is either a fixed number of pairs (``pretrain.batch_size``) or, with a **token budget**
(``pretrain.batch_tokens``), as many pairs of about the same length as fit in that many padded
tokens: short pairs then come many to a batch, so every step does about the same work and an epoch
takes fewer steps (the budget of fairseq's ``--max-tokens``). The gradient is always that of the
global batch, whatever its size (see ``bertwb.pretrain``).

Each epoch has a fixed order that depends only on ``(seed, epoch)``:

* fixed size: the pairs are shuffled, cut into chunks of ``bucket_batches`` global batches, sorted by
  length inside a chunk and cut into global batches of ``batch_size`` pairs;
* token budget: the pairs are sorted by length, ties in a random order, and cut greedily into batches
  whose rows × longest row stays within the budget. The lengths are the same every epoch, so the cuts
  (and the number of steps in an epoch) are too; which pairs share a batch changes.

Either way the batches are then shuffled. A global batch is split into ``world_size × grad_accum``
contiguous micro-batches of (nearly) equal size and rank ``r`` takes its own ``grad_accum`` of
them, so every process reads only its shard, and a run computes on the same pairs whatever the
number of processes. The position in the data is just the step number, which makes resuming exact.

Dynamic masks (``pairs.masking: dynamic``) come from :func:`bertwb.masking.mask_batch`, the function
the pairs stage uses for static masks, called once per *global* batch with a generator seeded by
``(seed, epoch, batch)``: one vectorised call, the same masks whatever the number of processes,
accumulation steps or interruptions, and new masks every epoch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from bertwb.errors import BertwbError
from bertwb.masking import MaskingRules, mask_batch

IGNORE_INDEX = -100


@dataclass
class PairArrays:
    """One split of pre-training pairs, unpadded, as flat arrays.

    Row ``i`` is ``tokens[offsets[i]:offsets[i+1]]`` = ``[CLS] A [SEP] B [SEP]``; its first
    ``segment_a_len[i]`` tokens (``[CLS] A [SEP]``) have token type 0, the rest type 1. With static
    masks ``tokens`` already holds the replacements ([MASK], random, kept) and row ``i``'s targets are
    ``masked_positions/masked_ids[masked_offsets[i]:masked_offsets[i+1]]``; for dynamic masking the
    three masked arrays are None and ``tokens`` holds the originals.
    """

    tokens: np.ndarray  # (total tokens,) int
    offsets: np.ndarray  # (n + 1,) int64
    segment_a_len: np.ndarray  # (n,) tokens of type 0, [CLS] and the first [SEP] included
    is_random_next: np.ndarray  # (n,) 1 = B is a random sentence (NSP label 1), 0 = B follows A
    masked_positions: np.ndarray | None = None  # (total masked,) positions inside the row
    masked_ids: np.ndarray | None = None  # (total masked,) original token ids there
    masked_offsets: np.ndarray | None = None  # (n + 1,) int64

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def static(self) -> bool:
        return self.masked_offsets is not None


def load_split(pairs_dir: Path, split: str) -> tuple[PairArrays, dict[str, Any], MaskingRules | None]:
    """A split the pairs stage wrote (memory-mapped), its meta.json, and the rules for dynamic masking."""
    from bertwb.pairs import load_pairs  # noqa: PLC0415 - pairs imports pyarrow, only needed here

    data = load_pairs(pairs_dir, split)
    pairs = PairArrays(tokens=data.input_ids, offsets=data.offsets,
                       segment_a_len=data.len_a.astype(np.int64) + 2,  # [CLS] A [SEP]
                       is_random_next=data.is_random_next)
    if data.static:
        pairs.masked_positions, pairs.masked_ids = data.masked_positions, data.masked_ids
        pairs.masked_offsets = data.mask_offsets
    return pairs, data.meta, None if data.static else data.masking_rules()


@dataclass
class Batch:
    """One padded micro-batch, ready for ``BertForPreTraining.forward``."""

    input_ids: torch.Tensor  # (B, T) int64
    token_type_ids: torch.Tensor  # (B, T) int64
    attention_mask: torch.Tensor | None  # (B, T) 1 = token, 0 = pad; None when no row is padded
    masked_positions: torch.Tensor  # (n_masked,) flat indices into the B*T grid
    mlm_labels: torch.Tensor  # (n_masked,) original ids at those positions
    nsp_labels: torch.Tensor  # (B,) 0 = IsNext, 1 = random
    n_tokens: int  # real (non-pad) tokens
    n_padded: int  # B*T, pad included

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """This batch on ``device``; a non-blocking copy to a GPU goes through pinned memory.

        From ordinary (pageable) memory the host would wait while the driver stages every tensor; from
        page-locked memory the copy is only queued, and the host goes on to prepare the next step.
        """
        source = self.pin_memory() if non_blocking and torch.device(device).type == "cuda" else self
        return source._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> Batch:
        return self._map(torch.Tensor.pin_memory)

    def _map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> Batch:
        def apply(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else fn(t)
        return Batch(apply(self.input_ids), apply(self.token_type_ids), apply(self.attention_mask),
                     apply(self.masked_positions), apply(self.mlm_labels), apply(self.nsp_labels),
                     self.n_tokens, self.n_padded)


@dataclass
class EpochOrder:
    """An epoch's global batches: batch ``i`` is the pair indices ``rows[offsets[i]:offsets[i+1]]``."""

    rows: np.ndarray  # (pairs in the epoch,) int64
    offsets: np.ndarray  # (batches + 1,) int64

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> np.ndarray:
        return self.rows[self.offsets[index]:self.offsets[index + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(len(self)))


class Batches:
    """Deterministic, resumable, sharded batches over one split (see the module docstring)."""

    def __init__(self, pairs: PairArrays, batch_size: int, seed: int, *, batch_tokens: int = 0,
                 bucket_batches: int = 50, world_size: int = 1, rank: int = 0, grad_accum: int = 1,
                 pad_multiple: int = 1, masking_rules: MaskingRules | None = None, drop_last: bool = True):
        if not pairs.static and masking_rules is None:
            raise ValueError("pairs without static masks need masking rules for dynamic masking")
        self.pairs, self.batch_size, self.batch_tokens, self.seed = pairs, batch_size, batch_tokens, seed
        self.bucket_batches, self.world_size, self.rank = bucket_batches, world_size, rank
        self.grad_accum, self.pad_multiple, self.masking_rules = grad_accum, pad_multiple, masking_rules
        self.drop_last = drop_last
        self._lengths = pairs.lengths
        self._order_epoch, self._order = -1, EpochOrder(np.zeros(0, np.int64), np.zeros(1, np.int64))
        parts = world_size * grad_accum
        if batch_tokens:
            longest = int(self._lengths.max()) if len(pairs) else 1
            width = round_up(longest, pad_multiple)
            if batch_tokens // width < parts:
                needed = (f", fewer than processes × pretrain.grad_accum = {world_size} × {grad_accum}"
                          if parts > 1 else "")
                raise BertwbError(f"pretrain.batch_tokens {batch_tokens} holds {batch_tokens // width} of the longest "
                                  f"pairs ({longest} tokens){needed}; raise it to at least {parts * width}")
            self._cuts = self._token_cuts()
        elif batch_size % parts:
            raise BertwbError(f"pretrain.batch_size {batch_size} is not divisible by processes × "
                              f"pretrain.grad_accum = {world_size} × {grad_accum}; pick a multiple")

    def _token_cuts(self) -> np.ndarray:
        """Batch boundaries in the length-sorted split: each batch as many pairs as fit in the budget.

        A batch grows while (rows + 1) × its longest (padded) row stays within ``batch_tokens``; the
        last, underfull batch is dropped with ``drop_last``. Depends on the lengths only, not the epoch.
        Runs of equal width are cut many batches at a time, so the loop turns about twice per width.
        """
        widths = round_up(np.sort(self._lengths), self.pad_multiple)
        run_end = np.searchsorted(widths, widths, side="right")  # where each pair's run of equal width ends
        n, cuts, start = len(widths), [0], 0
        while start < n:
            per = self.batch_tokens // int(widths[start])  # rows of this width that fit
            full = (int(run_end[start]) - start) // per
            if full:  # whole batches inside the run
                cuts.extend(range(start + per, start + full * per + 1, per))
                start += full * per
                continue
            # the batch reaches longer rows: r rows fit while r × widths[start + r - 1] <= budget, a
            # product that grows with r, so the fitting rows are a prefix
            window = widths[start:start + per]
            start += int(np.count_nonzero(np.arange(1, len(window) + 1) * window <= self.batch_tokens))
            cuts.append(start)
        if self.drop_last and len(cuts) > 2 and (n - cuts[-2] + 1) * widths[-1] <= self.batch_tokens:
            cuts.pop()  # room for one more row: the epoch's remainder, as in the fixed-size mode
        return np.asarray(cuts, np.int64)

    @property
    def steps_per_epoch(self) -> int:
        if self.batch_tokens:
            return len(self._cuts) - 1
        full, rest = divmod(len(self.pairs), self.batch_size)
        return full if self.drop_last or not rest else full + 1

    def epoch_order(self, epoch: int) -> EpochOrder:
        """The epoch's global batches of pair indices, ``steps_per_epoch`` of them.

        Fixed-size batches all hold ``batch_size`` pairs; the last incomplete one is dropped (a
        different random remainder every epoch), or kept, shorter, without ``drop_last``.
        """
        if epoch != self._order_epoch:
            self._order, self._order_epoch = self._build_order(epoch), epoch
        return self._order

    def _build_order(self, epoch: int) -> EpochOrder:
        rng = np.random.default_rng([self.seed, epoch])
        if self.batch_tokens:
            by_length = np.lexsort((rng.random(len(self.pairs)), self._lengths))
            starts, counts = self._cuts[:-1], np.diff(self._cuts)
        else:
            by_length, starts, counts = self._bucketed(rng)
        shuffled = rng.permutation(len(counts))
        offsets = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts[shuffled], out=offsets[1:])
        return EpochOrder(by_length[_ranges(starts[shuffled], counts[shuffled])], offsets)

    def _bucketed(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Fixed-size batches: shuffled pairs, sorted by length in chunks; (pairs, batch starts, sizes)."""
        n, size = len(self.pairs), self.batch_size
        perm = rng.permutation(n)
        kept = n if not self.drop_last else (n // size) * size
        if self.bucket_batches > 1:
            chunk = self.bucket_batches * size
            full = (kept // size) * size  # a kept remainder stays unsorted, after the sorted chunks
            pieces = [perm[start:min(start + chunk, full)] for start in range(0, full, chunk)]
            perm = np.concatenate([p[np.argsort(self._lengths[p], kind="stable")] for p in pieces]
                                  + [perm[full:kept]])
        starts = np.arange(0, kept, size, dtype=np.int64)
        return perm[:kept], starts, np.minimum(size, kept - starts)

    def pairs_in_batch(self, epoch: int, batch_in_epoch: int) -> int:
        """Pairs in global batch ``batch_in_epoch`` of ``epoch``, over every rank."""
        return len(self.epoch_order(epoch)[batch_in_epoch])

    def split(self, n_pairs: int) -> list[np.ndarray]:
        """A global batch of ``n_pairs`` as every rank's micro-batches: ``world_size × grad_accum``
        contiguous runs of slots (0 … n_pairs - 1), sizes differing by at most one; rank r has run
        r × grad_accum onwards."""
        return np.array_split(np.arange(n_pairs), self.world_size * self.grad_accum)

    def local_slots(self, epoch: int, batch_in_epoch: int) -> list[np.ndarray]:
        """This rank's micro-batches as slots (0 … pairs - 1) of the global batch."""
        parts = self.split(self.pairs_in_batch(epoch, batch_in_epoch))
        return parts[self.rank * self.grad_accum:(self.rank + 1) * self.grad_accum]

    def micro_batches(self, epoch: int, batch_in_epoch: int) -> list[Batch]:
        """This rank's collated micro-batches of global batch ``batch_in_epoch`` of ``epoch``."""
        row = self.epoch_order(epoch)[batch_in_epoch]
        if self.pairs.static:
            source, slots_to_rows = self.pairs, row
        else:  # mask the whole global batch, then take this rank's slots of it
            source = self._mask_dynamically(row, epoch, batch_in_epoch)
            slots_to_rows = np.arange(len(row))
        return [collate(source, slots_to_rows[slots], self.pad_multiple)
                for slots in self.local_slots(epoch, batch_in_epoch) if len(slots)]

    def _mask_dynamically(self, rows: np.ndarray, epoch: int, batch_in_epoch: int) -> PairArrays:
        """The global batch ``rows`` as its own small split, masked with this epoch's draw."""
        starts = self.pairs.offsets[rows]
        lengths = self.pairs.offsets[rows + 1] - starts
        offsets = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tokens = np.asarray(self.pairs.tokens[_ranges(starts, lengths)])
        rng = np.random.default_rng([self.seed, epoch, batch_in_epoch])
        masked = mask_batch(tokens, offsets, self.masking_rules, rng)
        return PairArrays(masked.input_ids, offsets, self.pairs.segment_a_len[rows],
                          self.pairs.is_random_next[rows], masked.masked_positions, masked.masked_ids,
                          masked.mask_offsets)


def collate(pairs: PairArrays, indices: np.ndarray, pad_multiple: int = 1) -> Batch:
    """Pad the (statically masked) rows ``indices`` to the longest, rounded up to ``pad_multiple``."""
    starts = pairs.offsets[indices]
    lengths = pairs.offsets[indices + 1] - starts
    width = int(round_up(lengths.max(), pad_multiple))
    columns = np.arange(width)
    real = columns[None, :] < lengths[:, None]  # (B, T)
    gather = np.where(real, starts[:, None] + columns[None, :], 0)
    input_ids = np.where(real, pairs.tokens[gather], 0).astype(np.int64)
    token_type_ids = (real & (columns[None, :] >= pairs.segment_a_len[indices][:, None])).astype(np.int64)

    counts = pairs.masked_offsets[indices + 1] - pairs.masked_offsets[indices]
    flat = _ranges(pairs.masked_offsets[indices], counts)
    positions = np.asarray(pairs.masked_positions[flat]).astype(np.int64)
    labels = np.asarray(pairs.masked_ids[flat]).astype(np.int64)
    rows = np.repeat(np.arange(len(indices)), counts)
    padded = bool((lengths < width).any())
    return Batch(
        input_ids=torch.from_numpy(input_ids),
        token_type_ids=torch.from_numpy(token_type_ids),
        attention_mask=torch.from_numpy(real.astype(np.int64)) if padded else None,
        masked_positions=torch.from_numpy(rows * width + positions),
        mlm_labels=torch.from_numpy(labels),
        nsp_labels=torch.from_numpy(pairs.is_random_next[indices].astype(np.int64)),
        n_tokens=int(lengths.sum()),
        n_padded=len(indices) * width,
    )


def round_up(length: int | np.ndarray, multiple: int) -> int | np.ndarray:
    """``length`` rounded up to a multiple of ``multiple`` (the padded width of a row)."""
    return -(-length // multiple) * multiple


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, s + c)`` for every (s, c), without a Python loop."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    ends = np.cumsum(counts)
    return np.repeat(starts - (ends - counts), counts) + np.arange(total)


def padding_fraction(batches: Batches, epoch: int = 0) -> float:
    """Share of pad tokens over the epoch's micro-batches when padded to each one's longest row."""
    order = batches.epoch_order(epoch)
    parts = batches.world_size * batches.grad_accum
    sizes = np.diff(order.offsets)[:, None]  # (batches, 1): pairs of each global batch
    # `Batches.split` in bulk: a batch's first n % parts micro-batches hold n // parts + 1 pairs, the rest
    # n // parts, each a contiguous run of the batch's rows, so all of them tile ``order.rows`` in order.
    micro = (sizes // parts + (np.arange(parts) < sizes % parts)).ravel()
    micro = micro[micro > 0]
    if not len(micro):
        return 0.0
    lengths = batches.pairs.lengths[order.rows[order.offsets[0]:order.offsets[-1]]]
    starts = np.cumsum(micro) - micro
    widths = round_up(np.maximum.reduceat(lengths, starts), batches.pad_multiple)
    total = int((widths * micro).sum())
    return float((total - int(lengths.sum())) / total)
