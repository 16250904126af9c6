"""The parts of benchmarks/gpu_check.py, each run as its own process: ``python benchmarks/_gpu_parts.py PART
--work DIR [--dry-run]``. A part answers one GPU question and writes DIR/PART.json as it goes (status, a
headline, its numbers, a markdown section), so a part killed at its time limit still leaves what it had
measured; its log is its standard output. ``--dry-run`` runs the same code on the CPU with tiny shapes.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import traceback
import weakref
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

SAMPLE_CORPUS = REPO / "sample_corpus" / "pretrain"
WHEELS = REPO / ".whl"  # wheels the device call carries (gpu_check.py --fetch-wheels); it reaches no registry
LOGIT_TOLERANCE = 1e-3  # max |bertwb − transformers| of a logit, both fp32 on the CPU, same weights


class CheckFailed(Exception):
    """What a part found wrong, in one line: the part is 'failed' with this as its reason."""


@dataclass
class Part:
    """One part's result as it stands: saved to WORK/NAME.json at every `record`."""

    name: str
    work: Path
    dry_run: bool
    status: str = "running"  # running | ok | failed | skipped
    reason: str = ""
    headline: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)
    markdown: str = ""

    @property
    def device(self) -> str:
        return "cpu" if self.dry_run else "cuda"

    def record(self, **numbers: Any) -> None:
        self.numbers.update(numbers)
        self.save()

    def save(self) -> None:
        data = {k: v for k, v in asdict(self).items() if k not in ("work", "dry_run")}
        path = self.work / f"{self.name}.json"
        path.with_suffix(".tmp").write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
        path.with_suffix(".tmp").replace(path)

    def skip(self, reason: str) -> None:
        self.status, self.reason = "skipped", reason


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def run(command: list[str], *, cwd: Path = REPO, expect: int | None = 0, capture: bool = False,
        env: dict[str, str] | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
    """``command`` with its output in this part's log (stdout kept apart with ``capture``); its exit code
    must be ``expect`` unless that is None."""
    print(f"$ {shlex.join(command)}", flush=True)
    result = subprocess.run(command, cwd=cwd, env=env, timeout=timeout, text=True,
                            stdout=subprocess.PIPE if capture else None)
    if capture:
        print(result.stdout, end="", flush=True)
    check(expect is None or result.returncode == expect,
          f"`{shlex.join(command[1:5])} ...` exited {result.returncode}, expected {expect}")
    return result


def bertwb(project: Path, *args: str, **kwargs: Any) -> subprocess.CompletedProcess:
    """``python -m bertwb COMMAND --config PROJECT/bertwb.yaml ARGS`` in the project's folder."""
    return run([sys.executable, "-m", "bertwb", args[0], "--config", str(project / "bertwb.yaml"), *args[1:]],
               cwd=project, **kwargs)


def manifest_summary(project: Path, stage: str) -> dict[str, Any]:
    return json.loads((project / ".bertwb" / "manifests" / f"{stage}.json").read_text())["summary"]


# --- install ------------------------------------------------------------------------------------------

def lock_entries(path: Path) -> dict[str, tuple[str, str]]:
    """A pip-compile lock as {normalised name: (version, its requirement lines with hashes)}."""
    entries: dict[str, tuple[str, str]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", path.read_text(encoding="utf-8")):
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", block)
        if match:
            lines = [line for line in block.splitlines() if not line.lstrip().startswith("#")]
            entries[normalise(match[1])] = (match[2], "\n".join(lines))
    return entries


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_version(name: str) -> str | None:
    from importlib import metadata  # noqa: PLC0415

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def pip(*args: str, dry_run: bool) -> list[str]:
    """A pip install that fails fast where no registry answers, from the carried wheels when there are any."""
    source = ["--no-index", "--find-links", str(WHEELS)] if WHEELS.is_dir() else ["--retries", "0", "--timeout", "10"]
    return [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", *(["--dry-run"] if dry_run else []),
            *source, *args]


# Of the dev lock, what the checks themselves import (the tests, the transformers side, _common).
CHECK_PACKAGES = ("transformers", "pytest", "psutil")
# What the parts import, to be importable at the end whatever pip did.
NEEDED_MODULES = ("torch", "numpy", "duckdb", "zstandard", "tokenizers", "safetensors", "pyarrow", "yaml", "click",
                  "rich", "transformers", "pytest", "psutil")


IMPORT_PROBE = """import importlib, json, sys, warnings
warnings.simplefilter("ignore")
versions = {}
for name in sys.argv[1:]:
    try:
        versions[name] = getattr(importlib.import_module(name), "__version__", "?")
    except Exception:
        versions[name] = "missing"
print(json.dumps(versions))"""


def install(part: Part) -> None:
    """The machine's own CUDA torch kept (``torch.version.cuda``), or the CUDA build installed where it has
    none; then, from the locks with their hashes and no dependencies, only the locked packages it lacks
    (a package it has at another version is kept, and listed); then bertwb itself, editable. The device
    reaches no registry: pip reads the carried wheels in .whl/ when they are there, and fails fast when
    not. Ok when every module a part imports imports (pip's failures are listed); a dry run asks pip what
    it would do and installs nothing."""
    probe = run([sys.executable, "-c", "import json, torch; print(json.dumps([torch.__version__, torch.version.cuda, "
                 "torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else None]))"],
                expect=None, capture=True)
    torch_info = json.loads(probe.stdout.strip().splitlines()[-1]) if probe.returncode == 0 else None
    steps = []
    if torch_info and (torch_info[1] or part.dry_run):
        build = f"CUDA {torch_info[1]}" if torch_info[1] else "CPU build: dry run"
        kept = f"torch {torch_info[0]} kept ({build})"
    else:
        started = time.perf_counter()
        result = run(pip("--upgrade", "torch", dry_run=part.dry_run), expect=None)
        steps.append(("torch", result.returncode, time.perf_counter() - started))
        kept = "torch missing or without CUDA: `pip install torch` " + ("ok" if result.returncode == 0 else "failed")
    part.record(torch=torch_info and torch_info[0], cuda=torch_info and torch_info[1],
                device_name=torch_info and torch_info[3], torch_step=kept)

    runtime, dev = lock_entries(REPO / "requirements" / "runtime.txt"), lock_entries(REPO / "requirements" / "dev.txt")
    wanted = {name: entry for name, entry in runtime.items() if name != "torch"}
    wanted.update({name: dev[name] for name in CHECK_PACKAGES if name in dev})
    missing, other_versions = [], {}
    for name, (version, _) in sorted(wanted.items()):
        have = installed_version(name)
        if have is None:
            missing.append(name)
        elif have != version:
            other_versions[name] = f"{have} (lock {version})"
    part.record(locked_missing=missing, kept_other_versions=other_versions, wheels_carried=WHEELS.is_dir())
    for name in missing:  # one at a time: a wheel that is not there must not stop the others
        requirements = part.work / f"install-{name}.txt"
        requirements.write_text(wanted[name][1] + "\n", encoding="utf-8")
        started = time.perf_counter()
        result = run(pip("--no-deps", "--require-hashes", "-r", str(requirements), dry_run=part.dry_run), expect=None)
        steps.append((name, result.returncode, time.perf_counter() - started))
    started = time.perf_counter()
    result = run(pip("--no-deps", "--no-build-isolation", "-e", str(REPO), dry_run=part.dry_run), expect=None)
    steps.append(("bertwb -e", result.returncode, time.perf_counter() - started))
    part.record(pip_steps=[{"what": what, "exit": code, "seconds": round(s, 1)} for what, code, s in steps])

    probe = run([sys.executable, "-c", IMPORT_PROBE, *NEEDED_MODULES], capture=True)  # after pip, in a new process
    importable = json.loads(probe.stdout.strip().splitlines()[-1])
    lacking = [module for module, version in importable.items() if version == "missing"]
    part.record(importable=importable)
    failed_steps = [what for what, code, _ in steps if code != 0]
    part.record(pip_failed=failed_steps)
    part.headline = (f"{kept}; {len(missing)} locked packages missing"
                     + (f" ({', '.join(missing)})" if missing else "")
                     + ("; wheels from .whl/" if WHEELS.is_dir() else "")
                     + (f"; pip failed for {', '.join(failed_steps)}" if failed_steps and lacking else "")
                     + (f"; not installed, and no part imports them: {', '.join(failed_steps)}"
                        if failed_steps and not lacking else "")
                     + (" (dry run: nothing installed)" if part.dry_run else ""))
    # What pip could not install only matters when a part needs it: bertwb itself runs from the tree.
    check(not lacking, f"not importable after install: {', '.join(lacking)} (carry their wheels in .whl/: "
          "gpu_check.py --fetch-wheels)")


# --- tests/test_cuda.py ---------------------------------------------------------------------------------

def cuda_tests(part: Part) -> None:
    """tests/test_cuda.py as CI would run it on a GPU machine; on the CPU it must skip cleanly (exit 0)."""
    result = run([sys.executable, "-m", "pytest", "tests/test_cuda.py", "-q", "-rs", "-p", "no:cacheprovider"],
                 expect=None, capture=True)
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)", result.stdout)}
    reasons = sorted(set(re.findall(r"SKIPPED \[\d+\] [^:]+:\d+: (.+)", result.stdout)))
    part.record(exit_code=result.returncode, passed=counts.get("passed", 0), failed=counts.get("failed", 0),
                skipped=counts.get("skipped", 0), errors=counts.get("error", 0) + counts.get("errors", 0),
                skip_reasons=reasons)
    part.headline = ", ".join(f"{n} {word}" for word, n in counts.items()) or "no tests ran"
    check(result.returncode == 0, f"pytest exited {result.returncode}: {part.headline}")
    if not counts.get("passed"):
        part.skip(f"pytest exited 0 and skipped all {counts.get('skipped', 0)} tests: {'; '.join(reasons)}")


# --- training steps, bertwb against transformers ---------------------------------------------------------

def step_shapes(dry_run: bool) -> dict[str, Any]:
    """BERT-base, 128 tokens, batch 256 (BERT's) on a GPU; the tiny preset and a handful of steps on the CPU."""
    return dict(preset="tiny", batch=8, warmup=1, steps=1) if dry_run else \
        dict(preset="base", batch=256, warmup=10, steps=30)


def _device_and_peak(part: Part) -> tuple[Any, str, float | None]:
    import torch  # noqa: PLC0415

    from _common import bf16_peak_tflops  # noqa: PLC0415
    from bertwb.train.device import resolve_device  # noqa: PLC0415

    device = resolve_device(part.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    peak = bf16_peak_tflops(name) if device.type == "cuda" else None
    torch.backends.cuda.matmul.allow_tf32 = True  # as the trainer does on CUDA
    torch.backends.cudnn.allow_tf32 = True
    part.record(device_name=name, peak_bf16_tflops=peak,
                mfu_note="" if peak else f"MFU not computed: no dense bf16 peak known for {name!r}")
    return device, name, peak


def _row(label: str, rates: dict[str, float], peak: float | None, memory_gib: float | None = None) -> dict[str, Any]:
    return {"label": label, "tokens_per_s": round(rates["tokens_per_s"], 1),
            "ms_per_step": round(rates["ms_per_step"], 2), "useful_tflops_per_s": round(rates["flops_per_s"] / 1e12, 3),
            "mfu": round(rates["flops_per_s"] / (peak * 1e12), 4) if peak else None,
            "peak_memory_gib": None if memory_gib is None else round(memory_gib, 2)}


def _peak_memory(device: Any, run: Callable[[], dict[str, float]]) -> tuple[dict[str, float], float | None]:
    """``run``'s rates and, on CUDA, the most GPU memory torch held for tensors while it ran (GiB): the
    model, its optimizer state and a step's activations."""
    import torch  # noqa: PLC0415

    if device.type != "cuda":
        return run(), None
    torch.cuda.reset_peak_memory_stats(device)
    rates = run()
    return rates, torch.cuda.max_memory_allocated(device) / 2**30


def _table(rows: list[dict[str, Any]]) -> str:
    def mfu(row: dict[str, Any]) -> str:
        return f"{100 * row['mfu']:.1f}%" if row["mfu"] is not None else "n/a"

    def memory(row: dict[str, Any]) -> str:
        return f"{row['peak_memory_gib']:.2f}" if row.get("peak_memory_gib") is not None else "n/a"

    lines = ["| | tokens/s | ms/step | useful TFLOP/s | MFU | peak GPU memory, GiB |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['label']} | {r['tokens_per_s']:,.0f} | {r['ms_per_step']:.1f} | {r['useful_tflops_per_s']:,.2f} | "
              f"{mfu(r)} | {memory(r)} |" for r in rows]
    return "\n".join(lines)


def _free_memory() -> None:
    import torch  # noqa: PLC0415

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def train_steps(part: Part) -> None:
    """bertwb's trainer step (benchmarks/pretrain_gpu.py's rows: bf16 autocast on CUDA, fused AdamW,
    clipping, MLM head at masked tokens) against transformers' BertForPreTraining (sdpa) on the very same
    batches, then on random batches padded as its collator pads them. MFU: the useful FLOPs of
    ``useful_flops_per_pair`` (real tokens; the same count for every row) over the card's dense bf16 peak."""
    import numpy as np  # noqa: PLC0415

    from bertwb.config import Config  # noqa: PLC0415
    from bertwb.data.batching import Batches  # noqa: PLC0415
    from bertwb.model.bert import BertConfig  # noqa: PLC0415
    from pretrain_gpu import bench_bertwb, bench_hf, synthetic_pairs  # noqa: PLC0415

    shapes = step_shapes(part.dry_run)
    device, name, peak = _device_and_peak(part)
    args = argparse.Namespace(**shapes)
    config = BertConfig.from_preset(shapes["preset"], 30522)
    pairs = synthetic_pairs(args.batch * (args.warmup + args.steps))
    bucket = Config().pretrain.bucket_batches
    ours = Batches(pairs, args.batch, seed=0, bucket_batches=bucket, pad_multiple=8 if device.type == "cuda" else 1)
    theirs = Batches(pairs, args.batch, seed=0, bucket_batches=bucket)
    same = all(np.array_equal(ours.epoch_order(0)[step], theirs.epoch_order(0)[step])
               for step in range(args.warmup + args.steps))
    check(same, "transformers' row would not train on bertwb's batches: the two orders differ")
    part.record(shapes=shapes, precision="bf16 autocast, TF32" if device.type == "cuda" else "fp32 (dry run)",
                seq_len=128, layers=config.num_layers, hidden=config.hidden_size, heads=config.num_heads)

    rates, memory = _peak_memory(device, lambda: bench_bertwb(args, config, pairs, device))
    rows = [_row("bertwb trainer step", rates, peak, memory)]
    part.record(rows=rows)
    _free_memory()
    for label, bucket_batches in (("transformers BertForPreTraining (sdpa), the same batches", bucket),
                                  ("transformers BertForPreTraining (sdpa), random batches", 1)):
        rates, memory = _peak_memory(device, functools.partial(bench_hf, args, config, pairs, device,
                                                               bucket_batches=bucket_batches))
        rows.append(_row(label, rates, peak, memory))
        part.record(rows=rows)
        _free_memory()
    speedup = rows[0]["tokens_per_s"] / rows[1]["tokens_per_s"]
    part.record(speedup_vs_transformers_same_batches=round(speedup, 3))

    def mfu(row: dict[str, Any]) -> str:
        return f"MFU {100 * row['mfu']:.1f}%" if row["mfu"] is not None else "MFU n/a"

    part.headline = (f"{name}: bertwb {rows[0]['tokens_per_s']:,.0f} tok/s, {mfu(rows[0])}; transformers "
                     f"{rows[1]['tokens_per_s']:,.0f} tok/s, {mfu(rows[1])}; {speedup:.2f}× on the same batches")
    part.markdown = (f"BERT L{config.num_layers} H{config.hidden_size} A{config.num_heads}, V 30522, sequences ≤ 128, "
                     f"batch {args.batch}, {part.numbers['precision']}; timed steps: {args.steps} after "
                     f"{args.warmup} warm-up. "
                     f"{part.numbers['mfu_note']}\n\n{_table(rows)}")


def compiled_steps(part: Part) -> None:
    """The bertwb row again with ``pretrain.compile`` (torch.compile, dynamic shapes): compile seconds,
    tokens/s, MFU, and how many graphs and graph breaks dynamo made. On the CPU (dry run) with dynamo's
    eager backend: the capture is proven without minutes of C++ code generation."""
    import torch  # noqa: PLC0415

    from bertwb.model.bert import BertConfig  # noqa: PLC0415
    from pretrain_gpu import bench_bertwb, synthetic_pairs  # noqa: PLC0415

    if part.dry_run:
        compile_ = torch.compile
        torch.compile = lambda *a, **k: compile_(*a, **{**k, "backend": "eager"})
    shapes = step_shapes(part.dry_run)
    device, name, peak = _device_and_peak(part)
    args = argparse.Namespace(**shapes)
    config = BertConfig.from_preset(shapes["preset"], 30522)
    pairs = synthetic_pairs(args.batch * (args.warmup + args.steps))
    started = time.perf_counter()
    rates, memory = _peak_memory(device, lambda: bench_bertwb(args, config, pairs, device, compile=True))
    elapsed = time.perf_counter() - started
    row = _row("bertwb trainer step, torch.compile", rates, peak, memory)
    from torch._dynamo.utils import counters  # noqa: PLC0415

    stats = {key: dict(value) for key, value in counters.items() if key in ("stats", "frames")}
    breaks = sum(counters["graph_break"].values())
    part.record(backend="eager (dry run)" if part.dry_run else "inductor", row=row,
                compile_and_warmup_s=round(elapsed - args.steps * rates["ms_per_step"] / 1000, 1),
                graph_breaks=breaks, dynamo=stats,
                graph_break_reasons={reason.splitlines()[0]: n for reason, n in counters["graph_break"].items()})
    eager = _read_part(part.work, "steps")
    ratio = ""
    if eager and eager.get("numbers", {}).get("rows"):
        ratio = f"; {row['tokens_per_s'] / eager['numbers']['rows'][0]['tokens_per_s']:.2f}× the eager step"
    mfu = f"MFU {100 * row['mfu']:.1f}%" if row["mfu"] is not None else "MFU n/a"
    part.headline = (f"{row['tokens_per_s']:,.0f} tok/s, {mfu}{ratio}; compile + warm-up "
                     f"{part.numbers['compile_and_warmup_s']} s, {breaks} graph breaks")
    part.markdown = _table([row])


def _read_part(work: Path, name: str) -> dict[str, Any] | None:
    path = work / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


# --- the sample corpus's data, and a CLI run on it --------------------------------------------------------

def data(part: Part) -> None:
    """ingest → vocab → pairs on the sample corpus (BERT's masking, 128 tokens), once, for the CLI and
    torchrun parts to copy; the dry run reads one of its four files at 64 tokens."""
    project = part.work / "data" / "project"
    shutil.rmtree(project.parent, ignore_errors=True)
    project.mkdir(parents=True)
    inputs = str(SAMPLE_CORPUS / "part-000.txt") if part.dry_run else str(SAMPLE_CORPUS)
    (project / "bertwb.yaml").write_text(
        f"ingest:\n  inputs: [{json.dumps(inputs)}]\n  valid_fraction: 0.05\n"
        f"vocab:\n  vocab_size: 8192\n"
        f"pairs:\n  max_seq_length: {64 if part.dry_run else 128}\n  dupe_factor: 1\n", encoding="utf-8")
    started = time.perf_counter()
    bertwb(project, "run", "--until", "pairs")
    pairs = manifest_summary(project, "pairs")
    part.record(seconds=round(time.perf_counter() - started, 1), documents=manifest_summary(project, "ingest").get(
        "documents"), vocab_size=manifest_summary(project, "vocab").get("vocab_size"), pairs=pairs)
    part.headline = f"sample corpus → pairs in {part.numbers['seconds']} s"


def _project_copy(part: Part) -> Path:
    source = part.work / "data" / "project"
    check((source / ".bertwb" / "manifests" / "pairs.json").is_file(), "the data part built no pairs")
    target = part.work / part.name / "project"
    shutil.rmtree(target.parent, ignore_errors=True)
    shutil.copytree(source, target)
    return target


def _training_sets(part: Part, steps: int) -> list[str]:
    """The pretrain settings of a CLI run: bert-base shapes on a GPU (BERT's lr for a batch of 32), the tiny
    preset on the CPU."""
    if part.dry_run:
        values = dict(preset="tiny", batch_size=16, lr=1e-3, warmup_steps=2, log_every=1, checkpoint_every=10)
    else:
        values = dict(preset="base", batch_size=32, lr=1e-4, warmup_steps=30, log_every=10, checkpoint_every=100)
    sets = {"model.preset": values.pop("preset"), "pretrain.steps": steps, "pretrain.eval_every": 0,
            "pretrain.eval_batches": 4, **{f"pretrain.{k}": v for k, v in values.items()}}
    return [arg for key, value in sets.items() for arg in ("--set", f"{key}={value}")]


def _logged_steps(log: Path) -> int:
    """The last training step this part's log shows (`pretrain: step N/M` lines)."""
    steps = re.findall(r"pretrain: step ([\d,]+)/", log.read_text(encoding="utf-8", errors="replace"))
    return int(steps[-1].replace(",", "")) if steps else 0


def cli_run(part: Part) -> None:
    """The user's road on the device: `bertwb pretrain` stopped by a real SIGINT mid-run (exit 130, a
    checkpoint), the same command resuming from it (resumed step > 0) to the end, `bertwb evaluate`,
    `bertwb export --format hf`, and transformers loading the export on the CPU with the logits of bertwb's
    own model of the same checkpoint (max |difference| under LOGIT_TOLERANCE)."""
    project = _project_copy(part)
    total, stop_after = (20, 3) if part.dry_run else (300, 100)
    command = [sys.executable, "-m", "bertwb", "pretrain", "--config", str(project / "bertwb.yaml"),
               "--device", part.device, *_training_sets(part, total)]
    log = part.work / "cli-pretrain.log"
    print(f"$ {shlex.join(command)}  (output in {log.name}, then below)", flush=True)
    started = time.perf_counter()
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=project, stdout=out, stderr=subprocess.STDOUT)
        while process.poll() is None and _logged_steps(log) < stop_after:
            time.sleep(0.05)
        signalled_at = _logged_steps(log)
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        code = process.wait()
    text = log.read_text(encoding="utf-8", errors="replace")
    print(text, flush=True)
    interrupted = re.search(r"interrupted: checkpoint at step ([\d,]+) written", text)
    part.record(interrupt_signalled_after_step=signalled_at, interrupted_exit=code,
                interrupted_seconds=round(time.perf_counter() - started, 1))
    check(code == 130 and interrupted is not None,
          f"SIGINT after step {signalled_at} of {total}: exit {code}, expected 130 and a checkpoint line")
    stopped = int(interrupted[1].replace(",", ""))
    part.record(interrupted_at_step=stopped)

    started = time.perf_counter()
    run(command, cwd=project)
    summary = manifest_summary(project, "pretrain")
    part.record(resumed_from_step=summary.get("resumed_from_step"), steps_done=summary.get("steps_done"),
                resumed_seconds=round(time.perf_counter() - started, 1), tokens_per_s=summary.get("tokens_per_s"),
                device=summary.get("device"), loss=summary.get("loss"), valid_loss=summary.get("valid_loss"))
    check((summary.get("resumed_from_step") or 0) > 0,
          f"the second run did not resume: resumed_from_step {summary.get('resumed_from_step')}")
    check(summary.get("resumed_from_step") == stopped, f"resumed from step {summary.get('resumed_from_step')}, "
          f"the interrupt's checkpoint was step {stopped}")
    check(summary.get("steps_done") == total, f"{summary.get('steps_done')} steps done, expected {total}")
    check(str(summary.get("device", "")).startswith(part.device), f"trained on {summary.get('device')}")
    check(math.isfinite(summary.get("loss") or math.nan), f"loss {summary.get('loss')}")

    evaluated = bertwb(project, "evaluate", "--device", part.device, "--json", capture=True)
    metrics = json.loads(evaluated.stdout)
    part.record(evaluate={k: v for k, v in metrics.items() if isinstance(v, (int, float))})
    export = part.work / part.name / "export"
    bertwb(project, "export", "--format", "hf", str(export))
    differences = _compare_with_transformers(project, export)
    part.record(**differences)
    worst = max(differences["max_abs_diff_mlm_logits"], differences["max_abs_diff_nsp_logits"])
    part.headline = (f"SIGINT at step {stopped}, resumed to {total}; evaluate mlm_acc "
                     f"{metrics.get('mlm_acc', float('nan')):.3f}; export read by transformers: "
                     f"max logit difference {worst:.1e}")
    check(worst <= LOGIT_TOLERANCE, f"transformers' logits differ from bertwb's by {worst:.2e} > {LOGIT_TOLERANCE}")


def _compare_with_transformers(project: Path, export: Path) -> dict[str, Any]:
    """Both models on the CPU in fp32 on real sentence pairs of the corpus: transformers from the export,
    bertwb from the newest checkpoint (the one export wrote); logits compared at real tokens only."""
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    from bertwb.model import modeldir  # noqa: PLC0415

    checkpoints = sorted((project / ".bertwb" / "pretrain-runs").glob("*/checkpoints/step-*"))
    check(bool(checkpoints), "no checkpoint to compare the export with")
    ours, _ = modeldir.load_model(modeldir.open_model_dir(checkpoints[-1]), "cpu")
    theirs = transformers.BertForPreTraining.from_pretrained(export).eval()
    tokenizer = transformers.BertTokenizerFast.from_pretrained(export)
    lines = [line for line in (SAMPLE_CORPUS / "part-001.txt").read_text(encoding="utf-8").splitlines() if line][:16]
    inputs = tokenizer(lines[0::2], lines[1::2], padding=True, truncation=True, max_length=128, return_tensors="pt")
    with torch.no_grad():
        mine = ours.eval()(inputs["input_ids"], inputs["token_type_ids"], inputs["attention_mask"])
        hf = theirs(**inputs)
    real = inputs["attention_mask"].bool()
    mlm = (mine.mlm_logits[real] - hf.prediction_logits[real]).abs().max().item()
    nsp = (mine.nsp_logits - hf.seq_relationship_logits).abs().max().item()
    agree = (mine.mlm_logits[real].argmax(-1) == hf.prediction_logits[real].argmax(-1)).float().mean().item()
    return {"compared_checkpoint": checkpoints[-1].name, "compared_tokens": int(real.sum()),
            "max_abs_diff_mlm_logits": mlm, "max_abs_diff_nsp_logits": nsp, "argmax_agreement": agree,
            "logit_scale": mine.mlm_logits[real].abs().max().item(), "transformers": transformers.__version__}


# --- torchrun --------------------------------------------------------------------------------------------

def torchrun(part: Part) -> None:
    """`torchrun --standalone --nproc-per-node 1 -m bertwb pretrain` as a user starts it. With one process
    (WORLD_SIZE 1) bertwb joins no process group, so that command alone never touches NCCL: the part then
    runs the trainer's DDP road itself under torchrun (`ddp_probe`), NCCL on CUDA and gloo on the CPU."""
    project = _project_copy(part)
    steps = 4 if part.dry_run else 40
    env = {**os.environ, "NCCL_DEBUG": "INFO"}
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1"]
    started = time.perf_counter()
    result = run([*launcher, "-m", "bertwb", "pretrain", "--config", str(project / "bertwb.yaml"), "--device",
                  part.device, *_training_sets(part, steps)], cwd=project, env=env, capture=True)
    summary = manifest_summary(project, "pretrain")
    part.record(pretrain_seconds=round(time.perf_counter() - started, 1), steps_done=summary.get("steps_done"),
                processes=summary.get("processes"), device=summary.get("device"),
                tokens_per_s=summary.get("tokens_per_s"), nccl_in_pretrain="NCCL INFO" in result.stdout)
    check(summary.get("steps_done") == steps,
          f"{summary.get('steps_done')} steps done under torchrun, expected {steps}")
    check(str(summary.get("device", "")).startswith(part.device), f"trained on {summary.get('device')}")

    probe = subprocess.run([*launcher, __file__, "ddp-probe", "--work", str(part.work),
                            *(["--dry-run"] if part.dry_run else [])], cwd=REPO, env=env)
    ddp = _read_part(part.work, "ddp-probe") or {}
    part.record(ddp_probe={"exit": probe.returncode, "status": ddp.get("status"), "reason": ddp.get("reason"),
                           **ddp.get("numbers", {})})
    check(probe.returncode == 0 and ddp.get("status") == "ok",
          f"the DDP probe under torchrun failed (exit {probe.returncode}): {ddp.get('reason', 'no result')}")
    numbers = ddp["numbers"]
    alone = "" if part.numbers["nccl_in_pretrain"] else " (no process group at world size 1)"
    part.headline = (f"torchrun pretrain: {steps} steps on {summary.get('device')}, 1 process{alone}; DDP probe over "
                     f"{numbers['backend']}" + (f" (NCCL {numbers['nccl']})" if numbers.get("nccl") else "")
                     + f": {numbers['steps']} steps, loss {numbers['loss']:.3f}")


def ddp_probe(part: Part) -> None:
    """Run under torchrun: bertwb's Trainer with its process group in use at world size 1 (a `Dist` whose
    ``enabled`` is true), so the step goes through DistributedDataParallel, its NCCL all-reduce and the
    gloo group the hosts agree over, as it does on several GPUs."""
    import importlib  # noqa: PLC0415

    import torch  # noqa: PLC0415

    from bertwb.config import Config  # noqa: PLC0415
    from bertwb.data.batching import Batches  # noqa: PLC0415
    from bertwb.model.bert import BertConfig, BertForPreTraining  # noqa: PLC0415
    from bertwb.tasks.pretraining.objective import PretrainingObjective  # noqa: PLC0415
    from bertwb.train.distributed import Dist  # noqa: PLC0415
    from bertwb.train.trainer import Trainer  # noqa: PLC0415
    from pretrain_gpu import synthetic_pairs  # noqa: PLC0415

    class OneRankGroup(Dist):
        @property
        def enabled(self) -> bool:
            return True

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist = OneRankGroup(rank, world, int(os.environ.get("LOCAL_RANK", "0")), part.device)
    backend = "nccl" if dist.device.type == "cuda" else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(dist.device)
    importlib.import_module("torch._dynamo")  # before the group exists, as Dist.from_environment does
    torch.distributed.init_process_group(backend, rank=rank, world_size=world)
    if backend == "nccl":
        dist.control = torch.distributed.new_group(backend="gloo")
    try:
        cfg = Config().pretrain
        cfg.batch_size, cfg.warmup_steps, cfg.device = 16, 0, part.device
        steps = 5
        pairs = synthetic_pairs(cfg.batch_size * steps)
        model = BertForPreTraining(BertConfig.from_preset("tiny" if part.dry_run else "mini", 30522))
        batches = Batches(pairs, cfg.batch_size, seed=0, pad_multiple=8 if backend == "nccl" else 1)
        trainer = Trainer(cfg, PretrainingObjective(), model, batches, dist=dist, total_steps=steps)
        check(isinstance(trainer.step_model, torch.nn.parallel.DistributedDataParallel),
              "the trainer made no DDP model")
        for step in range(steps):
            trainer.train_step(step)
        totals = trainer.window_totals()
        loss = trainer.objective.rates(totals)["loss"]
        check(math.isfinite(loss), f"loss {loss}")
        version = torch.cuda.nccl.version() if backend == "nccl" else None
        nccl = ".".join(map(str, version)) if isinstance(version, tuple) else version
        part.record(backend=backend, nccl=nccl, steps=steps, loss=loss, world_size=world)
        # The DDP model goes first, so the group dies inside destroy_process_group, which lets go of the GIL.
        # Freed after it, by the reducer's dealloc, the group joins gloo's threads under the GIL, and one that
        # waits for the GIL hangs both (distributed.py, `Dist.close`): CI saw this probe hang past its limit.
        ddp = weakref.ref(trainer.step_model)
        del trainer, model
        gc.collect()
        check(ddp() is None, "the DDP model outlived its trainer: the process group would be freed under the GIL")
    finally:
        dist.close()


# --- the profiler --------------------------------------------------------------------------------------

HOST_OVERHEAD = ("the share of a step's wall time in which the GPU runs no kernel: 1 − (union of the step's "
                 "kernel intervals) / (wall time of the step, synchronised), i.e. host time (Python, launches, "
                 "data) not hidden behind GPU work; measured under the profiler, whose own cost adds to it")
HOST_OVERHEAD_CPU = ("the share of a step's wall time outside any operator: 1 − (sum of all operators' self CPU "
                     "time) / (wall time), i.e. Python and framework time")


def profile(part: Part) -> None:
    """torch.profiler over a few of bertwb's training steps (the steps part's shapes): the top 15 kernels by
    self device time, and the host-overhead share (HOST_OVERHEAD; HOST_OVERHEAD_CPU in the dry run)."""
    import torch  # noqa: PLC0415
    from torch.profiler import ProfilerActivity  # noqa: PLC0415

    from bertwb import fast  # noqa: PLC0415
    from bertwb.config import Config  # noqa: PLC0415
    from bertwb.data.batching import Batches  # noqa: PLC0415
    from bertwb.model.bert import BertConfig, BertForPreTraining  # noqa: PLC0415
    from bertwb.tasks.pretraining.objective import PretrainingObjective  # noqa: PLC0415
    from bertwb.train.trainer import Trainer  # noqa: PLC0415
    from pretrain_gpu import synthetic_pairs  # noqa: PLC0415

    shapes = step_shapes(part.dry_run)
    device, name, _ = _device_and_peak(part)
    cuda = device.type == "cuda"
    warmup, profiled = 3, 3
    cfg = Config().pretrain
    cfg.batch_size, cfg.warmup_steps, cfg.device = shapes["batch"], 0, str(device)
    pairs = synthetic_pairs(shapes["batch"] * (warmup + profiled))
    model = BertForPreTraining(BertConfig.from_preset(shapes["preset"], 30522))
    # as `bertwb pretrain` (CPU only)
    objective = PretrainingObjective(fast=fast.choose(model, device, cfg.cpu_fast_paths))
    batches = Batches(pairs, cfg.batch_size, seed=0, pad_multiple=8 if cuda else 1)
    trainer = Trainer(cfg, objective, model, batches, total_steps=warmup + profiled)
    for step in range(warmup):
        trainer.train_step(step)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    with torch.profiler.profile(activities=activities) as prof:
        sync()
        started = time.perf_counter()
        for step in range(warmup, warmup + profiled):
            trainer.train_step(step)
        sync()
        wall_us = (time.perf_counter() - started) * 1e6
    averages = prof.key_averages()
    device_kind = torch.autograd.DeviceType.CUDA if cuda else torch.autograd.DeviceType.CPU

    def self_time(avg: Any) -> float:
        if cuda:
            return getattr(avg, "self_device_time_total", None) or getattr(avg, "self_cuda_time_total", 0.0)
        return avg.self_cpu_time_total

    kernels = [avg for avg in averages if avg.device_type == device_kind and self_time(avg) > 0] if cuda else \
        [avg for avg in averages if self_time(avg) > 0]
    total = sum(self_time(avg) for avg in kernels)
    top = sorted(kernels, key=self_time, reverse=True)[:15]
    rows = [{"name": avg.key[:90], "calls": avg.count, "self_ms_per_step": round(self_time(avg) / 1000 / profiled, 3),
             "share": round(self_time(avg) / total, 4) if total else None} for avg in top]
    if cuda:
        intervals = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                           if e.device_type == device_kind and e.time_range.end > e.time_range.start)
        busy, end = 0.0, -math.inf
        for start, stop in intervals:  # the union of the kernels' intervals
            if stop > end:
                busy += stop - max(start, end)
                end = stop
        share, definition = 1 - busy / wall_us, HOST_OVERHEAD
    else:
        share, definition = 1 - total / wall_us, HOST_OVERHEAD_CPU
    part.record(device_name=name, shapes=shapes, profiled_steps=profiled, step_ms=round(wall_us / 1000 / profiled, 2),
                busy_ms_per_step=round((total if not cuda else busy) / 1000 / profiled, 2),
                host_overhead_share=round(share, 4), host_overhead_definition=definition, top=rows)
    what = "kernels" if cuda else "operators"
    part.headline = (f"{part.numbers['step_ms']} ms/step profiled; host-overhead share {100 * share:.1f}%; top "
                     f"{what}: {', '.join(r['name'][:40] for r in rows[:3])}")
    lines = [f"| {what[:-1]} | calls | self ms/step | share |", "|---|---|---|---|"]
    lines += [f"| `{r['name']}` | {r['calls']} | {r['self_ms_per_step']} | {100 * (r['share'] or 0):.1f}% |"
              for r in rows]
    part.markdown = (f"{profiled} steps of {shapes['preset']}, batch {shapes['batch']} on {name}; "
                     f"top {len(rows)} {what} by self {'device' if cuda else 'CPU'} time. Host-overhead share "
                     f"**{100 * share:.1f}%**: {definition}.\n\n" + "\n".join(lines))


PARTS: dict[str, Callable[[Part], None]] = {
    "install": install, "cuda-tests": cuda_tests, "steps": train_steps, "compile": compiled_steps, "data": data,
    "cli": cli_run, "torchrun": torchrun, "profile": profile, "ddp-probe": ddp_probe,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=sorted(PARTS))
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    part = Part(args.part, args.work, args.dry_run)
    part.save()
    try:
        PARTS[args.part](part)
        if part.status == "running":
            part.status = "ok"
    except CheckFailed as exc:
        part.status, part.reason = "failed", str(exc)
    except Exception as exc:  # a bug or a crash: the part fails with it, the other parts go on
        traceback.print_exc()
        part.status, part.reason = "failed", f"{type(exc).__name__}: {exc}"
    part.save()
    reason = f" ({part.reason})" if part.reason else ""
    print(f"{part.name}: {part.status}{reason}; {part.headline}", flush=True)
    sys.exit(0 if part.status in ("ok", "skipped") else 1)


if __name__ == "__main__":
    main()
