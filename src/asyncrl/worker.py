"""The actor-learner loop: one function that every backend runs unchanged.

    loop:
        theta'  <- theta                     pull the global parameters (one flat copy)
        collect up to t_max steps of each of the worker's envs with pi(.; theta')
        loss    <- algorithm.loss(rollout)    A3C | n-step Q | one-step Q | one-step Sarsa
        d theta <- grad(loss); clip           one batched backward pass for the whole rollout
        theta   <- shared optimizer step      lock-free (Hogwild), statistics shared
        report finished episodes; count global steps

Counters are lock-free: each worker adds to its own slot of a shared int64 tensor and reads
the global value as the sum of the slots, so no lock can be left held by a killed worker.
"""

from __future__ import annotations

import math
import os
import pickle
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from asyncrl.algos import make_algorithm
from asyncrl.config import Config
from asyncrl.envs import EnvInfo, dump_vec_env, make_vec_env
from asyncrl.models import build_model, flat_grad, flatten_parameters
from asyncrl.optim import SharedOptimizer, clip_grad_norm_, linear_lr
from asyncrl.rollout import Rollout

# Rows of SharedState.counters (one column per worker).
STEPS, EPISODES, NONFINITE = 0, 1, 2

_current = threading.local()


def current_worker_id() -> int | None:
    """The id of the worker running this code (for envs that want it), else None."""
    return getattr(_current, "worker_id", None)


@dataclass
class SharedState:
    """What the workers share with each other and with the main process."""

    params: torch.Tensor  # the global parameters, one flat vector
    optimizer: SharedOptimizer
    target_params: torch.Tensor | None  # theta^- of the Q methods
    counters: torch.Tensor  # int64 (3, workers): steps, episodes, non-finite updates skipped
    heartbeat: torch.Tensor  # float64 (workers,): time.time() of each worker's last update
    incarnation: torch.Tensor  # int64 (workers,): bumped by the main process on a restart
    checkpoint_request: torch.Tensor  # int64 (1,): id of the latest checkpoint request
    stop_flag: torch.Tensor  # int64 (1,): set by the main process (stop rule, signal, error)

    def global_steps(self) -> int:
        return int(self.counters[STEPS].sum())

    def stopping(self) -> bool:
        return bool(self.stop_flag[0])

    def stop(self) -> None:
        self.stop_flag[0] = 1


class EnvFault(RuntimeError):
    """The env produced something the learner must not take (a non-finite value)."""


class Diverged(RuntimeError):
    """Too many non-finite losses or gradients in a row: restarting will not help."""


def worker_seed(seed: int, worker_id: int, incarnation: int = 0) -> int:
    # A restarted worker gets fresh env state: a new stream, still a function of the seed.
    return seed * 10_007 + worker_id + 1_000_003 * incarnation


def run_worker(
    worker_id: int,
    incarnation: int,
    cfg: Config,
    info: EnvInfo,
    shared: SharedState,
    state: dict | None,
    outbox: Any,
) -> None:
    """Entry point of every backend's worker. Messages to the main process (``outbox.send``):

    ``("episodes", wid, [(return, length), ...], global_step)``;
    ``("state", wid, incarnation, request_id, state)`` answering a checkpoint request;
    ``("nonfinite", wid, global_step, what)``; ``("error", wid, incarnation, kind, text, tb)``;
    and last ``("done", wid, incarnation, state)``.
    """
    # One thread of compute per worker: more oversubscribes the cores, the classic reason A3C
    # stops learning.
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    _current.worker_id = worker_id
    final_state = None
    store = SharedMemoryStore(shared, outbox, worker_id, incarnation)
    try:
        final_state = Worker(worker_id, incarnation, cfg, info, store, state).run()
    except BaseException as e:  # report, never die silently
        kind = "fatal" if isinstance(e, Diverged) else "error"
        outbox.send(
            (
                "error",
                worker_id,
                incarnation,
                kind,
                f"{type(e).__name__}: {e}",
                traceback.format_exc(),
            )
        )
    finally:
        outbox.send(("done", worker_id, incarnation, final_state))


def apply_update(
    cfg: Config,
    optimizer: SharedOptimizer,
    params: torch.Tensor,
    target_params: torch.Tensor | None,
    grad: torch.Tensor,
    global_step: int,
    n_steps: int,
) -> None:
    """One asynchronous update of the global parameters (every store applies it this way)."""
    lr = cfg.lr if cfg.lr_schedule == "constant" else linear_lr(cfg.lr, global_step, cfg.steps)
    optimizer.step(grad, lr)
    period = cfg.target_update
    if target_params is not None and global_step // period != (global_step - n_steps) // period:
        # Whoever crosses a multiple of target_update refreshes theta^- for everyone.
        target_params.copy_(params)


class SharedMemoryStore:
    """The global state for the threads and processes backends: shared-memory tensors that the
    worker reads and updates itself, lock-free, and a channel to the main process."""

    def __init__(self, shared: SharedState, outbox: Any, wid: int, incarnation: int):
        self.shared, self.outbox, self.wid, self.incarnation = shared, outbox, wid, incarnation
        self.counters = shared.counters.numpy()  # a view: this worker writes its own column
        # numpy views of the shared flags: indexing them costs ~0.1 us, a torch index ~3 us
        self.stop_flag = shared.stop_flag.numpy()
        self.request = shared.checkpoint_request.numpy()
        self.heartbeat = shared.heartbeat.numpy()
        self.incarnations = shared.incarnation.numpy()
        self.answered = int(self.request[0])
        self.parent = os.getppid()

    def global_step(self) -> int:
        return int(self.counters[STEPS].sum())

    def retired(self) -> bool:
        """The main process restarted this worker (it hung), or itself died (kill -9)."""
        return self.incarnations[self.wid] != self.incarnation or os.getppid() != self.parent

    def stopping(self) -> bool:
        return bool(self.stop_flag[0])

    def pull(self, local: torch.Tensor, target_local: torch.Tensor | None) -> int:
        local.copy_(self.shared.params)
        if target_local is not None:
            target_local.copy_(self.shared.target_params)
        return 0  # the version of the parameters: Hogwild has none

    def push(self, cfg: Config, grad: torch.Tensor | None, n_steps: int, version: int) -> int:
        """Count the steps; apply ``grad`` unless it is None (non-finite); new global step."""
        self.counters[STEPS, self.wid] += n_steps
        global_step = self.global_step()
        if grad is not None:
            sh = self.shared
            apply_update(cfg, sh.optimizer, sh.params, sh.target_params, grad, global_step, n_steps)
        return global_step

    def report(self, finished: list[tuple[float, int]], global_step: int) -> None:
        if finished:
            self.counters[EPISODES, self.wid] += len(finished)
            self.outbox.send(("episodes", self.wid, finished, global_step))

    def nonfinite(self, global_step: int, what: str) -> None:
        self.counters[NONFINITE, self.wid] += 1
        self.outbox.send(("nonfinite", self.wid, global_step, what))

    def alive_and_asked(self, worker: Worker) -> None:
        """Heartbeat; answer a checkpoint request with a snapshot."""
        self.heartbeat[self.wid] = time.time()
        request = int(self.request[0])
        if request > self.answered:
            self.answered = request
            self.outbox.send(("state", self.wid, self.incarnation, request, self.snapshot(worker)))

    def snapshot(self, worker: Worker) -> dict:
        """Worker state plus the global state as this worker leaves it (exact with 1 worker)."""
        sh = self.shared
        return {
            "worker": worker.state(),
            "params": sh.params.numpy().copy(),
            "optimizer": {k: v.numpy().copy() for k, v in sh.optimizer.state_dict().items()},
            "target_params": None if sh.target_params is None else sh.target_params.numpy().copy(),
            "counters": sh.counters.numpy().copy(),
        }


class Worker:
    """One actor-learner: its envs, its local networks, its rollout buffer, and the loop."""

    def __init__(
        self,
        wid: int,
        incarnation: int,
        cfg: Config,
        info: EnvInfo,
        store: Any,
        state: dict | None,
    ):
        self.wid, self.incarnation, self.cfg, self.info = wid, incarnation, cfg, info
        self.store = store
        seed = worker_seed(cfg.seed, wid, incarnation)
        self.rng = np.random.default_rng(seed)
        torch.manual_seed(seed)
        self.algo = make_algorithm(cfg, info)
        self.algo.start_worker(wid, self.rng)
        spec = self.algo.model_spec()
        self.model = build_model(spec)
        self.local = flatten_parameters(self.model)
        self.target_model, self.target_local = None, None
        if self.algo.uses_target_network:
            self.target_model = build_model(spec)
            self.target_local = flatten_parameters(self.target_model)
            self.target_model.requires_grad_(False)

        self.T, B = self.algo.rollout_length(), cfg.envs_per_worker
        self.buf = Rollout.empty(self.T, B, info.obs_dim)
        self.obs_t = torch.from_numpy(self.buf.obs)  # views: buf.obs[t] writes show in obs_t[t]
        if state is not None and state.get("envs") is not None:
            self._restore(state)
        else:
            self.envs = make_vec_env(cfg.env, B)
            self.obs, _ = self.envs.reset(seed=seed)
            self.prev_done = np.zeros(B, bool)
            self.ep_return = np.zeros(B, np.float64)
            self.ep_length = np.zeros(B, np.int64)
            self.next_action: np.ndarray | None = None  # drawn at the end of a rollout (Sarsa)
        self.bad_in_a_row = 0

    # ------------------------------------------------------------------ state for checkpoints
    def state(self) -> dict:
        return {
            "rng": self.rng.bit_generator.state,
            "algo": self.algo.worker_state(),
            # an env that cannot be pickled resumes with fresh env state
            "envs": dump_vec_env(self.envs),
            "obs": self.obs.copy(),
            "prev_done": self.prev_done.copy(),
            "ep_return": self.ep_return.copy(),
            "ep_length": self.ep_length.copy(),
            "next_action": None if self.next_action is None else self.next_action.copy(),
        }

    def _restore(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.algo.load_worker_state(state["algo"])
        self.envs = pickle.loads(state["envs"])
        self.obs = state["obs"]
        self.prev_done = state["prev_done"]
        self.ep_return = state["ep_return"]
        self.ep_length = state["ep_length"]
        self.next_action = state["next_action"]

    # ------------------------------------------------------------------ the loop
    def run(self) -> dict | None:
        cfg, store, algo, buf = self.cfg, self.store, self.algo, self.buf
        global_step = store.global_step()
        store.alive_and_asked(self)
        while not store.stopping() and global_step < cfg.steps:
            if store.retired():
                return None
            version = store.pull(self.local, self.target_local)
            finished, length = self.collect(global_step)
            ro = buf.prefix(length)
            self.check_env_values(ro, global_step)

            loss, _stats = algo.loss(self.model, ro, self.target_model)
            self.model.zero_grad(set_to_none=True)
            loss.backward()
            grad = flat_grad(self.model)
            norm = clip_grad_norm_(grad, cfg.max_grad_norm)
            if store.retired():  # a hung worker that wakes up must not push a stale update
                return None
            finite = math.isfinite(norm) and math.isfinite(float(loss.detach()))
            # never let a NaN or inf reach the global parameters
            global_step = store.push(cfg, grad if finite else None, int(ro.valid.sum()), version)
            if finite:
                self.bad_in_a_row = 0
            else:
                self.nonfinite(global_step, loss, norm)
            store.report(finished, global_step)
            store.alive_and_asked(self)
        snapshot = store.snapshot(self)
        self.envs.close()
        return snapshot

    def collect(self, global_step: int) -> tuple[list[tuple[float, int]], int]:
        """Fill the rollout buffer; return the finished episodes and the steps taken."""
        algo, buf = self.algo, self.buf
        B = buf.num_envs
        finished: list[tuple[float, int]] = []
        length = self.T
        with torch.no_grad():
            for t in range(self.T):
                buf.obs[t] = self.obs.reshape(B, -1)
                valid = ~self.prev_done
                buf.valid[t] = valid
                if self.next_action is not None:
                    action, self.next_action = self.next_action, None
                else:
                    action = algo.act(self.model, self.obs_t[t], global_step, self.rng)
                self.obs, reward, term, trunc, _ = self.envs.step(action)
                done = term | trunc
                buf.actions[t] = action
                buf.rewards[t] = reward * valid
                buf.terminated[t] = term
                buf.ends[t] = done
                self.ep_return += buf.rewards[t]
                self.ep_length += valid
                self.prev_done = done
                if done.any():
                    for i in np.flatnonzero(done):
                        finished.append((float(self.ep_return[i]), int(self.ep_length[i])))
                    self.ep_return[done] = 0.0
                    self.ep_length[done] = 0
                    if algo.update_at_episode_end:
                        length = t + 1
                        break
            buf.obs[length] = self.obs.reshape(B, -1)
            if algo.needs_next_action:
                self.next_action = algo.act(self.model, self.obs_t[length], global_step, self.rng)
                buf.next_actions[:] = self.next_action
        return finished, length

    def check_env_values(self, ro: Rollout, global_step: int) -> None:
        # One check per rollout, not per step: cheap on the hot path, exact in what it reports.
        for name, values in (("observation", ro.obs), ("reward", ro.rewards)):
            if not np.isfinite(values).all():
                t, env = np.argwhere(~np.isfinite(values.reshape(len(values), ro.num_envs, -1)))[0][
                    :2
                ]
                raise EnvFault(
                    f"{self.cfg.env} returned a non-finite {name} to worker {self.wid} "
                    f"(env {env}, step {t} of the rollout ending at global step {global_step})"
                )

    def nonfinite(self, global_step: int, loss: torch.Tensor, norm: float) -> None:
        self.bad_in_a_row += 1
        what = f"loss {float(loss.detach())}, gradient norm {norm}"
        self.store.nonfinite(global_step, what)
        if self.bad_in_a_row >= self.cfg.max_nonfinite:
            raise Diverged(
                f"{self.bad_in_a_row} non-finite updates in a row at global step {global_step} "
                f"({what}); none was applied"
            )
