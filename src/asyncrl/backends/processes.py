"""Processes sharing memory (torch.multiprocessing): parameters and optimizer statistics are
shared-memory tensors that every worker updates lock-free (Hogwild), as in the paper."""

from __future__ import annotations

import signal
import sys
import time
from typing import Any

import torch.multiprocessing as mp


def _process_main(target: Any, args: tuple) -> None:
    # Ctrl-C reaches the whole process group: the main process alone decides how to stop (it
    # asks the workers for their state and writes a final checkpoint).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    target(*args)


class ProcessBackend:
    name = "processes"

    def __init__(self, start_method: str | None = None) -> None:
        # fork starts a worker in milliseconds with torch already imported; spawn (macOS,
        # Windows) re-imports it in every worker. Shared tensors travel either way.
        if start_method is None:
            start_method = "fork" if sys.platform == "linux" else "spawn"
        self.ctx = mp.get_context(start_method)
        self.procs: dict[int, Any] = {}

    def queue(self) -> Any:
        return self.ctx.Queue()

    def event(self) -> Any:
        return self.ctx.Event()

    def start_worker(self, worker_id: int, target: Any, args: tuple) -> None:
        p = self.ctx.Process(
            target=_process_main,
            args=(target, args),
            name=f"asyncrl-worker-{worker_id}",
            daemon=True,
        )
        p.start()
        self.procs[worker_id] = p

    def pid(self, worker_id: int) -> int:
        return self.procs[worker_id].pid

    def alive(self, worker_id: int) -> bool:
        return self.procs[worker_id].is_alive()

    def exitcode(self, worker_id: int) -> int | None:
        return self.procs[worker_id].exitcode

    def kill(self, worker_id: int) -> None:
        p = self.procs[worker_id]
        if p.is_alive():
            p.kill()
            p.join(5.0)

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for p in self.procs.values():
            p.join(max(0.0, deadline - time.monotonic()))
        for p in self.procs.values():
            if p.is_alive():
                p.kill()
                p.join(1.0)
