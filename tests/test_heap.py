"""The C heap settings of workers (freed memory kept for reuse) and of the main process (freed
memory handed back after a checkpoint), on glibc, each in a fresh interpreter."""

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc")

SCRIPT = """
import numpy as np
from asyncrl.heap import keep_freed_memory, return_freed_memory

def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

keep_freed_memory()
before = rss_mb()
blocks = [np.ones(1 << 20, np.uint8) for _ in range(96)]  # 96 MB, written: resident
del blocks
kept = rss_mb()
return_freed_memory()
print(before, kept, rss_mb())
"""


def test_workers_keep_freed_memory_and_the_main_process_hands_it_back():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    before, kept, returned = map(float, out.stdout.split())
    # with the raised thresholds the freed 96 MB stay in the heap, ready for the next batch
    assert kept - before > 80
    # malloc_trim gives them back
    assert returned - before < 16
