"""Pairs throughput (instances/s, MB/s, peak RSS) at seq 128, against the plain-Python reference.

    python benchmarks/bench_pairs.py [--mb 10] [--scale 10] [--reference-s 30] [--no-append]

Builds a ``--mb`` MB corpus and one ``--scale`` times larger in the BERT format (the sample corpus's
documents repeated, a copy number written into each so de-duplication keeps them; the sentences of
each copy are shuffled so copies differ), runs ingest and vocab once per corpus (the large one loads
the small one's vocab.txt to skip training), then ``bertwb pairs --force`` as a subprocess at
dupe_factor 1 and 5 with workers=1 (built in the main process) and workers=2 (two build processes),
sampling the peak RSS of the process
and its workers with psutil. In this same process it then runs the plain-Python reference from
tests/test_pairs.py (the original create_pretraining_data, ported) on the small corpus's train
documents for about ``--reference-s`` seconds. Appends a section to the benchmark log and a row to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from _common import append_report, cpu_model, run_with_peak_rss

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_corpus" / "pretrain"
BERTWB = [sys.executable, "-m", "bertwb"]
sys.path.insert(0, str(REPO / "tests"))


def read_documents() -> list[list[str]]:
    documents = []
    for path in sorted(SAMPLE.glob("*.txt")):
        documents += [b.strip("\n").split("\n") for b in path.read_text(encoding="utf-8").split("\n\n") if b.strip()]
    if not documents:
        sys.exit(f"no documents under {SAMPLE}; run python sample_corpus/generate.py")
    return documents


def write_corpus(directory: Path, megabytes: float, documents: list[list[str]]) -> int:
    """About ``megabytes`` MB of varied copies of ``documents``; return the bytes written."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    target, written, copy = megabytes * 1e6, 0, 0
    with open(directory / "corpus.txt", "w", encoding="utf-8") as handle:
        while written < target:
            for sentences in documents:
                sentences = sentences[:]
                rng.shuffle(sentences)
                text = f"Copy {copy} begins here.\n" + "\n".join(sentences) + "\n\n"
                handle.write(text)
                written += len(text.encode())
            copy += 1
    return written


def run_measured(project: Path, *args: str) -> tuple[float, float]:
    """Run ``bertwb ARGS`` in ``project``; return (seconds, peak RSS in MB of it and its children)."""
    return run_with_peak_rss([*BERTWB, *args], cwd=project)


def make_project(root: Path, megabytes: float, documents: list[list[str]], vocab_from: Path | None) -> int:
    size = write_corpus(root / "corpus", megabytes, documents)
    vocab = f"  from_file: {vocab_from}\n" if vocab_from else ""
    (root / "bertwb.yaml").write_text(f"ingest:\n  inputs: [corpus]\n  valid_fraction: 0.05\nvocab:\n{vocab}"
                                      "  vocab_size: 8192\n")
    seconds, _ = run_measured(root, "run", "--until", "vocab")
    print(f"  ingest+vocab {megabytes:g} MB: {seconds:.1f}s", file=sys.stderr)
    return size


def pairs_run(root: Path, dupe: int, workers: int) -> dict[str, float]:
    seconds, peak_mb = run_measured(root, "pairs", "--force", "--set", f"pairs.dupe_factor={dupe}",
                                    "--set", f"pairs.workers={workers}", "--set", "pairs.max_seq_length=128")
    summary = json.loads((root / ".bertwb" / "manifests" / "pairs.json").read_text())["summary"]
    instances = summary["instances_train"] + summary["instances_valid"]
    return {"instances": instances, "stage_s": summary["seconds"], "process_s": seconds, "peak_mb": peak_mb,
            "instances_per_s": instances / summary["seconds"], "workers": summary["workers"],
            "shards": summary["shards"]}


def reference_rate(root: Path, budget_s: float) -> tuple[int, float]:
    """(instances, seconds) of the plain-Python reference on the first train documents (at most
    4,000 documents, at most about ``budget_s``)."""
    from test_pairs import reference_create_instances

    con = duckdb.connect(str(root / ".bertwb" / "bertwb.duckdb"), read_only=True)
    tokens = [r[0] for r in con.execute("select token from vocab order by token_id").fetchall()]
    rows = con.execute("""select t.doc_id, t.ids from tokens t join documents d using (doc_id)
                          where d.split = 'train' and d.doc_id < 4000 and len(t.ids) > 0
                          order by t.doc_id, t.sent_idx""").fetchall()
    con.close()
    documents: dict[int, list[list[int]]] = {}
    for doc_id, ids in rows:
        documents.setdefault(doc_id, []).append(ids)
    docs = list(documents.values())
    count, started = 0, time.perf_counter()
    for start in range(0, len(docs), 200):
        count += len(reference_create_instances(docs[start:start + 200], tokens, dupe_factor=1))
        if time.perf_counter() - started > budget_s:
            break
    return count, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=10)
    parser.add_argument("--scale", type=float, default=10)
    parser.add_argument("--reference-s", type=float, default=30)
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    documents = read_documents()
    rows, sizes = [], {}
    with tempfile.TemporaryDirectory(prefix="bench_pairs_") as tmp:
        small, large = Path(tmp) / "small", Path(tmp) / "large"
        sizes["small"] = make_project(small, args.mb, documents, None)
        sizes["large"] = make_project(large, args.mb * args.scale, documents,
                                      small / ".bertwb" / "vocab" / "vocab.txt")
        for name, root in (("small", small), ("large", large)):
            for dupe in (1, 5):
                for workers in (1, 2):
                    result = pairs_run(root, dupe, workers)
                    result.update(corpus=name, mb=sizes[name] / 1e6, dupe=dupe,
                                  mb_per_s=sizes[name] / 1e6 * dupe / result["stage_s"])
                    print(f"  {result}", file=sys.stderr)
                    rows.append(result)
        ref_count, ref_seconds = reference_rate(small, args.reference_s)
    report = render(rows, ref_count, ref_seconds, args)
    print(report)
    if not args.no_append:
        best = max(rows, key=lambda r: r["instances_per_s"])
        headline = (f"{best['instances_per_s']:,.0f} instances/s ({best['mb']:.0f} MB, dupe {best['dupe']}, "
                    f"{best['workers']} worker(s)), {best['instances_per_s'] * ref_seconds / ref_count:.1f}× a "
                    "plain-Python port of the original script")
        append_report(report, headline)


def render(rows: list[dict], ref_count: int, ref_seconds: float, args: argparse.Namespace) -> str:
    cpu = cpu_model()
    lines = [
        f"## Pairs (MLM + NSP instances) — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
        f"Script: `python benchmarks/bench_pairs.py --mb {args.mb:g} --scale {args.scale:g}`.",
        f"Machine: {platform.system()} {platform.release()} {platform.machine()} ({cpu}), {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, duckdb {duckdb.__version__}.", "",
        "* seq 128, masked_lm_prob 0.15, max_predictions 20, static masking, shard_tokens 1M (default).",
        "* `stage s` is the stage's own time (reading tokens from DuckDB, building, masking, writing the",
        "  DuckDB table and the shard files); `process s` adds interpreter start-up and the commit.",
        "* MB/s = corpus text MB × dupe / stage s: text turned into pairs per second.",
        "* peak RSS = the bertwb process plus its worker processes, sampled every 20 ms.", "",
        "| corpus MB | dupe | workers | shards | instances | stage s | process s | instances/s | MB/s | peak RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['mb']:.1f} | {r['dupe']} | {r['workers']} | {r['shards']} | {r['instances']:,} | "
                     f"{r['stage_s']:.2f} | {r['process_s']:.2f} | {r['instances_per_s']:,.0f} | "
                     f"{r['mb_per_s']:.1f} | {r['peak_mb']:.0f} |")
    lines += ["", f"Reference (plain-Python port of the original `create_pretraining_data` on token ids, so "
              f"without its tokenisation; one core, same process, the small corpus's first train documents): "
              f"{ref_count:,} instances at dupe 1 in {ref_seconds:.1f} s = "
              f"**{ref_count / ref_seconds:,.0f} instances/s**.", ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
