"""APPO's loss on hand-made rollouts: its gradient at ratio 1 is A3C's, the clip stops the
gradient where the ratio has left the range in the advantage's direction, the minibatches
partition the envs, and the diagnostics measure what they say. Behaviour log-probabilities
and the critic's values recorded at acting time, the targets taken from those values."""

import math

import numpy as np
import pytest
import torch

from asyncrl.algos.a3c import A3C
from asyncrl.algos.appo import APPO
from asyncrl.algos.onestep_q import OneStepQ
from asyncrl.algos.qlearning import ValueBased
from asyncrl.config import Config
from asyncrl.envs import ActionSpace, EnvInfo
from asyncrl.models import build_model, flat_grad, space_to_depth
from asyncrl.rollout import Rollout
from asyncrl.targets import gae_advantages
from tests.oracles import spec_of, vtrace_by_sums

INFO = EnvInfo("Test-v0", obs_shape=(3,), obs_dtype="float32", action=ActionSpace("discrete", 3))
BOX = EnvInfo("Test-v0", obs_shape=(3,), obs_dtype="float32", action=ActionSpace(
    "box", shape=(2,), low=np.full(2, -1.0, np.float32), high=np.ones(2, np.float32)))  # fmt: skip


def random_rollout(info, T=5, B=4, seed=0):
    rng = np.random.default_rng(seed)
    ro = Rollout.for_env(T, B, info)
    ro.obs[:] = rng.normal(size=ro.obs.shape)
    ro.rewards[:] = rng.normal(size=(T, B))
    ro.valid[:] = True
    if T > 3 and B > 1:
        ro.ends[2, 1] = ro.terminated[2, 1] = True
        ro.valid[3, 1] = False  # the autoreset step after it
    if info.action.kind == "discrete":
        ro.actions[:] = rng.integers(info.action.n, size=(T, B))
    else:
        ro.actions[:] = rng.normal(size=ro.actions.shape)
    return ro


def algo_and_model(cls, info=INFO, **kw):
    kw = {
        "t_max": 5,
        "envs_per_worker": 4,
        "hidden": (8,),
        "gamma": 0.9,
        "entropy_coef": 0.01,
        **kw,
    }
    cfg = Config(**kw)
    algo = cls(cfg, info)
    algo.start_worker(0, np.random.default_rng(0))
    torch.manual_seed(0)
    return algo, build_model(spec_of(algo))


def as_acted(model, algo, ro):
    """Record in ``ro`` what acting with ``model`` now records: the log-probabilities of its
    actions (ratio 1) and the critic's values; returns the log-probabilities."""
    with torch.no_grad():
        params, values = algo.unroll(model, ro)
        ro.values[:] = values.numpy()
        ro.logp[:] = model.distribution(params[:-1]).log_prob(ro.actions_tensor()).numpy()
    return ro.logp.copy()


def grad_of(model, loss):
    model.zero_grad()
    loss.backward()
    return flat_grad(model).clone()


@pytest.mark.parametrize("info", [INFO, BOX], ids=["discrete", "box"])
def test_at_ratio_one_a_whole_batch_pass_is_a3cs_gradient(info):
    appo, model = algo_and_model(APPO, info, epochs=1, minibatches=1, gae_lambda=0.95)
    a3c, _ = algo_and_model(A3C, info, gae_lambda=0.95)
    ro = random_rollout(info)
    ro.valid[:] = True  # A3C divides by every step of the rollout, APPO by the valid ones
    as_acted(model, appo, ro)
    (update,) = list(appo.updates(model, ro, None))
    loss, stats = update()
    g_appo = grad_of(model, loss)
    g_a3c = grad_of(model, a3c.loss(model, ro)[0])
    torch.testing.assert_close(g_appo, g_a3c, rtol=1e-5, atol=1e-6)
    assert stats["appo/approx_kl"] == pytest.approx(0.0, abs=1e-6)
    assert stats["appo/clip_fraction"] == 0.0
    assert "vtrace/rho_mean" not in stats  # pi = mu by construction: nothing to measure
    assert "train/explained_variance" in stats


def test_the_clip_stops_the_gradient_only_in_the_advantages_direction():
    appo, model = algo_and_model(APPO, epochs=1, minibatches=1, clip=0.2, t_max=1)
    ro = random_rollout(INFO, T=1, B=1)
    ro.valid[:] = True
    ro.ends[:] = ro.terminated[:] = True  # A = r - V
    with torch.no_grad():
        v = float(appo.unroll(model, ro)[1][0, 0])
    base = as_acted(model, appo, ro)
    for reward, clipped in [(v + 1.0, True), (v - 1.0, False)]:
        ro.rewards[:] = reward
        # mu had the action at half pi's probability: ratio 2, past 1 + clip
        ro.logp[:] = base - math.log(2.0)
        loss, stats = next(iter(appo.updates(model, ro, None)))()
        assert stats["appo/clip_fraction"] == 1.0
        # the value and entropy terms aside: the policy term alone
        appo.cfg.value_coef, appo.entropy_coef = 0.0, 0.0  # beta: the rollout's
        loss, _ = next(iter(appo.updates(model, ro, None)))()
        g = grad_of(model, loss)
        # A > 0 and ratio > 1 + eps: clipped, no gradient; A < 0: min takes the unclipped term
        assert (float(g.abs().max()) == 0.0) == clipped
        appo.cfg.value_coef, appo.entropy_coef = 0.5, 0.01


@pytest.mark.parametrize("core", ["none", "lstm"])
def test_epochs_of_minibatches_partition_the_rollout(core):
    """Feed-forward: each pass's minibatches are a partition of the valid transitions; with a
    recurrent core, of the envs, each a whole sequence."""
    appo, model = algo_and_model(APPO, epochs=3, minibatches=2, core=core)
    ro = random_rollout(INFO, B=4)
    seen = []
    real = appo.minibatch_loss

    def spy(model, rollout, times, envs, prepared):
        seen.append(sorted(zip(times.ravel().tolist(), envs.ravel().tolist(), strict=True)))
        return real(model, rollout, times, envs, prepared)

    appo.minibatch_loss = spy
    updates = list(appo.updates(model, ro, None))
    assert len(updates) == 6
    for u in updates:
        u()
    everything = [(t, b) for t in range(5) for b in range(4)]
    valid = [(t, b) for t, b in everything if ro.valid[t, b]]
    for epoch in range(3):
        a, b = seen[2 * epoch : 2 * epoch + 2]
        assert abs(len(a) - len(b)) <= (0 if core == "lstm" else 1)
        assert sorted(a + b) == (everything if core == "lstm" else valid)
        if core == "lstm":  # whole sequences: every step of an env, in one minibatch
            assert {e for _, e in a}.isdisjoint({e for _, e in b}) and len(a) == 10
    assert seen[0] != seen[2] or seen[2] != seen[4]  # reshuffled each pass


def test_a_minibatch_of_transitions_is_the_same_loss_as_the_whole_rollout_masked():
    """The single-transition path of a feed-forward net equals the whole-rollout unroll on
    those transitions (no sequence needed, no state), encodes those observations alone (no
    bootstrap row: the targets already have theirs), and every one of them gets a gradient."""
    appo, model = algo_and_model(APPO, epochs=1, minibatches=1)
    ro = random_rollout(INFO)
    times, envs = np.array([[0, 4, 2]]), np.array([[1, 3, 0]])
    seen = []
    encode = model._encode  # the bound hot path (hooks do not see it)
    object.__setattr__(model, "_encode", lambda x: seen.append(x.shape[0]) or encode(x))
    params, values = appo.unroll_minibatch(model, ro, times, envs)
    assert params.shape[:2] == values.shape == (1, 3) and seen == [3]
    full_params, full_values = appo.unroll(model, ro)
    torch.testing.assert_close(params[0], full_params[times[0], envs[0]])
    torch.testing.assert_close(values[0], full_values[times[0], envs[0]])
    values.sum().backward()
    grads = [p.grad for p in model.v_body.parameters()]
    assert all(g is not None and g.abs().sum() > 0 for g in grads)


@pytest.mark.parametrize("core", ["none", "lstm"])
def test_a_minibatch_divides_by_a_fixed_count_as_every_loss_does(core):
    """Every transition weighs the same (docs/algorithms.md): a minibatch of transitions
    divides by the transitions drawn, a recurrent core's whole sequences by their slots, the
    masked autoreset steps included, as A3C divides by t_max x B; so a reset step weighs
    nothing and dilutes nothing. (Each case pins its own count: the two differ only where a
    core's sequences hold reset steps.)"""
    appo, model = algo_and_model(APPO, epochs=1, minibatches=1, core=core)
    ro = random_rollout(INFO)  # step 3 of env 1 is an autoreset step
    as_acted(model, appo, ro)
    ((times, envs),) = appo.minibatches(ro, model.core.sequential)
    assert times.size == ro.valid.size - (core == "none")  # the sequences hold the reset step
    _, stats = appo.minibatch_loss(model, ro, times, envs, [])
    with torch.no_grad():
        params, _ = appo.unroll(model, ro)
        entropy = model.distribution(params[:-1]).entropy()[torch.from_numpy(ro.valid)]
    assert stats["loss/entropy"] == pytest.approx(float(entropy.sum()) / times.size, rel=1e-5)


def test_the_targets_are_computed_once_at_the_first_minibatchs_parameters():
    appo, model = algo_and_model(APPO, epochs=2, minibatches=2)
    ro = random_rollout(INFO)
    as_acted(model, appo, ro)
    calls = []
    real = appo.prepare
    appo.prepare = lambda m, r: calls.append(1) or real(m, r)
    stats = [u()[1] for u in appo.updates(model, ro, None)]
    assert calls == [1]
    assert "train/explained_variance" in stats[0]
    assert all("train/explained_variance" not in s for s in stats[1:])


@pytest.mark.parametrize("core", ["none", "lstm"])
@pytest.mark.parametrize("info", [INFO, BOX], ids=["discrete", "box"])
def test_acting_records_the_critics_values_of_the_rollout(info, core):
    """What the targets take: V(s_t) of each step as the policy acted, and V(obs[T]) from the
    core's state after the last step, equal to a pass over the rollout from its start state
    (the LSTM's state carried from one rollout into the next; vectors: a critic trunk of its
    own, which acting runs too)."""
    appo, model = algo_and_model(APPO, info, core=core)
    rng = np.random.default_rng(0)
    for seed in (0, 1):  # the second rollout starts from the state the first left
        ro = random_rollout(info, seed=seed)
        ro.first[0] = seed == 0
        ro.first[4, 1] = True  # after the autoreset step at t = 3
        ro.values[:] = np.nan
        appo.begin_rollout(model, 0)
        with torch.no_grad():
            for t in range(ro.t_max):
                appo.act(model, torch.from_numpy(ro.obs[t]), 0, rng, ro.first[t])
            appo.end_rollout(model, ro, 0, rng)
            expected = appo.unroll(model, ro)[1].numpy()
        np.testing.assert_allclose(ro.values, expected, rtol=1e-5, atol=1e-6)


def test_the_targets_take_the_acted_values_without_a_pass_over_the_rollout():
    """GAE's targets are R = A + V with the values recorded at acting time, and no pass over
    the rollout is made for them."""
    appo, model = algo_and_model(APPO, epochs=1, minibatches=1, gae_lambda=0.95)
    ro = random_rollout(INFO)
    as_acted(model, appo, ro)
    ro.values[:] = np.random.default_rng(1).normal(size=ro.values.shape) * 10.0
    passes = []
    real = appo.unroll
    appo.unroll = lambda *a: passes.append(1) or real(*a)
    returns, _, old_v, stats, _ = appo.prepare(model, ro)
    values = ro.values
    np.testing.assert_allclose(old_v, values[:-1], rtol=1e-6)
    assert passes == [] and "vtrace/rho_mean" not in stats
    r, term, ends = ro.rewards, ro.terminated, ro.ends
    gae = gae_advantages(r, values[:-1], values[1:], term, ends, 0.9, 0.95)
    np.testing.assert_allclose(returns, gae + values[:-1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pg", ["rho", "ratio"])
def test_vtrace_targets_follow_the_parameters_pulled_for_each_minibatch(pg):
    """--vtrace, Sample Factory's learner: each minibatch (a group of whole rollouts)
    computes V-trace's targets and advantages from its own values and ratios pi/mu at the
    parameters of the moment. The global parameters change between two minibatches (another
    worker's update): the second's targets are V-trace's at the new parameters (IMPALA's sums,
    tests.oracles), not at those of the first. --vtrace-pg ratio: the advantages without rho."""
    appo, model = algo_and_model(
        APPO, epochs=1, minibatches=2, vtrace=True, gae_lambda=0.95, vtrace_pg=pg
    )
    ro = random_rollout(INFO)
    mu = as_acted(model, appo, ro)
    ro.logp[:] = mu + np.random.default_rng(2).normal(0, 0.3, mu.shape)  # an older mu
    seen = []
    real = appo.vtrace_minibatch

    def spy(model_, rollout, envs):
        out = real(model_, rollout, envs)
        seen.append((envs.copy(), out[3].copy(), out[4].copy()))
        return out

    appo.vtrace_minibatch = spy
    first, second = list(appo.updates(model, ro))
    first()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)  # another worker's update lands
    second()
    assert sorted(np.concatenate([seen[0][0], seen[1][0]])) == [0, 1, 2, 3]

    def oracle(envs):
        with torch.no_grad():
            params, values = appo.unroll(model, ro, envs)
            logp = model.distribution(params[:-1]).log_prob(torch.from_numpy(ro.actions[:, envs]))
        v, lr = values.numpy().astype(np.float64), (logp.numpy() - ro.logp[:, envs])
        out = [
            vtrace_by_sums(
                ro.rewards[:, e], v[:-1, i], v[1:, i], ro.terminated[:, e], ro.ends[:, e],
                lr[:, i], 0.9, 1.0, 1.0, 0.95,
            )
            for i, e in enumerate(envs)
        ]  # fmt: skip
        vs, adv = (np.stack([o[k] for o in out], axis=1) for k in (0, 1))
        if pg == "ratio":  # A without its rho
            adv = adv / np.minimum(1.0, np.exp(lr))
        return vs, adv

    envs, returns, adv = seen[1]
    valid = ro.valid[:, envs]
    vs, expected_adv = oracle(envs)
    np.testing.assert_allclose(returns[valid], vs[valid], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(adv[valid], expected_adv[valid], rtol=1e-4, atol=1e-4)
    model.load_state_dict(before)  # the first minibatch's parameters give other targets
    stale, _ = oracle(envs)
    assert np.abs(returns[valid] - stale[valid]).max() > 1e-2


def test_each_minibatch_weighs_the_entropy_by_the_beta_of_its_rollouts_start():
    # the same rollout and parameters learnt at two points of the schedule: the losses differ
    # by exactly the change of beta times the minibatch's entropy (0.01 -> 0 over 100 steps)
    algo, model = algo_and_model(APPO, entropy_final=0.0, entropy_anneal_steps=100)
    ro = random_rollout(INFO)
    as_acted(model, algo, ro)
    losses = {}
    for step in (0, 25):
        algo.begin_rollout(model, step)
        losses[step], stats = algo.loss(model, ro)
    gap = float((losses[25] - losses[0]).detach())
    # float32 losses of about 1: their difference is good to about 1e-7
    assert gap == pytest.approx((0.01 - 0.0075) * stats["loss/entropy"], abs=1e-6)
    assert stats["loss/entropy"] > 0.5  # near-uniform over 3 actions: the test measures beta


def test_value_clip_limits_the_values_move():
    appo, model = algo_and_model(APPO, epochs=1, minibatches=1, value_clip=0.1)
    ro = random_rollout(INFO)
    as_acted(model, appo, ro)
    ro.rewards[:] = 100.0  # targets far above the values: the clipped error is the larger
    loss_clipped = next(iter(appo.updates(model, ro, None)))()[1]["loss/value_loss"]
    appo.cfg.value_clip = 0.0
    loss_plain = next(iter(appo.updates(model, ro, None)))()[1]["loss/value_loss"]
    # at the first pass V = old V: the clipped value equals V, the losses are the same
    assert loss_clipped == pytest.approx(loss_plain)


# ---------------------------------------------------------------- the behaviour policy
@pytest.mark.parametrize("info", [INFO, BOX], ids=["discrete", "box"])
def test_acting_records_the_log_probability_of_the_action_taken(info):
    a3c, model = algo_and_model(A3C, info)
    obs = torch.randn(6, 3)
    with torch.no_grad():
        actions, logp = a3c.act(model, obs, 0, np.random.default_rng(1), np.ones(6, bool))
        params, _ = model.act(obs, model.initial_state(6), torch.ones(6, dtype=torch.bool))
        expected = model.distribution(params).log_prob(torch.from_numpy(actions)).numpy()
    np.testing.assert_allclose(logp, expected, rtol=1e-5, atol=1e-6)


def test_epsilon_greedy_log_probabilities():
    q, model = algo_and_model(OneStepQ, eps_start=0.3, eps_finals=(0.3,), eps_probs=(1.0,))
    assert isinstance(q, ValueBased)
    obs = torch.randn(500, 3)
    with torch.no_grad():
        actions, logp = q.act(model, obs, 10**9, np.random.default_rng(0), np.ones(500, bool))
        greedy = model.act(obs, model.initial_state(500), torch.ones(500, dtype=torch.bool))[0]
    is_greedy = actions == greedy.argmax(-1).numpy()
    eps = q.last_epsilon
    np.testing.assert_allclose(np.exp(logp[is_greedy]), 1 - eps + eps / 3, rtol=1e-6)
    np.testing.assert_allclose(np.exp(logp[~is_greedy]), eps / 3, rtol=1e-6)
    assert 0.7 < is_greedy.mean() < 0.9  # 1 - eps + eps/3 = .8


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_the_rollouts_frames_laid_out_once_give_the_same_minibatch_loss(precision):
    """A conv net's learning pass reads NHWC frames, on Atari each 4 x 4 block of pixels as 64
    channels (the first layer then a 2x2 conv): APPO lays the rollout out so once (its first
    minibatch), and every minibatch then reaches the encoder as a view of it, with the loss,
    its statistics and its gradient those of the frames taken from the rollout as stored, to
    the rounding of the other order of the first layer's sums."""
    atari = EnvInfo("Test-v0", (4, 84, 84), "uint8", ActionSpace("discrete", 6))
    appo, model = algo_and_model(APPO, atari, epochs=1, minibatches=2, precision=precision)
    ro = random_rollout(atari)
    ro.obs[:] = np.random.default_rng(1).integers(0, 256, ro.obs.shape)
    once = appo.prepare(model, ro)
    laid_out = once[-1]
    assert laid_out is not None and laid_out.shape == (6, 4, 21, 21, 64)
    assert np.array_equal(laid_out, space_to_depth(ro.obs, 4))
    times, envs = np.array([[0, 4, 2, 1]]), np.array([[1, 3, 0, 1]])
    seen = []
    encode = model._encode
    object.__setattr__(model, "_encode", lambda x: seen.append(x) or encode(x))
    grads, losses, stats = [], [], []
    for prepared in ([once], [(*once[:-1], None)]):
        model.zero_grad()
        loss, s = appo.minibatch_loss(model, ro, times, envs, prepared)
        loss.backward()
        losses.append(float(loss.detach()))
        stats.append(s)
        grads.append(flat_grad(model).clone())
    laid, stored = seen
    assert laid.is_contiguous(memory_format=torch.channels_last)  # no copy left to make
    assert torch.equal(laid.movedim(-3, -1), torch.from_numpy(space_to_depth(stored.numpy(), 4)))
    assert stats[0].keys() == stats[1].keys()
    # float32: the same sums in another order; bfloat16: each layer's output rounded to 8
    # bits of mantissa either way
    tol = 1e-5 if precision == "float32" else 1e-3
    assert losses[0] == pytest.approx(losses[1], rel=tol)
    assert float((grads[0] - grads[1]).norm() / grads[1].norm()) < 10 * tol
    # MinAtar's frames are NHWC as the env gives them: nothing to lay out
    minatar = EnvInfo("Test-v0", (10, 10, 4), "float32", ActionSpace("discrete", 6))
    appo, model = algo_and_model(APPO, minatar)
    assert appo.prepare(model, random_rollout(minatar))[-1] is None
    appo, model = algo_and_model(APPO)  # vectors: an MLP
    assert appo.prepare(model, random_rollout(INFO))[-1] is None


def test_seq_len_cuts_each_envs_rollout_into_pieces_that_the_minibatches_partition():
    """--seq-len 2 on 6 steps of 4 envs: 12 sequences, each one env's 2 consecutive steps
    from an even step, every (step, env) in one of a pass's 3 minibatches, reshuffled."""
    appo, _ = algo_and_model(APPO, t_max=6, epochs=2, minibatches=3, core="lstm", seq_len=2)
    ro = random_rollout(INFO, T=6, B=4)
    passes = [appo.minibatches(ro, sequential=True) for _ in range(2)]
    for mbs in passes:
        assert [t.shape for t, _ in mbs] == [(2, 4)] * 3
        cells = []
        for times, envs in mbs:
            assert (times[1] == times[0] + 1).all() and (times[0] % 2 == 0).all()
            assert (envs[1] == envs[0]).all()
            cells += list(zip(times.ravel().tolist(), envs.ravel().tolist(), strict=True))
        assert sorted(cells) == [(t, b) for t in range(6) for b in range(4)]
    assert [t.tolist() for t, _ in passes[0]] != [t.tolist() for t, _ in passes[1]]
    # 0: whole rollouts, a minibatch a group of envs (the seeded draw as before --seq-len)
    whole, _ = algo_and_model(APPO, t_max=6, minibatches=2, core="lstm")
    mbs = whole.minibatches(ro, sequential=True)
    groups = np.array_split(np.random.default_rng(0).permutation(4), 2)
    assert [e[0].tolist() for _, e in mbs] == [g.tolist() for g in groups]
    assert all((t == np.arange(6)[:, None]).all() for t, _ in mbs)


def act_rollout(appo, model, ro, rng):
    """Act through ``ro`` with ``model`` as a worker does (recording the actions, mu's
    log-probabilities, the values and, with --seq-len, the core's states), then the
    distribution parameters and values of one pass over the whole rollout."""
    appo.begin_rollout(model, 0)
    with torch.no_grad():
        for t in range(ro.t_max):
            ro.actions[t], ro.logp[t] = appo.act(
                model, torch.from_numpy(ro.obs[t]), 0, rng, ro.first[t]
            )
        appo.end_rollout(model, ro, 0, rng)
        return appo.unroll(model, ro)


@pytest.mark.parametrize("core", ["lstm", "gru"])
def test_a_sequence_replays_from_the_state_the_core_had_there_as_it_acted(core):
    """A minibatch of --seq-len pieces, at the parameters that acted, gives what acting and a
    pass over the whole rollout from its start gave at those steps, an episode start inside a
    piece included (the core restarts there); and its gradient reaches the core."""
    appo, model = algo_and_model(APPO, t_max=6, minibatches=4, core=core, seq_len=3)
    rng = np.random.default_rng(0)
    ro = random_rollout(INFO, T=6, B=4)
    ro.first[0] = True
    ro.first[4, 1] = True  # after the autoreset step at t = 3: inside the piece from step 3
    full_params, full_values = act_rollout(appo, model, ro, rng)
    assert appo.seq_states is not None and appo.seq_states.shape[:2] == (6, 4)
    # every minibatch of a pass at the acting parameters: ratio 1 (pi is the mu that acted)
    for update in appo.updates(model, ro, None):
        _, stats = update()
        assert stats["appo/approx_kl"] == pytest.approx(0.0, abs=1e-6)
        assert stats["appo/clip_fraction"] == 0.0
    times, envs = np.array([[3, 0], [4, 1], [5, 2]]), np.array([[1, 2], [1, 2], [1, 2]])
    params, values = appo.unroll_minibatch(model, ro, times, envs)
    torch.testing.assert_close(params, full_params[times, envs], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(values, full_values[times, envs], rtol=1e-5, atol=1e-6)
    # from a zero state instead the piece from step 3 of env 1 would differ (the state matters)
    appo.seq_states.zero_()
    zeroed, _ = appo.unroll_minibatch(model, ro, times, envs)
    assert not torch.allclose(zeroed[:, 0], params[:, 0].detach(), atol=1e-4)
    values.sum().backward()
    assert model.core.cell.weight_hh.grad.abs().sum() > 0


@pytest.mark.parametrize("core", ["lstm", "gru"])
def test_burn_in_starts_a_piece_from_the_state_the_parameters_now_give_k_steps_on(core):
    """--burn-in 2 with --seq-len 3: a piece from step 3 starts from the state recorded at
    step 1 run over steps 1 and 2 at the learner's parameters (an episode start among them
    restarting it), so the piece equals an unroll from step 1's recorded state; the rollout's
    first piece keeps its recorded state. At the acting parameters that is what acting gave."""
    appo, model = algo_and_model(APPO, t_max=6, minibatches=4, core=core, seq_len=3, burn_in=2)
    rng = np.random.default_rng(0)
    ro = random_rollout(INFO, T=6, B=4)
    ro.first[0] = True
    ro.first[4, 1] = True  # inside env 1's piece from step 3
    ro.first[2, 3] = True  # inside env 3's burn-in, steps 1 and 2
    full_params, _ = act_rollout(appo, model, ro, rng)
    assert appo.seq_states is not None
    times = np.array([[3, 0, 3], [4, 1, 4], [5, 2, 5]])
    envs = np.array([[1, 2, 3]] * 3)
    params, _ = appo.unroll_minibatch(model, ro, times, envs)
    torch.testing.assert_close(params, full_params[times, envs], rtol=1e-5, atol=1e-6)

    # the learner's parameters move on from the acting ones
    with torch.no_grad():
        for p in model.core.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) * 0.3)

    def unroll_from(t0, t1, env):  # steps t0..t1-1 of env from the state recorded at t0
        sl = (slice(t0, t1), [env])
        with torch.no_grad():
            return model.unroll(
                torch.from_numpy(ro.obs[sl]),
                appo.seq_states[t0, [env]],
                torch.from_numpy(ro.first[sl]),
                bootstrap=False,
                context=torch.from_numpy(ro.context[sl]),
            )[0][:, 0]

    params, _ = appo.unroll_minibatch(model, ro, times, envs)
    torch.testing.assert_close(params[:, 0], unroll_from(1, 6, 1)[2:], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(params[:, 1], unroll_from(0, 3, 2), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(params[:, 2], unroll_from(1, 6, 3)[2:], rtol=1e-5, atol=1e-6)
    # without the burn-in the piece starts from the acting parameters' state, which differs
    plain, _ = algo_and_model(APPO, t_max=6, minibatches=4, core=core, seq_len=3)
    plain.seq_states = appo.seq_states
    stored, _ = plain.unroll_minibatch(model, ro, times, envs)
    assert not torch.allclose(stored[:, 0], params[:, 0], atol=1e-4)
    torch.testing.assert_close(stored[:, 0], unroll_from(3, 6, 1), rtol=1e-5, atol=1e-6)
    # the gradient stops at the piece's start: none reaches the burn-in's steps
    params.sum().backward()
    assert model.core.cell.weight_hh.grad.abs().sum() > 0


@pytest.mark.parametrize("over", ["rollout", "minibatch"])
def test_advantages_are_normalised_over_each_minibatch_or_the_rollout(over):
    """--normalize-advantage --normalize-over minibatch (SB3's, CleanRL's): each minibatch's
    advantages have mean 0, so at ratio 1 its policy term, their negated mean, is 0; over the
    rollout (the default) only the rollout's are, and a minibatch's policy term is not."""
    appo, model = algo_and_model(
        APPO, epochs=1, minibatches=2, gae_lambda=0.95, normalize_advantage=True,
        normalize_over=over,
    )  # fmt: skip
    ro = random_rollout(INFO, T=8, B=4)
    as_acted(model, appo, ro)
    terms = [abs(update()[1]["loss/policy_loss"]) for update in appo.updates(model, ro)]
    assert len(terms) == 2
    if over == "minibatch":
        assert max(terms) < 1e-6
    else:
        assert max(terms) > 1e-3
