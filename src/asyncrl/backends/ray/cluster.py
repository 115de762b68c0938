"""Starting, joining and ending the Ray cluster of a ``--backend ray`` run: :func:`ray_cluster`,
the context manager that :func:`asyncrl.train` enters (through
:func:`asyncrl.backends.cluster_for`). Neither PyTorch nor the rest of the backend is imported
here: the CLI enters it while PyTorch is imported."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from asyncrl.backends import usable_cpus
from asyncrl.errors import UserError

try:
    import ray
except ImportError:  # pragma: no cover - the extra is not installed
    ray = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from asyncrl.backends import BackendSettings


def require_ray() -> Any:
    if ray is None:
        raise UserError(
            "--backend ray: Ray is not installed; install the extra: "
            "pip install -c constraints.txt -e '.[ray]'"
        )
    return ray


class RayCluster:
    """The Ray cluster a run works on, as :func:`ray_cluster` yields it."""

    @property
    def cpus(self) -> int:
        """The cluster's CPUs now: one worker each where ``--workers`` is not given."""
        return cluster_cpus()


# The connection this module opened and the blocks inside it: the CLI enters ray_cluster
# early (while PyTorch is imported) and train enters it again; runs may also be started from
# several threads. The last block to leave ends what the first one started.
_lock = threading.Lock()
_users = 0


@contextlib.contextmanager
def ray_cluster(cfg: BackendSettings) -> Iterator[RayCluster]:
    """Ray for the duration of the block: join ``--address`` (or ``RAY_ADDRESS``) or start a
    cluster of our own (:func:`start_ray`), and on the way out end that cluster, or only
    disconnect from a joined one (:func:`stop_ray`). Blocks inside one that is open share its
    connection, and the last to leave ends it. A connection that something else opened (a
    ``ray.init`` of the caller's) is used and left open: it is not ours to end."""
    global _users
    require_ray()
    with _lock:
        ours = _users > 0 or not ray.is_initialized()
        if ours:
            if _users == 0:
                start_ray(cfg)
            _users += 1
    try:
        yield RayCluster()
    finally:
        if ours:
            with _lock:
                _users -= 1
                if _users == 0:
                    stop_ray()


def start_ray(cfg: BackendSettings) -> None:
    """Join ``--address`` (or ``RAY_ADDRESS``) or start a cluster of our own in-process, on
    loopback."""
    require_ray()
    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {
        "include_dashboard": False,
        "logging_level": "WARNING",
        "log_to_driver": True,
    }
    # RAY_ADDRESS, Ray's own variable (set for a job submitted to a cluster), as ray.init reads it
    address = cfg.address or os.environ.get("RAY_ADDRESS")
    if address:
        # the cluster's own setting: with token authentication (README: a secured cluster) the
        # token comes from RAY_AUTH_TOKEN or ~/.ray/auth_token, as for every Ray client
        ray.init(address=address, **kwargs)
    else:
        # Local Ray binds to loopback only: nothing of ours listens on another address. With
        # Ray >= 2.59 it also makes a token of its own (token authentication is Ray's default
        # for local clusters), so nothing else on this machine can join it. (Setting
        # RAY_AUTH_MODE here would be too late: Ray reads it when it is imported.)
        ray.init(
            # "local": a cluster of our own even where another runs on this machine (without it
            # ray.init joins the latest one started here, or fails on a stale record of it)
            address="local",
            num_cpus=usable_cpus(),
            _node_ip_address="127.0.0.1",
            _system_config={"max_direct_call_object_size": 1 << 20},
            **kwargs,
        )


def stop_ray() -> None:
    """End the local cluster :func:`start_ray` started (from a joined cluster, which keeps
    running, this process only disconnects). Ray's own exit hook would do the same, after a
    half-second pause for log lines that a finished run no longer sends."""
    if ray is None or not ray.is_initialized():
        return
    # Ray ends its processes one at a time, giving each a second to exit on SIGTERM, and the
    # GCS before the autoscaler's monitor, which then spends its whole second failing to reach
    # the GCS: most of what ray.shutdown takes (docs/ray.md). The monitor holds nothing of a run's;
    # it goes first, at once. (A private hook of Ray's: if it moves, the shutdown is as before.
    # A joined cluster's node object holds no processes of ours: nothing is killed there.)
    node: Any = getattr(ray._private.worker, "_global_node", None)
    with contextlib.suppress(Exception):
        node.kill_monitor(check_alive=False)
    ray.shutdown()


def cluster_cpus() -> int:
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


__all__ = ["RayCluster", "cluster_cpus", "ray_cluster", "require_ray", "start_ray", "stop_ray"]
