"""BERT tokenizers: build one, load one from any file or folder, write the files transformers reads.

A bertwb tokenizer is Hugging Face ``tokenizers`` set up as BERT's: the BERT normaliser (lowercase and
accent stripping when uncased), the BERT pre-tokeniser, ``##`` continuation pieces, the special tokens
``[PAD] [UNK] [CLS] [SEP] [MASK]`` kept whole in any text, and the ``[CLS] A [SEP] B [SEP]`` template
with segment ids 0 and 1. The vocab stage, model directories, exports and imports all load and write
tokenizers through the two functions here, so a folder any of them wrote loads in any other and in
``transformers.BertTokenizerFast.from_pretrained``.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from bertwb.errors import BertwbError

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SPECIAL_TOKENS_MAP = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                      "mask_token": "[MASK]"}
# The longest input a tokenizer's side files announce when no model says otherwise: BERT's 512 positions,
# the default of `bertwb.model.bert.BertConfig.max_position_embeddings`.
DEFAULT_MODEL_MAX_LENGTH = 512
FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


def build_tokenizer(vocab: dict[str, int] | None, lowercase: bool) -> Tokenizer:
    """A BERT WordPiece tokenizer over ``vocab`` (token -> id), or an untrained one for ``None``."""
    model = models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##") if vocab else \
        models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##")
    tokenizer = Tokenizer(model)
    tokenizer.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                      strip_accents=None, lowercase=lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    return tokenizer


def load_tokenizer(path: Path, lowercase: bool | None = None) -> Tokenizer:
    """The tokenizer in ``path``: a ``tokenizer.json``, a ``vocab.txt``, or a folder holding either.

    A ``vocab.txt`` is cased as ``lowercase`` says, else as its folder's ``tokenizer_config.json``
    says, else uncased. Special tokens present in the vocabulary are kept whole in text,
    and the BERT template is set when the file has none. Unreadable or non-BERT files are one-line errors.
    """
    if path.is_dir():
        found = next((path / name for name in ("tokenizer.json", "vocab.txt") if (path / name).is_file()), None)
        if found is None:
            raise BertwbError(f"{path}: no tokenizer.json or vocab.txt in it; a model needs its tokenizer")
        path = found
    if not path.is_file():
        raise BertwbError(f"{path}: no such tokenizer file; point at a vocab.txt or tokenizer.json")
    try:
        if path.suffix == ".json":
            tokenizer = Tokenizer.from_file(str(path))
        else:
            lines = path.read_text(encoding="utf-8").splitlines()
            vocab = {token: i for i, token in enumerate(lines) if token}
            if len(vocab) != len(lines):
                raise BertwbError(f"{path}: blank or repeated lines; a vocab.txt has one distinct token per line")
            side = path.parent / "tokenizer_config.json"
            if lowercase is None and side.is_file():
                lowercase = bool(json.loads(side.read_text(encoding="utf-8")).get("do_lower_case", True))
            tokenizer = build_tokenizer(vocab, True if lowercase is None else lowercase)
    except BertwbError:
        raise
    except Exception as exc:  # noqa: BLE001 - tokenizers, JSON and decoding errors all mean "unreadable"
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BertwbError(f"{path}: cannot read the tokenizer ({reason}); point at a vocab.txt or "
                          "tokenizer.json") from None
    missing = [t for t in SPECIAL_TOKENS if tokenizer.token_to_id(t) is None]
    if missing:
        raise BertwbError(f"{path}: missing special token(s) {' '.join(missing)}; add them to the vocabulary")
    tokenizer.add_special_tokens(SPECIAL_TOKENS)  # "[MASK]" in text stays one token
    if tokenizer.post_processor is None:
        add_bert_template(tokenizer)
    return tokenizer


def write_tokenizer_files(tokenizer: Tokenizer, out: Path, model_max_length: int = DEFAULT_MODEL_MAX_LENGTH,
                          lowercase: bool = True) -> None:
    """``FILES`` into ``out``, as ``BertTokenizerFast.from_pretrained`` reads them.

    ``lowercase`` is what ``tokenizer_config.json`` says when the tokenizer's own normaliser does not tell.
    """
    out.mkdir(parents=True, exist_ok=True)
    add_bert_template(tokenizer)
    tokenizer.save(str(out / "tokenizer.json"))
    by_id = sorted(tokenizer.get_vocab(with_added_tokens=True).items(), key=lambda item: item[1])
    (out / "vocab.txt").write_text("".join(f"{token}\n" for token, _ in by_id), encoding="utf-8")
    _write_json(out / "special_tokens_map.json", SPECIAL_TOKENS_MAP)
    _write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "BertTokenizer", "do_lower_case": lowercases(tokenizer, lowercase), "strip_accents": None,
        "tokenize_chinese_chars": True, "model_max_length": model_max_length, **SPECIAL_TOKENS_MAP})


def lowercases(tokenizer: Tokenizer, default: bool) -> bool:
    """Whether the tokenizer's own normaliser lowercases (a loaded tokenizer.json decides, not the config)."""
    normalizer = json.loads(tokenizer.to_str()).get("normalizer") or {}
    return bool(normalizer.get("lowercase", default)) if normalizer.get("type") == "BertNormalizer" else default


def add_bert_template(tokenizer: Tokenizer) -> None:
    """``[CLS] A [SEP]`` and ``[CLS] A [SEP] B [SEP]`` with segment ids 0 and 1, as BERT's inputs."""
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
