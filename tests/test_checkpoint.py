"""A checkpoint is data, not code: what loading one may build, and what a resume must refuse
before it changes anything (a forged file, a toggled --normalize-obs)."""

import os
import pickle

import pytest

import asyncrl
import tests.envs_for_tests  # noqa: F401  (registers the envs)
from asyncrl.checkpoint import Refused, check_env_state, load_checkpoint, save_checkpoint
from asyncrl.cli import main
from asyncrl.envs import dump_vec_env, make_vec_env
from asyncrl.rundir import RunDir


def train(run_dir, **kw):
    quick = dict(backend="threads", workers=1, steps=600, progress=False, tensorboard=False)
    asyncrl.train(**{**quick, **kw}, run_dir=str(run_dir))
    return run_dir


def files(directory):
    return {
        p.name: (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(directory.iterdir())
        if p.is_file()
    }


class RunsCode:
    """Unpickles as a call of os.system: what a forged checkpoint would hold."""

    def __init__(self, marker):
        self.command = f"touch {marker}"

    def __reduce__(self):
        return (os.system, (self.command,))


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    return train(tmp_path_factory.mktemp("cartpole") / "run")


@pytest.mark.parametrize("where", ["payload", "env state"])
def test_resume_refuses_a_checkpoint_that_would_run_code(where, cartpole_run, tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for p in cartpole_run.iterdir():
        if p.is_file():
            (run_dir / p.name).write_bytes(p.read_bytes())
    marker = tmp_path / "code-ran"
    payload = load_checkpoint(run_dir)
    if where == "payload":
        payload["monitor"]["episodes"] = RunsCode(marker)
    else:  # the vector env's own pickle, which each worker unpickles as it starts
        (state,) = payload["workers"].values()
        state["envs"] = pickle.dumps(RunsCode(marker))
    save_checkpoint(run_dir, payload)  # a whole file, its digest right: the digest cannot tell
    before = files(run_dir)
    assert main(["train", "--resume", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert not marker.exists()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "is not trusted" in err and f"refuses to build {os.system.__module__}.system" in err
    assert "a checkpoint is data, not code" in err
    assert files(run_dir) == before


@pytest.mark.parametrize(
    ("env", "kw"),
    [
        ("CartPole-v1", {"algo": "onestep-sarsa"}),  # a native vector env; Sarsa's pending action
        ("Pendulum-v1", {"normalize_obs": True}),  # SyncVectorEnv with Gymnasium's wrappers
        ("asyncrl-test/Counter-v0", {}),  # registered by a module of its own (tests/)
    ],
)
def test_real_checkpoints_load_through_the_allow_lists(env, kw, tmp_path):
    payload = load_checkpoint(train(tmp_path / "run", env=env, **kw))
    (state,) = payload["workers"].values()
    assert isinstance(state["envs"], bytes)  # the env state was there, and was checked
    assert payload["glob"].steps >= 600


def test_an_env_state_may_build_only_classes_of_the_env_packages():
    import gymnasium.envs.registration as registration

    class Loader:  # a Gymnasium *function* that imports and returns any callable
        def __reduce__(self):
            return (registration.load_env_creator, ("os:system",))

    with pytest.raises(Refused, match="load_env_creator"):
        check_env_state(pickle.dumps(Loader()), "CartPole-v1")
    # an attribute path from an allowed module to one it imported
    walk = (
        b"\x80\x04\x8c\x1bgymnasium.envs.registration\x94\x8c\x17importlib.import_module\x94"
        b"\x93\x94\x8c\x02os\x94\x85\x94R\x94."
    )
    with pytest.raises(Refused, match=r"importlib\.import_module"):
        check_env_state(walk, "CartPole-v1")
    # numpy only by name: its memmap is a class that writes files
    import numpy as np

    with pytest.raises(Refused, match="memmap"):
        check_env_state(pickle.dumps(np.memmap), "CartPole-v1")
    # the env's own package comes from Gymnasium's registry: tests/ for the test envs
    data = dump_vec_env(make_vec_env("asyncrl-test/Counter-v0", 1))
    check_env_state(data, "asyncrl-test/Counter-v0")
    with pytest.raises(Refused, match=r"tests\.envs_for_tests"):
        check_env_state(data, "CartPole-v1")


# ------------------------------------------------------------------ --normalize-obs on resume
@pytest.mark.parametrize(
    ("trained", "resumed", "fix"),
    [
        (False, "--normalize-obs", "was trained without --normalize-obs"),
        (True, "--no-normalize-obs", "was trained with --normalize-obs"),
    ],
)
def test_resume_refuses_a_toggled_normalize_obs(trained, resumed, fix, tmp_path, capsys):
    run_dir = train(tmp_path / "run", normalize_obs=trained)
    before = files(run_dir)
    capsys.readouterr()  # (the run's own lines)
    assert main(["train", "--resume", str(run_dir), resumed]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("asyncrl train: error: --normalize-obs:") and fix in err
    assert f"resume without {resumed}, or start a new run" in err
    assert files(run_dir) == before
    # the clip only bounds the normalised inputs: a resume may change it where there are any
    flag = "--normalize-obs" if trained else "--no-normalize-obs"
    more = ["--steps", "1200"]  # (the run spent its 600)
    assert main(["train", "--resume", str(run_dir), flag, "--obs-clip", "5", *more]) == (
        0 if trained else 2
    )
    assert RunDir(run_dir).checkpoint.is_file()
