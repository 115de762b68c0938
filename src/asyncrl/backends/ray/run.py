"""The main process's side of a Ray run (:class:`RayRun`) and the worker actors it starts
(:class:`WorkerActor`).

Faults: the server is pinned to the node of the process that runs ``asyncrl train``, so losing
another machine cannot take the global state with it; if it dies all the same, the run ends
within a poll (0.1 s) with the error line and the last checkpoint kept. A worker actor that dies
(its process, or its whole node) is not restarted by Ray, which would wait forever for a node
that is gone: the run starts a fresh actor for it wherever a CPU is free, and one that cannot
be placed yet waits without holding up the others, starts when a CPU frees or a node joins, and
is dropped when the run ends. One whose loop runs but whose calls stop reaching the server for
``--worker-timeout`` seconds (hung: alive, sending nothing) is killed and replaced the same
way; the server says which workers called since the last drain, so the clock is the driver's.
``summary.json`` counts ``workers_lost``, ``nodes`` (that ran a worker) and ``nodes_lost``.
Checkpoints hold the server's global state; workers resume with fresh env state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from asyncrl.backends.ray.server import SERVER_NAME, ParameterServer
from asyncrl.backends.ray.shards import join_snapshots, shard_bounds, shard_snapshot
from asyncrl.backends.ray.store import RayStore
from asyncrl.backends.ray.summary import server_line, server_load, staleness_line
from asyncrl.envs import EnvInfo
from asyncrl.messages import Done, Failed, GlobalSnapshot, Lost, Message, Notice, WorkerSnapshot
from asyncrl.models import ModelSpec
from asyncrl.state import GlobalState
from asyncrl.supervisor import ServerLost
from asyncrl.worker import Diverged, Worker, _current

try:
    import ray
except ImportError:  # pragma: no cover - the extra is not installed
    ray = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from asyncrl.backends import BackendSettings


#: seconds a new worker actor may wait for a CPU before the log says so
PLACEMENT_NOTICE_S = 10.0
#: seconds the run waits for the workers' loops to end after it stops (a loop ends within a
#: rollout and a call; one that does not is on a machine that went silent)
STOP_GRACE_S = 30.0


class WorkerActor:
    """One actor-learner on some node of the cluster, running the shared Worker loop."""

    def __init__(
        self,
        wid: int,
        cfg: BackendSettings,
        info: EnvInfo,
        spec: ModelSpec,
        servers: list[str],
        bounds: list[tuple],
    ):
        # The servers by name, not by handle: a handle among the constructor arguments lives
        # in the object store, and Ray warns that a restart could then fail.
        self.wid, self.cfg, self.info, self.spec = wid, cfg, info, spec
        self.servers = [ray.get_actor(name) for name in servers]
        self.bounds = bounds if len(servers) > 1 else None

    def node(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def run(self, incarnation: int) -> str:
        _current.worker_id = self.wid
        # A restarted actor starts from fresh env state: another stream of the same seed.
        stats: Any = ray.get(self.servers[0].obs_stats.remote())  # an array, or None
        cfg = self.cfg
        batch, pipeline = cfg.ray_tuning(cfg.algo)
        store = RayStore(
            self.servers,
            self.wid,
            pipeline,
            batch,
            stats,
            self.bounds,
            bfloat16=cfg.ray_grad_dtype == "bfloat16",
            # with a staleness bound the first server decides for every slice
            one_decision=cfg.max_staleness is not None,
        )
        try:
            Worker(self.wid, incarnation, self.cfg, self.info, self.spec, store, None).run()
        except BaseException:
            # the gradients, steps and episodes of the rollouts before the failure still count
            store.flush()
            raise
        return self.node()


class RayRun:
    """A run on a Ray cluster: the global state moves to a parameter-server actor (and comes
    back at the end), workers are actors, replaced by fresh ones where a CPU is free when
    they die."""

    def __init__(self, cfg: BackendSettings, info: EnvInfo, spec: ModelSpec, state: GlobalState):
        self.cfg, self.info, self.spec, self.state = cfg, info, spec, state
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
        # Incarnations name a worker's seeds too (asyncrl.envs.env_seeds): a resumed run counts
        # from its step count, so that its workers play new games, not the run's opening ones
        self.incarnations = [state.steps()] * self.workers
        # In flight per worker: a new actor's ping (answered once it is placed and alive), then
        # its loop ("run")
        self.calls: dict[Any, tuple[int, str]] = {}
        self.pending_since: dict[int, float] = {}  # workers whose actor awaits a CPU
        # workers whose loop runs: when a call of theirs last reached the server (or the loop
        # started), by this process's clock
        self.heard_at: dict[int, float] = {}
        self.noticed: set[int] = set()
        self.stopped_at: float | None = None
        self.nodes: set[str] = set()  # nodes that ran a worker
        self.workers_lost = 0  # actors that died (their process, or their node)
        self.steps = state.steps()
        self.stats: list[dict[str, Any]] = []  # each server's statistics(), once finished
        self.clock_sent = -float("inf")  # when the run's elapsed time was last sent (clock)

    def start(self, states: dict[int, dict]) -> None:
        # Workers resume with fresh env state: the checkpoint holds the server's state only.
        self.actors = [None] * self.workers
        for w in range(self.workers):
            self._spawn(w)

    def _spawn(self, wid: int) -> None:
        """A fresh actor for worker ``wid``. Its loop starts once the actor answers a ping, so
        an actor the cluster has no CPU for stays pending without holding anything up: it
        starts when a CPU frees or a node joins, and is dropped if the run ends first."""
        self.actors[wid] = self.worker_cls.remote(
            wid, self.cfg, self.info, self.spec, self.names, self.bounds
        )
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
        stream, self.steps, heard = self._server(self.server.drain.remote())
        if self.stopped_at is None and self.steps >= self.cfg.steps:
            # the budget is spent: the loops end on their own, and the run ends as at a stop,
            # so that a worker still waiting for a CPU (its node lost, none free) is dropped
            # rather than waited for, and a loop silent past STOP_GRACE_S with it
            self.stopped_at = time.monotonic()
        msgs.extend(self._hung(heard))
        return [*stream, *msgs]

    def _hung(self, heard: set[int]) -> list[Message]:
        """Workers whose loop runs and whose calls have not reached the server for
        ``--worker-timeout`` seconds, each said once (the supervisor replaces or retires them).
        Not after the stop: a loop then ends on its own or is dropped (``STOP_GRACE_S``)."""
        now = time.monotonic()
        for w in heard & self.heard_at.keys():
            self.heard_at[w] = now
        if self.stopped_at is not None:
            return []
        out: list[Message] = []
        for w, at in list(self.heard_at.items()):
            if now - at > self.cfg.worker_timeout:
                del self.heard_at[w]
                out.append(Lost.hung(w, self.incarnations[w], self.cfg.worker_timeout))
        return out

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
        self.heard_at.pop(w, None)  # its loop, if it ran, has ended
        try:
            node = ray.get(ref)
        except ray.exceptions.RayActorError as e:  # the actor's process or node is gone
            self.pending_since.pop(w, None)
            self.workers_lost += 1
            why = f"died ({type(e).__name__}): its process or its machine is gone"
            return [Lost(w, inc, why)]
        except ray.exceptions.RayTaskError as e:  # its env or learner raised
            cause = getattr(e, "cause", None) or e
            text = f"{type(cause).__name__}: {cause}"
            return [Failed(w, inc, text, str(e), isinstance(cause, Diverged))]
        self.nodes.add(node)
        if kind == "ping":  # placed and alive: its loop starts
            self.pending_since.pop(w, None)
            self.calls[self.actors[w].run.remote(inc)] = (w, "run")
            self.heard_at[w] = time.monotonic()
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
        self.heard_at.pop(wid, None)
        with contextlib.suppress(Exception):  # already gone, perhaps with its node
            ray.kill(self.actors[wid], no_restart=True)

    def global_step(self) -> int:
        return self.steps

    def clock(self, elapsed: float) -> None:
        # Only a schedule over time reads it, and the servers run their own clock on from the
        # last one sent (ParameterServer.elapsed): once a second is plenty for a rate that
        # falls over minutes, and costs a run without that schedule no calls at all
        if self.cfg.lr_anneal_over != "time" or time.monotonic() - self.clock_sent < 1.0:
            return
        self.clock_sent = time.monotonic()
        for server in self.servers:
            server.set_clock.remote(elapsed)

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


__all__ = ["RayRun", "WorkerActor"]
