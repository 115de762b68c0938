"""What workers tell the main process: small frozen records, matched by type.

They cross a pipe (processes), a queue (threads) or come back from the parameter server (Ray),
so they hold plain Python and numpy values only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

#: running sums of a worker's learner statistics: name -> (sum, count)
StatSums = dict[str, tuple[float, int]]


@dataclass(frozen=True)
class GlobalSnapshot:
    """The global state as plain arrays: what a checkpoint holds and a resume restores."""

    params: np.ndarray
    optimizer: dict[str, np.ndarray]
    target_params: np.ndarray | None
    target_period: int  # the last target_update period at which theta^- was refreshed
    counters: np.ndarray  # int64 (3, workers): steps, episodes, non-finite updates
    obs_stats: np.ndarray | None = None  # the observation normaliser's [count, mean, var]
    # what obs_stats was merged from on shared memory, (start, one row per worker), so that a
    # resume with as many workers carries on bit for bit (None: restore from obs_stats)
    obs_parts: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def steps(self) -> int:
        return int(self.counters[0].sum())


@dataclass(frozen=True)
class WorkerSnapshot:
    """A worker's own state (RNG, envs, algorithm state) and the global state as it left it."""

    worker: dict[str, Any] | None
    glob: GlobalSnapshot


class Finished(NamedTuple):
    """One finished episode (a whole game on Atari)."""

    ret: float
    length: int
    #: what the env reported of the episode's start (``info["start_frames"]``; None where it
    #: reports nothing): on Atari, the emulator frames its reset played before the first action
    start_frames: int | None = None


@dataclass(frozen=True)
class Episodes:
    """Episodes that ended in a rollout, with the worker's learner statistics since its last
    report."""

    worker: int
    episodes: list[Finished]
    global_step: int
    stats: StatSums


@dataclass(frozen=True)
class Snapshot:
    """A worker's answer to checkpoint request ``request``."""

    worker: int
    incarnation: int
    request: int
    snapshot: WorkerSnapshot


@dataclass(frozen=True)
class NonFinite:
    """A non-finite loss or gradient that was not applied."""

    worker: int
    global_step: int
    what: str


@dataclass(frozen=True)
class Failed:
    """The worker's loop raised. ``diverged``: rollouts in a row with non-finite updates (a
    restart would not help)."""

    worker: int
    incarnation: int
    text: str
    traceback: str
    diverged: bool = False


@dataclass(frozen=True)
class Lost:
    """The worker died without a report, hung, or its machine went away (found by the run)."""

    worker: int
    incarnation: int  # the one found lost: a later one (restarted meanwhile) is not
    why: str

    @classmethod
    def hung(cls, worker: int, incarnation: int, timeout: float) -> Lost:
        """Alive but silent for ``--worker-timeout`` seconds (every backend says it alike)."""
        return cls(worker, incarnation, f"sent no update for {timeout:g} s (hung)")


@dataclass(frozen=True)
class Done:
    """The worker's loop ended (last message of an incarnation)."""

    worker: int
    incarnation: int
    snapshot: WorkerSnapshot | None


@dataclass(frozen=True)
class Notice:
    """A line for the log from the run itself (e.g. a worker waiting for a CPU)."""

    text: str


Message = Episodes | Snapshot | NonFinite | Failed | Lost | Done | Notice
