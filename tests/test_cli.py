"""The command line: the run directory it writes, and one clear line for each bad input."""

import csv
import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import tests.envs_for_tests  # noqa: F401  (registers the envs)
from asyncrl.cli import main
from asyncrl.config import Config

QUICK = ["--steps", "3000", "--workers", "1", "--backend", "threads", "--no-progress"]


def asyncrl(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "asyncrl.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def exit_code(argv):
    """main()'s return value, or argparse's exit code for a malformed command line."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize("rule", ["eval", "train"])
def test_a_solved_run_prints_the_score_that_met_its_rule(rule, run_dir, capsys, seed):
    """CartPole's defaults on one worker solve within their 500k steps: measured on seeds 0-5
    with both rules (2026-11-24)."""
    args = ["train", "--workers", "1", "--backend", "threads", "--no-progress", "--seed", str(seed)]
    args += ["--stop-on", rule, "--run-dir", str(run_dir)]
    assert main(args) == 0
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["solved"] and s["solved_by"] == rule and s["solve_return"] >= 475
    what = "evaluation mean" if rule == "eval" else "mean return"
    assert f"solved: {what} {s['solve_return']:.1f} >= 475 after {s['solve_steps']:,}" in (
        capsys.readouterr().out
    )


def test_train_writes_a_complete_run_directory(run_dir, capsys):
    assert main(["train", *QUICK, "--run-dir", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "run directory" in out and str(run_dir) in out
    for name in ("config.json", "episodes.csv", "model.pt", "summary.json"):
        assert (run_dir / name).is_file(), name
    summary = json.loads((run_dir / "summary.json").read_text())
    for key in (
        "solved",
        "solve_seconds",
        "solve_steps",
        "total_steps",
        "wall_seconds",
        "steps_per_second",
        "rolling_return",
    ):
        assert key in summary
    assert summary["solved"] is False and summary["total_steps"] >= 3000
    assert json.loads((run_dir / "config.json").read_text())["steps"] == 3000
    with open(run_dir / "episodes.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and set(rows[0]) == {
        "episode",
        "worker",
        "return",
        "length",
        "global_step",
        "wall_seconds",
        "start_frames",
    }
    assert {r["start_frames"] for r in rows} == {""}  # CartPole reports no start
    assert [int(r["episode"]) for r in rows] == list(range(1, len(rows) + 1))
    assert list((run_dir / "tb").glob("events.out.tfevents.*"))

    assert main(["eval", str(run_dir), "--episodes", "2"]) == 0
    assert "mean return" in capsys.readouterr().out
    assert main(["plot", str(run_dir)]) == 0
    for name in ("learning_curve.png", "metrics.png"):
        assert (run_dir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # --out into a folder that has a metrics.png of its own: that one is left alone
    elsewhere = run_dir.parent / "figures"
    elsewhere.mkdir()
    (elsewhere / "metrics.png").write_bytes(b"somebody else's")
    assert main(["plot", str(run_dir), "--out", str(elsewhere / "curve.png")]) == 0
    assert (elsewhere / "metrics.png").read_bytes() == b"somebody else's"
    for name in ("curve.png", "curve_metrics.png"):
        assert (elsewhere / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # several runs: one figure, at the path --out names (there is no default for it)
    capsys.readouterr()
    assert main(["plot", str(run_dir), str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and len(err.splitlines()) == 1
    assert main(["plot", str(run_dir), str(run_dir), "--out", str(elsewhere / "both.png")]) == 0
    assert (elsewhere / "both.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # what would fail only after the plotting: one line, exit 2, nothing written
    (elsewhere / "folder.png").mkdir()
    for out, needle in (
        ("nodir/x.png", "does not exist"),
        ("x.nope", "no image file type"),
        ("folder.png", "is a folder; name an image file"),
    ):
        for runs in ([run_dir], [run_dir, run_dir]):
            assert main(["plot", *map(str, runs), "--out", str(elsewhere / out)]) == 2
            err = capsys.readouterr().err
            assert needle in err and len(err.splitlines()) == 1
    assert not (elsewhere / "nodir").exists() and not (elsewhere / "x.nope").exists()
    for bad, needle in ((["--seed", "-1"], "--seed: must be >= 0"), (["--episodes", "0"], ">= 1")):
        assert main(["eval", str(run_dir), *bad]) == 2
        out, err = capsys.readouterr()
        assert needle in err and not out  # refused before the model line


def test_metrics_csv_holds_the_learners_diagnostics(run_dir):
    assert main(["train", *QUICK, "--run-dir", str(run_dir)]) == 0
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows, "at least the final row"
    expected = {"global_step", "wall_seconds", "loss_policy_loss", "loss_value_loss"}
    expected |= {"loss_entropy", "train_grad_norm", "train_clip_fraction", "train_learning_rate"}
    assert set(rows[0]) == expected
    last = rows[-1]
    assert 0 < float(last["loss_entropy"]) <= 0.6932  # two actions: at most log 2
    assert 0 <= float(last["train_clip_fraction"]) <= 1
    assert float(last["train_learning_rate"]) < 3e-3  # annealed from the default 3e-3
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tb"))
    acc.Reload()
    assert {"loss/entropy", "train/grad_norm", "train/learning_rate"} <= set(acc.Tags()["scalars"])


def test_an_annealed_entropy_bonus_is_logged_at_each_rows_step(run_dir):
    assert main(["train", *QUICK, "--run-dir", str(run_dir), "--entropy-final", "0"]) == 0
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    cfg = Config(**json.loads((run_dir / "config.json").read_text()))
    for row in rows:  # 0.01 annealed to 0 over the step budget, as the lr
        beta = float(row["train_entropy_coef"])
        assert beta == pytest.approx(cfg.entropy_coef_at(int(row["global_step"])), rel=1e-6)
    assert float(rows[-1]["train_entropy_coef"]) < cfg.entropy_coef


def test_existing_run_directory_is_never_overwritten(run_dir, capsys):
    run_dir.mkdir()
    (run_dir / "keep.txt").write_text("precious")
    assert main(["train", *QUICK, "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "Traceback" not in err
    assert [p.name for p in run_dir.iterdir()] == ["keep.txt"]
    assert (run_dir / "keep.txt").read_text() == "precious"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--env", "NoSuchEnv-v0"], "unknown environment id"),
        (["--env", "CartPol-v1"], "did you mean CartPole-v1"),
        (["--env", "Pendulum-v1", "--algo", "nstep-q"], "nstep-q needs a Discrete one"),
        (["--env", "Pendulum-v1", "--algo", "onestep-q"], "use --algo a3c"),
        (
            ["--env", "asyncrl-test/Match-v0", "--algo", "nstep-q"],
            "has a MultiDiscrete action space, but nstep-q needs a Discrete one",
        ),
        (["--env", "asyncrl-test/Bits-v0", "--algo", "onestep-sarsa"], "MultiBinary action space"),
        (["--algo", "onestep-q", "--missing", "zero"], "--missing: onestep-q bootstraps"),
        (["--algo", "onestep-sarsa", "--missing", "zero"], "drop --missing zero"),
        (["--algo", "onestep-q", "--n-step", "3"], "--n-step: onestep-q has no n-step"),
        (["--gae-lambda", "0.95", "--n-step", "3"], "--n-step: GAE has no n-step horizon"),
        (["--vtrace", "--n-step", "3"], "--n-step: V-trace has no n-step horizon"),
        (["--vtrace", "--missing", "zero"], "--missing: V-trace always"),
        (["--net", "resnet"], "invalid choice"),
        (["--env", "asyncrl-test/Unbounded-v0", "--squash"], "bounds are not all finite"),
        (["--max-staleness", "4"], "--max-staleness: applies to --backend ray only"),
        (["--ray-servers", "2"], "--ray-servers: applies to --backend ray only"),
        (["--optimizer", "adam", "--rms-init", "1"], "--rms-init: is RMSProp's"),
        (["--lstm-size", "64"], "--lstm-size: sizes a recurrent core and this network has none"),
        (["--core", "lstm", "--no-shared-trunk"], "--no-shared-trunk: the LSTM core is shared"),
        (["--net", "a3c"], "--net a3c: a conv net reads images, and these observations"),
        (
            ["--env", "MinAtar/Breakout-v1", "--net", "nature"],
            "need larger images than (10, 10, 4)",
        ),
        (["--eps-probs", "0.5", "0.6", "0.1"], "--eps-probs: give one probability"),
        # an option of another algorithm, which it would ignore
        (["--epochs", "2"], "--epochs: a3c does not read it (it applies to appo): drop"),
        (["--algo", "nstep-q", "--gae-lambda", "0.9"], "--gae-lambda: nstep-q does not read"),
        (["--algo", "onestep-q", "--entropy-coef", "0"], "--entropy-coef: onestep-q does not"),
        (["--algo", "appo", "--target-update", "500"], "--target-update: appo does not read"),
        (["--algo", "nstep-q", "--async-update", "2"], "--async-update: nstep-q does not read"),
        (["--algo", "nstep-q", "--shared-trunk"], "--shared-trunk: nstep-q does not read it"),
        # an option that only another option turns on
        (["--rho-bar", "2"], "--rho-bar: truncates V-trace's importance weights: add --vtrace"),
        (["--c-bar", "0.5"], "--c-bar: truncates V-trace's importance weights: add --vtrace"),
        (["--obs-clip", "5"], "--obs-clip: clips normalised observations: add --normalize-obs"),
        (["--algo", "appo", "--rms-alpha", "0.5"], "--rms-alpha: is RMSProp's decay"),
        (["--stop-on", "train", "--confirm-stderr", "3"], "--confirm-stderr: is the stop rule's"),
        (["--target-update", "0"], "--target-update: must be >= 1"),
        (["--workers", "0"], "--workers: must be >= 1"),
        (["--gamma", "0"], "--gamma: must be in (0, 1]"),
        (["--gamma", "1.5"], "--gamma: must be in (0, 1]"),
        (["--t-max", "0"], "--t-max: must be >= 1"),
        (["--steps", "0"], "--steps: must be >= 1"),
        (["--envs-per-worker", "0"], "--envs-per-worker: must be >= 1"),
        (["--lr", "-1"], "--lr: must be > 0"),
        (["--workers", "two"], "invalid int value"),
        (["--backend", "gpu"], "invalid choice"),
    ],
)
def test_bad_train_input_is_one_line_and_exit_2(args, needle, tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = exit_code(["train", *args, "--run-dir", str(run_dir)])
    err = capsys.readouterr().err
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not run_dir.exists()  # nothing written for bad input


@pytest.mark.parametrize("command", ["eval", "plot"])
def test_missing_run_directory(command, tmp_path, capsys):
    assert main([command, str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and len(err.strip().splitlines()) == 1


def test_console_script_errors_have_no_traceback_unless_debug(tmp_path):
    r = asyncrl("train", "--env", "NoSuchEnv-v0", "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0
    r = asyncrl("--debug", "eval", str(tmp_path / "nope"))
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_an_env_module_in_the_working_directory_is_found_as_python_m_would(tmp_path):
    """The ``asyncrl`` command's sys.path lacks the working directory (unlike ``python -m``):
    ``--env module:Id`` still finds a module there."""
    script = Path(sysconfig.get_path("scripts")) / "asyncrl"
    if not script.exists():
        pytest.skip(f"no console script at {script} (the package is not installed)")
    (tmp_path / "my_envs.py").write_text(
        "import gymnasium as gym\n"
        "gym.register('my-envs/Pole-v0', "
        "entry_point='gymnasium.envs.classic_control:CartPoleEnv')\n"
    )
    args = ["train", "--env", "my_envs:my-envs/Pole-v0", *QUICK, "--run-dir", "run"]
    r = subprocess.run(
        [str(script), *args], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "run" / "summary.json").is_file()
    # a module that exists but fails on an import of its own is reported as such, once
    (tmp_path / "broken_envs.py").write_text("import no_such_dependency\n")
    r = subprocess.run(
        [str(script), "train", "--env", "broken_envs:X-v0", "--run-dir", "r2"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert r.returncode == 2 and "no_such_dependency" in r.stderr, r.stderr


def test_help_is_generated_from_the_config_docstrings():
    r = asyncrl("train", "--help")
    assert r.returncode == 0
    assert "--t-max" in r.stdout and "steps per rollout" in r.stdout
    assert "--missing {bootstrap,zero}" in r.stdout


def test_load_and_evaluate_do_not_import_the_trainer(run_dir):
    assert main(["train", *QUICK, "--run-dir", str(run_dir)]) == 0
    code = (
        "import sys, asyncrl; p = asyncrl.load(sys.argv[1]); asyncrl.evaluate(sys.argv[1], 1); "
        "bad = [m for m in sys.modules if m.startswith(('asyncrl.trainer', 'asyncrl.supervisor',"
        " 'asyncrl.backends'))]; print(bad); assert not bad"
    )
    r = subprocess.run([sys.executable, "-c", code, str(run_dir)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_the_config_and_the_parser_do_not_import_pytorch():
    """What lets ``train --backend ray`` start Ray while PyTorch is imported: nothing before
    the trainer needs it, the run's cluster included (the package's Policy and train still
    resolve, on first use)."""
    code = (
        "import sys, asyncrl, asyncrl.cli; asyncrl.cli.build_parser(); asyncrl.preset(None); "
        "import asyncrl.backends, asyncrl.backends.ray.cluster; "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "assert asyncrl.Policy.__name__ == 'Policy' and callable(asyncrl.train)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_policy_act_tells_one_observation_from_a_batch_by_shape(run_dir):
    import numpy as np

    import asyncrl

    assert main(["train", *QUICK, "--run-dir", str(run_dir)]) == 0
    policy = asyncrl.load(run_dir)
    assert isinstance(policy.act(np.zeros(4)), int)
    assert policy.act(np.zeros((3, 4))).shape == (3,)
    assert policy.act(np.zeros((1, 4))).shape == (1,)  # a batch of one stays a batch
    with pytest.raises(asyncrl.UserError, match="fits neither"):
        policy.act(np.zeros(5))


def test_a_seeded_stochastic_evaluation_repeats_itself(run_dir):
    import asyncrl

    assert main(["train", *QUICK, "--run-dir", str(run_dir)]) == 0
    first = asyncrl.evaluate(run_dir, episodes=3, seed=5, deterministic=False)
    assert asyncrl.evaluate(run_dir, episodes=3, seed=5, deterministic=False) == first


def test_evaluate_plays_every_episode_asked_for_in_waves(run_dir):
    """asyncrl.evaluate plays as the evaluations during training do: waves of up to 16 envs,
    one batched forward pass a step; 20 episodes are a wave of 16 and one of 4, each a whole
    episode (CartPole pays 1 a step: no return is a spare env's 0)."""
    import asyncrl

    assert main(["train", *QUICK, "--run-dir", str(run_dir)]) == 0
    returns = asyncrl.evaluate(run_dir, episodes=20, seed=3)
    assert len(returns) == 20 and min(returns) >= 8 and len(set(returns)) > 1
    assert asyncrl.evaluate(run_dir, episodes=20, seed=3) == returns
    assert asyncrl.evaluate(run_dir, episodes=20, seed=4) != returns


def test_the_q_methods_refuse_a_stochastic_evaluation(run_dir, capsys):
    assert main(["train", *QUICK, "--algo", "nstep-q", "--run-dir", str(run_dir)]) == 0
    assert main(["eval", str(run_dir), "--stochastic"]) == 2
    assert "greedily at evaluation" in capsys.readouterr().err


def test_eval_video_writes_an_mp4_and_never_overwrites(run_dir, tmp_path, capsys):
    pytest.importorskip("imageio_ffmpeg")
    assert main(["train", *QUICK, "--run-dir", str(run_dir)]) == 0
    video = tmp_path / "cartpole.mp4"
    assert main(["eval", str(run_dir), "--episodes", "1", "--video", str(video)]) == 0
    assert video.read_bytes()[4:8] == b"ftyp"  # an MP4 container
    size = video.stat().st_size
    assert main(["eval", str(run_dir), "--video", str(video)]) == 2
    assert "exists" in capsys.readouterr().err and video.stat().st_size == size


def test_box_actions_with_a_q_method_or_an_unknown_space_get_one_line(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert (
        exit_code(
            ["train", "--env", "Pendulum-v1", "--algo", "onestep-sarsa", "--run-dir", str(run_dir)]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "Box action space" in err and "use --algo a3c" in err and not run_dir.exists()
    assert exit_code(["train", "--env", "Pong-v0x", "--run-dir", str(run_dir)]) == 2
    assert exit_code(["train", "--env-kwargs", "=1", "--run-dir", str(run_dir)]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err


def test_env_kwargs_reach_the_env_with_the_preset_the_env_picks(tmp_path, capsys):
    # the README's command shape: --env-kwargs with no --preset (the env's probe picks it)
    run_dir = tmp_path / "run"
    argv = ["train", "--env", "LunarLander-v3", "--env-kwargs", "continuous=true"]
    argv += ["--steps", "200", "--eval-every", "0", "--stop-on", "train", "--workers", "1"]
    assert exit_code([*argv, "--run-dir", str(run_dir), "--no-progress"]) == 0
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["env_kwargs"] == ["continuous=true"] and cfg["algo"] == "appo"  # box2d-lander
    import asyncrl

    assert asyncrl.load(run_dir).spec.action.kind == "box"  # the Gaussian policy


def test_a_missing_env_extra_names_the_install_command(monkeypatch, tmp_path, capsys):
    import gymnasium as gym

    def missing(*args, **kwargs):
        raise gym.error.DependencyNotInstalled('MuJoCo is not installed, run `pip install "..."`')

    monkeypatch.setattr(gym, "make", missing)
    assert exit_code(["train", "--env", "Pendulum-v1", "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "pip install -c constraints.txt -e '.[mujoco]'" in err and "Traceback" not in err


def test_a_train_command_builds_the_env_once_before_the_workers_start(tmp_path, monkeypatch):
    # one probe picks the preset and goes to the trainer, which builds no env of its own (on
    # Atari each probe is an emulator's vector env); the Python API probes once too
    import gymnasium as gym

    import asyncrl
    from asyncrl import worker

    events: list[str] = []
    for name in ("make", "make_vec"):
        real = getattr(gym, name)
        monkeypatch.setattr(
            gym, name, lambda *a, _real=real, **k: events.append("env") or _real(*a, **k)
        )
    init = worker.Worker.__init__
    monkeypatch.setattr(
        worker.Worker, "__init__", lambda *a, **k: events.append("worker") or init(*a, **k)
    )
    args = ["train", "--steps", "200", "--workers", "1", "--backend", "threads", "--no-progress"]
    assert main([*args, "--run-dir", str(tmp_path / "cli")]) == 0
    assert events[: events.index("worker")] == ["env"]
    events.clear()
    asyncrl.train(
        steps=200, workers=1, backend="threads", progress=False, run_dir=str(tmp_path / "api")
    )
    assert events[: events.index("worker")] == ["env"]


def test_eval_of_a_run_without_model_pt_takes_its_best_model_or_names_resume(run_dir, capsys):
    """model.pt is written when a run ends; a run still training, or killed, has best_model.pt
    alone: eval plays that by default, and --which last names what would write model.pt."""
    assert main(["train", *QUICK, "--run-dir", str(run_dir)]) == 0
    (run_dir / "model.pt").unlink()
    assert main(["eval", str(run_dir), "--episodes", "1"]) == 0
    assert "best_model.pt" in capsys.readouterr().out
    assert main(["eval", str(run_dir), "--which", "last"]) == 2
    err = capsys.readouterr().err.strip()
    assert "has no model.pt yet" in err and f"asyncrl train --resume {run_dir}" in err
    assert "--which best" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("file", "content", "command", "needle"),
    [
        ("config.json", "[1, 2]", "eval", "config.json is not a run's config"),
        ("config.json", '{"algo": "a3c"}', "eval", "config.json names no env"),
        ("config.json", '{"hidden": 5}', "train", "config field hidden: a list, not 5"),
        ("summary.json", "", "plot", "cannot read"),
        ("config.json", None, "eval", "is a file; pass the RUN_DIR that holds it"),
    ],
)
def test_a_damaged_run_file_is_one_line_and_exit_2(
    file, content, command, needle, run_dir, tmp_path, capsys
):
    assert main(["train", *QUICK, "--run-dir", str(run_dir)]) == 0
    capsys.readouterr()  # (the run's own lines)
    target = run_dir
    if content is None:  # the file given where its directory belongs
        target = run_dir / file
    else:
        (run_dir / file).write_text(content)
    extra = {
        "plot": ["--out", str(tmp_path / "curve.png")],
        "eval": ["--episodes", "1"],
        "train": ["--steps", "100000"],
    }[command]
    argv = ["train", "--resume", str(target)] if command == "train" else [command, str(target)]
    assert main([*argv, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err
