"""How many workers one parameter server feeds: the updates per second it sustains, driven by
simulated workers that send synthetic gradients as fast as they can (no envs, no learning).

1. ``inproc``: the server's own work per gradient, ``ParameterServer.push_pull`` called in this
   process with a batch of ``--ray-batch`` gradients (an optimizer step each, no Ray, no
   copies): the ceiling.
2. ``ray``: K real server actors (``--ray-servers K``, each holding a slice of the
   parameters) and N caller actors, each sending batches of ``--ray-batch`` gradients in one
   call per server and taking the parameters back, as ``RayStore`` does; the updates per
   second applied over a window of ``--seconds``.

For each model (the CartPole MLP and the A3C paper's Atari net) it prints the updates/s and
the number of real workers that rate feeds, from the updates a real worker makes per second
(``--worker-updates``, measured on Pong with the atari preset: see the README). On this 2-core
machine the callers share the cores with the server, so the ``ray`` figure is a floor for a
server with a core of its own. Ray may only talk over loopback here:

    scripts/loopback python benchmarks/ray_server_capacity.py --callers 1 2 4
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time

import numpy as np

import asyncrl
from asyncrl.algos import make_algorithm
from asyncrl.backends.ray import ParameterServer, shard_bounds, shard_snapshot
from asyncrl.backends.ray.cluster import start_ray
from asyncrl.envs import probe_env
from asyncrl.state import GlobalState

MODELS = {"cartpole-mlp": "CartPole-v1", "atari-a3c-net": "PongNoFrameskip-v4"}


def setup(env: str, batch: int) -> tuple[asyncrl.Config, GlobalState]:
    cfg = asyncrl.preset(None, env=env, backend="ray", ray_batch=batch).validate()
    info = probe_env(cfg.env)
    return cfg, GlobalState.create(cfg, make_algorithm(cfg, info).model_spec(), 1, False, False)


def inproc_updates_per_s(cfg: asyncrl.Config, state: GlobalState, seconds: float) -> float:
    server = ParameterServer(cfg, state.snapshot())
    n, batch = state.params.numel(), cfg.ray_tuning()[0]
    grads = np.random.default_rng(0).standard_normal((batch, n)).astype(np.float32)
    grads *= 1e-3
    t0, done = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        meta = [(True, server.version, 40)] * batch
        server.push_pull(grads, meta, [], 0, False)
        done += batch
    return done / (time.perf_counter() - t0)


def ray_updates_per_s(
    cfg: asyncrl.Config, state: GlobalState, callers: int, servers: int, seconds: float
) -> float:
    """Updates/s that ``servers`` server actors (``--ray-servers``: each a slice of the
    parameters) sustain under ``callers`` simulated workers; each caller sends every server
    its slice of a batch of gradients in parallel, as RayStore does."""
    import ray

    server_cls = ray.remote(num_cpus=0)(ParameterServer)
    n = state.params.numel()
    bounds = shard_bounds(n, servers)
    snap = state.snapshot()
    pool_s = [
        server_cls.remote(cfg, shard_snapshot(snap, a, b, k == 0))
        for k, (a, b) in enumerate(bounds)
    ]

    @ray.remote(num_cpus=0)
    class Caller:
        def go(self, servers: list, bounds: list, batch: int, until: float) -> int:
            grads = [np.full((batch, b - a), 1e-4, np.float32) for a, b in bounds]
            version, calls = 0, 0
            while time.time() < until:
                meta = [(True, version, 40)] * batch
                refs = [
                    s.push_pull.remote(g, meta, [], 0, False)
                    for s, g in zip(servers, grads, strict=True)
                ]
                version = ray.get(refs)[0][0]
                calls += 1
            return calls

    pool = [Caller.remote() for _ in range(callers)]
    batch = cfg.ray_tuning()[0]
    ray.get([c.go.remote(pool_s, bounds, batch, time.time() + 1.0) for c in pool])  # warm up
    v0 = ray.get(pool_s[0].statistics.remote())["version"]
    t0 = time.time()
    ray.get([c.go.remote(pool_s, bounds, batch, t0 + seconds) for c in pool])
    rate = (ray.get(pool_s[0].statistics.remote())["version"] - v0) / (time.time() - t0)
    for actor in [*pool, *pool_s]:
        ray.kill(actor)
    return rate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--callers", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--servers", type=int, nargs="+", default=[1, 2], help="--ray-servers K")
    p.add_argument("--ray-batch", type=int, default=8)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument(
        "--worker-updates",
        type=float,
        default=13.0,
        help="updates per second one real Atari worker makes (Pong, 8 envs, t_max 5)",
    )
    p.add_argument("--no-ray", action="store_true", help="the in-process ceiling only")
    args = p.parse_args()
    med = statistics.median
    rows = []
    for name in args.models:
        cfg, state = setup(MODELS[name], args.ray_batch)
        n = state.params.numel()
        inproc = med(inproc_updates_per_s(cfg, state, args.seconds) for _ in range(args.repeats))
        rows.append((name, n, "in-process ceiling", inproc))
        print(f"{name} ({n:,} parameters): in-process {inproc:,.0f} updates/s", flush=True)
        if args.no_ray:
            continue
        start_ray(cfg)
        for servers in args.servers:
            for k in args.callers:
                rates = [
                    ray_updates_per_s(cfg, state, k, servers, args.seconds)
                    for _ in range(args.repeats)
                ]
                how = f"Ray, {servers} server(s), {k} callers"
                rows.append((name, n, how, med(rates)))
                print(f"{name}: {how}: {med(rates):,.0f} updates/s", flush=True)
    per = args.worker_updates
    print(f"\nparameter server capacity, --ray-batch {args.ray_batch}, median of {args.repeats}")
    print(
        "| model | parameters | driven by | updates/s | Atari workers fed |\n|---|---|---|---|---|"
    )
    for name, n, how, rate in rows:
        fed = f"{rate / per:,.0f}" if name.startswith("atari") else ""
        print(f"| {name} | {n:,} | {how} | {rate:,.0f} | {fed} |")
    print(f"(a real Atari worker makes about {per:g} updates/s: --worker-updates)")
    print(
        "reproduce: scripts/loopback python benchmarks/ray_server_capacity.py "
        f"{shlex.join(sys.argv[1:])}"
    )


if __name__ == "__main__":
    main()
