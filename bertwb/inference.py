"""Ask a pre-trained model directly: ``fill-mask`` (top-k tokens for every ``[MASK]``) and ``nsp``.

Both load any model directory (see :mod:`bertwb.model.modeldir`) with its tokenizer, run on CPU unless told
otherwise, in ``pretrain.precision`` as :func:`bertwb.train.device.choose_precision` resolves it, and return
plain dicts the CLI prints as tables or JSON. Which directory and which tokenizer folder is the caller's choice
(:mod:`bertwb.train.model_choice`). A head an import made anew (its ``import.json`` says so) answers at
random: each says so in one line before it answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from bertwb import fast, ui
from bertwb.artifacts import IMPORT_FILE, read_json
from bertwb.errors import BertwbError
from bertwb.model import modeldir
from bertwb.model.bert import BertForPreTraining
from bertwb.train.device import Precision, choose_precision, model_shapes, resolve_device

MASK = "[MASK]"


@dataclass
class PretrainedModel:
    """A pre-training model (MLM and NSP heads) in eval mode with its tokenizer."""

    model: BertForPreTraining
    tokenizer: Tokenizer
    device: torch.device
    source: str
    precision: Precision
    new_heads: tuple[str, ...] = ()  # heads import-hf made anew ("MLM head", "NSP head"): never trained

    @classmethod
    def load(cls, model_dir: modeldir.ModelDir, tokenizer_dir: Path, device: str = "auto",
             precision: str = "auto", fast_paths: bool = True) -> PretrainedModel:
        """``model_dir``'s model on ``device`` with the tokenizer of ``tokenizer_dir``, answering in ``precision``
        (``pretrain.precision``: auto decides as `choose_precision` does), with `fast.for_inference` unless
        ``fast_paths`` is false (``pretrain.cpu_fast_paths``)."""
        tokenizer = modeldir.load_tokenizer(model_dir, tokenizer_dir)
        torch_device = resolve_device(device, "--device")
        model = fast.for_inference(modeldir.load_model(model_dir, torch_device, kind="pretraining")[0], torch_device,
                                   fast_paths)
        imported = model_dir.path / IMPORT_FILE
        made = read_json(imported, "import the model again with `bertwb import-hf`", {"initialised": list[str]}) \
            .get("initialised", []) if imported.is_file() else []
        chosen = choose_precision(precision, torch_device, *model_shapes(model))
        return cls(model.eval(), tokenizer, torch_device, model_dir.label, chosen, tuple(made))

    def _warn_if_new(self, head: str, command: str) -> None:
        if head in self.new_heads:
            ui.warn(f"{self.source} has no trained {head} (import.json: the checkpoint had none, so import-hf made it "
                    f"anew): {command}'s answers are random; pre-train it first, or use a model that ships the head")

    def _encode(self, first: str, second: str | None, where: str) -> Any:
        encoding = self.tokenizer.encode(first, second, add_special_tokens=True)
        limit = self.model.config.max_position_embeddings
        if len(encoding.ids) > limit:
            raise BertwbError(f"{where}: {len(encoding.ids)} tokens, more than the model's {limit} positions; "
                              "shorten the text")
        return encoding

    @torch.no_grad()
    def fill_mask(self, texts: list[str], top_k: int = 5) -> list[dict[str, Any]]:
        """For each text, the ``top_k`` tokens and probabilities at every ``[MASK]``, most likely first."""
        self._warn_if_new("MLM head", "fill-mask")
        mask_id = self.tokenizer.token_to_id(MASK)
        results = []
        for number, text in enumerate(texts, 1):
            where = f"input {number}" if len(texts) > 1 else "input"
            encoding = self._encode(text, None, where)
            ids = encoding.ids
            positions = [i for i, token_id in enumerate(ids) if token_id == mask_id]
            if not positions:
                raise BertwbError(f"{where} has no {MASK}: write {MASK} where a word should be predicted, "
                                  f"e.g. \"the cat sat on the {MASK} .\"")
            input_ids = torch.tensor([ids], device=self.device)
            token_type_ids = torch.tensor([encoding.type_ids], device=self.device)
            masked = torch.tensor(positions, device=self.device)
            with self.precision.autocast():
                out = self.model(input_ids, token_type_ids, None, masked)  # (n_masks, V) at the masks only
            probs = out.mlm_logits.float().softmax(-1)
            top = probs.topk(min(top_k, probs.size(-1)), dim=-1)
            masks = []
            for slot, position in enumerate(positions):
                predictions = []
                for score, token_id in zip(top.values[slot].tolist(), top.indices[slot].tolist(), strict=True):
                    filled = list(ids)
                    filled[position] = token_id
                    predictions.append({"token": self.tokenizer.id_to_token(token_id), "token_id": token_id,
                                        "score": round(score, 6), "sequence": self._decode(filled)})
                masks.append({"position": position, "predictions": predictions})
            results.append({"text": text, "masks": masks})
        return results

    def _decode(self, ids: list[int]) -> str:
        """The text of ``ids`` without [CLS]/[SEP], other [MASK]s left visible."""
        special = {self.tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]")}
        return self.tokenizer.decode([i for i in ids if i not in special], skip_special_tokens=False)

    @torch.no_grad()
    def next_sentence(self, first: str, second: str) -> dict[str, Any]:
        """P(IsNext): the probability the model gives to ``second`` following ``first``."""
        for name, text in (("sentence A", first), ("sentence B", second)):
            if not text.strip():
                raise BertwbError(f"{name} is empty; give two non-empty sentences")
        self._warn_if_new("NSP head", "nsp")
        encoding = self._encode(first, second, "the pair")
        input_ids = torch.tensor([encoding.ids], device=self.device)
        token_type_ids = torch.tensor([encoding.type_ids], device=self.device)
        with self.precision.autocast():
            out = self.model(input_ids, token_type_ids, None, torch.zeros(0, dtype=torch.long, device=self.device))
        probs = out.nsp_logits.float().softmax(-1)[0]
        return {"a": first, "b": second, "is_next": round(float(probs[0]), 6), "is_random": round(float(probs[1]), 6)}
