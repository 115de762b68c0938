"""``asyncrl tune``: a search of a run's settings with Optuna (TPE, median pruning), as
rl-baselines3-zoo's ``--optimize`` does, written as a file that ``asyncrl train --config``
reads.

The tune's directory holds the study (``study.db``, SQLite), the space it searches
(``space.toml``), each trial's runs (``trials/NNNN-sK``, one ``asyncrl train`` process a seed,
with its settings in ``trials/NNNN.toml`` and its output in ``trials/NNNN-sK.log``), the
best setting (``best.toml``: the whole resolved configuration, env and algorithm included),
a table and a plot of the trials (``trials.csv``, ``trials.png``).

>>> from asyncrl.tune import tune
>>> tune("runs/tune", trials=20, train_args=["--env", "CartPole-v1"])   # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import csv
import io
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from asyncrl.config import Config
from asyncrl.configfile import config_toml
from asyncrl.errors import UserError
from asyncrl.rundir import RunDir, write_atomically
from asyncrl.tune.objective import Goal, Pruned, Stopped, run_trial
from asyncrl.tune.process import Process, RemoteProcess, TrainProcess, TrialHost
from asyncrl.tune.space import Space, default_space, describe, parse_space, read_space

if TYPE_CHECKING:
    from asyncrl.envs import EnvInfo

#: the study's name in its storage
STUDY = "asyncrl-tune"
#: trials the sampler draws at random before TPE models them, and that must complete before the
#: pruner compares: one count for both, as rl-baselines3-zoo's exp_manager.py has it (its
#: multivariate TPE and median pruner too); 5, a quarter of a 20-trial tune
STARTUP_TRIALS = 5


@dataclass
class _Tune:
    """A tune's fixed part: where it lives, the run's settings, the space, the goal, the seeds."""

    dir: Path
    cfg: Config
    info: EnvInfo
    preset: str
    space: Space
    seeds: list[int]

    @property
    def goal(self) -> Goal:
        return Goal.of(self.cfg, self.info)

    @property
    def storage(self) -> str:
        return f"sqlite:///{(self.dir / 'study.db').resolve()}"

    @property
    def trials_dir(self) -> Path:
        return self.dir / "trials"

    def attrs(self) -> dict[str, Any]:
        """What ``--resume`` needs, kept with the study."""
        return {
            "config": self.cfg.to_dict(),
            "preset": self.preset,
            "space": self.space.text,
            "space_source": self.space.source,
            "seeds": self.seeds,
        }


def _optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise UserError(
            "asyncrl tune needs Optuna: pip install -c constraints.txt -e '.[tune]'"
        ) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def tune(
    run_dir: str | Path,
    *,
    trials: int,
    train_args: Sequence[str] = (),
    space: str | Path | None = None,
    seeds: int = 1,
    resume: bool = False,
    ray_address: str | None = None,
    parallel: int | None = None,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Search the settings of the run ``train_args`` describes (``asyncrl train``'s options:
    ``--env``, ``--steps`` or ``--time-limit``, ``--config FILE``, ...) over ``space`` (a TOML
    file; default: the one shipped for the run's preset and algorithm), until the study in
    ``run_dir`` holds ``trials`` finished (complete or pruned) trials, each trained on
    ``seeds`` seeds; write the best setting to ``run_dir/best.toml``.

    ``resume``: go on with the study in ``run_dir`` (its own settings and space; ``trials`` is
    the new total). ``ray_address``: run ``parallel`` trials at a time as Ray actors on that
    cluster (``"local"``: one started on this machine); without it, ``parallel`` (default 1)
    trials at a time here. Progress lines go to ``echo``. Returns the best trial's number,
    value and setting, and the counts of trials. Bad input raises :class:`UserError` before
    anything is written.
    """
    optuna = _optuna()
    if trials < 1:
        raise UserError(f"--trials: must be >= 1, got {trials}")
    if parallel is not None and parallel < 1:
        raise UserError(f"--parallel: must be >= 1, got {parallel}")
    where = Path(run_dir)
    if resume:
        given = {
            "--space": space is not None,
            "--seeds": seeds != 1,
            "--": bool(train_args),  # (the CLI names --env, --steps and --time-limit itself)
        }
        for flag, was in given.items():
            if was:
                what = flag if flag != "--" else "the options after --"
                raise UserError(
                    f"{flag}: a resumed tune keeps its settings and space (kept in "
                    f"{where / 'study.db'}): drop {what}"
                )
        t = _resumed(where, optuna)
    else:
        t = _new(where, train_args, space, seeds)
    with RunDir(t.dir).locked():
        study = _study(t, optuna, create=not resume)
        done = _finished(study, optuna)
        if resume and done >= trials:
            raise UserError(
                f"--trials {trials}: the study in {t.dir} has {done} finished trials already; "
                "give a larger --trials to add more (nothing was changed)"
            )
        _close_stale(study, optuna)
        _header(t, study, done, trials, echo)
        try:
            with _trials_on(t, ray_address) as (make_host, cluster_parallel):
                jobs = parallel or cluster_parallel
                _drive(t, study, optuna, trials - done, jobs, make_host, echo)
        except BaseException:  # Ctrl-C too: the plot of the trials so far, then on out
            with contextlib.suppress(Exception):
                _plot(t, study, optuna)
            raise
        _plot(t, study, optuna)
        return _ending(t, study, optuna, echo)


# ---------------------------------------------------------------------- the tune's directory


def _new(where: Path, train_args: Sequence[str], space: str | Path | None, seeds: int) -> _Tune:
    """A new tune's settings, all checked before its directory is made."""
    if (where / "study.db").exists():
        raise UserError(
            f"--run-dir: {where} holds a study already; continue it with --resume, or choose a "
            "new directory (nothing was changed)"
        )
    if where.exists() and (not where.is_dir() or any(where.iterdir())):
        raise UserError(
            f"--run-dir: {where} already exists and is not empty; choose a new directory "
            "(nothing was overwritten)"
        )
    if seeds < 1:
        raise UserError(f"--seeds: must be >= 1, got {seeds}")
    cfg, info, preset = fixed_setting(train_args)
    s = read_space(space) if space is not None else default_space(preset, cfg.algo)
    s.check(cfg, info.action.kind)
    t = _Tune(where, cfg, info, preset, s, [cfg.seed + k for k in range(seeds)])
    try:
        t.trials_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--run-dir: cannot create {where}: {e.strerror}") from None
    (t.dir / "space.toml").write_text(s.text)
    return t


def fixed_setting(train_args: Sequence[str]) -> tuple[Config, EnvInfo, str]:
    """The run a tune searches the settings of, from ``asyncrl train``'s options: its
    validated config, its env's probe and its preset's name."""
    from asyncrl.cli import parse_train_options, resolve

    ns = parse_train_options(list(train_args))
    for flag in ("resume", "run_dir"):
        if getattr(ns, flag, None) is not None:
            raise UserError(
                f"after --: --{flag.replace('_', '-')}: each trial trains a new run in a "
                "directory of its own under the tune's: drop it"
            )
    cfg, info = resolve(ns)
    return cfg, info, ns.preset or info.preset


def _resumed(where: Path, optuna: Any) -> _Tune:
    from asyncrl.envs import probe_env

    if not (where / "study.db").is_file():
        raise UserError(f"--resume: {where} holds no study (study.db); start one without --resume")
    try:
        study = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{where.resolve()}/study.db")
        attrs = study.user_attrs["asyncrl"]
    except Exception as e:
        raise UserError(f"--resume: cannot read the study in {where}/study.db ({e})") from None
    cfg = Config.from_dict(attrs["config"]).validate()
    info = probe_env(cfg.env, cfg.env_kwargs_dict)
    space = parse_space(attrs["space"], attrs["space_source"]).check(cfg, info.action.kind)
    return _Tune(where, cfg, info, attrs["preset"], space, list(attrs["seeds"]))


def _study(t: _Tune, optuna: Any, create: bool) -> Any:
    """The study: TPE with :data:`STARTUP_TRIALS` random trials first (seeded by the trials so
    far: a resumed study draws new ones) and the median pruner past the first fifth of a run's
    budget. A new study starts with the run's own setting (its preset's), where the space
    holds its values: the baseline the others are read against."""
    from asyncrl.tune.objective import BUCKETS

    sampler_seed = t.cfg.seed
    if not create:
        sampler_seed += len(optuna.load_study(study_name=STUDY, storage=t.storage).trials)
    study = optuna.create_study(
        study_name=STUDY,
        storage=t.storage,
        direction=t.goal.direction,
        load_if_exists=not create,
        sampler=optuna.samplers.TPESampler(
            n_startup_trials=STARTUP_TRIALS, multivariate=True, seed=sampler_seed
        ),
        pruner=optuna.pruners.MedianPruner(
            n_startup_trials=STARTUP_TRIALS, n_warmup_steps=BUCKETS // 5
        ),
    )
    if create:
        study.set_user_attr("asyncrl", t.attrs())
    states = optuna.trial.TrialState
    finished = study.get_trials(states=(states.COMPLETE, states.PRUNED))
    tried = any(tr.user_attrs.get("baseline") for tr in finished)
    waiting = study.get_trials(states=(states.WAITING,))
    if not tried and not waiting:  # (again where Ctrl-C stopped it)
        baseline = t.space.encode(t.cfg)
        if baseline:
            study.enqueue_trial(baseline, user_attrs={"baseline": True})
    return study


def _finished(study: Any, optuna: Any) -> int:
    states = optuna.trial.TrialState
    return len(study.get_trials(deepcopy=False, states=(states.COMPLETE, states.PRUNED)))


def _close_stale(study: Any, optuna: Any) -> None:
    """Trials left running by a tune that was killed (no Ctrl-C to close them): failed."""
    for tr in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        with contextlib.suppress(Exception):
            study.tell(tr.number, state=optuna.trial.TrialState.FAIL)


# ---------------------------------------------------------------------- running the trials


@contextlib.contextmanager
def _trials_on(t: _Tune, ray_address: str | None) -> Iterator[tuple[Callable[[], Any], int]]:
    """Where trials run: here (no host: a process each), or on a Ray cluster, each trial an
    actor holding the CPUs its run uses (``--workers``, else a whole node's: the smallest
    node's count). Yields the host maker and the trials the cluster runs at once."""
    if ray_address is None:
        yield (lambda: None), 1
        return
    from asyncrl.backends.ray.cluster import cluster_cpus, ray_cluster, require_ray
    from asyncrl.settings import RaySettings

    if t.cfg.backend == "ray":
        raise UserError(
            "--ray-address: a trial on a Ray node trains on that node, with --backend "
            "processes or threads: drop --backend ray (or --ray-address, to tune Ray runs here)"
        )

    ray = require_ray()
    address = None if ray_address == "local" else ray_address
    with ray_cluster(cast(Any, RaySettings(address=address))):
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        smallest = min(int(n["Resources"].get("CPU", 1)) for n in nodes)
        cpus = t.cfg.workers or max(1, smallest)
        if cpus > smallest and t.cfg.workers:
            raise UserError(
                f"--workers {cpus}: the cluster's smallest node has {smallest} CPUs, and a "
                f"trial's run is one process on one node: give --workers {smallest} or fewer"
            )
        host = ray.remote(num_cpus=cpus)(TrialHost)
        yield host.remote, max(1, cluster_cpus() // cpus)


def _drive(
    t: _Tune,
    study: Any,
    optuna: Any,
    count: int,
    jobs: int,
    make_host: Callable[[], Any],
    echo: Callable[[str], None],
) -> None:
    """Run ``count`` trials, ``jobs`` at a time (threads, each following its trial's runs). A
    Ctrl-C stops every run under way cleanly, marks their trials failed and is raised again;
    so is the first :class:`RunFailed` after the others have stopped."""
    stop = threading.Event()
    lock = threading.Lock()
    left = [count]
    errors: list[BaseException] = []

    def take() -> bool:
        with lock:
            if left[0] <= 0 or stop.is_set():
                return False
            left[0] -= 1
            return True

    def loop() -> None:
        while take():
            _one_trial(t, study, optuna, make_host, stop, lock, echo)

    if jobs <= 1:
        loop()
        return

    def guarded() -> None:
        try:
            loop()
        except Stopped:
            pass
        except BaseException as e:
            errors.append(e)
            stop.set()

    threads = [threading.Thread(target=guarded, daemon=True) for _ in range(min(jobs, count))]
    for th in threads:
        th.start()
    try:
        while any(th.is_alive() for th in threads):
            for th in threads:
                th.join(0.2)
    except KeyboardInterrupt:
        stop.set()
        for th in threads:
            th.join()
        raise
    if errors:
        raise errors[0]


def _one_trial(
    t: _Tune,
    study: Any,
    optuna: Any,
    make_host: Callable[[], Any],
    stop: threading.Event,
    lock: threading.Lock,
    echo: Callable[[str], None],
) -> None:
    states = optuna.trial.TrialState
    with lock:  # one at a time: two threads can both claim the enqueued trial over SQLite
        trial = study.ask()
    t0 = time.monotonic()
    values = t.space.sample(trial)
    name = f"{trial.number:04d}"
    try:
        cfg = t.space.config(t.cfg, values, t.info.action.kind).check_env(t.info)
    except UserError as e:  # a combination the space allows and the run does not
        trial.set_user_attr("reason", f"not a valid setting: {e}")
        study.tell(trial, state=states.PRUNED)
        with lock:
            _finished_trial(t, study, optuna, trial.number, values, time.monotonic() - t0, echo)
        return
    text = config_toml(cfg, f"trial {trial.number} of the tune in {t.dir}")
    config = t.trials_dir / f"{name}.toml"
    config.write_text(text)
    host = make_host()

    def make_process(k: int, seed: int) -> Process:
        run_dir, log = t.trials_dir / f"{name}-s{k}", t.trials_dir / f"{name}-s{k}.log"
        if host is None:
            return TrainProcess(config, run_dir, seed, log, t.preset)
        return RemoteProcess(host, text, run_dir, seed, log, t.preset)

    try:
        value, summaries = run_trial(trial, t.goal, t.seeds, make_process, stop)
    except Pruned as e:
        trial.set_user_attr("reason", str(e))
        study.tell(trial, state=states.PRUNED)
    except BaseException as e:  # Ctrl-C, the tune stopping, a run that failed unexplained
        trial.set_user_attr(
            "reason", "stopped" if isinstance(e, Stopped | KeyboardInterrupt) else str(e)
        )
        with contextlib.suppress(Exception):
            study.tell(trial, state=states.FAIL)
        raise
    else:
        solved = sum(bool(s.get("solved")) for s in summaries)
        trial.set_user_attr("solved", solved)
        trial.set_user_attr("runs", [t.goal.cost(s) for s in summaries])
        study.tell(trial, value)
    finally:
        if host is not None:
            _release(host)
    with lock:
        _finished_trial(t, study, optuna, trial.number, values, time.monotonic() - t0, echo)


def _release(host: Any) -> None:
    """A trial's Ray actor: its folder on the node removed, then the actor ended."""
    import ray

    with contextlib.suppress(Exception):
        ray.get(host.close.remote())
    with contextlib.suppress(Exception):
        ray.kill(host)


def _finished_trial(
    t: _Tune,
    study: Any,
    optuna: Any,
    number: int,
    values: dict[str, Any],
    seconds: float,
    echo: Callable[[str], None],
) -> None:
    """A trial's line, and the files that follow the study: best.toml where it is the best
    yet, and trials.csv (trials.png is drawn when the tune ends)."""
    states = optuna.trial.TrialState
    trial = study.trials[number]
    goal = t.goal
    if trial.state == states.COMPLETE:
        what = goal.show(trial.value)
        if goal.target is not None:
            what += f" ({trial.user_attrs.get('solved', 0)}/{len(t.seeds)} solved)"
    else:
        what = str(trial.user_attrs.get("reason", trial.state.name.lower()))
    best = _best(study, optuna)
    if best is not None and best.number == number:
        _write_best(t, best)
    best_text = "-" if best is None else f"{goal.show(best.value)} (trial {best.number})"
    base = " [the run's own setting]" if trial.user_attrs.get("baseline") else ""
    echo(
        f"trial {number:>3}  {what}  | best {best_text} | {describe(t.space, values)}{base} "
        f"| {seconds:,.0f} s"
    )
    _write_table(t, study, optuna)


def _best(study: Any, optuna: Any) -> Any:
    if not study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        return None
    return study.best_trial


def _write_best(t: _Tune, best: Any) -> None:
    """best.toml: the whole resolved setting of the best trial, as ``--config`` reads it."""
    values = t.space.decode(best.params)
    cfg = t.space.config(t.cfg, values, t.info.action.kind)
    solved = best.user_attrs.get("solved")
    score = t.goal.show(best.value)
    if t.goal.target is not None:
        score += f" to {t.goal.target:g} ({solved}/{len(t.seeds)} seeds solved)"
    # under a preset the env does not pick, the options this file leaves unset are that
    # preset's: name it (a file cannot)
    named = "" if t.preset == t.info.preset else f" --preset {t.preset}"
    header = (
        f"asyncrl tune's best setting for {cfg.env} ({cfg.algo}): trial {best.number}, "
        f"{score}\nover seeds {', '.join(map(str, t.seeds))}; the tuned options: "
        f"{describe(t.space, values)}\n"
        f"asyncrl train --config {t.dir / 'best.toml'}{named} trains it"
    )
    text = config_toml(cfg, header).encode()
    write_atomically(t.dir / "best.toml", lambda f: f.write(text))


def _rows(t: _Tune, study: Any, optuna: Any) -> list[dict[str, Any]]:
    states = optuna.trial.TrialState
    rows = []
    for tr in study.get_trials(deepcopy=False, states=(states.COMPLETE, states.PRUNED)):
        rows.append(
            {
                "trial": tr.number,
                "state": tr.state.name.lower(),
                "value": tr.value if tr.state == states.COMPLETE else None,
                "solved": tr.user_attrs.get("solved"),
                "reason": tr.user_attrs.get("reason", ""),
                "baseline": bool(tr.user_attrs.get("baseline")),
                **t.space.decode(tr.params),
            }
        )
    return rows


def _write_table(t: _Tune, study: Any, optuna: Any) -> None:
    rows = _rows(t, study, optuna)
    buf = io.StringIO()
    names = ["trial", "state", "value", "solved", "reason", "baseline", *t.space.names]
    w = csv.DictWriter(buf, names, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if v is None else v) for k, v in r.items()})
    data = buf.getvalue().encode()
    write_atomically(t.dir / "trials.csv", lambda f: f.write(data))


def _plot(t: _Tune, study: Any, optuna: Any) -> None:
    from asyncrl.plot import plot_trials

    rows = _rows(t, study, optuna)
    goal = t.goal
    if goal.target is None:
        label = "mean final evaluation return"
    else:
        what = "env steps" if goal.unit == "steps" else "seconds"
        label = f"mean {what} to {goal.target:g}"
    plot_trials(
        [(r["trial"], r["value"], r["baseline"]) for r in rows],
        t.dir / "trials.png",
        label,
        minimise=goal.direction == "minimize",
        title=f"asyncrl tune: {t.cfg.algo} on {t.cfg.env}",
    )


# ---------------------------------------------------------------------- what the user reads


def _header(t: _Tune, study: Any, done: int, trials: int, echo: Callable[[str], None]) -> None:
    goal = t.goal
    budget = (
        f"{int(goal.budget):,} steps a run" if goal.unit == "steps" else f"{t.cfg.time_limit} a run"
    )
    echo(
        f"asyncrl tune: {t.cfg.algo} on {t.cfg.env} (preset {t.preset}), {len(t.space.dims)} "
        f"options of {t.space.source}"
    )
    echo(
        f"objective: {goal.describe()}, over {len(t.seeds)} seed(s) a trial, {budget}; "
        f"study {t.dir / 'study.db'}: {done} of {trials} trials finished"
    )


def _ending(t: _Tune, study: Any, optuna: Any, echo: Callable[[str], None]) -> dict[str, Any]:
    states = optuna.trial.TrialState
    complete = len(study.get_trials(deepcopy=False, states=(states.COMPLETE,)))
    pruned = len(study.get_trials(deepcopy=False, states=(states.PRUNED,)))
    best = _best(study, optuna)
    out: dict[str, Any] = {"complete": complete, "pruned": pruned, "run_dir": str(t.dir)}
    if best is None:
        echo(f"no trial completed ({pruned} pruned): no best.toml written")
        return out | {"best_trial": None}
    values = t.space.decode(best.params)
    best_file = t.dir / "best.toml"
    _write_best(t, best)  # (again: a resumed tune whose best came before it)
    echo(
        f"best: trial {best.number}, {t.goal.show(best.value)}: {describe(t.space, values)}\n"
        f"{best_file} (asyncrl train --config {best_file}); {t.dir / 'trials.png'}, "
        f"{t.dir / 'trials.csv'}"
    )
    return out | {
        "best_trial": best.number,
        "best_value": best.value,
        "best_setting": values,
        "best_file": str(best_file),
    }


__all__ = ["STUDY", "fixed_setting", "tune"]
