"""The pairs stage: the original BERT algorithm's properties on the sample corpus, a plain-Python
reference implementation compared with the fast builder on a tiny corpus, determinism across
worker counts, the shard files and their reader, dynamic masking, caching and user errors.

``reference_create_instances`` below is also what ``benchmarks/bench_pairs.py`` races against.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
from click.testing import CliRunner

from bertwb.cli import cli
from bertwb.data.masking import KIND_KEEP, KIND_MASK, KIND_RANDOM, mask_batch, mask_instance, rules_from_vocab
from bertwb.data.pair_builder import truncated_lengths
from bertwb.data.pairs import load_pairs
from conftest import SAMPLE_CORPUS, assert_one_line_error, make_documents, write_bert_format

# Another corpus in the original BERT format can stand in for sample_corpus/pretrain.
CORPUS = Path(os.environ.get("BERTWB_PAIRS_CORPUS", SAMPLE_CORPUS))
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


# ---------------------------------------------------------------------------------------------------
# The reference: create_pretraining_data.py from the original BERT release, ported line by line to
# token ids. Two deliberate changes, both documented in bertwb.data.masking: random replacements come from
# the non-special vocabulary, and (whole-word) a ## piece never joins a word across [SEP]. A third is
# bertwb's default and documented in bertwb.stages.pairs: with one_sentence_chunk="split" a one-sentence
# chunk whose coin says actual next is cut in two inside its sentence; "random_next" is the original.

def reference_create_instances(documents: list[list[list[int]]], vocab_tokens: list[str], *,
                               max_seq_length: int = 128, dupe_factor: int = 1, short_seq_prob: float = 0.1,
                               masked_lm_prob: float = 0.15, max_predictions_per_seq: int = 20,
                               whole_word_mask: bool = False, one_sentence_chunk: str = "split",
                               seed: int = 12345) -> list[dict[str, Any]]:
    """Instances as dicts (tokens, len_a, len_b, is_random_next, is_short, masked_lm_positions, ...)."""
    rng = random.Random(seed)
    documents = [doc for doc in documents if doc]
    replacement_ids = [i for i, t in enumerate(vocab_tokens) if t not in SPECIALS and not t.startswith("[unused")]
    instances = []
    for _ in range(dupe_factor):
        for document_index in range(len(documents)):
            instances.extend(_reference_document(documents, document_index, vocab_tokens, replacement_ids,
                                                 max_seq_length, short_seq_prob, masked_lm_prob,
                                                 max_predictions_per_seq, whole_word_mask, one_sentence_chunk,
                                                 rng))
    rng.shuffle(instances)
    return instances


def _reference_document(all_documents, document_index, vocab_tokens, replacement_ids, max_seq_length,
                        short_seq_prob, masked_lm_prob, max_predictions_per_seq, whole_word_mask,
                        one_sentence_chunk, rng):
    cls_id, sep_id = vocab_tokens.index("[CLS]"), vocab_tokens.index("[SEP]")
    document = all_documents[document_index]
    max_num_tokens = max_seq_length - 3
    target_seq_length = max_num_tokens
    is_short = False
    if rng.random() < short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)
        is_short = True
    instances = []
    current_chunk = []
    current_length = 0
    i = 0
    while i < len(document):
        segment = document[i]
        current_chunk.append(segment)
        current_length += len(segment)
        if i == len(document) - 1 or current_length >= target_seq_length:
            if current_chunk:
                a_end = 1
                if len(current_chunk) >= 2:
                    a_end = rng.randint(1, len(current_chunk) - 1)
                tokens_a = []
                for j in range(a_end):
                    tokens_a.extend(current_chunk[j])
                tokens_b = []
                b_document_index = document_index
                if len(current_chunk) == 1 and one_sentence_chunk == "split":
                    random_next = rng.random() < 0.5 or len(tokens_a) < 2
                else:
                    random_next = len(current_chunk) == 1 or rng.random() < 0.5
                if random_next:
                    is_random_next = True
                    target_b_length = target_seq_length - len(tokens_a)
                    for _ in range(10):
                        random_document_index = rng.randint(0, len(all_documents) - 1)
                        if random_document_index != document_index:
                            break
                    b_document_index = random_document_index
                    random_document = all_documents[random_document_index]
                    random_start = rng.randint(0, len(random_document) - 1)
                    for j in range(random_start, len(random_document)):
                        tokens_b.extend(random_document[j])
                        if len(tokens_b) >= target_b_length:
                            break
                    num_unused_segments = len(current_chunk) - a_end
                    i -= num_unused_segments
                elif len(current_chunk) == 1:  # "split": A and B are the sentence's two parts
                    is_random_next = False
                    cut = rng.randint(1, len(tokens_a) - 1)
                    tokens_a, tokens_b = tokens_a[:cut], tokens_a[cut:]
                else:
                    is_random_next = False
                    for j in range(a_end, len(current_chunk)):
                        tokens_b.extend(current_chunk[j])
                reference_truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                assert len(tokens_a) >= 1 and len(tokens_b) >= 1
                tokens = [cls_id, *tokens_a, sep_id, *tokens_b, sep_id]
                output, positions, labels = _reference_masked_lm(tokens, vocab_tokens, replacement_ids,
                                                                 masked_lm_prob, max_predictions_per_seq,
                                                                 whole_word_mask, rng)
                instances.append({"tokens": output, "len_a": len(tokens_a), "len_b": len(tokens_b),
                                  "is_random_next": is_random_next, "is_short": is_short,
                                  "doc": document_index, "b_doc": b_document_index,
                                  "masked_lm_positions": positions, "masked_lm_labels": labels})
            current_chunk = []
            current_length = 0
        i += 1
    return instances


def reference_truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
    while True:
        total_length = len(tokens_a) + len(tokens_b)
        if total_length <= max_num_tokens:
            break
        trunc_tokens = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        assert len(trunc_tokens) >= 1
        if rng.random() < 0.5:
            del trunc_tokens[0]
        else:
            trunc_tokens.pop()


def _reference_masked_lm(tokens, vocab_tokens, replacement_ids, masked_lm_prob, max_predictions_per_seq,
                         whole_word_mask, rng):
    cand_indexes = []
    for i, token in enumerate(tokens):
        name = vocab_tokens[token]
        if name in ("[CLS]", "[SEP]"):
            continue
        previous_is_candidate = cand_indexes and cand_indexes[-1][-1] == i - 1
        if whole_word_mask and previous_is_candidate and name.startswith("##"):
            cand_indexes[-1].append(i)
        else:
            cand_indexes.append([i])
    rng.shuffle(cand_indexes)
    output_tokens = list(tokens)
    num_to_predict = min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))
    masked_lms = []
    covered_indexes = set()
    for index_set in cand_indexes:
        if len(masked_lms) >= num_to_predict:
            break
        if len(masked_lms) + len(index_set) > num_to_predict:
            continue
        for index in index_set:
            covered_indexes.add(index)
            if rng.random() < 0.8:
                masked_token = vocab_tokens.index("[MASK]")
            elif rng.random() < 0.5:
                masked_token = tokens[index]
            else:
                masked_token = replacement_ids[rng.randint(0, len(replacement_ids) - 1)]
            output_tokens[index] = masked_token
            masked_lms.append((index, tokens[index]))
    masked_lms.sort()
    return output_tokens, [p for p, _ in masked_lms], [label for _, label in masked_lms]


# ---------------------------------------------------------------------------------------------------
# Workspaces: ingest + vocab once per session, then one copy per pairs configuration.

class Corpus:
    """A config and an ingested, tokenised workspace; ``pairs(**settings)`` builds pairs in a copy."""

    def __init__(self, root: Path, inputs: Path, extra_config: str = ""):
        self.root = root
        self.config = root / "bertwb.yaml"
        self.config.write_text(f"ingest:\n  inputs: [{inputs}]\n  valid_fraction: 0.1\n{extra_config}")
        self.base = root / "base"
        self.built: dict[tuple, Path] = {}
        invoke("run", "--until", "vocab", "--config", str(self.config), "--workdir", str(self.base))

    def pairs(self, **settings: Any) -> Path:
        """The workspace holding pairs built with these ``pairs.*`` settings (built once)."""
        key = tuple(sorted(settings.items()))
        if key not in self.built:
            workdir = self.root / f"ws{len(self.built)}"
            shutil.copytree(self.base, workdir)
            sets = [arg for name, value in key for arg in ("--set", f"pairs.{name}={json.dumps(value)}")]
            invoke("pairs", "--config", str(self.config), "--workdir", str(workdir), *sets)
            self.built[key] = workdir
        return self.built[key]


def invoke(*args: str, expect: int = 0) -> Any:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == expect, f"bertwb {' '.join(args)} exited {result.exit_code}:\n{result.output}"
    return result


def connect(workdir: Path) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(str(workdir / "bertwb.duckdb"), read_only=True)


def read_pairs(workdir: Path, where: str = "true") -> dict[str, Any]:
    """The pairs table as numpy: scalar columns, flat lists with offsets, originals (masks undone)."""
    with connect(workdir) as con:
        table = con.sql(f"select * from pairs where {where} order by pair_id").to_arrow_table()
    out = {name: table.column(name).to_numpy() for name in
           ("pair_id", "split", "dupe", "doc_id", "b_doc_id", "len_a", "len_b", "is_random_next", "is_short")}
    for name in ("input_ids", "masked_positions", "masked_ids", "masked_kinds"):
        column = table.column(name).combine_chunks()
        out[name] = column.flatten().to_numpy()
        out[name + "_offsets"] = column.offsets.to_numpy().astype(np.int64)
    out["lengths"] = np.diff(out["input_ids_offsets"])
    out["mask_counts"] = np.diff(out["masked_positions_offsets"])
    row = np.repeat(np.arange(len(out["lengths"])), out["mask_counts"])
    out["masked_flat_index"] = out["input_ids_offsets"][row] + out["masked_positions"]
    original = out["input_ids"].copy()
    original[out["masked_flat_index"]] = out["masked_ids"]
    out["original_ids"] = original
    return out


def vocab_of(workdir: Path) -> tuple[list[str], list[bool]]:
    with connect(workdir) as con:
        rows = con.execute("select token, is_special from vocab order by token_id").fetchall()
    return [r[0] for r in rows], [r[1] for r in rows]


def documents_of(workdir: Path) -> dict[int, list[list[int]]]:
    with connect(workdir) as con:
        rows = con.execute("select doc_id, ids from tokens where len(ids) > 0 order by doc_id, sent_idx").fetchall()
    documents: dict[int, list[list[int]]] = {}
    for doc_id, ids in rows:
        documents.setdefault(doc_id, []).append(ids)
    return documents


@pytest.fixture(scope="session")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    if not CORPUS.is_dir() or not any(CORPUS.iterdir()):
        pytest.skip(f"{CORPUS} not present (the sample corpus is generated separately)")
    return Corpus(tmp_path_factory.mktemp("sample"), CORPUS.resolve(),
                  "vocab:\n  vocab_size: 2048\npairs:\n  dupe_factor: 1\n")


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    root = tmp_path_factory.mktemp("tiny")
    write_bert_format(root / "corpus" / "a.txt", make_documents(300, seed=7))
    return Corpus(root, root / "corpus", "vocab:\n  vocab_size: 256\n  min_frequency: 1\n")


# ---------------------------------------------------------------------------------------------------
# The original algorithm's properties, on the sample corpus.

def test_sample_random_next_is_half(sample: Corpus):
    """The coin decides every chunk (one-sentence chunks are split when it says actual next): 50 ± 3%,
    as the plain-Python reference gives on the same documents."""
    workdir = sample.pairs()
    pairs = read_pairs(workdir, "split = 'train'")
    assert abs(pairs["is_random_next"].mean() - 0.5) < 0.03
    reference = reference_create_instances(_train_documents(workdir), vocab_of(workdir)[0])
    assert abs(np.mean([r["is_random_next"] for r in reference]) - 0.5) < 0.03


def test_sample_original_one_sentence_rule_gives_the_originals_rate(sample: Corpus):
    """With one_sentence_chunk: random_next every one-sentence chunk takes a random next, as in the
    original, so the rate is 50% plus half the share of one-sentence chunks: about 58% on the sample
    corpus (documents of ~17 sentences, whose last chunk is often a single sentence)."""
    workdir = sample.pairs(one_sentence_chunk="random_next")
    pairs = read_pairs(workdir, "split = 'train'")
    reference = reference_create_instances(_train_documents(workdir), vocab_of(workdir)[0],
                                           one_sentence_chunk="random_next")
    reference_rate = np.mean([r["is_random_next"] for r in reference])
    assert 0.54 <= reference_rate < 0.65
    assert abs(pairs["is_random_next"].mean() - reference_rate) < 0.03


def test_sample_split_one_sentence_chunks_are_one_sentence_cut_in_two(sample: Corpus):
    """Split pairs exist, are not random, and A + B is exactly one whole sentence of the document."""
    workdir = sample.pairs()
    pairs = read_pairs(workdir, "split = 'train'")
    sentences = {tuple(ids) for doc in documents_of(workdir).values() for ids in doc}
    starts = pairs["input_ids_offsets"][:-1]
    whole = [tuple(pairs["original_ids"][starts[i] + 1: starts[i] + 1 + pairs["len_a"][i]])
             + tuple(pairs["original_ids"][starts[i] + 2 + pairs["len_a"][i]:
                                           starts[i] + 2 + pairs["len_a"][i] + pairs["len_b"][i]])
             for i in range(len(starts)) if not pairs["is_random_next"][i]]
    split_pairs = sum(ids in sentences for ids in whole)  # A ‖ B is one whole sentence of the corpus
    assert split_pairs > 0.05 * len(whole)


def _train_documents(workdir: Path) -> list[list[list[int]]]:
    with connect(workdir) as con:
        train_docs = {d for (d,) in con.execute("select doc_id from documents where split = 'train'").fetchall()}
    return [doc for doc_id, doc in documents_of(workdir).items() if doc_id in train_docs]


def test_sample_every_instance_masks_the_formulas_count(sample: Corpus):
    pairs = read_pairs(sample.pairs())
    expected = np.minimum(20, np.maximum(1, np.round(pairs["lengths"] * 0.15).astype(int)))
    assert (pairs["mask_counts"] == expected).all()
    assert len(np.unique(expected)) > 5  # short and long instances both present


def test_sample_replacements_are_80_10_10(sample: Corpus):
    pairs = read_pairs(sample.pairs())
    kinds = pairs["masked_kinds"]
    assert len(kinds) > 20_000
    assert abs((kinds == KIND_MASK).mean() - 0.8) < 0.01
    assert abs((kinds == KIND_KEEP).mean() - 0.1) < 0.01
    assert abs((kinds == KIND_RANDOM).mean() - 0.1) < 0.01
    ids, original, at = pairs["input_ids"], pairs["original_ids"], pairs["masked_flat_index"]
    assert (ids[at[kinds == KIND_MASK]] == 4).all()
    assert (ids[at[kinds == KIND_KEEP]] == original[at[kinds == KIND_KEEP]]).all()
    tokens, is_special = vocab_of(sample.pairs())
    assert not np.asarray(is_special)[ids[at[kinds == KIND_RANDOM]]].any()
    unmasked = np.ones(len(ids), dtype=bool)
    unmasked[at] = False
    assert (ids[unmasked] == original[unmasked]).all()


def test_sample_cls_and_sep_are_never_masked(sample: Corpus):
    pairs = read_pairs(sample.pairs())
    assert not np.isin(pairs["masked_ids"], [2, 3]).any()
    starts = pairs["input_ids_offsets"][:-1]
    special_at = np.concatenate([starts, starts + 1 + pairs["len_a"], pairs["input_ids_offsets"][1:] - 1])
    assert not np.isin(pairs["masked_flat_index"], special_at).any()


def test_sample_layout_and_lengths(sample: Corpus):
    pairs = read_pairs(sample.pairs())
    starts, ends = pairs["input_ids_offsets"][:-1], pairs["input_ids_offsets"][1:]
    original = pairs["original_ids"]
    assert (pairs["lengths"] == pairs["len_a"] + pairs["len_b"] + 3).all()
    assert pairs["lengths"].max() == 128 and (pairs["lengths"] <= 128).all()
    assert (pairs["len_a"] >= 1).all() and (pairs["len_b"] >= 1).all()
    assert (original[starts] == 2).all()
    assert (original[starts + 1 + pairs["len_a"]] == 3).all()
    assert (original[ends - 1] == 3).all()
    assert (np.isin(original, [2, 3]).sum()) == 3 * len(starts)  # no [CLS]/[SEP] inside A or B
    # Short targets: about short_seq_prob of documents, so some instances are well under the maximum.
    assert 0.03 < pairs["is_short"].mean() < 0.3


def test_sample_segments_are_document_text(sample: Corpus):
    """A is a contiguous run of its document's tokens, B of its document's (A's own unless random)."""
    workdir = sample.pairs()
    pairs = read_pairs(workdir)
    streams = {doc: np.concatenate(sentences).astype(np.int32).tobytes()
               for doc, sentences in documents_of(workdir).items()}
    starts = pairs["input_ids_offsets"][:-1]
    for i in np.random.default_rng(0).choice(len(starts), 300, replace=False):
        len_a, len_b = pairs["len_a"][i], pairs["len_b"][i]
        a = pairs["original_ids"][starts[i] + 1: starts[i] + 1 + len_a]
        b = pairs["original_ids"][starts[i] + 2 + len_a: starts[i] + 2 + len_a + len_b]
        assert _contains(streams[pairs["doc_id"][i]], a)
        assert _contains(streams[pairs["b_doc_id"][i]], b)


def _contains(stream: bytes, tokens: np.ndarray) -> bool:
    needle = tokens.astype(np.int32).tobytes()
    at = stream.find(needle)
    while at != -1 and at % 4:
        at = stream.find(needle, at + 1)
    return at != -1


def test_sample_random_b_never_from_a_document(sample: Corpus):
    pairs = read_pairs(sample.pairs())
    random_next = pairs["is_random_next"]
    assert (pairs["b_doc_id"][random_next] != pairs["doc_id"][random_next]).all()
    assert (pairs["b_doc_id"][~random_next] == pairs["doc_id"][~random_next]).all()


def test_sample_train_and_valid_share_no_document(sample: Corpus):
    workdir = sample.pairs()
    pairs = read_pairs(workdir)
    with connect(workdir) as con:
        split_of = dict(con.execute("select doc_id, split from documents").fetchall())
    for column in ("doc_id", "b_doc_id"):
        assert all(split_of[doc] == split for doc, split in zip(pairs[column], pairs["split"], strict=True))
    train = set(pairs["doc_id"][pairs["split"] == "train"]) | set(pairs["b_doc_id"][pairs["split"] == "train"])
    valid = set(pairs["doc_id"][pairs["split"] == "valid"]) | set(pairs["b_doc_id"][pairs["split"] == "valid"])
    assert valid and not train & valid


def test_sample_whole_word_masking_masks_whole_words(sample: Corpus):
    workdir = sample.pairs(whole_word_mask=True)
    pairs = read_pairs(workdir)
    tokens, _ = vocab_of(workdir)
    continuation = np.array([t.startswith("##") for t in tokens])
    original, masked = pairs["original_ids"], np.zeros(len(pairs["input_ids"]), dtype=bool)
    masked[pairs["masked_flat_index"]] = True
    candidate = ~np.isin(original, [2, 3])
    # Inside a segment, a ## piece and the position before it are masked together or not at all.
    joined = continuation[original[1:]] & candidate[1:] & candidate[:-1]
    assert joined.sum() > 1000
    assert (masked[1:][joined] == masked[:-1][joined]).all()
    expected = np.minimum(20, np.maximum(1, np.round(pairs["lengths"] * 0.15).astype(int)))
    assert (pairs["mask_counts"] <= expected).all()
    assert (pairs["mask_counts"] == expected).mean() > 0.8


def test_sample_output_is_identical_across_worker_counts(sample: Corpus):
    one = sample.pairs(workers=1, shard_tokens=100_000)
    two = sample.pairs(workers=2, shard_tokens=100_000)
    with connect(one) as con:
        assert con.execute("select count(*) from pairs").fetchone()[0] > 0
    summaries = [json.loads((w / "manifests" / "pairs.json").read_text())["summary"] for w in (one, two)]
    assert summaries[0]["shards"] > 2 and summaries[1]["workers"] == 2
    a, b = read_pairs(one), read_pairs(two)
    for name in a:
        assert np.array_equal(a[name], b[name]), name
    for path in sorted((one / "pairs").rglob("*")):
        if path.is_file() and path.name != ".bertwb-build":  # the build's id: two builds, two ids
            assert path.read_bytes() == (two / "pairs" / path.relative_to(one / "pairs")).read_bytes(), path
    identities = [json.loads((w / "manifests" / "pairs.json").read_text())["identity"] for w in (one, two)]
    assert identities[0] == identities[1]  # what the stage built, so nothing downstream would rebuild


def test_sample_shard_files_match_the_table(sample: Corpus):
    workdir = sample.pairs()
    pairs = read_pairs(workdir)
    meta = json.loads((workdir / "pairs" / "meta.json").read_text())
    assert meta["max_seq_length"] == 128 and meta["masking"] == "static"
    assert meta["special_ids"] == {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
    for split in ("train", "valid"):
        data = load_pairs(workdir / "pairs", split)
        rows = pairs["split"] == split
        assert len(data) == rows.sum() == meta["splits"][split]["instances"]
        first = np.flatnonzero(rows)[0]
        lo, hi = pairs["input_ids_offsets"][first], pairs["input_ids_offsets"][first + rows.sum()]
        assert np.array_equal(data.input_ids, pairs["input_ids"][lo:hi])
        assert np.array_equal(data.len_a, pairs["len_a"][rows])
        assert np.array_equal(data.is_random_next.astype(bool), pairs["is_random_next"][rows])
        assert np.array_equal(np.diff(data.mask_offsets), pairs["mask_counts"][rows])
        instance = data.instance(0)
        assert instance["token_type_ids"].sum() == data.len_b[0] + 1
        m_lo, m_hi = pairs["masked_positions_offsets"][first], pairs["masked_positions_offsets"][first + 1]
        assert np.array_equal(instance["masked_positions"], pairs["masked_positions"][m_lo:m_hi])
        assert np.array_equal(instance["masked_ids"], pairs["masked_ids"][m_lo:m_hi])


def test_sample_dynamic_masking_stores_unmasked_pairs_and_masks_at_load(sample: Corpus):
    static, dynamic = sample.pairs(), sample.pairs(masking="dynamic")
    stat, dyn = read_pairs(static), read_pairs(dynamic)
    assert np.array_equal(dyn["input_ids"], stat["original_ids"])  # same pairs, no masks applied
    assert len(dyn["masked_positions"]) == 0
    with connect(dynamic) as con:
        assert con.execute("select count(*) from pairs where masked_positions is not null").fetchone()[0] == 0
    data = load_pairs(dynamic / "pairs", "train")
    assert not data.static and len(data.masked_positions) == 0
    rules = data.masking_rules()
    epochs = [mask_batch(data.input_ids, data.offsets, rules, np.random.default_rng(epoch)) for epoch in (1, 2)]
    expected = np.minimum(20, np.maximum(1, np.round(np.diff(data.offsets) * 0.15).astype(int)))
    for masked in epochs:
        assert np.array_equal(np.diff(masked.mask_offsets), expected)
    assert not np.array_equal(epochs[0].masked_positions, epochs[1].masked_positions)  # new masks each epoch


# ---------------------------------------------------------------------------------------------------
# The fast builder against the plain-Python reference, on a tiny corpus.

@pytest.mark.parametrize("one_sentence_chunk", ["split", "random_next"])
def test_distributions_match_the_reference(tiny: Corpus, one_sentence_chunk: str):
    settings = {"dupe_factor": 20, "max_seq_length": 64, "one_sentence_chunk": one_sentence_chunk}
    workdir = tiny.pairs(**settings)
    pairs = read_pairs(workdir, "split = 'train'")
    tokens, _ = vocab_of(workdir)
    reference = reference_create_instances(_train_documents(workdir), tokens, **settings)
    ref_lengths = np.array([len(r["tokens"]) for r in reference])
    ref_masks = np.array([len(r["masked_lm_positions"]) for r in reference])
    n_fast, n_ref = len(pairs["lengths"]), len(reference)
    assert n_ref > 3000 and abs(n_fast - n_ref) / n_ref < 0.03
    assert abs(pairs["lengths"].mean() - ref_lengths.mean()) / ref_lengths.mean() < 0.02
    assert abs(pairs["is_random_next"].mean() - np.mean([r["is_random_next"] for r in reference])) < 0.03
    assert abs(pairs["is_short"].mean() - np.mean([r["is_short"] for r in reference])) < 0.03
    assert abs(pairs["mask_counts"].mean() - ref_masks.mean()) / ref_masks.mean() < 0.03
    assert abs(pairs["len_a"].mean() - np.mean([r["len_a"] for r in reference])) / pairs["len_a"].mean() < 0.03
    # Length distributions: the largest gap between the two CDFs (a Kolmogorov–Smirnov statistic).
    grid = np.arange(1, 65)
    cdf_fast = np.searchsorted(np.sort(pairs["lengths"]), grid, side="right") / n_fast
    cdf_ref = np.searchsorted(np.sort(ref_lengths), grid, side="right") / n_ref
    assert np.abs(cdf_fast - cdf_ref).max() < 0.04


def test_truncation_closed_form_matches_the_original_loop():
    rng = random.Random(0)
    for _ in range(3000):
        len_a, len_b, max_num_tokens = rng.randint(1, 90), rng.randint(1, 90), rng.randint(2, 80)
        a, b = list(range(len_a)), list(range(len_b))
        reference_truncate_seq_pair(a, b, max_num_tokens, rng)
        new_a, new_b = truncated_lengths(np.array([len_a]), np.array([len_b]), max_num_tokens)
        assert (new_a[0], new_b[0]) == (len(a), len(b)), (len_a, len_b, max_num_tokens)


def test_masking_one_instance_matches_the_batch_rules():
    tokens = SPECIALS + ["the", "cat", "##s", "sat", "##ting", "mat"]
    rules = rules_from_vocab(tokens, [t in SPECIALS for t in tokens], masked_lm_prob=0.5,
                             max_predictions_per_seq=20, whole_word_mask=True)
    ids = np.array([2, 5, 6, 7, 8, 9, 3, 7, 10, 3])  # [CLS] the cat ##s sat ##ting [SEP] ##s mat [SEP]
    for seed in range(50):
        masked = mask_instance(ids, rules, np.random.default_rng(seed))
        positions = set(masked.masked_positions.tolist())
        assert not positions & {0, 6, 9}
        assert ({2, 3} <= positions) == bool({2, 3} & positions)  # cat ##s together
        assert ({4, 5} <= positions) == bool({4, 5} & positions)
        assert len(positions) <= 5 and set(masked.masked_ids.tolist()) <= set(ids.tolist())


# ---------------------------------------------------------------------------------------------------
# Cache and user errors.

def test_changing_masked_lm_prob_reruns_only_pairs(tiny: Corpus, tmp_path: Path):
    workdir = tmp_path / "ws"
    shutil.copytree(tiny.pairs(), workdir)
    common = ["--config", str(tiny.config), "--workdir", str(workdir)]
    assert "pairs: fresh" in invoke("pairs", *common, "--set", "pairs.workers=1").output  # not in the key
    output = invoke("run", "--until", "pairs", *common, "--set", "pairs.masked_lm_prob=0.2").output
    assert "ingest: fresh" in output and "vocab: fresh" in output
    assert "pairs: running (stale: pairs.masked_lm_prob 0.15 → 0.2)" in output
    assert abs(read_pairs(workdir)["mask_counts"].sum() / read_pairs(workdir)["lengths"].sum() - 0.2) < 0.01


def test_one_train_document_is_a_clear_error(tmp_path: Path):
    write_bert_format(tmp_path / "corpus" / "a.txt", make_documents(1))
    config = tmp_path / "bertwb.yaml"
    config.write_text("ingest:\n  inputs: [corpus]\n  valid_fraction: 0\nvocab:\n  vocab_size: 128\n"
                      "  min_frequency: 1\n")
    result = CliRunner().invoke(cli, ["run", "--until", "pairs", "--config", str(config)])
    assert_one_line_error(result, "train split has 1 document", "random-next")
    assert not (tmp_path / ".bertwb" / "pairs").exists()


def test_max_seq_length_too_small_is_a_clear_error(tiny: Corpus):
    result = CliRunner().invoke(cli, ["pairs", "--config", str(tiny.config), "--workdir", str(tiny.base),
                                      "--set", "pairs.max_seq_length=4"])
    assert_one_line_error(result, "pairs.max_seq_length", "between 5")
