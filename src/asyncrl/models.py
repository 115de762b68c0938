"""Networks as encoder -> core -> heads (Sample Factory's split, which keeps each part small).

* encoder, from the observation space: an MLP for vectors; conv nets for images -- the A3C
  paper's (conv 16 8x8/4, conv 32 4x4/2, fc 256), the Nature DQN net (conv 32 8x8/4, 64 4x4/2,
  64 3x3/1, fc 512) and MinAtar's (conv 16 3x3/1, fc 128; Young & Tian, 2019). Observations
  arrive in the env's dtype; uint8 images are divided by 255 here, inside the network, so the
  rollout buffer stays uint8.
* core: the identity, or an LSTM (the paper's recurrent agent; both networks take it).
* heads: the parameters of the action distribution (:mod:`asyncrl.distributions`, chosen from
  the action space) and a value; or Q values.

Every model is rebuilt from a plain :class:`ModelSpec` (a dict on disk), so a worker process, a
checkpoint and ``asyncrl.load`` all construct the same architecture without pickling modules.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from asyncrl.distributions import Distribution, distribution_for
from asyncrl.envs import ActionSpace

Encoder = Literal["mlp", "a3c", "nature", "minatar"]


@dataclass(frozen=True)
class ModelSpec:
    """Everything needed to rebuild a model."""

    kind: Literal["actor-critic", "q"]
    obs_shape: tuple[int, ...]
    action: ActionSpace
    obs_dtype: str = "float32"
    hidden: tuple[int, ...] = (64, 64)
    shared_trunk: bool = True
    encoder: Encoder = "mlp"
    #: images stored (H, W, C) (MinAtar) rather than (C, H, W) (Atari frame stacks)
    channels_last: bool = False
    #: normalise observations by running mean and variance, clipped to +-obs_clip (0: off)
    obs_clip: float = 0.0
    #: Box actions: "param" (a state-independent log-std) or "softplus" (the paper's
    #: state-dependent variance, a softplus of a second linear head)
    gaussian_std: Literal["param", "softplus"] = "param"
    #: the initial log-std of a state-independent Gaussian
    log_std_init: float = 0.0
    #: the core between encoder and heads: none, or an LSTM of core_size cells
    core: Literal["none", "lstm"] = "none"
    core_size: int = 128

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModelSpec:
        a = d["action"]
        action = ActionSpace(
            a["kind"],
            a["n"],
            tuple(a["shape"]),
            tuple(a["low"]),
            tuple(a["high"]),
            a.get("squash", False),
        )
        return cls(
            **{
                **d,
                "obs_shape": tuple(d["obs_shape"]),
                "hidden": tuple(d["hidden"]),
                "action": action,
            }
        )


def _linear(a: int, b: int, gain: float) -> nn.Linear:
    # Orthogonal init with a small policy-head gain (as in the OpenAI baselines / SB3 A2C):
    # a near-uniform initial policy explores, and learning starts from a well-conditioned net.
    layer = nn.Linear(a, b)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def _conv(c_in: int, c_out: int, k: int, s: int) -> nn.Conv2d:
    layer = nn.Conv2d(c_in, c_out, k, s)
    nn.init.orthogonal_(layer.weight, math.sqrt(2))
    nn.init.zeros_(layer.bias)  # type: ignore[arg-type]
    return layer


def as_float(obs: torch.Tensor) -> torch.Tensor:
    """The network's input from the env's dtype: uint8 pixels to [0, 1], bool to 0/1."""
    if obs.dtype == torch.uint8:
        return obs.float().mul_(1.0 / 255.0)
    if obs.dtype != torch.float32:
        return obs.float()
    return obs


class MLPEncoder(nn.Module):
    """tanh MLP on the flattened observation."""

    def __init__(self, obs_dim: int, hidden: tuple[int, ...]):
        super().__init__()
        sizes = [obs_dim, *hidden]
        linears = [_linear(a, b, math.sqrt(2)) for a, b in itertools.pairwise(sizes)]
        self.layers = nn.ModuleList(linears)
        self._linears = linears  # the same modules, typed (and iterated without ModuleList)
        self.out_dim = sizes[-1]
        self.obs_dim = obs_dim

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = as_float(obs)
        if x.dim() != 2:
            x = x.reshape(-1, self.obs_dim)
        # Functional calls: Module.__call__ costs more than the matmul itself at these sizes,
        # and the behaviour policy runs this once per env step (hence also the encoders'
        # .forward called directly below: no hooks to run).
        for layer in self._linears:
            x = torch.tanh(F.linear(x, layer.weight, layer.bias))
        return x


# (channels, kernel, stride) of the conv layers, then the width of the fully connected layer
_CONV_NETS: dict[str, tuple[list[tuple[int, int, int]], int]] = {
    "a3c": ([(16, 8, 4), (32, 4, 2)], 256),  # Mnih et al., 2016, Section 8
    "nature": ([(32, 8, 4), (64, 4, 2), (64, 3, 1)], 512),  # Mnih et al., 2015
    "minatar": ([(16, 3, 1)], 128),  # Young & Tian, 2019
}


class ConvEncoder(nn.Module):
    """Conv layers with ReLU, then one fully connected ReLU layer."""

    def __init__(self, name: str, obs_shape: tuple[int, ...], channels_last: bool):
        super().__init__()
        if len(obs_shape) != 3:
            raise ValueError(f"the {name} conv net takes image observations, got {obs_shape}")
        self.channels_last = channels_last
        c, h, w = (obs_shape[2], *obs_shape[:2]) if channels_last else obs_shape
        layers, fc = _CONV_NETS[name]
        convs = []
        for c_out, k, s in layers:
            convs.append(_conv(c, c_out, k, s))
            c, h, w = c_out, (h - k) // s + 1, (w - k) // s + 1
        self.convs = nn.ModuleList(convs)
        self.fc = _linear(c * h * w, fc, math.sqrt(2))
        self.out_dim = fc

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = as_float(obs)
        if self.channels_last:
            x = x.movedim(-1, -3)
        x = x.reshape(-1, *x.shape[-3:])
        for conv in self.convs:
            x = F.relu(conv(x))
        return F.relu(self.fc(x.flatten(1)))


class ObsNormalizer(nn.Module):
    """``clip((obs - mean) / sqrt(var + 1e-8))`` with running statistics held in one flat
    buffer ``[count, mean..., var...]``. Not parameters: the workers share the buffer
    deliberately (:func:`bind_obs_stats`) and update it from their rollouts
    (:func:`update_obs_stats`); a loaded policy keeps it frozen."""

    def __init__(self, obs_dim: int, clip: float):
        super().__init__()
        self.obs_dim, self.clip = obs_dim, clip
        stats = torch.zeros(1 + 2 * obs_dim)
        stats[1 + obs_dim :] = 1.0
        self.register_buffer("stats", stats)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        d = self.obs_dim
        stats: torch.Tensor = self.stats  # type: ignore[assignment]
        mean, var = stats[1 : 1 + d], stats[1 + d :]
        x = (as_float(obs).reshape(-1, d) - mean) / (var + 1e-8).sqrt()
        return x.clamp(-self.clip, self.clip)


_STATS_LOCK = threading.Lock()


def update_obs_stats(stats: torch.Tensor, batch: np.ndarray) -> None:
    """Merge a batch's mean and variance into ``[count, mean, var]`` in place (Chan et al.'s
    parallel update). Worker processes do this lock-free on the shared buffer: a lost race
    costs one batch's worth of statistics, nothing worse. Worker threads take a lock of this
    process (torch releases the GIL inside each op, so threads would race on every update; a
    thread cannot be killed while holding it, and processes never contend for it)."""
    with _STATS_LOCK:
        _merge(stats, batch)


def merge_obs_stats(stats: torch.Tensor, other: torch.Tensor) -> None:
    """Merge statistics ``other`` (``[count, mean, var]``, e.g. a worker's unsent batches)
    into ``stats`` in place."""
    n_b = float(other[0])
    if n_b > 0:
        d = (other.numel() - 1) // 2
        _merge_moments(stats, n_b, other[1 : 1 + d], other[1 + d :])


def _merge(stats: torch.Tensor, batch: np.ndarray) -> None:
    x = torch.from_numpy(np.asarray(batch, np.float32)).reshape(len(batch), -1)
    if x.shape[0]:
        _merge_moments(stats, x.shape[0], x.mean(0), x.var(0, unbiased=False))


def _merge_moments(
    stats: torch.Tensor, n_b: float, mean_b: torch.Tensor, var_b: torch.Tensor
) -> None:
    d = mean_b.numel()
    n_a = float(stats[0])
    mean_a, var_a = stats[1 : 1 + d], stats[1 + d :]
    n = n_a + n_b
    delta = mean_b - mean_a
    new_mean = mean_a + delta * (n_b / n)
    new_var = (var_a * n_a + var_b * n_b + delta.pow(2) * (n_a * n_b / n)) / n
    stats[1 : 1 + d] = new_mean
    stats[1 + d :] = new_var
    stats[0] = n


def obs_stats_of(model: nn.Module) -> torch.Tensor | None:
    norm = getattr(model, "obs_norm", None)
    return None if norm is None else norm.stats


def bind_obs_stats(model: nn.Module, stats: torch.Tensor) -> None:
    """Make the model's normaliser read (and write) ``stats``, the shared buffer."""
    norm = getattr(model, "obs_norm", None)
    if norm is not None:
        norm.stats = stats


def build_encoder(spec: ModelSpec) -> MLPEncoder | ConvEncoder:
    if spec.encoder == "mlp":
        return MLPEncoder(int(np.prod(spec.obs_shape)), spec.hidden)
    return ConvEncoder(spec.encoder, spec.obs_shape, spec.channels_last)


# ---------------------------------------------------------------------- the LSTM core
class RecurrentCore:
    """What both networks do with ``--core lstm``: the encoder (each network's ``_encode``),
    then the LSTM, carrying a state ``(B, 2, size)`` of (h, c) per env."""

    lstm: nn.LSTMCell | None
    recurrent: bool

    def _encode(self, obs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _feed_forward_only(self) -> None:
        # a recurrent model called without its state would skip the core: wrong shapes for an
        # MLP, silently wrong outputs for a conv net whose features have the core's size
        if self.recurrent:
            raise RuntimeError("a recurrent model acts through step() and learns through unroll()")

    def initial_state(self, batch: int) -> torch.Tensor:
        """Zero (h, c) for ``batch`` envs: one ``(batch, 2, core_size)`` tensor."""
        assert self.lstm is not None
        return torch.zeros(batch, 2, self.lstm.hidden_size)

    def _core_step(
        self, obs: torch.Tensor, state: torch.Tensor, first: torch.Tensor
    ) -> torch.Tensor:
        assert self.lstm is not None
        return lstm_step(self.lstm, self._encode(obs), state, first)

    def _core_unroll(
        self, obs: torch.Tensor, state: torch.Tensor, first: torch.Tensor
    ) -> torch.Tensor:
        """The core's outputs h ``(T+1, B, size)``: the encoder over the whole sequence in one
        batched pass, then :func:`lstm_unroll`."""
        assert self.lstm is not None
        T1, B = obs.shape[:2]
        x = self._encode(obs.flatten(0, 1)).unflatten(0, (T1, B))
        return lstm_unroll(self.lstm, x, state, first)


class ActorCritic(RecurrentCore, nn.Module):
    """Policy (the parameters of a distribution) and state value; one encoder shared by both
    heads (the paper) or one each."""

    _pi_encode: Callable[[torch.Tensor], torch.Tensor]
    _pi_w: torch.Tensor
    _pi_b: torch.Tensor

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.action = spec.action
        self.obs_norm = (
            ObsNormalizer(int(np.prod(spec.obs_shape)), spec.obs_clip)
            if (spec.obs_clip > 0)
            else None
        )
        self.pi_body = build_encoder(spec)
        # the recurrent agent has one encoder and one core for both heads (the paper's)
        self.recurrent = spec.core == "lstm"
        shared = spec.shared_trunk or self.recurrent
        self.v_body = self.pi_body if shared else build_encoder(spec)
        self.shared_trunk = shared
        d = self.pi_body.out_dim
        self.lstm = make_lstm(d, spec.core_size) if self.recurrent else None
        if self.lstm is not None:
            d = spec.core_size
        self.pi_head = _linear(d, spec.action.dim, 0.01)
        self.v_head = _linear(d, 1, 1.0)
        box = spec.action.kind == "box"
        # Box actions: a state-independent log-std (the common choice today; SB3, PPO), or
        # the paper's softplus variance from a second linear head
        self.softplus_std = box and spec.gaussian_std == "softplus"
        self.std_head = _linear(d, spec.action.dim, 0.01) if self.softplus_std else None
        self.log_std = (
            nn.Parameter(torch.full((spec.action.dim,), float(spec.log_std_init)))
            if box and not self.softplus_std
            else None
        )
        # The behaviour policy runs once per env step, where each nn.Module attribute lookup
        # costs about a microsecond: keep plain references to what it touches (the same
        # objects: flatten_parameters and load_state_dict change their data in place).
        object.__setattr__(self, "_pi_encode", self.pi_body.forward)
        object.__setattr__(self, "_pi_w", self.pi_head.weight)
        object.__setattr__(self, "_pi_b", self.pi_head.bias)

    # ------------------------------------------------------------------ the recurrent core
    def step(
        self, obs: torch.Tensor, state: torch.Tensor, first: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of the recurrent policy: distribution parameters and the new state."""
        state = self._core_step(obs, state, first)
        return self._policy(state[:, 0]), state

    def unroll(
        self, obs: torch.Tensor, state: torch.Tensor, first: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A rollout's sequence ``(T+1, B, ...)`` recomputed from the state at its start
        (:func:`lstm_unroll`). Returns parameters ``(T+1, B, ...)`` and values ``(T+1, B)``."""
        T1, B = first.shape
        h = self._core_unroll(obs, state, first).flatten(0, 1)
        v = F.linear(h, self.v_head.weight, self.v_head.bias).squeeze(-1)
        return self._policy(h).unflatten(0, (T1, B)), v.unflatten(0, (T1, B))

    def _encode(self, obs: torch.Tensor) -> torch.Tensor:
        if self.obs_norm is not None:
            obs = self.obs_norm(obs)
        return self.pi_body.forward(obs)

    def _policy(self, h: torch.Tensor) -> torch.Tensor:
        out = F.linear(h, self._pi_w, self._pi_b)
        if self.log_std is not None:
            out = torch.cat([out, self.log_std.expand_as(out)], dim=-1)
        elif self.std_head is not None:
            # softplus(0) = log 2: the initial std is about 0.7
            std = F.softplus(self.std_head(h)) + 1e-4
            out = torch.cat([out, std.log()], dim=-1)
        return out

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Distribution parameters ``(N, ...)`` and values ``(N,)`` for a batch ``N``."""
        self._feed_forward_only()
        if self.obs_norm is not None:
            obs = self.obs_norm(obs)
        h = self.pi_body.forward(obs)
        hv = h if self.shared_trunk else self.v_body.forward(obs)
        v = self.v_head
        return self._policy(h), F.linear(hv, v.weight, v.bias).squeeze(-1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """The values ``(N,)`` alone (the bootstrap row of a rollout needs no policy)."""
        self._feed_forward_only()
        if self.obs_norm is not None:
            obs = self.obs_norm(obs)
        v = self.v_head
        return F.linear(self.v_body.forward(obs), v.weight, v.bias).squeeze(-1)

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        """The distribution parameters alone (acting skips a separate critic)."""
        self._feed_forward_only()
        if self.obs_norm is not None:
            obs = self.obs_norm(obs)
        return self._policy(self._pi_encode(obs))

    def distribution(self, params: torch.Tensor) -> Distribution:
        return distribution_for(self.action, params)


class QNetwork(RecurrentCore, nn.Module):
    """Action values Q(s, .) on an encoder, with the LSTM core between them if asked."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.obs_norm = (
            ObsNormalizer(int(np.prod(spec.obs_shape)), spec.obs_clip)
            if (spec.obs_clip > 0)
            else None
        )
        self.body = build_encoder(spec)
        self.recurrent = spec.core == "lstm"
        self.lstm = make_lstm(self.body.out_dim, spec.core_size) if self.recurrent else None
        d = spec.core_size if self.recurrent else self.body.out_dim
        self.head = _linear(d, spec.action.n, 1.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        self._feed_forward_only()
        return self._q(self._encode(obs))

    def _encode(self, obs: torch.Tensor) -> torch.Tensor:
        if self.obs_norm is not None:
            obs = self.obs_norm(obs)
        return self.body.forward(obs)

    def _q(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(h, self.head.weight, self.head.bias)

    def step(
        self, obs: torch.Tensor, state: torch.Tensor, first: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Q values for one step of a batch of envs, and the new state."""
        state = self._core_step(obs, state, first)
        return self._q(state[:, 0]), state

    def unroll(self, obs: torch.Tensor, state: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
        """Q values ``(T+1, B, A)`` of a rollout's sequence recomputed from its start state."""
        return self._q(self._core_unroll(obs, state, first))


# ---------------------------------------------------------------------- the LSTM cell
def make_lstm(d_in: int, size: int) -> nn.LSTMCell:
    lstm = nn.LSTMCell(d_in, size)
    for name, p in lstm.named_parameters():
        (nn.init.orthogonal_ if "weight" in name else nn.init.zeros_)(p)
    return lstm


def lstm_step(
    lstm: nn.LSTMCell, x: torch.Tensor, state: torch.Tensor, first: torch.Tensor
) -> torch.Tensor:
    """One step of the core; the state of an env whose ``first`` is set restarts from zero
    (a new episode)."""
    keep = (~first).to(x.dtype)[:, None, None]
    state = state * keep
    h, c = lstm(x, (state[:, 0], state[:, 1]))
    return torch.stack([h, c], dim=1)


def lstm_unroll(
    lstm: nn.LSTMCell, x: torch.Tensor, state: torch.Tensor, first: torch.Tensor
) -> torch.Tensor:
    """The outputs h ``(T+1, B, size)`` of a rollout's features ``x`` ``(T+1, B, d)`` from the
    state at its start (PFRL's way): step by step, zeroed where ``first`` says. Gradients reach
    back to the start of the rollout, not beyond (the stored state has no history)."""
    hs = []
    for t in range(x.shape[0]):
        state = lstm_step(lstm, x[t], state, first[t])
        hs.append(state[:, 0])
    return torch.stack(hs)


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
