"""What checkpoints cost in training throughput.

Runs A3C on CartPole-v1 (processes backend, 2 workers) for a fixed step budget with checkpoints
off, every second (60x the default rate) and at the default interval (60 s), several seeds
each, and prints the median env steps per second of each and the overhead against "off".

    python benchmarks/checkpoint_overhead.py --seeds 3
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

from common import run_train


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=600_000)
    args = p.parse_args()
    settings = {"off": "0", "every 1 s": "1s", "default (60 s)": "60s"}
    sps: dict[str, list[float]] = {name: [] for name in settings}
    with tempfile.TemporaryDirectory(prefix="asyncrl-bench-") as tmp:
        for seed in range(args.seeds):
            for name, every in settings.items():  # interleaved: drift hits all settings alike
                s = run_train(
                    seed,
                    [
                        "--steps",
                        str(args.steps),
                        "--target-return",
                        "1e9",
                        "--checkpoint-every",
                        every,
                    ],
                    Path(tmp),
                )
                sps[name].append(s["steps_per_second"])
                print(f"seed {seed} {name}: {s['steps_per_second']:,.0f} steps/s", flush=True)
    base = statistics.median(sps["off"])
    print()
    for name, values in sps.items():
        med = statistics.median(values)
        print(f"{name:>16}: median {med:,.0f} env steps/s ({100 * (1 - med / base):+.1f}% cost)")
    print(f"reproduce: python benchmarks/checkpoint_overhead.py {shlex.join(sys.argv[1:])}")


if __name__ == "__main__":
    main()
