"""Execution backends: they start the worker loop N times and know nothing of the algorithm."""

from __future__ import annotations

from typing import Any, Protocol

from asyncrl.errors import UserError


class Backend(Protocol):
    """Makes the shared primitives and runs ``run_worker`` once per worker."""

    name: str

    def counter(self) -> Any: ...
    def queue(self) -> Any: ...
    def event(self) -> Any: ...
    def start(self, target: Any, args_per_worker: list[tuple]) -> None: ...
    def alive(self) -> list[bool]: ...
    def join(self, timeout: float) -> None: ...


def make_backend(name: str) -> Backend:
    if name == "threads":
        from asyncrl.backends.threads import ThreadBackend

        return ThreadBackend()
    if name == "processes":
        from asyncrl.backends.processes import ProcessBackend

        return ProcessBackend()
    raise UserError(f"--backend: unknown backend {name!r}, choose threads or processes")
