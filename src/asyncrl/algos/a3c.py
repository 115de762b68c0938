"""A3C: asynchronous advantage actor-critic (Mnih et al., 2016, Algorithm S3).

Per rollout of up to t_max steps (of each of the worker's envs):

    R_t   = forward-view n-step return, bootstrapped from V(s_T) (asyncrl.targets; with
            --n-step n, a return of at most n rewards)
    A_t   = R_t - V(s_t)                          (or GAE(lambda) with --gae-lambda; scaled to
                                                   mean 0, std 1 with --normalize-advantage)
    (--vtrace: R_t and A_t are V-trace's, learnt at the global parameters of the moment the
    rollout ends rather than those that acted; see :meth:`A3C.targets`)
    loss  = -log pi(a_t|s_t) * A_t                 policy gradient, A_t detached
            + value_coef * (R_t - V(s_t))^2        critic
            - beta * H(pi(.|s_t))                  the bonus *rewards* entropy: beta is
                                                   --entropy-coef (annealed to --entropy-final
                                                   where given: entropy_coef_at)

pi is whatever distribution the action space calls for (softmax for Discrete, Gaussian for
Box): this file only asks it for log_prob, entropy, sample and mode.

The network's core carries a state per env from rollout to rollout (empty for the identity
core; (h, c) for ``--core lstm``, the paper's recurrent agent): the state at the start of a
rollout is kept, and the loss recomputes the rollout from it in one unroll (truncated
backpropagation over the rollout: no gradient reaches the previous one). A recurrent state
restarts from zero at the first observation of each episode: with next-step autoreset that is
the row *after* the reset step (the row of the reset step holds the old episode's final
observation, whose value the bootstrap needs with the old episode's state).

The gradient of the whole rollout comes from one batched forward and backward pass, which equals
the paper's per-step accumulation of d(theta) (tests/test_optim.py checks this). Deviation: the
paper sums the per-step terms; we divide the sum by the rollout's size t_max x envs (a constant,
so every transition weighs the same), so the learning rate does not have to change with t_max
and the number of envs per worker.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from asyncrl.algos.base import Algorithm
from asyncrl.algos.settings import PolicyGradientSettings
from asyncrl.distributions import bound_excess
from asyncrl.envs import EnvInfo
from asyncrl.rollout import Rollout
from asyncrl.targets import gae_advantages, nstep_returns, vtrace


class A3C(Algorithm):
    name = "a3c"
    model_kind = "actor-critic"
    cfg: PolicyGradientSettings

    def __init__(self, cfg: PolicyGradientSettings, info: EnvInfo):
        super().__init__(cfg, info)
        self.entropy_coef = cfg.entropy_coef_at(0)  # beta for the rollout being collected

    def begin_rollout(self, model: Any, global_step: int) -> None:
        super().begin_rollout(model, global_step)
        # one beta a rollout, at the global step it starts from (as the lr is one an update)
        self.entropy_coef = self.cfg.entropy_coef_at(global_step)

    @property
    def fresh_parameters(self) -> bool:  # type: ignore[override]
        return self.cfg.vtrace

    def act(self, model, obs, global_step, rng, first, context=None, mask=None):
        params = self.network_step(model, obs, first, context)
        return model.distribution(params, mask).sample_logp(rng)

    @classmethod
    def eval_step(cls, model, obs, state, first, deterministic, rng, context=None, mask=None):
        params, state = model.act(obs, state, first, context)
        dist = model.distribution(params, mask)
        return (dist.mode().numpy() if deterministic else dist.sample(rng)), state

    def loss(self, model, rollout: Rollout, target_model=None):
        cfg = self.cfg
        T = rollout.t_max
        params, values = self.unroll(model, rollout)  # (T+1, B, ...), (T+1, B)
        # the values keep the bootstrap row; the masks are those the policy acted with
        dist = model.distribution(params[:T], rollout.masks_at(slice(T)))
        v = values[:T]
        logp_a = dist.log_prob(rollout.actions_tensor())
        returns, adv, stats = self.targets(rollout, values.detach().numpy(), logp_a)
        mask = torch.from_numpy(rollout.valid).float()
        n = self.loss_denominator(rollout)
        policy_loss = -(logp_a * torch.from_numpy(adv) * mask).sum() / n
        value_loss = ((torch.from_numpy(returns) - v).pow(2) * mask).sum() / n
        entropy = (dist.entropy() * mask).sum() / n
        loss = policy_loss + cfg.value_coef * value_loss - self.entropy_coef * entropy
        if cfg.bound_coef:
            excess = bound_excess(model.action, dist)
            if excess is not None:
                loss = loss + cfg.bound_coef * (excess * mask).sum() / n
        return loss, {
            "loss/policy_loss": float(policy_loss.detach()),
            "loss/value_loss": float(value_loss.detach()),
            "loss/entropy": float(entropy.detach()),
            **stats,
        }

    def targets(
        self,
        rollout: Rollout,
        values: np.ndarray,
        logp: torch.Tensor | None,
        envs: np.ndarray | None = None,
        rho_weighted: bool = True,
        normalize: bool = True,
    ) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        """The critic's targets and the policy gradient's advantages ``(T, B)`` from the
        values ``(T+1, B)`` and the log-probabilities of the actions taken under the policy
        being learnt (None: the behaviour policy's, recorded): n-step returns, GAE(lambda), or
        with --vtrace V-trace's, which weigh each step by its truncated importance weight pi/mu
        against the recorded behaviour policy mu (on-policy, pi = mu, V-trace's are the first
        two). Advantages scaled to mean 0, std 1 with --normalize-advantage. ``envs``: of
        those columns of the rollout only (``values`` and ``logp`` are theirs);
        ``rho_weighted``: V-trace's advantages with their rho (:func:`asyncrl.targets.vtrace`);
        ``normalize`` False: not scaled here (a caller that scales each minibatch's)."""
        cfg = self.cfg
        v, next_v = values[:-1], values[1:]  # after an episode end: V(final observation)
        cols = slice(None) if envs is None else envs
        r, term, ends = rollout.rewards[:, cols], rollout.terminated[:, cols], rollout.ends[:, cols]
        valid = rollout.valid[:, cols]
        stats: dict[str, float] = {}
        # the importance weights pi/mu: 1 where the parameters that learn are those that acted
        acted = rollout.logp[:, cols]
        log_rhos = np.zeros_like(acted) if logp is None else logp.detach().numpy() - acted
        if logp is not None and self.fresh_parameters and valid.any():
            rhos = np.exp(log_rhos[valid])
            stats = {"vtrace/rho_mean": float(rhos.mean()), "vtrace/rho_max": float(rhos.max())}
        if cfg.vtrace:
            lam = 1.0 if cfg.gae_lambda is None else cfg.gae_lambda
            returns, adv = vtrace(
                r, v, next_v, term, ends, log_rhos, cfg.gamma, cfg.rho_bar, cfg.c_bar, lam,
                rho_weighted,
            )  # fmt: skip
        elif cfg.gae_lambda is None:
            returns = nstep_returns(r, next_v, term, ends, cfg.gamma, cfg.horizon, cfg.missing)
            adv = returns - v
        else:
            adv = gae_advantages(r, v, next_v, term, ends, cfg.gamma, cfg.gae_lambda)
            returns = adv + v
        if cfg.normalize_advantage and normalize:
            adv = normalized(adv, valid)
        return returns, adv, stats


def normalized(adv: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Advantages scaled to mean 0 and std 1 over the rollout's valid transitions (the critic's
    targets keep the unscaled ones)."""
    v = adv[valid]
    if v.size < 2:
        return adv
    return ((adv - v.mean()) / (v.std() + 1e-8)).astype(adv.dtype)
