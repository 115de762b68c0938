"""A run on this machine (threads or processes): the global state in shared memory, workers
started, killed and restarted by a :class:`~asyncrl.backends.Backend`, and a check on a timer
for workers that died without a report or hung."""

from __future__ import annotations

import time
from typing import Any

from asyncrl.backends import Backend
from asyncrl.config import Config
from asyncrl.envs import EnvInfo
from asyncrl.messages import Done, GlobalSnapshot, Lost, Message, WorkerSnapshot
from asyncrl.state import GlobalState
from asyncrl.worker import SharedMemory, run_worker


class LocalRun:
    def __init__(self, cfg: Config, info: EnvInfo, state: GlobalState, backend: Backend):
        self.cfg, self.info, self.state, self.backend = cfg, info, state, backend
        self.workers = state.counters.shape[1]
        self.shared = SharedMemory.create(state, self.workers)
        self.retired: set[int] = set()
        self.finished: set[int] = set()  # workers whose current incarnation sent Done
        self.next_check = time.monotonic()

    def start(self, states: dict[int, dict]) -> None:
        for wid in range(self.workers):
            self._start(wid, states.get(wid))

    def _start(self, wid: int, state: dict | None) -> None:
        self.shared.heartbeat[wid] = time.time()
        args = (wid, self.incarnation(wid), self.cfg, self.info, self.shared, state)
        self.backend.start_worker(wid, run_worker, args)

    def incarnation(self, wid: int) -> int:
        return int(self.shared.incarnation[wid])

    def receive(self, timeout: float) -> list[Message]:
        msgs = self._note(self.backend.receive(timeout))
        # On a timer, not on a quiet channel: a busy healthy worker must not hide a hung one.
        if time.monotonic() >= self.next_check:
            self.next_check = time.monotonic() + 0.25
            msgs.extend(self.lost())
        return msgs

    def lost(self) -> list[Message]:
        out: list[Message] = []
        now = time.time()
        for wid in range(self.workers):
            if wid in self.retired or wid in self.finished:
                continue
            if not self.backend.alive(wid):
                # its last messages (Done, if it exited normally) may still be in flight:
                # deliver them first, so that only a silent death reads as Lost
                out.extend(self.drain())
                if wid in self.finished:
                    continue
                code = self.backend.exitcode(wid)
                how = f" (exit code {code})" if code is not None else ""
                out.append(Lost(wid, f"died without a report{how}"))
            elif now - float(self.shared.heartbeat[wid]) > self.cfg.worker_timeout:
                out.append(Lost(wid, f"sent no update for {self.cfg.worker_timeout:g} s (hung)"))
        return out

    def drain(self, seconds: float = 0.5) -> list[Message]:
        """What is in flight, for a bounded time: healthy workers never go quiet."""
        out: list[Message] = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            msgs = self.backend.receive(timeout=0.05)
            if not msgs:
                break
            out.extend(self._note(msgs))
        return out

    def _note(self, msgs: list[Message]) -> list[Message]:
        for m in msgs:
            if isinstance(m, Done) and m.incarnation == self.incarnation(m.worker):
                self.finished.add(m.worker)
        return msgs

    def restart(self, wid: int) -> None:
        self._retire(wid)
        self.finished.discard(wid)
        self._start(wid, None)

    def retire(self, wid: int) -> None:
        self._retire(wid)
        self.retired.add(wid)

    def _retire(self, wid: int) -> None:
        # Bump the incarnation first: the old worker, if it ever runs again, retires itself.
        self.shared.incarnation[wid] += 1
        self.backend.kill(wid)

    def global_step(self) -> int:
        return self.state.steps()

    def request_snapshots(self) -> tuple[int, set[int]]:
        self.shared.checkpoint_request[0] += 1
        live = set(range(self.workers)) - self.retired
        return int(self.shared.checkpoint_request[0]), live

    def checkpoint_state(self, workers: dict[int, WorkerSnapshot]) -> GlobalSnapshot:
        # The global state of the newest worker snapshot: with one worker, exactly the state
        # the worker left behind at that rollout boundary (so a resume is bit-for-bit exact).
        if not workers:
            return self.state.snapshot()
        return max((s.glob for s in workers.values()), key=lambda g: g.steps)

    def stop(self) -> None:
        self.shared.stop()

    def closing(self) -> tuple[dict[str, Any], list[str]]:
        return {}, []

    def finish(self, workers: dict[int, WorkerSnapshot]) -> GlobalSnapshot:
        self.shared.stop()
        self.backend.join(timeout=10.0)
        # Every worker has stopped at a rollout boundary (or died): the live state is final,
        # and with one worker it equals that worker's last snapshot (an exact resume).
        return self.state.snapshot()
