"""Networks as encoder -> core -> heads (Sample Factory's split, which keeps each part small).

* encoder, from the observation space: an MLP for vectors; conv nets for images -- the A3C
  paper's (conv 16 8x8/4, conv 32 4x4/2, fc 256), the Nature DQN net (conv 32 8x8/4, 64 4x4/2,
  64 3x3/1, fc 512) and MinAtar's (conv 16 3x3/1, fc 128; Young & Tian, 2019). Observations
  arrive in the env's dtype; uint8 images are divided by 255 here, inside the network, so the
  rollout buffer stays uint8. Observation normalisation (``--normalize-obs``) is the MLP
  encoder's first piece.
* core: always there, one signature ``core.step(x, state, first) -> (h, state)`` whatever it is
  (:data:`CORES`): the identity, which carries an empty state (Sample Factory's
  ``ModelCoreIdentity``), or a recurrent cell (the paper's LSTM; a GRU).
* heads: the parameters of the action distribution (:mod:`asyncrl.distributions`, chosen from
  the action space) and a value; or Q values.

Both networks expose the same two calls: :meth:`act` for one step of a batch of envs, and
:meth:`unroll` for a rollout recomputed from the core's state at its start (the actor-critic
adds :meth:`ActorCritic.act_value`, ``act`` with the critic run too). Nothing outside this file
knows whether the core is recurrent. Each call takes an optional ``context``: the previous
action and reward (``--prev-action-reward``, :func:`write_context`), which the core takes
beside the encoder's features.

Every model is rebuilt from a plain :class:`ModelSpec` (a dict on disk), so a worker process, a
checkpoint and ``asyncrl.load`` all construct the same architecture without pickling modules.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from asyncrl.config import CoreName
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
    #: Box actions: "param" (a state-independent log-std) or "softplus" (a softplus of a
    #: second linear head; the paper's softplus "variance" head, read here as the std)
    gaussian_std: Literal["param", "softplus"] = "param"
    #: the initial log-std of a state-independent Gaussian
    log_std_init: float = 0.0
    #: the core between encoder and heads (:data:`CORES`), and its width if it has one
    core: CoreName = "none"
    core_size: int = 128
    #: the core also takes the previous action and learning reward (:func:`write_context`):
    #: the env's reward clipped to +-reward_clip (0: not clipped) and times reward_scale, so
    #: that evaluation, on raw scores, gives the core what training gave it
    prev_action_reward: bool = False
    reward_clip: float = 0.0
    reward_scale: float = 1.0
    #: the conv encoder's arithmetic (float32, or bfloat16 under CPU autocast; its output and
    #: everything after it stay float32)
    precision: Literal["float32", "bfloat16"] = "float32"

    def to_dict(self) -> dict:
        return asdict(self)

    def learning_reward(self, reward: np.ndarray) -> np.ndarray:
        """The learning reward of an env's raw ``reward`` (``(B,)``): what the core's context
        takes."""
        r = np.asarray(reward, np.float32)
        if self.reward_clip:
            r = np.clip(r, -self.reward_clip, self.reward_clip)
        return r * np.float32(self.reward_scale)

    @property
    def context_dim(self) -> int:
        """Inputs the core takes beside the encoder's features: the previous action's encoding
        and reward (0: none)."""
        return self.action.dim + 1 if self.prev_action_reward else 0

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


def write_context(
    action: ActionSpace, acted: np.ndarray, reward: np.ndarray, out: np.ndarray
) -> None:
    """The core's context for the step after ``acted`` ``(B, ...)`` (as the env took it) and
    ``reward`` ``(B,)``, written into ``out`` ``(B, action.dim + 1)``: the action one-hot for
    Discrete actions (a number would order them), itself for Box ones, then the reward. An
    episode's first step gets zeros instead (the caller's: it knows which steps are first)."""
    k = action.dim
    if action.kind == "discrete":
        out[:, :k] = 0.0
        out[np.arange(len(acted)), acted] = 1.0
    else:
        out[:, :k] = acted.reshape(len(acted), k)
    out[:, k] = reward


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


def cpu_bfloat16_units() -> list[str]:
    """The units of this CPU that compute bfloat16 convolutions and matrix products faster than
    float32's: "AMX" (Intel's matrix units: APPO's Pong learning pass in about half the time)
    and "AVX-512 BF16" (AMD Zen 4: 0.62 of the time, and 1.34 times the frames/s of a whole
    APPO run on Pong). Without either, bfloat16 arithmetic is emulated: auto keeps float32
    (docs/atari.md#bfloat16)."""
    units = []
    for unit, probe in (
        ("AMX", "_is_amx_tile_supported"),
        ("AVX-512 BF16", "_is_avx512_bf16_supported"),
    ):
        # private APIs, each probed on its own: one gone in a later torch reads as that unit
        # missing, not as both
        try:
            if getattr(torch.cpu, probe)():
                units.append(unit)
        except Exception:
            pass
    return units


def cpu_has_bfloat16_units() -> bool:
    """Whether --precision auto picks bfloat16 here (on a conv encoder)."""
    return bool(cpu_bfloat16_units())


def as_float(obs: torch.Tensor) -> torch.Tensor:
    """The network's input from the env's dtype: uint8 pixels to [0, 1], bool to 0/1."""
    if obs.dtype == torch.uint8:
        return obs.float().mul_(1.0 / 255.0)
    if obs.dtype != torch.float32:
        return obs.float()
    return obs


# ---------------------------------------------------------------------- encoders
class ObsNormalizer(nn.Module):
    """``clip((obs - mean) / sqrt(var + 1e-8))`` with running statistics held in one flat
    buffer ``[count, mean..., var...]``. Not parameters: a worker binds it to the statistics its
    store keeps current with every worker's rollouts (:func:`bind_obs_stats`); a loaded policy
    keeps it frozen.

    It reads the observations' own values (``obs.float()``, no 1/255 scaling of uint8): the
    statistics are gathered from the rollout's raw observations, and must be applied to the
    same scale."""

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
        x = (obs.float().reshape(-1, d) - mean) / (var + 1e-8).sqrt()
        return x.clamp(-self.clip, self.clip)


class MLPEncoder(nn.Module):
    """tanh MLP on the flattened observation, normalised first if a normaliser is given."""

    def __init__(self, obs_dim: int, hidden: tuple[int, ...], norm: ObsNormalizer | None):
        super().__init__()
        sizes = [obs_dim, *hidden]
        linears = [_linear(a, b, math.sqrt(2)) for a, b in itertools.pairwise(sizes)]
        self.layers = nn.ModuleList(linears)
        self._linears = linears  # the same modules, typed (and iterated without ModuleList)
        # registered after the layers: the flat parameter vector's layout does not move
        self.norm = norm
        self.out_dim = sizes[-1]
        self.obs_dim = obs_dim

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = as_float(obs) if self.norm is None else self.norm.forward(obs)
        if x.dim() != 2:
            x = x.reshape(-1, self.obs_dim)
        # Functional calls: Module.__call__ costs more than the matmul itself at these sizes,
        # and the behaviour policy runs this once per env step (hence also the encoders'
        # .forward called directly below: no hooks to run).
        for layer in self._linears:
            x = torch.tanh(F.linear(x, layer.weight, layer.bias))
        return x

    def learning_layout(self, obs: np.ndarray) -> None:
        """Vectors are read as stored (see :meth:`ConvEncoder.learning_layout`)."""
        return None


# (channels, kernel, stride) of the conv layers, then the width of the fully connected layer
_CONV_NETS: dict[str, tuple[list[tuple[int, int, int]], int]] = {
    "a3c": ([(16, 8, 4), (32, 4, 2)], 256),  # Mnih et al., 2016, Section 8
    "nature": ([(32, 8, 4), (64, 4, 2), (64, 3, 1)], 512),  # Mnih et al., 2015
    "minatar": ([(16, 3, 1)], 128),  # Young & Tian, 2019
}


def conv_net_problem(name: str, obs_shape: tuple[int, ...], channels_last: bool) -> str | None:
    """Why the conv net ``name`` cannot read these observations, or None where it can."""
    if len(obs_shape) != 3:
        return f"a conv net reads images, and these observations have shape {obs_shape}"
    h, w = obs_shape[:2] if channels_last else obs_shape[1:]
    for _, k, s in _CONV_NETS[name][0]:
        if min(h, w) < k:
            return (
                f"its layers need larger images than {obs_shape} (a {k}x{k} kernel meets a "
                f"{h}x{w} map)"
            )
        h, w = (h - k) // s + 1, (w - k) // s + 1
    return None


def space_to_depth(obs: np.ndarray, s: int) -> np.ndarray:
    """Images ``(..., C, H, W)`` as ``(..., H/s, W/s, C*s*s)``: each s x s block of pixels
    becomes one pixel of C*s*s channels (channel ``c*s*s + dy*s + dx``), stored NHWC. A conv
    whose kernel is twice its stride s reads the result as a 2x2 conv of stride 1
    (:func:`space_to_depth_weight`) with the same output: the first layer of the Atari nets
    (8x8, stride 4), whose 4 input channels oneDNN computes poorly, then has 64
    (docs/atari.md#the-first-layer-as-a-2x2-conv)."""
    *lead, c, h, w = obs.shape
    n = len(lead)
    # a row's s adjacent pixels move together: copied as one element of s times their width,
    # the transpose takes a quarter of the time of one moving single bytes (uint8 Atari: 10 ms
    # against 32 for a 129 x 8-game rollout)
    group = (
        np.dtype(f"u{s * obs.itemsize}")
        if s * obs.itemsize in (2, 4, 8)
        else f"V{s * obs.itemsize}"
    )
    blocks = np.ascontiguousarray(obs).view(group).reshape(*lead, c, h // s, s, w // s)
    moved = blocks.transpose(*range(n), n + 1, n + 3, n, n + 2)  # (..., H/s, W/s, C, dy)
    return np.ascontiguousarray(moved).view(obs.dtype).reshape(*lead, h // s, w // s, c * s * s)


def space_to_depth_weight(weight: torch.Tensor, s: int) -> torch.Tensor:
    """A conv weight ``(O, C, 2s, 2s)`` of stride s as the ``(O, C*s*s, 2, 2)`` weight of
    stride 1 that reads :func:`space_to_depth`'s images: kernel row ``ky = s*i + dy`` is row
    i of the new kernel at channel ``c*s*s + dy*s + dx``."""
    o, c = weight.shape[:2]
    w = weight.reshape(o, c, 2, s, 2, s).permute(0, 1, 3, 5, 2, 4)  # (O, C, dy, dx, i, j)
    return w.reshape(o, c * s * s, 2, 2)


@dataclass
class _FixedWeights:
    """A conv encoder's weights in bfloat16 for a span in which they do not change."""

    convs: list[tuple[torch.Tensor, torch.Tensor, tuple[int, ...]]]  # (weight, bias, stride)
    first_uint8: torch.Tensor  # the first conv's weight with the 1/255 of uint8 pixels folded in
    fc_weight: torch.Tensor
    fc_bias: torch.Tensor


class ConvEncoder(nn.Module):
    """Conv layers with ReLU, then one fully connected ReLU layer."""

    def __init__(
        self,
        name: str,
        obs_shape: tuple[int, ...],
        channels_last: bool,
        precision: Literal["float32", "bfloat16"] = "float32",
    ):
        super().__init__()
        if len(obs_shape) != 3:
            raise ValueError(f"the {name} conv net takes image observations, got {obs_shape}")
        self.channels_last = channels_last
        self.in_bfloat16 = precision == "bfloat16"
        c, h, w = (obs_shape[2], *obs_shape[:2]) if channels_last else obs_shape
        layers, fc = _CONV_NETS[name]
        # the learning pass's first layer as a 2x2 conv on space_to_depth's images, where its
        # kernel is twice its stride and the image a whole number of strides (the Atari nets)
        _, k, s = layers[0]
        fits = not channels_last and k == 2 * s > 2 and h % s == 0 and w % s == 0
        self.s2d = s if fits else 0
        self.s2d_shape = (c * s * s, h // s, w // s) if fits else None
        convs = []
        for c_out, k, s in layers:
            convs.append(_conv(c, c_out, k, s))
            c, h, w = c_out, (h - k) // s + 1, (w - k) // s + 1
        self.convs = nn.ModuleList(convs)
        self.fc = _linear(c * h * w, fc, math.sqrt(2))
        self.out_dim = fc
        self._fixed: _FixedWeights | None = None

    def fix_weights(self) -> None:
        """Until :meth:`release_weights`, the passes without gradient read bfloat16 copies of
        the weights made here (with --precision bfloat16; a no-op in float32). The caller
        promises the parameters do not change meanwhile: :meth:`Network.fixed_weights`."""
        if not self.in_bfloat16:
            return
        nhwc, bf16 = torch.channels_last, torch.bfloat16
        layers = [c for c in self.convs if isinstance(c, nn.Conv2d)]
        with torch.no_grad():
            convs = []
            for c in layers:
                assert c.bias is not None  # _conv gives each one
                w = c.weight.to(bf16).contiguous(memory_format=nhwc)
                convs.append((w, c.bias.to(bf16), c.stride))
            first = layers[0].weight * (1.0 / 255.0)
            self._fixed = _FixedWeights(
                convs,
                first.to(bf16).contiguous(memory_format=nhwc),
                self.fc.weight.to(bf16),
                self.fc.bias.to(bf16),
            )

    def release_weights(self) -> None:
        self._fixed = None

    def _fixed_forward(self, x: torch.Tensor, fixed: _FixedWeights) -> torch.Tensor:
        """:meth:`forward`'s arithmetic on the weights :meth:`fix_weights` made, NHWC: the
        acting pass of a worker, 0.56x the time of autocast's, which converts every float32
        weight on every call (an act call of the preset's net, batch 8, as a worker runs it on
        the Intel Xeon with AMX: 751 against 1,338 us; `benchmarks/act_inference.py`)."""
        x = x.contiguous(memory_format=torch.channels_last)
        if x.dtype == torch.uint8:
            w0 = fixed.first_uint8
        else:
            x, w0 = as_float(x), fixed.convs[0][0]
        (_, b0, s0), *rest = fixed.convs
        x = F.relu(F.conv2d(x.to(torch.bfloat16), w0, b0, s0))
        for w, b, s in rest:
            x = F.relu(F.conv2d(x, w, b, s))
        return F.relu(F.linear(x.flatten(1), fixed.fc_weight, fixed.fc_bias)).float()

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.movedim(-1, -3) if self.channels_last else obs
        x = x.reshape(-1, *x.shape[-3:])
        # images in learning_layout's space-to-depth form (their shape tells them apart: the
        # env's own are (C, H, W)); the first layer reads them as a 2x2 conv of stride 1
        s2d = self.s2d_shape is not None and tuple(x.shape[-3:]) == self.s2d_shape
        if self._fixed is not None and not torch.is_grad_enabled() and not s2d:
            return self._fixed_forward(x, self._fixed)
        if torch.is_grad_enabled():
            # The learning pass: oneDNN's conv backward is several times faster on NHWC input
            # than on NCHW on this CPU (the whole pass, forward and backward, about 0.8x the
            # time; docs/benchmarks.md#atari-a-faster-worker-step). Done before the float
            # conversion, which keeps the layout: uint8 pixels are a quarter of the bytes. A
            # pass without gradients outside a worker's rollout (evaluation, asyncrl.load)
            # keeps NCHW: under autocast NHWC measured no faster there.
            x = x.contiguous(memory_format=torch.channels_last)
        # The convolutions and the fc layer, nearly all of the network's arithmetic, in
        # bfloat16 with --precision bfloat16, on the CPU's AMX or AVX-512 BF16 units: the
        # learning pass takes 0.5-0.65 of float32's time (cpu_has_bfloat16_units). Their
        # gradients come back float32 to the float32 parameters, and the features leave as
        # float32, so the heads' log-probabilities, the PPO ratio and the losses keep
        # float32's precision.
        first: nn.Conv2d
        first, *rest = self.convs  # type: ignore[assignment]
        with torch.autocast("cpu", torch.bfloat16) if self.in_bfloat16 else nullcontext():
            weight, stride = first.weight, first.stride
            if s2d:
                weight, stride = space_to_depth_weight(weight, self.s2d), (1, 1)
            if x.dtype == torch.uint8:
                # pixels 0-255 are exact in either precision: the 1/255 goes into the first
                # layer's few weights instead of a pass over the batch (a tenth of a bfloat16
                # learning pass)
                dtype = torch.bfloat16 if self.in_bfloat16 else torch.float32
                x, weight = x.to(dtype), weight * (1.0 / 255.0)
            else:
                x = as_float(x)
            x = F.relu(F.conv2d(x, weight, first.bias, stride))
            for conv in rest:
                x = F.relu(conv(x))
            x = F.relu(self.fc(x.flatten(1)))
        return x.float()

    def learning_layout(self, obs: np.ndarray) -> np.ndarray | None:
        """``obs`` ``(..., C, H, W)`` copied into the layout the learning pass reads, for a
        caller that learns from the same frames several times (APPO's epochs), NHWC: a
        minibatch's change of layout took most of the third of a bfloat16 learning pass that
        its input copies took in the profiler; once per rollout it costs a quarter of that. On
        Pong, 2-5% more frames a second (docs/benchmarks.md, Pong in 30 minutes). Where the
        first layer fits (``s2d``), the copy is :func:`space_to_depth`'s, which the first
        layer reads as a 2x2 conv. Index it, then ``movedim(-1, -3)``: :meth:`forward` takes
        the result without a copy. None where the observations are NHWC already (MinAtar's)."""
        if self.channels_last:
            return None
        if self.s2d:
            return space_to_depth(obs, self.s2d)
        return torch.from_numpy(obs).movedim(-3, -1).contiguous().numpy()


def build_normalizer(spec: ModelSpec) -> ObsNormalizer | None:
    return ObsNormalizer(int(np.prod(spec.obs_shape)), spec.obs_clip) if spec.obs_clip > 0 else None


def build_encoder(spec: ModelSpec, norm: ObsNormalizer | None = None) -> MLPEncoder | ConvEncoder:
    if spec.encoder == "mlp":
        return MLPEncoder(int(np.prod(spec.obs_shape)), spec.hidden, norm)
    if norm is not None:  # model_spec_for refuses --normalize-obs for images
        raise ValueError("observation normalisation is for vector observations")
    return ConvEncoder(spec.encoder, spec.obs_shape, spec.channels_last, spec.precision)


def encode_rollout(
    encode: Callable[[torch.Tensor], torch.Tensor], obs: torch.Tensor, bootstrap: bool = True
) -> torch.Tensor:
    """Features ``(T+1, B, d)`` of a rollout's observations ``(T+1, B, ...)`` in one batched
    pass. The last row (the observation after the last step) is only ever a target -- a
    bootstrap value, or a Q value nobody learns from -- so it is encoded without gradient:
    no backward pass over it (on Atari at t_max 5 that was a sixth of the backward pass).
    ``bootstrap=False``: rows that are all learnt from, every one with gradient."""
    T1, B = obs.shape[:2]
    if not bootstrap:
        return encode(obs.flatten(0, 1)).unflatten(0, (T1, B))
    flat = obs.flatten(0, 1)
    n = (T1 - 1) * B
    x = encode(flat[:n])
    with torch.no_grad():
        last = encode(flat[n:])
    return torch.cat([x, last]).unflatten(0, (T1, B))


def update_obs_stats(stats: torch.Tensor, batch: np.ndarray) -> None:
    """Merge a batch's mean and variance into ``[count, mean, var]`` in place (Chan et al.'s
    parallel update). Only one writer may update a given ``stats``: workers that share memory
    each keep a row of their own (``GlobalState.obs_rows``) and read the merge of all rows
    (:func:`combine_obs_stats`)."""
    _merge(stats, batch)


def combine_obs_stats(base: torch.Tensor, rows: torch.Tensor, out: torch.Tensor) -> None:
    """``out`` = ``base`` merged with every row of ``rows`` (``(W, 1 + 2d)``, each a
    ``[count, mean, var]`` of its own, count 0 where nothing was seen), in one pass whatever W:
    the pooled mean, and the pooled variance as the weighted within-row variances plus the
    rows' spread about that mean (exact, no sum of squares to cancel). A row read while its
    worker writes it may mix old and new moments for that one read (a rollout's normalising,
    or a checkpoint taken at that instant); the worker's own row is whole again after its
    write."""
    d = (base.numel() - 1) // 2
    parts = torch.cat([base.unsqueeze(0), rows]).double()
    counts = parts[:, :1]
    n = float(counts.sum())
    if n <= 0:
        out.copy_(base)
        return
    means, variances = parts[:, 1 : 1 + d], parts[:, 1 + d :]
    mean = (counts * means).sum(0) / n
    var = (counts * (variances + (means - mean).pow(2))).sum(0) / n
    out[0] = n
    out[1 : 1 + d] = mean
    out[1 + d :] = var


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
    """Make the model's normaliser read ``stats`` in place (a store's statistics, kept current
    by the store; a snapshot's, frozen)."""
    norm = getattr(model, "obs_norm", None)
    if norm is not None:
        norm.stats = stats


# ---------------------------------------------------------------------- cores
class Core(nn.Module):
    """Between the encoder and the heads: ``step(x, state, first) -> (h, state)`` for one step
    of B envs, ``unroll`` for a rollout. The state is one tensor ``(B, *state_shape)`` per
    worker (or evaluated batch); ``first[i]`` says env i starts an episode, so its state
    restarts from zero. A new core is a subclass and a line in :data:`CORES`."""

    out_dim: int
    #: whether a step's output depends on earlier steps: then a rollout is replayed in
    #: sequences, each from a stored state (APPO's minibatches are groups of whole rollouts or
    #: of --seq-len pieces), where a core without memory can take any set of transitions
    sequential: bool = True

    def initial_state(self, batch: int) -> torch.Tensor:
        raise NotImplementedError

    def step(
        self, x: torch.Tensor, state: torch.Tensor, first: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def unroll(
        self, x: torch.Tensor, state: torch.Tensor, first: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Outputs ``(T+1, B, out_dim)`` of features ``(T+1, B, d)`` from the state at their
        start, step by step (PFRL's way), and the state after them. Gradients reach back to
        the start of the rollout, not beyond (the stored state has no history)."""
        hs = []
        for t in range(x.shape[0]):
            h, state = self.step(x[t], state, first[t])
            hs.append(h)
        return torch.stack(hs), state


class IdentityCore(Core):
    """No memory: the features pass through, with an empty state ``(B, 0)``."""

    sequential = False

    def __init__(self, d_in: int, size: int):
        super().__init__()
        self.out_dim = d_in

    def initial_state(self, batch: int) -> torch.Tensor:
        return torch.zeros(batch, 0)

    def step(self, x, state, first):
        return x, state

    def unroll(self, x, state, first):
        return x, state


class RecurrentCore(Core):
    """A recurrent cell whose state ``(B, rows, size)`` is zeroed where an episode starts;
    ``h`` is row 0. Subclasses name the cell and how it steps."""

    rows: int

    def __init__(self, cell: nn.RNNCellBase):
        super().__init__()
        self.cell = cell
        for name, p in cell.named_parameters():
            (nn.init.orthogonal_ if "weight" in name else nn.init.zeros_)(p)
        self.out_dim = cell.hidden_size

    def initial_state(self, batch: int) -> torch.Tensor:
        return torch.zeros(batch, self.rows, self.out_dim)

    def step(self, x, state, first):
        state = self.cell_step(x, _restart(state, first))
        return state[:, 0], state

    def unroll(self, x, state, first):
        """As :meth:`Core.unroll`, but each stretch between episode starts in one call of
        :meth:`sequence`: stepping the cell from Python cost APPO's LSTM on Pong 79 ms a
        minibatch of 2 games x 129 steps, forward and backward, against 17.5 ms in torch's
        own RNN kernel (one thread; benchmarks/recurrent.py). A stretch ends where any env of
        the batch starts an episode; there the states of those envs restart from zero."""
        starts = first[1:].any(dim=1).nonzero().flatten().add(1).tolist()
        bounds = [0, *starts, x.shape[0]]
        outs = []
        for a, b in itertools.pairwise(bounds):
            out, state = self.sequence(x[a:b], _restart(state, first[a]))
            outs.append(out)
        return torch.cat(outs), state

    def cell_step(self, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def sequence(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Outputs ``(L, B, size)`` of the cell run over ``x`` ``(L, B, d)`` from ``state``
        with no restart in between, and the state after them: here the cell stepped row by
        row; the LSTM and the GRU run torch's kernel for the whole stretch instead."""
        return Core.unroll(self, x, state, torch.zeros(x.shape[:2], dtype=torch.bool))

    def _weights(self) -> list[torch.Tensor]:
        # the cell's own parameters in the order torch's RNN functions take them, so the
        # kernel and the cell's step share weights (and state_dict names)
        c = self.cell
        return [c.weight_ih, c.weight_hh, c.bias_ih, c.bias_hh]


def _restart(state: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
    """The core state ``(B, rows, size)`` zeroed for the envs whose episode starts."""
    return state * (~first).to(state.dtype)[:, None, None]


class LSTMCore(RecurrentCore):
    """The paper's recurrent agent: an LSTM, state (h, c)."""

    rows = 2

    def __init__(self, d_in: int, size: int):
        super().__init__(nn.LSTMCell(d_in, size))

    def cell_step(self, x, state):
        h, c = self.cell(x, (state[:, 0], state[:, 1]))
        return torch.stack([h, c], dim=1)

    def sequence(self, x, state):
        hc = (state[:, 0][None].contiguous(), state[:, 1][None].contiguous())
        # nn.LSTM's own call (1 layer, biases, no dropout, one direction, time first): on CPU
        # oneDNN's LSTM kernel for float32
        out, h, c = torch._VF.lstm(
            x, hc, self._weights(), True, 1, 0.0, self.training, False, False
        )
        return out, torch.stack([h[0], c[0]], dim=1)


class GRUCore(RecurrentCore):
    """A GRU: state h alone, three gates to the LSTM's four (a quarter fewer weights)."""

    rows = 1

    def __init__(self, d_in: int, size: int):
        super().__init__(nn.GRUCell(d_in, size))

    def cell_step(self, x, state):
        return self.cell(x, state[:, 0])[:, None]

    def sequence(self, x, state):
        # nn.GRU's own call (as LSTMCore.sequence): ATen's C++ loop of the GRU cell
        h0 = state[:, 0][None].contiguous()
        out, h = torch._VF.gru(x, h0, self._weights(), True, 1, 0.0, self.training, False, False)
        return out, h[0][:, None]


CORES: dict[str, Callable[[int, int], Core]] = {
    "none": IdentityCore,
    "lstm": LSTMCore,
    "gru": GRUCore,
}


def build_core(spec: ModelSpec, d_in: int) -> Core:
    return CORES[spec.core](d_in, spec.core_size)


# ---------------------------------------------------------------------- networks
class Network(nn.Module):
    """What both networks share: an encoder (its normaliser inside), a core, and the core's
    state. Subclasses give :meth:`act` and :meth:`unroll` their heads."""

    encoder: MLPEncoder | ConvEncoder
    core: Core
    #: inputs the core takes beside the encoder's features (:attr:`ModelSpec.context_dim`)
    context_dim: int = 0
    # The behaviour policy runs once per env step, where each nn.Module attribute lookup
    # costs about a microsecond: plain references to what it touches (the same objects:
    # flatten_parameters and load_state_dict change their data in place).
    _encode: Callable[[torch.Tensor], torch.Tensor]
    _core_step: Callable[..., tuple[torch.Tensor, torch.Tensor]]

    def _bind_hot_path(self) -> None:
        object.__setattr__(self, "_encode", self.encoder.forward)
        object.__setattr__(self, "_core_step", self.core.step)
        # model.pt files written before the core was a module of its own
        self._register_load_state_dict_pre_hook(_rename_legacy_keys, with_module=True)

    @property
    def obs_norm(self) -> ObsNormalizer | None:
        norm = getattr(self.encoder, "norm", None)
        return norm if isinstance(norm, ObsNormalizer) else None

    def initial_state(self, batch: int) -> torch.Tensor:
        """The core's state for ``batch`` envs at the start of their episodes (may be empty)."""
        return self.core.initial_state(batch)

    @contextmanager
    def fixed_weights(self) -> Iterator[None]:
        """A span in which the parameters do not change: a worker's rollout, between its pull
        and its first update. Inside it, a bfloat16 conv encoder's passes without gradient
        read weights converted once on entry, where autocast converts them again on each call
        (:meth:`ConvEncoder.fix_weights`); everything else runs as outside it. Changing the
        parameters inside it would leave those passes on the old weights."""
        convs = [m for m in self.modules() if isinstance(m, ConvEncoder)]
        for m in convs:
            m.fix_weights()
        try:
            yield
        finally:
            for m in convs:
                m.release_weights()

    def _build_core(self, spec: ModelSpec, features: int) -> None:
        self.context_dim = spec.context_dim
        self.core = build_core(spec, features + spec.context_dim)

    def _with_context(self, x: torch.Tensor, context: torch.Tensor | None) -> torch.Tensor:
        """Features ``(..., d)`` with the context ``(..., context_dim)`` appended where the
        core takes one (the previous action and reward); unchanged otherwise."""
        if not self.context_dim:
            return x
        if context is None:
            raise ValueError(
                "this network's core takes the previous action and reward "
                "(ModelSpec.prev_action_reward): pass their context"
            )
        return torch.cat([x, context], dim=-1)

    def _features(
        self,
        obs: torch.Tensor,
        state: torch.Tensor,
        first: torch.Tensor,
        bootstrap: bool = True,
        context: torch.Tensor | None = None,
    ):
        """The core's outputs ``(T+1, B, d)`` over a rollout, from its start state."""
        x = self._with_context(encode_rollout(self._encode, obs, bootstrap), context)
        return self.core.unroll(x, state, first)[0]

    @torch.no_grad()
    def burn_in(
        self,
        obs: torch.Tensor,
        state: torch.Tensor,
        first: torch.Tensor,
        context: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The core's state after observations ``(K, B, ...)`` from ``state``, episode starts
        ``first`` ``(K, B)`` restarting it, without gradient: R2D2's burn-in (APPO's
        --burn-in). Only the core's state comes out; no head runs."""
        x = self._with_context(encode_rollout(self._encode, obs, False), context)
        return self.core.unroll(x, state, first)[1]


def _rename_legacy_keys(
    module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any
) -> None:
    # model.pt files written before the normaliser moved into the encoder and the LSTM into a
    # core module: obs_norm.stats -> <encoder>.norm.stats, lstm.* -> core.cell.*
    for key in list(state_dict):
        rest = key[len(prefix) :]
        if rest == "obs_norm.stats":
            stats = state_dict.pop(key)
            for name, _ in module.named_buffers(remove_duplicate=False):
                if name.endswith("norm.stats"):
                    state_dict[prefix + name] = stats
        elif rest.startswith("lstm."):
            state_dict[f"{prefix}core.cell.{rest[5:]}"] = state_dict.pop(key)


class ActorCritic(Network):
    """Policy (the parameters of a distribution) and state value; one encoder shared by both
    heads (the paper) or one each."""

    _pi_w: torch.Tensor
    _pi_b: torch.Tensor

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.action = spec.action
        norm = build_normalizer(spec)
        self.pi_body = build_encoder(spec, norm)
        # a recurrent agent has one encoder and one core for both heads (the paper's); a
        # separate critic trunk (the default for vectors) is a feed-forward net's option
        shared = spec.shared_trunk or spec.core != "none"
        self.v_body = self.pi_body if shared else build_encoder(spec, norm)
        self.shared_trunk = shared
        self._build_core(spec, self.pi_body.out_dim)
        d = self.core.out_dim
        self.pi_head = _linear(d, spec.action.dim, 0.01)
        self.v_head = _linear(d, 1, 1.0)
        box = spec.action.kind == "box"
        # Box actions: a state-independent log-std (the common choice today; SB3, PPO), or
        # the paper's softplus head (the paper says variance; asyncrl's head is the std)
        self.softplus_std = box and spec.gaussian_std == "softplus"
        self.std_head = _linear(d, spec.action.dim, 0.01) if self.softplus_std else None
        self.log_std = (
            nn.Parameter(torch.full((spec.action.dim,), float(spec.log_std_init)))
            if box and not self.softplus_std
            else None
        )
        self._bind_hot_path()
        object.__setattr__(self, "_pi_w", self.pi_head.weight)
        object.__setattr__(self, "_pi_b", self.pi_head.bias)

    @property
    def encoder(self) -> MLPEncoder | ConvEncoder:  # type: ignore[override]
        return self.pi_body

    def act(
        self,
        obs: torch.Tensor,
        state: torch.Tensor,
        first: torch.Tensor,
        context: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of B envs: distribution parameters ``(B, ...)`` and the core's new state.
        (The critic is not run: A3C acts without a value; :meth:`act_value` runs it.)
        ``context`` ``(B, context_dim)``: the previous action and reward, where the core takes
        them (:func:`write_context`)."""
        h, state = self._core_step(self._with_context(self._encode(obs), context), state, first)
        return self._policy(h), state

    def act_value(
        self,
        obs: torch.Tensor,
        state: torch.Tensor,
        first: torch.Tensor,
        context: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`act` with the critic run too: distribution parameters, values ``(B,)`` and
        the core's new state. For a learner that takes its targets from the values of the
        policy that acted (APPO's, as PPO's): on a shared trunk the value costs one dot product
        an env."""
        h, state = self._core_step(self._with_context(self._encode(obs), context), state, first)
        hv = h if self.shared_trunk else self._with_context(self.v_body(obs), context)
        return self._policy(h), self._value(hv), state

    def unroll(
        self,
        obs: torch.Tensor,
        state: torch.Tensor,
        first: torch.Tensor,
        bootstrap: bool = True,
        context: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A rollout's observations ``(T+1, B, ...)`` from the core's state at its start:
        distribution parameters ``(T+1, B, ...)`` and values ``(T+1, B)``; the last row is a
        target, computed without gradient through the encoder (:func:`encode_rollout`), unless
        ``bootstrap=False`` (a batch of transitions, every row learnt from). ``context``
        ``(T+1, B, context_dim)``: each row's previous action and reward, where the core takes
        them."""
        h = self._features(obs, state, first, bootstrap, context)
        if self.shared_trunk:
            hv = h
        else:
            hv = self._with_context(encode_rollout(self.v_body.forward, obs, bootstrap), context)
        return self._policy(h), self._value(hv)

    def _value(self, hv: torch.Tensor) -> torch.Tensor:
        return F.linear(hv, self.v_head.weight, self.v_head.bias).squeeze(-1)

    def _policy(self, h: torch.Tensor) -> torch.Tensor:
        out = F.linear(h, self._pi_w, self._pi_b)
        if self.log_std is not None:
            out = torch.cat([out, self.log_std.expand_as(out)], dim=-1)
        elif self.std_head is not None:
            # softplus(0) = log 2: the initial std is about 0.7
            std = F.softplus(self.std_head(h)) + 1e-4
            out = torch.cat([out, std.log()], dim=-1)
        return out

    def distribution(self, params: torch.Tensor) -> Distribution:
        return distribution_for(self.action, params)


class QNetwork(Network):
    """Action values Q(s, .): encoder, core, a linear head."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.body = build_encoder(spec, build_normalizer(spec))
        self._build_core(spec, self.body.out_dim)
        self.head = _linear(self.core.out_dim, spec.action.n, 1.0)
        self._bind_hot_path()

    @property
    def encoder(self) -> MLPEncoder | ConvEncoder:  # type: ignore[override]
        return self.body

    def act(
        self,
        obs: torch.Tensor,
        state: torch.Tensor,
        first: torch.Tensor,
        context: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Q values ``(B, A)`` for one step of B envs, and the core's new state."""
        h, state = self._core_step(self._with_context(self._encode(obs), context), state, first)
        return F.linear(h, self.head.weight, self.head.bias), state

    def unroll(
        self,
        obs: torch.Tensor,
        state: torch.Tensor,
        first: torch.Tensor,
        context: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Q values ``(T+1, B, A)`` of a rollout recomputed from the core's start state (the
        last row without gradient through the encoder)."""
        h = self._features(obs, state, first, context=context)
        return F.linear(h, self.head.weight, self.head.bias)


def build_model(spec: ModelSpec) -> ActorCritic | QNetwork:
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
