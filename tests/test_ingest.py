"""ingest: every input format, clean-up, segmentation, de-duplication and the split."""

from __future__ import annotations

import gzip
import json

import duckdb
import pytest
import zstandard

from bertwb.data.sentences import split_sentences
from conftest import Project, ingest_summary, ingested_documents, make_documents, write_bert_format


def _ingest(project: Project, inputs: str, *extra: str) -> list[list[str]]:
    project.run("ingest", "--set", f"ingest.inputs=[{inputs}]", *extra)
    return ingested_documents(project)


def test_bert_format_keeps_documents_and_sentences(project: Project):
    docs = make_documents(30, seed=3)
    write_bert_format(project.root / "one" / "x.txt", docs)
    assert _ingest(project, "one") == docs


def test_paragraphs_are_segmented_into_sentences(project: Project):
    (project.root / "para").mkdir()
    (project.root / "para" / "p.txt").write_text(
        "Dr. Smith sailed at 3.5 knots. The crew cheered!\nIs the storm over? Yes.\n\n"
        "A second paragraph starts here. It ends here.\n")
    docs = _ingest(project, "para", "--set", "ingest.format=paragraphs")
    assert docs == [["Dr. Smith sailed at 3.5 knots.", "The crew cheered!", "Is the storm over?", "Yes."],
                    ["A second paragraph starts here.", "It ends here."]]


def test_jsonl_with_a_configured_field_and_bad_records(project: Project):
    (project.root / "j").mkdir()
    lines = [json.dumps({"body": "First doc. Two sentences."}), "{not json", json.dumps({"other": "x"}),
             json.dumps({"body": "Second doc.\n\nNew paragraph."})]
    (project.root / "j" / "d.jsonl").write_text("\n".join(lines) + "\n")
    docs = _ingest(project, "j", "--set", "ingest.text_field=body")
    assert docs == [["First doc.", "Two sentences."], ["Second doc.", "New paragraph."]]
    assert ingest_summary(project)["bad_lines"] == 2


def test_csv_tsv_and_parquet_through_duckdb(project: Project):
    data = project.root / "t"
    data.mkdir()
    (data / "a.csv").write_text('id,text\n1,"Hello, world. Bye."\n2,Plain row.\n')
    (data / "b.tsv").write_text("text\tlabel\nTab separated text.\tx\n")
    duckdb.connect().execute(f"copy (select 'From parquet. Indeed.' as text) to '{data / 'c.parquet'}' "
                             "(format parquet)")
    docs = _ingest(project, "t")
    assert docs == [["Hello, world.", "Bye."], ["Plain row."], ["Tab separated text."],
                    ["From parquet.", "Indeed."]]


def test_missing_column_is_a_clear_error(project: Project):
    (project.root / "t").mkdir()
    (project.root / "t" / "a.csv").write_text("id,body\n1,hello\n")
    result = project.run("ingest", "--set", "ingest.inputs=[t]", expect=1)
    assert "no column 'text' (has: id, body)" in result.output and "ingest.text_field" in result.output


def test_gzip_zstd_and_globs(project: Project):
    docs = make_documents(10, seed=5)
    text = "\n\n".join("\n".join(d) for d in docs) + "\n"
    (project.root / "z").mkdir()
    (project.root / "z" / "a.txt.gz").write_bytes(gzip.compress(text.encode()))
    (project.root / "z" / "b.txt.zst").write_bytes(zstandard.ZstdCompressor().compress(text.encode()))
    (project.root / "z" / "ignored.md").write_text("Not matched by the glob.\n")
    docs_out = _ingest(project, "z/*.txt.*", "--set", "ingest.dedupe=false")
    assert docs_out == docs + docs


def test_unicode_nfc_and_control_characters(project: Project):
    (project.root / "u").mkdir()
    decomposed = "Cafe\u0301 in Zu\u0308rich."  # e + combining acute, u + combining diaeresis
    (project.root / "u" / "u.txt").write_text(f"{decomposed}\nBell\x07 and\x1b zero\u200b\ufeff width\tend.\n")
    assert _ingest(project, "u") == [["Café in Zürich.", "Bell and zero\u200b width end."]]


def test_exact_duplicates_are_removed(project: Project):
    docs = make_documents(20, seed=9)
    write_bert_format(project.root / "d" / "a.txt", docs + docs[:5])
    assert _ingest(project, "d") == docs
    assert ingest_summary(project)["duplicates_removed"] == 5
    assert len(_ingest(project, "d", "--set", "ingest.dedupe=false")) == 25


def test_split_is_deterministic_by_document_and_seeded(project: Project):
    docs = make_documents(400, seed=11)
    write_bert_format(project.root / "s" / "a.txt", docs)

    def valid_texts(*extra: str) -> set[str]:
        project.run("ingest", "--set", "ingest.inputs=[s]", "--set", "ingest.valid_fraction=0.2", *extra)
        con = duckdb.connect(str(project.workspace / "bertwb.duckdb"), read_only=True)
        texts = {r[0] for r in con.execute("select string_agg(text, ' ' order by sent_idx) from sentences "
                                           "join documents using (doc_id) where split = 'valid' "
                                           "group by doc_id").fetchall()}
        con.close()
        return texts

    first = valid_texts()
    assert 50 <= len(first) <= 110  # 20% of 400, binomial spread
    assert valid_texts("--force") == first
    assert valid_texts("--set", "ingest.seed=1") != first


def test_mixed_corpus_skips_bad_files_and_counts_bad_lines(project: Project):
    data = project.root / "m"
    write_bert_format(data / "good.txt", make_documents(5, seed=1))
    (data / "blob.dat").write_bytes(b"\x00\x01\x02" * 100)
    (data / "empty.txt").write_text("")
    (data / "mixed.txt").write_bytes(b"A good line.\n\xff\xfe broken line\nAnother good line.\n")
    result = project.run("ingest", "--set", "ingest.inputs=[m]")
    assert "skipped m/blob.dat: binary file" in result.output
    summary = ingest_summary(project)
    assert summary["files_skipped"] == 2 and summary["bad_lines"] == 1
    assert {s["reason"] for s in summary["skipped"]} == {"binary file (not text)", "empty file"}
    assert ["A good line.", "Another good line."] in ingested_documents(project)


@pytest.mark.parametrize("paragraph, expected", [
    ("They waited. Mr. Smith arrived.", ["They waited.", "Mr. Smith arrived."]),
    ('"Stop!" shouted the guard. He left.', ['"Stop!" shouted the guard.', "He left."]),
    ("   ", []),
])
def test_split_sentences(paragraph, expected):
    assert split_sentences(paragraph) == expected


def test_a_folders_readme_and_hidden_files_are_not_corpus_unless_named(project):
    """`bertwb init` writes corpus/README.md beside the user's text: ingesting the folder must not read it."""
    import json

    (project.root / "corpus" / "README.md").write_text("# corpus/\n\nPut the text here.\n")
    (project.root / "corpus" / ".notes.txt").write_text("A hidden note.\n")
    project.run("ingest")
    summary = json.loads((project.workspace / "manifests" / "ingest.json").read_text())["summary"]
    assert summary["files"] == 1
    texts = project.run("sql", "select text from sentences", "--format", "csv").output
    assert "Put the text here" not in texts and "hidden note" not in texts
    project.write_config(project.config.read_text().replace("inputs: [corpus]", "inputs: [corpus, corpus/README.md]"))
    project.run("ingest")
    assert "Put the text here" in project.run("sql", "select text from sentences", "--format", "csv").output
