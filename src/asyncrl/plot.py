"""Learning curves from ``episodes.csv``: return against env steps and against wall time."""

from __future__ import annotations

import csv
from pathlib import Path

from asyncrl.errors import UserError


def read_episodes(run_dir: str | Path) -> dict[str, list[float]]:
    path = Path(run_dir)
    csv_path = path / "episodes.csv"
    if not path.is_dir():
        raise UserError(f"run directory {path} does not exist; pass the RUN_DIR of a training run")
    if not csv_path.is_file():
        raise UserError(f"{path} has no episodes.csv; pass the RUN_DIR of a training run")
    cols: dict[str, list[float]] = {"return": [], "global_step": [], "wall_seconds": []}
    with open(csv_path, newline="") as f:
        for row in csv.DictReader(f):
            for k in cols:
                cols[k].append(float(row[k]))
    return cols


def rolling_mean(xs: list[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, x in enumerate(xs):
        total += x
        if i >= window:
            total -= xs[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_run(run_dir: str | Path, out: str | Path | None = None, window: int = 100) -> Path:
    """Write the learning curve PNG (default ``RUN_DIR/learning_curve.png``) and return its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = read_episodes(run_dir)
    if not data["return"]:
        raise UserError(f"{run_dir}/episodes.csv holds no finished episode yet; nothing to plot")
    smooth = rolling_mean(data["return"], window)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, key, label in (
        (axes[0], "global_step", "env steps"),
        (axes[1], "wall_seconds", "wall time (s)"),
    ):
        ax.plot(data[key], data["return"], ".", ms=2, alpha=0.3, label="episode")
        ax.plot(data[key], smooth, lw=2, label=f"mean of last {window}")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("return")
    axes[0].legend(loc="lower right")
    fig.suptitle(Path(run_dir).name)
    fig.tight_layout()
    path = Path(out) if out else Path(run_dir) / "learning_curve.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
