#!/usr/bin/env python
"""Compare sentence segmenters (blingfire, pysbd, syntok) for the ingest stage.

Usage:
    python benchmarks/segmenters.py [--mb N] [--budget SECONDS] [--errors K]
                                    [--no-append]

What it measures
----------------
* Quality, on a hand-written gold set (``GOLD_PARAGRAPHS`` below): each
  paragraph is a list of gold sentences, joined with a single space to form
  the segmenter input.  Sentence boundaries are compared as SETS OF END
  OFFSETS counted in non-whitespace characters (i.e. "a boundary after the
  k-th non-space character of the paragraph").  Counting only non-space
  characters makes the comparison immune to segmenters that normalise or
  move whitespace (blingfire rewrites newlines/tabs, pysbd keeps trailing
  spaces, ...), while still catching every missed or spurious split.  The
  paragraph-final boundary is excluded, because every segmenter gets it for
  free and it would inflate the scores.  From these we report boundary
  precision / recall / F1 and the share of paragraphs segmented exactly
  right.
* Speed, on a larger synthetic corpus (~``--mb`` MB of UTF-8) built by
  deterministically shuffling and concatenating the gold paragraphs into
  longer paragraphs.  Every segmenter is called once per paragraph, which
  is how ingest uses it (``split_sentences(paragraph)``).  All segmenters
  run in the same process, one after the other.  Slow segmenters are timed
  on a prefix of the corpus so the whole script stays within a time budget;
  the table says which size each rate was measured on.
* Memory: RSS growth caused by importing the library (models, native code)
  and the peak RSS growth while segmenting (sampled with psutil in a
  background thread).

Results are printed and appended as a markdown section to this month's
benchmark log (benchmarks/log/), their headline to BENCHMARKS.md's table.
"""
from __future__ import annotations

from _common import append_report, cpu_model

import argparse
import datetime as _dt
import gc
import importlib
import os
import platform
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Callable

import psutil


# ---------------------------------------------------------------------------
# Gold data.  Written for this benchmark; every inner list is one paragraph,
# every string one gold sentence.  Hard cases are deliberately over-
# represented: abbreviations mid-sentence AND at sentence end, decimals,
# ellipses, quotes, ?/!, digit- and lowercase-initial sentences, brackets,
# URLs/e-mails, initials and non-ASCII text.
# ---------------------------------------------------------------------------
GOLD_PARAGRAPHS: list[list[str]] = [
    # Titles before names.
    ["Dr. Alvarez arrived at the lab before sunrise.",
     "She checked the incubators, fed the cultures, and made coffee.",
     "Nobody else showed up until nine."],
    ["Mr. and Mrs. Okafor moved to St. Louis in 1998.",
     "Their daughter later studied at a small college in the U.S. Midwest.",
     "She now teaches chemistry to teenagers."],
    # Decimals and units.
    ["The new battery lasts about 3.5 hours under heavy load.",
     "That is roughly 20% better than last year's model.",
     "Charging from empty takes a little over an hour."],
    # Quotes with internal ?/! and commas.
    ['"Are you coming?" she asked.',
     "He shrugged and said nothing.",
     '"Fine," she said, "I will go alone."'],
    # Ellipses: inside a sentence, then at a sentence end.
    ["I waited... and waited.",
     "The bus never came.",
     "He started to explain...",
     "Then the phone rang."],
    ["What a day!",
     "Did you see the storm last night?",
     "The power went out twice.",
     "Unbelievable!"],
    # Sentences starting with digits.
    ["The meeting ended at noon.",
     "42 people signed the petition afterwards.",
     "2019 was a difficult year for the company."],
    # Lowercase sentence starts (chat/log style text).
    ["the logs were messy.",
     "some lines had no timestamps at all.",
     "we fixed the parser on Friday."],
    # Parentheses, including a fully parenthesised sentence.
    ["The results (see Table 2) were surprising.",
     "Most participants (about two thirds) preferred the older design.",
     "(This matched an earlier pilot study.)",
     "We plan to repeat the test in spring."],
    # URLs and e-mail addresses mid-sentence.
    ["The documentation lives at https://example.org/docs/v2.1/index.html for now.",
     "Send questions to help.desk@example.com before Monday.",
     "Replies usually take a day or two."],
    # Initials.
    ["The report was written by J. R. Smith and A. B. Chen.",
     "It runs to forty pages.",
     "Smith later presented it in Geneva."],
    # Non-ASCII.
    ["We met at a small café in Zürich.",
     "The owner, Mr. Müller, served crêpes and espresso.",
     "It was the best breakfast of the trip."],
    ["Señora García bought a ticket to São Paulo.",
     "Her flight left Madrid at 06:15 on a Tuesday."],
    # e.g. / i.e.
    ["Some fruits, e.g. mangoes and papayas, ripen quickly in warm rooms.",
     "Store them carefully, i.e. away from direct sunlight.",
     "Bananas are another example."],
    # etc. mid-sentence and at the end of a sentence.
    ["The kit includes screws, washers, brackets, etc. in a single box.",
     "Assembly takes about an hour.",
     "Tools are sold separately, e.g. drills, saws, etc.",
     "Ask the staff for help."],
    ["Version 2.0 shipped in March.",
     "It fixed several bugs in the export module.",
     "Version 2.1 followed six weeks later."],
    # A one-sentence paragraph (any split is a false positive).
    ["Rain is expected across the whole region tomorrow afternoon."],
    ['"Stop!" shouted the guard.',
     "The thief kept running.",
     "Later, the police found him hiding behind a warehouse on Elm St. near the river."],
    # Abbreviations that END a sentence.
    ["The bakery is on Baker St.",
     "It opens at seven every morning."],
    ["The company expanded quickly across the U.S.",
     "Its first overseas office opened in Dublin."],
    ["The train leaves at 5 p.m. on weekdays.",
     "On weekends it leaves at 7 a.m. instead."],
    ["The population grew from 1,204,500 to 1,310,200 in ten years.",
     "That is an increase of 8.78 percent.",
     "Analysts expect growth to slow to 0.5 percent per year."],
    ["You sold the car?!",
     "I can't believe it.",
     "Well, at least you got a good price."],
    # Colons/semicolons are not boundaries.
    ["There were three options: stay, leave, or wait; we chose to wait.",
     "The decision turned out well."],
    ["Prof. Tanaka joined Acme Inc. last spring.",
     "The case of Smith vs. Jones is still pending.",
     "Acme Ltd. declined to comment."],
    ["She works for Globex Inc.",
     "The firm makes industrial sensors."],
    # Unicode ellipsis and curly quotes.
    ["Well… I suppose we could try again.",
     "Let me think about it…",
     "Call me tomorrow."],
    ["“It was a mistake,” he admitted.",
     "Nobody argued with him.",
     "The room stayed quiet for a long time."],
    ["'Ready?' asked the coach.",
     "The team nodded.",
     "They ran onto the field."],
    ["Call the function with verbose=True to see more output.",
     "The default timeout is 2.5 s.",
     "Set it to 0 to disable the check."],
    ["3 of the 12 samples failed.",
     "iPhone users reported the bug first.",
     "eBay listings for the device dropped sharply."],
    ["The climbers reached the summit of Mt. Everest on the third attempt.",
     "Room No. 5 was reserved for the guide."],
    ["See section 4.2.1 for details.",
     "Figure 3 shows the full pipeline."],
    # URL / e-mail at the very end of a sentence.
    ["For access, write to admin@lab.example.net.",
     "We reply within 24 hours."],
    ["The slides are at www.example.com/talks.",
     "Feel free to share them."],
    ["She earned a Ph.D. in physics from a university in Ohio.",
     "Her thesis covered dark matter."],
    ["He finally finished his Ph.D.",
     "Then he took a long vacation."],
    ["1969 was the year of the moon landing.",
     "Millions watched it live on television."],
    ['The sign read "Closed for repairs."',
     "We turned around and drove home."],
    ["The vote passed easily.",
     "(Two members abstained.)"],
    ["The bridge is approx. 300 metres long.",
     "It was built ca. 1890 by local workers."],
    ["On Jan. 5 the committee met again.",
     "Its members voted on the proposal in Feb. as well."],
    ["Björk performed in Reykjavík last night.",
     "The crowd, mostly locals, sang along.",
     "Afterwards she thanked everyone in Icelandic."],
    ["The letter Ω marks resistance in ohms.",
     "Engineers write it on nearly every schematic."],
    ["The launch went well 🎉.",
     "Everyone went home happy."],
    # Longer, plainer prose: the common case must not regress.
    ["Most of the corpus is ordinary prose like this paragraph.",
     "Sentences are of moderate length and end with a full stop.",
     "Occasionally a question appears, doesn't it?",
     "The segmenter should handle these without any trouble at all."],
    ["The river froze early that winter, and the ferry stopped running in November.",
     "Villagers crossed on foot, carrying bread and firewood across the ice.",
     "By March the thaw had begun."],
    ["Our budget for Q3 is $4.2 million.",
     "Marketing gets 1.5 million of that.",
     "The rest goes to engineering."],
    ["Please read pp. 10-15 before class.",
     "We will discuss chapter 2 on Thursday."],
    ["The sample was heated to 37.5 °C for 10 min. and then cooled.",
     "No precipitate formed."],
    ["Gen. Patel spoke first.",
     "Sen. Rivera answered questions afterwards.",
     "Both left before lunch."],
    ["The file is named report.final.v3.pdf on the shared drive.",
     "Do not rename it."],
    # A title abbreviation STARTING a non-initial sentence (very common in
    # news and fiction).
    ["The jury returned after lunch.",
     "Mr. Daniels read the verdict aloud.",
     "Mrs. Daniels wept quietly in the front row."],
    ["Several doctors spoke at the hearing.",
     "Dr. Osei described the outbreak in detail.",
     "Prof. Lind answered the committee's questions."],
]


# ---------------------------------------------------------------------------
# Segmenters.  Each factory imports its library lazily (so import cost can be
# attributed to it) and returns a function paragraph -> list[str].
# ---------------------------------------------------------------------------
def make_blingfire() -> Callable[[str], list[str]]:
    """blingfire.text_to_sentences returns one sentence per line."""
    blingfire = importlib.import_module("blingfire")

    def split(paragraph: str) -> list[str]:
        return blingfire.text_to_sentences(paragraph).split("\n")

    return split


def make_pysbd() -> Callable[[str], list[str]]:
    """pysbd rule-based segmenter; clean=False keeps the text unchanged."""
    pysbd = importlib.import_module("pysbd")
    segmenter = pysbd.Segmenter(language="en", clean=False)
    return segmenter.segment


def make_syntok() -> Callable[[str], list[str]]:
    """syntok.segmenter.analyze keeps original text in token.spacing+value.

    (``process`` would be slightly different: it rewrites "don't" to
    "do not" and joins hyphenated line breaks, so analyze is the faithful
    choice.)
    """
    segmenter = importlib.import_module("syntok.segmenter")

    def split(paragraph: str) -> list[str]:
        return ["".join(tok.spacing + tok.value for tok in sentence)
                for para in segmenter.analyze(paragraph)
                for sentence in para]

    return split


# A fragment that is only a title or an initial ("Mr.", "Dr.", "J."): raw
# blingfire emits these when a title follows a sentence end ("They waited.
# Mr. Smith arrived." -> "Mr." | "Smith arrived."; upstream issue
# microsoft/BlingFire#81).  Deliberately NOT a generic "short word + period"
# rule, which would swallow real one-word sentences such as "Yes." or "No.".
def make_blingfire_fixups() -> Callable[[str], list[str]]:
    """blingfire plus the post-processing that ingest uses: bertwb.data.sentences.split_sentences.

    It collapses whitespace, glues title/initial fragments and lowercase continuations back, and
    never loses text. The rules were designed after looking at raw blingfire's errors on the gold
    set, so its score there is optimistic.
    """
    from bertwb.data.sentences import split_sentences
    return split_sentences


# display name -> (PyPI distribution, factory)
SEGMENTERS: dict[str, tuple[str, Callable[[], Callable[[str], list[str]]]]] = {
    "blingfire": ("blingfire", make_blingfire),
    "blingfire+fixups": ("blingfire", make_blingfire_fixups),
    "pysbd": ("pysbd", make_pysbd),
    "syntok": ("syntok", make_syntok),
}


# ---------------------------------------------------------------------------
# Quality
# ---------------------------------------------------------------------------
def nonspace_len(text: str) -> int:
    """Number of non-whitespace characters (the offset unit we compare in)."""
    return sum(1 for ch in text if not ch.isspace())


def boundaries(sentences: list[str]) -> tuple[set[int], int]:
    """Internal sentence end offsets (in non-space chars) and total length.

    The final boundary (end of paragraph) is dropped: it is always correct.
    Empty/whitespace-only "sentences" add no characters, so they cannot
    create a boundary.
    """
    ends, pos = set(), 0
    for sentence in sentences:
        pos += nonspace_len(sentence)
        ends.add(pos)
    ends.discard(pos)
    ends.discard(0)
    return ends, pos


@dataclass
class Quality:
    tp: int = 0
    fp: int = 0
    fn: int = 0
    exact: int = 0
    paragraphs: int = 0
    altered: int = 0  # paragraphs whose non-space text changed (should be 0)
    errors: list[tuple[list[str], list[str]]] = field(default_factory=list)

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def evaluate(split: Callable[[str], list[str]]) -> Quality:
    """Score one segmenter on every gold paragraph."""
    q = Quality()
    for gold in GOLD_PARAGRAPHS:
        paragraph = " ".join(gold)
        predicted = [s.strip() for s in split(paragraph) if s.strip()]
        gold_ends, gold_len = boundaries(gold)
        pred_ends, pred_len = boundaries(predicted)
        q.paragraphs += 1
        q.altered += pred_len != gold_len
        q.tp += len(gold_ends & pred_ends)
        q.fp += len(pred_ends - gold_ends)
        q.fn += len(gold_ends - pred_ends)
        if gold_ends == pred_ends and pred_len == gold_len:
            q.exact += 1
        else:
            q.errors.append((gold, predicted))
    return q


# ---------------------------------------------------------------------------
# Speed and memory
# ---------------------------------------------------------------------------
def build_corpus(target_mb: float, seed: int = 13) -> list[str]:
    """~target_mb MB (UTF-8) of paragraphs, deterministic for a given seed.

    Each corpus paragraph concatenates 1-6 randomly chosen gold paragraphs,
    so paragraph lengths (~100-1500 chars) resemble real prose rather than
    our short test paragraphs; per-call overhead is then not over-weighted.
    """
    rng = random.Random(seed)
    base = [" ".join(p) for p in GOLD_PARAGRAPHS]
    target = int(target_mb * 1_000_000)
    corpus, size = [], 0
    while size < target:
        paragraph = " ".join(rng.choice(base) for _ in range(rng.randint(1, 6)))
        corpus.append(paragraph)
        size += len(paragraph.encode("utf-8")) + 1  # +1: paragraph separator
    return corpus


def corpus_bytes(paragraphs: list[str]) -> int:
    return sum(len(p.encode("utf-8")) + 1 for p in paragraphs)


def rss() -> int:
    return psutil.Process().memory_info().rss


class PeakRSS:
    """Context manager sampling RSS in a thread; .peak_delta in bytes.

    ru_maxrss is process-wide and monotonic, so it cannot attribute memory to
    the 2nd/3rd segmenter run in the same process; sampling can.
    """

    def __init__(self, interval: float = 0.005):
        self.interval = interval
        self.peak_delta = 0

    def __enter__(self):
        gc.collect()
        self._base = self._peak = rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.is_set():
            self._peak = max(self._peak, rss())
            time.sleep(self.interval)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._peak = max(self._peak, rss())
        self.peak_delta = self._peak - self._base


def run_timed(split: Callable[[str], list[str]], paragraphs: list[str]) -> tuple[float, int]:
    """Seconds to segment all paragraphs, and number of sentences produced.

    Only the count is kept: storing the output would add our own memory use
    to the segmenter's RSS figure.
    """
    n = 0
    start = time.perf_counter()
    for paragraph in paragraphs:
        n += len(split(paragraph))
    return time.perf_counter() - start, n


def pick_slice(split, corpus: list[str], budget_s: float) -> list[str]:
    """The corpus, or a prefix that should take about budget_s seconds.

    A ~100 kB probe estimates throughput first, so that a slow pure-Python
    segmenter does not blow the script's total run time.
    """
    probe, size = [], 0
    for paragraph in corpus:
        probe.append(paragraph)
        size += len(paragraph.encode("utf-8")) + 1
        if size >= 100_000:
            break
    seconds, _ = run_timed(split, probe)
    rate = size / max(seconds, 1e-9)  # bytes per second
    if corpus_bytes(corpus) / rate <= budget_s:
        return corpus
    keep, size = [], 0
    for paragraph in corpus:
        if size >= rate * budget_s:
            break
        keep.append(paragraph)
        size += len(paragraph.encode("utf-8")) + 1
    return keep


@dataclass
class Speed:
    measured_mb: float
    seconds: float
    sentences: int
    import_rss_mb: float
    peak_rss_mb: float

    @property
    def mb_per_s(self) -> float:
        return self.measured_mb / self.seconds

    @property
    def s_per_100mb(self) -> float:
        return 100 / self.mb_per_s


# ---------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------
def lib_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def machine_line() -> str:
    u = platform.uname()
    cpu = platform.processor() or u.machine
    model = cpu_model()
    return (f"{u.system} {u.release} {cpu}{' (' + model + ')' if model else ''}, "
            f"{os.cpu_count()} CPUs, Python {platform.python_version()}")


def table_rows(results: dict[str, tuple[Quality, Speed]], total_mb: float) -> list[list[str]]:
    rows, seen = [], set()
    for name, (q, s) in results.items():
        dist = SEGMENTERS[name][0]
        # A second row for an already-imported library shows no import cost.
        import_rss = "(shared)" if dist in seen else f"{s.import_rss_mb:.1f}"
        seen.add(dist)
        measured = f"{s.measured_mb:.2f}"
        if s.measured_mb < total_mb * 0.99:  # timed on a prefix only
            measured += " (slice)"
        rows.append([
            name, lib_version(dist),
            f"{q.precision:.3f}", f"{q.recall:.3f}", f"{q.f1:.3f}",
            f"{q.exact}/{q.paragraphs} ({q.exact / q.paragraphs:.0%})",
            f"{q.fp}/{q.fn}",
            f"{s.mb_per_s:.2f}", f"{s.s_per_100mb:,.0f}", measured,
            import_rss, f"{s.peak_rss_mb:.1f}",
        ])
    return rows


HEADERS = ["segmenter", "version", "P", "R", "F1", "exact paras", "FP/FN",
           "MB/s", "s per 100 MB", "timed on MB", "import RSS MB",
           "peak RSS MB"]


def markdown_table(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |",
             "|" + "|".join("---" for _ in HEADERS) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def text_table(rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADERS)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*HEADERS), fmt.format(*("-" * w for w in widths))]
                     + [fmt.format(*r) for r in rows])


def append_markdown(rows, n_sentences: int, requested_mb: float, total_mb: float,
                    n_paragraphs: int, mean_len: float, budget: float) -> None:
    """Append (never rewrite) our section; other benchmarks share the file."""
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    section = f"""
## Sentence segmenters — {now}

Script: `python benchmarks/segmenters.py --mb {requested_mb:g} --budget {budget:g}`.
Machine: {machine_line()}.

* Quality: {len(GOLD_PARAGRAPHS)} hand-written gold paragraphs, {n_sentences} sentences
  (abbreviations, decimals, ellipses, quotes, ?/!, digit/lowercase starts,
  brackets, URLs/e-mails, initials, non-ASCII).  P/R/F1 over internal
  sentence boundaries, compared as sets of end offsets counted in
  non-whitespace characters; "exact paras" = paragraphs split exactly right;
  FP/FN = spurious/missed boundaries.
* Speed: {total_mb:.2f} MB (UTF-8, MB = 10^6 bytes) of {n_paragraphs:,} paragraphs
  (mean {mean_len:.0f} chars) shuffled from the gold set; one call per
  paragraph, single thread, all segmenters in the same process one after the
  other.  Segmenters too slow for a {budget:g} s budget are timed on a prefix
  ("slice"); their MB/s is measured, "s per 100 MB" is extrapolated.
* Memory: RSS growth from importing the library (incl. its models), and
  peak RSS growth (psutil, sampled every 5 ms) while segmenting.
* "blingfire+fixups" = blingfire with whitespace normalisation and two
  merge rules (see `make_blingfire_fixups`); the rules were written after
  inspecting raw blingfire's errors on this gold set, so its quality row is
  optimistic.

{markdown_table(rows)}
"""
    columns = {name: i for i, name in enumerate(HEADERS)}
    append_report(section, "; ".join(f"{r[0]}: F1 {r[columns['F1']]} at {r[columns['MB/s']]} MB/s" for r in rows))


def show_errors(name: str, q: Quality, k: int) -> None:
    """Print up to k mis-segmented paragraphs, gold vs predicted."""
    if not k or not q.errors:
        return
    print(f"\n--- {name}: {len(q.errors)} paragraphs wrong; first {min(k, len(q.errors))} ---")
    for gold, pred in q.errors[:k]:
        print("  gold:", " | ".join(gold))
        print("  pred:", " | ".join(pred))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=5.0, help="speed corpus size in MB (default 5)")
    ap.add_argument("--budget", type=float, default=25.0,
                    help="max seconds to spend timing one segmenter (default 25)")
    ap.add_argument("--errors", type=int, default=0,
                    help="print up to K mis-segmented gold paragraphs per segmenter")
    ap.add_argument("--no-append", action="store_true", help="do not write BENCHMARKS.md")
    args = ap.parse_args(argv)

    corpus = build_corpus(args.mb)
    total_mb = corpus_bytes(corpus) / 1e6
    mean_len = sum(map(len, corpus)) / len(corpus)
    n_sentences = sum(map(len, GOLD_PARAGRAPHS))
    print(f"gold: {len(GOLD_PARAGRAPHS)} paragraphs, {n_sentences} sentences; "
          f"speed corpus: {total_mb:.2f} MB, {len(corpus):,} paragraphs")
    print(f"machine: {machine_line()}")

    results: dict[str, tuple[Quality, Speed]] = {}
    for name, (_, factory) in SEGMENTERS.items():
        gc.collect()
        before = rss()
        split = factory()  # import + model load happen here
        import_mb = (rss() - before) / 1e6
        quality = evaluate(split)
        chunk = pick_slice(split, corpus, args.budget)
        with PeakRSS() as mem:
            seconds, n_out = run_timed(split, chunk)
        measured_mb = corpus_bytes(chunk) / 1e6
        results[name] = (quality, Speed(measured_mb, seconds, n_out, import_mb,
                                        mem.peak_delta / 1e6))
        note = "" if len(chunk) == len(corpus) else f" (slice of {measured_mb:.2f} MB)"
        print(f"  {name}: {seconds:.1f}s{note}, {n_out:,} sentences"
              + (f", WARNING {quality.altered} paragraphs had text altered" if quality.altered else ""),
              flush=True)

    rows = table_rows(results, total_mb)
    print()
    print(text_table(rows))
    for name, (q, _) in results.items():
        show_errors(name, q, args.errors)
    if not args.no_append:
        append_markdown(rows, n_sentences, args.mb, total_mb, len(corpus), mean_len,
                        args.budget)
        print("\nappended results to this month's benchmarks/log/ file and BENCHMARKS.md's table")


if __name__ == "__main__":
    main(sys.argv[1:])
