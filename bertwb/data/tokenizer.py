"""BERT tokenizers: build one, load one from any file or folder, write the files transformers reads.

A bertwb tokenizer is Hugging Face ``tokenizers`` set up as BERT's (normaliser, pre-tokeniser, ``##`` pieces,
special tokens kept whole, ``[CLS] A [SEP] B [SEP]`` with segment ids 0 and 1); what vocab, model directories,
export and import write loads in any of them and in ``BertTokenizerFast``. **bertwb owns lengths**:
`load_tokenizer` turns a file's padding and truncation off, so tokens, pairs and features hold no ``[PAD]``;
what the file said is only recorded (`declared_lengths`) or a limit to check the config against.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from bertwb.artifacts import write_json
from bertwb.errors import BertwbError

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SPECIAL_TOKENS_MAP = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                      "mask_token": "[MASK]"}
# The longest input a tokenizer's side files announce when no model says otherwise: BERT's 512 positions,
# the default of `bertwb.model.bert.BertConfig.max_position_embeddings`.
DEFAULT_MODEL_MAX_LENGTH = 512
FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
# transformers writes int(1e30) as model_max_length for "no limit"; anything this large says none.
_NO_LIMIT = 10**9


def build_tokenizer(vocab: dict[str, int] | None, lowercase: bool, strip_accents: bool | None = None) -> Tokenizer:
    """A BERT WordPiece tokenizer over ``vocab`` (token -> id), or an untrained one for ``None``.

    Its normaliser is always BERT's own (``BertNormalizer``), since that is the one normaliser transformers'
    ``BertTokenizerFast`` rebuilds from ``tokenizer_config.json``: any other would give other ids there.
    ``strip_accents`` None strips as BERT does, when lowercasing; it is stored as None whenever it says just
    that, so a tokenizer.json reads the same as before the setting existed.
    """
    model = models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##") if vocab else \
        models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##")
    tokenizer = Tokenizer(model)
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, lowercase=lowercase,
        strip_accents=None if strip_accents is None or strip_accents == lowercase else strip_accents)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    return tokenizer


def load_tokenizer(path: Path, lowercase: bool | None = None, strip_accents: bool | None = None) -> Tokenizer:
    """The tokenizer in ``path``: a ``tokenizer.json``, a ``vocab.txt``, or a folder holding either.

    Its file's padding and truncation are turned off (bertwb owns lengths; see the module docstring).
    A ``tokenizer.json``'s normaliser is kept exactly. A ``vocab.txt`` is cased as ``lowercase`` says, else as
    its folder's ``tokenizer_config.json`` says, else uncased; its accents are stripped as ``strip_accents``
    says, else as that file says, else as BERT does. Special tokens present in the vocabulary are kept whole in text,
    and the BERT template is set when the file has none. Unreadable or non-BERT files are one-line errors.
    """
    path = tokenizer_file(path)
    try:
        if path.suffix == ".json":
            tokenizer = Tokenizer.from_file(str(path))
            _check_wordpiece(tokenizer, path)
        else:
            lines = path.read_text(encoding="utf-8").splitlines()
            vocab = {token: i for i, token in enumerate(lines) if token}
            if len(vocab) != len(lines):
                raise BertwbError(f"{path}: blank or repeated lines; a vocab.txt has one distinct token per line")
            side = path.parent / "tokenizer_config.json"
            asked = lowercase is None or strip_accents is None  # read for what the caller left open
            said = json.loads(side.read_text(encoding="utf-8")) if asked and side.is_file() else {}
            if lowercase is None:
                lowercase = bool(said.get("do_lower_case", True))
            if strip_accents is None and isinstance(said.get("strip_accents"), bool):
                strip_accents = said["strip_accents"]
            tokenizer = build_tokenizer(vocab, lowercase, strip_accents)
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
    tokenizer.no_padding()  # [PAD] is never content: padding happens in a batch, with an attention mask
    tokenizer.no_truncation()  # each caller cuts to the length its config says
    return tokenizer


def _check_wordpiece(tokenizer: Tokenizer, path: Path) -> None:
    """A tokenizer.json must be BERT's kind: a WordPiece model whose ids run from 0 without a gap. Another
    model's pieces (BPE, Unigram) would be trained on as WordPiece ones and exported as a ``BertTokenizer``
    that gives other ids; a gap in the ids leaves a row of the embeddings that no token names."""
    kind = (json.loads(tokenizer.to_str()).get("model") or {}).get("type")
    if kind != "WordPiece":
        raise BertwbError(f"{path}: a {kind} tokenizer, not BERT's WordPiece; bertwb reads and exports WordPiece "
                          "only, and another model's pieces would give other ids in transformers than in training; "
                          "give a BERT model's tokenizer (or its vocab.txt), or let `bertwb vocab` train one")
    ids = tokenizer.get_vocab(with_added_tokens=True)
    by_id: dict[int, str] = {}
    for token, token_id in sorted(ids.items(), key=lambda item: item[1]):
        if token_id in by_id:
            raise BertwbError(f"{path}: tokens {by_id[token_id]!r} and {token!r} share id {token_id}; give each "
                              "token its own id")
        by_id[token_id] = token
    gap = next((i for i in range(len(by_id)) if i not in by_id), None)
    if gap is not None:
        raise BertwbError(f"{path}: no token has id {gap}, though ids run to {max(by_id):,} ({len(by_id):,} tokens); "
                          "a vocabulary's ids run from 0 without gaps: renumber the tokens")


def tokenizer_file(path: Path) -> Path:
    """The file `load_tokenizer` reads for ``path``: itself, or a folder's tokenizer.json (else vocab.txt)."""
    if path.is_dir():
        found = next((path / name for name in ("tokenizer.json", "vocab.txt") if (path / name).is_file()), None)
        if found is None:
            raise BertwbError(f"{path}: no tokenizer.json or vocab.txt in it; a model needs its tokenizer")
        path = found
    if not path.is_file():
        raise BertwbError(f"{path}: no such tokenizer file; point at a vocab.txt or tokenizer.json")
    return path


def tokenizer_digest(tokenizer: Tokenizer) -> str:
    """A digest of everything that decides a loaded tokenizer's ids (its JSON, padding and truncation off),
    for stage keys: a changed file at the same path is noticed, a changed padding setting is not."""
    return hashlib.sha256(tokenizer.to_str().encode("utf-8")).hexdigest()


def tokenizer_identity(path: Path, lowercase: bool | None = None, strip_accents: bool | None = None) -> dict[str, Any]:
    """The tokenizer at ``path`` for a stage key: the file read and the `tokenizer_digest` of what
    `load_tokenizer` makes of it. Cached by the files' size and modification time, since every
    ``bertwb status`` asks."""
    file = tokenizer_file(path)
    side = file.parent / "tokenizer_config.json"
    stats = tuple((p.stat().st_size, p.stat().st_mtime_ns) if p.is_file() else None for p in (file, side))
    return {"path": str(file), "tokenizer": _cached_digest(file, lowercase, strip_accents, stats)}


@functools.lru_cache(maxsize=32)
def _cached_digest(file: Path, lowercase: bool | None, strip_accents: bool | None, stats: tuple) -> str:
    return tokenizer_digest(load_tokenizer(file, lowercase, strip_accents))


def declared_lengths(path: Path) -> dict[str, Any]:
    """What the tokenizer's own files say about lengths — ``tokenizer.json``'s padding and truncation and
    ``tokenizer_config.json``'s ``model_max_length`` — recorded (import.json), never applied."""
    file = tokenizer_file(path)
    settings: dict[str, Any] = {"padding": None, "truncation": None}
    if file.suffix == ".json":
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            data = {}  # load_tokenizer says what is wrong with the file
        settings = {key: data.get(key) if isinstance(data, dict) else None for key in settings}
    return {**settings, "model_max_length": declared_max_length(file.parent)}


def declared_max_length(folder: Path | None) -> int | None:
    """The longest input ``folder``'s ``tokenizer_config.json`` says the model takes (``model_max_length``);
    None when it says nothing, or "no limit"."""
    side = folder / "tokenizer_config.json" if folder is not None else None
    if side is None or not side.is_file():
        return None
    try:
        value = json.loads(side.read_text(encoding="utf-8")).get("model_max_length")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < _NO_LIMIT else None


def write_tokenizer_files(tokenizer: Tokenizer, out: Path, model_max_length: int = DEFAULT_MODEL_MAX_LENGTH) -> None:
    """``FILES`` into ``out``, as ``BertTokenizerFast.from_pretrained`` reads them.

    ``tokenizer_config.json`` says of casing what the tokenizer's own normaliser does (`lowercases`).
    ``tokenizer.json`` is written without padding or truncation, so ``transformers`` encodes as bertwb does.
    """
    out.mkdir(parents=True, exist_ok=True)
    add_bert_template(tokenizer)
    tokenizer.no_padding()
    tokenizer.no_truncation()
    tokenizer.save(str(out / "tokenizer.json"))
    by_id = sorted(tokenizer.get_vocab(with_added_tokens=True).items(), key=lambda item: item[1])
    (out / "vocab.txt").write_text("".join(f"{token}\n" for token, _ in by_id), encoding="utf-8")
    write_json(out / "special_tokens_map.json", SPECIAL_TOKENS_MAP)
    write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "BertTokenizer", "do_lower_case": lowercases(tokenizer),
        "strip_accents": strips_accents(tokenizer),
        "tokenize_chinese_chars": True, "model_max_length": model_max_length, **SPECIAL_TOKENS_MAP})


def set_model_max_length(folder: Path, length: int) -> None:
    """Rewrite ``folder``'s tokenizer_config.json to declare ``length`` (same bytes when it already does)."""
    side = folder / "tokenizer_config.json"
    config = json.loads(side.read_text(encoding="utf-8"))
    if config.get("model_max_length") != length:
        write_json(side, {**config, "model_max_length": length})


def lowercases(tokenizer: Tokenizer) -> bool:
    """Whether the tokenizer's own normaliser lowercases (a loaded tokenizer.json decides, not the config):
    BERT's with ``lowercase``, a ``Lowercase`` step alone or in a sequence; none, or any other, does not."""
    return _lowercasing(json.loads(tokenizer.to_str()).get("normalizer"))


def _lowercasing(normalizer: dict[str, Any] | None) -> bool:
    kind = (normalizer or {}).get("type")
    if kind == "BertNormalizer":
        return bool(normalizer.get("lowercase", True))
    if kind == "Sequence":
        return any(_lowercasing(step) for step in normalizer.get("normalizers") or [])
    return kind == "Lowercase"


def strips_accents(tokenizer: Tokenizer) -> bool | None:
    """What the tokenizer's own BERT normaliser says of accents, as ``tokenizer_config.json`` says it: None
    (strip when lowercasing, as BERT), True or False; None for a normaliser of another kind."""
    normalizer = json.loads(tokenizer.to_str()).get("normalizer") or {}
    return normalizer.get("strip_accents") if normalizer.get("type") == "BertNormalizer" else None


def add_bert_template(tokenizer: Tokenizer) -> None:
    """``[CLS] A [SEP]`` and ``[CLS] A [SEP] B [SEP]`` with segment ids 0 and 1, as BERT's inputs."""
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
