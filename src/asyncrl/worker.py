"""The actor-learner loop, shared by every backend (threads, processes, Ray).

Each worker owns B envs stepped together (one batched forward pass per step), a local copy of
the network, and a preallocated rollout buffer. Per rollout:

    theta' <- store.pull()                       (and theta^- for the Q methods)
    collect up to t_max steps of the B envs      (algorithm hooks at rollout begin / end)
    for each update of algo.updates(rollout):    one for the paper's methods; APPO's epochs x
                                                 minibatches (fresh parameters pulled before
                                                 each, as before A3C's with --vtrace)
        loss <- the update's loss                one batched forward + backward pass
        grad <- clip(d loss / d theta')
        store.push(grad)                         shared optimizer step, or sent to a server
    store.report(episodes, statistics)

The ``store`` (a :class:`Store`) is the only thing that differs between backends: shared
memory for threads and processes (:class:`asyncrl.backends.local.SharedMemoryStore`), a
parameter server for Ray (:class:`asyncrl.backends.ray.RayStore`). The
loop keeps no algorithm-specific fields: what an algorithm carries from one rollout to the next
(Sarsa's next action, a recurrent state) lives in the algorithm's per-worker state.

Reliability: an exception is reported (with its traceback) to the main process, never swallowed;
a non-finite loss or gradient is never applied; the loop stops at a rollout boundary when the
main process sets the stop flag, and retires itself if the main process restarted it (hung) or
died (orphaned). Workers share no lock with anyone, so no lock can be left held by a killed
worker.
"""

from __future__ import annotations

import contextlib
import math
import pickle
import threading
import time
from typing import Protocol

import numpy as np
import torch

from asyncrl.actionmask import read_masks
from asyncrl.algos import make_algorithm
from asyncrl.envs import EnvInfo, dump_vec_env, env_seeds, make_vec_env, reset_vec_env
from asyncrl.errors import EnvFault
from asyncrl.heap import keep_freed_memory
from asyncrl.messages import (
    Finished,
    Message,
    StatSums,
    WorkerSnapshot,
)
from asyncrl.models import (
    ModelSpec,
    bind_obs_stats,
    build_model,
    flat_grad,
    flatten_parameters,
    write_context,
)
from asyncrl.optim import clip_grad_norm_
from asyncrl.rollout import Rollout
from asyncrl.settings import RolloutSettings

_current = threading.local()

#: seconds between two reports of a worker's learner statistics when no episode ends
STATS_EVERY = 2.0


def current_worker_id() -> int | None:
    """The id of the worker running this code (for envs that want it), else None."""
    return getattr(_current, "worker_id", None)


def limit_threads() -> None:
    """One thread of compute per worker: more oversubscribes the cores, the classic reason A3C
    stops learning. ``torch.set_num_threads`` also sets OpenMP's count, so this works after
    torch is imported (the OMP_NUM_THREADS variable would not)."""
    torch.set_num_threads(1)
    keep_freed_memory()


class Outbox(Protocol):
    def send(self, msg: Message) -> None: ...


class Store(Protocol):
    """The worker's view of the global state: what every backend provides, and all the loop
    calls on it.

    A run that steers its workers itself (the shared-memory backends' heartbeats, checkpoint
    requests and restarted workers: :class:`~asyncrl.backends.local.SharedMemoryStore`) does it
    inside these calls: at the rollout boundary (``pull``), and through ``stopping`` and
    ``push`` for a worker that must exit. A parameter server needs none of it (its run replaces
    a dead worker actor with a fresh one and reads the global state from the server), and the
    loop never asks which it has."""

    def global_step(self) -> int: ...

    def stopping(self) -> bool:
        """The loop ends at this rollout boundary (the run stops, or this worker must exit)."""
        ...

    def pull(self, local: torch.Tensor, target_local: torch.Tensor | None) -> int:
        """The rollout boundary: copy the global parameters (and theta^-) into the local ones;
        return their version."""
        ...

    def refresh(self, local: torch.Tensor, target_local: torch.Tensor | None) -> int:
        """Copy the global parameters into the local ones between the updates of one rollout
        (no rollout boundary: the worker's state is not whole); return their version."""
        ...

    def push(self, grad: torch.Tensor | None, n_steps: int, version: int) -> int:
        """Count ``n_steps``; apply ``grad`` unless None (non-finite); return the global step,
        or -1 where this worker must exit at once (restarted as hung, or orphaned: nothing was
        applied)."""
        ...

    def report(self, finished: list[Finished], stats: StatSums, step: int) -> None: ...

    def nonfinite(self, global_step: int, what: str) -> None:
        """Tell the main process of a non-finite update that was skipped (``push`` counted
        it)."""
        ...

    def snapshot(self, worker: Worker) -> WorkerSnapshot | None:
        """The loop's last call: deliver what is pending; the state to hand back (None where
        the server keeps it)."""
        ...

    def obs_stats(self) -> torch.Tensor | None:
        """The observation statistics the model normalises with (None: none)."""
        ...

    def observe(self, obs: np.ndarray) -> None:
        """Merge a rollout's observations into the statistics everyone normalises with."""
        ...


class Diverged(RuntimeError):
    """Too many non-finite losses or gradients in a row: restarting will not help."""


class PolicyFault(Diverged):
    """The policy produced a non-finite action: restarting from the same parameters will not
    help."""


class RunningStats:
    """Sums and counts of the learner's statistics since the last report (a dict update per
    rollout; the main process turns them into running means)."""

    def __init__(self) -> None:
        self.sums: StatSums = {}
        self.last = time.monotonic()

    def add(self, stats: dict[str, float]) -> None:
        sums = self.sums
        for k, v in stats.items():
            s, n = sums.get(k, (0.0, 0))
            sums[k] = (s + v, n + 1)

    def take(self) -> StatSums:
        out, self.sums = self.sums, {}
        self.last = time.monotonic()
        return out

    def due(self) -> bool:
        return time.monotonic() - self.last >= STATS_EVERY


class WorkerSettings(Protocol):
    """What a worker reads: its envs, its seed, its budget and fault limit, the gradient's
    clipping, and its algorithm's section (:func:`asyncrl.algos.make_algorithm`)."""

    @property
    def algo(self) -> str: ...
    @property
    def env(self) -> str: ...
    @property
    def env_kwargs_dict(self) -> dict: ...
    @property
    def envs_per_worker(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def steps(self) -> int: ...
    @property
    def reward_scale(self) -> float: ...
    @property
    def max_grad_norm(self) -> float: ...
    @property
    def max_nonfinite(self) -> int: ...
    def algo_settings(self) -> RolloutSettings: ...


class Worker:
    """One actor-learner: its envs, its local networks, its rollout buffer, and the loop."""

    def __init__(
        self,
        wid: int,
        incarnation: int,
        cfg: WorkerSettings,
        info: EnvInfo,
        spec: ModelSpec,
        store: Store,
        state: dict | None,
    ):
        limit_threads()
        self.wid, self.incarnation, self.cfg, self.info = wid, incarnation, cfg, info
        self.store = store
        B = cfg.envs_per_worker
        seed, self.env_seeds = env_seeds(cfg.seed, wid, incarnation, B)
        self.rng = np.random.default_rng(seed)
        torch.manual_seed(seed)
        self.algo = make_algorithm(cfg.algo, cfg.algo_settings(), info)
        self.algo.start_worker(wid, self.rng)
        self.action_space = spec.action  # the model's: it says how actions reach the env
        self.model = build_model(spec)
        self.local = flatten_parameters(self.model)
        self.target_model, self.target_local = None, None
        if self.algo.uses_target_network:
            self.target_model = build_model(spec)
            self.target_local = flatten_parameters(self.target_model)
            self.target_model.requires_grad_(False)
        # the observation normaliser reads the store's statistics in place: every worker's
        # observations, brought up to date after each rollout (store.observe)
        self.obs_stats = store.obs_stats()
        if self.obs_stats is not None:
            for m in (self.model, self.target_model):
                if m is not None:
                    bind_obs_stats(m, self.obs_stats)

        self.scale = cfg.reward_scale
        # a NaN action is the policy's fault, caught before the env sees it (it would come back
        # as a NaN observation, or an error of the env's, and be blamed on the env)
        self.float_actions = spec.action.kind == "box"
        self.T = self.algo.rollout_length()
        # --prev-action-reward: the core's context for the next step, the last action and
        # reward of each env (the rollout's rows zero it where an episode starts)
        self.context_dim = spec.context_dim
        self.context = np.zeros((B, self.context_dim), np.float32)
        # an env with action masks: each step's, as the env gave them (asyncrl.actionmask);
        # an env without them has none to read, keep or pass (masks_t rows are None)
        self.masked = spec.action.masked
        self.buf = Rollout.for_env(self.T, B, info, self.context_dim)
        self.obs_t = torch.from_numpy(self.buf.obs)  # views: buf.obs[t] writes show in obs_t[t]
        self.context_t = list(torch.from_numpy(self.buf.context))  # (B, 0) rows without
        masks = torch.from_numpy(self.buf.masks)
        self.masks_t = list(masks) if self.masked else [None] * (self.T + 1)
        self.mask = np.ones((B, info.action.mask_dim), bool)  # the masks of the obs now
        self.stats = RunningStats()
        if state is not None:  # resuming: the RNG and the algorithm state always come back
            self.rng.bit_generator.state = state["rng"]
            self.algo.load_worker_state(state["algo"])
        if state is not None and state.get("envs") is not None:
            self._restore_envs(state)
        else:
            seeds = self.env_seeds
            if state is not None:
                # the checkpoint could not keep the envs (ale-py's emulators cannot be
                # pickled): new games, seeded from the restored RNG, since the worker's own
                # seeds (its incarnation counts from 0 again) would replay the run's opening
                seeds = [int(s) for s in self.rng.integers(2**32, size=B, dtype=np.uint64)]
                self.algo.envs_restarted()
            self.envs = make_vec_env(
                cfg.env, B, seeds[0], cfg.env_kwargs_dict, info.obs_layout, self.masked
            )
            self.obs, reset_info = reset_vec_env(self.envs, seeds)
            self.mask = self.read_masks(reset_info, None)
            self.prev_done = np.zeros(B, bool)
            self.first = np.ones(B, bool)  # the next observation starts an episode
            self.ep_return = np.zeros(B, np.float64)
            self.ep_length = np.zeros(B, np.int64)
        # rollouts in a row with a non-finite update (:meth:`learn`)
        self.bad_in_a_row = 0

    # ------------------------------------------------------------------ state for checkpoints
    def state(self) -> dict:
        return {
            "rng": self.rng.bit_generator.state,
            "algo": self.algo.worker_state(),
            # an env that cannot be pickled resumes with fresh env state
            "envs": dump_vec_env(self.envs, self.cfg.env),
            "obs": self.obs.copy(),
            "prev_done": self.prev_done.copy(),
            "first": self.first.copy(),
            "context": self.context.copy(),
            "mask": self.mask.copy(),
            "ep_return": self.ep_return.copy(),
            "ep_length": self.ep_length.copy(),
        }

    def _restore_envs(self, state: dict) -> None:
        self.envs = pickle.loads(state["envs"])
        self.obs = state["obs"]
        self.prev_done = state["prev_done"]
        self.first = state["first"]
        # (a checkpoint written before --prev-action-reward has none: no core took it)
        self.context = state.get("context", self.context)
        self.mask = state.get("mask", self.mask)  # (before masks: none, as the env had)
        self.ep_return = state["ep_return"]
        self.ep_length = state["ep_length"]

    # ------------------------------------------------------------------ the loop
    def run(self) -> WorkerSnapshot | None:
        # the envs are closed on every way out: retired, a fault raised, or done. A retired
        # or failed worker is otherwise kept alive by the store's reference back to it until
        # a cycle collection, with an Atari vector env's emulator thread and memory
        try:
            snapshot = self._run()
        except BaseException:
            with contextlib.suppress(Exception):  # the fault is reported, not a failed close
                self.envs.close()
            raise
        self.envs.close()
        return snapshot

    def _run(self) -> WorkerSnapshot | None:
        cfg, store, buf = self.cfg, self.store, self.buf
        global_step = store.global_step()
        while not store.stopping() and global_step < cfg.steps:
            buf.version = store.pull(self.local, self.target_local)
            finished, length = self.collect(global_step)
            ro = buf.prefix(length)
            n_valid = int(ro.valid.sum())
            if n_valid:
                self.check_env_values(ro, global_step)
                global_step = self.learn(ro, n_valid, buf.version)
                if global_step < 0:  # retired while learning
                    return None
                # after the loss: it normalises with the statistics acting used (this worker's
                # own observations enter them only now; other workers' may have meanwhile)
                if self.obs_stats is not None:
                    store.observe(ro.obs[:-1][ro.valid])
            # else: a rollout of reset steps only (one env, right after an episode end):
            # nothing to learn, and a zero gradient would still decay RMSProp's statistics
            # and move Adam on its momentum, so no update is made at all.
            # statistics every few seconds, not with every episode: the main process shares
            # the cores with the workers, and each message costs it a little
            due = self.stats.due()
            if finished or due:
                store.report(finished, self.stats.take() if due else {}, global_step)
        if self.stats.sums:  # before the snapshot: on Ray it sends what is still queued
            store.report([], self.stats.take(), global_step)
        return store.snapshot(self)

    def learn(self, ro: Rollout, n_valid: int, version: int) -> int:
        """Loss, gradient, push: the rollout's asynchronous updates (one for the paper's
        methods; APPO's epochs x minibatches). Returns the global step, or -1 if the worker was
        retired meanwhile."""
        cfg, store, algo = self.cfg, self.store, self.algo
        global_step = -1
        bad: str | None = None  # the last non-finite update: its step, loss and norm
        for k, update in enumerate(algo.updates(self.model, ro, self.target_model)):
            if algo.fresh_parameters:  # learn at the global parameters of now (off-policy)
                version = store.refresh(self.local, self.target_local)
            loss, stats = update()
            self.model.zero_grad(set_to_none=True)
            loss.backward()
            grad = flat_grad(self.model)
            norm = clip_grad_norm_(grad, cfg.max_grad_norm)
            finite = math.isfinite(norm) and math.isfinite(float(loss.detach()))
            # never let a NaN or inf reach the global parameters; the rollout's steps count
            # with its first update
            global_step = store.push(grad if finite else None, n_valid if k == 0 else 0, version)
            if global_step < 0:
                return global_step
            if finite:
                stats["train/grad_norm"] = norm
                stats["train/clip_fraction"] = float(0 < cfg.max_grad_norm < norm)
                self.stats.add(stats)
            else:
                what = f"loss {float(loss.detach())}, gradient norm {norm}"
                bad = f"at global step {global_step}: {what}"
                store.nonfinite(global_step, what)
        # counted by rollout, not by update, so that --max-nonfinite means the same for APPO's
        # 16 minibatches a rollout (one NaN advantage spoils them all) as for A3C's one update
        self.bad_in_a_row = 0 if bad is None else self.bad_in_a_row + 1
        if self.bad_in_a_row >= cfg.max_nonfinite:
            raise Diverged(
                f"{self.bad_in_a_row} rollouts in a row with a non-finite update (the last {bad}); "
                "no non-finite update was applied"
            )
        return global_step

    def collect(self, global_step: int) -> tuple[list[Finished], int]:
        """Fill the rollout buffer; return the finished episodes and the steps taken.

        Episodes are whole *games*: an env may end a training episode earlier (Atari's life
        loss is terminal for the learner) and say so with ``info["game_over"]``, and may
        report the raw score of a step (``info["score"]``) where the learning reward is
        clipped."""
        algo, buf = self.algo, self.buf
        finished: list[Finished] = []
        length = self.T
        algo.begin_rollout(self.model, global_step)
        # the parameters are the pull's until the rollout's first update
        with torch.no_grad(), self.model.fixed_weights():
            for t in range(self.T):
                buf.obs[t] = self.obs
                valid = ~self.prev_done
                buf.valid[t] = valid
                buf.first[t] = self.first
                if self.context_dim:
                    np.multiply(self.context, ~self.first[:, None], out=buf.context[t])
                if self.masked:
                    buf.masks[t] = self.mask
                action, logp = algo.act(
                    self.model,
                    self.obs_t[t],
                    global_step,
                    self.rng,
                    self.first,
                    self.context_t[t],
                    self.masks_t[t],
                )
                # after an autoreset step, the next observation is a new episode's first
                self.first = ~valid
                if self.float_actions and not np.isfinite(action).all():
                    self.nonfinite_action(action, global_step)
                to_env = self.action_space.to_env(action)  # Box: clipped, or squashed
                self.obs, reward, term, trunc, info = self.envs.step(to_env)
                done = term | trunc
                if self.masked:
                    self.mask = self.read_masks(info, done)
                buf.actions[t] = action
                buf.logp[t] = logp
                buf.rewards[t] = (
                    reward * valid if self.scale == 1.0 else reward * valid * self.scale
                )
                buf.terminated[t] = term
                buf.ends[t] = done
                if self.context_dim:
                    write_context(self.action_space, to_env, buf.rewards[t], self.context)
                score = info.get("score")
                self.ep_return += (reward if score is None else score) * valid
                self.ep_length += valid
                game_over = info.get("game_over", done)
                # only a real reset is masked at the next step: after a lost life (terminal
                # for the learner) the game goes on with a real transition
                self.prev_done = game_over
                if done.any():
                    start = info.get("start_frames")
                    for i in np.flatnonzero(game_over):
                        finished.append(
                            Finished(
                                float(self.ep_return[i]),
                                int(self.ep_length[i]),
                                None if start is None else int(start[i]),
                            )
                        )
                    self.ep_return[game_over] = 0.0
                    self.ep_length[game_over] = 0
                    if algo.update_at_episode_end:
                        length = t + 1
                        break
            buf.obs[length] = self.obs
            buf.first[length] = self.first
            if self.masked:
                buf.masks[length] = self.mask
            if self.context_dim:
                np.multiply(self.context, ~self.first[:, None], out=buf.context[length])
            algo.end_rollout(self.model, buf.prefix(length), global_step, self.rng)
        return finished, length

    def read_masks(self, info: dict, done: np.ndarray | None) -> np.ndarray:
        """The action masks of the envs' observations now ``(B, mask_dim)``, from the reset's or
        step's ``info`` (``done``: the envs whose observation is an episode's final one);
        ``(B, 0)`` for an env without masks."""
        B = self.cfg.envs_per_worker
        if not self.masked:
            return np.ones((B, 0), bool)
        who = f"{self.cfg.env} (worker {self.wid})"
        return read_masks(info, B, self.action_space.parts, done, who)

    def check_env_values(self, ro: Rollout, global_step: int) -> None:
        # One check per rollout, not per step: cheap on the hot path, exact in what it reports.
        # Integer and bool observations cannot be non-finite.
        checks = [("reward", ro.rewards)]
        if np.issubdtype(ro.obs.dtype, np.floating):
            checks.insert(0, ("observation", ro.obs))
        for name, values in checks:
            if not np.isfinite(values).all():
                bad = ~np.isfinite(values.reshape(len(values), ro.num_envs, -1))
                t, env = np.argwhere(bad)[0][:2]
                raise EnvFault(
                    f"{self.cfg.env} returned a non-finite {name} to worker {self.wid} "
                    f"(env {env}, step {t} of the rollout from global step {global_step})"
                )

    def nonfinite_action(self, action: np.ndarray, global_step: int) -> None:
        env = int(np.argwhere(~np.isfinite(action.reshape(len(action), -1)))[0][0])
        raise PolicyFault(
            f"the policy of worker {self.wid} produced a non-finite action {action[env]} "
            f"(env {env}, global step {global_step}): its parameters or inputs are non-finite, "
            "not the env's values"
        )
