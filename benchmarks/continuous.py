"""Continuous control (Gaussian A3C): time to a target, and the evaluation return after a budget.

    python benchmarks/continuous.py solve --env Pendulum-v1 --target -200 --seeds 5
    python benchmarks/continuous.py budget --env HalfCheetah-v5 --steps 1000000 --seeds 3

``solve`` runs the env's preset (``control`` for Box actions) to the target (rolling mean of
the last 100 episodes) and reports how many seeds got there and the median whole-process time
and env steps. ``budget`` trains for a fixed number of env steps with the stop rule off, then
evaluates the saved policy deterministically (the Gaussian's mean) over ``--episodes``
episodes, and reports the median (over seeds) of the evaluation mean and of the training
time. Extra arguments after ``--`` go to `asyncrl train` (e.g. ``-- --preset mujoco``).
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

from common import run_train, solve

import asyncrl


def budget(args: argparse.Namespace) -> None:
    evals, times = [], []
    with tempfile.TemporaryDirectory(prefix="asyncrl-bench-") as tmp:
        for seed in range(args.seeds):
            extra = ["--env", args.env, "--steps", str(args.steps), "--target-return", "1e9"]
            s = run_train(seed, [*extra, *args.extra], Path(tmp))
            returns = asyncrl.evaluate(s["run_dir"], episodes=args.episodes, seed=1000 + seed)
            evals.append(statistics.mean(returns))
            times.append(s["train_seconds"])
            print(
                f"seed {seed}: evaluation mean {evals[-1]:,.0f} over {args.episodes} episodes; "
                f"trained {s['total_steps']:,} steps in {s['train_seconds']:.0f} s "
                f"({s['steps_per_second']:,.0f} steps/s); last-100 training mean "
                f"{s['rolling_return']}",
                flush=True,
            )
    print(
        f"\n{args.env}, {args.steps:,} env steps: median evaluation return "
        f"{statistics.median(evals):,.0f} (seeds: {', '.join(f'{e:,.0f}' for e in evals)}); "
        f"median training time {statistics.median(times):.0f} s"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("solve")
    s.add_argument("--env", default="Pendulum-v1")
    s.add_argument("--target", type=float, default=-200.0)
    s.add_argument("--seeds", type=int, default=5)
    s.add_argument("extra", nargs="*")
    b = sub.add_parser("budget")
    b.add_argument("--env", default="HalfCheetah-v5")
    b.add_argument("--steps", type=int, default=1_000_000)
    b.add_argument("--episodes", type=int, default=10)
    b.add_argument("--seeds", type=int, default=3)
    b.add_argument("extra", nargs="*")
    args = p.parse_args()
    {"solve": solve, "budget": budget}[args.mode](args)
    print(f"reproduce: python benchmarks/continuous.py {shlex.join(sys.argv[1:])}")


if __name__ == "__main__":
    main()
