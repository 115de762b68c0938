"""Reference implementations the tests check the package against (oracles, not package code).

* :func:`nstep_targets`: the n-step targets of one rollout of one episode, in the paper's form
  (rewards, values, last value, terminal flag), reduced to :func:`asyncrl.targets.nstep_returns`.
* :class:`GradientAccumulator`: the paper's per-step accumulation of d(theta); the workers take
  the rollout's gradient in one batched backward pass instead, and tests/test_optim.py checks
  that the two agree.
* :func:`assert_the_kept_model_is_the_rows`: the kept model and its score, as ``evaluations.csv``
  says they must be.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from asyncrl.envs import ActionSpace
from asyncrl.models import ModelSpec, flat_grad
from asyncrl.optim import SharedOptimizer, clip_grad_norm_
from asyncrl.targets import Array, Missing, _float_like, nstep_returns


def nstep_targets(
    rewards: Array,
    values: Array,
    last_value: Array | float,
    terminated: bool | Array,
    gamma: float,
    n: int | None = None,
    missing: Missing = "bootstrap",
) -> Array:
    """n-step targets of one rollout of one episode (the issue's and the paper's form).

    Args:
        rewards: ``r_t`` for t = 0..T-1, shape ``(T, ...)``.
        values: ``V(s_t)`` for t = 0..T-1 (used as the bootstrap of horizons inside the rollout).
        last_value: ``V(s_T)``, the state after the last step.
        terminated: ``s_T`` is terminal, so its value counts as 0. A truncated rollout (time
            limit, or simply the end of t_max steps) passes False and bootstraps.
        gamma: discount factor.
        n: horizon (``None``: T, the paper's forward view to the end of the rollout).
        missing: ``"bootstrap"`` (*use maximum terms possible*) or ``"zero"`` (*missing terms
            treated as 0*) for horizons with t + n >= T.

    For t + n < T the target is ``sum_{i<n} gamma^i r_{t+i} + gamma^n values[t+n]``.
    """
    T = rewards.shape[0]
    if values.shape != rewards.shape:
        raise ValueError(f"values shape {tuple(values.shape)} != rewards {tuple(rewards.shape)}")
    last = _float_like(last_value, rewards)[None] + rewards[:1] * 0.0
    next_values = (
        torch.cat([values[1:], last])
        if isinstance(rewards, torch.Tensor)
        else np.concatenate([values[1:], last])
    )
    term = rewards * 0.0
    term[T - 1] = term[T - 1] + _float_like(terminated, rewards)
    return nstep_returns(rewards, next_values, term, term, gamma, n, missing)


def vtrace_by_sums(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    terminated: np.ndarray,
    ends: np.ndarray,
    log_rhos: np.ndarray,
    gamma: float,
    rho_bar: float,
    c_bar: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """V-trace of one env's rollout (shape ``(T,)``) as IMPALA's Eq. 1 writes it, a sum per
    state rather than the package's backward recursion: v_s = V(x_s) + sum_{t >= s} gamma^(t-s)
    (prod_{s <= i < t} c_i) delta_t, the sum cut after an episode's end, and
    A_s = rho_s (r_s + gamma v_{s+1} - V(x_s)), with v_{s+1} the bootstrap at an end (0 where
    terminated, V of the final observation where truncated) and V(x_T) after the last step."""
    ratio = np.exp(log_rhos.astype(np.float64))
    rho, c = np.minimum(rho_bar, ratio), lam * np.minimum(c_bar, ratio)
    boot = np.where(terminated, 0.0, next_values)
    delta = rho * (rewards + gamma * boot - values)
    T = len(rewards)
    vs = np.empty(T)
    for s in range(T):
        total, coef = 0.0, 1.0
        for t in range(s, T):
            total += coef * delta[t]
            if ends[t]:
                break
            coef *= gamma * c[t]
        vs[s] = values[s] + total
    after = [vs[s + 1] if s + 1 < T and not ends[s] else boot[s] for s in range(T)]
    return vs, rho * (rewards + gamma * np.array(after) - values)


class GradientAccumulator:
    """Sums per-step gradients of a local model, then applies them once (accumulate/apply/reset).

    The paper's actor-learners accumulate d(theta) over up to t_max steps and apply it in one
    asynchronous update. For a loss that is a sum over steps, one batched backward pass gives
    the same gradient (see the tests); this class serves algorithms that add gradients step by
    step, such as one-step Q-learning and Sarsa with their I_AsyncUpdate.
    """

    def __init__(self, model: nn.Module):
        self.model = model
        self.buffer = torch.zeros(sum(p.numel() for p in model.parameters()))
        self.count = 0

    def accumulate(self, loss: torch.Tensor | None = None) -> None:
        """Add the model's current gradient (of ``loss``, if given) to the sum."""
        if loss is not None:
            loss.backward()
        self.buffer.add_(flat_grad(self.model))
        self.model.zero_grad(set_to_none=True)
        self.count += 1

    def apply(
        self, optimizer: SharedOptimizer, lr: float | None = None, max_norm: float = 0.0
    ) -> float:
        """Clip the summed gradient, apply it with the shared optimizer, reset; return its norm."""
        norm = clip_grad_norm_(self.buffer, max_norm)
        optimizer.step(self.buffer, lr)
        self.reset()
        return norm

    def reset(self) -> None:
        self.buffer.zero_()
        self.count = 0


def mlp_spec(kind: str, obs_dim: int, n_actions: int, **kw) -> ModelSpec:
    """A vector-observation, discrete-action model spec (the tests' usual model)."""
    return ModelSpec(kind, (obs_dim,), ActionSpace("discrete", n_actions), **kw)  # type: ignore[arg-type]


def forward(model: nn.Module, obs: torch.Tensor):
    """A network's outputs for a batch of observations, each one step from a fresh core state,
    with gradient: row 0 of a two-row unroll (the last row of an unroll is a target, without
    gradient). Distribution parameters and values for an actor-critic, Q values for a Q net."""
    n = obs.shape[0]
    first = torch.ones(2, n, dtype=torch.bool)
    out = model.unroll(torch.stack([obs, obs]), model.initial_state(n), first)  # type: ignore[operator]
    return tuple(o[0] for o in out) if isinstance(out, tuple) else out[0]


def spec_of(algo: Any) -> Any:
    """The network spec of an algorithm built in a test from a whole config (as the trainer
    builds it from the model section)."""
    from asyncrl.algos.base import model_spec_for

    return model_spec_for(algo.cfg, algo.model_kind, algo.info, algo.cfg.reward_scale)


def spec_for(cfg: Any, info: Any) -> Any:
    """The network spec the trainer hands the workers of a run of ``cfg`` on ``info``'s env."""
    from asyncrl import algos
    from asyncrl.algos.base import model_spec_for

    kind = algos.REGISTRY[cfg.algo].model_kind
    return model_spec_for(cfg, kind, info, cfg.reward_scale)


def assert_the_kept_model_is_the_rows(evals, kept, summary):
    """best_model.pt's evaluation (``kept``) is the last row that kept a model (a pair can keep
    one whose re-screen is under the kept model's score: no higher mean is asked of it), and
    the summary's score of it pools the episodes it played in the pairs it won since."""
    last = max(i for i, r in enumerate(evals) if r["kept"] == "1")
    assert kept["global_step"] == int(evals[last]["global_step"])
    assert kept["mean"] == pytest.approx(float(evals[last]["mean"]), rel=1e-5)
    won = [r for r in evals[last + 1 :] if r["kept_mean"] and r["kept"] == "0"]
    n = kept["episodes"] + sum(int(r["episodes"]) for r in won)
    pooled = kept["mean"] * kept["episodes"]
    pooled += sum(float(r["kept_mean"]) * int(r["episodes"]) for r in won)
    assert summary["best_eval_return"] == pytest.approx(pooled / n, rel=1e-5)
    assert (summary["best_eval_step"], summary["best_eval_episodes"]) == (kept["global_step"], n)
