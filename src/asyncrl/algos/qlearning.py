"""What the paper's three value-based learners share (Mnih et al., 2016, Section 4).

* a Q-network, acting epsilon-greedily; each worker anneals epsilon from ``eps_start`` to a
  final value of its own, drawn from {0.1, 0.01, 0.5} with probabilities {0.4, 0.3, 0.3}
  (configurable), so the workers explore differently -- the paper's substitute for replay;
* the network's core state carried and stored as A3C's (:mod:`asyncrl.algos.a3c`); n-step and
  one-step Q take a recurrent core (not Sarsa, whose pending next action is chosen a step ahead
  of the state). The target network unrolls from the state the online network carried (R2D2's
  "stored state"; theta^- has no state of its own to carry): with a target copied every few
  thousand updates the two differ little;
* a shared target network theta^-, copied from the global parameters once every
  ``target_update`` global steps (:meth:`asyncrl.state.GlobalState.apply_update`);
* the loss (y_t - Q(s_t, a_t; theta))^2 summed over the valid transitions of the rollout and
  divided by the rollout's full size (every transition weighs the same), with targets y_t from
  :func:`asyncrl.targets.nstep_returns` and the bootstrap value each subclass picks.
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np
import torch

from asyncrl.algos.base import Algorithm
from asyncrl.algos.settings import QSettings
from asyncrl.errors import UserError
from asyncrl.rollout import Rollout
from asyncrl.targets import nstep_returns


class ValueBased(Algorithm):
    uses_target_network = True
    model_kind = "q"
    cfg: QSettings

    def start_worker(self, worker_id: int, rng: np.random.Generator) -> None:
        cfg = self.cfg
        self.eps_final = float(rng.choice(cfg.eps_finals, p=cfg.eps_probs))
        self.last_epsilon = cfg.eps_start

    def worker_state(self) -> dict:
        return {**super().worker_state(), "eps_final": self.eps_final}

    def load_worker_state(self, state: dict) -> None:
        super().load_worker_state(state)
        self.eps_final = state["eps_final"]

    def epsilon(self, global_step: int) -> float:
        cfg = self.cfg
        frac = min(1.0, global_step / cfg.eps_anneal_steps)
        return cfg.eps_start + frac * (self.eps_final - cfg.eps_start)

    def act(self, model, obs, global_step, rng, first, context=None, mask=None):
        q = self.network_step(model, obs, first, context)
        greedy = masked_argmax(q, mask)
        self.last_epsilon = eps = self.epsilon(global_step)
        explore = rng.random(greedy.shape[0]) < eps
        actions = greedy.copy()
        if mask is None:
            n = self.info.n_actions
            if explore.any():
                actions[explore] = rng.integers(n, size=int(explore.sum()))
        else:  # explore among the valid actions only: the k-th valid one, k uniform
            valid = mask.numpy()
            n = valid.sum(-1)
            if explore.any():
                k = rng.integers(n[explore])
                actions[explore] = (np.cumsum(valid[explore], -1) <= k[:, None]).sum(-1)
        # epsilon-greedy: eps/n for each (valid) action, plus 1 - eps for the greedy one
        p = np.where(actions == greedy, 1.0 - eps + eps / n, eps / n)
        return actions, np.log(p).astype(np.float32)

    @classmethod
    def eval_step(cls, model, obs, state, first, deterministic, rng, context=None, mask=None):
        if not deterministic:  # before the state moves on
            raise UserError(
                f"{cls.name} learns Q values and acts greedily at evaluation; its exploration "
                "epsilon is a training schedule, not a policy: evaluate it deterministically"
            )
        q, state = model.act(obs, state, first, context)
        return masked_argmax(q, mask), state

    @abstractmethod
    def horizon(self) -> int:
        """n of the n-step targets."""

    @abstractmethod
    def bootstrap(self, target_q: np.ndarray, rollout: Rollout) -> np.ndarray:
        """The value of s_{t+1} for every step, from Q(s_{t+1}, .; theta^-) of shape (T, B, A)."""

    def loss(self, model, rollout: Rollout, target_model=None):
        assert target_model is not None, "the Q methods bootstrap from the target network"
        T, B = rollout.t_max, rollout.num_envs
        q = self.unroll(model, rollout)[:T]
        with torch.no_grad():  # theta^- never receives gradients
            target_q = self.unroll(target_model, rollout)[1:].numpy()
        q_sa = q.gather(-1, rollout.actions_tensor().unsqueeze(-1)).squeeze(-1)
        targets = nstep_returns(
            rollout.rewards,
            self.bootstrap(target_q, rollout),
            rollout.terminated,
            rollout.ends,
            self.cfg.gamma,
            self.horizon(),
            self.cfg.missing,
        )
        assert targets.shape == (T, B), targets.shape
        mask = torch.from_numpy(rollout.valid).float()
        td = torch.from_numpy(targets) - q_sa
        loss = (td.pow(2) * mask).sum() / self.loss_denominator(rollout)
        max_q = (masked_max(q.detach().numpy(), rollout.masks[:T]) * rollout.valid).sum()
        max_q /= max(rollout.valid.sum(), 1)
        return loss, {
            "loss/q_loss": float(loss.detach()),
            "train/mean_max_q": float(max_q),
            "train/epsilon": self.last_epsilon,
        }


def masked_argmax(q: torch.Tensor, mask: torch.Tensor | None) -> np.ndarray:
    """argmax_a Q(s, a) per row over the valid actions (``mask``, bool, Q's shape; None: all)."""
    if mask is not None:
        q = q.masked_fill(~mask, -torch.inf)
    return q.argmax(-1).numpy()


def masked_max(q: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """max_a Q(s, a) over the valid actions (``masks``, bool, Q's shape; with no entries, an
    env without masks: all). Every row has one (:func:`asyncrl.actionmask.read_masks`)."""
    if not masks.shape[-1]:
        return q.max(-1)
    return np.where(masks, q, -np.inf).max(-1)
