"""A parameter server on Ray, for clusters of many machines (``--backend ray``).

    ParameterServer (one Ray actor)          WorkerActor x N (one per CPU of the cluster)
      global parameters (flat)     <- push --   the same Worker loop as every backend:
      shared optimizer statistics  -- pull ->   pull, collect, loss, backward, push
      target network, counters                  (RayStore: the worker's side)
      episode stream, staleness

One module each:

* :mod:`~asyncrl.backends.ray.server`: the parameter server (parameters, optimizer
  statistics, counters, the staleness bound);
* :mod:`~asyncrl.backends.ray.store`: the worker's side, :class:`RayStore` (batched and
  pipelined calls);
* :mod:`~asyncrl.backends.ray.run`: the main process's side, :class:`RayRun` (servers and
  worker actors started, replaced when they die, released at the end), and the actors;
* :mod:`~asyncrl.backends.ray.shards`: ``--ray-servers K``, the parameters cut into K slices;
* :mod:`~asyncrl.backends.ray.summary`: the staleness and server-load lines of the summary;
* :mod:`~asyncrl.backends.ray.cluster`: Ray's lifecycle, one context manager that
  :func:`asyncrl.train` enters. It imports neither PyTorch nor the modules above, which is
  why this package imports its modules on first use: the CLI starts Ray while PyTorch is
  imported.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from asyncrl.backends.ray.cluster import (
        RayCluster,
        cluster_cpus,
        ray_cluster,
        require_ray,
        start_ray,
        stop_ray,
    )
    from asyncrl.backends.ray.run import RayRun, WorkerActor
    from asyncrl.backends.ray.server import SERVER_NAME, ParameterServer, unpack_grads
    from asyncrl.backends.ray.shards import join_snapshots, shard_bounds, shard_snapshot
    from asyncrl.backends.ray.store import RayStore
    from asyncrl.backends.ray.summary import server_line, server_load, staleness_line

_LAZY = {
    "RayCluster": "cluster",
    "cluster_cpus": "cluster",
    "ray_cluster": "cluster",
    "require_ray": "cluster",
    "start_ray": "cluster",
    "stop_ray": "cluster",
    "RayRun": "run",
    "WorkerActor": "run",
    "SERVER_NAME": "server",
    "ParameterServer": "server",
    "unpack_grads": "server",
    "join_snapshots": "shards",
    "shard_bounds": "shards",
    "shard_snapshot": "shards",
    "RayStore": "store",
    "server_line": "summary",
    "server_load": "summary",
    "staleness_line": "summary",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "SERVER_NAME",
    "ParameterServer",
    "RayCluster",
    "RayRun",
    "RayStore",
    "WorkerActor",
    "cluster_cpus",
    "join_snapshots",
    "ray_cluster",
    "require_ray",
    "server_line",
    "server_load",
    "shard_bounds",
    "shard_snapshot",
    "staleness_line",
    "start_ray",
    "stop_ray",
    "unpack_grads",
]
