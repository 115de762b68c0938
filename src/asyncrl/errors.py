"""Errors a user sees. The CLI prints each as one line: a :class:`UserError` exits with code 2,
a :class:`TrainingError` with 1, :class:`Interrupted` with 128 + the signal number."""

from __future__ import annotations

import signal
from pathlib import Path


class UserError(Exception):
    """Bad input: the message names the problem and the fix."""


class EnvFault(RuntimeError):
    """The env produced something the learner must not take (a non-finite value, an action mask
    with no valid action): the worker stops with one line naming it."""


class TrainingError(RuntimeError):
    """The run stopped on an error (a worker fault past the restart limit, divergence, a lost
    parameter server); ``details`` holds the worker's traceback for ``--debug``."""

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details


class Interrupted(Exception):
    """SIGINT or SIGTERM stopped the run after a final checkpoint."""

    def __init__(self, signum: int, run_dir: Path, step: int):
        self.signum, self.run_dir, self.step = signum, run_dir, step
        name = signal.Signals(signum).name
        super().__init__(
            f"stopped by {name} at step {step:,}; checkpoint saved. "
            f"Resume with: asyncrl train --resume {run_dir}"
        )
