"""The rollout buffer: up to t_max steps of a worker's batch of envs, preallocated once, shaped
and typed by the spaces."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from asyncrl.envs import ActionSpace, EnvInfo


@dataclass
class Rollout:
    """Steps t = 0..T-1 of B envs, with ``obs[T]`` the observation after the last step.

    Torch views share memory with the numpy arrays the worker writes into, so building a batch
    for the loss copies nothing. Observations keep the env's dtype (an Atari stack of frames is
    uint8: a quarter of the memory of float32); the network converts them. ``valid[t]`` is False
    for the reset step that next-step autoreset inserts after an episode ends (see
    :mod:`asyncrl.envs`); ``obs[t + 1]`` after an episode end is that episode's final
    observation.
    """

    obs: np.ndarray  # (T+1, B, *obs_shape), the env's dtype
    actions: np.ndarray  # (T, B, *ActionSpace.sample_shape): int64 (Discrete, MultiDiscrete's
    #                      parts, MultiBinary's bits) or float32 (Box)
    rewards: np.ndarray  # (T, B) float32: the learning reward (clipped on Atari)
    terminated: np.ndarray  # (T, B) bool: s_{t+1} is terminal
    ends: np.ndarray  # (T, B) bool: the episode ended at t (terminated or truncated)
    valid: np.ndarray  # (T, B) bool: a real transition, not an autoreset step
    first: np.ndarray  # (T+1, B) bool: obs[t] is the first of an episode (a recurrent state
    #                    starts from zero there: the row after an autoreset step)
    logp: np.ndarray  # (T, B) float32: log mu(a_t|s_t), the behaviour policy's (the one that
    #                   acted, with the parameters of ``version``): importance weights need it
    values: np.ndarray  # (T+1, B) float32: V(s_t) from the critic that acted, the last row
    #                     V(obs[T]) (APPO's targets, as PPO's); left at 0 by the paper's methods,
    #                     whose losses recompute them in their own pass over the rollout
    context: np.ndarray  # (T+1, B, k) float32: what the core takes beside obs[t], the previous
    #                      action and reward (zeros at a first step; k = 0 without
    #                      --prev-action-reward): asyncrl.models.write_context
    masks: np.ndarray  # (T+1, B, mask_dim) bool: the valid actions at obs[t] as the env gave
    #                    them when the policy acted (asyncrl.actionmask), the last row obs[T]'s
    #                    (the Q methods' targets); mask_dim = 0 for an env without masks
    version: int = -1  # of the parameters that acted (the store's; Hogwild's are all 0)

    @classmethod
    def empty(
        cls,
        t_max: int,
        num_envs: int,
        obs_shape: tuple[int, ...],
        obs_dtype: str | type = np.float32,
        action: ActionSpace | None = None,
        context_dim: int = 0,
    ) -> Rollout:
        T, B = t_max, num_envs
        action = action or ActionSpace("discrete", n=2)
        return cls(
            obs=np.zeros((T + 1, B, *obs_shape), obs_dtype),
            actions=np.zeros((T, B, *action.sample_shape), action.dtype),
            rewards=np.zeros((T, B), np.float32),
            terminated=np.zeros((T, B), bool),
            ends=np.zeros((T, B), bool),
            valid=np.zeros((T, B), bool),
            first=np.zeros((T + 1, B), bool),
            logp=np.zeros((T, B), np.float32),
            values=np.zeros((T + 1, B), np.float32),
            context=np.zeros((T + 1, B, context_dim), np.float32),
            masks=np.ones((T + 1, B, action.mask_dim), bool),
        )

    @classmethod
    def for_env(cls, t_max: int, num_envs: int, info: EnvInfo, context_dim: int = 0) -> Rollout:
        return cls.empty(t_max, num_envs, info.obs_shape, info.obs_dtype, info.action, context_dim)

    def prefix(self, n: int) -> Rollout:
        """The first ``n`` steps (views, no copy): a rollout cut short at an episode end."""
        if n == self.t_max:
            return self
        return Rollout(
            obs=self.obs[: n + 1],
            actions=self.actions[:n],
            rewards=self.rewards[:n],
            terminated=self.terminated[:n],
            ends=self.ends[:n],
            valid=self.valid[:n],
            first=self.first[: n + 1],
            logp=self.logp[:n],
            values=self.values[: n + 1],
            context=self.context[: n + 1],
            masks=self.masks[: n + 1],
            version=self.version,
        )

    @property
    def t_max(self) -> int:
        return self.rewards.shape[0]

    @property
    def num_envs(self) -> int:
        return self.rewards.shape[1]

    def actions_tensor(self) -> torch.Tensor:
        return torch.from_numpy(self.actions)

    def masks_at(self, times: Any = slice(None), envs: Any = slice(None)) -> torch.Tensor | None:
        """The action masks of the rows ``times`` of the columns ``envs`` (numpy indices) as a
        tensor, or None where the env has none (nothing to mask, nothing computed)."""
        if not self.masks.shape[-1]:
            return None
        return torch.from_numpy(self.masks[times, envs])
