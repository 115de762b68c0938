"""Shared by the benchmarks: run `asyncrl train` as a whole process and read its summary."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path


def run_train(seed: int, extra: list[str], workdir: Path) -> dict:
    """One whole `asyncrl train` process; its summary plus the process wall time."""
    run_dir = workdir / f"run-{len(list(workdir.iterdir()))}-seed{seed}"
    cmd = [
        "asyncrl",
        "train",
        "--seed",
        str(seed),
        "--run-dir",
        str(run_dir),
        "--no-progress",
        *extra,
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["process_seconds"] = wall
    return summary


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None
