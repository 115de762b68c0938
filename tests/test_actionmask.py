"""Action masks: the three conventions normalised by one wrapper, the probe's decision, the
worker's and the learners' use of the mask, the Q methods' masked argmax and max, and the env
faults a mask can be."""

import gymnasium as gym
import numpy as np
import pytest
import torch

import tests.envs_for_tests  # noqa: F401  (registers the envs)
from asyncrl import algos
from asyncrl.actionmask import ActionMasks, mask_source, read_masks
from asyncrl.algos.a3c import A3C
from asyncrl.algos.appo import APPO
from asyncrl.algos.nstep_q import NStepQ
from asyncrl.algos.onestep_q import OneStepQ
from asyncrl.algos.qlearning import masked_argmax, masked_max
from asyncrl.backends.local import SharedMemory, run_worker
from asyncrl.config import Config
from asyncrl.envs import ActionSpace, make_vec_env, probe_env
from asyncrl.errors import EnvFault, UserError
from asyncrl.messages import Failed, NonFinite
from asyncrl.rollout import Rollout
from asyncrl.state import GlobalState
from tests.oracles import spec_for

PICK = "asyncrl-test/Pick-{}-v0"
STRICT = "asyncrl-test/PickStrict-{}-v0"


# ---------------------------------------------------------------- the wrapper and the probe
class TwoLeaves(gym.Env):
    """A Dict observation of two Box leaves and an action_mask key (PettingZoo's form)."""

    def __init__(self):
        box = gym.spaces.Box(0, 1, (2,), np.float32)
        self.observation_space = gym.spaces.Dict(
            {"a": box, "b": box, "action_mask": gym.spaces.MultiBinary(3)}
        )
        self.action_space = gym.spaces.Discrete(3)

    def _obs(self):
        return {"a": np.zeros(2, np.float32), "b": np.ones(2, np.float32), "action_mask": [0, 1, 1]}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        return self._obs(), 0.0, False, False, {"other": 1}


@pytest.mark.parametrize("convention", ["info", "obs", "method"])
def test_every_convention_becomes_a_bool_info_mask_and_the_probe_finds_it(convention):
    env = gym.make(PICK.format(convention))
    _, info = env.reset(seed=0)
    assert mask_source(env, info) == convention
    wrapped = ActionMasks(env)
    obs, info = wrapped.reset(seed=3)
    for _ in range(5):
        assert info["action_mask"].dtype == bool and info["action_mask"].shape == (4,)
        # the Dict's one other leaf is the observation itself
        assert isinstance(obs, np.ndarray) and obs.shape == (1,)
        assert wrapped.observation_space == gym.spaces.Box(0, 1, (1,), np.float32)
        np.testing.assert_array_equal(info["action_mask"], env.unwrapped.mask.astype(bool))
        a = int(np.flatnonzero(info["action_mask"])[0])
        obs, _, _, _, info = wrapped.step(a)
    info_of_probe = probe_env(PICK.format(convention))
    assert info_of_probe.action.masked and info_of_probe.action.mask_dim == 4
    assert info_of_probe.obs_shape == (1,)


def test_a_dict_of_several_leaves_keeps_them_without_the_mask():
    wrapped = ActionMasks(TwoLeaves())
    obs, info = wrapped.reset(seed=0)
    assert set(obs) == {"a", "b"} and set(wrapped.observation_space.spaces) == {"a", "b"}
    np.testing.assert_array_equal(info["action_mask"], [False, True, True])
    obs, _, _, _, info = wrapped.step(1)
    assert set(obs) == {"a", "b"} and info["other"] == 1 and info["action_mask"].dtype == bool


def test_an_env_without_masks_gets_no_wrapper_and_no_mask_work():
    info = probe_env("CartPole-v1")
    assert not info.action.masked and info.action.mask_dim == 0
    env = make_vec_env("CartPole-v1", 2, masked=info.action.masked)
    assert not isinstance(env, gym.vector.SyncVectorEnv)  # still CartPole's native vector env
    env.close()
    ro = Rollout.for_env(5, 2, info)
    assert ro.masks.shape == (6, 2, 0) and ro.masks_at() is None


def test_taxi_gives_its_int8_info_mask():
    info = probe_env("tests.envs_for_tests:asyncrl-test/TaxiOneHot-v4")
    assert info.action == ActionSpace("discrete", n=6, masked=True)


class MaskedBits(gym.Env):
    def __init__(self, width=3):
        self.observation_space = gym.spaces.Box(0, 1, (1,), np.float32)
        self.action_space = gym.spaces.MultiBinary(3)
        self.width = width

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {"action_mask": np.ones(self.width, np.int8)}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, False, False, {}


class ShortMask(MaskedBits):
    def __init__(self):
        super().__init__(width=3)
        self.action_space = gym.spaces.Discrete(4)


gym.register("asyncrl-test/MaskedBits-v0", entry_point=MaskedBits, max_episode_steps=5)
gym.register("asyncrl-test/ShortMask-v0", entry_point=ShortMask, max_episode_steps=5)


@pytest.mark.parametrize(
    ("env_id", "needle"),
    [
        (
            "asyncrl-test/MaskedBits-v0",
            "for MultiBinary actions; asyncrl masks Discrete and MultiDiscrete",
        ),
        ("asyncrl-test/ShortMask-v0", "has shape (3,), but its action space has 4 actions"),
    ],
)
def test_a_mask_asyncrl_cannot_take_is_refused_at_the_probe_in_one_line(env_id, needle):
    with pytest.raises(UserError, match=r"^--env: .*") as e:
        probe_env(env_id)
    assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("env", ["Match-v0", "Bits-v0"])
@pytest.mark.parametrize("algo", ["nstep-q", "onestep-q", "onestep-sarsa"])
def test_the_q_methods_refuse_multi_discrete_and_multi_binary_actions(env, algo):
    info = probe_env(f"asyncrl-test/{env}")
    with pytest.raises(UserError, match="needs a Discrete one; use --algo a3c / appo") as e:
        Config(env=f"asyncrl-test/{env}", algo=algo).check_env(info)
    assert ("MultiDiscrete" if env == "Match-v0" else "MultiBinary") in str(e.value)


# ---------------------------------------------------------------- reading the masks
def test_a_mask_with_no_valid_action_is_an_env_fault_unless_the_episode_ended_there():
    masks = np.array([[1, 0, 0], [0, 0, 0]], np.int8)
    with pytest.raises(EnvFault, match=r"^E gave an action mask with no valid action \(env 1\)"):
        read_masks({"action_mask": masks}, 2, (3,), None, "E")
    with pytest.raises(EnvFault, match="no valid action"):
        read_masks({"action_mask": masks}, 2, (3,), np.array([True, False]), "E")
    # an episode's final observation: no action is taken there; the row becomes all valid
    out = read_masks({"action_mask": masks}, 2, (3,), np.array([False, True]), "E")
    np.testing.assert_array_equal(out, [[True, False, False], [True, True, True]])
    # MultiDiscrete: each part needs a valid action
    with pytest.raises(EnvFault, match=r"no valid action \(env 0\)"):
        read_masks({"action_mask": np.array([[1, 1, 0, 0]])}, 1, (2, 2), None, "E")
    with pytest.raises(EnvFault, match=r"gave no info\[\"action_mask\"\]"):
        read_masks({}, 2, (3,), None, "E")
    with pytest.raises(EnvFault, match=r"shape \(4,\), not \(3,\)"):
        read_masks({"action_mask": np.ones((2, 4))}, 2, (3,), None, "E")


# ---------------------------------------------------------------- the worker and the learners
class Outbox(list):
    send = list.append


def run(env_id, monkeypatch=None, cls=None, **kw):
    """One worker on threads' shared memory; what it sent back."""
    cfg = Config(env=env_id, t_max=5, envs_per_worker=3, hidden=(8,), **kw)
    if cls is not None:
        monkeypatch.setitem(algos.REGISTRY, cfg.algo, cls)
    info = probe_env(cfg.env)
    target = algos.REGISTRY[cfg.algo].uses_target_network
    state = GlobalState.create(cfg, spec_for(cfg, info), 1, target)
    outbox = Outbox()
    run_worker(0, 0, cfg, info, spec_for(cfg, info), SharedMemory.create(state, 1), None, outbox)
    return outbox


def failures(outbox):
    return [m.text for m in outbox if isinstance(m, Failed)]


@pytest.mark.parametrize(
    ("algo", "kw"),
    [
        ("a3c", {}),
        ("appo", {"vtrace": True}),
        ("a3c", {"core": "lstm", "prev_action_reward": True}),
        ("nstep-q", {"eps_start": 1.0}),
        ("onestep-q", {"eps_start": 1.0, "core": "gru"}),
        ("onestep-sarsa", {"eps_start": 1.0}),
    ],
)
@pytest.mark.parametrize("convention", ["info", "obs", "method"])
def test_no_masked_action_is_ever_taken(convention, algo, kw):
    """The strict env raises on a masked action: every step of these runs (exploring Q
    learners at epsilon 1 among them) took a valid one."""
    outbox = run(STRICT.format(convention), algo=algo, steps=600, **kw)
    assert not failures(outbox) and not any(isinstance(m, NonFinite) for m in outbox)


def test_a_multi_discrete_action_keeps_each_part_to_its_mask():
    outbox = run("asyncrl-test/PickMulti-v0", algo="appo", steps=600, core="gru")
    assert not failures(outbox)


def test_the_learner_scores_the_actions_under_the_masks_they_were_taken_with(monkeypatch):
    """On-policy, the learner's log-probabilities of the rollout's actions are the behaviour
    policy's, recorded as it acted: the loss masks with the masks acting used."""
    checked = []

    class Checking(A3C):
        def loss(self, model, rollout, target_model=None):
            T = rollout.t_max
            assert rollout.masks.shape == (T + 1, 3, 4) and rollout.masks.dtype == bool
            params, _ = self.unroll(model, rollout)
            dist = model.distribution(params[:T], rollout.masks_at(slice(T)))
            logp = dist.log_prob(rollout.actions_tensor()).detach().numpy()
            valid = rollout.valid
            np.testing.assert_allclose(logp[valid], rollout.logp[valid], rtol=1e-5, atol=1e-6)
            # and without the masks they would differ: the masks carried weight
            unmasked = model.distribution(params[:T]).log_prob(rollout.actions_tensor())
            checked.append(not np.allclose(unmasked.detach().numpy()[valid], rollout.logp[valid]))
            return super().loss(model, rollout, target_model)

    assert not failures(run(STRICT.format("obs"), monkeypatch, Checking, steps=300))
    assert checked and all(checked)


def test_an_all_false_mask_stops_the_worker_with_the_envs_fault(monkeypatch):
    outbox = run("asyncrl-test/PickEmpty-v0", steps=600)
    (text,) = failures(outbox)
    assert "EnvFault" in text and "gave an action mask with no valid action" in text
    assert "PickEmpty-v0 (worker 0)" in text


@pytest.mark.parametrize("algo", ["nstep-q", "onestep-q", "a3c", "appo"])
def test_an_all_false_mask_at_an_episodes_last_observation_is_no_fault(algo):
    """Terminated and truncated episodes that end on an all-false mask (a game over): no
    action is taken there, and a truncated one's bootstrap is finite."""
    outbox = run("asyncrl-test/PickEmptyAtEnd-v0", algo=algo, steps=600)
    assert not failures(outbox) and not any(isinstance(m, NonFinite) for m in outbox)


# ---------------------------------------------------------------- the Q methods
def test_the_q_methods_take_the_masked_argmax_and_max():
    q = torch.tensor([[3.0, 1.0, 2.0], [0.0, -5.0, -1.0]])
    mask = torch.tensor([[False, True, True], [False, True, False]])
    assert masked_argmax(q, mask).tolist() == [2, 1]
    assert masked_argmax(q, None).tolist() == [0, 0]
    np.testing.assert_array_equal(masked_max(q.numpy(), mask.numpy()), [2.0, -5.0])
    np.testing.assert_array_equal(masked_max(q.numpy(), np.ones((2, 0), bool)), [3.0, 0.0])
    # the targets bootstrap from max over s_{t+1}'s valid actions: the rollout's next row
    info = probe_env(PICK.format("info"))
    cfg = Config(env=PICK.format("info"), algo="onestep-q")
    ro = Rollout.for_env(2, 1, info)
    ro.masks[:] = [
        [[True, True, True, True]],
        [[False, True, False, False]],
        [[True] * 3 + [False]],
    ]
    target_q = np.array([[[4.0, 1.0, 0.0, 9.0]], [[1.0, 2.0, 3.0, 9.0]]])
    for cls in (OneStepQ, NStepQ):
        np.testing.assert_array_equal(
            cls(cfg.algo_settings(), info).bootstrap(target_q, ro), [[1.0], [3.0]]
        )


def test_epsilon_explores_among_the_valid_actions_only():
    info = probe_env(PICK.format("info"))
    cfg = Config(env=PICK.format("info"), algo="nstep-q", eps_start=1.0, hidden=(8,))
    algo = NStepQ(cfg.algo_settings(), info)
    rng = np.random.default_rng(0)
    algo.start_worker(0, rng)
    from asyncrl.models import build_model

    model = build_model(spec_for(cfg, info))
    n = 12_000
    mask = torch.tensor([[True, False, True, True], [False, False, True, False]]).repeat(n // 2, 1)
    with torch.no_grad():
        actions, logp = algo.act(model, torch.zeros(n, 1), 0, rng, np.ones(n, bool), None, mask)
    assert mask[torch.arange(n), torch.from_numpy(actions)].all()
    counts = np.bincount(actions[0::2], minlength=4) / (n // 2)
    np.testing.assert_allclose(counts, [1 / 3, 0, 1 / 3, 1 / 3], atol=0.02)  # uniform
    assert (actions[1::2] == 2).all()
    # at epsilon 1 every valid action has probability 1 / (the valid actions)
    np.testing.assert_allclose(logp[0::2], np.log(1 / 3), rtol=1e-6)
    np.testing.assert_allclose(logp[1::2], 0.0, atol=1e-7)


# ---------------------------------------------------------------- APPO's recorded masks
@pytest.mark.parametrize("vtrace", [False, True])
def test_appo_ratios_are_one_on_policy_with_the_recorded_masks(vtrace, monkeypatch):
    """APPO's first minibatch of a rollout, at the parameters that acted (one worker: nobody
    moves them): the ratios pi/mu are 1, the learner's log-probabilities under the recorded
    masks being the behaviour policy's (V-trace's minibatches too)."""
    kls: list[float] = []

    class Watching(APPO):
        def minibatch_loss(self, model, rollout, times, envs, prepared):
            first = not prepared
            loss, stats = super().minibatch_loss(model, rollout, times, envs, prepared)
            if first:
                kls.append(stats["appo/approx_kl"])
            return loss, stats

    outbox = run(
        STRICT.format("info"), monkeypatch, Watching, algo="appo", steps=300, vtrace=vtrace
    )
    assert not failures(outbox)
    assert kls and max(abs(k) for k in kls) < 1e-6


# ---------------------------------------------------------------- whole runs
@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_every_action_kind_trains_checkpoints_resumes_and_evaluates(backend, tmp_path):
    """Each new kind (a masked Discrete under each convention's wrapper, a masked
    MultiDiscrete, MultiBinary, a MultiDiscrete with a start) with recurrent cores that take
    the previous action: the worker's state (its envs and their masks) goes through a
    checkpoint and comes back; the strict envs raise on a masked action."""
    import asyncrl

    cases = [
        ("PickStrict-method-v0", {"algo": "onestep-q"}),
        ("PickStrict-obs-v0", {"algo": "nstep-q", "core": "lstm", "prev_action_reward": True}),
        ("PickMulti-v0", {"algo": "appo", "core": "gru", "prev_action_reward": True}),
        ("Bits-v0", {"algo": "a3c", "core": "lstm", "prev_action_reward": True}),
        ("Match-v0", {"algo": "appo", "vtrace": True}),
    ]
    for env, kw in cases:
        run_dir = tmp_path / env
        first = asyncrl.train(
            env=f"tests.envs_for_tests:asyncrl-test/{env}", backend=backend, workers=2,
            steps=1_500, target_return=1e9, run_dir=str(run_dir), progress=False, **kw,
        )  # fmt: skip
        assert first["total_steps"] >= 1_500
        resumed = asyncrl.train(resume=str(run_dir), steps=3_000, progress=False)
        assert resumed["resumed"] and resumed["total_steps"] >= 3_000, env
        assert len(asyncrl.evaluate(run_dir, episodes=3)) == 3
