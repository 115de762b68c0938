"""Evaluation during training: rows of evaluations.csv on every backend, the best parameters kept
as best_model.pt, --which, the evaluation stop rule, and resume."""

import csv
import dataclasses
import itertools
import json
import time

import numpy as np
import pytest
import torch

import asyncrl
import tests.envs_for_tests  # noqa: F401  (registers the envs)
from asyncrl import evaluation
from asyncrl.checkpoint import load_checkpoint
from asyncrl.cli import main
from asyncrl.errors import Interrupted, UserError
from asyncrl.evaluation import eval_seeds
from asyncrl.messages import Finished
from asyncrl.monitor import Monitor
from asyncrl.plot import metric_series, read_evaluations
from asyncrl.rundir import RunDir
from asyncrl.tune.process import EvalFollower
from tests.oracles import assert_the_kept_model_is_the_rows, spec_of


def params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()


def rows(run_dir):
    with open(run_dir / "evaluations.csv", newline="") as f:
        return list(csv.DictReader(f))


QUICK = dict(workers=1, seed=0, steps=6_000, eval_every=2_000, progress=False)


def schedule_plays(monkeypatch, scores):
    """A scheduled stand-in for the evaluations' episodes: the k-th play scores ``scores[k]``
    (the last of them after that), whatever the policy. Returns the seeds of each play."""
    plays: list[list[int]] = []

    def scheduled(policy, envs, seeds, deterministic=True, rng=None, stop=None, **_):
        plays.append(list(seeds))
        return [scores[min(len(plays), len(scores)) - 1]] * len(seeds)

    monkeypatch.setattr(evaluation, "play_episodes", scheduled)
    return plays


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_evaluations_are_rows_and_the_best_is_kept(backend, run_dir):
    summary = asyncrl.train(backend=backend, target_return=1e9, run_dir=str(run_dir), **QUICK)
    evals = rows(run_dir)
    # every 2,000 steps while training (the budget ends it), and one of the final parameters
    assert len(evals) == summary["evaluations"] >= 3
    assert [int(r["evaluation"]) for r in evals] == list(range(len(evals)))
    steps = [int(r["global_step"]) for r in evals]
    assert steps == sorted(steps) and steps[-1] == summary["total_steps"]
    for r in evals:
        assert int(r["episodes"]) == 10
        assert float(r["min"]) <= float(r["mean"]) <= float(r["max"])
    policy = asyncrl.load(run_dir)
    assert policy.source.name == "best_model.pt"
    assert_the_kept_model_is_the_rows(evals, policy.evaluation, summary)


def test_the_best_model_holds_the_parameters_of_the_best_evaluation(run_dir, monkeypatch):
    """A scheduled stand-in for the episodes: the k-th play scores PLAYS[k] whatever the
    policy. Evaluation 0's screen (1) keeps its model. Evaluation 1's screen beats that (5), so
    new episodes re-screen it (4) and the kept model plays the same starts (1.5): it is kept.
    Evaluation 2's screen does not beat 4 (3). Evaluation 3's does (6), but on its re-screen's
    starts it scores 2 where the kept model scores 3: the kept model stays, its score now
    the mean of its 20 unselected episodes (3.5). Evaluation 4's screen beats that (3.7), and
    its re-screen (3) beats the kept model on the same starts (2): it is kept, though 3 is
    under 3.5. best_model.pt must hold the parameters evaluation 4 read, and each row the
    re-screen's mean where there was one."""
    plays = [1.0, 5.0, 4.0, 1.5, 3.0, 6.0, 2.0, 3.0, 3.7, 3.0, 2.0] + [0.0] * 10
    seen: dict[int, np.ndarray] = {}
    starts: list[list[int]] = []

    def scheduled(policy, envs, seeds, deterministic=True, rng=None, stop=None, **_):
        k = len(starts)
        starts.append(list(seeds))
        seen[k] = params(policy.model)
        return [plays[k]] * len(seeds)

    monkeypatch.setattr(evaluation, "play_episodes", scheduled)
    summary = asyncrl.train(
        backend="threads", target_return=1e9, run_dir=str(run_dir), **{**QUICK, "steps": 13_000}
    )
    evals = rows(run_dir)
    assert len(evals) >= 6
    assert [float(r["mean"]) for r in evals[:6]] == [1.0, 4.0, 3.0, 2.0, 3.0, 0.0]
    # the rows say which are re-screens, the kept model's mean on their starts, and which kept
    stages = ["screen", "re-screen", "screen", "re-screen", "re-screen", "screen"]
    assert [r["stage"] for r in evals[:6]] == stages
    assert [r["kept_mean"] for r in evals[:6]] == ["", "1.5", "", "3", "2", ""]
    assert [r["kept"] for r in evals[:6]] == ["1", "1", "0", "0", "1", "0"]
    assert all(int(r["episodes"]) == 10 for r in evals)
    assert len(starts) == len(evals) + 6  # three re-screens, each of two models
    # the kept model plays its re-screen's starts; every other play has starts of its own
    for rescreen, of_kept in ((2, 3), (6, 7), (9, 10)):
        assert starts[of_kept] == starts[rescreen]
    for kept, at in ((0, 3), (2, 7), (2, 10)):  # the kept model's parameters, played again
        np.testing.assert_array_equal(seen[at], seen[kept])
    own = [s for k, play in enumerate(starts) if k not in (3, 7, 10) for s in play]
    assert len(set(own)) == len(own)
    best = asyncrl.load(run_dir, "best")
    best_params = params(best.model)
    np.testing.assert_array_equal(best_params, seen[9])
    assert best.evaluation == {
        "global_step": int(evals[4]["global_step"]),
        "mean": 3.0,
        "episodes": 10,
    }
    assert summary["best_eval_return"] == 3.0
    last = params(asyncrl.load(run_dir, "last").model)
    assert not np.array_equal(best_params, last)
    np.testing.assert_array_equal(last, seen[len(starts) - 1])  # the final evaluation's


def test_a_screen_at_the_target_without_a_confirmation_is_the_stop_rules_try(run_dir, monkeypatch):
    """With --confirm-episodes 0 the stop rule tries a screen at the target as it is: it is
    not re-screened, though it beats the kept model's score."""
    plays = schedule_plays(monkeypatch, [1.0, 200.0])
    summary = asyncrl.train(
        backend="threads", target_return=100.0, confirm_episodes=0, run_dir=str(run_dir),
        **{**QUICK, "steps": 1_000_000},
    )  # fmt: skip
    assert summary["solved"] and summary["solve_return"] == 200.0
    assert [len(play) for play in plays] == [10, 10]


def test_a_re_screen_at_the_target_is_no_try_of_the_stop_rule(run_dir, monkeypatch):
    """Target 100: evaluation 1's screen (50) is under it but beats the kept model's (1), so it
    is re-screened, and its re-screen scores 200: that is no try (its screen did not reach the
    target), so the run goes on until a screen reaches it and its confirmation passes."""
    played = schedule_plays(monkeypatch, [1.0, 50.0, 200.0, 1.0, 150.0, 150.0])
    summary = asyncrl.train(
        backend="threads", target_return=100.0, run_dir=str(run_dir),
        **{**QUICK, "steps": 1_000_000},
    )  # fmt: skip
    # screen, screen + re-screen + the kept model's, screen, confirmation
    assert [len(play) for play in played] == [10, 10, 10, 10, 10, 100]
    assert summary["solved"] and summary["solve_return"] == 150.0


def test_the_kept_models_score_pools_its_unselected_episodes(tmp_path):
    """A re-screen that loses the pair (a tie included) adds the kept model's episodes to its
    score (the bar the next screen must beat); one that wins replaces it; a re-screen with no
    pair (no model kept in this process: a resumed run) is compared with the score."""
    cfg = asyncrl.Config(progress=False, tensorboard=False)

    def ev(returns, kept=(), rescreened=True):
        return evaluation.Evaluation(
            0, 100, 1.0, tuple(returns), 1.0, rescreened=rescreened, kept_returns=tuple(kept)
        )

    with Monitor(RunDir(tmp_path), cfg, target_return=None) as monitor:
        assert monitor.evaluation(ev([4.0] * 10, rescreened=False))
        assert not monitor.evaluation(ev([6.0] * 10, kept=[7.0] * 10))
        assert monitor.best_eval == (5.5, 100, 20)
        assert not monitor.evaluation(ev([5.0] * 10, kept=[5.0] * 10))
        assert monitor.best_eval == (pytest.approx(160 / 30), 100, 30)
        assert monitor.evaluation(ev([3.0] * 10, kept=[2.0] * 10))
        assert monitor.best_eval == (3.0, 100, 10)
        assert monitor.evaluation(ev([3.5] * 10))
        assert not monitor.evaluation(ev([3.0] * 10))


def test_a_resumed_run_writes_its_evaluations_under_the_files_own_header(tmp_path):
    """A run made before evaluations.csv had its stage, kept_mean and kept columns goes on
    under the header it has, and the curves and the tune still read it."""
    cfg = asyncrl.Config(progress=False, tensorboard=False)
    with Monitor(RunDir(tmp_path), cfg, target_return=None) as monitor:
        monitor.evaluation(evaluation.Evaluation(0, 100, 1.0, (4.0,) * 10, 1.0))
        state = monitor.state_dict()
    old = "evaluation,global_step,wall_seconds,mean,std,min,max,episodes,seconds\n"
    old += "0,100,1.000,4,0,4,4,10,1.000\n"
    (tmp_path / "evaluations.csv").write_text(old)
    state["evaluations_bytes"] = len(old)
    with Monitor(RunDir(tmp_path), cfg, target_return=None, state=state) as monitor:
        monitor.evaluation(evaluation.Evaluation(1, 200, 2.0, (6.0,) * 10, 1.0))
    lines = (tmp_path / "evaluations.csv").read_text().splitlines()
    assert lines[:2] == old.splitlines() and len(lines) == 3
    assert lines[2].split(",")[:4] == ["1", "200", "2.000", "6"]
    assert len(lines[2].split(",")) == 9
    assert read_evaluations(tmp_path)["mean"] == [4.0, 6.0]
    follower = EvalFollower(tmp_path / "evaluations.csv")
    assert [r["mean"] for r in follower.read()] == [4.0, 6.0]


def test_the_curves_and_the_tune_read_the_rows_with_their_words(tmp_path):
    cfg = asyncrl.Config(progress=False, tensorboard=False)
    with Monitor(RunDir(tmp_path), cfg, target_return=None) as monitor:
        monitor.evaluation(evaluation.Evaluation(0, 100, 1.0, (4.0,) * 10, 1.0))
        pair = evaluation.Evaluation(
            1, 200, 2.0, (6.0,) * 10, 1.0, rescreened=True, kept_returns=(5.0,) * 10
        )
        monitor.evaluation(pair)
    assert read_evaluations(tmp_path)["mean"] == [4.0, 6.0]
    rows_read = EvalFollower(tmp_path / "evaluations.csv").read()
    assert [(r["mean"], r.get("kept_mean"), r["kept"]) for r in rows_read] == [
        (4.0, None, 1.0),
        (6.0, 5.0, 1.0),
    ]


def test_a_passing_screen_counts_only_once_its_confirmation_passes(run_dir, monkeypatch):
    """Scheduled stand-ins again, target 100: the first screen passes (200) but its
    confirmation does not (50), so the run goes on; the next screen fails (no confirmation);
    the third passes and is confirmed (150): the run stops there, on the confirmation's mean,
    and the confirmation's episodes are new ones, not the screen's."""
    calls = schedule_plays(monkeypatch, [200.0, 50.0, 50.0, 200.0, 150.0])
    summary = asyncrl.train(
        backend="threads", target_return=100.0, run_dir=str(run_dir),
        **{**QUICK, "steps": 1_000_000},
    )  # fmt: skip
    assert [len(c) for c in calls] == [10, 100, 10, 10, 100]
    evals = rows(run_dir)
    assert [(float(r["mean"]), int(r["episodes"])) for r in evals] == [
        (50.0, 100), (50.0, 10), (150.0, 100)
    ]  # fmt: skip
    assert summary["solved"] and summary["ended"] == "solved"
    assert summary["solve_steps"] == int(evals[2]["global_step"]) < 1_000_000
    assert (summary["best_eval_return"], summary["best_eval_episodes"]) == (150.0, 100)
    assert not set(calls[0]) & set(calls[1]) and calls[1] != calls[4]


@pytest.mark.parametrize("stderrs, stops_at", [(1.0, 2), (0.0, 1), (None, 2)])
def test_a_confirmation_counts_on_its_mean_less_its_standard_errors(
    stderrs, stops_at, run_dir, monkeypatch
):
    """Target 100. The first confirmation averages 101 with a spread (half 91, half 111: sample
    std 10 * sqrt(100/99), standard error about 1.005), so its mean less one standard error is
    below 100: with --confirm-stderr 1 (or the default, 2) the run goes on and stops on the
    second (102 flat, standard error 0); with 0 the first one's mean is enough."""
    confirmations = [[91.0, 111.0] * 50, [102.0] * 100]
    calls: list[int] = []

    def scheduled(policy, envs, seeds, deterministic=True, rng=None, stop=None, **_):
        calls.append(len(seeds))
        if len(seeds) == 10:
            return [200.0] * 10  # every screen passes
        return confirmations[min(sum(n == 100 for n in calls), 2) - 1]

    monkeypatch.setattr(evaluation, "play_episodes", scheduled)
    given = {} if stderrs is None else {"confirm_stderr": stderrs}
    summary = asyncrl.train(
        backend="threads", target_return=100.0, run_dir=str(run_dir),
        **{**QUICK, "steps": 1_000_000, **given},
    )  # fmt: skip
    evals = rows(run_dir)
    assert summary["solved"] and len(evals) == stops_at
    assert summary["solve_steps"] == int(evals[-1]["global_step"])
    assert float(evals[0]["mean"]) == 101.0


def test_a_solved_run_keeps_the_confirmation_that_met_the_rule(run_dir, monkeypatch):
    """Target 100. The first confirmation has the higher mean (110: half 60, half 160, standard
    error about 5.03) but fails the rule (110 - 2 x 5.03 < 100); the second (102 flat) meets
    it. best_model.pt must hold the second one's parameters: the model a solved run keeps is
    the one shown to score the target, not the unproven higher mean."""
    confirmations = [[60.0, 160.0] * 50, [102.0] * 100]
    seen: list[np.ndarray] = []

    def scheduled(policy, envs, seeds, deterministic=True, rng=None, stop=None, **_):
        if len(seeds) == 10:
            return [200.0] * 10  # every screen passes
        seen.append(params(policy.model))
        return confirmations[min(len(seen), 2) - 1]

    monkeypatch.setattr(evaluation, "play_episodes", scheduled)
    summary = asyncrl.train(
        backend="threads", target_return=100.0, run_dir=str(run_dir),
        **{**QUICK, "steps": 1_000_000},
    )  # fmt: skip
    evals = rows(run_dir)
    assert [float(r["mean"]) for r in evals] == [110.0, 102.0]
    assert summary["solved"] and summary["solve_steps"] == int(evals[1]["global_step"])
    assert (summary["best_eval_return"], summary["best_eval_step"]) == (
        102.0,
        summary["solve_steps"],
    )
    best = asyncrl.load(run_dir, "best")
    np.testing.assert_array_equal(params(best.model), seen[1])
    assert not np.array_equal(seen[0], seen[1])
    assert best.evaluation == {
        "global_step": summary["solve_steps"],
        "mean": 102.0,
        "episodes": 100,
    }


def test_no_confirmation_with_confirm_episodes_0(run_dir, monkeypatch):
    calls = []

    def scheduled(policy, envs, seeds, deterministic=True, rng=None, stop=None, **_):
        calls.append(len(seeds))
        return [200.0] * len(seeds)

    monkeypatch.setattr(evaluation, "play_episodes", scheduled)
    summary = asyncrl.train(
        backend="threads", target_return=100.0, confirm_episodes=0, run_dir=str(run_dir), **QUICK
    )
    assert calls == [10] and summary["solved"] and summary["best_eval_episodes"] == 10


def test_which_loads_the_file_it_names(run_dir, capsys):
    asyncrl.train(backend="threads", target_return=1e9, run_dir=str(run_dir), **QUICK)
    assert asyncrl.load(run_dir, "last").source.name == "model.pt"
    assert asyncrl.load(run_dir, "best").source.name == "best_model.pt"
    assert main(["eval", str(run_dir), "--episodes", "1", "--which", "last"]) == 0
    assert "model: model.pt (the final parameters)" in capsys.readouterr().out
    assert main(["eval", str(run_dir), "--episodes", "1"]) == 0
    assert "model: best_model.pt (the best evaluation: mean" in capsys.readouterr().out
    (run_dir / "best_model.pt").unlink()
    assert asyncrl.load(run_dir).source.name == "model.pt"  # the default falls back
    assert main(["eval", str(run_dir), "--which", "best"]) == 2
    err = capsys.readouterr().err
    assert "has no best_model.pt" in err and "--which last" in err and len(err.splitlines()) == 1


def test_stop_on_eval_stops_when_an_evaluation_reaches_the_target(run_dir, seed):
    """Measured (2026-11-24) on seeds 1-5 too (ASYNCRL_TEST_SEED=S)."""
    summary = asyncrl.train(
        backend="threads", workers=2, seed=seed, steps=500_000, eval_every=0, progress=False,
        run_dir=str(run_dir),
    )  # fmt: skip
    assert summary["solved"] and summary["stop_on"] == "eval"
    evals = rows(run_dir)
    # asked for by the training episodes' mean only: no evaluation before it reached 475
    assert float(evals[-1]["mean"]) >= 475.0 == summary["target_return"]
    assert int(evals[-1]["episodes"]) == 100  # the confirmation's
    assert summary["solve_steps"] == int(evals[-1]["global_step"])
    # the best model (the confirmation's parameters) on new starts: consistent with the
    # target within three standard errors, as a 100-episode mean of a policy whose true mean
    # is just over 475 falls under it close to half the time, and the rule passes one a little
    # under the target now and then (its false-pass bound): two standard errors proved too tight
    returns = asyncrl.evaluate(run_dir, episodes=100, seed=123)
    assert summary["best_eval_step"] == summary["solve_steps"]
    assert np.mean(returns) + 3 * np.std(returns, ddof=1) / 10 >= 475.0, (returns, evals)


def test_stop_on_train_is_the_training_episodes_rule(run_dir, seed):
    """Measured (2026-11-24) on seeds 1-5 too (ASYNCRL_TEST_SEED=S)."""
    summary = asyncrl.train(
        backend="threads", workers=2, seed=seed, steps=500_000, stop_on="train", progress=False,
        run_dir=str(run_dir),
    )  # fmt: skip
    # (the rolling mean at the stop: episodes under way then still count into the final one)
    assert summary["solved"] and summary["solve_return"] >= 475.0
    # evaluations went on every 25,000 steps whatever they scored; the final parameters last
    evals = rows(run_dir)
    assert summary["evaluations"] == len(evals) >= 1
    assert int(evals[-1]["global_step"]) == summary["total_steps"]


def test_a_solved_run_reports_the_mean_that_met_the_rule(tmp_path):
    # Hogwild: episodes under way at the stop still finish and enter the rolling mean, which
    # can fall back under the target; the summary and the CLI report the mean that stopped it
    cfg = asyncrl.Config(window=4, stop_on="train", tensorboard=False, progress=False)
    with Monitor(RunDir(tmp_path), cfg, target_return=100.0) as monitor:
        for step, ret in enumerate([90.0, 100.0, 110.0, 100.0], 1):
            reached = monitor.episode(0, Finished(ret, 10), step * 10)
        assert reached and monitor.solved and monitor.solve_steps == 40
        monitor.episode(1, Finished(20.0, 10), 50)  # the straggler
        assert monitor.rolling_return == pytest.approx(82.5)
        assert monitor.solve_return == pytest.approx(100.0)
        saved = monitor.state_dict()
    with Monitor(RunDir(tmp_path), cfg, target_return=100.0, state=saved) as resumed:
        assert resumed.solved and resumed.solve_return == pytest.approx(100.0)
    del saved["solve_return"]  # a checkpoint written before the field: not known
    with Monitor(RunDir(tmp_path), cfg, target_return=100.0, state=saved) as resumed:
        assert resumed.solved and resumed.solve_return is None


def test_a_resumed_run_fills_the_metrics_columns_its_first_run_named(tmp_path):
    cfg = asyncrl.Config(tensorboard=False, progress=False)
    stats = {"loss/entropy": (1.2, 2), "train/grad_norm": (3.0, 1)}
    with Monitor(RunDir(tmp_path), cfg, target_return=100.0) as monitor:
        monitor.add_stats(stats)
        monitor.write_metrics()
        saved = monitor.state_dict()
    with Monitor(RunDir(tmp_path), cfg, target_return=100.0, state=saved) as resumed:
        resumed.add_stats(stats)
        resumed.write_metrics()
    with open(tmp_path / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 and rows[0].keys() == rows[1].keys()
    for row in rows:  # every column filled after the resume as before it
        assert float(row["loss_entropy"]) == 0.6 and float(row["train_grad_norm"]) == 3.0
        assert float(row["train_learning_rate"]) > 0


def test_a_statistic_new_after_a_resume_extends_the_metrics_header(tmp_path):
    # --resume RUN --entropy-final B: the schedule's column did not exist in the first run
    stats = {"loss/entropy": (1.2, 2)}
    first = asyncrl.Config(tensorboard=False, progress=False, steps=1000)
    with Monitor(RunDir(tmp_path), first, target_return=100.0) as monitor:
        monitor.add_stats(stats)
        monitor.write_metrics()
        saved = monitor.state_dict()
    annealed = dataclasses.replace(first, entropy_final=0.0)
    with Monitor(RunDir(tmp_path), annealed, target_return=100.0, state=saved) as resumed:
        resumed.global_step = 500
        for _ in range(2):  # the second row finds the column in place
            resumed.add_stats(stats)
            resumed.write_metrics()
        resumed_state = resumed.state_dict()
    with open(tmp_path / "metrics.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0][-1] == "train_entropy_coef" and len(rows) == 4
    assert all(len(row) == len(rows[0]) for row in rows)
    assert rows[1][-1] == "" and float(rows[3][-1]) == pytest.approx(0.005)
    assert [float(row[rows[0].index("loss_entropy")]) for row in rows[1:]] == [0.6] * 3
    assert resumed_state["metrics_rows"] == 3
    # asyncrl plot draws the new column from where it starts, the old ones throughout
    series = metric_series(tmp_path / "metrics.csv")
    assert series["train_entropy_coef"] == ([500.0, 500.0], [0.005, 0.005])
    assert series["loss_entropy"][0] == [0.0, 500.0, 500.0]
    # resumed again from the first checkpoint, taken before the header grew (a run that died
    # before its next one): the row it counted is kept under the grown header, the later ones
    # go (a byte offset would cut the grown file inside its header), and new rows fit
    with Monitor(RunDir(tmp_path), annealed, target_return=100.0, state=saved) as again:
        again.global_step = 700
        again.add_stats(stats)
        again.write_metrics()
    with open(tmp_path / "metrics.csv", newline="") as f:
        rows_again = list(csv.reader(f))
    assert rows_again[:2] == rows[:2] and len(rows_again) == 3
    assert rows_again[2][0] == "700" and len(rows_again[2]) == len(rows[0])
    assert not (tmp_path / "metrics.csv.tmp").exists()


def test_plotting_a_running_runs_metrics_skips_the_row_being_written(tmp_path):
    # `asyncrl plot` mid-run can read the last row half written: a number cut short, or cells
    # past the header's count
    path = tmp_path / "metrics.csv"
    path.write_text(
        "global_step,wall_seconds,loss_entropy\n100,1.0,0.5\n200,2.0,0.4,9\n300,3.0,1.2e"
    )
    assert metric_series(path) == {"loss_entropy": ([100.0, 200.0], [0.5, 0.4])}


def test_a_checkpoint_that_gave_the_metrics_as_bytes_still_resumes(tmp_path):
    # checkpoints from before the row count held metrics.csv's byte offset alone
    cfg = asyncrl.Config(tensorboard=False, progress=False, steps=1000)
    with Monitor(RunDir(tmp_path), cfg, target_return=100.0) as monitor:
        monitor.add_stats({"loss/entropy": (1.2, 2)})
        monitor.write_metrics()
        old = {k: v for k, v in monitor.state_dict().items() if k != "metrics_rows"}
        old["metrics_bytes"] = (tmp_path / "metrics.csv").stat().st_size
        monitor.add_stats({"loss/entropy": (1.0, 2)})
        monitor.write_metrics()  # past the checkpoint: dropped on resume
    with Monitor(RunDir(tmp_path), cfg, target_return=100.0, state=old) as resumed:
        resumed.add_stats({"loss/entropy": (0.8, 2)})
        resumed.write_metrics()
    with open(tmp_path / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [row["loss_entropy"] for row in rows] == ["0.6", "0.4"]


def test_a_statistic_first_sent_mid_run_gets_a_column_too(tmp_path):
    cfg = asyncrl.Config(tensorboard=False, progress=False)
    with Monitor(RunDir(tmp_path), cfg, target_return=100.0) as monitor:
        monitor.add_stats({"loss/entropy": (1.2, 2)})
        monitor.write_metrics()
        monitor.add_stats({"loss/entropy": (1.0, 2), "train/policy_lag": (6.0, 2)})
        monitor.write_metrics()
    with open(tmp_path / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [row["train_policy_lag"] for row in rows] == ["", "3"]
    assert [row["loss_entropy"] for row in rows] == ["0.6", "0.5"]


def test_the_main_process_writes_its_models_on_one_thread_and_restores_the_callers(
    run_dir, monkeypatch
):
    # its default (a thread per core) oversubscribes the cores the workers fill: writing
    # best_model.pt once held the supervisor, and Ctrl-C, for over 100 s
    from asyncrl import trainer

    seen, save = [], trainer._save_params

    def counting(*args, **kwargs):
        seen.append(torch.get_num_threads())
        save(*args, **kwargs)

    monkeypatch.setattr(trainer, "_save_params", counting)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        asyncrl.train(backend="threads", target_return=1e9, run_dir=str(run_dir), **QUICK)
        assert torch.get_num_threads() == 2  # the caller's setting, back
    finally:
        torch.set_num_threads(before)
    assert len(seen) >= 2 and set(seen) == {1}  # best_model.pt (each best) and model.pt


def test_closing_the_evaluator_ends_the_evaluation_under_way():
    """close() ends an evaluation at its next step and joins its thread: left running into the
    interpreter's exit (an Atari evaluation takes a minute), the thread can be inside torch or
    the emulator as C++ tears down ("terminate called without an active exception" at the end
    of a run stopped by a signal). The episodes here never end, so only the stop ends them."""
    from asyncrl.algos import make_algorithm
    from asyncrl.envs import probe_env
    from asyncrl.messages import GlobalSnapshot
    from asyncrl.models import build_model, flatten_parameters
    from asyncrl.presets import preset

    env = "tests.envs_for_tests:asyncrl-test/Endless-v0"
    cfg = preset(None, env=env).validate()
    spec = spec_of(make_algorithm(cfg.algo, cfg, probe_env(env)))
    flat = flatten_parameters(build_model(spec)).detach().numpy().copy()
    snap = GlobalSnapshot(flat, {}, None, 0, np.zeros((3, 1), np.int64))
    ev = evaluation.Evaluator(spec, "a3c", env, {}, episodes=2, deterministic=True, seed=0)
    assert ev.submit(0, 0, 0.0, snap)
    time.sleep(1.0)  # under way by now (it would be ended the same before its first step)
    # a signal while the trainer waits for it: the wait gives up (a second Ctrl-C would
    # otherwise be the only way out, and lose the final checkpoint)
    asked = time.monotonic()
    assert ev.wait(give_up=lambda: time.monotonic() - asked > 0.5) == []
    assert time.monotonic() - asked < 5.0 and ev.busy
    ev.close()
    assert ev._thread is not None and not ev._thread.is_alive()
    assert ev.results() == []  # an evaluation that was stopped is no result


def test_no_evaluation_at_all_when_switched_off(run_dir):
    summary = asyncrl.train(
        backend="threads", target_return=1e9, run_dir=str(run_dir), **{**QUICK, "eval_every": 0},
        stop_on="train",
    )  # fmt: skip
    assert summary["evaluations"] == 0 and not (run_dir / "best_model.pt").exists()
    assert len(rows(run_dir)) == 0
    assert asyncrl.load(run_dir).source.name == "model.pt"


def test_evaluations_only_read_what_the_workers_learn(tmp_path):
    """An evaluation reads a snapshot of the global state and plays on envs of its own: one
    worker of the processes backend (deterministic) must end with the same parameters with
    evaluations as without, to the bit. (A3C took off later on Pong with evaluations on than
    off in one pair of runs; this rules out the evaluation touching the learning path: what
    is left is the share of the cores it takes.)"""
    final = {}
    for every in (1_000, 0):
        run_dir = tmp_path / f"every-{every}"
        summary = asyncrl.train(
            backend="processes", target_return=1e9, run_dir=str(run_dir),
            **{**QUICK, "eval_every": every}, stop_on="train" if every == 0 else "eval",
        )  # fmt: skip
        assert summary["evaluations"] == len(rows(run_dir))
        final[every] = torch.load(run_dir / "model.pt", weights_only=False)["state_dict"]
    # they did run, while the worker learned (and none in the other run)
    assert len(rows(tmp_path / "every-1000")) >= 2 and not rows(tmp_path / "every-0")
    assert final[1_000].keys() == final[0].keys()
    for k in final[0]:
        assert torch.equal(final[1_000][k], final[0][k]), k


def test_a_time_limit_ends_the_run_as_its_budget_does_and_evaluates_the_last(run_dir, capsys):
    """--time-limit ends a run as --steps does, not as a signal: the final parameters are
    evaluated (a 30-minute Atari run evaluates rarely: the best model was otherwise an early
    one), and the CLI says which budget ended it."""
    args = ["train", "--env", "CartPole-v1", "--workers", "1", "--backend", "threads"]
    args += ["--steps", "100000000", "--target-return", "1e9", "--eval-every", "0"]
    args += ["--time-limit", "3s", "--no-progress", "--run-dir", str(run_dir)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "not solved: time limit reached (" in out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["ended"] == "time_limit" and not summary["solved"]
    # training stopped its reserve before the limit (for the final evaluation and the kept
    # model's re-scoring: test_rescore.py), and the whole run ended within the limit's bound
    reserved = summary["time_reserved_seconds"]
    assert 0 < reserved <= 1.5 and summary["kept_model_planned_episodes"] == 100
    assert 3.0 - reserved <= summary["wall_seconds"] < 30.0
    assert summary["total_steps"] < 100_000_000
    evals = rows(run_dir)  # --eval-every 0: only the final parameters' evaluation
    assert len(evals) == 1 and int(evals[0]["global_step"]) == summary["total_steps"]
    assert asyncrl.load(run_dir).source.name == "best_model.pt"
    # more time for a run that ended on its time: its clock goes on from where it stopped
    assert main(["train", "--resume", str(run_dir), "--time-limit", "6s", "--no-progress"]) == 0
    more = json.loads((run_dir / "summary.json").read_text())
    assert more["resumed"] and more["ended"] == "time_limit"
    assert 6.0 - more["time_reserved_seconds"] <= more["wall_seconds"] < 40.0
    assert more["total_steps"] > summary["total_steps"]


def test_a_resumed_run_keeps_its_best_model_and_its_evaluations(tmp_path, monkeypatch):
    monkeypatch.setenv("FAULT_DIR", str(tmp_path))  # where the fault notes it fired (once)
    run_dir = tmp_path / "run"
    env = "asyncrl-test/CartPole-sigint-main-v0"  # SIGINT to the main process at env step 700
    cfg = dict(QUICK, backend="threads", env=env, target_return=1e9)
    cfg |= dict(steps=24_000, eval_every=3_000)  # each of the 16 envs reaches step 700
    with pytest.raises(Interrupted):
        asyncrl.train(**cfg, run_dir=str(run_dir))
    before = rows(run_dir)
    # (one still under way at the signal is not waited for: its index is skipped)
    ckpt = load_checkpoint(run_dir)
    assert ckpt["monitor"]["evaluations"] >= len(before) >= 1
    # the time plan's measured seconds of an episode, the kept model's too (asyncrl.rescore)
    assert ckpt["plan"]["per_episode"] > 0 and ckpt["plan"]["kept_per_episode"] > 0
    assert (run_dir / "best_model.pt").exists()
    best_before = torch.load(run_dir / "best_model.pt", weights_only=True)["evaluation"]
    summary = asyncrl.train(resume=run_dir)
    after = rows(run_dir)
    # the history goes on from the checkpoint: its rows kept, indices never repeat
    assert after[: len(before)] == before
    indices = [int(r["evaluation"]) for r in after]
    assert indices == sorted(set(indices)) and len(after) > len(before)
    best_after = torch.load(run_dir / "best_model.pt", weights_only=True)["evaluation"]
    if all(r["kept"] == "0" for r in after[len(before) :]):  # none kept since the resume
        assert best_after == best_before
    assert_the_kept_model_is_the_rows(after, best_after, summary)


def test_a_resume_never_replaces_a_best_model_newer_than_its_checkpoint(run_dir):
    """A run that crashed or diverged after its last checkpoint can leave a best_model.pt
    newer than the best the checkpoint knows (of a later step): the resumed run keeps it, and
    its score, until an evaluation beats it."""
    cfg = dict(QUICK, backend="threads", target_return=1e9, run_dir=str(run_dir))
    asyncrl.train(**cfg)
    path = run_dir / "best_model.pt"
    blob = torch.load(path, weights_only=True)
    # as an evaluation after the checkpoint would have written it (no episode scores 1e6)
    blob["evaluation"] = {"global_step": 7_000, "mean": 1e6, "episodes": 10}
    torch.save(blob, path)
    summary = asyncrl.train(resume=run_dir, steps=10_000)
    assert summary["evaluations"] > QUICK["steps"] // QUICK["eval_every"] + 1  # it evaluated
    assert torch.load(path, weights_only=True)["evaluation"]["mean"] == 1e6
    assert summary["best_eval_return"] == 1e6


def test_evaluation_seeds_differ_between_evaluations_and_repeat_with_the_seed():
    a, b = eval_seeds(0, 0, 10), eval_seeds(0, 1, 10)
    assert len(set(a)) == 10 and not set(a) & set(b)
    assert eval_seeds(0, 1, 10) == b and eval_seeds(1, 1, 10) != b


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--eval-episodes", "0"], "--eval-episodes"),
        (["--eval-every", "-1"], "--eval-every"),
        (["--confirm-episodes", "-1"], "--confirm-episodes"),
        (["--confirm-stderr", "-1"], "--confirm-stderr"),
        (["--algo", "nstep-q", "--eval-stochastic"], "--eval-stochastic"),
    ],
)
def test_bad_evaluation_options_are_one_line(args, flag, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", "--run-dir", str(run_dir), *args]) == 2
    err = capsys.readouterr().err
    assert flag in err and len(err.strip().splitlines()) == 1 and not run_dir.exists()


def test_which_refuses_a_bad_name(run_dir):
    asyncrl.train(backend="threads", target_return=1e9, run_dir=str(run_dir), **QUICK)
    with pytest.raises(UserError, match="--which"):
        asyncrl.load(run_dir, "first")  # type: ignore[arg-type]


@pytest.mark.parametrize("delay", [0.0, 0.5])
def test_a_failing_evaluation_is_one_line_and_the_run_goes_on(run_dir, monkeypatch, capsys, delay):
    """Also when it fails only after the next one fell due (delay: more than --eval-every
    steps pass while it runs)."""
    import asyncrl.envs

    def broken(*a, **k):
        time.sleep(delay)
        raise RuntimeError("no display here")

    monkeypatch.setattr(asyncrl.envs, "make_eval_vec_env", broken)
    quick = {**QUICK, "eval_every": 200} if delay else QUICK
    summary = asyncrl.train(backend="threads", target_return=1e9, run_dir=str(run_dir), **quick)
    assert summary["total_steps"] >= QUICK["steps"] and summary["evaluations"] == 1
    err = capsys.readouterr().err
    assert "evaluation 0 failed (no display here); the run goes on without evaluations" in err
    assert rows(run_dir) == [] and not (run_dir / "best_model.pt").exists()
    # and the kept model's re-scoring, whose envs are built here too
    assert "re-scoring the kept model failed (no display here)" in err
    assert summary["kept_model_return"] is None
    assert summary["kept_model_error"] == "no display here"


class FakeRun:
    """A run for the supervisor's tests: one worker at the step a test sets; no state."""

    workers, step = 1, 0

    def global_step(self):
        return self.step

    def checkpoint_state(self, _):
        return None


@pytest.mark.parametrize("core", ["none", "lstm"])
def test_a_wave_steps_only_the_envs_still_in_their_episode(core):
    """Separate envs (Atari's evaluation envs are): an ended episode's env is not stepped on
    while the wave's longest episode goes on (a Pong wave can last 108,000 frames for one
    stalled game). The returns are each seed's episode played alone, waves and all: with a
    recurrent core, each env's state moves only with its own steps."""
    import gymnasium as gym

    from asyncrl.algos import make_algorithm
    from asyncrl.envs import probe_env
    from asyncrl.models import build_model
    from asyncrl.policy import Policy, play_episodes
    from asyncrl.presets import preset

    class Counted(gym.Wrapper):
        steps = 0

        def step(self, action):
            Counted.steps += 1
            return super().step(action)

    cfg = preset(None, env="CartPole-v1", seed=0, core=core).validate()
    spec = spec_of(make_algorithm(cfg.algo, cfg, probe_env(cfg.env)))
    torch.manual_seed(3)
    policy = Policy(build_model(spec), "a3c", spec, cfg.env)
    seeds = [11, 12, 13, 14, 15, 16]  # a wave of 4, then one of 2 beside 2 spare envs
    envs = gym.vector.SyncVectorEnv([lambda: Counted(gym.make("CartPole-v1"))] * 4)
    returns = play_episodes(policy, envs, seeds)
    envs.close()
    alone = []
    for s in seeds:
        env = gym.make("CartPole-v1")
        obs, _ = env.reset(seed=s)
        policy.reset()
        total, done = 0.0, False
        while not done:
            obs, r, term, trunc, _ = env.step(policy.act(obs))
            total, done = total + float(r), term or trunc
        alone.append(total)
    assert returns == alone and len(set(returns)) > 1  # episodes of different lengths
    # CartPole pays 1 a step: every step was a live episode's (the spare envs of the second
    # wave included: never stepped)
    assert Counted.steps == sum(returns)


def test_the_default_schedule_keeps_the_screens_within_their_share_of_the_run(tmp_path):
    """By default an evaluation is due every twentieth of --steps once the screens so far are
    within EVAL_SHARE of the run's time so far: counted over the run, so a long screen delays
    the next only until the run has caught up with it (paced on the last screen alone, one
    40-second Pong screen held the next back 33 minutes). A confirmation's seconds do not
    count, and a given --eval-every is paced on the steps alone. The count is in the
    checkpoint, so a resumed run goes on with it."""
    from asyncrl.supervisor import EVAL_SHARE, Supervisor

    class FakeEvaluator:
        busy = False

        def __init__(self):
            self.asked, self.done = [], []

        def submit(self, index, step, wall, snap, within=None):
            self.asked.append(step)
            return True

        def results(self):
            out, self.done = self.done, []
            return out

        def keep(self, snap):
            pass

    def finished(step, screen, confirmed=False, seconds=None):
        returns = (0.0,) * (100 if confirmed else 10)
        return evaluation.Evaluation(
            len(ev.asked) - 1, step, 0.0, returns, seconds or screen, None, None, confirmed, screen
        )

    def tick(step, at):
        run.step, clock[0] = step, at
        sup.maybe_evaluate()

    clock = [0.0]
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    cfg = asyncrl.Config(progress=False, tensorboard=False, steps=2_000)  # every 100 steps
    run, ev = FakeRun(), FakeEvaluator()
    with Monitor(RunDir(tmp_path / "a"), cfg, target_return=None) as monitor:
        monitor.elapsed = lambda: clock[0]  # type: ignore[method-assign]
        sup = Supervisor(cfg, run, monitor, lambda *a: None, evaluator=ev)  # type: ignore[arg-type]
        tick(99, 10.0)
        assert ev.asked == []  # not yet a twentieth of the steps
        tick(100, 10.0)
        assert ev.asked == [100]
        ev.done = [finished(100, screen=10.0)]  # 10 s of screen at 10 s of run: 100%
        tick(200, 10.0 / EVAL_SHARE - 1.0)
        assert ev.asked == [100]  # the steps are due, the share is not
        tick(200, 10.0 / EVAL_SHARE)
        assert ev.asked == [100, 200]
        # a confirmation's 100 episodes cost what the stop rule costs: its screen alone counts
        ev.done = [finished(200, screen=5.0, confirmed=True, seconds=300.0)]
        tick(300, 15.0 / EVAL_SHARE)
        assert ev.asked == [100, 200, 300] and monitor.screen_seconds == 15.0
        state = monitor.state_dict()
    with Monitor(RunDir(tmp_path / "a"), cfg, target_return=None, state=state) as monitor:
        assert monitor.screen_seconds == 15.0  # a resumed run goes on with the count
    # --eval-every given: the steps alone, however long the screens
    cfg = asyncrl.Config(progress=False, tensorboard=False, steps=2_000, eval_every=100)
    run, ev = FakeRun(), FakeEvaluator()
    with Monitor(RunDir(tmp_path / "b"), cfg, target_return=None) as monitor:
        monitor.elapsed = lambda: clock[0]  # type: ignore[method-assign]
        sup = Supervisor(cfg, run, monitor, lambda *a: None, evaluator=ev)  # type: ignore[arg-type]
        tick(100, 1.0)
        ev.done = [finished(100, screen=60.0)]
        tick(200, 2.0)
        assert ev.asked == [100, 200]


def _false_pass_rate(margin_of_try, runs=2000, tries=50, seed=0):
    """The share of simulated runs whose policy is exactly at the target (returns normal about
    it) that the stop rule stops: each try a screen of 10 episodes, and where its mean reaches
    the target a confirmation of 100 new ones, judged at the margin ``margin_of_try(k)`` of the
    run's k-th confirmation. The runs are simulated together (numpy), and the first hundred
    confirmations are judged by :meth:`Evaluation.reaches` too, which must agree: the rule is
    the library's, not a copy of it."""
    rng = np.random.default_rng(seed)
    target, spread = 18.0, 3.0
    screened = rng.normal(target, spread, (runs, tries, 10)).mean(axis=2) >= target
    k = np.cumsum(screened, axis=1)  # a screen that reaches the target is the k-th try
    margins = np.array([margin_of_try(i) for i in range(1, tries + 1)])
    passed = np.zeros((runs, tries), dtype=bool)
    judged = 0
    for t in range(tries):  # one try of every run at a time: (runs, 100) episodes in memory
        returns = rng.normal(target, spread, (runs, 100))
        margin = margins[np.maximum(k[:, t], 1) - 1]
        mean, stderr = returns.mean(axis=1), returns.std(axis=1, ddof=1) / 10.0
        passed[:, t] = screened[:, t] & (mean - margin * stderr >= target)
        for run in np.flatnonzero(screened[:, t])[: max(0, 100 - judged)]:
            ev = evaluation.Evaluation(
                int(k[run, t]), 0, 0.0, tuple(returns[run]), 0.0, confirmed=True
            )
            assert ev.reaches(target, float(margin[run])) == passed[run, t]
            judged += 1
    assert judged == 100
    return float(passed.any(axis=1).mean())


def test_the_stop_rules_false_pass_probability_stays_under_5_percent_however_often_it_tries():
    """A policy exactly at the target, given 50 tries (a long run's evaluations): with the
    margin growing from --confirm-stderr's 2 (evaluation.confirm_margin) the rule stops at
    most 5% of such runs; a fixed margin of 2 stops far more of them, which is what the
    growing margin is for."""
    growing = _false_pass_rate(lambda k: evaluation.confirm_margin(k, 2.0))
    fixed = _false_pass_rate(lambda k: 2.0)
    assert growing <= 0.05, growing
    assert fixed > 0.2, fixed
    # each later margin is larger than the last
    margins = [evaluation.confirm_margin(k, 2.0) for k in range(1, 100)]
    assert margins[0] == 2.0 and all(a < b for a, b in itertools.pairwise(margins))


def test_the_supervisor_asks_each_later_try_of_the_stop_rule_for_a_larger_margin(tmp_path):
    """Two confirmations with the same mean, 2.2 standard errors over the target: the first
    try (margin 2) would stop the run, the second (margin 2.53) does not; a resumed run goes
    on counting its tries."""
    from asyncrl.supervisor import Supervisor

    returns = tuple(np.tile([-1.0, 1.0], 50))  # mean 0, standard error ~0.1005
    shift = 20.0 + 2.2 * evaluation.Evaluation(0, 0, 0.0, returns, 0.0).stderr
    confirmation = evaluation.Evaluation(
        0, 10, 0.0, tuple(r + shift for r in returns), 0.0, confirmed=True
    )
    cfg = asyncrl.Config(progress=False, tensorboard=False)
    ended = []
    with Monitor(RunDir(tmp_path), cfg, target_return=20.0) as monitor:
        sup = Supervisor(cfg, FakeRun(), monitor, lambda *a: None)  # type: ignore[arg-type]
        sup.end = ended.append  # type: ignore[method-assign]
        monitor.tries = 1  # one try already made
        sup.evaluated(confirmation)
        assert monitor.tries == 2 and not monitor.solved and ended == []
        state = monitor.state_dict()
    with Monitor(RunDir(tmp_path), cfg, target_return=20.0, state=state) as monitor:
        assert monitor.tries == 2
        sup = Supervisor(cfg, FakeRun(), monitor, lambda *a: None)  # type: ignore[arg-type]
        sup.end = ended.append  # type: ignore[method-assign]
        monitor.tries = 0  # the same confirmation as a run's first try stops it
        sup.evaluated(confirmation)
        assert monitor.tries == 1 and monitor.solved and len(ended) == 1
