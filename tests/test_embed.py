"""``bertwb embed`` and ``bertwb similar`` driven as a user does: vectors equal to a plain-torch reference on a
tiny sentence-transformers folder, windows, passthrough and order, the formats, ``--into`` keyed as a stage,
exact top-k, and one-line errors. Tests needing transformers or sentence-transformers skip without them."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import unicodedata
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner, Result

from bertwb.cli import cli
from bertwb.embed import search
from bertwb.embed.encoder import BATCH_TOKENS, Encoder
from bertwb.fast import linear as fast_linear
from bertwb.model import modeldir
from bertwb.model.bert import BertConfig, BertForPreTraining
from conftest import GLUE_WORDS, TOPIC_WORDS, assert_one_line_error, bf16_cpu
from publishedkit import plain_tokenizer, tiny_published_model, word_tokenizer

SENTENCES = ["the captain sailed the ship into the harbour .", "bread and butter with salt",
             "a comet in the night sky", "the crew and the anchor", "flour , oven and knife ! the soup",
             "star"]


def bertwb(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), input=stdin, prog_name="bertwb")


def embed(workdir: Path, *args: str, stdin: str | None = None) -> Result:
    result = bertwb("embed", "--workdir", str(workdir), *args, stdin=stdin)
    assert result.exit_code == 0, result.output
    return result


def vectors_of(result: Result) -> tuple[list, np.ndarray]:
    """The ids and vectors of embed's JSON lines on stdout."""
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    return [row["id"] for row in rows], np.array([row["embedding"] for row in rows], np.float64)


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def native_model(folder: Path, hidden: int = 32, seed: int = 0) -> Path:
    """A random two-layer bertwb model directory whose tokenizer makes every corpus word one token."""
    tokenizer = word_tokenizer(folder)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = BertForPreTraining(BertConfig(vocab_size=tokenizer.get_vocab_size(), num_layers=2, hidden_size=hidden,
                                              num_heads=2, intermediate_size=2 * hidden, max_position_embeddings=64))
        with torch.no_grad():
            for param in model.parameters():  # biases and LayerNorms too, so every part shows in the vectors
                param.add_(torch.randn_like(param) * 0.1)
    modeldir.save_model_dir(model, folder)
    return folder


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return native_model(tmp_path_factory.mktemp("model") / "m")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return write_lines(tmp_path / "texts.txt", SENTENCES)


# --- a sentence-transformers folder against plain torch -----------------------------------------------

def sentence_transformers_folder(base: Path, folder: Path, mode: str, normalize: bool) -> Path:
    """``base`` (a transformers BertModel with its tokenizer) with modules.json, 1_Pooling and 2_Normalize."""
    shutil.copytree(base, folder)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir()
    keys = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens", "max": "pooling_mode_max_tokens"}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, **{key: name == mode for name, key in keys.items()}}))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128, "do_lower_case": False}))
    return folder


@pytest.fixture(scope="module")
def hf_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    transformers = pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("hf") / "base"
    tiny_published_model(folder, transformers, "BertModel")
    return folder


def torch_reference(folder: Path, texts: list[str], mode: str, normalize: bool) -> np.ndarray:
    """Each text alone through transformers' BertModel, its last hidden states pooled in plain torch."""
    import transformers

    tokenizer = plain_tokenizer(folder)
    model = transformers.BertModel.from_pretrained(folder).eval()
    vectors = []
    with torch.no_grad():
        for text in texts:
            ids = torch.tensor([tokenizer.encode(text).ids])
            hidden = model(input_ids=ids).last_hidden_state[0]  # (T, H), no padding
            vector = {"cls": hidden[0], "mean": hidden.mean(0), "max": hidden.max(0).values}[mode]
            vectors.append(torch.nn.functional.normalize(vector, dim=0) if normalize else vector)
    return torch.stack(vectors).double().numpy()


@pytest.mark.parametrize("mode", ["mean", "cls", "max"])
@pytest.mark.parametrize("normalize", [False, True])
def test_a_sentence_transformers_folder_pools_as_its_config_says(hf_base: Path, tmp_path: Path, corpus: Path,
                                                                 mode: str, normalize: bool):
    folder = sentence_transformers_folder(hf_base, tmp_path / "st", mode, normalize)
    ids, ours = vectors_of(embed(tmp_path / "ws", str(corpus), "--model", str(folder)))  # pooling auto
    assert ids == list(range(1, len(SENTENCES) + 1))
    reference = torch_reference(folder, SENTENCES, mode, normalize)
    assert np.abs(ours - reference).max() <= 1e-5
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6) == normalize
    _, asked = vectors_of(embed(tmp_path / "ws", str(corpus), "--model", str(folder), "--pooling", "mean",
                                "--no-normalize"))  # options override the config
    assert np.abs(asked - torch_reference(folder, SENTENCES, "mean", False)).max() <= 1e-5


def test_sentence_transformers_loads_the_import_s_export_and_encodes_as_embed(hf_base: Path, tmp_path: Path,
                                                                                corpus: Path):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    source = sentence_transformers_folder(hf_base, tmp_path / "st", "max", True)
    imported, out = tmp_path / "imported", tmp_path / "out"
    result = bertwb("import-hf", str(source), "--out", str(imported), "--workdir", str(tmp_path / "ws"))
    assert result.exit_code == 0 and "kept its sentence-transformers pooling: max, normalised" in result.stderr
    assert bertwb("export", str(out), "--checkpoint", str(imported), "--format", "sentence-transformers",
                  "--workdir", str(tmp_path / "ws")).exit_code == 0
    assert {"modules.json", "1_Pooling", "2_Normalize", "sentence_bert_config.json"} <= {p.name for p in out.iterdir()}
    _, ours = vectors_of(embed(tmp_path / "ws", str(corpus), "--model", str(imported)))
    theirs = sentence_transformers.SentenceTransformer(str(out), device="cpu").encode(SENTENCES, batch_size=32)
    assert np.abs(ours - theirs).max() <= 1e-4
    assert np.abs(ours - torch_reference(source, SENTENCES, "max", True)).max() <= 1e-5


def test_a_model_without_pooling_files_exports_mean_pooling(model: Path, tmp_path: Path, corpus: Path):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    out = tmp_path / "out"
    assert bertwb("export", str(out), "--checkpoint", str(model), "--format", "sentence-transformers",
                  "--workdir", str(tmp_path / "ws")).exit_code == 0
    assert not (out / "2_Normalize").exists()
    _, ours = vectors_of(embed(tmp_path / "ws", str(corpus), "--model", str(model)))
    theirs = sentence_transformers.SentenceTransformer(str(out), device="cpu").encode(SENTENCES)
    assert np.abs(ours - theirs).max() <= 1e-4


# --- layers, windows, inputs and formats --------------------------------------------------------------

def test_layers_concatenate_or_average(model: Path, tmp_path: Path, corpus: Path):
    ws = tmp_path / "ws"
    _, last = vectors_of(embed(ws, str(corpus), "--model", str(model), "--layers", "-1"))
    _, before = vectors_of(embed(ws, str(corpus), "--model", str(model), "--layers", "-2"))
    _, both = vectors_of(embed(ws, str(corpus), "--model", str(model), "--layers", "-2,-1"))
    _, averaged = vectors_of(embed(ws, str(corpus), "--model", str(model), "--layers", "-2,-1", "--combine", "mean"))
    assert both.shape == (len(SENTENCES), 64) and last.shape == (len(SENTENCES), 32)
    assert np.allclose(both[:, :32], before, atol=1e-6) and np.allclose(both[:, 32:], last, atol=1e-6)
    assert np.allclose(averaged, (before + last) / 2, atol=1e-6)  # mean pooling is linear
    assert not np.allclose(before, last, atol=1e-3)


def test_long_texts_are_split_into_windows_whose_vectors_are_averaged(model: Path, tmp_path: Path):
    words = "ship sail harbour wave captain anchor deck crew storm tide".split()  # one token each
    texts = write_lines(tmp_path / "t.txt", [" ".join(words), "the moon"])
    result = embed(tmp_path / "ws", str(texts), "--model", str(model), "--max-length", "6")
    assert "1 of 2 texts had more than 6 tokens: split into windows whose vectors are averaged" in result.stderr
    _, split = vectors_of(result)
    pieces = write_lines(tmp_path / "p.txt", [" ".join(words[0:4]), " ".join(words[4:8]), " ".join(words[8:])])
    _, windows = vectors_of(embed(tmp_path / "ws", str(pieces), "--model", str(model)))
    assert np.abs(split[0] - windows.mean(0)).max() <= 1e-6
    _, whole = vectors_of(embed(tmp_path / "ws", str(texts), "--model", str(model)))
    assert np.abs(whole[1] - split[1]).max() <= 1e-6 and np.abs(whole[0] - split[0]).max() > 1e-3


def test_table_input_keeps_its_order_ids_and_columns(model: Path, tmp_path: Path, corpus: Path):
    records = [{"doc": f"d{i}", "body": text, "lang": "en", "meta": {"n": i}} for i, text in enumerate(SENTENCES)]
    records.reverse()  # an order no sort would give back
    table = tmp_path / "rows.jsonl"
    table.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    ids, vectors = vectors_of(embed(tmp_path / "ws", str(table), "--model", str(model), "--text-column", "body",
                                    "--id-column", "doc"))
    rows = [json.loads(line) for line in
            embed(tmp_path / "ws", str(table), "--model", str(model), "--text-column", "body",
                  "--id-column", "doc").stdout.splitlines()]
    assert ids == [r["doc"] for r in records]
    assert [(r["body"], r["lang"], r["meta"]) for r in rows] == [(r["body"], r["lang"], r["meta"]) for r in records]
    assert "doc" not in rows[0] and list(rows[0])[:2] == ["id", "embedding"]
    _, plain = vectors_of(embed(tmp_path / "ws", str(corpus), "--model", str(model)))
    assert np.abs(vectors - plain[::-1]).max() <= 1e-6  # the same text, the same vector, in input order


def test_stdin_parquet_and_npy(model: Path, tmp_path: Path):
    ws, stdin = tmp_path / "ws", "\n".join(SENTENCES[:3]) + "\n"
    ids, lines = vectors_of(embed(ws, "--model", str(model), stdin="\n" + stdin))
    assert ids == [2, 3, 4]  # the lines as a user counts them, the blank one too
    embed(ws, "--model", str(model), "-o", str(tmp_path / "v.parquet"), stdin=stdin)
    table = pq.read_table(tmp_path / "v.parquet")
    column = table.schema.field("embedding").type
    assert pa.types.is_fixed_size_list(column) and column.list_size == 32 and column.value_type == pa.float32()
    assert table.column("id").to_pylist() == [1, 2, 3] and table.column("text").to_pylist() == SENTENCES[:3]
    stored = np.array(table.column("embedding").to_pylist())
    assert np.abs(stored - lines).max() <= 1e-6
    assert json.loads(table.schema.metadata[b"bertwb.embed"])["settings"]["pooling"] == ["mean"]
    embed(ws, "--model", str(model), "-o", str(tmp_path / "v.npy"), "--dtype", "float16", stdin=stdin)
    half = np.load(tmp_path / "v.npy")
    assert half.dtype == np.float16 and half.shape == (3, 32) and np.abs(half - lines).max() <= 1e-2


# --- token vectors ----------------------------------------------------------------------------------------

TOKEN_TEXTS = ["The Ships sailed , unknown Stärs !", "star", "a comet in the night sky with the moon and stars ."]


def _plain(text: str) -> str:
    """``text`` as the uncased tokenizer sees it: lowercased, accents stripped."""
    return "".join(c for c in unicodedata.normalize("NFD", text.lower()) if not unicodedata.combining(c))


def _token_rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def _plain_torch_tokens(folder: Path, text: str, room: int) -> tuple[list[str], np.ndarray]:
    """Each piece of ``text`` and its last-layer vector, from bertwb's reference BertModel run on each window of
    ``room`` pieces alone (between [CLS] and [SEP], no padding, no batch)."""
    tokenizer = plain_tokenizer(folder)
    model, _ = modeldir.load_model(modeldir.open_model_dir(folder, "--model"), torch.device("cpu"))
    encoding = tokenizer.encode(text, add_special_tokens=False)
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    pieces = []
    with torch.no_grad():
        for start in range(0, len(encoding.ids), room):
            ids = torch.tensor([[cls, *encoding.ids[start:start + room], sep]])
            hidden, _ = model.eval().bert(ids)  # (1, T, H)
            pieces.append(hidden[0, 1:-1])
    return encoding.tokens, torch.cat(pieces).double().numpy()


def test_token_vectors_are_each_piece_s_hidden_state_and_offsets_slice_the_text(model: Path, tmp_path: Path):
    texts = write_lines(tmp_path / "t.txt", TOKEN_TEXTS)
    ws, out = tmp_path / "ws", tmp_path / "tokens.parquet"
    result = embed(ws, str(texts), "--model", str(model), "--tokens", "--max-length", "8", "--batch-size", "2",
                   "-o", str(out))  # windows of 6 pieces and shorter ones, in batches of one length
    assert "2 of 3 texts had more than 8 tokens: split into windows each token's vector is its window's" \
        in result.stderr
    rows = _token_rows(out)
    assert [row["id"] for row in rows] == [1, 2, 3] and [row["text"] for row in rows] == TOKEN_TEXTS
    for row, text in zip(rows, TOKEN_TEXTS, strict=True):
        pieces, reference = _plain_torch_tokens(model, text, room=6)
        assert row["tokens"] == pieces and len(row["offsets"]) == len(pieces) == len(row["embedding"])
        assert np.abs(np.array(row["embedding"]) - reference).max() <= 1e-5
        for piece, (start, end) in zip(pieces, row["offsets"], strict=True):
            spelled = _plain(text[start:end])
            assert spelled == piece.removeprefix("##") or (piece == "[UNK]" and spelled.isalpha()), (piece, start)
    assert rows[0]["tokens"][:3] == ["the", "ship", "##s"] and "[UNK]" in rows[0]["tokens"]
    lines = [json.loads(line) for line in embed(ws, str(texts), "--model", str(model), "--tokens",
                                                "--max-length", "8").stdout.splitlines()]
    assert [(line["id"], line["tokens"], line["offsets"]) for line in lines] == \
        [(row["id"], row["tokens"], row["offsets"]) for row in rows]
    assert np.abs(np.array(lines[0]["embedding"]) - np.array(rows[0]["embedding"])).max() <= 1e-6


def test_word_vectors_are_each_word_s_first_piece_spanning_the_word(model: Path, tmp_path: Path):
    texts, ws = write_lines(tmp_path / "t.txt", TOKEN_TEXTS), tmp_path / "ws"
    embed(ws, str(texts), "--model", str(model), "--tokens", "-o", str(tmp_path / "pieces.parquet"))
    embed(ws, str(texts), "--model", str(model), "--tokens", "words", "--normalize", "-o", str(tmp_path / "w.parquet"))
    for pieces, words, text in zip(_token_rows(tmp_path / "pieces.parquet"), _token_rows(tmp_path / "w.parquet"),
                                   TOKEN_TEXTS, strict=True):
        assert words["tokens"] == [text[start:end] for start, end in words["offsets"]]
        assert words["tokens"] == text.replace(",", " , ").replace("!", " ! ").replace(".", " . ").split()
        first = [i for i, piece in enumerate(pieces["tokens"]) if not piece.startswith("##")]
        expected = np.array(pieces["embedding"])[first]
        expected /= np.linalg.norm(expected, axis=1, keepdims=True)  # --normalize scales each token's vector
        assert np.abs(np.array(words["embedding"]) - expected).max() <= 1e-6
    assert words["tokens"][:4] == ["a", "comet", "in", "the"]
    first_text = _token_rows(tmp_path / "w.parquet")[0]
    at = TOKEN_TEXTS[0].index("Stärs")  # a word of two pieces, star ##s, found in the text as written
    assert first_text["tokens"][5] == "Stärs" and first_text["offsets"][5] == [at, at + 5]


def test_token_vectors_of_chosen_layers_equal_transformers_hidden_states(hf_base: Path, tmp_path: Path):
    import transformers

    texts = write_lines(tmp_path / "t.txt", TOKEN_TEXTS)
    rows = [json.loads(line) for line in embed(tmp_path / "ws", str(texts), "--model", str(hf_base), "--tokens",
                                               "--layers", "-2,-1").stdout.splitlines()]
    tokenizer = plain_tokenizer(hf_base)
    reference = transformers.BertModel.from_pretrained(hf_base).eval()
    with torch.no_grad():
        for row, text in zip(rows, TOKEN_TEXTS, strict=True):
            states = reference(input_ids=torch.tensor([tokenizer.encode(text).ids]), output_hidden_states=True)
            expected = torch.cat(states.hidden_states[-2:], -1)[0, 1:-1]  # (pieces, 2H): [CLS] and [SEP] left out
            assert np.abs(np.array(row["embedding"]) - expected.double().numpy()).max() <= 1e-5


def test_token_vectors_go_into_a_table_that_unnests_to_a_row_per_token(model: Path, tmp_path: Path):
    texts, ws = write_lines(tmp_path / "t.txt", TOKEN_TEXTS), tmp_path / "ws"
    embed(ws, str(texts), "--model", str(model), "--tokens", "--into", "tokens_table")
    query = bertwb("sql", "--workdir", str(ws), "--format", "csv", "select id, unnest(tokens) as token, "
                   "unnest(offsets)[1] as start, len(unnest(embedding)) as width from tokens_table where id = 2")
    assert query.stdout == "id,token,start,width\n2,star,0,32\n"
    assert_one_line_error(bertwb("similar", "a star", "--in", "tokens_table", "--workdir", str(ws)),
                          "tokens_table", "token vectors", "without --tokens")
    assert_one_line_error(bertwb("embed", str(texts), "--model", str(model), "--tokens", "--pooling", "cls",
                                 "--workdir", str(ws)), "--pooling cls", "--tokens", "not pooled")
    assert_one_line_error(bertwb("embed", str(texts), "--model", str(model), "--tokens", "-o",
                                 str(tmp_path / "t.npy"), "--workdir", str(ws)), "--tokens", "t.npy", ".parquet")
    clash = tmp_path / "rows.csv"
    clash.write_text("text,offsets\nthe ship,3\n")
    assert_one_line_error(bertwb("embed", str(clash), "--model", str(model), "--tokens", "--workdir", str(ws)),
                          "'offsets'", "rename")


# --- batches and precision --------------------------------------------------------------------------------

def test_batches_hold_windows_of_one_length_within_the_budgets():
    lengths = np.array([5, 3, 5, 9, 3, 3, 5, 2000, 1500, 3, 9, 5])
    encoder = Encoder.__new__(Encoder)
    encoder.batch_size = 2
    batches = encoder._batches(lengths)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))  # each window once
    assert all(len(set(lengths[batch])) == 1 and len(batch) <= 2 for batch in batches)  # no padding
    assert [int(lengths[batch[0]]) for batch in batches] == sorted(int(lengths[b[0]]) for b in batches)
    encoder.batch_size, many = 10_000, np.repeat([7, 5000], 3000)
    sizes = [(len(batch), int(many[batch[0]])) for batch in encoder._batches(many)]
    assert all(rows * length <= max(BATCH_TOKENS, length) for rows, length in sizes)
    assert sizes[0] == (BATCH_TOKENS // 7, 7) and sizes[-1] == (1, 5000)  # short windows many to a batch


def test_bf16_vectors_stay_close_to_fp32_ones(model: Path, tmp_path: Path, corpus: Path,
                                               monkeypatch: pytest.MonkeyPatch):
    _, full = vectors_of(embed(tmp_path / "ws", str(corpus), "--model", str(model), "--precision", "fp32"))
    _, half = vectors_of(embed(tmp_path / "ws", str(corpus), "--model", str(model), "--precision", "bf16"))
    bf16_cpu(monkeypatch)  # where auto picks bf16, it gives the same vectors as asking for it
    _, auto = vectors_of(embed(tmp_path / "ws", str(corpus), "--model", str(model), "--precision", "auto"))
    cosine = (full * half).sum(1) / (np.linalg.norm(full, axis=1) * np.linalg.norm(half, axis=1))
    assert cosine.min() >= 0.999 and 0 < np.abs(full - half).max() <= 2e-2 * np.abs(full).max()
    assert np.array_equal(auto, half)


@pytest.mark.skipif(not fast_linear.onednn_available(), reason="this torch has no oneDNN")
def test_fp32_vectors_multiply_through_onednn_and_bf16_ones_through_autocast(model: Path, tmp_path: Path, corpus: Path,
                                                                             monkeypatch: pytest.MonkeyPatch):
    shapes: list[tuple[int, ...]] = []
    product = fast_linear.onednn_product
    monkeypatch.setattr(fast_linear, "onednn_product",
                        lambda x, *rest: shapes.append(tuple(x.shape)) or product(x, *rest))
    _, full = vectors_of(embed(tmp_path / "ws", str(corpus), "--model", str(model), "--precision", "fp32"))
    assert shapes and all(cols == 32 or cols == 64 for _, cols in shapes)  # hidden 32, intermediate 64
    made = len(shapes)
    _, plain = vectors_of(embed(tmp_path / "ws", str(corpus), "--model", str(model), "--precision", "fp32",
                                "--set", "pretrain.cpu_fast_paths=false"))  # nn.Linear's (MKL's) products
    assert len(shapes) == made and np.abs(full - plain).max() <= 1e-5  # the same vectors up to rounding
    embed(tmp_path / "ws", str(corpus), "--model", str(model), "--precision", "bf16")
    assert len(shapes) == made  # under autocast torch sends the products to oneDNN itself


def test_bf16_is_obeyed_where_the_cpu_would_emulate_it_and_auto_is_fp32_there(model: Path, tmp_path: Path,
                                                                              corpus: Path):
    asked = bertwb("embed", str(corpus), "--model", str(model), "--precision", "bf16", "--workdir",
                   str(tmp_path / "ws"), "-v", "-o", str(tmp_path / "b.pq"))
    assert asked.exit_code == 0 and "precision bf16: set; this CPU has no bf16 matrix instructions, so bf16 is " \
        "emulated" in asked.output, asked.output
    embed(tmp_path / "ws", str(corpus), "--model", str(model), "-o", str(tmp_path / "a.pq"))  # auto, the default
    for name, precision in (("b.pq", "bf16"), ("a.pq", "fp32")):
        settings = json.loads(pq.read_table(tmp_path / name).schema.metadata[b"bertwb.embed"])["settings"]
        assert settings["precision"] == precision  # as it resolved here: how the vectors were computed


# --- --into, status and similar --------------------------------------------------------------------------

def _status(ws: Path) -> dict[str, dict]:
    result = bertwb("status", "--workdir", str(ws), "--json")
    assert result.exit_code == 0, result.output
    return {row["stage"]: row for row in json.loads(result.stdout)}


def test_into_stores_a_table_keyed_like_a_stage(model: Path, tmp_path: Path, corpus: Path):
    ws = tmp_path / "ws"
    manifest = ws / "manifests" / "embed" / "vecs.json"
    first = embed(ws, str(corpus), "--model", str(model), "--into", "vecs")
    assert first.stdout == "" and "into table vecs" in first.stderr
    with duckdb.connect(str(ws / "bertwb.duckdb"), read_only=True) as con:
        assert con.execute("select data_type from information_schema.columns where table_name = 'vecs' "
                           "and column_name = 'embedding'").fetchone()[0] == "FLOAT[32]"
        assert con.execute("select list(id order by id) from vecs").fetchone()[0] == list(range(1, 7))
    assert _status(ws)["embed/vecs"]["state"] == "fresh" and _status(ws)["embed/vecs"]["rows"] == {"vecs": 6}
    built = json.loads(manifest.read_text())["build"]

    again = embed(ws, str(corpus), "--model", str(model), "--into", "vecs")
    assert "embed/vecs: fresh (key " in again.stderr and "skipped" in again.stderr
    assert json.loads(manifest.read_text())["build"] == built  # nothing ran, nothing was rewritten
    corpus.write_bytes(corpus.read_bytes())  # the same rows, a new modification time: still nothing to embed
    os.utime(corpus, ns=(corpus.stat().st_atime_ns, corpus.stat().st_mtime_ns + 10**9))
    again = embed(ws, str(corpus), "--model", str(model), "--into", "vecs")
    assert "skipped" in again.stderr and json.loads(manifest.read_text())["build"] == built

    embed(ws, str(corpus), "--model", str(model), "--into", "vecs", "--pooling", "cls")  # other settings: rebuilt
    assert json.loads(manifest.read_text())["build"] != built
    assert json.loads(manifest.read_text())["settings"]["pooling"] == ["cls"]

    write_lines(corpus, SENTENCES[:2])
    row = _status(ws)["embed/vecs"]
    assert row["state"] == "stale" and row["reason"] == f"input changed: {corpus.resolve()}"
    query = bertwb("sql", "--workdir", str(ws), "--format", "csv",
                   "select id from vecs order by array_cosine_similarity(embedding, "
                   "(select embedding from vecs where id = 3)) desc limit 1")
    assert query.stdout == "id\n3\n"


def test_auto_precision_keys_a_table_alike_on_every_cpu_and_an_explicit_one_rebuilds_it(
        model: Path, tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch):
    ws, manifest = tmp_path / "ws", tmp_path / "ws" / "manifests" / "embed" / "vecs.json"
    with monkeypatch.context() as patched:  # made where auto resolves to bf16
        bf16_cpu(patched)
        embed(ws, str(corpus), "--model", str(model), "--into", "vecs")
    made = json.loads(manifest.read_text())
    assert made["settings"]["precision"] == "bf16"  # the record says how the vectors were computed
    plain = bertwb("embed", str(corpus), "--model", str(model), "--into", "vecs", "--workdir", str(ws), "-v")
    assert "precision auto → fp32" in plain.output and "skipped" in plain.output, plain.output  # auto: same key
    assert json.loads(manifest.read_text())["build"] == made["build"]
    embed(ws, str(corpus), "--model", str(model), "--into", "vecs", "--precision", "fp32")  # asked for: rebuilt
    rebuilt = json.loads(manifest.read_text())
    assert rebuilt["build"] != made["build"] and rebuilt["settings"]["precision"] == "fp32"
    assert rebuilt["key"] != made["key"]


def test_similar_returns_the_brute_force_top_k(model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    words = sorted({w for topic in TOPIC_WORDS.values() for w in topic.split()} | set(GLUE_WORDS))
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(words, 5)) for _ in range(40)]
    texts, ws = write_lines(tmp_path / "t.txt", lines), tmp_path / "ws"
    embed(ws, str(texts), "--model", str(model), "--into", "many", "--layers", "-2,-1")
    embed(ws, str(texts), "--model", str(model), "--layers", "-2,-1", "-o", str(tmp_path / "many.parquet"))
    _, stored = vectors_of(embed(ws, str(texts), "--model", str(model), "--layers", "-2,-1"))
    query = "the storm and the anchor"
    _, [vector] = vectors_of(embed(ws, "--model", str(model), "--layers", "-2,-1", stdin=query))
    cosine = stored @ vector / (np.linalg.norm(stored, axis=1) * np.linalg.norm(vector))
    expected = (np.argsort(-cosine, kind="stable")[:7] + 1).tolist()
    monkeypatch.setattr(search, "rows_per_batch", lambda dimension: 6)  # the best k carried across batches
    for where in ("many", str(tmp_path / "many.parquet")):
        result = bertwb("similar", query, "--in", where, "--top-k", "7", "--json", "--workdir", str(ws))
        assert result.exit_code == 0, result.output
        found = json.loads(result.stdout)
        assert [row["id"] for row in found] == expected
        assert np.allclose([row["score"] for row in found], cosine[np.array(expected) - 1], atol=1e-5)
        assert found[0]["text"] == lines[expected[0] - 1]
    table = bertwb("similar", query, "--in", "many", "--top-k", "2", "--workdir", str(ws))
    assert table.exit_code == 0 and lines[expected[0] - 1] in table.stdout


# --- bad input: one line, exit 1 -------------------------------------------------------------------------

def test_bad_input_is_one_line(model: Path, tmp_path: Path, corpus: Path):
    ws = str(tmp_path / "ws")
    assert_one_line_error(bertwb("embed", str(corpus), "--model", "nosuchmodel", "--workdir", ws),
                          "--model nosuchmodel", "no such folder", "pretrain")
    table = tmp_path / "t.csv"
    table.write_text("body,label\nthe ship,1\n")
    assert_one_line_error(bertwb("embed", str(table), "--model", str(model), "--workdir", ws),
                          str(table), "no column 'text'", "--text-column")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    assert_one_line_error(bertwb("embed", str(empty), "--model", str(model), "--workdir", ws), str(empty), "empty")
    assert_one_line_error(bertwb("embed", str(corpus), "--model", str(model), "--layers", "-9", "--workdir", ws),
                          "--layers -9", "2 layers")
    assert_one_line_error(bertwb("embed", str(corpus), "--model", str(model), "--format", "npy", "--workdir", ws),
                          "--output")
    assert_one_line_error(bertwb("embed", str(corpus), "--model", str(model), "--into", "pairs", "--workdir", ws),
                          "--into pairs", "stages")
    assert_one_line_error(bertwb("similar", "a query", "--in", "nothing", "--workdir", ws),
                          "--in nothing", "no such embedding table")
    assert_one_line_error(bertwb("embed", "--workdir", ws, stdin="the ship\n"), "--model pretrain", "bertwb pretrain")
    assert bertwb("sql", "--write", "--workdir", ws, "create table mine as select 1 as a").exit_code == 0
    assert_one_line_error(bertwb("embed", str(corpus), "--model", str(model), "--into", "mine", "--workdir", ws),
                          "--into mine", "did not make")


def test_a_query_of_another_dimension_than_the_table_is_one_line(model: Path, tmp_path: Path, corpus: Path):
    ws = tmp_path / "ws"
    wider = native_model(tmp_path / "wider", hidden=48)
    embed(ws, str(corpus), "--model", str(model), "--into", "vecs")
    assert_one_line_error(bertwb("similar", "the ship", "--in", "vecs", "--model", str(wider), "--workdir", str(ws)),
                          "vecs", "32 dimensions", "48")


def test_modules_bertwb_does_not_compute_refuse_embed_but_not_import(hf_base: Path, tmp_path: Path, corpus: Path):
    folder = sentence_transformers_folder(hf_base, tmp_path / "st", "mean", False)
    modules = json.loads((folder / "modules.json").read_text())
    modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    (folder / "modules.json").write_text(json.dumps(modules))
    assert_one_line_error(bertwb("embed", str(corpus), "--model", str(folder), "--workdir", str(tmp_path / "ws")),
                          "modules.json", "Dense", "use sentence-transformers")
    imported = bertwb("import-hf", str(folder), "--out", str(tmp_path / "imported"), "--workdir", str(tmp_path / "ws"))
    assert imported.exit_code == 0 and "its sentence-transformers pooling was not kept" in imported.stderr
    assert not (tmp_path / "imported" / "modules.json").exists()


# --- chunks: the input streamed, the output as if read whole ------------------------------------------------

def _chunk_input(path: Path) -> tuple[Path, list[dict]]:
    """JSONL rows whose columns change type past the first chunks (ints then floats, ints then words, nulls then
    objects), some texts long enough to be split into windows, ids in no sorted order."""
    words = "ship sail harbour wave captain anchor deck crew storm tide".split()
    records = []
    for i in range(23):
        text = " ".join(words[(i + j) % len(words)] for j in range(1 + (i * 7) % 19))
        records.append({"doc": f"d{(i * 5) % 23}", "body": text, "n": i if i < 12 else i + 0.5,
                        "mixed": i if i < 17 else "many", "maybe": None if i < 20 else {"k": i}})
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path, records


@pytest.mark.parametrize("options, name", [
    (("--max-length", "8"), "v.npy"),
    (("--max-length", "8"), "v.parquet"),
    (("--max-length", "8", "--dtype", "float16"), "v.jsonl"),
    (("--tokens", "words", "--max-length", "8"), "v.parquet"),
    (("--tokens", "--max-length", "8"), "v.jsonl"),
])
def test_a_chunked_run_writes_what_one_chunk_writes(model: Path, tmp_path: Path, options: tuple[str, ...],
                                                    name: str):
    """Byte for byte with one window a batch: a text's vector then never depends on which windows share its batch
    (float32 products round by the batch's size, so with full batches a chunked run's texts that land in other
    batches differ in the last bits, as they do between two inputs today)."""
    table, _ = _chunk_input(tmp_path / "rows.jsonl")
    common = (str(table), "--model", str(model), "--text-column", "body", "--id-column", "doc", *options)
    whole, chunked = tmp_path / "whole", tmp_path / "chunked"
    whole.mkdir(), chunked.mkdir()
    embed(tmp_path / "ws", *common, "--batch-size", "1", "-o", str(whole / name))
    result = embed(tmp_path / "ws", *common, "--batch-size", "1", "-o", str(chunked / name), "--chunk-rows", "4")
    assert "of 23 texts had more than 8 tokens" in result.stderr  # split counted over all 6 chunks
    if name.endswith(".parquet"):
        ours, theirs = pq.read_table(chunked / name), pq.read_table(whole / name)
        assert ours.schema == theirs.schema and ours.schema.metadata == theirs.schema.metadata
        assert ours.equals(theirs)  # every value, vectors bit for bit
        assert pq.ParquetFile(chunked / name).metadata.num_row_groups == 6
        assert ours.schema.field("n").type == pa.float64() and ours.schema.field("mixed").type == pa.string()
    else:
        assert (chunked / name).read_bytes() == (whole / name).read_bytes()
    if name == "v.npy":  # batched as usual: the same vectors but for the last bits
        embed(tmp_path / "ws", *common, "-o", str(chunked / "batched.npy"), "--chunk-rows", "4")
        assert np.abs(np.load(chunked / "batched.npy") - np.load(whole / name)).max() <= 1e-6


def test_a_chunked_into_table_equals_one_chunk_s_and_keeps_its_key(model: Path, tmp_path: Path):
    table, records = _chunk_input(tmp_path / "rows.jsonl")
    common = (str(table), "--model", str(model), "--text-column", "body", "--id-column", "doc", "--max-length", "8")
    embed(tmp_path / "ws", *common, "--into", "whole", "--batch-size", "1")
    embed(tmp_path / "ws", *common, "--into", "chunked", "--chunk-rows", "5", "--batch-size", "1")
    with duckdb.connect(str(tmp_path / "ws" / "bertwb.duckdb"), read_only=True) as con:
        ours, theirs = (con.sql(f"select * from {name}").to_arrow_table() for name in ("chunked", "whole"))
        assert con.sql("describe chunked").fetchall() == con.sql("describe whole").fetchall()
    assert ours.equals(theirs) and ours.num_rows == 23
    assert [row["id"] for row in ours.to_pylist()] == [r["doc"] for r in records]  # input order
    manifests = tmp_path / "ws" / "manifests" / "embed"
    chunked_key, whole_key = (json.loads((manifests / f"{name}.json").read_text())["key"]
                              for name in ("chunked", "whole"))
    assert chunked_key == whole_key
    # The digest is still sha256 of the canonical JSON of [ids, columns] read whole: keys made before chunks hold.
    columns = {name: [r.get(name) for r in records] for name in ("body", "n", "mixed", "maybe")}
    canonical = json.dumps([[r["doc"] for r in records], columns], sort_keys=True, default=str, ensure_ascii=False)
    assert json.loads((manifests / "chunked.json").read_text())["input"]["digest"] == \
        hashlib.sha256(canonical.encode()).hexdigest()
    assert not list((tmp_path / "ws").glob(".embed-*"))  # the rows' spool file is gone
    again = embed(tmp_path / "ws", *common, "--into", "whole", "--chunk-rows", "3")
    assert "embed/whole: fresh" in again.stderr  # neither the chunk nor the batch size is part of the key


def test_ids_repeated_chunks_apart_and_bad_lines_late_in_the_input_are_one_line(model: Path, tmp_path: Path):
    ws = str(tmp_path / "ws")
    rows = tmp_path / "rows.csv"
    rows.write_text("id,text\n" + "".join(f"{i},text {i}\n" for i in range(30)) + "7,again\n")
    assert_one_line_error(bertwb("embed", str(rows), "--model", str(model), "--chunk-rows", "4", "--workdir", ws),
                          f"{rows}:32", "id '7' is also the id of line 9")
    late = tmp_path / "late.txt"
    late.write_bytes(b"".join(b"line %d\r\n" % i for i in range(40)) + b"bad \xff byte\n" + b"ok\n")
    assert_one_line_error(bertwb("embed", str(late), "--model", str(model), "--chunk-rows", "4", "--workdir", ws),
                          f"{late}:41", "not UTF-8 text (byte 0xff)")
