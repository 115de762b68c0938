"""Two settings of an Atari task against each other by the frame, seed by seed: the mean of the
last 100 games, and of the last 50 at odd no-op counts (the games that lag on Pong:
docs/benchmarks.md#what-the-last-points-are), against frames. By the frame, runs made on
CPUs of different speeds compare; by the minute they do not. The no-op count is
``start_frames - 1``, as in games with FIRE (Pong's); games without a ``start_frames`` are left
out.

    python benchmarks/byframe_curves.py A_DIR B_DIR --labels "defaults" "--entropy-coef 0.005" \\
        --seeds 0 1 2 --png OUT.png

Each setting is a folder of the suite's ``seed-S.episodes.csv`` files (``benchmarks/suite.py``)
or a path with ``{seed}`` in it, for a run's own ``episodes.csv`` (one resumed, say):

    python benchmarks/byframe_curves.py "RESULTS/seed{seed}-resumed/episodes.csv" A_DIR ...
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import suite


def curves(path: Path, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mean of the last 100 games and of the last 50 at odd no-op counts at each frame
    count of ``grid`` (millions); NaN past the run's end."""
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if r["start_frames"]]  # games with FIRE
    frames = np.array([4 * int(r["global_step"]) for r in rows]) / 1e6
    score = np.array([float(r["return"]) for r in rows])
    odd = np.array([suite.noop_residue(r["start_frames"]) % 2 == 1 for r in rows])
    last, last_odd = [], []
    for g in grid:
        seen = frames <= g
        if g > frames[-1] or seen.sum() < 10:
            last.append(np.nan)
            last_odd.append(np.nan)
            continue
        last.append(score[seen][-100:].mean())
        o = score[seen & odd][-50:]
        last_odd.append(o.mean() if len(o) else np.nan)
    return np.array(last), np.array(last_odd)


def episodes_file(setting: str, seed: int) -> Path:
    """The games of ``seed`` in ``setting``: a folder of the suite's records, or a path with
    ``{seed}`` in it."""
    if "{seed}" in setting:
        return Path(setting.format(seed=seed))
    return Path(setting) / f"seed-{seed}.episodes.csv"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "dirs", nargs=2, help="the two settings: folders of suite records, or paths with {seed}"
    )
    p.add_argument("--labels", nargs=2, required=True)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--title", default="")
    p.add_argument("--legend-loc", default="upper left", help="where the first plot's legend goes")
    p.add_argument("--png", required=True)
    args = p.parse_args()
    ends = []
    for d in args.dirs:
        for s in args.seeds:
            with open(episodes_file(d, s)) as f:
                ends.append(4 * int(list(csv.DictReader(f))[-1]["global_step"]) / 1e6)
    grid = np.linspace(0.5, max(ends), 100)
    fig, axes = plt.subplots(1, len(args.seeds), figsize=(5 * len(args.seeds), 4.2), sharey=True)
    for s, ax in zip(args.seeds, np.atleast_1d(axes), strict=True):
        for d, label, color in zip(args.dirs, args.labels, ("tab:blue", "tab:red"), strict=True):
            last, last_odd = curves(episodes_file(d, s), grid)
            ax.plot(grid, last, color=color, label=f"{label}: last 100 games")
            ax.plot(grid, last_odd, color=color, ls="--", label=f"{label}: last 50 at odd no-ops")
        ax.set_title(f"seed {s}")
        ax.set_xlabel("frames (millions)")
        ax.grid(alpha=0.3)
    first = np.atleast_1d(axes)[0]
    first.set_ylabel("mean score")
    first.legend(fontsize=8, loc=args.legend_loc)
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.png, dpi=90)
    print(args.png)


if __name__ == "__main__":
    main()
