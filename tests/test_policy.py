"""A loaded policy acting outside training: the context of a core that takes the previous
action and reward (--prev-action-reward) is built as the workers build it."""

import numpy as np
import pytest
import torch

from asyncrl.algos.a3c import A3C
from asyncrl.errors import UserError
from asyncrl.models import build_model
from asyncrl.policy import Policy
from tests.oracles import mlp_spec


def recording_policy(**spec_kw):
    spec = mlp_spec(
        "actor-critic", 4, 3, hidden=(8,), core="lstm", core_size=8, prev_action_reward=True,
        **spec_kw,
    )  # fmt: skip
    policy = Policy(build_model(spec), "a3c", spec, "Test-v0")
    seen = []

    def eval_step(model, obs, state, first, deterministic, rng, context=None, mask=None):
        seen.append(None if context is None else context.clone())
        return A3C.eval_step(model, obs, state, first, deterministic, rng, context, mask)

    policy._eval_step = eval_step
    return policy, seen


def test_the_policy_gives_its_core_its_last_actions_and_the_learning_reward():
    policy, seen = recording_policy(reward_clip=1.0, reward_scale=0.5)
    obs = np.random.default_rng(0).normal(size=(3, 2, 4)).astype(np.float32)
    a0 = policy.act(obs[0])
    np.testing.assert_array_equal(seen[0], np.zeros((2, 4)))  # a fresh start: nothing before
    with pytest.raises(UserError, match="pass reward="):
        policy.act(obs[1])
    a1 = policy.act(obs[1], reward=np.array([3.0, -0.5]), first=np.array([False, True]))
    expected = np.zeros((2, 4), np.float32)
    expected[0, a0[0]] = 1.0
    expected[0, 3] = 0.5  # 3 clipped to 1 (Atari's learning reward), times --reward-scale
    np.testing.assert_array_equal(seen[-1], expected)  # env 1 starts an episode: zeros
    policy.act(obs[2], reward=np.array([0.0, -2.0]))
    expected = np.zeros((2, 4), np.float32)
    expected[[0, 1], a1] = 1.0
    expected[1, 3] = -0.5
    np.testing.assert_array_equal(seen[-1], expected)
    policy.reset()
    policy.act(obs[0])  # after a reset no reward is needed
    assert not seen[-1].any()


def test_acting_for_some_rows_keeps_the_other_rows_last_actions():
    policy, seen = recording_policy()
    obs = np.random.default_rng(1).normal(size=(3, 4)).astype(np.float32)
    first = policy.act(obs)
    policy.act_rows(obs, np.array([2]), reward=np.array([0.0, 0.0, 1.0]))
    np.testing.assert_array_equal(seen[-1][0], [*(np.arange(3) == first[2]), 1.0])
    policy.act(obs, reward=np.zeros(3))
    assert policy.last_action is not None and seen[-1].shape == (3, 4)
    np.testing.assert_array_equal(seen[-1][:2, :3], np.eye(3)[first[:2]])  # rows 0, 1 as before


def test_a_policy_without_the_context_ignores_the_reward():
    spec = mlp_spec("actor-critic", 4, 3, hidden=(8,))
    policy = Policy(build_model(spec), "a3c", spec, "Test-v0")
    obs = torch.zeros(4).numpy()
    assert policy.act(obs) == policy.act(obs, reward=5.0)
    assert policy.last_action is None
