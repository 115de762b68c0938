"""The benchmark suite: named sets of tasks (benchmarks/suites.toml), each trained on N seeds,
one run at a time; every finished run appended to the results store
(benchmarks/results.jsonl, see store.py); reports and plots generated from the store.

    python benchmarks/suite.py quick --seeds 5     # minutes: CartPole, Acrobot, MinAtar, Pendulum
    python benchmarks/suite.py mujoco --seeds 3    # HalfCheetah, Hopper, Walker2d (about an hour)
    python benchmarks/suite.py pong30 --seeds 3    # Pong, 30 min: the defaults and variants
    python benchmarks/suite.py atari5 --seeds 3    # the paper's five games, an hour each
    python benchmarks/suite.py atari5-time-limit --seeds 3  # the same, --time-limit 60m
    python benchmarks/suite.py pong30 --seeds 3 --tasks Pong-defaults --batch pong30-zen3
    python benchmarks/suite.py quick --seeds 5 --report-only
    python benchmarks/suite.py atari5 --tasks BreakoutNoFrameskip-v4 --from-run DIR --seed 0
    python benchmarks/suite.py atari-5             # Atari-5, seeds 0-2: the 57-game median estimate
    python benchmarks/suite.py atari-5 --report-only   # its line "Atari-5 median estimate: X%"
    python benchmarks/suite.py --docs              # docs/benchmarks.md and docs/suite-*.md

Per task and seed: a whole `asyncrl train` process (wall time from launch to exit), then the
model it keeps (best_model.pt where the run made evaluations; the last model where a time limit
ended a run its stop rule did not: the agent at that time) evaluated over the task's evaluation
episodes on starts no training run saw (`asyncrl.evaluate`, seed 10^6). The report covers
every task of the suite; per task it gives the seeds whose run reported it solved and, of
those, the ones whose kept model scores the target when evaluated; the mean of the last 100
training episodes at each run's end (median over seeds, the seeds at the target then, and
where the task tracks the target as a milestone, the seeds that reached it at any time); the
median and the interquartile mean (IQM, rliable's recommendation: Agarwal et al. 2021) of the
final evaluation with a 95% bootstrap interval (scipy.stats.bootstrap, percentile, 10,000
resamples); the median time and steps to the target over the solved seeds; and a learning
curve: the median over seeds of the mean return of the last 100 training episodes, with a band
from the 25th to the 75th percentile.

Each finished run is one row of the store, keyed by suite, batch, task and seed: an interrupted
suite resumes where it stopped and never reruns a finished seed of its batch (``--batch NAME``
starts a set of its own: the same suite on another CPU or commit). Reports of a run go to
benchmarks/results/ (not tracked); ``--docs`` regenerates the tracked pages.
Never run two benchmarks at once on a 2-core machine.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import hashlib
import json
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

import atari5
import numpy as np
import store
from common import cpu, crossings, machine_speed

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
#: the suites' definitions
SUITES_FILE = Path(__file__).resolve().parent / "suites.toml"
#: the evaluation's starts: none of them is a training env's or an evaluation-during-training's
EVAL_SEED = 1_000_000
#: points of a run's learning curve by steps, and by its clock for a timed task (61: a minute
#: apart over Pong's 60 minutes, half a minute over 30)
CURVE_POINTS, CLOCK_POINTS = 60, 61
#: games of one alignment averaged in a timed Atari run's curves by alignment
ALIGNMENT_WINDOW = 25


@dataclass(frozen=True)
class Task:
    name: str
    env: str
    target: float
    args: tuple[str, ...] = ()
    eval_episodes: int = 100
    #: a published or measured figure to read beside ours, with its source
    baseline: str = ""
    extras: tuple[str, ...] = field(default=(), compare=False)
    #: (random, human) scores: the report adds the human-normalised score (score - random) /
    #: (human - random) of the final evaluation
    human: tuple[float, float] | None = None
    #: scores whose first crossing by the mean of the last 100 training episodes the report
    #: gives per seed, in frames (steps where a step is one frame) and minutes
    milestones: tuple[float, ...] = ()
    #: the Atari game of the suites' [game] tables the task plays ("": none)
    game: str = ""
    #: the target is the run's stop rule (``--target-return``); False: the report's bar alone
    stop_rule: bool = True

    @property
    def limit(self) -> float | None:
        """The seconds the run has: its ``--time-limit``, else the suite's timeout (None:
        neither)."""
        if "--time-limit" in self.args:
            from asyncrl.settings import RunSettings

            value = self.args[self.args.index("--time-limit") + 1]
            return RunSettings(time_limit=value).time_limit_seconds()
        return float(self.extras[1]) if self.extras and self.extras[0] == "timeout" else None

    @property
    def timed(self) -> bool:
        """Trained under a time limit (its own ``--time-limit``, or the suite's timeout
        ``extras=("timeout", SECONDS)``, which wraps the command in ``timeout -s INT``)."""
        return self.limit is not None


def with_args(task: Task, *args: str) -> Task:
    """``task`` with ``args`` on top; a ``--steps`` among them (a schedule's length) replaces
    the task's budget rather than leaving two for a reader to guess which the CLI takes."""
    return replace(task, args=_on_top(task.args, args))


def _on_top(base: tuple[str, ...] | list[str], args: tuple[str, ...] | list[str]) -> tuple:
    base = list(base)
    if "--steps" in args and "--steps" in base:
        i = base.index("--steps")
        del base[i : i + 2]
    return (*base, *args)


# ---------------------------------------------------------------------- the suites, as data
_TASK_KEYS = {
    "name", "env", "target", "args", "eval_episodes", "baseline", "timeout", "human",
    "milestones", "game", "setting", "base", "stop_rule",
}  # fmt: skip


def _resolve(table: dict, data: dict, where: str) -> dict:
    """A task's table with its base's keys under its own (args: on top of the base's)."""
    unknown = set(table) - _TASK_KEYS
    if unknown:
        raise ValueError(f"{SUITES_FILE.name}: {where}: unknown key {sorted(unknown)[0]!r}")
    if "base" not in table:
        return dict(table)
    name = table["base"]
    if name not in data.get("base", {}):
        raise ValueError(f"{SUITES_FILE.name}: {where}: no [base.{name}]")
    merged = _resolve(data["base"][name], data, f"base.{name}")
    own = {k: v for k, v in table.items() if k != "base"}
    args = _on_top(merged.get("args", ()), own.pop("args", ()))
    return {**merged, **own, "args": list(args)}


def _task(table: dict, data: dict, where: str) -> Task:
    t = _resolve(table, data, where)
    if "game" in t:  # the game's target, baseline and human scores, unless the task has its own
        t = {**data["game"][t["game"]], **t}
    names = {"game": t.get("game", ""), "setting": t.get("setting", "")}
    missing = {"name", "env", "target"} - set(t)
    if missing:
        raise ValueError(f"{SUITES_FILE.name}: {where}: no {sorted(missing)[0]}")
    return Task(
        name=t["name"].format(**names),
        env=t["env"].format(**names),
        target=float(t["target"]),
        args=tuple(str(a) for a in t.get("args", ())),
        eval_episodes=int(t.get("eval_episodes", 100)),
        baseline=t.get("baseline", "").format(**names),
        extras=("timeout", str(int(t["timeout"]))) if "timeout" in t else (),
        human=tuple(float(x) for x in t["human"]) if "human" in t else None,
        milestones=tuple(float(x) for x in t.get("milestones", ())),
        game=t.get("game", ""),
        stop_rule=bool(t.get("stop_rule", True)),
    )


def load_suites(path: Path = SUITES_FILE) -> tuple[dict[str, list[Task]], dict[str, str]]:
    """The suites of ``path``: name -> tasks, and name -> its line for the reports."""
    data = tomllib.loads(path.read_text())
    suites, about = {}, {}
    for name, s in data["suite"].items():
        tasks = [
            _task({"base": s["base"], "game": g, "args": s.get("args", [])}, data, name)
            for g in s.get("games", ())
        ]
        tasks += [_task(t, data, f"suite.{name}") for t in s.get("task", ())]
        names = [t.name for t in tasks]
        if len(set(names)) != len(names):
            raise ValueError(f"{path.name}: suite {name}: two tasks of one name")
        suites[name], about[name] = tasks, s.get("about", "")
    return suites, about


SUITES, ABOUT = load_suites()
_DATA = tomllib.loads(SUITES_FILE.read_text())
#: the seeds a suite runs without --seeds (``seeds`` of its table; default 5)
SEEDS = {name: int(s["seeds"]) for name, s in _DATA["suite"].items() if "seeds" in s}
#: suite -> its 57-game median estimate (benchmarks/atari5.py): regressions, bars, reused runs
PLANS = atari5.plans(_DATA)


# ---------------------------------------------------------------------- statistics
def iqm(x: np.ndarray) -> float:
    """The interquartile mean: the mean of the middle half (scipy's 25% trimmed mean)."""
    return float(_iqm(x))


def _iqm(x: np.ndarray, axis: int | None = None) -> np.ndarray:
    from scipy.stats import trim_mean

    return trim_mean(x, 0.25, axis=axis)


def interval(x: list[float], stat=_iqm, seed: int = 0) -> tuple[float, float]:
    """A 95% percentile-bootstrap interval of ``stat`` (a function of an array and an axis, as
    numpy's reductions are: all 10,000 resamples in one call) over the seeds."""
    from scipy.stats import bootstrap

    a = np.asarray(x, dtype=float)
    if len(a) < 2 or np.all(a == a[0]):
        return float(a[0]), float(a[0])
    res = bootstrap(
        (a,),
        stat,
        vectorized=True,
        n_resamples=10_000,
        confidence_level=0.95,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def curve(
    episodes_csv: Path, grid: np.ndarray, window: int = 100, by: str = "global_step"
) -> list[float | None]:
    """The mean return of the last ``window`` training episodes at each point of ``grid``, a
    grid of global steps (or of the run's wall seconds, ``by="wall_seconds"``)."""
    steps, returns = [], []
    with open(episodes_csv, newline="") as f:
        for row in csv.DictReader(f):
            steps.append(float(row[by]))
            returns.append(float(row["return"]))
    if not returns:
        return [None] * len(grid)
    r = np.asarray(returns)
    c = np.concatenate([[0.0], np.cumsum(r)])
    idx = np.arange(1, len(r) + 1)
    rolling = (c[idx] - c[np.maximum(idx - window, 0)]) / np.minimum(idx, window)
    at = np.searchsorted(np.asarray(steps), grid, side="right") - 1
    return [None if i < 0 else float(rolling[i]) for i in at]


def noop_residue(start_frames: str) -> int:
    """A game's alignment with the 4-frame action repeat from its ``episodes.csv`` row: the
    no-op count (``start_frames - 1`` in a game with FIRE) mod 4, as the evaluation starts are
    grouped (the evaluation env draws its no-ops as Gymnasium's ``AtariPreprocessing`` does)."""
    return (int(start_frames) - 1) % 4


def by_alignment(episodes_csv: Path, window: int = 100) -> dict[str, list[float]] | None:
    """The last ``window`` training games grouped by their alignment with the 4-frame action
    repeat, ``(start_frames - 1) mod 4`` (the no-op count mod 4 in a game with FIRE, as the
    evaluation starts are grouped): residue -> [games, mean return].
    None where the run's episodes.csv has no start_frames (off Atari, or an older run)."""
    with open(episodes_csv, newline="") as f:
        rows = list(csv.DictReader(f))[-window:]
    if not rows or not rows[0].get("start_frames"):
        return None
    groups: dict[str, list[float]] = {}
    for row in rows:
        groups.setdefault(str(noop_residue(row["start_frames"])), []).append(float(row["return"]))
    return {k: [len(v), statistics.fmean(v)] for k, v in sorted(groups.items())}


def alignment_curves(
    episodes_csv: Path, window: int = ALIGNMENT_WINDOW
) -> dict[int, tuple[list[float], list[float]]]:
    """Residue (no-op count mod 4) -> (the run's minutes at the end of each of its games, the
    mean of that residue's last ``window`` games then). Empty where the file has no
    ``start_frames`` (off Atari, or a run from before the column)."""
    out: dict[int, tuple[list[float], list[float]]] = {}
    games: dict[int, list[float]] = {}
    with open(episodes_csv, newline="") as f:
        for row in csv.DictReader(f):
            if not row.get("start_frames"):
                return {}
            k = noop_residue(row["start_frames"])
            games.setdefault(k, []).append(float(row["return"]))
            last = games[k][-window:]
            minutes, means = out.setdefault(k, ([], []))
            minutes.append(float(row["wall_seconds"]) / 60)
            means.append(sum(last) / len(last))
    return dict(sorted(out.items()))


def curves_by_alignment(
    episodes_csv: Path, seconds: np.ndarray, end: float, window: int = ALIGNMENT_WINDOW
) -> dict[str, list[float | None]] | None:
    """:func:`alignment_curves` on a grid of the run's seconds: residue -> the mean of that
    residue's last ``window`` games at each point (None before its first game and past the
    run's ``end``). None where the file has no ``start_frames``."""
    curves = alignment_curves(episodes_csv, window)
    if not curves:
        return None
    out = {}
    for k, (minutes, means) in curves.items():
        at = np.searchsorted(np.asarray(minutes) * 60, seconds, side="right") - 1
        out[str(k)] = [
            None if i < 0 or t > end else means[i] for i, t in zip(at, seconds, strict=True)
        ]
    return out


def evaluations(evaluations_csv: Path, points: int = 100) -> list[list[float]] | None:
    """A run's evaluations during training as [global step, wall seconds, mean return], at
    most ``points`` of them (evenly spaced, the last kept). None where it made none."""
    if not evaluations_csv.is_file():
        return None
    with open(evaluations_csv, newline="") as f:
        rows = [
            [int(r["global_step"]), float(r["wall_seconds"]), float(r["mean"])]
            for r in csv.DictReader(f)
        ]
    if len(rows) > points:
        rows = [rows[i] for i in np.linspace(0, len(rows) - 1, points).round().astype(int)]
    return rows or None


# ---------------------------------------------------------------------- running
def command(task: Task, seed: int, run_dir: Path) -> list[str]:
    """The task's `asyncrl train` command for ``seed`` (under ``timeout`` when it has a time
    limit: a SIGINT there is the run's end, not a failure)."""
    cmd = [sys.executable, "-m", "asyncrl.cli", "train", "--env", task.env]
    cmd += ["--seed", str(seed), "--run-dir", str(run_dir), "--no-progress"]
    if task.stop_rule and "--target-return" not in task.args:  # the target: the stop rule
        cmd += ["--target-return", f"{task.target:g}"]
    cmd += task.args
    if task.extras and task.extras[0] == "timeout":
        cmd = ["timeout", "-s", "INT", task.extras[1], *cmd]
    return cmd


def settings_digest(task: Task) -> str:
    """A digest of the settings the task's command trains with (its train options through
    the CLI's parser and the env's preset, as `asyncrl train` resolves them), the seed and
    run directory aside: runs reused for a task stand for it while this is unchanged."""
    from asyncrl.cli import build_parser, resolve

    cmd = command(task, 0, Path("RUN_DIR"))
    cfg, _ = resolve(build_parser().parse_args(cmd[cmd.index("train") :]))
    kept = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("seed", "run_dir")}
    text = json.dumps(kept, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def reused(suite: str, batch: str, rows: list[dict]) -> tuple[list[dict], list[str]]:
    """The runs of other suites that stand for this suite's tasks (its ``reuse`` tables) where
    its batch has none of its own for that task, each marked ``reused_from``, while the
    task's :func:`settings_digest` is the one recorded with the reuse; and a line for each,
    used or not, for the report."""
    plan = PLANS.get(suite)
    tasks = {t.name: t for t in SUITES.get(suite, [])}
    out, notes = [], []
    for ru in plan.reuse if plan else ():
        if store.select(rows, suite, batch, ru.task):
            continue  # the batch's own runs of the task
        theirs = store.select(rows, ru.suite, ru.batch, ru.task)
        if not theirs:
            continue
        where = f"suite {ru.suite} (batch {ru.batch})"
        try:
            now = settings_digest(tasks[ru.task])
        except Exception as e:  # no ale-py here, an env that no longer resolves
            now = f"not computed: {type(e).__name__}: {e}"
        if now != ru.settings:
            notes.append(
                f"{ru.task}: the runs of {where} are not reused: the settings of this suite's "
                f"command have changed since they were checked (digest {ru.settings}, now {now})"
            )
            continue
        runs = [{**r, "suite": suite, "reused_from": where} for r in theirs]
        out += runs
        seeds = ", ".join(str(r["seed"]) for r in runs)
        notes.append(
            f"{ru.task}: seeds {seeds} reused from {where}, run before this suite with the "
            "settings its command resolves to (benchmarks/suites.toml says how that was checked)"
        )
    return out, notes


def shown(cmd: list[str]) -> str:
    """A command as a row records it: ``python`` for this interpreter's path."""
    return shlex.join(["python" if a == sys.executable else a for a in cmd])


#: a row's keys of the run's own re-scoring of its kept model (summary.json's)
KEPT_KEYS = ("kept_model", "kept_model_return", "kept_model_episodes", "kept_model_cut_short")
#: a row's keys of the run's time (summary.json's): when training stopped, and the reserve
#: for the work after it that a time limit stopped it on (asyncrl.rescore), which the log does
#: not tell where nothing was cut short
TIME_KEYS = ("train_seconds", "time_reserved_seconds")


def run_one(task: Task, seed: int, speed: dict | None = None) -> dict:
    """One seed of a task: train, then measure the run (:func:`measure`), with ``speed``, the
    machine's that day (:func:`common.machine_speed`), beside it. The run directory
    goes once the run is measured; a run that failed, or could not be measured, keeps it and
    says where (an hour of Atari is not thrown away)."""
    tmp = Path(tempfile.mkdtemp(prefix="asyncrl-suite-"))
    run_dir = tmp / "run"
    cmd = command(task, seed, run_dir)
    started = {"date": utc_date(), "commit": head_commit()}  # a commit may land during the run
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    # the time limit: GNU timeout exits 124 when it had to signal the run (which itself exits
    # 130 after a SIGINT, checkpoint and summary written): a finished run, not a failure
    timed_out = task.timed and proc.returncode in (124, 128 + 2)
    if (proc.returncode != 0 and not timed_out) or not (run_dir / "summary.json").is_file():
        sys.exit(
            f"{shlex.join(cmd)} failed ({proc.returncode}); its run directory is kept: "
            f"{run_dir}\n{proc.stderr[-3000:]}"
        )
    try:
        recorded = shown(command(task, seed, Path("RUN_DIR")))  # the same on any machine
        result = measure(task, seed, run_dir, recorded, wall, speed, started)
    except BaseException:
        print(f"{task.name} seed {seed}: not measured; its run directory is kept: {run_dir}")
        raise
    result["log"] = run_log(proc.stderr)
    shutil.rmtree(tmp)
    return result


#: the lines of a run's log a row leaves out: the status line every few seconds and the
#: progress lines of the work after training
_ROUTINE = re.compile(r"^\[ *[\d.]+s\] steps |^re-scoring: \d|^training has stopped; evaluation")
#: the most lines of a run's log a row keeps (its last)
LOG_LINES = 60


def rescoring_cut_short(row: dict) -> bool:
    """Whether a row's re-scoring of its kept model was cut short by the time limit (rows
    from before the store recorded it: fewer games than the default's)."""
    import asyncrl

    if row.get("kept_model_cut_short") is not None:  # (cut at 0 games: no return)
        return bool(row["kept_model_cut_short"])
    if row.get("kept_model_return") is None:
        return False
    return (row.get("kept_model_episodes") or 0) < asyncrl.Config().rescore_episodes


def run_log(stderr: str) -> list[str]:
    """What a run's log said beyond its routine lines (why training stopped when it did, an
    evaluation that gave up or was cut short, the summary): the run directory goes once it is
    measured, and the row is what is left of the run."""
    lines = [line for line in stderr.splitlines() if line.strip() and not _ROUTINE.match(line)]
    return lines[-LOG_LINES:]


def measure(
    task: Task,
    seed: int,
    run_dir: Path,
    cmd: str,
    wall: float,
    speed: dict | None = None,
    started: dict | None = None,
) -> dict:
    """The result of one finished run, a row for the store: its summary, its learning curves,
    and an evaluation on starts no run saw of the model it keeps, or, where the task's time
    limit ended it unsolved (the atari5 tasks have no reachable target), of its last: the agent
    after that time. ``speed``: the machine's (its CPU is recorded without it too);
    ``started``: the UTC date and the commit the run started on; a run measured from its
    directory (``--from-run``) gets its summary's date and no commit (none is recorded)."""
    import asyncrl

    summary = json.loads((run_dir / "summary.json").read_text())
    episodes = run_dir / "episodes.csv"
    which = "last" if task.timed and not summary["solved"] else None
    returns = asyncrl.evaluate(run_dir, episodes=task.eval_episodes, seed=EVAL_SEED, which=which)
    policy = asyncrl.load(run_dir, which)
    grid = np.linspace(0, summary["total_steps"], CURVE_POINTS)
    result = {
        "task": task.name,
        "seed": seed,
        "env": task.env,
        "target": task.target,
        "command": cmd,
        # a suite's seeds are run on different days, machines and commits: each names its own
        **(started or {"date": utc_date((run_dir / "summary.json").stat().st_mtime)}),
        "cpu": (speed or {}).get("cpu") or cpu(),
        "calibration": None if speed is None else speed["frames_per_second"],
        "process_seconds": wall,
        "solved": bool(summary["solved"]),
        "solve_seconds": summary["solve_seconds"],
        "solve_steps": summary["solve_steps"],
        "total_steps": summary["total_steps"],
        "frames_per_second": summary["frames_per_second"],
        # what --precision auto chose (runs before the summary recorded it: the model's spec)
        "precision": summary.get("precision", policy.spec.precision),
        "model": policy.source.name if policy.source else "model.pt",
        "final_train_mean": summary.get("rolling_return"),
        # the run's own re-scoring of the model it kept, within its time (asyncrl.rescore)
        **{k: summary.get(k) for k in KEPT_KEYS + TIME_KEYS},
        "final_eval": statistics.fmean(returns),
        "final_eval_returns": returns,
        "curve_steps": grid.tolist(),
        "curve": curve(episodes, grid),
    }
    aligned = by_alignment(episodes)
    if aligned is not None:
        result["last_100_by_alignment"] = aligned
    if task.milestones:
        per_step = summary["total_frames"] / max(summary["total_steps"], 1)
        hits = crossings(episodes, list(task.milestones))
        result["milestones"] = {
            f"{th:g}": None if hit is None else [hit[0] * per_step, hit[1]]
            for th, hit in hits.items()
        }
    if task.limit is not None:  # halfway too: Pong's 60 minutes of atari5 give its 30-minute
        half = task.limit / 2
        at = curve(episodes, np.array([half]), by="wall_seconds")[0]
        result |= {"half_seconds": half, "train_mean_at_half": at}
        # and the curve against the run's clock: a timed task's target is a time
        seconds = np.linspace(0, 2 * half, CLOCK_POINTS)
        by_time = curve(episodes, seconds, by="wall_seconds")
        # none past the run's end (its stop rule may end it early)
        end = summary["wall_seconds"]
        by_time = [None if t > end else v for t, v in zip(seconds, by_time, strict=True)]
        result |= {"curve_seconds": seconds.tolist(), "curve_by_time": by_time}
        # every game of the run by its alignment, downsampled: the run directory goes
        by_residue = curves_by_alignment(episodes, seconds, end)
        if by_residue is not None:
            result["curve_by_alignment"] = by_residue
    evals = evaluations(run_dir / "evaluations.csv")
    if evals is not None:
        result["evaluations"] = evals
    return result


# ---------------------------------------------------------------------- the store
def tasks_of(suite: str, rows: list[dict]) -> list[Task]:
    """The suite's tasks, and a task for each task name of ``rows`` that the suite no longer
    defines (from the env and target its rows recorded): a report names every run held."""
    tasks = list(SUITES.get(suite, []))
    known = {t.name for t in tasks}
    for r in rows:
        if r["task"] not in known:
            known.add(r["task"])
            tasks.append(Task(r["task"], r.get("env", "?"), float(r.get("target", 0.0))))
    return tasks


def seeds_held(rows: list[dict]) -> int:
    """The --seeds that runs the seeds ``rows`` hold: up to the highest (a set of seeds 1 and 2
    says --seeds 3, as --seeds runs 0..N-1; the per-seed table lists which are there)."""
    return max(r["seed"] for r in rows) + 1


def suite_command(suite: str, seeds: int, batch: str = "", tasks: list[str] | None = None) -> str:
    """The command that runs (or resumes, or reports) these runs."""
    cmd = ["python", "benchmarks/suite.py", suite, "--seeds", str(seeds)]
    if tasks:
        cmd += ["--tasks", *tasks]
    if batch:
        cmd += ["--batch", batch]
    return shlex.join(cmd)


# ---------------------------------------------------------------------- the report
def fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def training_at_end(rs: list[dict], target: float) -> str:
    """The median over seeds of the last 100 training episodes' mean when each run ended, and
    how many seeds it was at ``target`` on then (the five games' measure: the score at 60
    minutes); where every record tracks the target as a milestone, also how many seeds it
    reached the target on at any time (Pong's 30-minute measure: 18 *within* the time, which
    a run's mean can reach and then leave)."""
    means = [r["final_train_mean"] for r in rs if r.get("final_train_mean") is not None]
    if not means:
        return "-"
    cell = f"{fmt(statistics.median(means))}; {sum(m >= target for m in means)} / {len(means)}"
    hits = [
        hit for r in rs for key, hit in (r.get("milestones") or {}).items() if float(key) == target
    ]
    if len(hits) == len(rs):
        cell += f"; reached {sum(h is not None for h in hits)} / {len(rs)}"
    return cell


def alignments(r: dict) -> str:
    """The last 100 training games' means by no-op count mod 4 (residues 0 / 1 / 2 / 3, with
    their games), where the record has them."""
    by = r.get("last_100_by_alignment")
    if not by:
        return ""
    cells = " / ".join(f"{fmt(by[k][1])} ({by[k][0]})" if k in by else "-" for k in "0123")
    return f"; by no-op count mod 4: {cells}"


def milestones(r: dict) -> str:
    """A result's milestones: "-19: 2.3M, 11.4 min; ..." (frames; "-": not reached)."""
    hits = r.get("milestones") or {}
    return "; ".join(
        f"{th}: -" if hit is None else f"{th}: {hit[0] / 1e6:.1f}M, {hit[1] / 60:.1f} min"
        for th, hit in hits.items()
    )


def throughput(r: dict) -> str:
    """A result's training frames/s and the encoder's precision ("-": not recorded)."""
    fps = r.get("frames_per_second")
    return "-" if fps is None else f"{fps:,.0f} ({r.get('precision', '-')})"


def utc_date(timestamp: float | None = None) -> str:
    """The UTC date of a POSIX time (None: now), as the suite's records and reports give it."""
    when = time.time() if timestamp is None else timestamp
    return datetime.datetime.fromtimestamp(when, datetime.timezone.utc).date().isoformat()


def head_commit() -> str:
    """The short hash of the checkout the suite runs from (its ``src`` is what trains)."""
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()


def run_of(r: dict) -> str:
    """When and from which commit a result was taken ("-": results from before 2026-11-28,
    which did not record them; a converted row names the commit that added its file)."""
    cells = [str(r[k]) for k in ("date", "commit") if r.get(k)]
    if not r.get("commit") and r.get("recorded_in"):
        on = "" if r.get("date") else f" on {r['recorded_on']}"
        cells.append(f"recorded in {r['recorded_in']}{on}")
    if r.get("reused_from"):
        cells.append(f"reused from {r['reused_from']}")
    return ", ".join(cells) or "-"


def speed_of(r: dict) -> str:
    """The machine's speed when the result was taken, and its CPU ("-": neither recorded)."""
    speed = r.get("calibration")
    cells = [f"{speed:,.0f} frames/s"] if speed else []
    if r.get("cpu"):
        cells.append(f"({r['cpu']})" if cells else r["cpu"])
    return " ".join(cells) or "-"


def band(
    rs: list[dict], xs_key: str, ys_key: str, grid: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The median and quartiles across seeds of each result's curve on ``grid``. A run its stop
    rule ended holds its last value to the end of the grid (it stopped at the target, and
    leaving it out would make the median of the rest drop where it stopped); an unsolved run holds
    its last value to its own end (a curve's last point may be empty), past it and before a
    curve's first value the seed has none."""
    ys = []
    for r in rs:
        c = np.array([np.nan if v is None else v for v in r[ys_key]], dtype=float)
        x = np.asarray(r[xs_key], dtype=float)
        have = np.isfinite(c)
        if not have.any():
            ys.append(np.full(len(grid), np.nan))
            continue
        y = np.interp(grid, x[have], c[have], left=np.nan, right=c[have][-1])
        if not r.get("solved"):
            y[grid > x[-1]] = np.nan
        ys.append(y)
    y = np.asarray(ys)
    with warnings.catch_warnings():  # no seed has a value at a grid step: a gap
        warnings.simplefilter("ignore", RuntimeWarning)
        med = np.nanmedian(y, axis=0)
        q1, q3 = np.nanpercentile(y, 25, axis=0), np.nanpercentile(y, 75, axis=0)
    return med, q1, q3


def report(
    suite: str,
    tasks: list[Task],
    rows: list[dict],
    seeds: int,
    out_dir: Path,
    batch: str = "",
    stem: str | None = None,
    notes: list[str] | None = None,
) -> Path:
    """The report of ``rows`` (one batch of the suite's runs, from the store): a table a task,
    its learning curves (``stem``.png) and a row a seed, in ``out_dir``/``stem``.md (default
    ``suite-SUITE`` and the batch's name); for a suite with an estimate (atari-5), the estimate
    from ``seeds`` seeds a game and its curve, with ``notes`` (the runs reused)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stem = stem or f"suite-{suite}" + (f"-{batch}" if batch else "")
    asked = seeds
    # the seeds the rows hold, not the ones asked for: a report written with --report-only
    # names what it reports
    seeds = seeds_held(rows) if rows else seeds
    runs = {t.name: sorted((r for r in rows if r["task"] == t.name), key=lambda r: r["seed"])
            for t in tasks}  # fmt: skip
    which = f" (batch `{batch}`)" if batch else ""
    lines = [
        f"# Benchmark suite: {suite}",
        "",
        f"The runs of `{suite_command(suite, seeds, batch)}`{which}, from the results store "
        "(`benchmarks/results.jsonl`); each seed's date, commit and CPU are in its row below. "
        "Each seed is one whole `asyncrl train` process with "
        "the env's defaults and the arguments shown; then the model the run keeps (the best "
        "evaluation's, best_model.pt; where a time limit ended a run unsolved, the last, "
        "model.pt: the agent at that time) is evaluated on starts no run saw. *Reported solved*: "
        "the run's own stop rule fired; *kept model at target*: that model's evaluation "
        "reaches the target. IQM: interquartile mean over seeds, with a 95% bootstrap "
        "interval. Times are whole processes; steps are env steps (agent steps on Atari). "
        "*Machine speed*: the machine's at the run (`python benchmarks/calibrate.py`: the "
        "atari preset's A3C on Pong, 2 workers, frames/s), measured once per invocation of the "
        "suite; CPUs and allocations differ in it, so compare timed results beside it.",
        "",
        "| task | reported solved | kept model at target | last 100 training episodes: median "
        "at the end; seeds at target then; seeds that reached it | final evaluation: median, "
        "IQM [95% CI] | time to target (median) | steps to target (median) | baseline |",
        "|---|---|---|---|---|---|---|---|",
    ]
    out_dir.mkdir(parents=True, exist_ok=True)
    # a panel for each task with runs (a task with none is named in the table alone: the
    # README shows these plots, and empty panels pushed the curves into a strip)
    ran = [task for task in tasks if runs[task.name]]
    fig, axes = plt.subplots(
        1, max(1, len(ran)), figsize=(4.2 * max(1, len(ran)), 3.4), squeeze=False
    )
    panels = iter(axes[0])
    for task in tasks:
        rs = runs[task.name]
        if not rs:
            lines.append(f"| {task.name} | no run yet | | | | | | {task.baseline} |")
            continue
        ax = next(panels)
        finals = [r["final_eval"] for r in rs]
        solved = [r for r in rs if r["solved"]]
        at_target = sum(f >= task.target for f in finals)
        lo, hi = interval(finals)
        t = statistics.median(r["solve_seconds"] for r in solved) if solved else None
        s = statistics.median(r["solve_steps"] for r in solved) if solved else None
        args = f" `{' '.join(task.args)}`" if task.args else ""
        lines.append(
            f"| {task.name}{args} | {len(solved)} / {len(rs)} | {at_target} / {len(rs)} | "
            f"{training_at_end(rs, task.target)} | "
            f"{fmt(statistics.median(finals))}, {fmt(iqm(np.asarray(finals)))} "
            f"[{fmt(lo)}, {fmt(hi)}]{normalised(task, finals)} | {fmt(t)} s | {fmt(s, 0)} | "
            f"{task.baseline} |"
        )
        # learning curves: median and interquartile band across seeds on a common grid, of
        # minutes where the task is timed and every seed has its curve by time, else of steps
        by_time = task.timed and all("curve_by_time" in r for r in rs)
        xs_key, ys_key = ("curve_seconds", "curve_by_time") if by_time else ("curve_steps", "curve")
        top = max(r[xs_key][-1] for r in rs)
        grid = np.linspace(0, top, 60)
        med, q1, q3 = band(rs, xs_key, ys_key, grid)
        x = grid / 60 if by_time else grid
        ax.plot(x, med, lw=2, label=f"median of {len(rs)} seeds")
        ax.fill_between(x, q1, q3, alpha=0.3, label="25-75%")
        ax.axhline(task.target, ls="--", color="gray", lw=1, label="target")
        ax.set_title(task.name, fontsize=10)
        ax.set_xlabel("minutes of the run" if by_time else "env steps")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("mean of last 100 training episodes")
    if ran:
        axes[0][0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    png = out_dir / f"{stem}.png"
    fig.savefig(png, dpi=100)
    plt.close(fig)
    lines += ["", f"![learning curves: median over seeds with the interquartile band]({png.name})"]
    if suite in PLANS:
        lines += ["", *estimate_section(suite, tasks, rows, asked, out_dir, stem, notes or [])]
    lines += [
        "",
        "Per seed (final evaluation of the kept model; time and steps to the target where the "
        "run reported it solved):",
        "",
        "| task | seed | solved | final evaluation | last 100 training episodes | time to target "
        "| steps to target | whole process | frames/s of training (precision) | model "
        "| the last 100 first at (frames, minutes) | machine speed | run (date, commit) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for task in tasks:
        for r in runs[task.name]:
            half = ""
            if r.get("half_seconds") is not None:  # a timed task's, halfway through its time
                half = f" ({fmt(r['train_mean_at_half'])} at {r['half_seconds'] / 60:g} min)"
            lines.append(
                f"| {task.name} | {r['seed']} | {r['solved']} | {fmt(r['final_eval'])} | "
                f"{fmt(r.get('final_train_mean'))}{half}{alignments(r)} | "
                f"{fmt(r['solve_seconds'])} s | "
                f"{fmt(r['solve_steps'], 0)} | "
                f"{fmt(r['process_seconds'])} s | {throughput(r)} | {r['model']} | "
                f"{milestones(r)} | "
                f"{speed_of(r)} | {run_of(r)} |"
            )
    md = out_dir / f"{stem}.md"
    md.write_text("\n".join(lines) + "\n")
    return md


def normalised(task: Task, finals: list[float]) -> str:
    """The human-normalised score of the median final evaluation, where the task has human
    scores: (score - random) / (human - random), in percent as the Atari-5 table gives it."""
    if task.human is None:
        return ""
    rand, human = task.human
    return f"; human-normalised {(statistics.median(finals) - rand) / (human - rand):.1%}"


# ---------------------------------------------------------------------- the 57-game estimate
def estimate_of(
    suite: str, rows: list[dict], seeds: int, key: str = "final_train_mean"
) -> atari5.Result:
    """The suite's 57-game median estimate (benchmarks/atari5.py) from its runs' ``key``: the
    mean of each run's last 100 games at its end, or ``final_eval``, the kept model's."""
    games = {t.name: t for t in SUITES[suite] if t.game}
    human = {t.game: t.human for t in games.values() if t.human}
    scores: dict[str, dict[int, float]] = {}
    reused = set()
    for r in rows:
        if r["task"] in games and r.get(key) is not None:
            scores.setdefault(games[r["task"]].game, {})[r["seed"]] = float(r[key])
            if r.get("reused_from"):
                reused.add((games[r["task"]].game, r["seed"]))
    res = atari5.from_runs(PLANS[suite], human, scores, seeds)
    res.reused = sum(1 for g, _ in reused if res.reg and g in res.reg.games)
    return res


def estimate_section(
    suite: str,
    tasks: list[Task],
    rows: list[dict],
    seeds: int,
    out_dir: Path,
    stem: str,
    notes: list[str],
) -> list[str]:
    """The report's part on the 57-game median estimate: the line ``--report-only`` prints,
    a row a game, the bars, the estimate from the kept models, the runs reused, and the
    estimate over the runs' hour (``stem``-estimate.png)."""
    plan = PLANS[suite]
    res = estimate_of(suite, rows, seeds)
    weights = dict(zip(plan.regressions[0].games, plan.regressions[0].weights, strict=True))
    lines = [
        f"## {plan.regressions[0].name}: the 57-game median estimate",
        "",
        f"**{atari5.headline(res, seeds)}**",
        "",
        "Each run's score is the mean of its last 100 games (whole games, raw scores, up to 30 "
        "no-op starts) at its end; a game's, the median over its seeds, human-normalised with "
        "DQN Zoo's random and human scores (100% is the human tester's score); the estimate, "
        "Aitchison et al.'s regression of the 57-game median on five games' scores (ICML "
        "2023; docs/atari.md#atari-5). The interval resamples each game's seeds (10,000 "
        "resamples, percentile): the seeds' spread, not the regression's own error, about "
        f"{plan.regressions[0].error:g}% on the published algorithms it was fitted to.",
        "",
        "| game | weight | last 100 games, per seed | median | human-normalised | above random "
        "| A3C FF, 1 day, 16 cores (human starts) | below it | final evaluation (median) "
        "| kept model, the run's re-scoring (median) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for task in (t for t in tasks if t.game in weights):
        rs = sorted((r for r in rows if r["task"] == task.name), key=lambda r: r["seed"])
        means = [r["final_train_mean"] for r in rs if r.get("final_train_mean") is not None]
        if not means or task.human is None:
            lines.append(f"| {task.game} | {weights[task.game]:.3f} | no run yet | | | | "
                         f"{task.target:,.1f} | | | |")  # fmt: skip
            continue
        med = statistics.median(means)
        rand = task.human[0]
        hn = float(atari5.normalised(med, *task.human))
        per_seed = ", ".join(f"{r['final_train_mean']:,.1f} ({r['seed']})" for r in rs
                             if r.get("final_train_mean") is not None)  # fmt: skip
        finals = [r["final_eval"] for r in rs if r.get("final_eval") is not None]
        # (rows from before the store recorded it have none)
        kept = [r["kept_model_return"] for r in rs if r.get("kept_model_return") is not None]
        # a re-scoring the limit cut short is of fewer games (of the waves that ended whole;
        # rows from before commit 3e9223a: of every game that ended), maybe none
        rescored = [r for r in rs if r.get("kept_model_return") is not None
                    or rescoring_cut_short(r)]  # fmt: skip
        short = sum(rescoring_cut_short(r) for r in rescored)
        cut = f" ({short} of {len(rescored)} cut short)" if short else ""
        lines.append(
            f"| {task.game} | {weights[task.game]:.3f} | {per_seed} | {med:,.1f} | {hn:.1f}% | "
            f"{sum(m > rand for m in means)} / {len(means)} | {task.target:,.1f} | "
            f"{'yes' if med < task.target else 'no'} | "
            f"{fmt(statistics.median(finals)) if finals else '-'} | "
            f"{fmt(statistics.median(kept)) if kept else '-'}{cut} |"
        )
    human = {t.game: t.human for t in tasks if t.game and t.human}
    full = plan.regressions[0]
    lines.append("")
    for bar in plan.bars:
        own = atari5.from_raw(full, bar.scores, human) if set(full.games) <= set(human) else None
        reached = "" if res.value is None else (" (reached)" if res.value >= bar.median
                                               else " (not reached)")  # fmt: skip
        lines.append(
            f"- Bar {bar.median:g}%{reached}: {bar.name}, its 57-game median ({bar.source}; "
            f"these runs have up to 30 no-op starts). The same regression on that A3C's own "
            f"five scores gives {fmt(own)}%."
        )
    for key, what in (
        ("final_eval", "the final evaluations (the suite's, of the last model, on starts no run "
         "saw)"),
        ("kept_model_return", "the kept models re-scored by their runs (best_model.pt, on 100 "
         "starts no evaluation saw, within the hour, or fewer where the hour cut it short: the "
         "table counts them)"),
    ):  # fmt: skip
        other = estimate_of(suite, rows, seeds, key)
        if other.value is not None:
            lines.append(
                f"- From {what}: {other.value:.1f}% (95% CI {other.low:.1f}-{other.high:.1f}%)."
            )
    lines += [f"- {n}." for n in notes]
    png = estimate_curve(suite, tasks, rows, out_dir / f"{stem}-estimate.png")
    if png is not None:
        lines += ["", f"![the estimate over the runs' hour]({png.name})"]
    return lines


def estimate_curve(suite: str, tasks: list[Task], rows: list[dict], png: Path) -> Path | None:
    """The estimate over the runs' clock: at each minute, each game's median over its seeds
    of the mean of their last 100 games, through the regression (None: a game of the full
    regression has no curve by time)."""
    import matplotlib.pyplot as plt

    reg = PLANS[suite].regressions[0]
    games = {t.game: t for t in tasks if t.game in reg.games and t.human}
    byg = {g: [r for r in rows if r["task"] == t.name and r.get("curve_by_time")]
           for g, t in games.items()}  # fmt: skip
    if set(byg) != set(reg.games) or not all(byg.values()):
        return None
    top = max(r["curve_seconds"][-1] for rs in byg.values() for r in rs)
    grid = np.linspace(0, top, CLOCK_POINTS)
    hn = {}
    for g, rs in byg.items():
        med, _, _ = band(rs, "curve_seconds", "curve_by_time", grid)
        hn[g] = atari5.normalised(med, *games[g].human)
    y = np.asarray(atari5.estimate(reg, hn))
    fig, ax = plt.subplots(figsize=(5.0, 3.4))
    ax.plot(grid / 60, y, lw=2, label=f"{reg.name} estimate (each game's median seed)")
    for bar, style in zip(PLANS[suite].bars, ("--", ":"), strict=False):
        ax.axhline(bar.median, ls=style, lw=1, color="gray", label=f"{bar.median:g}%: {bar.name}")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_xlabel("minutes of the run")
    ax.set_ylabel("57-game median estimate (%)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return png


# ---------------------------------------------------------------------- the docs pages
#: anchors the README and the docs linked to before docs/benchmarks.md was generated, kept on
#: the suite's section (or the set of runs' row) that now holds those figures
SUITE_ANCHORS = {
    "atari5": ("atari-the-papers-five-games",),
    "atari5-lr-hold-time": ("hold-over-time-zen4",),
    "lstm": ("the-recurrent-agent",),
    "pong60": ("pong-hour-variants",),
}
BATCH_ANCHORS = {
    "pong30-amx-2026-12-02": "pong-amx",
    "pong30-amx-2026-12-02-e5a31ba": "pong-amx-three-seeds",
    "pong30-lr-hold-time-zen4-2026-12-04": "hold-over-time-pong30",
    "pong30-time-limit-zen4-2026-12-05": "pong30-time-limit",
    "pong30-zen1-2026-12-02-7a17402": "pong-zen1",
    "pong30-zen3-2026-11-28": "pong-zen3",
}
#: the harness's other scripts, whose figures are printed, not stored
OTHER_SCRIPTS = [
    ("calibrate.py", "the machine's speed (frames/s of the atari preset's A3C on Pong), which "
     "the suite records with each run"),
    ("throughput.py", "env steps a second per backend and worker count (`--plot`)"),
    ("atari.py", "Atari: the env's frames a second, the network's ceiling, SB3's A2C beside"),
    ("continuous.py", "continuous control: time to a target, or the score at a budget"),
    ("versus_sb3.py", "Stable-Baselines3 side by side on the same env and budget"),
    ("tune_vs_defaults.py", "`asyncrl tune`'s best setting against the defaults on new seeds"),
]  # fmt: skip


def reached(r: dict) -> bool:
    """A run reached its target: its stop rule confirmed it, or its kept model's final
    evaluation is at it (a timed task's bar, which no stop rule watches)."""
    return bool(r.get("solved")) or (
        r.get("final_eval") is not None and r["final_eval"] >= r["target"]
    )


def _span(values: list[str]) -> str:
    """Dates as one day or a first and last one ("-": none)."""
    days = sorted(set(values))
    if not days:
        return "-"
    return days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}"


def _commits(rs: list[dict]) -> str:
    """The commits the runs trained on, in order, or where none is recorded the commit that
    added their converted files."""
    seen = list(dict.fromkeys(r["commit"] for r in rs if r.get("commit")))
    if not seen:
        added = list(dict.fromkeys(r["recorded_in"] for r in rs if r.get("recorded_in")))
        return f"- (recorded in {', '.join(added)})" if added else "-"
    return ", ".join(seen) if len(seen) <= 3 else f"{seen[0]} ... {seen[-1]} ({len(seen)})"


def _cpus(rs: list[dict]) -> str:
    """The CPUs of the runs and the range of their calibrations (frames/s)."""
    names = list(dict.fromkeys(r["cpu"] for r in rs if r.get("cpu")))
    short = [n.replace("(R)", "").replace(" Processor", "").replace("  ", " ") for n in names]
    cals = sorted(r["calibration"] for r in rs if r.get("calibration"))
    cal = ""
    if cals:
        cal = (
            f"{cals[0]:,.0f}"
            if len(cals) == 1 or cals[0] == cals[-1]
            else (f"{cals[0]:,.0f}-{cals[-1]:,.0f}")
        )
        cal = f" ({cal})"
    return ("; ".join(short) or "-") + cal


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def batches_of(rows: list[dict]) -> list[str]:
    """The batches of ``rows``: the main set first, then by their first date."""
    first: dict[str, str] = {}
    for r in rows:
        b = r.get("batch", "")
        first[b] = min(first.get(b, "9999"), r.get("date") or r.get("recorded_on") or "9999")
    return sorted(first, key=lambda b: (b != "", first[b], b))


def page_batch(rows: list[dict]) -> str:
    """The batch a suite's page reports: the main set where it has runs, else the batch with
    the most runs (the latest of those)."""
    batches = batches_of(rows)
    if "" in batches:
        return ""
    return max(reversed(batches), key=lambda b: sum(r.get("batch", "") == b for r in rows))


def suite_table(suite: str, rows: list[dict]) -> list[str]:
    """A suite's table for docs/benchmarks.md: a row a task and batch."""
    lines = [
        "| task | set | seeds reached / tried | final evaluation: median; IQM [95% CI] "
        "| last 100 training episodes at the end (median) | time to target (median) "
        "| CPU (calibration, frames/s) | date | commit | command |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    anchored = set()
    for task in tasks_of(suite, rows):
        for batch in batches_of(rows):
            rs = store.select(rows, suite, batch, task.name)
            if not rs:
                continue
            finals = [r["final_eval"] for r in rs]
            lo, hi = interval(finals)
            means = [r["final_train_mean"] for r in rs if r.get("final_train_mean") is not None]
            times = [r["solve_seconds"] for r in rs if r.get("solved")]
            label = f"`{batch}`" if batch else "main"
            if batch in BATCH_ANCHORS and batch not in anchored:
                anchored.add(batch)
                label = f'<a id="{BATCH_ANCHORS[batch]}"></a>{label}'
            cmd = suite_command(suite, seeds_held(rs), batch, [task.name])
            dates = _span([r["date"] for r in rs if r.get("date")])
            if dates == "-":
                dates = _span([r["recorded_on"] for r in rs if r.get("recorded_on")])
                dates = "-" if dates == "-" else f"recorded {dates}"
            lines.append(
                f"| {task.name} | {label} | {sum(reached(r) for r in rs)} / {len(rs)} | "
                f"{fmt(statistics.median(finals))}; {fmt(iqm(np.asarray(finals)))} "
                f"[{fmt(lo)}, {fmt(hi)}]{normalised(task, finals)} | "
                f"{fmt(statistics.median(means)) if means else '-'} | "
                f"{_minutes(statistics.median(times)) if times else '-'} | {_cpus(rs)} | "
                f"{dates} | {_commits(rs)} | `{cmd}` |"
            )
    return lines


def docs_page(rows: list[dict], more: dict[str, tuple[list[dict], list[str]]] | None = None) -> str:
    """docs/benchmarks.md: the results store as a table a suite; for a suite with an estimate
    (atari-5) its line too, from its runs and those ``more`` reuses for it (with their notes)."""
    more = more or {}
    suites = [s for s in SUITES if store.select(rows, s) or s in PLANS]
    suites += sorted({r["suite"] for r in rows if r.get("suite")} - set(SUITES))
    others = [r for r in rows if not r.get("suite")]
    lines = [
        "# Benchmarks",
        "",
        "<!-- Generated by `python benchmarks/suite.py --docs` from benchmarks/results.jsonl: "
        "edit the suites (benchmarks/suites.toml) or the generator, not this page. -->",
        "",
        f"Every run of the benchmark suite, from the results store (`benchmarks/results.jsonl`, "
        f"{len(rows)} runs). Regenerate this page and the suite pages with "
        "`python benchmarks/suite.py --docs`.",
        "",
        "## The benchmark suite",
        "",
        "`python benchmarks/suite.py SUITE --seeds N` trains each task of a suite "
        "(`benchmarks/suites.toml`) on seeds 0..N-1, one whole `asyncrl train` process at a "
        "time, evaluates the model each run keeps on starts no run saw, and appends the run to "
        "the store: an interrupted suite resumes where it stopped. `--batch NAME` keeps a set "
        "of runs of its own (the same suite on another CPU or commit); each row below is one "
        "task of one set. A row's command reruns it on the checkout at hand (its commit is the "
        "one the runs trained on), or with `--report-only` writes its per-seed report and "
        "learning curves.",
        "",
        "- **Seeds reached / tried**: the runs whose stop rule confirmed the target, or whose "
        "kept model's final evaluation is at it (a timed task's bar, which no stop rule "
        "watches), out of those run.",
        "- **Final evaluation**: the kept model's mean return over the task's evaluation "
        "episodes; the median over seeds and the interquartile mean (IQM: the mean of the "
        "middle half, rliable's recommendation) with its 95% bootstrap interval; on Atari, the "
        "median's human-normalised score.",
        "- **CPU (calibration)**: the CPU each run recorded and the machine's speed then "
        "(`python benchmarks/calibrate.py`, frames/s): the same code runs 1.5x faster on one "
        "allocation than on another, so compare timed figures beside it.",
        "- **Date and commit**: the UTC day and the commit each run started on. Runs recorded "
        "before 2026-11-28 have neither: their commit is the one that added their file to "
        "`benchmarks/results/`, which held each run's files until commit 8efeca9 (a row's "
        "`source` names its file there, for `git show 8efeca9:PATH`).",
        "- The per-seed tables and learning curves of each suite's page name the set they "
        "show; `--report-only --batch NAME` draws another's.",
        "",
        "Other scripts of the harness print their figures with the command that reproduces "
        "them: " + "; ".join(f"`benchmarks/{name}`, {what}" for name, what in OTHER_SCRIPTS) + ".",
        "",
        "| suite | what it runs | tasks | runs |",
        "|---|---|---|---|",
    ]
    for s in SUITES:
        n = len(store.select(rows, s))
        name = f"[{s}](#{s})" if s in suites else s
        theirs = len(more.get(s, ([], []))[0])
        count = f"{n or 'none yet'}" + (f"; {theirs} reused" if theirs else "")
        lines.append(f"| {name} | {ABOUT.get(s, '')} | {len(SUITES[s])} | {count} |")
    for s in suites:
        if s in SUITES:
            continue
        lines.append(f"| [{s}](#{s}) | no longer defined | - | {len(store.select(rows, s))} |")
    for s in suites:
        srows = store.select(rows, s)
        batch = page_batch(srows) if srows else ""
        shown = f"the set `{batch}`" if batch else "the main set"
        lines += ["", *(f'<a id="{a}"></a>' for a in SUITE_ANCHORS.get(s, ())), f"## {s}", ""]
        about = ABOUT.get(s) or "a suite no longer in benchmarks/suites.toml"
        theirs, notes = more.get(s, ([], []))
        if s in PLANS:
            page = f": [suite-{s}.md](suite-{s}.md)" if srows or theirs else ": none yet"
            seeds = SEEDS.get(s, 5)
            own = [r for r in srows if r.get("batch", "") == batch]
            lines += [
                f"{about[0].upper()}{about[1:]}. Per seed, with the learning curves{page}.",
                "",
                f"**{atari5.headline(estimate_of(s, own + theirs, seeds), seeds)}**",
                "",
                *(f"- {n}." for n in notes),
                *([""] if notes else []),
                f"`{suite_command(s, seeds)} --report-only` prints it; [Atari-5](atari.md#atari-5) "
                "says what it estimates and how.",
            ]
            if srows:
                lines += ["", *suite_table(s, srows)]
            continue
        lines += [
            f"{about[0].upper()}{about[1:]}. Per seed, with "
            f"the learning curves of {shown}: [suite-{s}.md](suite-{s}.md).",
            "",
            *suite_table(s, srows),
        ]
    if others:
        lines += [
            "",
            "## Other runs",
            "",
            "Runs of one-off investigations, kept with their learning curves (no suite: their "
            "set names the investigation; its notes are in git at commit 8efeca9, "
            "`benchmarks/results/SET/README.md`).",
            "",
            "| set | env | runs | last 100 training episodes at the end | date |",
            "|---|---|---|---|---|",
        ]
        for batch in batches_of(others):
            rs = [r for r in others if r.get("batch", "") == batch]
            envs = ", ".join(dict.fromkeys(r.get("env", "?") for r in rs))
            means = ", ".join(fmt(r.get("final_train_mean")) for r in rs)
            dates = _span(
                [
                    r.get("date") or r.get("recorded_on")
                    for r in rs
                    if r.get("date") or r.get("recorded_on")
                ]
            )
            lines.append(f"| `{batch}` | {envs} | {len(rs)} | {means} | {dates} |")
    return "\n".join(lines) + "\n"


def write_docs(rows: list[dict], out_dir: Path) -> list[Path]:
    """docs/benchmarks.md and a page (with its plot) for each suite with runs."""
    written, more = [], {}
    for s in dict.fromkeys([*(r["suite"] for r in rows if r.get("suite")), *PLANS]):
        srows = store.select(rows, s)
        batch = page_batch(srows) if srows else ""
        shown = [r for r in srows if r.get("batch", "") == batch]
        notes: list[str] = []
        if s in PLANS:  # with the runs it reuses, where its set has none of its own
            more[s] = reused(s, batch, rows)
            shown, notes = shown + more[s][0], more[s][1]
        if shown:
            seeds = SEEDS.get(s, 0)
            stem = f"suite-{s}"
            written.append(report(s, tasks_of(s, shown), shown, seeds, out_dir, batch, stem, notes))
    page = out_dir / "benchmarks.md"
    page.write_text(docs_page(rows, more))
    return [page, *written]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("suite", nargs="?", choices=sorted(SUITES))
    p.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="seeds 0..N-1 of each task (default: the suite's seeds in suites.toml, else 5)",
    )
    p.add_argument(
        "--from-seed",
        type=int,
        default=0,
        help="run seeds K..N-1 only (one seed on this machine, the others' runs elsewhere)",
    )
    p.add_argument("--tasks", nargs="+", default=None, help="only these tasks of the suite")
    p.add_argument(
        "--batch",
        default="",
        help="a set of runs of its own (the suite on another CPU or commit; default: the "
        "suite's main set): resumes, --from-run and the report are within it",
    )
    p.add_argument(
        "--store",
        type=Path,
        default=store.STORE,
        help="the results store (default: benchmarks/results.jsonl)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where the report goes (default: benchmarks/results/, untracked; docs/ with --docs)",
    )
    p.add_argument(
        "--report-only",
        action="store_true",
        help="write the report of the batch's runs in the store (naming the seeds they hold), "
        "run nothing",
    )
    p.add_argument(
        "--docs",
        action="store_true",
        help="regenerate docs/benchmarks.md and the suite pages docs/suite-*.md (and their "
        "plots) from the store, run nothing",
    )
    p.add_argument(
        "--from-run",
        type=Path,
        metavar="RUN_DIR",
        help="measure this finished run of the task's command (its one --tasks, --seed) "
        "instead of training: a copy of the run directory of a suite stopped before it measured "
        "it, or of the same command run by hand; its whole-process time is then the run's "
        "summary's wall time",
    )
    p.add_argument("--seed", type=int, default=None, help="the seed of the --from-run run")
    p.add_argument(
        "--no-reuse",
        action="store_true",
        help="neither count nor report the runs of other suites that suites.toml reuses for "
        "this suite's tasks (atari-5's Q*bert): run them and report the suite's own",
    )
    p.add_argument(
        "--no-speed",
        action="store_true",
        help="do not measure the machine's speed (about a minute, once per invocation that "
        "trains) to keep with the results",
    )
    args = p.parse_args()
    if args.docs:
        for path in write_docs(store.read(args.store), args.out or ROOT / "docs"):
            print(path)
        return
    if args.suite is None:
        p.error("name a suite (or --docs)")
    if args.seeds is None:
        args.seeds = SEEDS.get(args.suite, 5)
    tasks = [t for t in SUITES[args.suite] if args.tasks is None or t.name in args.tasks]
    key = (args.suite, args.batch)

    def held() -> tuple[list[dict], list[str]]:
        """The batch's runs, and the runs reused for its tasks, with a line for each reuse."""
        everything = store.read(args.store)
        own = store.select(everything, *key)
        if args.no_reuse or args.suite not in PLANS:
            return own, []
        more, notes = reused(args.suite, args.batch, everything)
        return own + more, notes

    def done() -> set[tuple[str, int]]:
        return {(r["task"], r["seed"]) for r in held()[0]}

    if args.from_run is not None:
        if len(tasks) != 1 or args.seed is None:
            p.error("--from-run: name its one task with --tasks and its seed with --seed")
        task, seed = tasks[0], args.seed
        if (task.name, seed) in done():
            p.error(f"--from-run: {args.store} holds {task.name} seed {seed} of this batch")
        wall = json.loads((args.from_run / "summary.json").read_text())["wall_seconds"]
        cmd = shown(command(task, seed, Path("RUN_DIR")))
        r = measure(task, seed, args.from_run, cmd, wall)
        r["process_seconds_from"] = "the run's summary.json wall_seconds (--from-run)"
        store.append(args.store, {"suite": args.suite, "batch": args.batch, **r})
        print(f"{task.name} seed {seed}: final eval {r['final_eval']:.1f} ({r['model']})")
    elif not args.report_only:
        speed = None
        for task in tasks:
            for seed in range(args.from_seed, args.seeds):
                if (task.name, seed) in done():
                    continue  # finished before an interruption: never rerun
                if speed is None and not args.no_speed:
                    speed = machine_speed()
                    print(f"machine speed: {speed['frames_per_second']:,.0f} frames/s", flush=True)
                r = run_one(task, seed, speed)
                store.append(args.store, {"suite": args.suite, "batch": args.batch, **r})
                print(
                    f"{task.name} seed {seed}: solved={r['solved']} "
                    f"final eval {r['final_eval']:.1f} ({r['model']}), "
                    f"{r['process_seconds']:.1f} s",
                    flush=True,
                )
    rows, notes = held()
    out = args.out or ROOT / "benchmarks" / "results"
    tasks = tasks_of(args.suite, rows)
    print(report(args.suite, tasks, rows, args.seeds, out, args.batch, notes=notes))
    if args.suite in PLANS:
        for line in notes:
            print(line)
        print(atari5.headline(estimate_of(args.suite, rows, args.seeds), args.seeds))


if __name__ == "__main__":
    main()
