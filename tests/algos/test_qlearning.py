"""The three Q losses on a hand-made transition batch (gamma = 0.5, targets checked by hand).

States are ids 0, 1, 2 (a one-dim observation); a table stands in for the Q-network so every
Q value is set by hand: the online net is 0 everywhere, the target net theta^- is
    Q-(1) = [4, 1],  Q-(2) = [3, 5].
The rollout: s0 -a0=0, r=1-> s1 -a1=1, r=2-> s2, and the action taken next at s2 is 0.
"""

import collections

import numpy as np
import pytest
import torch
from torch import nn

from asyncrl.algos import REGISTRY
from asyncrl.config import Config
from asyncrl.envs import ActionSpace, EnvInfo
from asyncrl.rollout import Rollout

INFO = EnvInfo("Test-v0", obs_shape=(1,), obs_dtype="float32", action=ActionSpace("discrete", 2))


class Table(nn.Module):
    """A tabular Q "network" with the networks' interface (a core with an empty state)."""

    def __init__(self, values):
        super().__init__()
        self.q = nn.Parameter(torch.tensor(values, dtype=torch.float32))

    def initial_state(self, batch):
        return torch.zeros(batch, 0)

    def act(self, obs, state, first, context=None):
        return self.q[obs[..., 0].long()], state

    def unroll(self, obs, state, first, context=None):
        return self.q[obs[..., 0].long()]


def batch(terminal=False):
    ro = Rollout.empty(2, 1, (1,))
    ro.obs[:, 0, 0] = [0, 1, 2]
    ro.actions[:, 0] = [0, 1]
    ro.rewards[:, 0] = [1.0, 2.0]
    ro.valid[:] = True
    ro.ends[1, 0] = ro.terminated[1, 0] = terminal
    return ro


def loss_and_targets(algo_name, ro, **cfg):
    # rollouts of 2 steps: the losses divide by t_max (or async_update) x envs = 2
    algo = REGISTRY[algo_name](Config(gamma=0.5, **{"t_max": 2, "async_update": 2, **cfg}), INFO)
    algo.start_worker(0, np.random.default_rng(0))
    # Sarsa's next action at s2 and its log-probability (ignored by the others)
    algo.pending = (np.zeros(1, np.int64), np.zeros(1, np.float32))
    online = Table([[0.0, 0.0]] * 3)
    target = Table([[0.0, 0.0], [4.0, 1.0], [3.0, 5.0]])
    target.requires_grad_(False)
    loss, _ = algo.loss(online, ro, target)
    loss.backward()
    # online Q is 0, so the gradient of mean (y - Q)^2 w.r.t. Q(s_t, a_t) is -2 y_t / T
    grads = online.q.grad
    targets = [-float(grads[0, 0]) * 2 / 2, -float(grads[1, 1]) * 2 / 2]
    return loss, targets, target


def test_nstep_q_targets():
    # y1 = 2 + .5 max Q-(2) = 4.5 ; y0 = 1 + .5 * 4.5 = 3.25 (forward view, no max at s1)
    loss, y, _ = loss_and_targets("nstep-q", batch())
    assert y == pytest.approx([3.25, 4.5])
    assert float(loss.detach()) == pytest.approx((3.25**2 + 4.5**2) / 2)


def test_nstep_q_with_horizon_one_is_one_step():
    _, y, _ = loss_and_targets("nstep-q", batch(), n_step=1)
    assert y == pytest.approx([1 + 0.5 * 4, 4.5])


def test_onestep_q_targets():
    _, y, _ = loss_and_targets("onestep-q", batch())
    assert y == pytest.approx([1 + 0.5 * 4, 2 + 0.5 * 5])


def test_onestep_sarsa_uses_the_next_action_actually_taken():
    # y0 bootstraps from Q-(s1, a1=1) = 1 (not the max 4); y1 from Q-(s2, next action 0) = 3
    _, y, _ = loss_and_targets("onestep-sarsa", batch())
    assert y == pytest.approx([1 + 0.5 * 1, 2 + 0.5 * 3])


@pytest.mark.parametrize("algo", ["nstep-q", "onestep-q", "onestep-sarsa"])
def test_terminal_transitions_do_not_bootstrap(algo):
    _, y, _ = loss_and_targets(algo, batch(terminal=True))
    assert y[1] == pytest.approx(2.0)


@pytest.mark.parametrize("algo", ["nstep-q", "onestep-q", "onestep-sarsa"])
def test_target_network_receives_no_gradient(algo):
    _, _, target = loss_and_targets(algo, batch())
    assert target.q.grad is None


def test_epsilon_anneals_to_a_per_worker_final_value():
    cfg = Config(algo="nstep-q", eps_anneal_steps=100)
    finals = collections.Counter()
    for worker in range(3000):
        algo = REGISTRY["nstep-q"](cfg, INFO)
        algo.start_worker(worker, np.random.default_rng(worker))
        finals[algo.eps_final] += 1
        assert algo.epsilon(0) == 1.0
        assert algo.epsilon(50) == pytest.approx(0.5 * (1 + algo.eps_final))
        assert algo.epsilon(10_000) == pytest.approx(algo.eps_final)
    freq = {k: v / 3000 for k, v in finals.items()}
    assert set(freq) == set(cfg.eps_finals)
    for eps, p in zip(cfg.eps_finals, cfg.eps_probs, strict=True):
        assert freq[eps] == pytest.approx(p, abs=0.04)


def test_paper_preset_has_the_papers_exploration():
    from asyncrl.presets import preset

    cfg = preset("paper", algo="nstep-q")  # the schedule is the Q methods'
    assert cfg.eps_finals == (0.1, 0.01, 0.5) and cfg.eps_probs == (0.4, 0.3, 0.3)
    assert cfg.target_update == 40_000 and cfg.async_update == 5


def test_epsilon_greedy_actions():
    algo = REGISTRY["onestep-q"](Config(eps_start=0.0, eps_finals=(0.0,), eps_probs=(1.0,)), INFO)
    algo.start_worker(0, np.random.default_rng(0))
    q = Table([[0.0, 1.0], [1.0, 0.0]])
    obs = torch.tensor([[0.0], [1.0]] * 50)
    rng = np.random.default_rng(0)
    with torch.no_grad():
        first = np.zeros(100, bool)
        greedy, logp = algo.act(q, obs, 0, rng, first)
        np.testing.assert_array_equal(greedy, [1, 0] * 50)
        np.testing.assert_array_equal(logp, 0.0)  # epsilon 0: the greedy action surely
        algo.eps_final = 1.0
        algo.cfg.eps_start = 1.0
        random, logp = algo.act(q, obs, 0, rng, first)
    assert 0.3 < (random != greedy).mean() < 0.7  # uniform: half disagree with greedy
    np.testing.assert_allclose(logp, np.log(0.5))  # epsilon 1: uniform over the two


@pytest.mark.parametrize("algo_name", ["onestep-q", "onestep-sarsa"])
def test_a_transition_weighs_the_same_in_a_rollout_cut_short(algo_name):
    # I_AsyncUpdate = 5: a rollout cut short at an episode end after 1 transition and a longer
    # one must give the first transition the same gradient (1/(5 x envs) each), not 5x more
    def grad_of_first(ro):
        algo = REGISTRY[algo_name](Config(gamma=0.5, async_update=5), INFO)
        algo.start_worker(0, np.random.default_rng(0))
        algo.pending = (np.zeros(1, np.int64), np.zeros(1, np.float32))
        online = Table([[0.0, 0.0]] * 3)
        target = Table([[0.0, 0.0], [4.0, 1.0], [3.0, 5.0]])
        loss, _ = algo.loss(online, ro, target)
        loss.backward()
        return float(online.q.grad[0, 0])

    short = batch(terminal=False).prefix(1)
    short.ends[0, 0] = True  # the episode ended (truncated) after one step
    long = batch(terminal=False)
    long.ends[0, 0] = True
    long.actions[1, 0] = 0  # Sarsa: the action taken at s1 is the pending one, as in `short`
    assert grad_of_first(short) == pytest.approx(grad_of_first(long))
    assert grad_of_first(short) == pytest.approx(-2 * (1 + 0.5 * 4) / 5)
