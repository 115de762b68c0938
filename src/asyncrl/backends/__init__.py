"""Execution backends: they start, kill and restart the worker loop, carry the workers'
messages to the main process, and know nothing of the algorithm.

Two families implement :class:`asyncrl.supervisor.Run`: :class:`~asyncrl.backends.local.
LocalRun` (threads or processes over shared memory) and :class:`~asyncrl.backends.ray.RayRun`
(a parameter server and worker actors on a Ray cluster). :func:`make_run` picks one; nothing
else in the main process knows which.

No lock is shared between a worker and anyone else: a worker killed at any instant must not
leave a lock held that stalls the others. Counters and the stop flag are shared-memory tensors;
messages travel on one channel per worker (a pipe for processes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from asyncrl.config import Config
from asyncrl.envs import EnvInfo
from asyncrl.errors import UserError
from asyncrl.messages import Message

if TYPE_CHECKING:
    from asyncrl.models import ModelSpec
    from asyncrl.state import GlobalState
    from asyncrl.supervisor import Run


class Backend(Protocol):
    """How local workers run: threads of this process or processes of this machine."""

    name: str

    def start_worker(self, worker_id: int, target: Callable[..., None], args: tuple) -> None:
        """Run ``target(*args, outbox)``; ``outbox.send(msg)`` reaches :meth:`receive`."""
        ...

    def receive(self, timeout: float) -> list[Message]:
        """Messages from the workers, waiting up to ``timeout`` seconds for the first."""
        ...

    def alive(self, worker_id: int) -> bool: ...
    def exitcode(self, worker_id: int) -> int | None: ...
    def kill(self, worker_id: int) -> None: ...
    def join(self, timeout: float) -> None: ...


def make_backend(name: str) -> Backend:
    if name == "threads":
        from asyncrl.backends.threads import ThreadBackend

        return ThreadBackend()
    if name == "processes":
        from asyncrl.backends.processes import ProcessBackend

        return ProcessBackend()
    raise UserError(f"--backend: unknown backend {name!r}, choose threads or processes")


def worker_count(cfg: Config) -> int:
    """How many workers the run has: ``--workers``, or one per core (per CPU of the Ray
    cluster, which this starts or joins)."""
    if cfg.backend == "ray":
        from asyncrl.backends.cluster import cluster_cpus, start_ray

        start_ray(cfg)
        return cfg.workers or cluster_cpus()
    return cfg.num_workers


def make_run(cfg: Config, info: EnvInfo, spec: ModelSpec, state: GlobalState) -> Run:
    if cfg.backend == "ray":
        from asyncrl.backends.ray import RayRun

        return RayRun(cfg, info, spec, state)
    from asyncrl.backends.local import LocalRun

    return LocalRun(cfg, info, state, make_backend(cfg.backend))


__all__ = ["Backend", "make_backend", "make_run", "worker_count"]
