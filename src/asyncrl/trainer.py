"""The main process of a run: probe the env, build the shared model and optimizer, start the
workers on a backend, monitor the episode stream, save the model and the summary."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

import torch

from asyncrl.algos import make_algorithm
from asyncrl.backends import make_backend
from asyncrl.config import Config
from asyncrl.envs import probe_env
from asyncrl.errors import UserError
from asyncrl.models import build_model, flatten_parameters
from asyncrl.monitor import Monitor
from asyncrl.optim import make_optimizer
from asyncrl.worker import SharedState, run_worker

MODEL_FILE = "model.pt"
CONFIG_FILE = "config.json"
SUMMARY_FILE = "summary.json"


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
            f"--run-dir: {path} already exists and is not empty; choose a new directory "
            "(nothing was overwritten)"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--run-dir: cannot create {path}: {e.strerror}") from None
    return path


def train(cfg: Config | None = None, **overrides: Any) -> dict[str, Any]:
    """Train with ``cfg`` (default: A3C on CartPole-v1) updated by ``overrides``.

    Returns the summary (also written to ``RUN_DIR/summary.json``). Raises
    :class:`asyncrl.errors.UserError` for bad input before anything is written.
    """
    t0 = time.perf_counter()
    cfg = dataclasses.replace(cfg or Config(), **overrides).validate()
    info = probe_env(cfg.env, cfg.algo)
    target = cfg.target_return if cfg.target_return is not None else info.reward_threshold
    run_dir = prepare_run_dir(cfg)
    (run_dir / CONFIG_FILE).write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")

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

    backend = make_backend(cfg.backend)
    shared = SharedState(
        params=params,
        optimizer=optimizer,
        target_params=target_params,
        steps=backend.counter(),
        episodes=backend.counter(),
        queue=backend.queue(),
        stop=backend.event(),
    )
    n = cfg.num_workers
    monitor = Monitor(
        run_dir,
        total_steps=cfg.steps,
        target_return=target,
        window=cfg.window,
        num_workers=n,
        t0=t0,
        progress=cfg.progress,
        tensorboard=cfg.tensorboard,
    )
    t_start = time.perf_counter()
    backend.start(run_worker, [(i, cfg, info, shared) for i in range(n)])
    try:
        monitor.run(shared.queue, shared.stop, backend.alive, shared.steps)
    finally:
        shared.stop.set()
        backend.join(timeout=10.0)

    wall = time.perf_counter() - t0
    total_steps = int(shared.steps.value)
    stats = monitor.stats
    save_model(run_dir, cfg, spec.to_dict(), global_model.state_dict())
    summary = {
        "algo": cfg.algo,
        "env": cfg.env,
        "backend": cfg.backend,
        "workers": n,
        "target_return": target,
        "solved": stats.solved,
        "solve_seconds": stats.solve_seconds,
        "solve_steps": stats.solve_steps,
        "total_steps": total_steps,
        "episodes": stats.episodes,
        "wall_seconds": wall,
        "train_seconds": time.perf_counter() - t_start,
        "steps_per_second": total_steps / max(time.perf_counter() - t_start, 1e-9),
        "rolling_return": stats.rolling_return,
        "run_dir": str(run_dir),
    }
    (run_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def save_model(run_dir: Path, cfg: Config, spec: dict, state_dict: dict) -> None:
    """Write the model atomically: a reader sees the old file or the new one, never half."""
    tmp = run_dir / (MODEL_FILE + ".tmp")
    torch.save({"algo": cfg.algo, "spec": spec, "state_dict": state_dict}, tmp)
    os.replace(tmp, run_dir / MODEL_FILE)
