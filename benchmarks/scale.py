"""The data stages at scale: ingest, vocab and pairs from 100 MB to 1 GB, today's code beside an older commit's.

    python benchmarks/scale.py [--mb 100 1000] [--baseline 6e24577] [--source FILE ...] [--no-append]

What a user runs, measured as a user runs it: each stage is its own ``bertwb`` process, with BERT's data
settings (a 30,522-piece vocabulary, 128-token pairs, 15% masking, ``dupe_factor 1``) and every other
setting at its default, on a corpus written at each size. Per stage it records wall time, peak RSS (the
process and its workers, sampled every 50 ms) and what the workspace holds on disk after it.

* **Side by side.** The same corpus and config go through this checkout and through ``--baseline``
  (exported with ``git archive`` into a temporary folder and imported through ``PYTHONPATH``, on the same
  interpreter and packages). The two sides alternate stage by stage, in the other order at each size,
  so a slow minute of a shared machine falls on both; only ratios taken in one run are compared.
* **The corpus.** Documents of the sample corpus (or of ``--source`` files: blocks between blank lines),
  repeated in ~25 MB shards with a copy number written into each so that de-duplication keeps them.
  Repeating text keeps the set of distinct words fixed, as the issue's English text copied 10x and 100x
  did; on real text the vocabulary's sample also meets unseen words (``unseen_unk_rate``).
* **Growth and extrapolation.** The growth factor from the smallest to the largest size, per stage, in
  time and in peak memory; the time at 16 GB, linear from the largest size, on this machine and in
  core-hours (its wall time times its cores), which is what a larger machine divides.

Appends a section to the benchmark log (benchmarks/log/) and a row to BENCHMARKS.md unless ``--no-append``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from _common import REPO, append_report, cpu_model, run_with_peak_rss
from bertwb.disk import folder_bytes
from bench_ingest_vocab import read_documents, write_corpus

STAGES = ("ingest", "vocab", "pairs")
SETTINGS = {"vocab": {"vocab_size": 30522}, "pairs": {"max_seq_length": 128, "masked_lm_prob": 0.15,
                                                      "dupe_factor": 1}}
TARGET_MB = 16_000  # BERT's corpus: BooksCorpus and English Wikipedia, ~16 GB of text


def source_documents(paths: list[Path]) -> list[str]:
    """Blocks between blank lines of ``paths``, or the sample corpus's documents when none is given."""
    if not paths:
        return read_documents()
    blocks = []
    for path in paths:
        blocks += [b.strip("\n") for b in path.read_text(encoding="utf-8").split("\n\n") if b.strip()]
    if not blocks:
        sys.exit(f"no text in {', '.join(map(str, paths))}")
    return blocks


def export_commit(commit: str, into: Path) -> str:
    """Write ``commit``'s tree under ``into``; return its short hash."""
    short = subprocess.run(["git", "rev-parse", "--short=8", commit], cwd=REPO, capture_output=True, text=True)
    if short.returncode != 0:
        sys.exit(f"--baseline {commit}: not a commit of this repository ({short.stderr.strip()})")
    into.mkdir(parents=True)
    archive = subprocess.Popen(["git", "archive", commit], cwd=REPO, stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        sys.exit(f"git archive {commit} failed")
    return short.stdout.strip()


def disk_bytes(workspace: Path) -> int:
    """Bytes of every file of ``workspace`` (none before its first stage)."""
    return folder_bytes(workspace) if workspace.is_dir() else 0


class Side:
    """One code base (this checkout or the baseline) with its own project folder per corpus size."""

    def __init__(self, name: str, code: Path, root: Path):
        self.name, self.code, self.root = name, code, root
        self.env = {**os.environ, "PYTHONPATH": str(code)}

    def project(self, corpus: Path, megabytes: float) -> Path:
        folder = self.root / f"{self.name}-{megabytes:g}mb"
        folder.mkdir(parents=True)
        settings = {"ingest": {"inputs": [str(corpus)]}, **SETTINGS}
        (folder / "bertwb.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
        return folder

    def run(self, folder: Path, stage: str) -> dict[str, float]:
        command = [sys.executable, "-m", "bertwb", "--config", str(folder / "bertwb.yaml"), stage]
        before = disk_bytes(folder / ".bertwb")
        # From the project's folder: ``-m`` puts the working directory first on sys.path, before PYTHONPATH.
        seconds, peak = run_with_peak_rss(command, cwd=folder, every_s=0.05, env=self.env)
        return {"s": seconds, "rss": peak, "disk": disk_bytes(folder / ".bertwb") - before}


def measure(sides: list[Side], sizes: list[float], blocks: list[str], tmp: Path) -> dict:
    """{size: {side: {stage: figures}}} plus the corpus bytes per size, every stage of both sides."""
    results: dict = {}
    for index, megabytes in enumerate(sizes):
        corpus = tmp / f"corpus-{megabytes:g}mb"
        written = write_corpus(corpus, megabytes, blocks)
        projects = {side.name: side.project(corpus, megabytes) for side in sides}
        results[megabytes] = {"bytes": written, **{side.name: {} for side in sides}}
        for number, stage in enumerate(STAGES):
            order = sides if (index + number) % 2 == 0 else sides[::-1]
            for side in order:
                figures = side.run(projects[side.name], stage)
                results[megabytes][side.name][stage] = figures
                print(f"{written / 1e6:,.0f} MB  {side.name:>8}  {stage:<6} {figures['s']:8.1f} s  "
                      f"{figures['rss']:6.0f} MB peak  {figures['disk'] / 1e6:8.1f} MB on disk", flush=True)
        for folder in (*projects.values(), corpus):
            shutil.rmtree(folder)
    return results


def report(results: dict, sizes: list[float], names: list[str], commits: tuple[str, str],
           command: str) -> tuple[str, str]:
    """The BENCHMARKS.md section and its one-line headline."""
    now, cores = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.cpu_count() or 1
    small, large = results[sizes[0]], results[sizes[-1]]
    mb_small, mb_large = small["bytes"] / 1e6, large["bytes"] / 1e6
    new, old = names
    head, baseline = commits
    lines = [
        f"\n## Data stages at scale — {now}\n",
        f"Script: `{command}`.",
        f"Machine: {platform.system()} {platform.machine()} ({cpu_model()}), {cores} CPUs, "
        f"Python {platform.python_version()}, load average before the run {os.getloadavg()[0]:.1f}.",
        f"Sides: `{new}` is this checkout ({head}), `{old}` commit {baseline}; stage by stage, in alternating order.",
        "Settings: vocab_size 30522, max_seq_length 128, masked_lm_prob 0.15, dupe_factor 1, the rest defaults.\n",
        "| corpus | stage | " + " | ".join(f"{n} wall" for n in names) + " | speed-up | "
        + " | ".join(f"{n} peak RSS" for n in names) + f" | {new} disk |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for megabytes in sizes:
        row = results[megabytes]
        for stage in (*STAGES, "all"):
            fig = {n: _total(row[n]) if stage == "all" else row[n][stage] for n in names}
            lines.append(f"| {_mb(row['bytes'])} | {stage} | "
                         + " | ".join(f"{fig[n]['s']:,.1f} s" for n in names)
                         + f" | {fig[old]['s'] / fig[new]['s']:.2f}× | "
                         + " | ".join(f"{fig[n]['rss']:,.0f} MB" for n in names)
                         + f" | {fig[new]['disk'] / 1e6:,.0f} MB |")
    growth = mb_large / mb_small
    lines += ["", f"Growth from {_mb(small['bytes'])} to {_mb(large['bytes'])} ({growth:.1f}× the text), this "
              f"checkout, and the 16 GB extrapolation (linear from {_mb(large['bytes'])}):\n",
              "| stage | time growth | peak RSS growth | disk per corpus MB | at 16 GB, this machine | "
              "at 16 GB, core-hours |", "|---|---|---|---|---|---|"]
    for stage in (*STAGES, "all"):
        a = _total(small[new]) if stage == "all" else small[new][stage]
        b = _total(large[new]) if stage == "all" else large[new][stage]
        hours = b["s"] * TARGET_MB / mb_large / 3600
        lines.append(f"| {stage} | {b['s'] / a['s']:.1f}× | {b['rss'] / a['rss']:.2f}× | "
                     f"{b['disk'] / 1e6 / mb_large:.2f} MB | {hours:.1f} h | {hours * cores:.1f} |")
    total_new, total_old = _total(large[new]), _total(large[old])
    speedup = total_old["s"] / total_new["s"]
    mem_growth = max(large[new][s]["rss"] / small[new][s]["rss"] for s in STAGES)
    headline = (f"{_mb(large['bytes'])}: data preparation **{speedup:.2f}×** {baseline}'s speed "
                f"({total_new['s']:,.0f} s vs {total_old['s']:,.0f} s); from {_mb(small['bytes'])}, time "
                f"{total_new['s'] / _total(small[new])['s']:.1f}×, peak RSS ≤ {mem_growth:.2f}× "
                f"(largest {max(large[new][s]['rss'] for s in STAGES):,.0f} MB)")
    lines += ["", f"Headline: {headline}.", ""]
    return "\n".join(lines), headline


def _mb(size: int) -> str:
    """A corpus size for the tables: whole megabytes, with a decimal below 10 MB."""
    return f"{size / 1e6:,.0f} MB" if size >= 10e6 else f"{size / 1e6:.1f} MB"


def _total(stages: dict[str, dict[str, float]]) -> dict[str, float]:
    """The whole data preparation: times and disk add up, memory is the largest stage's."""
    return {"s": sum(f["s"] for f in stages.values()), "rss": max(f["rss"] for f in stages.values()),
            "disk": sum(f["disk"] for f in stages.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, nargs="+", default=[100, 1000], help="corpus sizes, smallest first")
    parser.add_argument("--baseline", default="6e24577",
                        help="commit to compare with (default: the code before issue #24's work)")
    parser.add_argument("--source", type=Path, nargs="*", default=[], help="text files to repeat (default: "
                        "the sample corpus)")
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    sizes = sorted(args.mb)
    blocks = source_documents(args.source)
    with tempfile.TemporaryDirectory(prefix="bertwb-scale-") as tmp_name:
        tmp = Path(tmp_name)
        baseline = export_commit(args.baseline, tmp / "baseline")
        head = subprocess.run(["git", "rev-parse", "--short=8", "HEAD"], cwd=REPO, capture_output=True,
                              text=True).stdout.strip() or "HEAD"
        sides = [Side("this", REPO, tmp / "projects"), Side("baseline", tmp / "baseline", tmp / "projects")]
        results = measure(sides, sizes, blocks, tmp)
    command = "python benchmarks/scale.py --mb " + " ".join(f"{m:g}" for m in sizes) + f" --baseline {args.baseline}"
    if args.source:
        command += " --source " + " ".join(str(p) for p in args.source)
    text, headline = report(results, sizes, ["this", "baseline"], (head, baseline), command)
    print(text)
    if not args.no_append:
        append_report(text, headline)


if __name__ == "__main__":
    main()
