"""Training curves of Atari runs by the alignment of their games: each game's no-op count mod 4
(``start_frames - 1`` in ``episodes.csv``, for games with FIRE), which decides how the agent's
4-frame steps fall on the game's own frames (docs/benchmarks.md#what-the-last-points-are).

    python benchmarks/alignment_curves.py RUN/episodes.csv [...] --png OUT.png --window 25

One panel a run: the mean of the last ``window`` games of each alignment against the run's
minutes, and the mean of the last 100 games of any alignment (the stop rule's) beside them;
printed, the minute each alignment's mean first reached -10, 0 and +10.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import suite


def training_curves(
    episodes_csv: Path, window: int = 25
) -> dict[int, tuple[list[float], list[float]]]:
    """Residue (no-op count mod 4) -> (the run's minutes at the end of each of its games, the
    mean of that residue's last ``window`` games then). Empty where the file has no
    ``start_frames`` (off Atari, or a run from before the column)."""
    out: dict[int, tuple[list[float], list[float]]] = {}
    games: dict[int, list[float]] = {}
    with open(episodes_csv, newline="") as f:
        for row in csv.DictReader(f):
            if not row.get("start_frames"):
                return {}
            k = suite.noop_residue(row["start_frames"])
            games.setdefault(k, []).append(float(row["return"]))
            last = games[k][-window:]
            minutes, means = out.setdefault(k, ([], []))
            minutes.append(float(row["wall_seconds"]) / 60)
            means.append(sum(last) / len(last))
    return dict(sorted(out.items()))


def first_minutes(
    curves: dict[int, tuple[list[float], list[float]]], levels: tuple[float, ...] = (-10, 0, 10)
) -> dict[int, list[float | None]]:
    """Residue -> the first minute its curve reached each of ``levels`` (None: never)."""
    return {
        k: [next((t for t, v in zip(m, means, strict=True) if v >= x), None) for x in levels]
        for k, (m, means) in curves.items()
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("episodes", nargs="+", type=Path, help="episodes.csv files, one a panel")
    p.add_argument("--png", type=Path, required=True, help="where the figure goes")
    p.add_argument("--window", type=int, default=25, help="games of one alignment averaged")
    p.add_argument("--titles", nargs="+", default=None, help="a title a panel")
    p.add_argument("--target", type=float, default=18.0, help="a dashed line (default 18)")
    args = p.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    n = len(args.episodes)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), sharey=True, squeeze=False)
    for i, path in enumerate(args.episodes):
        ax = axes[0][i]
        curves = training_curves(path, args.window)
        if not curves:
            raise SystemExit(f"{path}: no start_frames column; nothing to plot")
        for k, (minutes, means) in curves.items():
            ax.plot(minutes, means, lw=1.2, label=f"no-ops {k} mod 4 (last {args.window})")
        cells = [
            "/".join("-" if t is None else f"{t:.1f}" for t in ts)
            for ts in first_minutes(curves).values()
        ]
        print(f"{path}: first at -10/0/+10 (minutes), no-ops 0..3 mod 4: {' | '.join(cells)}")
        end = max(m[-1] for m, _ in curves.values())
        grid = np.linspace(0, end, 121)
        overall = suite.curve(path, grid * 60, by="wall_seconds")
        xs = [g for g, v in zip(grid, overall, strict=True) if v is not None]
        ax.plot(xs, [v for v in overall if v is not None], "k", lw=2, label="all games (last 100)")
        ax.axhline(args.target, ls="--", color="gray", lw=1)
        ax.set_title(args.titles[i] if args.titles else str(path.parent.name), fontsize=10)
        ax.set_xlabel("minutes of the run")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("mean return")
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(args.png, dpi=100)
    print(args.png)


if __name__ == "__main__":
    main()
