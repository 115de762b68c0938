"""Does `asyncrl tune` find a setting better than the defaults? It tunes an env, then trains the
best setting it wrote (``best.toml``) and the env's defaults on new seeds, the tune's own seeds
left out, and compares the env steps each took to the target:

    python -m pip install -c constraints.txt -e ".[tune]"
    python benchmarks/tune_vs_defaults.py CartPole-v1 --trials 20 --seeds 3 --check-seeds 3

The target of issue 100: on CartPole-v1, within 20 trials, a setting that solves in fewer steps
than the defaults (the median of 3 seeds), whose file trains with `asyncrl train --config`.
Prints the tune's lines as they come, then a row a check seed and the verdict. The tune lives
in ``--out`` (default ``benchmarks/results/tune-ENV``): run again, it resumes the study (up to
``--trials``) instead of starting over. Arguments after ``--`` go to the tune's runs and to
both sides of the check (``-- --workers 2``).
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import cpu, run_train

ROOT = Path(__file__).resolve().parent.parent
#: the first check seed: far from the tune's (0, 1, 2, ...), so that the check is on new seeds
CHECK_SEED = 100


def steps_to_target(summary: dict) -> float:
    """A run's env steps to its target (inf where it never got there: last in a median)."""
    return float(summary["solve_steps"]) if summary["solved"] else float("inf")


def show(x: float) -> str:
    return "unsolved" if x == float("inf") else f"{x:,.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("env")
    ap.add_argument("--trials", type=int, default=20, help="the tune's trials (default: 20)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per trial (default: 3)")
    ap.add_argument(
        "--check-seeds", type=int, default=3, help="new seeds of the comparison (default: 3)"
    )
    ap.add_argument("--out", default=None, help="the tune's directory")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    args.extra = argv[cut + 1 :]  # asyncrl train's options, for every run
    out = Path(args.out or ROOT / "benchmarks" / "results" / f"tune-{args.env.replace('/', '-')}")
    t0 = time.perf_counter()
    tune = [sys.executable, "-m", "asyncrl.cli", "tune", "--trials", str(args.trials)]
    tune += ["--run-dir", str(out)]
    if (out / "study.db").is_file():
        tune += ["--resume"]
    else:
        tune += ["--env", args.env, "--seeds", str(args.seeds), "--", *args.extra]
    print("$", " ".join(tune), flush=True)
    if subprocess.run(tune).returncode != 0:
        sys.exit("the tune failed (above)")
    tune_minutes = (time.perf_counter() - t0) / 60
    best = out / "best.toml"
    rows = []
    with tempfile.TemporaryDirectory(prefix="asyncrl-tune-check-") as tmp:
        for seed in range(CHECK_SEED, CHECK_SEED + args.check_seeds):
            default = run_train(seed, ["--env", args.env, *args.extra], Path(tmp))
            tuned = run_train(seed, ["--config", str(best), *args.extra], Path(tmp))
            rows.append((seed, steps_to_target(default), steps_to_target(tuned)))
            print(f"seed {seed}: defaults {show(rows[-1][1])}, best.toml {show(rows[-1][2])}")
    med_default = statistics.median(r[1] for r in rows)
    med_tuned = statistics.median(r[2] for r in rows)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    print()
    print(f"env steps to the target on {args.env}, seeds {rows[0][0]}-{rows[-1][0]}:")
    print(f"  defaults:  median {show(med_default)}  ({', '.join(show(r[1]) for r in rows)})")
    print(f"  best.toml: median {show(med_tuned)}  ({', '.join(show(r[2]) for r in rows)})")
    better = med_tuned < med_default
    print(
        f"target {'met' if better else 'NOT met'}: the tuned setting solves in "
        f"{'fewer' if better else 'no fewer'} steps than the defaults (median of "
        f"{len(rows)} seeds), and {best} trains with asyncrl train --config"
    )
    print(
        f"tune: {args.trials} trials of {args.seeds} seeds in {tune_minutes:.1f} min; "
        f"{datetime.date.today()}, commit {commit}, {cpu()}"
    )
    print(f"command: python benchmarks/tune_vs_defaults.py {' '.join(sys.argv[1:])}")


if __name__ == "__main__":
    main()
