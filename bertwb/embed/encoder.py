"""Texts to vectors: a model directory's encoder run in inference mode over length-bucketed batches (padded
only to the longest window of each batch), the chosen layers combined, then pooled as `EmbedSettings` say.

A text longer than ``max_length`` tokens is cut into windows of ``[CLS] piece [SEP]``, which are pooled
alone and averaged (before normalising). `pool` is the one pooling function; tests compare it with torch.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch
from tokenizers import Tokenizer

from bertwb import ui
from bertwb.embed.pooling import EmbedSettings
from bertwb.errors import BertwbError
from bertwb.model import modeldir
from bertwb.model.bert import BertModel
from bertwb.train import model_choice
from bertwb.train.device import resolve_device
from bertwb.workspace import Workspace


@dataclass
class Encoded:
    """One vector per text, in input order, and how many texts were split into windows."""

    vectors: np.ndarray  # (n_texts, dim) float32
    split: int


class Encoder:
    """A model's backbone and tokenizer, turning texts into vectors with fixed settings."""

    def __init__(self, bert: BertModel, tokenizer: Tokenizer, device: torch.device, batch_size: int = 64):
        self.bert, self.tokenizer, self.device, self.batch_size = bert.eval(), tokenizer, device, batch_size
        self.cls_id, self.sep_id, self.pad_id = (tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]"))

    @classmethod
    def load(cls, model_dir: modeldir.ModelDir, ws: Workspace, device: str = "auto", batch_size: int = 64) -> Encoder:
        """The encoder of ``model_dir`` (a model of any kind: its head is not used) and its tokenizer."""
        tokenizer = modeldir.load_tokenizer(model_dir, model_choice.tokenizer_dir(ws, model_dir.tokenizer_dir))
        model, _ = modeldir.load_model(model_dir, resolve_device(device, "--device"))
        return cls(model.bert, tokenizer, next(model.parameters()).device, batch_size)

    @property
    def num_layers(self) -> int:
        return self.bert.config.num_layers

    @property
    def positions(self) -> int:
        return self.bert.config.max_position_embeddings

    def dimension(self, settings: EmbedSettings) -> int:
        concat = len(settings.layers) if settings.combine == "concat" else 1
        return self.bert.config.hidden_size * concat * len(settings.pooling)

    @torch.inference_mode()
    def encode(self, texts: list[str], settings: EmbedSettings, show_progress: bool = True) -> Encoded:
        """``texts`` as vectors (see the module doc), in order."""
        windows, owner = self._windows(texts, settings.max_length)
        vectors = np.zeros((len(windows), self.dimension(settings)), np.float32)
        order = sorted(range(len(windows)), key=lambda i: len(windows[i]))  # buckets of similar lengths
        with ui.progress("embedding", total=len(windows), unit="windows") if show_progress else nullcontext() as bar:
            for start in range(0, len(order), self.batch_size):
                chosen = order[start:start + self.batch_size]
                vectors[chosen] = self._batch([windows[i] for i in chosen], settings).numpy()
                if bar is not None:
                    bar.advance(len(chosen))
        counts = np.bincount(owner, minlength=len(texts))
        sums = np.zeros((len(texts), vectors.shape[1]), np.float64)
        np.add.at(sums, owner, vectors)
        means = (sums / counts[:, None]).astype(np.float32)
        if settings.normalize:
            means /= np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)  # F.normalize's eps
        return Encoded(means, int((counts > 1).sum()))

    def _windows(self, texts: list[str], max_length: int) -> tuple[list[list[int]], np.ndarray]:
        """Every text's windows of at most ``max_length`` ids, ``[CLS]`` and ``[SEP]`` included, and the text
        each window belongs to."""
        room = max_length - 2
        windows, owner = [], []
        for index, encoding in enumerate(self.tokenizer.encode_batch(texts, add_special_tokens=False)):
            ids = encoding.ids
            for start in range(0, max(len(ids), 1), room):
                windows.append([self.cls_id, *ids[start:start + room], self.sep_id])
                owner.append(index)
        return windows, np.asarray(owner, np.int64)

    def _batch(self, windows: list[list[int]], settings: EmbedSettings) -> torch.Tensor:
        """Pooled vectors (B, dim) of windows of any lengths, padded to the longest."""
        longest = max(map(len, windows))
        input_ids = torch.full((len(windows), longest), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(windows), longest), dtype=torch.long)
        for row, ids in enumerate(windows):
            input_ids[row, :len(ids)] = torch.tensor(ids)
            mask[row, :len(ids)] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        states = hidden_states(self.bert, input_ids, None if bool(mask.all()) else mask, settings.layers)
        tokens = torch.cat(states, -1) if settings.combine == "concat" else torch.stack(states).mean(0)
        return pool(tokens.float(), mask, settings.pooling).cpu()


def hidden_states(bert: BertModel, input_ids: torch.Tensor, mask: torch.Tensor | None,
                  layers: tuple[int, ...]) -> list[torch.Tensor]:
    """The hidden states (B, T, H) at ``layers`` (0: the embeddings' output, i: block i's, -1: the last), in
    that order; blocks past the deepest one asked for are not run."""
    count = len(bert.layers) + 1
    wanted = [layer % count for layer in layers]
    attn_mask = None if mask is None else mask.bool()[:, None, None, :]  # (B, T) -> (B, 1, 1, T): keys to attend
    x = bert.embeddings(input_ids, torch.zeros_like(input_ids))
    states = {0: x}
    for index, block in enumerate(bert.layers[:max(wanted)], 1):
        x = block(x, attn_mask)
        states[index] = x
    return [states[i] for i in wanted]


def pool(tokens: torch.Tensor, mask: torch.Tensor, modes: tuple[str, ...]) -> torch.Tensor:
    """Token vectors (B, T, H) with their mask (B, T) pooled by each of ``modes``, side by side: (B, H * modes)."""
    weights = mask.unsqueeze(-1).to(tokens.dtype)  # (B, T, 1): 1 for real tokens, 0 for padding
    counts = weights.sum(1).clamp(min=1e-9)  # (B, 1)
    pooled = []
    for mode in modes:
        if mode == "cls":
            pooled.append(tokens[:, 0])
        elif mode == "max":
            pooled.append(tokens.masked_fill(weights == 0, float("-inf")).max(1).values)
        elif mode in ("mean", "mean_sqrt_len"):
            total = (tokens * weights).sum(1)
            pooled.append(total / (counts if mode == "mean" else counts.sqrt()))
        else:
            raise BertwbError(f"pooling {mode!r} is not one bertwb computes; use cls, max, mean or mean_sqrt_len")
    return torch.cat(pooled, -1)
