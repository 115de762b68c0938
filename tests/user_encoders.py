"""Encoders of a user's own for the tests (``--encoder tests.user_encoders:TinyEncoder``): one
that fits any space asyncrl takes, and one for each way a class can fail to fit."""

from typing import Any

import gymnasium as gym
import torch
from torch import nn


def leaves(obs: Any) -> list[torch.Tensor]:
    """The tensors of an observation batch, in the space's order (dicts and tuples walked)."""
    if isinstance(obs, dict):
        return [t for v in obs.values() for t in leaves(v)]
    if isinstance(obs, tuple):
        return [t for v in obs for t in leaves(v)]
    return [obs]


class TinyEncoder(nn.Module):
    """Every leaf as floats (uint8 scaled to [0, 1], a Discrete as its number), flattened and
    concatenated, then one tanh layer of ``width``."""

    def __init__(self, observation_space: gym.Space, width: int = 16):
        super().__init__()
        size = sum(int(torch.Size(s.shape).numel()) for s in _leaf_spaces(observation_space))
        self.linear = nn.Linear(size, width)
        self.features_dim = width

    def forward(self, obs: Any) -> torch.Tensor:
        xs = []
        for t in leaves(obs):
            x = t.float() / 255.0 if t.dtype == torch.uint8 else t.float()
            xs.append(x.reshape(x.shape[0], -1))
        return torch.tanh(self.linear(torch.cat(xs, dim=1)))


def _leaf_spaces(space: gym.Space) -> list[gym.Space]:
    if isinstance(space, gym.spaces.Dict):
        return [s for v in space.spaces.values() for s in _leaf_spaces(v)]
    if isinstance(space, gym.spaces.Tuple):
        return [s for v in space.spaces for s in _leaf_spaces(v)]
    return [space]


class Seen(TinyEncoder):
    """TinyEncoder that keeps what its forward was given last (the test of the structure)."""

    last: Any = None

    def forward(self, obs: Any) -> torch.Tensor:
        type(self).last = obs
        return super().forward(obs)


# ---------------------------------------------------------------- classes that do not fit
class NotAModule:
    def __init__(self, observation_space):
        self.features_dim = 4


def a_function(observation_space):
    return nn.Linear(1, 1)


class NoSpaceArgument(nn.Module):
    def __init__(self):
        super().__init__()
        self.features_dim = 4


class NoFeaturesDim(nn.Module):
    def __init__(self, observation_space):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, obs):
        return self.linear(obs)


class WrongWidth(TinyEncoder):
    """Says 16 features, gives 8."""

    def forward(self, obs: Any) -> torch.Tensor:
        return super().forward(obs)[:, :8]


class Float64Output(TinyEncoder):
    def forward(self, obs: Any) -> torch.Tensor:
        return super().forward(obs).double()


class FailingForward(TinyEncoder):
    def forward(self, obs: Any) -> torch.Tensor:
        return self.linear(obs["no such key"])


class NumpyInside(TinyEncoder):
    """Trains, but a trace keeps its NumPy round trip as a constant of the traced batch."""

    def forward(self, obs: Any) -> torch.Tensor:
        first = leaves(obs)[0]
        zero = torch.from_numpy(first.detach().numpy()).float().sum(1, keepdim=True) * 0.0
        return super().forward(obs) + zero


class RunningStats(TinyEncoder):
    """BatchNorm's running statistics: buffers the workers' copies would not share."""

    def __init__(self, observation_space: gym.Space, width: int = 16):
        super().__init__(observation_space, width)
        self.norm = nn.BatchNorm1d(width)

    def forward(self, obs: Any) -> torch.Tensor:
        return self.norm(super().forward(obs))
