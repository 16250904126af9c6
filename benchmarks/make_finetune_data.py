"""Fine-tuning data from real English prose: SQuAD v1.1/v2.0 and CoNLL (BIO) sets whose answers are checked by rule.

Usage: ``python benchmarks/make_finetune_data.py [--source FILE ...] [--out benchmarks/data/finetune] [--seed 0]``

* **Text.** The Debian Policy Manual and the documents shipped beside it (the FHS 3.0, the machine-readable
  copyright format, the menu, Perl, debconf and autopkgtest specifications, the upgrading checklist), as
  plain text, from the Debian package ``debian-policy`` (``/usr/share/doc/debian-policy/**/*.txt.gz``):
  about 1.2 MB of technical English written by people, not the sample corpus's toy grammar. Install it with
  ``sudo apt-get install debian-policy`` (Debian, Ubuntu), or give any plain-text files with ``--source``.
  Only prose paragraphs are kept: blocks between blank lines that start at the left margin, are not
  headings, lists or code, hold mostly letters, and end a sentence.
* **Tags** (``tags_{train,dev}.conll``: ``word TAG`` per line, a blank line between sentences). Words are
  runs of letters/digits (joined by ``- ' . /``) and single punctuation marks. BIO tags by rule, first
  match wins: ``TERM`` for the words inside double quotes (the manual quotes file names, fields and
  commands), ``NUM`` for a number (``4.6``, ``2010``, ``00-59``), ``NAME`` for a run of capitalised words;
  a sentence's first word is a ``NAME`` only when the corpus capitalises it mid-sentence elsewhere, more
  often than it writes it in lower case (so "Debian" is one and "This" is not).
* **Questions** (``squad1_{train,dev}.json`` v1.1, ``squad2_{train,dev}.json`` v2.0). A context is one
  or more consecutive paragraphs of one file (at least ``--context-chars`` characters, so that many
  need two windows of 128 tokens). Cloze questions: a sentence of the context with one tagged span
  (TERM, NUM or NAME as above) replaced by "what", ending in "?"; the answer is that span at its
  character offset, checked to be there. v2.0 adds unanswerable questions, one for every two
  answerable ones: a cloze question made from a sentence of another context of the same split
  (``is_impossible``, no answers). v1.1 holds the same answerable questions and no others.
* **Splits.** Paragraphs (and so contexts) go to dev with probability ``--dev-fraction``, drawn from the
  seed: the same seed and text give the same bytes. Everything is written under ``--out``, which git ignores.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "debian-policy"
PACKAGE_DIR = Path("/usr/share/doc/debian-policy")
DEFAULT_OUT = REPO / "benchmarks" / "data" / "finetune"

_WORD = re.compile(r"\w+(?:['’./-]\w+)*|[^\w\s]")
_NUMBER = re.compile(r"\d+(?:[.,:-]\d+)*")
_CAPITALISED = re.compile(r"[A-Z][\w'’./-]*")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"”’)]?\s+(?=[\"“(]?[A-Z0-9])")
_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "cf.", "vs.", "Mr.", "Dr.", "No.", "Sec.", "approx.")
_QUOTES = {'"', "“", "”"}


@dataclass
class Word:
    text: str
    start: int  # character offsets in the text the word was found in
    end: int


def source_files() -> list[Path]:
    """The package's plain-text documents; exits with the command that installs them when they are missing."""
    files = sorted(PACKAGE_DIR.rglob("*.txt.gz")) if PACKAGE_DIR.is_dir() else []
    if not files:
        sys.exit(f"no text of the Debian package {PACKAGE} under {PACKAGE_DIR}: install it with "
                 f"`sudo apt-get install {PACKAGE}`, or give plain-text files with --source")
    return files


def read_text(path: Path) -> str:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        return f.read()


def prose_paragraphs(text: str) -> list[str]:
    """The blocks of ``text`` between blank lines that read as prose, each joined into one line."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        lines = block.splitlines()
        if not lines or lines[0][:1].isspace() or lines[0].lstrip()[:1] in "*-+•|#=[0123456789":
            continue
        if len(lines) > 1 and re.fullmatch(r"[=\-~*^#]{3,}", lines[1].strip()):
            continue  # a heading and its underline
        joined = " ".join(line.strip() for line in lines)
        letters = sum(ch.isalpha() or ch == " " for ch in joined)
        if len(joined) >= 120 and letters >= 0.85 * len(joined) and joined.endswith((".", "!", "?")):
            paragraphs.append(joined)
    return paragraphs


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of ``text``: a split after . ! ? before a capital or digit, not after an
    abbreviation such as "e.g."."""
    spans, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        if text[start:match.start()].endswith(_ABBREVIATIONS):
            continue
        spans.append((start, match.start()))
        start = match.end()
    spans.append((start, len(text)))
    return [(s, e) for s, e in spans if text[s:e].strip()]


def words_of(text: str, start: int = 0, end: int | None = None) -> list[Word]:
    return [Word(m.group(), m.start(), m.end()) for m in _WORD.finditer(text, start, len(text) if end is None else end)]


def known_names(paragraphs: list[str]) -> set[str]:
    """Words the text capitalises in mid-sentence at least twice and more often than it writes them in lower
    case ("Debian", not "This"): a sentence's first word is a name when listed."""
    capitalised: Counter[str] = Counter()
    lower: Counter[str] = Counter()
    for paragraph in paragraphs:
        for start, end in sentence_spans(paragraph):
            for word in words_of(paragraph, start, end)[1:]:
                if _CAPITALISED.fullmatch(word.text):
                    capitalised[word.text] += 1
                else:
                    lower[word.text] += 1
    return {word for word, count in capitalised.items() if count >= 2 and count > lower[word.lower()]}


def bio_tags(words: list[Word], names: set[str]) -> list[str]:
    """The BIO tags of one sentence's words by the rules of the module docstring."""
    kinds: list[str | None] = [None] * len(words)
    quoted = False
    for index, word in enumerate(words):
        if word.text in _QUOTES:
            quoted = not quoted if word.text == '"' else word.text == "“"
        elif quoted:
            kinds[index] = "TERM"
        elif _NUMBER.fullmatch(word.text):
            kinds[index] = "NUM"
        elif _CAPITALISED.fullmatch(word.text) and (index > 0 or word.text in names):
            kinds[index] = "NAME"
    if quoted:  # an unclosed quote: nothing after it is a term
        kinds = [None if kind == "TERM" else kind for kind in kinds]
    tags = []
    for index, kind in enumerate(kinds):
        continues = index > 0 and kind is not None and kind == kinds[index - 1] and kind != "NUM"
        tags.append("O" if kind is None else ("I-" if continues else "B-") + kind)
    return tags


def entity_spans(words: list[Word], tags: list[str]) -> list[tuple[int, int]]:
    """(first, last) word index of each entity the tags spell."""
    spans: list[tuple[int, int]] = []
    for index, tag in enumerate(tags):
        if tag.startswith("B-"):
            spans.append((index, index))
        elif tag.startswith("I-"):
            spans[-1] = (spans[-1][0], index)
    return spans


def cloze_questions(context: str, names: set[str], rng: random.Random,
                    per_context: int) -> list[tuple[str, int, int]]:
    """Up to ``per_context`` (question, answer start, answer end) of ``context``: a sentence with one entity
    replaced by "what"."""
    candidates = []
    for start, end in sentence_spans(context):
        words = words_of(context, start, end)
        if not 6 <= len(words) <= 40:
            continue
        spans = entity_spans(words, bio_tags(words, names))
        if spans:
            first, last = rng.choice(spans)
            answer_start, answer_end = words[first].start, words[last].end
            question = context[start:answer_start] + "what" + context[answer_end:end]
            candidates.append((question.rstrip(" .!?") + "?", answer_start, answer_end))
    return rng.sample(candidates, min(per_context, len(candidates)))


def contexts_of(paragraphs: list[str], min_chars: int) -> list[str]:
    """Consecutive paragraphs joined until each context has ``min_chars`` characters (at most three)."""
    contexts, current = [], []
    for paragraph in paragraphs:
        current.append(paragraph)
        if sum(map(len, current)) >= min_chars or len(current) == 3:
            contexts.append(" ".join(current))
            current = []
    if current:
        contexts.append(" ".join(current))
    return contexts


def squad_file(articles: list[dict], version: str) -> dict:
    return {"version": version, "data": articles}


def build(texts: dict[str, str], out: Path, seed: int = 0, dev_fraction: float = 0.15, context_chars: int = 600,
          questions_per_context: int = 3) -> dict[str, int]:
    """Write the SQuAD and CoNLL sets built from ``texts`` (a name -> its plain text) under ``out``; return counts."""
    rng = random.Random(seed)
    by_source = {name: prose_paragraphs(text) for name, text in sorted(texts.items())}
    names = known_names([p for paragraphs in by_source.values() for p in paragraphs])
    splits: dict[str, dict[str, list[str]]] = {"train": {}, "dev": {}}
    for name, paragraphs in by_source.items():
        for paragraph in paragraphs:
            split = "dev" if rng.random() < dev_fraction else "train"
            splits[split].setdefault(name, []).append(paragraph)
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, sources in splits.items():
        conll = []
        for paragraphs in sources.values():
            for paragraph in paragraphs:
                for start, end in sentence_spans(paragraph):
                    words = words_of(paragraph, start, end)
                    if 3 <= len(words) <= 60:
                        tags = bio_tags(words, names)
                        conll.append("\n".join(f"{w.text} {t}" for w, t in zip(words, tags, strict=True)))
        (out / f"tags_{split}.conll").write_text("\n\n".join(conll) + "\n", encoding="utf-8")
        counts[f"tags_{split}_sentences"] = len(conll)

        contexts = [(name, context) for name, paragraphs in sources.items()
                    for context in contexts_of(paragraphs, context_chars)]
        articles_v1, articles_v2, answerable, impossible = [], [], 0, 0
        for index, (name, context) in enumerate(contexts):
            qas = [{"id": f"{split}-{index}-{number}", "question": question,
                    "answers": [{"text": context[start:end], "answer_start": start}]}
                   for number, (question, start, end) in enumerate(cloze_questions(context, names, rng,
                                                                                  questions_per_context))]
            for qa in qas:
                answer = qa["answers"][0]
                assert context[answer["answer_start"]:].startswith(answer["text"]), qa  # checked by construction
            unanswerable = []
            for number in range((len(qas) + 1) // 2 if len(contexts) > 1 else 0):
                other = contexts[(index + rng.randrange(1, len(contexts))) % len(contexts)][1]
                found = cloze_questions(other, names, rng, 1)
                if found and found[0][0][:-1] not in context:
                    unanswerable.append({"id": f"{split}-{index}-x{number}", "question": found[0][0], "answers": [],
                                         "is_impossible": True})
            answerable, impossible = answerable + len(qas), impossible + len(unanswerable)
            articles_v1.append({"title": name, "paragraphs": [{"context": context, "qas": qas}]})
            articles_v2.append({"title": name, "paragraphs": [{"context": context, "qas": [
                *({**qa, "is_impossible": False} for qa in qas), *unanswerable]}]})
        for version, articles, prefix in (("1.1", articles_v1, "squad1"), ("v2.0", articles_v2, "squad2")):
            (out / f"{prefix}_{split}.json").write_text(json.dumps(squad_file(articles, version), ensure_ascii=False),
                                                        encoding="utf-8")
        counts[f"squad_{split}_answerable"], counts[f"squad_{split}_impossible"] = answerable, impossible
    digest = hashlib.sha256("".join(texts[name] for name in sorted(texts)).encode("utf-8")).hexdigest()[:12]
    (out / "about.json").write_text(json.dumps({"sources": sorted(texts), "sources_sha256": digest, "seed": seed,
                                                **counts}, indent=2) + "\n")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", nargs="+", type=Path, help=f"plain-text files (default: {PACKAGE}'s)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dev-fraction", type=float, default=0.15)
    parser.add_argument("--context-chars", type=int, default=600)
    args = parser.parse_args()
    files = args.source or source_files()
    texts = {(path.name if args.source else str(path.relative_to(PACKAGE_DIR))): read_text(path) for path in files}
    counts = build(texts, args.out, args.seed, args.dev_fraction, args.context_chars)
    print(f"wrote {args.out}: " + ", ".join(f"{name} {count:,}" for name, count in counts.items()))


if __name__ == "__main__":
    main()
