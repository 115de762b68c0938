"""The worker's side of the parameter server: :class:`RayStore`, the
:class:`~asyncrl.worker.Store` of a worker actor.

Parameters and gradients travel as flat contiguous float32 arrays (gradients optionally as
bfloat16), never as dicts of small tensors. A Ray call costs about a millisecond of CPU, so a
worker sends the gradients of ``--ray-batch`` rollouts in one call, ``push_pull``, and with
``--ray-pipeline 1`` goes on collecting while the call is in flight.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from asyncrl.messages import Episodes, Finished, Message, NonFinite, StatSums, WorkerSnapshot
from asyncrl.models import merge_obs_stats, update_obs_stats

if TYPE_CHECKING:
    from asyncrl.worker import Worker

try:
    import ray
except ImportError:  # pragma: no cover - the extra is not installed
    ray = None  # type: ignore[assignment]


class RayStore:
    """The worker's side of the parameter server (a :class:`~asyncrl.worker.Store`, as
    SharedMemoryStore is).

    A Ray call costs about as much CPU as collecting and learning from a good part of a small
    rollout (docs/ray.md), so the store spends calls sparingly:

    * ``batch`` rollouts' gradients travel in one call, ``push_pull``, with the messages of
      those rollouts (episodes that finished, non-finite updates); the server applies each
      gradient as an update of its own (the same updates as with shared memory, only staler),
      then returns the current parameters;
    * with ``pipeline`` = 1 the call is sent as soon as the batch is full and the worker goes
      on collecting with the parameters it has; it takes the reply when it sends its next call:
      the round trip overlaps the worker's own work instead of idling it. ``pipeline`` = 0
      (the default) waits for each reply: a little less throughput, half the staleness.

    Both add staleness, which the server measures per gradient (``lags`` in the summary). The
    worker's view of the global step is the server's count in the last reply plus its own
    steps that the server has not counted yet (in flight or not sent).

    With ``--ray-servers K`` (``bounds``: the slices) each server gets its slice of the rows,
    and with a staleness bound (``one_decision``) the first server decides which rows apply:
    its call returns that decision as an object of its own, which the others' calls take as an
    argument (Ray runs their part once it exists), so a gradient is never applied to some
    slices and dropped on others. Without a bound every finite gradient applies everywhere and
    the K calls run side by side.
    """

    def __init__(
        self,
        servers: list[Any],
        wid: int,
        pipeline: int,
        batch: int,
        obs_stats: np.ndarray | None = None,
        bounds: list[tuple[int, int]] | None = None,
        bfloat16: bool = False,
        one_decision: bool = False,
    ):
        self.wid, self.pipeline, self.batch = wid, pipeline, batch
        self.bfloat16 = bfloat16
        # --ray-servers K: server k holds the slice bounds[k] of the parameters; the first also
        # holds the counters, the episode stream and the observation statistics
        self.servers = servers
        self.bounds = bounds
        self.one_decision = one_decision and len(servers) > 1
        # --normalize-obs: the statistics this worker normalises with (the server's, as of the
        # last reply, plus its own batches since), and its batches not sent yet
        self.stats: torch.Tensor | None = None
        self.unsent_stats: torch.Tensor | None = None
        if obs_stats is not None:
            self.stats = torch.from_numpy(obs_stats.copy())
            self.unsent_stats = torch.zeros_like(self.stats)
        self.steps, self.stop, self.version = 0, False, -1
        # (one ref per server, env steps the call carries), oldest first
        self.inflight: list[tuple[list[Any], int]] = []
        self.grads: np.ndarray | None = None  # (batch, n) rows of gradients not sent yet
        self.pushes: list[tuple] = []  # (finite, version, env steps) of each row
        self.reports: list[Message] = []  # for the main process, through the first server
        self.wants_target = False

    def global_step(self) -> int:
        return self.steps

    def stopping(self) -> bool:
        return self.stop

    def _call(self) -> None:
        pushes, self.pushes = self.pushes, []
        reports, self.reports = self.reports, []
        # One contiguous array for the batch: Ray copies it when the call is made (one buffer
        # to serialize rather than one per gradient), so the rows are free again after this.
        grads = None if self.grads is None else self.grads[: len(pushes)]
        stats: np.ndarray | None = None
        if self.unsent_stats is not None and self.unsent_stats[0] > 0:
            stats = self.unsent_stats.numpy().copy()
            self.unsent_stats.zero_()
        refs = []
        admitted = None  # the first server's decision, where the others must follow it
        for k, server in enumerate(self.servers):
            part = grads
            if grads is not None and self.bounds is not None:
                a, b = self.bounds[k]
                part = np.ascontiguousarray(grads[:, a:b])
            if k == 0:
                args = (part, pushes, reports, self.wid, self.wants_target, stats)
                if self.one_decision:
                    deciding = server.push_pull_deciding.options(num_returns=2)
                    reply, admitted = deciding.remote(*args)
                else:
                    reply = server.push_pull.remote(*args)
            else:
                reply = server.push_pull.remote(
                    part, pushes, [], self.wid, self.wants_target, None, admitted
                )
            refs.append(reply)
        self.inflight.append((refs, sum(n for *_, n in pushes)))

    def pull(self, local: torch.Tensor, target_local: torch.Tensor | None) -> int:
        self.wants_target = target_local is not None
        # The batch goes out here rather than in push: the episodes the worker reported after
        # its last push ride along with that rollout's gradient.
        if self.version < 0 or len(self.pushes) >= self.batch:
            self._call()
        reply = None
        # Wait while more calls are in flight than the pipeline allows (and on the first pull,
        # for parameters to work with); otherwise keep the parameters we have: no ray.wait
        # polling, which costs a call into Ray's core worker per rollout.
        while len(self.inflight) > self.pipeline or (self.version < 0 and reply is None):
            reply = ray.get(self.inflight.pop(0)[0])
        if reply is None:
            return self.version
        self.version, _, _, server_steps, self.stop, stats = reply[0]
        unsent = sum(n for *_, n in self.pushes)
        self.steps = server_steps + sum(n for _, n in self.inflight) + unsent
        # Ray hands back read-only arrays: copy them into our tensors' memory.
        for k, (_, params, target, *_) in enumerate(reply):
            a, b = (0, local.numel()) if self.bounds is None else self.bounds[k]
            local.numpy()[a:b] = params
            if target_local is not None:
                target_local.numpy()[a:b] = target
        if self.stats is not None and self.unsent_stats is not None:
            self.stats.copy_(torch.from_numpy(stats))
            merge_obs_stats(self.stats, self.unsent_stats)  # its own batches the server lacks
        return self.version

    def refresh(self, local: torch.Tensor, target_local: torch.Tensor | None) -> int:
        # the server's parameters as fresh as the batching allows: a call when a batch of
        # gradients is full (each minibatch's gradient is a row), else the last reply's
        return self.pull(local, target_local)

    def push(self, grad: torch.Tensor | None, n_steps: int, version: int) -> int:
        if self.grads is None and grad is not None:
            dtype = np.int16 if self.bfloat16 else np.float32  # int16: bfloat16's bits
            self.grads = np.empty((self.batch, grad.numel()), dtype)
        if grad is not None and self.grads is not None:
            # a copy: the gradient buffer is overwritten by the next backward
            row = torch.from_numpy(self.grads[len(self.pushes)])
            (row.view(torch.bfloat16) if self.bfloat16 else row).copy_(grad)
        self.pushes.append((grad is not None, version, n_steps))
        self.steps += n_steps
        return self.steps

    def report(self, finished: list[Finished], stats: StatSums, step: int) -> None:
        self.reports.append(Episodes(self.wid, finished, step, stats))

    def nonfinite(self, global_step: int, what: str) -> None:
        # the server counts it (a push without a gradient); this is the line for the log
        self.reports.append(NonFinite(self.wid, global_step, what))

    def flush(self) -> None:
        """Send what is not sent yet, without waiting (the loop is ending or failing)."""
        if self.pushes or self.reports:
            self._call()

    def obs_stats(self) -> torch.Tensor | None:
        return self.stats

    def observe(self, obs: np.ndarray) -> None:
        assert self.stats is not None and self.unsent_stats is not None
        update_obs_stats(self.stats, obs)  # acting sees its own batches at once
        update_obs_stats(self.unsent_stats, obs)  # the server gets them with the next call

    def snapshot(self, worker: Worker) -> WorkerSnapshot | None:
        # the loop's last call: deliver what is not sent yet and wait for every call
        self.flush()
        ray.get([ref for refs, _ in self.inflight for ref in refs])
        self.inflight = []
        return None  # the server holds the global state; workers resume with fresh env state


__all__ = ["RayStore"]
