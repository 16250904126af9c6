"""Where a model runs and in what precision: the one device rule and the one precision rule of every command
that uses a model.

`precision_rule` decides ``auto``: bf16 autocast on CUDA, and on a CPU where its flags name bf16 matrix
instructions (AMX-BF16, AVX512-BF16) and a short matmul check at the model's shapes finds bf16 faster; fp32
elsewhere. The choice is never part of a stage's key (``precision`` is a speed setting, ``in_key=False``): a
run on an AMX machine and one on a plain machine share their keys. docs/commands.md: "Configuration", precision.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import lru_cache

import torch

from bertwb import cpuinfo, ui
from bertwb.errors import BertwbError


def resolve_device(name: str, origin: str = "--device", local_rank: int = 0) -> torch.device:
    """``auto`` is CUDA when a GPU is visible, else CPU; ``cuda`` means this rank's GPU.

    ``origin`` names where the choice came from (``--set pretrain.device``, ``bertwb.yaml line 4:
    finetune.device``, ``--device``) for the error.
    """
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise BertwbError(f"{origin} is {name} but no CUDA GPU is visible; use --device cpu")
        return torch.device(f"cuda:{local_rank}" if name == "cuda" else name)
    if name != "cpu":
        raise BertwbError(f"{origin} {name!r} is not a device; use auto, cpu, cuda or cuda:N")
    return torch.device("cpu")


CPU_FLAGS_ENV = "BERTWB_CPU_FLAGS"  # names the CPU flags instead of /proc/cpuinfo (the test suite: none)
# The CPU flags of bf16 matrix instructions, in the order a reason names them: AMX tiles, then AVX-512 dot products.
BF16_MATRIX_FLAGS = ("amx_bf16", "avx512_bf16")
# bf16 must beat fp32 by this factor in the matmul check: a margin over timing noise, so that a machine where the
# two are close keeps fp32 rather than flipping between runs.
FASTER_BY = 1.2
CHECK_FLOPS = 1 << 28  # FLOPs of one timed pair of matmuls: ~2 ms in fp32 at 150 GFLOP/s
CHECK_ROUNDS = 4  # timed rounds of each precision, interleaved; the best of each counts
CHECK_SECONDS = 0.25  # no round starts after this long: a busy machine measures fewer rounds, not for longer


@dataclass(frozen=True)
class MatmulCheck:
    """How much faster bf16 autocast ran than fp32 on the model's feed-forward shapes (`bf16_matmul_check`)."""

    speedup: float  # fp32 time / bf16 time
    hidden: int
    intermediate: int

    def __str__(self) -> str:
        return f"bf16 matmul {self.speedup:.1f}× fp32 at H{self.hidden}/I{self.intermediate}"


@dataclass(frozen=True)
class Precision:
    """The precision a command runs its model in: bf16 autocast or fp32, what was asked and why.

    Made by `choose_precision`, once per command; everything that runs the model takes its `autocast`.
    """

    setting: str  # what the config or option asked: auto | fp32 | bf16
    bf16: bool
    why: str
    device_type: str = "cpu"

    @property
    def name(self) -> str:
        return "bf16" if self.bf16 else "fp32"

    def autocast(self) -> AbstractContextManager:
        """bf16 autocast on the device, or nothing (fp32)."""
        return torch.autocast(self.device_type, dtype=torch.bfloat16) if self.bf16 else nullcontext()

    def line(self) -> str:
        """The -v line: ``precision auto → bf16: CPU has amx_bf16; bf16 matmul 2.4× fp32 at H384/I1536``."""
        if self.setting == "auto":
            return f"precision auto → {self.name}: {self.why}"
        return f"precision {self.name}: {self.why}"


def precision_rule(setting: str, device_type: str, flags: Collection[str],
                   check: Callable[[], MatmulCheck]) -> Precision:
    """The one rule. An explicit ``fp32``/``bf16`` is obeyed without measuring. ``auto``: bf16 on CUDA; on a CPU,
    bf16 where its ``flags`` name bf16 matrix instructions (`BF16_MATRIX_FLAGS`) *and* ``check()`` (called only
    then) finds bf16 matmuls at least `FASTER_BY` faster than fp32 at the model's shapes; fp32 elsewhere.

    The flags and the check are inputs, so a test can ask for any machine; `choose_precision` passes this one's.
    """
    native = [flag for flag in BF16_MATRIX_FLAGS if flag in flags]
    if setting == "fp32":
        return Precision(setting, False, "set", device_type)
    if setting == "bf16":
        if device_type == "cpu" and not native:
            return Precision(setting, True, "set; this CPU has no bf16 matrix instructions, so bf16 is emulated "
                             "(slower than fp32)", device_type)
        return Precision(setting, True, "set", device_type)
    if setting != "auto":
        raise BertwbError(f"precision {setting!r} is not a precision; use auto, fp32 or bf16")
    if device_type == "cuda":
        return Precision(setting, True, "CUDA GPU", device_type)
    if not native:
        return Precision(setting, False, "no bf16 matrix instructions in CPU flags", device_type)
    measured = check()
    faster = measured.speedup >= FASTER_BY
    because = f"CPU has {', '.join(native)}; {measured}" + ("" if faster else f" (under {FASTER_BY}×)")
    return Precision(setting, faster, because, device_type)


def choose_precision(setting: str, device: torch.device, hidden: int, intermediate: int,
                     announce: bool = True) -> Precision:
    """`precision_rule` on this machine: its CPU flags and, where they allow bf16, the matmul check at
    ``hidden``/``intermediate`` (measured once per process and shapes). With ``announce``, -v prints the line."""
    choice = precision_rule(setting, device.type, cpu_flags() if device.type == "cpu" else (),
                            lambda: bf16_matmul_check(hidden, intermediate, torch.get_num_threads()))
    if announce:
        ui.detail(choice.line())
    return choice


def model_shapes(model: torch.nn.Module) -> tuple[int, int]:
    """The hidden and intermediate (feed-forward) widths of a bertwb model: the shapes the check times."""
    config = model.config
    return config.hidden_size, config.intermediate_size


def cpu_flags() -> frozenset[str]:
    """The CPU flags the rule reads: ``$BERTWB_CPU_FLAGS`` (space-separated) where set, so a run can rule bf16 out
    (``BERTWB_CPU_FLAGS=``) or try the rule for another CPU, else this CPU's own (`bertwb.cpuinfo.field`)."""
    named = os.environ.get(CPU_FLAGS_ENV)
    return frozenset((named if named is not None else cpuinfo.field("flags")).split())


@lru_cache(maxsize=None)
def bf16_matmul_check(hidden: int, intermediate: int, threads: int) -> MatmulCheck:
    """Time the feed-forward pair of matmuls (rows × H → I → H) in fp32 and under bf16 autocast, interleaved,
    the best of `CHECK_ROUNDS` each after a warm-up (fewer past `CHECK_SECONDS`); about 0.05 s on a quiet
    machine. ``threads`` (torch's count)
    is only part of the cache key: a process that changes it measures again. Its inputs come from a private
    generator, so the global random state (a model's init, dropout) is untouched."""
    rows = max(256, CHECK_FLOPS // (4 * hidden * intermediate))
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, hidden, generator=generator)
    up = torch.randn(intermediate, hidden, generator=generator) / hidden ** 0.5
    down = torch.randn(hidden, intermediate, generator=generator) / intermediate ** 0.5

    def timed(bf16: bool) -> float:
        started = time.perf_counter()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            torch.nn.functional.linear(torch.nn.functional.linear(x, up), down)
        return time.perf_counter() - started

    started = time.perf_counter()
    timed(False), timed(True)  # warm-up: first calls pick kernels and allocate
    best = {False: float("inf"), True: float("inf")}
    for round_ in range(CHECK_ROUNDS):
        if round_ and time.perf_counter() - started > CHECK_SECONDS:
            break
        for bf16 in (False, True):
            best[bf16] = min(best[bf16], timed(bf16))
    return MatmulCheck(round(best[False] / best[True], 2), hidden, intermediate)
