"""``asyncrl export``: the exported module acts as ``Policy.act`` does, the ONNX file in a
process that cannot import PyTorch; bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import dataclasses
import json
import pickle
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import asyncrl
import tests.envs_for_tests  # noqa: F401  (registers the envs)
from asyncrl.cli import main
from asyncrl.envs import ActionSpace
from asyncrl.errors import UserError
from asyncrl.export import MASKED_SCORE, export_policy, obs_ports, pack_obs
from asyncrl.models import ModelSpec, build_model
from asyncrl.onnx_policy import OnnxPolicy
from asyncrl.spaces import obs_layout

# PyTorch 2.13 marks torch.jit deprecated; the TorchScript exports load with it all the same
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "src" / "asyncrl" / "onnx_policy.py"

QUICK = dict(
    backend="threads",
    workers=1,
    envs_per_worker=4,
    progress=False,
    tensorboard=False,
    eval_episodes=2,
    confirm_episodes=0,
)
#: the runs exported: each trains for a few rollouts (the policies are barely trained, but
#: every part of the network is there, and the A3C CartPole run a few thousand steps)
RUNS: dict[str, dict] = {
    "cartpole": dict(env="CartPole-v1", steps=3_000, normalize_obs=True),
    "frames": dict(env="asyncrl-test/Frames-v0", steps=200, envs_per_worker=2, t_max=5),
    "minatar": dict(env="asyncrl-test/BoolFrames-v0", steps=200, t_max=5),
    "pendulum": dict(env="Pendulum-v1", steps=1_000),
    "pendulum-squash": dict(env="Pendulum-v1", steps=1_000, squash=True),
    "lstm": dict(env="CartPole-v1", steps=1_000, core="lstm"),
    "gru": dict(env="CartPole-v1", steps=1_000, core="gru", normalize_obs=True),
    "nstep-q": dict(env="CartPole-v1", steps=1_000, algo="nstep-q"),
    "prev-discrete": dict(
        env="asyncrl-test/Guess-v0", steps=1_000, core="lstm", prev_action_reward=True
    ),
    "prev-box": dict(
        env="Pendulum-v1", steps=1_000, core="gru", prev_action_reward=True, reward_scale=0.1
    ),
    # a Dict observation with a leaf of every kind (an image, a normalised vector, a Discrete
    # from 1, a Tuple of a MultiBinary and a Dict of a MultiDiscrete), packed into float32 rows
    "dict": dict(env="asyncrl-test/DictCue-v0", steps=3_000, normalize_obs=True),
    # MiniGrid's image and direction, packed into uint8 rows, its mission text left out
    "minigrid": dict(env="MiniGrid-DoorKey-5x5-v0", obs_keys=("image", "direction"), steps=1_000),
    # a Discrete observation: one leaf with the empty name, the input ``obs``
    "discrete-obs": dict(env="FrozenLake-v1", steps=1_000),
    # a Tuple observation of three Discretes: the inputs obs.0, obs.1, obs.2
    "tuple": dict(env="Blackjack-v1", steps=1_000),
    # a Dict observation through a recurrent core that takes the previous action and reward
    "dict-lstm": dict(
        env="asyncrl-test/DictCue-v0", steps=1_000, core="lstm", prev_action_reward=True
    ),
    # action spaces: Discrete from -1, MultiDiscrete from (1, -2), MultiBinary; with a core that
    # takes the previous action (its one-hot from the start; none: one below it)
    "shifted": dict(env="asyncrl-test/Shifted-v0", steps=1_000),
    "shifted-q": dict(env="asyncrl-test/Shifted-v0", steps=1_000, algo="nstep-q"),
    "match": dict(env="asyncrl-test/Match-v0", steps=1_000),
    "bits": dict(env="asyncrl-test/Bits-v0", steps=1_000),
    "shifted-prev": dict(
        env="asyncrl-test/Shifted-v0", steps=1_000, core="gru", prev_action_reward=True
    ),
    "match-prev": dict(
        env="asyncrl-test/Match-v0", steps=1_000, core="lstm", prev_action_reward=True
    ),
    # action masks (the Pick envs raise on a masked action): in the info, Discrete and
    # MultiDiscrete; the nstep-q of the first; in a Dict observation with one other key (the
    # policy learnt from its Box) and with two (a Dict of them); Taxi's int8 info mask with its
    # Discrete(500) observation
    "pick": dict(env="asyncrl-test/PickStrict-info-v0", steps=1_000),
    "pick-multi": dict(env="asyncrl-test/PickMulti-v0", steps=1_000),
    "pick-q": dict(env="asyncrl-test/PickStrict-info-v0", steps=1_000, algo="nstep-q"),
    "pick-obs": dict(env="asyncrl-test/PickStrict-obs-v0", steps=1_000),
    "pick-dict": dict(env="asyncrl-test/PickDict-v0", steps=1_000),
    "pick-nested": dict(env="asyncrl-test/PickNested-v0", steps=1_000),
    "taxi": dict(env="Taxi-v4", steps=1_000),
}
RECURRENT = {"lstm", "gru", "prev-discrete", "prev-box", "dict-lstm", "shifted-prev", "match-prev"}
#: the runs whose env gives its mask as the action_mask key of a Dict observation: the
#: observations acted on hold it, as the env's do
MASK_IN_OBS = {"pick-obs", "pick-dict", "pick-nested"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each run of :data:`RUNS`, trained on first use."""
    base = tmp_path_factory.mktemp("runs")
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name == "minigrid":
            pytest.importorskip("minigrid")
        if name not in made:
            path = base / name
            asyncrl.train(run_dir=str(path), seed=0, **{**QUICK, **RUNS[name]})
            made[name] = path
        return made[name]

    return get


def random_masks(action: ActionSpace, size: tuple[int, ...], rng: np.random.Generator):
    """Action masks ``(*size, dim)``, each action valid with probability 1/2 and at least one in
    each part (MultiDiscrete's each)."""
    parts = []
    for k in action.parts:
        m = rng.random((*size, k)) < 0.5
        one = rng.integers(0, k, size)[..., None] == np.arange(k)
        parts.append(m | one)
    return np.concatenate(parts, axis=-1)


def episodes_of(name: str, policy: asyncrl.Policy) -> dict[str, Any]:
    """1,000 observations to act on: one batch of 1,000 for a feed-forward net; for a
    recurrent core 125 steps of 8 envs, with episode starts and rewards along the way.
    ``obs``: one batch a step; a structured observation's as the env gives it (dicts and
    tuples of the leaves, each with the batch axis). ``mask``: one batch of random valid
    action masks a step where the env gives masks (None where not, or where they are the
    observation's action_mask key, :data:`MASK_IN_OBS`; Taxi's as int8, as it gives them)."""
    rng = np.random.default_rng(1)
    shape, dtype = policy.spec.obs_shape, np.dtype(policy.spec.obs_dtype)
    steps, envs = (125, 8) if name in RECURRENT else (1, 1000)
    size = (steps, envs, *shape)
    layout = policy.spec.obs_layout
    obs: Any
    if layout is not None:  # packed rows of the leaves' values, unpacked
        rows = np.zeros(size, dtype)
        for leaf in layout.leaves:
            part = (steps, envs, leaf.size)
            if leaf.kind in ("discrete", "multidiscrete"):
                v = rng.integers(0, np.asarray(leaf.nvec), part)  # stored values, from 0
            elif leaf.kind == "multibinary" or leaf.dtype == "bool":
                v = rng.integers(0, 2, part)
            elif leaf.dtype == "uint8":
                v = rng.integers(0, 256, part)
            else:
                v = rng.normal(0.0, 1.5, part)
            rows[..., leaf.offset : leaf.offset + leaf.size] = v
        obs = [layout.unpack(r) for r in rows]
    elif dtype == np.uint8:
        obs = rng.integers(0, 256, size, dtype=np.uint8)
    elif dtype == np.bool_:
        obs = rng.random(size) < 0.5
    else:
        obs = rng.normal(0.0, 1.5, size).astype(dtype)
    first = rng.random((steps, envs)) < 0.05
    reward = rng.normal(0.0, 3.0, (steps, envs)).astype(np.float32)
    masks: list[Any] = [None] * steps
    action = policy.spec.action
    if action.masked:
        masks = list(random_masks(action, (steps, envs), rng))
        if name == "taxi":
            masks = [m.astype(np.int8) for m in masks]
        if name in MASK_IN_OBS:  # the env's own dicts: the mask a key of each
            key = "observation" if name == "pick-nested" else "obs"  # (its Dict one key's)
            obs = [
                {**(o if isinstance(o, dict) and key == "obs" else {key: o}), "action_mask": m}
                for o, m in zip(obs, masks, strict=True)
            ]
            masks = [None] * steps
    return {"obs": obs, "first": first, "reward": reward, "mask": masks}


def steps_of(data: dict[str, Any]):
    """Each step's observation, first flags, rewards and masks."""
    return zip(data["obs"], data["first"], data["reward"], data["mask"], strict=True)


def reference_actions(policy: asyncrl.Policy, data: dict[str, Any]) -> np.ndarray:
    policy.reset()
    return np.stack(
        [
            policy.act(obs, first=first, reward=reward, action_mask=mask)
            for obs, first, reward, mask in steps_of(data)
        ]
    )


def masks_of(data: dict[str, Any]) -> np.ndarray:
    """The masks ``data``'s steps were acted on with, ``(steps, envs, dim)`` bool, wherever
    they were given."""
    return np.stack(
        [
            np.asarray(o["action_mask"] if m is None else m, bool)
            for o, m in zip(data["obs"], data["mask"], strict=True)
        ]
    )


def all_valid(action: ActionSpace, acted: np.ndarray, masks: np.ndarray) -> bool:
    """Whether every action ``acted`` ``(..., *shape)`` (as the env takes them) is valid
    under ``masks`` ``(..., dim)``: each part's action at its offset in the mask."""
    lead = masks.shape[:-1]
    policy_form = action.from_env(acted.reshape(-1, *acted.shape[len(lead) :]))
    index = policy_form.reshape(int(np.prod(lead)), -1)
    offsets = np.cumsum((0, *action.parts[:-1]))
    flat = masks.reshape(-1, masks.shape[-1])
    return bool(flat[np.arange(len(flat))[:, None], index + offsets].all())


#: run in a process that cannot import PyTorch: the runner file on its own (not through the
#: asyncrl package), onnxruntime and NumPy
NO_TORCH = textwrap.dedent(
    """
    import importlib.util, pickle, sys

    class NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError("PyTorch is blocked in this process")

    sys.meta_path.insert(0, NoTorch())
    import numpy as np
    import onnxruntime

    spec = importlib.util.spec_from_file_location("onnx_policy", sys.argv[1])
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    policy = runner.OnnxPolicy(sys.argv[2])
    with open(sys.argv[3], "rb") as f:
        data = pickle.load(f)
    steps = zip(data["obs"], data["first"], data["reward"], data["mask"])
    actions = [
        policy.act(obs, first=first, reward=reward, action_mask=mask)
        for obs, first, reward, mask in steps
    ]
    np.save(sys.argv[4], np.stack(actions))
    assert not any(m == "torch" or m.startswith("torch.") for m in sys.modules), "torch loaded"
    """
)


def run_without_torch(model: Path, data: dict[str, Any], tmp_path: Path) -> np.ndarray:
    with open(tmp_path / "data.pkl", "wb") as f:
        pickle.dump(data, f)  # NumPy arrays in dicts and tuples: no PyTorch to unpickle
    out = tmp_path / "actions.npy"
    args = [str(RUNNER), str(model), str(tmp_path / "data.pkl"), str(out)]
    r = subprocess.run(
        [sys.executable, "-c", NO_TORCH, *args], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    return np.load(out)


def assert_same_actions(got: np.ndarray, want: np.ndarray, discrete: bool) -> None:
    """The same actions, as the env takes them: shape and dtype (int64, MultiBinary's int8,
    Box's float32) too."""
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, want.dtype)
    if discrete:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", list(RUNS))
def test_the_onnx_policy_acts_as_the_loaded_policy_without_pytorch(name, runs, tmp_path):
    run = runs(name)
    out = tmp_path / "policy.onnx"
    done = export_policy(run, out)
    assert done.path == out and out.is_file()
    policy = asyncrl.load(run)
    data = episodes_of(name, policy)
    want = reference_actions(policy, data)
    got = run_without_torch(out, data, tmp_path)
    action = policy.spec.action
    assert_same_actions(got, want, action.kind != "box")
    if action.masked:  # the exported module never takes a masked action
        assert all_valid(action, got, masks_of(data))
    if name == "pendulum-squash":  # the squashed action is inside the bounds, and moves
        assert np.abs(got).max() <= 2.0 and got.std() > 0


class TorchScriptPolicy(OnnxPolicy):
    """:class:`OnnxPolicy`'s acting on a TorchScript export: the same inputs, positionally."""

    def __init__(self, path: Path):
        extra = {"asyncrl": ""}
        self.module = torch.jit.load(str(path), _extra_files=extra)
        self.read_interface(json.loads(extra["asyncrl"]))

    def run(self, **feeds):
        args = [
            torch.from_numpy(np.asarray(feeds[k], self.inputs[k]["dtype"])) for k in self.inputs
        ]
        with torch.no_grad():
            return {k: v.numpy() for k, v in zip(self.outputs, self.module(*args), strict=True)}


@pytest.mark.parametrize(
    "name",
    [
        "cartpole",
        "frames",
        "pendulum-squash",
        "lstm",
        "prev-box",
        "dict",
        "dict-lstm",
        "pick-multi",
        "bits",
        "match-prev",
    ],
)
def test_the_torchscript_policy_acts_as_the_loaded_policy(name, runs, tmp_path):
    run = runs(name)
    out = tmp_path / "policy.pt"
    export_policy(run, out, "torchscript")
    policy = asyncrl.load(run)
    data = episodes_of(name, policy)
    want = reference_actions(policy, data)
    ts = TorchScriptPolicy(out)
    got = np.stack([ts.act(o, first=f, reward=r, action_mask=m) for o, f, r, m in steps_of(data)])
    assert_same_actions(got, want, policy.spec.action.kind != "box")


def test_the_interface_is_named_as_documented(runs, tmp_path):
    """Inputs and outputs by name, batch axis first and free, in the dtypes the docs give."""
    cases = {
        "cartpole": (["obs"], ["action", "logits"]),
        "frames": (["obs"], ["action", "logits"]),
        "nstep-q": (["obs"], ["action", "q_values"]),
        "pendulum": (["obs"], ["action", "mean"]),
        "lstm": (["obs", "state"], ["action", "logits", "state_out"]),
        "prev-box": (
            ["obs", "state", "prev_action", "prev_reward"],
            ["action", "mean", "state_out"],
        ),
        "pick": (["obs", "action_mask"], ["action", "logits"]),
        "pick-q": (["obs", "action_mask"], ["action", "q_values"]),
        "match": (["obs"], ["action", "logits"]),
        "bits": (["obs"], ["action", "logits"]),
    }
    for name, (ins, outs) in cases.items():
        out = tmp_path / f"{name}.onnx"
        export_policy(runs(name), out)
        session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
        assert [i.name for i in session.get_inputs()] == ins
        assert [o.name for o in session.get_outputs()] == outs
        assert all(i.shape[0] == "batch" for i in session.get_inputs())
        types = {i.name: i.type for i in session.get_inputs()}
        assert types["obs"] == {"frames": "tensor(uint8)"}.get(name, "tensor(float)")
    lstm = ort.InferenceSession(str(tmp_path / "lstm.onnx"), providers=["CPUExecutionProvider"])
    size = asyncrl.load(runs("lstm")).spec.core_size
    assert lstm.get_inputs()[1].shape == ["batch", 2 * size]  # h then c


def ports_of(path: Path) -> dict[str, tuple[str, list]]:
    """Each input's and output's type and shape, by name, as onnxruntime reads the file."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return {p.name: (p.type, p.shape) for p in session.get_inputs() + session.get_outputs()}


@pytest.mark.parametrize(
    ("name", "want"),
    [
        # Discrete from -1: the action with its start; a Q method's too
        ("shifted", {"action": ("tensor(int64)", ["batch"]), "logits": (None, ["batch", 3])}),
        ("shifted-q", {"action": ("tensor(int64)", ["batch"]), "q_values": (None, ["batch", 3])}),
        # MultiDiscrete([3, 4]) and MultiBinary(3): the action in the space's shape, the
        # logits the parts' concatenated, a logit a bit
        ("match", {"action": ("tensor(int64)", ["batch", 2]), "logits": (None, ["batch", 7])}),
        ("bits", {"action": ("tensor(int8)", ["batch", 3]), "logits": (None, ["batch", 3])}),
        # masks: one entry per logit, MultiDiscrete's parts concatenated
        ("pick", {"action_mask": ("tensor(bool)", ["batch", 4])}),
        (
            "pick-multi",
            {
                "action_mask": ("tensor(bool)", ["batch", 8]),
                "action": ("tensor(int64)", ["batch", 2]),
                "logits": ("tensor(float)", ["batch", 8]),
            },
        ),
        # Taxi: a Discrete(500) observation, its int8 info mask taken as bool
        (
            "taxi",
            {
                "obs": ("tensor(int64)", ["batch"]),
                "action_mask": ("tensor(bool)", ["batch", 6]),
            },
        ),
        # a Dict observation's action_mask key is the mask input, no obs. leaf
        (
            "pick-dict",
            {
                "obs.obs": ("tensor(float)", ["batch", 1]),
                "obs.step": ("tensor(int64)", ["batch"]),
                "action_mask": ("tensor(bool)", ["batch", 4]),
            },
        ),
        # the previous action as the env took it: MultiDiscrete's in the space's shape
        ("match-prev", {"prev_action": ("tensor(int64)", ["batch", 2])}),
    ],
)
def test_the_action_spaces_and_masks_ports(name, want, runs, tmp_path):
    out = tmp_path / "p.onnx"
    export_policy(runs(name), out)
    got = ports_of(out)
    for port, (dtype, shape) in want.items():
        assert dtype is None or got[port][0] == dtype, (port, got[port])
        assert got[port][1] == shape, (port, got[port])
    if name == "pick-dict":
        assert list(got)[:3] == ["obs.obs", "obs.step", "action_mask"]
    runner = OnnxPolicy(out)
    space = runner.interface["action_space"]
    action = asyncrl.load(runs(name)).spec.action
    assert space["nvec"] == list(action.nvec) and space["start"] == list(action.start)
    assert space["masked"] == action.masked == ("action_mask" in got)


def test_a_dict_observation_is_one_input_a_leaf_in_its_own_dtype(runs, tmp_path, capsys):
    """``obs.KEY`` per leaf of a Dict (nested: ``obs.extra.0``), in the layout's order and the
    leaf's shape and dtype; a Discrete observation is the one input ``obs``."""
    cases = {
        "dict": [
            ("obs.cue", ["batch"], "tensor(int64)"),
            ("obs.extra.0", ["batch", 2], "tensor(int8)"),
            ("obs.extra.1.k", ["batch", 2], "tensor(int64)"),
            ("obs.image", ["batch", 6, 6, 3], "tensor(uint8)"),
            ("obs.pos", ["batch", 2], "tensor(float)"),
        ],
        "discrete-obs": [("obs", ["batch"], "tensor(int64)")],
        "tuple": [(f"obs.{i}", ["batch"], "tensor(int64)") for i in range(3)],
        "dict-lstm": [
            *[(f"obs.{k}", None, None) for k in ("cue", "extra.0", "extra.1.k", "image", "pos")],
            ("state", None, "tensor(float)"),
            ("prev_action", ["batch"], "tensor(int64)"),
            ("prev_reward", ["batch"], "tensor(float)"),
        ],
    }
    for name, want in cases.items():
        out = tmp_path / f"{name}.onnx"
        export_policy(runs(name), out)
        session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
        got = session.get_inputs()
        assert [i.name for i in got] == [w[0] for w in want]
        for i, (_, shape, dtype) in zip(got, want, strict=True):
            assert shape is None or i.shape == shape, (i.name, i.shape)
            assert dtype is None or i.type == dtype, (i.name, i.type)
        info = json.loads(session.get_modelmeta().custom_metadata_map["asyncrl"])
        assert [p["name"] for p in info["inputs"]] == [i.name for i in got]
    info = json.loads(
        ort.InferenceSession(str(tmp_path / "dict.onnx"), providers=["CPUExecutionProvider"])
        .get_modelmeta()
        .custom_metadata_map["asyncrl"]
    )
    assert [leaf["path"] for leaf in info["obs_leaves"]] == [
        ["cue"],
        ["extra", 0],
        ["extra", 1, "k"],
        ["image"],
        ["pos"],
    ]
    assert main(["export", str(runs("dict")), "--out", str(tmp_path / "cli.onnx")]) == 0
    assert (
        "inputs: obs.cue int64[batch], obs.extra.0 int8[batch,2], obs.extra.1.k int64[batch,2], "
        "obs.image uint8[batch,6,6,3], obs.pos float32[batch,2]\n"
    ) in capsys.readouterr().out


@pytest.mark.parametrize("name", ["dict", "minigrid"])
def test_the_module_packs_the_leaves_as_the_rollout_does(name, runs, tmp_path):
    """The ONNX module's logits on the leaves are the network's on the rows
    ``ObsLayout.pack`` makes of them: the same packing (order, starts, casts), not only the
    same argmax."""
    run = runs(name)
    out = tmp_path / "p.onnx"
    export_policy(run, out)
    policy = asyncrl.load(run)
    layout = policy.spec.obs_layout
    assert layout is not None
    obs = episodes_of(name, policy)["obs"][0]
    rows = torch.from_numpy(layout.pack(obs))
    with torch.no_grad():
        n = len(rows)
        want, _ = policy.model.act(rows, policy.model.initial_state(n), torch.zeros(n, dtype=bool))
    runner = OnnxPolicy(out)
    feeds, single = runner.obs_feeds(obs)
    assert not single and set(feeds) == {f"obs.{leaf}" for leaf in layout.names}
    _, logits = runner.run(**feeds).values()
    np.testing.assert_allclose(logits, want.numpy(), rtol=1e-5, atol=1e-5)


def test_the_runner_takes_one_dict_observation_and_names_a_misfit(runs, tmp_path):
    out = tmp_path / "p.onnx"
    export_policy(runs("dict"), out)
    policy, runner = asyncrl.load(runs("dict")), OnnxPolicy(out)
    env = gym.make("asyncrl-test/DictCue-v0")
    obs, _ = env.reset(seed=0)
    for _ in range(20):
        action = runner.act(obs)
        assert isinstance(action, int) and action == policy.act(obs)
        obs, *_ = env.step(action)
    with pytest.raises(ValueError, match=r"the observation has no 'pos' \(the input obs\.pos"):
        runner.act({k: v for k, v in obs.items() if k != "pos"})
    with pytest.raises(
        ValueError, match=r"the observation's extra has no 1 \(the input obs\.extra"
    ):
        runner.act({**obs, "extra": obs["extra"][:1]})
    with pytest.raises(ValueError, match=r"obs.image has shape \(6, 6\)"):
        runner.act({**obs, "image": obs["image"][..., 0]})
    batch = {**obs, "cue": np.array([obs["cue"]] * 2)}  # one leaf a batch, the others not
    with pytest.raises(ValueError, match="give every leaf the batch axis, or none"):
        runner.act(batch)
    # a Tuple observation, as Blackjack gives it (a tuple of Python ints), one or a batch
    out = tmp_path / "tuple.onnx"
    export_policy(runs("tuple"), out)
    policy, runner = asyncrl.load(runs("tuple")), OnnxPolicy(out)
    obs, _ = gym.make("Blackjack-v1").reset(seed=0)
    assert isinstance(obs, tuple) and runner.act(obs) == policy.act(obs)
    batch = tuple(np.array([x, x]) for x in obs)
    np.testing.assert_array_equal(runner.act(batch), policy.act(batch))


def spec_of(space: gym.Space) -> ModelSpec:
    layout = obs_layout(space)
    assert layout is not None
    return ModelSpec(
        kind="actor-critic",
        obs_shape=(layout.size,),
        action=ActionSpace("discrete", n=2),
        obs_dtype=layout.dtype,
        obs_leaves=layout.leaves,
    )


S = gym.spaces


@pytest.mark.parametrize(
    ("space", "names"),
    [
        (S.Tuple((S.Discrete(5, start=-2), S.Box(-1, 1, (2, 3)))), ["obs.0", "obs.1"]),
        (S.MultiDiscrete([[2, 3], [4, 5]], start=[[1, 0], [0, -3]]), ["obs"]),
        (S.MultiBinary([2, 2]), ["obs"]),
        (
            S.Dict({"b": S.Box(0, 1, (3,), bool), "a": S.Tuple((S.Box(0, 9, (2,), np.int32),))}),
            ["obs.a.0", "obs.b"],
        ),
    ],
)
def test_pack_obs_packs_as_the_layout_does(space, names):
    """The module's packing of its inputs is :meth:`ObsLayout.pack`'s, value for value, on a
    batch of the space's own samples (Discrete starts, 2-D MultiDiscretes, bools, ints)."""
    spec = spec_of(space)
    ports = obs_ports(spec)
    assert [p.name for p in ports] == names
    space.seed(0)
    samples = [space.sample() for _ in range(7)]
    layout = spec.obs_layout
    assert layout is not None
    want = np.stack([layout.pack(x) for x in samples])
    leaves = [np.stack([np.asarray(_at(x, leaf.path)) for x in samples]) for leaf in layout.leaves]
    for port, x in zip(ports, leaves, strict=True):
        assert x.dtype == np.dtype(port.dtype) and x.shape[1:] == port.shape[1:]
    got = pack_obs(spec, [torch.from_numpy(x) for x in leaves])
    assert got.dtype == getattr(torch, layout.dtype)
    np.testing.assert_array_equal(got.numpy(), want)


def _at(obs, path):
    for key in path:
        obs = obs[key]
    return obs


def test_two_leaves_of_one_input_name_are_refused():
    spec = spec_of(S.Dict({"a.b": S.Discrete(2), "a": S.Dict({"b": S.Discrete(3)})}))
    with pytest.raises(
        UserError, match=r"\['a', 'b'\] and \['a.b'\] would both be the input obs.a.b"
    ):
        obs_ports(spec)


def test_the_lstm_state_is_h_then_c(runs, tmp_path):
    """``state`` is the LSTM's (h, c) concatenated, h first: h is what the heads read."""
    run = runs("lstm")
    out = tmp_path / "lstm.onnx"
    export_policy(run, out)
    policy = asyncrl.load(run)
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    state = torch.from_numpy(np.random.default_rng(1).normal(size=(5, 2, policy.spec.core_size)))
    state = state.float()
    with torch.no_grad():
        logits, new = policy.model.act(torch.from_numpy(obs), state, torch.zeros(5, dtype=bool))
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    flat = state.numpy().reshape(5, -1)  # [h | c]
    _, got, state_out = session.run(None, {"obs": obs, "state": flat})
    np.testing.assert_allclose(got, logits.numpy(), atol=1e-5)
    np.testing.assert_allclose(state_out, new.numpy().reshape(5, -1), atol=1e-5)


@pytest.mark.parametrize("name", ["frames", "nstep-q"])
def test_a_masked_action_is_never_taken(name, runs, tmp_path):
    """``action_mask`` (the mask added by hand here: no env of these runs gives one): the
    greedy action is the best valid one, and the masked scores are MASKED_SCORE."""
    run = runs(name)
    plain, masked = tmp_path / "plain.onnx", tmp_path / "masked.onnx"
    export_policy(run, plain)
    export_policy(run, masked, action_mask=True)
    policy = asyncrl.load(run)
    data = episodes_of("frames" if name == "frames" else "cartpole", policy)
    obs = data["obs"][0]
    n = policy.spec.action.n
    rng = np.random.default_rng(2)
    mask = rng.random((len(obs), n)) < 0.5
    mask[np.arange(len(obs)), rng.integers(0, n, len(obs))] = True
    opts = {"providers": ["CPUExecutionProvider"]}
    _, scores = ort.InferenceSession(str(plain), **opts).run(None, {"obs": obs})
    session = ort.InferenceSession(str(masked), **opts)
    assert [i.name for i in session.get_inputs()] == ["obs", "action_mask"]
    assert session.get_inputs()[1].type == "tensor(bool)"
    action, got = session.run(None, {"obs": obs, "action_mask": mask})
    assert mask[np.arange(len(obs)), action].all()
    np.testing.assert_array_equal(action, np.where(mask, scores, -np.inf).argmax(-1))
    np.testing.assert_array_equal(got[~mask], MASKED_SCORE)
    np.testing.assert_array_equal(got[mask], scores[mask])
    # the mask changes actions: the unmasked greedy action is masked in some rows
    assert (~mask[np.arange(len(obs)), scores.argmax(-1)]).any()
    # the runner refuses a row with no valid action (an env fault), and a missing mask
    runner = OnnxPolicy(masked)
    mask[3] = False
    with pytest.raises(ValueError, match="action_mask row 3 has no valid action: the env"):
        runner.act(obs, action_mask=mask)
    with pytest.raises(ValueError, match="pass action_mask="):
        runner.act(obs)


@pytest.mark.parametrize("name", ["pick", "pick-multi", "pick-q", "taxi", "pick-dict"])
def test_a_masked_run_never_takes_a_masked_action(name, runs, tmp_path):
    """The run's env gives masks, so its export takes them: on random masks (at least one
    valid action in each part) every action is valid, the masked scores are MASKED_SCORE and
    the others the network's; with every action valid, the greedy action is masked in some of
    those rows (the mask is what keeps it out)."""
    run = runs(name)
    out = tmp_path / "p.onnx"
    export_policy(run, out)
    policy = asyncrl.load(run)
    action = policy.spec.action
    data = episodes_of(name, policy)
    masks = masks_of(data)[0]
    runner = OnnxPolicy(out)
    obs = data["obs"][0]
    if isinstance(obs, dict):
        obs, _ = runner.split_mask(obs)
    feeds, _ = runner.obs_feeds(obs)
    acted, scores = runner.run(**feeds, action_mask=masks).values()
    free, unmasked = runner.run(**feeds, action_mask=np.ones_like(masks)).values()
    assert all_valid(action, acted, masks)
    assert not all_valid(action, free, masks)
    np.testing.assert_array_equal(scores[~masks], MASKED_SCORE)
    np.testing.assert_array_equal(scores[masks], unmasked[masks])
    # the network's own scores where nothing is masked
    rows = torch.from_numpy(policy.spec.obs_layout.pack(obs) if policy.spec.obs_layout else obs)
    with torch.no_grad():
        n = len(rows)
        want, _ = policy.model.act(rows, policy.model.initial_state(n), torch.zeros(n, dtype=bool))
    np.testing.assert_allclose(unmasked, want.numpy(), rtol=1e-5, atol=1e-5)


def stacked(observations: list[Any]) -> Any:
    """Observations as a batch: a Dict's leaves each stacked, at any depth."""
    if isinstance(observations[0], dict):
        return {k: stacked([o[k] for o in observations]) for k in observations[0]}
    return np.stack(observations)


def test_the_runner_takes_the_envs_own_observations_and_masks(runs, tmp_path):
    """The env's raw observations and masks as it gives them, one at a time and as a batch:
    a Dict with an action_mask key and two others, one with one other key (the policy learnt
    from that key's Box), one with one other key whose value is a Dict (PettingZoo's
    ``observation``), and Taxi's Discrete state with its int8 info mask. The Pick envs raise
    on a masked action."""
    for name in ("pick-dict", "pick-obs", "pick-nested"):
        out = tmp_path / f"{name}.onnx"
        export_policy(runs(name), out)
        policy, runner = asyncrl.load(runs(name)), OnnxPolicy(out)
        env = gym.make(RUNS[name]["env"])
        obs, _ = env.reset(seed=0)
        seen = []
        for _ in range(30):
            assert "action_mask" in obs and len(obs) >= 2
            action = runner.act(obs)
            assert isinstance(action, int) and action == policy.act(obs)
            seen.append(obs)
            obs, *_, term, trunc, _ = env.step(action)
            if term or trunc:
                obs, _ = env.reset()
        batch = stacked(seen)
        np.testing.assert_array_equal(runner.act(batch), policy.act(batch))
        # a mask given beside the observation is the one taken
        mask = np.zeros((len(seen), 4), bool)
        mask[:, 2] = True
        np.testing.assert_array_equal(runner.act(batch, action_mask=mask), 2)
    out = tmp_path / "taxi.onnx"
    export_policy(runs("taxi"), out)
    policy, runner = asyncrl.load(runs("taxi")), OnnxPolicy(out)
    env = gym.make("Taxi-v4")
    state, info = env.reset(seed=0)
    for _ in range(30):
        mask = info["action_mask"]
        assert mask.dtype == np.int8
        action = runner.act(state, action_mask=mask)
        assert action == policy.act(state, action_mask=mask) and mask[action] == 1
        state, reward, term, trunc, info = env.step(action)
        assert reward != -10  # no illegal pick-up or drop-off
        if term or trunc:
            state, info = env.reset()


def test_the_runner_names_a_bad_mask(runs, tmp_path):
    out = tmp_path / "p.onnx"
    export_policy(runs("pick-multi"), out)
    runner = OnnxPolicy(out)
    obs = np.zeros((3, 1), np.float32)
    mask = np.ones((3, 8), bool)
    np.testing.assert_array_equal(runner.act(obs, action_mask=mask.astype(np.int8)).shape, (3, 2))
    with pytest.raises(
        ValueError, match=r"action_mask has shape \(3, 4\); the policy takes \(3, 8\)"
    ):
        runner.act(obs, action_mask=mask[:, :4])
    with pytest.raises(
        ValueError, match=r"action_mask has shape \(8,\); the policy takes \(3, 8\)"
    ):
        runner.act(obs, action_mask=mask[0])
    with pytest.raises(ValueError, match="action_mask has dtype int64; give bool"):
        runner.act(obs, action_mask=mask * 2)
    mask[1, 4:] = False  # the second part of row 1: nothing valid
    with pytest.raises(ValueError, match="action_mask row 1 has no valid action in some part"):
        runner.act(obs, action_mask=mask)
    with pytest.raises(ValueError, match="pass action_mask="):
        runner.act(obs)
    # one observation takes one mask
    assert runner.act(obs[0], action_mask=np.ones(8, bool)).shape == (2,)


@pytest.mark.parametrize("name", ["shifted-prev", "match-prev"])
def test_the_previous_action_is_one_hot_from_the_start(name, runs, tmp_path):
    """``prev_action`` as the env took it (the space's start in it): the module's logits are
    the network's on write_context's context, and on zeros (an episode's start) for the
    runner's no_action, one below the start."""
    from asyncrl.models import write_context

    run = runs(name)
    out = tmp_path / "p.onnx"
    export_policy(run, out)
    policy, runner = asyncrl.load(run), OnnxPolicy(out)
    spec, action = policy.spec, policy.spec.action
    start = np.asarray(action.start)
    np.testing.assert_array_equal(runner.no_action(), (start - 1).reshape(action.shape))
    rng = np.random.default_rng(3)
    n = 16
    obs = rng.normal(size=(n, *spec.obs_shape)).astype(np.float32)
    state = np.zeros((n, runner.inputs["state"]["shape"][1]), np.float32)
    taken = rng.integers(0, np.asarray(action.parts), (n, len(action.parts)))
    acted = action.to_env(taken[:, 0] if action.kind == "discrete" else taken)
    reward = rng.normal(size=n).astype(np.float32)
    for prev, context in [
        (acted, None),
        (np.broadcast_to(runner.no_action(), acted.shape), np.zeros((n, spec.context_dim))),
    ]:
        if context is None:
            context = np.zeros((n, spec.context_dim), np.float32)
            write_context(action, acted, spec.learning_reward(reward), context)
            r = reward
        else:
            r = np.zeros(n, np.float32)
        got = runner.run(obs=obs, state=state, prev_action=prev, prev_reward=r)["logits"]
        with torch.no_grad():
            want, _ = policy.model.act(
                torch.from_numpy(obs),
                policy.model.initial_state(n),
                torch.zeros(n, dtype=bool),
                torch.from_numpy(context).float(),
            )
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


def test_a_mask_where_the_run_has_none_or_no_mask_where_it_has_one_is_refused(runs, tmp_path):
    out = tmp_path / "p.onnx"
    for name, kind in [("pendulum", "Box"), ("bits", "MultiBinary")]:
        with pytest.raises(
            UserError, match=f"action mask is for Discrete and MultiDiscrete actions; .*{kind}"
        ):
            export_policy(runs(name), out, action_mask=True)
    with pytest.raises(UserError, match="action_mask=False: this run's env gives action masks"):
        export_policy(runs("pick"), out, action_mask=False)
    assert not out.exists()
    # an env without masks: a mask added by hand to a MultiDiscrete policy
    export_policy(runs("match"), out, action_mask=True)
    assert ports_of(out)["action_mask"] == ("tensor(bool)", ["batch", 7])


def test_a_bfloat16_run_is_exported_in_float32(runs, tmp_path):
    """A conv net trained in bfloat16 exports float32 maths: no bfloat16 tensor in the graph,
    and the greedy actions of the float32 network."""
    run = tmp_path / "bf16"
    asyncrl.train(run_dir=str(run), seed=0, precision="bfloat16", **{**QUICK, **RUNS["frames"]})
    out = tmp_path / "bf16.onnx"
    export_policy(run, out)
    graph = onnx.load(str(out)).graph
    bf16 = onnx.TensorProto.BFLOAT16
    assert all(t.data_type != bf16 for t in graph.initializer)
    casts = [a.i for node in graph.node if node.op_type == "Cast" for a in node.attribute]
    assert bf16 not in casts
    policy = asyncrl.load(run)
    spec = dataclasses.replace(policy.spec, precision="float32")
    policy.model = build_model(spec).eval()
    assert policy.source is not None
    policy.model.load_state_dict(torch.load(policy.source)["state_dict"])
    data = episodes_of("frames", policy)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    got = session.run(None, {"obs": data["obs"][0]})[0]
    np.testing.assert_array_equal(got, reference_actions(policy, data)[0])


@pytest.mark.parametrize(
    ("name", "file"), [("cartpole", "policy"), ("minigrid", "doorkey"), ("taxi", "taxi")]
)
def test_the_documented_numpy_example_runs_without_pytorch(name, file, runs, tmp_path):
    """docs/export.md's examples, as written, beside an exported CartPole policy, a MiniGrid
    one (a Dict observation) and a Taxi one (its info mask, through the runner copied beside
    it): the inputs it prints are those its comment shows."""
    text = (ROOT / "docs" / "export.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    example = next(b for b in blocks if "import torch" not in b and f'"{file}.onnx"' in b)
    export_policy(runs(name), tmp_path / f"{file}.onnx")
    shutil.copy(RUNNER, tmp_path / "onnx_policy.py")
    blocker = NO_TORCH.split("import numpy")[0]
    r = subprocess.run(
        [sys.executable, "-c", blocker + example],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "return" in r.stdout
    shown = re.findall(r"^# (\[\(.*)$", example, flags=re.M)
    assert shown == [line for line in r.stdout.splitlines() if line.startswith("[(")]


# ---------------------------------------------------------------- the command line
def test_export_writes_the_file_and_names_its_interface(runs, tmp_path, capsys):
    out = tmp_path / "cartpole.onnx"
    assert main(["export", str(runs("cartpole")), "--out", str(out), "--which", "last"]) == 0
    text = capsys.readouterr().out
    assert "model.pt (the final parameters)" in text
    assert "inputs: obs float32[batch,4]" in text
    assert "outputs: action int64[batch], logits float32[batch,2]" in text
    meta = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).get_modelmeta()
    info = json.loads(meta.custom_metadata_map["asyncrl"])
    assert info["env"] == "CartPole-v1" and info["model"].startswith("model.pt")
    assert info["action_space"]["kind"] == "discrete"


def test_force_replaces_an_existing_file(runs, tmp_path):
    out = tmp_path / "p.pt"
    out.write_bytes(b"precious")
    run = str(runs("cartpole"))
    assert main(["export", run, "--format", "torchscript", "--out", str(out)]) == 2
    assert out.read_bytes() == b"precious"
    assert main(["export", run, "--format", "torchscript", "--out", str(out), "--force"]) == 0
    assert torch.jit.load(str(out)) is not None
    assert [p.name for p in tmp_path.iterdir()] == ["p.pt"]  # no temporary file left


def _broken(kind: str, runs, tmp_path: Path) -> str:
    """A run directory with a fault of ``kind``."""
    if kind == "missing":
        return str(tmp_path / "nowhere")
    run = tmp_path / "run"
    shutil.copytree(runs("cartpole"), run)
    if kind == "no-model":
        (run / "model.pt").unlink()
        (run / "best_model.pt").unlink()
    elif kind == "no-best":
        (run / "best_model.pt").unlink()
    elif kind == "damaged":
        (run / "best_model.pt").write_bytes(b"not a model")
    return str(run)


@pytest.mark.parametrize(
    ("kind", "extra", "needle"),
    [
        ("missing", [], "run directory"),
        ("no-model", [], "has no model.pt yet"),
        ("no-best", ["--which", "best"], "has no best_model.pt"),
        ("damaged", [], "cannot be read"),
        ("fine", ["--out", "{tmp}/no/such/folder/p.onnx"], "does not exist; create it first"),
        ("fine", ["--out", "{tmp}"], "is a directory"),
        ("fine", ["--out", "{tmp}/taken.onnx"], "already exists; choose another file"),
        ("fine", ["--format", "tflite"], "invalid choice: 'tflite'"),
    ],
)
def test_bad_export_input_is_one_line_exit_2_and_nothing_written(
    kind, extra, needle, runs, tmp_path, capsys
):
    run = _broken(kind, runs, tmp_path)
    (tmp_path / "taken.onnx").write_bytes(b"taken")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    out = ["--out", str(tmp_path / "p.onnx")]
    argv = ["export", run, *out, *[a.format(tmp=tmp_path) for a in extra]]
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own refusals
        code = e.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert (tmp_path / "taken.onnx").read_bytes() == b"taken"


@pytest.mark.parametrize("missing", ["onnx", "onnxruntime"])
def test_a_missing_onnx_package_names_the_extra(missing, runs, tmp_path, capsys, monkeypatch):
    run = str(runs("cartpole"))
    monkeypatch.setitem(sys.modules, missing, None)  # `import missing` raises ImportError
    out = tmp_path / "p.onnx"
    assert main(["export", run, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert 'pip install "asyncrl[export]"' in err and missing in err
    assert len(err.splitlines()) == 1 and not out.exists()
    # TorchScript needs neither
    assert main(["export", run, "--format", "torchscript", "--out", str(tmp_path / "p.pt")]) == 0


def test_the_runner_imports_neither_pytorch_nor_asyncrl():
    """The runner is one file to copy beside the model: NumPy and onnxruntime alone."""
    source = RUNNER.read_text()
    imports = re.findall(r"^\s*(?:import|from) (\w+)", source, flags=re.M)
    assert set(imports) <= {"__future__", "json", "pathlib", "typing", "numpy", "onnxruntime"}


def test_a_torchscript_file_loads_with_torch_alone(runs, tmp_path):
    """``torch.jit.load`` in a process that has not imported asyncrl."""
    out = tmp_path / "p.pt"
    export_policy(runs("gru"), out, "torchscript")
    width = str(asyncrl.load(runs("gru")).spec.core_size)  # the GRU's h alone
    code = (
        "import sys, torch; m = torch.jit.load(sys.argv[1]); w = int(sys.argv[2]); "
        "a, logits, s = m(torch.zeros(3, 4), torch.zeros(3, w)); "
        "assert a.shape == (3,) and s.shape == (3, w), (a.shape, s.shape); "
        "assert not [k for k in sys.modules if k.startswith('asyncrl')]"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(out), width], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
