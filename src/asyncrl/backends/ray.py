"""A parameter server on Ray, for clusters of many machines (``--backend ray``).

    ParameterServer (one Ray actor)          WorkerActor x N (one per CPU of the cluster)
      global parameters (flat)     <- push --   the same Worker loop as every backend:
      shared optimizer statistics  -- pull ->   pull, collect, loss, backward, push
      target network, counters
      episode stream, staleness

Parameters and gradients travel as flat contiguous float32 arrays, never as dicts of small
tensors. A Ray call costs about a millisecond of CPU, so a worker sends the gradients of
``--ray-batch`` rollouts in one call, ``push_pull``, and with ``--ray-pipeline 1`` goes on
collecting while the call is in flight; see :class:`RayStore`. The server is a plain (serial)
actor: it applies a call's gradients one optimizer step each and answers with the current
parameters, so a call holds up the next for ``ray_batch`` optimizer steps. Workers never wait
for each other, only for the server.

Every pushed gradient carries the parameter version it was computed from; the server records
the lag (versions behind) and, with ``--max-staleness K``, drops gradients more than K versions
old and counts them.

Worker actors are restarted by Ray when they die (``max_restarts``), and the trainer starts
their loop again with fresh env state; the run stops with an error if the server dies.
Checkpoints hold the server's global state; workers resume with fresh env state.
"""

from __future__ import annotations

import collections
import os
import time
from typing import Any

import numpy as np
import torch

from asyncrl.config import Config
from asyncrl.envs import EnvInfo
from asyncrl.models import ModelSpec
from asyncrl.optim import make_optimizer

try:
    import ray
except ImportError:  # pragma: no cover - the extra is not installed
    ray = None


SERVER_NAME = "asyncrl-parameter-server"


def require_ray() -> Any:
    if ray is None:
        from asyncrl.errors import UserError

        raise UserError(
            "--backend ray: Ray is not installed; install the extra: "
            "pip install -c constraints.txt -e '.[ray]'"
        )
    return ray


class ParameterServer:
    """Global parameters, shared optimizer, counters and the episode stream (one Ray actor)."""

    def __init__(
        self,
        cfg: Config,
        params: np.ndarray,
        optimizer_state: dict | None,
        target: np.ndarray | None,
        steps: int,
        episodes: int,
    ):
        torch.set_num_threads(1)
        self.cfg = cfg
        self.params = torch.from_numpy(params.copy())
        self.optimizer = make_optimizer(cfg.optimizer, self.params, cfg.lr, cfg.rms_alpha, cfg.eps)
        if optimizer_state:
            self.optimizer.load_state_dict(
                {k: torch.from_numpy(v.copy()) for k, v in optimizer_state.items()}
            )
        self.target = None if target is None else torch.from_numpy(target.copy())
        self.steps, self.episodes, self.version = steps, episodes, 0
        self.stream: list[tuple[int, list]] = []
        self.lags: collections.Counter[int] = collections.Counter()
        self.dropped = 0
        self.nonfinite = 0
        self.stop = False

    def pull(self, want_target: bool) -> tuple:
        target = self.target.numpy() if (want_target and self.target is not None) else None
        return self.version, self.params.numpy(), target, self.steps, self.stop

    def push(self, grad: np.ndarray | None, version: int, n_steps: int, worker: int) -> int:
        from asyncrl.worker import apply_update

        self.steps += n_steps
        if grad is None:
            self.nonfinite += 1
            return self.steps
        lag = self.version - version
        self.lags[lag] += 1
        if self.cfg.max_staleness is not None and lag > self.cfg.max_staleness:
            self.dropped += 1
            return self.steps
        apply_update(
            self.cfg,
            self.optimizer,
            self.params,
            self.target,
            torch.tensor(grad),  # Ray hands back read-only arrays
            self.steps,
            n_steps,
        )
        self.version += 1
        return self.steps

    def push_pull(
        self, grads: np.ndarray, meta: list, finished: list, worker: int, want_target: bool
    ) -> tuple:
        """A worker's one call per ``--ray-batch`` rollouts: their gradients (rows of one
        contiguous array; ``meta`` holds (finite, version, env steps) per row), each applied as
        an update of its own, and the episodes finished in, the current parameters out."""
        for row, (finite, version, n_steps) in enumerate(meta):
            self.push(grads[row] if finite else None, version, n_steps, worker)
        if finished:
            self.report(worker, finished)
        return self.pull(want_target)

    def report(self, worker: int, finished: list) -> None:
        """Episodes as (return, length, global step at the end of their rollout)."""
        self.episodes += len(finished)
        self.stream.append((worker, finished))

    def drain(self) -> tuple[list, int]:
        out, self.stream = self.stream, []
        return out, self.steps

    def set_stop(self) -> None:
        self.stop = True

    def state(self) -> dict:
        return {
            "params": self.params.numpy().copy(),
            "optimizer": {k: v.numpy().copy() for k, v in self.optimizer.state_dict().items()},
            "target_params": None if self.target is None else self.target.numpy().copy(),
            "steps": self.steps,
            "episodes": self.episodes,
            "lags": dict(self.lags),
            "dropped": self.dropped,
            "nonfinite": self.nonfinite,
            "version": self.version,
        }


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

    def __init__(self, server: Any, wid: int, pipeline: int, batch: int):
        self.server, self.wid, self.pipeline, self.batch = server, wid, pipeline, batch
        self.steps, self.stop, self.version = 0, False, -1
        self.inflight: list[tuple[Any, int]] = []  # (ref, env steps it carries), oldest first
        self.grads: np.ndarray | None = None  # (batch, n) rows of gradients not sent yet
        self.pushes: list[tuple] = []  # (finite, version, env steps) of each row
        self.finished: list = []
        self.wants_target = False

    def global_step(self) -> int:
        return self.steps

    def retired(self) -> bool:
        return False  # Ray restarts dead actors itself

    def stopping(self) -> bool:
        return self.stop

    def _call(self) -> None:
        pushes, self.pushes = self.pushes, []
        finished, self.finished = self.finished, []
        # One contiguous array for the batch: Ray copies it when the call is made (one buffer
        # to serialize rather than one per gradient), so the rows are free again after this.
        grads = None if self.grads is None else self.grads[: len(pushes)]
        call = self.server.push_pull.remote(grads, pushes, finished, self.wid, self.wants_target)
        self.inflight.append((call, sum(n for *_, n in pushes)))

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
        self.version, params, target, server_steps, self.stop = reply
        unsent = sum(n for *_, n in self.pushes)
        self.steps = server_steps + sum(n for _, n in self.inflight) + unsent
        # Ray hands back read-only arrays: copy them into our tensors' memory.
        local.numpy()[:] = params
        if target_local is not None:
            target_local.numpy()[:] = target
        return self.version

    def push(self, cfg: Config, grad: torch.Tensor | None, n_steps: int, version: int) -> int:
        if self.grads is None and grad is not None:
            self.grads = np.empty((self.batch, grad.numel()), np.float32)
        if grad is not None:  # a copy: the gradient buffer is overwritten by the next backward
            self.grads[len(self.pushes)] = grad.numpy()
        self.pushes.append((grad is not None, version, n_steps))
        self.steps += n_steps
        return self.steps

    def report(self, finished: list, global_step: int) -> None:
        self.finished.extend((ret, length, global_step) for ret, length in finished)

    def nonfinite(self, global_step: int, what: str) -> None:
        pass  # counted by the server (a push without a gradient)

    def alive_and_asked(self, worker: Any) -> None:
        pass

    def flush(self) -> None:
        """Send what is not sent yet, without waiting (the loop is ending or failing)."""
        if self.pushes or self.finished:
            self._call()

    def snapshot(self, worker: Any) -> None:
        # the loop's last call: deliver what is not sent yet and wait for every call
        self.flush()
        ray.get([ref for ref, _ in self.inflight])
        self.inflight = []
        return None


class WorkerActor:
    """One actor-learner on some node of the cluster, running the shared Worker loop."""

    def __init__(self, wid: int, cfg: Config, info: EnvInfo, server: str):
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)
        # The server by name, not by handle: a handle among the constructor arguments lives in
        # the object store, and Ray warns that a restart could then fail.
        self.wid, self.cfg, self.info = wid, cfg, info
        self.server = ray.get_actor(server)

    def node(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def run(self, incarnation: int) -> str:
        from asyncrl.worker import Worker, _current

        _current.worker_id = self.wid
        # A restarted actor starts from fresh env state: another stream of the same seed.
        store = RayStore(self.server, self.wid, self.cfg.ray_pipeline, self.cfg.ray_batch)
        try:
            Worker(self.wid, incarnation, self.cfg, self.info, store, None).run()
        except BaseException:
            # the gradients, steps and episodes of the rollouts before the failure still count
            store.flush()
            raise
        return self.node()


def start_ray(cfg: Config) -> None:
    """Join ``--address`` or start Ray in-process on loopback."""
    require_ray()
    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {
        "include_dashboard": False,
        "logging_level": "WARNING",
        "log_to_driver": True,
    }
    if cfg.address:
        ray.init(address=cfg.address, **kwargs)
    else:
        # Local Ray binds to loopback only: nothing of ours listens on another address.
        ray.init(
            num_cpus=os.cpu_count(),
            _node_ip_address="127.0.0.1",
            _system_config={"max_direct_call_object_size": 1 << 20},
            **kwargs,
        )


def cluster_cpus() -> int:
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


class RayRun:
    """The trainer's handle on a Ray run: server, workers, restarts."""

    def __init__(
        self,
        cfg: Config,
        info: EnvInfo,
        spec: ModelSpec,
        n: int,
        params: torch.Tensor,
        optimizer_state: dict | None,
        target: torch.Tensor | None,
        steps: int,
        episodes: int,
    ):
        self.cfg, self.n = cfg, n
        server_cls = ray.remote(num_cpus=0, max_restarts=0)(ParameterServer)
        # named, so that operators (and the fault tests) can find it: ray.get_actor(name)
        name = f"{SERVER_NAME}-{os.getpid()}-{id(self):x}"
        self.server = server_cls.options(name=name).remote(
            cfg,
            params.numpy().copy(),
            optimizer_state,
            None if target is None else target.numpy().copy(),
            steps,
            episodes,
        )
        worker_cls = ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=0)(WorkerActor)
        self.workers = [worker_cls.remote(w, cfg, info, name) for w in range(n)]
        self.incarnation = [0] * n
        # In flight per worker: its loop ("run") or, after a death, a ping that waits until Ray
        # has restarted the actor (calls to a restarting actor fail as unavailable).
        self.runs: dict[Any, tuple[int, str]] = {
            self.workers[w].run.remote(0): (w, "run") for w in range(n)
        }
        self.nodes: set[str] = set()
        self.restarts = 0

    def poll(self, timeout: float) -> tuple[list, int, list[str]]:
        """Episodes and global step from the server; worker events (restarts) as messages."""
        events = []
        # First the server: if it is dead this raises, and the workers' failures that follow
        # from it are not counted as worker faults.
        stream, steps = self.drain()
        ready, _ = ray.wait(list(self.runs), timeout=timeout, num_returns=len(self.runs))
        for ref in ready:
            w, kind = self.runs.pop(ref)
            try:
                node = ray.get(ref)
            except ray.exceptions.RayActorError as e:  # the actor process is gone
                if kind == "ping":  # still restarting: ask again
                    time.sleep(0.05)
                    self.runs[self.workers[w].node.remote()] = (w, "ping")
                    continue
                self.fault(w, f"died ({type(e).__name__}); Ray is restarting it", events)
                self.runs[self.workers[w].node.remote()] = (w, "ping")
                continue
            except ray.exceptions.RayTaskError as e:  # its env or learner raised
                cause = getattr(e, "cause", None) or e
                self.fault(w, f"failed: {type(cause).__name__}: {cause}", events)
                kind = "ping"  # the actor is alive: start its loop again at once
            if kind == "ping":  # restarted: its loop starts again with fresh env state
                self.incarnation[w] += 1
                self.runs[self.workers[w].run.remote(self.incarnation[w])] = (w, "run")
            else:
                self.nodes.add(node)
        return stream, steps, events

    def drain(self) -> tuple[list, int]:
        """The episodes the server received since the last drain, and the global step."""
        return ray.get(self.server.drain.remote())

    def fault(self, w: int, what: str, events: list[str]) -> None:
        self.restarts += 1
        events.append(f"worker {w} {what}")
        if self.restarts > self.cfg.max_worker_restarts:
            raise RuntimeError(
                f"worker {w} {what.split(';')[0]}; that is {self.restarts} worker faults, over "
                f"the limit of --max-worker-restarts {self.cfg.max_worker_restarts}"
            )

    def done(self) -> bool:
        return not self.runs

    def stop(self) -> None:
        self.server.set_stop.remote()

    def state(self) -> dict:
        return ray.get(self.server.state.remote())


def wait_for_workers(run: RayRun, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not run.done() and time.monotonic() < deadline:
        try:
            run.poll(0.2)
        except RuntimeError:  # more worker faults while stopping: nothing left to restart for
            return


__all__ = ["RayRun", "cluster_cpus", "start_ray"]
