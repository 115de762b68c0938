"""A run on this machine (threads or processes): the global state in shared memory, workers
started, killed and restarted by a :class:`~asyncrl.backends.Backend`, and a check on a timer
for workers that died without a report or hung. The worker's side is
:class:`SharedMemoryStore`: shared-memory tensors it reads and updates itself, lock-free."""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from asyncrl.backends import Backend
from asyncrl.envs import EnvInfo
from asyncrl.messages import (
    Done,
    Episodes,
    Failed,
    Finished,
    GlobalSnapshot,
    Lost,
    Message,
    NonFinite,
    Snapshot,
    StatSums,
    WorkerSnapshot,
)
from asyncrl.models import ModelSpec, update_obs_stats
from asyncrl.state import EPISODES, NONFINITE, STEPS, GlobalState
from asyncrl.worker import Diverged, Outbox, Worker, _current

if TYPE_CHECKING:
    from asyncrl.backends import BackendSettings


@dataclass
class SharedMemory:
    """What the threads and processes backends share: the global state and the flags the main
    process uses to steer the workers."""

    state: GlobalState
    # float64 (workers,): each worker's last update, on the system-wide monotonic clock (the
    # same in every process; unlike the wall clock, no step of it or suspend reads as a hang)
    heartbeat: torch.Tensor
    incarnation: torch.Tensor  # int64 (workers,): bumped by the main process on a restart
    checkpoint_request: torch.Tensor  # int64 (1,): id of the latest checkpoint request
    stop_flag: torch.Tensor  # int64 (1,): set by the main process (stop rule, signal, error)
    # int64 (workers,): the checkpoint request of when each incarnation was started; it answers
    # every later one, also one made before it got going (a restart, then a checkpoint due)
    start_request: torch.Tensor
    main_pid: int  # the main process: a worker process whose parent it no longer is is orphaned
    # float64 (1,): the run's elapsed seconds, written by the main process on its loop's every
    # turn (Run.clock): what a schedule over time reads at each update
    clock: torch.Tensor

    @classmethod
    def create(cls, state: GlobalState, workers: int) -> SharedMemory:
        z = lambda *shape, dtype=torch.int64: torch.zeros(shape, dtype=dtype).share_memory_()  # noqa: E731
        beats = z(workers, dtype=torch.float64)
        clock = z(1, dtype=torch.float64)
        return cls(state, beats, z(workers), z(1), z(1), z(workers), os.getpid(), clock)

    def stopping(self) -> bool:
        return bool(self.stop_flag[0])

    def stop(self) -> None:
        self.stop_flag[0] = 1


def run_worker(
    worker_id: int,
    incarnation: int,
    cfg: BackendSettings,
    info: EnvInfo,
    spec: ModelSpec,
    shared: SharedMemory,
    state: dict | None,
    outbox: Outbox,
) -> None:
    """Entry point of the threads and processes backends' workers: run the loop, report how it
    ended (never die silently), and send :class:`Done` last."""
    _current.worker_id = worker_id
    final = None
    store = SharedMemoryStore(cfg, shared, outbox, worker_id, incarnation)
    try:
        worker = Worker(worker_id, incarnation, cfg, info, spec, store, state)
        store.attach(worker)
        final = worker.run()
    except BaseException as e:
        text = f"{type(e).__name__}: {e}"
        outbox.send(
            Failed(worker_id, incarnation, text, traceback.format_exc(), isinstance(e, Diverged))
        )
    finally:
        outbox.send(Done(worker_id, incarnation, final))


class SharedMemoryStore:
    """The global state for the threads and processes backends: shared-memory tensors that the
    worker reads and updates itself, lock-free, and a channel to the main process.

    The main process steers its workers through flags in shared memory, and the store answers
    them inside the loop's own calls (:class:`~asyncrl.worker.Store`): at each rollout boundary
    (``pull``) it beats the worker's heartbeat and answers a checkpoint request with the state
    of the worker it is attached to; an incarnation that the main process restarted (as hung)
    or that lost its parent is ``stopping``, pushes nothing and reports nothing."""

    def __init__(
        self, cfg: BackendSettings, shared: SharedMemory, outbox: Outbox, wid: int, incarnation: int
    ):
        self.cfg, self.shared, self.outbox = cfg, shared, outbox
        self.wid, self.incarnation = wid, incarnation
        self.state = shared.state
        # what this worker normalises with: the statistics as of its last rollout, its own
        self.norm_stats = self.state.merged_obs_stats()
        self.counters = shared.state.counters.numpy()  # a view: this worker writes its column
        # numpy views of the shared flags: indexing a numpy array costs a small fraction of what
        # a torch index does, on the worker's hot path
        self.stop_flag = shared.stop_flag.numpy()
        self.request = shared.checkpoint_request.numpy()
        self.heartbeat = shared.heartbeat.numpy()
        self.incarnations = shared.incarnation.numpy()
        self.clock = shared.clock.numpy()
        self.answered = int(shared.start_request[wid])
        # a worker thread lives in the main process, which has no parent to lose (a trainer
        # run under nohup outlives its shell); a worker process must exit with its parent
        self.in_process = os.getpid() == shared.main_pid
        self.worker: Worker | None = None

    def attach(self, worker: Worker) -> None:
        """The worker whose state answers the main process's checkpoint requests."""
        self.worker = worker

    def global_step(self) -> int:
        return int(self.counters[STEPS].sum())

    def retired(self) -> bool:
        """This incarnation must exit at once (restarted as hung, or orphaned)."""
        if self.incarnations[self.wid] != self.incarnation:
            return True
        return not self.in_process and os.getppid() != self.shared.main_pid

    def stopping(self) -> bool:
        return bool(self.stop_flag[0]) or self.retired()

    def pull(self, local: torch.Tensor, target_local: torch.Tensor | None) -> int:
        # the rollout boundary: alive, and the worker's state is whole (a checkpoint's moment)
        self.heartbeat[self.wid] = time.monotonic()
        request = int(self.request[0])
        if request > self.answered and self.worker is not None:
            self.answered = request
            snap = self._snapshot(self.worker)
            self.outbox.send(Snapshot(self.wid, self.incarnation, request, snap))
        return self.refresh(local, target_local)

    def refresh(self, local: torch.Tensor, target_local: torch.Tensor | None) -> int:
        local.copy_(self.state.params)
        if target_local is not None and self.state.target_params is not None:
            target_local.copy_(self.state.target_params)
        return 0  # the version of the parameters: Hogwild has none

    def push(self, grad: torch.Tensor | None, n_steps: int, version: int) -> int:
        if self.retired():  # a hung worker that wakes up must not push a stale update
            return -1
        self.counters[STEPS, self.wid] += n_steps
        global_step = self.global_step()
        if grad is not None:
            self.state.apply_update(self.cfg, grad, global_step, float(self.clock[0]))
        return global_step

    def report(self, finished: list[Finished], stats: StatSums, step: int) -> None:
        if self.retired():  # its column and its messages are the new incarnation's
            return
        self.counters[EPISODES, self.wid] += len(finished)
        self.outbox.send(Episodes(self.wid, finished, step, stats))

    def nonfinite(self, global_step: int, what: str) -> None:
        if self.retired():
            return
        self.counters[NONFINITE, self.wid] += 1
        self.outbox.send(NonFinite(self.wid, global_step, what))

    def obs_stats(self) -> torch.Tensor | None:
        return self.norm_stats

    def observe(self, obs: np.ndarray) -> None:
        if self.retired():  # the row is the new incarnation's: one writer each
            return
        assert self.state.obs_rows is not None and self.norm_stats is not None
        update_obs_stats(self.state.obs_rows[self.wid], obs)  # this worker's row: no race
        self.state.merged_obs_stats(out=self.norm_stats)  # everyone's, for the next rollout

    def snapshot(self, worker: Worker) -> WorkerSnapshot | None:
        """The loop's last call: its state to hand back, unless it was retired."""
        return None if self.retired() else self._snapshot(worker)

    def _snapshot(self, worker: Worker) -> WorkerSnapshot:
        """Worker state plus the global state as this worker leaves it (exact with 1 worker)."""
        return WorkerSnapshot(worker.state(), self.state.snapshot())


class LocalRun:
    def __init__(
        self,
        cfg: BackendSettings,
        info: EnvInfo,
        spec: ModelSpec,
        state: GlobalState,
        backend: Backend,
    ):
        self.cfg, self.info, self.spec, self.state, self.backend = cfg, info, spec, state, backend
        self.workers = state.counters.shape[1]
        self.shared = SharedMemory.create(state, self.workers)
        # Incarnations name a worker's seeds (asyncrl.envs.env_seeds): a resumed run counts from
        # its step count, so that a worker resumed without its state (another worker count) or
        # restarted plays new games, not those of the run's opening and first restarts
        self.shared.incarnation.fill_(state.steps())
        self.retired: set[int] = set()
        self.finished: set[int] = set()  # workers whose current incarnation sent Done
        self.next_check = time.monotonic()

    def start(self, states: dict[int, dict]) -> None:
        for wid in range(self.workers):
            self._start(wid, states.get(wid))

    def _start(self, wid: int, state: dict | None) -> None:
        self.shared.heartbeat[wid] = time.monotonic()
        self.shared.start_request[wid] = self.shared.checkpoint_request[0]
        args = (wid, self.incarnation(wid), self.cfg, self.info, self.spec, self.shared, state)
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
        now = time.monotonic()
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
                out.append(Lost(wid, self.incarnation(wid), f"died without a report{how}"))
            elif now - float(self.shared.heartbeat[wid]) > self.cfg.worker_timeout:
                out.append(Lost.hung(wid, self.incarnation(wid), self.cfg.worker_timeout))
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

    def clock(self, elapsed: float) -> None:
        self.shared.clock[0] = elapsed

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
