"""One training run of a trial: an ``asyncrl train`` process, followed through the rows it
appends to its ``evaluations.csv``, and stopped with SIGINT (the run's own clean stop: a final
checkpoint, its files closed) when the trial is pruned or the tune interrupted.

A whole process, not :func:`asyncrl.train` in this one: the run owns its signal handlers, its
worker processes and its memory, so SIGINT stops exactly one run, a crash or a leak ends with
it, and the same command runs unchanged on a Ray node (:class:`TrialHost`). Each run starts in
a session of its own, so that a Ctrl-C at the terminal reaches the tune alone, which forwards
one SIGINT to the run it is waiting on (two in a row would make the run exit without its final
checkpoint: :func:`asyncrl.trainer._signals_stop`).
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Protocol

#: seconds a run gets to stop after SIGINT (its final checkpoint) before it is killed
STOP_GRACE_S = 60.0


class Process(Protocol):
    """What a trial needs of one run, here or on a Ray node."""

    log: Path  # its output (on this machine once it has ended)

    def start(self) -> None: ...
    def poll(self) -> tuple[list[dict[str, float]], int | None]:
        """The evaluations finished since the last call, and the exit code (None: running)."""
        ...

    def interrupt(self) -> None: ...
    def stop(self, grace: float = STOP_GRACE_S) -> None:
        """Interrupt, wait up to ``grace`` seconds, then kill (what is left of) the run."""
        ...

    def finish(self) -> dict[str, Any] | None:
        """After the exit: the run's summary (None where it wrote none), its files in place."""
        ...

    def log_tail(self) -> str:
        """The last line the run printed on its way out: its error, where it failed."""
        ...


def train_command(config: Path, run_dir: Path, seed: int, preset: str) -> list[str]:
    """The ``asyncrl train`` command of one run of a trial: the trial's resolved settings as a
    configuration file over the tune's preset (the file leaves out the options it leaves unset,
    which another preset could set), the seed and the directory its own. No progress bar (no
    terminal), no TensorBoard scalars (the tune reads evaluations.csv; best.toml keeps the
    user's choice)."""
    return [
        sys.executable, "-m", "asyncrl.cli", "train", "--config", str(config), "--preset", preset,
        "--seed", str(seed), "--run-dir", str(run_dir), "--no-progress", "--no-tensorboard",
    ]  # fmt: skip


def last_line(log: Path) -> str:
    """The last line a run printed: its error, where it failed."""
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""


class EvalFollower:
    """The rows appended to an ``evaluations.csv`` since the last read: whole lines only (the
    run flushes each row as it writes it; a read may catch one half written)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.header: list[str] | None = None

    def read(self) -> list[dict[str, float]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        rows = []
        for line in data[:end].decode().splitlines():
            cells = next(csv.reader(io.StringIO(line)), [])
            if self.header is None:
                self.header = cells
                continue
            if len(cells) != len(self.header):  # a row cut short
                continue
            numbers = zip(self.header, map(_float, cells), strict=True)
            row = {k: v for k, v in numbers if v is not None}
            if {"global_step", "wall_seconds", "mean"} <= row.keys():  # else nothing to report
                rows.append(row)
        return rows


def _float(cell: str) -> float | None:
    """A cell's number; None for a blank or a word (evaluations.csv's ``stage``)."""
    try:
        return float(cell)
    except ValueError:
        return None


class TrainProcess:
    """A run on this machine, in ``run_dir``, its output in ``log``."""

    def __init__(self, config: Path, run_dir: Path, seed: int, log: Path, preset: str) -> None:
        self.cmd = train_command(config, run_dir, seed, preset)
        self.run_dir, self.log = run_dir, log
        self.follower = EvalFollower(run_dir / "evaluations.csv")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "wb") as out:  # the child holds its own descriptor
            self.proc = subprocess.Popen(
                self.cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def poll(self) -> tuple[list[dict[str, float]], int | None]:
        assert self.proc is not None
        code = self.proc.poll()  # first: the rows of a run that has exited are all there
        return self.follower.read(), code

    def interrupt(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.interrupt()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self._kill()
        except KeyboardInterrupt:  # a second Ctrl-C: no waiting for the checkpoint
            self._kill()
            raise

    def _kill(self) -> None:
        assert self.proc is not None
        try:  # the run's session: its worker processes too
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            self.proc.kill()
        self.proc.wait()

    def finish(self) -> dict[str, Any] | None:
        # no trial's run is resumed: its checkpoint (an Atari run's is large) goes, as a Ray
        # node's does (_LEFT_ON_NODE); its model files and CSVs stay for eval and plot
        if self.proc is not None and self.proc.poll() is not None:
            (self.run_dir / "checkpoint.ckpt").unlink(missing_ok=True)
        try:
            summary = json.loads((self.run_dir / "summary.json").read_text())
        except (OSError, ValueError):
            return None
        return summary if isinstance(summary, dict) else None

    def log_tail(self) -> str:
        return last_line(self.log)


# ---------------------------------------------------------------------- on a Ray node

#: files of a run that stay on its node: the checkpoint (a pruned trial is not resumed) and
#: the lock; the rest (summary, CSVs, configs, the models) come back to the tune's directory
_LEFT_ON_NODE = {"checkpoint.ckpt", ".lock"}


class TrialHost:
    """A Ray actor that runs one run at a time on its node, in a folder of its own, for a
    driver that follows it through :class:`RemoteProcess`: the same command as here."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="asyncrl-tune-"))
        self.run: TrainProcess | None = None

    def start(self, config_text: str, name: str, seed: int, preset: str) -> None:
        config = self.tmp / f"{name}.toml"
        config.write_text(config_text)
        self.run = TrainProcess(config, self.tmp / name, seed, self.tmp / f"{name}.log", preset)
        self.run.start()

    def poll(self) -> tuple[list[dict[str, float]], int | None]:
        assert self.run is not None
        return self.run.poll()

    def interrupt(self) -> None:
        if self.run is not None:
            self.run.interrupt()

    def stop(self, grace: float) -> None:
        if self.run is not None:
            self.run.stop(grace)

    def files(self) -> dict[str, bytes]:
        """The run's files (but the checkpoint), and its log as ``LOG``."""
        assert self.run is not None
        out = {"LOG": self.run.log.read_bytes() if self.run.log.is_file() else b""}
        if self.run.run_dir.is_dir():
            for f in self.run.run_dir.iterdir():
                if f.is_file() and f.name not in _LEFT_ON_NODE and not f.name.endswith(".tmp"):
                    out[f.name] = f.read_bytes()
        return out

    def close(self) -> None:
        if self.run is not None:
            self.run.stop(STOP_GRACE_S)
        shutil.rmtree(self.tmp, ignore_errors=True)


class RemoteProcess:
    """A run on a Ray node (a :class:`TrialHost` actor), seen from the tune as a
    :class:`TrainProcess`: its files come back to ``run_dir`` when it ends."""

    def __init__(
        self, host: Any, config_text: str, run_dir: Path, seed: int, log: Path, preset: str
    ) -> None:
        self.host, self.config_text, self.seed, self.preset = host, config_text, seed, preset
        self.run_dir, self.log = run_dir, log
        self.code: int | None = None
        self.ray: Any = __import__("ray")

    def start(self) -> None:
        name = self.run_dir.name
        self.ray.get(self.host.start.remote(self.config_text, name, self.seed, self.preset))

    def poll(self) -> tuple[list[dict[str, float]], int | None]:
        rows, self.code = self.ray.get(self.host.poll.remote())
        return rows, self.code

    def interrupt(self) -> None:
        self.ray.get(self.host.interrupt.remote())

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        self.ray.get(self.host.stop.remote(grace))

    def finish(self) -> dict[str, Any] | None:
        files = self.ray.get(self.host.files.remote())
        self.log.write_bytes(files.pop("LOG"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (self.run_dir / name).write_bytes(data)
        try:
            summary = json.loads(files["summary.json"])
        except (KeyError, ValueError):
            return None
        return summary if isinstance(summary, dict) else None

    def log_tail(self) -> str:
        return last_line(self.log)


__all__ = [
    "STOP_GRACE_S",
    "EvalFollower",
    "Process",
    "RemoteProcess",
    "TrainProcess",
    "TrialHost",
    "train_command",
]
