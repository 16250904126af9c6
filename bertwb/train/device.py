"""Where a model runs and in what precision: the one device rule of every command that uses a model."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch

from bertwb.errors import BertwbError


def resolve_device(name: str, setting: str = "--device", local_rank: int = 0) -> torch.device:
    """``auto`` is CUDA when a GPU is visible, else CPU; ``cuda`` means this rank's GPU.

    ``setting`` names where the choice came from (``pretrain.device``, ``--device``) for the error.
    """
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise BertwbError(f"{setting} is {name} but no CUDA GPU is visible; use --device cpu")
        return torch.device(f"cuda:{local_rank}" if name == "cuda" else name)
    if name != "cpu":
        raise BertwbError(f"{setting} {name!r} is not a device; use auto, cpu, cuda or cuda:N")
    return torch.device("cpu")


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` multiplies bf16 matrices in hardware: a CUDA GPU that supports bf16, or a CPU whose
    flags (``/proc/cpuinfo``) name avx512_bf16 or amx_bf16. Elsewhere bf16 is emulated, slower than fp32."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            flags = next((line.split(":", 1)[1].split() for line in cpuinfo if line.startswith("flags")), [])
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def uses_bf16(precision: str, device: torch.device) -> bool:
    """Whether ``precision`` means bf16 autocast on ``device``: ``auto`` is bf16 on CUDA and fp32 elsewhere."""
    return precision == "bf16" or precision == "auto" and device.type == "cuda"


def autocast(precision: str, device: torch.device) -> AbstractContextManager:
    """The autocast context of ``precision`` on ``device`` (`uses_bf16`).

    bf16 autocast runs on CPU too, so the mixed-precision path a GPU run takes is exercised without one.
    """
    if uses_bf16(precision, device):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext()
