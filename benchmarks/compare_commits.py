"""CPU pre-training speed of two commits side by side: did a change slow the training step?

Usage: ``python benchmarks/compare_commits.py [--base REV] [--head REV] [--steps 300] [--rounds 2]
[--no-append]``

* Both sides are the project's own code at two revisions (``git archive``, no checkout of this tree),
  each run through its own command line (``python -m bertwb``) with ``PYTHONPATH`` pointing at it.
* The same data on both sides: the sample corpus, the demo's pair settings, and one vocabulary file
  both load with ``vocab.from_file`` (so the sides train on identical pairs whatever either version's
  vocab training does). The config holds only keys both versions know.
* The demo's model and training settings (tiny, no dropout, batch 32, lr 2e-3); ``--steps`` steps,
  logging every 10. Each side's figure is the median tokens/s of its logging windows after the first
  (start-up and the heap's growth are in the first).
* Rounds alternate base, head, base, head, ... in one invocation, so load from other processes on a
  shared host falls on both sides; the ratio of medians is the result. The final weights' hashes are
  compared too: a refactoring that changes no arithmetic trains identical weights.

Results go to the benchmark log (benchmarks/log/) with the machine, and a row to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from _common import append_report, cpu_model  # noqa: E402

CONFIG = """
ingest:
  inputs: [{corpus}]
vocab:
  from_file: {vocab}
pairs:
  max_seq_length: 128
  max_predictions_per_seq: 52
  masked_lm_prob: 0.4
  dupe_factor: 2
model:
  preset: tiny
  hidden_dropout: 0.0
  attention_dropout: 0.0
pretrain:
  steps: {steps}
  batch_size: 32
  lr: 2.0e-3
  warmup_steps: 100
  log_every: 10
  eval_every: 0
  checkpoint_every: 100000
"""


def unpack(rev: str, into: Path) -> str:
    """The tree of ``rev`` under ``into``; returns the full commit id."""
    commit = subprocess.run(["git", "rev-parse", rev], cwd=REPO, check=True, capture_output=True,
                            text=True).stdout.strip()
    archive = subprocess.run(["git", "archive", commit], cwd=REPO, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return commit


def bertwb(code: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run([sys.executable, "-m", "bertwb", *args], env=env, cwd=code, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"bertwb {' '.join(args)} failed in {code}:\n{done.stderr[-3000:]}")
    return done


def median_tokens_per_s(workdir: Path) -> float:
    metrics = next((workdir / "pretrain-runs").glob("*/metrics.jsonl"))
    rates = [json.loads(line)["tokens_per_s"] for line in metrics.read_text().splitlines()][1:]
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="ae12b2d", help="The revision to compare against (default: the last "
                        "commit before the trainer/layout restructure).")
    parser.add_argument("--head", default="HEAD")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bertwb-commits-"))
    try:
        sides = {}
        for name, rev in (("base", args.base), ("head", args.head)):
            sides[name] = {"code": scratch / name, "rev": rev}
            sides[name]["commit"] = unpack(rev, sides[name]["code"])
        vocab_project = scratch / "vocab"
        vocab_project.mkdir()
        (vocab_project / "bertwb.yaml").write_text(f"ingest:\n  inputs: [{REPO / 'sample_corpus' / 'pretrain'}]\n")
        bertwb(sides["head"]["code"], "run", "--until", "vocab", "--config", str(vocab_project / "bertwb.yaml"))
        vocab = vocab_project / ".bertwb" / "vocab" / "tokenizer.json"
        for side in sides.values():
            config = scratch / f"{side['code'].name}.yaml"
            config.write_text(CONFIG.format(corpus=REPO / "sample_corpus" / "pretrain", vocab=vocab, steps=args.steps))
            side["config"], side["workdir"], side["rates"] = config, scratch / f"{side['code'].name}-ws", []
            bertwb(side["code"], "run", "--until", "pairs", "--config", str(config), "--workdir", str(side["workdir"]))
        for _ in range(args.rounds):
            for side in sides.values():
                bertwb(side["code"], "pretrain", "--force", "--config", str(side["config"]),
                       "--workdir", str(side["workdir"]))
                side["rates"].append(median_tokens_per_s(side["workdir"]))
        for side in sides.values():
            weights = side["workdir"] / "pretrain" / "model.safetensors"
            side["sha"] = hashlib.sha256(weights.read_bytes()).hexdigest()[:12]
            side["median"] = statistics.median(side["rates"])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    base, head = sides["base"], sides["head"]
    ratio = head["median"] / base["median"]
    rows = "\n".join(f"| {name} `{side['commit'][:8]}` | {side['median']:,.0f} | "
                     f"{', '.join(f'{r:,.0f}' for r in side['rates'])} | {side['sha']} |"
                     for name, side in sides.items())
    command = f"python benchmarks/compare_commits.py --base {args.base} --head {args.head} --steps {args.steps}"
    report = f"""
## Training step, two commits side by side (CPU) — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}

Script: `{command} --rounds {args.rounds}`.
Machine: {cpu_model()}, {os.cpu_count()} CPUs, load average before the run {os.getloadavg()[0]:.1f}.
The demo's pre-training (tiny, no dropout, batch 32, seq ≤ 128, 40% masking) for {args.steps} steps on the
same pairs; rounds alternate base and head; tokens/s is the median of the logging windows after the first.

| side | median tokens/s | per round | final weights (sha256) |
|---|---|---|---|
{rows}

* Head's step speed: **{100 * ratio:.1f}%** of base's ({'within' if abs(ratio - 1) <= 0.03 else 'NOT within'} 3%);
  weights {'bit-identical' if base['sha'] == head['sha'] else 'DIFFERENT'}.
"""
    print(report)
    if not args.no_append:
        same = "bit-identical" if base["sha"] == head["sha"] else "differ"
        append_report(report, f"{head['commit'][:8]} at **{100 * ratio:.1f}%** of {base['commit'][:8]}'s step speed "
                              f"(target: within 3%); weights {same}")


if __name__ == "__main__":
    main()
