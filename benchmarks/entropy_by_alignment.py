"""A Pong (or any Atari) model's sampled play, step by step, by the alignment of its games: the
policy's entropy and the probability of its likeliest move at each step, and each game's score,
grouped by the game's no-op count modulo 4 (docs/benchmarks.md#what-the-last-points-are).

    python benchmarks/entropy_by_alignment.py RUN_DIR --games 40

Starts are the suite's (seeds 1,000,000 + i, as ``benchmarks/alignment.py``); the model is the
run's last (model.pt). A "move" merges the actions that move the paddle alike: in Pong's six,
FIRE is NOOP, RIGHTFIRE is RIGHT and LEFTFIRE is LEFT, so a policy indifferent between the two
of a pair loses nothing by it; elsewhere each action is its own move.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
import torch
from alignment import EVAL_SEED, noop_counts

import asyncrl
from asyncrl.envs import make_eval_env

#: Pong's minimal action set: NOOP, FIRE, RIGHT, LEFT, RIGHTFIRE, LEFTFIRE
PONG_MOVES = [[0, 1], [2, 4], [3, 5]]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir")
    p.add_argument("--games", type=int, default=40, help="sampled games (default: 40)")
    p.add_argument("--seed", type=int, default=0, help="the sampling's seed")
    p.add_argument("--out", default=None, help="write each game's figures to this JSON")
    args = p.parse_args()
    torch.set_num_threads(1)
    env_id = json.loads(Path(args.run_dir, "config.json").read_text())["env"]
    policy = asyncrl.load(args.run_dir, "last")
    model, n_actions = policy.model, policy.spec.action.n
    pong = "Pong" in env_id and n_actions == 6  # PongNoFrameskip-v4, ALE/Pong-v5
    moves = PONG_MOVES if pong else [[a] for a in range(n_actions)]
    counts = noop_counts(env_id, range(EVAL_SEED, EVAL_SEED + args.games))
    rng = np.random.default_rng(args.seed)
    games = []
    for i, noops in enumerate(counts):
        env = make_eval_env(env_id, EVAL_SEED + i, kwargs=policy.env_kwargs)
        obs, _ = env.reset(seed=EVAL_SEED + i)
        state, first = model.initial_state(1), torch.ones(1, dtype=torch.bool)
        entropy, best, score, done = [], [], 0.0, False
        while not done:
            with torch.no_grad():
                params, state = model.act(torch.as_tensor(np.asarray(obs))[None], state, first)
            first = torch.zeros(1, dtype=torch.bool)
            prob = torch.softmax(params[0].float(), -1).numpy().astype(np.float64)
            prob /= prob.sum()
            entropy.append(float(-(prob * np.log(prob + 1e-12)).sum()))
            best.append(max(float(prob[m].sum()) for m in moves))
            obs, reward, terminated, truncated, _ = env.step(int(rng.choice(n_actions, p=prob)))
            score += float(reward)
            done = terminated or truncated
        env.close()
        games.append(dict(noops=noops, score=score, entropy=statistics.fmean(entropy),
                          best_move=statistics.fmean(best), steps=len(entropy)))  # fmt: skip
        g = games[-1]
        print(f"game {i}: {noops} no-ops ({noops % 4} mod 4), score {score:+.0f}, entropy "
              f"{g['entropy']:.3f} nats, likeliest move {g['best_move']:.3f}")  # fmt: skip
    print("| no-op count mod 4 | games | score | entropy (nats a step) | likeliest move |")
    print("|---|---|---|---|---|")
    for k in range(4):
        g = [x for x in games if x["noops"] % 4 == k]
        if g:
            print(f"| {k} | {len(g)} | {statistics.fmean(x['score'] for x in g):+.1f} | "
                  f"{statistics.fmean(x['entropy'] for x in g):.3f} | "
                  f"{statistics.fmean(x['best_move'] for x in g):.3f} |")  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(games, indent=1))


if __name__ == "__main__":
    main()
