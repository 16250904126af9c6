"""Writes the small hostile files under tests/bad_inputs/ that test_bad_inputs.py feeds to every
command that reads files. Deterministic; rerun it after changing a file here and commit the result:

    python tests/bad_inputs/make_bad_inputs.py

corpus/     inputs for `bertwb ingest` (every format): broken containers, encodings, JSONL, CSV, Parquet
vocab/      files for `vocab.from_file`
sql/        files for `bertwb sql -f`

Text that looks like rich markup (``[citation needed]``, ``[/quote]``) is a class of its own (issue
#25): in a sentence (corpus/markup.txt), in a file's name that a warning prints (corpus/[bold] not
json [x].jsonl) and in a query's values and column names (sql/markup.sql). It must come out whole.
fill_mask/  files for `bertwb fill-mask --file`
stdin/      what a user pipes into `bertwb fill-mask` and `bertwb predict` (a binary file, Latin-1, a NUL)
hf/         folders for `bertwb import-hf`
config/     bertwb.yaml files whose sections are not mappings, for every command (with a --set into them)
manifest/   stage manifests that are torn or valid JSON of another shape, for `status` and `run`
finetune/   train and dev files of fine-tuning tasks: .csv/.tsv/.jsonl for classify, .json (SQuAD) for qa
"""

from __future__ import annotations

import codecs
import gzip
import json
import shutil
from pathlib import Path

import zstandard

HERE = Path(__file__).resolve().parent
GOOD_TEXT = ("The captain sailed at dawn.\nThe crew cheered on the deck.\n\n"
             "Bread rose in the warm oven.\nSalt went in last.\n")
SPECIALS = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n"
TINY_BERT = {"architectures": ["BertForMaskedLM"], "model_type": "bert", "vocab_size": 8, "hidden_size": 8,
             "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16,
             "max_position_embeddings": 16, "type_vocab_size": 2}


def gzip_bytes(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)  # mtime 0: the same bytes on every run


def zstd_bytes(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(data)


def corpus() -> dict[str, bytes]:
    text = GOOD_TEXT.encode()
    return {
        # Containers.
        "truncated.txt.gz": gzip_bytes(text * 40)[:-30],
        "truncated.txt.zst": zstd_bytes(text * 40)[:-30],
        "not_gzip.txt.gz": b"this was never gzip data\n",
        "not_zstd.txt.zst": b"this was never zstd data\n",
        "empty_inside.txt.gz": gzip_bytes(b""),
        "binary_inside.txt.zst": zstd_bytes(bytes(range(256)) * 4),
        "two_frames.txt.zst": zstd_bytes(b"First frame line.\n") + zstd_bytes(b"Second frame line.\n"),
        # Empty, blank and binary.
        "empty.txt": b"",
        "blank_lines.txt": b"\n\n   \n\t\n\n",
        "control_only.txt": b"\x07\x1b\x7f\n\x01\x02\n",
        "binary.bin": bytes(range(256)) * 8,
        "nul_after_sniff.txt": b"A line before the NUL.\n" * 400 + b"\x00\x00\x00 NUL bytes late in a text file.\n",
        # Encodings.
        "utf8_bom.txt": "\ufeffUTF-8 with a byte-order mark.\n".encode(),
        "utf16le_bom.txt": "UTF-16 little-endian with a byte-order mark.\nIt has two lines é.\n".encode("utf-16"),
        "utf16be_bom.txt": b"\xfe\xff" + "UTF-16 big-endian with a byte-order mark.\n".encode("utf-16-be"),
        "utf32_bom.txt": "UTF-32 with a byte-order mark.\n".encode("utf-32"),
        "utf16_no_bom.txt": "UTF-16 without a byte-order mark.\n".encode("utf-16-le"),
        "utf16_odd_byte.txt": "UTF-16 cut in the middle of a character.\n".encode("utf-16")[:-1],
        "latin1.txt": "café crème, naïve façade.\n".encode("latin-1"),
        "mixed_utf8.txt": b"A good line.\n\xff\xfe a broken line\nAnother good line.\n",
        "overlong_utf8.txt": b"An overlong slash \xc0\xaf here.\nA clean line after it.\n",
        "surrogate_utf8.txt": b"An encoded surrogate \xed\xa0\x80 here.\nA clean line after it.\n",
        # Line shapes.
        "crlf.txt": b"Windows line one.\r\nWindows line two.\r\n\r\nSecond document.\r\n",
        "lone_cr.txt": b"Old Mac line one.\rOld Mac line two.\r",
        "no_final_newline.txt": b"The last line has no newline.",
        "long_line.txt": b"word " * 5000 + b"\n",
        "long_word.txt": b"x" * 25000 + b"\n",
        # Text that looks like markup, in a sentence and in a file name a warning prints.
        "markup.txt": b"See [citation needed] here.\nClose the [/quote] tag and [bold]this[/bold].\n",
        "[bold] not json [x].jsonl": b"plain text [/quote], not JSON\n",
        # JSONL.
        "records.jsonl": "\n".join([
            json.dumps({"text": "A good record."}),
            '{"text": "unterminated',
            json.dumps({"body": "no text field", "id": 3}),
            json.dumps(["not", "an", "object"]),
            json.dumps({"text": None}),
            json.dumps({"text": 42}),
            "[" * 5000 + "]" * 5000,
            '{"text": "a lone surrogate \\udc80 escaped"}',
            "1" * 5000,
            json.dumps({"text": "Another good record."}),
            '{"text": "cut off at the end',
        ]).encode(),
        "no_text_field.jsonl": "\n".join(json.dumps({"body": f"record {i}", "id": i}) for i in range(5)).encode(),
        "not_json.jsonl": b"plain text, not JSON\nmore plain text\n",
        # CSV and Parquet (read by DuckDB).
        "ragged.csv": b'text,label\n"A good row.",1\n"Too many",2,3,4\nshort\n"Unclosed quote,5\n',
        "no_text_column.csv": b"id,body\n1,hello\n",
        "header_only.csv": b"text\n",
        "binary.csv": bytes(range(256)) * 4,
        "truncated.parquet": b"PAR1" + bytes(range(200)),
        "not_parquet.parquet": b"this is not a parquet file\n",
    }


def vocab_files() -> dict[str, bytes]:
    tokenizer = {"version": "1.0", "model": {"type": "WordPiece", "vocab": {"[PAD]": 0}}}
    return {
        "empty.txt": b"",
        "binary.txt": bytes(range(256)) * 4,
        "latin1.txt": (SPECIALS + "café\n").encode("latin-1"),
        "utf16.txt": (SPECIALS + "hello\n").encode("utf-16"),
        "repeated.txt": (SPECIALS + "hello\nhello\n").encode(),
        "blank_line.txt": (SPECIALS + "\nhello\n").encode(),
        "no_specials.txt": b"hello\nworld\n",
        "truncated_tokenizer.json": json.dumps(tokenizer).encode()[:40],
        "wrong_tokenizer.json": json.dumps({"vocab": ["[PAD]"]}).encode(),
        "binary_tokenizer.json": bytes(range(256)),
    }


def sql_files() -> dict[str, bytes]:
    return {
        "empty.sql": b"",
        "comment_only.sql": b"-- nothing but a comment\n",
        "binary.sql": bytes(range(256)),
        "latin1.sql": "select 'café' as word;\n".encode("latin-1"),
        "utf16_bom.sql": "select 'from UTF-16' as word;\n".encode("utf-16"),
        "nul.sql": b"select 1;\x00 select 2;\n",
        "writes_a_file.sql": b"copy (select 1 as x) to 'written_by_sql.csv';\n",
        "deletes.sql": b"delete from documents;\n",
        "markup.sql": b"select 'see [citation needed] here' as x, '[/quote]' as \"[/y]\";\n",
    }


def fill_mask_files() -> dict[str, bytes]:
    return {
        "empty.txt": b"",
        "blank_lines.txt": b"\n  \n\t\n",
        "binary.bin": bytes(range(256)) * 4,
        "latin1.txt": "the café [MASK] .\n".encode("latin-1"),
        "utf16.txt": "the [MASK] sat .\n".encode("utf-16"),
    }


def stdin_files() -> dict[str, bytes]:
    """Piped input: the expected line's place (file:line) is in each name's test."""
    return {
        "binary.bin": bytes(range(128, 256)) * 4,
        "latin1.txt": "the ship [MASK] .\nthe café [MASK] .\n".encode("latin-1"),
        "nul.txt": b"the ship [MASK] .\nthe\x00 [MASK] .\n",
        "empty.txt": b"",
        "blank_lines.txt": b"\n  \n\t\n",
        # blank lines are skipped but counted, \r\n is one line end, and a byte-order mark moves no offset
        "bom_blank_lines_latin1.txt": codecs.BOM_UTF8 + b"the ship [MASK] .\n\n\r\n \t\nthe caf\xe9 [MASK] .\n",
    }


CONTEXT = "The ship sailed at dawn."


def squad(qas: object = None, answers: object = None, paragraphs: object = None) -> bytes:
    """A one-question SQuAD file, with one level replaced by a value of the wrong shape."""
    answer = [{"text": "dawn", "answer_start": 19}] if answers is None else answers
    question = [{"id": "q1", "question": "When did the ship sail?", "answers": answer}] if qas is None else qas
    paragraph = [{"context": CONTEXT, "qas": question}] if paragraphs is None else paragraphs
    return json.dumps({"version": "1.1", "data": [{"title": "Ships", "paragraphs": paragraph}]}, indent=1).encode()


def finetune_files() -> dict[str, bytes]:
    good = [json.dumps({"text": "A calm sea.", "label": "good"}), json.dumps({"text": "A storm.", "label": "bad"})]
    return {
        # classify: a header and no examples; a missing value as NaN (json.dumps writes float("nan") so).
        "header_only.csv": b"text,label\n",
        "header_only.tsv": b"text\tlabel\n",
        "nan_label.jsonl": "\n".join([*good, json.dumps({"text": "Unknown.", "label": float("nan")})]).encode(),
        "nan_text.jsonl": "\n".join([*good, json.dumps({"text": float("nan"), "label": "good"})]).encode(),
        # a quote never closed (csv's lenient mode took the rest of the file as one field), ; for ,
        "unclosed_quote.csv": b'text,label\nA calm sea.,good\n"A storm, unclosed,bad\nA port.,good\n',
        "semicolon.csv": b"text;label\nA calm sea.;good\nA storm.;bad\n",
        "list_label.jsonl": "\n".join([*good, json.dumps({"text": "Both.", "label": ["good", "bad"]})]).encode(),
        # qa: spans outside the context (Python would slice a negative start from the end) and wrong shapes.
        "negative_answer_start.json": squad(answers=[{"text": ".", "answer_start": -1}]),
        "answer_start_past_end.json": squad(answers=[{"text": "dawn", "answer_start": 90}]),
        "empty_answer_text.json": squad(answers=[{"text": "", "answer_start": 3}]),
        "answers_not_list.json": squad(answers={"text": "dawn", "answer_start": 19}),
        "answer_not_object.json": squad(answers=["dawn"]),
        "qas_not_list.json": squad(qas="When did the ship sail?"),
        "paragraphs_not_list.json": squad(paragraphs={"context": CONTEXT}),
        "duplicate_id.json": squad(qas=[{"id": "q1", "question": "When did the ship sail?", "answers": [
            {"text": "dawn", "answer_start": 19}]}, {"id": "q1", "question": "What sailed?", "answers": [
                {"text": "ship", "answer_start": 4}]}]),  # scored by id: the second would replace the first
        "impossible_as_text.json": squad(qas=[{"id": "q1", "question": "Who?", "answers": [],
                                               "is_impossible": "false"}]),  # bool("false") is True
    }


def config_files() -> dict[str, bytes]:
    """Each file names, in its first line, the --set that reaches into its bad section."""
    return {
        "section_list.yaml": b"# --set vocab.vocab_size=128\nvocab: [1, 2]\n",
        "section_text.yaml": b"# --set pretrain.lr=1e-4\npretrain: fast\n",
        "section_number.yaml": b"# --set pairs.seed=3\npairs: 3\n",
        "tasks_list.yaml": b"# --set finetune.tasks.sst.lr=1e-4\nfinetune:\n  tasks: [sst, ner]\n",
        "task_text.yaml": b"# --set finetune.tasks.sst.lr=1e-4\nfinetune:\n  tasks:\n    sst: classify\n",
    }


def manifest_files() -> dict[str, bytes]:
    shaped = {"format": 2, "stage": "vocab", "key": "0" * 64, "build": "b", "has_files": True}
    return {
        "list.json": b"[1, 2, 3]\n",
        "string.json": b'"vocab"\n',
        "null.json": b"null\n",
        "torn.json": json.dumps(shaped).encode()[:30],
        "outputs_list.json": json.dumps({**shaped, "outputs": [1, 2]}).encode(),
        "files_not_sizes.json": json.dumps({**shaped, "outputs": {"files": {"vocab/vocab.txt": "big"}}}).encode(),
        "summary_list.json": json.dumps({**shaped, "summary": ["tokens"]}).encode(),
        "inputs_strings.json": json.dumps({**shaped, "inputs": ["corpus/a.txt"]}).encode(),
    }


def hf_folders() -> dict[str, dict[str, bytes]]:
    vocab = (SPECIALS + "the\nsea\nship\n").encode()
    config = json.dumps(TINY_BERT, indent=2).encode()
    return {
        "empty_folder": {".keep": b""},
        "config_not_json": {"config.json": b"{not json", "model.safetensors": bytes(64), "vocab.txt": vocab},
        "config_wrong_types": {"config.json": json.dumps({**TINY_BERT, "hidden_size": "big"}).encode(),
                               "model.safetensors": bytes(64), "vocab.txt": vocab},
        "weights_garbage": {"config.json": config, "model.safetensors": bytes(range(256)), "vocab.txt": vocab},
        "weights_truncated": {"config.json": config, "vocab.txt": vocab,
                              "model.safetensors": b"\x40\x00\x00\x00\x00\x00\x00\x00" + b'{"a": {"dtype"'},
        "bin_garbage": {"config.json": config, "pytorch_model.bin": b"not a pickle", "vocab.txt": vocab},
        "no_tokenizer": {"config.json": config, "model.safetensors": bytes(64)},
        "no_weights": {"config.json": config, "vocab.txt": vocab},
    }


def write(folder: Path, files: dict[str, bytes]) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)


def main() -> None:
    write(HERE / "corpus", corpus())
    write(HERE / "vocab", vocab_files())
    write(HERE / "sql", sql_files())
    write(HERE / "fill_mask", fill_mask_files())
    write(HERE / "stdin", stdin_files())
    write(HERE / "finetune", finetune_files())
    write(HERE / "manifest", manifest_files())
    write(HERE / "config", config_files())
    shutil.rmtree(HERE / "hf", ignore_errors=True)
    for name, files in hf_folders().items():
        write(HERE / "hf" / name, files)


if __name__ == "__main__":
    main()
