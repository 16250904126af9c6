"""Every GPU question bertwb has, in one command that fits one short GPU lease (GPU.md; docs/scaling.md,
"The GPU check"): ``python benchmarks/gpu_check.py OUTDIR [--dry-run] [--budget-s 480] [--parts a,b]``.

Each part (benchmarks/_gpu_parts.py) runs as its own process under its own time limit, so a failure or a
hang leaves the others' results; OUTDIR gets summary.md, summary.json and logs.txt (every part's log), all
three rewritten after each part. ``--dry-run``: the same parts on the CPU with tiny shapes, as CI runs it.
``--fetch-wheels DIR``: download the locked wheels the device lacks, for the call to carry.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _gpu_parts import REPO, lock_entries

PARTS_SCRIPT = Path(__file__).resolve().parent / "_gpu_parts.py"
LOG_TAIL_LINES = 40
HUNG_TAIL_LINES = 120  # a timed-out part's tail: the stacks of every thread of every Python process it had
STACKS_WAIT_S = 0.5  # after each SIGABRT that makes one of its processes print its stacks, before the next
LOG_CAP_BYTES = 2_000_000  # of each part's log in logs.txt: the device returns files of at most 16 MiB


@dataclass(frozen=True)
class Plan:
    """A part's place in the run: its time limits on a GPU and in the dry run, the least time worth starting
    it with, the part it needs, and whether it runs only where time allows (no time is kept for it)."""

    name: str
    title: str
    limit_s: float
    dry_limit_s: float
    floor_s: float
    needs: str | None = None
    optional: bool = False


# The dry run's limits catch hangs, not slowness: it runs on 2 CPUs that a test suite shares, so they are 6-8 times
# what a part takes there (the torchrun part: 22-28 s). The dry-run test allows the worst case past the suite's 300 s.
PLANS = (
    Plan("install", "Install", 90, 60, 20),
    Plan("cuda-tests", "tests/test_cuda.py", 120, 90, 30),
    Plan("steps", "Training steps: bertwb against transformers", 120, 90, 30),
    Plan("data", "Sample corpus → pairs", 60, 60, 15),
    Plan("cli", "CLI run: interrupt, resume, evaluate, export, transformers load", 150, 180, 40, needs="data"),
    Plan("torchrun", "torchrun --nproc-per-node 1", 90, 180, 30, needs="data"),
    Plan("profile", "Profile: top kernels and host overhead", 60, 60, 20),
    Plan("compile", "Training steps with torch.compile", 200, 180, 60, optional=True),
)
# Packages of the runtime lock that the device image lacks and the parts import (KINDS.md's list, 2026-11;
# it lacks blingfire, pysbd and seqeval too, which no part imports). install reports what is really missing.
DEVICE_LACKS = ("duckdb", "zstandard")
DEVICE_PYTHON = "3.12"
MANYLINUX = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


@dataclass
class Running:
    """A part's process, started in a process group of its own so that its limit can end all of it. Every
    Python process in it has faulthandler on (PYTHONFAULTHANDLER), so a hang's SIGABRT prints where each
    thread of each process stood before it ends, torchrun's workers and the bertwb commands included."""

    plan: Plan
    process: subprocess.Popen
    log: Path
    limit: float
    started: float


def start_part(plan: Plan, work: Path, dry_run: bool, limit: float) -> Running:
    log = work / f"{plan.name}.log"
    command = [sys.executable, str(PARTS_SCRIPT), plan.name, "--work", str(work), *(["--dry-run"] if dry_run else [])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True, preexec_fn=_no_core_files)
    return Running(plan, process, log, limit, time.perf_counter())


def _no_core_files() -> None:
    """In the part's process before it starts: the SIGABRT of a hang writes no core file."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def group_members(group: int) -> list[int]:
    """The processes of process group ``group``, oldest first (from /proc's stat files)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command's name, which may hold spaces
        except (OSError, IndexError):  # ended while read
            continue
        if int(fields[2]) == group:  # state, parent, process group
            members.append(int(stat.parent.name))
    return sorted(members)


def finish_part(part: Running, work: Path) -> dict[str, Any] | None:
    """The part's row once it has ended, or None while it runs; past its limit its whole group gets SIGABRT
    (each Python process prints its threads' stacks), process by process, and then SIGKILL."""
    seconds = time.perf_counter() - part.started
    code = part.process.poll()
    if code is None and seconds <= part.limit:
        return None
    if code is None:
        for pid in group_members(part.process.pid):  # one at a time, so that their stacks do not interleave
            try:
                os.kill(pid, signal.SIGABRT)
            except ProcessLookupError:
                continue
            time.sleep(STACKS_WAIT_S)
        try:
            os.killpg(part.process.pid, signal.SIGKILL)  # torchrun's workers and any bertwb command with it
        except ProcessLookupError:  # all of it ended at the SIGABRTs
            pass
        part.process.wait()
    plan = part.plan
    path = work / f"{plan.name}.json"
    result = json.loads(path.read_text()) if path.is_file() else {}
    if code is None:
        status, reason = "timed out", f"killed at its limit of {part.limit:.0f} s"
    elif not result:
        status, reason = "failed", f"exited {code} without a result"
    elif code != 0 or result.get("status") not in ("ok", "skipped"):
        status, reason = "failed", result.get("reason") or f"exited {code}"
    else:
        status, reason = result["status"], result.get("reason", "")
    row = {"name": plan.name, "title": plan.title, "status": status, "reason": reason, "seconds": round(seconds, 1),
           "limit_s": round(part.limit), "headline": result.get("headline", ""), "numbers": result.get("numbers", {}),
           "markdown": result.get("markdown", ""), "log_tail": ""}
    if status in ("failed", "timed out"):
        lines = part.log.read_text(encoding="utf-8", errors="replace").splitlines()
        row["log_tail"] = "\n".join(lines[-(HUNG_TAIL_LINES if code is None else LOG_TAIL_LINES):])
    return row


def skipped(plan: Plan, reason: str) -> dict[str, Any]:
    return {"name": plan.name, "title": plan.title, "status": "skipped", "reason": reason, "seconds": 0.0,
            "limit_s": 0, "headline": "", "numbers": {}, "markdown": "", "log_tail": ""}


def machine(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What ran it: the card and torch as the parts saw them, Python, the commit when there is a git checkout,
    "-dirty" after it when the tracked files differ from it (a device's copy of a checkout can carry a newer
    working tree over the HEAD it was first sent with)."""
    numbers = {row["name"]: row["numbers"] for row in rows}
    install, steps = numbers.get("install", {}), numbers.get("steps", {})
    try:
        commit = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=7"], cwd=REPO,
                                capture_output=True, text=True, timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"device_name": install.get("device_name") or steps.get("device_name"), "torch": install.get("torch"),
            "cuda": install.get("cuda"), "python": platform.python_version(), "commit": commit,
            "cpu_count": os.cpu_count()}


def cell(text: str) -> str:
    """``text`` in a markdown table's cell: its own pipes escaped."""
    return text.replace("|", "\\|")


def write_summary(out: Path, work: Path, rows: list[dict[str, Any]], args: argparse.Namespace, started: float,
                  started_at: str) -> None:
    """summary.json, summary.md and logs.txt in ``out``, as things stand."""
    info = machine(rows)
    data = {"mode": "dry run" if args.dry_run else "gpu", "started": started_at, "budget_s": args.budget_s,
            "seconds": round(time.perf_counter() - started, 1), "machine": info, "parts": rows}
    (out / "summary.json").write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    mode = ("dry run (CPU, tiny shapes: proves that every part runs; its numbers measure nothing)"
            if args.dry_run else "GPU")
    cuda = f" (CUDA {info['cuda']})" if info["cuda"] else ""
    lines = ["# bertwb GPU check", "",
             f"Mode: {mode}. Device: {info['device_name'] or 'CPU'}; torch {info['torch']}{cuda}; "
             f"Python {info['python']}; {info['cpu_count']} CPUs; commit {info['commit'] or 'unknown (no git)'}.",
             f"Started {started_at}; took {data['seconds']:.0f} s of a {args.budget_s:.0f} s budget.", "",
             "| part | status | seconds | limit | result |", "|---|---|---|---|---|"]
    for row in rows:
        result = row["headline"] + (f" — {row['reason']}" if row["reason"] else "")
        lines.append(f"| {row['name']} | {row['status']} | {row['seconds']:.1f} | {row['limit_s']} | "
                     f"{cell(result)} |")
    for row in rows:
        if row["markdown"]:
            lines += ["", f"## {row['title']}", "", row["markdown"]]
    for row in rows:
        if row["log_tail"]:
            lines += ["", f"## {row['name']}: {row['status']} — log tail", "", "```", row["log_tail"], "```"]
    (out / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with (out / "logs.txt").open("w", encoding="utf-8") as logs:
        for row in rows:
            log = work / f"{row['name']}.log"
            text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else "(not run)\n"
            if len(text) > LOG_CAP_BYTES:
                text = f"(first {len(text) - LOG_CAP_BYTES:,} characters left out)\n" + text[-LOG_CAP_BYTES:]
            logs.write(f"===== {row['name']}: {row['status']}, {row['seconds']:.1f} s =====\n{text}\n")


def check(args: argparse.Namespace) -> int:
    """Run the chosen parts in order within the budget (``--jobs`` at a time); exit 0 when none failed or
    timed out. A part starts with its own limit, cut so that each part after it still gets its floor."""
    started, started_at = time.perf_counter(), time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    pending = [plan for plan in PLANS if not args.parts or plan.name in args.parts]
    order = [plan.name for plan in pending]
    out = args.outdir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work).resolve() if args.work else Path(tempfile.mkdtemp(prefix="bertwb-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"gpu_check: {'dry run on the CPU' if args.dry_run else 'GPU'}; budget {args.budget_s:.0f} s; "
          f"parts {', '.join(order)}; results in {out}, scratch in {work}", flush=True)
    done: dict[str, dict[str, Any]] = {}
    running: list[Running] = []

    def finished(row: dict[str, Any]) -> None:
        done[row["name"]] = row
        print(f"{row['name']}: {row['status']} in {row['seconds']:.1f} s — "
              f"{row['headline']}{' — ' + row['reason'] if row['reason'] else ''}", flush=True)
        write_summary(out, work, [done[name] for name in order if name in done], args, started, started_at)

    while pending or running:
        for plan in list(pending):
            if len(running) >= args.jobs:
                break
            if plan.needs in order and plan.needs not in done:
                continue  # its input is still being made
            pending.remove(plan)
            left = args.budget_s - (time.perf_counter() - started)
            kept = sum(later.floor_s for later in pending if not later.optional)
            limit = min(plan.dry_limit_s if args.dry_run else plan.limit_s, left - kept)
            needed = done.get(plan.needs) if plan.needs else None
            if plan.needs and (needed is None or needed["status"] != "ok"):
                finished(skipped(plan, f"needs the {plan.needs} part, which "
                                 + (f"is {needed['status']}" if needed else "was not chosen")))
            elif limit < plan.floor_s:
                finished(skipped(plan, f"budget: {left:.0f} s left, {kept:.0f} s of it kept for the parts after it"))
            else:
                running.append(start_part(plan, work, args.dry_run, limit))
        for part in list(running):
            row = finish_part(part, work)
            if row is not None:
                running.remove(part)
                finished(row)
        time.sleep(0.1)
    print("\n" + (out / "summary.md").read_text(encoding="utf-8"), flush=True)
    if not args.keep_work and not args.work:
        shutil.rmtree(work, ignore_errors=True)  # checkpoints of bert-base: gigabytes
    return 1 if any(row["status"] in ("failed", "timed out") for row in done.values()) else 0


def fetch_wheels(folder: Path, packages: list[str]) -> int:
    """The locked versions of ``packages`` as wheels for the device's Python on x86-64 Linux, hashes checked."""
    entries = lock_entries(REPO / "requirements" / "runtime.txt")
    unknown = [name for name in packages if name not in entries]
    if unknown:
        print(f"not in requirements/runtime.txt: {', '.join(unknown)}", file=sys.stderr)
        return 2
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as requirements:
        requirements.write("\n".join(entries[name][1] for name in packages) + "\n")
    platforms = [arg for tag in MANYLINUX for arg in ("--platform", tag)]
    command = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps", "--require-hashes",
               "--only-binary=:all:", "--implementation", "cp", "--python-version", DEVICE_PYTHON, *platforms,
               "--dest", str(folder), "-r", requirements.name]
    code = subprocess.run(command).returncode
    os.unlink(requirements.name)
    if code == 0:
        print(f"{folder}: {', '.join(sorted(p.name for p in folder.glob('*.whl')))}")
    return code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path, nargs="?", help="Where summary.md, summary.json and logs.txt go.")
    parser.add_argument("--dry-run", action="store_true", help="On the CPU with tiny shapes (CI).")
    parser.add_argument("--budget-s", type=float, default=480.0, help="Seconds for all parts together (default 480).")
    parser.add_argument("--parts", type=lambda text: text.split(","), default=None,
                        help=f"Only these parts, comma-separated: {','.join(p.name for p in PLANS)}.")
    parser.add_argument("--jobs", type=int, default=1, help="Parts at a time (dry run only: on a GPU, parts "
                        "side by side would share the card and spoil each other's timings).")
    parser.add_argument("--work", default=None, help="Scratch folder (default: a temporary one, removed at the end).")
    parser.add_argument("--keep-work", action="store_true", help="Keep the temporary scratch folder.")
    parser.add_argument("--fetch-wheels", type=Path, metavar="DIR", default=None,
                        help=f"Download the locked wheels of {', '.join(DEVICE_LACKS)} for Python {DEVICE_PYTHON} "
                        "into DIR (.whl for the device call to carry) and exit.")
    args = parser.parse_args()
    if args.fetch_wheels is not None:
        sys.exit(fetch_wheels(args.fetch_wheels, list(DEVICE_LACKS)))
    if args.outdir is None:
        parser.error("OUTDIR is required")
    if args.jobs < 1 or args.jobs > 1 and not args.dry_run:
        parser.error("--jobs above 1 is for --dry-run only: parts side by side on a GPU spoil its timings")
    unknown = set(args.parts or ()) - {plan.name for plan in PLANS}
    if unknown:
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    sys.exit(check(args))


if __name__ == "__main__":
    main()
