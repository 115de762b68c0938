"""What a trial is scored by, and the pruning on its runs' evaluations.

The score is the one of ``benchmarks/sweep.py``, which the command replaced (``git show
98bf59e:benchmarks/sweep.py``): the mean over the trial's
seeds of the env steps to the run's target (its stop rule's: ``--target-return``, else the env's
reward threshold), a seed that never gets there counting as twice the budget, so that a setting
that solves every seed slowly beats one that solves some fast and others never. With a
``--time-limit`` budget the unit is seconds. Where there is no target, the mean of the runs'
final evaluation returns, maximised.

Pruning (Optuna's :class:`~optuna.pruners.MedianPruner`) reads each evaluation as the run writes
it: the budget is cut in :data:`BUCKETS` equal parts, and an evaluation is reported at its
part's pruner step (seed ``k``'s parts after seed ``k - 1``'s), its mean as the value (negated
where the study minimises). A run that reaches the target stops there: its later parts are
given its best evaluation, so that a trial still short of the target where the median trial
had reached it is pruned (compared only with those that got as far, it never would be).
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from asyncrl.tune.process import Process

if TYPE_CHECKING:
    from asyncrl.config import Config
    from asyncrl.envs import EnvInfo

#: the parts of a run's budget that its evaluations are reported at
BUCKETS = 20
#: seconds between two looks at a run's evaluations
POLL_S = 0.5


class Pruned(Exception):
    """The trial was pruned (or its setting failed to train): the reason, for the progress line."""


class Stopped(Exception):
    """The tune is stopping (Ctrl-C): the run was stopped, the trial goes unfinished."""


class RunFailed(Exception):
    """A run ended in a way no setting explains (killed, refused its configuration): the tune
    stops with this line."""


@dataclass(frozen=True)
class Goal:
    """What the trials are compared by: ``target`` (None: the final evaluation's return) in
    ``unit`` (``"steps"`` or ``"seconds"``) within ``budget`` of it."""

    target: float | None
    unit: str
    budget: float

    @classmethod
    def of(cls, cfg: Config, info: EnvInfo) -> Goal:
        target = cfg.target_return if cfg.target_return is not None else info.reward_threshold
        seconds = cfg.time_limit_seconds()
        if seconds is not None:
            return cls(target, "seconds", seconds)
        return cls(target, "steps", float(cfg.steps))

    @property
    def direction(self) -> str:
        return "maximize" if self.target is None else "minimize"

    def cost(self, summary: dict[str, Any]) -> float:
        """One run's score: its steps (or seconds) to the target, twice the budget where it
        never got there; with no target, its final evaluation's mean return."""
        if self.target is None:
            for key in ("last_eval_return", "best_eval_return", "rolling_return"):
                if summary.get(key) is not None:
                    return float(summary[key])
            return float("nan")
        x = summary.get("solve_steps" if self.unit == "steps" else "solve_seconds")
        return float(x) if summary.get("solved") and x is not None else 2 * self.budget

    def value(self, summaries: list[dict[str, Any]]) -> float:
        """A trial's score: the mean of its runs'."""
        return statistics.fmean(self.cost(s) for s in summaries)

    def describe(self) -> str:
        if self.target is None:
            return "the mean final evaluation return (maximised)"
        what = "env steps" if self.unit == "steps" else "seconds"
        return (
            f"the mean {what} to {self.target:g} (minimised; a seed that never gets there "
            f"counts {self.show(2 * self.budget)})"
        )

    def show(self, value: float) -> str:
        if self.target is None:
            return f"{value:.2f}"
        return f"{value:,.0f} steps" if self.unit == "steps" else f"{value:,.1f} s"

    def bucket(self, row: dict[str, float]) -> int:
        """The part of the budget an evaluation falls in."""
        x = row["global_step"] if self.unit == "steps" else row["wall_seconds"]
        return max(0, min(BUCKETS, int(x * BUCKETS / self.budget)))

    def intermediate(self, mean: float) -> float:
        return mean if self.target is None else -mean


class Reporter:
    """One run's evaluations reported to its trial, and the pruner asked after each."""

    def __init__(self, trial: Any, goal: Goal, seed_index: int, seed: int = 0) -> None:
        self.trial, self.goal, self.seed = trial, goal, seed
        self.base = seed_index * (BUCKETS + 1)
        self.reported: set[int] = set()
        self.best: float | None = None
        self.last: tuple[int, float] | None = None

    def evaluation(self, row: dict[str, float]) -> bool:
        """Report one evaluation; True where the trial should be pruned."""
        mean = row["mean"]
        self.best = mean if self.best is None else max(self.best, mean)
        b = self.goal.bucket(row)
        self.last = (int(row["global_step"]), mean)
        if b in self.reported:  # a part holds the first evaluation in it
            return False
        self.reported.add(b)
        self.trial.report(self.goal.intermediate(mean), self.base + b)
        return bool(self.trial.should_prune())

    def reached(self) -> None:
        """The run reached the target and stopped: its later parts hold its best evaluation."""
        if self.best is None:
            return
        start = max(self.reported, default=-1) + 1
        for b in range(start, BUCKETS + 1):
            self.trial.report(self.goal.intermediate(self.best), self.base + b)
            self.reported.add(b)


def follow(proc: Process, reporter: Reporter, stop: threading.Event) -> int:
    """Follow a started run to its exit code, reporting its evaluations; on a pruning, stop
    it cleanly (SIGINT) and raise :class:`Pruned`; once ``stop`` is set, stop it and raise
    :class:`Stopped`."""
    while True:
        rows, code = proc.poll()
        for row in rows:
            if reporter.evaluation(row):
                proc.stop()
                step, mean = reporter.last or (0, 0.0)
                raise Pruned(
                    f"pruned at {step:,} steps of seed {reporter.seed} (an evaluation mean of "
                    f"{mean:.1f})"
                )
        if code is not None:
            return code
        if stop.is_set():
            proc.stop()
            raise Stopped()
        time.sleep(POLL_S)


def run_trial(
    trial: Any,
    goal: Goal,
    seeds: list[int],
    make_process: Callable[[int, int], Process],
    stop: threading.Event,
) -> tuple[float, list[dict[str, Any]]]:
    """A trial's runs, one seed after another (``make_process(index, seed)``), scored by
    ``goal``: its value and the runs' summaries. Raises :class:`Pruned` (the pruner's call, or
    a run whose setting failed to train), :class:`Stopped` or :class:`RunFailed`; a run is
    never left behind (Ctrl-C included)."""
    summaries = []
    for k, seed in enumerate(seeds):
        proc = make_process(k, seed)
        reporter = Reporter(trial, goal, k, seed)
        proc.start()
        try:
            code = follow(proc, reporter, stop)
        except BaseException:
            proc.stop()
            with contextlib.suppress(Exception):  # its files, where it ran on a Ray node
                proc.finish()
            raise
        summary = proc.finish()
        if code == 1 and summary is not None:
            # a run that trained and then failed (TrainingError: it diverged, its workers kept
            # failing): the setting's doing. One that failed before it wrote a summary (a
            # crash, an import error) would fail every trial: that stops the tune.
            raise Pruned(f"failed on seed {seed}: {proc.log_tail()}")
        if code != 0 or summary is None:
            raise RunFailed(
                f"a run of seed {seed} exited with code {code} ({proc.log_tail()}); its output "
                f"is in {proc.log}"
            )
        if summary.get("solved"):
            reporter.reached()
        summaries.append(summary)
    return goal.value(summaries), summaries


__all__ = ["BUCKETS", "Goal", "Pruned", "Reporter", "RunFailed", "Stopped", "follow", "run_trial"]
