"""The main process of a run, as its steps: read the config (or the run to resume), probe the
env (once: or take the caller's probe), open the run's cluster (Ray started or joined, for a ray
run), create (or restore) the global state, run the workers under the supervisor, save the
model, the final checkpoint and the summary, and close the cluster."""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from asyncrl.algos import Algorithm, make_algorithm
from asyncrl.algos.base import model_spec_for
from asyncrl.backends import cluster_for, make_run, worker_count
from asyncrl.callbacks import Callback, Hooks, TrainingEnd, TrainingStart
from asyncrl.checkpoint import load_checkpoint, save_checkpoint
from asyncrl.config import Config, MonitorSection, SupervisorSection, reset_misfits
from asyncrl.configfile import config_toml
from asyncrl.envs import EnvInfo, parse_env_kwargs, probed
from asyncrl.errors import Interrupted, TrainingError, UserError
from asyncrl.evaluation import Evaluation, Evaluator
from asyncrl.heap import return_freed_memory
from asyncrl.messages import GlobalSnapshot
from asyncrl.models import (
    ModelSpec,
    bind_obs_stats,
    build_model,
    check_encoder,
    encoder_path,
    flatten_parameters,
)
from asyncrl.monitor import Monitor
from asyncrl.optim import rms_start, scheduled_lr
from asyncrl.parallel import processes_for, separate_envs, spare_cores
from asyncrl.presets import preset
from asyncrl.rescore import NOT_RESCORED, TimePlan, rescore_kept_model
from asyncrl.rundir import RunDir, write_atomically
from asyncrl.settings import Resumed
from asyncrl.state import GlobalState
from asyncrl.supervisor import Ended, Outcome, Supervisor

if TYPE_CHECKING:
    from asyncrl.tracking import WandbLogger


def train(
    cfg: Config | None = None,
    /,
    *,
    resume: str | Path | None = None,
    info: EnvInfo | None = None,
    callbacks: Callback | Iterable[Callback] | None = None,
    started: float | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """Train with ``cfg`` updated by ``overrides`` (no ``cfg``: the preset the env calls for,
    :func:`asyncrl.config.auto_preset`; A3C on CartPole-v1 by default).

    With ``resume=RUN_DIR``, continue that run from its last checkpoint (its config.json,
    updated by ``overrides``). ``info``: the env's probe, where the caller has made it
    (:func:`asyncrl.envs.probe_env`; the CLI does, to pick the preset): the env is not built
    again. A ``--backend ray`` run starts (or joins) Ray and, on its way out, ends (or leaves)
    it, unless it runs inside a :func:`asyncrl.backends.cluster_for` block that does, or on a
    Ray connection of the caller's. ``--time-limit`` bounds the call's whole time, the work
    after training included (the evaluation under way, the final one, the kept model's
    re-scoring: :mod:`asyncrl.rescore`), counted from ``started`` (a
    :func:`time.perf_counter` instant: the CLI's start; default: the call's). Returns the
    summary (also ``RUN_DIR/summary.json``). Bad input raises
    :class:`asyncrl.errors.UserError` before any file is written or changed, and a bad env or
    config before Ray starts.

    ``encoder``: an encoder class of your own (an ``nn.Module`` built as
    ``Class(observation_space)``, docs/spaces.md#your-own-encoder), or its import path
    ``"package.module:Class"``; the run records the path, which every process imports.

    ``callbacks``: a :class:`asyncrl.Callback` or several, called in this process on each
    episode, evaluation and interval of the learners' statistics; one that returns False stops
    the run as its budget would, with a checkpoint, and one that raises stops it and the
    exception propagates (docs/callbacks.md).
    """
    t0 = time.perf_counter() if started is None else started
    hooks = Hooks(callbacks)
    # a resumed run's directory is held from before its checkpoint is read (a new run's from
    # its making, in _run): a run still going could otherwise write a newer one meanwhile
    resumed = RunDir(Path(resume)) if resume is not None else None
    held: AbstractContextManager[None] = nullcontext()
    if resumed is not None and resumed.path.is_dir():
        held = resumed.locked()
    with held:
        return _train(cfg, resume, info, overrides, t0, hooks)


def _train(
    cfg: Config | None,
    resume: str | Path | None,
    info: EnvInfo | None,
    overrides: dict[str, Any],
    t0: float,
    hooks: Hooks,
) -> dict[str, Any]:
    # an encoder class given in Python is recorded by its import path (asyncrl.models.user)
    if overrides.get("encoder") is not None:
        overrides = {**overrides, "encoder": encoder_path(overrides["encoder"])}
    if cfg is not None and cfg.encoder is not None:
        cfg = dataclasses.replace(cfg, encoder=encoder_path(cfg.encoder))
    cfg, ckpt, info = _config(cfg, resume, info, overrides)
    algo = make_algorithm(cfg.algo, cfg.algo_settings(), info)
    spec = model_spec_for(cfg, algo.model_kind, info, cfg.reward_scale)
    if spec.encoder_class:  # built once here, on the env's space: before anything is written
        check_encoder(spec, cfg.backend)
    if ckpt is not None:  # a checkpoint that does not fit is bad input: refused before Ray starts
        fresh = GlobalState.create(cfg, spec, 1, algo.uses_target_network, shared=False)
        fresh.check_fits(ckpt["glob"], Path(str(cfg.run_dir)))
        # a run that has spent its budget would stop at once
        if cfg.steps <= ckpt["glob"].steps:
            raise UserError(
                f"--steps {cfg.steps:,}: {cfg.run_dir} has taken {ckpt['glob'].steps:,} steps "
                "already, and --steps is the run's whole budget; give more than that to train on"
            )
        limit, elapsed = cfg.time_limit_seconds(), ckpt["monitor"]["elapsed"]
        if limit is not None and elapsed >= limit:
            raise UserError(
                f"--time-limit {cfg.time_limit}: {cfg.run_dir} has run {elapsed / 60:.1f} "
                "minutes already (a resumed run's clock goes on); give a longer one to train on"
            )
    if cfg.track:
        from asyncrl.tracking import check_login

        check_login()
    with cluster_for(cfg) as cluster, _one_thread():
        return _run(cfg, ckpt, info, algo, spec, worker_count(cfg, cluster), t0, hooks)


@contextmanager
def _one_thread() -> Iterator[None]:
    """The main process's own PyTorch work (writing a model file, an evaluation) on one thread
    while the run lasts, as each worker's, and the caller's setting back after it. Its default,
    one OpenMP thread per core, oversubscribes cores the workers already fill: under load,
    building the network to write best_model.pt (orthogonal init of Atari's fc layer) held the
    supervisor, and with it Ctrl-C, for over 100 s."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _run(
    cfg: Config,
    ckpt: dict[str, Any] | None,
    info: EnvInfo,
    algo: Algorithm,
    spec: ModelSpec,
    n_workers: int,
    t0: float,
    hooks: Hooks,
) -> dict[str, Any]:
    """The run itself, on its cluster, in its directory: held while the run lasts (a resumed
    run's since train() began; a new one's from its making, here: :meth:`RunDir.locked`)."""
    best_on_disk = None
    with ExitStack() as held:
        if ckpt is not None and cfg.run_dir is not None:  # resuming: run_dir is the resumed one
            run_dir = RunDir(Path(cfg.run_dir))
            best_on_disk = _best_model_evaluation(run_dir)  # before any file of the run changes
        else:
            run_dir = RunDir.create(cfg.run_dir, cfg.env, cfg.algo)
            held.enter_context(run_dir.locked())
        state = GlobalState.create(cfg, spec, n_workers, algo.uses_target_network)
        if ckpt is not None:
            state.restore(ckpt["glob"])
        run_dir.write_json(run_dir.config, cfg.to_dict())
        # the same settings in sections, for a person and for --config
        header = f"asyncrl train --config {run_dir.path / 'config.toml'} trains this run again"
        text = config_toml(cfg, header).encode()
        write_atomically(run_dir.path / "config.toml", lambda f: f.write(text))
        lr_from = None if ckpt is None else ckpt["lr_from"]
        tracker = _tracker(cfg, run_dir)
        if tracker is not None:  # (a run that raises on its way closes it as failed)
            held.callback(tracker.finish, None, True)
        monitor = Monitor(
            run_dir,
            dataclasses.replace(cfg.section(MonitorSection), lr_from=lr_from),
            target_return=cfg.target_return
            if cfg.target_return is not None
            else info.reward_threshold,
            frames_per_step=info.frames_per_step,
            state=None if ckpt is None else ckpt["monitor"],
            hooks=hooks,
            sinks=() if tracker is None else (tracker,),
        )
        for name in monitor.short_files:
            monitor.log(
                f"{run_dir.path / name} holds less than the checkpoint recorded (deleted or cut "
                "short since): the resumed run goes on after its last whole row"
            )
        # best_model.pt can be newer than the checkpoint (the run crashed or diverged after it):
        # its evaluation is then of a later step than the checkpoint's best. (Not a higher mean:
        # a pair decides the kept model, and the kept model's score pools its later episodes.)
        if best_on_disk is not None and (
            monitor.best_eval is None or best_on_disk[1] > monitor.best_eval[1]
        ):
            monitor.best_eval = best_on_disk

        plan = _time_plan(cfg, t0, ckpt, n_workers)

        def write_checkpoint(glob: GlobalSnapshot, workers: dict[int, dict], restarts: int) -> None:
            payload = {"config": cfg.to_dict(), "spec": spec.to_dict(), "glob": glob}
            payload |= {"workers": workers, "monitor": monitor.state_dict(), "restarts": restarts}
            payload["plan"] = plan.state_dict()
            save_checkpoint(run_dir.path, payload)
            del payload
            return_freed_memory()  # the snapshots' and the pickle's blocks (asyncrl.heap)

        blank = build_model(spec)  # once: a model file is written from it (no init each time)

        def save_best(ev: Evaluation) -> None:
            assert ev.snapshot is not None
            best = {"global_step": ev.global_step, "mean": ev.mean, "episodes": len(ev.returns)}
            _save_params(run_dir.best_model, cfg, blank, spec, ev.snapshot, evaluation=best)

        # --precision auto is decided once, here, from this machine's CPU (the spec): every worker,
        # a restarted one and one on a Ray node with another CPU included, learns in the precision
        # the model files record. config.json keeps what was asked, so a resume decides again on
        # the machine it runs on (the parameters are float32 either way): the workers build the
        # model from the spec handed them. Each room gets its own section of the config.
        backend = cfg.backend_section()
        backend.lr_from = lr_from
        run = make_run(backend, info, spec, state)
        evaluator = _evaluator(cfg, spec, monitor.target, plan)
        if evaluator is not None:  # the kept model's score, which a new one must beat twice
            evaluator.bar = lambda: None if monitor.best_eval is None else monitor.best_eval[0]
        supervisor = Supervisor(
            cfg.section(SupervisorSection),
            run,
            monitor,
            write_checkpoint,
            ckpt["restarts"] if ckpt else 0,
            evaluator=evaluator,
            save_best=save_best,
            plan=plan,
        )
        steps_at_start, t_start = state.steps(), time.perf_counter()
        # each worker resumes its own state (RNG, envs, algorithm state) if the worker count is kept
        # and as many envs each (a worker's state holds its envs)
        same_workers = (
            ckpt is not None
            and ckpt["glob"].counters.shape == state.counters.shape
            and ckpt.get("config", {}).get("envs_per_worker") == cfg.envs_per_worker
        )
        with _signals_stop(supervisor.interrupt), monitor, _closing(evaluator):
            start = TrainingStart(run_dir.path, cfg, ckpt is not None, steps_at_start)
            hooks.call("on_training_start", start)
            outcome = supervisor.run(ckpt["workers"] if ckpt and same_workers else {})
            train_seconds = time.perf_counter() - t_start
            extra, lines = run.closing()
            for line in lines:
                monitor.log(line)
            supervisor.final_evaluation()
            if outcome.glob is not None:  # None: the global state died with the Ray server
                state.restore(outcome.glob)
                # never holds a NaN: none is ever applied
                _save_params(run_dir.model, cfg, blank, spec, outcome.glob)
                if not outcome.ended.keeps_last_checkpoint:
                    write_checkpoint(outcome.glob, outcome.workers, outcome.restarts)
            rescored = _rescore(cfg, run_dir, outcome, plan, evaluator, monitor.log)
        summary = _summary(cfg, run_dir, state, monitor, outcome, ckpt)
        summary |= rescored
        summary |= {
            "wall_seconds": time.perf_counter()
            - t0
            + (ckpt["monitor"]["elapsed"] if ckpt else 0.0),
            "train_seconds": train_seconds,
            "steps_per_second": (state.steps() - steps_at_start) / max(train_seconds, 1e-9),
            "frames_per_second": (state.steps() - steps_at_start)
            * info.frames_per_step
            / max(train_seconds, 1e-9),
            # what --precision auto chose on this machine (config.json keeps "auto")
            "precision": spec.precision,
            # and where RMSProp's average started (config.json keeps null: the backend's default)
            "rms_init": rms_start(cfg) if cfg.optimizer == "rmsprop" else None,
            **extra,
            "run_dir": str(run_dir),
        }
        run_dir.write_json(run_dir.summary, summary)
        hooks.call("on_training_end", TrainingEnd(run_dir.path, summary))
        if tracker is not None:
            tracker.finish(summary, failed=outcome.error is not None or hooks.error is not None)
        _raise_for(outcome, run_dir, state.steps(), hooks.error)
        return summary


def _config(
    cfg: Config | None,
    resume: str | Path | None,
    info: EnvInfo | None,
    overrides: dict[str, Any],
) -> tuple[Config, dict[str, Any] | None, EnvInfo]:
    """The validated config, the checkpoint when resuming, and the env's one probe."""
    if resume is None:
        if cfg is None:  # the preset the env calls for (Atari, MinAtar, or vector envs)
            env = overrides.get("env", Config.env)
            kwargs = parse_env_kwargs(overrides.get("env_kwargs", ()))
            info = probed(info, env, kwargs, tuple(overrides.get("obs_keys", ())))
            return preset(None, info=info, **overrides).validate().check_env(info), None, info
        cfg = dataclasses.replace(cfg, **overrides).validate()
        info = probed(info, cfg.env, cfg.env_kwargs_dict, cfg.obs_keys)
        return cfg.check_env(info), None, info
    run_dir = RunDir.existing(resume, "config", flag="--resume")
    elsewhere = overrides.pop("run_dir", None)
    if elsewhere is not None and Path(elsewhere).resolve() != run_dir.path.resolve():
        raise UserError(
            f"--run-dir: a resumed run goes on in its own directory ({run_dir.path}): drop "
            "--run-dir, or copy the run directory there and resume that"
        )
    saved = Config.from_dict(run_dir.read_config())
    # the envs are in the workers' checkpointed states, their packed observations in the model
    for name in ("env", "env_kwargs", "obs_keys"):
        given, flag = overrides.get(name, getattr(saved, name)), "--" + name.replace("_", "-")
        if (given if name == "env" else tuple(given)) != getattr(saved, name):
            raise UserError(
                f"{flag}: a resumed run goes on with its own env ({saved.env}"
                f"{' ' + ' '.join(saved.env_kwargs) if saved.env_kwargs else ''}"
                f"{' --obs-keys ' + ' '.join(saved.obs_keys) if saved.obs_keys else ''}); drop "
                f"{flag}, or train a new run on the other env"
            )
    # its encoder's code too: another class of the same shapes would take its parameters silently
    for name in ("encoder", "encoder_kwargs"):
        given = overrides.get(name, getattr(saved, name))
        if (tuple(given) if name == "encoder_kwargs" else given) != getattr(saved, name):
            flag = "--" + name.replace("_", "-")
            own = " ".join([saved.encoder or "asyncrl's own", *saved.encoder_kwargs])
            raise UserError(
                f"{flag}: a resumed run goes on with its own encoder ({own}); drop {flag}, or "
                "train a new run with the other one"
            )
    # A resumed run's saved settings that its config now ignores go back to their defaults (the
    # applicability table): the Ray options of a Ray run resumed on another backend, and what
    # an older version accepted and ignored. The command line cannot unset them, and the run
    # learnt without them; options given now are checked as given (and refused where they
    # would be ignored). The Gaussian's options once the env's probe tells its actions.
    cfg = reset_misfits(
        dataclasses.replace(saved, **overrides, run_dir=str(run_dir)), overrides.keys(), None
    )
    cfg = cfg.validate()
    info = probed(info, cfg.env, cfg.env_kwargs_dict, cfg.obs_keys)
    cfg = reset_misfits(cfg, overrides.keys(), info.action.kind)
    ckpt = load_checkpoint(run_dir.path)
    # the rate goes on from where it was, unless the user gives a rate or schedule anew
    anew = overrides.keys() & {"lr", "lr_schedule"}
    ckpt["lr_from"] = None if anew else _resumed_rate(saved, ckpt)
    return cfg.check_env(info), ckpt, info


def _resumed_rate(saved: Config, ckpt: dict[str, Any]) -> Resumed:
    """Where the resumed run takes up its learning-rate schedule: the rate the run had at its
    checkpoint, under its saved settings and the start of its own last resume (the new
    schedule goes on down from there: :func:`asyncrl.optim.scheduled_lr`)."""
    monitor, steps = ckpt["monitor"], ckpt["glob"].steps
    before = monitor.get("lr_from")  # (None: never resumed, or a checkpoint older than it)
    had = dataclasses.replace(
        saved.section(MonitorSection), lr_from=None if before is None else Resumed(**before)
    )
    return Resumed(steps, monitor["elapsed"], scheduled_lr(had, steps, monitor["elapsed"]))


def _summary(
    cfg: Config,
    run_dir: RunDir,
    state: GlobalState,
    monitor: Monitor,
    outcome: Outcome,
    ckpt: dict | None,
) -> dict[str, Any]:
    return {
        "algo": cfg.algo,
        "env": cfg.env,
        "backend": cfg.backend,
        "workers": state.counters.shape[1],
        "target_return": monitor.target,
        "ended": outcome.ended.name.lower(),
        "solved": monitor.solved,
        "solve_seconds": monitor.solve_seconds,
        "solve_steps": monitor.solve_steps,
        "solve_return": monitor.solve_return,
        "solved_by": monitor.solved_by,
        "total_steps": state.steps(),
        "total_frames": state.steps() * monitor.frames_per_step,
        "episodes": monitor.episodes,
        "rolling_return": monitor.rolling_return,
        "worker_restarts": outcome.restarts,
        "nonfinite_updates": state.nonfinite(),
        "stop_on": cfg.stop_on,
        "evaluations": monitor.evaluations,
        "eval_episodes": cfg.eval_episodes,
        "last_eval_return": monitor.last_eval,
        "best_eval_return": None if monitor.best_eval is None else monitor.best_eval[0],
        "best_eval_step": None if monitor.best_eval is None else monitor.best_eval[1],
        "best_eval_episodes": None if monitor.best_eval is None else monitor.best_eval[2],
        "evaluations_cut_short": outcome.cut_short,
        "evaluations_gave_up": outcome.gave_up,
        "time_reserved_seconds": outcome.reserved,
        "resumed": ckpt is not None,
        # the callback whose False (or exception) ended the run: "ended" is "callback" then
        "stopped_by": monitor.hooks.stopped_by,
    }


def _raise_for(
    outcome: Outcome, run_dir: RunDir, step: int, callback_error: Exception | None = None
) -> None:
    # a fault first, also one after a signal (a worker diverging while the others stop): it
    # decides which checkpoint is kept, and the user must hear of it
    if outcome.error is not None:
        keep = outcome.ended.keeps_last_checkpoint
        where = "the last good checkpoint is kept" if keep else "a checkpoint was written"
        raise TrainingError(f"{outcome.error}; {where} in {run_dir}", outcome.details)
    # then the user's own code's: its exception as it raised it, traceback and all
    if callback_error is not None:
        if hasattr(callback_error, "add_note"):  # (Python 3.11)
            callback_error.add_note(
                f"asyncrl: a callback raised this; the run stopped at step {step:,} with a "
                f"checkpoint: resume with asyncrl.train(resume={str(run_dir.path)!r})"
            )
        raise callback_error
    if outcome.signal is not None:
        raise Interrupted(outcome.signal, run_dir.path, step)


_SAME_SIGNAL_S = 1.0


@contextmanager
def _signals_stop(stop: Callable[[int], None]) -> Iterator[None]:
    """SIGINT/SIGTERM: stop the workers and let the trainer write a final checkpoint; a second
    signal exits at once. Only the main thread can own signal handlers.

    A repeat within ``_SAME_SIGNAL_S`` of the first is the same request delivered twice, not a
    second one: ``timeout -s INT`` signals its child and then the child's whole process group,
    so the trainer gets it twice in a row, and used to exit without its final checkpoint."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    asked: list[float] = []

    def handler(signum: int, frame: Any) -> None:
        now = time.monotonic()
        if asked:
            if now - asked[0] < _SAME_SIGNAL_S:
                return
            raise KeyboardInterrupt
        asked.append(now)
        stop(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _tracker(cfg: Config, run_dir: RunDir) -> WandbLogger | None:
    """The run's W&B logger with --track (:mod:`asyncrl.tracking`), else None."""
    if not cfg.track:
        return None
    from asyncrl.tracking import WandbLogger

    return WandbLogger(
        run_dir,
        cfg.to_dict(),
        project=cfg.wandb_project,
        entity=cfg.wandb_entity,
        group=cfg.wandb_group,
    )


def _evaluator(
    cfg: Config, spec: ModelSpec, target: float | None, plan: TimePlan
) -> Evaluator | None:
    """The run's evaluator: none with --eval-every 0 and --stop-on train."""
    if cfg.eval_interval(cfg.steps) == 0 and cfg.stop_on == "train":
        return None
    confirm = None if target is None or not cfg.confirm_episodes else (target, cfg.confirm_episodes)
    evaluator = Evaluator(
        spec,
        cfg.algo,
        cfg.env,
        cfg.env_kwargs_dict,
        episodes=cfg.eval_episodes,
        deterministic=not cfg.eval_stochastic,
        seed=cfg.seed,
        confirm=confirm,
        deadline=plan.evaluations_end,
    )
    evaluator.target = target
    return evaluator


def _time_plan(cfg: Config, t0: float, ckpt: dict[str, Any] | None, workers: int) -> TimePlan:
    """The run's time, planned back from --time-limit: counted from the start of ``train``
    (``t0``), so that the time before the run's clock starts (Ray's start, the env's probe)
    is inside the limit too, less what a resumed run has spent."""
    limit = cfg.time_limit_seconds()
    seconds = 0.0 if limit is None else limit - (ckpt["monitor"]["elapsed"] if ckpt else 0.0)
    most = max(cfg.rescore_episodes, cfg.eval_episodes)
    plan = TimePlan(
        ends_at=None if limit is None else t0 + seconds,
        seconds=seconds,
        rescore_episodes=cfg.rescore_episodes,
        eval_episodes=cfg.eval_episodes,
        processes=processes_for(cfg.env, most),
        separate=separate_envs(cfg.env),
        workers=workers,
        cores=spare_cores(),
        envs=cfg.envs_per_worker,
    )
    if ckpt is not None and "plan" in ckpt:  # (a checkpoint written before the plan had none)
        plan.load_state_dict(ckpt["plan"])
    return plan


def _rescore(
    cfg: Config,
    run_dir: RunDir,
    outcome: Outcome,
    plan: TimePlan,
    evaluator: Evaluator | None,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """The kept model re-scored on new episodes (summary.json's kept_model_* fields), inside
    the time limit; none after a fault or a signal (the user wants out), or with
    --rescore-episodes 0."""
    kept = run_dir.best_model.is_file() or run_dir.model.is_file()
    if not cfg.rescore_episodes or outcome.error or outcome.signal is not None or not kept:
        return dict(NOT_RESCORED)
    if evaluator is not None:  # its thread and envs are done with: ended before the forks
        evaluator.close()
    try:
        return rescore_kept_model(
            run_dir.path,
            cfg.seed,
            cfg.rescore_episodes,
            deterministic=not cfg.eval_stochastic,
            processes=plan.processes_for(cfg.rescore_episodes, kept=True),
            deadline=plan.ends_at,
            stop=_Flag(lambda: outcome.signal is not None),
            log=log,
        ).summary()
    except Exception as e:  # as a failed evaluation: one line, and the run's files stand
        log(f"re-scoring the kept model failed ({e}); summary.json has no kept_model_return")
        return NOT_RESCORED | {"kept_model_error": str(e)}


class _Flag:
    """A stop flag read from a function (a signal recorded in the outcome)."""

    def __init__(self, read: Callable[[], bool]):
        self.is_set = read


@contextmanager
def _closing(evaluator: Evaluator | None) -> Iterator[None]:
    try:
        yield
    finally:
        if evaluator is not None:
            evaluator.close()


def _best_model_evaluation(run_dir: RunDir) -> tuple[float, int, int] | None:
    """The evaluation best_model.pt records (mean, global step, episodes), if there is one."""
    if not run_dir.best_model.is_file():
        return None
    try:
        blob = torch.load(run_dir.best_model, map_location="cpu", weights_only=True)
    except Exception as e:  # written atomically, so damaged from outside
        raise UserError(
            f"--resume: {run_dir.best_model} cannot be read ({type(e).__name__}); move it out of "
            "the run directory to resume (the run then keeps the best of its own evaluations)"
        ) from None
    ev = blob.get("evaluation")
    return None if ev is None else (float(ev["mean"]), int(ev["global_step"]), int(ev["episodes"]))


def _save_params(
    path: Path,
    cfg: Config,
    model: torch.nn.Module,
    spec: ModelSpec,
    snap: GlobalSnapshot,
    **extra: Any,
) -> None:
    """Write a model file (``model.pt``, ``best_model.pt``) of the snapshot's parameters and
    observation statistics, through ``model`` (a network of ``spec``, overwritten), atomically:
    a reader sees the old file or the new one, never half."""
    flatten_parameters(model, torch.from_numpy(np.array(snap.params)))
    if snap.obs_stats is not None:
        bind_obs_stats(model, torch.from_numpy(np.array(snap.obs_stats)))
    blob = {"algo": cfg.algo, "spec": spec.to_dict(), "state_dict": model.state_dict(), **extra}
    write_atomically(path, lambda f: torch.save(blob, f))


__all__ = ["Ended", "Interrupted", "TrainingError", "UserError", "train"]
