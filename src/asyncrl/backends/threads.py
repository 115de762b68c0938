"""Threads in one process. Workers share the global tensors directly; the GIL serialises the
Python parts of the loop, so this backend is for debugging, exact reproducibility with one
worker, and envs whose step releases the GIL."""

from __future__ import annotations

import multiprocessing
import queue
import threading
from typing import Any


class ThreadBackend:
    name = "threads"

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    def counter(self) -> Any:
        # A multiprocessing Value behaves the same under threads and keeps one code path.
        return multiprocessing.Value("q", 0)

    def queue(self) -> Any:
        return queue.Queue()

    def event(self) -> Any:
        return threading.Event()

    def start(self, target: Any, args_per_worker: list[tuple]) -> None:
        for i, args in enumerate(args_per_worker):
            t = threading.Thread(target=target, args=args, name=f"asyncrl-worker-{i}", daemon=True)
            t.start()
            self.threads.append(t)

    def alive(self) -> list[bool]:
        return [t.is_alive() for t in self.threads]

    def join(self, timeout: float) -> None:
        for t in self.threads:
            t.join(timeout)
