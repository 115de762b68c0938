"""The run directory: it owns the file names and the existence checks. ``train`` writes it;
``load``, ``eval`` and ``plot`` read it without importing the trainer."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asyncrl.errors import UserError


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
            while p.exists():  # two runs started in the same second
                p, i = Path(f"{base}-{i}"), i + 1
        else:
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
        """An existing run directory holding the file ``needs`` (config, model, episodes)."""
        run = cls(Path(path))
        prefix = f"{flag}: " if flag else ""
        if not run.path.is_dir():
            raise UserError(
                f"{prefix}run directory {run.path} does not exist; pass the RUN_DIR of a "
                "training run"
            )
        file = getattr(run, needs)
        if not file.is_file():
            what = "a finished training run" if needs == "model" else "a training run"
            raise UserError(f"{prefix}{run.path} has no {file.name}; pass the RUN_DIR of {what}")
        return run

    # ------------------------------------------------------------------ reading and writing
    def read_config(self) -> dict[str, Any]:
        try:
            return json.loads(self.config.read_text())
        except (OSError, ValueError) as e:
            raise UserError(f"cannot read {self.config} ({e})") from None

    def write_json(self, file: Path, data: dict[str, Any]) -> None:
        file.write_text(json.dumps(data, indent=2) + "\n")
