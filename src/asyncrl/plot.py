"""Learning curves from ``episodes.csv`` (return against env steps and against wall time), with
the evaluations of ``evaluations.csv`` over them, and, where the run has them, the learners'
diagnostics from ``metrics.csv`` in a second figure; and a tune's trials (``trials.png``)."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from asyncrl.errors import UserError
from asyncrl.rundir import RunDir


def read_csv(path: Path, columns: Sequence[str]) -> dict[str, list[float]]:
    """``columns`` of a CSV file as floats (empty cells skipped per column; a file may have
    columns of words, as evaluations.csv's ``stage``)."""
    cols: dict[str, list[float]] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            for k, v in row.items():
                if v not in ("", None) and k in columns:
                    cols.setdefault(k, []).append(float(v))
    return cols


def read_episodes(run_dir: str | Path) -> dict[str, list[float]]:
    run = RunDir.existing(run_dir, "episodes")
    keys = ("return", "global_step", "wall_seconds")
    cols = read_csv(run.episodes, keys)
    return {k: cols.get(k, []) for k in keys}


def read_evaluations(run_dir: str | Path) -> dict[str, list[float]]:
    """The columns of ``evaluations.csv`` (empty where the run made no evaluation)."""
    path = RunDir(Path(run_dir)).evaluations
    keys = ("global_step", "wall_seconds", "mean", "std")
    cols = read_csv(path, keys) if path.is_file() else {}
    return {k: cols.get(k, []) for k in keys}


def rolling_mean(xs: list[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, x in enumerate(xs):
        total += x
        if i >= window:
            total -= xs[i - window]
        out.append(total / min(i + 1, window))
    return out


def frames_per_step(run_dir: str | Path) -> int:
    """Emulator frames per agent step (4 on Atari), from the run's summary; 1 without one."""
    import json

    summary = RunDir(Path(run_dir)).summary
    if not summary.is_file():
        return 1
    try:
        s = json.loads(summary.read_text())
        return max(1, round(s.get("total_frames", 0) / max(s.get("total_steps", 1), 1)))
    except (OSError, ValueError, TypeError, AttributeError) as e:
        raise UserError(f"cannot read {summary} ({type(e).__name__}: {e})") from None


def _out_path(out: str | Path) -> Path:
    """``--out`` as given, refused in one line where saving the figure would fail only after
    the plotting (no folder, or no image type: matplotlib would also add .png to a name
    without one, and the path printed would not be the file written)."""
    from matplotlib.backend_bases import FigureCanvasBase

    path = Path(out)
    if path.suffix.lstrip(".").lower() not in FigureCanvasBase.get_supported_filetypes():
        raise UserError(f"--out: {path} has no image file type: end it in .png (or .svg, .pdf)")
    if not path.parent.is_dir():
        raise UserError(f"--out: the folder {path.parent} does not exist: create it first")
    if path.is_dir():
        raise UserError(f"--out: {path} is a folder; name an image file (in it, or beside it)")
    return path


def plot_run(run_dir: str | Path, out: str | Path | None = None, window: int = 100) -> Path:
    """Write the learning curve PNG (default ``RUN_DIR/learning_curve.png``) and, if the run
    has ``metrics.csv``, the diagnostics beside it (:func:`metrics_path`); return the learning
    curve's path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = _out_path(out) if out else Path(run_dir) / "learning_curve.png"
    data = read_episodes(run_dir)
    if not data["return"]:
        raise UserError(f"{run_dir}/episodes.csv holds no finished episode yet; nothing to plot")
    smooth = rolling_mean(data["return"], window)
    per_step = frames_per_step(run_dir)
    if per_step > 1:  # Atari: emulator frames, the unit its literature counts in
        data["global_step"] = [s * per_step for s in data["global_step"]]
    evals = read_evaluations(run_dir)
    if per_step > 1:
        evals["global_step"] = [s * per_step for s in evals["global_step"]]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, key, label in (
        (axes[0], "global_step", "emulator frames" if per_step > 1 else "env steps"),
        (axes[1], "wall_seconds", "wall time (s)"),
    ):
        ax.plot(data[key], data["return"], ".", ms=2, alpha=0.3, label="episode")
        ax.plot(data[key], smooth, lw=2, label=f"mean of last {window}")
        if evals["mean"]:
            ax.errorbar(
                evals[key],
                evals["mean"],
                yerr=evals["std"],
                fmt="o-",
                ms=4,
                lw=1,
                capsize=2,
                color="black",
                label="evaluation (mean, std)",
            )
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("return")
    axes[0].legend(loc="lower right")
    fig.suptitle(Path(run_dir).name)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    metrics = RunDir(Path(run_dir)).metrics
    if metrics.is_file() and metrics.stat().st_size > 0:
        plot_metrics(metrics, metrics_path(path))
    return path


def plot_runs(run_dirs: list[str | Path], out: str | Path, window: int = 100) -> Path:
    """Several runs in one figure (seeds or settings side by side): each run's mean of the
    last ``window`` episodes, and its evaluations as markers of the same colour, against env
    steps (emulator frames on Atari) and against wall time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = _out_path(out)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    # emulator frames where every run counts them (Atari), env steps otherwise
    per_steps = [frames_per_step(r) for r in run_dirs]
    frames = min(per_steps) > 1
    for i, (run_dir, per_step) in enumerate(zip(run_dirs, per_steps, strict=True)):
        data = read_episodes(run_dir)
        if not data["return"]:
            raise UserError(f"{run_dir}/episodes.csv holds no finished episode yet; leave it out")
        per_step = per_step if frames else 1
        evals = read_evaluations(run_dir)
        smooth = rolling_mean(data["return"], window)
        color = f"C{i % 10}"
        for ax, key in ((axes[0], "global_step"), (axes[1], "wall_seconds")):
            scale = per_step if key == "global_step" else 1
            ax.plot([x * scale for x in data[key]], smooth, lw=2, color=color,
                    label=Path(run_dir).name)  # fmt: skip
            if evals["mean"]:
                ax.plot([x * scale for x in evals[key]], evals["mean"], "o", ms=4, color=color)
    axes[0].set_xlabel("emulator frames" if frames else "env steps")
    axes[1].set_xlabel("wall time (s)")
    axes[0].set_ylabel(f"mean of last {window} episodes (dots: evaluations)")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_trials(
    trials: list[tuple[int, float | None, bool]],
    out: Path,
    label: str,
    minimise: bool = True,
    title: str = "",
) -> Path:
    """A tune's trials (``asyncrl tune``'s ``trials.png``): each finished trial's objective
    against its number, the best so far as a line, the run's own setting (the ``baseline``
    trial) as a dashed level, and the pruned trials (no value) as ticks along the bottom.
    ``trials``: (number, value or None, baseline) triples."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.transforms import blended_transform_factory

    done = [(n, v) for n, v, _ in trials if v is not None]
    pruned = [n for n, v, _ in trials if v is None]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    if done:
        xs, ys = zip(*done, strict=True)
        ax.plot(xs, ys, "o", ms=5, color="C0", label="trial")
        line = [ys[0]]
        for y in ys[1:]:
            line.append(min(line[-1], y) if minimise else max(line[-1], y))
        ax.step(xs, line, where="post", color="C1", lw=2, label="best so far")
        for n, v, base in trials:
            if base and v is not None:
                ax.axhline(
                    v, color="grey", ls="--", lw=1, label=f"the run's own setting (trial {n})"
                )
    if pruned:
        bottom = blended_transform_factory(ax.transData, ax.transAxes)
        ax.plot(pruned, [0.02] * len(pruned), "x", color="C3", transform=bottom, label="pruned")
    ax.set_xlabel("trial")
    ax.set_ylabel(label)
    ax.grid(alpha=0.3)
    if trials:
        ax.legend(fontsize=8, loc="best")
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def metrics_path(curve: Path) -> Path:
    """Where the diagnostics go: ``metrics.png`` beside the default learning curve, and
    ``NAME_metrics.png`` beside one that ``--out`` names, so that plotting into a shared folder
    never overwrites somebody else's ``metrics.png``."""
    if curve.name == "learning_curve.png":
        return curve.with_name("metrics.png")
    return curve.with_name(f"{curve.stem}_metrics.png")


def metric_series(csv_path: Path) -> dict[str, tuple[list[float], list[float]]]:
    """Each statistic of metrics.csv as (global steps, values) over the rows that hold it: a
    column added mid-file (blank in the rows before it) starts where it was added."""
    points: dict[str, tuple[list[float], list[float]]] = {}
    with open(csv_path, newline="") as f:
        for row in csv.DictReader(f):
            step = row.pop("global_step", None)
            row.pop("wall_seconds", None)
            row.pop(None, None)  # cells past the header's
            try:
                x = float(step)
                values = {k: float(v) for k, v in row.items() if v}
            except (TypeError, ValueError):  # the last row, as a running run writes it
                continue
            for k, y in values.items():
                xs, ys = points.setdefault(k, ([], []))
                xs.append(x)
                ys.append(y)
    return points


def plot_metrics(csv_path: Path, out: Path) -> Path:
    """One small panel per statistic of metrics.csv against the global step."""
    import matplotlib.pyplot as plt

    points = metric_series(csv_path)
    names = list(points)
    if not names:
        return out
    ncols = 3
    nrows = (len(names) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(11, 2.6 * nrows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        ax.plot(*points[name], lw=1.2)
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.supxlabel("env steps")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
