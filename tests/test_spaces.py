"""Structured observations (Dict, Tuple, nested; Discrete and the like): their layout, the packed
row they are stored as, the refusals, --obs-keys, the encoder that reads each leaf by its kind,
and runs on the threads and processes backends whose policy acts on the env's own dicts."""

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
import torch

import asyncrl
import tests.envs_for_tests  # (registers the test envs; DictCueEnv is used below)
from asyncrl.algos.base import model_spec_for
from asyncrl.config import Config
from asyncrl.envs import ActionSpace, EnvInfo, dump_vec_env, make_vec_env, probe_env
from asyncrl.errors import UserError
from asyncrl.models import ModelSpec, build_model
from asyncrl.policy import Policy
from asyncrl.spaces import PackObservation, obs_layout

CUE = "tests.envs_for_tests:asyncrl-test/DictCue-v0"
TEXT = "tests.envs_for_tests:asyncrl-test/DictText-v0"
S = gym.spaces


def cue_space():
    return tests.envs_for_tests.DictCueEnv().observation_space


def assert_same_tree(unpacked, obs):
    """``unpacked`` has ``obs``'s dicts, tuples and leaves (each in the space's dtype)."""
    if isinstance(obs, dict):
        assert isinstance(unpacked, dict) and sorted(unpacked) == sorted(obs)
        for k in obs:
            assert_same_tree(unpacked[k], obs[k])
    elif isinstance(obs, tuple):
        assert isinstance(unpacked, tuple) and len(unpacked) == len(obs)
        for x, y in zip(unpacked, obs, strict=True):
            assert_same_tree(x, y)
    else:
        assert isinstance(unpacked, np.ndarray)
        x, y = unpacked, np.asarray(obs)
        assert x.shape == y.shape and (x.dtype == y.dtype or not isinstance(obs, np.ndarray))
        np.testing.assert_array_equal(x, y)


def test_the_layout_names_each_leaf_by_its_key_path_with_its_kind_and_columns():
    layout = obs_layout(cue_space())
    assert layout is not None
    # (gymnasium's Dict orders a plain dict's keys)
    assert layout.names == ("cue", "extra.0", "extra.1.k", "image", "pos")
    assert [leaf.path for leaf in layout.leaves] == [
        ("cue",), ("extra", 0), ("extra", 1, "k"), ("image",), ("pos",)
    ]  # fmt: skip
    kinds = {leaf.name: leaf.kind for leaf in layout.leaves}
    assert kinds == {
        "cue": "discrete", "extra.0": "multibinary", "extra.1.k": "multidiscrete",
        "image": "image", "pos": "vector",
    }  # fmt: skip
    cue, _, k, image, _ = layout.leaves
    assert cue.nvec == (3,) and cue.start == (1,) and cue.features == 3
    assert k.nvec == (2, 3) and k.features == 5
    assert image.shape == (6, 6, 3) and image.channels_last and image.dtype == "uint8"
    # contiguous columns, in order; a float vector leaf makes the row float32
    offsets = [leaf.offset for leaf in layout.leaves]
    assert offsets == [0, 1, 3, 5, 5 + 108] and layout.size == 115
    assert layout.dtype == "float32"


@pytest.mark.parametrize("batch", [None, 4])
def test_packing_and_unpacking_give_back_the_observation_nested_dicts_and_tuples(batch):
    space = cue_space()
    space.seed(3)
    layout = obs_layout(space)
    samples = [space.sample() for _ in range(batch or 1)]
    if batch is None:
        obs = samples[0]
    else:  # a batch: each leaf with a leading axis, as a vector env gives it
        obs = gym.vector.utils.concatenate(
            space, samples, gym.vector.utils.create_empty_array(space, batch)
        )
    rows = layout.pack(obs)
    assert rows.shape == ((layout.size,) if batch is None else (batch, layout.size))
    assert rows.dtype == np.float32
    # stored from 0: the Discrete's start comes off, and back on unpacking
    assert np.all(rows[..., 0] == np.asarray(obs["cue"]) - 1)
    assert_same_tree(layout.unpack(rows), obs)


def test_the_row_is_uint8_where_every_leaf_fits_it_exactly_else_float32():
    minigrid = S.Dict({"image": S.Box(0, 255, (7, 7, 3), np.uint8), "direction": S.Discrete(4)})
    layout = obs_layout(minigrid)
    assert layout.dtype == "uint8" and layout.size == 148
    obs = {"image": np.full((7, 7, 3), 200, np.uint8), "direction": 3}
    row = layout.pack(obs)
    assert row.dtype == np.uint8
    assert_same_tree(layout.unpack(row), obs)
    fits = [
        S.MultiBinary(3),
        S.MultiDiscrete([4, 256]),
        S.Box(0, 255, (2,), np.int64),  # integers in uint8's range
        S.Box(0, 1, (2, 2, 2), np.bool_),
    ]
    for leaf in fits:
        assert obs_layout(S.Tuple((leaf, S.Discrete(256)))).dtype == "uint8", leaf
    for leaf in [S.Discrete(257), S.Box(-1, 255, (2,), np.int64), S.Box(0, 1, (2,), np.float32)]:
        assert obs_layout(S.Tuple((leaf, S.Discrete(2)))).dtype == "float32", leaf


def test_a_discrete_observation_is_one_leaf_that_acts_on_the_env_s_own_values():
    layout = obs_layout(S.Discrete(500))  # Taxi's
    assert layout is not None and layout.names == ("",) and layout.dtype == "float32"
    assert layout.pack(499).tolist() == [499.0]
    assert layout.pack(np.array([1, 2])).shape == (2, 1)
    assert obs_layout(S.Box(0, 1, (3,))) is None  # a Box is stored as it is


def test_a_dict_s_action_mask_key_is_not_an_observation_leaf():
    space = S.Dict({"observation": S.Box(0, 1, (3,)), "action_mask": S.MultiBinary(4)})
    assert obs_layout(space).names == ("observation",)


def one_line(e):
    text = str(e.value)
    assert "\n" not in text
    return text


def test_a_leaf_asyncrl_cannot_encode_is_refused_with_its_key_and_the_fix():
    space = S.Dict({"note": S.Text(8), "pos": S.Box(0, 1, (2,)), "t": S.Discrete(3)})
    with pytest.raises(UserError) as e:
        obs_layout(space, env_id="My-v0")
    text = one_line(e)
    assert "My-v0's observation key 'note' is a Text space" in text
    assert "--obs-keys pos t" in text and "wrap the env" in text
    # nested: the key path is named, and the top-level key to leave out
    nested = S.Dict({"a": S.Tuple((S.Discrete(2), S.Sequence(S.Discrete(2)))), "b": S.Discrete(2)})
    with pytest.raises(UserError) as e:
        obs_layout(nested)
    text = one_line(e)
    assert "key 'a.1' is a Sequence space" in text and "leave 'a' out with --obs-keys b" in text
    graph = S.Graph(S.Box(0, 1, (2,)), S.Discrete(2))
    with pytest.raises(UserError, match=r"key '1' is a Graph space.*wrap the env"):
        obs_layout(S.Tuple((S.Discrete(2), graph)))
    with pytest.raises(UserError, match="observations are a Text space"):
        obs_layout(S.Text(4))


def test_obs_keys_select_a_dict_s_keys_and_an_unknown_one_is_named():
    space = S.Dict({"note": S.Text(8), "pos": S.Box(0, 1, (2,)), "t": S.Discrete(3)})
    # the space's order, whatever the order given
    assert obs_layout(space, ("t", "pos")).names == ("pos", "t")
    assert obs_layout(space, ("t",)).dtype == "uint8"
    with pytest.raises(UserError) as e:
        obs_layout(space, ("pos", "img"), "My-v0")
    assert one_line(e) == (
        "--obs-keys: My-v0's observations have no key 'img'; its keys are note, pos, t"
    )
    with pytest.raises(UserError, match="has Box observations, not a Dict: drop --obs-keys"):
        obs_layout(S.Box(0, 1, (2,)), ("pos",))
    with pytest.raises(UserError, match="given twice"):
        Config(obs_keys=("pos", "pos")).validate()


def test_the_probe_packs_the_env_s_observations_and_the_cli_refuses_a_text_leaf(capsys):
    info = probe_env(CUE)
    assert info.obs_layout is not None and info.obs_shape == (115,)
    assert info.obs_dtype == "float32"
    assert probe_env(TEXT, obs_keys=("count",)).obs_layout.names == ("count",)
    from asyncrl.cli import main

    args = ["train", "--env", TEXT, "--steps", "100", "--backend", "threads", "--no-progress"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'note' is a Text space" in err and "--obs-keys count" in err
    assert main([*args, "--obs-keys", "cont"]) == 2
    assert "no key 'cont'; its keys are count, note" in capsys.readouterr().err


def test_the_vector_env_gives_packed_rows_and_pickles_for_a_checkpoint():
    info = probe_env(CUE)
    envs = make_vec_env(CUE, 3, 0, None, info.obs_layout)
    try:
        obs, _ = envs.reset(seed=[1, 2, 3])
        assert obs.shape == (3, 115) and obs.dtype == np.float32
        assert set(np.unique(obs[:, 0])) <= {0.0, 1.0, 2.0}  # the cue, from 0
        # (the packing wrapper is a class of asyncrl's: the checkpoint's loader takes it)
        assert dump_vec_env(envs, CUE) is not None
    finally:
        envs.close()


def cue_model(**cfg):
    info = probe_env(CUE)
    spec = model_spec_for(Config(env=CUE, **cfg), "actor-critic", info)
    return spec, build_model(spec)


def test_the_encoder_reads_the_image_leaf_as_an_image_and_the_rest_through_one_mlp(monkeypatch):
    spec, model = cue_model()
    assert spec.encoder == "minatar" and len(spec.obs_leaves) == 5
    encoder = model.encoder
    convs = [m for m in encoder.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 1 and convs[0].in_channels == 3
    assert encoder.convs[0].channels_last  # (6, 6, 3): the channels are the short axis
    seen = []
    conv2d = torch.nn.functional.conv2d

    def spy(x, *args, **kw):
        seen.append(tuple(x.shape))
        return conv2d(x, *args, **kw)

    monkeypatch.setattr(torch.nn.functional, "conv2d", spy)
    mlp = encoder.mlp.layers[0]
    assert mlp.in_features == 3 + 2 + 5 + 2  # one-hot cue, the bits, two one-hots, pos
    rows = torch.from_numpy(np.stack([obs_layout(cue_space()).pack(cue_space().sample())] * 4))
    out = encoder(rows)
    assert seen == [(4, 3, 6, 6)]  # (N, C, H, W): the 6x6x3 image, never flattened
    assert out.shape == (4, encoder.out_dim) and encoder.out_dim == 128 + 64
    # the cue's one-hot, from the column it is stored in
    cue = next(x for x in spec.obs_leaves if x.name == "cue")
    rows[:, 0] = torch.tensor([0.0, 1.0, 2.0, 1.0])
    np.testing.assert_array_equal(encoder.leaf_input(rows, cue), np.eye(3)[[0, 1, 2, 1]])
    # --net mlp: the image is read as a vector
    _, flat = cue_model(net="mlp")
    assert flat.encoder.mlp.layers[0].in_features == 12 + 108
    assert not [m for m in flat.modules() if isinstance(m, torch.nn.Conv2d)]


def test_the_normaliser_normalises_the_vector_leaves_alone():
    spec, model = cue_model(normalize_obs=True)
    norm = model.obs_norm
    assert norm is not None and norm.obs_dim == 115
    norm.stats[1 : 1 + 115] = 100.0  # every column's mean: 100, its variance 1
    space = cue_space()
    rows = torch.from_numpy(obs_layout(space).pack(space.sample())).unsqueeze(0)
    leaves = {x.name: x for x in spec.obs_leaves}
    enc = model.encoder
    image = enc.leaf_input(rows, leaves["image"])
    np.testing.assert_allclose(image, rows[:, 5:113].reshape(1, 6, 6, 3) / 255.0)
    pos = enc.leaf_input(rows, leaves["pos"])
    np.testing.assert_allclose(pos, (rows[:, 113:] - 100.0).clamp(-10, 10), rtol=1e-5)
    assert enc.leaf_input(rows, leaves["extra.0"]).tolist() == rows[:, 1:3].tolist()
    # MiniGrid's: nothing to normalise, but under --net mlp its image is read as a vector
    minigrid = S.Dict({"image": S.Box(0, 255, (7, 7, 3), np.uint8), "direction": S.Discrete(4)})
    info = EnvInfo("X-v0", (148,), "uint8", ActionSpace("discrete", n=3), preset="cartpole")
    info = dataclasses.replace(info, obs_layout=obs_layout(minigrid))
    with pytest.raises(UserError, match="normalisation is for vector"):
        Config(env="X-v0", normalize_obs=True).check_env(info)
    Config(env="X-v0", normalize_obs=True, net="mlp").check_env(info)


def test_the_spec_keeps_the_leaves_through_a_checkpoint_s_dict_and_old_ones_load():
    spec, model = cue_model()
    again = ModelSpec.from_dict(spec.to_dict())
    assert again == spec and again.obs_layout == spec.obs_layout
    rebuilt = build_model(again)
    rebuilt.load_state_dict(model.state_dict())
    old = {k: v for k, v in ModelSpec("q", (4,), ActionSpace("discrete", 2)).to_dict().items()}
    del old["obs_leaves"]
    assert ModelSpec.from_dict(old).obs_layout is None


def test_policy_act_packs_a_dict_observation_single_or_batched():
    spec, model = cue_model()
    policy = Policy(model, "a3c", spec, CUE)
    space = cue_space()
    space.seed(0)
    layout = spec.obs_layout
    samples = [space.sample() for _ in range(5)]
    batch = gym.vector.utils.concatenate(
        space, samples, gym.vector.utils.create_empty_array(space, 5)
    )
    rows = layout.pack(batch)
    actions = policy.act(batch)
    assert actions.shape == (5,)
    np.testing.assert_array_equal(actions, policy.act(rows))
    np.testing.assert_array_equal(actions, policy.act(rows, packed=True))
    single = policy.act(samples[2])
    assert isinstance(single, int) and single == actions[2]
    with pytest.raises(UserError) as e:
        policy.act({"pos": np.zeros(2, np.float32)})
    assert "Policy.act: the observation does not fit" in one_line(e) and "'cue'" in str(e.value)


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_a_run_on_a_dict_env_trains_and_its_policy_acts_on_the_env_s_dicts(backend, run_dir):
    summary = asyncrl.train(
        env=CUE, backend=backend, workers=2, envs_per_worker=4, steps=1_500, eval_every=600,
        eval_episodes=2, run_dir=str(run_dir), progress=False, tensorboard=False,
    )  # fmt: skip
    assert summary["total_steps"] >= 1_500 and summary["evaluations"] >= 1, summary
    policy = asyncrl.load(run_dir)
    assert policy.spec.obs_layout is not None and policy.spec.obs_layout.size == 115
    env = gym.make(CUE.partition(":")[2])
    obs, _ = env.reset(seed=0)
    assert policy.act(obs) in range(3)
    assert len(asyncrl.evaluate(run_dir, episodes=3)) == 3
    if backend == "threads":  # the stored rows follow the keys: a resume keeps them
        with pytest.raises(UserError, match="--obs-keys: a resumed run goes on with its own env"):
            asyncrl.train(resume=str(run_dir), obs_keys=("cue",))
        resumed = asyncrl.train(resume=str(run_dir), steps=2_500, eval_every=0)
        assert resumed["resumed"] and resumed["total_steps"] >= 2_500


def test_a_pack_wrapper_keeps_the_env_s_other_behaviour():
    env = PackObservation(gym.make(CUE.partition(":")[2]), obs_layout(cue_space()))
    obs, _ = env.reset(seed=0)
    assert obs.shape == (115,) and env.observation_space.contains(obs)
    obs, reward, term, trunc, _ = env.step(int(obs[0]))  # the cue, from 0: the paying action
    assert reward == 1.0 and not term and not trunc


def test_minigrid_trains_from_its_image_and_direction_with_the_mission_left_out(run_dir, capsys):
    pytest.importorskip("minigrid")
    from asyncrl.cli import main

    env = "MiniGrid-DoorKey-5x5-v0"  # registered on import, which the env's id asks for
    quick = ["--steps", "600", "--workers", "1", "--backend", "threads", "--no-progress"]
    assert main(["train", "--env", env, *quick]) == 2
    err = capsys.readouterr().err
    assert "'mission' is a MissionSpace space" in err and "--obs-keys direction image" in err
    info = probe_env(env, obs_keys=("image", "direction"))
    assert info.obs_layout.names == ("direction", "image") and info.obs_dtype == "uint8"
    assert info.obs_shape == (1 + 7 * 7 * 3,)
    args = ["train", "--env", env, "--obs-keys", "image", "direction", "--run-dir", str(run_dir)]
    assert main([*args, "--eval-every", "0", *quick]) == 0
    policy = asyncrl.load(run_dir)
    # the minigrid preset: the view's object indices read as a vector, normalised
    assert policy.spec.encoder == "mlp" and policy.spec.obs_clip > 0
    obs, _ = gym.make(env).reset(seed=0)
    assert policy.act(obs) in range(7)  # the mission text in the dict is ignored
    # its mission space names a function, which a checkpoint's env state may not: the
    # workers' envs are left out of it (fresh ones on resume), and the run resumes
    envs = make_vec_env(env, 2, 0, None, info.obs_layout)
    assert dump_vec_env(envs) is not None and dump_vec_env(envs, env) is None
    envs.close()
    assert main(["train", "--resume", str(run_dir), "--steps", "1200", "--no-progress"]) == 0


@pytest.mark.parametrize(
    "options",
    [
        dict(algo="appo"),
        dict(algo="appo", vtrace=True, core="gru"),
        dict(algo="nstep-q"),
        dict(algo="onestep-sarsa"),
        dict(algo="a3c", core="lstm", prev_action_reward=True, normalize_obs=True),
    ],
    ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()),
)
def test_every_algorithm_and_core_runs_on_a_dict_observation(options, run_dir):
    summary = asyncrl.train(
        env=CUE, backend="threads", workers=1, envs_per_worker=4, steps=400, eval_every=0,
        stop_on="train", run_dir=str(run_dir), progress=False, tensorboard=False, **options,
    )  # fmt: skip
    assert summary["total_steps"] >= 400 and summary["nonfinite_updates"] == 0, summary
    policy = asyncrl.load(run_dir)
    obs, _ = gym.make(CUE.partition(":")[2]).reset(seed=0)
    assert policy.act(obs, reward=0.0) in range(3)
