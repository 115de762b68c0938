"""Shared optimizers against reference updates written here, and gradient accumulation."""

import dataclasses
import itertools
import math

import pytest
import torch
import torch.multiprocessing as mp

from asyncrl.config import Config
from asyncrl.models import ActorCritic, flat_grad, flatten_parameters
from asyncrl.optim import (
    SharedAdam,
    SharedRMSprop,
    clip_grad_norm_,
    linear_lr,
    make_optimizer,
    rms_start,
    scheduled_lr,
)
from tests.oracles import GradientAccumulator, forward, mlp_spec


def test_shared_rmsprop_matches_the_paper_rule_with_eps_inside_the_sqrt():
    theta = torch.tensor([1.0, -2.0, 3.0])
    opt = SharedRMSprop(theta, lr=0.1, alpha=0.9, eps=0.1)
    g_stat = [0.0, 0.0, 0.0]
    ref = [1.0, -2.0, 3.0]
    for grad in ([1.0, 2.0, -1.0], [0.5, -1.0, 2.0]):
        opt.step(torch.tensor(grad))
        for i, gi in enumerate(grad):
            g_stat[i] = 0.9 * g_stat[i] + 0.1 * gi * gi
            ref[i] -= 0.1 * gi / math.sqrt(g_stat[i] + 0.1)
    torch.testing.assert_close(theta, torch.tensor(ref))
    # torch.optim.RMSprop puts eps outside the root and so gives a different step
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0]))
    t = torch.optim.RMSprop([p], lr=0.1, alpha=0.9, eps=0.1)
    for grad in ([1.0, 2.0, -1.0], [0.5, -1.0, 2.0]):
        p.grad = torch.tensor(grad)
        t.step()
    assert not torch.allclose(p.detach(), theta)


def test_rmsprop_started_from_one_warms_up_where_from_zero_it_leaps():
    """TensorFlow's RMSProp (Baselines' and SB3's A2C with eps 1e-5) starts its average of
    squared gradients at 1: worked by hand for one parameter, gradient 0.01, lr 1e-3, alpha
    0.99, eps 1e-5."""
    grad = torch.tensor([0.01], dtype=torch.float64)
    # from 0: g = 0.01 * 1e-4 = 1e-6, step = 1e-3 * 0.01 / sqrt(1e-6 + 1e-5) = 3.015e-3, three
    # times lr for a gradient of 0.01 (lr / sqrt(1 - alpha) = 1e-2 as the gradient grows)
    zero = torch.zeros(1, dtype=torch.float64)
    SharedRMSprop(zero, lr=1e-3, alpha=0.99, eps=1e-5).step(grad)
    assert float(zero) == pytest.approx(-1e-3 * 0.01 / math.sqrt(1.1e-5))
    assert abs(float(zero)) > 3e-3
    # from 1: g = 0.99 + 1e-6, step = 1e-3 * 0.01 / sqrt(0.990011) = 1.005e-5
    one = torch.zeros(1, dtype=torch.float64)
    opt = SharedRMSprop(one, lr=1e-3, alpha=0.99, eps=1e-5, init=1.0)
    opt.step(grad)
    assert float(one) == pytest.approx(-1e-3 * 0.01 / math.sqrt(0.990011))
    # the start is forgotten as 0.99^t: the steps grow towards those from 0
    steps = []
    for _ in range(2000):
        before = float(one)
        opt.step(grad)
        steps.append(before - float(one))
    assert steps == sorted(steps) and steps[-1] > 50 * steps[0]
    assert steps[-1] == pytest.approx(1e-3 * 0.01 / math.sqrt(1e-4 + 1e-5), rel=0.05)


@pytest.mark.parametrize("backend", ["threads", "processes", "ray"])
def test_rmsprop_starts_from_one_on_ray_and_from_zero_elsewhere_unless_told(backend):
    # Ray's stale gradients repeat the leaps from 0 unchecked (asyncrl.optim.rms_init_for)
    from asyncrl.config import Config

    params = torch.zeros(4)
    opt = make_optimizer(Config(backend=backend), params)
    assert isinstance(opt, SharedRMSprop)
    assert opt.square_avg.tolist() == [1.0 if backend == "ray" else 0.0] * 4
    assert rms_start(Config(backend=backend)) == opt.square_avg[0]  # what the summary reports
    told = make_optimizer(Config(backend=backend, rms_init=0.5), params)
    assert isinstance(told, SharedRMSprop) and told.square_avg.tolist() == [0.5] * 4


def test_shared_adam_matches_torch_adam():
    theta = torch.tensor([1.0, -2.0, 3.0])
    opt = SharedAdam(theta, lr=0.01, eps=1e-8)
    p = torch.nn.Parameter(theta.clone())
    ref = torch.optim.Adam([p], lr=0.01, eps=1e-8)
    for k in range(5):
        g = torch.tensor([1.0, -0.5, 0.25]) * (k + 1)
        opt.step(g)
        p.grad = g.clone()
        ref.step()
    torch.testing.assert_close(theta, p.detach())
    assert int(opt.step_count) == 5


def test_shared_adam_takes_any_layout_and_dtype_of_the_gradient_and_refuses_a_wrong_size():
    # the fused kernel reads a gradient's memory as contiguous float32: a strided or float64
    # gradient must step as its contiguous float32 copy does, a short one must not be read past
    g = torch.arange(1.0, 21.0)
    steps = []
    for grad in (g[::2], g[::2].contiguous(), g[::2].double()):
        opt = SharedAdam(torch.zeros(10), lr=0.01)
        opt.step(grad)
        opt.step(grad * 2)
        steps.append(opt.params.clone())
    assert torch.equal(steps[0], steps[1]) and torch.equal(steps[2], steps[1])
    opt = SharedAdam(torch.zeros(10), lr=0.01)
    with pytest.raises(ValueError, match="shape"):
        opt.step(torch.ones(9))
    assert int(opt.step_count) == 0 and torch.equal(opt.params, torch.zeros(10))


def test_state_lives_in_shared_memory_before_workers_start():
    theta = torch.zeros(4).share_memory_()
    assert SharedRMSprop(theta, 0.1).square_avg.is_shared()
    adam = SharedAdam(theta, 0.1)
    assert adam.exp_avg.is_shared() and adam.exp_avg_sq.is_shared()
    assert adam.step_count.is_shared()


def _adam_steps(opt: SharedAdam, n: int) -> None:
    for _ in range(n):
        opt.step(torch.ones(4))


def test_adam_step_counter_is_shared_across_processes():
    theta = torch.zeros(4).share_memory_()
    opt = SharedAdam(theta, 0.01)
    ctx = mp.get_context("fork")
    for _ in range(2):  # one after the other: the second sees the first one's steps
        p = ctx.Process(target=_adam_steps, args=(opt, 10))
        p.start()
        p.join()
        assert p.exitcode == 0
    assert int(opt.step_count) == 20
    assert torch.all(theta < 0)


def test_linear_lr_anneals_to_zero():
    assert linear_lr(1.0, 0, 100) == 1.0
    assert linear_lr(1.0, 25, 100) == pytest.approx(0.75)
    assert linear_lr(1.0, 100, 100) == 0.0
    assert linear_lr(1.0, 150, 100) == 0.0
    # held for the first 60 steps, then 1 -> 0 over the last 40: a quarter of the way at 70
    assert linear_lr(1.0, 60, 100, hold=0.6) == 1.0
    assert linear_lr(1.0, 70, 100, hold=0.6) == pytest.approx(0.75)
    assert linear_lr(1.0, 100, 100, hold=0.6) == 0.0


def test_scheduled_lr_follows_the_configured_schedule():
    linear = Config(env="CartPole-v1", lr=2.0, steps=400, lr_schedule="linear")
    assert scheduled_lr(linear, 100) == pytest.approx(1.5)
    assert scheduled_lr(linear, 400) == 0.0
    held = Config(env="CartPole-v1", lr=2.0, steps=400, lr_anneal_from=0.5)
    assert scheduled_lr(held, 200) == 2.0
    assert scheduled_lr(held, 300) == pytest.approx(1.0)
    constant = Config(env="CartPole-v1", lr=2.0, steps=400, lr_schedule="constant")
    assert scheduled_lr(constant, 300) == 2.0


def test_a_schedule_over_time_gives_the_lower_of_the_two_rates():
    # held for half of each budget (200 steps, 50 s), then falling to 0 at its end
    cfg = Config(
        env="CartPole-v1", lr=2.0, steps=400, lr_anneal_from=0.5,
        lr_anneal_over="time", time_limit="100s",
    )  # fmt: skip
    assert scheduled_lr(cfg, 100, 40.0) == 2.0  # both held
    assert scheduled_lr(cfg, 100, 75.0) == pytest.approx(1.0)  # time: halfway down
    assert scheduled_lr(cfg, 350, 10.0) == pytest.approx(0.5)  # steps: three quarters down
    assert scheduled_lr(cfg, 300, 75.0) == pytest.approx(1.0)  # both halfway: the same
    assert scheduled_lr(cfg, 100, 100.0) == 0.0  # the time limit: 0, steps to spare
    # over steps (the default) the clock is not read
    steps = Config(env="CartPole-v1", lr=2.0, steps=400, lr_anneal_from=0.5, time_limit="100s")
    assert scheduled_lr(steps, 100, 100.0) == 2.0


def test_a_threads_run_anneals_its_updates_over_its_time_limit(monkeypatch, tmp_path):
    """The updates read the main process's clock (Supervisor -> Run.clock -> the store): the
    rate each update applied is the schedule at the elapsed time it was given, and the last
    ones, near the time limit, are near 0 although the step budget is barely touched."""
    import asyncrl
    from asyncrl.state import GlobalState

    seen: list[tuple[float, float]] = []
    apply = GlobalState.apply_update

    def recording(self, cfg, grad, global_step, elapsed=0.0):
        lr = apply(self, cfg, grad, global_step, elapsed)
        seen.append((elapsed, lr))
        return lr

    monkeypatch.setattr(GlobalState, "apply_update", recording)
    # (6 s: under CI's load, with the Ray tests beside it, the worker's last update of a 4 s
    # run once came at 2.9 s)
    limit, lr = 6.0, 1e-3
    asyncrl.train(
        env="CartPole-v1", backend="threads", workers=1, steps=10**9, lr=lr,
        time_limit=f"{limit}s", lr_anneal_over="time", progress=False, tensorboard=False,
        run_dir=str(tmp_path / "run"),
        target_return=1e9,  # the time limit ends it: a run that solved early left it short
        # nothing after training, for which it would stop earlier (test_rescore.py)
        eval_every=0, stop_on="train", rescore_episodes=0,
    )  # fmt: skip
    clock = [e for e, _ in seen]
    assert clock == sorted(clock) and clock[0] < limit / 2 and clock[-1] > limit - 1.5
    assert all(r == pytest.approx(linear_lr(lr, e, limit)) for e, r in seen)
    assert seen[-1][1] < lr / 4


def test_clip_grad_norm():
    g = torch.tensor([3.0, 4.0])
    assert clip_grad_norm_(g, 1.0) == pytest.approx(5.0)
    assert float(g.norm()) == pytest.approx(1.0, rel=1e-5)
    g = torch.tensor([3.0, 4.0])
    clip_grad_norm_(g, 0.0)  # 0 disables
    assert float(g.norm()) == pytest.approx(5.0)


def _model():
    torch.manual_seed(0)
    return ActorCritic(mlp_spec("actor-critic", 3, 2, hidden=(8,)))


def test_sum_of_per_step_gradients_equals_the_batched_gradient():
    model = _model()
    flatten_parameters(model)
    x = torch.randn(6, 3)
    target = torch.randn(6)

    def step_loss(i):
        logits, v = forward(model, x[i : i + 1])
        return (v - target[i : i + 1]).pow(2).sum() - torch.log_softmax(logits, -1)[0, 0]

    acc = GradientAccumulator(model)
    for i in range(6):
        acc.accumulate(step_loss(i))
    assert acc.count == 6

    model.zero_grad(set_to_none=True)
    sum(step_loss(i) for i in range(6)).backward()
    torch.testing.assert_close(acc.buffer, flat_grad(model))


def test_accumulator_apply_updates_the_shared_vector_and_resets():
    model = _model()
    flatten_parameters(model)
    shared = flatten_parameters(_model()).detach().clone()
    before = shared.clone()
    opt = SharedRMSprop(shared, lr=0.01)
    acc = GradientAccumulator(model)
    acc.accumulate(forward(model, torch.randn(2, 3))[1].sum())
    norm = acc.apply(opt, max_norm=40.0)
    assert norm > 0
    assert not torch.equal(shared, before)
    assert acc.count == 0 and float(acc.buffer.abs().sum()) == 0.0


def test_a_resumed_schedule_goes_on_down_from_the_rate_it_had():
    """A linear schedule over 400 steps resumed at step 320 (rate 0.4 of 2) with a budget of
    800: from 0.4 down to 0 at 800, not back up to 1.2 (the new budget's rate at 320); the
    same budget again: the schedule as it was."""
    from asyncrl.config import MonitorSection
    from asyncrl.settings import Resumed

    old = Config(env="CartPole-v1", lr=2.0, steps=400)
    had = scheduled_lr(old, 320)
    assert had == pytest.approx(0.4)
    new = dataclasses.replace(
        Config(env="CartPole-v1", lr=2.0, steps=800).section(MonitorSection),
        lr_from=Resumed(320, 0.0, had),
    )
    assert scheduled_lr(new, 320) == pytest.approx(0.4)
    assert scheduled_lr(new, 560) == pytest.approx(0.2)
    assert scheduled_lr(new, 800) == 0.0
    rates = [scheduled_lr(new, s) for s in range(320, 801, 20)]
    assert all(a >= b for a, b in itertools.pairwise(rates))  # never rises
    same = dataclasses.replace(old.section(MonitorSection), lr_from=Resumed(320, 0.0, had))
    assert [scheduled_lr(same, s) for s in (320, 360)] == [scheduled_lr(old, s) for s in (320, 360)]


def test_a_resume_with_a_larger_budget_takes_up_the_rate_where_the_run_left_it(
    tmp_path, monkeypatch
):
    """The trainer's side: a run interrupted at global step 11,200 of 16,000 resumed with
    --steps 32000 takes up the schedule at the rate it had (0.3 of lr), not the new budget's
    (0.65); a rate given anew on resume starts afresh."""
    import asyncrl
    import tests.envs_for_tests  # noqa: F401
    from asyncrl import trainer
    from asyncrl.errors import Interrupted

    monkeypatch.setenv("FAULT_DIR", str(tmp_path))  # (where the fault marks that it fired)
    run = tmp_path / "run"
    cfg = dict(env="asyncrl-test/CartPole-sigint-main-v0", backend="threads", workers=1)
    cfg |= dict(steps=16_000, target_return=10_000.0, progress=False, tensorboard=False)
    with pytest.raises(Interrupted):
        asyncrl.train(**cfg, run_dir=str(run))
    resumed, ckpt, _ = trainer._config(None, run, None, {"steps": 32_000})
    start, at = ckpt["lr_from"], ckpt["glob"].steps
    assert 0 < at < 16_000
    assert start.step == at and start.lr == pytest.approx(3e-3 * (1 - at / 16_000))
    section = dataclasses.replace(resumed.section(trainer.MonitorSection), lr_from=start)
    assert scheduled_lr(section, at) == pytest.approx(start.lr)  # no jump up to 6,000's rate
    assert scheduled_lr(section, at) < scheduled_lr(resumed, at)
    assert trainer._config(None, run, None, {"steps": 32_000, "lr": 1e-3})[1]["lr_from"] is None
