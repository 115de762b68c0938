"""Asynchronous one-step Sarsa (Mnih et al., 2016, Section 4).

As one-step Q-learning, but the target bootstraps from the action actually taken next:
y = r + gamma Q(s', a'; theta^-). The a' of the last step of a rollout is drawn at the end of
the rollout and is the first action the worker takes in the next one.
"""

from __future__ import annotations

import numpy as np

from asyncrl.algos.qlearning import ValueBased


class OneStepSarsa(ValueBased):
    name = "onestep-sarsa"
    update_at_episode_end = True
    needs_next_action = True

    def rollout_length(self) -> int:
        return self.cfg.async_update

    def horizon(self) -> int:
        return 1

    def bootstrap(self, target_q, rollout):
        next_actions = np.concatenate([rollout.actions[1:], rollout.next_actions[None]])
        return np.take_along_axis(target_q, next_actions[..., None], axis=-1)[..., 0]
