"""Threads in one process. Workers share the global tensors directly; the GIL serialises the
Python parts of the loop, so this backend is for debugging, exact reproducibility with one
worker, and envs whose step releases the GIL.

A thread cannot be killed: a hung worker thread is *retired* instead (its incarnation is bumped,
so if it ever wakes up it exits without pushing) and a new thread takes its place.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from asyncrl.messages import Message


class _Outbox:
    def __init__(self, q: queue.Queue):
        self.send = q.put


class ThreadBackend:
    name = "threads"

    def __init__(self) -> None:
        self.threads: dict[int, threading.Thread] = {}
        self.inbox: queue.Queue = queue.Queue()

    def start_worker(self, worker_id: int, target: Any, args: tuple) -> None:
        t = threading.Thread(
            target=target,
            args=(*args, _Outbox(self.inbox)),
            name=f"asyncrl-worker-{worker_id}",
            daemon=True,
        )
        t.start()
        self.threads[worker_id] = t

    def receive(self, timeout: float) -> list[Message]:
        try:
            msgs = [self.inbox.get(timeout=timeout)]
        except queue.Empty:
            return []
        while len(msgs) < 64:
            try:
                msgs.append(self.inbox.get_nowait())
            except queue.Empty:
                break
        return msgs

    def alive(self, worker_id: int) -> bool:
        return self.threads[worker_id].is_alive()

    def exitcode(self, worker_id: int) -> int | None:
        return None

    def kill(self, worker_id: int) -> None:
        pass  # retired through its incarnation (see the module docstring)

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for t in self.threads.values():
            t.join(max(0.0, deadline - time.monotonic()))
