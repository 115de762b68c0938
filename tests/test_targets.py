"""n-step targets against hand-worked examples (gamma = 0.5 keeps the arithmetic exact)."""

import numpy as np
import pytest
import torch

from asyncrl.targets import gae_advantages, nstep_returns, vtrace
from tests.oracles import nstep_targets, vtrace_by_sums

G = 0.5
R = np.array([1.0, 2.0, 4.0, 8.0], np.float32)  # T = 4
V = np.array([10.0, 20.0, 30.0, 40.0], np.float32)
LAST = 100.0


def test_forward_view_bootstraps_from_last_value():
    # t=3: 8 + .5*100 = 58; t=2: 4 + .5*58 = 33; t=1: 2 + .5*33 = 18.5; t=0: 1 + .5*18.5 = 10.25
    out = nstep_targets(R, V, LAST, False, G)
    np.testing.assert_allclose(out, [10.25, 18.5, 33.0, 58.0])


def test_terminated_end_does_not_bootstrap():
    # t=3: 8; t=2: 4 + 4 = 8; t=1: 2 + 4 = 6; t=0: 1 + 3 = 4
    out = nstep_targets(R, V, LAST, True, G)
    np.testing.assert_allclose(out, [4.0, 6.0, 8.0, 8.0])


def test_two_step_targets_use_two_rewards_and_gamma_squared():
    # t=0: 1 + .5*2 + .25*V[2]=30 -> 9.5 ; t=1: 2 + .5*4 + .25*V[3]=40 -> 14
    # t=2: t+n = T: past the rollout -> 4 + .5*8 + .25*100 = 33 ; t=3: 8 + .5*100 = 58
    out = nstep_targets(R, V, LAST, False, G, n=2, missing="bootstrap")
    np.testing.assert_allclose(out, [9.5, 14.0, 33.0, 58.0])


def test_missing_terms_treated_as_zero():
    # t=2, t=3 run past the rollout: their rewards inside count, everything past it is 0
    out = nstep_targets(R, V, LAST, False, G, n=2, missing="zero")
    np.testing.assert_allclose(out, [9.5, 14.0, 8.0, 8.0])
    # with the full forward view nothing is bootstrapped at all
    full = nstep_targets(R, V, LAST, False, G, missing="zero")
    np.testing.assert_allclose(full, nstep_targets(R, V, LAST, True, G))


def test_one_step_targets():
    out = nstep_targets(R, V, LAST, False, G, n=1)
    np.testing.assert_allclose(out, [1 + 10, 2 + 15, 4 + 20, 8 + 50])


def test_truncated_vs_terminated_at_the_end():
    truncated = nstep_targets(R, V, LAST, False, G, n=1)
    terminated = nstep_targets(R, V, LAST, True, G, n=1)
    assert truncated[-1] == 8 + 50 and terminated[-1] == 8
    np.testing.assert_allclose(truncated[:-1], terminated[:-1])


@pytest.mark.parametrize("n", [1, 2, 3, None])
@pytest.mark.parametrize("missing", ["bootstrap", "zero"])
def test_torch_in_torch_out_and_same_numbers(n, missing):
    out_np = nstep_targets(R, V, LAST, False, G, n=n, missing=missing)
    out_t = nstep_targets(
        torch.from_numpy(R), torch.from_numpy(V), torch.tensor(LAST), False, G, n=n, missing=missing
    )
    assert isinstance(out_t, torch.Tensor) and isinstance(out_np, np.ndarray)
    assert out_t.dtype == torch.float32 and out_np.dtype == np.float32
    np.testing.assert_allclose(out_t.numpy(), out_np)


def test_brute_force_definition_random():
    rng = np.random.default_rng(0)
    T, gamma = 7, 0.9
    r, v = rng.normal(size=T), rng.normal(size=T)
    last = 3.0
    for n in range(1, T + 2):
        for missing in ("bootstrap", "zero"):
            got = nstep_targets(r, v, last, False, gamma, n=n, missing=missing)
            for t in range(T):
                k = min(n, T - t)
                want = sum(gamma**i * r[t + i] for i in range(k))
                if t + n < T:
                    want += gamma**n * v[t + n]
                elif missing == "bootstrap":
                    want += gamma ** (T - t) * last
                assert got[t] == pytest.approx(want), (n, missing, t)


def test_episode_ends_inside_a_rollout():
    # Two episodes in one rollout: step 1 is truncated (bootstrap from V(final obs) = 6),
    # step 3 ends the rollout mid-episode (bootstrap from V(s_T) = 100).
    r = np.array([1.0, 1.0, 1.0, 1.0], np.float32)
    next_v = np.array([5.0, 6.0, 7.0, 100.0], np.float32)
    ends = np.array([False, True, False, False])
    term = np.zeros(4, bool)
    out = nstep_returns(r, next_v, term, ends, G)
    np.testing.assert_allclose(out, [1 + 0.5 * (1 + 3), 1 + 3, 1 + 0.5 * 51, 51])
    term[1] = True  # the same episode terminated instead: nothing after it counts
    out = nstep_returns(r, next_v, term, ends, G)
    np.testing.assert_allclose(out[:2], [1.5, 1.0])
    # a horizon of 2 never crosses the end either
    out2 = nstep_returns(r, next_v, term, ends, G, n=2)
    np.testing.assert_allclose(out2, [1.5, 1.0, 1 + 0.5 * 51, 51])


def test_batched_envs_are_independent():
    r = np.stack([R, R[::-1]], axis=1)
    v = np.stack([V, V[::-1]], axis=1)
    out = nstep_targets(r, v, np.array([LAST, 0.0], np.float32), np.array([False, True]), G, n=2)
    np.testing.assert_allclose(out[:, 0], nstep_targets(R, V, LAST, False, G, n=2))
    np.testing.assert_allclose(out[:, 1], nstep_targets(R[::-1], V[::-1], 0.0, True, G, n=2))


def test_gae_lambda_one_is_the_forward_view_advantage():
    next_v = np.append(V[1:], LAST).astype(np.float32)
    no = np.zeros(4, bool)
    adv = gae_advantages(R, V, next_v, no, no, G, lam=1.0)
    np.testing.assert_allclose(adv, nstep_targets(R, V, LAST, False, G) - V, rtol=1e-6)
    adv0 = gae_advantages(R, V, next_v, no, no, G, lam=0.0)
    np.testing.assert_allclose(adv0, nstep_targets(R, V, LAST, False, G, n=1) - V)


def test_rejects_bad_arguments():
    with pytest.raises(ValueError, match="missing"):
        nstep_targets(R, V, LAST, False, G, missing="nope")
    with pytest.raises(ValueError, match="n must be"):
        nstep_targets(R, V, LAST, False, G, n=0)


# ---------------------------------------------------------------- V-trace
def _ends(T, at=()):
    e = np.zeros(T, bool)
    e[list(at)] = True
    return e


def test_vtrace_on_policy_is_the_nstep_return():
    # log rho = 0 and the bars at 1: every weight is 1, and V-trace's targets are the forward
    # view's returns (10.25, 18.5, 33, 58 above), its advantages those returns minus V
    nv = np.array([20.0, 30.0, 40.0, LAST], np.float32)
    no = _ends(4)
    vs, adv = vtrace(R, V, nv, no, no, np.zeros(4, np.float32), G)
    np.testing.assert_allclose(vs, [10.25, 18.5, 33.0, 58.0])
    np.testing.assert_allclose(adv, np.array([10.25, 18.5, 33.0, 58.0]) - V)


def test_vtrace_on_policy_equals_nstep_returns_and_gae_with_episode_ends():
    rng = np.random.default_rng(3)
    T, B = 9, 4
    r = rng.normal(size=(T, B)).astype(np.float32)
    v = rng.normal(size=(T, B)).astype(np.float32)
    nv = np.concatenate([v[1:], rng.normal(size=(1, B))]).astype(np.float32)
    term, ends = np.zeros((T, B), bool), np.zeros((T, B), bool)
    term[3, 0] = ends[3, 0] = True  # terminated inside the rollout
    ends[5, 1] = True  # truncated: bootstraps from its final observation's value
    nv[3, 0], nv[5, 1] = 7.0, -4.0
    zero = np.zeros((T, B), np.float32)
    vs, adv = vtrace(r, v, nv, term, ends, zero, 0.9)
    np.testing.assert_allclose(vs, nstep_returns(r, nv, term, ends, 0.9), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(adv, vs - v, rtol=1e-5, atol=1e-5)
    vs_lam, _ = vtrace(r, v, nv, term, ends, zero, 0.9, lam=0.7)
    gae = gae_advantages(r, v, nv, term, ends, 0.9, 0.7)
    np.testing.assert_allclose(vs_lam, gae + v, rtol=1e-5, atol=1e-5)


def test_vtrace_off_policy_by_hand():
    # T = 2, gamma = .5, r = [1, 2], V = [10, 20], V(x_2) = 40, pi/mu = [2, 0.5]
    # rho = min(1, .) = [1, .5]; c = [1, .5]
    # delta_1 = .5 (2 + .5*40 - 20) = 1;   v_1 = 20 + 1 = 21
    # delta_0 = 1 (1 + .5*20 - 10) = 1;    v_0 = 10 + 1 + .5*1*(21 - 20) = 11.5
    # A_1 = .5 (2 + .5*40 - 20) = 1;       A_0 = 1 (1 + .5*21 - 10) = 1.5
    r = np.array([1.0, 2.0], np.float32)
    v = np.array([10.0, 20.0], np.float32)
    nv = np.array([20.0, 40.0], np.float32)
    log_rhos = np.log(np.array([2.0, 0.5], np.float32))
    vs, adv = vtrace(r, v, nv, _ends(2), _ends(2), log_rhos, G)
    np.testing.assert_allclose(vs, [11.5, 21.0], rtol=1e-6)
    np.testing.assert_allclose(adv, [1.5, 1.0], rtol=1e-6)
    # rho_bar = c_bar = 3 lets the first weight through whole: delta_0 = 2, c_0 = 2
    # v_0 = 10 + 2 + .5*2*1 = 13; A_0 = 2 (1 + 10.5 - 10) = 3
    vs, adv = vtrace(r, v, nv, _ends(2), _ends(2), log_rhos, G, rho_bar=3.0, c_bar=3.0)
    np.testing.assert_allclose(vs, [13.0, 21.0], rtol=1e-6)
    np.testing.assert_allclose(adv, [3.0, 1.0], rtol=1e-6)


def test_vtrace_off_policy_with_ends_lambda_and_two_truncation_levels_against_the_sums():
    """Off-policy, with terminations and truncations inside the rollout, lambda < 1 and
    c-bar != rho-bar: the package's recursion against IMPALA's sums (tests/oracles.py)."""
    rng = np.random.default_rng(3)
    T, B = 9, 4
    r, log_rhos = rng.normal(size=(T, B)), rng.normal(scale=0.8, size=(T, B))
    term = rng.random((T, B)) < 0.15
    ends = term | (rng.random((T, B)) < 0.15)  # the others truncated (a time limit)
    # V of x_0..x_T; next_values is V(x_{t+1}) inside an episode, V of the final observation
    # (another state) at an end, as a worker records them
    values = rng.normal(size=(T + 1, B))
    v, nv = values[:-1], np.where(ends, rng.normal(size=(T, B)), values[1:])
    assert (ends & ~term).any() and term.any()
    for rho_bar, c_bar, lam in ((1.0, 1.0, 1.0), (1.5, 0.7, 0.8), (0.5, 2.0, 0.95)):
        vs, adv = vtrace(r, v, nv, term, ends, log_rhos, 0.9, rho_bar, c_bar, lam)
        for b in range(B):
            want = vtrace_by_sums(
                r[:, b], v[:, b], nv[:, b], term[:, b], ends[:, b], log_rhos[:, b], 0.9,
                rho_bar, c_bar, lam,
            )  # fmt: skip
            np.testing.assert_allclose(vs[:, b], want[0], rtol=1e-10, atol=1e-10)
            np.testing.assert_allclose(adv[:, b], want[1], rtol=1e-10, atol=1e-10)


def test_vtrace_does_not_cross_an_episode_end():
    # the episode ends (terminated) at t=0: v_0 = V_0 + rho_0 (r_0 - V_0), whatever follows
    r = np.array([1.0, 2.0], np.float32)
    v = np.array([10.0, 20.0], np.float32)
    nv = np.array([99.0, 40.0], np.float32)
    end = _ends(2, [0])
    vs, adv = vtrace(r, v, nv, end, end, np.log(np.array([0.5, 2.0], np.float32)), G)
    np.testing.assert_allclose(vs, [10.0 + 0.5 * (1.0 - 10.0), 20.0 + (2.0 + 20.0 - 20.0)])
    np.testing.assert_allclose(adv, [0.5 * (1.0 - 10.0), 2.0 + 20.0 - 20.0])


def test_vtrace_torch_in_torch_out_and_same_numbers():
    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=(5, 2)).astype(np.float32) for _ in range(3)]
    lr = rng.normal(scale=0.5, size=(5, 2)).astype(np.float32)
    ends = np.zeros((5, 2), bool)
    ends[2, 1] = True
    out_np = vtrace(*arrays, ends, ends, lr, 0.9, lam=0.8)
    out_t = vtrace(*map(torch.from_numpy, arrays), torch.from_numpy(ends),
                   torch.from_numpy(ends), torch.from_numpy(lr), 0.9, lam=0.8)  # fmt: skip
    for a, b in zip(out_np, out_t, strict=True):
        assert isinstance(b, torch.Tensor)
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-5)
