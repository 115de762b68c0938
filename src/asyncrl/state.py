"""The global state of a run: parameters, shared optimizer statistics, the target network and
the counters -- created, restored, checked against a checkpoint and snapshotted here, and
nowhere else. The shared-memory workers update it in place (Hogwild); the Ray parameter server
holds one of its own."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from asyncrl.errors import UserError
from asyncrl.messages import GlobalSnapshot
from asyncrl.models import (
    ModelSpec,
    build_model,
    combine_obs_stats,
    flatten_parameters,
    obs_stats_of,
)
from asyncrl.optim import (
    OptimizerSettings,
    ScheduleSettings,
    SharedOptimizer,
    make_optimizer,
    scheduled_lr,
)


class StateSettings(OptimizerSettings, Protocol):
    """What fresh global state reads: the optimiser's settings and the run's seed."""

    @property
    def seed(self) -> int: ...


class UpdateSettings(ScheduleSettings, Protocol):
    """What an update reads: the schedule, and the Q methods' target-network period."""

    @property
    def target_update(self) -> int: ...


# Rows of the counters (one column per worker: each worker writes its own, lock-free).
STEPS, EPISODES, NONFINITE = 0, 1, 2


@dataclass
class GlobalState:
    params: torch.Tensor  # the global parameters theta, one flat vector
    optimizer: SharedOptimizer
    target_params: torch.Tensor | None  # theta^- of the Q methods
    target_period: torch.Tensor  # int64 (1,): last target_update period theta^- was copied at
    counters: torch.Tensor  # int64 (3, workers): steps, episodes, non-finite updates skipped
    obs_stats: torch.Tensor | None = None  # running [count, mean, var] of the observations
    # (workers, 1 + 2d): each shared-memory worker's own [count, mean, var] since the start or
    # the restore, written by that worker alone; the statistics are obs_stats merged with every
    # row (merged_obs_stats). One shared buffer merged into by every worker lost batches: a
    # worker preempted between reading and writing it overwrote the others' merges meanwhile.
    obs_rows: torch.Tensor | None = None

    @classmethod
    def create(
        cls,
        cfg: StateSettings,
        spec: ModelSpec,
        workers: int,
        uses_target: bool,
        shared: bool = True,
    ) -> GlobalState:
        """Fresh parameters (seeded by ``cfg.seed``), optimizer statistics and counters; in
        shared memory unless ``shared`` is False (the Ray server's copy)."""
        torch.manual_seed(cfg.seed)
        model = build_model(spec)
        stats = obs_stats_of(model)
        params = flatten_parameters(model).detach().clone()
        if shared:
            params.share_memory_()
        target = params.clone() if uses_target else None
        state = cls(
            params=params,
            optimizer=make_optimizer(cfg, params),
            target_params=target,
            target_period=torch.zeros(1, dtype=torch.int64),
            counters=torch.zeros((3, workers), dtype=torch.int64),
            obs_stats=None if stats is None else stats.clone(),
            obs_rows=None if stats is None else torch.zeros((workers, stats.numel())),
        )
        if shared:
            for t in (target, state.target_period, state.counters, state.obs_stats, state.obs_rows):
                if t is not None:
                    t.share_memory_()
        return state

    @classmethod
    def from_snapshot(cls, cfg: OptimizerSettings, snap: GlobalSnapshot) -> GlobalState:
        """A private (not shared) copy of a snapshot: the Ray parameter server's state."""
        params = torch.from_numpy(snap.params.copy())
        state = cls(
            params=params,
            optimizer=make_optimizer(cfg, params),
            target_params=None
            if snap.target_params is None
            else torch.from_numpy(snap.target_params.copy()),
            target_period=torch.tensor([snap.target_period], dtype=torch.int64),
            counters=torch.from_numpy(snap.counters.sum(axis=1, keepdims=True)),
            obs_stats=None if snap.obs_stats is None else torch.from_numpy(snap.obs_stats.copy()),
        )
        state.optimizer.load_state_dict(
            {k: torch.from_numpy(v.copy()) for k, v in snap.optimizer.items()}
        )
        return state

    # ------------------------------------------------------------------ counters
    def steps(self) -> int:
        return int(self.counters[STEPS].sum())

    def episodes(self) -> int:
        return int(self.counters[EPISODES].sum())

    def nonfinite(self) -> int:
        return int(self.counters[NONFINITE].sum())

    # ------------------------------------------------------------------ updates
    def apply_update(
        self, cfg: UpdateSettings, grad: torch.Tensor, global_step: int, elapsed: float = 0.0
    ) -> float:
        """One asynchronous update (every store applies it this way), ``elapsed`` seconds into
        the run (for a schedule over time); returns the lr used."""
        lr = scheduled_lr(cfg, global_step, elapsed)
        self.optimizer.step(grad, lr)
        if self.target_params is not None:
            # theta^- is refreshed once per target_update period, whoever sees the period
            # change first; comparing with the last refreshed period (not the updater's own
            # step window) means increments of other workers landing in between cannot make
            # the whole run miss a refresh. Two workers may both copy: harmless.
            period = global_step // cfg.target_update
            if period > int(self.target_period[0]):
                self.target_period[0] = period
                self.target_params.copy_(self.params)
        return lr

    def merged_obs_stats(self, out: torch.Tensor | None = None) -> torch.Tensor | None:
        """The observation statistics: ``obs_stats`` merged with every worker's row (into
        ``out`` where given; None without --normalize-obs)."""
        if self.obs_stats is None:
            return None
        out = self.obs_stats.clone() if out is None else out
        if self.obs_rows is None:
            out.copy_(self.obs_stats)
        else:
            combine_obs_stats(self.obs_stats, self.obs_rows, out)
        return out

    # ------------------------------------------------------------------ checkpoints
    def snapshot(self) -> GlobalSnapshot:
        # one copy of the statistics' parts, and the merge of that copy: the rows move on
        # while workers run, and the checkpoint's two must agree
        parts = None
        merged = None
        if self.obs_stats is not None and self.obs_rows is not None:
            parts = (self.obs_stats.numpy().copy(), self.obs_rows.numpy().copy())
            merged = self.obs_stats.clone()
            combine_obs_stats(torch.from_numpy(parts[0]), torch.from_numpy(parts[1]), merged)
        elif self.obs_stats is not None:
            merged = self.obs_stats.clone()
        return GlobalSnapshot(
            params=self.params.numpy().copy(),
            optimizer={k: v.numpy().copy() for k, v in self.optimizer.state_dict().items()},
            target_params=None if self.target_params is None else self.target_params.numpy().copy(),
            target_period=int(self.target_period[0]),
            counters=self.counters.numpy().copy(),
            obs_stats=None if merged is None else merged.numpy(),
            obs_parts=parts,
        )

    def check_fits(self, snap: GlobalSnapshot, run_dir: Path) -> None:
        """The checkpoint's tensors must fit the model the config builds, and the observations
        the network sees must be the ones it was trained on."""
        _check_normalization(snap, self.obs_stats, run_dir)
        problems = []
        if snap.params.shape != tuple(self.params.shape):
            problems.append(
                f"{snap.params.size} parameters, the config's model has {self.params.numel()}"
            )
        if (snap.target_params is None) != (self.target_params is None):
            problems.append("a target network where the algorithm has none, or the reverse")
        for k, v in self.optimizer.state_dict().items():
            if k not in snap.optimizer or snap.optimizer[k].shape != tuple(v.shape):
                problems.append(f"no optimizer state {k!r} of the config's optimizer")
                break
        if problems:
            raise UserError(
                f"--resume: the checkpoint in {run_dir} does not fit its config ({problems[0]}); "
                "resume with the settings it was started with: no option given with --resume that "
                "changes the network or the optimizer, and config.json as the run wrote it"
            )

    def restore(self, snap: GlobalSnapshot) -> None:
        """Load a snapshot in place (the shared tensors stay the same objects)."""
        self.params.copy_(_tensor(snap.params))
        self.optimizer.load_state_dict({k: _tensor(v) for k, v in snap.optimizer.items()})
        if self.target_params is not None and snap.target_params is not None:
            self.target_params.copy_(_tensor(snap.target_params))
        self.target_period[0] = snap.target_period
        if self.obs_stats is not None and snap.obs_stats is not None:
            parts = snap.obs_parts
            if (
                parts is not None
                and self.obs_rows is not None
                and self.obs_rows.shape == parts[1].shape
            ):
                self.obs_stats.copy_(_tensor(parts[0]))
                self.obs_rows.copy_(_tensor(parts[1]))
            else:  # another worker count, or the Ray server's: start from the merged statistics
                self.obs_stats.copy_(_tensor(snap.obs_stats))
                if self.obs_rows is not None:
                    self.obs_rows.zero_()
        old = _tensor(snap.counters)
        if old.shape == self.counters.shape:
            self.counters.copy_(old)
        else:  # another worker count: the totals carry over in the first column
            self.counters.zero_()
            self.counters[:, 0] = old.sum(dim=1)


def _check_normalization(
    snap: GlobalSnapshot, obs_stats: torch.Tensor | None, run_dir: Path
) -> None:
    """--normalize-obs is part of what the network was trained on: resumed without it, the
    trained statistics would be dropped and the network fed raw observations; resumed with it,
    fresh statistics would start from nothing. Either way its inputs are ones it never saw.
    (--obs-clip may change: it only bounds the normalised inputs.)"""
    trained, now = snap.obs_stats is not None, obs_stats is not None
    if trained and not now:
        raise UserError(
            f"--normalize-obs: the run in {run_dir} was trained with --normalize-obs (its "
            "observation statistics are in the checkpoint); resume without "
            "--no-normalize-obs, or start a new run"
        )
    if now and not trained:
        raise UserError(
            f"--normalize-obs: the run in {run_dir} was trained without --normalize-obs (its "
            "network never saw normalised observations); resume without --normalize-obs, or "
            "start a new run"
        )


def _tensor(a: np.ndarray) -> torch.Tensor:
    """A tensor over ``a``, copied only if ``a`` is read-only (as arrays from Ray are)."""
    return torch.from_numpy(np.require(a, requirements="W"))
