"""A3C: asynchronous advantage actor-critic (Mnih et al., 2016, Algorithm S3).

Per rollout of up to t_max steps (of each of the worker's envs):

    R_t   = forward-view n-step return, bootstrapped from V(s_T) (asyncrl.targets)
    A_t   = R_t - V(s_t)                          (or GAE(lambda) with --gae-lambda)
    loss  = -log pi(a_t|s_t) * A_t                 policy gradient, A_t detached
            + value_coef * (R_t - V(s_t))^2        critic
            - entropy_coef * H(pi(.|s_t))          the bonus *rewards* entropy

The gradient of the whole rollout comes from one batched forward and backward pass, which equals
the paper's per-step accumulation of d(theta) (tests/test_optim.py checks this). Deviation: the
paper sums the per-step terms; we average them over the valid transitions, so the learning rate
does not have to change with t_max and the number of envs per worker.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from asyncrl.algos.base import Algorithm, sample_categorical
from asyncrl.models import ModelSpec
from asyncrl.rollout import Rollout
from asyncrl.targets import gae_advantages, nstep_returns


class A3C(Algorithm):
    name = "a3c"

    def model_spec(self) -> ModelSpec:
        return ModelSpec(
            kind="actor-critic",
            obs_dim=self.info.obs_dim,
            n_actions=self.info.n_actions,
            hidden=self.cfg.hidden_sizes,
            shared_trunk=self.cfg.shared_trunk,
        )

    def act(self, model, obs, global_step, rng):
        return sample_categorical(torch.softmax(model.logits(obs), dim=-1).numpy(), rng)

    @staticmethod
    def greedy(model: nn.Module, obs: torch.Tensor) -> torch.Tensor:
        return model.logits(obs).argmax(-1)

    def loss(self, model, rollout: Rollout, target_model=None):
        cfg = self.cfg
        T, B = rollout.t_max, rollout.num_envs
        logits, values = model(rollout.obs_tensor())
        logits = logits.view(T + 1, B, -1)[:T]
        values = values.view(T + 1, B)
        v = values[:T]
        v_np = v.detach().numpy()
        next_v = values[1:].detach().numpy()  # after an episode end: V(final observation)

        if cfg.gae_lambda is None:
            returns = nstep_returns(
                rollout.rewards,
                next_v,
                rollout.terminated,
                rollout.ends,
                cfg.gamma,
                cfg.horizon,
                cfg.missing,
            )
            adv = returns - v_np
        else:
            adv = gae_advantages(
                rollout.rewards,
                v_np,
                next_v,
                rollout.terminated,
                rollout.ends,
                cfg.gamma,
                cfg.gae_lambda,
            )
            returns = adv + v_np
        assert returns.shape == (T, B), returns.shape

        mask = torch.from_numpy(rollout.valid).float()
        n = mask.sum().clamp(min=1.0)
        logp = F.log_softmax(logits, dim=-1)
        logp_a = logp.gather(-1, torch.from_numpy(rollout.actions).unsqueeze(-1)).squeeze(-1)
        entropy = -(logp.exp() * logp).sum(-1)

        policy_loss = -(logp_a * torch.from_numpy(adv) * mask).sum() / n
        value_loss = ((torch.from_numpy(returns) - v).pow(2) * mask).sum() / n
        entropy_mean = (entropy * mask).sum() / n
        loss = policy_loss + cfg.value_coef * value_loss - cfg.entropy_coef * entropy_mean
        return loss, {
            "policy_loss": float(policy_loss.detach()),
            "value_loss": float(value_loss.detach()),
            "entropy": float(entropy_mean.detach()),
        }
