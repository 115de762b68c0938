"""The worker loop's rollouts: next-step autoreset, truncation vs termination, counters."""

import itertools
import queue
import threading
import typing

import numpy as np
import pytest
import torch

import tests.envs_for_tests  # noqa: F401  (registers the envs)
from asyncrl import algos
from asyncrl.algos.a3c import A3C
from asyncrl.config import Config
from asyncrl.envs import probe_env
from asyncrl.models import build_model, flatten_parameters
from asyncrl.optim import SharedRMSprop
from asyncrl.worker import SharedState, run_worker


class Recording(A3C):
    """A3C that keeps a copy of every rollout it is asked to learn from."""

    seen: typing.ClassVar[list] = []

    def loss(self, model, rollout, target_model=None):
        Recording.seen.append({k: v.copy() for k, v in vars(rollout).items()})
        return super().loss(model, rollout, target_model)


def run(env_id, steps, t_max, monkeypatch):
    import multiprocessing

    monkeypatch.setitem(algos.REGISTRY, "a3c", Recording)
    Recording.seen = []
    cfg = Config(env=env_id, steps=steps, t_max=t_max, envs_per_worker=1, hidden=(4,))
    info = probe_env(env_id, "a3c")
    model = build_model(Recording(cfg, info).model_spec())
    params = flatten_parameters(model)
    shared = SharedState(
        params,
        SharedRMSprop(params, 1e-3),
        None,
        multiprocessing.Value("q", 0),
        multiprocessing.Value("q", 0),
        queue.Queue(),
        threading.Event(),
    )
    run_worker(0, cfg, info, shared)
    msgs = []
    while not shared.queue.empty():
        msgs.append(shared.queue.get())
    return shared, msgs


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
    assert msgs[0][:3] == ("episodes", 0, [(3.0, 3)])
    assert msgs[-1] == ("done", 0)
    assert int(shared.steps.value) == 6  # valid steps only
    assert int(shared.episodes.value) == 2


def test_terminated_episode_is_flagged(monkeypatch):
    run("asyncrl-test/CounterTerminal-v0", steps=2, t_max=3, monkeypatch=monkeypatch)
    ro = Recording.seen[0]
    np.testing.assert_array_equal(ro["terminated"][:, 0], [False, True, False])
    np.testing.assert_array_equal(ro["ends"][:, 0], [False, True, False])
    np.testing.assert_array_equal(ro["valid"][:, 0], [True, True, False])


def test_worker_error_is_reported_not_swallowed(monkeypatch):
    class Broken(A3C):
        def loss(self, *a, **k):
            raise FloatingPointError("boom")

    import multiprocessing

    monkeypatch.setitem(algos.REGISTRY, "a3c", Broken)
    cfg = Config(steps=100, t_max=2, envs_per_worker=1, hidden=(4,))
    info = probe_env(cfg.env, "a3c")
    params = flatten_parameters(build_model(Broken(cfg, info).model_spec()))
    q = queue.Queue()
    shared = SharedState(
        params,
        SharedRMSprop(params, 1e-3),
        None,
        multiprocessing.Value("q", 0),
        multiprocessing.Value("q", 0),
        q,
        threading.Event(),
    )
    before = params.clone()
    run_worker(3, cfg, info, shared)
    kind, worker, text, tb = q.get()
    assert (kind, worker) == ("error", 3) and "FloatingPointError: boom" in text
    assert "Traceback" in tb
    assert q.get() == ("done", 3)
    assert torch.equal(params, before)


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
            RecordingSarsa.seen.append({k: v.copy() for k, v in vars(rollout).items()})
            return super().loss(model, rollout, target_model)

    import multiprocessing

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
    info = probe_env(cfg.env, cfg.algo)
    params = flatten_parameters(build_model(RecordingSarsa(cfg, info).model_spec()))
    shared = SharedState(
        params,
        SharedRMSprop(params, 1e-3),
        params.clone(),
        multiprocessing.Value("q", 0),
        multiprocessing.Value("q", 0),
        queue.Queue(),
        threading.Event(),
    )
    run_worker(0, cfg, info, shared)
    seen = RecordingSarsa.seen
    assert len(seen) > 10
    for prev, nxt in itertools.pairwise(seen):
        np.testing.assert_array_equal(nxt["actions"][0], prev["next_actions"])
    # one-step methods update at an episode end: some rollouts were cut short
    assert any(len(r["rewards"]) < 5 for r in seen)
    assert all(len(r["obs"]) == len(r["rewards"]) + 1 for r in seen)
