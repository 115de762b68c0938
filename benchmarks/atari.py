"""Atari and MinAtar figures: training throughput in emulator frames per second, and time to a
score.

    python benchmarks/atari.py throughput --seeds 3              # Pong, 1 and 2 workers, both nets
    scripts/loopback python benchmarks/atari.py throughput --workers 2 --nets a3c \
        --backends processes ray --steps 100000                  # Ray against processes
    python benchmarks/atari.py env --seeds 3                     # the emulators alone, one core
    python benchmarks/atari.py solve --env PongNoFrameskip-v4 --target 18 --seeds 1
    python benchmarks/atari.py solve --env MinAtar/Breakout-v1 --target 3 --seeds 3

``throughput`` runs whole `asyncrl train` processes with a fixed budget and the stop rule off
and reports the median (over seeds) of the summary's ``frames_per_second`` (training phase,
4 frames per agent step) per backend, worker count and network, and the steady-state rate
(from the first game that ends past 20% of the budget to the last: start-up left out).
``solve`` runs the default settings to the target (mean score of the last 100 games) and
reports the median whole-process time and frames to get there. Extra arguments after ``--``
go to `asyncrl train`.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

from common import run_train, solve, steady_rate


def throughput(args: argparse.Namespace) -> None:
    cells = [(b, w, net) for b in args.backends for net in args.nets for w in args.workers]
    fps: dict[tuple[str, int, str], list[float]] = {c: [] for c in cells}
    steady: dict[tuple[str, int, str], list[float]] = {c: [] for c in cells}
    per = 4.0  # emulator frames per agent step (1 on MinAtar), read from each run's summary
    with tempfile.TemporaryDirectory(prefix="asyncrl-bench-") as tmp:
        for seed in range(args.seeds):
            for cell in cells:  # interleaved: drift in the machine's speed hits all cells
                backend, w, net = cell
                extra = ["--env", args.env, "--workers", str(w), "--net", net]
                extra += ["--backend", backend]
                extra += ["--steps", str(args.steps), "--target-return", "1e9", *args.extra]
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
    import time

    import numpy as np

    from asyncrl.atari import make_atari_vec_env

    rates = []
    for seed in range(args.seeds):
        env = make_atari_vec_env(args.env, args.envs, seed)
        env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        n = env.single_action_space.n
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
    s = sub.add_parser("solve")
    s.add_argument("--env", default="PongNoFrameskip-v4")
    s.add_argument("--target", type=float, default=18.0)
    s.add_argument("--seeds", type=int, default=1)
    s.add_argument("extra", nargs="*")
    args = p.parse_args()
    {"throughput": throughput, "env": env_only, "solve": solve}[args.mode](args)
    print(f"reproduce: python benchmarks/atari.py {shlex.join(sys.argv[1:])}")


if __name__ == "__main__":
    main()
