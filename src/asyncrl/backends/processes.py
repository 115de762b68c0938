"""Processes sharing memory (torch.multiprocessing): parameters and optimizer statistics are
shared-memory tensors that every worker updates lock-free (Hogwild), as in the paper."""

from __future__ import annotations

import sys
from typing import Any

import torch.multiprocessing as mp


class ProcessBackend:
    name = "processes"

    def __init__(self, start_method: str | None = None) -> None:
        # fork starts a worker in milliseconds with torch already imported; spawn (macOS,
        # Windows) re-imports it in every worker. Shared tensors travel either way.
        if start_method is None:
            start_method = "fork" if sys.platform == "linux" else "spawn"
        self.ctx = mp.get_context(start_method)
        self.procs: list[Any] = []

    def counter(self) -> Any:
        return self.ctx.Value("q", 0)

    def queue(self) -> Any:
        return self.ctx.Queue()

    def event(self) -> Any:
        return self.ctx.Event()

    def start(self, target: Any, args_per_worker: list[tuple]) -> None:
        for i, args in enumerate(args_per_worker):
            p = self.ctx.Process(target=target, args=args, name=f"asyncrl-worker-{i}", daemon=True)
            p.start()
            self.procs.append(p)

    def alive(self) -> list[bool]:
        return [p.is_alive() for p in self.procs]

    def join(self, timeout: float) -> None:
        for p in self.procs:
            p.join(timeout)
        for p in self.procs:
            if p.is_alive():
                p.terminate()
                p.join(1.0)
