"""Processes sharing memory (torch.multiprocessing): parameters and optimizer statistics are
shared-memory tensors that every worker updates lock-free (Hogwild), as in the paper.

Each worker writes its messages to a pipe of its own, read by the main process with
``multiprocessing.connection.wait``: a worker killed in the middle of a message can only break
its own pipe, which its restart replaces (a shared ``multiprocessing.Queue`` would leave its
writer lock held and silence every other worker).
"""

from __future__ import annotations

import pickle
import signal
import sys
import time
from multiprocessing.connection import wait
from typing import Any

import torch.multiprocessing as mp

from asyncrl.messages import Message


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
        self.ctx: Any = mp.get_context(start_method)
        self.procs: dict[int, Any] = {}
        self.readers: dict[int, Any] = {}

    def start_worker(self, worker_id: int, target: Any, args: tuple) -> None:
        old = self.readers.pop(worker_id, None)
        if old is not None:
            old.close()
        reader, writer = self.ctx.Pipe(duplex=False)
        p = self.ctx.Process(
            target=_process_main,
            args=(target, (*args, writer)),
            name=f"asyncrl-worker-{worker_id}",
            daemon=True,
        )
        p.start()
        writer.close()  # the worker holds the only write end: EOF when it exits
        self.procs[worker_id] = p
        self.readers[worker_id] = reader

    def receive(self, timeout: float) -> list[Message]:
        msgs: list[Message] = []
        ready: list[Any] = wait(list(self.readers.values()), timeout)
        for reader in ready:
            try:
                while reader.poll():
                    msgs.append(reader.recv())
            except (
                EOFError,
                OSError,
                pickle.UnpicklingError,
                ValueError,
                TypeError,
                AttributeError,
                IndexError,
            ):
                # the worker exited (EOF) or died mid-message: its channel is done
                self._drop(reader)
        return msgs

    def _drop(self, reader: Any) -> None:
        for wid, r in list(self.readers.items()):
            if r is reader:
                del self.readers[wid]
        reader.close()

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
