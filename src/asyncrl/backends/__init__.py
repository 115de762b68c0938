"""Execution backends: they start, stop and restart the worker loop and know nothing of the
algorithm. Each makes the shared primitives that suit it (queue, event)."""

from __future__ import annotations

from typing import Any, Protocol

from asyncrl.errors import UserError


class Backend(Protocol):
    name: str

    def queue(self) -> Any: ...
    def event(self) -> Any: ...
    def start_worker(self, worker_id: int, target: Any, args: tuple) -> None: ...
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
