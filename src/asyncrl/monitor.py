"""The main process's side of a run: the episode stream drives the progress display,
``episodes.csv``, TensorBoard scalars and the stop rule."""

from __future__ import annotations

import collections
import csv
import queue
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asyncrl.tbevents import ScalarWriter


class WorkerError(RuntimeError):
    """A worker failed; the message names the worker and the error, ``details`` its traceback."""

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details


@dataclass
class RunStats:
    """What the monitor measured; the trainer turns it into ``summary.json``."""

    episodes: int = 0
    solved: bool = False
    solve_seconds: float | None = None
    solve_steps: int | None = None
    rolling_return: float | None = None
    returns: collections.deque = field(default_factory=collections.deque)


class Monitor:
    """Consumes worker messages until every worker is done."""

    def __init__(
        self,
        run_dir: Path,
        *,
        total_steps: int,
        target_return: float | None,
        window: int,
        num_workers: int,
        t0: float,
        progress: bool,
        tensorboard: bool,
    ):
        self.total_steps = total_steps
        self.target = target_return
        self.window = window
        self.num_workers = num_workers
        self.t0 = t0
        self.stats = RunStats(returns=collections.deque(maxlen=window))
        self.global_step = 0
        self._csv_file = open(run_dir / "episodes.csv", "w", newline="")  # noqa: SIM115
        self._csv = csv.writer(self._csv_file)
        self._csv.writerow(["episode", "worker", "return", "length", "global_step", "wall_seconds"])
        self._tb = ScalarWriter(run_dir / "tb") if tensorboard else None
        self._live = progress and sys.stderr.isatty()
        self._bar: Any = None
        self._last_log = t0
        self._worker_traceback = ""

    # ------------------------------------------------------------------ consuming messages
    def run(self, q: Any, stop: Any, alive: Any, step_counter: Any) -> None:
        """Drain ``q`` until all workers said done; set ``stop`` when the stop rule fires.

        ``alive()`` lists the workers that still run: one that died without saying done
        (killed by a signal, say) is an error, not a silent loss of an actor.
        """
        done: set[int] = set()
        errors: list[str] = []
        self._start_display()
        try:
            while len(done) < self.num_workers:
                try:
                    msg = q.get(timeout=0.1)
                except queue.Empty:
                    self.global_step = max(self.global_step, int(step_counter.value))
                    self._check_dead(q, alive(), done, errors, stop)
                    self._refresh()
                    continue
                self._handle(msg, done, errors, stop)
                self._refresh()
        finally:
            self._stop_display()
            self._csv_file.close()
            if self._tb is not None:
                self._tb.close()
        if errors:
            raise WorkerError(errors[0], self._worker_traceback)

    def _check_dead(
        self, q: Any, alive: list[bool], done: set[int], errors: list[str], stop: Any
    ) -> None:
        dead = [i for i, a in enumerate(alive) if not a and i not in done]
        if not dead:
            return
        while True:  # a dead worker's last messages may still be in flight
            try:
                self._handle(q.get(timeout=0.2), done, errors, stop)
            except queue.Empty:
                break
        for i in dead:
            if i not in done:
                errors.append(f"worker {i} died without a report (killed by a signal?)")
                done.add(i)
                stop.set()

    def _handle(self, msg: tuple, done: set[int], errors: list[str], stop: Any) -> None:
        kind = msg[0]
        if kind == "episodes":
            _, worker, finished, step = msg
            self.global_step = max(self.global_step, step)
            for ret, length in finished:
                self._episode(worker, ret, length, step, stop)
        elif kind == "done":
            done.add(msg[1])
        elif kind == "error":
            _, worker, text, tb = msg
            errors.append(f"worker {worker} failed: {text}")
            self._worker_traceback = self._worker_traceback or tb
            stop.set()

    def _episode(self, worker: int, ret: float, length: int, step: int, stop: Any) -> None:
        s = self.stats
        s.episodes += 1
        s.returns.append(ret)
        wall = time.perf_counter() - self.t0
        self._csv.writerow([s.episodes, worker, f"{ret:.6g}", length, step, f"{wall:.3f}"])
        s.rolling_return = sum(s.returns) / len(s.returns)
        if self._tb is not None:
            self._tb.add_scalar("episode/return", ret, step)
            self._tb.add_scalar("episode/length", length, step)
            self._tb.add_scalar(f"episode/rolling_return_{self.window}", s.rolling_return, step)
        if (
            not s.solved
            and self.target is not None
            and len(s.returns) == self.window
            and s.rolling_return >= self.target
        ):
            s.solved = True
            s.solve_seconds = wall
            s.solve_steps = step
            stop.set()

    # ------------------------------------------------------------------ display
    def _line(self) -> str:
        elapsed = time.perf_counter() - self.t0
        sps = self.global_step / max(elapsed, 1e-9)
        ret = self.stats.rolling_return
        ret_s = "-" if ret is None else f"{ret:.1f}"
        return (
            f"[{elapsed:6.1f}s] steps {self.global_step:,}/{self.total_steps:,} "
            f"({sps:,.0f}/s)  episodes {self.stats.episodes:,}  "
            f"return(last {self.window}) {ret_s}"
        )

    def _start_display(self) -> None:
        if not self._live:
            return
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(
            TextColumn("[bold]training"),
            BarColumn(),
            TextColumn("{task.fields[line]}"),
            TimeElapsedColumn(),
            refresh_per_second=4,
            transient=False,
        )
        self._bar.start()
        self._task = self._bar.add_task("train", total=self.total_steps, line="")

    def _refresh(self) -> None:
        now = time.perf_counter()
        if self._bar is not None:
            self._bar.update(self._task, completed=self.global_step, line=self._line())
        elif now - self._last_log >= 5.0:
            self._last_log = now
            print(self._line(), file=sys.stderr, flush=True)

    def _stop_display(self) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=self.global_step, line=self._line())
            self._bar.stop()
