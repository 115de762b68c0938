"""How near a run comes to a fixed action early: the policy's entropy after a short budget.

Trains `asyncrl train --steps N` (a whole process per seed), loads its final model and prints
the mean and least entropy (nats) of its action distribution over 2,000 states of random play
(CartPole-v1 by default; ln 2 = 0.69 is a uniform policy over two actions). A mean near 0 this
early is a policy that decided before it learnt: on Ray with RMSProp started at 0 it sometimes
froze on one action for good (docs/ray.md#rmsprop-from-1-on-ray). Extra arguments go to
`asyncrl train`.

    scripts/loopback python benchmarks/early_entropy.py --seeds 11 -- --backend ray --rms-init 0
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from common import run_train

import asyncrl


def random_play_states(env_id: str, n: int, seed: int = 0) -> torch.Tensor:
    env = gym.make(env_id)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    states = []
    while len(states) < n:
        states.append(obs)
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset(seed=int(rng.integers(2**31)))
    return torch.from_numpy(np.asarray(states, np.float32))


def entropy(run_dir: Path, states: torch.Tensor) -> torch.Tensor:
    model = asyncrl.load(run_dir, "last").model
    with torch.no_grad():
        first = torch.zeros(len(states), dtype=torch.bool)
        params, _ = model.act(states, model.initial_state(len(states)), first)
        return model.distribution(params).entropy()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (default: 5)")
    p.add_argument("--steps", type=int, default=30_000, help="env steps (default: 30000)")
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("extra", nargs="*", help="arguments for `asyncrl train` (after --)")
    args = p.parse_args()

    states = random_play_states(args.env, 2000)
    means = []
    train_args = ["--env", args.env, "--steps", str(args.steps), "--eval-every", "0", *args.extra]
    with tempfile.TemporaryDirectory(prefix="asyncrl-bench-") as tmp:
        for seed in range(args.seeds):
            s = run_train(seed, train_args, Path(tmp))
            h = entropy(Path(s["run_dir"]), states)
            means.append(float(h.mean()))
            print(f"seed {seed}: entropy mean {h.mean():.3f}, least {h.min():.4f}", flush=True)
    print(
        f"\n{args.env} after {args.steps:,} env steps, {args.seeds} seeds: mean entropy "
        f"{min(means):.2f}-{max(means):.2f} (median {statistics.median(means):.2f}) nats"
    )
    print("reproduce: python benchmarks/early_entropy.py " + shlex.join(sys.argv[1:]))


if __name__ == "__main__":
    main()
