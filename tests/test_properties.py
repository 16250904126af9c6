"""Property tests (hypothesis), CI-sized: few examples, derandomized, each reusing one built workspace.

* ingest: any bytes, in any supported container and format, are read or skipped with a counted
  reason: never a crash, a traceback or a partial table.
* pairs: for any small corpus, whatever vocabulary it gets, every instance has BERT's layout and
  lengths, its segment ids, the masks the rules give, and an NSP label that means what it says.
* sql: no statement built from a list of writing forms changes a file or the database without --write.
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertwb.data.pairs import load_pairs
from conftest import Project, assert_one_line_error, make_documents, write_bert_format

MAX_SENTENCE_CHARS = 2_000  # the default of ingest.max_sentence_chars
CI = settings(deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _manifest(project: Project, stage: str) -> dict[str, Any]:
    return json.loads((project.workspace / "manifests" / f"{stage}.json").read_text())


def _connect(project: Project) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(str(project.workspace / "bertwb.duckdb"), read_only=True)


# --- ingest -----------------------------------------------------------------------------------------

_EXTENSIONS = {"bert": ".txt", "paragraphs": ".txt", "jsonl": ".jsonl", "csv": ".csv", "parquet": ".parquet"}
_text = st.text(max_size=60)
_records = st.lists(st.one_of(
    st.dictionaries(st.sampled_from(["text", "body", ""]), st.one_of(_text, st.none(), st.integers()), max_size=3),
    st.lists(st.integers(), max_size=3), _text), max_size=6).map(lambda rs: "\n".join(map(json.dumps, rs)).encode())
_contents = st.one_of(
    st.binary(max_size=400),
    st.lists(_text, max_size=10).map(lambda lines: "\n".join(lines).encode("utf-8")),
    st.lists(_text, max_size=10).map(lambda lines: "\n".join(lines).encode("utf-16")),
    st.lists(_text, max_size=5).map(lambda lines: "\n".join(lines).encode("utf-32")),
    _records,
    st.just(b"text\n") | st.just(b"") | st.just(b"PAR1"),
)


def _contained(data: bytes, container: str, cut: float | None) -> bytes:
    if container == "gz":
        data = gzip.compress(data, mtime=0)
    elif container == "zst":
        data = zstandard.ZstdCompressor().compress(data)
    return data[: int(len(data) * cut)] if cut is not None else data


def _good_file(folder: Path, fmt: str) -> str:
    """A file of format ``fmt`` with two documents, beside the hostile one; returns its name."""
    name = f"good{_EXTENSIONS[fmt]}"
    texts = ["The good file's first document.", "Its second one, longer than the first."]
    if fmt == "parquet":
        pq.write_table(pa.table({"text": texts}), folder / name)
    elif fmt == "csv":
        (folder / name).write_text("text\n" + "\n".join(f'"{t}"' for t in texts) + "\n")
    elif fmt == "jsonl":
        (folder / name).write_text("\n".join(json.dumps({"text": t}) for t in texts) + "\n")
    else:
        (folder / name).write_text("\n\n".join(texts) + "\n")
    return name


@pytest.fixture(scope="module")
def ingest_project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    root = tmp_path_factory.mktemp("ingest_properties")
    write_bert_format(root / "corpus" / "a.txt", make_documents(20, seed=1))
    project = Project(root)
    project.write_config("ingest:\n  inputs: [corpus]\n  dedupe: false\n  valid_fraction: 0.2\n")
    project.run("ingest")
    return project


_examples = itertools.count()


@settings(CI, max_examples=60)
@given(data=_contents, fmt=st.sampled_from(sorted(_EXTENSIONS)), container=st.sampled_from(["", "gz", "zst"]),
       cut=st.none() | st.floats(0.0, 0.99), with_good_file=st.booleans())
def test_ingest_reads_or_skips_any_bytes_and_never_leaves_a_partial_table(
        ingest_project: Project, data: bytes, fmt: str, container: str, cut: float | None, with_good_file: bool):
    project = ingest_project
    folder = project.root / f"example{next(_examples)}"
    folder.mkdir()
    hostile = f"hostile{_EXTENSIONS[fmt]}" + (f".{container}" if container and fmt != "parquet" else "")
    (folder / hostile).write_bytes(_contained(data, container, cut if container else None))
    good = _good_file(folder, fmt) if with_good_file else None
    before = (project.workspace / "manifests" / "ingest.json").read_bytes()

    result = project.run("ingest", "--set", f"ingest.inputs=[{folder.name}]", "--set", f"ingest.format={fmt}",
                         expect=None)
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    if result.exit_code != 0:  # only when no file gave a document: one line, the last build untouched
        assert good is None
        assert_one_line_error(result, f"ingest: no documents in 1 input file(s) (skipped {folder.name}/{hostile}: ")
        assert (project.workspace / "manifests" / "ingest.json").read_bytes() == before
    summary = _manifest(project, "ingest")["summary"]
    with _connect(project) as con:
        tables = {r[0] for r in con.execute("select table_name from information_schema.tables").fetchall()}
        documents, sentences, longest, sources = con.execute(
            "select (select count(*) from documents), (select count(*) from sentences), "
            "(select max(length(text)) from sentences), (select list(distinct split_part(source, ':', 1)) "
            "from documents)").fetchone()
        per_document = con.execute("select count(*) from documents d where n_sentences != (select count(*) from "
                                   "sentences s where s.doc_id = d.doc_id)").fetchone()[0]
    assert not {t for t in tables if t.endswith("__new") or t.startswith("raw_")}
    assert _manifest(project, "ingest")["outputs"]["tables"] == {"documents": documents, "sentences": sentences}
    assert per_document == 0 and longest <= MAX_SENTENCE_CHARS
    if result.exit_code == 0:
        skipped = {s["path"]: s["reason"] for s in summary["skipped"]}
        read = set(sources)
        hostile_path = f"{folder.name}/{hostile}"
        assert (hostile_path in skipped) != (hostile_path in read), (skipped, read)
        assert all(skipped.values())
        if good is not None:
            assert f"{folder.name}/{good}" in read


# --- pairs ------------------------------------------------------------------------------------------

# Letters of several scripts, digits and punctuation; no brackets, which could spell "[SEP]" (see
# test_a_literal_special_token_in_the_text_stays_text below).
_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZéèüßøñçÅ海船風雨ดาวкорабль0123456789.,!?'-"
_word = st.text(alphabet=_ALPHABET, min_size=1, max_size=9)
_sentence = st.lists(_word, min_size=1, max_size=10).map(" ".join)
_corpus = st.lists(st.lists(_sentence, min_size=1, max_size=6), min_size=2, max_size=6)
_knobs = st.fixed_dictionaries({
    "vocab_size": st.sampled_from([64, 128, 256, 512]),
    "lowercase": st.booleans(),
    "max_seq_length": st.sampled_from([8, 12, 16, 24, 64]),
    "masked_lm_prob": st.sampled_from([0.1, 0.15, 0.3, 0.5]),
    "max_predictions_per_seq": st.integers(1, 12),
    "whole_word_mask": st.booleans(),
    "short_seq_prob": st.sampled_from([0.0, 0.1, 0.5]),
    "dupe_factor": st.integers(1, 2),
    "one_sentence_chunk": st.sampled_from(["split", "random_next"]),
    "seed": st.integers(0, 2**16),
})


@pytest.fixture(scope="module")
def pairs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pairs_properties")


def _build_pairs(root: Path, corpus: list[list[str]], knobs: dict[str, Any]) -> Project:
    project = Project(root / f"example{next(_examples)}")
    write_bert_format(project.root / "corpus" / "a.txt", corpus)
    vocab = {k: knobs[k] for k in ("vocab_size", "lowercase")}
    pairs = {k: v for k, v in knobs.items() if k not in vocab}
    project.write_config(json.dumps({"ingest": {"inputs": ["corpus"], "valid_fraction": 0.0, "dedupe": False},
                                     "vocab": {**vocab, "min_frequency": 1}, "pairs": pairs}))
    project.run("run", "--until", "pairs")
    return project


def _document_streams(con: duckdb.DuckDBPyConnection) -> dict[int, bytes]:
    streams: dict[int, list[int]] = {}
    for doc_id, ids in con.execute("select doc_id, ids from tokens order by doc_id, sent_idx").fetchall():
        streams.setdefault(doc_id, []).extend(ids)
    return {doc: np.asarray(ids, dtype=np.int32).tobytes() for doc, ids in streams.items()}


def _starts(stream: bytes, tokens: np.ndarray) -> list[int]:
    """Every token index where ``tokens`` occurs in ``stream`` (int32 bytes)."""
    needle, found, at = tokens.astype(np.int32).tobytes(), [], stream.find(tokens.astype(np.int32).tobytes())
    while at != -1:
        if at % 4 == 0:
            found.append(at // 4)
        at = stream.find(needle, at + 1)
    return found


@settings(CI, max_examples=12)
@given(corpus=_corpus, knobs=_knobs)
def test_pairs_invariants_hold_for_any_small_corpus_and_vocabulary(pairs_root: Path, corpus: list[list[str]],
                                                                   knobs: dict[str, Any]):
    project = _build_pairs(pairs_root, corpus, knobs)
    data = load_pairs(project.workspace / "pairs", "train")
    with _connect(project) as con:
        tokens = [t for (t,) in con.execute("select token from vocab order by token_id").fetchall()]
        special = np.array([s for (s,) in con.execute("select is_special from vocab order by token_id").fetchall()])
        rows = con.execute("select doc_id, b_doc_id from pairs where split = 'train' order by pair_id").fetchall()
        streams = _document_streams(con)
    cls, sep, mask, pad = (tokens.index(t) for t in ("[CLS]", "[SEP]", "[MASK]", "[PAD]"))
    assert len(data) == len(rows) > 0
    for i, (doc_id, b_doc_id) in enumerate(rows):
        instance = data.instance(i)
        ids, len_a, len_b = instance["input_ids"], int(data.len_a[i]), int(data.len_b[i])
        n = len(ids)
        # Lengths and layout: [CLS] A [SEP] B [SEP], nothing padded, within max_seq_length.
        assert n == len_a + len_b + 3 <= knobs["max_seq_length"] and len_a >= 1 and len_b >= 1
        assert list(instance["token_type_ids"]) == [0] * (len_a + 2) + [1] * (len_b + 1)
        original = ids.copy()
        original[instance["masked_positions"]] = instance["masked_ids"]
        assert original[0] == cls and original[len_a + 1] == sep and original[-1] == sep
        assert not np.isin(np.delete(original, [0, len_a + 1, n - 1]), [cls, sep, pad]).any()
        # Masks: the rules' count, distinct positions off [CLS]/[SEP], and each kind doing what it says.
        positions, kinds = instance["masked_positions"].astype(int), instance["masked_kinds"]
        expected = min(knobs["max_predictions_per_seq"], max(1, round(n * knobs["masked_lm_prob"])), n - 3)
        # Whole-word masking skips a word that would overflow the count, so it may mask fewer.
        assert len(positions) == expected if not knobs["whole_word_mask"] else len(positions) <= expected
        assert len(set(positions)) == len(positions)
        assert not set(positions) & {0, len_a + 1, n - 1}
        assert (ids[positions[kinds == 0]] == mask).all()  # [MASK]
        assert not special[ids[positions[kinds == 1]]].any()  # a random ordinary token
        assert (ids[positions[kinds == 2]] == instance["masked_ids"][kinds == 2]).all()  # kept
        unmasked = np.ones(n, dtype=bool)
        unmasked[positions] = False
        assert (ids[unmasked] == original[unmasked]).all()
        # NSP: B is from another document when the label says random, else it follows A in A's own.
        a, b = original[1:len_a + 1], original[len_a + 2:n - 1]
        a_starts, b_starts = _starts(streams[doc_id], a), _starts(streams[b_doc_id], b)
        assert a_starts and b_starts
        if instance["is_random_next"]:
            assert b_doc_id != doc_id
        else:
            assert b_doc_id == doc_id and max(b_starts) >= min(a_starts) + len_a


def test_a_literal_special_token_in_the_text_stays_text(pairs_root: Path):
    """Text that spells "[SEP]" must not put a [SEP] inside A or B (the original tokenizer splits it)."""
    corpus = [["The ship [SEP] sailed [CLS] away now."] * 3, ["A second document [MASK] here."] * 3]
    project = _build_pairs(pairs_root, corpus, {"vocab_size": 128, "lowercase": True, "max_seq_length": 64})
    with _connect(project) as con:
        specials = con.execute("select count(*) from tokens, unnest(ids) as t(id) where id in "
                               "(select token_id from vocab where token in ('[CLS]', '[SEP]', '[MASK]'))").fetchone()
    assert specials[0] == 0


# --- sql --------------------------------------------------------------------------------------------

_WRITING_FORMS = [
    "COPY (select 1 as x) TO '{path}.csv'",
    "COPY documents TO '{path}.parquet' (FORMAT parquet)",
    "COPY sentences TO '{path}.json' (FORMAT json)",
    "EXPORT DATABASE '{path}'",
    "ATTACH '{path}.duckdb' AS other (READ_WRITE)",
    "ATTACH '{path}.duckdb' AS other; CREATE TABLE other.t AS SELECT 1 AS x",
    "ATTACH '{database}' AS again (READ_WRITE)",
    "ATTACH ':memory:' AS scratch",
    "CREATE TABLE t AS SELECT 1 AS x",
    "INSERT INTO documents SELECT * FROM documents",
    "UPDATE sentences SET text = 'x'",
    "DELETE FROM documents",
    "DROP TABLE sentences",
    "ALTER TABLE documents RENAME TO d",
    "CREATE VIEW v AS SELECT 1",
    "CREATE MACRO m() AS 1",
    "CREATE SEQUENCE s",
    "COMMENT ON TABLE documents IS 'x'",
    "CHECKPOINT",
    "VACUUM",
    "INSTALL httpfs",
    "FORCE INSTALL json",
    "LOAD httpfs",
    "LOAD '{path}.duckdb_extension'",
    "CREATE PERSISTENT SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')",
    "SET enable_external_access = true",
    "RESET enable_external_access",
    "SET lock_configuration = false",
    "SET log_query_path = '{path}.log'",
    "SET temp_directory = '{path}'",
    "SET profile_output = '{path}.profile'",
    "PRAGMA enable_profiling = 'json'",
    "CALL enable_logging(storage := 'file', storage_path := '{path}')",
    "SELECT * FROM read_text('{database}')",
    "SELECT * FROM read_csv('https://example.invalid/x.csv')",
    "CREATE TEMP TABLE t AS SELECT 1 AS x; COPY t TO '{path}.csv'",
]
_PREFIXES = ["", "SELECT 1; ", "SET threads = 1; ", "CREATE TEMP TABLE tmp AS SELECT 1; ", "BEGIN; "]
_SUFFIXES = ["", ";", "; SELECT 1", "; COMMIT"]


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*")) if ".tmp" not in p.name}


@pytest.fixture(scope="module")
def sql_project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    root = tmp_path_factory.mktemp("sql_properties")
    write_bert_format(root / "corpus" / "a.txt", make_documents(20, seed=2))
    project = Project(root)
    project.write_config("ingest:\n  inputs: [corpus]\n")
    project.run("ingest")
    return project


@settings(CI, max_examples=80)
@given(form=st.sampled_from(_WRITING_FORMS), prefix=st.sampled_from(_PREFIXES), suffix=st.sampled_from(_SUFFIXES),
       name=st.sampled_from(["out", ".bertwb/out", ".bertwb/bertwb", "corpus/a", "../escape"]),
       upper=st.booleans())
def test_read_only_sql_changes_no_file_and_no_table(sql_project: Project, form: str, prefix: str, suffix: str,
                                                    name: str, upper: bool):
    project = sql_project
    before = _snapshot(project.root)
    statement = prefix + form.format(path=project.root / name, database=project.workspace / "bertwb.duckdb") + suffix
    result = project.run("sql", statement.upper() if upper and "'" not in statement else statement, expect=None)
    assert result.exit_code in (0, 1) and "Traceback" not in result.output and "internal error" not in result.output
    if result.exit_code == 1:
        assert_one_line_error(result, "sql: ")
    assert _snapshot(project.root) == before
    assert not list(project.root.parent.glob("escape*"))
