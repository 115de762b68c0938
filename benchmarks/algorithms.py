"""The paper's four methods on CartPole-v1, and its Table 2 measured here.

For each algorithm: median env steps and whole-process wall time to reach a mean return of 475
(100 episodes) over N seeds, within a step budget; then the speed-up of 2 workers over 1 worker
in wall time to the threshold (the paper's Table 2, on this machine's 2 cores).

    python benchmarks/algorithms.py --seeds 5
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path

from common import median_or_none, run_train

ALGOS = ("a3c", "nstep-q", "onestep-q", "onestep-sarsa")


def measure(algo: str, workers: int, seeds: int, budget: int, tmp: Path) -> dict:
    rows = [
        run_train(seed, ["--algo", algo, "--workers", str(workers), "--steps", str(budget)], tmp)
        for seed in range(seeds)
    ]
    solved = [r for r in rows if r["solved"]]
    return {
        "algo": algo,
        "workers": workers,
        "solved": len(solved),
        "seeds": seeds,
        # unsolved seeds count with the whole budget's time, so the median is honest
        "median_process_seconds": median_or_none([r["process_seconds"] for r in rows]),
        "median_solve_steps": median_or_none([r["solve_steps"] for r in solved]),
        "reached_195": sum(r["steps_to_195"] is not None for r in rows),
        "median_steps_to_195": median_or_none(
            [r["steps_to_195"] for r in rows if r["steps_to_195"] is not None]
        ),
        "median_steps_per_second": median_or_none([r["steps_per_second"] for r in rows]),
        "final_rolling_return": [round(r["rolling_return"] or 0) for r in rows],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--budget", type=int, default=1_000_000, help="env steps per run")
    p.add_argument("--algos", nargs="+", default=list(ALGOS), choices=ALGOS)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()

    results = []
    with tempfile.TemporaryDirectory(prefix="asyncrl-bench-") as tmp:
        for algo in args.algos:
            for workers in (2, 1):
                r = measure(algo, workers, args.seeds, args.budget, Path(tmp))
                results.append(r)
                print(json.dumps(r), flush=True)

    print(
        "\n| algorithm | workers | reached 475 | median steps to 475 | median process s | "
        "reached 195 | median steps to 195 | env steps/s | speed-up 2 vs 1 |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    by = {(r["algo"], r["workers"]): r for r in results}
    for algo in args.algos:
        two, one = by[(algo, 2)], by[(algo, 1)]
        speedup = one["median_process_seconds"] / two["median_process_seconds"]
        for r in (two, one):
            steps, steps195 = r["median_solve_steps"], r["median_steps_to_195"]
            print(
                f"| {algo} | {r['workers']} | {r['solved']}/{r['seeds']} | "
                f"{'-' if steps is None else f'{steps:,.0f}'} | "
                f"{r['median_process_seconds']:.1f} | {r['reached_195']}/{r['seeds']} | "
                f"{'-' if steps195 is None else f'{steps195:,.0f}'} | "
                f"{r['median_steps_per_second']:,.0f} | "
                f"{f'{speedup:.2f}x' if r is two else ''} |"
            )
    print(f"\nreproduce: python benchmarks/algorithms.py {shlex.join(sys.argv[1:])}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
