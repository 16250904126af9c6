"""Published-model stand-ins for the tokenizer-length tests (issue #32): tokenizer files that pad and
truncate every input, as a sentence-transformers export's do, and tiny transformers BERTs carrying them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from bertwb.data.tokenizer import SPECIAL_TOKENS, build_tokenizer, write_tokenizer_files
from conftest import GLUE_WORDS, TOPIC_WORDS

PAD_ID = 0  # [PAD] in every vocabulary here


def pad_tokenizer_files(folder: Path, length: int, model_max_length: int | None = None) -> None:
    """Make ``folder``'s tokenizer.json pad and truncate every input to ``length`` (``"padding": {"strategy":
    {"Fixed": length}}``), and its tokenizer_config.json declare ``model_max_length`` (default ``length``)."""
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_padding(length=length, pad_id=PAD_ID, pad_token="[PAD]")
    tokenizer.enable_truncation(length)
    tokenizer.save(str(folder / "tokenizer.json"))
    side = folder / "tokenizer_config.json"
    config = json.loads(side.read_text()) if side.is_file() else {}
    side.write_text(json.dumps({**config, "model_max_length": model_max_length or length}, indent=2))


def plain_tokenizer(folder: Path) -> Tokenizer:
    """``folder``'s tokenizer.json as tokenizers loads it, with its padding and truncation turned off."""
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def word_tokenizer(folder: Path) -> Tokenizer:
    """A bertwb tokenizer over the generated corpus's words (each word one token), written to ``folder``."""
    words = sorted({w for topic in TOPIC_WORDS.values() for w in topic.split()} | set(GLUE_WORDS))
    tokens = SPECIAL_TOKENS + words + [".", "?", "!", ",", "##s", "un", "##known"]
    tokenizer = build_tokenizer({t: i for i, t in enumerate(tokens)}, lowercase=True)
    tokenizer.add_special_tokens(SPECIAL_TOKENS)
    write_tokenizer_files(tokenizer, folder)
    return tokenizer


def tiny_published_model(folder: Path, transformers: Any, cls_name: str = "BertForPreTraining", pad_to: int = 128,
                         model_max_length: int | None = None, **config: Any) -> Any:
    """A random 2-layer transformers BERT saved with ``save_pretrained``, beside a tokenizer that pads and
    truncates to ``pad_to``, as a published sentence-transformers model ships; the model is returned."""
    import torch

    tokenizer = word_tokenizer(folder)
    torch.manual_seed(0)
    hf_config = transformers.BertConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
                                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128,
                                        **config)
    model = getattr(transformers, cls_name)(hf_config).eval()
    model.save_pretrained(folder)
    pad_tokenizer_files(folder, pad_to, model_max_length)
    return model
