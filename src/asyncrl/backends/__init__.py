"""Execution backends: they start, kill and restart the worker loop, carry the workers'
messages to the main process, and know nothing of the algorithm.

No lock is shared between a worker and anyone else: a worker killed at any instant must not
leave a lock held that stalls the others. Counters and the stop flag are shared-memory tensors;
messages travel on one channel per worker (a pipe for processes).
"""

from __future__ import annotations

from typing import Any, Protocol

from asyncrl.errors import UserError


class Backend(Protocol):
    name: str

    def start_worker(self, worker_id: int, target: Any, args: tuple) -> None:
        """Run ``target(*args, outbox)``; ``outbox.send(msg)`` reaches :meth:`receive`."""

    def receive(self, timeout: float) -> list[tuple]:
        """Messages from the workers, waiting up to ``timeout`` seconds for the first."""

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
