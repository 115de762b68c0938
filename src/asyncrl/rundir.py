"""The run directory: it owns the file names and the existence checks. ``train`` writes it;
``load``, ``eval`` and ``plot`` read it without importing the trainer."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from asyncrl.errors import UserError

#: the run directories' lock files this process holds: a forked child (a worker of the
#: processes backend) closes its copies, so that an orphaned worker does not hold a killed
#: run's directory
_HELD: set[IO[str]] = set()


def _close_locks_in_child() -> None:
    for f in _HELD:
        f.close()  # the child's descriptor only: the parent's lock stays
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_locks_in_child)


def write_atomically(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Write ``path`` through ``write`` into a file beside it, flushed to disk, then moved over
    it: a kill at any moment leaves the old file or the new one, and a reader (a resume,
    ``asyncrl eval``, ``asyncrl plot``) never sees one half written."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@dataclass(frozen=True)
class RunDir:
    path: Path

    # ------------------------------------------------------------------ file names
    @property
    def config(self) -> Path:
        return self.path / "config.json"

    @property
    def model(self) -> Path:
        return self.path / "model.pt"

    @property
    def best_model(self) -> Path:
        """The parameters with the best evaluation (``model.pt`` holds the last ones)."""
        return self.path / "best_model.pt"

    @property
    def evaluations(self) -> Path:
        return self.path / "evaluations.csv"

    @property
    def summary(self) -> Path:
        return self.path / "summary.json"

    @property
    def episodes(self) -> Path:
        return self.path / "episodes.csv"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.csv"

    @property
    def checkpoint(self) -> Path:
        return self.path / "checkpoint.ckpt"

    @property
    def tensorboard(self) -> Path:
        return self.path / "tb"

    def __str__(self) -> str:
        return str(self.path)

    # ------------------------------------------------------------------ opening
    @classmethod
    def create(cls, path: str | Path | None, env: str, algo: str) -> RunDir:
        """A new run directory; an existing non-empty one is never overwritten."""
        if path is None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            base = Path("runs") / f"{env.replace('/', '-').replace(':', '-')}-{algo}-{stamp}"
            p, i = base, 1
            while True:  # two runs started in the same second: the first to make it has it
                try:
                    p.mkdir(parents=True)
                    return cls(p)
                except FileExistsError:
                    p, i = Path(f"{base}-{i}"), i + 1
                except OSError as e:
                    raise UserError(f"--run-dir: cannot create {p}: {e.strerror}") from None
        p = Path(path)
        if p.exists() and (not p.is_dir() or any(p.iterdir())):
            raise UserError(
                f"--run-dir: {p} already exists and is not empty; choose a new directory, or "
                f"continue it with --resume {p} (nothing was overwritten)"
            )
        try:
            p.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"--run-dir: cannot create {p}: {e.strerror}") from None
        return cls(p)

    @classmethod
    def existing(cls, path: str | Path, needs: str = "config", flag: str = "") -> RunDir:
        """An existing run directory holding the file ``needs`` (config, episodes)."""
        run = cls(Path(path))
        prefix = f"{flag}: " if flag else ""
        if run.path.is_file():
            raise UserError(
                f"{prefix}{run.path} is a file; pass the RUN_DIR that holds it ({run.path.parent})"
            )
        if not run.path.is_dir():
            raise UserError(
                f"{prefix}run directory {run.path} does not exist; pass the RUN_DIR of a "
                "training run"
            )
        file = getattr(run, needs)
        if not file.is_file():
            raise UserError(
                f"{prefix}{run.path} has no {file.name}; pass the RUN_DIR of a training run"
            )
        return run

    # ------------------------------------------------------------------ one writer at a time
    @contextmanager
    def locked(self) -> Iterator[None]:
        """Held by the run that writes here, from before it reads its checkpoint until it
        ends: a second ``train --resume`` of the directory (or one of a run still going) is
        refused rather than resuming a stale checkpoint and interleaving its rows, checkpoints
        and model files with the first's. The lock is the kernel's (``flock``), released when
        the process ends, killed or not; forked workers close their copy of it
        (:func:`_close_locks_in_child`). Nothing is written to the file: a refused command
        leaves the directory as it was. Where the filesystem (or the OS) has no ``flock``, the
        run goes on unlocked."""
        try:
            import fcntl
        except ImportError:  # Windows
            yield
            return
        with open(self.path / ".lock", "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
            except BlockingIOError:
                raise UserError(
                    f"{self.path} is in use by another run (the process holding its .lock); "
                    "wait for it to end or stop it, or use another directory (nothing was "
                    "changed)"
                ) from None
            except OSError:  # ENOLCK, EOPNOTSUPP, ENOSYS: a filesystem without flock
                held = False
            if held:
                _HELD.add(f)
            try:
                yield
            finally:
                _HELD.discard(f)

    # ------------------------------------------------------------------ reading and writing
    def read_config(self) -> dict[str, Any]:
        try:
            config = json.loads(self.config.read_text())
        except (OSError, ValueError) as e:
            raise UserError(f"cannot read {self.config} ({e})") from None
        if not isinstance(config, dict):
            raise UserError(f"{self.config} is not a run's config (a JSON object of options)")
        return config

    def write_json(self, file: Path, data: dict[str, Any]) -> None:
        """Atomically (a resume rewrites config.json: half written, the run could not resume)."""
        text = json.dumps(data, indent=2) + "\n"
        write_atomically(file, lambda f: f.write(text.encode()))
