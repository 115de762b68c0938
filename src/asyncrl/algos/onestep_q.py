"""Asynchronous one-step Q-learning (Mnih et al., 2016, Algorithm S1).

y = r + gamma max_a' Q(s', a'; theta^-) (r alone at a terminal s'). The gradients of the
transitions of ``async_update`` steps are accumulated and applied together, or sooner at an
episode end (I_AsyncUpdate in the paper): the accumulated gradient is that of the summed loss,
taken in one batched backward pass (tests/test_optim.py checks the two are equal), divided by
``async_update`` x envs so that every transition weighs the same however short the rollout.
"""

from __future__ import annotations

from asyncrl.algos.qlearning import ValueBased, masked_max
from asyncrl.algos.settings import OneStepSettings


class OneStepQ(ValueBased):
    name = "onestep-q"
    cfg: OneStepSettings
    update_at_episode_end = True

    def rollout_length(self) -> int:
        return self.cfg.async_update

    def horizon(self) -> int:
        return 1

    def bootstrap(self, target_q, rollout):
        return masked_max(target_q, rollout.masks[1:])  # the max over s_{t+1}'s valid actions
