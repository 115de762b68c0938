"""Env steps per second per backend and worker count, and the scaling from 1 to 2 workers.

Each cell is the median over N seeds of whole `asyncrl train` processes with a fixed budget
(`--steps`, stop rule off, default A3C CartPole settings otherwise). Three rates: over the whole
process (from launch to exit: imports, `ray.init`, env probing included), over the training
phase (the summary's `steps_per_second`; Ray's actor start-up included) and in steady state
(from 20% of the budget to the end, read from `episodes.csv`). Writes a bar chart with
`--plot`.

Ray must only talk over loopback on this machine; run it as the test command does:

    scripts/loopback python benchmarks/throughput.py --seeds 3 --plot throughput.png
    scripts/loopback python benchmarks/throughput.py --backends ray --workers 2 -- --ray-batch 4
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

from common import off_ray, run_train, steady_rate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=1_000_000, help="env-step budget of each run")
    p.add_argument("--backends", nargs="+", default=["threads", "processes", "ray"])
    p.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    p.add_argument("--plot", type=Path, default=None, help="write a bar chart here (PNG)")
    p.add_argument("extra", nargs="*", help="more arguments for `asyncrl train` (after --)")
    args = p.parse_args()

    cells = [(b, w) for b in args.backends for w in args.workers]
    phase: dict[tuple[str, int], list[float]] = {c: [] for c in cells}
    whole: dict[tuple[str, int], list[float]] = {c: [] for c in cells}
    steady: dict[tuple[str, int], list[float]] = {c: [] for c in cells}
    with tempfile.TemporaryDirectory(prefix="asyncrl-bench-") as tmp:
        for seed in range(args.seeds):
            for b, w in cells:  # interleaved: drift in the machine's speed hits every cell alike
                extra = ["--backend", b, "--workers", str(w), "--steps", str(args.steps)]
                more = args.extra if b == "ray" else off_ray(args.extra)
                s = run_train(seed, [*extra, "--target-return", "1e9", *more], Path(tmp))
                phase[(b, w)].append(s["steps_per_second"])
                whole[(b, w)].append(s["total_steps"] / s["process_seconds"])
                steady[(b, w)].append(
                    steady_rate(Path(s["run_dir"]) / "episodes.csv", s["total_steps"])
                )
                print(
                    f"seed {seed} {b} x{w}: {phase[(b, w)][-1]:,.0f} env steps/s "
                    f"(steady state {steady[(b, w)][-1]:,.0f}, "
                    f"whole process {whole[(b, w)][-1]:,.0f})",
                    flush=True,
                )
    med = {c: statistics.median(v) for c, v in phase.items()}
    med_steady = {c: statistics.median(v) for c, v in steady.items()}
    med_whole = {c: statistics.median(v) for c, v in whole.items()}

    print(
        "\n| backend | workers | env steps/s (whole process) | env steps/s (training phase) "
        "| env steps/s (steady state) |"
    )
    print("|---|---|---|---|---|")
    for b, w in cells:
        print(
            f"| {b} | {w} | {med_whole[(b, w)]:,.0f} | {med[(b, w)]:,.0f} "
            f"| {med_steady[(b, w)]:,.0f} |"
        )
    lo, hi = min(args.workers), max(args.workers)
    if lo != hi:
        for b in args.backends:
            ratio = med_steady[(b, hi)] / med_steady[(b, lo)]
            print(f"scaling {b} {lo} -> {hi} workers: {ratio:.2f}x (steady state)")
    if "ray" in args.backends and "processes" in args.backends:
        for w in args.workers:
            print(
                f"ray / processes at {w} worker(s): "
                f"{med_whole[('ray', w)] / med_whole[('processes', w)]:.0%} (whole process), "
                f"{med[('ray', w)] / med[('processes', w)]:.0%} (training phase), "
                f"{med_steady[('ray', w)] / med_steady[('processes', w)]:.0%} "
                "(steady state)"
            )
    launcher = "scripts/loopback " if "ray" in args.backends else ""
    print(f"reproduce: {launcher}python benchmarks/throughput.py {shlex.join(sys.argv[1:])}")
    if args.plot:
        plot(cells, med, med_steady, args.plot)


def plot(cells, med, med_steady, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    x = range(len(cells))
    ax.bar([i - 0.2 for i in x], [med[c] / 1e3 for c in cells], 0.4, label="training phase")
    ax.bar([i + 0.2 for i in x], [med_steady[c] / 1e3 for c in cells], 0.4, label="steady state")
    ax.set_xticks(list(x), [f"{b}\nx{w}" for b, w in cells])
    ax.set_ylabel("thousand env steps / s")
    ax.set_title(f"A3C on CartPole-v1, {os.cpu_count()} cores (median of seeds)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
