"""The main process of a run: probe the env, build the shared model and optimizer (or restore
them from a checkpoint), run the workers under the supervisor, save the model, the final
checkpoint and the summary."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from asyncrl.algos import make_algorithm
from asyncrl.backends import make_backend
from asyncrl.checkpoint import load_checkpoint, save_checkpoint
from asyncrl.config import Config
from asyncrl.envs import probe_env
from asyncrl.errors import UserError
from asyncrl.models import build_model, flatten_parameters
from asyncrl.monitor import Monitor
from asyncrl.optim import make_optimizer
from asyncrl.supervisor import Supervisor
from asyncrl.worker import NONFINITE, SharedState

MODEL_FILE = "model.pt"
CONFIG_FILE = "config.json"
SUMMARY_FILE = "summary.json"


class TrainingError(RuntimeError):
    """The run stopped on an error (a worker fault past the restart limit, divergence)."""

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details


class Interrupted(Exception):
    """SIGINT or SIGTERM stopped the run after a final checkpoint."""

    def __init__(self, signum: int, run_dir: Path, step: int):
        self.signum, self.run_dir, self.step = signum, run_dir, step
        name = signal.Signals(signum).name
        super().__init__(
            f"stopped by {name} at step {step:,}; checkpoint saved. "
            f"Resume with: asyncrl train --resume {run_dir}"
        )


def default_run_dir(cfg: Config) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path("runs") / f"{cfg.env}-{cfg.algo}-{stamp}"
    path, i = base, 1
    while path.exists():  # two runs started in the same second
        path, i = Path(f"{base}-{i}"), i + 1
    return path


def prepare_run_dir(cfg: Config) -> Path:
    """Create the run directory; an existing non-empty one is never overwritten."""
    path = Path(cfg.run_dir) if cfg.run_dir else default_run_dir(cfg)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UserError(
            f"--run-dir: {path} already exists and is not empty; choose a new directory, or "
            f"continue it with --resume {path} (nothing was overwritten)"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--run-dir: cannot create {path}: {e.strerror}") from None
    return path


def _resume_config(run_dir: Path, overrides: dict[str, Any]) -> Config:
    path = run_dir / CONFIG_FILE
    if not run_dir.is_dir():
        raise UserError(f"--resume: run directory {run_dir} does not exist")
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"--resume: cannot read {path} ({e})") from None
    overrides = {k: v for k, v in overrides.items() if k != "run_dir"}
    return dataclasses.replace(Config.from_dict(saved), **overrides, run_dir=str(run_dir))


def _check_fits(
    ckpt: dict, params: torch.Tensor, target: torch.Tensor | None, opt: Any, run_dir: Path
) -> None:
    """The checkpoint's tensors must fit the model the config builds."""
    problems = []
    if ckpt["params"].shape != tuple(params.shape):
        problems.append(
            f"{ckpt['params'].size} parameters, the config's model has {params.numel()}"
        )
    if (ckpt["target_params"] is None) != (target is None):
        problems.append("a target network where the algorithm has none, or the reverse")
    for k, v in opt.state_dict().items():
        if k not in ckpt["optimizer"] or ckpt["optimizer"][k].shape != tuple(v.shape):
            problems.append(f"no optimizer state {k!r} of the config's optimizer")
            break
    if problems:
        raise UserError(
            f"--resume: the checkpoint in {run_dir} does not fit its config ({problems[0]}); "
            f"restore {CONFIG_FILE} to the settings the run was started with"
        )


def train(
    cfg: Config | None = None, *, resume: str | Path | None = None, **overrides: Any
) -> dict[str, Any]:
    """Train with ``cfg`` (default: A3C on CartPole-v1) updated by ``overrides``.

    With ``resume=RUN_DIR``, continue that run from its last checkpoint (its config.json,
    updated by ``overrides``). Returns the summary (also ``RUN_DIR/summary.json``). Bad input
    raises :class:`asyncrl.errors.UserError` before any file is written or changed.
    """
    t0 = time.perf_counter()
    ckpt = None
    if resume is not None:
        run_dir = Path(resume)
        cfg = _resume_config(run_dir, overrides).validate()
        ckpt = load_checkpoint(run_dir)
    else:
        cfg = dataclasses.replace(cfg or Config(), **overrides).validate()
    info = probe_env(cfg.env, cfg.algo)
    target = cfg.target_return if cfg.target_return is not None else info.reward_threshold

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    algo = make_algorithm(cfg, info)
    spec = algo.model_spec()
    global_model = build_model(spec)
    # The global parameters: one flat vector in shared memory, the model's tensors views of it.
    params = flatten_parameters(global_model).detach().clone().share_memory_()
    flatten_parameters(global_model, params)
    optimizer = make_optimizer(cfg.optimizer, params, cfg.lr, cfg.rms_alpha, cfg.eps)
    target_params = params.clone().share_memory_() if algo.uses_target_network else None
    if cfg.backend == "ray":
        from asyncrl.backends.ray import cluster_cpus, start_ray

        start_ray(cfg)
        n = cfg.workers or cluster_cpus()
    else:
        n = cfg.num_workers
    counters = torch.zeros((3, n), dtype=torch.int64).share_memory_()
    if ckpt is not None:
        _check_fits(ckpt, params, target_params, optimizer, run_dir)
        params.copy_(torch.from_numpy(ckpt["params"]))
        optimizer.load_state_dict({k: torch.from_numpy(v) for k, v in ckpt["optimizer"].items()})
        if target_params is not None:
            target_params.copy_(torch.from_numpy(ckpt["target_params"]))
        old = ckpt["counters"]
        if old.shape[1] == n:
            counters.copy_(torch.from_numpy(old))
        else:  # another worker count: the totals carry over
            counters[:, 0] = torch.from_numpy(old.sum(axis=1))
    else:
        run_dir = prepare_run_dir(cfg)
    (run_dir / CONFIG_FILE).write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")

    monitor = Monitor(
        run_dir,
        total_steps=cfg.steps,
        target_return=target,
        window=cfg.window,
        progress=cfg.progress,
        tensorboard=cfg.tensorboard,
        state=None if ckpt is None else ckpt["monitor"],
    )
    worker_states = {}
    if ckpt is not None and ckpt["counters"].shape[1] == n:
        worker_states = {w: {"worker": s} for w, s in ckpt["workers"].items()}

    def write_checkpoint(states: dict[int, dict]) -> None:
        # The global state of the newest worker snapshot (with one worker: exactly the state
        # the worker left behind at that rollout boundary).
        newest = max(states.values(), key=lambda s: int(s["counters"][0].sum()), default=None)
        g = (
            newest
            if newest is not None
            else {
                "params": params.numpy().copy(),
                "optimizer": {k: v.numpy() for k, v in optimizer.state_dict().items()},
                "target_params": None if target_params is None else target_params.numpy().copy(),
                "counters": counters.numpy().copy(),
            }
        )
        save_checkpoint(
            run_dir,
            {
                "config": cfg.to_dict(),
                "spec": spec.to_dict(),
                "params": g["params"],
                "optimizer": g["optimizer"],
                "target_params": g["target_params"],
                "counters": g["counters"],
                "workers": {w: s["worker"] for w, s in states.items()},
                "monitor": monitor.state_dict(),
                "restarts": supervisor.outcome.restarts,
            },
        )

    steps_start = int(counters[0].sum())
    if cfg.backend == "ray":
        supervisor, finish = _ray_supervisor(
            cfg,
            info,
            spec,
            n,
            params,
            optimizer,
            target_params,
            counters,
            monitor,
            write_checkpoint,
        )
    else:
        supervisor, finish = _local_supervisor(
            cfg,
            info,
            n,
            params,
            optimizer,
            target_params,
            counters,
            monitor,
            write_checkpoint,
            worker_states,
            0 if ckpt is None else ckpt["restarts"],
        )
    restore = _install_signal_handlers(supervisor)
    t_start = time.perf_counter()
    try:
        outcome = supervisor.run()
    except BaseException:
        monitor.close()
        raise
    finally:
        finish()
        restore()
    train_seconds = time.perf_counter() - t_start
    total_steps = int(counters[0].sum())

    diverged = outcome.fatal is not None and "non-finite" in outcome.fatal
    keep_last = diverged or outcome.keep_last_checkpoint
    if not outcome.keep_last_checkpoint:  # a lost server took the global state with it
        save_model(run_dir, cfg, spec.to_dict(), global_model.state_dict())
    if not keep_last:  # after divergence the last good checkpoint stays as it was
        write_checkpoint(outcome.states)
    monitor.close()
    summary = {
        "algo": cfg.algo,
        "env": cfg.env,
        "backend": cfg.backend,
        "workers": n,
        "target_return": target,
        "solved": monitor.solved,
        "solve_seconds": monitor.solve_seconds,
        "solve_steps": monitor.solve_steps,
        "total_steps": total_steps,
        "episodes": monitor.episodes,
        "wall_seconds": time.perf_counter()
        - t0
        + (0 if ckpt is None else ckpt["monitor"]["elapsed"]),
        "train_seconds": train_seconds,
        "steps_per_second": (total_steps - steps_start) / max(train_seconds, 1e-9),
        "rolling_return": monitor.rolling_return,
        "worker_restarts": outcome.restarts,
        "nonfinite_updates": int(counters[NONFINITE].sum()),
        "resumed": ckpt is not None,
        **getattr(supervisor, "ray_stats", {}),
        "run_dir": str(run_dir),
    }
    (run_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    if supervisor.interrupted is not None:
        raise Interrupted(supervisor.interrupted, run_dir, total_steps)
    if outcome.fatal is not None:
        keep = "the last good checkpoint is kept" if keep_last else "a checkpoint was written"
        raise TrainingError(f"{outcome.fatal}; {keep} in {run_dir}", outcome.fatal_details)
    return summary


def _local_supervisor(
    cfg,
    info,
    n,
    params,
    optimizer,
    target_params,
    counters,
    monitor,
    write_checkpoint,
    worker_states,
    restarts,
):
    """Threads or processes: shared-memory state, workers supervised in this process."""
    backend = make_backend(cfg.backend)
    shared = SharedState(
        params=params,
        optimizer=optimizer,
        target_params=target_params,
        counters=counters,
        heartbeat=torch.zeros(n, dtype=torch.float64).share_memory_(),
        incarnation=torch.zeros(n, dtype=torch.int64).share_memory_(),
        checkpoint_request=torch.zeros(1, dtype=torch.int64).share_memory_(),
        stop_flag=torch.zeros(1, dtype=torch.int64).share_memory_(),
    )
    supervisor = Supervisor(
        cfg, info, shared, backend, monitor, write_checkpoint, worker_states, restarts=restarts
    )

    def finish() -> None:
        shared.stop()
        backend.join(timeout=10.0)

    return supervisor, finish


def _ray_supervisor(
    cfg, info, spec, n, params, optimizer, target_params, counters, monitor, write_checkpoint
):
    """Ray: the global state moves to a parameter server actor and comes back at the end."""
    import ray

    from asyncrl.backends.ray import RayRun, wait_for_workers
    from asyncrl.supervisor import RaySupervisor

    opt_state = {k: v.numpy().copy() for k, v in optimizer.state_dict().items()}
    run = RayRun(
        cfg,
        info,
        spec,
        n,
        params,
        opt_state,
        target_params,
        int(counters[0].sum()),
        int(counters[1].sum()),
    )
    supervisor = RaySupervisor(cfg, monitor, run, write_checkpoint, n)

    def finish() -> None:
        try:
            run.stop()
            wait_for_workers(run, 10.0)
            s = run.state()
        except ray.exceptions.RayActorError:  # the server
            supervisor.outcome.fatal = supervisor.outcome.fatal or "the parameter server died"
            supervisor.outcome.keep_last_checkpoint = True
            return
        params.copy_(torch.tensor(s["params"]))
        optimizer.load_state_dict({k: torch.tensor(v) for k, v in s["optimizer"].items()})
        if target_params is not None:
            target_params.copy_(torch.tensor(s["target_params"]))
        counters[:, 0] = torch.tensor([s["steps"], s["episodes"], s["nonfinite"]])
        counters[:, 1:] = 0
        supervisor.ray_stats = {"lags": s["lags"], "dropped": s["dropped"], "nodes": len(run.nodes)}
        monitor.log(staleness_line(s["lags"], s["dropped"]))
        for actor in [*run.workers, run.server]:
            ray.kill(actor)

    return supervisor, finish


def staleness_line(lags: dict[int, int], dropped: int) -> str:
    """The distribution of gradient staleness (versions behind) in one line."""
    if not lags:
        return "staleness: no gradient applied"
    values = np.repeat(np.array(list(lags), dtype=float), list(lags.values()))
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return (
        f"staleness (parameter versions behind) of {values.size:,} gradients: median {p50:g}, "
        f"p90 {p90:g}, p99 {p99:g}, max {values.max():g}; dropped {dropped:,}"
    )


def _install_signal_handlers(supervisor: Any):
    """SIGINT/SIGTERM: stop the workers, let the trainer write a final checkpoint; a second
    signal exits at once. Only the main thread can own signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum: int, frame: Any) -> None:
        if supervisor.interrupted is not None:
            raise KeyboardInterrupt
        supervisor.interrupt(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for s, h in previous.items():
            signal.signal(s, h)

    return restore


def save_model(run_dir: Path, cfg: Config, spec: dict, state_dict: dict) -> None:
    """Write the model atomically: a reader sees the old file or the new one, never half."""
    tmp = run_dir / (MODEL_FILE + ".tmp")
    torch.save({"algo": cfg.algo, "spec": spec, "state_dict": state_dict}, tmp)
    os.replace(tmp, run_dir / MODEL_FILE)


__all__ = ["Interrupted", "TrainingError", "train"]
