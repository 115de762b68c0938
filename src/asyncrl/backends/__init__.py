"""Execution backends: they start, kill and restart the worker loop, carry the workers'
messages to the main process, and know nothing of the algorithm.

Two families implement :class:`asyncrl.supervisor.Run`: :class:`~asyncrl.backends.local.
LocalRun` (threads or processes over shared memory) and :class:`~asyncrl.backends.ray.RayRun`
(a parameter server and worker actors on a Ray cluster, :mod:`asyncrl.backends.ray`).
:func:`make_run` picks one; nothing else in the main process knows which.

Where the workers run is a :class:`Cluster`, the one context that :func:`cluster_for` opens
around a run: this machine for threads and processes (nothing to start), a Ray cluster for ray
(started or joined on the way in, ended or left on the way out). The worker count comes from
it (:func:`worker_count`), so nothing starts Ray as a side effect of counting CPUs.

No lock is shared between a worker and anyone else: a worker killed at any instant must not
leave a lock held that stalls the others. Counters and the stop flag are shared-memory tensors;
messages travel on one channel per worker (a pipe for processes).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from asyncrl.envs import EnvInfo
from asyncrl.errors import UserError
from asyncrl.messages import Message

if TYPE_CHECKING:
    from asyncrl.models import ModelSpec
    from asyncrl.state import GlobalState, StateSettings, UpdateSettings
    from asyncrl.supervisor import Run
    from asyncrl.worker import WorkerSettings

    class BackendSettings(WorkerSettings, UpdateSettings, StateSettings, Protocol):
        """What a backend reads: its own options (the backend, the workers, their timeout,
        Ray's), and what it hands on to its workers, its store and its parameter server."""

        @property
        def workers(self) -> int | None: ...
        @property
        def worker_timeout(self) -> float: ...
        @property
        def address(self) -> str | None: ...
        @property
        def max_staleness(self) -> int | None: ...
        @property
        def ray_servers(self) -> int: ...
        @property
        def ray_grad_dtype(self) -> str: ...
        def ray_tuning(self, algo: str) -> tuple[int, int]: ...


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


class Cluster(Protocol):
    """Where a run's workers run, for as long as :func:`cluster_for`'s block lasts."""

    @property
    def cpus(self) -> int:
        """CPUs to run workers on: one worker each where ``--workers`` is not given."""
        ...


@dataclass(frozen=True)
class ThisMachine:
    """The threads and processes backends' cluster: this machine's cores."""

    cpus: int


@contextlib.contextmanager
def cluster_for(cfg: BackendSettings) -> Iterator[Cluster]:
    """The cluster of a run, for the duration of the block. ``--backend ray``: Ray started (a
    cluster of our own) or joined (``--address``) on the way in, and on the way out ended or
    left, whatever of it this started (:func:`asyncrl.backends.ray.cluster.ray_cluster`; a
    block inside another one shares it). Threads and processes: this machine, nothing to
    start. Imports no PyTorch, so that the CLI can enter it while PyTorch is imported."""
    if cfg.backend == "ray":
        from asyncrl.backends.ray.cluster import ray_cluster

        with ray_cluster(cfg) as cluster:
            yield cluster
    else:
        yield ThisMachine(usable_cpus())


def usable_cpus() -> int:
    """The cores this process may run on (taskset, a container's cpuset), not the machine's."""
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return len(cores) if cores else os.cpu_count() or 1


def worker_count(cfg: BackendSettings, cluster: Cluster) -> int:
    """How many workers the run has: ``--workers``, or one per CPU of ``cluster`` (this
    machine's cores, or the Ray cluster's CPUs: the cluster is up already, nothing starts)."""
    return cfg.workers if cfg.workers is not None else cluster.cpus


def make_run(cfg: BackendSettings, info: EnvInfo, spec: ModelSpec, state: GlobalState) -> Run:
    if cfg.backend == "ray":
        from asyncrl.backends.ray.run import RayRun

        return RayRun(cfg, info, spec, state)
    from asyncrl.backends.local import LocalRun

    return LocalRun(cfg, info, spec, state, make_backend(cfg.backend))


__all__ = [
    "Backend",
    "Cluster",
    "ThisMachine",
    "cluster_for",
    "make_backend",
    "make_run",
    "worker_count",
]
