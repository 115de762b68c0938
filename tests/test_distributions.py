"""Action distributions against closed forms, and what the worker sends a Box env."""

import math

import numpy as np
import pytest
import torch

from asyncrl.distributions import (
    Categorical,
    DiagGaussian,
    bound_excess,
    distribution_for,
    sample_categorical,
)
from asyncrl.envs import ActionSpace
from tests.oracles import spec_for, spec_of


def test_gaussian_log_prob_and_entropy_sum_over_dimensions_closed_form():
    mean = torch.tensor([[0.0, 1.0], [2.0, -1.0]])
    std = torch.tensor([[1.0, 0.5], [2.0, 0.1]])
    a = torch.tensor([[0.5, 1.0], [0.0, -1.2]])
    d = DiagGaussian(mean, std)
    by_hand = (-((a - mean) ** 2) / (2 * std**2) - std.log() - 0.5 * math.log(2 * math.pi)).sum(-1)
    torch.testing.assert_close(d.log_prob(a), by_hand)
    torch.testing.assert_close(
        d.log_prob(a), torch.distributions.Normal(mean, std).log_prob(a).sum(-1)
    )
    torch.testing.assert_close(
        d.entropy(), (0.5 * math.log(2 * math.pi * math.e) + std.log()).sum(-1)
    )
    torch.testing.assert_close(d.mode(), mean)


def test_gaussian_samples_follow_mean_and_std():
    d = DiagGaussian(torch.tensor([[1.0, -2.0]]).repeat(50_000, 1), torch.tensor([0.5, 2.0]))
    x = d.sample(np.random.default_rng(0))
    assert x.dtype == np.float32 and x.shape == (50_000, 2)
    np.testing.assert_allclose(x.mean(0), [1.0, -2.0], atol=0.03)
    np.testing.assert_allclose(x.std(0), [0.5, 2.0], atol=0.03)


def test_categorical_matches_torch_and_samples_by_inverse_cdf():
    logits = torch.tensor([[1.0, 2.0, 0.5], [0.0, 0.0, 0.0]])
    d, ref = Categorical(logits), torch.distributions.Categorical(logits=logits)
    a = torch.tensor([1, 2])
    torch.testing.assert_close(d.log_prob(a), ref.log_prob(a))
    torch.testing.assert_close(d.entropy(), ref.entropy())
    assert d.mode().tolist() == [1, 0]
    rng = np.random.default_rng(0)
    probs = np.tile(np.array([[0.1, 0.6, 0.3]], np.float32), (20000, 1))
    counts = np.bincount(sample_categorical(probs, rng), minlength=3) / 20000
    np.testing.assert_allclose(counts, [0.1, 0.6, 0.3], atol=0.015)
    # a float32 row summing to less than 1 (by 1e-7 here) never draws its action of
    # probability 0, last or first, even for the draws at the very ends of [0, 1)
    short = np.array([[0.0, 0.3, 0.7 - 1e-7, 0.0]] * 4, np.float32)

    class Ends:
        def random(self, shape, dtype):
            return np.array([[0.0], [0.5], [1 - 2**-24], [np.nextafter(1, 0, dtype=dtype)]], dtype)

    assert set(sample_categorical(short, Ends()).tolist()) <= {1, 2}


def test_the_action_space_picks_the_distribution():
    box = ActionSpace("box", shape=(2,), low=(-1.0, -1.0), high=(1.0, 1.0))
    head = torch.zeros(3, 4)  # mean and log-std of 2 dimensions
    d = distribution_for(box, head)
    assert isinstance(d, DiagGaussian) and d.mean.shape == (3, 2)
    torch.testing.assert_close(d.std, torch.ones(3, 2))
    assert isinstance(distribution_for(ActionSpace("discrete", 3), torch.zeros(3, 3)), Categorical)


@pytest.mark.parametrize(
    ("std", "squash"), [("param", False), ("softplus", False), ("param", True)]
)
def test_box_actions_are_clipped_or_squashed_for_the_env_and_kept_raw_for_the_log_prob(
    std, squash, monkeypatch
):
    import typing

    from asyncrl import algos
    from asyncrl.algos.a3c import A3C
    from asyncrl.backends.local import SharedMemory, run_worker
    from asyncrl.config import Config
    from asyncrl.envs import probe_env
    from asyncrl.state import GlobalState

    class Recording(A3C):
        seen: typing.ClassVar[list] = []

        def loss(self, model, rollout, target_model=None):
            Recording.seen.append(rollout.actions.copy())
            return super().loss(model, rollout, target_model)

    sent = []
    monkeypatch.setitem(algos.REGISTRY, "a3c", Recording)
    cfg = Config(
        env="Pendulum-v1", steps=400, t_max=4, envs_per_worker=2, gaussian_std=std, squash=squash
    )
    info = probe_env(cfg.env)
    state = GlobalState.create(cfg, spec_of(Recording(cfg, info)), 1, False)
    with torch.no_grad():
        state.params.zero_()  # mean 0; log-std 0 (std 1) or softplus(0) (std ~0.69)
    from asyncrl.envs import make_vec_env as real_make

    def recording_make(*a, **k):
        env = real_make(*a, **k)
        orig = env.step

        def step(action):
            sent.append(np.array(action))
            return orig(action)

        env.step = step
        return env

    import asyncrl.worker as worker_mod

    monkeypatch.setattr(worker_mod, "make_vec_env", recording_make)

    class Outbox(list):
        send = list.append

    run_worker(0, 0, cfg, info, spec_for(cfg, info), SharedMemory.create(state, 1), None, Outbox())
    raw = np.concatenate([a.reshape(-1) for a in Recording.seen])
    to_env = np.concatenate([s.reshape(-1) for s in sent])
    assert np.abs(to_env).max() <= 2.0  # Pendulum's torque bounds
    assert (np.abs(raw) > 2.0).any() or std == "softplus"  # std 1: some samples beyond 2
    n = min(len(raw), len(to_env))
    expected = 2.0 * np.tanh(raw[:n]) if squash else np.clip(raw[:n], -2, 2)
    np.testing.assert_allclose(to_env[:n], expected, rtol=1e-5, atol=1e-6)


def test_squashed_gaussian_log_prob_is_that_of_the_tanh_of_the_sample():
    from asyncrl.distributions import TanhGaussian

    mean = torch.tensor([[0.0, 1.0], [2.0, -1.0]])
    std = torch.tensor([[1.0, 0.5], [2.0, 0.1]])
    u = torch.tensor([[0.5, 1.0], [8.0, -1.2]])  # 8: tanh saturates in float32, log_prob must not
    d = TanhGaussian(mean, std)
    ref = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean.double(), std.double()),
        [torch.distributions.TanhTransform()],
    )
    by_torch = ref.log_prob(torch.tanh(u.double())).sum(-1)  # float64: exact enough at u = 8
    torch.testing.assert_close(d.log_prob(u).double(), by_torch, rtol=1e-5, atol=1e-4)
    assert torch.isfinite(d.log_prob(torch.tensor([[30.0, -30.0]]))).all()
    box = ActionSpace("box", shape=(2,), low=(-1.0, 0.0), high=(1.0, 4.0), squash=True)
    assert isinstance(distribution_for(box, torch.zeros(3, 4)), TanhGaussian)
    # the mode is the mean, squashed into the bounds like every action
    np.testing.assert_allclose(box.to_env(np.zeros((1, 2), np.float32)), [[0.0, 2.0]])
    np.testing.assert_allclose(box.to_env(np.array([[50.0, -50.0]], np.float32)), [[1.0, 0.0]])


def test_squash_is_refused_for_discrete_actions():
    from asyncrl.config import Config
    from asyncrl.envs import probe_env
    from asyncrl.errors import UserError

    cfg = Config(env="CartPole-v1", squash=True)
    with pytest.raises(UserError, match=r"--squash: .*Discrete"):
        cfg.check_env(probe_env(cfg.env))


@pytest.mark.parametrize("mean", [0.0, 1.0, 3.0])
def test_squashed_gaussian_entropy_is_that_of_the_action_and_falls_past_std_one(mean):
    """The entropy of tanh(u) against a Monte-Carlo estimate, -E[log pi(a)] over 400,000
    samples (float64); unlike the Gaussian's over u it peaks near std 1 and then falls, as
    the samples pile up at the bounds: a bonus on it does not push the std up without end."""
    from asyncrl.distributions import TanhGaussian

    gen = torch.Generator().manual_seed(0)
    stds = [0.05, 0.5, 1.0, 2.0, 4.0]
    entropies = []
    for std in stds:
        m, s = (
            torch.tensor([[mean]], dtype=torch.float64),
            torch.tensor([[std]], dtype=torch.float64),
        )
        d = TanhGaussian(m, s)
        u = m + s * torch.randn(400_000, 1, generator=gen, dtype=torch.float64)
        monte_carlo = -d.log_prob(u).mean()  # its standard error: under 0.005 nats here
        assert float(d.entropy()) == pytest.approx(float(monte_carlo), abs=0.03), std
        entropies.append(float(d.entropy()))
    if mean == 0.0:
        assert entropies[0] < entropies[1] < entropies[2] > entropies[3] > entropies[4]
    assert float(TanhGaussian(torch.zeros(1, 2), torch.ones(1, 2)).entropy()) == pytest.approx(
        2 * 0.6698, abs=1e-3
    )  # float32, summed over action dimensions


# ---------------------------------------------------------------- MultiDiscrete, MultiBinary
def test_the_factorised_categorical_sums_log_probs_and_entropies_over_its_parts():
    from asyncrl.distributions import MultiCategorical

    gen = torch.Generator().manual_seed(0)
    nvec = (3, 2, 4)
    logits = torch.randn(5, sum(nvec), generator=gen, requires_grad=True)
    d = MultiCategorical(logits, nvec)
    refs = [torch.distributions.Categorical(logits=part) for part in logits.split(nvec, -1)]
    a = torch.stack([torch.randint(n, (5,), generator=gen) for n in nvec], -1)
    torch.testing.assert_close(d.log_prob(a), sum(r.log_prob(a[:, j]) for j, r in enumerate(refs)))
    torch.testing.assert_close(d.entropy(), sum(r.entropy() for r in refs))
    assert d.mode().tolist() == torch.stack([r.probs.argmax(-1) for r in refs], -1).tolist()
    # the sampler: each part's frequencies are its softmax's; the log-probability is the draw's
    row = torch.tensor([[0.0, 1.0, -1.0, 2.0, 0.0, 0.5, 0.5, -3.0, 1.0]]).repeat(20_000, 1)
    actions, logp = MultiCategorical(row, nvec).sample_logp(np.random.default_rng(0))
    assert actions.shape == (20_000, 3) and actions.dtype == np.int64
    for j, part in enumerate(row[0].split(nvec)):
        counts = np.bincount(actions[:, j], minlength=nvec[j]) / 20_000
        np.testing.assert_allclose(counts, torch.softmax(part, -1).numpy(), atol=0.015)
    np.testing.assert_allclose(
        logp, MultiCategorical(row, nvec).log_prob(torch.from_numpy(actions)).numpy(), rtol=1e-5
    )


def test_the_bernoulli_matches_torch_and_samples_each_bit():
    from asyncrl.distributions import Bernoulli

    logits = torch.tensor([[0.0, 3.0, -2.0], [40.0, -40.0, 1.0]])  # 40: saturated, still finite
    d, ref = Bernoulli(logits), torch.distributions.Bernoulli(logits=logits)
    a = torch.tensor([[1, 0, 0], [1, 0, 1]])
    torch.testing.assert_close(d.log_prob(a), ref.log_prob(a.float()).sum(-1))
    torch.testing.assert_close(d.entropy(), ref.entropy().sum(-1))
    assert torch.isfinite(d.log_prob(1 - a)).all()
    assert d.mode().tolist() == [[0, 1, 0], [1, 0, 1]]
    bits, logp = Bernoulli(logits[:1].repeat(20_000, 1)).sample_logp(np.random.default_rng(0))
    assert bits.dtype == np.int64 and set(np.unique(bits)) <= {0, 1}
    np.testing.assert_allclose(bits.mean(0), torch.sigmoid(logits[0]).numpy(), atol=0.015)
    by_torch = torch.distributions.Bernoulli(logits=logits[0]).log_prob(
        torch.from_numpy(bits).float()
    )
    np.testing.assert_allclose(logp, by_torch.sum(-1).numpy(), rtol=1e-5)


def test_the_action_space_picks_the_distribution_of_each_kind():
    from asyncrl.distributions import Bernoulli, MultiCategorical

    md = ActionSpace("multi_discrete", shape=(2,), nvec=(3, 4))
    assert md.dim == 7 and md.sample_shape == (2,)
    assert isinstance(distribution_for(md, torch.zeros(2, 7)), MultiCategorical)
    mb = ActionSpace("multi_binary", shape=(2, 3))
    assert mb.dim == 6 and mb.sample_shape == (6,)
    assert isinstance(distribution_for(mb, torch.zeros(2, 6)), Bernoulli)
    with pytest.raises(ValueError, match="MultiBinary actions take no action mask"):
        distribution_for(mb, torch.zeros(2, 6), torch.ones(2, 6, dtype=torch.bool))


def test_the_policy_acts_from_zero_and_the_env_gets_the_spaces_start():
    import gymnasium as gym

    d = ActionSpace.from_gym(gym.spaces.Discrete(3, start=-1))
    assert d == ActionSpace("discrete", n=3, start=(-1,)) and d.dim == 3
    np.testing.assert_array_equal(d.to_env(np.array([0, 2])), [-1, 1])
    np.testing.assert_array_equal(d.from_env(d.to_env(np.array([0, 2]))), [0, 2])
    plain = ActionSpace.from_gym(gym.spaces.Discrete(3))
    assert plain == ActionSpace("discrete", n=3)  # no start: as before (old specs compare equal)
    space = gym.spaces.MultiDiscrete([[2, 3], [4, 5]], start=[[1, 0], [0, -2]])
    md = ActionSpace.from_gym(space)
    assert md is not None and md.nvec == (2, 3, 4, 5) and md.start == (1, 0, 0, -2)
    acted = md.to_env(np.array([[1, 2, 3, 4], [0, 0, 0, 0]]))
    assert acted.shape == (2, 2, 2) and all(space.contains(a) for a in acted)
    np.testing.assert_array_equal(acted[0], [[2, 2], [3, 2]])
    np.testing.assert_array_equal(md.from_env(acted), [[1, 2, 3, 4], [0, 0, 0, 0]])
    bits = gym.spaces.MultiBinary([2, 2])
    mb = ActionSpace.from_gym(bits)
    assert mb is not None
    acted = mb.to_env(np.array([[1, 0, 0, 1]]))
    assert acted.dtype == np.int8 and bits.contains(acted[0])


def test_the_core_context_is_a_one_hot_per_part_or_the_bits():
    from asyncrl.models import write_context

    md = ActionSpace("multi_discrete", shape=(2,), nvec=(2, 3), start=(1, -1))
    out = np.full((2, 6), 9.0, np.float32)
    write_context(md, md.to_env(np.array([[1, 0], [0, 2]])), np.array([0.5, -1.0]), out)
    np.testing.assert_array_equal(out, [[0, 1, 1, 0, 0, 0.5], [1, 0, 0, 0, 1, -1.0]])
    d = ActionSpace("discrete", n=3, start=(5,))
    out = np.zeros((2, 4), np.float32)
    write_context(d, d.to_env(np.array([2, 0])), np.zeros(2), out)
    np.testing.assert_array_equal(out[:, :3], [[0, 0, 1], [1, 0, 0]])
    mb = ActionSpace("multi_binary", shape=(3,))
    out = np.zeros((1, 4), np.float32)
    write_context(mb, mb.to_env(np.array([[1, 0, 1]])), np.ones(1), out)
    np.testing.assert_array_equal(out, [[1, 0, 1, 1]])


def test_a_spec_written_before_these_action_spaces_loads_and_new_ones_round_trip():
    from asyncrl.models import ModelSpec

    old = ModelSpec("actor-critic", (4,), ActionSpace("discrete", 2)).to_dict()
    for key in ("nvec", "start", "masked"):
        del old["action"][key]  # as model.pt files of earlier versions hold it
    assert ModelSpec.from_dict(old).action == ActionSpace("discrete", 2)
    new = ModelSpec(
        "actor-critic",
        (4,),
        ActionSpace("multi_discrete", shape=(2,), nvec=(2, 3), start=(1, 0), masked=True),
    )
    assert ModelSpec.from_dict(new.to_dict()) == new


# ---------------------------------------------------------------- action masks
def test_a_masked_action_is_never_drawn_and_has_probability_exactly_zero():
    logits = torch.tensor([[5.0, 0.0, 1.0, -1.0], [0.0, 0.0, 0.0, 30.0]]).repeat(10_000, 1)
    mask = torch.tensor([[False, True, True, False], [True, False, True, False]]).repeat(10_000, 1)
    logits.requires_grad_(True)
    d = Categorical(logits, mask)
    actions, logp = d.sample_logp(np.random.default_rng(0))
    assert mask[torch.arange(20_000), torch.from_numpy(actions)].all()  # 20,000 draws, none masked
    probs = d.logp().exp()
    assert (probs[~mask] == 0).all()  # exactly 0, not small
    # the valid actions' probabilities are the softmax of their logits alone
    ref = torch.distributions.Categorical(logits=torch.tensor([[0.0, 1.0], [0.0, 0.0]]))
    torch.testing.assert_close(probs[:2][mask[:2]].reshape(2, 2), ref.probs)
    torch.testing.assert_close(d.entropy()[:2], ref.entropy())
    np.testing.assert_allclose(
        logp, d.log_prob(torch.from_numpy(actions)).detach().numpy(), rtol=1e-6
    )
    # entropy and log-probabilities finite, and their gradient too, the masked logits' zero
    loss = -(d.entropy().sum() + d.log_prob(torch.from_numpy(actions)).sum())
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all()
    assert (logits.grad[~mask] == 0).all()
    assert d.mode()[:2].tolist() == [2, 0]  # the best valid action, not the best logit


def test_each_part_of_a_multi_discrete_action_keeps_to_its_own_mask():
    from asyncrl.distributions import MultiCategorical

    nvec = (3, 2)
    logits = torch.zeros(10_000, 5)
    mask = torch.tensor([[True, False, True, False, True]]).repeat(10_000, 1)
    d = MultiCategorical(logits, nvec, mask)
    actions, logp = d.sample_logp(np.random.default_rng(1))
    assert set(actions[:, 0]) == {0, 2} and set(actions[:, 1]) == {1}
    np.testing.assert_allclose(logp, np.log(0.5), rtol=1e-6)  # 1/2 x 1
    torch.testing.assert_close(d.entropy(), torch.full((10_000,), math.log(2)))
    assert d.mode()[0].tolist() == [0, 1]


def test_the_bound_penalty_is_zero_inside_the_bounds_and_pulls_a_mean_past_them_back():
    """--bound-coef: (|mean - mid| / half - 1)^2 past the bounds, summed over dimensions, in
    half-ranges; nothing for a squashed Gaussian (tanh keeps it inside) or Discrete actions."""
    box = ActionSpace("box", shape=(2,), low=(-2.0, 0.0), high=(2.0, 1.0))
    mean = torch.tensor([[1.9, 0.5], [3.0, 0.5], [-4.0, 1.5]], requires_grad=True)
    dist = DiagGaussian(mean, torch.ones(3, 2))
    excess = bound_excess(box, dist)
    assert excess is not None
    # 3.0 is half a half-range past 2; -4.0 one whole one past -2, and 1.5 one past 1
    torch.testing.assert_close(excess, torch.tensor([0.0, 0.25, 2.0]))
    excess.sum().backward()
    assert mean.grad is not None and mean.grad[0].abs().sum() == 0.0  # inside: no push at all
    assert mean.grad[1, 0] > 0 and mean.grad[2, 0] < 0 and mean.grad[2, 1] > 0  # back inside
    squashed = distribution_for(
        ActionSpace("box", shape=(2,), low=(-2.0, 0.0), high=(2.0, 1.0), squash=True),
        torch.zeros(3, 4),
    )
    assert bound_excess(box, squashed) is None
    assert bound_excess(ActionSpace("discrete", n=3), Categorical(torch.zeros(3, 3))) is None
    unbounded = ActionSpace("box", shape=(1,), low=(-math.inf,), high=(math.inf,))
    assert bound_excess(unbounded, DiagGaussian(torch.zeros(3, 1), torch.ones(3, 1))) is None
