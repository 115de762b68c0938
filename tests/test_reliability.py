"""Checkpoints, exact resume, signals, worker faults, NaN guards: fault injection with fixed
seeds and generous budgets. The faulty envs live in tests/envs_for_tests.py."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

import asyncrl
import asyncrl.trainer as trainer
import tests.envs_for_tests  # noqa: F401  (registers the envs)
from asyncrl.checkpoint import load_checkpoint
from asyncrl.cli import main
from asyncrl.config import field_default
from asyncrl.errors import Interrupted, TrainingError, UserError
from asyncrl.messages import Finished
from asyncrl.monitor import CSV_HEADER, Monitor
from asyncrl.rundir import RunDir


@pytest.fixture(autouse=True)
def fault_dir(tmp_path, monkeypatch):
    d = tmp_path / "faults"
    d.mkdir()
    monkeypatch.setenv("FAULT_DIR", str(d))
    return d


def params_of(run_dir):
    return torch.load(run_dir / "model.pt", weights_only=True)["state_dict"]


def assert_same_params(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


EXACT = dict(
    backend="threads",
    workers=1,
    seed=7,
    # the SIGINT env's interruption (at step 700 of the first of 16 envs: global step 11,200)
    # with a few rollouts, checkpoints and evaluations after it
    steps=16_000,
    target_return=10_000.0,
    progress=False,
    tensorboard=False,
    checkpoint_every="0",
)


def test_threads_one_worker_is_bit_for_bit_reproducible(tmp_path):
    asyncrl.train(**EXACT, run_dir=str(tmp_path / "a"))
    asyncrl.train(**EXACT, run_dir=str(tmp_path / "b"))
    assert_same_params(params_of(tmp_path / "a"), params_of(tmp_path / "b"))


@pytest.mark.parametrize(
    ("algo", "core", "normalize_obs"),
    [
        ("a3c", "none", False),
        ("a3c", "none", True),
        ("a3c", "lstm", False),
        ("nstep-q", "lstm", False),
        ("appo", "none", False),
        ("appo", "lstm", False),
    ],
)
def test_interrupted_and_resumed_run_equals_the_uninterrupted_one(
    tmp_path, algo, core, normalize_obs
):
    # lstm: the recurrent state is checkpointed with the worker and carried on exactly;
    # normalize_obs: the statistics' start and the worker's row too (GlobalSnapshot.obs_parts)
    env = "asyncrl-test/CartPole-sigint-main-v0"  # SIGINT to the main process at env step 700
    cfg = {**EXACT, "env": env, "algo": algo, "core": core, "normalize_obs": normalize_obs}
    if algo == "appo":  # shuffled minibatches over more than one pass, at a quarter of the cost
        cfg |= {"epochs": 2, "minibatches": 2}
    with pytest.raises(Interrupted) as info:
        asyncrl.train(**cfg, run_dir=str(tmp_path / "b"))
    stopped_at = info.value.step
    assert 0 < stopped_at < cfg["steps"]
    assert load_checkpoint(tmp_path / "b")["glob"].steps == stopped_at
    rows_before = (tmp_path / "b" / "episodes.csv").read_text().splitlines()
    summary = asyncrl.train(resume=tmp_path / "b")
    assert summary["resumed"] and summary["total_steps"] >= cfg["steps"]
    # the marker file keeps the fault from firing again: this run is never interrupted
    asyncrl.train(**cfg, run_dir=str(tmp_path / "a"))
    assert_same_params(params_of(tmp_path / "a"), params_of(tmp_path / "b"))
    rows_after = (tmp_path / "b" / "episodes.csv").read_text().splitlines()
    assert rows_after[: len(rows_before)] == rows_before  # appended, not rewritten
    # the same episodes, in the same order, as the uninterrupted run (wall time aside)
    uninterrupted = (tmp_path / "a" / "episodes.csv").read_text().splitlines()
    wall = CSV_HEADER.index("wall_seconds")
    assert [r.split(",")[:wall] for r in rows_after] == [r.split(",")[:wall] for r in uninterrupted]
    assert [r.split(",")[wall + 1 :] for r in rows_after] == [
        r.split(",")[wall + 1 :] for r in uninterrupted
    ]


def cli(*args, env=None):
    return subprocess.Popen(
        [sys.executable, "-m", "asyncrl.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def wait_for(path, proc, limit=120.0):
    deadline = time.monotonic() + limit
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_sigterm_writes_a_checkpoint_and_resume_continues(tmp_path, capsys):
    run_dir = tmp_path / "run"
    proc = cli(
        "train",
        "--run-dir",
        str(run_dir),
        "--steps",
        "5000000",
        "--target-return",
        "10000",
        "--checkpoint-every",
        "20000",
        "--workers",
        "2",
        "--no-progress",
    )
    wait_for(RunDir(run_dir).checkpoint, proc)
    # while it runs, its directory is its own: a resume is refused, and changes nothing
    before = snapshot(run_dir)
    assert main(["train", "--resume", str(run_dir), "--steps", "6000000"]) == 2
    assert json.loads((run_dir / "config.json").read_text())["steps"] == 5_000_000
    assert {n: before[n] for n in ("config.json", ".lock")} == {
        n: snapshot(run_dir)[n] for n in ("config.json", ".lock")
    }
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert f"asyncrl train --resume {run_dir}" in err
    ckpt = load_checkpoint(run_dir)
    steps_at_stop = int(ckpt["glob"].steps)
    episodes_at_stop = ckpt["monitor"]["episodes"]
    assert steps_at_stop > 0 and episodes_at_stop > 0

    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is in use by another run" in err

    assert main(["train", "--resume", str(run_dir), "--steps", str(steps_at_stop + 30_000)]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["resumed"] and summary["total_steps"] >= steps_at_stop + 30_000
    rows = (run_dir / "episodes.csv").read_text().splitlines()[1:]
    numbers = [int(r.split(",")[0]) for r in rows]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) > episodes_at_stop


def test_a_repeated_signal_is_one_stop_and_a_later_one_exits_at_once(monkeypatch):
    # `timeout -s INT` signals the trainer and then its whole process group, so the trainer
    # gets SIGINT twice in a row; a Pong run took the repeat for a second Ctrl-C and exited
    # without its final checkpoint. A repeat within the window is the same request.
    monkeypatch.setattr(trainer, "_SAME_SIGNAL_S", 0.3)
    asked: list[int] = []
    with trainer._signals_stop(asked.append):
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        assert asked == [signal.SIGINT]
        time.sleep(0.4)
        with pytest.raises(KeyboardInterrupt):  # a second Ctrl-C, later: exit at once
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1.0)  # the handler runs here at the latest
    assert asked == [signal.SIGINT]


def test_kill_9_of_the_main_process_loses_at_most_one_interval(tmp_path):
    run_dir = tmp_path / "run"
    proc = cli(
        "train",
        "--run-dir",
        str(run_dir),
        "--steps",
        "5000000",
        "--target-return",
        "10000",
        "--checkpoint-every",
        "20000",
        "--workers",
        "2",
        "--no-progress",
    )
    wait_for(RunDir(run_dir).checkpoint, proc)
    first = load_checkpoint(run_dir)["glob"].steps
    proc.kill()
    proc.communicate()
    # the orphaned workers notice their parent is gone and exit
    ckpt = load_checkpoint(run_dir)
    assert ckpt["glob"].steps >= first
    summary = asyncrl.train(resume=run_dir, steps=int(ckpt["glob"].steps) + 10_000, progress=False)
    assert summary["total_steps"] >= int(ckpt["glob"].steps) + 10_000


def test_worker_threads_outlive_a_change_of_the_trainers_parent(run_dir, monkeypatch):
    """nohup asyncrl train --backend threads ... & and the shell exits: the trainer is
    reparented, and its worker threads (in the trainer's own process) must not read that as
    their parent dying."""
    import itertools

    import asyncrl.backends.local as local

    pids = itertools.count(10**6)  # a new parent at every look
    monkeypatch.setattr(local.os, "getppid", lambda: next(pids))
    summary = asyncrl.train(
        backend="threads", workers=2, steps=4_000, target_return=1e9, eval_every=0,
        stop_on="train", run_dir=str(run_dir), progress=False,
    )  # fmt: skip
    assert summary["total_steps"] >= 4_000 and summary["ended"] == "budget"


def test_a_fault_after_a_signal_is_reported_not_hidden_by_it(tmp_path):
    """Ctrl-C, then a worker diverges while the others stop: the last good checkpoint is kept
    (no final one), and the error says so, where "interrupted, checkpoint saved" would not."""
    from asyncrl.rundir import RunDir
    from asyncrl.supervisor import Ended, Outcome
    from asyncrl.trainer import _raise_for

    outcome = Outcome(Ended.DIVERGED, "worker 0 failed: 10 rollouts in a row", signal=2)
    with pytest.raises(TrainingError, match="the last good checkpoint is kept"):
        _raise_for(outcome, RunDir(tmp_path), 100)
    with pytest.raises(Interrupted):  # a signal alone
        _raise_for(Outcome(Ended.INTERRUPTED, signal=2), RunDir(tmp_path), 100)


def test_a_fault_reported_twice_in_one_batch_restarts_the_worker_once(tmp_path):
    """A worker's Failed and the run's Lost for the same incarnation can arrive together: the
    first restarts it, and the second, about the incarnation gone, must not restart the new
    one (nor count a second fault)."""
    from asyncrl.messages import Failed, Lost
    from asyncrl.monitor import Monitor
    from asyncrl.rundir import RunDir
    from asyncrl.supervisor import Supervisor

    class FakeRun:
        workers = 1

        def __init__(self):
            self.inc = 0

        def incarnation(self, wid):
            return self.inc

        def restart(self, wid):
            self.inc += 1

        def global_step(self):
            return 0

    cfg = asyncrl.Config(progress=False, tensorboard=False)
    run = FakeRun()
    with Monitor(RunDir(tmp_path), cfg, target_return=None) as monitor:
        sup = Supervisor(cfg, run, monitor, lambda *a: None)  # type: ignore[arg-type]
        sup.handle(Failed(0, 0, "RuntimeError: boom", ""))
        sup.handle(Lost(0, 0, "died without a report"))
    assert run.inc == 1 and sup.outcome.restarts == 1


def test_a_worker_lost_once_the_budget_is_spent_is_retired_not_restarted(tmp_path):
    """A restarted worker would find nothing left to do; on Ray it would also count as a
    fault towards --max-worker-restarts and be logged as restarting."""
    from asyncrl.messages import Lost
    from asyncrl.monitor import Monitor
    from asyncrl.rundir import RunDir
    from asyncrl.supervisor import Supervisor

    class FakeRun:
        workers = 2

        def __init__(self):
            self.restarted, self.retired, self.step = [], [], 0

        def incarnation(self, wid):
            return 0

        def restart(self, wid):
            self.restarted.append(wid)

        def retire(self, wid):
            self.retired.append(wid)

        def global_step(self):
            return self.step

    cfg = asyncrl.Config(progress=False, tensorboard=False, steps=1000)
    run = FakeRun()
    with Monitor(RunDir(tmp_path), cfg, target_return=None) as monitor:
        sup = Supervisor(cfg, run, monitor, lambda *a: None)  # type: ignore[arg-type]
        run.step = 999
        sup.handle(Lost(0, 0, "died without a report"))
        run.step = 1000
        sup.handle(Lost(1, 0, "died without a report"))
    assert run.restarted == [0] and run.retired == [1] and sup.outcome.restarts == 1


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["raise", "kill", "hang", "nan-obs"])
def test_a_faulty_worker_is_restarted_and_the_run_reaches_its_target(fault, run_dir, capfd, seed):
    """Measured (2026-11-24) on seeds 1-5 too, every fault (ASYNCRL_TEST_SEED=S)."""
    summary = asyncrl.train(
        env=f"asyncrl-test/CartPole-{fault}-v0",
        # A hung worker is only found after --worker-timeout; with a second worker the run could
        # reach its target first (seen in CI). Alone, it cannot get anywhere until restarted.
        workers=1 if fault == "hang" else 2,
        seed=seed,
        steps=1_000_000,
        # the restart is under test, not the learning to 475 (test_learning.py holds that): the
        # stop rule confirming CartPole-v0's threshold shows the restarted run learned
        target_return=195.0,
        worker_timeout=2.0,
        run_dir=str(run_dir),
        progress=False,
    )
    err = capfd.readouterr().err
    assert summary["worker_restarts"] == 1, err
    assert summary["solved"], summary
    assert "worker 0" in err and "restarting it with fresh env state" in err
    expected = {
        "raise": "RuntimeError: injected fault in worker 0",
        "kill": "died without a report",
        "hang": "sent no update for 2 s",
        "nan-obs": "non-finite observation to worker 0",
    }[fault]
    assert expected in err


def test_restart_limit_stops_the_run_with_a_checkpoint(run_dir, capsys):
    code = main(
        [
            "train",
            "--env",
            "asyncrl-test/CartPole-always-raise-v0",
            "--workers",
            "1",
            "--max-worker-restarts",
            "2",
            "--run-dir",
            str(run_dir),
            "--no-progress",
            "--backend",
            "threads",
        ]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "over the limit of --max-worker-restarts 2" in err and "Traceback" not in err
    assert json.loads((run_dir / "summary.json").read_text())["worker_restarts"] == 3
    load_checkpoint(run_dir)  # complete and readable


def test_divergence_stops_the_run_and_keeps_the_last_good_checkpoint(run_dir, monkeypatch):
    from asyncrl import algos
    from asyncrl.algos.a3c import A3C

    class GoesNaN(A3C):
        calls = 0

        def loss(self, model, rollout, target_model=None):
            GoesNaN.calls += 1
            loss, stats = super().loss(model, rollout, target_model)
            return (loss * float("nan") if GoesNaN.calls > 300 else loss), stats

    monkeypatch.setitem(algos.REGISTRY, "a3c", GoesNaN)
    with pytest.raises(TrainingError, match="5 rollouts in a row with a non-finite update") as info:
        asyncrl.train(
            backend="threads",
            workers=1,
            steps=10**6,
            checkpoint_every="2000",
            max_nonfinite=5,
            run_dir=str(run_dir),
            progress=False,
        )
    assert "last good checkpoint is kept" in str(info.value)
    ckpt = load_checkpoint(run_dir)
    assert torch.isfinite(torch.from_numpy(ckpt["glob"].params)).all()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["nonfinite_updates"] == 5
    final = params_of(run_dir)
    assert all(torch.isfinite(v).all() for v in final.values())


# ------------------------------------------------------------------ bad input, files untouched
def snapshot(directory):
    return {
        p.name: (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(directory.iterdir())
        if p.is_file()
    }


@pytest.fixture
def finished_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("done") / "run"
    asyncrl.train(
        backend="threads",
        workers=1,
        steps=3_000,
        run_dir=str(run_dir),
        progress=False,
        tensorboard=False,
    )
    return run_dir


@pytest.mark.parametrize("damage", ["missing", "truncated", "corrupt", "model-shape", "best-model"])
def test_resume_rejects_a_bad_checkpoint_and_changes_nothing(damage, finished_run, capsys):
    ckpt = RunDir(finished_run).checkpoint
    if damage == "missing":
        ckpt.unlink()
    elif damage == "truncated":
        ckpt.write_bytes(ckpt.read_bytes()[:-100])
    elif damage == "corrupt":
        blob = bytearray(ckpt.read_bytes())
        blob[-50] ^= 0xFF
        ckpt.write_bytes(bytes(blob))
    elif damage == "best-model":
        assert (finished_run / "best_model.pt").is_file()
        (finished_run / "best_model.pt").write_bytes(b"not a model")
    else:
        cfg = json.loads((finished_run / "config.json").read_text())
        cfg["hidden"] = [32]
        (finished_run / "config.json").write_text(json.dumps(cfg))
    before = snapshot(finished_run)
    assert main(["train", "--resume", str(finished_run), "--steps", "100000"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert {
        "missing": "has no checkpoint",
        "truncated": "is truncated",
        "corrupt": "is corrupt",
        "model-shape": "does not fit its config",
        "best-model": "best_model.pt cannot be read",
    }[damage] in err
    assert snapshot(finished_run) == before


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--preset", "paper"], "--preset: a resumed run keeps its settings"),
        (["--run-dir", "ELSEWHERE"], "--run-dir: a resumed run goes on in its own directory"),
    ],
)
def test_resume_refuses_what_it_would_ignore_and_changes_nothing(
    extra, needle, finished_run, tmp_path, capsys
):
    extra = [str(tmp_path / "elsewhere") if a == "ELSEWHERE" else a for a in extra]
    before = snapshot(finished_run)
    assert main(["train", "--resume", str(finished_run), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err
    assert snapshot(finished_run) == before and not (tmp_path / "elsewhere").exists()


def test_a_ray_run_resumes_on_another_backend_without_its_ray_options(finished_run):
    """The command line cannot unset a saved option: a Ray run's --max-staleness,
    --ray-servers or --ray-batch, which another backend would ignore, go back to their defaults
    on a resume with --backend threads (given there, they are refused)."""
    path = finished_run / "config.json"
    cfg = json.loads(path.read_text())
    # as a Ray run saves them
    cfg |= {"backend": "ray", "max_staleness": 4, "ray_servers": 2, "ray_batch": 4}
    path.write_text(json.dumps(cfg))
    summary = asyncrl.train(resume=finished_run, backend="threads", steps=3_500, progress=False)
    assert summary["resumed"] and summary["total_steps"] >= 3_500
    resumed = json.loads(path.read_text())
    assert resumed["max_staleness"] is None and resumed["ray_servers"] == 1
    assert resumed["ray_batch"] is None
    with pytest.raises(UserError, match="--max-staleness: applies to --backend ray only"):
        asyncrl.train(resume=finished_run, backend="threads", max_staleness=2, progress=False)
    with pytest.raises(UserError, match="--ray-batch: applies to --backend ray only"):
        asyncrl.train(resume=finished_run, backend="threads", ray_batch=2, progress=False)


@pytest.mark.parametrize(
    ("saved", "given", "needle"),
    [
        ({"lstm_size": 64}, {"lstm_size": 32}, "--lstm-size: sizes a recurrent core"),
        # the atari preset's Q schedule, saved with an A3C run before presets left it out
        ({"target_update": 10_000}, {"target_update": 500}, "--target-update: a3c does not"),
        ({"epochs": 2}, {"epochs": 3}, "--epochs: a3c does not read it (it applies to appo)"),
        ({"rho_bar": 2.0}, {"rho_bar": 3.0}, "--rho-bar: truncates V-trace's importance"),
        ({"obs_clip": 5.0}, {"obs_clip": 4.0}, "--obs-clip: clips normalised observations"),
        # the Gaussian's options, on CartPole's Discrete actions
        ({"log_std_init": -1.0}, {"log_std_init": -2.0}, "--log-std-init: CartPole-v1 has"),
        ({"gaussian_std": "softplus"}, {"gaussian_std": "softplus"}, ": drop --gaussian-std"),
        # the Gaussian's defaults, which older versions saved for every action space
        ({"gaussian_std": "param"}, {"log_std_init": 0.0}, "--log-std-init: CartPole-v1 has"),
        # Ray's tuning, which older versions' presets saved for every backend
        ({"ray_batch": 1}, {"ray_batch": 1}, "--ray-batch: applies to --backend ray only"),
        ({"ray_pipeline": 0}, {"ray_pipeline": 0}, "--ray-pipeline: applies to --backend ray"),
    ],
)
def test_a_resume_drops_a_saved_option_an_older_version_accepted_and_ignored(
    saved, given, needle, finished_run
):
    """--lstm-size without a core, or an option of another algorithm, was accepted and unused: a
    run saved so resumes (it learnt without it), and the option goes back to its default; given
    now, it is refused."""
    run = finished_run
    path = run / "config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | saved))
    summary = asyncrl.train(resume=run, steps=3_500, progress=False)
    (name,) = saved
    assert summary["resumed"] and json.loads(path.read_text())[name] == field_default(name)
    with pytest.raises(UserError, match=re.escape(needle)):
        asyncrl.train(resume=run, **given, steps=4_000, progress=False)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        # the envs are part of each worker's checkpointed state
        (["--env", "CartPole-v0"], "--env: a resumed run goes on with its own env (CartPole-v1)"),
        (["--env-kwargs", "sutton_barto_reward=true"], "--env-kwargs: a resumed run goes on"),
        # --steps is the whole budget, not more steps (the run has taken at least 3,000)
        (["--steps", "2000"], "--steps 2,000: RUN has taken"),
        ([], "--steps 3,000: RUN has taken"),
        # and so is --time-limit (a resumed run's clock goes on)
        (["--steps", "100000", "--time-limit", "0.01s"], "--time-limit 0.01s: RUN has run"),
    ],
)
def test_resume_refuses_another_env_or_a_spent_budget(extra, needle, finished_run, capsys):
    before = snapshot(finished_run)
    assert main(["train", "--resume", str(finished_run), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle.replace("RUN", str(finished_run)) in err
    assert snapshot(finished_run) == before


def test_a_forked_worker_does_not_keep_the_run_directory_held(tmp_path):
    """The processes backend forks its workers: a child that outlives the run's process (an
    orphan after a kill -9) must not keep the directory locked against a resume."""
    run = RunDir(tmp_path)
    started, ready = os.pipe()
    with run.locked():
        child = os.fork()
        if child == 0:  # a worker (its fork hooks have run), still alive when the run lets go
            os.write(ready, b"x")
            time.sleep(5)
            os._exit(0)
    os.read(started, 1)
    try:
        with run.locked():  # would raise "in use" had the child kept the parent's lock
            pass
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        os.close(started)
        os.close(ready)


def test_a_resume_with_another_number_of_envs_starts_the_workers_afresh(finished_run, capfd):
    """A worker's checkpointed state holds its envs: with --envs-per-worker changed the workers
    start new ones (as with another --workers), rather than failing to restore them."""
    taken = load_checkpoint(finished_run)["glob"].steps
    summary = asyncrl.train(
        resume=finished_run, envs_per_worker=4, steps=taken + 2_000, progress=False
    )
    assert "failed" not in capfd.readouterr().err
    assert summary["resumed"] and summary["worker_restarts"] == 0
    assert summary["total_steps"] >= taken + 2_000


@pytest.mark.parametrize("damage", ["deleted", "cut-mid-row"])
def test_a_resume_after_the_episodes_file_lost_rows_goes_on_without_padding_it(
    damage, finished_run, capfd
):
    """episodes.csv shorter than the checkpoint recorded (deleted, or cut short): the resume
    keeps its whole rows and goes on after them; it never pads the file to the old size."""
    path = RunDir(finished_run).episodes
    rows = path.read_text().splitlines(keepends=True)
    if damage == "deleted":
        path.unlink()
        kept = [",".join(CSV_HEADER) + "\n"]
    else:
        kept = rows[:3]
        path.write_text("".join(kept) + rows[3][:5])  # a row cut in the middle
    ckpt = load_checkpoint(finished_run)
    taken, episodes = ckpt["glob"].steps, ckpt["monitor"]["episodes"]
    asyncrl.train(resume=finished_run, steps=taken + 3_000, progress=False)
    assert "episodes.csv holds less than the checkpoint recorded" in capfd.readouterr().err
    text = path.read_text()
    assert "\0" not in text and text.startswith("".join(kept))
    new = text.splitlines()[len(kept) :]
    assert new and all(len(r.split(",")) == len(CSV_HEADER) for r in new)
    assert int(new[0].split(",")[0]) == episodes + 1  # numbered on from the checkpoint's


def test_a_run_resumed_from_before_the_start_frames_column_keeps_its_files_columns(tmp_path):
    cfg = asyncrl.Config(tensorboard=False, progress=False)
    (tmp_path / "new").mkdir()
    with Monitor(RunDir(tmp_path / "new"), cfg, target_return=None) as monitor:
        monitor.episode(0, Finished(-21.0, 800, 13), 800)
        state = monitor.state_dict()
    new = (tmp_path / "new" / "episodes.csv").read_text().splitlines()
    assert new[0] == ",".join(CSV_HEADER) and new[1].endswith(",13")
    # the same episode in the six columns of a run made before start_frames
    old = "".join(",".join(r.split(",")[:6]) + "\n" for r in new)
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "episodes.csv").write_text(old)
    state["csv_bytes"] = len(old)
    with Monitor(RunDir(tmp_path / "old"), cfg, target_return=None, state=state) as resumed:
        resumed.episode(1, Finished(-20.0, 900, 6), 1700)
    rows = (tmp_path / "old" / "episodes.csv").read_text().splitlines()
    assert rows[:2] == old.splitlines() and rows[2].split(",")[:4] == ["2", "1", "-20", "900"]
    assert len(rows) == 3 and len(rows[2].split(",")) == 6


def test_observation_that_does_not_match_its_space(run_dir, capsys):
    assert main(["train", "--env", "asyncrl-test/BadShape-v0", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "observation of shape (3,)" in err and "declares (1,)" in err
    assert not run_dir.exists()


def test_resume_of_a_missing_directory(tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
