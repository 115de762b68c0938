"""Hyperparameter sweeps with Optuna (as rl-zoo does), for choosing a preset's defaults over
seeds rather than on one run:

    python -m pip install -c constraints.txt -e ".[bench]"
    python benchmarks/sweep.py Acrobot-v1 --target -100 --trials 20 --seeds 3 --steps 500000
    python benchmarks/sweep.py LunarLander-v3 --target 200 --space appo -- --workers 2

Each trial samples a setting from the search space (``--space``: A3C's or APPO's knobs), trains
it on ``--seeds`` seeds one run at a time (whole `asyncrl train` processes, the stop rule on a
confirmed greedy evaluation) and scores it by the mean over seeds of the env steps to the
target, a seed that never gets there counting as twice the budget: a setting that solves every
seed slowly beats one that solves some seeds fast. Seeds are the pruner's steps: a trial whose
first seeds are already worse than the median trial's stops there (Optuna's MedianPruner).

The study lives in an SQLite file (``benchmarks/results/sweeps/ENV-SPACE.db`` unless
``--storage`` says otherwise): an interrupted sweep resumes where it stopped, and a second
machine pointed at the same storage adds trials to it. Prints each trial as it finishes, then
the best setting as `asyncrl train` options. Arguments after ``--`` go to every run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import run_train

ROOT = Path(__file__).resolve().parent.parent


def a3c_space(trial: Any, t_max: tuple[int, ...] = (5, 8, 16, 32)) -> dict[str, Any]:
    """A3C's knobs: the update's size (envs x t_max), its step (lr), how far returns look
    (gamma, GAE), exploration (entropy) and clipping."""
    return {
        "lr": trial.suggest_float("lr", 1e-4, 1e-2, log=True),
        "envs-per-worker": trial.suggest_categorical("envs-per-worker", [1, 4, 8, 16]),
        "t-max": trial.suggest_categorical("t-max", t_max),
        "gamma": trial.suggest_categorical("gamma", [0.9, 0.95, 0.98, 0.99, 0.995, 0.999]),
        "gae-lambda": trial.suggest_categorical("gae-lambda", [0.9, 0.95, 0.98, 1.0]),
        "entropy-coef": trial.suggest_float("entropy-coef", 1e-5, 0.05, log=True),
        "max-grad-norm": trial.suggest_categorical("max-grad-norm", [0.5, 1.0, 5.0, 40.0]),
    }


def appo_space(trial: Any) -> dict[str, Any]:
    """APPO's: A3C's, with the rollout's reuse (epochs, minibatches) and the clip."""
    space = {"algo": "appo", **a3c_space(trial, t_max=(32, 64, 128, 256))}
    space["epochs"] = trial.suggest_categorical("epochs", [1, 4, 10])
    space["minibatches"] = trial.suggest_categorical("minibatches", [1, 4, 8, 32])
    space["clip"] = trial.suggest_categorical("clip", [0.1, 0.2, 0.3])
    return space


SPACES = {"a3c": a3c_space, "appo": appo_space}


def options(setting: dict[str, Any]) -> list[str]:
    return [
        a
        for k, v in setting.items()
        for a in (f"--{k}", f"{v:g}" if isinstance(v, float) else str(v))
    ]


def score(summaries: list[dict], budget: int) -> float:
    """Mean env steps to the target, an unsolved seed counting as twice the budget."""
    return statistics.fmean(s["solve_steps"] if s["solved"] else 2 * budget for s in summaries)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("env")
    ap.add_argument("--target", type=float, required=True, help="the return a run must reach")
    ap.add_argument("--space", choices=sorted(SPACES), default="a3c")
    ap.add_argument("--trials", type=int, default=20, help="trials this invocation adds")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per trial")
    ap.add_argument("--steps", type=int, default=500_000, help="each run's budget")
    ap.add_argument("--storage", default=None, help="an Optuna storage URL")
    ap.add_argument("extra", nargs="*", help="after --: options for every run")
    args = ap.parse_args()
    try:
        import optuna
    except ImportError:
        sys.exit('sweep.py needs Optuna: python -m pip install -c constraints.txt -e ".[bench]"')

    name = f"{args.env.replace('/', '-')}-{args.space}"
    storage = args.storage
    if storage is None:
        folder = ROOT / "benchmarks" / "results" / "sweeps"
        folder.mkdir(parents=True, exist_ok=True)
        storage = f"sqlite:///{folder / name}.db"
    study = optuna.create_study(
        study_name=name,
        storage=storage,
        load_if_exists=True,
        direction="minimize",
        sampler=optuna.samplers.TPESampler(seed=len(args.env)),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=5),
    )
    common = ["--env", args.env, "--target-return", f"{args.target:g}"]
    common += ["--steps", str(args.steps), *args.extra]

    def objective(trial: Any) -> float:
        setting = SPACES[args.space](trial)
        done: list[dict] = []
        with tempfile.TemporaryDirectory(prefix="asyncrl-sweep-") as tmp:
            for seed in range(args.seeds):
                done.append(run_train(seed, [*common, *options(setting)], Path(tmp)))
                trial.report(score(done, args.steps), seed)
                if trial.should_prune():
                    raise optuna.TrialPruned()
        trial.set_user_attr("solved", sum(s["solved"] for s in done))
        return score(done, args.steps)

    study.optimize(objective, n_trials=args.trials)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not done:
        sys.exit("no trial completed")
    best = study.best_trial
    setting = SPACES[args.space](optuna.trial.FixedTrial(best.params))
    print(
        f"\n{name}: {len(done)} trials completed, {len(study.trials) - len(done)} pruned or failed"
    )
    print(
        f"best: trial {best.number}, mean {best.value:,.0f} steps to {args.target:g} "
        f"({best.user_attrs.get('solved')}/{args.seeds} seeds solved)"
    )
    print("asyncrl train " + " ".join([*common, *options(setting)]))


if __name__ == "__main__":
    main()
