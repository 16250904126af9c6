"""This CPU's facts as /proc/cpuinfo gives them, for the rules that choose by CPU.

`field` reads one (cached: the file does not change while a process runs); `cpu_vendor` is the maker, which
`bertwb.fast.linear.onednn_preferred` decides by, with ``$BERTWB_CPU_VENDOR`` in its place where set (the test
suite sets it). The precision rule's flags (`bertwb.train.device.cpu_flags`) come from `field` too. Foundation
layer, so that the fast CPU pieces below training can ask.
"""

from __future__ import annotations

import os
from functools import lru_cache

VENDOR_ENV = "BERTWB_CPU_VENDOR"  # names the CPU's maker instead of /proc/cpuinfo (the test suite: AMD's)


def cpu_vendor() -> str:
    """The CPU's maker (``GenuineIntel``, ``AuthenticAMD``; "" where unknown): ``$BERTWB_CPU_VENDOR`` where set, else
    /proc/cpuinfo's ``vendor_id``."""
    named = os.environ.get(VENDOR_ENV)
    return named if named is not None else field("vendor_id")


@lru_cache(maxsize=None)
def field(name: str) -> str:
    """The first value of ``name`` in ``/proc/cpuinfo`` ("" where absent or unreadable: not Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            return next((line.split(":", 1)[1].strip() for line in cpuinfo if line.split(":")[0].strip() == name), "")
    except OSError:
        return ""
