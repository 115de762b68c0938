"""Ray's fixed cost on one machine, timed piece by piece: importing Ray, ``ray.init`` as
``asyncrl train --backend ray`` starts it, two worker actors coming up with PyTorch and
asyncrl's worker imported (what each worker actor pays before its first step), and
``ray.shutdown``; and the CPU time Ray's own processes (GCS, raylet, dashboard, autoscaler
monitor, log monitor, agents, pre-started idle workers) and the two actors had used by the time
the actors answered: on a 2-core machine that CPU is taken from the run's start.
Run it as the Ray benchmarks run, in the loopback-only namespace:

    scripts/loopback python benchmarks/ray_startup.py --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

ONE_RUN = """
import time
t0 = time.perf_counter()
import ray
t1 = time.perf_counter()
import asyncrl
from asyncrl.backends.ray.cluster import start_ray
start = time.perf_counter()
start_ray(asyncrl.Config(backend="ray"))
t2 = time.perf_counter()

@ray.remote(num_cpus=1)
class Actor:
    def __init__(self):
        import asyncrl.worker  # noqa: F401  (torch with it)

    def ping(self):
        import os

        return os.getpid()

actors = [Actor.remote() for _ in range(2)]
actor_pids = set(ray.get([a.ping.remote() for a in actors]))
t3 = time.perf_counter()
import psutil
me = psutil.Process()
ray_cpu = actors_cpu = 0.0
for p in me.children(recursive=True):
    try:
        c = p.cpu_times()
    except psutil.Error:
        continue
    if p.pid in actor_pids:
        actors_cpu += c.user + c.system
    else:
        ray_cpu += c.user + c.system
ray.shutdown()
t4 = time.perf_counter()
print(t1 - t0, t2 - start, t3 - t2, t4 - t3, ray_cpu, actors_cpu)
"""

PARTS = [
    "import ray",
    "ray.init",
    "2 actors with torch",
    "ray.shutdown",
    "CPU of Ray's processes",
    "CPU of the 2 actors",
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--repeats", type=int, default=3, help="fresh processes, one after another")
    args = p.parse_args()
    runs = []
    for k in range(args.repeats):
        out = subprocess.run([sys.executable, "-c", ONE_RUN], capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(out.stderr)
        runs.append([float(x) for x in out.stdout.split()[-len(PARTS) :]])
        print(
            f"run {k}: " + ", ".join(f"{n} {t:.2f} s" for n, t in zip(PARTS, runs[-1], strict=True))
        )
    medians = [statistics.median(r[i] for r in runs) for i in range(len(PARTS))]
    print("median: " + ", ".join(f"{n} {t:.2f} s" for n, t in zip(PARTS, medians, strict=True)))
    print(f"reproduce: scripts/loopback python benchmarks/ray_startup.py --repeats {args.repeats}")


if __name__ == "__main__":
    main()
