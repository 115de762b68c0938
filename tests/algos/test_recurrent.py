"""The recurrent agent's bookkeeping, for every recurrent core (the LSTM and the GRU): where the
state restarts, what the unroll recomputes, where gradients stop, and what a checkpoint carries;
for A3C and the Q-learners."""

import copy

import numpy as np
import pytest
import torch

from asyncrl.algos.a3c import A3C
from asyncrl.algos.nstep_q import NStepQ
from asyncrl.config import Config
from asyncrl.envs import ActionSpace, EnvInfo
from asyncrl.models import Core, RecurrentCore, build_model, flatten_parameters
from asyncrl.rollout import Rollout
from tests.oracles import spec_for, spec_of

INFO = EnvInfo("Test-v0", obs_shape=(3,), obs_dtype="float32", action=ActionSpace("discrete", 2))


ALGOS = [A3C, NStepQ]
CORES = ["lstm", "gru"]


@pytest.fixture(params=CORES)
def core(request):
    return request.param


def make(seed=0, cls=A3C, core="lstm"):
    torch.manual_seed(seed)
    cfg = Config(algo=cls.name, core=core, lstm_size=8, hidden=(6,), t_max=4, gamma=0.9)
    algo = cls(cfg, INFO)
    algo.start_worker(0, np.random.default_rng(0))
    model = build_model(spec_of(algo))
    flatten_parameters(model)
    return algo, model


def unrolled(model, obs, state, first):
    """The per-step outputs of an unroll: distribution parameters (A3C) or Q values."""
    out = model.unroll(obs, state, first)
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("cls", ALGOS)
def test_the_batched_unroll_equals_stepping_and_zeroes_exactly_at_firsts(cls, core):
    _, model = make(cls=cls, core=core)
    T1, B = 6, 3
    obs = torch.randn(T1, B, 3)
    first = torch.zeros(T1, B, dtype=torch.bool)
    first[0, :] = True
    first[3, 1] = True  # env 1: a new episode starts at row 3 (after a reset step at row 2)
    first[5, 2] = True  # env 2: at the last row
    start = torch.randn_like(model.initial_state(B))
    with torch.no_grad():
        params = unrolled(model, obs, start, first)
        state, stepped = start, []
        for t in range(T1):
            p, state = model.act(obs[t], state, first[t])
            stepped.append(p)
    torch.testing.assert_close(params, torch.stack(stepped))
    if cls is A3C:
        assert model.unroll(obs, start, first)[1].shape == (T1, B)  # the values
    # zeroing is exact: env 1 from row 3 on equals a fresh unroll of rows 3.. from any state
    with torch.no_grad():
        fresh = unrolled(
            model, obs[3:, 1:2], torch.randn_like(model.initial_state(1)), first[3:, 1:2]
        )
    torch.testing.assert_close(params[3:, 1:2], fresh)
    # env 0 never restarts after row 0: its rows 1.. depend on the whole history
    with torch.no_grad():
        other = unrolled(model, obs[1:, 0:1], model.initial_state(1), first[1:, 0:1])
    assert not torch.allclose(params[1:, 0:1], other)


RESTARTS = {
    # name: (rows, envs, the rows and envs that start an episode, the stretches expected)
    "some": (7, 3, [(0, 0), (2, 1), (2, 2), (6, 0)], 3),
    "one env": (7, 1, [(3, 0)], 2),
    "every row": (4, 2, [(t, 0) for t in range(4)], 4),
    "one row": (1, 2, [(0, 1)], 1),
}


@pytest.mark.parametrize("case", list(RESTARTS))
def test_the_fused_unroll_equals_the_cell_stepped_in_outputs_state_and_gradients(
    case, core, monkeypatch
):
    """The recurrent cores unroll stretch by stretch in torch's RNN kernel; the reference is
    the cell stepped one row at a time (:meth:`Core.unroll`): outputs, the final state and
    gradients to the inputs, the start state and the cell's weights. One env included (its h
    and c are views of one buffer), a restart on every row, and a one-row unroll."""
    _, model = make(core=core)
    T1, B, restarts, stretches = RESTARTS[case]
    first = torch.zeros(T1, B, dtype=torch.bool)
    for t, i in restarts:
        first[t, i] = True
    d = model.core.cell.input_size
    calls = []
    kernel = type(model.core).sequence
    assert kernel is not RecurrentCore.sequence  # torch's kernel, not the cell stepped
    monkeypatch.setattr(
        type(model.core), "sequence", lambda self, x, s: calls.append(len(x)) or kernel(self, x, s)
    )

    def run(unroll):
        model.zero_grad()
        x = torch.randn(T1, B, d, generator=torch.Generator().manual_seed(3), requires_grad=True)
        shape = model.initial_state(B).shape
        start = torch.randn(shape, generator=torch.Generator().manual_seed(4), requires_grad=True)
        out, end = unroll(model.core, x, start, first)
        (out.pow(2).sum() + end.sum()).backward()
        weights = [p.grad.clone() for p in model.core.cell.parameters()]
        return out.detach(), end.detach(), x.grad, start.grad, weights

    fused = run(type(model.core).unroll)
    assert len(calls) == stretches and sum(calls) == T1  # the kernel ran, stretch by stretch
    stepped = run(Core.unroll)
    assert len(calls) == stretches  # the reference never called it
    for a, b in zip(fused[:4], stepped[:4], strict=True):
        torch.testing.assert_close(a, b)
    for a, b in zip(fused[4], stepped[4], strict=True):
        torch.testing.assert_close(a, b)
    # an env that restarts at row 0 cuts its start state off: no gradient reaches it
    cut = first[0]
    assert fused[3][cut].abs().sum() == 0 and fused[3][~cut].abs().sum() > 0


def rollout_with_ends():
    """One env, 4 steps: the episode ends (terminated) at step 1, step 2 is the autoreset step
    (masked; row 2 holds the old episode's final observation), row 3 is the new episode's
    first; a second end at the last step."""
    ro = Rollout.empty(4, 1, (3,))
    ro.obs[:] = np.random.default_rng(1).normal(size=ro.obs.shape)
    ro.rewards[:, 0] = [1.0, 1.0, 0.0, 1.0]
    ro.ends[:, 0] = [False, True, False, True]
    ro.terminated[:, 0] = [False, True, False, False]
    ro.valid[:, 0] = [True, True, False, True]
    ro.first[:, 0] = [False, False, False, True, False]
    return ro


def test_the_worker_marks_the_row_after_the_reset_step_as_first():
    import typing

    import tests.envs_for_tests  # noqa: F401
    from asyncrl import algos
    from asyncrl.backends.local import SharedMemory, run_worker
    from asyncrl.envs import probe_env
    from asyncrl.state import GlobalState

    class Recording(A3C):
        seen: typing.ClassVar[list] = []

        def loss(self, model, rollout, target_model=None):
            Recording.seen.append((rollout.ends.copy(), rollout.valid.copy(), rollout.first.copy()))
            return super().loss(model, rollout, target_model)

    cfg = Config(
        env="asyncrl-test/Counter-v0",
        steps=12,
        t_max=4,
        envs_per_worker=1,
        hidden=(4,),
        core="lstm",
        lstm_size=4,
    )
    info = probe_env(cfg.env)

    class Outbox(list):
        send = list.append

    mp = pytest.MonkeyPatch()
    mp.setitem(algos.REGISTRY, "a3c", Recording)
    try:
        state = GlobalState.create(cfg, spec_of(Recording(cfg, info)), 1, False)
        run_worker(
            0, 0, cfg, info, spec_for(cfg, info), SharedMemory.create(state, 1), None, Outbox()
        )
    finally:
        mp.undo()
    ends = np.concatenate([e[:, 0] for e, _, _ in Recording.seen])
    valid = np.concatenate([v[:, 0] for _, v, _ in Recording.seen])
    firsts = [f[:-1, 0] for _, _, f in Recording.seen]
    first = np.concatenate(firsts)
    # episodes of 3 steps (truncated): end at 2, reset step at 3, first row at 4, ...
    assert first[0]  # the very first observation
    for t in np.flatnonzero(~valid):
        assert ends[t - 1] and not first[t]  # the reset step's row continues the old episode
        if t + 1 < len(first):
            assert first[t + 1]  # the row after it starts the new one
    assert first.sum() == (~valid[:-1]).sum() + 1
    # each rollout's last row (obs[T]) carries the flag the next rollout starts with
    for (_, _, a), (_, _, b) in zip(Recording.seen, Recording.seen[1:], strict=False):
        assert a[-1, 0] == b[0, 0]


def target_copy(model):
    target = copy.deepcopy(model)
    with torch.no_grad():
        for p in target.parameters():
            p.add_(0.1 * torch.randn_like(p))  # theta^- lags theta
    return target


@pytest.mark.parametrize("cls", ALGOS)
def test_no_gradient_crosses_into_the_previous_rollout(cls, core):
    algo, model = make(cls=cls, core=core)
    ro = rollout_with_ends()
    with torch.no_grad():
        for t in range(4):  # acting through a rollout carries the state
            algo.act(model, torch.from_numpy(ro.obs[t]), 0, np.random.default_rng(0), ro.first[t])
    algo.begin_rollout(model, 0)
    start = algo.start_state
    assert start is not None and start.grad_fn is None and not start.requires_grad
    loss, _ = algo.loss(model, ro, target_copy(model))
    loss.backward()  # reaches the parameters through the unroll, and stops at the stored state
    grad = model.core.cell.weight_hh.grad
    assert grad is not None and grad.abs().sum() > 0


def test_the_recurrent_q_loss_steps_both_networks_from_the_stored_state(core):
    """By hand, step by step: Q(s_t, a_t) from the online net and max Q(s_{t+1}; theta^-) from
    the target net, both carried from the state stored at the rollout's start and zeroed at the
    new episode's first row; then the paper's n-step targets and the mean square."""
    algo, model = make(cls=NStepQ, core=core)
    target = target_copy(model)
    ro = rollout_with_ends()
    # the episode is truncated at step 1 (it bootstraps from row 2, the old episode's final
    # observation, reached with the state carried from the rollout's start); step 2 is the
    # masked reset step, row 3 the new episode's first; step 3 bootstraps from row 4
    ro.ends[:, 0] = [False, True, False, False]
    ro.terminated[:] = False
    ro.actions[:, 0] = [1, 0, 1, 1]
    algo.state = torch.randn_like(model.initial_state(1))  # a state carried from earlier rollouts
    algo.begin_rollout(model, 0)
    loss, _ = algo.loss(model, ro, target)
    with torch.no_grad():
        q, tq = [], []
        s_online = s_target = algo.start_state
        for t in range(5):
            x, f = torch.from_numpy(ro.obs[t]), torch.from_numpy(ro.first[t])
            out, s_online = model.act(x, s_online, f)
            tout, s_target = target.act(x, s_target, f)
            q.append(out[0])
            tq.append(float(tout[0].max()))
    g = 0.9
    y = {0: 1.0 + g * 1.0 + g * g * tq[2], 1: 1.0 + g * tq[2], 3: 1.0 + g * tq[4]}
    # divided by the rollout's full size, t_max x envs = 4
    expected = sum((y[t] - float(q[t][ro.actions[t, 0]])) ** 2 for t in y) / 4
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("cls", ALGOS)
def test_checkpointed_state_round_trips_and_resumes_the_same_actions(cls, core):
    algo, model = make(cls=cls, core=core)
    late, B = 10**9, 16  # late: the Q-learners' epsilon is at the worker's final value
    if cls is NStepQ:
        algo.eps_final = 0.0  # greedy: the actions follow the state alone
    obs = torch.randn(2, B, 3)
    with torch.no_grad():
        algo.act(model, obs[0], late, np.random.default_rng(0), np.ones(B, bool))
        saved = algo.worker_state()
        a1 = algo.act(model, obs[1], late, np.random.default_rng(5), np.zeros(B, bool))
    other, _ = make(cls=cls, core=core)
    if cls is NStepQ:
        other.eps_final = 1.0  # the checkpoint's value replaces it
    other.load_worker_state(saved)
    with torch.no_grad():
        a2 = other.act(model, obs[1], late, np.random.default_rng(5), np.zeros(B, bool))
    np.testing.assert_array_equal(a1, a2)
    torch.testing.assert_close(other.state, algo.state)
    if cls is NStepQ:
        fresh, _ = make(cls=cls, core=core)  # the same step from a zero state acts otherwise
        fresh.eps_final = 0.0
        with torch.no_grad():
            a0 = fresh.act(model, obs[1], late, np.random.default_rng(5), np.zeros(B, bool))
        assert not np.array_equal(a0, a1)


def test_the_core_is_refused_for_sarsa_and_taken_by_the_q_learners():
    from asyncrl.errors import UserError

    for core in CORES:
        with pytest.raises(UserError, match="--core"):
            Config(algo="onestep-sarsa", core=core).validate()
        for algo in ("nstep-q", "onestep-q"):
            Config(algo=algo, core=core).validate()


def test_a_saved_recurrent_q_policy_keeps_its_state_and_acts_greedily(core):
    from asyncrl.errors import UserError
    from asyncrl.policy import Policy

    algo, model = make(cls=NStepQ, core=core)
    policy = Policy(model, "nstep-q", spec_of(algo), "Test-v0")
    obs = np.random.default_rng(0).normal(size=(3, 3)).astype(np.float32)
    actions = [policy.act(o) for o in obs]
    with torch.no_grad():
        state, expected = model.initial_state(1), []
        for o in obs:
            q, state = model.act(torch.from_numpy(o)[None], state, torch.tensor([False]))
            expected.append(int(q.argmax()))
    assert actions == expected
    torch.testing.assert_close(policy.state, state)
    policy.reset()
    assert policy.state is None
    with pytest.raises(UserError, match="greedily"):
        policy.act(obs[0], deterministic=False)
    assert policy.state is None  # refused before the state moved on


def test_a_policy_restarts_the_state_of_the_envs_of_a_batch_whose_episode_starts(core):
    # Policy.act(first=...): an API user stepping a vector env restarts the envs that reset,
    # and only those, as the workers do
    from asyncrl.errors import UserError
    from asyncrl.policy import Policy

    algo, model = make(core=core)
    obs = np.random.default_rng(0).normal(size=(3, 2, 3)).astype(np.float32)
    batch = Policy(model, "a3c", spec_of(algo), "Test-v0")
    alone = [Policy(model, "a3c", spec_of(algo), "Test-v0") for _ in range(2)]
    for t in range(3):
        restart = np.array([t == 2, False])  # env 0 starts a new episode at step 2
        batch.act(obs[t], first=restart)
        for i in range(2):
            if restart[i]:
                alone[i].reset()
            alone[i].act(obs[t, i])
    assert batch.state is not None
    for i in range(2):
        torch.testing.assert_close(batch.state[i : i + 1], alone[i].state)
    assert not torch.equal(batch.state[0], batch.state[1])
    with pytest.raises(UserError, match="one flag per observation"):
        batch.act(obs[0], first=np.array([True]))
