"""What one evaluation during training costs: a run's saved model plays the games of one of
its evaluations (the same starts: the run's seed and the evaluation's index) as the evaluator
plays them, on one thread, alone on the machine. Prints the seconds, the returns, the env steps
played, and the steps a wave that stepped every game until its longest ended would have played.

    python benchmarks/eval_speed.py RUN_DIR --index 1
    PYTHONPATH=OTHER/src python benchmarks/eval_speed.py RUN_DIR --index 1   # another version

``--which best`` (the default where the run has one) holds the parameters of the evaluation
that made it the best: give that evaluation's index (its row in evaluations.csv) to replay it.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import gymnasium as gym
import torch

import asyncrl.policy
from asyncrl.envs import make_eval_vec_env
from asyncrl.evaluation import eval_seeds
from asyncrl.rundir import RunDir


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("run_dir")
    p.add_argument("--index", type=int, default=0, help="the evaluation's row in evaluations.csv")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--which", choices=["best", "last"], default=None)
    args = p.parse_args()
    torch.set_num_threads(1)  # as the evaluator's thread
    policy = asyncrl.policy.load(args.run_dir, args.which)
    cfg = RunDir.existing(args.run_dir, "model").read_config()
    envs = make_eval_vec_env(policy.env_id, args.episodes, cfg["seed"], policy.env_kwargs)
    if not isinstance(envs, gym.vector.SyncVectorEnv):
        raise SystemExit(
            f"{policy.env_id}: its evaluation envs are natively vectorized; this "
            "script counts the steps of separate envs (Atari's)"
        )
    lengths = [0] * args.episodes  # env steps each game's env took

    def counted(i: int, step: Any) -> Any:
        def wrapper(action: Any) -> Any:
            lengths[i] += 1
            return step(action)

        return wrapper

    for i, env in enumerate(envs.envs):
        env.step = counted(i, env.step)  # type: ignore[method-assign]
    seeds = eval_seeds(cfg["seed"], args.index, args.episodes)
    t0 = time.perf_counter()
    returns = asyncrl.policy.play_episodes(policy, envs, seeds)
    seconds = time.perf_counter() - t0
    envs.close()
    out = {
        "model": asyncrl.policy.describe(policy),
        "seconds": round(seconds, 1),
        "returns": returns,
        "env_steps": sum(lengths),
        "env_steps_if_every_game_stepped": args.episodes * max(lengths),
        "asyncrl": asyncrl.policy.__file__,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
