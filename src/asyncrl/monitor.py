"""The episode stream's consumer in the main process: progress display, ``episodes.csv``,
TensorBoard scalars and the stop rule."""

from __future__ import annotations

import collections
import csv
import sys
import time
from pathlib import Path
from typing import Any

from asyncrl.tbevents import ScalarWriter

CSV_HEADER = ["episode", "worker", "return", "length", "global_step", "wall_seconds"]


class Monitor:
    """Counts episodes, keeps the rolling mean, decides when the target is reached."""

    def __init__(
        self,
        run_dir: Path,
        *,
        total_steps: int,
        target_return: float | None,
        window: int,
        progress: bool,
        tensorboard: bool,
        state: dict | None = None,
    ):
        self.total_steps = total_steps
        self.target = target_return
        self.window = window
        self.returns: collections.deque[float] = collections.deque(maxlen=window)
        self.episodes = 0
        self.solved = False
        self.solve_seconds: float | None = None
        self.solve_steps: int | None = None
        self.global_step = 0
        elapsed = 0.0
        path = run_dir / "episodes.csv"
        if state is None:
            self._csv_file = open(path, "w", newline="")  # noqa: SIM115 (closed in close())
            csv.writer(self._csv_file).writerow(CSV_HEADER)
        else:
            # Resume: rows past the checkpoint are dropped (the resumed run makes them again),
            # every row before it stays; new rows are appended.
            self._csv_file = open(path, "r+", newline="")  # noqa: SIM115
            self._csv_file.truncate(state["csv_bytes"])
            self._csv_file.seek(state["csv_bytes"])
            self.returns.extend(state["returns"][-window:])
            self.episodes = state["episodes"]
            self.solved = state["solved"]
            self.solve_seconds, self.solve_steps = state["solve_seconds"], state["solve_steps"]
            self.global_step = state["global_step"]
            elapsed = state["elapsed"]
        self.t0 = time.perf_counter() - elapsed  # wall time continues across a resume
        self._csv = csv.writer(self._csv_file)
        self._tb = ScalarWriter(run_dir / "tb") if tensorboard else None
        self._live = progress and sys.stderr.isatty()
        self._bar: Any = None
        self._last_log = time.perf_counter()

    @property
    def rolling_return(self) -> float | None:
        return sum(self.returns) / len(self.returns) if self.returns else None

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def episode(self, worker: int, ret: float, length: int, step: int) -> bool:
        """Record one finished episode; True when this one makes the stop rule fire."""
        self.episodes += 1
        self.returns.append(ret)
        self.global_step = max(self.global_step, step)
        wall = self.elapsed()
        self._csv.writerow([self.episodes, worker, f"{ret:.6g}", length, step, f"{wall:.3f}"])
        mean = self.rolling_return
        if self._tb is not None:
            self._tb.add_scalar("episode/return", ret, step)
            self._tb.add_scalar("episode/length", length, step)
            self._tb.add_scalar(f"episode/rolling_return_{self.window}", mean, step)
        if (
            not self.solved
            and self.target is not None
            and len(self.returns) == self.window
            and mean >= self.target
        ):
            self.solved, self.solve_seconds, self.solve_steps = True, wall, step
            return True
        return False

    def state_dict(self) -> dict:
        self._csv_file.flush()
        return {
            "csv_bytes": self._csv_file.tell(),
            "returns": list(self.returns),
            "episodes": self.episodes,
            "solved": self.solved,
            "solve_seconds": self.solve_seconds,
            "solve_steps": self.solve_steps,
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
        return (
            f"[{elapsed:6.1f}s] steps {self.global_step:,}/{self.total_steps:,} "
            f"({sps:,.0f}/s)  episodes {self.episodes:,}  "
            f"return(last {self.window}) {ret_s}"
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
        if self._bar is not None:
            self._bar.update(self._task, completed=self.global_step, line=self.line())
        elif now - self._last_log >= 5.0:
            self._last_log = now
            print(self.line(), file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=self.global_step, line=self.line())
            self._bar.stop()
        self._csv_file.close()
        if self._tb is not None:
            self._tb.close()
