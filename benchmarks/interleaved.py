"""A/B of two source trees on the same machine: whole `asyncrl train` processes run alternately
(A, B, A, B, ...) on the same seeds, so a slow minute of the machine falls on both. For a
refactor that must keep behaviour and speed ("within 5% of the code before the change").

Each tree is a directory holding the `asyncrl` package (e.g. a git worktree's `src`); it is put
first on PYTHONPATH of its runs. Prints the median whole-process time of each, the ratio B / A,
the runs that reached the target, and the command.

    git worktree add /tmp/before HEAD~3
    python benchmarks/interleaved.py /tmp/before/src src --seeds 10
    python benchmarks/interleaved.py /tmp/before/src src --seeds 3 -- \
        --env PongNoFrameskip-v4 --algo a3c --steps 20000 --target-return 1e9

The same tree with other arguments on one side (B gets --b-args as well), e.g. the cost of
evaluation during training against none:

    python benchmarks/interleaved.py src src --seeds 10 \
        --a-args="--eval-every 0 --stop-on train" -- --target-return 1e9 --steps 300000

Does a change alter what is learnt, or only how fast? Each seed also prints the largest
difference between A's and B's final parameters (model.pt). One worker of the processes
backend learns deterministically, so 0 there means B learns exactly what A learns, and a
difference names a change in the learning path (run it on the commits between two trees to
find the one). Evaluations are turned off where the code has them (B here; A predates them):
on a 3,000-step budget the default interval would evaluate whole games every 150 steps.

    git worktree add /tmp/old 48bfb07
    python benchmarks/interleaved.py /tmp/old/src src --seeds 1 \
        --b-args="--eval-every 0 --stop-on train" -- --workers 1 --backend processes \
        --env PongNoFrameskip-v4 --algo a3c --steps 3000 --target-return 1e9
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch


def run(src: Path, seed: int, extra: list[str], run_dir: Path) -> dict:
    cmd = [sys.executable, "-m", "asyncrl.cli", "train", "--seed", str(seed)]
    cmd += ["--run-dir", str(run_dir), "--no-progress", *extra]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src.resolve())])}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{src}: {' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
    summary = json.loads((run_dir / "summary.json").read_text())
    return {**summary, "process_seconds": wall}


def parameter_gap(a: Path, b: Path) -> float:
    """The largest absolute difference between two runs' final parameters (inf where the
    networks differ in shape or names)."""
    sa, sb = (torch.load(d / "model.pt", weights_only=False)["state_dict"] for d in (a, b))
    if sa.keys() != sb.keys() or any(sa[k].shape != sb[k].shape for k in sa):
        return float("inf")
    return max((float((sa[k].double() - sb[k].double()).abs().max()) for k in sa), default=0.0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("a", type=Path, help="source tree A (the code before)")
    p.add_argument("b", type=Path, help="source tree B (the code after)")
    p.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 (default: 10)")
    p.add_argument("--a-args", default="", help="more `asyncrl train` arguments for A alone")
    p.add_argument("--b-args", default="", help="more `asyncrl train` arguments for B alone")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:cut])
    args.extra = argv[cut + 1 :]  # arguments for `asyncrl train` (after --)
    results: dict[str, list[dict]] = {"A": [], "B": []}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            order = ("A", "B") if seed % 2 == 0 else ("B", "A")  # neither always goes first
            for name in order:
                src = args.a if name == "A" else args.b
                own = shlex.split(args.a_args if name == "A" else args.b_args)
                s = run(src, seed, [*args.extra, *own], Path(tmp) / f"{name}-{seed}")
                results[name].append(s)
                print(
                    f"seed {seed} {name}: {s['process_seconds']:.1f} s, "
                    f"{s['total_steps']:,} steps, {s['frames_per_second']:,.0f} frames/s, "
                    f"solved={s['solved']}",
                    flush=True,
                )
            gap = parameter_gap(Path(tmp) / f"A-{seed}", Path(tmp) / f"B-{seed}")
            print(f"seed {seed}: largest |B - A| of the final parameters {gap:.3g}", flush=True)
    med = {k: statistics.median(r["process_seconds"] for r in v) for k, v in results.items()}
    fps = {k: statistics.median(r["frames_per_second"] for r in v) for k, v in results.items()}
    for k in ("A", "B"):
        solved = sum(r["solved"] for r in results[k])
        print(
            f"{k} ({args.a if k == 'A' else args.b}): median {med[k]:.2f} s whole process, "
            f"{fps[k]:,.0f} frames/s in training, solved {solved}/{args.seeds}"
        )
    print(f"B / A: time {med['B'] / med['A']:.3f}, frames/s {fps['B'] / fps['A']:.3f}")
    cmd = ["python", "benchmarks/interleaved.py", str(args.a), str(args.b)]
    cmd += ["--seeds", str(args.seeds)]
    cmd += [f"--{k}-args={v}" for k, v in (("a", args.a_args), ("b", args.b_args)) if v]
    cmd += ["--", *args.extra] if args.extra else []
    print("command:", shlex.join(cmd))


if __name__ == "__main__":
    main()
