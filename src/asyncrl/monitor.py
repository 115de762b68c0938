"""The episode stream's consumer in the main process: progress display, ``episodes.csv``,
``metrics.csv`` (the learners' diagnostics), ``evaluations.csv``, TensorBoard scalars and the
stop rule's bookkeeping."""

from __future__ import annotations

import collections
import csv
import dataclasses
import io
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from asyncrl.callbacks import EpisodeEvent, Hooks, UpdateEvent
from asyncrl.messages import Finished, StatSums
from asyncrl.optim import ScheduleSettings, scheduled_lr
from asyncrl.rundir import RunDir, write_atomically
from asyncrl.tbevents import ScalarWriter

if TYPE_CHECKING:
    from asyncrl.evaluation import Evaluation

#: ``start_frames``: what the env reported of the episode's start, empty where it reports
#: nothing (Atari: the frames of the reset before the first action, FIRE and the no-ops)
CSV_HEADER = ["episode", "worker", "return", "length", "global_step", "wall_seconds"]
CSV_HEADER += ["start_frames"]
EVAL_HEADER = ["evaluation", "global_step", "wall_seconds", "mean", "std", "min", "max"]
EVAL_HEADER += ["episodes", "seconds"]
# what the row's episodes are (Evaluation.stage), the kept model's mean on a re-screen's starts
# (blank where no pair was played) and 1 where the row's model became the kept model
EVAL_HEADER += ["stage", "kept_mean", "kept"]
#: seconds between two rows of metrics.csv (and TensorBoard points of the diagnostics)
METRICS_EVERY = 2.0


def _open_csv(path: Any, size: int | None, header: list[str] | None) -> tuple[IO[str], bool]:
    """A new CSV file with ``header``, or (resume) the old one cut back to ``size`` bytes: rows
    past the checkpoint are dropped (the resumed run makes them again); new rows are appended.
    The second value is False where the file held less than ``size`` (deleted or cut short
    since the checkpoint): it is kept to its last whole row, never padded, and goes on after it
    (under a new header, if none is left)."""
    if size is None:
        f = open(path, "w", newline="")  # noqa: SIM115 (returned open)
        if header:
            csv.writer(f).writerow(header)
        return f, True
    f = open(path, "a+", newline="")  # noqa: SIM115 (a+: created if a run had no row yet)
    end = f.seek(0, os.SEEK_END)
    whole = end >= size
    if not whole:  # truncate() past the end would pad the file with NUL bytes
        f.seek(0)
        size = f.read().rfind("\n") + 1
    f.truncate(size)
    f.seek(size)
    if size == 0 and header:
        csv.writer(f).writerow(header)
    return f, whole


def _replace_csv(path: Any, rows: list[list[str]]) -> IO[str]:
    """Write ``rows`` as the whole of the CSV at ``path`` and return it open for appending. The
    rows go to a file beside it that then replaces it, so a kill at any point leaves the old
    file or the new one, never a half-written one, and a reader (``asyncrl plot``) sees one or
    the other."""
    text = io.StringIO(newline="")
    csv.writer(text).writerows(rows)
    write_atomically(Path(path), lambda f: f.write(text.getvalue().encode()))
    return open(path, "a+", newline="")


def _columns(f: IO[str], header: list[str]) -> int:
    """The columns of the CSV open as ``f`` by its header (flushed first: it may be just
    written), ``header``'s where it has none. A run resumed from a version with fewer columns
    goes on in its file's, whose header is a prefix of the new one."""
    f.flush()
    with open(f.name, newline="") as again:
        return len(next(csv.reader(again), None) or header)


def _read_csv(path: Any) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


class MonitorSettings(ScheduleSettings, Protocol):
    """What the monitor reads: the stop rule's window and kind, the outputs, the schedules."""

    @property
    def window(self) -> int: ...
    @property
    def stop_on(self) -> str: ...
    @property
    def tensorboard(self) -> bool: ...
    @property
    def progress(self) -> bool: ...
    @property
    def entropy_final(self) -> float | None: ...
    def entropy_coef_at(self, global_step: int, budget: int | None = None) -> float: ...


class ScalarSink(Protocol):
    """Where the monitor's scalars go: TensorBoard's writer (:mod:`asyncrl.tbevents`), and
    W&B's with --track (:mod:`asyncrl.tracking`)."""

    def add_scalar(self, tag: str, value: float, step: int) -> None: ...
    def close(self) -> None: ...


class _Sinks:
    """Several sinks as one: each scalar to every one of them."""

    def __init__(self, sinks: Sequence[ScalarSink]):
        self.sinks = sinks

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        for sink in self.sinks:
            sink.add_scalar(tag, value, step)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


class Monitor:
    """Counts episodes, keeps the rolling mean, decides when the target is reached; averages
    the workers' learner statistics and writes them every few seconds."""

    def __init__(
        self,
        run_dir: RunDir,
        cfg: MonitorSettings,
        *,
        target_return: float | None,
        frames_per_step: int = 1,
        state: dict | None = None,
        hooks: Hooks | None = None,
        sinks: Sequence[ScalarSink] = (),
    ):
        self.cfg = cfg
        #: the user's callbacks: each episode and interval of statistics goes to them
        self.hooks = hooks if hooks is not None else Hooks()
        self.run_dir = run_dir
        self.total_steps = cfg.steps
        self.target = target_return
        self.window = cfg.window
        self.frames_per_step = frames_per_step
        self.returns: collections.deque[float] = collections.deque(maxlen=self.window)
        self.episodes = 0
        self.solved = False
        self.solve_seconds: float | None = None
        self.solve_steps: int | None = None
        # the score that met the rule, kept: episodes still under way at the stop go on into
        # the rolling mean and can pull it back under the target
        self.solve_return: float | None = None
        self.solved_by: str | None = None  # "eval" (a confirmed evaluation) or "train"
        self.global_step = 0
        # evaluations: how many, the latest mean, and the best
        self.evaluations = 0
        self.last_eval: float | None = None
        self.best_eval: tuple[float, int, int] | None = None  # mean, global step, episodes
        # the screens' seconds in all: what the default schedule of evaluations paces itself on
        self.screen_seconds = 0.0
        # the stop rule's tries so far: each asks a larger margin (evaluation.confirm_margin)
        self.tries = 0
        elapsed = 0.0
        if state is not None:
            self.returns.extend(state["returns"][-self.window :])
            self.episodes = state["episodes"]
            self.solved = state["solved"]
            self.solve_seconds, self.solve_steps = state["solve_seconds"], state["solve_steps"]
            # (None from a checkpoint written before the field: the mean it saved may be one
            # that stragglers pulled back under the target)
            self.solve_return = state.get("solve_return")
            self.solved_by = state.get("solved_by")
            self.global_step = state["global_step"]
            elapsed = state["elapsed"]
            self.evaluations = state.get("evaluations", 0)
            self.last_eval = state.get("last_eval")
            self.screen_seconds = state.get("screen_seconds", 0.0)
            self.tries = state.get("tries", 0)
            best = state.get("best_eval")
            if best is not None:
                self.best_eval = (float(best[0]), int(best[1]), int(best[2]))
        eval_at = None if state is None else state.get("evaluations_bytes", 0)
        self._eval_file, evals_whole = _open_csv(run_dir.evaluations, eval_at, EVAL_HEADER)
        self._evals = csv.writer(self._eval_file)
        self._eval_columns = _columns(self._eval_file, EVAL_HEADER)
        episodes_at = None if state is None else state["csv_bytes"]
        self._csv_file, episodes_whole = _open_csv(run_dir.episodes, episodes_at, CSV_HEADER)
        self._csv = csv.writer(self._csv_file)
        self._episode_columns = _columns(self._csv_file, CSV_HEADER)  # (start_frames came later)
        #: files found shorter than the checkpoint recorded, told to the user once the run starts
        self.short_files = [
            f.name
            for f, whole in ((run_dir.episodes, episodes_whole), (run_dir.evaluations, evals_whole))
            if not whole
        ]
        # metrics.csv: its header grows when a statistic first appears (_add_metrics_columns),
        # which moves every row, so a checkpoint counts its rows rather than its bytes
        self._metrics_columns: list[str] | None = None
        self._metrics_rows = 0
        if state is None:
            self._metrics_file, _ = _open_csv(run_dir.metrics, None, None)  # header: later
        elif "metrics_rows" in state:
            rows = _read_csv(run_dir.metrics) if run_dir.metrics.exists() else []
            self._metrics_rows = min(state["metrics_rows"], max(0, len(rows) - 1))
            # the rows the checkpoint counted, under the header as the file has it (grown after
            # the checkpoint, maybe); the rows after them are dropped (the run makes them again)
            kept = rows[: 1 + self._metrics_rows] if self._metrics_rows else []
            self._metrics_file = _replace_csv(run_dir.metrics, kept)
            if kept:
                self._metrics_columns = kept[0][2:]
        else:  # a checkpoint from before the row count: its byte offset
            self._metrics_file, _ = _open_csv(run_dir.metrics, state.get("metrics_bytes", 0), None)
            metrics_at = self._metrics_file.tell()
            if metrics_at:
                self._metrics_file.seek(0)
                rows = list(csv.reader(self._metrics_file))
                self._metrics_columns = rows[0][2:]
                self._metrics_rows = len(rows) - 1
                self._metrics_file.seek(metrics_at)
        self._metrics = csv.writer(self._metrics_file)
        self._sums: dict[str, list[float]] = {}
        self._last_metrics = time.perf_counter()
        self.t0 = time.perf_counter() - elapsed  # wall time continues across a resume
        tb: list[ScalarSink] = [ScalarWriter(run_dir.tensorboard)] if cfg.tensorboard else []
        self._tb = _Sinks([*tb, *sinks]) if tb or sinks else None
        self._live = cfg.progress and sys.stderr.isatty()
        self._bar: Any = None
        self._last_log = time.perf_counter()

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def rolling_return(self) -> float | None:
        return sum(self.returns) / len(self.returns) if self.returns else None

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def episode(self, worker: int, ep: Finished, step: int) -> bool:
        """Record one finished episode; True when the mean of the last ``window`` training
        episodes is at or above the target (with ``--stop-on train``, the first time marks the
        run solved)."""
        ret, length = ep.ret, ep.length
        self.episodes += 1
        self.returns.append(ret)
        self.global_step = max(self.global_step, step)
        wall = self.elapsed()
        start = "" if ep.start_frames is None else ep.start_frames
        row = [self.episodes, worker, f"{ret:.6g}", length, step, f"{wall:.3f}", start]
        self._csv.writerow(row[: self._episode_columns])
        mean = self.rolling_return
        if self._tb is not None and mean is not None:
            self._tb.add_scalar("episode/return", ret, step)
            self._tb.add_scalar("episode/length", length, step)
            self._tb.add_scalar(f"episode/rolling_return_{self.window}", mean, step)
        if self.hooks and mean is not None:
            event = EpisodeEvent(self.episodes, worker, ret, length, step, wall, mean, self.window)
            self.hooks.call("on_episode", event)
        reached = (
            self.target is not None
            and len(self.returns) == self.window
            and mean is not None
            and mean >= self.target
        )
        if reached and not self.solved and self.cfg.stop_on == "train":
            self.mark_solved(step, mean, "train")
        return reached

    def mark_solved(self, step: int, score: float | None, by: str) -> None:
        """The run met its stop rule at ``step`` with ``score``: by ``"train"``, the rolling
        training mean, or by ``"eval"``, the confirming evaluation's mean."""
        self.solved, self.solve_seconds, self.solve_steps = True, self.elapsed(), step
        self.solve_return, self.solved_by = score, by

    def evaluation(self, ev: Evaluation, keep: bool = False) -> bool:
        """Record an evaluation (a row of evaluations.csv, TensorBoard ``eval/*``); True when it
        is the best so far, or ``keep``: the one that met --stop-on eval's rule, whose
        parameters a solved run keeps even where an earlier confirmation had a higher mean
        (one that failed the rule's standard errors: its policy is not shown to score it).
        A re-screen played beside the kept model is the best where it beat the kept model on
        their starts (:attr:`Evaluation.beats_kept`); where it did not, the kept model's
        episodes join its score, which the next screen must beat to be re-screened."""
        self.last_eval = mean = ev.mean  # (the supervisor counts evaluations as it asks)
        self.screen_seconds += ev.screen_seconds
        beats = ev.beats_kept  # a re-screen played beside the kept model: the pair decides
        best = (
            keep or self.best_eval is None or (mean > self.best_eval[0] if beats is None else beats)
        )
        kept_mean = f"{statistics.fmean(ev.kept_returns):.6g}" if ev.kept_returns else ""
        row = [ev.index, ev.global_step, f"{ev.wall_seconds:.3f}", f"{mean:.6g}"]
        row += [f"{ev.std:.6g}", f"{min(ev.returns):.6g}", f"{max(ev.returns):.6g}"]
        row += [len(ev.returns), f"{ev.seconds:.3f}", ev.stage, kept_mean, int(best)]
        self._evals.writerow(row[: self._eval_columns])
        self._eval_file.flush()
        if self._tb is not None:
            for tag, v in (("mean_return", mean), ("std_return", ev.std)):
                self._tb.add_scalar(f"eval/{tag}", v, ev.global_step)
            self._tb.add_scalar("eval/min_return", min(ev.returns), ev.global_step)
            self._tb.add_scalar("eval/max_return", max(ev.returns), ev.global_step)
            self._tb.add_scalar("eval/seconds", ev.seconds, ev.global_step)
        if best:
            self.best_eval = (mean, ev.global_step, len(ev.returns))
            return True
        if beats is False:  # the kept model's score: the mean of all its unselected episodes
            assert self.best_eval is not None  # (a first evaluation is the best)
            kept, step, n = self.best_eval
            more = len(ev.kept_returns)
            self.best_eval = ((kept * n + sum(ev.kept_returns)) / (n + more), step, n + more)
        return False

    # ------------------------------------------------------------------ diagnostics
    def add_stats(self, stats: StatSums) -> None:
        """A worker's sums since its last report; averaged over every update in the interval."""
        for k, (s, n) in stats.items():
            acc = self._sums.setdefault(k, [0.0, 0])
            acc[0] += s
            acc[1] += n

    def learning_rate(self) -> float:
        return scheduled_lr(self.cfg, self.global_step, self.elapsed())

    def write_metrics(self) -> None:
        """One row of metrics.csv: global_step, wall_seconds, then each statistic's mean over
        the interval (named as in TensorBoard, with '/' as '_')."""
        self._last_metrics = time.perf_counter()
        means = {k: s / n for k, (s, n) in self._sums.items() if n}
        if not means:
            return
        means["train/learning_rate"] = self.learning_rate()
        if self.cfg.entropy_final is not None:
            means["train/entropy_coef"] = self.cfg.entropy_coef_at(self.global_step, self.cfg.steps)
        self._sums = {}
        # the columns by their header's names: a resumed run reads them back from the header
        named = {k.replace("/", "_"): v for k, v in means.items()}
        if self._metrics_columns is None:
            self._metrics_columns = sorted(named)
            self._metrics.writerow(["global_step", "wall_seconds", *self._metrics_columns])
        elif added := sorted(set(named) - set(self._metrics_columns)):
            self._add_metrics_columns(added)
        wall = self.elapsed()
        row = [self.global_step, f"{wall:.3f}"]
        row += [f"{named[k]:.6g}" if k in named else "" for k in self._metrics_columns]
        self._metrics.writerow(row)
        self._metrics_rows += 1
        if self._tb is not None:
            for k, v in means.items():
                self._tb.add_scalar(k, v, self.global_step)
        if self.hooks:
            self.hooks.call("on_update", UpdateEvent(self.global_step, wall, means))

    def _add_metrics_columns(self, added: list[str]) -> None:
        """Extend metrics.csv by ``added`` columns, the rows so far blank in them (as SB3's
        CSV logger does), where a header fixed at the first row would drop them: on Ray the
        first row is the server's alone (learning rate, policy lag) and the learners' losses
        come after it; a run resumed with an entropy schedule adds its coefficient."""
        assert self._metrics_columns is not None
        self._metrics_file.close()  # (its rows flushed: read back below)
        rows = _read_csv(self.run_dir.metrics)
        self._metrics_columns += added
        rows[0] = ["global_step", "wall_seconds", *self._metrics_columns]
        rows[1:] = [row + [""] * (len(rows[0]) - len(row)) for row in rows[1:]]
        self._metrics_file = _replace_csv(self.run_dir.metrics, rows)
        self._metrics = csv.writer(self._metrics_file)

    def state_dict(self) -> dict:
        self._csv_file.flush()
        self._metrics_file.flush()
        self._eval_file.flush()
        return {
            "csv_bytes": self._csv_file.tell(),
            "metrics_rows": self._metrics_rows,
            "evaluations_bytes": self._eval_file.tell(),
            "evaluations": self.evaluations,
            "last_eval": self.last_eval,
            "screen_seconds": self.screen_seconds,
            "tries": self.tries,
            # where this run's schedule last took up (a later resume goes on from it)
            "lr_from": None if self.cfg.lr_from is None else dataclasses.asdict(self.cfg.lr_from),
            "best_eval": self.best_eval,
            "returns": list(self.returns),
            "episodes": self.episodes,
            "solved": self.solved,
            "solve_seconds": self.solve_seconds,
            "solve_steps": self.solve_steps,
            "solve_return": self.solve_return,
            "solved_by": self.solved_by,
            "global_step": self.global_step,
            "elapsed": self.elapsed(),
        }

    def scalar(self, tag: str, value: float, step: int) -> None:
        if self._tb is not None:
            self._tb.add_scalar(tag, value, step)

    # ------------------------------------------------------------------ display
    def line(self) -> str:
        elapsed = self.elapsed()
        sps = self.global_step / max(elapsed, 1e-9)
        ret = self.rolling_return
        ret_s = "-" if ret is None else f"{ret:.1f}"
        frames = ""
        if self.frames_per_step > 1:
            f = self.global_step * self.frames_per_step
            frames = f" frames {f:,} ({sps * self.frames_per_step:,.0f}/s)"
        evaluated = "" if self.last_eval is None else f"  eval {self.last_eval:.1f}"
        return (
            f"[{elapsed:6.1f}s] steps {self.global_step:,}/{self.total_steps:,} "
            f"({sps:,.0f}/s){frames}  episodes {self.episodes:,}  "
            f"return(last {self.window}) {ret_s}{evaluated}"
        )

    def log(self, message: str) -> None:
        """A line for the user that does not tear the progress bar."""
        if self._bar is not None:
            self._bar.console.print(message, highlight=False, markup=False)
        else:
            print(message, file=sys.stderr, flush=True)

    def start_display(self) -> None:
        if not self._live:
            return
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(
            TextColumn("[bold]training"),
            BarColumn(),
            TextColumn("{task.fields[line]}"),
            TimeElapsedColumn(),
            refresh_per_second=4,
        )
        self._bar.start()
        self._task = self._bar.add_task("train", total=self.total_steps, line="")

    def refresh(self, global_step: int) -> None:
        self.global_step = max(self.global_step, global_step)
        now = time.perf_counter()
        if now - self._last_metrics >= METRICS_EVERY:
            self.write_metrics()
        if self._bar is not None:
            self._bar.update(self._task, completed=self.global_step, line=self.line())
        elif now - self._last_log >= 5.0:
            self._last_log = now
            print(self.line(), file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._csv_file.closed:
            return
        self.write_metrics()
        if self._bar is not None:
            self._bar.update(self._task, completed=self.global_step, line=self.line())
            self._bar.stop()
        self._csv_file.close()
        self._metrics_file.close()
        self._eval_file.close()
        if self._tb is not None:
            self._tb.close()
