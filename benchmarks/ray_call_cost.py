"""What a call to the parameter server costs, the figure behind `--ray-batch`.

1. The server's own work per gradient (`ParameterServer.push_pull` called directly, no Ray):
   an optimizer step on the default A3C CartPole model, plus returning the parameters.
2. A Ray round trip from a worker actor to a server actor: a gradient-sized array in, a
   parameter-sized array out, one caller and then two callers at once.

Median over N repeats. Ray may only talk over loopback here:

    scripts/loopback python benchmarks/ray_call_cost.py --repeats 3
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
from asyncrl.backends.ray import ParameterServer
from asyncrl.backends.ray.cluster import start_ray
from asyncrl.envs import probe_env
from asyncrl.state import GlobalState


def server_us_per_gradient(cfg: asyncrl.Config, state: GlobalState, calls: int) -> float:
    server = ParameterServer(cfg, state.snapshot())
    params = state.params.numpy()
    grads = np.random.default_rng(0).standard_normal((1, params.size)).astype(np.float32)
    t0 = time.perf_counter()
    for _ in range(calls):
        server.push_pull(grads, [(True, server.version, 128)], [], 0, False)
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--calls", type=int, default=2000)
    args = p.parse_args()
    cfg = asyncrl.Config(backend="ray").validate()
    info = probe_env(cfg.env)
    state = GlobalState.create(cfg, make_algorithm(cfg, info).model_spec(), 1, False, False)
    params = state.params.numpy()
    local = [server_us_per_gradient(cfg, state, args.calls) for _ in range(args.repeats)]

    import ray

    start_ray(cfg)

    @ray.remote(num_cpus=0)
    class Echo:
        def __init__(self, n: int):
            self.params = np.zeros(n, np.float32)

        def push_pull(self, grad: np.ndarray) -> np.ndarray:
            return self.params

    @ray.remote(num_cpus=0)
    class Caller:
        def go(self, server, n: int, calls: int) -> float:
            grad = np.ones(n, np.float32)
            ray.get(server.push_pull.remote(grad))  # warm up
            t0 = time.perf_counter()
            for _ in range(calls):
                ray.get(server.push_pull.remote(grad))
            return (time.perf_counter() - t0) / calls * 1e6

    server = Echo.remote(params.size)
    callers = [Caller.remote(), Caller.remote()]
    one, two = [], []
    for _ in range(args.repeats):
        one.append(ray.get(callers[0].go.remote(server, params.size, args.calls)))
        two.extend(ray.get([c.go.remote(server, params.size, args.calls) for c in callers]))
    med = statistics.median
    print(f"model: {params.size:,} parameters ({params.nbytes / 1024:.0f} KiB)")
    print(f"server work per gradient (no Ray): {med(local):.0f} us")
    print(f"Ray round trip, one caller: {med(one) / 1000:.2f} ms")
    print(f"Ray round trip, two callers at once: {med(two) / 1000:.2f} ms")
    print(
        f"reproduce: scripts/loopback python benchmarks/ray_call_cost.py {shlex.join(sys.argv[1:])}"
    )


if __name__ == "__main__":
    main()
