"""What every algorithm provides to the one worker loop. The loop never branches on the algorithm;
the algorithm never knows which backend runs it."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
import torch
from torch import nn

from asyncrl.config import Config
from asyncrl.envs import EnvInfo
from asyncrl.models import ModelSpec
from asyncrl.rollout import Rollout


class Algorithm(ABC):
    """One algorithm of the paper: its network, its behaviour policy and its loss."""

    name: str
    #: whether workers keep a target network theta^- (the Q-learners do, A3C does not)
    uses_target_network: bool = False
    #: apply the update as soon as an episode ends instead of after the full rollout
    update_at_episode_end: bool = False
    #: the loss needs the action taken at the state after the rollout (Sarsa): the worker draws
    #: it at the end of the rollout and takes it first in the next one
    needs_next_action: bool = False

    def __init__(self, cfg: Config, info: EnvInfo):
        self.cfg = cfg
        self.info = info

    @abstractmethod
    def model_spec(self) -> ModelSpec: ...

    def rollout_length(self) -> int:
        """Steps per update: t_max (the one-step methods use their I_AsyncUpdate)."""
        return self.cfg.t_max

    def start_worker(self, worker_id: int, rng: np.random.Generator) -> None:  # noqa: B027
        """Per-worker state (the Q-learners' exploration schedule); nothing by default."""

    def worker_state(self) -> dict:
        """Per-worker state a checkpoint must hold (see :meth:`start_worker`)."""
        return {}

    def load_worker_state(self, state: dict) -> None:  # noqa: B027
        pass

    @abstractmethod
    def act(
        self, model: nn.Module, obs: torch.Tensor, global_step: int, rng: np.random.Generator
    ) -> np.ndarray:
        """Behaviour actions for a batch of observations ``(B, obs_dim)``; runs under no_grad."""

    @abstractmethod
    def loss(
        self, model: nn.Module, rollout: Rollout, target_model: nn.Module | None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss whose gradient is the rollout's accumulated update, and statistics."""

    @staticmethod
    @abstractmethod
    def greedy(model: nn.Module, obs: torch.Tensor) -> torch.Tensor:
        """The evaluation policy's actions (argmax) for ``(B, obs_dim)`` observations."""


def sample_categorical(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One sample per row of ``probs`` (B, n) by inverse CDF: cheaper than torch.multinomial
    at a worker's batch sizes, and seeded by the worker's own generator."""
    u = rng.random((probs.shape[0], 1), dtype=probs.dtype)
    return np.minimum((np.cumsum(probs, axis=1) < u).sum(axis=1), probs.shape[1] - 1)
