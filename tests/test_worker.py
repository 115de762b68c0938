"""The worker loop's rollouts: next-step autoreset, truncation vs termination, counters."""

import itertools
import typing

import numpy as np
import pytest
import torch

import tests.envs_for_tests  # noqa: F401  (registers the envs)
from asyncrl import algos
from asyncrl.algos.a3c import A3C
from asyncrl.backends.local import SharedMemory, run_worker
from asyncrl.config import Config
from asyncrl.envs import probe_env
from asyncrl.messages import Done, Episodes, Failed, Finished, NonFinite
from asyncrl.models import build_model, flatten_parameters
from asyncrl.optim import SharedRMSprop
from asyncrl.state import EPISODES, NONFINITE, GlobalState
from tests.oracles import spec_for, spec_of


def make_shared(params, target=None, workers=1, optimizer=None):
    state = GlobalState(
        params=params,
        optimizer=optimizer or SharedRMSprop(params, 1e-3),
        target_params=target,
        target_period=torch.zeros(1, dtype=torch.int64),
        counters=torch.zeros((3, workers), dtype=torch.int64),
    )
    return SharedMemory.create(state, workers)


class Outbox(list):
    """What the worker sends to the main process, in order."""

    def send(self, msg):
        self.append(msg)


class Recording(A3C):
    """A3C that keeps a copy of every rollout it is asked to learn from."""

    seen: typing.ClassVar[list] = []

    def loss(self, model, rollout, target_model=None):
        Recording.seen.append({k: np.copy(v) for k, v in vars(rollout).items()})
        return super().loss(model, rollout, target_model)


def run(env_id, steps, t_max, monkeypatch, **kw):
    monkeypatch.setitem(algos.REGISTRY, "a3c", Recording)
    Recording.seen = []
    cfg = Config(env=env_id, steps=steps, t_max=t_max, envs_per_worker=1, hidden=(4,), **kw)
    info = probe_env(env_id)
    model = build_model(spec_of(Recording(cfg, info)))
    params = flatten_parameters(model)
    shared, outbox = make_shared(params), Outbox()
    run_worker(0, 0, cfg, info, spec_for(cfg, info), shared, None, outbox)
    return shared, outbox


def test_truncated_episode_bootstraps_from_its_final_observation(monkeypatch):
    shared, msgs = run("asyncrl-test/Counter-v0", steps=6, t_max=4, monkeypatch=monkeypatch)
    ro = Recording.seen[0]
    obs = ro["obs"][:, 0, 0]
    # steps: 0->1, 1->2, 2->3 (truncated: obs[3] is the final observation 3), then the
    # autoreset step (invalid) whose result is the new episode's first observation 0
    np.testing.assert_array_equal(obs, [0, 1, 2, 3, 0])
    np.testing.assert_array_equal(ro["ends"][:, 0], [False, False, True, False])
    np.testing.assert_array_equal(ro["terminated"][:, 0], [False] * 4)
    np.testing.assert_array_equal(ro["valid"][:, 0], [True, True, True, False])
    np.testing.assert_array_equal(ro["rewards"][:, 0], [1, 1, 1, 0])
    assert isinstance(msgs[0], Episodes) and msgs[0].episodes == [Finished(3.0, 3)]
    assert isinstance(msgs[-1], Done) and (msgs[-1].worker, msgs[-1].incarnation) == (0, 0)
    assert shared.state.steps() == 6  # valid steps only
    assert shared.state.episodes() == 2


def test_the_context_rows_hold_the_previous_action_and_learning_reward(monkeypatch):
    """--prev-action-reward: each observation's row of the context is the step before it, its
    action one-hot and its learning reward (scaled), zeros where an episode starts; a rollout's
    first row carries on from the last one's bootstrap row."""
    run(
        "asyncrl-test/Counter-v0", steps=6, t_max=2, monkeypatch=monkeypatch,
        core="lstm", prev_action_reward=True, reward_scale=0.5,
    )  # fmt: skip
    rows = [(ro["obs"][:, 0, 0], ro["actions"][:, 0], ro["context"][:, 0]) for ro in Recording.seen]
    assert len(rows) >= 3
    (obs0, a0, c0), (obs1, a1, c1), (obs2, _, c2) = rows[:3]
    # the episodes of 3 steps: 0 -> 1 -> 2 | 2 -> 3 (truncated), the reset step -> 0 | 0 -> 1 -> 2
    np.testing.assert_array_equal([*obs0, *obs1, *obs2], [0, 1, 2, 2, 3, 0, 0, 1, 2])

    def after(action):
        return [float(action == 0), float(action == 1), 0.5]

    np.testing.assert_array_equal(c0, [[0, 0, 0], after(a0[0]), after(a0[1])])
    np.testing.assert_array_equal(c1, [after(a0[1]), after(a1[0]), [0, 0, 0]])
    np.testing.assert_array_equal(c2[0], [0, 0, 0])  # the new episode's first observation
    assert Recording.seen[0]["context"].dtype == np.float32
    run("asyncrl-test/Counter-v0", steps=2, t_max=2, monkeypatch=monkeypatch)  # without it
    assert Recording.seen[0]["context"].shape == (3, 1, 0)


def test_terminated_episode_is_flagged(monkeypatch):
    run("asyncrl-test/CounterTerminal-v0", steps=2, t_max=3, monkeypatch=monkeypatch)
    ro = Recording.seen[0]
    np.testing.assert_array_equal(ro["terminated"][:, 0], [False, True, False])
    np.testing.assert_array_equal(ro["ends"][:, 0], [False, True, False])
    np.testing.assert_array_equal(ro["valid"][:, 0], [True, True, False])


def test_a_lost_life_is_terminal_for_the_learner_but_the_game_goes_on(monkeypatch):
    """Atari's life loss (asyncrl.atari): V = 0 at the lost life, but the next step is a real
    transition of the same game (valid, not a new episode's first), and only the game over
    ends an episode, whose return is the raw score, not the clipped rewards."""
    _, msgs = run("asyncrl-test/Lives-v0", steps=4, t_max=6, monkeypatch=monkeypatch)
    ro = Recording.seen[0]
    np.testing.assert_array_equal(ro["obs"][:, 0, 0], [0, 1, 2, 3, 4, 0, 1])
    np.testing.assert_array_equal(ro["terminated"][:, 0], [False, True, False, True, False, False])
    np.testing.assert_array_equal(ro["valid"][:, 0], [True, True, True, True, False, True])
    np.testing.assert_array_equal(
        ro["first"][:, 0], [True, False, False, False, False, True, False]
    )
    np.testing.assert_array_equal(ro["rewards"][:, 0], [1, 1, 1, 1, 0, 1])
    episodes = [e for m in msgs if isinstance(m, Episodes) for e in m.episodes]
    assert episodes == [Finished(40.0, 4)]  # one game of two lives, its raw score


def test_worker_error_is_reported_not_swallowed(monkeypatch):
    class Broken(A3C):
        def loss(self, *a, **k):
            raise FloatingPointError("boom")

    monkeypatch.setitem(algos.REGISTRY, "a3c", Broken)
    cfg = Config(steps=100, t_max=2, envs_per_worker=1, hidden=(4,))
    info = probe_env(cfg.env)
    params = flatten_parameters(build_model(spec_of(Broken(cfg, info))))
    shared = make_shared(params, workers=4)
    before = params.clone()
    outbox = Outbox()
    run_worker(3, 0, cfg, info, spec_for(cfg, info), shared, None, outbox)
    failed = outbox[0]
    assert isinstance(failed, Failed) and failed.worker == 3 and not failed.diverged
    assert "FloatingPointError: boom" in failed.text and "Traceback" in failed.traceback
    assert outbox[1] == Done(3, 0, None)
    assert torch.equal(params, before)


@pytest.mark.parametrize("ending", ["done", "fault", "retired"])
def test_a_worker_closes_its_envs_however_its_loop_ends(ending, monkeypatch):
    """Done, failed or retired (restarted as hung): the worker closes its envs itself. The
    store refers back to its worker, so a failed or retired one is otherwise freed only by a
    cycle collection, an Atari vector env's emulator thread with it."""
    from asyncrl.backends.local import SharedMemoryStore
    from asyncrl.worker import Worker

    class Broken(A3C):
        def loss(self, *a, **k):
            raise FloatingPointError("boom")

    class Retiring(SharedMemoryStore):
        def push(self, *a, **k):
            return -1  # what push answers an incarnation the main process restarted

    if ending == "fault":
        monkeypatch.setitem(algos.REGISTRY, "a3c", Broken)
    cfg = Config(steps=40, t_max=4, envs_per_worker=2, hidden=(4,))
    info = probe_env(cfg.env)
    params = flatten_parameters(build_model(spec_of(A3C(cfg, info))))
    store_type = Retiring if ending == "retired" else SharedMemoryStore
    store = store_type(cfg, make_shared(params), Outbox(), 0, 0)
    worker = Worker(0, 0, cfg, info, spec_for(cfg, info), store, None)
    store.attach(worker)
    closes, close = [], worker.envs.close
    worker.envs.close = lambda: closes.append(True) or close()  # type: ignore[method-assign]
    if ending == "fault":
        with pytest.raises(FloatingPointError):
            worker.run()
    else:
        assert (worker.run() is None) == (ending == "retired")
    assert closes == [True]


@pytest.mark.parametrize("env_id", ["CartPole-v1", "asyncrl-test/Counter-v0"])
def test_make_vec_env_uses_next_step_autoreset(env_id):
    from asyncrl.envs import make_vec_env

    env = make_vec_env(env_id, 2)
    obs, _ = env.reset(seed=0)
    assert obs.shape[0] == 2
    env.close()


def test_sarsa_takes_the_next_action_it_bootstrapped_from(monkeypatch):
    from asyncrl.algos.onestep_sarsa import OneStepSarsa

    class RecordingSarsa(OneStepSarsa):
        seen: typing.ClassVar[list] = []

        def loss(self, model, rollout, target_model=None):
            seen = {k: np.copy(v) for k, v in vars(rollout).items()}
            RecordingSarsa.seen.append({**seen, "pending": self.pending[0].copy()})
            return super().loss(model, rollout, target_model)

    monkeypatch.setitem(algos.REGISTRY, "onestep-sarsa", RecordingSarsa)
    cfg = Config(
        algo="onestep-sarsa",
        env="CartPole-v1",
        steps=200,
        async_update=5,
        envs_per_worker=2,
        hidden=(4,),
        eps_start=0.5,
        eps_finals=(0.5,),
        eps_probs=(1.0,),
    )
    info = probe_env(cfg.env)
    params = flatten_parameters(build_model(spec_of(RecordingSarsa(cfg, info))))
    shared = make_shared(params, target=params.clone())
    run_worker(0, 0, cfg, info, spec_for(cfg, info), shared, None, Outbox())
    seen = RecordingSarsa.seen
    assert len(seen) > 10
    for prev, nxt in itertools.pairwise(seen):
        np.testing.assert_array_equal(nxt["actions"][0], prev["pending"])
    # one-step methods update at an episode end: some rollouts were cut short
    assert any(len(r["rewards"]) < 5 for r in seen)
    assert all(len(r["obs"]) == len(r["rewards"]) + 1 for r in seen)


def test_nonfinite_updates_are_never_applied(monkeypatch):
    class NaNLoss(A3C):
        def loss(self, model, rollout, target_model=None):
            loss, stats = super().loss(model, rollout, target_model)
            return loss * float("nan"), stats

    monkeypatch.setitem(algos.REGISTRY, "a3c", NaNLoss)
    cfg = Config(steps=10_000, t_max=2, envs_per_worker=1, hidden=(4,), max_nonfinite=3)
    info = probe_env(cfg.env)
    params = flatten_parameters(build_model(spec_of(NaNLoss(cfg, info))))
    shared = make_shared(params)
    before = params.clone()
    msgs = Outbox()
    run_worker(0, 0, cfg, info, spec_for(cfg, info), shared, None, msgs)
    assert sum(isinstance(m, NonFinite) for m in msgs) == 3
    error = next(m for m in msgs if isinstance(m, Failed))
    assert error.diverged and "3 rollouts in a row with a non-finite update" in error.text
    assert torch.equal(params, before)
    assert int(shared.state.counters[NONFINITE].sum()) == 3


def test_nonfinite_updates_count_by_rollout_not_by_minibatch(monkeypatch):
    """APPO's 16 minibatches share a rollout's advantages: one NaN rollout spoils all of
    them, and must count once against --max-nonfinite, as A3C's one update does."""
    from asyncrl.algos.appo import APPO

    class FirstRolloutNaN(APPO):
        rollouts = 0

        def prepare(self, model, rollout):
            FirstRolloutNaN.rollouts += 1
            returns, adv, values, stats, learn_obs = super().prepare(model, rollout)
            if FirstRolloutNaN.rollouts == 1:
                adv = adv * np.nan
            return returns, adv, values, stats, learn_obs

    monkeypatch.setitem(algos.REGISTRY, "appo", FirstRolloutNaN)
    cfg = Config(algo="appo", steps=64, t_max=8, envs_per_worker=2, hidden=(4,), max_nonfinite=2)
    cfg = cfg.validate()
    info = probe_env(cfg.env)
    params = flatten_parameters(build_model(spec_of(FirstRolloutNaN(cfg, info))))
    shared, msgs = make_shared(params, optimizer=SharedRMSprop(params, 1e-3)), Outbox()
    run_worker(0, 0, cfg, info, spec_for(cfg, info), shared, None, msgs)
    per_rollout = cfg.epochs * cfg.minibatches
    assert per_rollout >= 2  # more non-finite updates than --max-nonfinite, in one rollout
    assert sum(isinstance(m, NonFinite) for m in msgs) == per_rollout
    assert not any(isinstance(m, Failed) for m in msgs)
    assert shared.state.steps() >= 64  # it went on to finish its budget


def test_a_finished_worker_leaves_a_snapshot_of_its_state():
    cfg = Config(steps=64, t_max=4, envs_per_worker=2, hidden=(4,))
    info = probe_env(cfg.env)
    params = flatten_parameters(build_model(spec_of(A3C(cfg, info))))
    shared, outbox = make_shared(params), Outbox()
    run_worker(0, 0, cfg, info, spec_for(cfg, info), shared, None, outbox)
    done = outbox[-1]
    assert isinstance(done, Done) and (done.worker, done.incarnation) == (0, 0)
    snap = done.snapshot
    np.testing.assert_array_equal(snap.glob.params, params.numpy())
    assert snap.glob.steps == shared.state.steps()
    assert snap.worker["envs"] is not None and "square_avg" in snap.glob.optimizer


@pytest.mark.parametrize("algo", ["onestep-q", "onestep-sarsa"])
def test_a_resume_without_the_envs_keeps_the_rest_of_the_worker_and_plays_new_games(algo):
    """Where the checkpoint could not keep the envs (ale-py's emulators cannot be pickled), the
    worker still resumes its RNG and algorithm state, and starts games of its own: not the
    run's opening ones, which its seeds (its incarnation counts from 0 again) would replay."""
    from asyncrl.backends.local import SharedMemoryStore
    from asyncrl.worker import Worker

    cfg = Config(env="Acrobot-v1", algo=algo, steps=10**6, envs_per_worker=3, hidden=(4,))
    info = probe_env(cfg.env)
    params = flatten_parameters(build_model(spec_of(algos.make_algorithm(cfg.algo, cfg, info))))
    shared = make_shared(params, target=params.clone())

    def worker(state):
        return Worker(
            0,
            0,
            cfg,
            info,
            spec_for(cfg, info),
            SharedMemoryStore(cfg, shared, Outbox(), 0, 0),
            state,
        )

    opening = worker(None)
    opening.rng.random(5)  # the run went on: its RNG moved
    opening.algo.eps_final = 0.123  # not one of the draws 0.1, 0.01, 0.5
    if algo == "onestep-sarsa":
        opening.algo.pending = (np.zeros(3, np.int64), np.zeros(3, np.float32))
    state = opening.state()
    with_envs = worker(state)
    assert with_envs.rng.bit_generator.state == state["rng"]
    np.testing.assert_array_equal(with_envs.obs, opening.obs)  # the envs resumed exactly
    state["envs"] = None  # as an env that cannot be pickled leaves it
    a, b = worker(state), worker(state)
    assert a.algo.eps_final == 0.123
    assert a.rng.random() == b.rng.random() != worker(None).rng.random()  # restored, then drawn
    np.testing.assert_array_equal(a.obs, b.obs)  # new games, still a function of the checkpoint
    assert not np.isclose(a.obs, opening.obs).all(axis=1).any()  # none of the opening's
    assert a.first.all() and not a.prev_done.any()
    if algo == "onestep-sarsa":  # its pending a' was drawn at the old game's state
        assert with_envs.algo.pending is not None and a.algo.pending is None


def test_a_checkpoint_keeps_the_context_the_next_step_takes():
    """--prev-action-reward: a worker resumed with its envs gives its next step the last action
    and reward it had; one whose envs restart gives zeros (every observation is a first)."""
    from asyncrl.backends.local import SharedMemoryStore
    from asyncrl.worker import Worker

    cfg = Config(
        steps=10**6, t_max=3, envs_per_worker=2, hidden=(4,), core="lstm", lstm_size=4,
        prev_action_reward=True,
    ).validate()  # fmt: skip
    info = probe_env(cfg.env)
    params = flatten_parameters(build_model(spec_of(algos.make_algorithm(cfg.algo, cfg, info))))
    shared = make_shared(params)

    def worker(state):
        return Worker(
            0,
            0,
            cfg,
            info,
            spec_for(cfg, info),
            SharedMemoryStore(cfg, shared, Outbox(), 0, 0),
            state,
        )

    opening = worker(None)
    opening.collect(0)
    state = opening.state()
    assert state["context"].shape == (2, 3) and state["context"][:, 2].tolist() == [1.0, 1.0]
    resumed = worker(state)
    resumed.collect(0)
    np.testing.assert_array_equal(resumed.buf.context[0], opening.buf.context[-1])
    state["envs"] = None  # as an env that cannot be pickled leaves it
    restarted = worker(state)
    restarted.collect(0)
    assert not restarted.buf.context[0].any()


def test_workers_report_their_learner_statistics():
    cfg = Config(steps=2_000, t_max=4, envs_per_worker=2, hidden=(4,))
    info = probe_env(cfg.env)
    params = flatten_parameters(build_model(spec_of(A3C(cfg, info))))
    shared, outbox = make_shared(params), Outbox()
    run_worker(0, 0, cfg, info, spec_for(cfg, info), shared, None, outbox)
    sums = {}
    for m in outbox:
        if isinstance(m, Episodes):
            for k, (s, n) in m.stats.items():
                sums[k] = (sums.get(k, (0, 0))[0] + s, sums.get(k, (0, 0))[1] + n)
    names = {"loss/policy_loss", "loss/value_loss", "loss/entropy"}
    assert set(sums) == names | {"train/grad_norm", "train/clip_fraction"}
    updates = sums["loss/entropy"][1]
    assert updates == 2_000 // 8 + (2_000 % 8 > 0) or updates > 200  # one per rollout
    assert 0 < sums["loss/entropy"][0] / updates <= np.log(2) + 1e-6  # entropy of 2 actions


def test_the_last_statistics_reach_a_store_that_sends_them_with_its_snapshot():
    """Ray's store queues reports and sends what is queued at the loop's last call, the
    snapshot: the worker's last statistics must be queued before it, not after (lost)."""
    from asyncrl.backends.local import SharedMemoryStore
    from asyncrl.worker import Worker

    class Queueing(SharedMemoryStore):
        def report(self, finished, stats, step):
            self.queued = [*getattr(self, "queued", []), (finished, stats, step)]

        def snapshot(self, worker):
            for args in getattr(self, "queued", []):
                super().report(*args)
            self.queued = []
            return super().snapshot(worker)

    cfg = Config(steps=40, t_max=4, envs_per_worker=2, hidden=(4,))
    info = probe_env(cfg.env)
    params = flatten_parameters(build_model(spec_of(A3C(cfg, info))))
    shared, outbox = make_shared(params), Outbox()
    store = Queueing(cfg, shared, outbox, 0, 0)
    Worker(
        0, 0, cfg, info, spec_for(cfg, info), store, None
    ).run()  # 5 rollouts, within STATS_EVERY: no report due
    updates = sum(m.stats.get("loss/entropy", (0, 0))[1] for m in outbox if isinstance(m, Episodes))
    assert updates == 5


def test_a_worker_started_before_a_checkpoint_request_answers_it_however_late_it_starts():
    """The supervisor restarts a worker and, in the same pass, asks for a checkpoint due: the
    new incarnation may reach its first pull only after the request. It must answer it (an
    unanswered request holds every later checkpoint back)."""
    from asyncrl.backends.local import LocalRun, SharedMemoryStore
    from asyncrl.messages import Snapshot
    from asyncrl.worker import Worker

    class Recorder:
        def start_worker(self, worker_id, target, args):
            self.args = args

    cfg = Config(steps=100, t_max=4, envs_per_worker=2, hidden=(4,))
    info = probe_env(cfg.env)
    params = flatten_parameters(build_model(spec_of(A3C(cfg, info))))
    state = GlobalState(
        params=params,
        optimizer=SharedRMSprop(params, 1e-3),
        target_params=None,
        target_period=torch.zeros(1, dtype=torch.int64),
        counters=torch.zeros((3, 1), dtype=torch.int64),
    )
    state.counters[0, 0] = 5_000  # a resumed run, 5,000 steps in
    run = LocalRun(cfg, info, spec_for(cfg, info), state, Recorder())  # type: ignore[arg-type]
    run.shared.checkpoint_request[0] = 3  # three checkpoints answered earlier in the run
    run._start(0, None)
    run.shared.checkpoint_request[0] = 4  # asked before the worker got going
    wid, inc, cfg_, info_, _, shared, wstate = run.backend.args
    # its incarnation (its seeds) counts from the step count: not the opening's games again
    assert inc == 5_000 == run.incarnation(0)
    outbox = Outbox()
    store = SharedMemoryStore(cfg_, shared, outbox, wid, inc)
    store.attach(Worker(wid, inc, cfg_, info_, spec_for(cfg_, info_), store, wstate))
    store.pull(params.clone(), None)
    assert [m.request for m in outbox if isinstance(m, Snapshot)] == [4]


class CountingRMSprop(SharedRMSprop):
    steps = 0

    def step(self, grad, lr=None):
        CountingRMSprop.steps += 1
        super().step(grad, lr)


def test_a_rollout_with_no_valid_transition_makes_no_update(monkeypatch):
    # one env, one-step rollouts: the rollout right after each episode end holds only the
    # masked reset step; it must not reach the optimizer (RMSProp would decay its statistics)
    cfg = Config(env="asyncrl-test/Counter-v0", steps=12, t_max=1, envs_per_worker=1, hidden=(4,))
    info = probe_env(cfg.env)
    params = flatten_parameters(build_model(spec_of(A3C(cfg, info))))
    CountingRMSprop.steps = 0
    shared = make_shared(params, optimizer=CountingRMSprop(params, 1e-3))
    run_worker(0, 0, cfg, info, spec_for(cfg, info), shared, None, Outbox())
    # 12 valid steps (4 episodes of 3) and 4 reset steps: 16 rollouts, 12 updates
    assert shared.state.steps() == 12
    assert CountingRMSprop.steps == 12
    assert int(shared.state.counters[EPISODES].sum()) == 4


def test_every_worker_and_env_plays_its_own_stream():
    # copy i of worker w and copy i-1 of worker w+1 used to share a seed (Acrobot: 8 identical
    # pairs of episodes among 3 workers x 4 envs)
    from asyncrl.envs import env_seeds, make_vec_env, reset_vec_env

    firsts = []
    for w in range(3):
        _, seeds = env_seeds(0, w, 0, 4)
        env = make_vec_env("Acrobot-v1", 4)
        obs, _ = reset_vec_env(env, seeds)
        firsts.extend(map(tuple, np.round(obs, 6)))
        env.close()
    assert len(set(firsts)) == 12
    all_seeds = [s for w in range(3) for inc in range(2) for s in env_seeds(0, w, inc, 4)[1]]
    assert len(set(all_seeds)) == len(all_seeds)
    assert env_seeds(0, 1, 0, 4) == env_seeds(0, 1, 0, 4)  # a function of the seed


def test_the_loss_normalises_with_the_statistics_acting_used(monkeypatch):
    """A rollout's observations enter the shared statistics after its gradient, not before: the
    loss must see the inputs acting saw (one worker: nobody else moves them meanwhile)."""
    seen = []

    class Watching(A3C):
        def act(self, model, obs, global_step, rng, first, context=None, mask=None):
            seen.append(("act", model.obs_norm.stats.clone()))
            return super().act(model, obs, global_step, rng, first, context, mask)

        def loss(self, model, rollout, target_model=None):
            seen.append(("loss", model.obs_norm.stats.clone()))
            return super().loss(model, rollout, target_model)

    monkeypatch.setitem(algos.REGISTRY, "a3c", Watching)
    cfg = Config(steps=12, t_max=4, envs_per_worker=2, hidden=(4,), normalize_obs=True)
    info = probe_env(cfg.env)
    state = GlobalState.create(cfg, spec_of(Watching(cfg, info)), 1, False)
    assert state.obs_stats is not None
    run_worker(0, 0, cfg, info, spec_for(cfg, info), SharedMemory.create(state, 1), None, Outbox())
    losses = [i for i, (what, _) in enumerate(seen) if what == "loss"]
    assert len(losses) >= 2
    for i in losses:
        torch.testing.assert_close(seen[i][1], seen[i - 1][1])  # as the rollout's last act
    assert float(seen[losses[1]][1][0]) == 8  # the first rollout's 4 x 2 observations, after
    merged = state.merged_obs_stats()  # the start, and the worker's own row
    assert merged is not None and float(merged[0]) >= 12 and float(state.obs_stats[0]) == 0


def test_a_non_finite_action_is_the_policys_fault_not_the_envs(monkeypatch):
    class NaNPolicy(A3C):
        def act(self, model, obs, global_step, rng, first, context=None, mask=None):
            a, logp = super().act(model, obs, global_step, rng, first, context, mask)
            a[-1] = np.nan
            return a, logp

    monkeypatch.setitem(algos.REGISTRY, "a3c", NaNPolicy)
    cfg = Config(env="Pendulum-v1", steps=50, t_max=4, envs_per_worker=2, hidden=(4,))
    info = probe_env(cfg.env)
    params = flatten_parameters(build_model(spec_of(NaNPolicy(cfg, info))))
    outbox = Outbox()
    run_worker(0, 0, cfg, info, spec_for(cfg, info), make_shared(params), None, outbox)
    failed = outbox[0]
    assert isinstance(failed, Failed) and failed.diverged  # restarting will not help
    assert "PolicyFault" in failed.text and "non-finite action" in failed.text
    assert "env 1" in failed.text and "Pendulum" not in failed.text


def test_the_store_applies_the_rate_of_the_main_process_clock():
    # --lr-anneal-over time: a worker's update reads the elapsed time the main process last
    # wrote (LocalRun.clock); at the time limit the rate is 0 and the update moves nothing
    from asyncrl.backends.local import SharedMemoryStore

    cfg = Config(env="CartPole-v1", lr=0.1, time_limit="10s", lr_anneal_over="time")
    params = torch.ones(3)
    shared = make_shared(params, optimizer=SharedRMSprop(params, cfg.lr))
    store = SharedMemoryStore(cfg, shared, Outbox(), 0, 0)
    shared.clock[0] = 10.0
    store.push(torch.ones(3), 5, 0)
    assert torch.equal(params, torch.ones(3))
    shared.clock[0] = 5.0
    store.push(torch.ones(3), 5, 0)
    assert (params < 1).all()
