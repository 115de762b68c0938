"""n-step targets, GAE: pure functions on numpy arrays or torch tensors.

Each function returns the same kind of array it was given. Time is the first axis; any trailing
axes (a worker's batch of envs) are carried along elementwise.

The paper (Mnih et al., 2016, Algorithm S2/S3) computes the *forward view* over a rollout of up
to t_max steps: every state gets the longest possible n-step return that the rollout holds,
bootstrapped from V of the state after the last step. :func:`nstep_returns` is that computation
over a rollout that may hold several episode ends, with an optional fixed horizon ``n`` and the
two policies for terms past the rollout that users ask for by name:

* ``missing="bootstrap"`` -- *use maximum terms possible*: a horizon that runs past the rollout
  is cut there and bootstrapped from V of the state after the rollout's last step (0 if that
  step is terminal);
* ``missing="zero"`` -- *missing terms treated as 0*: every term past the rollout, the bootstrap
  included, counts as 0.

An N-step target uses exactly N rewards and gamma^N (some public code silently uses N-1).
"""

from __future__ import annotations

from typing import Literal, TypeVar

import numpy as np
import torch

Array = TypeVar("Array", np.ndarray, torch.Tensor)
Missing = Literal["bootstrap", "zero"]
MISSING_MODES: tuple[str, ...] = ("bootstrap", "zero")


def _float_like(x: object, like: Array) -> Array:
    """``x`` (bool, scalar or array) as a float array of ``like``'s kind and dtype."""
    if isinstance(like, torch.Tensor):
        return torch.as_tensor(x, device=like.device).to(like.dtype)
    return np.asarray(x).astype(like.dtype)


def _check_missing(missing: str) -> None:
    if missing not in MISSING_MODES:
        raise ValueError(f"missing must be one of {MISSING_MODES}, got {missing!r}")


def nstep_returns(
    rewards: Array,
    next_values: Array,
    terminated: Array,
    ends: Array,
    gamma: float,
    n: int | None = None,
    missing: Missing = "bootstrap",
) -> Array:
    """n-step returns of a rollout that may hold several episode ends (the worker's form).

    Args:
        rewards: ``r_t``, shape ``(T, ...)``.
        next_values: ``V(s_{t+1})`` for every step; at an episode end this is V of the *final*
            observation, so a truncated episode bootstraps from it (a terminated one does not).
        terminated: step t reached a terminal state (its next value counts as 0).
        ends: step t ended its episode (terminated or truncated): no return crosses it.
        gamma: discount factor.
        n: horizon; ``None`` means the rollout length (the paper's forward view).
        missing: what a horizon that runs past the rollout gets (see the module docstring).

    An episode end inside the horizon always bootstraps from ``next_values`` times
    ``1 - terminated``, whatever ``missing`` says: the episode really ended there.
    """
    _check_missing(missing)
    T = rewards.shape[0]
    n = T if n is None else n
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    live = 1.0 - _float_like(terminated, rewards)  # (T, ...)
    end = _float_like(ends, rewards)
    # What the last step of the rollout bootstraps from when its episode goes on.
    boot = next_values[T - 1] * live[T - 1]
    boot_at_end = boot if missing == "bootstrap" else end[T - 1] * boot

    if n >= T:
        # Forward view to the end of the rollout: one backward sweep.
        out = rewards * 0.0
        ret = boot_at_end
        for t in range(T - 1, -1, -1):
            if t < T - 1:
                ret = end[t] * next_values[t] * live[t] + (1.0 - end[t]) * ret
            ret = rewards[t] + gamma * ret
            out[t] = ret
        return out

    out = rewards * 0.0
    for t in range(T):
        ret = rewards[t] * 0.0
        alive = ret + 1.0  # 1 while the horizon from t is still inside t's episode
        disc = 1.0
        for k in range(t, min(t + n, T)):
            ret = ret + alive * disc * rewards[k]
            disc *= gamma
            if k == T - 1:  # the rollout ends (inside the horizon, or exactly at it)
                ret = ret + alive * disc * boot_at_end
            elif k == t + n - 1:  # horizon reached inside the rollout
                ret = ret + alive * disc * (
                    end[k] * next_values[k] * live[k] + (1.0 - end[k]) * next_values[k]
                )
            else:
                ret = ret + alive * disc * end[k] * next_values[k] * live[k]
                alive = alive * (1.0 - end[k])
        out[t] = ret
    return out


def gae_advantages(
    rewards: Array,
    values: Array,
    next_values: Array,
    terminated: Array,
    ends: Array,
    gamma: float,
    lam: float,
) -> Array:
    """Generalized advantage estimation (Schulman et al., 2016) over a rollout.

    Same conventions as :func:`nstep_returns` with ``missing="bootstrap"``; ``lam=1`` gives the
    paper's forward-view advantages ``R_t - V(s_t)``. Returns the advantages; the value targets
    are ``advantages + values``.
    """
    T = rewards.shape[0]
    live = 1.0 - _float_like(terminated, rewards)
    cont = 1.0 - _float_like(ends, rewards)
    deltas = rewards + gamma * next_values * live - values
    out = rewards * 0.0
    adv = deltas[T - 1] * 0.0
    for t in range(T - 1, -1, -1):
        adv = deltas[t] + gamma * lam * cont[t] * adv
        out[t] = adv
    return out


def vtrace(
    rewards: Array,
    values: Array,
    next_values: Array,
    terminated: Array,
    ends: Array,
    log_rhos: Array,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    lam: float = 1.0,
    rho_weighted: bool = True,
) -> tuple[Array, Array]:
    """V-trace targets and policy-gradient advantages (Espeholt et al., 2018, Section 4.1) of a
    rollout acted by a behaviour policy mu and learned by pi.

    Same conventions as :func:`gae_advantages`; ``log_rhos`` are log pi(a_t|x_t) - log
    mu(a_t|x_t). With rho_t = min(rho_bar, pi/mu) and c_t = lam * min(c_bar, pi/mu):

        delta_t = rho_t (r_t + gamma V(x_{t+1}) - V(x_t))
        v_t     = V(x_t) + delta_t + gamma c_t (v_{t+1} - V(x_{t+1}))      (v_T = V(x_T))
        A_t     = rho_t (r_t + gamma v_{t+1} - V(x_t))

    No term crosses an episode end; there ``V(x_{t+1})`` is that of the final observation
    (0 when terminated) and ``v_{t+1}`` is it too. On-policy (``log_rhos`` = 0, the bars >= 1)
    ``v_t`` is the n-step return to the rollout's end (:func:`nstep_returns`), or GAE(lam)'s
    value target. Returns ``(v, A)``; both are targets (no gradient is meant to flow through
    them: pass detached values and ratios). ``rho_weighted`` False: A_t without its rho_t, for
    a loss that applies the importance weight itself (APPO's clipped ratio, --vtrace-pg ratio).
    """
    T = rewards.shape[0]
    live = 1.0 - _float_like(terminated, rewards)
    cont = 1.0 - _float_like(ends, rewards)
    if isinstance(log_rhos, torch.Tensor):
        rhos = torch.exp(log_rhos).to(rewards.dtype)
        clip_rho, clip_c = torch.clamp(rhos, max=rho_bar), torch.clamp(rhos, max=c_bar)
    else:
        rhos = np.exp(log_rhos).astype(rewards.dtype)
        clip_rho, clip_c = np.minimum(rhos, rho_bar), np.minimum(rhos, c_bar)
    boot = live * next_values  # V(x_{t+1}), 0 past a terminal state
    deltas = clip_rho * (rewards + gamma * boot - values)
    vs_minus_v = rewards * 0.0
    next_acc = rewards * 0.0  # v_{t+1} - V(x_{t+1}) inside the episode (0 past the rollout)
    acc = deltas[T - 1] * 0.0
    for t in range(T - 1, -1, -1):
        next_acc[t] = cont[t] * acc
        acc = deltas[t] + gamma * lam * clip_c[t] * next_acc[t]
        vs_minus_v[t] = acc
    vs = values + vs_minus_v
    advantages = rewards + gamma * (boot + next_acc) - values
    return vs, clip_rho * advantages if rho_weighted else advantages
