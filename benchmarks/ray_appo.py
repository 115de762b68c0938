"""APPO on Ray with and without a call per minibatch: the figure behind APPO's `--ray-batch 1
--ray-pipeline 0` defaults (docs/ray.md#appo-on-ray).

Builds the learning test's cluster (two nodes of one CPU, on loopback, token auth) and trains
APPO with V-trace on CartPole-v1 with 2 workers, alternately in each setting, ``--runs`` times
on one seed: Ray's timing is not reproducible, so the same seed gives different runs. Prints
per run whether it solved (the confirmed evaluation), in how many env steps, the run's wall
time and the staleness of the applied gradients (the line a Ray run prints).

    scripts/loopback python benchmarks/ray_appo.py --seed 5 --runs 3
"""

from __future__ import annotations

import argparse
import os
import secrets
import shlex
import sys
import tempfile
import time

SETTINGS = {
    "defaults": {},  # APPO's: a call per minibatch, each answered before the next
    "a3c-batching": {"ray_batch": 8, "ray_pipeline": 1},  # A3C's defaults
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    args = p.parse_args()
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
    import ray
    from ray.cluster_utils import Cluster

    import asyncrl
    from asyncrl.backends.ray import staleness_line

    head = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False)
    try:
        with tempfile.TemporaryDirectory(prefix="asyncrl-bench-") as tmp:
            for run in range(args.runs):
                for name in args.settings:  # interleaved: drift in the machine hits both
                    t0 = time.perf_counter()
                    s = asyncrl.train(
                        backend="ray",
                        address=cluster.address,
                        workers=2,
                        seed=args.seed,
                        algo="appo",
                        vtrace=True,
                        steps=args.steps,
                        progress=False,
                        run_dir=f"{tmp}/{name}-{run}",
                        **SETTINGS[name],
                    )
                    print(
                        f"{name} run {run}: solved {s['solved']} at {s['solve_steps']} env "
                        f"steps; last 100 episodes {s['rolling_return']:.1f}; "
                        f"{time.perf_counter() - t0:.0f} s; "
                        f"{staleness_line(s['lags'], s['dropped'])}",
                        flush=True,
                    )
    finally:
        ray.shutdown()
        cluster.shutdown()
    print(f"reproduce: scripts/loopback python benchmarks/ray_appo.py {shlex.join(sys.argv[1:])}")


if __name__ == "__main__":
    main()
