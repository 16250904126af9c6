"""Texts to vectors: a model directory's encoder in inference mode over batches of windows of one length (no
padding, so no attention mask: SDPA's mask-free kernel), the chosen layers combined (under bf16 autocast
with ``precision`` bf16, as `bertwb.train.device.choose_precision` resolved it), then pooled as
`EmbedSettings` say, or kept per token with character offsets.

A text longer than ``max_length`` tokens is cut into windows of ``[CLS] piece [SEP]``, which are pooled
alone and averaged (before normalising); a token's vector is its window's. `pool` is the one pooling function.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from bertwb import fast
from bertwb.embed.pooling import EmbedSettings
from bertwb.errors import BertwbError
from bertwb.model import modeldir
from bertwb.model.bert import BertModel
from bertwb.model.heads import masked_mean
from bertwb.train import model_choice
from bertwb.train.device import resolve_device
from bertwb.workspace import Workspace

BATCH_TOKENS = 8192  # tokens per batch at most: short windows go many to a batch, long ones few


@dataclass
class Encoded:
    """One vector per text, in input order, and how many texts were split into windows; with ``--tokens``,
    ``vectors`` holds every text's token vectors in turn and `tokens` says which belong to which text."""

    vectors: np.ndarray  # (n_texts, dim) float32, or (n_tokens, dim) with tokens
    split: int
    tokens: TextTokens | None = None


@dataclass
class TextTokens:
    """The tokens behind token vectors, flat in input order: text i owns rows ``starts[i]:starts[i + 1]``."""

    starts: np.ndarray  # (n_texts + 1,) int64: where each text's tokens begin, then the total
    names: list[str]  # the word piece as the vocabulary spells it (``##s``), or the word as the text spells it
    offsets: np.ndarray  # (n_tokens, 2) int32: characters [start, end) of the token in its text


@dataclass
class _Windows:
    """Every text's windows of ids (``[CLS]`` and ``[SEP]`` included), the text each belongs to, and the index
    of its first piece among all texts' pieces laid end to end."""

    ids: list[list[int]]
    owner: np.ndarray  # (n_windows,) int64
    first_piece: np.ndarray  # (n_windows,) int64
    encodings: list  # the tokenizer's encoding of each text, without special tokens


class Encoder:
    """A model's backbone and tokenizer, turning texts into vectors with fixed settings."""

    def __init__(self, bert: BertModel, tokenizer: Tokenizer, device: torch.device, batch_size: int = 256):
        self.bert, self.tokenizer, self.device, self.batch_size = bert.eval(), tokenizer, device, batch_size
        self.cls_id, self.sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")

    @classmethod
    def load(cls, model_dir: modeldir.ModelDir, ws: Workspace, device: str = "auto", batch_size: int = 256,
             fast_paths: bool = True) -> Encoder:
        """The encoder of ``model_dir`` (a model of any kind: its head is not used) and its tokenizer; with
        `fast.for_inference` unless ``fast_paths`` is false (``pretrain.cpu_fast_paths``)."""
        tokenizer = modeldir.load_tokenizer(model_dir, model_choice.tokenizer_dir(ws, model_dir.tokenizer_dir))
        torch_device = resolve_device(device, "--device")
        model = fast.for_inference(modeldir.load_model(model_dir, torch_device)[0], torch_device, fast_paths)
        return cls(model.bert, tokenizer, next(model.parameters()).device, batch_size)

    @property
    def num_layers(self) -> int:
        return self.bert.config.num_layers

    @property
    def positions(self) -> int:
        return self.bert.config.max_position_embeddings

    def dimension(self, settings: EmbedSettings) -> int:
        concat = len(settings.layers) if settings.combine == "concat" else 1
        return self.bert.config.hidden_size * concat * max(len(settings.pooling), 1)

    @torch.inference_mode()
    def encode(self, texts: list[str], settings: EmbedSettings, progress: Any = None) -> Encoded:
        """``texts`` as vectors (see the module doc), in order; ``progress`` (`bertwb.ui.progress`) advances by
        each text as its last window is done."""
        windows = self._windows(texts, settings.max_length)
        pieces = int(windows.first_piece[-1] + len(windows.ids[-1]) - 2) if windows.ids else 0
        rows = pieces if settings.tokens else len(windows.ids)
        vectors = np.zeros((rows, self.dimension(settings)), np.float32)
        lengths = np.fromiter(map(len, windows.ids), np.int64, len(windows.ids))
        last = np.append(windows.owner[1:] != windows.owner[:-1], True)  # (n_windows,): a text's last window
        for chosen in self._batches(lengths):
            length = int(lengths[chosen[0]])
            states = self._token_states([windows.ids[i] for i in chosen], settings).float()  # (B, T, dim)
            if settings.tokens:  # each window's pieces, [CLS] and [SEP] left out, to their rows
                rows_of = windows.first_piece[chosen][:, None] + np.arange(length - 2)  # (B, T - 2)
                vectors[rows_of.reshape(-1)] = states[:, 1:-1].reshape(-1, states.size(-1)).cpu().numpy()
            else:
                vectors[chosen] = pool(states, None, settings.pooling).cpu().numpy()
            if progress is not None:
                progress.advance(int(last[chosen].sum()))
        counts = np.bincount(windows.owner, minlength=len(texts))
        split = int((counts > 1).sum())
        if settings.tokens:
            found, rows = _text_tokens(texts, windows.encodings, settings.tokens)
            vectors = vectors if rows is None else vectors[rows]
            return Encoded(_normalized(vectors) if settings.normalize else vectors, split, found)
        sums = np.zeros((len(texts), vectors.shape[1]), np.float64)
        np.add.at(sums, windows.owner, vectors)
        means = (sums / counts[:, None]).astype(np.float32)
        return Encoded(_normalized(means) if settings.normalize else means, split)

    def _windows(self, texts: list[str], max_length: int) -> _Windows:
        """Every text cut into windows of at most ``max_length`` ids, ``[CLS]`` and ``[SEP]`` included."""
        room = max_length - 2
        ids, owner, first_piece, pieces = [], [], [], 0
        encodings = self.tokenizer.encode_batch(texts, add_special_tokens=False)
        for index, encoding in enumerate(encodings):
            text_ids = encoding.ids
            for start in range(0, max(len(text_ids), 1), room):
                ids.append([self.cls_id, *text_ids[start:start + room], self.sep_id])
                owner.append(index)
                first_piece.append(pieces + start)
            pieces += len(text_ids)
        return _Windows(ids, np.asarray(owner, np.int64), np.asarray(first_piece, np.int64), encodings)

    def _batches(self, lengths: np.ndarray) -> list[np.ndarray]:
        """The windows' indices in batches of one length each, so none is padded: at most ``batch_size``
        windows and `BATCH_TOKENS` tokens (or one window) a batch, shortest first."""
        order = np.argsort(lengths, kind="stable")
        batches = []
        for group in np.split(order, np.flatnonzero(np.diff(lengths[order])) + 1):
            if len(group) == 0:
                continue
            rows = max(1, min(self.batch_size, BATCH_TOKENS // int(lengths[group[0]])))
            batches.extend(group[start:start + rows] for start in range(0, len(group), rows))
        return batches

    def _token_states(self, windows: list[list[int]], settings: EmbedSettings) -> torch.Tensor:
        """Token vectors (B, T, dim) of windows of one length, the chosen layers combined."""
        input_ids = torch.tensor(windows, dtype=torch.long, device=self.device)  # (B, T): no padding, no mask
        with torch.autocast(self.device.type, dtype=torch.bfloat16) if settings.precision == "bf16" \
                else nullcontext():
            states = self.bert.hidden_states(input_ids, None, None, settings.layers)
        return torch.cat(states, -1) if settings.combine == "concat" else torch.stack(states).mean(0)


def _normalized(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)  # F.normalize's eps


def _text_tokens(texts: list[str], encodings: list, mode: str) -> tuple[TextTokens, np.ndarray | None]:
    """Each text's tokens and their character offsets; for ``words``, one per word, spanning the whole word and
    spelled as the text spells it, with the rows of each word's first piece among all texts' pieces."""
    starts, names, offsets, rows, pieces = [0], [], [], [], 0
    for text, encoding in zip(texts, encodings, strict=True):
        if mode == "pieces":
            names.extend(encoding.tokens)
            offsets.extend(encoding.offsets)
        else:
            spans: dict[object, list[int]] = {}
            for piece, (word, (begin, end)) in enumerate(zip(encoding.word_ids, encoding.offsets, strict=True)):
                word = ("piece", piece) if word is None else word  # a piece of no word stands alone
                if word not in spans:
                    spans[word] = [begin, end]
                    rows.append(pieces + piece)
                spans[word][1] = end
            names.extend(text[begin:end] for begin, end in spans.values())
            offsets.extend(spans.values())
        pieces += len(encoding.ids)
        starts.append(len(names))
    found = TextTokens(np.asarray(starts, np.int64), names, np.asarray(offsets, np.int32).reshape(-1, 2))
    return found, (np.asarray(rows, np.int64) if mode == "words" else None)


def pool(tokens: torch.Tensor, mask: torch.Tensor | None, modes: tuple[str, ...]) -> torch.Tensor:
    """Token vectors (B, T, H) with their mask (B, T; None: no padding) pooled by each of ``modes``, side by
    side: (B, H * modes)."""
    if mask is None:
        mask = torch.ones(tokens.shape[:2], dtype=torch.long, device=tokens.device)
    weights = mask.unsqueeze(-1).to(tokens.dtype)  # (B, T, 1): 1 for real tokens, 0 for padding
    counts = weights.sum(1).clamp(min=1e-9)  # (B, 1)
    pooled = []
    for mode in modes:
        if mode == "cls":
            pooled.append(tokens[:, 0])
        elif mode == "max":
            pooled.append(tokens.masked_fill(weights == 0, float("-inf")).max(1).values)
        elif mode == "mean":
            pooled.append(masked_mean(tokens, mask))
        elif mode == "mean_sqrt_len":
            pooled.append((tokens * weights).sum(1) / counts.sqrt())
        else:
            raise BertwbError(f"pooling {mode!r} is not one bertwb computes; use cls, max, mean or mean_sqrt_len")
    return torch.cat(pooled, -1)
