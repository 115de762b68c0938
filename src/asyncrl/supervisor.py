"""The main process's loop over a run: it starts the workers, reads their messages, restarts a
worker that fails, dies or hangs, asks for checkpoints and writes them, and stops the run on
the stop rule, the step budget, a signal or a fatal error."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from asyncrl.backends import Backend
from asyncrl.config import Config
from asyncrl.envs import EnvInfo
from asyncrl.monitor import Monitor
from asyncrl.worker import SharedState, run_worker


@dataclass
class Outcome:
    """How the run ended, for the trainer."""

    fatal: str | None = None  # a message: the run stopped on an error
    fatal_details: str = ""  # the worker's traceback, for --debug
    restarts: int = 0
    states: dict[int, dict] = field(default_factory=dict)  # last snapshot of each worker
    # the global state is gone or untrustworthy (parameter server dead, NaN): keep the last
    # good checkpoint and model as they are
    keep_last_checkpoint: bool = False


class Supervisor:
    def __init__(
        self,
        cfg: Config,
        info: EnvInfo,
        shared: SharedState,
        backend: Backend,
        monitor: Monitor,
        write_checkpoint: Callable[[dict[int, dict]], None],
        worker_states: dict[int, dict] | None = None,
        restarts: int = 0,
    ):
        self.cfg, self.info, self.shared, self.backend, self.monitor = (
            cfg,
            info,
            shared,
            backend,
            monitor,
        )
        self.write_checkpoint = write_checkpoint
        self.n = cfg.num_workers
        self.outcome = Outcome(restarts=restarts, states=dict(worker_states or {}))
        self.done: set[int] = set()
        self.interrupted: int | None = None  # the signal number that asked us to stop
        kind, every = cfg.checkpoint_interval()
        self.ckpt_kind, self.ckpt_every = kind, every
        self.last_ckpt_time = time.monotonic()
        self.last_ckpt_step = shared.global_steps()
        self.pending: tuple[int, set[int]] | None = None  # request id, workers yet to answer

    # ------------------------------------------------------------------ lifecycle
    def incarnation(self, wid: int) -> int:
        return int(self.shared.incarnation[wid])

    def start(self, wid: int, state: dict | None) -> None:
        self.shared.heartbeat[wid] = time.time()
        args = (wid, self.incarnation(wid), self.cfg, self.info, self.shared, state)
        self.backend.start_worker(wid, run_worker, args)

    def run(self) -> Outcome:
        for wid in range(self.n):
            self.start(wid, self.outcome.states.get(wid, {}).get("worker"))
        self.monitor.start_display()
        next_check = time.monotonic()
        while len(self.done) < self.n:
            for msg in self.backend.receive(timeout=0.1):
                self.handle(msg)
            # On a timer, not on a quiet channel: a busy healthy worker must not hide a hung one.
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + 0.25
                self.check_workers()
            self.maybe_checkpoint()
            self.monitor.refresh(self.shared.global_steps())
        return self.outcome

    def interrupt(self, signum: int) -> None:
        self.interrupted = signum
        self.stop()

    def stop(self, fatal: str | None = None, details: str = "") -> None:
        if fatal and self.outcome.fatal is None:
            self.outcome.fatal, self.outcome.fatal_details = fatal, details
        self.shared.stop()

    # ------------------------------------------------------------------ messages
    def handle(self, msg: tuple) -> None:
        kind, wid = msg[0], msg[1]
        if kind == "episodes":
            _, _, finished, step = msg
            for ret, length in finished:
                if self.monitor.episode(wid, ret, length, step):
                    self.stop()
        elif kind == "state":
            _, _, inc, request, snapshot = msg
            if inc == self.incarnation(wid):
                self.outcome.states[wid] = snapshot
                if self.pending and self.pending[0] == request:
                    self.pending[1].discard(wid)
                    self.finish_checkpoint_if_ready()
        elif kind == "nonfinite":
            _, _, step, what = msg
            self.monitor.log(f"worker {wid}: non-finite update skipped at step {step:,} ({what})")
            self.monitor.scalar("faults/nonfinite_updates", 1, step)
        elif kind == "error":
            _, _, inc, severity, text, tb = msg
            if inc != self.incarnation(wid):
                return
            if severity == "fatal":
                self.monitor.log(f"worker {wid} failed: {text}")
                self.stop(f"worker {wid} failed: {text}", tb)
                self.done.add(wid)
            else:
                self.restart(wid, f"failed: {text}", tb)
        elif kind == "done":
            _, _, inc, snapshot = msg
            if inc == self.incarnation(wid):
                if snapshot is not None:
                    self.outcome.states[wid] = snapshot
                self.done.add(wid)
                self.forget_pending(wid)

    # ------------------------------------------------------------------ faults
    def check_workers(self) -> None:
        now = time.time()
        for wid in range(self.n):
            if wid in self.done:
                continue
            if not self.backend.alive(wid):
                self.drain()  # its last messages may still be in flight
                if wid not in self.done:
                    code = self.backend.exitcode(wid)
                    how = f" (exit code {code})" if code is not None else ""
                    self.restart(wid, f"died without a report{how}")
            elif now - float(self.shared.heartbeat[wid]) > self.cfg.worker_timeout:
                self.restart(wid, f"sent no update for {self.cfg.worker_timeout:g} s (hung)")

    def drain(self, seconds: float = 0.5) -> None:
        """Handle what is in flight, for a bounded time: healthy workers never go quiet."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            msgs = self.backend.receive(timeout=0.05)
            if not msgs:
                return
            for msg in msgs:
                self.handle(msg)

    def restart(self, wid: int, why: str, details: str = "") -> None:
        self.forget_pending(wid)
        # Bump the incarnation first: the old worker, if it ever runs again, retires itself.
        self.shared.incarnation[wid] += 1
        self.backend.kill(wid)
        if self.shared.stopping():  # stopping anyway: nothing to restart for
            self.done.add(wid)
            return
        self.outcome.restarts += 1
        limit = self.cfg.max_worker_restarts
        if self.outcome.restarts > limit:
            self.monitor.log(f"worker {wid} {why}")
            self.done.add(wid)
            self.stop(
                f"worker {wid} {why}; that is {self.outcome.restarts} worker faults, over the "
                f"limit of --max-worker-restarts {limit}",
                details,
            )
            return
        self.monitor.log(
            f"worker {wid} {why}; restarting it with fresh env state "
            f"(restart {self.outcome.restarts} of at most {limit})"
        )
        self.monitor.scalar(
            "faults/worker_restarts", self.outcome.restarts, self.shared.global_steps()
        )
        self.start(wid, None)

    # ------------------------------------------------------------------ checkpoints
    def maybe_checkpoint(self) -> None:
        if self.pending is not None or self.ckpt_kind == "off" or self.shared.stopping():
            return
        step = self.shared.global_steps()
        due = (
            time.monotonic() - self.last_ckpt_time >= self.ckpt_every
            if self.ckpt_kind == "seconds"
            else step - self.last_ckpt_step >= self.ckpt_every
        )
        if not due:
            return
        # Workers answer at their next rollout boundary with their state and the global one.
        self.shared.checkpoint_request[0] += 1
        live = {w for w in range(self.n) if w not in self.done}
        self.pending = (int(self.shared.checkpoint_request[0]), live)
        self.last_ckpt_time, self.last_ckpt_step = time.monotonic(), step

    def forget_pending(self, wid: int) -> None:
        if self.pending is not None:
            self.pending[1].discard(wid)
            self.finish_checkpoint_if_ready()

    def finish_checkpoint_if_ready(self) -> None:
        if self.pending is not None and not self.pending[1]:
            self.pending = None
            self.write_checkpoint(self.outcome.states)


class RaySupervisor:
    """The same duties over a Ray run: episodes from the parameter server drive the monitor
    and the stop rule; dead worker actors are restarted by Ray and their loop started again;
    checkpoints hold the server's global state; a dead server stops the run."""

    def __init__(
        self,
        cfg: Config,
        monitor: Monitor,
        run: Any,
        write_checkpoint: Callable[[dict[int, dict]], None],
        n: int,
    ):
        self.cfg, self.monitor, self.run_, self.n = cfg, monitor, run, n
        self.write_checkpoint = write_checkpoint
        self.interrupted: int | None = None
        self.outcome = Outcome()
        self.ckpt_kind, self.ckpt_every = cfg.checkpoint_interval()
        self.last_ckpt = (time.monotonic(), 0)
        self.stopped = False

    def interrupt(self, signum: int) -> None:
        self.interrupted = signum

    def global_state(self) -> dict[int, dict]:
        """The server's state in the checkpoint's form (workers restart with fresh envs)."""
        s = self.run_.state()
        counters = np.zeros((3, self.n), np.int64)
        counters[:, 0] = (s["steps"], s["episodes"], s["nonfinite"])
        self.server_state = s
        return {
            0: {
                "worker": None,
                "params": s["params"],
                "optimizer": s["optimizer"],
                "target_params": s["target_params"],
                "counters": counters,
            }
        }

    def run(self) -> Outcome:
        self.monitor.start_display()
        while not self.run_.done():
            if self.interrupted is not None and not self.stopped:
                self.stopped = True
                self.run_.stop()
            try:
                stream, steps, events = self.run_.poll(0.1)
            except RuntimeError as e:  # worker faults past the limit
                self.outcome.fatal = str(e)
                self.run_.stop()
                break
            except Exception as e:  # the parameter server died (RayActorError)
                return self.server_died(e)
            for text in events:
                self.monitor.log(text)
            self.episodes(stream)
            self.monitor.refresh(steps)
            self.maybe_checkpoint(steps)
        try:  # the episodes of the workers' last calls, sent as their loops ended
            stream, steps = self.run_.drain()
            self.episodes(stream)
            self.monitor.refresh(steps)
        except Exception as e:  # the parameter server died (RayActorError)
            return self.server_died(e)
        self.outcome.restarts = self.run_.restarts
        self.outcome.states = self.global_state()
        return self.outcome

    def server_died(self, e: Exception) -> Outcome:
        # the global state is lost with it: the last checkpoint on disk stays as it was
        self.outcome.fatal = f"the parameter server died ({type(e).__name__})"
        self.outcome.keep_last_checkpoint = True
        self.outcome.restarts = self.run_.restarts
        return self.outcome

    def episodes(self, stream: list) -> None:
        for worker, finished in stream:
            for ret, length, step in finished:
                if self.monitor.episode(worker, ret, length, step) and not self.stopped:
                    self.stopped = True
                    self.run_.stop()

    def maybe_checkpoint(self, steps: int) -> None:
        if self.ckpt_kind == "off" or self.stopped:
            return
        t, s = self.last_ckpt
        due = (
            time.monotonic() - t >= self.ckpt_every
            if self.ckpt_kind == "seconds"
            else steps - s >= self.ckpt_every
        )
        if due:
            self.last_ckpt = (time.monotonic(), steps)
            self.write_checkpoint(self.global_state())
