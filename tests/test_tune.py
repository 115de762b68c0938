"""asyncrl tune: the search space as data and its refusals, the objective and the pruning on a
run's evaluations, the study in the tune's directory (Ctrl-C and --resume), and one real tune
whose best.toml `asyncrl train --config` trains."""

import _thread
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

optuna = pytest.importorskip("optuna")

from asyncrl import preset  # noqa: E402
from asyncrl.cli import main  # noqa: E402
from asyncrl.config import ALGOS  # noqa: E402
from asyncrl.configfile import read_config_file  # noqa: E402
from asyncrl.errors import UserError  # noqa: E402
from asyncrl.presets import PRESETS  # noqa: E402
from asyncrl.tune import objective, process, tune  # noqa: E402
from asyncrl.tune.objective import BUCKETS, Goal, Reporter, RunFailed  # noqa: E402
from asyncrl.tune.space import default_space, default_space_name, parse_space  # noqa: E402

CARTPOLE = preset(None, env="CartPole-v1").validate()


def space(text, cfg=CARTPOLE, kind="discrete"):
    return parse_space(text, "s.toml").check(cfg, kind)


# ---------------------------------------------------------------------- the space


def test_a_space_file_gives_ranges_and_choices_in_the_configs_own_values():
    s = space(
        'lr = { type = "float", low = 1e-4, high = 1e-2, log = true }\n'
        "t-max = { choices = [5, 8] }\n"  # a flag's spelling is the option's too
        'envs_per_worker = { type = "int", low = 4, high = 32, step = 4 }\n'
        'gae_lambda = { choices = ["none", 0.95] }\n'
        "hidden = { choices = [[64, 64], [32]] }\n",
        cfg=CARTPOLE,
    )
    assert s.names == ("lr", "t_max", "envs_per_worker", "gae_lambda", "hidden")
    trial = optuna.trial.FixedTrial(
        {"lr": 1e-3, "t_max": 8, "envs_per_worker": 12, "gae_lambda": None, "hidden": "[32]"}
    )
    values = s.sample(trial)
    assert values == {
        "lr": 1e-3, "t_max": 8, "envs_per_worker": 12, "gae_lambda": None, "hidden": (32,)
    }  # fmt: skip
    cfg = s.config(CARTPOLE, values, "discrete")
    assert (cfg.lr, cfg.t_max, cfg.gae_lambda, cfg.hidden) == (1e-3, 8, None, (32,))
    # the run's own setting, as far as the space holds it (the preset's 16 envs lie on the
    # grid of 4s; it has no hidden of its own: None, not a choice here)
    assert s.encode(CARTPOLE) == {"lr": 3e-3, "t_max": 8, "envs_per_worker": 16, "gae_lambda": None}
    assert s.encode(dataclasses.replace(CARTPOLE, envs_per_worker=6, lr=0.5)) == {
        "t_max": 8, "gae_lambda": None
    }  # fmt: skip


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('lrr = { type = "float", low = 1, high = 2 }', "unknown option 'lrr'"),
        (
            "steps = { choices = [1000] }",
            "steps: not searched by a tune (it is each trial's budget",
        ),
        ('algo = { choices = ["a3c", "appo"] }', "algo: not searched by a tune"),
        ("lr = 3", "lr: give a table"),
        ('lr = { type = "float", low = 1e-4, high = 1e-2, lg = true }', "lr: unknown key 'lg'"),
        ('lr = { type = "float", low = 0, high = 1e-2, log = true }', "a log scale needs low > 0"),
        ('lr = { type = "float", low = 1, high = 0.1 }', "low must be below high"),
        ('lr = { type = "float", low = 1e-4, high = 1e-2, log = true, step = 1e-4 }', "not both"),
        (
            't_max = { type = "float", low = 1, high = 5 }',
            't_max is a whole number: use type = "int"',
        ),
        ('t_max = { type = "int", low = 1.5, high = 5 }', "low must be a whole number"),
        ('optimizer = { choices = ["adam", "sgd"] }', "optimizer: must be one of"),
        ("t_max = { choices = [] }", "choices must be a list of one or more values"),
        ("t_max = { choices = [5, 5] }", "a choice is listed twice"),
        ("", "the space names no option"),
        ("lr = {", "not a readable TOML file"),
        # values no run could take, and options this run does not read
        ('gamma = { type = "float", low = 0.9, high = 1.5 }', "gamma = 1.5: must be in (0, 1]"),
        ("epochs = { choices = [1, 4] }", "epochs = 1: a3c does not read it (it applies to appo)"),
        ("rho_bar = { choices = [0.5, 1.0] }", "rho_bar = 0.5: truncates V-trace's"),
        ("log_std_init = { choices = [-1.0] }", "this env's actions are not Box"),
    ],
)
def test_a_bad_space_is_refused_in_one_line_naming_the_option(text, says):
    with pytest.raises(UserError) as e:
        space(text)
    line = str(e.value)
    assert says in line and "\n" not in line and line.startswith("--space s.toml: ")


def test_an_option_read_only_with_another_sampled_value_is_reset_where_it_is_not():
    """rho_bar with V-trace on or off: accepted, and back at its default without V-trace."""
    s = space("rho_bar = { choices = [0.5, 1.0] }\nvtrace = { choices = [true, false] }")
    assert s.config(CARTPOLE, {"rho_bar": 0.5, "vtrace": True}, "discrete").rho_bar == 0.5
    assert s.config(CARTPOLE, {"rho_bar": 0.5, "vtrace": False}, "discrete").rho_bar == 1.0


BOX = {"control", "mujoco", "box2d", "box2d-lander"}


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_and_algorithm_has_a_default_space_that_fits_it(name):
    for algo in ALGOS:
        if name in BOX and algo not in ("a3c", "appo"):
            continue  # (the Q methods take no Box actions)
        env = "Pendulum-v1" if name in BOX else "CartPole-v1"
        cfg = preset(name, env=env, algo=algo).validate()
        s = default_space(name, algo).check(cfg, "box" if name in BOX else "discrete")
        assert s.encode(cfg), (name, algo)  # the preset's own setting is a trial of it
    assert default_space_name("atari", "appo") == "atari-appo.toml"
    assert default_space_name("cartpole", "onestep-sarsa") == "onestep.toml"


# ---------------------------------------------------------------------- the objective


def test_a_trial_scores_the_mean_steps_to_the_target_an_unsolved_seed_twice_the_budget():
    """The score of benchmarks/sweep.py, which the command took over (98bf59e)."""
    goal = Goal(475.0, "steps", 1000.0)
    runs = [{"solved": True, "solve_steps": 100}, {"solved": False, "solve_steps": None}]
    assert goal.value(runs) == (100 + 2000) / 2 and goal.direction == "minimize"
    timed = Goal(475.0, "seconds", 60.0)
    assert timed.value([{"solved": True, "solve_seconds": 30.0, "solve_steps": 9}]) == 30.0
    assert timed.cost({"solved": False}) == 120.0
    # its evaluations are reported at the part of the time budget they fall in
    assert timed.bucket({"global_step": 1e9, "wall_seconds": 30.0}) == BUCKETS // 2
    assert goal.bucket({"global_step": 1000.0, "wall_seconds": 1e9}) == BUCKETS
    free = Goal(None, "steps", 1000.0)  # no target: the final evaluation, maximised
    assert free.value([{"last_eval_return": -150.0}, {"last_eval_return": -250.0}]) == -200.0
    assert free.direction == "maximize"


def completed_trial(study, means):
    """A finished trial whose run reported ``means`` at the budget's parts, then solved."""
    goal = Goal(475.0, "steps", 20_000.0)
    trial = study.ask()
    r = Reporter(trial, goal, 0)
    for b, mean in enumerate(means):
        assert not r.evaluation({"global_step": b * 1000.0, "wall_seconds": 0.0, "mean": mean})
    r.reached()
    study.tell(trial, 5000.0)
    return trial


def test_a_trial_short_of_the_median_is_pruned_past_the_warmup_and_a_good_one_is_not():
    """The pruning decision on a fake stream of evaluations: five trials solved (their later
    parts hold their best evaluation); a sixth that never learns is pruned at the first part
    past the warmup (a fifth of the budget), a sixth as good as they are is not."""
    study = optuna.create_study(
        direction="minimize",
        pruner=optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=BUCKETS // 5),
    )
    for _ in range(5):
        completed_trial(study, [100.0, 200.0, 300.0, 400.0, 500.0])
    goal = Goal(475.0, "steps", 20_000.0)
    bad = Reporter(study.ask(), goal, 0)
    pruned_at = [
        b for b in range(BUCKETS) if bad.evaluation({"global_step": b * 1000.0, "mean": 9.0})
    ]
    assert pruned_at and pruned_at[0] == BUCKETS // 5
    good = Reporter(study.ask(), goal, 0)
    assert not any(
        good.evaluation({"global_step": b * 1000.0, "mean": 100.0 * (b + 1)}) for b in range(5)
    )
    # past its solve the median trial holds 500: a trial at 480 there is behind it
    late = Reporter(study.ask(), goal, 0)
    assert late.evaluation({"global_step": 10_000.0, "mean": 480.0})


# ---------------------------------------------------------------------- the study, with fake runs

FAKE = r"""
import json, signal, sys, time, tomllib
from pathlib import Path

config, run_dir, seed = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
plan = json.loads((Path(__file__).parent / "plan.json").read_text())
trial = int(config.stem)
steps = tomllib.loads(config.read_text())["run"]["steps"]
run_dir.mkdir(parents=True)
stopped = []
signal.signal(signal.SIGINT, lambda *a: stopped.append(1))
if trial in plan.get("crash", []):
    sys.exit("something no setting explains")
bad = trial in plan.get("bad", [])
hang = trial in plan.get("hang", [])
solved_at, mean = None, 0.0
with open(run_dir / "evaluations.csv", "w") as f:
    f.write("evaluation,global_step,wall_seconds,mean,std,min,max,episodes,seconds\n")
    f.flush()
    for i in range(1, 21):
        while hang and not stopped:
            time.sleep(0.01)
        if stopped:
            break
        step, mean = i * steps // 20, 9.0 if bad else min(500.0, 100.0 * i)
        f.write(f"{i},{step},{i / 10},{mean},0,0,0,10,0.01\n")
        f.flush()
        if mean >= 475:
            solved_at = step
            break
        time.sleep(plan["delay"])
summary = {"solved": solved_at is not None, "solve_steps": solved_at, "last_eval_return": mean}
(run_dir / "summary.json").write_text(json.dumps(summary))
if stopped:
    (run_dir / "INTERRUPTED").write_text("")
    sys.exit(130)
"""

FIXED = ["--env", "CartPole-v1", "--steps", "20000", "--backend", "threads", "--workers", "1"]


@pytest.fixture
def fake_runs(tmp_path, monkeypatch):
    """Trials whose runs are a small script (no training): trial numbers in plan["bad"] never
    learn, those in plan["hang"] wait for SIGINT; the others solve at a quarter of the budget."""
    folder = tmp_path / "fake"
    folder.mkdir()
    (folder / "fake.py").write_text(FAKE)
    plan: dict = {"delay": 0.05}

    def command(config, run_dir, seed, preset):
        # written whole, then swapped in: with two trials at a time, one run reads the plan
        # while the other trial's start writes it (a truncated file is a JSONDecodeError)
        part = folder / f"plan.{threading.get_ident()}.json"
        part.write_text(json.dumps(plan))
        os.replace(part, folder / "plan.json")
        return [sys.executable, str(folder / "fake.py"), str(config), str(run_dir), str(seed)]

    monkeypatch.setattr(process, "train_command", command)
    monkeypatch.setattr(objective, "POLL_S", 0.02)
    return plan


def test_a_bad_trial_is_pruned_and_its_run_stopped_with_sigint(fake_runs, tmp_path):
    fake_runs["bad"] = [5]
    out = tune(tmp_path / "t", trials=6, train_args=FIXED, echo=lambda line: None)
    study = optuna.load_study(study_name="asyncrl-tune", storage=f"sqlite:///{tmp_path}/t/study.db")
    states = [t.state.name for t in study.trials]
    assert states == ["COMPLETE"] * 5 + ["PRUNED"], states
    assert (tmp_path / "t/trials/0005-s0/INTERRUPTED").is_file()  # stopped cleanly, not killed
    assert "pruned at 4,000 steps of seed 0" in study.trials[5].user_attrs["reason"]
    assert study.trials[0].user_attrs["baseline"]  # the run's own setting first
    assert out["complete"] == 5 and out["pruned"] == 1 and out["best_value"] == 5000.0
    rows = (tmp_path / "t/trials.csv").read_text().splitlines()
    assert len(rows) == 7 and rows[6].startswith("5,pruned,,")
    assert (tmp_path / "t/trials.png").stat().st_size > 0


@pytest.fixture
def ctrl_c():
    """Python's own SIGINT handler for the test: ``_thread.interrupt_main`` does nothing where
    the process's SIGINT is ignored or at its default, and a full run hung here once, its
    trial waiting for a Ctrl-C that never came (which earlier test of that worker process left
    SIGINT so was not found)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_stops_the_trials_run_and_resume_goes_on_with_the_study(fake_runs, tmp_path, ctrl_c):
    fake_runs["hang"] = [1]
    where = tmp_path / "t"

    def interrupt_once_trial_1_runs():
        while not (where / "trials/0001-s0/evaluations.csv").exists():
            time.sleep(0.01)
        _thread.interrupt_main()

    threading.Thread(target=interrupt_once_trial_1_runs, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        tune(where, trials=3, train_args=FIXED, echo=lambda line: None)
    assert (where / "trials/0001-s0/INTERRUPTED").is_file()  # the run got its SIGINT and ended
    study = optuna.load_study(study_name="asyncrl-tune", storage=f"sqlite:///{where}/study.db")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "FAIL"]

    fake_runs["hang"] = []
    lines: list[str] = []
    out = tune(where, trials=3, resume=True, echo=lines.append)
    study = optuna.load_study(study_name="asyncrl-tune", storage=f"sqlite:///{where}/study.db")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "FAIL", "COMPLETE", "COMPLETE"]
    assert out["complete"] == 3 and "1 of 3 trials finished" in lines[1]
    # more trials: a larger total; the same total is refused, nothing changed
    with pytest.raises(UserError, match="has 3 finished trials already; give a larger --trials"):
        tune(where, trials=3, resume=True)
    tune(where, trials=4, resume=True, echo=lambda line: None)
    assert (
        len(
            optuna.load_study(
                study_name="asyncrl-tune", storage=f"sqlite:///{where}/study.db"
            ).trials
        )
        == 5
    )


def test_a_run_that_fails_unexplained_stops_the_tune_naming_its_log(fake_runs, tmp_path):
    """Not a bad setting (it would fail every trial): the tune stops, the study keeps the rest."""
    fake_runs["crash"] = [1]
    with pytest.raises(RunFailed) as e:
        tune(tmp_path / "t", trials=3, train_args=FIXED, echo=lambda line: None)
    assert "exited with code 1 (something no setting explains)" in str(e.value)
    assert str(tmp_path / "t/trials/0001-s0.log") in str(e.value)
    study = optuna.load_study(study_name="asyncrl-tune", storage=f"sqlite:///{tmp_path}/t/study.db")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "FAIL"]
    assert (tmp_path / "t/best.toml").is_file() and (tmp_path / "t/trials.png").is_file()


def test_trials_run_two_at_a_time_each_claims_a_trial_of_its_own(fake_runs, tmp_path):
    out = tune(tmp_path / "t", trials=4, train_args=FIXED, parallel=2, echo=lambda line: None)
    study = optuna.load_study(study_name="asyncrl-tune", storage=f"sqlite:///{tmp_path}/t/study.db")
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 4 and out["complete"] == 4
    assert sum(bool(t.user_attrs.get("baseline")) for t in study.trials) == 1
    assert sorted(p.name for p in (tmp_path / "t/trials").glob("*-s0")) == [
        "0000-s0", "0001-s0", "0002-s0", "0003-s0"
    ]  # fmt: skip


def listing(path):
    return sorted((str(p.relative_to(path)), p.stat().st_mtime_ns) for p in path.rglob("*"))


def test_a_tune_directory_is_never_overwritten_and_resume_keeps_its_settings(
    fake_runs, tmp_path, capsys
):
    where = tmp_path / "t"
    assert (
        main(["tune", "--trials", "1", "--run-dir", str(where), *FIXED[:4], "--", *FIXED[4:]]) == 0
    )
    before = listing(where)
    capsys.readouterr()
    refusals = {
        ("--trials", "2"): "holds a study already; continue it with --resume",
        ("--trials", "2", "--resume", "--space", "x.toml"): "--space: a resumed tune keeps",
        ("--trials", "2", "--resume", "--env", "Acrobot-v1"): "--env: a resumed tune keeps",
        ("--trials", "2", "--resume", "--", "--lr", "1e-3"): "--: a resumed tune keeps",
        ("--trials", "1", "--resume"): "has 1 finished trials already",
    }
    for args, says in refusals.items():
        assert main(["tune", "--run-dir", str(where), *args]) == 2, args
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1, err
    assert listing(where) == before
    # a directory with other files in it, or no study to resume
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert main(["tune", "--trials", "1", "--run-dir", str(other)]) == 2
    assert "already exists and is not empty" in capsys.readouterr().err
    assert main(["tune", "--trials", "1", "--run-dir", str(tmp_path / "new"), "--resume"]) == 2
    assert "holds no study" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--space", "missing.toml"], "--space missing.toml: no such file"),
        (["--", "--epochs", "2"], "--epochs: a3c does not read it"),
        (["--", "--run-dir", "x"], "--run-dir: each trial trains a new run"),
        (["--steps", "10", "--", "--steps", "10"], "--steps: given before the -- too"),
        (["--", "--no-such-option"], "after --: unrecognized arguments: --no-such-option"),
        (["--seeds", "0"], "--seeds: must be >= 1"),
        (["--env", "NoSuchEnv-v9"], "NoSuchEnv-v9"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_directory(args, says, tmp_path, capsys):
    where = tmp_path / "t"
    assert main(["tune", "--trials", "1", "--run-dir", str(where), *args]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err
    assert not where.exists()


def test_the_tunes_own_process_imports_no_pytorch():
    """It only starts and follows runs: its memory stays small beside theirs."""
    code = (
        "import sys; from asyncrl.tune import fixed_setting; "
        "from asyncrl.tune.space import default_space; "
        "cfg, info, name = fixed_setting(['--env', 'CartPole-v1']); "
        "default_space(name, cfg.algo).check(cfg, info.action.kind); import asyncrl.plot; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------------- real runs

TINY = ["--backend", "threads", "--workers", "1", "--eval-every", "1000", "--eval-episodes", "2"]
TINY += ["--confirm-episodes", "0", "--checkpoint-every", "0"]


def test_a_tune_of_three_tiny_trials_writes_a_best_file_that_train_reads(tmp_path, capsys):
    where = tmp_path / "t"
    args = ["tune", "--env", "CartPole-v1", "--trials", "3", "--steps", "2000"]
    assert main([*args, "--run-dir", str(where), "--", *TINY]) == 0
    out = capsys.readouterr().out
    assert out.count("\ntrial ") == 3 and f"{where / 'best.toml'}" in out
    for k in range(3):
        run = where / f"trials/{k:04d}-s0"
        assert json.loads((run / "summary.json").read_text())["total_steps"] >= 2000
        assert (run / "best_model.pt").is_file() and not (run / "checkpoint.ckpt").exists()
    best = read_config_file(where / "best.toml")
    assert best["env"] == "CartPole-v1" and best["algo"] == "a3c" and best["steps"] == 2000
    assert best["backend"] == "threads" and best["eval_every"] == 1000  # the fixed part too
    study = optuna.load_study(study_name="asyncrl-tune", storage=f"sqlite:///{where}/study.db")
    assert best["lr"] == study.best_trial.params["lr"]
    # the file alone reproduces the setting (a short run of it)
    run = tmp_path / "again"
    assert main(["train", "--config", str(where / "best.toml"), "--run-dir", str(run)]) == 0
    again = json.loads((run / "config.json").read_text())
    for key, value in best.items():
        assert again[key] == (list(value) if isinstance(value, tuple) else value), key


@pytest.mark.xdist_group("ray")
def test_trials_spread_over_a_ray_cluster_come_back_to_the_tune_directory(tmp_path):
    """--ray-address local: a cluster of the tune's own on this machine, two trials at a time,
    each an actor running its `asyncrl train` on its node; the runs' files come back."""
    pytest.importorskip("ray")
    if any(not name.startswith("lo") for _, name in socket.if_nameindex()):
        why = "Ray clusters start only where loopback is the sole interface: use scripts/test"
        if os.environ.get("ASYNCRL_REQUIRE_RAY_TESTS") == "1":
            pytest.fail(why)
        pytest.skip(why)
    where = tmp_path / "t"
    cmd = [sys.executable, "-m", "asyncrl.cli", "tune", "--env", "CartPole-v1", "--trials", "2"]
    cmd += ["--steps", "2000", "--run-dir", str(where), "--ray-address", "local"]
    cmd += ["--parallel", "2", "--", *TINY]
    r = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "RAY_ADDRESS": ""}
    )
    assert r.returncode == 0, r.stderr
    for k in range(2):
        run = where / f"trials/{k:04d}-s0"
        assert (run / "evaluations.csv").is_file() and (run / "model.pt").is_file()
        assert not (run / "checkpoint.ckpt").exists()  # left on the node
        assert (where / f"trials/{k:04d}-s0.log").is_file()
    assert (where / "best.toml").is_file()
