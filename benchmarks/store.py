"""The results store: every finished benchmark run, one JSON object a line, in
``benchmarks/results.jsonl``.

JSON lines, not a database or a compressed file: a run is appended with one write, a new run
is one added line in a diff (a gzip'd file would be a new binary blob in git at every run),
and the file reads with no more than the standard library (or ``pandas.read_json(path,
lines=True)``). It stays small because a row holds the run's figures and learning curves
downsampled (60 points by steps; 61 by the run's clock for a timed task, and per alignment of
an Atari run's games), never its run directory.

A row's keys (absent where a run did not record them):

- ``suite``, ``batch``, ``task``, ``seed``: the run; ``batch`` names a set of runs of a suite
  on one CPU or commit ("" for the suite's main set: a suite resumes within its batch)
- ``env``, ``target``, ``command``: what trained, to what target, with which command
- ``date`` (UTC), ``commit``, ``cpu``, ``calibration``: when, from which checkout, on which
  CPU, and the machine's speed then (``benchmarks/calibrate.py``: frames/s)
- ``solved``, ``solve_seconds``, ``solve_steps``: whether and when the run's stop rule fired
- ``final_eval``, ``final_eval_returns``, ``model``: the kept model's evaluation on new starts
- ``kept_model``, ``kept_model_return``, ``kept_model_episodes``, ``kept_model_cut_short``: the
  run's own re-scoring of the model it kept (summary.json's)
- ``final_train_mean``, ``total_steps``, ``frames_per_second``, ``precision``,
  ``process_seconds``: the run's end; ``train_seconds``, ``time_reserved_seconds``: when its
  training stopped, and the reserve for the work after it that a time limit stopped it on
- ``milestones``, ``half_seconds``, ``train_mean_at_half``, ``last_100_by_alignment``
- ``curve_steps``/``curve``, ``curve_seconds``/``curve_by_time``, ``curve_by_alignment``,
  ``evaluations``: the curves (the mean of the last 100 training episodes on a grid of steps or
  seconds; per residue of the no-op count mod 4; the evaluations during training as
  [step, seconds, mean])
- ``log``: what the run's log said beyond its status and progress lines, its last 60 (why
  training stopped when it did, an evaluation that gave up or was cut short, the summary)
- ``source``, ``recorded_in``: a row converted from the files ``benchmarks/results/`` held
  until commit 8efeca9: the file, and the commit that added it
"""

from __future__ import annotations

import json
import math
from pathlib import Path

#: the store in the checkout
STORE = Path(__file__).resolve().parent / "results.jsonl"

#: keys whose lists are curves or returns: kept to 4 significant digits (a plot or a median
#: needs no more; a curve's grid of steps is kept in whole steps)
CURVES = (
    "curve", "curve_seconds", "curve_by_time", "curve_by_alignment", "evaluations",
    "final_eval_returns",
)  # fmt: skip


def _round(x, digits: int = 4):
    """``x`` (a number, or lists and dicts of numbers) to ``digits`` significant digits."""
    if isinstance(x, float):
        return x if x == 0.0 else float(f"{x:.{digits}g}")
    if isinstance(x, list):
        return [_round(v, digits) for v in x]
    if isinstance(x, dict):
        return {k: _round(v, digits) for k, v in x.items()}
    return x


def _finite(x):
    """``x`` with every non-finite number (a NaN, an infinity) as None: JSON has none."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, list):
        return [_finite(v) for v in x]
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    return x


def compact(row: dict) -> dict:
    """``row`` as the store keeps it: its curves and evaluation returns to 4 significant
    digits, the steps of its grid as integers, no non-finite number (None instead)."""
    out = _finite(dict(row))
    for key in CURVES:
        if out.get(key) is not None:
            out[key] = _round(out[key])
    if out.get("curve_steps") is not None:
        out["curve_steps"] = [round(v) for v in out["curve_steps"]]
    return out


def append(path: Path, row: dict) -> dict:
    """Add one finished run to the store at ``path`` (created if absent); the row as kept."""
    kept = compact(row)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(kept, separators=(",", ":")) + "\n")
    return kept


def read(path: Path) -> list[dict]:
    """Every row of the store at ``path``, in the order they were appended (none: no file)."""
    if not path.is_file():
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def select(
    rows: list[dict], suite: str | None, batch: str | None = None, task: str | None = None
) -> list[dict]:
    """The rows of ``suite`` (None: runs of no suite), of one ``batch`` and ``task`` where
    given, in seed order."""
    out = [
        r
        for r in rows
        if r.get("suite") == suite
        and (batch is None or r.get("batch", "") == batch)
        and (task is None or r["task"] == task)
    ]
    return sorted(out, key=lambda r: r["seed"])
