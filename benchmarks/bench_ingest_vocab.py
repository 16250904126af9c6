"""Ingest and vocab throughput (MB/s, peak RSS), and tokenisation against raw ``encode_batch``.

    python benchmarks/bench_ingest_vocab.py [--mb 100] [--small-mb 10] [--no-append]

Builds a corpus of ``--mb`` MB in the BERT format by repeating the sample corpus's documents with a
copy number written into each (so de-duplication keeps them), runs ``bertwb ingest`` and
``bertwb vocab`` as subprocesses on it and on a ``--small-mb`` corpus (peak RSS sampled with psutil,
to show memory does not grow with the corpus), then times, in this one process, the vocab stage's
tokenisation into DuckDB against calling ``tokenizers``' ``encode_batch_fast`` directly on the same
sentences already in memory. Appends a section to the benchmark log and a row to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from _common import REPO, append_report, run_with_peak_rss

SAMPLE = REPO / "sample_corpus" / "pretrain"


def read_documents() -> list[str]:
    """The sample corpus's documents as text blocks (one sentence per line)."""
    blocks = []
    for path in sorted(SAMPLE.glob("*.txt")):
        blocks += [b.strip("\n") for b in path.read_text(encoding="utf-8").split("\n\n") if b.strip()]
    if not blocks:
        sys.exit(f"no documents under {SAMPLE}; run python sample_corpus/generate.py")
    return blocks


def write_corpus(directory: Path, megabytes: float, blocks: list[str]) -> int:
    """Write about ``megabytes`` MB in shards of ~25 MB; return the bytes written."""
    directory.mkdir(parents=True, exist_ok=True)
    target, written, copy, shard = megabytes * 1e6, 0, 0, 0
    handle = open(directory / "shard-000.txt", "w", encoding="utf-8")
    while written < target:
        for block in blocks:
            text = f"Copy {copy} begins here.\n{block}\n\n"
            handle.write(text)
            written += len(text.encode())
            if written >= (shard + 1) * 25e6:
                handle.close()
                shard += 1
                handle = open(directory / f"shard-{shard:03d}.txt", "w", encoding="utf-8")
            if written >= target:
                break
        copy += 1
    handle.close()
    return written


def run_stage(project: Path, stage: str) -> tuple[float, float]:
    """Run ``bertwb STAGE`` as a subprocess; return (seconds, peak RSS in MB of it and its children)."""
    return run_with_peak_rss([sys.executable, "-m", "bertwb", stage, "--config", str(project / "bertwb.yaml")],
                             every_s=0.05)


def make_project(root: Path, megabytes: float, blocks: list[str]) -> tuple[Path, int]:
    size = write_corpus(root / "corpus", megabytes, blocks)
    (root / "bertwb.yaml").write_text("ingest:\n  inputs: [corpus]\nvocab:\n  vocab_size: 30522\n")
    return root, size


def tokenisation_side_by_side(project: Path) -> dict[str, float]:
    """Sentences/s of the vocab stage's tokenise-into-DuckDB against raw encode_batch_fast."""
    from bertwb.data.tokenizer import load_tokenizer
    from bertwb.data.sinks import DuckTable
    from bertwb.data.tokenising import tokenise_all
    from bertwb.stages.vocab import TOKENS_COLUMNS
    tokenizer = load_tokenizer(project / ".bertwb" / "vocab")
    con = duckdb.connect(str(project / ".bertwb" / "bertwb.duckdb"))
    n = con.execute("select count(*) from sentences").fetchone()[0]
    texts = [row[0] for row in con.execute("select text from sentences order by doc_id, sent_idx").fetchall()]
    batch = 8192
    start = time.perf_counter()
    n_raw_tokens = 0
    for i in range(0, len(texts), batch):
        for encoding in tokenizer.encode_batch_fast(texts[i:i + batch], add_special_tokens=False):
            n_raw_tokens += len(encoding.ids)
    raw_seconds = time.perf_counter() - start
    del texts
    con.execute("drop table if exists bench_tokens")
    start = time.perf_counter()
    tokens = DuckTable(con, "bench_tokens", "bench_tokens", TOKENS_COLUMNS, in_flight=1)
    n_tokens = tokenise_all(tokenizer, con, tokens, n, batch).tokens
    tokens.finish()
    ours_seconds = time.perf_counter() - start
    con.execute("drop table bench_tokens")
    con.close()
    assert n_tokens == n_raw_tokens, (n_tokens, n_raw_tokens)
    return {"sentences": n, "tokens": n_tokens, "raw_s": raw_seconds, "ours_s": ours_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=100)
    parser.add_argument("--small-mb", type=float, default=10)
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    blocks = read_documents()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for megabytes in (args.small_mb, args.mb):
            project, size = make_project(Path(tmp) / f"mb{megabytes:g}", megabytes, blocks)
            ingest_s, ingest_rss = run_stage(project, "ingest")
            vocab_s, vocab_rss = run_stage(project, "vocab")
            rows.append((megabytes, size, ingest_s, ingest_rss, vocab_s, vocab_rss))
            print(f"{size / 1e6:.0f} MB: ingest {size / 1e6 / ingest_s:.1f} MB/s peak {ingest_rss:.0f} MB; "
                  f"vocab {size / 1e6 / vocab_s:.1f} MB/s peak {vocab_rss:.0f} MB", flush=True)
        tok = tokenisation_side_by_side(project)
    ratio = tok["raw_s"] / tok["ours_s"]
    print(f"tokenisation: ours {tok['sentences'] / tok['ours_s']:,.0f} sentences/s, raw encode_batch_fast "
          f"{tok['sentences'] / tok['raw_s']:,.0f} sentences/s, ours/raw = {ratio:.2f}")
    if args.no_append:
        return
    lines = [
        f"\n## Ingest and vocab throughput — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n",
        f"Script: `python benchmarks/bench_ingest_vocab.py --mb {args.mb:g} --small-mb {args.small_mb:g}`.",
        f"Machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, duckdb {duckdb.__version__}.",
        "Corpus: the sample corpus's documents repeated with a copy number (BERT format); vocab_size 30522.",
        "Each stage runs as its own `bertwb` process; peak RSS is sampled every 50 ms.\n",
        "| corpus | ingest MB/s | ingest peak RSS | vocab (train + tokenise) MB/s | vocab peak RSS |",
        "|---|---|---|---|---|",
    ]
    for _, size, ingest_s, ingest_rss, vocab_s, vocab_rss in rows:
        lines.append(f"| {size / 1e6:.0f} MB | {size / 1e6 / ingest_s:.1f} | {ingest_rss:.0f} MB | "
                     f"{size / 1e6 / vocab_s:.1f} | {vocab_rss:.0f} MB |")
    lines += [
        "",
        f"Tokenisation of the {tok['sentences']:,} sentences ({tok['tokens']:,} tokens) of the largest corpus, "
        "side by side in one process:\n",
        "| path | sentences/s | ratio |",
        "|---|---|---|",
        f"| `encode_batch_fast` on texts already in memory | {tok['sentences'] / tok['raw_s']:,.0f} | 1.00 |",
        f"| bertwb vocab: read from DuckDB, encode, count, write `tokens` | {tok['sentences'] / tok['ours_s']:,.0f} "
        f"| {ratio:.2f} |",
        "",
    ]
    _, size, ingest_s, _, vocab_s, _ = rows[-1]
    headline = (f"{size / 1e6:.0f} MB corpus: ingest {size / 1e6 / ingest_s:.1f} MB/s, vocab (train + tokenise) "
                f"{size / 1e6 / vocab_s:.1f} MB/s; tokenising into DuckDB at {ratio:.2f}× raw `encode_batch_fast`")
    append_report("\n".join(lines), headline)


if __name__ == "__main__":
    main()
