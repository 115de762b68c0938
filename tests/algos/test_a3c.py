"""The A3C loss on hand-made rollouts."""

import math

import numpy as np
import pytest
import torch

from asyncrl.algos.a3c import A3C
from asyncrl.config import Config
from asyncrl.envs import ActionSpace, EnvInfo
from asyncrl.rollout import Rollout
from tests.oracles import spec_of

INFO = EnvInfo("Test-v0", obs_shape=(2,), obs_dtype="float32", action=ActionSpace("discrete", 2))


def make(value_bias=0.0, **cfg):
    # t_max = the rollouts' length: the loss divides by t_max x envs
    cfg = Config(gamma=0.5, hidden=(4,), **{"t_max": 2, **cfg})
    algo = A3C(cfg, INFO)
    from asyncrl.models import build_model

    model = build_model(spec_of(algo))
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.v_head.bias.fill_(value_bias)  # uniform policy, V = value_bias everywhere
    return algo, model


def rollout(rewards, ends=None, terminated=None, valid=None, actions=None):
    T = len(rewards)
    ro = Rollout.empty(T, 1, (2,))
    ro.rewards[:, 0] = rewards
    ro.ends[:, 0] = ends if ends is not None else False
    ro.terminated[:, 0] = terminated if terminated is not None else False
    ro.valid[:, 0] = valid if valid is not None else True
    ro.actions[:, 0] = actions if actions is not None else 0
    return ro


def test_loss_by_hand():
    # V = 0, gamma = .5, rewards [1, 1], bootstrap V(s_2) = 0: returns [1.5, 1], A = [1.5, 1]
    algo, model = make(entropy_coef=0.01, value_coef=0.5)
    loss, stats = algo.loss(model, rollout([1.0, 1.0]))
    log2 = math.log(2)
    assert stats["loss/policy_loss"] == pytest.approx(log2 * 1.25, rel=1e-5)
    assert stats["loss/value_loss"] == pytest.approx((1.5**2 + 1.0) / 2, rel=1e-5)
    assert stats["loss/entropy"] == pytest.approx(log2, rel=1e-5)
    assert float(loss.detach()) == pytest.approx(log2 * 1.25 + 0.5 * 1.625 - 0.01 * log2, rel=1e-5)


def test_bootstrap_from_value_and_terminal_does_not():
    algo, model = make(value_bias=2.0)
    # returns [1 + .5*(1 + .5*2), 1 + .5*2] = [2, 2] = V: no advantage, no value error
    _, stats = algo.loss(model, rollout([1.0, 1.0]))
    assert stats["loss/value_loss"] == pytest.approx(0.0, abs=1e-10)
    # terminated at the last step: returns [1.5, 1], errors [-.5, -1]
    _, stats = algo.loss(model, rollout([1.0, 1.0], ends=[False, True], terminated=[False, True]))
    assert stats["loss/value_loss"] == pytest.approx((0.25 + 1.0) / 2, rel=1e-5)
    # truncated at the last step: bootstraps from V(final obs) = 2 again
    _, stats = algo.loss(model, rollout([1.0, 1.0], ends=[False, True], terminated=[False, False]))
    assert stats["loss/value_loss"] == pytest.approx(0.0, abs=1e-10)


def test_invalid_autoreset_steps_are_masked_out():
    algo, model = make(t_max=3)
    full = algo.loss(
        model, rollout([1.0, 1.0, 0.0], ends=[False, True, False], terminated=[False, True, False])
    )[1]
    masked = algo.loss(
        model,
        rollout(
            [1.0, 1.0, 0.0],
            ends=[False, True, False],
            terminated=[False, True, False],
            valid=[True, True, False],
        ),
    )[1]
    # the reset step has reward 0 and return 0 under V = 0: counted or masked, it adds nothing,
    # and masking it does not change the weight of the others (fixed denominator T x B)
    assert masked["loss/value_loss"] == pytest.approx(full["loss/value_loss"], rel=1e-5)
    assert masked["loss/entropy"] == pytest.approx(full["loss/entropy"] * 2 / 3, rel=1e-5)


def test_entropy_bonus_rewards_entropy():
    algo, model = make(entropy_coef=1.0, value_coef=0.0)
    ro = rollout([0.0, 0.0])
    loss, stats = algo.loss(model, ro)
    loss.backward()
    # one gradient-descent step on the policy head's bias must make the policy *more* uniform
    # (it already is: the gradient is zero) -- so start from a peaked policy instead
    with torch.no_grad():
        model.pi_head.bias.copy_(torch.tensor([2.0, -2.0]))
    model.zero_grad()
    loss, stats = algo.loss(model, ro)
    loss.backward()
    with torch.no_grad():
        model.pi_head.bias -= 0.1 * model.pi_head.bias.grad
    _, after = algo.loss(model, ro)
    assert after["loss/entropy"] > stats["loss/entropy"]


def test_the_entropy_bonus_anneals_with_the_global_step_a_rollout_starts_at():
    # beta from 0.01 to 0.001 over 1,000 steps, then held: 0.0055 halfway; the rest of the loss
    # is test_loss_by_hand's policy term (A = [1.5, 1] under a uniform policy, no critic weight)
    algo, model = make(
        entropy_coef=0.01, entropy_final=0.001, entropy_anneal_steps=1000, value_coef=0.0
    )
    log2 = math.log(2)
    for step, beta in [(0, 0.01), (500, 0.0055), (1000, 0.001), (10**6, 0.001)]:
        algo.begin_rollout(model, step)
        loss, _ = algo.loss(model, rollout([1.0, 1.0]))
        assert float(loss.detach()) == pytest.approx(log2 * 1.25 - beta * log2, rel=1e-6), step


def test_advantage_is_detached_from_the_critic():
    algo, model = make(value_bias=0.5, entropy_coef=0.0, value_coef=0.0)
    loss, _ = algo.loss(model, rollout([1.0, 1.0], actions=[0, 1]))
    loss.backward()
    assert model.v_head.bias.grad is None or float(model.v_head.bias.grad.abs().sum()) == 0.0
    assert float(model.pi_head.bias.grad.abs().sum()) > 0


def test_gae_lambda_one_equals_nstep():
    a1, m1 = make(value_bias=0.3, t_max=3)
    a2, m2 = make(value_bias=0.3, gae_lambda=1.0, t_max=3)
    ro = rollout([1.0, 0.5, 2.0], actions=[0, 1, 1])
    l1, _s1 = a1.loss(m1, ro)
    l2, _s2 = a2.loss(m2, ro)
    assert float(l1.detach()) == pytest.approx(float(l2.detach()), rel=1e-6)


def test_sample_categorical_follows_the_probabilities():
    from asyncrl.distributions import sample_categorical

    rng = np.random.default_rng(0)
    probs = np.tile(np.array([[0.1, 0.6, 0.3]], np.float32), (20000, 1))
    counts = np.bincount(sample_categorical(probs, rng), minlength=3) / 20000
    np.testing.assert_allclose(counts, [0.1, 0.6, 0.3], atol=0.015)


def test_normalized_advantages_scale_the_policy_gradient_and_leave_the_critic():
    """V = 0, gamma 0.5, rewards [1, 0, 4]: returns [2, 2, 4] = the advantages; normalised
    (mean 8/3, std sqrt(8/9)) they are [-1/sqrt 2, -1/sqrt 2, sqrt 2]. With a uniform policy
    d log pi(a) / d logit_0 = 1[a = 0] - 1/2, so for actions [0, 1, 1] the loss's gradient on
    logit 0 is -(1/3) sum_t A_t (1[a_t = 0] - 1/2): 1/(3 sqrt 2) normalised, 2/3 without."""
    ro = rollout([1.0, 0.0, 4.0], actions=[0, 1, 1])
    grads, stats = [], []
    for normalize in (True, False):
        algo, model = make(t_max=3, entropy_coef=0.0, normalize_advantage=normalize)
        loss, s = algo.loss(model, ro)
        loss.backward()
        grads.append(float(model.pi_head.bias.grad[0]))
        stats.append(s["loss/value_loss"])
    assert grads[0] == pytest.approx(1 / (3 * math.sqrt(2)), rel=1e-5)
    assert grads[1] == pytest.approx(2 / 3, rel=1e-5)
    assert stats[0] == pytest.approx(stats[1]) == pytest.approx((4 + 4 + 16) / 3)
