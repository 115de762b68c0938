"""A parameter server on Ray, for clusters of many machines (``--backend ray``).

    ParameterServer (one Ray actor)          WorkerActor x N (one per CPU of the cluster)
      global parameters (flat)     <- push --   the same Worker loop as every backend:
      shared optimizer statistics  -- pull ->   pull, collect, loss, backward, push
      target network, counters
      episode stream, staleness

Parameters and gradients travel as flat contiguous float32 arrays (gradients optionally as
bfloat16), never as dicts of small tensors. A Ray call costs about a millisecond of CPU, so a
worker sends the gradients of ``--ray-batch`` rollouts in one call, ``push_pull``, and with
``--ray-pipeline 1`` goes on collecting while the call is in flight; see :class:`RayStore`. The
server is a plain (serial) actor: it applies a call's gradients one optimizer step each and
answers with the current parameters, so a call holds up the next for ``ray_batch`` optimizer
steps. Workers never wait for each other, only for the server.

With ``--ray-servers K`` the flat vector is cut into K contiguous slices, each held by a server
actor of its own with its slice of the optimizer statistics and of theta^-; a worker's call goes
to all K at once (its slice of each gradient in, its slice of the parameters out), so the
server's work per update divides by K. The first server also holds the counters, the episode
stream and the observation statistics; every server counts the steps (the lr schedule reads
them) and its own versions (the staleness bound applies per slice).

``--ray-grad-dtype bfloat16`` sends the gradients as bfloat16 (half the bytes in; numpy has no
bfloat16, so the bits travel as int16). The summary reports each server's CPU share and the
megabytes per second in and out (``server``), measured by the servers themselves (absent if a
server died before the end).

Every pushed gradient carries the parameter version it was computed from; the server records
the lag (versions behind) and, with ``--max-staleness K``, drops gradients more than K versions
old and counts them.

Faults: the server is pinned to the node of the process that runs ``asyncrl train``, so losing
another machine cannot take the global state with it; if it dies all the same, the run ends
within a poll (0.1 s) with the error line and the last checkpoint kept. A worker actor that dies
(its process, or its whole node) is not restarted by Ray, which would wait forever for a node
that is gone: the run starts a fresh actor for it wherever a CPU is free, and one that cannot
be placed yet waits without holding up the others, starts when a CPU frees or a node joins, and
is dropped when the run ends. ``summary.json`` counts ``workers_lost``, ``nodes`` (that ran a
worker) and ``nodes_lost``. Checkpoints hold the server's global state; workers resume with
fresh env state.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import os
import time
from typing import Any

import numpy as np
import torch

from asyncrl.config import Config
from asyncrl.envs import EnvInfo
from asyncrl.messages import (
    Done,
    Episodes,
    Failed,
    GlobalSnapshot,
    Lost,
    Message,
    Notice,
    StatSums,
    WorkerSnapshot,
)
from asyncrl.models import ModelSpec, merge_obs_stats, update_obs_stats
from asyncrl.state import EPISODES, NONFINITE, STEPS, GlobalState
from asyncrl.supervisor import ServerLost
from asyncrl.worker import Diverged, Worker, _current

try:
    import ray
except ImportError:  # pragma: no cover - the extra is not installed
    ray = None  # type: ignore[assignment]


SERVER_NAME = "asyncrl-parameter-server"
#: seconds a new worker actor may wait for a CPU before the log says so
PLACEMENT_NOTICE_S = 10.0
#: seconds the run waits for the workers' loops to end after it stops (a loop ends within a
#: rollout and a call; one that does not is on a machine that went silent)
STOP_GRACE_S = 30.0


class ParameterServer:
    """Global parameters, shared optimizer, counters and the episode stream (one Ray actor)."""

    def __init__(self, cfg: Config, snap: GlobalSnapshot):
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
        self.stream: list[Episodes] = []
        self.lags: collections.Counter[int] = collections.Counter()
        self.lag_sum, self.lag_count = 0, 0  # since the last drain: the policy lag statistic
        self.dropped = 0
        self.stop = False
        # The server's load, for the summary: arrays in and out (what crosses the object store)
        # and the CPU time of this actor's process, Ray's own threads (deserialising, replying)
        # included, against wall time since it started
        self.bytes_in, self.bytes_out = 0, 0
        self.started, self.cpu_started = time.monotonic(), time.process_time()

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
        self, grad: torch.Tensor | np.ndarray | None, version: int, n_steps: int, worker: int
    ) -> int:
        self.steps += n_steps
        if grad is None:
            self.nonfinite += 1
            return self.steps
        lag = self.version - version
        self.lags[lag] += 1
        self.lag_sum, self.lag_count = self.lag_sum + lag, self.lag_count + 1
        if self.cfg.max_staleness is not None and lag > self.cfg.max_staleness:
            self.dropped += 1
            return self.steps
        if isinstance(grad, np.ndarray):
            grad = torch.tensor(grad)  # a copy: Ray hands back read-only arrays
        self.state.apply_update(self.cfg, grad, self.steps)
        self.version += 1
        return self.steps

    def push_pull(
        self,
        grads: np.ndarray,
        meta: list,
        reports: list,
        worker: int,
        want_target: bool,
        obs_stats: np.ndarray | None = None,
    ) -> tuple:
        """A worker's one call per ``--ray-batch`` rollouts: their gradients (rows of one
        contiguous array; ``meta`` holds (finite, version, env steps) per row), each applied as
        an update of its own, the reports of those rollouts (episodes and statistics) and the
        statistics of their observations in; the current parameters (and statistics) out."""
        self.bytes_in += sum(a.nbytes for a in (grads, obs_stats) if a is not None)
        if obs_stats is not None and self.state.obs_stats is not None:
            merge_obs_stats(self.state.obs_stats, torch.from_numpy(obs_stats))
        rows = None if grads is None else unpack_grads(grads)
        for row, (finite, version, n_steps) in enumerate(meta):
            self.push(rows[row] if finite and rows is not None else None, version, n_steps, worker)
        for finished, stats, step in reports:
            self.episodes += len(finished)
            self.stream.append(Episodes(worker, finished, step, stats))
        return self.pull(want_target)

    def drain(self) -> tuple[list[Episodes], int]:
        """The reports since the last drain (the policy lag's mean among them) and the step."""
        out, self.stream = self.stream, []
        if self.lag_count:
            lag = {"train/policy_lag": (float(self.lag_sum), self.lag_count)}
            out.append(Episodes(-1, [], self.steps, lag))
            self.lag_sum, self.lag_count = 0, 0
        return out, self.steps

    def set_stop(self) -> None:
        self.stop = True

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


class RayStore:
    """The worker's side of the parameter server (the same interface as SharedMemoryStore).

    A Ray call costs about a millisecond of CPU (measured here: 1.2-1.6 ms per round trip with
    a 9k-parameter model), as much as collecting and learning from half a CartPole rollout, so
    the store spends calls sparingly:

    * ``batch`` rollouts' gradients travel in one call, ``push_pull``, with the episodes that
      finished in them; the server applies each gradient as an update of its own (the same
      updates as with shared memory, only staler), then returns the current parameters;
    * with ``pipeline`` = 1 the call is sent as soon as the batch is full and the worker goes
      on collecting with the parameters it has; it takes the reply when it sends its next call:
      the round trip overlaps the worker's own work instead of idling it. ``pipeline`` = 0
      (the default) waits for each reply: about 5% less throughput here, half the staleness.

    Both add staleness, which the server measures per gradient (``lags`` in the summary). The
    worker's view of the global step is the server's count in the last reply plus its own
    steps that the server has not counted yet (in flight or not sent).
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
    ):
        self.wid, self.pipeline, self.batch = wid, pipeline, batch
        self.bfloat16 = bfloat16
        # --ray-servers K: server k holds the slice bounds[k] of the parameters; the first also
        # holds the counters, the episode stream and the observation statistics
        self.servers = servers
        self.bounds = bounds
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
        self.reports: list[tuple[list, StatSums, int]] = []
        self.wants_target = False

    def global_step(self) -> int:
        return self.steps

    def retired(self) -> bool:
        return False  # a replaced worker is a fresh actor: the old one is killed

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
        for k, server in enumerate(self.servers):
            part = grads
            if grads is not None and self.bounds is not None:
                a, b = self.bounds[k]
                part = np.ascontiguousarray(grads[:, a:b])
            first = k == 0
            refs.append(
                server.push_pull.remote(
                    part,
                    pushes,
                    reports if first else [],
                    self.wid,
                    self.wants_target,
                    stats if first else None,
                )
            )
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

    def report(self, finished: list[tuple[float, int]], stats: StatSums, step: int) -> None:
        self.reports.append((finished, stats, step))

    def nonfinite(self, global_step: int, what: str) -> None:
        pass  # counted by the server (a push without a gradient)

    def alive_and_asked(self, worker: Worker) -> None:
        pass

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
        return None


class WorkerActor:
    """One actor-learner on some node of the cluster, running the shared Worker loop."""

    def __init__(
        self, wid: int, cfg: Config, info: EnvInfo, servers: list[str], bounds: list[tuple]
    ):
        # The servers by name, not by handle: a handle among the constructor arguments lives
        # in the object store, and Ray warns that a restart could then fail.
        self.wid, self.cfg, self.info = wid, cfg, info
        self.servers = [ray.get_actor(name) for name in servers]
        self.bounds = bounds if len(servers) > 1 else None

    def node(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def run(self, incarnation: int) -> str:
        _current.worker_id = self.wid
        # A restarted actor starts from fresh env state: another stream of the same seed.
        stats: Any = ray.get(self.servers[0].obs_stats.remote())  # an array, or None
        cfg = self.cfg
        store = RayStore(
            self.servers,
            self.wid,
            cfg.ray_pipeline,
            cfg.ray_batch,
            stats,
            self.bounds,
            bfloat16=cfg.ray_grad_dtype == "bfloat16",
        )
        try:
            Worker(self.wid, incarnation, self.cfg, self.info, store, None).run()
        except BaseException:
            # the gradients, steps and episodes of the rollouts before the failure still count
            store.flush()
            raise
        return self.node()


class RayRun:
    """A run on a Ray cluster: the global state moves to a parameter-server actor (and comes
    back at the end), workers are actors, replaced by fresh ones where a CPU is free when
    they die."""

    def __init__(self, cfg: Config, info: EnvInfo, spec: ModelSpec, state: GlobalState):
        self.cfg, self.info, self.state = cfg, info, state
        self.workers = state.counters.shape[1]
        server_cls = ray.remote(num_cpus=0, max_restarts=0)(ParameterServer)
        # named, so that operators (and the fault tests) can find them: ray.get_actor(name)
        base = f"{SERVER_NAME}-{os.getpid()}-{id(self):x}"
        self.names = [f"{base}-{k}" for k in range(cfg.ray_servers)]
        self.bounds = shard_bounds(state.params.numel(), cfg.ray_servers)
        # Pinned to this process's node: a server with num_cpus=0 could otherwise land on any
        # node, and losing a worker machine would take the global state with it.
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        snap = state.snapshot()
        self.servers: list[Any] = [
            server_cls.options(name=name, scheduling_strategy=here).remote(
                cfg, shard_snapshot(snap, a, b, first=k == 0)
            )
            for k, (name, (a, b)) in enumerate(zip(self.names, self.bounds, strict=True))
        ]
        self.server = self.servers[0]  # the counters, the episode stream, the statistics
        # No restarts by Ray: a dead worker's machine may be gone, and Ray would wait for it
        # (or for a CPU) forever; the run starts a fresh actor wherever one fits (restart).
        self.worker_cls = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(WorkerActor)
        self.actors: list[Any] = []
        self.incarnations = [0] * self.workers
        # In flight per worker: a new actor's ping (answered once it is placed and alive), then
        # its loop ("run")
        self.calls: dict[Any, tuple[int, str]] = {}
        self.pending_since: dict[int, float] = {}  # workers whose actor awaits a CPU
        self.noticed: set[int] = set()
        self.stopped_at: float | None = None
        self.nodes: set[str] = set()  # nodes that ran a worker
        self.workers_lost = 0  # actors that died (their process, or their node)
        self.steps = state.steps()
        self.stats: list[dict[str, Any]] = []  # each server's statistics(), once finished

    def start(self, states: dict[int, dict]) -> None:
        # Workers resume with fresh env state: the checkpoint holds the server's state only.
        self.actors = [None] * self.workers
        for w in range(self.workers):
            self._spawn(w)

    def _spawn(self, wid: int) -> None:
        """A fresh actor for worker ``wid``. Its loop starts once the actor answers a ping, so
        an actor the cluster has no CPU for stays pending without holding anything up: it
        starts when a CPU frees or a node joins, and is dropped if the run ends first."""
        self.actors[wid] = self.worker_cls.remote(wid, self.cfg, self.info, self.names, self.bounds)
        self.calls[self.actors[wid].node.remote()] = (wid, "ping")
        self.pending_since[wid] = time.monotonic()
        self.noticed.discard(wid)  # a second wait for a CPU is said again

    def incarnation(self, wid: int) -> int:
        return self.incarnations[wid]

    def _server(self, call: Any) -> Any:
        try:
            return ray.get(call)
        except ray.exceptions.RayActorError as e:
            raise ServerLost(type(e).__name__) from None

    def receive(self, timeout: float) -> list[Message]:
        msgs: list[Message] = []
        if self.calls:
            ready, _ = ray.wait(list(self.calls), timeout=timeout, num_returns=len(self.calls))
            for ref in ready:
                msgs.extend(self._returned(ref))
        msgs.extend(self._pending())
        # The server after the workers: a loop's last call completes before the loop returns,
        # so its episodes are in this drain; and if the server is dead this raises, before the
        # workers' failures that follow from it could count as worker faults.
        stream, self.steps = self._server(self.server.drain.remote())
        return [*stream, *msgs]

    def _pending(self) -> list[Message]:
        """Actors still waiting for a CPU: said once in the log; dropped (their worker done)
        once the run stops, so that its end never waits for a placement that may not come.
        Loops that have not ended ``STOP_GRACE_S`` after the stop (a machine that went silent
        before Ray declared it dead) are dropped too."""
        out: list[Message] = []
        now = time.monotonic()
        if self.stopped_at is not None and now - self.stopped_at > STOP_GRACE_S:
            for w in {w for w, _ in self.calls.values()}:
                self._drop(w)
                out.append(Done(w, self.incarnations[w], None))
        for w, since in list(self.pending_since.items()):
            if self.stopped_at is not None:
                self._drop(w)
                out.append(Done(w, self.incarnations[w], None))
            elif now - since > PLACEMENT_NOTICE_S and w not in self.noticed:
                self.noticed.add(w)
                free = ray.available_resources().get("CPU", 0.0)
                out.append(
                    Notice(
                        f"worker {w} waits for a CPU on the cluster ({free:g} free now): it "
                        "starts when one frees or a node joins; the run goes on without it"
                    )
                )
        return out

    def _returned(self, ref: Any) -> list[Message]:
        w, kind = self.calls.pop(ref)
        inc = self.incarnations[w]
        try:
            node = ray.get(ref)
        except ray.exceptions.RayActorError as e:  # the actor's process or node is gone
            self.pending_since.pop(w, None)
            self.workers_lost += 1
            return [Lost(w, f"died ({type(e).__name__}): its process or its machine is gone")]
        except ray.exceptions.RayTaskError as e:  # its env or learner raised
            cause = getattr(e, "cause", None) or e
            text = f"{type(cause).__name__}: {cause}"
            return [Failed(w, inc, text, str(e), isinstance(cause, Diverged))]
        self.nodes.add(node)
        if kind == "ping":  # placed and alive: its loop starts
            self.pending_since.pop(w, None)
            self.calls[self.actors[w].run.remote(inc)] = (w, "run")
            return []
        return [Done(w, inc, None)]

    def restart(self, wid: int) -> None:
        # Always a fresh actor (and process), placed wherever a CPU is free: a dead actor's
        # machine may be gone for good.
        self.incarnations[wid] += 1
        self._drop(wid)
        self._spawn(wid)

    def retire(self, wid: int) -> None:
        self.incarnations[wid] += 1
        self._drop(wid)

    def _drop(self, wid: int) -> None:
        for ref, (w, _) in list(self.calls.items()):
            if w == wid:
                del self.calls[ref]
        self.pending_since.pop(wid, None)
        with contextlib.suppress(Exception):  # already gone, perhaps with its node
            ray.kill(self.actors[wid], no_restart=True)

    def global_step(self) -> int:
        return self.steps

    def request_snapshots(self) -> tuple[int, set[int]]:
        return 0, set()  # the server's state is read at once

    def checkpoint_state(self, workers: dict[int, WorkerSnapshot]) -> GlobalSnapshot:
        parts = self._server([server.snapshot.remote() for server in self.servers])
        return self._spread(join_snapshots(parts))

    def _spread(self, snap: GlobalSnapshot) -> GlobalSnapshot:
        """The server counts in one column; the checkpoint has one per worker."""
        counters = np.zeros((3, self.workers), np.int64)
        counters[:, :1] = snap.counters
        return dataclasses.replace(snap, counters=counters)

    def stop(self) -> None:
        if self.stopped_at is None:
            self.stopped_at = time.monotonic()
        for server in self.servers:
            server.set_stop.remote()

    def finish(self, workers: dict[int, WorkerSnapshot]) -> GlobalSnapshot:
        self.stop()
        deadline = time.monotonic() + 10.0
        while self.calls and time.monotonic() < deadline:
            self.receive(0.2)  # the loops' last calls deliver their steps and episodes
        glob = self.checkpoint_state(workers)
        # the final state is in hand: a server lost now costs only the summary's load figures
        with contextlib.suppress(ServerLost):
            self.stats = self._server([server.statistics.remote() for server in self.servers])
        self._release()
        return glob

    def _release(self) -> None:
        """Kill the actors (no restarts): nothing of a finished or failed run keeps running on
        the cluster. Safe to call twice and with some of them dead already."""
        for actor in [*self.actors, *self.servers]:
            if actor is None:
                continue
            with contextlib.suppress(Exception):  # already gone
                ray.kill(actor, no_restart=True)
        self.actors, self.calls = [], {}

    def closing(self) -> tuple[dict[str, Any], list[str]]:
        self._release()  # after a lost server finish() never ran: the workers go too
        stats: dict[str, Any] = self.stats[0] if self.stats else {"lags": {}, "dropped": 0}
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        summary: dict[str, Any] = {
            "lags": stats["lags"],
            "dropped": stats["dropped"],
            "nodes": len(self.nodes),
            "nodes_lost": len(self.nodes - alive),
            "workers_lost": self.workers_lost,
        }
        lines = [staleness_line(stats["lags"], stats["dropped"])]
        if self.stats:
            summary["server"] = server_load(self.stats)
            lines.append(server_line(summary["server"]))
        return summary, lines


def shard_bounds(n: int, shards: int) -> list[tuple[int, int]]:
    """Contiguous, nearly equal slices of the flat parameter vector, one per server."""
    edges = [n * k // shards for k in range(shards + 1)]
    return list(itertools.pairwise(edges))


def shard_snapshot(snap: GlobalSnapshot, a: int, b: int, first: bool) -> GlobalSnapshot:
    """The part of the global state that the server of slice [a, b) holds: the slice of the
    parameters, of theta^- and of every per-parameter optimizer statistic (Adam's shared step
    counter whole: every server applies every update). Every server counts steps (the lr
    schedule and the target refresh read them); the first one also keeps the observation
    statistics."""
    n = snap.params.size

    def part(v: np.ndarray) -> np.ndarray:
        return v[a:b] if v.shape == (n,) else v

    return dataclasses.replace(
        snap,
        params=part(snap.params),
        optimizer={k: part(v) for k, v in snap.optimizer.items()},
        target_params=None if snap.target_params is None else part(snap.target_params),
        obs_stats=snap.obs_stats if first else None,
    )


def join_snapshots(parts: list[GlobalSnapshot]) -> GlobalSnapshot:
    """The global state from the servers' parts (:func:`shard_snapshot`'s inverse)."""
    if len(parts) == 1:
        return parts[0]
    first, n = parts[0], parts[0].params.size

    def join(get: Any) -> np.ndarray:
        return np.concatenate([get(p) for p in parts])

    return dataclasses.replace(
        first,
        params=join(lambda p: p.params),
        optimizer={
            k: join(lambda p, k=k: p.optimizer[k]) if v.shape == (n,) else v
            for k, v in first.optimizer.items()
        },
        target_params=None if first.target_params is None else join(lambda p: p.target_params),
    )


def server_load(stats: list[dict[str, Any]]) -> dict[str, Any]:
    """The parameter server's load over the run, from each server's ``statistics()``: the share
    of one core each server's process used (CPU seconds over wall seconds) and the megabytes
    per second of arrays to and from all of them."""
    seconds = max(s["seconds"] for s in stats)
    return {
        "cpu_share": [round(s["cpu_seconds"] / max(s["seconds"], 1e-9), 4) for s in stats],
        "mb_in_per_s": round(sum(s["bytes_in"] for s in stats) / 1e6 / max(seconds, 1e-9), 2),
        "mb_out_per_s": round(sum(s["bytes_out"] for s in stats) / 1e6 / max(seconds, 1e-9), 2),
        "updates": stats[0]["version"],
    }


def server_line(load: dict[str, Any]) -> str:
    shares = ", ".join(f"{share:.0%}" for share in load["cpu_share"])
    return (
        f"parameter server: {shares} of a core; {load['mb_in_per_s']:,.1f} MB/s of gradients in, "
        f"{load['mb_out_per_s']:,.1f} MB/s of parameters out (means over the run)"
    )


def staleness_line(lags: dict[int, int], dropped: int) -> str:
    """The distribution of gradient staleness (versions behind) in one line."""
    if not lags:
        return "staleness: no gradient applied"
    values = np.repeat(np.array(list(lags), dtype=float), list(lags.values()))
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return (
        f"staleness (parameter versions behind) of {values.size:,} gradients: median {p50:g}, "
        f"p90 {p90:g}, p99 {p99:g}, max {values.max():g}; dropped {dropped:,}"
    )


__all__ = ["RayRun"]
