"""The parameter server: global parameters, the shared optimizer's statistics, theta^-, the
counters and the episode stream, in one plain (serial) Ray actor (or K, one per slice of the
parameters: :mod:`~asyncrl.backends.ray.shards`).

A call's gradients are applied one optimizer step each, and the call is answered with the
current parameters, so a call holds up the next for ``ray_batch`` optimizer steps. Workers
never wait for each other, only for the server.

Every pushed gradient carries the parameter version it was computed from; the server records
the lag (versions behind) and, with ``--max-staleness K``, drops gradients more than K versions
old and counts them. With several servers the first one's version is the version: it decides
which of a call's gradients apply, and the others apply those, no more and no fewer
(:meth:`ParameterServer.push_pull_deciding`), so that no gradient is applied to some slices and
dropped on others (each server's own count of versions differs from the others' while calls
from different workers reach them in different orders).

``--ray-grad-dtype bfloat16`` gradients arrive as int16 rows, the bit patterns of bfloat16
(numpy has no bfloat16): :func:`unpack_grads`. The server measures its own load (``statistics``:
CPU time, arrays in and out) for the summary.
"""

from __future__ import annotations

import collections
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from asyncrl.messages import Episodes, GlobalSnapshot, Message
from asyncrl.models import merge_obs_stats
from asyncrl.state import EPISODES, NONFINITE, STEPS, GlobalState

try:
    import ray
except ImportError:  # pragma: no cover - the extra is not installed
    ray = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from asyncrl.backends import BackendSettings


SERVER_NAME = "asyncrl-parameter-server"


class ParameterServer:
    """Global parameters, shared optimizer, counters and the episode stream (one Ray actor)."""

    def __init__(self, cfg: BackendSettings, snap: GlobalSnapshot):
        from asyncrl.worker import limit_threads

        limit_threads()
        self.cfg = cfg
        self.state = GlobalState.from_snapshot(cfg, snap)
        # A serial actor: plain ints count (a torch index costs microseconds per call); the
        # state's counter tensor is brought up to date when a snapshot is taken.
        self.steps = self.state.steps()
        self.episodes = self.state.episodes()
        self.nonfinite = self.state.nonfinite()
        self.version = 0
        self.stream: list[Message] = []
        self.lags: collections.Counter[int] = collections.Counter()
        self.lag_sum, self.lag_count = 0, 0  # since the last drain: the policy lag statistic
        self.dropped = 0
        self.stop = False
        # workers whose calls arrived since the last drain: the run's watch for hung workers
        self.heard: set[int] = set()
        # The server's load, for the summary: arrays in and out (what crosses the object store)
        # and the CPU time of this actor's process, Ray's own threads (deserialising, replying)
        # included, against wall time since it started
        self.bytes_in, self.bytes_out = 0, 0
        self.started, self.cpu_started = time.monotonic(), time.process_time()
        # the run's elapsed seconds as last sent by the main process, and when, by this
        # process's clock (set_clock): a schedule over time reads it at each update
        self.clock_at = (0.0, time.monotonic())

    def pull(self, want_target: bool) -> tuple:
        target = self.state.target_params
        target_np = target.numpy() if (want_target and target is not None) else None
        stats = self.obs_stats()
        params = self.state.params.numpy()
        self.bytes_out += sum(a.nbytes for a in (params, target_np, stats) if a is not None)
        return self.version, params, target_np, self.steps, self.stop, stats

    def obs_stats(self) -> np.ndarray | None:
        """The observation statistics every worker normalises with (None: not normalised)."""
        stats = self.state.obs_stats
        return None if stats is None else stats.numpy()

    def push(
        self,
        grad: torch.Tensor | np.ndarray | None,
        version: int,
        n_steps: int,
        worker: int,
        admitted: bool | None = None,
    ) -> int:
        """Count ``n_steps``; apply ``grad`` (None: non-finite, counted) unless it is more than
        ``--max-staleness`` versions behind, or unless ``admitted`` (the first server's
        decision, taken as it is) says no. Returns the step count."""
        self.heard.add(worker)
        self._push(grad, version, n_steps, admitted)
        return self.steps

    def _push(
        self,
        grad: torch.Tensor | np.ndarray | None,
        version: int,
        n_steps: int,
        admitted: bool | None,
    ) -> bool:
        self.steps += n_steps
        if grad is None:
            self.nonfinite += 1
            return False
        if admitted is None:
            admitted = self._admit(version)
        elif not admitted:
            self.dropped += 1
        if not admitted:
            return False
        if isinstance(grad, np.ndarray):
            grad = torch.tensor(grad)  # a copy: Ray hands back read-only arrays
        self.state.apply_update(self.cfg, grad, self.steps, self.elapsed())
        self.version += 1
        return True

    def _admit(self, version: int) -> bool:
        """Record the lag of a gradient computed from ``version``; whether it is applied."""
        lag = self.version - version
        self.lags[lag] += 1
        self.lag_sum, self.lag_count = self.lag_sum + lag, self.lag_count + 1
        if self.cfg.max_staleness is not None and lag > self.cfg.max_staleness:
            self.dropped += 1
            return False
        return True

    def push_pull(
        self,
        grads: np.ndarray | None,
        meta: list,
        reports: list[Message],
        worker: int,
        want_target: bool,
        obs_stats: np.ndarray | None = None,
        admitted: list[bool] | None = None,
    ) -> tuple:
        """A worker's one call per ``--ray-batch`` rollouts: their gradients (rows of one
        contiguous array; ``meta`` holds (finite, version, env steps) per row), each applied as
        an update of its own, the messages of those rollouts (episodes and statistics,
        non-finite updates) and the statistics of their observations in; the current
        parameters (and statistics) out. ``admitted``: which rows to apply, as the first server
        decided (:meth:`push_pull_deciding`); None: this server decides."""
        self._take(grads, meta, reports, worker, obs_stats, admitted)
        return self.pull(want_target)

    def push_pull_deciding(
        self,
        grads: np.ndarray | None,
        meta: list,
        reports: list[Message],
        worker: int,
        want_target: bool,
        obs_stats: np.ndarray | None = None,
    ) -> tuple[tuple, list[bool]]:
        """:meth:`push_pull` on the first of several servers under ``--max-staleness``, with a
        second return (called with ``num_returns=2``): which rows it applied. The other servers
        take that object as their ``admitted`` (Ray runs their part of the call once it
        exists), so each gradient is applied to every slice or to none."""
        admitted = self._take(grads, meta, reports, worker, obs_stats, None)
        return self.pull(want_target), admitted

    def _take(
        self,
        grads: np.ndarray | None,
        meta: list,
        reports: list[Message],
        worker: int,
        obs_stats: np.ndarray | None,
        admitted: list[bool] | None,
    ) -> list[bool]:
        self.heard.add(worker)
        self.bytes_in += sum(a.nbytes for a in (grads, obs_stats) if a is not None)
        if obs_stats is not None and self.state.obs_stats is not None:
            merge_obs_stats(self.state.obs_stats, torch.from_numpy(obs_stats))
        rows = None if grads is None else unpack_grads(grads)
        applied = []
        for row, (finite, version, n_steps) in enumerate(meta):
            grad = rows[row] if finite and rows is not None else None
            decided = None if admitted is None else admitted[row]
            applied.append(self._push(grad, version, n_steps, decided))
        for msg in reports:
            if isinstance(msg, Episodes):
                self.episodes += len(msg.episodes)
            self.stream.append(msg)
        return applied

    def drain(self) -> tuple[list[Message], int, set[int]]:
        """The messages since the last drain (the policy lag's mean among them), the step,
        and the workers whose calls arrived since then."""
        out, self.stream = self.stream, []
        if self.lag_count:
            lag = {"train/policy_lag": (float(self.lag_sum), self.lag_count)}
            out.append(Episodes(-1, [], self.steps, lag))
            self.lag_sum, self.lag_count = 0, 0
        heard, self.heard = self.heard, set()
        return out, self.steps, heard

    def set_stop(self) -> None:
        self.stop = True

    def set_clock(self, elapsed: float) -> None:
        """The run's elapsed seconds (the main process's clock of --time-limit)."""
        self.clock_at = (elapsed, time.monotonic())

    def elapsed(self) -> float:
        """The run's elapsed seconds now: the last one sent, run on by this process's clock."""
        sent, at = self.clock_at
        return sent + time.monotonic() - at

    def snapshot(self) -> GlobalSnapshot:
        counters = self.state.counters
        counters[STEPS, 0], counters[EPISODES, 0] = self.steps, self.episodes
        counters[NONFINITE, 0] = self.nonfinite
        return self.state.snapshot()

    def node(self) -> str:
        """The id of the node this server runs on (it is pinned to the driver's)."""
        return ray.get_runtime_context().get_node_id()

    def statistics(self) -> dict[str, Any]:
        return {
            "lags": dict(self.lags),
            "dropped": self.dropped,
            "version": self.version,
            "seconds": time.monotonic() - self.started,
            "cpu_seconds": time.process_time() - self.cpu_started,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
        }


def unpack_grads(grads: np.ndarray) -> torch.Tensor:
    """A call's rows of gradients as float32 (a copy: Ray hands back read-only arrays); int16
    rows are the bit patterns of bfloat16 gradients (``--ray-grad-dtype bfloat16``: numpy has
    no bfloat16, so they travel as int16)."""
    rows = torch.from_numpy(grads.copy())
    return rows.view(torch.bfloat16).float() if grads.dtype == np.int16 else rows


__all__ = ["SERVER_NAME", "ParameterServer", "unpack_grads"]
