"""The actor-learner loop: one function that every backend runs unchanged.

loop:
    theta'  <- theta                     pull the global parameters (one flat copy)
    collect up to t_max steps of each of the worker's envs with pi(.; theta')
    loss    <- algorithm.loss(rollout)    A3C | n-step Q | one-step Q | one-step Sarsa
    d theta <- grad(loss); clip           one batched backward pass for the whole rollout
    theta   <- shared optimizer step      lock-free (Hogwild), statistics shared
    report finished episodes; count global steps
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from asyncrl.algos import make_algorithm
from asyncrl.config import Config
from asyncrl.envs import EnvInfo, make_vec_env
from asyncrl.models import build_model, flat_grad, flatten_parameters
from asyncrl.optim import SharedOptimizer, clip_grad_norm_, linear_lr
from asyncrl.rollout import Rollout


class Counter(Protocol):
    """A global counter shared by the workers (multiprocessing.Value with its lock)."""

    value: int

    def get_lock(self) -> Any: ...


def counter_add(counter: Counter, n: int) -> int:
    """Add ``n`` and return the new value, atomically."""
    with counter.get_lock():
        counter.value += n
        return int(counter.value)


@dataclass
class SharedState:
    """What the workers share: global parameters, optimizer, counters, episode stream, stop."""

    params: torch.Tensor
    optimizer: SharedOptimizer
    target_params: torch.Tensor | None
    steps: Counter
    episodes: Counter
    queue: Any  # messages to the main process: ("episodes", wid, [(ret, len)], step) | ...
    stop: Any  # an Event: set by the main process (stop rule, Ctrl-C) or a worker's error


def worker_seed(seed: int, worker_id: int) -> int:
    return seed * 10_007 + worker_id


def run_worker(worker_id: int, cfg: Config, info: EnvInfo, shared: SharedState) -> None:
    """Entry point of every backend's worker; errors travel to the main process as messages."""
    # Each worker is one thread of compute: more oversubscribes the cores, the classic reason
    # A3C stops learning.
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    try:
        _loop(worker_id, cfg, info, shared)
    except BaseException as e:  # report, never die silently
        shared.queue.put(("error", worker_id, f"{type(e).__name__}: {e}", traceback.format_exc()))
    finally:
        shared.queue.put(("done", worker_id))


def _loop(worker_id: int, cfg: Config, info: EnvInfo, shared: SharedState) -> None:
    seed = worker_seed(cfg.seed, worker_id)
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    algo = make_algorithm(cfg, info)
    algo.start_worker(worker_id, rng)
    spec = algo.model_spec()
    model = build_model(spec)
    local = flatten_parameters(model)
    target_model, target_local = None, None
    if algo.uses_target_network:
        target_model = build_model(spec)
        target_local = flatten_parameters(target_model)
        target_model.requires_grad_(False)

    T, B = algo.rollout_length(), cfg.envs_per_worker
    envs = make_vec_env(cfg.env, B)
    obs, _ = envs.reset(seed=seed)
    buf = Rollout.empty(T, B, info.obs_dim)
    obs_t = torch.from_numpy(buf.obs)  # views: writing buf.obs[t] updates obs_t[t]
    prev_done = np.zeros(B, bool)
    ep_return = np.zeros(B, np.float64)
    ep_length = np.zeros(B, np.int64)
    next_action: np.ndarray | None = None  # drawn at the end of a rollout (Sarsa)
    global_step = 0

    while not shared.stop.is_set() and global_step < cfg.steps:
        local.copy_(shared.params)
        if target_local is not None:
            target_local.copy_(shared.target_params)
        finished: list[tuple[float, int]] = []
        length = T
        with torch.no_grad():
            for t in range(T):
                buf.obs[t] = obs.reshape(B, -1)
                valid = ~prev_done
                buf.valid[t] = valid
                if next_action is not None:
                    action, next_action = next_action, None
                else:
                    action = algo.act(model, obs_t[t], global_step, rng)
                obs, reward, term, trunc, _ = envs.step(action)
                done = term | trunc
                buf.actions[t] = action
                buf.rewards[t] = reward * valid
                buf.terminated[t] = term
                buf.ends[t] = done
                ep_return += buf.rewards[t]
                ep_length += valid
                prev_done = done
                if done.any():
                    for i in np.flatnonzero(done):
                        finished.append((float(ep_return[i]), int(ep_length[i])))
                    ep_return[done] = 0.0
                    ep_length[done] = 0
                    if algo.update_at_episode_end:
                        length = t + 1
                        break
            buf.obs[length] = obs.reshape(B, -1)
            if algo.needs_next_action:
                next_action = algo.act(model, obs_t[length], global_step, rng)
                buf.next_actions[:] = next_action
        ro = buf.prefix(length)

        loss, _stats = algo.loss(model, ro, target_model)
        model.zero_grad(set_to_none=True)
        loss.backward()
        grad = flat_grad(model)
        clip_grad_norm_(grad, cfg.max_grad_norm)

        n_valid = int(ro.valid.sum())
        global_step = counter_add(shared.steps, n_valid)
        lr = cfg.lr if cfg.lr_schedule == "constant" else linear_lr(cfg.lr, global_step, cfg.steps)
        shared.optimizer.step(grad, lr)
        period = cfg.target_update
        if target_local is not None and global_step // period != (global_step - n_valid) // period:
            # The worker that crosses a multiple of target_update refreshes theta^- for all.
            shared.target_params.copy_(shared.params)
        if finished:
            counter_add(shared.episodes, len(finished))
            shared.queue.put(("episodes", worker_id, finished, global_step))
    envs.close()
