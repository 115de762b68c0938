"""``--ray-servers K``: the flat parameter vector cut into K contiguous slices, each held by a
server actor of its own with its slice of the optimizer statistics and of theta^-. A worker's
call goes to all K at once (its slice of each gradient in, its slice of the parameters out), so
the server's work per update divides by K. The first server also holds the counters, the
episode stream and the observation statistics; every server counts the steps (the lr schedule
reads them). Which gradients apply is one decision for the whole vector (the first server's
under ``--max-staleness``; see :class:`~asyncrl.backends.ray.store.RayStore`)."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import numpy as np

from asyncrl.messages import GlobalSnapshot

#: where the slices start: a multiple of the optimizer kernels' vector width (16 floats with
#: AVX-512). Torch's fused Adam rounds the few elements past the last whole vector of a tensor
#: otherwise than those inside one, so K servers apply exactly one server's update only if
#: every slice but the last is whole vectors.
SHARD_ALIGN = 64


def shard_bounds(n: int, shards: int) -> list[tuple[int, int]]:
    """Contiguous, nearly equal slices of the flat parameter vector, one per server, each
    starting at a multiple of :data:`SHARD_ALIGN`; a vector of fewer blocks of that size than
    there are servers (a toy model) is cut anywhere, and its servers match one server's
    update to rounding only."""
    blocks = -(-n // SHARD_ALIGN)
    if blocks >= shards:
        edges = [0, *(SHARD_ALIGN * (blocks * k // shards) for k in range(1, shards)), n]
    else:
        edges = [n * k // shards for k in range(shards + 1)]
    return list(itertools.pairwise(edges))


def shard_snapshot(snap: GlobalSnapshot, a: int, b: int, first: bool) -> GlobalSnapshot:
    """The part of the global state that the server of slice [a, b) holds: the slice of the
    parameters, of theta^- and of every per-parameter optimizer statistic (Adam's shared step
    counter whole: every server applies every update). Every server counts steps (the lr
    schedule and the target refresh read them); the first one also keeps the observation
    statistics."""
    n = snap.params.size

    def part(v: np.ndarray) -> np.ndarray:
        return v[a:b] if v.shape == (n,) else v

    return dataclasses.replace(
        snap,
        params=part(snap.params),
        optimizer={k: part(v) for k, v in snap.optimizer.items()},
        target_params=None if snap.target_params is None else part(snap.target_params),
        obs_stats=snap.obs_stats if first else None,
        obs_parts=None,  # shared memory's rows: a server keeps the merged statistics
    )


def join_snapshots(parts: list[GlobalSnapshot]) -> GlobalSnapshot:
    """The global state from the servers' parts (:func:`shard_snapshot`'s inverse)."""
    if len(parts) == 1:
        return parts[0]
    first, n = parts[0], parts[0].params.size

    def join(get: Any) -> np.ndarray:
        return np.concatenate([get(p) for p in parts])

    return dataclasses.replace(
        first,
        params=join(lambda p: p.params),
        optimizer={
            k: join(lambda p, k=k: p.optimizer[k]) if v.shape == (n,) else v
            for k, v in first.optimizer.items()
        },
        target_params=None if first.target_params is None else join(lambda p: p.target_params),
    )


__all__ = ["join_snapshots", "shard_bounds", "shard_snapshot"]
