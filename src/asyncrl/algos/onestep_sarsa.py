"""Asynchronous one-step Sarsa (Mnih et al., 2016, Section 4).

As one-step Q-learning, but the target bootstraps from the action actually taken next:
y = r + gamma Q(s', a'; theta^-). The a' of the last step of a rollout is drawn at the end of
the rollout (:meth:`end_rollout`), kept as this worker's pending action, and is the first
action the worker takes in the next rollout.
"""

from __future__ import annotations

import numpy as np
import torch

from asyncrl.algos.qlearning import ValueBased
from asyncrl.algos.settings import OneStepSettings


class OneStepSarsa(ValueBased):
    name = "onestep-sarsa"
    cfg: OneStepSettings
    update_at_episode_end = True

    def start_worker(self, worker_id, rng):
        super().start_worker(worker_id, rng)
        # a' at the state after the last rollout, and its behaviour log-probability
        self.pending: tuple[np.ndarray, np.ndarray] | None = None

    def worker_state(self) -> dict:
        if self.pending is None:
            return {**super().worker_state(), "pending": None}
        actions, logp = self.pending
        return {**super().worker_state(), "pending": actions.copy(), "pending_logp": logp.copy()}

    def load_worker_state(self, state: dict) -> None:
        super().load_worker_state(state)
        actions = state["pending"]
        if actions is None:
            self.pending = None
            return
        # (a checkpoint written before the rollout kept log-probabilities has none: unused
        # by Sarsa's loss, so zeros do)
        logp = state.get("pending_logp")
        self.pending = (actions, np.zeros(actions.shape, np.float32) if logp is None else logp)

    def envs_restarted(self) -> None:
        self.pending = None  # drawn at the old game's state, not the new one's

    def rollout_length(self) -> int:
        return self.cfg.async_update

    def horizon(self) -> int:
        return 1

    def act(self, model, obs, global_step, rng, first, context=None, mask=None):
        if self.pending is not None:
            acted, self.pending = self.pending, None
            return acted
        return super().act(model, obs, global_step, rng, first, context, mask)

    def end_rollout(self, model, rollout, global_step, rng):
        obs, context = torch.from_numpy(rollout.obs[-1]), torch.from_numpy(rollout.context[-1])
        mask = rollout.masks_at(-1)  # the valid actions at obs[-1], where a' is taken
        self.pending = super().act(model, obs, global_step, rng, rollout.first[-1], context, mask)

    def bootstrap(self, target_q, rollout):
        assert self.pending is not None
        next_actions = np.concatenate([rollout.actions[1:], self.pending[0][None]])
        return np.take_along_axis(target_q, next_actions[..., None], axis=-1)[..., 0]
