"""Atari and MinAtar figures: training throughput in emulator frames per second, and time to a
score.

    python benchmarks/atari.py throughput --seeds 3              # Pong, 1 and 2 workers, both nets
    scripts/loopback python benchmarks/atari.py throughput --workers 2 --nets a3c \
        --backends processes ray --steps 100000                  # Ray against processes
    python benchmarks/atari.py env --seeds 3                     # the emulators alone, one core
    python benchmarks/atari.py versus-sb3 --seeds 3              # beside SB3's A2C (rl-zoo's)
    python benchmarks/atari.py versus-sb3 --seeds 3 -- --algo appo   # the defaults beside it
    python benchmarks/atari.py ceiling --seeds 3                 # what 2 cores could do at most
    python benchmarks/atari.py solve --env PongNoFrameskip-v4 --target 18 --seeds 1
    python benchmarks/atari.py solve --env MinAtar/Breakout-v1 --target 3 --seeds 3

``throughput`` runs whole `asyncrl train --algo a3c` processes with a fixed budget and the stop
rule off and reports the median (over seeds) of the summary's ``frames_per_second`` (training
phase, 4 frames per agent step) per backend, worker count and network, and the steady-state rate
(from the first game that ends past 20% of the budget to the last: start-up left out).
``versus-sb3`` runs, alternately on each seed, the same budget of agent steps through
`asyncrl train --algo a3c` (the atari preset's A3C settings, 2 workers; ``-- --algo appo``:
the defaults) and through
Stable-Baselines3's A2C with rl-zoo's Atari settings (16 games in one process, t_max 5,
RMSprop as TF's, `make_atari_env`'s preprocessing: the same frame skip of 4 and 84x84 frames),
and reports each one's frames/s over its training phase (start-up and imports left out), in
steady state (past the first fifth of the budget: asyncrl's from its games, SB3's from a second
``learn()`` call that carries on the first) and over the whole process, and the ratios.
``ceiling`` times, on one core, the pieces of a worker's step at the preset's sizes (the env
alone, the act forward, the loss forward and backward), counts the network's floating-point work
per agent step, and gives the frames/s two cores would reach if they did nothing else: the
bound the throughput target has to fit under. ``solve`` runs the default settings to the target
(mean score of the last 100 games) and reports the median whole-process time and frames to get
there. Extra arguments after ``--`` go to `asyncrl train`.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from common import off_ray, run_train, solve, steady_rate

#: the learner the throughput, ceiling and SB3 figures are of: A3C with the atari preset's
#: A3C settings (the preset itself picks APPO since 2026-11-25); extra arguments after ``--``
#: come later and so win, ``-- --algo appo`` among them
A3C = ["--algo", "a3c"]


def throughput(args: argparse.Namespace) -> None:
    cells = [(b, w, net) for b in args.backends for net in args.nets for w in args.workers]
    fps: dict[tuple[str, int, str], list[float]] = {c: [] for c in cells}
    steady: dict[tuple[str, int, str], list[float]] = {c: [] for c in cells}
    per = 4.0  # emulator frames per agent step (1 on MinAtar), read from each run's summary
    with tempfile.TemporaryDirectory(prefix="asyncrl-bench-") as tmp:
        for seed in range(args.seeds):
            for cell in cells:  # interleaved: drift in the machine's speed hits all cells
                backend, w, net = cell
                extra = ["--env", args.env, *A3C, "--workers", str(w), "--net", net]
                extra += ["--backend", backend]
                more = args.extra if backend == "ray" else off_ray(args.extra)
                extra += ["--steps", str(args.steps), "--target-return", "1e9", *more]
                s = run_train(seed, extra, Path(tmp))
                fps[cell].append(s["frames_per_second"])
                episodes = Path(s["run_dir"]) / "episodes.csv"
                per = s["total_frames"] / max(s["total_steps"], 1)
                steady[cell].append(per * steady_rate(episodes, s["total_steps"]))
                server = f"; server {s['server']}" if "server" in s else ""
                print(
                    f"seed {seed} {backend} x{w} {net}: {fps[cell][-1]:,.0f} frames/s "
                    f"(whole training phase), {steady[cell][-1]:,.0f} in steady state{server}",
                    flush=True,
                )
    print(f"\n{args.env}: training frames/s, median of {args.seeds} seeds")
    print("| backend | network | workers | frames/s | steady-state frames/s | agent steps/s |")
    print("|---|---|---|---|---|---|")
    for cell in cells:
        m, ms = statistics.median(fps[cell]), statistics.median(steady[cell])
        print(f"| {cell[0]} | {cell[2]} | {cell[1]} | {m:,.0f} | {ms:,.0f} | {m / per:,.0f} |")


def env_only(args: argparse.Namespace) -> None:
    """The emulators alone: ale-py's vector env with the preprocessing, random actions, one
    core (the ceiling of a worker's frames/s)."""
    import gymnasium as gym
    import numpy as np

    from asyncrl.atari import make_atari_vec_env

    rates = []
    for seed in range(args.seeds):
        env = make_atari_vec_env(args.env, args.envs, seed)
        env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        space = env.single_action_space
        assert isinstance(space, gym.spaces.Discrete), space  # ALE games: discrete actions
        n = int(space.n)
        t0 = time.perf_counter()
        for _ in range(args.steps):
            env.step(rng.integers(n, size=args.envs))
        rates.append(args.steps * args.envs * 4 / (time.perf_counter() - t0))
        env.close()
        print(f"seed {seed}: {rates[-1]:,.0f} frames/s", flush=True)
    m = statistics.median(rates)
    print(
        f"\n{args.env}, {args.envs} envs, random actions, one core: {m:,.0f} frames/s "
        f"({m / 4:,.0f} agent steps/s)"
    )


def network_flops(encoder: torch.nn.Module, obs: torch.Tensor) -> tuple[float, float]:
    """FLOPs per sample of the encoder's forward pass and of its backward pass, as PyTorch's
    FlopCounterMode counts the convolutions and matrix products (the first conv is called
    functionally, past any module hook; the pixels take no gradient). The core and heads, a few
    thousand multiply-adds after the conv net, are left out."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as forward, torch.no_grad():
        encoder(obs[:1])
    with FlopCounterMode(display=False) as both:
        encoder(obs[:1]).sum().backward()
    encoder.zero_grad(set_to_none=True)
    fwd = float(forward.get_total_flops())
    return fwd, float(both.get_total_flops()) - fwd


def ceiling(args: argparse.Namespace) -> None:
    """Each piece of a worker's step alone on one core, at the preset's sizes; the bound on
    two cores' frames/s that follows."""
    from asyncrl.algos import make_algorithm
    from asyncrl.algos.base import model_spec_for
    from asyncrl.envs import probe_env
    from asyncrl.models import build_model
    from asyncrl.presets import preset

    torch.set_num_threads(1)
    cfg = preset(None, env=args.env, algo="a3c").validate()
    T, B = args.t_max or cfg.t_max, args.envs or cfg.envs_per_worker
    info = probe_env(cfg.env)
    algo = make_algorithm(cfg.algo, cfg, info)
    model = build_model(model_spec_for(cfg, algo.model_kind, info, cfg.reward_scale))
    rows: dict[str, list[float]] = {"env": [], "act": [], "learn": [], "peak": []}
    for seed in range(args.seeds):
        for k, v in time_pieces(args, algo, model, info, T, B, seed).items():
            rows[k].append(v)
    m = {k: statistics.median(v) for k, v in rows.items()}
    fwd, bwd = network_flops(model.encoder, torch.zeros((1, *info.obs_shape), dtype=torch.uint8))
    # per agent step: the act forward, then the loss forward and backward over its T rows,
    # and a forward of the bootstrap row (one per T steps)
    flops = fwd + fwd + bwd + fwd / T
    net = m["act"] + m["learn"]

    def fps(per_step: float) -> float:
        return args.cores * 4 / per_step

    print(f"\n{args.env}, {B} envs x t_max {T}, one core, median of {args.seeds}:")
    print("| piece | us per agent step |\n|---|---|")
    print(f"| env step ({B} games) | {m['env'] * 1e6:,.0f} |")
    print(f"| act: forward + sample (batch {B}) | {m['act'] * 1e6:,.0f} |")
    print(f"| learn: loss forward + backward (batch {T * B}) | {m['learn'] * 1e6:,.0f} |")
    print(
        f"network: {flops / 1e6:.1f} MFLOP per agent step, {flops / net / 1e9:.0f} GFLOP/s "
        f"achieved; a 1024x1024 matmul runs at {m['peak'] / 1e9:.0f} GFLOP/s on this core"
    )
    print(
        f"{args.cores} cores doing nothing else: {fps(m['env'] + net):,.0f} frames/s; with the "
        f"network at the matmul's rate: {fps(m['env'] + flops / m['peak']):,.0f}; the env "
        f"alone: {fps(m['env']):,.0f}"
    )


def time_pieces(
    args: argparse.Namespace,
    algo: Any,
    model: torch.nn.Module,
    info: Any,
    T: int,
    B: int,
    seed: int,
) -> dict[str, float]:
    """Seconds per agent step of the env, the act forward and the learning pass; the matmul's
    FLOP/s."""
    import numpy as np

    from asyncrl.atari import make_atari_vec_env
    from asyncrl.rollout import Rollout

    rng = np.random.default_rng(seed)
    env = make_atari_vec_env(args.env, B, seed)
    obs, _ = env.reset(seed=seed)
    n = int(env.single_action_space.n)  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    for _ in range(args.steps):
        obs, *_ = env.step(rng.integers(n, size=B))
    env_s = (time.perf_counter() - t0) / (args.steps * B)
    env.close()
    x = torch.from_numpy(obs)
    with torch.no_grad():
        first = np.zeros(B, bool)
        act_s = timeit(lambda: algo.act(model, x, 0, rng, first), args.steps) / B
    ro = Rollout.for_env(T, B, info)
    ro.obs[:] = rng.integers(0, 256, ro.obs.shape, dtype=np.uint8)
    ro.actions[:] = rng.integers(n, size=ro.actions.shape)
    ro.valid[:] = True

    def learn() -> None:
        model.zero_grad(set_to_none=True)
        algo.loss(model, ro)[0].backward()

    learn_s = timeit(learn, max(args.steps // T, 20)) / (T * B)
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    peak = 2 * 1024**3 / timeit(lambda: a @ b, 20)
    return {"env": env_s, "act": act_s, "learn": learn_s, "peak": peak}


def timeit(fn: Callable[[], object], n: int) -> float:
    for _ in range(3):
        fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


# SB3's A2C as rl-baselines3-zoo runs it on Atari (hyperparams/a2c.yml, "atari"), in a process
# of its own; the training phase is timed around learn(), as asyncrl's summary times its own
SB3_A2C_ATARI = r"""
import json, sys, time
import ale_py, gymnasium as gym
from stable_baselines3 import A2C
from stable_baselines3.common.env_util import make_atari_env
from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike
from stable_baselines3.common.vec_env import VecFrameStack
from tests.oracles import spec_of

gym.register_envs(ale_py)
env_id, seed, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
env = VecFrameStack(make_atari_env(env_id, n_envs=16, seed=seed), n_stack=4)
model = A2C(
    "CnnPolicy", env, ent_coef=0.01, vf_coef=0.25, seed=seed, device="cpu",
    policy_kwargs=dict(optimizer_class=RMSpropTFLike, optimizer_kwargs=dict(eps=1e-5)),
)
# the first fifth, then the rest timed alone (the envs and the model carry on): the steady
# rate, start-up left out, as asyncrl's is read from its games past a fifth of the budget
t0 = time.perf_counter()
model.learn(total_timesteps=steps // 5)
t1, warm = time.perf_counter(), model.num_timesteps
model.learn(total_timesteps=steps - warm, reset_num_timesteps=False)
t2 = time.perf_counter()
print(json.dumps({
    "steps": model.num_timesteps, "train_seconds": t2 - t0,
    "steady_steps": model.num_timesteps - warm, "steady_seconds": t2 - t1,
}))
"""


def versus_sb3(args: argparse.Namespace) -> None:
    """asyncrl's A3C (or what the arguments after ``--`` make it: ``--algo appo``, the
    defaults) and SB3's A2C (rl-zoo's Atari settings) side by side, alternately on each seed so
    that a slow minute of the machine falls on both."""
    import json
    import subprocess

    # (training-phase, steady-state, whole-process frames/s) of each run
    ours: list[tuple[float, float, float]] = []
    theirs: list[tuple[float, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="asyncrl-bench-") as tmp:
        for seed in range(args.seeds):
            extra = ["--env", args.env, *A3C, "--steps", str(args.steps), "--target-return", "1e9"]
            s = run_train(seed, [*extra, *args.extra], Path(tmp))
            steady = 4 * steady_rate(Path(s["run_dir"]) / "episodes.csv", s["total_steps"])
            whole = s["total_frames"] / s["process_seconds"]
            ours.append((s["frames_per_second"], steady, whole))
            cmd = [sys.executable, "-c", SB3_A2C_ATARI, args.env, str(seed), str(args.steps)]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                sys.exit(f"SB3 failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
            out = json.loads(proc.stdout.strip().splitlines()[-1])
            frames = 4 * out["steps"]  # make_atari_env's frame skip
            steady = 4 * out["steady_steps"] / out["steady_seconds"]
            theirs.append((frames / out["train_seconds"], steady, frames / wall))
            print(
                f"seed {seed}: asyncrl {_rates(ours[-1])}; SB3 A2C {_rates(theirs[-1])} "
                f"(training, steady state, whole process)",
                flush=True,
            )
    a = [statistics.median(x[i] for x in ours) for i in range(3)]
    b = [statistics.median(x[i] for x in theirs) for i in range(3)]
    print(f"\n{args.env}, {args.steps:,} agent steps each, median of {args.seeds} seeds:")
    print("| | training frames/s | steady-state frames/s | whole-process frames/s |")
    print("|---|---|---|---|")
    # the later --algo wins: name only the one that ran
    ours_cmd = shlex.join(args.extra if "--algo" in args.extra else [*A3C, *args.extra])
    print(f"| asyncrl `{ours_cmd}` (2 workers) | {' | '.join(f'{x:,.0f}' for x in a)} |")
    print(f"| SB3 A2C (rl-zoo's Atari settings) | {' | '.join(f'{x:,.0f}' for x in b)} |")
    print(f"| ratio | {' | '.join(f'{x / y:.2f}x' for x, y in zip(a, b, strict=True))} |")


def _rates(r: tuple[float, float, float]) -> str:
    return ", ".join(f"{x:,.0f}" for x in r) + " frames/s"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("--env", default="PongNoFrameskip-v4")
    t.add_argument("--seeds", type=int, default=3)
    t.add_argument("--steps", type=int, default=40_000, help="agent-step budget of each run")
    t.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    t.add_argument("--nets", nargs="+", default=["a3c", "nature"])
    t.add_argument("--backends", nargs="+", default=["processes"], help="e.g. processes ray")
    t.add_argument("extra", nargs="*")
    e = sub.add_parser("env")
    e.add_argument("--env", default="PongNoFrameskip-v4")
    e.add_argument("--envs", type=int, default=16)
    e.add_argument("--steps", type=int, default=1000)
    e.add_argument("--seeds", type=int, default=3)
    c = sub.add_parser("ceiling")
    c.add_argument("--env", default="PongNoFrameskip-v4")
    c.add_argument("--envs", type=int, default=None, help="games per worker (the preset's)")
    c.add_argument("--t-max", type=int, default=None, help="rollout length (the preset's)")
    c.add_argument("--steps", type=int, default=300, help="env steps and forward passes timed")
    c.add_argument("--seeds", type=int, default=3)
    c.add_argument("--cores", type=int, default=2)
    v = sub.add_parser("versus-sb3")
    v.add_argument("--env", default="PongNoFrameskip-v4")
    v.add_argument("--seeds", type=int, default=3)
    v.add_argument("--steps", type=int, default=100_000, help="agent steps of each run")
    v.add_argument("extra", nargs="*")
    s = sub.add_parser("solve")
    s.add_argument("--env", default="PongNoFrameskip-v4")
    s.add_argument("--target", type=float, default=18.0)
    s.add_argument("--seeds", type=int, default=1)
    s.add_argument("extra", nargs="*")
    args = p.parse_args()
    modes = {
        "throughput": throughput,
        "env": env_only,
        "ceiling": ceiling,
        "solve": solve,
        "versus-sb3": versus_sb3,
    }
    modes[args.mode](args)
    print(f"reproduce: python benchmarks/atari.py {shlex.join(sys.argv[1:])}")


if __name__ == "__main__":
    main()
