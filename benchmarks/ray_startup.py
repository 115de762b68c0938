"""Ray's fixed cost on one machine, timed piece by piece: importing Ray, ``ray.init`` as
``asyncrl train --backend ray`` starts it, two worker actors coming up with PyTorch and
asyncrl's worker imported (what each worker actor pays before its first step), and
``ray.shutdown``. Run it as the Ray benchmarks run, in the loopback-only namespace:

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
from asyncrl.backends.ray import start_ray
start = time.perf_counter()
start_ray(asyncrl.Config(backend="ray"))
t2 = time.perf_counter()

@ray.remote(num_cpus=1)
class Actor:
    def __init__(self):
        import asyncrl.worker  # noqa: F401  (torch with it)

    def ping(self):
        return 1

actors = [Actor.remote() for _ in range(2)]
ray.get([a.ping.remote() for a in actors])
t3 = time.perf_counter()
ray.shutdown()
t4 = time.perf_counter()
print(t1 - t0, t2 - start, t3 - t2, t4 - t3)
"""

PARTS = ["import ray", "ray.init", "2 actors with torch", "ray.shutdown"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--repeats", type=int, default=3, help="fresh processes, one after another")
    args = p.parse_args()
    runs = []
    for k in range(args.repeats):
        out = subprocess.run([sys.executable, "-c", ONE_RUN], capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(out.stderr)
        runs.append([float(x) for x in out.stdout.split()[-4:]])
        print(
            f"run {k}: " + ", ".join(f"{n} {t:.2f} s" for n, t in zip(PARTS, runs[-1], strict=True))
        )
    medians = [statistics.median(r[i] for r in runs) for i in range(len(PARTS))]
    print("median: " + ", ".join(f"{n} {t:.2f} s" for n, t in zip(PARTS, medians, strict=True)))
    print(f"reproduce: scripts/loopback python benchmarks/ray_startup.py --repeats {args.repeats}")


if __name__ == "__main__":
    main()
