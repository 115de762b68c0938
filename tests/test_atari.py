"""Atari preprocessing: the C++ vector env that trains against the DeepMind semantics, the
Gymnasium wrappers that evaluate, and the worker's handling of lives and game scores."""

import numpy as np
import pytest

pytest.importorskip("ale_py")

from asyncrl.atari import AtariVecEnv, atari_settings, make_atari_env
from asyncrl.config import auto_preset
from asyncrl.envs import probe_env
from asyncrl.errors import UserError


def play(env, steps, seed=0, until=None):
    """Random play; yields (obs_before, action, step result) per step."""
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    for _ in range(steps):
        a = rng.integers(env.single_action_space.n, size=env.num_envs)
        out = env.step(a)
        yield obs, a, out
        obs = out[0]


def test_observations_are_uint8_frame_stacks_oldest_first():
    env = AtariVecEnv("PongNoFrameskip-v4", 2)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    for before, _, (after, _, term, trunc, _) in play(env, 30):
        keep = ~(term | trunc)
        # the newest frame is last: each step shifts the stack by one
        np.testing.assert_array_equal(after[keep, :3], before[keep, 1:])
    env.close()


def test_a_seeded_reset_is_reproducible_and_seeds_differ():
    def first(seed):
        env = AtariVecEnv("BreakoutNoFrameskip-v4", 3)
        obs, _ = env.reset(seed=seed)
        frames = [obs] + [out[0] for _, _, out in play(env, 40, seed)]
        env.close()
        return np.stack(frames)

    np.testing.assert_array_equal(first(1), first(1))
    assert not np.array_equal(first(1), first(2))


def test_learning_reward_is_clipped_while_the_score_is_raw():
    env = AtariVecEnv("SpaceInvadersNoFrameskip-v4", 4)
    for _, _, (_, reward, _, _, info) in play(env, 2000):
        big = info["score"] > 1
        if big.any():
            assert (reward[big] == 1.0).all()
            assert set(info["score"][big]) <= {5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 200.0}
            break
    else:
        pytest.fail("no reward above 1 in 2,000 random steps of Space Invaders")
    env.close()


def test_a_lost_life_is_terminal_for_the_learner_but_the_game_goes_on():
    env = AtariVecEnv("BreakoutNoFrameskip-v4", 1)
    lost, over, prev_lost, frame = 0, 0, None, 0
    for _, _, (_, _, term, _trunc, info) in play(env, 3000):
        if prev_lost is not None:  # the step after a lost life: 4 more frames of the same game
            assert info["lives"][0] == prev_lost
            assert info["episode_frame_number"][0] == frame + 4
            prev_lost = None
        if info["lost_life"][0]:
            assert term[0] and not info["game_over"][0]
            lost += 1
            prev_lost, frame = info["lives"][0], info["episode_frame_number"][0]
        if info["game_over"][0]:
            assert term[0] and info["lives"][0] == 0
            over += 1
            if over == 2:
                break
    assert over == 2 and lost == 8  # two games of 5 lives: 4 lost lives, then game over
    env.close()


def test_the_frame_limit_truncates_a_game_and_bootstraps():
    env = AtariVecEnv("PongNoFrameskip-v4", 1, max_frames=400)
    for i, (_, _, (_, _, term, trunc, info)) in enumerate(play(env, 200)):
        if trunc[0]:
            assert not term[0] and info["game_over"][0]
            # no-op starts use up to 30 frames of the 400; 4 frames per agent step
            assert 400 // 4 - 30 <= i + 1 <= 400 // 4
            break
    else:
        pytest.fail("no truncation within 200 steps at a 400-frame limit")
    env.close()


def test_the_step_after_a_game_over_is_a_reset_with_reward_zero():
    env = AtariVecEnv("PongNoFrameskip-v4", 1, max_frames=200)
    ended = False
    for _, _, (_obs, reward, _, _, info) in play(env, 120):
        if ended:
            assert reward[0] == 0 and info["episode_frame_number"][0] <= 4 * 31 + 4
            break
        ended = bool(info["game_over"][0])
    assert ended
    env.close()


def test_the_evaluation_env_matches_the_training_env():
    train = AtariVecEnv("BreakoutNoFrameskip-v4", 1, noop_max=0)
    obs, _ = train.reset(seed=0)
    ev = make_atari_env("BreakoutNoFrameskip-v4", 0, noop_max=0, render_mode="rgb_array")
    obs_e, _ = ev.reset(seed=0)
    assert obs_e.shape == obs.shape[1:] == (4, 84, 84) and obs_e.dtype == obs.dtype
    assert ev.action_space.n == train.single_action_space.n == 4
    # the same first screen after the FIRE reset; C++ and OpenCV resize a little differently
    diff = np.abs(obs_e[-1].astype(int) - obs[0, -1].astype(int)).mean()
    assert diff < 3.0, diff
    frame = ev.render()
    assert frame.shape == (210, 160, 3) and frame.dtype == np.uint8
    train.close()
    ev.close()


def test_settings_by_version_and_the_atari_preset():
    assert atari_settings("PongNoFrameskip-v4")["repeat_action_probability"] == 0.0
    assert atari_settings("ALE/Pong-v5")["repeat_action_probability"] == 0.25
    assert atari_settings("ALE/Pong-v5", 0.0)["repeat_action_probability"] == 0.0
    assert atari_settings("ALE/Pong-v5")["game"] == "pong"
    assert auto_preset("PongNoFrameskip-v4") == "atari" == auto_preset("ALE/Breakout-v5")
    assert auto_preset("CartPole-v1") == "cartpole" and auto_preset("HalfCheetah-v5") == "cartpole"
    info = probe_env("ALE/Pong-v5", "a3c")
    assert info.obs_shape == (4, 84, 84) and info.obs_dtype == "uint8"
    assert info.frames_per_step == 4 and info.action.n == 6
    with pytest.raises(UserError, match="unknown environment id"):
        probe_env("ALE/NoSuchGame-v5", "a3c")


def test_the_worker_learns_across_a_lost_life_and_reports_whole_games(monkeypatch):
    import typing

    from asyncrl import algos
    from asyncrl.algos.a3c import A3C
    from asyncrl.backends.local import SharedMemory, run_worker
    from asyncrl.config import preset
    from asyncrl.messages import Episodes
    from asyncrl.state import GlobalState

    class Recording(A3C):
        seen: typing.ClassVar[list] = []

        def loss(self, model, rollout, target_model=None):
            ro = rollout
            Recording.seen.append((ro.ends.copy(), ro.terminated.copy(), ro.valid.copy()))
            return super().loss(model, rollout, target_model)

    monkeypatch.setitem(algos.REGISTRY, "a3c", Recording)
    cfg = preset("atari", env="BreakoutNoFrameskip-v4", envs_per_worker=1, steps=1500).validate()
    info = probe_env(cfg.env, "a3c")
    algo = Recording(cfg, info)
    state = GlobalState.create(cfg, algo.model_spec(), 1, False)
    outbox = []

    class Box:
        send = outbox.append

    run_worker(0, 0, cfg, info, SharedMemory.create(state, 1), None, Box())
    ends = np.concatenate([e for e, _, _ in Recording.seen])[:, 0]
    valid = np.concatenate([v for _, _, v in Recording.seen])[:, 0]
    terminal = np.flatnonzero(ends[:-1])
    assert len(terminal) >= 5
    games = [e for m in outbox if isinstance(m, Episodes) for e in m.episodes]
    assert games, "at least one whole game in 1,500 steps of random-ish Breakout"
    # every life but the last of each game is followed by a real (valid) step; only a game
    # over is followed by the masked reset step
    masked_after_end = int((~valid[terminal + 1]).sum())
    assert masked_after_end == len(games) < len(terminal)
    for score, length in games:
        assert score >= 0 and length > 50


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_a_short_pong_run_checkpoints_and_resumes(backend, run_dir):
    import json

    import asyncrl
    from asyncrl.checkpoint import load_checkpoint

    common = dict(env="PongNoFrameskip-v4", backend=backend, workers=2, envs_per_worker=4)
    summary = asyncrl.train(**common, steps=1_500, run_dir=str(run_dir), progress=False)
    assert summary["total_steps"] >= 1_500 and summary["total_frames"] == 4 * summary["total_steps"]
    assert summary["frames_per_second"] == pytest.approx(4 * summary["steps_per_second"])
    ckpt = load_checkpoint(run_dir)
    assert ckpt["glob"].steps == summary["total_steps"]
    # the emulators cannot be pickled: workers resume with fresh games, the rest exactly
    assert all(w["envs"] is None for w in ckpt["workers"].values())
    resumed = asyncrl.train(resume=run_dir, steps=3_000, progress=False)
    assert resumed["resumed"] and resumed["total_steps"] >= 3_000
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["t_max"] == 5 and cfg["lr"] == 7e-4  # the atari preset, picked from the env
    policy = asyncrl.load(run_dir)
    assert policy.spec.encoder == "a3c" and policy.spec.obs_dtype == "uint8"


@pytest.mark.slow
def test_eval_records_a_whole_pong_game_to_mp4(run_dir, tmp_path):
    import imageio.v2 as imageio

    import asyncrl

    asyncrl.train(
        env="PongNoFrameskip-v4",
        workers=1,
        envs_per_worker=2,
        steps=200,
        run_dir=str(run_dir),
        progress=False,
        backend="threads",
    )
    video = tmp_path / "pong.mp4"
    scores = asyncrl.evaluate(run_dir, episodes=1, video=video)
    assert -21 <= scores[0] <= 21 and scores[0] == int(scores[0])  # a whole game's raw score
    reader = imageio.get_reader(video)
    meta = reader.get_meta_data()
    assert meta["codec"] == "h264" and meta["size"] == (160, 224)  # 210 padded to 224
    assert reader.count_frames() > 500  # a whole game, not one rally
