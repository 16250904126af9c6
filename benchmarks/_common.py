"""What every benchmark shares: the CPU's name, peak-RSS measurement of a command, the report file."""

from __future__ import annotations

import platform
import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]


def cpu_model() -> str:
    """The CPU's model name (platform.processor() is often empty on Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_with_peak_rss(command: list[str], cwd: Path | None = None, every_s: float = 0.02) -> tuple[float, float]:
    """Run ``command``; return (seconds, peak RSS in MB of it and its children). Exits if it fails."""
    started = time.perf_counter()
    process = psutil.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while process.poll() is None:
        try:
            tree = [process, *process.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree))
        except psutil.Error:  # a child exited between listing and reading it
            pass
        time.sleep(every_s)
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{process.stderr.read().decode()}")
    return seconds, peak / 2**20


def append_report(text: str) -> None:
    """Append one benchmark's section to BENCHMARKS.md (results are kept, never rewritten)."""
    with open(REPO / "BENCHMARKS.md", "a", encoding="utf-8") as handle:
        handle.write(text if text.startswith("\n") else "\n" + text)
