"""An encoder of the user's own (``--encoder package.module:Class``, ``asyncrl.train(encoder=
Class)``): built on the observation space, given the observations in the space's structure,
located by its import path on every backend, in checkpoints, ``asyncrl.load`` and export; a
class that does not fit is one line and exit 2 with nothing written. The Ray run is in
tests/backends/test_ray.py (its cluster)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import asyncrl
import tests.envs_for_tests  # noqa: F401  (registers the envs)
from asyncrl.cli import main
from asyncrl.envs import probe_env
from asyncrl.errors import UserError
from asyncrl.models import UserEncoder, build_model, check_encoder
from asyncrl.spaces import encoder_space, space_from_json, space_to_json
from tests.envs_for_tests import DictCueEnv
from tests.oracles import spec_for
from tests.user_encoders import Seen, TinyEncoder

ROOT = Path(__file__).resolve().parents[1]
CUE = "tests.envs_for_tests:asyncrl-test/DictCue-v0"
TINY = "tests.user_encoders:TinyEncoder"
QUICK = dict(
    workers=2, envs_per_worker=4, progress=False, tensorboard=False, eval_episodes=2,
    confirm_episodes=0,
)  # fmt: skip


# ---------------------------------------------------------------- the space and the structure
@pytest.mark.parametrize(
    "space",
    [
        DictCueEnv().observation_space,
        gym.make("CartPole-v1").observation_space,  # bounds of their own, two of them inf
        gym.spaces.Box(0, 255, (4, 84, 84), np.uint8),
        gym.spaces.Box(0, 1, (3,), bool),
        gym.spaces.MultiBinary([2, 3]),
        gym.spaces.Tuple((gym.spaces.Discrete(5, start=-2), gym.spaces.MultiDiscrete([[2, 3]]))),
    ],
    ids=["dict", "cartpole", "frames", "bool", "multibinary", "tuple"],
)
def test_the_space_comes_back_from_its_json_exactly(space):
    text = space_to_json(space)
    back = space_from_json(text)
    assert back == space and type(back) is type(space)
    assert [type(s) for s in _leaf_spaces(back)] == [type(s) for s in _leaf_spaces(space)]


def _leaf_spaces(space):
    if isinstance(space, gym.spaces.Dict):
        return [s for v in space.spaces.values() for s in _leaf_spaces(v)]
    if isinstance(space, gym.spaces.Tuple):
        return [s for v in space.spaces for s in _leaf_spaces(v)]
    return [space]


def test_the_encoder_space_keeps_the_obs_keys_and_leaves_the_mask_out():
    space = gym.spaces.Dict(
        {
            "action_mask": gym.spaces.MultiBinary(3),
            "a": gym.spaces.Discrete(2),
            "b": gym.spaces.Dict(
                {"action_mask": gym.spaces.MultiBinary(3), "c": gym.spaces.Discrete(2)}
            ),
        }
    )
    assert list(encoder_space(space).spaces) == ["a", "b"]
    assert list(encoder_space(space)["b"].spaces) == ["c"]
    assert list(encoder_space(space, ("b",)).spaces) == ["b"]


def test_forward_gets_the_observation_in_its_space_structure_and_dtypes():
    """The packed row goes back into the env's own dict: nested tuple and dict, each leaf in
    its space's dtype, a Discrete with its start, the batch axis first."""
    info = probe_env(CUE)
    cfg = asyncrl.Config(env=CUE, encoder="tests.user_encoders:Seen")
    model = build_model(spec_for(cfg, info))
    assert isinstance(model.encoder, UserEncoder) and isinstance(model.encoder.net, Seen)
    env = DictCueEnv()
    obs, _ = env.reset(seed=3)
    rows = torch.from_numpy(info.obs_layout.pack(obs)[None].repeat(2, 0))
    model.act(rows, model.initial_state(2), torch.zeros(2, dtype=torch.bool))
    got = Seen.last
    assert list(got) == list(env.observation_space.spaces)  # the space's key order
    assert int(got["cue"][1]) == obs["cue"] and got["cue"].dtype == torch.int64  # start 1 back
    assert isinstance(got["extra"], tuple) and list(got["extra"][1]) == ["k"]
    for key, want in [("image", obs["image"]), ("pos", obs["pos"])]:
        assert got[key].shape == (2, *want.shape) and got[key].dtype == torch.from_numpy(want).dtype
        np.testing.assert_array_equal(got[key][0].numpy(), want)
    np.testing.assert_array_equal(got["extra"][0][1].numpy(), obs["extra"][0])
    assert got["extra"][0].dtype == torch.int8  # MultiBinary's dtype
    np.testing.assert_array_equal(got["extra"][1]["k"][0].numpy(), obs["extra"][1]["k"])
    # a Box: one tensor as the env gives it (uint8 frames unscaled)
    frames = probe_env("asyncrl-test/Frames-v0")
    spec = spec_for(asyncrl.Config(env="asyncrl-test/Frames-v0", encoder=TINY), frames)
    x = torch.randint(0, 256, (3, *frames.obs_shape), dtype=torch.uint8)
    got = UserEncoder(spec).observation(x)
    assert got.dtype == torch.uint8 and got.shape == x.shape and got.data_ptr() == x.data_ptr()
    # a Discrete observation (one leaf, no key): its values, (B,)
    lake = probe_env("FrozenLake-v1")
    spec = spec_for(asyncrl.Config(env="FrozenLake-v1", encoder=TINY), lake)
    check_encoder(spec, "processes")
    got = UserEncoder(spec).observation(torch.tensor([[3], [15]], dtype=torch.uint8))
    assert got.dtype == torch.int64 and got.tolist() == [3, 15]


# ---------------------------------------------------------------- training on each backend
@pytest.mark.parametrize(
    "backend, env, algo",
    [
        ("threads", "CartPole-v1", "a3c"),
        ("processes", "CartPole-v1", "a3c"),
        ("threads", CUE, "a3c"),
        ("processes", CUE, "a3c"),
        ("processes", CUE, "appo"),
        ("threads", "CartPole-v1", "nstep-q"),
    ],
)
def test_a_run_trains_with_the_encoder_and_its_policy_loads_and_acts(backend, env, algo, run_dir):
    summary = asyncrl.train(
        env=env, backend=backend, algo=algo, encoder=TINY, encoder_kwargs=("width=8",),
        steps=1_500, eval_every=1_000, run_dir=str(run_dir), **QUICK,
    )  # fmt: skip
    assert summary["total_steps"] >= 1_500 and summary["evaluations"] >= 1, summary
    assert json.loads((run_dir / "config.json").read_text())["encoder"] == TINY
    policy = asyncrl.load(run_dir)
    assert policy.spec.encoder_class == TINY and policy.spec.encoder_kwargs == ("width=8",)
    net = policy.model.encoder.net
    assert isinstance(net, TinyEncoder) and net.features_dim == 8
    obs, _ = gym.make(env.split(":")[-1]).reset(seed=0)
    assert policy.act(obs) in range(policy.spec.action.n)


def test_the_encoders_parameters_are_learnt_and_shared_by_actor_and_critic(run_dir):
    from asyncrl.state import GlobalState

    cfg = asyncrl.Config(
        env="CartPole-v1", backend="threads", encoder=TINY, steps=1_000, eval_every=0,
        stop_on="train", run_dir=str(run_dir), **{**QUICK, "workers": 1},
    )  # fmt: skip
    asyncrl.train(cfg)
    policy = asyncrl.load(run_dir)
    model = policy.model
    assert model.pi_body is model.v_body and model.shared_trunk  # SB3's shared extractor
    # the encoder's parameters lead the network's flat vector: the run started from the
    # global state's (seeded) vector, and learnt them
    start = GlobalState.create(cfg, policy.spec, 1, False, shared=False).params
    n = sum(p.numel() for p in model.encoder.parameters())
    assert n == 4 * 16 + 16
    learnt = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert learnt.shape == start.shape
    assert (learnt[:n] != start[:n]).float().mean() > 0.9


def test_a_run_with_the_encoder_resumes_from_its_checkpoint(run_dir):
    base = dict(env=CUE, backend="processes", encoder=TINY, eval_every=0, stop_on="train", **QUICK)
    asyncrl.train(**base, steps=1_000, run_dir=str(run_dir))
    # the same encoder given again is the run's own; another (of the same shapes) is refused
    summary = asyncrl.train(resume=run_dir, steps=2_000, progress=False, encoder=TinyEncoder)
    assert summary["resumed"] and summary["total_steps"] >= 2_000
    with pytest.raises(UserError, match="--encoder: a resumed run goes on with its own encoder"):
        asyncrl.train(resume=run_dir, steps=3_000, encoder="tests.user_encoders:Seen")


def test_python_takes_the_class_and_records_its_import_path(run_dir):
    asyncrl.train(
        env="CartPole-v1", backend="threads", encoder=TinyEncoder, steps=500, eval_every=0,
        stop_on="train", run_dir=str(run_dir), **QUICK,
    )  # fmt: skip
    assert json.loads((run_dir / "config.json").read_text())["encoder"] == TINY
    assert 'encoder = "tests.user_encoders:TinyEncoder"' in (run_dir / "config.toml").read_text()
    # and a config made with the class, as asyncrl.preset makes one
    cfg = asyncrl.preset(None, env="CartPole-v1", encoder=TinyEncoder)
    assert cfg.encoder is TinyEncoder
    summary = asyncrl.train(
        cfg, backend="threads", steps=500, eval_every=0, stop_on="train",
        run_dir=str(run_dir.parent / "again"), **QUICK,
    )  # fmt: skip
    assert summary["total_steps"] >= 500


# ---------------------------------------------------------------- what does not fit
@pytest.mark.parametrize(
    "encoder, words",
    [
        ("tests.no_such_module:X", "no module named 'tests.no_such_module'"),
        ("tests.user_encoders:Missing", "module 'tests.user_encoders' has no 'Missing'"),
        ("tests.user_encoders", "give package.module:Class"),
        ("tests.user_encoders:NotAModule", "is a class, not an nn.Module subclass"),
        ("tests.user_encoders:a_function", "is a function, not an nn.Module subclass"),
        ("tests.user_encoders:NoSpaceArgument", "NoSpaceArgument(observation_space) failed"),
        ("tests.user_encoders:NoFeaturesDim", "needs an int attribute features_dim"),
        ("tests.user_encoders:WrongWidth", "returned torch.float32 (2, 8) for a batch of 2"),
        ("tests.user_encoders:Float64Output", "returned torch.float64 (2, 16)"),
        ("tests.user_encoders:FailingForward", "forward failed on two observations"),
        ("tests.user_encoders:RunningStats", "changes its buffer 'norm.running_mean'"),
    ],
)
def test_a_class_that_does_not_fit_is_one_line_and_exit_2_with_nothing_written(
    encoder, words, run_dir, capsys
):
    args = ["train", "--env", CUE, "--encoder", encoder, "--run-dir", str(run_dir)]
    assert main([*args, "--steps", "100", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert words in err and "--encoder" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert not run_dir.exists()


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--net", "a3c"], "--net: names asyncrl's own encoder, which --encoder replaces"),
        (["--hidden", "32"], "--hidden: sizes asyncrl's MLP encoder"),
        (["--normalize-obs"], "--normalize-obs: normalises the input of asyncrl's own encoders"),
        (["--precision", "bfloat16"], "--precision: sets the arithmetic of asyncrl's conv"),
        (["--encoder-kwargs", "width"], "--encoder-kwargs: give KEY=VALUE pairs, got 'width'"),
        (["--encoder-kwargs", "depth=2"], "TinyEncoder(observation_space, depth=2) failed"),
    ],
)
def test_the_options_it_replaces_are_refused_beside_it(extra, words, run_dir, capsys):
    args = ["train", "--env", "CartPole-v1", "--encoder", TINY, "--run-dir", str(run_dir)]
    assert main([*args, *extra, "--steps", "100", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1, err
    assert not run_dir.exists()


def test_encoder_kwargs_without_an_encoder_are_refused(run_dir, capsys):
    assert main(["train", "--encoder-kwargs", "width=8", "--run-dir", str(run_dir)]) == 2
    assert "--encoder-kwargs: add --encoder, or drop them" in capsys.readouterr().err
    assert not run_dir.exists()


def test_a_presets_values_for_the_built_in_encoders_are_left_out():
    for name in ("control", "atari"):
        cfg = asyncrl.preset(name, encoder=TINY)
        assert (cfg.normalize_obs, cfg.precision, cfg.net) == (False, "float32", "auto"), name


def test_python_refuses_a_class_no_other_process_can_import(run_dir):
    class Inner(TinyEncoder):
        pass

    with pytest.raises(UserError, match=r"defined inside a function .* top level of a module"):
        asyncrl.train(encoder=Inner, run_dir=str(run_dir))
    with pytest.raises(UserError, match=r"give the class \(TinyEncoder\), not an instance"):
        asyncrl.train(encoder=TinyEncoder(gym.spaces.Box(0, 1, (4,))), run_dir=str(run_dir))
    # a class of the script itself (__main__) on a backend whose workers cannot import it
    main_class = type("MainEncoder", (TinyEncoder,), {"__module__": "__main__"})
    for backend in ("processes", "ray"):
        with pytest.raises(UserError, match=r"defined in the script you run .* my_encoders"):
            asyncrl.train(encoder=main_class, backend=backend, run_dir=str(run_dir), steps=100)
    assert not run_dir.exists()


def test_a_class_of_the_script_itself_trains_on_threads(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(
            """
            import asyncrl, gymnasium as gym, torch
            from torch import nn

            class Mine(nn.Module):
                def __init__(self, observation_space):
                    super().__init__()
                    self.linear = nn.Linear(4, 8)
                    self.features_dim = 8

                def forward(self, obs):
                    return torch.tanh(self.linear(obs))

            if __name__ == "__main__":
                asyncrl.train(env="CartPole-v1", encoder=Mine, backend="threads", workers=1,
                              steps=300, eval_every=0, stop_on="train", progress=False,
                              run_dir="run")
                policy = asyncrl.load("run")
                print(policy.spec.encoder_class, policy.act(gym.make("CartPole-v1").reset()[0]))
            """
        )
    )
    env = {"PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    r = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "__main__:Mine"
    # another program cannot rebuild it: one line that says why
    r = subprocess.run(
        [sys.executable, "-m", "asyncrl.cli", "eval", "run", "--episodes", "1"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 2 and "was defined in the script that trained the run" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


# ---------------------------------------------------------------- export
@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
def test_a_run_with_the_encoder_exports_and_acts_as_its_policy(run_dir, tmp_path):
    pytest.importorskip("onnxruntime")
    import onnxruntime as ort

    from asyncrl.export import export_policy

    asyncrl.train(
        env="CartPole-v1", backend="threads", encoder=TINY, steps=1_000, eval_every=0,
        stop_on="train", run_dir=str(run_dir), **QUICK,
    )  # fmt: skip
    policy = asyncrl.load(run_dir)
    env = gym.make("CartPole-v1")
    obs = np.stack([env.observation_space.sample() for _ in range(64)]).astype(np.float32)
    want = np.array([policy.act(o) for o in obs])
    onnx_file = export_policy(run_dir, tmp_path / "p.onnx").path
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(session.run(None, {"obs": obs})[0], want)
    ts = export_policy(run_dir, tmp_path / "p.pt", "torchscript").path
    loaded = torch.jit.load(str(ts))
    np.testing.assert_array_equal(loaded(torch.from_numpy(obs))[0].numpy(), want)


def test_an_encoder_tracing_cannot_follow_is_refused_with_one_line(run_dir, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    asyncrl.train(
        env="CartPole-v1", backend="threads", encoder="tests.user_encoders:NumpyInside",
        steps=300, eval_every=0, stop_on="train", run_dir=str(run_dir), **QUICK,
    )  # fmt: skip
    capsys.readouterr()  # (the run's own lines)
    for fmt in ("onnx", "torchscript"):
        out = tmp_path / f"p.{fmt}"
        assert main(["export", str(run_dir), "--format", fmt, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "the encoder tests.user_encoders:NumpyInside does not export" in err, err
        assert len(err.strip().splitlines()) == 1 and not out.exists()


# ---------------------------------------------------------------- loading elsewhere
def test_loading_a_run_whose_encoder_module_is_gone_is_one_line(run_dir, tmp_path, monkeypatch):
    (tmp_path / "gone_encoders.py").write_text("from tests.user_encoders import TinyEncoder\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    asyncrl.train(
        env="CartPole-v1", backend="threads", encoder="gone_encoders:TinyEncoder", steps=300,
        eval_every=0, stop_on="train", run_dir=str(run_dir), **QUICK,
    )  # fmt: skip
    (tmp_path / "gone_encoders.py").unlink()
    monkeypatch.delitem(sys.modules, "gone_encoders")
    with pytest.raises(UserError, match="no module named 'gone_encoders'") as e:
        asyncrl.load(run_dir)
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------- the documented example
def test_the_documented_example_trains_evaluates_and_exports(tmp_path):
    """docs/spaces.md's encoder, as written, in a module of the working directory, trained
    by the documented command (on a small budget), then evaluated and exported by the CLI."""
    pytest.importorskip("minigrid")
    text = (ROOT / "docs" / "spaces.md").read_text()
    section = text[text.index("## Your own encoder") :]
    code = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    command = next(
        line for block in re.findall(r"```bash\n(.*?)```", section, re.S)
        for line in block.splitlines() if line.startswith("asyncrl train")
    )  # fmt: skip
    (tmp_path / "my_encoders.py").write_text(code)
    quick = "--steps 1000 --workers 2 --envs-per-worker 4 --eval-every 500 --eval-episodes 1"
    env = {"PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    asyncrl_cmd = [sys.executable, "-m", "asyncrl.cli"]
    for args in (
        [*command.split()[1:], *quick.split(), "--no-progress", "--run-dir", "run"],
        ["eval", "run", "--episodes", "1"],
        ["export", "run", "--out", "grid.onnx"],
    ):
        r = subprocess.run(
            [*asyncrl_cmd, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert r.returncode == 0, (args, r.stderr)
    assert (tmp_path / "grid.onnx").is_file()
    spec = json.loads((tmp_path / "run" / "config.json").read_text())
    assert spec["encoder"] == "my_encoders:GridEncoder" and spec["encoder_kwargs"] == ["width=64"]
