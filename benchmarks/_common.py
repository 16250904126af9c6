"""What every benchmark shares: the CPU's name, a GPU's bf16 peak, peak-RSS measurement of a command (which
dies with the benchmark), the report file."""

from __future__ import annotations

import ctypes
import os
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]


def cpu_model() -> str:
    """The CPU's model name (platform.processor() is often empty on Linux)."""
    from bertwb.cpuinfo import field  # noqa: PLC0415 - bertwb's one /proc/cpuinfo reader

    return field("model name") or platform.processor() or platform.machine()


# The CPU flags of matrix and vector units a benchmark's reader needs to place its numbers (bf16's above all).
MATRIX_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


def cpu_matrix_flags() -> list[str]:
    """Which of `MATRIX_FLAGS` this CPU's ``/proc/cpuinfo`` names, in that order (none off Linux)."""
    from bertwb.cpuinfo import field  # noqa: PLC0415

    flags = field("flags").split()
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


PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies


def die_with_parent() -> None:
    """In a child between fork and exec (``preexec_fn``): have Linux send it SIGTERM when the benchmark that
    started it dies, so that a stopped benchmark does not leave a training run loading the next one. bertwb
    takes SIGTERM as a stop: it saves a checkpoint and exits. Nothing off Linux."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def run_with_peak_rss(command: list[str], cwd: Path | None = None, every_s: float = 0.02,
                      env: dict[str, str] | None = None) -> tuple[float, float]:
    """Run ``command``; return (seconds, peak RSS in MB of it and its children). Exits if it fails."""
    started = time.perf_counter()
    process = psutil.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           preexec_fn=die_with_parent)
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


LOG = REPO / "benchmarks" / "log"  # one Markdown file of sections per month: benchmarks/log/2026-11.md
RESULT_CHARS = 90  # the longest headline a row of the "Current results" table shows whole


def append_report(text: str, result: str | None = None) -> None:
    """Append one benchmark's section to its month's log (sections are kept, never rewritten), and with
    ``result`` (its headline in one line) make it the section's row of BENCHMARKS.md's "Current results"."""
    log = log_file(text)
    document = log.read_text(encoding="utf-8") if log.exists() else LOG_HEAD.format(month=log.stem)
    if result is not None and len(result) > RESULT_CHARS:  # the row shows its start; the log keeps it whole
        text = text.rstrip("\n") + f"\n\nHeadline: {result}\n"
    document = document.rstrip("\n") + "\n" + (text if text.startswith("\n") else "\n" + text)
    LOG.mkdir(exist_ok=True)
    log.write_text(document, encoding="utf-8")
    if result is not None:
        table = REPO / "BENCHMARKS.md"
        link = f"{log.relative_to(REPO).as_posix()}#{anchor_of(document, _heading(text))}"
        table.write_text(with_current_result(table.read_text(encoding="utf-8"), text, result, link),
                         encoding="utf-8")


LOG_HEAD = """# Benchmark log, {month}

Every benchmark run of the month, in the order they ran, as each benchmark appended it (through
`benchmarks/_common.py`'s `append_report`) or its author wrote it: the script and its options, the machine,
the numbers and how to read them. Sections are kept as written, never rewritten; a later run is a new
section. The latest result of each benchmark is its row of [BENCHMARKS.md](../../BENCHMARKS.md).
"""


def _heading(section: str) -> str:
    return next(line[3:] for line in section.splitlines() if line.startswith("## "))


def log_file(section: str) -> Path:
    """The month's log a section goes to: by the date its heading ends with (``Title — 2026-11-27 07:41 UTC``),
    else by today's."""
    dated = re.search(r" — (\d{4}-\d{2})-\d{2}", _heading(section))
    return LOG / f"{dated.group(1) if dated else time.strftime('%Y-%m', time.gmtime())}.md"


def short_result(result: str) -> str:
    """A headline fit for a table cell: whole when short, else its first clause (up to "; "), else its
    first `RESULT_CHARS` characters at a word's end, with any bold it opened closed."""
    if len(result) <= RESULT_CHARS:
        return result
    cut = result.split("; ")[0]
    if len(cut) > RESULT_CHARS:
        cut = cut[:RESULT_CHARS].rsplit(" ", 1)[0].rstrip(",;:") + " …"
    return cut + ("**" if cut.count("**") % 2 else "")


def with_current_result(table: str, section: str, result: str, link: str) -> str:
    """BENCHMARKS.md's text ``table`` with the row of ``section``'s benchmark (the heading's title, before its
    date) on its kind of machine (`machine_kind`) set to ``result``, dated, its machine named and linked to
    ``link``. A row's step is kept; a run on another kind gets a row of its own below the title's others (speed
    on an AMD EPYC and on an Intel Xeon do not compare), and a benchmark without a row one at the table's end."""
    title, _, date = _heading(section).partition(" — ")
    described = next((line.partition(": ")[2] for line in section.splitlines()
                      if line.startswith(("Machine: ", "GPU: "))), "?")
    software = ("torch", "Python", "duckdb", "tokenizers", "load average")
    parts = [part for part in described.rstrip(".").split(", ") if not part.startswith(software)][:2]
    parts[0] = re.sub(r"^Linux [^(]*\((.+)\)$", r"\1", parts[0]).replace("Linux ", "")  # the CPU, not the kernel
    parts[0] = re.sub(r"\((R|TM)\)| Processor$", "", parts[0])  # "Intel(R) Xeon(R) Processor" -> "Intel Xeon"
    machine = ", ".join(parts)
    lines = table.split("\n")
    first = next(i for i in range(lines.index("## Current results"), len(lines)) if lines[i].startswith("|"))
    end = next((i for i in range(first, len(lines)) if not lines[i].startswith("|")), len(lines))
    titled = [i for i in range(first + 2, end) if lines[i].split(" | ")[1:2] == [title]]
    kind = machine_kind(machine)
    mine = [i for i in titled if kind is None or machine_kind(lines[i].split(" | ")[3]) in (kind, None)]
    step = lines[titled[0]].split(" | ")[0].removeprefix("| ") if titled else "—"
    row = (f"| {step} | {title} | {short_result(result)} | {machine} | {date.removesuffix(' UTC')} | "
           f"[log]({link}) |")
    if mine:
        lines[mine[0]] = row
    else:
        lines.insert(titled[-1] + 1 if titled else end, row)
    return "\n".join(lines)


def machine_kind(machine: str) -> str | None:
    """The kind of machine a row's cell names, by maker and line (``AMD EPYC``, ``Intel Xeon``, ``NVIDIA H200``),
    or None where it names none (``x86_64``, ``—``): such a row is any kind's to replace."""
    named = re.match(r"(AMD \w+|Intel \w+|NVIDIA \w+)", machine)
    return named.group(1) if named else None


def slug(heading: str) -> str:
    """A heading's anchor as a Markdown renderer makes it: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def anchor_of(document: str, heading: str) -> str:
    """The link target a Markdown renderer gives the last ``## heading``: its `slug`, and -1, -2, ... for the
    second, third, ... heading with the same text."""
    headings = re.findall(r"^#{1,6} (.+)$", document, re.M)
    same = sum(slug(h) == slug(heading) for h in headings) - 1
    return slug(heading) + (f"-{same}" if same > 0 else "")


def matmul_peak(n: int = 2048, repeats: int = 5, dtype: str = "float32") -> float:
    """This machine's matmul rate in FLOP/s: the best of ``repeats`` n³ products on all of torch's threads, of
    fp32 matrices (``dtype`` float32) or bf16 ones (bfloat16: what bf16 autocast hands the CPU's matrix units).
    fp32 takes the faster of ``torch.mm`` (MKL) and oneDNN's product (what bertwb's fp32 Linear layers run,
    `bertwb.fast.linear`); bf16's ``torch.mm`` is already oneDNN's. What a step's matmuls could reach at best,
    the yardstick of "% of peak" and of compute floors."""
    import torch  # noqa: PLC0415 - only the benchmarks that train import torch

    from bertwb.fast.linear import onednn_available, onednn_product  # noqa: PLC0415

    a, b = (torch.randn(n, n).to(getattr(torch, dtype)) for _ in range(2))
    products = [lambda: torch.mm(a, b)]
    if dtype == "float32" and onednn_available():
        products.append(lambda: onednn_product(a, b.t(), None))
    best = float("inf")
    for product in products:
        product()
        for _ in range(repeats):
            started = time.perf_counter()
            product()
            best = min(best, time.perf_counter() - started)
    return 2 * n ** 3 / best


def run_bertwb(project: Path, *args: str) -> str:
    """``bertwb ARGS`` run in ``project`` with this checkout's code; its stdout. Exits with its output if it fails."""
    result = subprocess.run([sys.executable, "-m", "bertwb", *args], cwd=project, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, preexec_fn=die_with_parent)
    if result.returncode != 0:
        sys.exit(f"bertwb {' '.join(args)} in {project} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout
