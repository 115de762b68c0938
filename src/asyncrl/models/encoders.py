"""Encoders, chosen from the observation space: an MLP for vectors, conv nets for images (with
the space-to-depth form of the Atari nets' first layer and bfloat16 on the CPUs that have units
for it), and for a structured (Dict, Tuple) observation one encoder per leaf with the features
concatenated (:class:`MultiInputEncoder`); or the user's own (:mod:`asyncrl.models.user`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from asyncrl.models.normalizer import ObsNormalizer
from asyncrl.models.spec import ModelSpec
from asyncrl.models.user import UserEncoder
from asyncrl.spaces import CONV_NETS as _CONV_NETS
from asyncrl.spaces import ObsLayout, ObsLeaf


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
    float32's: "AMX" (Intel's matrix units) and "AVX-512 BF16" (AMD Zen 4). Without either,
    bfloat16 arithmetic is emulated, slower than float32's: auto keeps float32
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


# the conv nets' geometry (_CONV_NETS) and conv_net_problem live in asyncrl.spaces, which
# imports no PyTorch: the observation layout asks them which images the conv nets read


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
    # the transpose is faster than one moving single bytes
    # (docs/atari.md#the-first-layer-as-a-2x2-conv)
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
        acting pass of a worker, faster than autocast's, which converts every float32 weight on
        every call (measured at 8efeca9: docs/benchmarks.md, "the acting pass on weights
        converted once a rollout")."""
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
        # positive axes: the ONNX exporter writes movedim's negative ones into a Transpose's
        # perm as they are, which ONNX refuses (asyncrl export of a MinAtar policy)
        n = obs.dim()
        x = obs.movedim(n - 1, n - 3) if self.channels_last else obs
        x = x.reshape(-1, *x.shape[-3:])
        # images in learning_layout's space-to-depth form (their shape tells them apart: the
        # env's own are (C, H, W)); the first layer reads them as a 2x2 conv of stride 1
        s2d = self.s2d_shape is not None and tuple(x.shape[-3:]) == self.s2d_shape
        if self._fixed is not None and not torch.is_grad_enabled() and not s2d:
            return self._fixed_forward(x, self._fixed)
        if torch.is_grad_enabled():
            # The learning pass: oneDNN's conv backward is faster on NHWC input than on NCHW
            # (8efeca9:docs/benchmarks.md#atari-a-faster-worker-step). Done before the float
            # conversion, which keeps the layout: uint8 pixels are a quarter of the bytes. A
            # pass without gradients outside a worker's rollout (evaluation, asyncrl.load)
            # keeps NCHW: under autocast NHWC measured no faster there.
            x = x.contiguous(memory_format=torch.channels_last)
        # The convolutions and the fc layer, nearly all of the network's arithmetic, in
        # bfloat16 with --precision bfloat16, on the CPU's AMX or AVX-512 BF16 units
        # (cpu_has_bfloat16_units; docs/atari.md#bfloat16). Their gradients come back float32
        # to the float32 parameters, and the features leave as float32, so the heads'
        # log-probabilities, the PPO ratio and the losses keep float32's precision.
        first: nn.Conv2d
        first, *rest = self.convs  # type: ignore[assignment]
        with torch.autocast("cpu", torch.bfloat16) if self.in_bfloat16 else nullcontext():
            weight, stride = first.weight, first.stride
            if s2d:
                weight, stride = space_to_depth_weight(weight, self.s2d), (1, 1)
            if x.dtype == torch.uint8:
                # pixels 0-255 are exact in either precision: the 1/255 goes into the first
                # layer's few weights instead of a pass over the batch (docs/atari.md#bfloat16)
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
        caller that learns from the same frames several times (APPO's epochs), NHWC: the
        change of layout once per rollout rather than once per minibatch
        (8efeca9:docs/benchmarks.md#atari-pong-in-30-minutes-with-bfloat16). Where the first layer
        fits (``s2d``), the copy is :func:`space_to_depth`'s, which the first layer reads as
        a 2x2 conv. Index it, then ``movedim(-1, -3)``: :meth:`forward` takes
        the result without a copy. None where the observations are NHWC already (MinAtar's)."""
        if self.channels_last:
            return None
        if self.s2d:
            return space_to_depth(obs, self.s2d)
        return torch.from_numpy(obs).movedim(-3, -1).contiguous().numpy()


class MultiInputEncoder(nn.Module):
    """One encoder per leaf of a structured observation (:mod:`asyncrl.spaces`), the features
    concatenated (SB3's ``CombinedExtractor``; RLlib's ``restore_original_dimensions`` for
    the unpacking). It takes the packed rows ``(N, size)`` the rollout stores and reads each
    leaf out of them in its own shape (a slice and a reshape: a view, no copy):

    * each image leaf through a conv net of its own (:class:`ConvEncoder`, ``spec.encoder``),
      as an image, never flattened; with ``--net mlp`` (``spec.encoder == "mlp"``) image
      leaves are read as vectors instead;
    * every other leaf into one MLP (``spec.hidden``), concatenated: vectors (and images read
      as vectors) normalised by the shared normaliser where ``--normalize-obs`` is on (the
      only leaves it normalises: its statistics span the whole row, and each leaf reads its
      own columns), Discrete leaves one-hot, MultiDiscrete ones one-hot per part, MultiBinary
      ones as floats.

    uint8 leaves are scaled by 1/255 as a uint8 Box observation is (:func:`as_float`), whatever
    the dtype of the row they were packed into; other leaves keep their values."""

    def __init__(self, spec: ModelSpec, norm: ObsNormalizer | None):
        super().__init__()
        layout = spec.obs_layout
        if layout is None:
            raise ValueError("a multi-input encoder reads a structured observation's leaves")
        self.layout: ObsLayout = layout
        # (--net mlp: image leaves read as vectors)
        self._conv = conv = spec.encoder != "mlp"
        self._images = [leaf for leaf in layout.leaves if conv and leaf.kind == "image"]
        self._flat = [leaf for leaf in layout.leaves if leaf not in self._images]
        convs = [
            ConvEncoder(spec.encoder, leaf.image_shape, leaf.channels_last, spec.precision)
            for leaf in self._images
        ]
        self.convs = nn.ModuleList(convs)
        self._convs = convs  # the same modules, typed
        flat_dim = sum(leaf.features for leaf in self._flat)
        self.mlp = MLPEncoder(flat_dim, spec.hidden, None) if self._flat else None
        # registered after the layers, as MLPEncoder's: the flat parameter vector's layout
        # does not move
        self.norm = norm
        self.out_dim = sum(c.out_dim for c in convs) + (self.mlp.out_dim if self.mlp else 0)
        # MultiDiscrete leaves: each part's first column in the leaf's one-hot
        self._part_offsets = {
            leaf.name: torch.tensor(np.cumsum((0, *leaf.nvec[:-1])), dtype=torch.long)
            for leaf in self._flat
            if leaf.kind == "multidiscrete"
        }

    def leaf_input(self, rows: torch.Tensor, leaf: ObsLeaf) -> torch.Tensor:
        """``leaf`` of the packed ``rows`` ``(N, size)`` as its encoder takes it: an image
        ``(N, *leaf.image_shape)`` (uint8 left to the conv net where the row is uint8), else
        ``(N, leaf.features)`` floats."""
        n = rows.shape[0]
        part = rows[:, leaf.offset : leaf.offset + leaf.size]
        if leaf.kind in ("discrete", "multidiscrete"):
            index = part.long()
            if leaf.kind == "multidiscrete":
                index = index + self._part_offsets[leaf.name]
            return torch.zeros(n, leaf.features).scatter_(1, index, 1.0)
        if leaf.kind == "image" and self._conv:
            image = part.reshape(n, *leaf.image_shape)
            if leaf.dtype == "uint8":
                # a uint8 row: the conv net folds the 1/255 into its first layer's weights
                return image if image.dtype == torch.uint8 else image.float() * (1.0 / 255.0)
            return image.float()
        x = part.float()
        if leaf.kind in ("vector", "image") and self.norm is not None:  # (images: --net mlp)
            return self.norm.columns(x, leaf.offset)
        return x * (1.0 / 255.0) if leaf.dtype == "uint8" else x

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        rows = obs.reshape(-1, obs.shape[-1])
        features = [
            conv.forward(self.leaf_input(rows, leaf))
            for leaf, conv in zip(self._images, self._convs, strict=True)
        ]
        if self.mlp is not None:
            flat = [self.leaf_input(rows, leaf) for leaf in self._flat]
            features.append(self.mlp.forward(flat[0] if len(flat) == 1 else torch.cat(flat, 1)))
        return features[0] if len(features) == 1 else torch.cat(features, 1)

    def learning_layout(self, obs: np.ndarray) -> None:
        """The packed rows are read as stored (see :meth:`ConvEncoder.learning_layout`)."""
        return None


def build_encoder(
    spec: ModelSpec, norm: ObsNormalizer | None = None
) -> MLPEncoder | ConvEncoder | MultiInputEncoder | UserEncoder:
    if spec.encoder_class:  # the user's own (--encoder), on every observation space
        if norm is not None:  # model_spec_for refuses --normalize-obs with --encoder
            raise ValueError("observation normalisation is for asyncrl's own encoders")
        return UserEncoder(spec)
    if spec.obs_leaves:
        return MultiInputEncoder(spec, norm)
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
    no backward pass over it (8efeca9:docs/benchmarks.md#atari-other-settings).
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
