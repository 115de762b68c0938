"""Observation normalisation (``--normalize-obs``): the normaliser, the MLP encoder's first
piece, and the running statistics it reads, which workers and stores update and merge."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from asyncrl.models.spec import ModelSpec


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

    def columns(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """:meth:`forward` on the columns ``start:start + k`` of the rows alone, ``x`` ``(N, k)``
        their float values: a vector leaf of a packed structured observation, whose statistics
        are those columns' (:class:`asyncrl.models.MultiInputEncoder`)."""
        d, k = self.obs_dim, x.shape[-1]
        stats: torch.Tensor = self.stats  # type: ignore[assignment]
        mean, var = stats[1 + start : 1 + start + k], stats[1 + d + start : 1 + d + start + k]
        return ((x - mean) / (var + 1e-8).sqrt()).clamp(-self.clip, self.clip)


def build_normalizer(spec: ModelSpec) -> ObsNormalizer | None:
    return ObsNormalizer(int(np.prod(spec.obs_shape)), spec.obs_clip) if spec.obs_clip > 0 else None


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
