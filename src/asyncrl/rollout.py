"""The rollout buffer: up to t_max steps of a worker's batch of envs, preallocated once."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Rollout:
    """Steps t = 0..T-1 of B envs, with ``obs[T]`` the observation after the last step.

    Torch views share memory with the numpy arrays the worker writes into, so building a batch
    for the loss copies nothing. ``valid[t]`` is False for the reset step that next-step
    autoreset inserts after an episode ends (see :mod:`asyncrl.envs`); ``obs[t + 1]`` after an
    episode end is that episode's final observation.
    """

    obs: np.ndarray  # (T+1, B, obs_dim) float32
    actions: np.ndarray  # (T, B) int64
    rewards: np.ndarray  # (T, B) float32
    terminated: np.ndarray  # (T, B) bool: s_{t+1} is terminal
    ends: np.ndarray  # (T, B) bool: the episode ended at t (terminated or truncated)
    valid: np.ndarray  # (T, B) bool: a real transition, not an autoreset step
    next_actions: np.ndarray  # (B,) int64: the action taken next at obs[T] (Sarsa only)

    @classmethod
    def empty(cls, t_max: int, num_envs: int, obs_dim: int) -> Rollout:
        T, B = t_max, num_envs
        return cls(
            obs=np.zeros((T + 1, B, obs_dim), np.float32),
            actions=np.zeros((T, B), np.int64),
            rewards=np.zeros((T, B), np.float32),
            terminated=np.zeros((T, B), bool),
            ends=np.zeros((T, B), bool),
            valid=np.zeros((T, B), bool),
            next_actions=np.zeros(B, np.int64),
        )

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
            next_actions=self.next_actions,
        )

    @property
    def t_max(self) -> int:
        return self.rewards.shape[0]

    @property
    def num_envs(self) -> int:
        return self.rewards.shape[1]

    def obs_tensor(self) -> torch.Tensor:
        """All T+1 observations as one ``((T+1) * B, obs_dim)`` batch (no copy)."""
        return torch.from_numpy(self.obs).view(-1, self.obs.shape[-1])
