"""What every benchmark shares: the CPU's name, a GPU's bf16 peak, peak-RSS measurement of a command, the
report file."""

from __future__ import annotations

import platform
import re
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


# The CPU flags of matrix and vector units a benchmark's reader needs to place its numbers (bf16's above all).
MATRIX_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


def cpu_matrix_flags() -> list[str]:
    """Which of `MATRIX_FLAGS` this CPU's ``/proc/cpuinfo`` names, in that order (none off Linux)."""
    try:
        flags = next((line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("flags")), [])
    except OSError:
        flags = []
    return [flag for flag in MATRIX_FLAGS if flag in flags]


# Dense (no sparsity) bf16 tensor-core peaks in TFLOP/s, by the name torch.cuda.get_device_name gives, the
# most specific pattern first. None: a card known by name whose peak is not written here, so no MFU.
BF16_PEAK_TFLOPS: tuple[tuple[str, float | None], ...] = (
    (r"H100.*PCIe", 756.0),
    (r"H[12]00 NVL", None),
    (r"H100", 989.0),  # SXM: "NVIDIA H100 80GB HBM3"
    (r"H200", 989.0),
    (r"A100", 312.0),
    (r"\bL4\b", 121.0),
    (r"\bA10\b", 125.0),  # not the A10G, whose peak differs
)


def bf16_peak_tflops(device_name: str) -> float | None:
    """The dense bf16 peak of the GPU named ``device_name`` in TFLOP/s, or None when the table lacks it."""
    return next((peak for pattern, peak in BF16_PEAK_TFLOPS if re.search(pattern, device_name)), None)


def run_with_peak_rss(command: list[str], cwd: Path | None = None, every_s: float = 0.02,
                      env: dict[str, str] | None = None) -> tuple[float, float]:
    """Run ``command``; return (seconds, peak RSS in MB of it and its children). Exits if it fails."""
    started = time.perf_counter()
    process = psutil.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
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


def append_report(text: str, result: str | None = None) -> None:
    """Append one benchmark's section to BENCHMARKS.md (results are kept, never rewritten), and with
    ``result`` (its headline in one line) make it the section's row of the "Current results" table."""
    path = REPO / "BENCHMARKS.md"
    document = path.read_text(encoding="utf-8") + (text if text.startswith("\n") else "\n" + text)
    if result is not None:
        document = with_current_result(document, text, result)
    path.write_text(document, encoding="utf-8")


def with_current_result(document: str, section: str, result: str) -> str:
    """``document`` with the row of ``section``'s benchmark (the heading's title, before its date) set to
    ``result``, dated and linked to the section; a benchmark without a row gets one at the table's end."""
    heading = next(line[3:] for line in section.splitlines() if line.startswith("## "))
    title, _, date = heading.partition(" — ")
    described = next((line.partition(": ")[2] for line in section.splitlines()
                      if line.startswith(("Machine: ", "GPU: "))), "?")
    software = ("torch", "Python", "duckdb", "tokenizers", "load average")
    parts = [part for part in described.rstrip(".").split(", ") if not part.startswith(software)][:2]
    parts[0] = re.sub(r"^Linux [^(]*\((.+)\)$", r"\1", parts[0]).replace("Linux ", "")  # the CPU, not the kernel
    machine = ", ".join(parts)
    row = f"| {title} | {date.removesuffix(' UTC')} | {machine} | {result} | [log](#{anchor_of(document, heading)}) |"
    lines = document.split("\n")
    first = next(i for i in range(lines.index("## Current results"), len(lines)) if lines[i].startswith("|"))
    end = next((i for i in range(first, len(lines)) if not lines[i].startswith("|")), len(lines))
    mine = [i for i in range(first, end) if lines[i].startswith(f"| {title} |")]
    if mine:
        lines[mine[0]] = row
    else:
        lines.insert(end, row)
    return "\n".join(lines)


def anchor_of(document: str, heading: str) -> str:
    """The link target a Markdown renderer gives the last ``## heading``: lower case, punctuation dropped,
    spaces as hyphens, and -1, -2, ... for the second, third, ... heading with the same text."""
    def slug(text: str) -> str:
        return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")

    headings = re.findall(r"^#{1,6} (.+)$", document, re.M)
    same = sum(slug(h) == slug(heading) for h in headings) - 1
    return slug(heading) + (f"-{same}" if same > 0 else "")


def matmul_peak(n: int = 2048, repeats: int = 5, dtype: str = "float32") -> float:
    """This machine's matmul rate in FLOP/s: the best of ``repeats`` n³ ``torch.mm`` on all of torch's threads,
    of fp32 matrices (``dtype`` float32) or bf16 ones (bfloat16: what bf16 autocast hands the CPU's matrix units).
    What a step's matmuls could reach at best, the yardstick of "% of peak" and of compute floors."""
    import torch  # noqa: PLC0415 - only the benchmarks that train import torch

    a, b = (torch.randn(n, n).to(getattr(torch, dtype)) for _ in range(2))
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - started)
    return 2 * n ** 3 / best
