"""The benchmark suite's statistics against hand-worked numbers, its resume, and the results
store it appends to and its reports are generated from."""

import csv
import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import store
import suite


def test_iqm_is_the_mean_of_the_middle_half():
    # sorted 1..8: the middle half is 3, 4, 5, 6
    assert suite.iqm(np.array([8, 1, 7, 2, 6, 3, 5, 4], dtype=float)) == pytest.approx(4.5)
    # an outlier in the outer quarters does not move it
    assert suite.iqm(np.array([-1000, 3, 4, 5, 6, 10**6, 2, 7], dtype=float)) == pytest.approx(4.5)


def test_the_bootstrap_interval_holds_the_statistic_and_is_a_point_without_spread():
    x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    lo, hi = suite.interval(x)
    assert lo < suite.iqm(np.asarray(x)) < hi and lo >= 1.0 and hi <= 10.0
    assert suite.interval([500.0] * 5) == (500.0, 500.0)
    assert suite.interval(x, seed=0) == suite.interval(x, seed=0)  # reproducible


def test_the_curve_is_the_rolling_mean_at_each_grid_step(tmp_path):
    csv = tmp_path / "episodes.csv"
    rows = ["episode,worker,return,length,global_step,wall_seconds"]
    # returns 1, 2, 3, 4 ending at steps 10, 20, 30, 40
    rows += [f"{i + 1},0,{i + 1},10,{10 * (i + 1)},0.0" for i in range(4)]
    csv.write_text("\n".join(rows) + "\n")
    got = suite.curve(csv, np.array([5, 10, 25, 40]), window=2)
    # no episode yet; mean of (1); mean of (1, 2); mean of (3, 4)
    assert got == [None, 1.0, 1.5, 3.5]
    # by the run's wall time: the same episodes ending at 0.5, 1.0, 1.5 and 2.0 s
    rows = rows[:1] + [f"{i + 1},0,{i + 1},10,{10 * (i + 1)},{0.5 * (i + 1)}" for i in range(4)]
    csv.write_text("\n".join(rows) + "\n")
    got = suite.curve(csv, np.array([0.4, 1.2, 2.0]), window=2, by="wall_seconds")
    assert got == [None, 1.5, 3.5]


def test_the_last_games_are_grouped_by_their_no_op_count_mod_4(tmp_path):
    csv = tmp_path / "episodes.csv"
    header = "episode,worker,return,length,global_step,wall_seconds"
    # start_frames 1 + no-ops: 5 and 9 (4 and 8 no-ops: 0 mod 4), 4 (3 no-ops), 12 (11: 3 mod 4)
    games = [(5, -21), (4, 10), (9, 21), (12, 2), (2, 20)]
    rows = [f"{header},start_frames"]
    rows += [f"{i + 1},0,{r},10,{10 * (i + 1)},0.0,{f}" for i, (f, r) in enumerate(games)]
    csv.write_text("\n".join(rows) + "\n")
    # the last 4: -21 falls out of the window
    assert suite.by_alignment(csv, window=4) == {"0": [1, 21.0], "1": [1, 20.0], "3": [2, 6.0]}
    # the report's cell: residues 0 to 3, "-" where none of the last games fell
    r = {"last_100_by_alignment": suite.by_alignment(csv, window=4)}
    assert suite.alignments(r) == "; by no-op count mod 4: 21.0 (1) / 20.0 (1) / - / 6.0 (2)"
    assert suite.alignments({}) == ""
    rows = [header] + [r.rsplit(",", 1)[0] for r in rows[1:]]  # a run from before the column
    csv.write_text("\n".join(rows) + "\n")
    assert suite.by_alignment(csv) is None


def test_training_curves_follow_each_alignment_on_the_runs_clock(tmp_path):
    csv = tmp_path / "episodes.csv"
    rows = ["episode,worker,return,length,global_step,wall_seconds,start_frames"]
    # (seconds, start_frames, return): no-op counts 4, 3, 8, 7 and 12: residues 0, 3, 0, 3, 0
    games = [(60, 5, -21), (120, 4, -20), (180, 9, -19), (240, 8, 0), (300, 13, -13)]
    rows += [f"{i + 1},0,{r},10,{i},{t},{f}" for i, (t, f, r) in enumerate(games)]
    csv.write_text("\n".join(rows) + "\n")
    got = suite.alignment_curves(csv, window=2)
    # residue 0: -21, then the mean of (-21, -19), then of (-19, -13); residue 3: -20, -10
    assert got == {0: ([1.0, 3.0, 5.0], [-21.0, -20.0, -16.0]), 3: ([2.0, 4.0], [-20.0, -10.0])}
    # as the store keeps them: on a grid of the run's seconds, none before a residue's first
    # game or past the run's end (here 260 s)
    grid = np.array([30.0, 60.0, 200.0, 250.0, 300.0])
    assert suite.curves_by_alignment(csv, grid, end=260.0, window=2) == {
        "0": [None, -21.0, -20.0, -20.0, None],
        "3": [None, None, -20.0, -10.0, None],
    }
    csv.write_text("\n".join(r.rsplit(",", 1)[0] for r in rows) + "\n")
    assert suite.alignment_curves(csv) == {}
    assert suite.curves_by_alignment(csv, grid, end=260.0) is None


def test_milestones_are_the_first_crossings_of_the_rolling_mean(tmp_path):
    import common

    csv = tmp_path / "episodes.csv"
    rows = ["episode,worker,return,length,global_step,wall_seconds"]
    # returns -21, -19, -15, -11 ending at steps 10..40 and 60..240 s: the means of the last 2
    # are -20 at step 20, -17 at 30, -13 at 40
    rows += [f"{i + 1},0,{r},10,{10 * (i + 1)},{60.0 * (i + 1)}" for i, r in
             enumerate([-21, -19, -15, -11])]  # fmt: skip
    csv.write_text("\n".join(rows) + "\n")
    hits = common.crossings(csv, [-20.0, -15.0, -10.0], window=2)
    assert hits == {-20.0: (20, 120.0), -15.0: (40, 240.0), -10.0: None}
    assert common.first_crossing(csv, -17.0, window=2) == 30
    # in the report: frames (4 a step on Atari) and minutes, "-" for a score never reached
    r = {"milestones": {"-20": [80.0e6, 120.0], "-10": None}}
    assert suite.milestones(r) == "-20: 80.0M, 2.0 min; -10: -"
    assert suite.milestones({}) == ""


def test_an_interrupted_suite_does_not_rerun_finished_seeds(tmp_path, monkeypatch):
    ran, speeds = [], []

    def fake_run(task, seed, speed=None):
        ran.append((task.name, seed))
        return {
            "task": task.name, "seed": seed, "env": task.env, "target": task.target,
            "solved": True, "solve_seconds": 1.0, "solve_steps": 100, "total_steps": 100,
            "process_seconds": 2.0, "model": "x", "final_eval": 500.0, "curve_steps": [0, 100],
            "curve": [None, 500.0], "calibration": speed["frames_per_second"],
        }  # fmt: skip

    def fake_speed():
        speeds.append(len(ran))
        return {"frames_per_second": 1234.0 * len(speeds), "runs": [], "command": "c"}

    monkeypatch.setattr(suite, "run_one", fake_run)
    monkeypatch.setattr(suite, "machine_speed", fake_speed)
    results = tmp_path / "results.jsonl"
    argv = ["suite.py", "quick", "--seeds", "2", "--tasks", "CartPole-v1"]
    argv += ["--store", str(results), "--out", str(tmp_path / "docs")]
    monkeypatch.setattr(sys, "argv", argv)
    suite.main()
    assert ran == [("CartPole-v1", 0), ("CartPole-v1", 1)]
    assert speeds == [0]  # the machine's speed: once per invocation, before its first run
    # each run a row of the store, as it finished, with its suite and (main) batch
    rows = store.read(results)
    assert [(r["suite"], r["batch"], r["task"], r["seed"]) for r in rows] == [
        ("quick", "", "CartPole-v1", 0), ("quick", "", "CartPole-v1", 1)
    ]  # fmt: skip
    results.write_text(results.read_text().splitlines(keepends=True)[0])  # "interrupted"
    suite.main()
    assert ran[2:] == [("CartPole-v1", 1)]  # seed 0 was finished: not run again
    assert speeds == [0, 2]
    suite.main()  # nothing left to run: no speed measured
    assert len(ran) == 3 and speeds == [0, 2]
    report = (tmp_path / "docs" / "suite-quick.md").read_text()
    assert "| CartPole-v1 | 2 / 2 | 2 / 2 | - | 500.0, 500.0 [500.0, 500.0] |" in report
    # each seed's row with the speed of the invocation that ran it
    assert "1,234 frames/s |" in report and "2,468 frames/s |" in report
    # one seed alone (the others run on another machine): seeds K..N-1 only
    monkeypatch.setattr(sys, "argv", [*argv[:3], "4", "--from-seed", "3", *argv[4:]])
    suite.main()
    assert ran[3:] == [("CartPole-v1", 3)]
    # another batch (the suite on another CPU) runs its own seeds, and its report is its own
    monkeypatch.setattr(sys, "argv", [*argv, "--batch", "other"])
    suite.main()
    assert ran[4:] == [("CartPole-v1", 0), ("CartPole-v1", 1)]
    other = (tmp_path / "docs" / "suite-quick-other.md").read_text()
    assert "`python benchmarks/suite.py quick --seeds 2 --batch other` (batch `other`)" in other


def test_a_timed_task_measures_its_last_model_and_a_saved_run_can_be_measured(
    tmp_path, monkeypatch
):
    import asyncrl

    run = tmp_path / "run"
    asyncrl.train(
        env="CartPole-v1", backend="threads", workers=1, steps=8_000, eval_every=1_000,
        target_return=1e9, progress=False, run_dir=str(run), seed=0,
    )  # fmt: skip
    assert (run / "best_model.pt").is_file()  # a stop rule's task evaluates this one
    kept = suite.Task("CartPole-v1", "CartPole-v1", 475.0, eval_episodes=2)
    timed = suite.Task(
        "Timed", "CartPole-v1", 475.0, eval_episodes=2, extras=("timeout", "60"),
        milestones=(10.0, 1e9),
    )  # fmt: skip
    untimed = suite.measure(kept, 0, run, "cmd", 1.0)
    assert untimed["model"] == "best_model.pt"
    # when training stopped, and the reserve a time limit stops it on (none without one)
    summary = suite.json.loads((run / "summary.json").read_text())
    assert untimed["train_seconds"] == summary["train_seconds"] > 0
    assert "time_reserved_seconds" in untimed and untimed["time_reserved_seconds"] is None
    assert suite.measure(timed, 0, run, "cmd", 1.0)["model"] == "model.pt"
    # the evaluations during training come with the row (the run directory goes)
    evals = untimed["evaluations"]
    assert len(evals) >= 2 and evals[-1][0] <= untimed["total_steps"]
    assert [e[0] for e in evals] == sorted(e[0] for e in evals)
    # --from-run: a run saved from an interrupted suite becomes the seed's result
    monkeypatch.setitem(suite.SUITES, "test", [timed])
    results = tmp_path / "results.jsonl"
    argv = ["suite.py", "test", "--tasks", "Timed", "--from-run", str(run)]
    argv += ["--store", str(results), "--out", str(tmp_path / "docs")]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit):  # which seed it is must be said
        suite.main()
    monkeypatch.setattr(sys, "argv", [*argv, "--seed", "2"])
    suite.main()
    (r,) = store.read(results)
    assert r["seed"] == 2 and r["model"] == "model.pt" and len(r["final_eval_returns"]) == 2
    # a timed task reads the training mean halfway through its time too
    assert r["half_seconds"] == 30.0 and r["train_mean_at_half"] == pytest.approx(
        r["final_train_mean"]
    )
    assert r["command"].startswith("timeout -s INT 60 ") and "--seed 2" in r["command"]
    # a run measured from its directory has its summary's date (UTC) and no commit: none is
    # recorded there (a run the suite trains has both: the test below)
    mtime = (run / "summary.json").stat().st_mtime
    day = suite.datetime.datetime.fromtimestamp(mtime, suite.datetime.timezone.utc).date()
    assert r["date"] == day.isoformat() and "commit" not in r
    assert suite.run_of(r) == r["date"] and suite.run_of({}) == "-"
    # the curve against the run's clock: 61 points to the time limit, a value from the first
    # episode's end to the run's end (a 1 s limit: this run ends within about a second)
    assert r["curve_seconds"][-1] == 60.0 and len(r["curve_by_time"]) == 61
    short = suite.Task("Short", "CartPole-v1", 475.0, eval_episodes=2, extras=("timeout", "1"))
    q = suite.measure(short, 0, run, "cmd", 1.0)
    end = suite.json.loads((run / "summary.json").read_text())["wall_seconds"]
    with open(run / "episodes.csv", newline="") as f:
        first = float(next(csv.DictReader(f))["wall_seconds"])
    for t, v in zip(q["curve_seconds"], q["curve_by_time"], strict=True):
        assert (v is None) == (t < first or t > end), (t, v, first, end)
    # CartPole's mean of the last 100 passes 10 once there are 100 episodes; never 1e9
    (steps, seconds), never = r["milestones"]["10"], r["milestones"]["1e+09"]
    assert 100 * 9 <= steps <= r["total_steps"] and seconds > 0 and never is None
    with pytest.raises(SystemExit):  # a finished seed is never overwritten
        suite.main()
    assert store.read(results) == [r]
    # a timed run that its stop rule ended keeps the model that rule kept
    summary = suite.json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(suite.json.dumps({**summary, "solved": True}))
    assert suite.measure(timed, 0, run, "cmd", 1.0)["model"] == "best_model.pt"


def test_a_run_its_time_limit_ends_is_measured_and_a_failed_one_keeps_its_directory(
    tmp_path, monkeypatch
):
    # GNU timeout exits 124 after signalling the run: that is the task's end, not a failure
    # (the atari5 suite lost a finished hour of Breakout to it)
    monkeypatch.setattr(suite.tempfile, "mkdtemp", lambda prefix: str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    args = ("--steps", "50000000", "--target-return", "1e9", "--workers", "1")
    task = suite.Task("Timed", "CartPole-v1", 475.0, args, eval_episodes=2, extras=("timeout", "8"))
    commit = suite.head_commit()
    before = suite.utc_date()
    r = suite.run_one(task, 0)
    assert r["model"] == "model.pt" and r["process_seconds"] >= 8 and r["total_steps"] > 0
    # the day (UTC) and the commit the run started on: a suite's seeds are run on different
    # days and commits
    assert r["date"] == before and r["commit"] == commit != ""
    assert suite.run_of(r) == f"{before}, {commit}"
    assert not (tmp_path / "tmp").exists()  # measured: the run directory goes
    # what its log said beyond the status lines stays in the row
    assert r["log"] and not any(" steps " in line and line.startswith("[") for line in r["log"])
    (tmp_path / "tmp").mkdir()
    bad = suite.Task("Bad", "CartPole-v1", 475.0, ("--steps", "-1"), extras=("timeout", "8"))
    with pytest.raises(SystemExit, match="its run directory is kept"):
        suite.run_one(bad, 0)
    assert (tmp_path / "tmp").exists()


def test_the_report_gives_the_human_normalised_score(tmp_path):
    """Pong's random and human scores are -20.7 and 14.6: a median of 14.6 is 1.00, of -3.05
    is 0.50."""
    task = next(t for t in suite.SUITES["atari5"] if t.name == "PongNoFrameskip-v4")
    rows = []
    for seed, final in enumerate([-3.05, -10.0, 14.6]):
        rows.append({
            "task": task.name, "seed": seed, "solved": False, "solve_seconds": None,
            "solve_steps": None, "total_steps": 100, "process_seconds": 3600.0, "model": "x",
            "final_eval": final, "final_train_mean": final - 1, "curve_steps": [0, 100],
            "curve": [None, final], "half_seconds": 1800.0, "train_mean_at_half": final - 5,
            "curve_seconds": [0.0, 3600.0], "curve_by_time": [None, final],
        })  # fmt: skip
    unrun = next(t for t in suite.SUITES["atari5"] if t.name == "BreakoutNoFrameskip-v4")
    # asked for 5 seeds (the --report-only default): the header names the 3 the records hold
    report = suite.report("atari5", [unrun, task], rows, 5, tmp_path / "docs").read_text()
    assert "`python benchmarks/suite.py atari5 --seeds 3`" in report
    assert "| 0 / 3 | -4.0; 0 / 3 | -3.0, " in report and "; human-normalised 50.0% |" in report
    assert "| PongNoFrameskip-v4 | 2 | False | 14.6 | 13.6 (9.6 at 30 min) |" in report
    assert report.count("| - | - |\n") == 3  # no machine speed, no date and commit recorded
    assert "| BreakoutNoFrameskip-v4 | no run yet |" in report
    # its curve by time, in one panel: a task without runs gets none (4.2 inches at 100 dpi)
    png = (tmp_path / "docs" / "suite-atari5.png").read_bytes()
    assert int.from_bytes(png[16:20], "big") == 420
    # a batch of seed 2 alone (seeds 0 and 1 ran elsewhere): --seeds 3 runs it, --seeds 1 not
    report = suite.report("atari5", [unrun, task], rows[2:], 5, tmp_path / "docs").read_text()
    assert "`python benchmarks/suite.py atari5 --seeds 3`" in report
    assert "| PongNoFrameskip-v4 | 0 | " not in report


def test_the_training_mean_at_the_end_is_the_median_over_seeds_and_counts_those_at_target():
    # Pong's hour (target 20): 19.74, 20.08 and 20.78 at the end, two at 20 or more
    rs = [{"final_train_mean": m} for m in (20.78, 19.74, 20.08)]
    assert suite.training_at_end(rs, 20.0) == "20.1; 2 / 3"
    # the target itself counts as reached; a record without the mean is left out of both
    assert suite.training_at_end([{"final_train_mean": 18.0}, {}], 18.0) == "18.0; 1 / 1"
    assert suite.training_at_end([{"final_train_mean": None}], 18.0) == "-"
    # Pong's 30 minutes: 18 reached by seeds 0 and 1, which seed 1's mean then left
    rs = [
        {"final_train_mean": 18.5, "milestones": {"10": [1e6, 60.0], "18": [2e6, 120.0]}},
        {"final_train_mean": 17.9, "milestones": {"10": [1e6, 60.0], "18": [3e6, 180.0]}},
        {"final_train_mean": 16.0, "milestones": {"10": [1e6, 60.0], "18": None}},
    ]
    assert suite.training_at_end(rs, 18.0) == "17.9; 1 / 3; reached 2 / 3"
    # a record without the milestone (an earlier suite's): no count that would leave it out
    del rs[2]["milestones"]
    assert suite.training_at_end(rs, 18.0) == "17.9; 1 / 3"


def test_a_results_machine_speed_names_its_cpu_and_bfloat16_units(monkeypatch):
    """The suite keeps the CPU with the machine's speed, since its bfloat16 units decide the
    atari preset's precision (a result from an AMX CPU is not one from a CPU without)."""
    import common
    import torch

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True, raising=False)
    assert common.cpu().endswith(", AVX-512 BF16")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    assert common.cpu().endswith(", no bfloat16 units")
    row = {"calibration": 7770.4, "cpu": "AMD EPYC, AVX-512 BF16"}
    assert suite.speed_of(row) == "7,770 frames/s (AMD EPYC, AVX-512 BF16)"
    del row["cpu"]  # results kept before the suite recorded it
    assert suite.speed_of(row) == "7,770 frames/s"
    assert suite.speed_of({}) == "-"
    # a run without the calibration (--no-speed) still names its CPU
    assert suite.speed_of({"cpu": "AMD EPYC, no bfloat16 units"}) == "AMD EPYC, no bfloat16 units"
    # and each run's own frames/s with the precision it ran in (results before: not recorded)
    assert suite.throughput({"frames_per_second": 5991.04, "precision": "bfloat16"}) == (
        "5,991 (bfloat16)"
    )
    assert suite.throughput({"frames_per_second": 5991.04}) == "5,991 (-)"


def test_a_run_its_stop_rule_ended_holds_its_last_value_in_the_band():
    """Three seeds on a grid of 0-30 minutes: one solved at 10 minutes and stopped. Past 10
    minutes the median is of all three (the solved one at 18), not of the two that went on;
    an unsolved run holds its last value to its end (the last point of a curve may be empty),
    and has none past it."""
    grid = np.array([0.0, 600.0, 1200.0, 1800.0])
    runs = [
        {"solved": True, "t": [0.0, 600.0], "y": [None, 18.0]},
        {"solved": False, "t": [0.0, 1200.0, 1800.0], "y": [-20.0, 0.0, 10.0]},
        {"solved": False, "t": [0.0, 1200.0, 1500.0, 1800.0], "y": [-20.0, -20 / 3, 0.0, None]},
    ]
    med, _, q3 = suite.band(runs, "t", "y", grid)
    assert med[2] == pytest.approx(0.0)  # of 18, 0 and -6.7 (the two that went on: -3.3)
    assert med[3] == pytest.approx(10.0) and q3[3] == pytest.approx(14.0)
    runs[0]["solved"] = False  # ended by something else: out of the band past its end
    med, _, _ = suite.band(runs, "t", "y", grid)
    assert med[3] == pytest.approx(5.0)


def test_the_a3c_hours_are_the_five_games_protocol_with_the_presets_a3c(tmp_path):
    """atari5-a3c must differ from atari5 only by --algo a3c: its figures sit beside APPO's."""
    appo, a3c = suite.SUITES["atari5"], suite.SUITES["atari5-a3c"]
    assert [t.name for t in a3c] == [t.name for t in appo] and len(appo) == 5
    for t, u in zip(appo, a3c, strict=True):
        assert u.args == (*t.args, "--algo", "a3c") and "--algo" not in t.args
        assert (u.extras, u.target, u.human) == (t.extras, t.target, t.human)
        cmd = suite.command(u, 0, tmp_path)
        assert cmd[:4] == ["timeout", "-s", "INT", "3600"] and cmd[-2:] == ["--algo", "a3c"]


def test_a_pong_hour_is_the_five_games_pong_hour_with_one_step_budget(tmp_path):
    """pong60's tasks sit beside atari5's Pong: the same hour, env and target, its args on
    top; a --steps of their own (a learning-rate schedule's length) replaces the hour's rather
    than leaving two for a reader to guess which the CLI takes."""
    hour = next(t for t in suite.SUITES["atari5"] if t.name == "PongNoFrameskip-v4")
    defaults, linear, *_ = suite.SUITES["pong60"]
    assert defaults.args == hour.args and 18.0 in defaults.milestones
    for t in (defaults, linear):
        assert (t.env, t.extras, t.target, t.human) == (
            hour.env,
            hour.extras,
            hour.target,
            hour.human,
        )
    cmd = suite.command(linear, 0, tmp_path)
    assert cmd.count("--steps") == 1 and cmd[cmd.index("--steps") + 1] == "10000000"
    assert cmd[cmd.index("--lr-schedule") + 1] == "linear"
    for t in suite.SUITES["pong60"]:  # each hour with one budget, the hour's or a schedule's
        assert suite.command(t, 0, tmp_path).count("--steps") == 1, t.name
    # the held rate's shape over the half as many frames a CPU without bfloat16 units plays
    short = next(t for t in suite.SUITES["pong60"] if t.name == "Pong-hour-lr-hold-short")
    cmd = suite.command(short, 0, tmp_path)
    assert cmd[cmd.index("--steps") + 1] == "4400000"
    assert cmd[cmd.index("--lr-anneal-from") + 1] == "0.5"


def config_of(task: suite.Task, tmp_path: Path):
    """The configuration a task's command trains with: its train arguments through the CLI's
    parser and the preset, as `asyncrl train` would."""
    from asyncrl.cli import build_parser
    from asyncrl.config import Config
    from asyncrl.envs import probe_env
    from asyncrl.presets import preset

    cmd = suite.command(task, 0, tmp_path)
    ns = build_parser().parse_args(cmd[cmd.index("train") :])
    fields = {f.name for f in dataclasses.fields(Config)}
    given = {k: v for k, v in vars(ns).items() if k in fields}
    return preset(None, info=probe_env(task.env), **given).validate()


def test_the_hours_annealed_over_time_hold_for_half_the_hour_their_timeout_ends(tmp_path):
    """atari5-lr-hold-time (and pong60's Pong-hour-lr-hold-time): the five games' hours with
    the held rate over --time-limit, the hour the suite's timeout gives them, each a command
    the CLI takes (--lr-anneal-over time is refused without a time limit)."""
    hours = suite.SUITES["atari5"]
    timed = [*suite.SUITES["atari5-lr-hold-time"]]
    timed += [t for t in suite.SUITES["pong60"] if t.name == "Pong-hour-lr-hold-time"]
    assert [t.name for t in timed[:5]] == [t.name for t in hours] and len(timed) == 6
    for t in timed:
        cmd = suite.command(t, 0, tmp_path)
        assert cmd[cmd.index("--lr-anneal-over") + 1] == "time"
        assert cmd[cmd.index("--time-limit") + 1] == f"{t.extras[1]}s"
        assert cmd[cmd.index("--lr-anneal-from") + 1] == "0.5" and cmd.count("--steps") == 1
        cfg = config_of(t, tmp_path)
        assert cfg.lr_anneal_over == "time" and cfg.time_limit_seconds() == 3600.0


def test_pong30s_time_limit_task_gets_the_presets_hold_from_the_limit_alone(tmp_path):
    """pong30's Pong-time-limit is the user's command: no lr option, so the atari preset's
    schedule under --time-limit is what it measures, the same as Pong-lr-hold-time's."""
    pytest.importorskip("ale_py")
    tasks = {t.name: t for t in suite.SUITES["pong30"]}
    mine = config_of(tasks["Pong-time-limit"], tmp_path)
    explicit = config_of(tasks["Pong-lr-hold-time"], tmp_path)
    assert not any(a.startswith("--lr") for a in tasks["Pong-time-limit"].args)
    assert (mine.lr_schedule, mine.lr_anneal_over, mine.lr_anneal_from) == ("linear", "time", 0.5)
    assert mine.time_limit_seconds() == 1800.0 and mine == explicit


def test_the_annealed_hours_are_the_five_games_with_one_step_budget(tmp_path):
    """atari5-lr-linear is atari5 with the anneal's args, its 10M steps the only budget."""
    hours, annealed = suite.SUITES["atari5"], suite.SUITES["atari5-lr-linear"]
    assert [t.name for t in annealed] == [t.name for t in hours]
    for t, u in zip(hours, annealed, strict=True):
        assert (u.extras, u.target, u.human, u.env) == (t.extras, t.target, t.human, t.env)
        cmd = suite.command(u, 0, tmp_path)
        assert cmd.count("--steps") == 1 and cmd[cmd.index("--steps") + 1] == "10000000"
        assert cmd[cmd.index("--lr-schedule") + 1] == "linear" and "--eval-every" in cmd


def test_a_sweep_over_the_backends_gives_the_ray_only_options_to_ray_alone():
    """Another backend refuses them: ``throughput.py --backends processes ray -- --ray-pipeline
    0`` (and ``atari.py throughput``) give the processes cells the rest."""
    import common

    args = ["--ray-pipeline", "0", "--lr", "1e-3", "--ray-batch=4", "--max-staleness", "2", "-x"]
    assert common.off_ray(args) == ["--lr", "1e-3", "-x"]
    assert common.off_ray(["--lr", "1e-3"]) == ["--lr", "1e-3"]


def test_the_store_keeps_a_row_as_appended_with_its_curves_compacted(tmp_path):
    """A run appended is read back as it was given, but for its curves and evaluation returns
    (4 significant digits, the grid in whole steps) and non-finite numbers (JSON has none:
    None)."""
    path = tmp_path / "sub" / "results.jsonl"
    assert store.read(path) == []  # no store yet: no runs
    row = {
        "suite": "quick", "batch": "", "task": "CartPole-v1", "seed": 3, "env": "CartPole-v1",
        "target": 475.0, "date": "2026-12-05", "commit": "abc1234", "cpu": "AMD EPYC",
        "calibration": 9264.5, "solved": True, "final_eval": 500.0, "total_steps": 123457,
        "final_eval_returns": [500.0, -178.23456], "process_seconds": 3.14159265,
        "curve_steps": [0.0, 61728.5, 123457.0], "curve": [None, 21.123456, 474.987654],
        "curve_by_alignment": {"0": [None, 1.23456789]}, "train_mean_at_half": float("nan"),
    }  # fmt: skip
    kept = store.append(path, row)
    store.append(path, {**row, "seed": 4, "batch": "zen3"})
    back = store.read(path)
    assert back[0] == kept and len(back) == 2 and len(path.read_text().splitlines()) == 2
    assert kept["curve"] == [None, 21.12, 475.0] and kept["curve_steps"] == [0, 61728, 123457]
    assert kept["curve_by_alignment"] == {"0": [None, 1.235]}
    assert kept["train_mean_at_half"] is None and kept["final_eval_returns"] == [500.0, -178.2]
    # what is not a curve is kept exactly
    for k in ("task", "seed", "calibration", "process_seconds", "final_eval", "date"):
        assert kept[k] == row[k], k
    # a suite's runs, by batch and task, in seed order
    assert [r["seed"] for r in store.select(back, "quick")] == [3, 4]
    assert [r["seed"] for r in store.select(back, "quick", "zen3")] == [4]
    assert store.select(back, "quick", "", "Acrobot-v1") == [] == store.select(back, "pong30")


def test_the_docs_page_counts_the_seeds_that_reached_the_target_per_task_and_batch(tmp_path):
    """docs/benchmarks.md from a small store: a row a task and batch, its seeds reached out of
    tried (a stop rule's confirmation, or a kept model at the target), the median with its
    interval, and the command that reruns it; a page a suite beside it."""
    path = tmp_path / "results.jsonl"

    def run(task, seed, solved, final, batch="", **extra):
        store.append(path, {
            "suite": "quick", "batch": batch, "task": task, "seed": seed, "env": "CartPole-v1",
            "target": 475.0, "solved": solved, "solve_seconds": 3.0 if solved else None,
            "solve_steps": 100 if solved else None, "total_steps": 100, "model": "x",
            "process_seconds": 4.0, "final_eval": final, "final_train_mean": final,
            "curve_steps": [0, 100], "curve": [None, final], **extra,
        })  # fmt: skip

    # CartPole: seed 0 solved, seed 1 not solved but its kept model at 480, seed 2 neither
    run("CartPole-v1", 0, True, 500.0, date="2026-12-01", commit="aaa1111", cpu="AMD EPYC")
    run("CartPole-v1", 1, False, 480.0, date="2026-12-02", commit="bbb2222", cpu="AMD EPYC")
    run("CartPole-v1", 2, False, 100.0, date="2026-12-02", commit="bbb2222", cpu="AMD EPYC")
    run("CartPole-v1", 5, True, 500.0, batch="zen3", calibration=4900.0)  # another set
    run("Gone-v0", 0, False, 1.0)  # a task the suite no longer defines
    store.append(path, {"suite": None, "batch": "probe", "task": "probe", "seed": 0,
                        "env": "PongNoFrameskip-v4", "final_train_mean": 3.5})  # fmt: skip
    pages = suite.write_docs(store.read(path), tmp_path / "docs")
    assert [p.name for p in pages] == ["benchmarks.md", "suite-quick.md"]
    page = pages[0].read_text()
    main = next(line for line in page.splitlines() if line.startswith("| CartPole-v1 | main |"))
    cells = [c.strip() for c in main.split("|")[1:-1]]
    assert cells[2] == "2 / 3" and cells[3].startswith("480.0; ")
    assert cells[7] == "2026-12-01 to 2026-12-02" and cells[8] == "aaa1111, bbb2222"
    assert cells[9] == "`python benchmarks/suite.py quick --seeds 3 --tasks CartPole-v1`"
    other = next(line for line in page.splitlines() if "| `zen3` |" in line)
    assert "| 1 / 1 | 500.0; 500.0 [500.0, 500.0] |" in other and "(4,900)" in other
    assert "--seeds 6 --tasks CartPole-v1 --batch zen3`" in other
    assert "| Gone-v0 | main | 0 / 1 |" in page  # still reported, from its rows' target
    assert "| `probe` | PongNoFrameskip-v4 | 1 | 3.5 |" in page  # a run of no suite
    assert "| mujoco | " in page and "none yet" in page  # a suite without runs: named
    assert len(page.splitlines()) <= 400
    # the suite's page: the main set, every seed of it
    quick = pages[1].read_text()
    assert "`python benchmarks/suite.py quick --seeds 3`" in quick
    assert "| CartPole-v1 | 2 | False | 100.0 |" in quick and "| 5 |" not in quick
    assert (tmp_path / "docs" / "suite-quick.png").is_file()


def test_a_rows_log_keeps_what_the_run_said_beyond_its_routine_lines():
    stderr = "\n".join(
        [
            "[   5.0s] steps 1,000/2,000 (200/s)  episodes 3  return(last 100) -",
            "evaluation 1: the latest model's screen took 90 s, ...; it gave up",
            "training has stopped; evaluation 2's screen: 3/10 episodes, 40 s",
            "re-scoring: 40/100 episodes, 300 s",
            "",
            "re-scored: 100/100 episodes in 700 s",
        ]
        + [f"line {i}" for i in range(suite.LOG_LINES)]
    )
    log = suite.run_log(stderr)
    assert len(log) == suite.LOG_LINES and log[-1] == f"line {suite.LOG_LINES - 1}"
    assert suite.run_log(stderr.split("line 0")[0]) == [
        "evaluation 1: the latest model's screen took 90 s, ...; it gave up",
        "re-scored: 100/100 episodes in 700 s",
    ]
