"""The one place stead makes identifiers and random numbers."""

from __future__ import annotations

import os
import random
import secrets
import time

_rng = random.Random()


def new_id(prefix: str) -> str:
    """A sortable unique id: ``<prefix>_`` + 48-bit milliseconds + 64 random bits, in hex."""
    return f"{prefix}_{time.time_ns() // 1_000_000:012x}{secrets.token_hex(8)}"


def new_token() -> str:
    return secrets.token_hex(16)


def jitter(low: float, high: float) -> float:
    """A uniform random float in ``[low, high]`` (for back-off jitter)."""
    return _rng.uniform(low, high)


def boot_id() -> str:
    """An id of the running OS boot, so a reopened store can tell a process crash from a reboot."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        # No boot id on this platform: assume a reboot may have happened (the safe answer).
        return f"unknown-{os.getpid()}-{time.time_ns()}"
