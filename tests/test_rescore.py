"""After training: the kept model re-scored on starts no evaluation saw (summary.json's
kept_model_*), the plan that fits the evaluations, the confirmation and the re-scoring inside
--time-limit, what the limit cuts short, and the episodes played on several processes."""

import dataclasses
import json
import multiprocessing
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest

import asyncrl
import tests.envs_for_tests  # noqa: F401  (registers the envs)
from asyncrl import evaluation, rescore
from asyncrl.cli import main
from asyncrl.evaluation import HELD_OUT_BIT, eval_seeds, held_out_seeds
from asyncrl.messages import Episodes, Finished, GlobalSnapshot
from asyncrl.monitor import Monitor
from asyncrl.parallel import play_parallel
from asyncrl.policy import OutOfTime, play_episodes
from asyncrl.rescore import CONTENDER_RAISE, RESERVE_SHARE, STOP_SECONDS, STOP_SHARE, TimePlan
from asyncrl.rundir import RunDir
from asyncrl.supervisor import Ended, Supervisor
from asyncrl.trainer import _time_plan
from tests.oracles import spec_of

SEPARATE = "asyncrl-test/CartPoleSeparate-v0"
SLOW = "tests.envs_for_tests:asyncrl-test/Slow-v0"
COUNTER = "asyncrl-test/Counter-v0"
REPO = Path(__file__).resolve().parents[1]


def test_held_out_seeds_are_disjoint_from_every_evaluation_seed():
    """The rule, not the odds: every evaluation seed (screens and confirmations, any index)
    is under HELD_OUT_BIT and every re-scoring seed at or over it; both repeat with the seed."""
    for seed in range(3):
        held = held_out_seeds(seed, 1_000)
        assert len(set(held)) == 1_000 and all(HELD_OUT_BIT <= s < 2**32 for s in held)
        assert held == held_out_seeds(seed, 1_000) and held != held_out_seeds(seed + 1, 1_000)
        for index in range(200):
            assert all(0 <= s < HELD_OUT_BIT for s in eval_seeds(seed, index, 110))
    # a shorter re-scoring plays the first of the same starts
    assert held_out_seeds(0, 10) == held_out_seeds(0, 1_000)[:10]


class _Fresh:
    """A new network for an env (picklable for the processes)."""

    def __init__(self, env):
        self.env = env

    def build(self):
        import torch

        from asyncrl.algos import make_algorithm
        from asyncrl.envs import probe_env
        from asyncrl.models import build_model
        from asyncrl.policy import Policy
        from asyncrl.presets import preset

        cfg = preset(None, env=self.env).validate()
        torch.manual_seed(0)
        spec = spec_of(make_algorithm(cfg.algo, cfg, probe_env(self.env)))
        return Policy(build_model(spec), cfg.algo, spec, self.env, {})


def _alone(env, seeds, **kw):
    from asyncrl.envs import make_eval_vec_env

    policy = _Fresh(env).build()
    envs = make_eval_vec_env(env, len(seeds), seeds[0])
    try:
        return play_episodes(policy, envs, seeds, **kw)
    finally:
        envs.close()


def test_several_processes_play_the_same_episodes_as_one():
    """Each episode of separate envs is its seed's, on whichever process plays it: the returns
    are the same, in the seeds' order, and each is handed over as it ends."""
    seeds = held_out_seeds(0, 12)
    alone = _alone(SEPARATE, seeds)
    seen = {}
    returns = play_parallel(
        _Fresh(SEPARATE), seeds, 3, on_episode=lambda i, r: seen.__setitem__(i, r)
    )
    assert returns == alone and len(set(alone)) > 1
    assert seen == dict(enumerate(alone))
    assert multiprocessing.active_children() == []


def test_out_of_time_keeps_the_episodes_that_ended():
    """A deadline that passes once three episodes have ended (a function of the play, not of
    the clock): OutOfTime, with those episodes handed over first, on one process or several
    (whose processes have all ended when it is raised)."""
    seeds = held_out_seeds(1, 16)
    alone = _alone(SEPARATE, seeds)
    for play in (
        lambda **kw: _alone(SEPARATE, seeds, **kw),
        lambda **kw: play_parallel(_Fresh(SEPARATE), seeds, 2, **kw),
    ):
        ended: dict[int, float] = {}
        with pytest.raises(OutOfTime):
            play(
                deadline=lambda ended=ended: 0.0 if len(ended) >= 3 else None,
                on_episode=ended.__setitem__,
            )
        assert 3 <= len(ended) < len(seeds)
        assert all(alone[i] == r for i, r in ended.items())
        assert multiprocessing.active_children() == []


def _plan(**kw):
    base = dict(
        ends_at=time.perf_counter() + 1e6, seconds=600.0, rescore_episodes=100,
        eval_episodes=10, processes=2, separate=True, workers=1, cores=2,
    )  # fmt: skip
    return TimePlan(**{**base, **kw})


def _evaluation(
    seconds, episodes=10, confirmed=False, screen=0.0, cut=False, rescreened=False, kept=0.0
):
    """``kept``: the seconds of a re-screen's kept-model episodes (0: none played)."""
    returns = tuple(float(i) for i in range(episodes))
    return evaluation.Evaluation(
        0, 100, 1.0, returns, seconds, None, None, confirmed, screen or seconds, cut, 100,
        rescreened, returns if kept else (), kept,
    )  # fmt: skip


def test_the_plan_reserves_the_expected_seconds_of_the_work_after_training():
    plan = _plan()
    assert plan.reserve(final_evaluation=True) == STOP_SECONDS  # nothing measured yet
    # the training episodes' guess, until an evaluation measures it: 200 steps on average at
    # 100 a second (1 worker)
    plan.guess(200, 500, 100.0)
    assert plan.rescoring() == 2.0 * 50
    plan.observe(_evaluation(seconds=10.0))  # 1 s an episode, one thread
    plan.guess(200, 500, 10.0)  # (a measurement is not replaced by a guess)
    assert plan.per_episode == 1.0 and plan.measured
    # 100 episodes on 2 processes, 10 of a final evaluation and 10 of each model's re-screen on
    # 2, the stop; an evaluation during training is at most those 30 on one thread
    assert plan.rescoring() == 50.0 and plan.screen() == 30.0
    assert plan.reserve(final_evaluation=True) == STOP_SECONDS + 15.0 + 50.0
    assert plan.reserve(final_evaluation=False) == STOP_SECONDS + 50.0
    # and the rest of an evaluation under way (a confirmation begun late: 30 episodes to go)
    assert plan.reserve(final_evaluation=False, under_way=30) == STOP_SECONDS + 15.0 + 50.0
    # a confirmation's seconds per episode leave its screen's out; a cut-short one says nothing
    plan.observe(_evaluation(seconds=52.0, episodes=100, confirmed=True, screen=12.0))
    assert plan.per_episode == 0.4
    plan.observe(_evaluation(seconds=1.0, cut=True))
    assert plan.per_episode == 0.4
    # a re-screen's seconds are its screen's and its re-screen's: 10 episodes reported, 20
    # played; and the kept model's 10 where the process kept one, timed on their own, which
    # measure the kept model again
    plan.observe(_evaluation(seconds=10.0, rescreened=True))
    assert plan.per_episode == 0.5
    plan.observe(_evaluation(seconds=40.0, rescreened=True, kept=30.0))
    assert plan.per_episode == 0.5 and plan.kept_per_episode == 3.0
    # (and where the latest model is kept, its own episodes price the re-scoring)
    plan.observe(_evaluation(seconds=40.0, rescreened=True, kept=30.0), kept=True)
    assert plan.per_episode == plan.kept_per_episode == 0.5
    plan.observe(_evaluation(seconds=10.0))
    # a model that stalls (a greedy Atari policy playing each game to the frame cap) is not
    # the kept one: the re-scoring, and a re-screen's pair, are planned on the kept model's
    stalled = _plan()
    stalled.observe(_evaluation(seconds=10.0), kept=True)
    stalled.observe(_evaluation(seconds=600.0))
    assert stalled.per_episode == 60.0 and stalled.kept_per_episode == 1.0
    assert stalled.rescoring() == 50.0
    assert stalled.evaluation() == 10 * 60.0 / 2 + 20 * 1.0 / 2
    assert stalled.screen() == 10 * 60.0 + 20 * 1.0
    # a resumed run's plan starts from the checkpoint's seconds (the kept model's evaluation
    # may be long past), not from a guess; one from an older checkpoint guesses
    ckpt = {"monitor": {"elapsed": 60.0}, "plan": stalled.state_dict()}
    resumed = _time_plan(asyncrl.Config(time_limit="10m"), time.perf_counter(), ckpt, 1)
    assert resumed.seconds == 540.0 and resumed.measured
    assert (resumed.per_episode, resumed.kept_per_episode) == (60.0, 1.0)
    resumed.guess(200, 500, 100.0)
    assert resumed.per_episode == 60.0
    older = _time_plan(asyncrl.Config(time_limit="10m"), 0.0, {"monitor": {"elapsed": 0.0}}, 1)
    assert not older.measured and older.kept_per_episode is None
    stalled.observe(_evaluation(seconds=30.0), kept=True)
    assert stalled.rescoring() == 150.0
    # the evaluations end where the re-scoring's time begins; training stops before that
    assert plan.ends_at - plan.evaluations_end() == pytest.approx(plan.rescoring())
    # the reserve takes at most a share of the limit; then the re-scoring is what is squeezed
    short = _plan(seconds=60.0)
    # 0.5 s a game: 25 s of re-scoring, 7.5 s of a final evaluation and a pair
    short.observe(_evaluation(seconds=5.0))
    assert short.reserve(final_evaluation=True) == RESERVE_SHARE * 60.0
    assert short.stopping() == STOP_SHARE * 60.0  # (a short run's rollouts end quickly too)
    assert 0 < short.rescoring_slot() == RESERVE_SHARE * 60.0 - STOP_SHARE * 60.0 - 7.5 < 25
    # an evaluation beside 2 workers on 2 cores had two thirds of a core: a process after
    # training is faster by that (one after training is not corrected)
    shared = _plan(workers=2, cores=2)
    shared.observe(_evaluation(seconds=15.0))
    assert shared.per_episode == 1.0
    # (and a screen during training, beside them, slower by as much: 10 episodes and a pair
    # of 10 each, on two thirds of a core)
    assert shared.screen() == pytest.approx(30 * 1.0 * 1.5)
    shared.observe(_evaluation(seconds=15.0), training=False)
    assert shared.per_episode == 1.5
    # one that played after the stop on the 2 processes training freed: 5 episodes each in
    # its 15 s, 3 s an episode (on one process, it would understate them by half); the kept
    # model's price too, which a resumed run's re-scoring reads from the checkpoint
    after_stop = dataclasses.replace(_evaluation(seconds=15.0), saved_seconds=15.0)
    shared.observe(after_stop, training=False, kept=True)
    assert shared.per_episode == shared.kept_per_episode == 3.0
    # a natively vectorized env plays a wave of up to EVAL_WAVE episodes in one episode's time:
    # guessed as a worker's step of its 16 envs for each step of the longest episode
    wave = _plan(separate=False, envs=16)
    wave.guess(200, 500, 1_000.0)
    assert wave.rescoring() == pytest.approx(500 * 16 / 1_000.0)
    wave.observe(_evaluation(seconds=3.0))
    assert wave.rescoring() == 3.0


class FakeRun:
    workers, step = 1, 0

    def __init__(self):
        self.stopped = False

    def global_step(self):
        return self.step

    def checkpoint_state(self, _):
        return None

    def stop(self):
        self.stopped = True


class FakeEvaluator:
    busy, episodes, confirm, progress = False, 10, None, None

    def __init__(self):
        self.asked, self.within = [], []

    def submit(self, index, step, wall, snap, within=None):
        self.asked.append(step)
        self.within.append(within)
        return True

    def results(self):
        return []

    def keep(self, snap):
        self.kept = snap


def test_training_stops_the_reserve_before_the_limit_and_starts_no_evaluation_it_would_cut(
    tmp_path,
):
    """Training stops when the time left reaches the reserve (recorded in the outcome); a
    periodic evaluation due so close to the stop that it would still be playing then is not
    started (the final evaluation takes its place)."""
    cfg = asyncrl.Config(progress=False, tensorboard=False, steps=2_000, eval_every=100)
    left = [1_000.0]
    plan = _plan()
    plan.left = lambda: left[0]  # type: ignore[method-assign]
    plan.observe(_evaluation(seconds=10.0))  # a screen 10 s, and 20 more for a re-screen
    reserve = plan.reserve(final_evaluation=True)
    assert reserve == STOP_SECONDS + 15.0 + 50.0 and plan.screen() == 30.0
    run, ev = FakeRun(), FakeEvaluator()
    with Monitor(RunDir(tmp_path), cfg, target_return=None) as monitor:
        sup = Supervisor(cfg, run, monitor, lambda *a: None, evaluator=ev, plan=plan)  # type: ignore[arg-type]
        run.step = 100
        sup.maybe_evaluate()
        sup.maybe_end_on_time()
        assert ev.asked == [100] and not sup.stopping
        left[0] = reserve + 29.0  # a screen and its re-screen would outlast training's stop
        run.step = 200
        sup.maybe_evaluate()
        assert ev.asked == [100]
        sup.maybe_end_on_time()
        assert not sup.stopping
        left[0] = reserve
        sup.maybe_end_on_time()
        assert sup.stopping and run.stopped
        assert sup.outcome.ended is Ended.TIME_LIMIT and sup.outcome.reserved == reserve
        # a confirmation under way with 90 episodes to go (45 s on the 2 processes): training
        # stops that much earlier, so that it can finish
        run, ev = FakeRun(), FakeEvaluator()
        sup = Supervisor(cfg, run, monitor, lambda *a: None, evaluator=ev, plan=plan)  # type: ignore[arg-type]
        ev.busy, ev.progress = True, ("confirmation", 10, 100, 0.0)
        left[0] = reserve + 46.0
        sup.maybe_end_on_time()
        assert not sup.stopping
        left[0] = reserve + 45.0
        sup.maybe_end_on_time()
        assert sup.stopping and sup.outcome.reserved == reserve + 45.0
        # a screen under way with 4 episodes to go, and maybe a re-screen of both models after
        # it (24 episodes, 12 s on the 2 processes)
        run, ev = FakeRun(), FakeEvaluator()
        sup = Supervisor(cfg, run, monitor, lambda *a: None, evaluator=ev, plan=plan)  # type: ignore[arg-type]
        ev.busy, ev.progress = True, ("screen", 6, 10, 0.0)
        left[0] = reserve + 12.5
        sup.maybe_end_on_time()
        assert not sup.stopping
        left[0] = reserve + 12.0
        sup.maybe_end_on_time()
        assert sup.stopping and sup.outcome.reserved == reserve + 12.0


def test_a_squeezed_reserve_screens_the_latest_model_before_the_stop_and_frees_its_time(
    tmp_path, capsys
):
    """The kept model stalls (20 s a game: its 100 games' re-scoring, 1,000 s, is squeezed by
    the reserve's cap of 150 s). One screen of the latest parameters, each of its two stages
    within the seconds past which its games would not end the squeeze, as late as both end
    before the stop; its re-screen beats the kept model's score, its games take 1.5 s and
    price the re-scoring: training goes on past the stop the stalled model's price set. Once
    a process; never where the reserve is not squeezed (and the kept model's games are not
    priced over what the training games say the latest model's cost, as below)."""
    cfg = asyncrl.Config(progress=False, tensorboard=False, steps=2_000, eval_every=1_000)
    left = [800.0]
    plan = _plan()  # 600 s: a cap of 150 s
    plan.left = lambda: left[0]  # type: ignore[method-assign]
    run, ev = FakeRun(), FakeEvaluator()
    stalled = evaluation.Evaluation(0, 50, 1.0, (3.0,) * 10, 200.0, screen_seconds=200.0)
    with Monitor(RunDir(tmp_path), cfg, target_return=None) as monitor:
        sup = Supervisor(cfg, run, monitor, lambda *a: None, evaluator=ev, plan=plan)  # type: ignore[arg-type]
        sup.last_eval_step = 50
        sup.evaluated(stalled)
        assert plan.kept_per_episode == 20.0 and plan.squeezed()
        assert plan.reserve(final_evaluation=True) == 150.0 and plan.screen() == 600.0
        run.step = 100
        sup.maybe_evaluate()
        assert ev.asked == [] and not sup.repriced  # room 650 s: periodic screens still fit
        # each stage within 22.3 s (the 145 s of work after training on 65 games' worth, so
        # 2.23 s a game: 10 games beside the worker), so both within 44.6 s, and 5 to spare
        assert plan.quick_screen() == pytest.approx(10 * 145 / 65)
        left[0] = 200.0
        sup.maybe_evaluate()
        assert ev.asked == [] and not sup.repriced  # room 50 s: they would end in time later
        left[0] = 199.0
        sup.maybe_evaluate()
        assert ev.asked == [100] and sup.repriced and ev.within == [plan.quick_screen()]
        assert "screening the latest model before training stops" in capsys.readouterr().err
        run.step = 200
        sup.maybe_evaluate()
        assert ev.asked == [100]  # once
        # 30 s: 10 games and 10 more of its re-screen, which beat the kept model's score
        latest = evaluation.Evaluation(
            1, 100, 2.0, (9.0,) * 10, 30.0, screen_seconds=30.0, rescreened=True
        )
        left[0] = 164.0
        sup.evaluated(latest)
        assert plan.kept_per_episode == 1.5 and not plan.squeezed()
        # 5 s to stop, 75 s of re-scoring, 7.5 + 15 s of a final evaluation and its pair
        assert plan.reserve(final_evaluation=True) == 102.5
        left[0] = 150.0  # where the stalled model's price stopped training
        sup.maybe_end_on_time()
        assert not sup.stopping
        left[0] = 102.5
        sup.maybe_end_on_time()
        assert sup.stopping and sup.outcome.reserved == 102.5
    # no such screen where the reserve is not squeezed, or where the run evaluates only at its
    # end (--eval-every 0)
    quick, squeezed = _plan(), _plan()
    quick.observe(_evaluation(seconds=10.0), kept=True)
    squeezed.observe(_evaluation(seconds=200.0), kept=True)
    for plan, every, left in ((quick, 1_000, 90.0), (squeezed, 0, 190.0)):
        plan.left = lambda left=left: left  # type: ignore[method-assign]
        cfg = asyncrl.Config(progress=False, tensorboard=False, steps=2_000, eval_every=every)
        ev, run = FakeEvaluator(), FakeRun()
        (tmp_path / f"{every}").mkdir()
        with Monitor(RunDir(tmp_path / f"{every}"), cfg, target_return=None) as monitor:
            sup = Supervisor(cfg, run, monitor, lambda *a: None, evaluator=ev, plan=plan)  # type: ignore[arg-type]
            run.step = 100
            sup.maybe_evaluate()
            assert ev.asked == [] and not sup.repriced


def test_a_kept_model_whose_games_the_training_ones_outgrew_is_screened_before_the_stop(
    tmp_path, capsys
):
    """Not squeezed, but the kept model's long games price the re-scoring, and the training games
    have shortened to half their length when it was handed over (Pong's games are long while the
    points are close, short once it wins them all): one screen of the latest parameters before the
    stop, each stage within the kept model's own screen, and where it beats the kept model its quick
    games price the re-scoring and training goes on; while it plays, the reserve prices none of the
    kept model's games (it plays none) and no rest of it (its stages end in time). None where the
    games shortened too little for the saving to pay for the screen, or no length is known."""
    cfg = asyncrl.Config(progress=False, tensorboard=False, steps=2_000, eval_every=1_000)
    left = [800.0]
    plan = _plan(seconds=3_600.0)  # a cap of 900 s: nothing the screen adds would hide under it
    plan.left = lambda: left[0]  # type: ignore[method-assign]
    run, ev = FakeRun(), FakeEvaluator()
    long_games = evaluation.Evaluation(0, 50, 1.0, (3.0,) * 10, 20.0, screen_seconds=20.0)
    with Monitor(RunDir(tmp_path), cfg, target_return=None) as monitor:
        sup = Supervisor(cfg, run, monitor, lambda *a: None, evaluator=ev, plan=plan)  # type: ignore[arg-type]
        sup.last_eval_step = 50
        sup.length_at[0] = 4_000.0
        sup.evaluated(long_games)
        # 2 s a game: 100 s of re-scoring, 5 s to stop, 10 + 20 s of a final evaluation and
        # its pair: under the cap
        assert plan.kept_per_episode == 2.0 and plan.kept_length == 4_000.0
        assert not plan.squeezed() and plan.reserve(final_evaluation=True) == 135.0
        run.step = 100
        plan.length = 3_200.0  # shorter by a fifth: saves 20 s, a screen costs 32 s
        assert not plan.overpriced() and plan.repricing_screen() is None
        left[0] = 170.0
        sup.maybe_evaluate()
        assert ev.asked == [] and not sup.repriced
        plan.length = 2_000.0  # half: saves 50 s of re-scoring, a screen costs about 20 s
        assert plan.overpriced() and plan.repricing_screen() == plan.kept_screen() == 20.0
        left[0] = 181.0
        sup.maybe_evaluate()
        assert ev.asked == [] and not sup.repriced  # room 46 s: both stages end in time later
        left[0] = 179.0
        sup.maybe_evaluate()
        assert ev.asked == [100] and sup.repriced and ev.within == [20.0]
        err = capsys.readouterr().err
        assert "is priced on the kept model's long games: screening the latest model" in err
        # playing: priced as a periodic screen's rest and pair (10 + 20 s), it would stop
        # training at 165 s, before it could free any
        ev.busy, ev.progress = True, ("screen", 0, 10, 0.0)
        left[0] = 140.0
        sup.maybe_end_on_time()
        assert not sup.stopping
        ev.busy, ev.progress = False, None
        run.step = 200
        sup.maybe_evaluate()
        assert ev.asked == [100]  # once
        # 6 s: 10 quick games and 10 more of its re-screen, which beat the kept model's score
        index = sup.repricing
        assert index is not None
        latest = evaluation.Evaluation(
            index, 100, 2.0, (9.0,) * 10, 6.0, screen_seconds=6.0, rescreened=True
        )
        sup.evaluated(latest)
        assert plan.kept_per_episode == 0.3 and plan.kept_length == 2_000.0
        assert sup.repricing is None
        # 5 s to stop, 15 s of re-scoring, 1.5 + 3 s of a final evaluation and its pair
        assert plan.reserve(final_evaluation=True) == pytest.approx(24.5)
        assert not plan.overpriced()
        left[0] = 135.0  # where the kept model's long games stopped training
        sup.maybe_end_on_time()
        assert not sup.stopping
        left[0] = 24.0
        sup.maybe_end_on_time()
        assert sup.stopping
    # a re-screen that re-times the kept model's games without replacing it keeps its length
    rescreen = _plan()
    rescreen.observe(_evaluation(seconds=20.0), kept=True, length=4_000.0)
    rescreen.observe(_evaluation(seconds=60.0, rescreened=True, kept=30.0), length=3_000.0)
    assert rescreen.kept_per_episode == 3.0 and rescreen.kept_length == 4_000.0
    assert rescreen.measured_length == 3_000.0
    # a plan resumed from its state keeps the kept model's length
    resumed = _plan()
    resumed.load_state_dict(plan.state_dict())
    assert resumed.kept_length == 2_000.0
    # no length known when the kept model was handed over: no guess, no screen
    unknown = _plan()
    unknown.observe(_evaluation(seconds=20.0), kept=True)
    unknown.length = 100.0
    assert unknown.kept_per_episode == 2.0 and not unknown.overpriced()
    assert unknown.repricing_screen() is None


class FinalEvaluator(FakeEvaluator):
    processes = 1

    def wait(self, give_up=None, tick=None):
        return []


def test_a_squeezed_reserves_final_evaluation_is_bounded_as_the_screen_before_the_stop(
    tmp_path, capsys
):
    """The kept model stalls (20 s a game squeezes the reserve) and the run ended on its time:
    the final evaluation, on the processes training freed, may take each stage at most the
    freeing price's games (past them it gives up, listed, and leaves the re-scoring its
    time). No bound where nothing squeezes the reserve or the run ended early on its steps."""
    cfg = asyncrl.Config(progress=False, tensorboard=False, steps=2_000, eval_every=1_000)
    glob = GlobalSnapshot(np.zeros(1, np.float32), {}, None, 0, np.array([[100], [0]]))
    # (kept model's seconds for 10 games, the latest's where it was screened apart, the end)
    cases = (
        (200.0, None, Ended.TIME_LIMIT, 10 / 2 * 145 / 65, 2),
        # a latest model quick to play: the final evaluation is worth one process only, and
        # its bound is that process's 10 games
        (200.0, 1.0, Ended.TIME_LIMIT, 10 * 145 / 65, 1),
        (200.0, None, Ended.BUDGET, None, 2),
        (10.0, None, Ended.TIME_LIMIT, None, 2),
    )
    for n, (kept_seconds, latest, ended, within, processes) in enumerate(cases):
        plan = _plan()
        (tmp_path / f"{n}").mkdir()
        with Monitor(RunDir(tmp_path / f"{n}"), cfg, target_return=None) as monitor:
            run, ev = FakeRun(), FinalEvaluator()
            sup = Supervisor(cfg, run, monitor, lambda *a: None, evaluator=ev, plan=plan)  # type: ignore[arg-type]
            sup.last_eval_step = 50
            kept = evaluation.Evaluation(0, 50, 1.0, (3.0,) * 10, kept_seconds, screen_seconds=1.0)
            sup.evaluated(kept)
            if latest is not None:  # (a lower score: not kept)
                sup.evaluated(evaluation.Evaluation(1, 60, 1.0, (1.0,) * 10, latest))
            assert plan.squeezed() is (kept_seconds == 200.0)
            sup.outcome.glob, sup.outcome.ended = glob, ended
            sup.final_evaluation()
            assert ev.asked == [100] and ev.processes == processes
            assert ev.within == [pytest.approx(within) if within else None]
            if n == 0:  # it gives up: listed, and the log says the re-scoring has the time
                sup.stopping = True
                sup.evaluated(
                    evaluation.Evaluation(2, 100, 9.0, (), 70.0, planned=10, gave_up=True)
                )
                assert [g["evaluation"] for g in sup.outcome.gave_up] == [2]
                assert "the kept model's re-scoring has the time" in capsys.readouterr().err


def test_what_plays_after_a_step_budgets_end_is_priced_on_free_cores(tmp_path):
    """A run that ends on its step budget sets no ``stopping`` (the workers just end): its
    final evaluation still plays with the cores to itself, so its seconds are not those of a
    screen beside the workers (2 workers on 2 cores: 1.5 times slower), and a re-screen it
    loses makes no contender (the work it would price is under way)."""
    cfg = asyncrl.Config(progress=False, tensorboard=False, steps=2_000, eval_every=1_000)
    glob = GlobalSnapshot(np.zeros(1, np.float32), {}, None, 0, np.array([[100], [0]]))
    lost = evaluation.Evaluation(  # 10 episodes each, the latest model's 15 s, the kept's 5
        1, 100, 9.0, (1.0,) * 10, 20.0, screen_seconds=20.0, rescreened=True,
        kept_returns=(2.0,) * 10, kept_seconds=5.0,
    )  # fmt: skip
    for trained in (False, True):
        plan = _plan(workers=2, cores=2)
        (tmp_path / f"{trained}").mkdir()
        with Monitor(RunDir(tmp_path / f"{trained}"), cfg, target_return=None) as monitor:
            sup = Supervisor(
                cfg, FakeRun(), monitor, lambda *a: None, evaluator=FinalEvaluator(), plan=plan
            )  # type: ignore[arg-type]
            sup.evaluated(evaluation.Evaluation(0, 50, 1.0, (3.0,) * 10, 10.0, screen_seconds=10.0))
            if trained:
                sup.outcome.glob, sup.outcome.ended = glob, Ended.BUDGET
                sup.final_evaluation()
            assert not sup.stopping
            sup.evaluated(lost)
        share = 1.0 if trained else 1.5
        assert plan.per_episode == pytest.approx(15.0 / 20 / share)
        assert plan.kept_per_episode == pytest.approx(5.0 / 10 / share)
        assert (plan.contender_per_episode is None) is trained


def test_the_latest_models_price_follows_the_training_episodes_lengthening(tmp_path):
    """An evaluation measured the latest model's seconds a game when the training games were
    1,000 steps long; they have since grown to 1,500: its final evaluation is priced 1.5 times
    as long (a game that lengthens as the agent learns to survive outgrows the evaluation that
    priced it). Never shorter, and not the kept model's re-scoring: its games do not change."""
    cfg = asyncrl.Config(progress=False, tensorboard=False, steps=10_000, eval_every=1_000)
    plan = _plan()
    plan.left = lambda: 1_000.0  # type: ignore[method-assign]
    run, ev = FakeRun(), FakeEvaluator()

    def games(length, n=100):
        sup.handle(Episodes(0, [Finished(0.0, length)] * n, run.step, {}))
        sup.maybe_end_on_time()

    with Monitor(RunDir(tmp_path), cfg, target_return=None) as monitor:
        sup = Supervisor(cfg, run, monitor, lambda *a: None, evaluator=ev, plan=plan)  # type: ignore[arg-type]
        games(500, 24)
        assert plan.length is None  # a quarter of a window first: the short games end first
        games(500, 1)
        assert plan.length == 500.0
        games(1_000)  # the window is the last 100 games
        assert plan.length == 1_000.0
        run.step = 1_000
        sup.maybe_evaluate()
        assert ev.asked == [1_000]
        games(1_500)  # while it plays
        sup.evaluated(evaluation.Evaluation(0, 1_000, 1.0, (0.0,) * 10, 10.0, screen_seconds=10.0))
        assert plan.measured_length == 1_000.0 and plan.lengthening() == 1.5
        assert plan.per_episode == plan.kept_per_episode == 1.0
        assert plan.evaluation() == 10 * 1.5 / 2 + 20 * 1.0 / 2 and plan.rescoring() == 50.0
        games(500)
        assert plan.lengthening() == 1.0 and plan.evaluation() == 15.0
        # an evaluation that gave up (or was cut short) measures nothing and leaves no length
        run.step = 2_000
        sup.maybe_evaluate()
        assert sup.length_at == {1: 500.0}
        sup.evaluated(evaluation.Evaluation(1, 2_000, 2.0, (), 90.0, planned=10, gave_up=True))
        assert sup.length_at == {} and plan.measured_length == 1_000.0
        record = {"evaluation": 1, "global_step": 2_000, "stage": "screen", "episodes": 0}
        assert sup.outcome.gave_up == [record | {"planned": 10, "seconds": 90.0}]
    # a natively vectorized env's wave lasts its longest game: the window's longest
    waves = _plan(separate=False, envs=16)
    (tmp_path / "waves").mkdir()
    with Monitor(RunDir(tmp_path / "waves"), cfg, target_return=None) as monitor:
        sup = Supervisor(cfg, FakeRun(), monitor, lambda *a: None, plan=waves)  # type: ignore[arg-type]
        sup.handle(Episodes(0, [Finished(0.0, 100)] * 99 + [Finished(0.0, 900)], 0, {}))
        assert sup.training_length() == 900.0
    # a resumed run's plan keeps the length its seconds were measured at
    resumed = _plan()
    resumed.load_state_dict(plan.state_dict())
    resumed.length = 2_000.0
    assert resumed.measured_length == 1_000.0 and resumed.lengthening() == 2.0


def test_a_contenders_longer_games_price_the_rescoring_within_a_bound():
    """A model that beat the kept model's score on its screen and lost the re-screen is what
    the stop's evaluation usually keeps: where its games are longer (a policy that survives
    longer), they price the re-scoring, lengthened as the training games have since, up to
    CONTENDER_RAISE times the kept model's price; a stalled screen that does not beat the kept
    score prices nothing, and a model kept clears the contender."""
    plan = _plan()
    plan.length = 1_000.0
    plan.observe(_evaluation(seconds=10.0), kept=True, length=1_000.0)  # 1 s a game
    assert plan.rescoring() == plan.kept_rescoring() == 50.0
    plan.observe(_evaluation(seconds=600.0), length=1_000.0)  # a stalled screen, under the kept
    assert plan.contender_per_episode is None and plan.rescoring() == 50.0
    # a contender at 1.2 s a game (its screen and re-screen: 20 games in 24 s, its pair 10 s)
    plan.observe(_evaluation(seconds=34.0, rescreened=True, kept=10.0), length=1_000.0)
    assert plan.kept_per_episode == 1.0 and plan.contender_per_episode == pytest.approx(1.2)
    assert plan.rescoring() == pytest.approx(60.0) and plan.kept_rescoring() == 50.0
    assert plan.reserve(final_evaluation=False) == pytest.approx(STOP_SECONDS + 60.0)
    plan.length = 1_250.0  # the training games lengthened by a quarter since
    assert plan.rescoring() == pytest.approx(75.0)
    plan.length = 5_000.0  # but never past the bound
    assert plan.rescoring() == CONTENDER_RAISE * 50.0
    resumed = _plan()
    resumed.load_state_dict(plan.state_dict())
    resumed.length = 1_250.0
    assert resumed.rescoring() == pytest.approx(75.0)
    plan.observe(_evaluation(seconds=20.0, rescreened=True), kept=True, length=5_000.0)
    assert plan.contender_per_episode is None and plan.rescoring() == 50.0
    # one played after the stop makes none (the work it would price is under way)
    plan.observe(_evaluation(seconds=34.0, rescreened=True, kept=10.0), training=False)
    assert plan.contender_per_episode is None
    # a contender raises the reserve up to its cap, but does not squeeze it: the squeeze's
    # bounded screens are for a kept model whose games stall, and a learning model's would
    # give up under them (30 minutes, 4 s a kept game, 8 s a contender's)
    half = _plan(seconds=1_800.0)
    half.observe(_evaluation(seconds=40.0), kept=True)
    half.observe(_evaluation(seconds=200.0, rescreened=True, kept=40.0))
    assert half.rescoring() == 2 * half.kept_rescoring() == 400.0
    assert half.wanted(final_evaluation=True) > half.cap() == half.reserve(final_evaluation=True)
    assert not half.squeezed() and half.repricing_screen() is None


def test_a_cut_short_evaluation_counts_for_nothing_and_is_recorded(tmp_path):
    """Its episodes are the ones that ended first (the short ones): no row, no best model, no
    try of the stop rule, even where its mean would pass; the outcome records it."""
    cfg = asyncrl.Config(progress=False, tensorboard=False)
    saved = []
    with Monitor(RunDir(tmp_path), cfg, target_return=1.0) as monitor:
        sup = Supervisor(cfg, FakeRun(), monitor, lambda *a: None, save_best=saved.append)  # type: ignore[arg-type]
        cut = _evaluation(seconds=3.0, episodes=7, confirmed=True, cut=True)
        sup.evaluated(cut)
        assert monitor.best_eval is None and monitor.tries == 0 and not monitor.solved
        assert saved == [] and not sup.stopping
        record = {"evaluation": 0, "global_step": 100, "stage": "confirmation"}
        assert sup.outcome.cut_short == [record | {"episodes": 7, "planned": 100, "seconds": 3.0}]
    assert (tmp_path / "evaluations.csv").read_text().count("\n") == 1  # the header alone


def test_the_deadline_cuts_a_confirmation_short():
    """The evaluator's deadline passes once its confirmation is under way (a function of the
    play, not of the clock): the confirmation comes back cut short, with what it planned."""
    from asyncrl.algos import make_algorithm
    from asyncrl.envs import probe_env
    from asyncrl.messages import GlobalSnapshot
    from asyncrl.models import build_model, flatten_parameters
    from asyncrl.presets import preset

    env = "asyncrl-test/Counter-v0"  # every episode returns 3: the screen reaches 0
    cfg = preset(None, env=env).validate()
    spec = spec_of(make_algorithm(cfg.algo, cfg, probe_env(env)))
    flat = flatten_parameters(build_model(spec)).detach().numpy().copy()
    snap = GlobalSnapshot(flat, {}, None, 0, np.zeros((3, 1), np.int64))

    def deadline():
        under_way = ev.progress
        return 0.0 if under_way is not None and under_way[0] == "confirmation" else None

    ev = evaluation.Evaluator(
        spec, "a3c", env, {}, episodes=4, deterministic=True, seed=0, confirm=(0.0, 30),
        deadline=deadline,
    )  # fmt: skip
    try:
        assert ev.submit(0, 0, 0.0, snap)
        (result,) = ev.wait()
    finally:
        ev.close()
    assert result.cut_short and result.confirmed and result.planned == 30
    assert result.returns == () and result.screen_seconds > 0


def _counter():
    """The model spec of A3C on the Counter env, and a snapshot of a model built from it."""
    from asyncrl.algos import make_algorithm
    from asyncrl.envs import probe_env
    from asyncrl.models import build_model, flatten_parameters
    from asyncrl.presets import preset

    cfg = preset(None, env=COUNTER).validate()
    spec = spec_of(make_algorithm(cfg.algo, cfg, probe_env(COUNTER)))
    flat = flatten_parameters(build_model(spec)).detach().numpy().copy()
    return spec, GlobalSnapshot(flat, {}, None, 0, np.zeros((3, 1), np.int64))


def _fake_plays(monkeypatch, plays, on_play=None):
    """The evaluator's plays on a clock they advance (``plays``: each one's seconds and
    return), on its thread (play_episodes) or on processes (play_parallel); a play the
    deadline falls inside ends there, out of time, as they do. ``on_play``: called after each
    play with what played it ("thread" or the processes)."""
    import asyncrl.parallel

    now = [0.0]

    def play(seeds, deadline, where):
        seconds, ret = next(plays)
        limit = deadline() if callable(deadline) else deadline
        if limit is not None and now[0] + seconds >= limit:
            now[0] = max(now[0], limit)
            raise OutOfTime
        now[0] += seconds
        if on_play is not None:
            on_play(where)
        return [ret] * len(seeds)

    def scheduled(policy, envs, seeds, deterministic=True, rng=None, deadline=None, **_):
        return play(seeds, deadline, "thread")

    def parallel(source, seeds, processes, deadline=None, on_episode=None, **_):
        for i, ret in enumerate(play(seeds, deadline, processes)):
            on_episode(i, ret)

    monkeypatch.setattr(evaluation, "play_episodes", scheduled)
    monkeypatch.setattr(asyncrl.parallel, "play_parallel", parallel)
    monkeypatch.setattr(evaluation, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))


def _rescreened(ev, snap):
    """The evaluation of ``snap`` by ``ev``, whose screen beats the kept model's score (2; the
    kept model is ``snap`` too): a re-screen of both."""
    ev.bar = lambda: 2.0
    ev.keep(snap)
    try:
        assert ev.submit(1, 100, 0.0, snap)
        (result,) = ev.wait()
    finally:
        ev.close()
    return result


def test_a_rescreen_times_the_kept_models_episodes_on_their_own(monkeypatch):
    """A clock the plays advance (not the machine's): the screen 3 s, the re-screen 3 s, the
    kept model's play of its starts 40 s. The evaluation reports the 46 s and the kept
    model's 40 on their own, and the plan prices each model on its own episodes."""

    spec, snap = _counter()
    _fake_plays(monkeypatch, iter([(3.0, 5.0), (3.0, 5.0), (40.0, 1.0)]))  # seconds, return
    ev = evaluation.Evaluator(spec, "a3c", COUNTER, {}, episodes=4, deterministic=True, seed=0)
    result = _rescreened(ev, snap)
    assert result.stage == "re-screen" and result.kept_returns == (1.0,) * 4
    assert (result.seconds, result.kept_seconds) == (46.0, 40.0)
    assert (result.saved_seconds, result.kept_saved_seconds) == (0.0, 0.0)
    plan = _plan()
    plan.observe(result, training=False)
    assert plan.per_episode == 0.75 and plan.kept_per_episode == 10.0


def test_an_evaluation_under_way_at_the_stop_prices_its_waves_as_they_played(monkeypatch):
    """Training stops while a screen plays on the evaluator's thread (4 episodes, 3 s): the
    re-screen and the kept model's pair then play on the 2 processes it freed (Evaluator.
    processes), 2 s and 10 s for 4 episodes each, 2 a process. On one they would have taken 4
    and 20 s: the evaluation reports what the processes saved, and the plan prices each wave
    as it played (not the 15 s over 8 episodes on one process, nor all of them as if on 2)."""
    spec, snap = _counter()
    ev = evaluation.Evaluator(spec, "a3c", COUNTER, {}, episodes=4, deterministic=True, seed=0)
    played = []

    def on_play(where):  # the stop comes during the first play, as the supervisor sets it
        played.append(where)
        ev.processes = 2

    _fake_plays(monkeypatch, iter([(3.0, 5.0), (2.0, 5.0), (10.0, 1.0)]), on_play)
    result = _rescreened(ev, snap)
    assert played == ["thread", 2, 2]
    assert result.stage == "re-screen" and result.kept_returns == (1.0,) * 4
    assert (result.seconds, result.kept_seconds) == (15.0, 10.0)
    assert (result.saved_seconds, result.kept_saved_seconds) == (2.0, 10.0)
    plan = _plan()
    plan.observe(result, training=False)
    # the latest model: 3 s and 4 s (on one) for its 8 episodes; the kept one: 20 s for 4
    assert plan.per_episode == 7.0 / 8 and plan.kept_per_episode == 5.0
    # and a confirmation prices its own waves, not its screen's
    confirmation = dataclasses.replace(
        _evaluation(seconds=9.0, episodes=8, confirmed=True, screen=1.0), saved_seconds=8.0
    )
    plan.observe(confirmation, training=False, kept=True)
    assert plan.per_episode == plan.kept_per_episode == 2.0


def test_a_model_at_the_freeing_price_ends_the_squeeze():
    """The price the screen before a squeezed reserve's stop gives up past: a kept model whose
    episodes take it fills the reserve's cap exactly, one a little quicker leaves it squeezed
    no more; on natively vectorized envs too (waves, not episodes)."""
    for kw in ({}, {"separate": False, "workers": 2}):
        plan = _plan(**kw)
        plan.observe(_evaluation(seconds=300.0), kept=True)
        assert plan.squeezed()
        price = plan.freeing_price()
        plan.per_episode = plan.kept_per_episode = price
        assert plan.wanted(final_evaluation=True) == pytest.approx(plan.cap())
        plan.per_episode = plan.kept_per_episode = 0.99 * price
        assert not plan.squeezed()
        # a screen and re-screen beside the workers, each stage at its bound: priced at it
        plan.observe(_evaluation(seconds=2 * plan.quick_screen(), rescreened=True), kept=True)
        assert plan.per_episode == pytest.approx(price)


def test_the_screen_before_the_stop_gives_up_on_long_episodes_and_plays_no_pair(
    monkeypatch, tmp_path
):
    """``within`` 10 s a stage: a screen whose games take 30 s gives up at 10 s (counting for
    nothing, and not a cut of the time limit); one whose games take 8 s a stage is
    re-screened (16 s in all: the bound is each stage's), and its re-screen is compared with
    the kept model's score: the kept model plays nothing. Where the run's deadline comes
    first (5 s), the screen is cut short by it, as any evaluation is."""
    from asyncrl.algos import make_algorithm
    from asyncrl.envs import probe_env
    from asyncrl.messages import GlobalSnapshot
    from asyncrl.models import build_model, flatten_parameters
    from asyncrl.presets import preset

    env = "asyncrl-test/Counter-v0"
    cfg = preset(None, env=env).validate()
    spec = spec_of(make_algorithm(cfg.algo, cfg, probe_env(env)))
    flat = flatten_parameters(build_model(spec)).detach().numpy().copy()
    snap = GlobalSnapshot(flat, {}, None, 0, np.zeros((3, 1), np.int64))
    results = []
    for plays, limit in (
        ([(30.0, 5.0)], None),
        ([(8.0, 5.0), (8.0, 5.0)], None),
        ([(30.0, 5.0)], 5.0),
    ):
        _fake_plays(monkeypatch, iter(plays))  # (a third play, the pair's, would raise)
        ev = evaluation.Evaluator(
            spec, "a3c", env, {}, episodes=4, deterministic=True, seed=0,
            deadline=lambda limit=limit: limit,
        )  # fmt: skip
        ev.bar = lambda: 2.0  # the kept model's score: the screen's 5 beats it
        ev.keep(snap)
        try:
            assert ev.submit(1, 100, 0.0, snap, within=10.0)
            results += ev.wait()
        finally:
            ev.close()
    slow, quick, late = results
    assert slow.gave_up and not slow.cut_short and slow.returns == () and slow.seconds == 10.0
    assert quick.stage == "re-screen" and not quick.gave_up and quick.kept_returns == ()
    assert quick.seconds == 16.0 and quick.mean == 5.0 and quick.beats_kept is None
    assert late.cut_short and not late.gave_up and late.seconds == 5.0
    plan = _plan()
    plan.observe(slow, kept=False)
    assert not plan.measured  # it counts for nothing
    # the supervisor says so, and keeps nothing of it
    cfg = asyncrl.Config(progress=False, tensorboard=False)
    with Monitor(RunDir(tmp_path), cfg, target_return=None) as monitor:
        sup = Supervisor(cfg, FakeRun(), monitor, lambda *a: None)  # type: ignore[arg-type]
        sup.evaluated(slow)
        assert monitor.best_eval is None and sup.outcome.cut_short == []


def test_the_kept_model_is_rescored_and_printed_first(run_dir, capsys):
    """summary.json reports the kept model's mean over --rescore-episodes new episodes, and
    the CLI's last lines give it first; the selection statistics stay."""
    args = ["train", "--steps", "3000", "--workers", "1", "--backend", "threads"]
    args += ["--no-progress", "--eval-every", "1000", "--rescore-episodes", "20"]
    assert main([*args, "--run-dir", str(run_dir)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["kept_model"] == "best_model.pt" and s["kept_model_episodes"] == 20
    assert not s["kept_model_cut_short"] and s["kept_model_planned_episodes"] == 20
    returns = asyncrl.evaluate(run_dir, episodes=1)  # (a run's file, as asyncrl.load gives it)
    assert returns and s["kept_model_return"] is not None and s["best_eval_return"] is not None
    assert lines[-3].startswith(
        f"kept model (best_model.pt): mean return {s['kept_model_return']:.1f}"
    )
    assert lines[-3].endswith("over 20 new episodes") and lines[-2].startswith("not solved")
    # none with 0
    assert main([*args[:-1], "0", "--run-dir", str(run_dir.with_name("none"))]) == 0
    s = json.loads((run_dir.with_name("none") / "summary.json").read_text())
    assert s["kept_model"] is None and s["kept_model_episodes"] == 0
    assert "kept model" not in capsys.readouterr().out


def test_a_cut_short_rescoring_keeps_the_waves_that_ended_whole():
    """On 2 processes (play_parallel's dealing: evens on one, odds on the other) in waves of
    16, the limit cuts each process's third wave after two of its short episodes ended: the
    first two waves of each are kept, the cut ones' short episodes are not."""
    ended = set(range(64)) | {66, 71}
    assert rescore.whole_waves(ended, 100, 2, lambda n: min(n, 16)) == list(range(64))
    # a last wave shorter than the rest counts once its episodes have ended; one process
    # playing everything in one wave keeps none of a cut one
    assert rescore.whole_waves(set(range(100)), 100, 2, lambda n: min(n, 16)) == list(range(100))
    assert rescore.whole_waves(set(range(99)), 100, 1, lambda n: min(n, 128)) == []
    # more processes than episodes: those with no share add nothing
    assert rescore.whole_waves({0, 1}, 2, 4, lambda n: n) == [0, 1]


def test_the_rescorings_mean_leaves_out_the_short_episodes_of_the_wave_the_limit_cut(
    monkeypatch,
):
    """The kept model's re-scoring on one thread, Atari's waves of 16: the first two waves end
    (return 10 each), then the limit comes while the third's two short games (return -21)
    have ended. The summary's mean is the whole waves' (10 on 32 episodes), not pulled down
    by the games that were short because they were lost."""

    class Envs:
        def close(self) -> None:
            pass

    policy = types.SimpleNamespace(
        source=None, env_id="PongNoFrameskip-v4", eval_envs=lambda n, seed: Envs()
    )
    monkeypatch.setattr(rescore, "load", lambda run_dir: policy)

    def play(policy, envs, seeds, deterministic, rng, stop=None, deadline=None, on_episode=None):
        assert len(seeds) == 40
        for i in range(32):
            on_episode(i, 10.0)
        on_episode(33, -21.0)
        on_episode(35, -21.0)
        raise OutOfTime

    monkeypatch.setattr(rescore, "play_episodes", play)
    lines: list[str] = []
    done = rescore.rescore_kept_model("run", 0, 40, deadline=0.0, log=lines.append)
    s = done.summary()
    assert s["kept_model_cut_short"] and s["kept_model_episodes"] == 32
    assert s["kept_model_return"] == 10.0 and s["kept_model_planned_episodes"] == 40
    assert "34 of 40 episodes ended, 32 of them in waves that ended whole" in lines[-1]


def test_a_time_limit_bounds_the_whole_process_and_records_what_it_cut(tmp_path):
    """Episodes of a known length (20 steps of 10 ms, Slow-v0) and a target they reach, so the
    stop rule's confirmation begins: its 100 episodes, a final evaluation and a re-scoring of
    100 cannot all fit in 12 s. Training stops its reserve before the limit, and what the
    limit then cuts is recorded: the process (imports and all) ends well within 30 s of the
    limit. (The recorded decisions are asserted; of the clock, only that bound.)"""
    run_dir = tmp_path / "run"
    args = ["train", "--env", SLOW, "--workers", "1", "--backend", "threads"]
    args += ["--envs-per-worker", "2", "--window", "10", "--target-return", "20"]
    args += ["--time-limit", "12s", "--no-progress", "--run-dir", str(run_dir)]
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "asyncrl.cli", *args],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    seconds = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["ended"] == "time_limit" and not s["solved"]
    assert s["time_reserved_seconds"] > 0
    # the re-scoring did not fit: cut short, and said so
    assert s["kept_model_cut_short"] and s["kept_model_episodes"] < 100
    assert "re-scoring cut short by the time limit" in proc.stderr
    # and neither did the confirmation (or the final evaluation) after it
    assert s["evaluations_cut_short"] and s["evaluations_gave_up"] == [], s
    assert "re-scoring the kept model" in proc.stderr
    assert seconds < 12 + 30, (seconds, proc.stderr)


def test_a_confirmation_that_solves_after_training_stopped_on_time_keeps_its_model(tmp_path):
    """Training stopped on time with a confirmation under way, which then meets the rule: the
    run is solved, its model kept, and no final evaluation of later parameters replaces it."""
    from types import SimpleNamespace

    confirmation = evaluation.Evaluation(
        0, 500, 1.0, (20.0,) * 100, 9.0, None, None, True, 1.0
    )  # mean 20, no spread: over the target 10 at any margin

    class Waited(FakeEvaluator):
        def wait(self, give_up, tick):
            return [confirmation]

    cfg = asyncrl.Config(progress=False, tensorboard=False)
    saved, ev = [], Waited()
    with Monitor(RunDir(tmp_path), cfg, target_return=10.0) as monitor:
        sup = Supervisor(
            cfg, FakeRun(), monitor, lambda *a: None, evaluator=ev, save_best=saved.append,
            plan=_plan(),
        )  # type: ignore[arg-type]  # fmt: skip
        sup.end(Ended.TIME_LIMIT)
        sup.outcome.glob = SimpleNamespace(steps=10_000)  # later than the confirmation's
        sup.final_evaluation()
        assert monitor.solved and monitor.solved_by == "eval"
        assert saved == [confirmation] and ev.asked == []
        assert sup.outcome.ended is Ended.TIME_LIMIT


def test_spawned_processes_play_the_same_episodes(monkeypatch):
    """Where the main process is a Ray driver the processes are spawned, not forked (its gRPC
    threads): they build the policy from a pickled copy of its source and play the same."""
    from asyncrl import parallel

    monkeypatch.setattr(parallel, "_start_method", lambda: "spawn")
    seeds = held_out_seeds(2, 4)
    assert play_parallel(_Fresh(SEPARATE), seeds, 2) == _alone(SEPARATE, seeds)
    assert multiprocessing.active_children() == []
