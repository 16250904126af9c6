"""Batching for training: examples of known lengths into length-bucketed, sharded, resumable batches.

A global batch is ``batch_size`` examples of similar length or, with ``batch_tokens``, as many as fit that
budget; rows are never packed. Each epoch's order depends only on (seed, epoch); a global batch splits into
``world_size × grad_accum`` micro-batches and rank ``r`` reads only its own, so what is computed never depends
on the number of processes, and the position in the data is the step number, so resuming is exact. What an
example is (its lengths, its collation into a `TensorBatch`) belongs to the `Examples` object.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol

import numpy as np
import torch

from bertwb.config import Origin
from bertwb.errors import BertwbError
from bertwb.data.ragged import ranges


class TensorBatch:
    """Base of every micro-batch dataclass: its tensor fields move to a device in one call."""

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Any:
        """This batch on ``device``; a non-blocking copy to a GPU goes through pinned memory.

        From ordinary (pageable) memory the host would wait while the driver stages every tensor; from
        page-locked memory the copy is only queued, and the host goes on to prepare the next step.
        """
        source = self.pin_memory() if non_blocking and torch.device(device).type == "cuda" else self
        return source._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> Any:
        return self._map(torch.Tensor.pin_memory)

    def _map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
        return dataclasses.replace(self, **{f.name: fn(value) for f in dataclasses.fields(self)
                                            if isinstance(value := getattr(self, f.name), torch.Tensor)})


class Examples(Protocol):
    """What `Batches` batches: examples of known lengths that collate themselves into micro-batches."""

    @property
    def lengths(self) -> np.ndarray: ...  # (n,) tokens of every example

    def micro_batches(self, rows: np.ndarray, parts: list[np.ndarray], seed: int, epoch: int, index: int,
                      pad_multiple: int = 1) -> list[TensorBatch]:
        """Global batch ``rows`` (batch ``index`` of ``epoch``) as the micro-batches ``parts`` (slots of it)."""


@dataclass
class EpochOrder:
    """An epoch's global batches: batch ``i`` is the example indices ``rows[offsets[i]:offsets[i+1]]``."""

    rows: np.ndarray  # (examples in the epoch,) int64
    offsets: np.ndarray  # (batches + 1,) int64

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> np.ndarray:
        return self.rows[self.offsets[index]:self.offsets[index + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(len(self)))


class Batches:
    """Deterministic, resumable, sharded batches over ``examples`` (see the module docstring)."""

    def __init__(self, examples: Examples, batch_size: int, seed: int, *, batch_tokens: int = 0,
                 bucket_batches: int = 50, world_size: int = 1, rank: int = 0, grad_accum: int = 1,
                 pad_multiple: int = 1, drop_last: bool = True, origin: Callable[[str], Origin] | None = None):
        """``origin`` names where a setting (``batch_size``) was given, for errors; default ``pretrain.<name>``."""
        origin = origin or (lambda name: Origin(f"pretrain.{name}"))
        self.examples, self.batch_size, self.batch_tokens, self.seed = examples, batch_size, batch_tokens, seed
        self.bucket_batches, self.world_size, self.rank = bucket_batches, world_size, rank
        self.grad_accum, self.pad_multiple, self.drop_last = grad_accum, pad_multiple, drop_last
        self._lengths = np.asarray(examples.lengths)
        self._order_epoch, self._order = -1, EpochOrder(np.zeros(0, np.int64), np.zeros(1, np.int64))
        parts = world_size * grad_accum
        if batch_tokens:
            longest = int(self._lengths.max()) if len(self._lengths) else 1
            width = round_up(longest, pad_multiple)
            if batch_tokens // width < parts:
                needed = (f", fewer than processes × {origin('grad_accum').key} = {world_size} × {grad_accum}"
                          if parts > 1 else "")
                raise BertwbError(f"{origin('batch_tokens')} {batch_tokens} holds {batch_tokens // width} of the "
                                  f"longest examples ({longest} tokens){needed}; raise it to at least {parts * width}")
            self._cuts = self._token_cuts()
        elif batch_size % parts:
            raise BertwbError(f"{origin('batch_size')} {batch_size} is not divisible by processes × "
                              f"{origin('grad_accum').key} = {world_size} × {grad_accum}; pick a multiple")

    def __len__(self) -> int:
        return len(self._lengths)

    def _token_cuts(self) -> np.ndarray:
        """Batch boundaries in the length-sorted examples: each batch as many as fit in the budget.

        A batch grows while (rows + 1) × its longest (padded) row stays within ``batch_tokens``; the
        last, underfull batch is dropped with ``drop_last``. Depends on the lengths only, not the epoch.
        Runs of equal width are cut many batches at a time, so the loop turns about twice per width.
        """
        widths = round_up(np.sort(self._lengths), self.pad_multiple)
        run_end = np.searchsorted(widths, widths, side="right")  # where each example's run of equal width ends
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
        full, rest = divmod(len(self), self.batch_size)
        return full if self.drop_last or not rest else full + 1

    def epoch_order(self, epoch: int) -> EpochOrder:
        """The epoch's global batches of example indices, ``steps_per_epoch`` of them.

        Fixed-size batches all hold ``batch_size`` examples; the last incomplete one is dropped (a
        different random remainder every epoch), or kept, shorter, without ``drop_last``.
        """
        if epoch != self._order_epoch:
            self._order, self._order_epoch = self._build_order(epoch), epoch
        return self._order

    def _build_order(self, epoch: int) -> EpochOrder:
        rng = np.random.default_rng([self.seed, epoch])
        if self.batch_tokens:
            by_length = np.lexsort((rng.random(len(self)), self._lengths))
            starts, counts = self._cuts[:-1], np.diff(self._cuts)
        else:
            by_length, starts, counts = self._bucketed(rng)
        shuffled = rng.permutation(len(counts))
        offsets = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts[shuffled], out=offsets[1:])
        return EpochOrder(by_length[ranges(starts[shuffled], counts[shuffled])], offsets)

    def _bucketed(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Fixed-size batches: shuffled examples, sorted by length in chunks; (examples, batch starts, sizes)."""
        n, size = len(self), self.batch_size
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

    def examples_in_batch(self, epoch: int, batch_in_epoch: int) -> int:
        """Examples in global batch ``batch_in_epoch`` of ``epoch``, over every rank."""
        return len(self.epoch_order(epoch)[batch_in_epoch])

    def split(self, n_examples: int) -> list[np.ndarray]:
        """A global batch of ``n_examples`` as every rank's micro-batches: ``world_size × grad_accum``
        contiguous runs of slots (0 … n_examples - 1), sizes differing by at most one; rank r has run
        r × grad_accum onwards."""
        return np.array_split(np.arange(n_examples), self.world_size * self.grad_accum)

    def local_slots(self, epoch: int, batch_in_epoch: int) -> list[np.ndarray]:
        """This rank's micro-batches as slots (0 … examples - 1) of the global batch."""
        parts = self.split(self.examples_in_batch(epoch, batch_in_epoch))
        return parts[self.rank * self.grad_accum:(self.rank + 1) * self.grad_accum]

    def micro_batches(self, epoch: int, batch_in_epoch: int) -> list[TensorBatch]:
        """This rank's collated micro-batches of global batch ``batch_in_epoch`` of ``epoch``."""
        rows = self.epoch_order(epoch)[batch_in_epoch]
        return self.examples.micro_batches(rows, self.local_slots(epoch, batch_in_epoch), self.seed, epoch,
                                           batch_in_epoch, self.pad_multiple)

    def padding_fraction(self, epoch: int = 0) -> float:
        """Share of pad tokens over the epoch's micro-batches when padded to each one's longest row."""
        order = self.epoch_order(epoch)
        parts = self.world_size * self.grad_accum
        sizes = np.diff(order.offsets)[:, None]  # (batches, 1): examples of each global batch
        # `split` in bulk: a batch's first n % parts micro-batches hold n // parts + 1 examples, the rest
        # n // parts, each a contiguous run of the batch's rows, so all of them tile ``order.rows`` in order.
        micro = (sizes // parts + (np.arange(parts) < sizes % parts)).ravel()
        micro = micro[micro > 0]
        if not len(micro):
            return 0.0
        lengths = self._lengths[order.rows[order.offsets[0]:order.offsets[-1]]]
        starts = np.cumsum(micro) - micro
        widths = round_up(np.maximum.reduceat(lengths, starts), self.pad_multiple)
        total = int((widths * micro).sum())
        return float((total - int(lengths.sum())) / total)


def round_up(length: int | np.ndarray, multiple: int) -> int | np.ndarray:
    """``length`` rounded up to a multiple of ``multiple`` (the padded width of a row)."""
    return -(-length // multiple) * multiple
