"""Tokenising a corpus three ways, with identical ids: whole sentences, distinct words per batch, per corpus.

    python benchmarks/tokenise_designs.py [--source FILE ...] [--copies 3] [--rounds 3] [--no-append]

Issue #24 asked for designs that beat the tokenizer's own batch call, measured on the same text. Each side
gets the same batches of 8,192 sentences (the text's lines) with a 30,522-piece WordPiece vocabulary trained
on it, in one process, rounds alternating the sides; ids are compared equal on every batch.

* ``encode_batch``: `bertwb.data.word_ids.encode_plain`, the library's batch call on whole sentences.
* ``words per batch``: each distinct space-separated word of a batch encoded once, found with a Python
  dict per word occurrence (the design the vocab stage used before; kept here as the measured rival).
* ``words per corpus``: `bertwb.data.word_ids.WordEncoder`, what the vocab stage uses now.

``--copies`` repeats the text (a corpus repeats its words across batches as well as within them: a copy
adds no new word). The default sources are English prose a Debian machine installs: Python's documentation
(python3.11-doc) and vim's help (vim-runtime). Appends to the benchmark log and BENCHMARKS.md's table
unless ``--no-append``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from itertools import chain
from pathlib import Path

import numpy as np
import tokenizers
from tokenizers import trainers

from _common import append_report, cpu_model
from bertwb.data.tokenizer import SPECIAL_TOKENS, build_tokenizer
from bertwb.data.word_ids import WordEncoder, encode_plain, encodes_by_word

SOURCES = [Path("/usr/share/doc/python3.11/html/_sources"), Path("/usr/share/vim/vim90/doc")]
BATCH = 8192


def read_lines(paths: list[Path]) -> list[str]:
    """The non-blank lines of every ``.txt`` file under ``paths`` (files or folders), in a fixed order."""
    files = sorted(chain.from_iterable(p.rglob("*.txt") if p.is_dir() else [p] for p in paths))
    lines = [line.strip() for f in files for line in f.read_text(encoding="utf-8", errors="replace").splitlines()]
    return [line for line in lines if line]


def by_word_per_batch(tokenizer: tokenizers.Tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Each distinct word of one batch encoded once, in Python: the vocab stage's design before WordEncoder."""
    pieces = [text.split(" ") for text in texts]
    pieces_per_text = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
    distinct: dict[str, int] = {}
    occurrences = np.fromiter((distinct.setdefault(p, len(distinct)) for p in chain.from_iterable(pieces)),
                              dtype=np.int64, count=int(pieces_per_text.sum()))
    piece_lengths, piece_ids = encode_plain(tokenizer, list(distinct))
    piece_lengths = piece_lengths.astype(np.int64)
    piece_starts = np.cumsum(piece_lengths) - piece_lengths
    lengths = piece_lengths[occurrences]
    out_starts = np.cumsum(lengths) - lengths
    flat = piece_ids[np.repeat(piece_starts[occurrences] - out_starts, lengths) + np.arange(int(lengths.sum()))]
    text_of_occurrence = np.repeat(np.arange(len(texts)), pieces_per_text)
    text_lengths = np.bincount(text_of_occurrence, weights=lengths, minlength=len(texts)).astype(np.int32)
    return text_lengths, flat.astype(np.int32, copy=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, nargs="*", default=SOURCES, help="text files or folders of .txt")
    parser.add_argument("--copies", type=int, default=3, help="times the text is repeated (default 3)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    lines = read_lines(args.source)
    if not lines:
        sys.exit(f"no text in {', '.join(map(str, args.source))}")
    tokenizer = build_tokenizer(None, True)
    tokenizer.train_from_iterator(lines, trainer=trainers.WordPieceTrainer(
        vocab_size=30522, special_tokens=SPECIAL_TOKENS, continuing_subword_prefix="##", show_progress=False))
    tokenizer.encode_special_tokens = True  # as the vocab stage encodes the corpus
    assert encodes_by_word(tokenizer)
    corpus = lines * args.copies
    batches = [corpus[i:i + BATCH] for i in range(0, len(corpus), BATCH)]
    sides = {"encode_batch": lambda: [encode_plain(tokenizer, b) for b in batches],
             "words per batch": lambda: [by_word_per_batch(tokenizer, b) for b in batches],
             "words per corpus": lambda: _corpus(tokenizer, batches)}
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    reference = None
    for round_number in range(args.rounds):
        for name in (list(sides) if round_number % 2 == 0 else list(sides)[::-1]):
            started = time.perf_counter()
            result = sides[name]()
            seconds[name].append(time.perf_counter() - started)
            if reference is None:
                reference = result
            elif not all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
                         for a, b in zip(reference, result, strict=True)):
                sys.exit(f"{name}: ids differ from the first side's")
            print(f"round {round_number + 1}  {name:<17} {seconds[name][-1]:7.2f} s", flush=True)
    n_tokens = sum(len(ids) for _, ids in reference)
    best = {name: min(values) for name, values in seconds.items()}
    words = sum(len(line.split(" ")) for line in lines)
    distinct = len({w for line in lines for w in line.split(" ")})
    now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    command = "python benchmarks/tokenise_designs.py " + " ".join(sys.argv[1:])
    text = [f"\n## Tokenising designs — {now}\n",
            f"Script: `{command.strip()}`.",
            f"Machine: {platform.system()} {platform.machine()} ({cpu_model()}), {os.cpu_count()} CPUs, "
            f"tokenizers {tokenizers.__version__}, load average before the run {os.getloadavg()[0]:.1f}.",
            f"Text: {', '.join(map(str, args.source))}: {len(lines):,} lines, {words:,} words ({distinct:,} distinct), "
            f"repeated {args.copies}×; batches of {BATCH:,} sentences; best of {args.rounds} alternating rounds; "
            "ids equal on every batch.\n",
            "| design | seconds | tokens/s | × encode_batch |", "|---|---|---|---|"]
    for name in sides:
        text.append(f"| {name} | {best[name]:.2f} | {n_tokens / best[name]:,.0f} | "
                    f"{best['encode_batch'] / best[name]:.2f}× |")
    headline = (f"{n_tokens:,} tokens of English docs: words per corpus (the vocab stage) "
                f"**{best['encode_batch'] / best['words per corpus']:.2f}×** `encode_batch`, words per batch "
                f"{best['encode_batch'] / best['words per batch']:.2f}×; identical ids")
    text += ["", f"Headline: {headline}.", ""]
    print("\n".join(text))
    if not args.no_append:
        append_report("\n".join(text), headline)


def _corpus(tokenizer: tokenizers.Tokenizer, batches: list[list[str]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every batch through one WordEncoder, new for this pass (its memory of words starts empty)."""
    encoder = WordEncoder(tokenizer)
    return [encoder.encode(batch) for batch in batches]


if __name__ == "__main__":
    main()
