"""Networks: MLP bodies with actor-critic (softmax policy + value) and Q heads.

Every model is rebuilt from a plain :class:`ModelSpec` (a dict on disk), so a worker process, a
checkpoint and ``asyncrl.load`` all construct the same architecture without pickling modules.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ModelSpec:
    """Everything needed to rebuild a model."""

    kind: str  # "actor-critic" | "q"
    obs_dim: int
    n_actions: int
    hidden: tuple[int, ...] = (64, 64)
    shared_trunk: bool = True

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModelSpec:
        return cls(**{**d, "hidden": tuple(d["hidden"])})


def _mlp(sizes: list[int]) -> nn.ModuleList:
    return nn.ModuleList(_linear(a, b, math.sqrt(2)) for a, b in itertools.pairwise(sizes))


def _mlp_forward(layers: nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
    # Functional calls: Module.__call__ costs more than the matmul itself at these sizes, and
    # the behaviour policy runs this once per env step.
    for layer in layers:
        x = torch.tanh(F.linear(x, layer.weight, layer.bias))
    return x


def _linear(a: int, b: int, gain: float) -> nn.Linear:
    # Orthogonal init with a small policy-head gain (as in the OpenAI baselines / SB3 A2C):
    # a near-uniform initial policy explores, and learning starts from a well-conditioned net.
    layer = nn.Linear(a, b)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class ActorCritic(nn.Module):
    """Softmax policy and state value; shared trunk (the paper) or separate networks."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        sizes = [spec.obs_dim, *spec.hidden]
        self.shared_trunk = spec.shared_trunk
        self.pi_body = _mlp(sizes)
        self.v_body = self.pi_body if spec.shared_trunk else _mlp(sizes)
        self.pi_head = _linear(sizes[-1], spec.n_actions, 0.01)
        self.v_head = _linear(sizes[-1], 1, 1.0)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits ``(B, n_actions)`` and values ``(B,)``."""
        h = _mlp_forward(self.pi_body, obs)
        hv = h if self.shared_trunk else _mlp_forward(self.v_body, obs)
        pi, v = self.pi_head, self.v_head
        return F.linear(h, pi.weight, pi.bias), F.linear(hv, v.weight, v.bias).squeeze(-1)

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        pi = self.pi_head
        return F.linear(_mlp_forward(self.pi_body, obs), pi.weight, pi.bias)


class QNetwork(nn.Module):
    """Action values Q(s, .) on an MLP body."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.body = _mlp([spec.obs_dim, *spec.hidden])
        self.head = _linear(spec.hidden[-1] if spec.hidden else spec.obs_dim, spec.n_actions, 1.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return F.linear(_mlp_forward(self.body, obs), self.head.weight, self.head.bias)


def build_model(spec: ModelSpec) -> nn.Module:
    if spec.kind == "actor-critic":
        return ActorCritic(spec)
    if spec.kind == "q":
        return QNetwork(spec)
    raise ValueError(f"unknown model kind {spec.kind!r}")


def flatten_parameters(model: nn.Module, flat: torch.Tensor | None = None) -> torch.Tensor:
    """Make every parameter of ``model`` a view into one contiguous 1-D tensor and return it.

    One flat vector makes a pull one ``copy_``, a push one fused optimizer update, and a shared
    memory segment (or a Ray object) one buffer instead of a dict of small tensors. If ``flat``
    is given (the shared global vector), the parameters become views into it.
    """
    params = list(model.parameters())
    if flat is None:
        flat = torch.cat([p.detach().reshape(-1) for p in params]).contiguous()
    offset = 0
    for p in params:
        n = p.numel()
        p.data = flat[offset : offset + n].view_as(p)
        offset += n
    if offset != flat.numel():
        raise ValueError(f"flat vector has {flat.numel()} elements, model needs {offset}")
    return flat


def flat_grad(model: nn.Module) -> torch.Tensor:
    """The gradient of every parameter as one flat vector (zeros where a grad is missing)."""
    return torch.cat(
        [
            (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
            for p in model.parameters()
        ]
    )
