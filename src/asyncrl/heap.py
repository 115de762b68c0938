"""The C heap of a process, where glibc's defaults cost us: workers keep freed memory for reuse,
and the main process hands back what a checkpoint left behind. Both are no-ops where the C
library has no ``mallopt`` / ``malloc_trim`` (musl, macOS)."""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

# glibc's mallopt parameters
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def _libc_function(name: str) -> Any:
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c")), name)
    except (OSError, AttributeError, TypeError):
        return None


def keep_freed_memory() -> None:
    """Keep freed tensor memory in the heap for reuse. glibc serves blocks above its mmap
    threshold (128 KiB at first) with fresh pages from the OS and returns them on free, so each
    batch of Atari frames (16 x 4 x 84 x 84 floats: 1.8 MB) and each conv activation is
    page-faulted and zeroed anew. Raising the thresholds (256 MiB mmap, 512 MiB trim) lets the
    allocator reuse them without page faults; resident memory stays flat, as the same sizes
    recur every step (docs/atari.md)."""
    mallopt = _libc_function("mallopt")
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, 256 << 20)
        mallopt(_M_TRIM_THRESHOLD, 512 << 20)


def return_freed_memory() -> None:
    """Give the heap's free pages back to the OS (``malloc_trim(0)``). The main process calls
    it after each checkpoint: the workers' snapshots (parameters and optimizer statistics,
    about 5.5 MB each on Atari) arrive before the previous ones are freed, and the freed blocks,
    scattered between live ones, stayed resident: a Pong run's main process grew by 5-6 MB at
    every checkpoint (260 -> 286 MB in 15 minutes) where its work did not change. Once every
    few minutes the cost (a few milliseconds, a few page faults afterwards) is nothing."""
    trim = _libc_function("malloc_trim")
    if trim is not None:
        trim(0)
