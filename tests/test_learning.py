"""A3C learns CartPole-v1 to the threshold on every backend (fixed seeds, generous budgets)."""

import pytest

import asyncrl

# The long ones first (the paper preset's, the Guess and Pendulum ones: 30-130 s each under the
# test suite's load): scripts/test hands the tests out in this order to its processes (after the
# Ray module, conftest.py), and one of these started last would run alone at the end.
#
# Velocity-free CartPole (a recurrent core infers the velocities from memory; the MLP stays near
# 45) is the memory suite's (`python benchmarks/suite.py memory --seeds 6`: the LSTM, the GRU and
# the MLP), not CI's: its two runs were among CI's longest (docs/development.md). The Guess test
# below is CI's check that a recurrent core learns what only its history shows.


@pytest.mark.slow
def test_paper_preset_learns(run_dir, seed):
    """The paper's setting (one env per worker, t_max 5, shared trunk, RMSProp eps 0.1) learns,
    if more slowly: the mean return of 100 episodes passes 195 (CartPole-v0's threshold).
    Measured (2026-11-24): the assertion holds on seeds 1-5 too
    (ASYNCRL_TEST_SEED=S)."""
    cfg = asyncrl.preset(
        "paper",
        workers=2,
        seed=seed,
        steps=400_000,
        target_return=195.0,
        run_dir=str(run_dir),
        progress=False,
    )
    summary = asyncrl.train(cfg)
    assert summary["solved"], summary


GUESS = "tests.envs_for_tests:asyncrl-test/Guess-v0"


@pytest.mark.slow
def test_the_previous_action_and_reward_find_the_arm_that_pays(run_dir, seed):
    """On Guess one of two arms pays 1 a step for a whole episode of 20, and the observation is
    always 0: only the previous action and reward say which arm pays. With them among the
    LSTM's inputs (--prev-action-reward), APPO confirms a greedy evaluation of 18 (the best
    policy gets 19.5: one pull to find the arm), where any policy without them expects 10,
    whatever its memory (the control below). "Stay after a reward, switch after none" is an
    XOR of the two, which a feed-forward net's linear heads cannot learn: so given them, A3C's
    training games averaged 14.2 and 15.4 after 1.5M steps (seeds 0 and 1), and on seed 1 its
    greedy policy left arm 0 after it paid. Hence the option needs a recurrent core. A3C with
    the LSTM and the cartpole preset did not learn it either (10.0 and 9.8 after 1.5M steps,
    seeds 0 and 1; 12.4 at 1M with --lr 7e-4): its policy stopped depending on the context.
    The greedy policy passes 18 well before the training games' sampled one does, so the
    screens come every 5k steps, given (the default is every 15k): on seed 0 a screen at
    every 15k confirmed at 57k steps, and a run with 2 passes a rollout at 166k (2026-12-02,
    an AMD Zen 1). So given, seeds 0-5 (2026-12-02, the Zen 1, alone): confirmed in 15k-72k
    steps (19-71 s), the confirmations 18.35-19.49, the kept models 18.26-19.58 over 100 new
    episodes; with a screen every 15k (2026-11-29, an AMD Zen 3) 45k-102k steps and 18.8-19.6.
    The control's last 100 games 9.2-12.6 (2026-11-29)."""
    summary = asyncrl.train(
        env=GUESS, algo="appo", core="lstm", prev_action_reward=True, workers=2, seed=seed,
        steps=STEPS_TO_GUESS, eval_every=5_000, target_return=18.0, run_dir=str(run_dir),
        progress=False,
    )  # fmt: skip
    assert summary["solved"], summary
    returns = asyncrl.evaluate(run_dir, episodes=100, seed=10**6)  # Policy passes the rewards
    # 17, not the confirmed 18: 100 new games regress from the confirmation's selected ones
    # (18.26 twice of 6 above), and a policy blind to the arm scores 10 +- 1 over 100 games
    assert sum(returns) / len(returns) >= 17, returns


@pytest.mark.slow
def test_without_the_previous_action_and_reward_the_arm_is_a_coin(run_dir, seed):
    """The control: the same LSTM without --prev-action-reward, for a quarter of the budget,
    more steps than the test above takes to confirm on the seeds it was measured on."""
    summary = asyncrl.train(
        env=GUESS, core="lstm", workers=2, seed=seed, steps=STEPS_TO_GUESS // 4,
        target_return=18.0, run_dir=str(run_dir), progress=False,
    )  # fmt: skip
    # a policy blind to the arm scores 0 or 20 a game: over 100 games 10 +- 1, so 15 is 5 sigma
    assert not summary["solved"] and summary["rolling_return"] < 15, summary


STEPS_TO_GUESS = 300_000


@pytest.mark.slow
def test_the_defaults_learn_pendulum_to_minus_200(run_dir, seed):
    """Pendulum-v1 with nothing but the env given (no target: Gymnasium has none): A3C under the
    control preset (1M steps, gamma 0.95, the bound penalty, a small entropy bonus, evaluations
    of 30 episodes: docs/presets.md#control), and the model kept by the paired re-screens
    (docs/evaluation.md). The kept model re-scored over 100 new episodes must be at -200 or
    better, the issue's bar. Measured alone (2026-12-06, an AMD EPYC, commit 10c2f8f's code):
    -155.7, -179.0, -166.0, -161.1, -159.6 and -161.1 on seeds 0-5, 43-53 s a run; on threads
    -147.3, -166.8 and -162.3 on seeds 0-2. Before the preset's
    gamma 0.95 and the paired re-screens, a run under load kept the model of a lucky -134.9
    screen, which re-scored -348.8 (ASYNCRL_TEST_SEED=S)."""
    summary = asyncrl.train(env="Pendulum-v1", seed=seed, run_dir=str(run_dir), progress=False)
    assert summary["kept_model_episodes"] == 100, summary
    assert summary["kept_model_return"] >= -200.0, summary


@pytest.mark.slow
def test_appo_learns_pendulum_with_a_gaussian_policy(run_dir, seed):
    """Box actions: APPO with the control preset (picked from the env) takes Pendulum-v1 from
    random play (about -1,200) to a confirmed -400 (the stop rule: a greedy screen of 10
    episodes, then 100 new ones whose mean less two standard errors passes it), in 5 passes
    over each rollout where the preset takes 10. -400 is a third of random play's cost (-200
    counts as solved); it is asserted rather than a solve at -200, which the best evaluation of
    300k steps passed on some seeds only (-265 to -169 on seeds 0-5, 2026-11-27, an Intel
    Xeon), and rather than -300, which a CI run missed (2026-12-03, seed 0): from 100k steps its
    screens swung between -295 and -446 and the one that passed -300 (-294.8) failed its
    confirmation. Measured two runs at a time, as scripts/test runs them (2026-12-03, an AMD
    Zen 4), on seeds 0-9: confirmed in 11-20 s a run, the best evaluation -339 to -245, the
    kept model -317 to -238 over 20 new episodes. The evaluations every 15k steps are given, as
    the V-trace CartPole test below gives them: by default they also keep their seconds within
    a share of the run's time (EVAL_SHARE), so a loaded machine makes them fewer
    (ASYNCRL_TEST_SEED=S)."""
    summary = asyncrl.train(
        env="Pendulum-v1", algo="appo", epochs=5, workers=2, seed=seed, steps=300_000,
        eval_every=15_000, target_return=-400.0, run_dir=str(run_dir), progress=False,
    )  # fmt: skip
    assert summary["solved"], summary
    returns = asyncrl.evaluate(run_dir, episodes=20, seed=10**6)  # the Gaussian's mean
    # -500: a model confirmed at -400 over 100 games, seen in 20 new ones (their standard error
    # about 35), and below the worst kept model measured (-317) by more than twice the cost of
    # one episode in 20 that never swings up (about 65); under scripts/test the run shares the
    # cores
    assert sum(returns) / len(returns) >= -500, returns


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_a3c_solves_cartpole(backend, run_dir, seed):
    summary = asyncrl.train(
        backend=backend, workers=2, seed=seed, steps=1_000_000, run_dir=str(run_dir), progress=False
    )
    assert summary["solved"], summary
    assert summary["solve_steps"] <= summary["total_steps"] < 1_000_000
    # solved by the evaluation stop rule: the kept model (best_model.pt, what load and eval
    # take by default) passed a 10-episode screen and then scored 475 over 100 new episodes
    # (--confirm-episodes), and it scores it over 100 more.
    assert summary["best_eval_return"] >= 475 and summary["best_eval_episodes"] == 100
    returns = asyncrl.evaluate(run_dir, episodes=100, seed=10**6)
    assert sum(returns) / len(returns) >= 475, returns


@pytest.mark.slow
@pytest.mark.parametrize(
    ("algo", "backend", "vtrace"),
    [("appo", "threads", False), ("appo", "processes", True)],
)
def test_beyond_the_paper_solves_cartpole(algo, backend, vtrace, run_dir, seed):
    """APPO (several clipped passes a rollout, fresh parameters before each minibatch) and
    V-trace (learning at the parameters of now, corrected for the rollout's older ones).
    Measured (2026-11-24) on seeds 0-5 of each case: every run confirmed at 475 by 50k steps,
    the kept models 492-500 over 100 new episodes. APPO on threads at commit c2c8d98 (its
    targets from the values recorded as it acted), 2026-11-26: the same, every kept model 500."""
    summary = asyncrl.train(
        algo=algo, backend=backend, vtrace=vtrace, workers=2, seed=seed, steps=1_000_000,
        run_dir=str(run_dir), progress=False,
    )  # fmt: skip
    assert summary["solved"], summary
    assert summary["best_eval_return"] >= 475 and summary["best_eval_episodes"] == 100
    returns = asyncrl.evaluate(run_dir, episodes=100, seed=10**6)
    assert sum(returns) / len(returns) >= 475, returns
    metrics = (run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"vtrace_rho_mean", "vtrace_rho_max"} <= set(metrics) or not vtrace
    if algo == "appo":
        assert {"appo_approx_kl", "appo_clip_fraction", "train_explained_variance"} <= set(metrics)


@pytest.mark.slow
def test_a3c_with_vtrace_learns_cartpole(run_dir, seed):
    """A3C learning at the current global parameters, V-trace correcting for the rollout's
    older ones. What holds on every seed is asserted: with 300k steps and no stop, seeds 0-5
    (2026-11-24) kept models scoring 377-500 over 20 new episodes (random play: about 22). To a
    confirmed 475 within 1M steps it went on 5 seeds of 6 (seed 3 not). With the evaluations
    every 15k steps, seeds 0-3 kept models scoring 500 (2026-11-29, four runs at once on 2
    cores) and the test passed on seeds 1-5 (ASYNCRL_TEST_SEED=S, two at once). They are
    given: by default they also keep their seconds within a share of the
    run's time (EVAL_SHARE), so under the test suite's load a run of 300k steps got only a
    few, and once none of them fell where the policy was good (one failure in three suites)."""
    summary = asyncrl.train(
        algo="a3c", vtrace=True, backend="threads", workers=2, seed=seed, steps=300_000,
        eval_every=15_000, target_return=1e9, run_dir=str(run_dir), progress=False,
    )  # fmt: skip
    assert summary["best_eval_return"] >= 300, summary
    returns = asyncrl.evaluate(run_dir, episodes=20, seed=10**6)
    assert sum(returns) / len(returns) >= 300, returns
    metrics = (run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"vtrace_rho_mean", "vtrace_rho_max"} <= set(metrics)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_nstep_q_solves_cartpole(backend, run_dir, seed):
    """Async n-step Q reaches CartPole-v1's 475 within 1M steps on each backend. Measured
    (2026-11-24): it does on seeds 1-5 too, on both (ASYNCRL_TEST_SEED=S)."""
    summary = asyncrl.train(
        algo="nstep-q",
        backend=backend,
        workers=2,
        seed=seed,
        steps=1_000_000,
        run_dir=str(run_dir),
        progress=False,
    )
    assert summary["solved"], summary


@pytest.mark.slow
def test_nstep_q_greedy_policy_is_what_eval_uses(run_dir, seed):
    """`asyncrl eval` plays the greedy policy of the final Q-network. One worker on the threads
    backend is bit-for-bit reproducible, so this checks a fixed outcome: with Hogwild workers
    the stop rule judges epsilon-greedy episodes that span many updates, and the final greedy
    policy can swing well below them (a CI run evaluated 177 after a solved run). That outcome
    is reproducible only on one CPU, so it was measured on seeds 1-5 too (2026-11-24): the
    greedy policy passed 400 on each (ASYNCRL_TEST_SEED=S)."""
    summary = asyncrl.train(
        algo="nstep-q",
        backend="threads",
        workers=1,
        seed=seed,
        steps=1_000_000,
        run_dir=str(run_dir),
        progress=False,
    )
    assert summary["solved"], summary
    returns = asyncrl.evaluate(run_dir, episodes=10)
    assert sum(returns) / len(returns) >= 400, (returns, summary)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["onestep-q", "onestep-sarsa"])
def test_one_step_methods_pass_195_within_a_million_steps(algo, run_dir, seed):
    """Async one-step Q and Sarsa pass CartPole-v0's 195 within 1M steps. Measured
    (2026-11-24): both do on seeds 1-5 too (ASYNCRL_TEST_SEED=S)."""
    summary = asyncrl.train(
        algo=algo,
        workers=2,
        seed=seed,
        steps=1_000_000,
        target_return=195.0,
        run_dir=str(run_dir),
        progress=False,
    )
    assert summary["solved"], summary


@pytest.mark.slow
def test_a3c_learns_minatar_breakout_from_pixels(run_dir, seed):
    """The pixel learning test CI can afford: MinAtar's 10x10 Breakout (bool frames, MinAtar's
    conv net, --preset minatar). A random policy scores about 0.5 a game; with one worker on
    threads (reproducible) the rolling mean of 100 games passes 3 near 100k steps, and the
    stop rule's confirmation (its mean less two standard errors at 3) follows. The assertions
    hold on seeds 1-5 too (2026-11-24; ASYNCRL_TEST_SEED=S)."""
    pytest.importorskip("minatar")
    summary = asyncrl.train(
        env="MinAtar/Breakout-v1",
        backend="threads",
        workers=1,
        seed=seed,
        steps=600_000,
        target_return=3.0,
        run_dir=str(run_dir),
        progress=False,
    )
    assert summary["solved"], summary
    returns = asyncrl.evaluate(run_dir, episodes=20)
    assert sum(returns) / len(returns) >= 2.0, returns


@pytest.mark.slow
def test_a3c_reads_the_one_leaf_of_a_dict_observation_that_pays(run_dir, seed):
    """DictCue's observation has a leaf of every kind, nested in a Dict and a Tuple; each step
    pays 1 for the action its Discrete ``cue`` leaf names, and every other leaf is noise: 10 an
    episode reading the cue, 3.3 guessing. A3C (separate actor and critic trunks: a shared one
    took over 60k steps, its critic's loss swamped by the image's noise) confirms 9.5 after
    3.9k-5.1k steps on seeds 0-4, 4-7 s a run (2026-12-06, 2 cores shared with other work).
    The kept policy acts on the env's own dicts."""
    import gymnasium as gym

    import tests.envs_for_tests  # noqa: F401 (registers the env in this process)

    summary = asyncrl.train(
        env="tests.envs_for_tests:asyncrl-test/DictCue-v0", shared_trunk=False, workers=2,
        backend="threads", seed=seed, steps=200_000, target_return=9.5, run_dir=str(run_dir),
        progress=False,
    )  # fmt: skip
    assert summary["solved"], summary
    policy = asyncrl.load(run_dir)
    env = gym.make("asyncrl-test/DictCue-v0")
    total = 0.0
    for episode in range(20):
        obs, _ = env.reset(seed=10**6 + episode)
        done = False
        while not done:
            obs, reward, term, trunc, _ = env.step(policy.act(obs))
            total += float(reward)
            done = term or trunc
    assert total / 20 >= 9.0, total / 20


# ---------------------------------------------------------------- action spaces and masks
@pytest.mark.slow
def test_a3c_learns_a_multi_discrete_bandit_whose_space_starts_away_from_zero(run_dir, seed):
    """Match: each of two parts (3 and 4 actions, the space starting at (1, -2)) pays 0.5 where
    it hits the target the observation shows; the best policy scores 10 an episode, a uniform
    one 2.9. Seeds 0-5 (2026-12-06, 2 cores shared with other runs; ASYNCRL_TEST_SEED=S):
    confirmed at 9 in 7.1k-8.8k steps (2-5 s), the kept models 9.16-10.0 over 100 new
    episodes."""
    summary = asyncrl.train(
        env="tests.envs_for_tests:asyncrl-test/Match-v0", workers=2, seed=seed, steps=100_000,
        target_return=9.0, run_dir=str(run_dir), progress=False,
    )  # fmt: skip
    assert summary["solved"], summary
    returns = asyncrl.evaluate(run_dir, episodes=100, seed=10**6)
    assert sum(returns) / len(returns) >= 8.5, returns


@pytest.mark.slow
def test_a_masked_policy_learns_what_the_mask_alone_shows(run_dir, seed):
    """Pick: each step a random half of 4 actions is valid, action a pays (a + 1) / 4 and an
    invalid one costs 1 and ends the episode; the observation is always 0, so only the mask
    says what is valid. The env raises on a masked action (strict), in training and in
    evaluation alike (APPO: its ratios and entropy under the masks recorded as it acted). The
    best masked policy (the highest valid action) expects 8.17 an episode; seeds 0-5
    (2026-12-06, 2 cores shared with other runs; ASYNCRL_TEST_SEED=S) confirmed 7.8 in
    3.2k-4.2k steps (1-2 s), the kept models 8.16 over 100 new episodes. The same policies
    blind to the mask (Policy.act without it, on the env that charges for an invalid action)
    take their favourite action valid or not: 0.3 over 100 episodes on each seed."""
    summary = asyncrl.train(
        env="tests.envs_for_tests:asyncrl-test/PickStrict-info-v0", algo="appo", workers=2,
        seed=seed, steps=100_000, target_return=7.8, run_dir=str(run_dir), progress=False,
    )  # fmt: skip
    assert summary["solved"], summary
    returns = asyncrl.evaluate(run_dir, episodes=100, seed=10**6)  # strict: raises if masked
    assert sum(returns) / len(returns) >= 7.8, returns
    import gymnasium as gym

    policy, env = asyncrl.load(run_dir), gym.make("tests.envs_for_tests:asyncrl-test/Pick-info-v0")
    blind = []
    for i in range(100):
        obs, _ = env.reset(seed=i)
        total, done = 0.0, False
        while not done:
            obs, r, term, trunc, _ = env.step(policy.act(obs))  # no action_mask
            total, done = total + float(r), term or trunc
        blind.append(total)
    assert sum(blind) / len(blind) < 4.0, blind


@pytest.mark.slow
def test_taxi_learns_with_its_info_action_mask_and_takes_no_invalid_action(run_dir, seed):
    """Taxi-v4 (its observation one-hot: Discrete observations come with the Dict support)
    with the int8 info["action_mask"] it gives: the mask rules out the moves into walls and the
    illegal pick-ups and drop-offs (-10 each), so even the first episodes cost no -10, and A3C
    confirms a greedy 5 (a delivery in most episodes; a random masked policy rarely delivers in
    200 steps). The test's 100 new episodes then assert -5, a margin of 10 under the target:
    a greedy policy cycles to the 200-step cap from a few start states (about -200 against +8,
    so each costs the mean about 2), and a model that met none of them in the starts it was
    confirmed on can meet several in 100 new ones. A policy that has not learned, masked or
    not, scores far under it. Seeds 0-7
    (2026-12-06, two runs at a time on 2 cores; ASYNCRL_TEST_SEED=S) confirmed 5 in 114k-231k
    steps; their kept models scored 7.3-7.9 here, with no loop."""
    summary = asyncrl.train(
        env="tests.envs_for_tests:asyncrl-test/TaxiOneHot-v4", workers=2, seed=seed,
        steps=600_000, target_return=5.0, run_dir=str(run_dir), progress=False,
    )  # fmt: skip
    assert summary["solved"], summary
    import gymnasium as gym
    import numpy as np

    policy, env = asyncrl.load(run_dir), gym.make("Taxi-v4")
    totals, invalid = [], 0
    for i in range(100):
        state, info = env.reset(seed=10**6 + i)
        total, done = 0.0, False
        while not done:
            obs = np.eye(500, dtype=np.float32)[state]
            state, r, term, trunc, info = env.step(policy.act(obs, action_mask=info["action_mask"]))
            total, done, invalid = total + float(r), term or trunc, invalid + (r == -10)
        totals.append(total)
    assert invalid == 0 and sum(totals) / len(totals) >= -5.0, (invalid, totals)
