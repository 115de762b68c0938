"""asyncrl against Stable-Baselines3 PPO, side by side: whole processes run alternately (asyncrl,
SB3, asyncrl, SB3, ...) on the same seeds, each to the same target, so a slow minute of the
machine falls on both. Prints per seed the whole-process time and env steps of each, the
seeds that reached the target, the medians and the ratio asyncrl / SB3.

    pip install -c constraints.txt "stable-baselines3>=2.3"
    python benchmarks/versus_sb3.py --env Pendulum-v1 --target -200 --seeds 5
    python benchmarks/versus_sb3.py --env LunarLander-v3 --target 200 --sb3 ppo-defaults --seeds 3

SB3 runs rl-baselines3-zoo's tuned PPO hyperparameters for the env (``--sb3 ppo-zoo``, the
default: hyperparams/ppo.yml; only Pendulum-v1's are here), or what a user who names nothing
gets (``--sb3 ppo-defaults`` or ``a2c-defaults``: ``PPO("MlpPolicy", env)`` on one env, any env
id), and stops when the mean of its last 100 training episodes reaches the
target (SB3's ``Monitor`` episodes; rl-zoo's ``StopTrainingOnRewardThreshold`` reads an
evaluation instead: the training mean is the lighter rule of the two). asyncrl runs the env's
preset with its default stop rule, an evaluation of the greedy policy confirmed on 100 episodes
(the stricter rule); arguments after ``--`` go to `asyncrl train`.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import run_train

#: rl-baselines3-zoo's hyperparams/ppo.yml ("Tuned")
ZOO_PPO: dict[str, dict] = {
    "Pendulum-v1": dict(
        n_envs=4,
        n_timesteps=100_000,
        n_steps=1024,
        gae_lambda=0.95,
        gamma=0.9,
        n_epochs=10,
        ent_coef=0.0,
        learning_rate=1e-3,
        clip_range=0.2,
        use_sde=True,
        sde_sample_freq=4,
    ),
}

# Runs in a process of its own: imports count in its time, as asyncrl's do.
SB3_SCRIPT = r"""
import json, sys, collections
from stable_baselines3 import A2C, PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env

env_id, seed, target, budget = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
hp = json.loads(sys.argv[5])
algo = {"ppo": PPO, "a2c": A2C}[hp.pop("algo", "ppo")]
n_envs = hp.pop("n_envs", 1); hp.pop("n_timesteps", None)

class Stop(BaseCallback):
    def __init__(self):
        super().__init__()
        self.last = collections.deque(maxlen=100)
        self.solved_at = None
    def _on_step(self):
        for info in self.locals["infos"]:
            if "episode" in info:
                self.last.append(info["episode"]["r"])
        if len(self.last) == 100 and sum(self.last) / 100 >= target:
            self.solved_at = self.num_timesteps
            return False
        return True

stop = Stop()
envs = make_vec_env(env_id, n_envs=n_envs, seed=seed)
model = algo("MlpPolicy", envs, seed=seed, device="cpu", **hp)
model.learn(total_timesteps=budget, callback=stop)
steps = stop.solved_at or model.num_timesteps
print(json.dumps({"solved": stop.solved_at is not None, "steps": steps}))
"""


#: what SB3 gives a user who names no hyperparameters (one env)
SB3_DEFAULTS: dict[str, dict] = {"ppo-defaults": {"algo": "ppo"}, "a2c-defaults": {"algo": "a2c"}}


def run_sb3(env: str, seed: int, target: float, budget: int, which: str = "ppo-zoo") -> dict:
    hp = dict(ZOO_PPO[env]) if which == "ppo-zoo" else dict(SB3_DEFAULTS[which])
    cmd = [sys.executable, "-c", SB3_SCRIPT, env, str(seed), str(target), str(budget)]
    t0 = time.perf_counter()
    proc = subprocess.run([*cmd, json.dumps(hp)], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"SB3 failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"solved": out["solved"], "steps": out["steps"], "seconds": wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--env", default="Pendulum-v1")
    p.add_argument("--sb3", choices=["ppo-zoo", *SB3_DEFAULTS], default="ppo-zoo")
    p.add_argument("--target", type=float, default=-200.0)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--sb3-steps", type=int, default=1_000_000, help="SB3's budget")
    p.add_argument(
        "--sb3-only",
        action="store_true",
        help="run SB3 alone (asyncrl's side measured elsewhere, e.g. by benchmarks/suite.py)",
    )
    p.add_argument("extra", nargs="*", help="arguments for asyncrl train (after --)")
    args = p.parse_args()
    if args.sb3 == "ppo-zoo" and args.env not in ZOO_PPO:
        p.error(f"rl-zoo's PPO settings are here for {sorted(ZOO_PPO)}; try --sb3 ppo-defaults")
    ours, theirs = [], []
    with tempfile.TemporaryDirectory(prefix="asyncrl-bench-") as tmp:
        for seed in range(args.seeds):
            if not args.sb3_only:
                extra = ["--env", args.env, "--target-return", str(args.target), *args.extra]
                s = run_train(seed, extra, Path(tmp))
                ours.append({"solved": s["solved"], "steps": s["solve_steps"] or s["total_steps"],
                             "seconds": s["process_seconds"]})  # fmt: skip
            theirs.append(run_sb3(args.env, seed, args.target, args.sb3_steps, args.sb3))
            for name, r in (("asyncrl", ours[-1] if ours else None), ("SB3", theirs[-1])):
                if r is None:
                    continue
                print(
                    f"seed {seed} {name:8s} {'solved' if r['solved'] else 'NOT solved'} "
                    f"in {r['seconds']:6.1f} s, {r['steps']:>9,} steps",
                    flush=True,
                )
    sb3 = (
        f"SB3 ({args.sb3}) solved {sum(r['solved'] for r in theirs)}/{args.seeds} in "
        f"{args.sb3_steps:,} steps, median {statistics.median(r['seconds'] for r in theirs):.1f} s"
        f" and {statistics.median(r['steps'] for r in theirs):,.0f} steps"
    )
    if ours:
        med = statistics.median(r["seconds"] for r in ours)
        ratio = med / statistics.median(r["seconds"] for r in theirs)
        solved = sum(r["solved"] for r in ours)
        print(
            f"\n{args.env} to {args.target:g}: asyncrl solved {solved}/{args.seeds}, median "
            f"{med:.1f} s; {sb3}; ratio asyncrl / SB3 = {ratio:.2f}"
        )
    else:
        print(f"\n{args.env} to {args.target:g}: {sb3}")
    print(
        "command: python benchmarks/versus_sb3.py "
        + shlex.join(
            [
                *(f"--env={args.env}", f"--target={args.target:g}", f"--seeds={args.seeds}"),
                *(f"--sb3={args.sb3}", f"--sb3-steps={args.sb3_steps}"),
                *(["--sb3-only"] if args.sb3_only else []),
            ]
        )
        + (" -- " + shlex.join(args.extra) if args.extra else "")
    )


if __name__ == "__main__":
    main()
