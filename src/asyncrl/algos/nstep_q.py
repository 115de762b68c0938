"""Asynchronous n-step Q-learning (Mnih et al., 2016, Algorithm S2).

Forward-view targets over a rollout of up to t_max steps, bootstrapped from
max_a Q(s, a; theta^-):  y_t = r_t + gamma r_{t+1} + ... + gamma^k max_a Q(s_{t+k}, a; theta^-).
"""

from __future__ import annotations

from asyncrl.algos.qlearning import ValueBased, masked_max


class NStepQ(ValueBased):
    name = "nstep-q"

    def horizon(self) -> int:
        return self.cfg.horizon

    def bootstrap(self, target_q, rollout):
        return masked_max(target_q, rollout.masks[1:])  # the max over s_{t+1}'s valid actions
