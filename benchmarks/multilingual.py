"""Text in eight languages through bertwb's pipeline: the accent stripping of before and after issue #48, and the
alphabet of a corpus of every language, ``vocab.limit_alphabet`` 1000 (the old default) against auto.

Usage: ``python benchmarks/multilingual.py [--chars 100000] [--steps 120] [--languages ko ja ...] [--jobs 5]
[--vocab-only] [--no-mixed] [--no-append]``; ``--append-from WORK/results.json`` appends an earlier run's section.

* **Text**: the translated documentation and manual pages that Debian ships, the same amount of prose for each
  language (``--chars`` characters, spaces left out; Korean has about 100,000 in all): Korean from the Debian FAQ
  (``debian-faq-ko``) and the GIMP manual (``gimp-help-ko``), the ``<p>`` paragraphs of their HTML pages; Japanese,
  Simplified and Traditional Chinese, Russian, German, French and Spanish from the man pages of ``manpages-ja``,
  ``manpages-zh``, ``manpages-ru``, ``-de``, ``-fr`` and ``-es``, rendered by ``man -l`` (groff) without hyphenation
  or justification, one line per paragraph. A paragraph is prose when it ends a sentence (or a colon), is mostly
  letters, and is written in the language: most of its letters in the language's script (Japanese: with kana), or
  for the Latin-script languages more of its words among the language's common words than among English's (man
  pages keep untranslated paragraphs). Each paragraph once; the pages in a seeded order; documents of consecutive
  paragraphs of one page, about `DOCUMENT_CHARS` each, read in ``paragraphs`` format.
* **Settings**: *before*, the default before issue #48 (``vocab.lowercase: true`` with BERT's accent stripping on
  every script, now ``vocab.strip_accents: true``), and *after*, today's default (``strip_accents: auto``).
* **Each run** is the CLI as a user runs it, in a project of its own: ``bertwb init`` (tiny preset, the values
  init writes but `COMMON_SETTINGS`), ``bertwb run --until vocab`` (ingest, vocab), ``bertwb sql``, ``bertwb run
  --until evaluate`` (pairs, ``pretrain`` for ``--steps`` steps, evaluate). It reports the vocab stage's [UNK] rate
  (all text, and the text the vocabulary was not trained on), tokens per word, the per-script report, the share of
  the vocabulary written in decomposed characters and of pieces of a character (conjoining Jamo, or a lone
  combining mark: `DECOMPOSED_SQL`), and evaluate's masked-token accuracy on the held-out pairs. When both settings
  give the same tokenizer files (the text has no character that stripping damages), the tokens, pairs and model are
  the same: pre-trained once. Runs go ``--jobs`` at a time, each on ``--threads`` torch threads (one by default: on
  a shared machine OpenMP's spinning threads made two several times slower than one).
* **Mixed** (``--no-mixed`` leaves it out): every language's text in one corpus, vocab only (no pre-training), in
  the runs of `MIXED_RUNS`: ``vocab.limit_alphabet: 1000`` (the old default), auto (today's), and auto with
  ``vocab.language_sampling``. Each run's alphabet (the characters kept, of how many, and their share of the
  training text; its entries in the vocabulary, characters and ``##`` pieces), [UNK] rate and tokens per word,
  overall and per script, and the scripts' warnings.
* ``--vocab-only``: no pairs, pre-training or evaluate, so every vocabulary figure in minutes and no masked-token
  accuracy (the report says so and leaves that column out).

Appends a section to the benchmark log and a row to BENCHMARKS.md (``--no-append``: print it only).
A missing package is one line with the
``apt-get install`` that brings it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from _common import REPO, append_report, cpu_model
from _common import run_bertwb as bertwb
from english_text import html_paragraphs, installed_version

MAN = Path("/usr/share/man")
FAQ_KO = Path("/usr/share/doc/debian/FAQ/ko")
GIMP_KO = Path("/usr/share/gimp/2.0/help/ko")
# Common words of each Latin-script language, and of English: a paragraph with more of the former is translated.
COMMON_WORDS = {
    "de": "der die das und ist nicht ein eine zu den von mit sich des auf für im dem wird werden oder als auch",
    "fr": "le la les et est des un une du pour dans que qui pas sur par au avec ce sont il être ou cette",
    "es": "el la los las y es de que un una en para por con se del al lo como no su está ser",
    "en": "the and is of to a in for that this be are with by on or as not it if an from which",
}
# A document (the unit of ingest's train/valid split and of next-sentence pairs) holds about this many characters.
DOCUMENT_CHARS = 1000
_SENTENCE_END = (":", "：", "。", ".", "!", "?", "！", "？", "」", "）", ")", "»", "\"")
# Vocabulary entries written in decomposed characters (not NFC: Hangul syllables as Jamo), and among them the pieces
# of a character (conjoining Jamo left over after NFC, or a lone combining mark): what stripping leaves of a script.
_JAMO = "[\\x{1100}-\\x{11FF}\\x{A960}-\\x{A97F}\\x{D7B0}-\\x{D7FF}]"
DECOMPOSED_SQL = (f"select count(*) filter (where nfc_normalize(token) <> token) as not_nfc, "
                  f"count(*) filter (where regexp_matches(nfc_normalize(token), '{_JAMO}') "
                  f"or regexp_matches(regexp_replace(token, '^##', ''), '^\\p{{M}}')) as pieces, "
                  f"count(*) as entries from vocab where not is_special")


@dataclass(frozen=True)
class Language:
    code: str
    name: str
    packages: tuple[str, ...]  # the Debian packages its text comes from
    script: str  # the script of the language's letters, as bertwb.data.scripts names it (Japanese: Han and kana)

    def pages(self) -> list[Path]:
        """The files its text is read from: the pages of its manual pages, or of its HTML manuals (Korean)."""
        if self.code == "ko":
            return sorted([*FAQ_KO.glob("*.html"), *GIMP_KO.rglob("*.html")])
        return sorted(path for path in (MAN / self.code).glob("man*/*") if path.is_file() and not path.is_symlink())


LANGUAGES = (
    Language("ko", "Korean", ("debian-faq-ko", "gimp-help-ko"), "Hangul"),
    Language("ja", "Japanese", ("manpages-ja",), "Han+kana"),
    Language("zh_CN", "Chinese (simplified)", ("manpages-zh",), "Han"),
    Language("zh_TW", "Chinese (traditional)", ("manpages-zh",), "Han"),
    Language("ru", "Russian", ("manpages-ru",), "Cyrillic"),
    Language("de", "German", ("manpages-de",), "Latin"),
    Language("fr", "French", ("manpages-fr",), "Latin"),
    Language("es", "Spanish", ("manpages-es",), "Latin"),
)
_KANA = ("Hiragana", "Katakana")


def rendered_paragraphs(page: Path) -> list[str]:
    """A man page as ``man -l`` renders it, one line per filled paragraph: its indented lines (the body)."""
    result = subprocess.run(["man", "-l", "-E", "UTF-8", "--nh", "--nj", str(page)], capture_output=True,
                            env={**os.environ, "MANWIDTH": "20000", "MAN_KEEP_FORMATTING": "", "LC_ALL": "C.UTF-8"})
    text = result.stdout.decode("utf-8", "replace")
    text = re.sub(r".\x08", "", re.sub(r"\x1b\[[0-9;]*m", "", text))  # any overstrike or SGR left
    return [" ".join(line.split()) for line in text.splitlines() if line[:1].isspace() and line.strip()]


def _letters(text: str) -> list[str]:
    return [char for char in text if unicodedata.category(char).startswith("L")]


def is_prose(paragraph: str, language: Language) -> bool:
    """Whether ``paragraph`` is a sentence or more of ``language``'s prose (see the module's docstring)."""
    from bertwb.data.scripts import script_of

    letters = _letters(paragraph)
    visible = len(paragraph.replace(" ", ""))
    if len(paragraph) < 12 or not paragraph.endswith(_SENTENCE_END) or len(letters) < 0.6 * visible:
        return False
    if language.script == "Latin":
        words = re.findall(r"\w+", paragraph.lower())
        own, english = (sum(word in COMMON_WORDS[code].split() for word in words) for code in (language.code, "en"))
        return own >= 2 and own > english
    scripts = [script_of(char) for char in letters]
    wanted = ("Han", *_KANA) if language.code == "ja" else (language.script,)
    if language.code == "ja" and not any(name in _KANA for name in scripts):
        return False  # Chinese, not Japanese
    return sum(name in wanted for name in scripts) >= 0.5 * len(scripts)


def page_paragraphs(page: Path) -> list[str]:
    """The paragraphs of one page: an HTML page's ``<p>`` elements, or a man page as rendered."""
    if page.suffix == ".html":
        return html_paragraphs(page.read_text(encoding="utf-8", errors="replace"))
    return rendered_paragraphs(page)


def extract(language: Language, out: Path, chars: int, seed: int) -> dict:
    """``out``/text.txt: about ``chars`` characters (spaces left out) of ``language``'s prose from its pages in a
    seeded order, each paragraph once, in documents of consecutive paragraphs of one page up to `DOCUMENT_CHARS`
    (a paragraph per line, a blank line between documents); what was read."""
    missing = [package for package in language.packages if installed_version(package) is None]
    if missing:
        sys.exit(f"the {language.name} text comes from {', '.join(missing)}, not installed: "
                 f"sudo apt-get install {' '.join(missing)}")
    pages = language.pages()
    random.Random(seed).shuffle(pages)
    seen: set[str] = set()
    documents, total, read = [], 0, 0
    for page in pages:
        read += 1
        document, size = [], 0
        for paragraph in page_paragraphs(page):
            if paragraph in seen or not is_prose(paragraph, language):
                continue
            seen.add(paragraph)
            document.append(paragraph)
            size += len(paragraph.replace(" ", ""))
            if size >= DOCUMENT_CHARS or total + size >= chars:
                documents.append(document)
                total, document, size = total + size, [], 0
            if total >= chars:
                break  # inside the page: one long page must not double a language's text
        if document:
            documents.append(document)
            total += size
        if total >= chars:
            break
    out.mkdir(parents=True, exist_ok=True)
    (out / "text.txt").write_text("\n\n".join("\n".join(document) for document in documents) + "\n",
                                  encoding="utf-8")
    return {"language": language.code, "packages": {package: installed_version(package)
                                                    for package in language.packages},
            "pages": read, "documents": len(documents), "paragraphs": len(seen), "characters": total}


SETTINGS = {"before": {"vocab.strip_accents": "true"}, "after": {"vocab.strip_accents": "auto"}}



def configure(config: Path, values: dict[str, str]) -> None:
    """Set ``section.key`` values in the bertwb.yaml that init wrote, as a user edits it (each key once there)."""
    text = config.read_text(encoding="utf-8")
    for dotted, value in values.items():
        section, key = dotted.split(".")
        pattern = rf"(^{section}:\n(?:[ #].*\n|\n)*?  {key}: )[^#\n]*?(\s*(?:#.*)?)$"
        text, found = re.subn(pattern, rf"\g<1>{value}\g<2>", text, count=1, flags=re.M)
        if not found:
            sys.exit(f"{config}: no {dotted} to set; has `bertwb init` changed?")
    config.write_text(text, encoding="utf-8")


def prepare(work: Path, project: Path, corpus: Path, values: dict[str, str]) -> None:
    """A project made by ``bertwb init`` over ``corpus``, with ``values`` set, ingested, its vocabulary built."""
    shutil.rmtree(project, ignore_errors=True)
    bertwb(work, "init", str(project), "--input", str(corpus))
    configure(project / "bertwb.yaml", values)
    bertwb(project, "run", "--until", "vocab")


def vocab_figures(project: Path) -> dict:
    """The vocab stage's summary (the per-script report and the alphabet's description included), the decomposed
    share of the vocabulary, and its entries of one character, ``##`` or not: the alphabet's place in it."""
    summary = json.loads((project / ".bertwb" / "manifests" / "vocab.json").read_text())["summary"]
    counts = json.loads(bertwb(project, "sql", "--format", "json", DECOMPOSED_SQL))[0]
    entries = (project / ".bertwb" / "vocab" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    return {**summary, "not_nfc_share": counts["not_nfc"] / max(counts["entries"], 1),
            "pieces_share": counts["pieces"] / max(counts["entries"], 1),
            "alphabet_entries": sum(len(entry.removeprefix("##")) == 1 for entry in entries)}


def same_tokenizer(first: Path, second: Path) -> bool:
    """Whether two projects' vocabularies are the same files (so the same tokens, pairs and model follow)."""
    return all((first / ".bertwb" / "vocab" / name).read_bytes() == (second / ".bertwb" / "vocab" / name).read_bytes()
               for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json"))


def train_and_evaluate(project: Path) -> dict:
    """The rest of the pipeline, ``pairs``, ``pretrain`` and ``evaluate``: evaluate's metrics on the held-out pairs."""
    bertwb(project, "run", "--until", "evaluate")
    return json.loads((project / ".bertwb" / "evaluate" / "metrics.json").read_text())


# Every project: init's values, but for a short run's sake the demo's (bertwb.yaml: a tiny model learns fastest with
# 40% masking and a high rate), no validation passes during training (evaluate scores the end), and a fifth of the
# documents held out so that evaluate counts thousands of masked tokens.
COMMON_SETTINGS = {"ingest.format": "paragraphs", "ingest.valid_fraction": "0.2", "pairs.masked_lm_prob": "0.4",
                   "pairs.max_predictions_per_seq": "52", "pretrain.lr": "2.0e-3", "pretrain.eval_every": "0"}


def build_vocabularies(language: Language, work: Path, args: argparse.Namespace) -> dict:
    """One language's text, and per setting its project through vocab and the vocab figures; the "after" project
    is marked ``same_as_before`` when its tokenizer files are the "before" one's."""
    corpus = work / "text" / language.code
    if args.text is not None:
        corpus.mkdir(parents=True, exist_ok=True)
        shutil.copy(args.text / f"{language.code}.txt", corpus / "text.txt")
        text = {"characters": None}
    else:
        text = extract(language, corpus, args.chars, args.seed)
    result = {"text": text, "settings": {}}
    projects = {name: work / language.code / name for name in SETTINGS}
    for name, values in SETTINGS.items():
        prepare(work, projects[name], corpus, {**COMMON_SETTINGS, "pretrain.steps": str(args.steps), **values})
        result["settings"][name] = {**vocab_figures(projects[name]), "project": str(projects[name])}
    result["settings"]["after"]["same_as_before"] = same_tokenizer(projects["before"], projects["after"])
    for name, figures in result["settings"].items():
        _progress(f"{language.code} {name}: [UNK] {figures['unk_rate']:.2%}, tokens/word "
                  f"{figures['tokens_per_word']:.2f}, pieces {figures['pieces_share']:.1%}"
                  + (" (the same vocabulary as before)" if figures.get("same_as_before") else ""))
    return result


def pretrain_all(results: dict, jobs: int) -> None:
    """Pre-train and evaluate every project whose vocabulary is its own, ``jobs`` at a time (the runs, not the
    languages: Korean's two runs go side by side); a project with the before vocabulary takes its metrics."""
    runs = [figures for result in results.values() for figures in result["settings"].values()
            if not figures.get("same_as_before")]

    def run(figures: dict) -> None:
        figures["metrics"] = train_and_evaluate(Path(figures["project"]))
        _progress(f"{Path(figures['project']).parent.name} {Path(figures['project']).name}: masked-token accuracy "
                  f"{figures['metrics']['mlm_acc']:.1%} ({figures['metrics']['masked_tokens']:,} masked tokens)")

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(run, runs))
    for result in results.values():
        if result["settings"]["after"].get("same_as_before"):
            result["settings"]["after"]["metrics"] = result["settings"]["before"]["metrics"]


# The runs over every language's text in one corpus, by the name the report gives them: the alphabet of before
# (limit_alphabet's old default) and of today, and today's with language_sampling.
MIXED_RUNS = {"1000": {"vocab.limit_alphabet": "1000", "vocab.language_sampling": "false"},
              "auto": {"vocab.limit_alphabet": "auto", "vocab.language_sampling": "false"},
              "auto, sampling": {"vocab.limit_alphabet": "auto", "vocab.language_sampling": "true"}}
# ... each measured at the [UNK] rate it gets: none stops at max_unk_rate (the old alphabet's can pass 5%).
MIXED_SETTINGS = {"vocab.max_unk_rate": "1"}


def run_mixed(work: Path, languages: list[Language], jobs: int) -> dict:
    """Every language's text in one corpus, through vocab in each of `MIXED_RUNS` (``jobs`` at a time): the
    vocab figures of each, by its name."""
    corpus = work / "text" / "mixed"
    corpus.mkdir(parents=True, exist_ok=True)
    for language in languages:
        shutil.copy(work / "text" / language.code / "text.txt", corpus / f"{language.code}.txt")

    def run(name: str) -> dict:
        project = work / "mixed" / re.sub(r"\W+", "_", name)
        prepare(work, project, corpus, {**COMMON_SETTINGS, **MIXED_SETTINGS, **MIXED_RUNS[name]})
        figures = vocab_figures(project)
        _progress(f"mixed, {name}: alphabet {figures.get('alphabet', '–')}; [UNK] {figures['unk_rate']:.2%}, "
                  f"tokens/word {figures['tokens_per_word']:.2f}")
        return figures

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return dict(zip(MIXED_RUNS, pool.map(run, MIXED_RUNS), strict=True))


def _progress(line: str) -> None:
    print(f"  {time.strftime('%H:%M:%S')} {line}", flush=True)


def _pct(value: float, digits: int = 1) -> str:
    return f"{100 * value:.{digits}f}%"


def _script_rows(figures: dict) -> list[dict]:
    return [row for row in figures["scripts"] if row["share"] >= 0.01 and row["script"] not in ("Common", "Inherited")]


TITLE = "Text in eight languages: strip_accents and the alphabet"


def report(results: dict, mixed: dict | None, args: argparse.Namespace, seconds: float, command: list[str],
           appended_later: bool = False) -> tuple[str, str]:
    """The BENCHMARKS.md section of a run of ``command`` (its options) and its one-line headline. A run with
    ``--vocab-only`` measured no masked-token accuracy: its section says so and has no column for it."""
    languages = [language for language in LANGUAGES if language.code in results]
    trained = not args.vocab_only
    now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if trained:
        stages = (f"`ingest`, `vocab`, `pairs`, `pretrain` ({args.steps} steps of 32 pairs of up to 128 tokens) "
                  "and `evaluate`")
        settings = COMMON_SETTINGS
    else:
        stages = ("`ingest` and `vocab` only (`--vocab-only`: no pairs, pre-training or evaluate, so **no "
                  "masked-token accuracy was measured**)")
        settings = {key: value for key, value in COMMON_SETTINGS.items() if key.startswith(("ingest.", "vocab."))}
    same = ("When both give the same tokenizer files, the tokens, pairs and model are the same, and the model is "
            "pre-trained once (\\*)." if trained else "(\\*): the same tokenizer files as *before*.")
    lines = [f"## {TITLE} — {now}",
             "",
             f"Machine: {cpu_model()}, {os.cpu_count()} CPUs, "
             + (f"{args.threads} torch thread(s) per run, " if trained else "")
             + f"{args.jobs} run(s) at a time; {seconds / 60:.0f} min in all.",
             f"Script: `python benchmarks/multilingual.py {' '.join(command)}`"
             + (" (its results.json appended here by `--append-from`)" if appended_later else "")
             + f". Each run is `bertwb init` (tiny preset) then `bertwb run` through {stages}, with "
             + ", ".join(f"`{key}: {value}`" for key, value in settings.items())
             + ". *before*: `vocab.strip_accents: true` (the old default: BERT's stripping on every script); "
               f"*after*: `strip_accents: auto` (today's default). {same}",
             "",
             "| language | text (packages) | pages | documents | characters |",
             "|---|---|---|---|---|"]
    for language in languages:
        text = results[language.code]["text"]
        packages = ", ".join(f"{name} {version}" for name, version in (text.get("packages") or {}).items()) or "given"
        lines.append(f"| {language.name} | {packages} | {text.get('pages', '–')} | {text.get('documents', '–')} | "
                     f"{text['characters']:,} |" if text.get("characters") else
                     f"| {language.name} | {packages} | – | – | – |")
    columns = ["language", "setting", "strip_accents", "vocabulary", "[UNK]", "[UNK], text the vocabulary did not see",
               "tokens per word", "vocabulary not NFC", "vocabulary: pieces of a character",
               *(["masked-token accuracy (masked tokens)"] if trained else [])]
    lines += ["", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for language in languages:
        for name, figures in results[language.code]["settings"].items():
            cells = [language.name, name, str(figures["strip_accents"]), f"{figures['vocab_size']:,}",
                     _pct(figures["unk_rate"], 2), _pct(figures["unseen_unk_rate"], 2),
                     f"{figures['tokens_per_word']:.2f}", _pct(figures["not_nfc_share"]), _pct(figures["pieces_share"])]
            if trained:
                cells.append(f"{_pct(figures['metrics']['mlm_acc'])} ({figures['metrics']['masked_tokens']:,})")
            lines.append("| " + " | ".join(cells) + (" \\*" if figures.get("same_as_before") else "") + " |")
    lines += ["", "Each script of each text (at least 1% of its characters), from the vocab stage's per-script report "
              "(`vocab_scripts`); *before* is shown where its vocabulary differs:", "",
              "| language | setting | script | share of text | tokens per word | [UNK] | share of vocabulary | "
              "warning |",
              "|---|---|---|---|---|---|---|---|"]
    for language in languages:
        for name, figures in results[language.code]["settings"].items():
            if name == "before" and results[language.code]["settings"]["after"].get("same_as_before"):
                continue
            for row in _script_rows(figures):
                lines.append(f"| {language.name} | {name} | {row['script']} | {_pct(row['share'])} | "
                             f"{row['tokens_per_word']:.2f} | {_pct(row['unk_rate'], 2)} | "
                             f"{_pct(row['vocab_share'])} | "
                             f"{row['warning'] or ''} |")
    if mixed is not None:
        lines += _mixed_lines(mixed, len(languages))
    reading, headline = _reading(results, languages, trained)
    if mixed is not None:
        mixed_reading, mixed_headline = _mixed_reading(mixed)
        reading, headline = [*reading, mixed_reading], f"{mixed_headline}; {headline}"
    if not trained:
        reading.append("No masked-token accuracy: this run stopped after the vocab stage (`--vocab-only`).")
    lines += ["", *reading, ""]
    return headline, "\n".join(lines)


def _mixed_lines(mixed: dict, count: int) -> list[str]:
    """The mixed corpus's part of the section: each run's alphabet and overall figures, then each script's."""
    auto, sampled = mixed["auto"], mixed["auto, sampling"]
    lines = ["", f"All {count} texts in one corpus, through vocab only, `strip_accents: auto` (decided: "
             f"{auto['strip_accents']}; {auto.get('accents_kept_for') or 'no script it would damage'}), "
             + ", ".join(f"`{key}: {value}`" for key, value in MIXED_SETTINGS.items()) + " (no run stops at its "
             "[UNK] rate). *1000*: "
             "`vocab.limit_alphabet: 1000` (the old default); *auto*: `limit_alphabet: auto` (today's default); "
             "*auto, sampling*: auto with `vocab.language_sampling: true` (its shares: "
             f"{sampled.get('language_sampling', '–')}). The alphabet is the summary's: the characters the vocabulary "
             "starts from, of the distinct characters of the training text, and their share of its characters "
             "(spaces left out); its entries are those characters and their `##` pieces in the vocabulary.", "",
             "| run | alphabet | alphabet's entries in the vocabulary | [UNK] | [UNK], text the vocabulary did not "
             "see | tokens per word |",
             "|---|---|---|---|---|---|"]
    for name, figures in mixed.items():
        lines.append(f"| {name} | {figures['alphabet']} | {figures['alphabet_entries']:,} of "
                     f"{figures['vocab_size']:,} | {_pct(figures['unk_rate'], 2)} | "
                     f"{_pct(figures['unseen_unk_rate'], 2)} | {figures['tokens_per_word']:.2f} |")
    shown = (("[UNK]", "unk_rate", lambda value: _pct(value, 2)), ("tokens per word", "tokens_per_word",
             lambda value: f"{value:.2f}"), ("share of vocabulary", "vocab_share", _pct))
    header = [f"{label}, {name}" for label, _, _ in shown for name in mixed]
    lines += ["", "Each script (at least 1% of the characters), from each run's per-script report:", "",
              "| script | share of text | " + " | ".join(header) + " |", "|---|---|" + "---|" * len(header)]
    by_script = {name: {row["script"]: row for row in figures["scripts"]} for name, figures in mixed.items()}
    for row in _script_rows(auto):
        cells = [row["script"], _pct(row["share"])]
        for _, key, show in shown:
            cells += [show(by_script[name][row["script"]][key]) if row["script"] in by_script[name] else "–"
                      for name in mixed]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "The scripts' warnings:", "", *(f"- *{name}*: {warning}" for name, figures in mixed.items()
                                                   for warning in figures["warnings"] or ["none"])]
    return lines


def _mixed_reading(mixed: dict) -> tuple[str, str]:
    """What the mixed runs say, in a sentence made from their numbers, and the headline: 1000 against auto."""
    old, new = mixed["1000"], mixed["auto"]
    scripts = {row["script"]: row for row in new["scripts"]}
    worst = sorted((row for row in _script_rows(old) if row["unk_rate"] >= 0.01 and row["script"] in scripts),
                   key=lambda row: -row["unk_rate"])
    changed = ", ".join(f"{row['script']} {_pct(row['unk_rate'], 2)} → {_pct(scripts[row['script']]['unk_rate'], 2)}"
                        for row in worst)
    rest = {name: figures["vocab_size"] - figures["alphabet_entries"] for name, figures in (("1000", old),
                                                                                           ("auto", new))}
    reading = (f"Mixed corpus: the alphabet of 1000 keeps {old['alphabet']}; auto keeps {new['alphabet']}, and with "
               f"its `##` pieces takes {new['alphabet_entries']:,} of the {new['vocab_size']:,} entries (1000: "
               f"{old['alphabet_entries']:,}). [UNK] {_pct(old['unk_rate'], 2)} → {_pct(new['unk_rate'], 2)}"
               + (f" ({changed})" if changed else "") + f", tokens per word {old['tokens_per_word']:.2f} → "
               f"{new['tokens_per_word']:.2f}"
               + (f": the words that were [UNK] are pieces now, and {rest['auto']:,} entries are left to the rest of "
                  f"the vocabulary (1000: {rest['1000']:,})." if new["alphabet"] != old["alphabet"] else
                  ": the same alphabet both ways (the text has no more characters than 1000 keeps)."))
    headline = (f"alphabet 1000 → auto, mixed corpus: [UNK] {_pct(old['unk_rate'], 2)} → "
                f"{_pct(new['unk_rate'], 2)}, tokens/word {old['tokens_per_word']:.2f} → {new['tokens_per_word']:.2f}"
                + (f"; [UNK] {changed}" if changed else ""))
    return reading, headline


def _reading(results: dict, languages: list[Language], trained: bool) -> tuple[list[str], str]:
    """What the numbers say, in sentences made from them (the languages whose vocabulary changed, then the rest),
    and the headline: each changed language's figures in brief (masked-token accuracy when ``trained``)."""
    changed, same, brief = [], [], []
    for language in languages:
        before, after = (results[language.code]["settings"][name] for name in ("before", "after"))
        if after.get("same_as_before"):
            same.append(language.name)
            continue
        accuracy = (f", masked-token accuracy {_pct(before['metrics']['mlm_acc'])} → "
                    f"{_pct(after['metrics']['mlm_acc'])}" if trained else "")
        warned = "; ".join(before["warnings"]) or "none"
        changed.append(f"{language.name}: the report's warnings before: {warned}; after: "
                       f"{'; '.join(after['warnings']) or 'none'}. Vocabulary entries that are pieces of a character "
                       f"{_pct(before['pieces_share'])} → {_pct(after['pieces_share'])} (not NFC "
                       f"{_pct(before['not_nfc_share'])} → {_pct(after['not_nfc_share'])}), tokens per word "
                       f"{before['tokens_per_word']:.2f} → {after['tokens_per_word']:.2f}, [UNK] "
                       f"{_pct(before['unk_rate'], 2)} → {_pct(after['unk_rate'], 2)}{accuracy}.")
        brief.append(f"{language.name}: vocabulary not NFC {_pct(before['not_nfc_share'])} → "
                     f"{_pct(after['not_nfc_share'])}{accuracy}")
    lines = ["Reading: " + (" ".join(changed) if changed else "no language's vocabulary changed.")]
    if same:
        lines.append(f"{', '.join(same)}: the same vocabulary before and after (auto strips as before: no character "
                     "of theirs is damaged by stripping)" + (", so the same tokens and model." if trained else "."))
    headline = "; ".join(brief + ([f"{len(same)} others: the same vocabulary"] if same else []))
    return lines, f"strip_accents true → auto: {headline}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--languages", nargs="+", choices=[language.code for language in LANGUAGES],
                        default=[language.code for language in LANGUAGES])
    parser.add_argument("--chars", type=int, default=100_000, help="characters of prose per language (spaces left out)")
    parser.add_argument("--steps", type=int, default=120, help="pre-training steps of each run")
    parser.add_argument("--seed", type=int, default=0, help="the order pages are read in")
    parser.add_argument("--text", type=Path, default=None,
                        help="read each language's text from TEXT/<code>.txt instead of the packages (tests)")
    parser.add_argument("--jobs", type=int, default=5,
                        help="languages, then pre-training runs, then mixed-corpus runs, at a time")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads per run (one: a shared machine's cores are not fought over by spinning)")
    parser.add_argument("--no-mixed", action="store_true", help="leave out the corpus of all languages together")
    parser.add_argument("--vocab-only", action="store_true",
                        help="stop every run after the vocab stage: the vocabulary figures in minutes, no masked-token "
                             "accuracy")
    parser.add_argument("--work", type=Path, default=REPO / "benchmarks" / "data" / "multilingual")
    parser.add_argument("--no-append", action="store_true")
    parser.add_argument("--append-from", type=Path, default=None, metavar="RESULTS_JSON",
                        help="append the section of an earlier run (its --work's results.json) and run nothing")
    args = parser.parse_args()
    if args.append_from is not None:
        record = json.loads(args.append_from.read_text())
        ran = parser.parse_args(record["command"])
        headline, section = report(record["results"], record["mixed"], ran, record["seconds"], record["command"],
                                   appended_later=True)
        print(section)
        append_report(section, headline)
        return
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    work = args.work.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    chosen = [language for language in LANGUAGES if language.code in args.languages]
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = dict(zip([language.code for language in chosen],
                           pool.map(lambda language: build_vocabularies(language, work, args), chosen), strict=True))
    if not args.vocab_only:
        pretrain_all(results, args.jobs)
    mixed = None if args.no_mixed or len(chosen) < 2 else run_mixed(work, chosen, args.jobs)
    record = {"command": sys.argv[1:], "seconds": time.perf_counter() - started, "results": results, "mixed": mixed}
    (work / "results.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    headline, section = report(results, mixed, args, time.perf_counter() - started, sys.argv[1:])
    print(section)
    if not args.no_append:
        append_report(section, headline)


if __name__ == "__main__":
    main()
