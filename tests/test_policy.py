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


# ---------------------------------------------------------------- action spaces and masks
def biased_policy(action, algo="a3c", kind="actor-critic"):
    """A policy whose head prefers the last action (of each part) by far."""
    from asyncrl.envs import ActionSpace
    from asyncrl.models import ModelSpec

    spec = ModelSpec(kind, (2,), action, hidden=(4,))  # type: ignore[arg-type]
    model = build_model(spec)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        head = model.pi_head if kind == "actor-critic" else model.head
        parts = action.nvec if action.kind == "multi_discrete" else (action.n,)
        head.bias[np.cumsum(parts) - 1] = 10.0
    assert isinstance(action, ActionSpace)
    return Policy(model, algo, spec, "Test-v0")


@pytest.mark.parametrize(("algo", "kind"), [("a3c", "actor-critic"), ("nstep-q", "q")])
def test_a_masked_action_is_never_chosen_greedily_or_by_sampling(algo, kind):
    from asyncrl.envs import ActionSpace

    policy = biased_policy(ActionSpace("discrete", n=4, start=(1,)), algo, kind)
    obs = np.zeros(2, np.float32)
    assert policy.act(obs) == 4  # the last action, start 1 added
    assert policy.act(obs, action_mask=np.array([1, 1, 0, 0], np.int8)) in (1, 2)  # Taxi's int8
    batch = np.zeros((5_000, 2), np.float32)
    mask = np.array([[True, False, True, False]]).repeat(5_000, 0)
    assert set(policy.act(batch, action_mask=mask).tolist()) <= {1, 3}
    if kind == "actor-critic":
        drawn = policy.act(
            batch, deterministic=False, rng=np.random.default_rng(0), action_mask=mask
        )
        assert set(drawn.tolist()) == {1, 3}  # both valid ones drawn, no masked one


def test_a_multi_discrete_policy_masks_each_part_and_returns_the_spaces_actions():
    from asyncrl.envs import ActionSpace

    action = ActionSpace("multi_discrete", shape=(2,), nvec=(2, 3), start=(0, 10))
    policy = biased_policy(action)
    obs = np.zeros(2, np.float32)
    np.testing.assert_array_equal(policy.act(obs), [1, 12])
    np.testing.assert_array_equal(
        policy.act(obs, action_mask=np.array([True, False, False, True, False])), [0, 11]
    )


@pytest.mark.parametrize(
    ("mask", "needle"),
    [
        (np.ones(3, bool), r"action_mask has shape \(3,\); give \(4,\)"),
        (np.ones((2, 4), bool), r"action_mask has shape \(2, 4\); give \(4,\)"),
        (np.ones(4, np.float32), "action_mask has dtype float32; give bool"),
        (np.array([0, 2, 1, 0]), "action_mask has dtype int64; give bool"),
        (np.zeros(4, bool), "action_mask row 0 allows no action; give at least one"),
    ],
)
def test_a_mask_that_does_not_fit_is_one_line(mask, needle):
    from asyncrl.envs import ActionSpace

    policy = biased_policy(ActionSpace("discrete", n=4))
    with pytest.raises(UserError, match=needle) as e:
        policy.act(np.zeros(2, np.float32), action_mask=mask)
    assert "\n" not in str(e.value)


def test_a_mask_for_box_or_multi_binary_actions_is_refused():
    from asyncrl.envs import ActionSpace
    from asyncrl.models import ModelSpec

    spec = ModelSpec("actor-critic", (2,), ActionSpace("multi_binary", shape=(3,)), hidden=(4,))
    policy = Policy(build_model(spec), "a3c", spec, "Test-v0")
    bits = policy.act(np.zeros(2, np.float32))
    assert bits.shape == (3,) and bits.dtype == np.int8
    with pytest.raises(UserError, match="action_mask is for Discrete and MultiDiscrete actions"):
        policy.act(np.zeros(2, np.float32), action_mask=np.ones(3, bool))
