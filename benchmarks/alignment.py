"""A Pong (or any Atari) run's last model, greedy and sampled, by the alignment of its games:
the number of no-op frames of each evaluation start modulo 4, which decides how the agent's
4-frame steps fall on the game's own frames (docs/benchmarks.md#what-the-last-points-are).

    python benchmarks/alignment.py RUN_DIR --greedy 10 --sampled 40 --out alignment.json

Starts are the suite's (seeds 1,000,000 + i); each start's no-op count is the one Gymnasium's
``AtariPreprocessing`` draws after ``reset(seed)``: ``np_random.integers(1, noop_max + 1)``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import gymnasium as gym

import asyncrl
from asyncrl.atari import NOOP_MAX

EVAL_SEED = 1_000_000  # the suite's (benchmarks/suite.py)


def noop_counts(env_id: str, seeds: range) -> list[int]:
    """The no-op frames each seeded evaluation start plays, as Gymnasium's wrapper draws them."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make(env_id)
    counts = []
    for s in seeds:
        env.reset(seed=s)
        counts.append(int(env.unwrapped.np_random.integers(1, NOOP_MAX + 1)))
    env.close()
    return counts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir")
    p.add_argument("--greedy", type=int, default=10, help="greedy games (default: 10)")
    p.add_argument("--sampled", type=int, default=40, help="sampled games (default: 40)")
    p.add_argument("--out", default=None, help="write the games by alignment to this JSON")
    args = p.parse_args()
    env_id = json.loads(Path(args.run_dir, "config.json").read_text())["env"]
    out: dict[str, dict[int, list[float]]] = {}
    for label, n, greedy in (("greedy", args.greedy, True), ("sampled", args.sampled, False)):
        returns = asyncrl.evaluate(
            args.run_dir, episodes=n, seed=EVAL_SEED, deterministic=greedy, which="last"
        )
        counts = noop_counts(env_id, range(EVAL_SEED, EVAL_SEED + n))
        by: dict[int, list[float]] = {k: [] for k in range(4)}
        for r, c in zip(returns, counts, strict=True):
            by[c % 4].append(r)
        out[label] = by
        print(f"{label}: mean {statistics.mean(returns):.1f} over {n} games")
        for k, v in by.items():
            mean = f"{statistics.mean(v):.1f}" if v else "-"
            print(f"  no-ops {k} mod 4: {len(v)} games, mean {mean}: {v}")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
