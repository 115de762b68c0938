"""Shared by the benchmarks: run `asyncrl train` as a whole process and read its summary."""

from __future__ import annotations

import argparse
import collections
import csv
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from asyncrl.settings import RaySettings


def off_ray(args: list[str]) -> list[str]:
    """``args`` without the options only Ray reads, which another backend refuses: one set of
    options serves a sweep over the backends (``-- --ray-pipeline 0``)."""
    ray = {"--" + n.replace("_", "-") for n in RaySettings.__dataclass_fields__}
    out, skip = [], False
    for a in args:
        if not skip and a.split("=", 1)[0] not in ray:
            out.append(a)
        skip = not skip and a in ray  # its value is the next argument
    return out


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
    summary["steps_to_195"] = first_crossing(run_dir / "episodes.csv", 195.0)
    return summary


#: the machine's speed today: the atari preset's A3C on Pong (2 workers, no evaluations) for a
#: fixed budget. Runs of the same code on this (virtual, shared) 2-core machine have differed
#: by 1.5x between sessions, so a figure is comparable with another only with this beside it.
#: Pinned to float32 (A3C's preset keeps float32 today; named so that a later change of the
#: preset cannot move the yardstick, whatever bfloat16 units the CPU has: docs/atari.md#bfloat16).
SPEED_ARGS = (
    "--env", "PongNoFrameskip-v4", "--algo", "a3c", "--workers", "2", "--steps", "40000",
    "--target-return", "1e9", "--eval-every", "0", "--stop-on", "train", "--precision", "float32",
)  # fmt: skip


def machine_speed(runs: int = 3) -> dict:
    """The median training frames/s of ``runs`` whole processes of :data:`SPEED_ARGS` (about
    20 s each), with the command that measures it."""
    with tempfile.TemporaryDirectory(prefix="asyncrl-speed-") as tmp:
        summaries = [run_train(seed, list(SPEED_ARGS), Path(tmp)) for seed in range(runs)]
    fps = [s["frames_per_second"] for s in summaries]
    return {
        "frames_per_second": statistics.median(fps),
        "runs": fps,
        "command": "python benchmarks/calibrate.py",
        "cpu": cpu(),
    }


def cpu() -> str:
    """The CPU's model and its bfloat16 units, which decide the atari preset's APPO precision
    (``--precision auto``): e.g. "AMD EPYC, AVX-512 BF16"."""
    from asyncrl.models import cpu_bfloat16_units

    name = "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    return f"{name}, {' and '.join(cpu_bfloat16_units()) or 'no bfloat16 units'}"


def first_crossing(episodes_csv: Path, threshold: float, window: int = 100) -> int | None:
    """Global step at which the mean return of the last ``window`` episodes first reached
    ``threshold`` (CartPole-v0's 195, say), from the run's episodes.csv."""
    hit = crossings(episodes_csv, [threshold], window)[threshold]
    return None if hit is None else hit[0]


def crossings(
    episodes_csv: Path, thresholds: list[float], window: int = 100
) -> dict[float, tuple[int, float] | None]:
    """For each threshold, the global step and the run's wall seconds at which the mean return
    of the last ``window`` episodes first reached it (None: never), from its episodes.csv."""
    last: collections.deque[float] = collections.deque(maxlen=window)
    hits: dict[float, tuple[int, float] | None] = dict.fromkeys(thresholds)
    with episodes_csv.open() as f:
        for row in csv.DictReader(f):
            last.append(float(row["return"]))
            if len(last) < window:
                continue
            mean = sum(last) / window
            for th in thresholds:
                if hits[th] is None and mean >= th:
                    hits[th] = (int(row["global_step"]), float(row["wall_seconds"]))
    return hits


def steady_rate(episodes_csv: Path, budget: int, start: float = 0.2) -> float:
    """Env steps per second in steady state: from the first episode past ``start`` of the
    budget to the last one (start-up, of Ray's actors say, left out)."""
    with episodes_csv.open() as f:
        rows = [(int(r["global_step"]), float(r["wall_seconds"])) for r in csv.DictReader(f)]
    later = [r for r in rows if r[0] >= start * budget]
    if len(later) < 2:
        sys.exit(f"{episodes_csv}: too few episodes past {start:.0%} of the budget to time")
    (s0, t0), (s1, t1) = later[0], later[-1]
    return (s1 - s0) / max(t1 - t0, 1e-9)


def solve(args: argparse.Namespace) -> None:
    """Train ``args.env`` to ``args.target`` (the mean of the last 100 episodes) with its
    preset, once per seed; print how many seeds got there and the median whole-process time
    and steps (and emulator frames, where a step is several)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="asyncrl-bench-") as tmp:
        for seed in range(args.seeds):
            extra = ["--env", args.env, "--target-return", str(args.target), *args.extra]
            s = run_train(seed, extra, Path(tmp))
            rows.append(s)
            per = s["total_frames"] / max(s["total_steps"], 1)
            frames = f", {(s['solve_steps'] or 0) * per:,.0f} frames" if per > 1 else ""
            print(
                f"seed {seed}: solved={s['solved']} process {s['process_seconds']:.1f} s, "
                f"steps {s['solve_steps']}{frames}, final mean {s['rolling_return']}",
                flush=True,
            )
    solved = [r for r in rows if r["solved"]]
    print(f"\n{args.env}: {len(solved)}/{len(rows)} seeds reached a mean of {args.target}")
    if solved:
        t = statistics.median(r["process_seconds"] for r in solved)
        steps = statistics.median(r["solve_steps"] for r in solved)
        per = solved[0]["total_frames"] / max(solved[0]["total_steps"], 1)
        frames = f" ({steps * per:,.0f} frames)" if per > 1 else ""
        print(f"median whole-process time {t:.1f} s; median steps {steps:,.0f}{frames}")
