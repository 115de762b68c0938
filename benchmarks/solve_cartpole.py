"""Time to solve CartPole-v1: `asyncrl train` run as a whole process on several seeds.

Prints the median whole-process wall time (interpreter start to exit, imports included) and
median env steps to reach the target, and the env steps per second, with the command that
reproduces the figure. Extra arguments go to `asyncrl train`.

    python benchmarks/solve_cartpole.py --seeds 5
    python benchmarks/solve_cartpole.py --seeds 5 -- --backend threads
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

from common import run_train


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (default: 5)")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument("extra", nargs="*", help="arguments for `asyncrl train` (after --)")
    args = p.parse_args()

    rows = []
    with tempfile.TemporaryDirectory(prefix="asyncrl-bench-") as tmp:
        for seed in range(args.seeds):
            s = run_train(seed, args.extra, Path(tmp))
            rows.append(s)
            print(
                f"seed {seed}: solved={s['solved']} process {s['process_seconds']:.2f} s, "
                f"solve {s['solve_steps'] or '-'} steps, {s['steps_per_second']:,.0f} steps/s",
                flush=True,
            )
    solved = [r for r in rows if r["solved"]]
    med = statistics.median
    result = {
        "command": "python benchmarks/solve_cartpole.py " + shlex.join(sys.argv[1:]),
        "seeds": args.seeds,
        "solved": len(solved),
        "median_process_seconds": med(r["process_seconds"] for r in rows),
        "median_solve_steps": med(r["solve_steps"] for r in solved) if solved else None,
        "median_steps_per_second": med(r["steps_per_second"] for r in rows),
        "backend": rows[0]["backend"],
        "workers": rows[0]["workers"],
        "algo": rows[0]["algo"],
    }
    print(
        f"\n{result['algo']} on CartPole-v1, {result['backend']} x{result['workers']}: "
        f"{result['solved']}/{args.seeds} seeds solved; median whole-process time "
        f"{result['median_process_seconds']:.2f} s; median steps to solve "
        f"{result['median_solve_steps']}; median {result['median_steps_per_second']:,.0f} "
        f"env steps/s\nreproduce: {result['command']}"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
