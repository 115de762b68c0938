"""Atari-5 (benchmarks/atari5.py and the atari-5 suite): the regression against hand-worked and
published numbers, its fit and cross-validated error, the bootstrap over seeds, and the line
``python benchmarks/suite.py atari-5 --report-only`` prints from a store."""

import dataclasses
import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import atari5
import store
import suite

GAMES = ("BattleZone", "DoubleDunk", "NameThisGame", "Phoenix", "Qbert")
#: DQN Zoo's random and human scores (dqn_zoo/atari_data.py), as transcribed into suites.toml
DQN_ZOO = {
    "BattleZone": (2360.0, 37187.5),
    "DoubleDunk": (-18.6, -16.4),
    "NameThisGame": (2292.3, 8049.0),
    "Phoenix": (761.4, 7242.6),
    "Qbert": (163.9, 13455.0),
}
PLAN = suite.PLANS["atari-5"]
ATARI5 = PLAN.regressions[0]


def test_the_estimate_of_play_at_the_human_testers_level_is_hand_worked():
    """At 100% on every game, log10(1 + m) = sum(w) log10(101): the weights sum to 0.96530,
    so m = 101^0.96530 - 1 = 85.05%, not 100% (the weights need not sum to 1: no intercept)."""
    human = {g: 100.0 for g in GAMES}
    assert sum(ATARI5.weights) == pytest.approx(0.96530, abs=1e-5)
    assert atari5.estimate(ATARI5, human) == pytest.approx(85.054, abs=1e-3)
    # random play is 0%; a game below random counts as random, not as a negative score
    assert atari5.estimate(ATARI5, {g: 0.0 for g in GAMES}) == pytest.approx(0.0, abs=1e-12)
    below = {**human, "DoubleDunk": -300.0}
    only_dd = atari5.estimate(ATARI5, {**human, "DoubleDunk": 0.0})
    assert atari5.estimate(ATARI5, below) == pytest.approx(only_dd)
    # element-wise over arrays (a bootstrap's resamples in one call)
    both = atari5.estimate(ATARI5, {g: np.array([0.0, 100.0]) for g in GAMES})
    assert both == pytest.approx([0.0, 85.054], abs=1e-3)
    # raw scores through DQN Zoo's: Q*bert's 6,809.45 is halfway from 163.9 to 13,455
    assert atari5.normalised(6809.45, 163.9, 13455.0) == pytest.approx(50.0)


def test_a_published_algorithms_five_scores_estimate_its_57_game_median():
    """Rainbow's five scores with no-op starts (Hessel et al. 2018, the appendix's table)
    against the 57-game median that paper reports, 223%: within the regression's
    cross-validated error (10.4%)."""
    rainbow = {"BattleZone": 62010.0, "DoubleDunk": -0.3, "NameThisGame": 13136.0,
               "Phoenix": 108528.6, "Qbert": 33817.5}  # fmt: skip
    got = atari5.from_raw(ATARI5, rainbow, DQN_ZOO)
    assert abs(got - 223.0) / 223.0 < ATARI5.error / 100
    # (225.1% with the paper's own random score of Double Dunk, -18.55 where DQN Zoo's is -18.6)
    assert got == pytest.approx(224.8, abs=0.05)


def test_the_suite_is_the_users_command_on_five_games_with_dqn_zoos_scores(tmp_path):
    """Each game's hour is `asyncrl train --env GAME --time-limit 60m` with nothing else (no
    stop rule: the target is the report's bar, the A3C paper's 1-day score), seeds 0-2 by
    default; the bars' scores are the tasks' targets and the regression's games the tasks'."""
    tasks = suite.SUITES["atari-5"]
    assert [t.game for t in tasks] == list(GAMES) == list(ATARI5.games)
    assert suite.SEEDS["atari-5"] == 3
    for t in tasks:
        cmd = suite.command(t, 1, tmp_path / "run")
        train = ["train", "--env", f"{t.game}NoFrameskip-v4", "--seed", "1", "--run-dir",
                 str(tmp_path / "run"), "--no-progress", "--time-limit", "60m"]  # fmt: skip
        assert cmd[:4] == ["timeout", "-s", "INT", "3900"] and cmd[-len(train) :] == train
        assert t.human == DQN_ZOO[t.game] and t.limit == 3600.0 and t.timed
        assert t.target == PLAN.bars[0].scores[t.game] and t.eval_episodes == 10
    # the partial estimates' subsets are Atari-5's games
    assert all(set(r.games) <= set(GAMES) for r in PLAN.regressions)


def test_the_fit_recovers_exact_coefficients_and_its_error_is_hand_worked():
    rng = np.random.default_rng(0)
    x = rng.uniform(0.0, 3.0, size=(40, 5))
    w = np.array([0.38, 0.07, 0.31, 0.12, 0.08])
    assert atari5.fit(x, x @ w) == pytest.approx(w)
    assert atari5.cv_error(x, x @ w) == pytest.approx(0.0, abs=1e-9)
    # the error: the mean over folds of the mean absolute error in log10, as percent (ln 10
    # x 100). Ten rows are ten folds of one, whatever the shuffle: with a column of ones the
    # fit is the mean of the other nine, 0 for the row at 0.9 (error 0.9), 0.1 for the rows at
    # 0 (error 0.1): (0.9 + 9 x 0.1) / 10 = 0.18, 41.45%
    y = np.array([0.0] * 9 + [0.9])
    assert atari5.cv_error(np.ones((10, 1)), y) == pytest.approx(0.18 * np.log(10) * 100)


def test_extract_keeps_the_median_of_the_57_and_the_subsets_games(tmp_path):
    """Atari-5's dataset.csv: one row per algorithm and game; a pair given twice keeps its
    last row (the repository's dict does), rows outside the 57 are left out."""
    up = tmp_path / "dataset.csv"
    up.write_text(
        ",Algorithm,Game,Normalized,In57\n"
        "0,A,battlezone,10.0,True\n1,A,qbert,30.0,True\n2,A,pong,50.0,True\n"
        "3,A,qbert,40.0,True\n4,A,pooyan,9999.0,False\n5,B,pong,5.0,True\n"
    )
    out = tmp_path / "data.csv"
    assert atari5.extract(up, ["BattleZone", "Qbert"], out) == 2
    assert out.read_text().startswith(f"# from maitchison/Atari-5 at {atari5.SOURCE_COMMIT}")
    names, median, cols = atari5.read_data(out)
    assert names == ["A", "B"] and median.tolist() == [40.0, 5.0]  # A: 10, 40, 50
    assert cols["Qbert"][0] == 40.0 and np.isnan(cols["Qbert"][1])


@pytest.mark.skipif(
    not atari5.DATA.is_file(),
    reason="no benchmarks/atari5_data.csv (untracked): python benchmarks/atari5.py extract "
    "PATH/TO/Atari-5/dataset.csv (maitchison/Atari-5 at 118cad5)",
)
def test_the_fit_reproduces_the_published_coefficients_from_the_papers_data():
    """Fitted from Atari-5's dataset.csv, each subset gives the coefficients suites.toml holds
    (the authors' published ones) to rounding, and the paper's cross-validated error."""
    names, median, cols = atari5.read_data()
    for reg in PLAN.regressions:
        w, _, err = atari5.fit_subset(reg, names, median, cols)
        assert w == pytest.approx(reg.weights, abs=1e-12), reg.name
        assert round(err, 1) == reg.error, reg.name
    assert atari5.fit_subset(ATARI5, names, median, cols)[1] == 44


def runs(scores: dict[str, list[float]], seeds=(0, 1, 2), task_suffix="NoFrameskip-v4") -> list:
    """Rows of the store for these games' runs: the mean of the last 100 games per seed, the
    kept model's evaluation 10% above it."""
    out = []
    for game, values in scores.items():
        for seed, v in zip(seeds, values, strict=False):
            out.append({
                "suite": "atari-5", "batch": "", "task": f"{game}{task_suffix}", "seed": seed,
                "target": 0.0, "solved": False, "solve_seconds": None, "solve_steps": None,
                "total_steps": 100, "process_seconds": 3600.0, "model": "model.pt",
                "final_eval": v * 1.1, "final_train_mean": v, "curve_steps": [0, 100],
                "curve": [None, v], "curve_seconds": [0.0, 1800.0, 3600.0],
                "curve_by_time": [None, v / 2, v],
            })  # fmt: skip
    return out


def at(fractions: list[float]) -> dict[str, list[float]]:
    """Raw scores at these fractions of the way from random to human on every game."""
    return {g: [r + f * (h - r) for f in fractions] for g, (r, h) in DQN_ZOO.items()}


def report_only(tmp_path, monkeypatch, capsys, rows, *extra) -> str:
    path = tmp_path / "results.jsonl"
    path.unlink(missing_ok=True)
    for r in rows:
        store.append(path, r)
    argv = ["suite.py", "atari-5", "--report-only", "--store", str(path)]
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(tmp_path / "out"), *extra])
    suite.main()
    return capsys.readouterr().out.strip().splitlines()[-1]


LINE = re.compile(
    r"Atari-5 median estimate(?: \(PARTIAL: (?P<why>.*)\))?: (?P<v>[\d.]+)% \(95% CI "
    r"(?P<lo>[\d.]+)-(?P<hi>[\d.]+)% over seeds; (?P<runs>.*); the regression's own error "
    r"about (?P<err>[\d.]+)%\)"
)


def test_the_report_only_line_from_a_store_full_partial_or_none(tmp_path, monkeypatch, capsys):
    # every game at 50%, 100% and 200% of the human tester's: medians at 100%, so 85.1%
    line = report_only(tmp_path, monkeypatch, capsys, runs(at([0.5, 1.0, 2.0])))
    m = LINE.fullmatch(line)
    assert m, line
    assert m["why"] is None and m["v"] == "85.1" and m["err"] == "10.4"
    assert m["runs"] == "15 runs: 5 games x 3 seeds"
    assert float(m["lo"]) < 85.1 < float(m["hi"])
    report = (tmp_path / "out" / "suite-atari-5.md").read_text()
    assert f"**{line}**" in report and "| Qbert | 0.080 | " in report
    assert "| 100.0% | 3 / 3 | 13,752.3 | yes |" in report  # Q*bert's median under A3C's
    assert (tmp_path / "out" / "suite-atari-5-estimate.png").is_file()
    # the runs' re-scorings of their kept models: one the limit cut short is said so (one
    # recorded as cut, one from before the store recorded it, of fewer games than 100)
    rows = runs(at([0.5, 1.0, 2.0]))
    for r, (ret, n, cut) in zip(rows[:3], ((1.0, 100, False), (-24.0, 1, True), (2.0, 32, None)),
                                strict=True):  # fmt: skip
        r |= {"kept_model_return": ret, "kept_model_episodes": n, "kept_model_cut_short": cut}
    report_only(tmp_path, monkeypatch, capsys, rows)
    report = (tmp_path / "out" / "suite-atari-5.md").read_text()
    assert "| 1.0 (2 of 3 cut short) |" in report, report
    # (one cut at 0 games has no return, and is counted all the same)
    rows[3] |= {"kept_model_return": None, "kept_model_episodes": 0, "kept_model_cut_short": True}
    report_only(tmp_path, monkeypatch, capsys, rows)
    report = (tmp_path / "out" / "suite-atari-5.md").read_text()
    assert "| - (1 of 1 cut short) |" in report, report
    # Phoenix without seed 2: the rest, marked
    rows = [r for r in runs(at([0.5, 1.0, 2.0])) if (r["task"], r["seed"]) != (
        "PhoenixNoFrameskip-v4", 2)]  # fmt: skip
    m = LINE.fullmatch(report_only(tmp_path, monkeypatch, capsys, rows))
    assert m and m["why"] == "Phoenix lacks seed 2" and m["runs"] == "14 runs"
    # no runs of Double Dunk or Q*bert: Atari-3 from Battle Zone, Name This Game and Phoenix
    rows = [r for r in runs(at([1.0, 1.0, 1.0])) if not r["task"].startswith(("Do", "Qb"))]
    m = LINE.fullmatch(report_only(tmp_path, monkeypatch, capsys, rows))
    assert m and m["why"] == "no runs of DoubleDunk, Qbert: by Atari-3" and m["err"] == "13.7"
    assert m["runs"] == "9 runs" and m["lo"] == m["v"] == m["hi"]  # no spread over seeds
    # Q*bert alone: no published subset
    rows = [r for r in runs(at([1.0])) if r["task"].startswith("Qb")]
    line = report_only(tmp_path, monkeypatch, capsys, rows)
    assert line == (
        "Atari-5 median estimate: cannot be estimated (no runs of BattleZone, DoubleDunk, "
        "NameThisGame, Phoenix)"
    )


def test_the_bootstrap_interval_over_seeds_holds_the_estimate_and_widens_with_spread():
    plan, human = PLAN, DQN_ZOO

    def result(fractions):
        scores = {g: dict(enumerate(v)) for g, v in at(fractions).items()}
        return atari5.from_runs(plan, human, scores, seeds=len(fractions))

    tight, wide = result([0.9, 1.0, 1.1]), result([0.2, 1.0, 5.0])
    for r in (tight, wide):
        assert r.low <= r.value <= r.high and not r.partial and r.runs == 15
    assert tight.value == pytest.approx(wide.value)  # the same medians
    assert wide.high - wide.low > tight.high - tight.low > 0
    again = result([0.2, 1.0, 5.0])
    assert (again.low, again.high) == (wide.low, wide.high)  # reproducible
    same = result([1.0, 1.0, 1.0])
    assert same.low == pytest.approx(same.value) == pytest.approx(same.high)


def test_qberts_earlier_hours_are_reused_while_the_settings_are_unchanged(
    tmp_path, monkeypatch, capsys
):
    """atari5-lr-hold-time's Q*bert rows stand for the suite's Q*bert, said so, and count as
    run; not where the settings' digest has changed, nor with --no-reuse."""
    (ru,) = PLAN.reuse
    earlier = [{**r, "suite": ru.suite, "batch": ru.batch}
               for r in runs(at([0.5, 1.0, 2.0])) if r["task"] == ru.task]  # fmt: skip
    others = [r for r in runs(at([0.5, 1.0, 2.0])) if r["task"] != ru.task]
    monkeypatch.setattr(suite, "settings_digest", lambda task: ru.settings)
    line = report_only(tmp_path, monkeypatch, capsys, others + earlier)
    assert LINE.fullmatch(line)["runs"] == "15 runs, 3 of them reused: 5 games x 3 seeds"
    report = (tmp_path / "out" / "suite-atari-5.md").read_text()
    assert f"seeds 0, 1, 2 reused from suite {ru.suite} (batch {ru.batch})" in report
    assert f"reused from suite {ru.suite}" in report.split("Per seed")[1]  # each seed's row
    # the run loop takes them as run: only the games without runs train
    ran = []

    def fake_run(task, seed, speed=None):
        ran.append((task.name, seed))
        return runs({task.game: [1.0]}, seeds=(seed,))[0]

    monkeypatch.setattr(suite, "run_one", fake_run)
    path = tmp_path / "results.jsonl"
    argv = ["suite.py", "atari-5", "--store", str(path), "--out", str(tmp_path / "out")]
    monkeypatch.setattr(sys, "argv", [*argv, "--no-speed"])
    suite.main()
    assert ran == []  # the four other games' seeds are in the store, Q*bert's reused
    monkeypatch.setattr(sys, "argv", [*argv, "--no-speed", "--no-reuse"])
    suite.main()
    assert ran == [(ru.task, 0), (ru.task, 1), (ru.task, 2)]
    # settings changed since the reuse was checked: the earlier rows are not taken
    monkeypatch.setattr(suite, "settings_digest", lambda task: "0" * 12)
    line = report_only(tmp_path, monkeypatch, capsys, others + earlier)
    assert LINE.fullmatch(line)["why"] == "no runs of Qbert: by Atari-3"
    report = (tmp_path / "out" / "suite-atari-5.md").read_text()
    assert "are not reused: the settings of this suite's command have changed" in report


def test_the_reused_qbert_command_resolves_to_the_suites_settings(tmp_path):
    """atari5-lr-hold-time's Q*bert command (as its rows record it) gave by hand the rate
    schedule that --time-limit 60m alone picks: every setting is the suite's but the
    evaluation schedule and the step budget (and the limit's spelling)."""
    pytest.importorskip("ale_py")
    from asyncrl.cli import build_parser, resolve

    (ru,) = PLAN.reuse
    rows = store.select(store.read(store.STORE), ru.suite, ru.batch, ru.task)
    assert [r["seed"] for r in rows] == [0, 1, 2]
    ours = next(t for t in suite.SUITES["atari-5"] if t.name == ru.task)
    configs = []
    for cmd in (rows[0]["command"].split(), suite.command(ours, 0, Path("RUN_DIR"))):
        cfg, _ = resolve(build_parser().parse_args(cmd[cmd.index("train") :]))
        configs.append(cfg)
    theirs, mine = configs
    assert theirs.time_limit_seconds() == mine.time_limit_seconds() == 3600.0
    assert (mine.lr_schedule, mine.lr_anneal_over, mine.lr_anneal_from) == ("linear", "time", 0.5)
    a, b = dataclasses.asdict(theirs), dataclasses.asdict(mine)
    differ = {k for k in b if a[k] != b[k]}
    assert differ == {"eval_every", "steps", "target_return", "time_limit"}


def test_the_docs_page_gives_the_estimate_line_and_the_runs_reused(tmp_path, monkeypatch):
    """docs/benchmarks.md names the suite before it has runs of its own: its line from what
    the store holds, Q*bert's reused runs, and a page of them."""
    (ru,) = PLAN.reuse
    path = tmp_path / "results.jsonl"
    for r in runs(at([0.5, 1.0, 2.0])):
        if r["task"] == ru.task:
            store.append(path, {**r, "suite": ru.suite, "batch": ru.batch})
    monkeypatch.setattr(suite, "settings_digest", lambda task: ru.settings)
    pages = suite.write_docs(store.read(path), tmp_path / "docs")
    assert [p.name for p in pages] == ["benchmarks.md", f"suite-{ru.suite}.md", "suite-atari-5.md"]
    page = pages[0].read_text()
    assert "| [atari-5](#atari-5) | " in page and "| 5 | none yet; 3 reused |" in page
    line = "Atari-5 median estimate: cannot be estimated (no runs of BattleZone, DoubleDunk, "
    assert "## atari-5\n" in page and f"**{line}" in page
    assert f"- {ru.task}: seeds 0, 1, 2 reused from suite {ru.suite}" in page
    assert "[Atari-5](atari.md#atari-5)" in page
