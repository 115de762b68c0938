"""Atari preprocessing: the C++ vector env that trains with the DeepMind semantics (clipped
reward and lost life terminal for the learner, raw score and whole games for reporting), the
Gymnasium wrappers that evaluate, their agreement, and the worker's handling of lives."""

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

pytest.importorskip("ale_py")

import gymnasium as gym

from asyncrl import atari
from asyncrl.atari import (
    AtariSettings,
    atari_settings,
    is_atari_id,
    make_atari_env,
    make_atari_vec_env,
)
from asyncrl.envs import make_eval_env
from asyncrl.errors import UserError
from tests.oracles import spec_for, spec_of

NEXT_STEP = gym.vector.AutoresetMode.NEXT_STEP


def play(env, steps, seed=0):
    """Random play from a seeded reset; yields (obs_before, step result) per step."""
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    for _ in range(steps):
        out = env.step(rng.integers(env.single_action_space.n, size=env.num_envs))
        yield obs, out
        obs = out[0]


def is_new_game(obs):
    """A game's first observation: its first frame last, zeros before it."""
    return not obs[:3].any() and obs[3].any()


def test_spaces_and_the_frame_stack_oldest_first():
    env = make_atari_vec_env("PongNoFrameskip-v4", 2, 0)
    assert env.single_observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert env.single_action_space == gym.spaces.Discrete(6) and env.num_envs == 2
    assert env.metadata["autoreset_mode"] == NEXT_STEP
    first, _ = env.reset(seed=0)
    assert first.shape == (2, 4, 84, 84) and first.dtype == np.uint8
    assert all(is_new_game(o) for o in first)
    moved = False
    for before, (after, _, term, trunc, _) in play(env, 40):
        assert not (term | trunc).any()
        # oldest first: each step drops slot 0 and appends the newest frame last
        np.testing.assert_array_equal(after[:, :3], before[:, 1:])
        moved |= not np.array_equal(after[:, 3], before[:, 3])
    assert moved
    env.close()


def test_seeded_resets_are_reproducible_and_seeds_differ():
    env = make_atari_vec_env("BreakoutNoFrameskip-v4", 4, 1)
    obs, info = env.reset()  # a first reset without a seed uses the constructor's
    frames = info["episode_frame_number"]  # the FIRE frame and the no-ops
    assert len(set(frames)) > 1  # the envs of one seed start differently
    other, info = env.reset(seed=2)
    assert not np.array_equal(info["episode_frame_number"], frames)  # and so do seeds
    assert not np.array_equal(other, obs)
    again, info = env.reset(seed=1)
    np.testing.assert_array_equal(again, obs)
    np.testing.assert_array_equal(info["episode_frame_number"], frames)
    # any 32-bit seed works (ale-py alone takes only a C int), as the worker's seeds are
    assert env.reset(seed=2**32 - 1)[0].shape == (4, 4, 84, 84)
    env.close()


def test_the_learning_reward_is_clipped_while_the_score_is_raw():
    env = make_atari_vec_env("SpaceInvadersNoFrameskip-v4", 4, 0)
    for _, (_, reward, _, _, info) in play(env, 1000):
        assert reward.dtype == np.float32 and info["score"].dtype == np.float64
        np.testing.assert_array_equal(reward, np.clip(info["score"], -1, 1))
        big = info["score"] > 1
        if big.any():  # 5..30 points an invader
            assert (reward[big] == 1.0).all() and (info["score"][big] >= 5).all()
            break
    else:
        pytest.fail("no reward above 1 in 1,000 random steps of Space Invaders")
    env.close()


def test_a_lost_life_is_terminal_for_the_learner_and_the_game_goes_on():
    env = make_atari_vec_env("BreakoutNoFrameskip-v4", 2, 0)
    lost_in_game, games, after_loss = [0, 0], 0, [None, None]
    for before, (obs, _, term, trunc, info) in play(env, 3000):
        for i in range(2):
            lives, frame = info["lives"][i], info["episode_frame_number"][i]
            if after_loss[i] is not None:
                # the step after a lost life is a real step of the same game, not a reset
                assert (lives, frame) == (after_loss[i][0], after_loss[i][1] + 4)
                np.testing.assert_array_equal(obs[i, :3], before[i, 1:])
                after_loss[i] = None
            if info["lost_life"][i]:
                assert term[i] and not trunc[i] and not info["game_over"][i] and lives > 0
                lost_in_game[i] += 1
                after_loss[i] = lives, frame
            elif info["game_over"][i]:
                assert term[i] and not trunc[i] and lives == 0
                assert lost_in_game[i] == 4  # 5 lives: four lost, then the game is over
                lost_in_game[i] = 0
                games += 1
            else:
                assert not term[i] and not trunc[i]
        if games >= 2:
            break
    assert games >= 2
    env.close()


def test_the_frame_limit_truncates_a_whole_game_and_the_next_step_resets():
    env = make_atari_vec_env("PongNoFrameskip-v4", 2, 0, max_frames=400)
    for t, (_, (obs, reward, term, trunc, info)) in enumerate(play(env, 101), start=1):
        if t < 100:
            assert not (trunc | term | info["game_over"]).any()
        elif t == 100:  # the limit counts the agent's 4 frames a step, not the reset's no-ops
            assert trunc.all() and not term.any() and info["game_over"].all()
            assert not info["lost_life"].any()
        else:  # next-step autoreset: action ignored, reward 0, a new game
            assert not (trunc | term | info["game_over"]).any()
            assert (reward == 0).all() and (info["score"] == 0).all()
            assert all(is_new_game(o) for o in obs)
            assert (info["episode_frame_number"] <= 31).all()  # FIRE + up to 30 no-ops
    env.close()


def test_each_game_reports_the_frames_its_reset_played_until_it_ends():
    # start_frames: the frame counter after the reset (FIRE and the no-ops), the same from a
    # game's first step to its game over, and the next game's from its reset step on
    env = make_atari_vec_env("PongNoFrameskip-v4", 4, 0, max_frames=40)
    _, info = env.reset()
    start = info["episode_frame_number"].copy()
    starts = [start]
    for t in range(1, 31):  # three games of 10 agent steps, each then a reset step
        _, _, _, _, info = env.step(np.zeros(4, np.int64))
        if t % 11 == 0:  # the reset step: the frame counter starts again
            start = info["episode_frame_number"].copy()
            starts.append(start)
        else:
            assert (info["episode_frame_number"] == start + 4 * (t % 11)).all()
        np.testing.assert_array_equal(info["start_frames"], start)
        assert info["game_over"].all() == (t % 11 == 10)
    # drawn afresh each game: 12 games of up to 29 start counts cannot all repeat
    assert len({tuple(s) for s in starts}) > 1 and (np.concatenate(starts) <= 29).all()
    env.close()
    # a masked reset starts new games in the envs it names only
    env = make_atari_vec_env("PongNoFrameskip-v4", 4, 0)
    _, first = env.reset()
    for _ in range(3):
        env.step(np.zeros(4, np.int64))
    _, info = env.reset(options={"reset_mask": np.array([True, False, False, False])})
    _, _, _, _, after = env.step(np.zeros(4, np.int64))
    assert after["start_frames"][0] == info["episode_frame_number"][0] <= 29
    assert after["episode_frame_number"][0] == after["start_frames"][0] + 4
    np.testing.assert_array_equal(after["start_frames"][1:], first["episode_frame_number"][1:])
    env.close()


def test_the_step_after_a_game_over_starts_a_new_game_with_reward_zero():
    # without no-op starts every game starts alike: the reset step's observation must be the
    # first observation of a fresh env
    env = make_atari_vec_env("BreakoutNoFrameskip-v4", 1, 0, noop_max=0)
    fresh = make_atari_vec_env("BreakoutNoFrameskip-v4", 1, 5, noop_max=0)
    first, _ = fresh.reset()
    over = False
    for _, (obs, reward, term, trunc, info) in play(env, 3000):
        if over:
            assert reward[0] == 0 and info["score"][0] == 0 and not (term[0] or trunc[0])
            assert info["lives"][0] == 5 and not info["game_over"][0]
            np.testing.assert_array_equal(obs, first)
            break
        over = bool(info["game_over"][0])
    else:
        pytest.fail("no game over in 3,000 random steps of Breakout")
    env.close()
    fresh.close()


@pytest.mark.parametrize("env_id", ["BreakoutNoFrameskip-v4", "MsPacmanNoFrameskip-v4"])
@pytest.mark.parametrize("maxpool", [True, False])
def test_the_evaluation_env_sees_exactly_what_training_sees(env_id, maxpool):
    # no-op starts off on both (they draw different counts); the FIRE frame, max-pooling (or
    # the last frame alone), palette, INTER_AREA resize and zero padding of the stack agree to
    # the grey level
    train = make_atari_vec_env(env_id, 1, 0, noop_max=0, maxpool=maxpool)
    ev = make_atari_env(env_id, 0, noop_max=0, maxpool=maxpool)
    assert ev.observation_space == train.single_observation_space
    assert ev.action_space == train.single_action_space
    obs, info = train.reset(seed=0)
    obs_e, info_e = ev.reset(seed=0)
    assert obs_e.dtype == np.uint8 and obs_e.shape == (4, 84, 84)
    np.testing.assert_array_equal(obs_e, obs[0])
    rng = np.random.default_rng(0)
    for _ in range(300):
        a = int(rng.integers(ev.action_space.n))
        obs, _, _, _, info = train.step(np.array([a]))
        obs_e, reward_e, term_e, trunc_e, info_e = ev.step(a)
        np.testing.assert_array_equal(obs_e, obs[0])
        assert reward_e == info["score"][0] and info_e["lives"] == info["lives"][0]
        assert (term_e or trunc_e) == info["game_over"][0]
        if term_e:
            break
    train.close()
    ev.close()


def test_the_evaluation_env_plays_whole_seeded_games_and_renders_rgb():
    env = make_atari_env("ALE/Breakout-v5", 3, render_mode="rgb_array")
    obs, info = env.reset()  # the first reset uses the env's seed
    frame = env.render()
    assert frame.shape == (210, 160, 3) and frame.dtype == np.uint8
    again = make_atari_env("ALE/Breakout-v5", 0)
    np.testing.assert_array_equal(again.reset(seed=3)[0], obs)
    starts = {again.reset(seed=s)[1]["episode_frame_number"] for s in range(5)}
    assert len(starts) > 1  # no-op starts differ by seed
    rng = np.random.default_rng(0)
    lives = info["lives"]
    for _ in range(2000):
        obs, _, term, trunc, info = env.step(int(rng.integers(4)))
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
        if info["lives"] < lives:
            break  # a lost life: the game goes on
        assert not (term or trunc)
    assert 0 < info["lives"] < lives and not (term or trunc)
    env.close()
    again.close()


def test_evaluation_serves_after_a_lost_life():
    # Breakout waits for FIRE after a lost life: a policy that never presses it (NOOP forever)
    # would stall to the frame limit (27,000 steps); evaluation presses it, so the game ends
    for fire, steps in ((True, 500), (False, 2000)):
        env = make_atari_env("BreakoutNoFrameskip-v4", 0, noop_max=0, fire_after_lost_life=fire)
        env.reset(seed=0)
        for _ in range(steps):
            _, _, term, trunc, info = env.step(0)
            if term or trunc:
                break
        # with it: every life lost within 500 steps; without: still 4 lives after 2,000
        assert (term and info["lives"] == 0) if fire else (info["lives"] == 4 and not term)
        env.close()
    ev = make_eval_env("BreakoutNoFrameskip-v4", 0)  # evaluation's env (and video's) serves
    assert any(getattr(w, "after_lost_life", False) for w in _wrappers(ev))
    ev.close()


def _wrappers(env):
    while isinstance(env, gym.Wrapper):
        yield env
        env = env.env


def test_ids_and_settings_by_version():
    for env_id in ("PongNoFrameskip-v4", "BreakoutNoFrameskip-v4", "Pong-v4", "ALE/Pong-v5"):
        assert is_atari_id(env_id)
    assert is_atari_id("ALE/Tetris-v5") and is_atari_id("ale_py:ALE/Pong-v5")
    for env_id in ("CartPole-v1", "MinAtar/Breakout-v1", "Ant-v4", "ALE/NoSuchGame-v5"):
        assert not is_atari_id(env_id)
    assert atari_settings("PongNoFrameskip-v4") == AtariSettings("pong", 0.0, False)
    assert atari_settings("ALE/Pong-v5") == AtariSettings("pong", 0.25, False)
    assert atari_settings("ALE/Pong-v5", 0.0).repeat_action_probability == 0.0
    assert atari_settings("SpaceInvaders-v0").game == "space_invaders"
    assert atari_settings("SpaceInvaders-v0").repeat_action_probability == 0.25
    with pytest.raises(UserError, match=r"'ALE/NoSuchGame-v5' is not an Atari game") as e:
        atari_settings("ALE/NoSuchGame-v5")
    assert "\n" not in str(e.value)
    with pytest.raises(UserError, match="did you mean ALE/Pong-v5"):
        atari_settings("ALE/Pongg-v5")
    with pytest.raises(UserError, match="not an Atari game"):
        make_atari_vec_env("CartPole-v1", 1, 0)
    with pytest.raises(UserError, match=r"in \[0, 1\]"):
        atari_settings("ALE/Pong-v5", 1.5)


def test_env_kwargs_override_the_versions_settings_in_training_and_evaluation(run_dir, capsys):
    from asyncrl.cli import main
    from asyncrl.envs import make_eval_env, make_vec_env, probe_env

    no_sticky = {"repeat_action_probability": 0.0}
    env = make_vec_env("ALE/Pong-v5", 1, 0, no_sticky)
    assert env.settings.repeat_action_probability == 0.0  # v5's own is 0.25
    env.close()
    full = {"full_action_space": True}
    assert probe_env("ALE/Pong-v5").action.n == 6
    assert probe_env("ALE/Pong-v5", full).action.n == 18  # the model follows
    eval_env = make_eval_env("PongNoFrameskip-v4", 0, kwargs=full | no_sticky)
    assert eval_env.action_space.n == 18
    assert eval_env.unwrapped.ale.getFloat("repeat_action_probability") == 0.0
    eval_env.close()
    # what the preprocessing fixes cannot be changed: one line, exit 2, nothing written
    for pair, what in (
        ("frameskip=2", "take repeat_action_probability, full_action_space, maxpool"),
        ("full_action_space=yes", "full_action_space must be true or false"),
        ("maxpool=1", "maxpool must be true or false"),
    ):
        argv = ["train", "--env", "PongNoFrameskip-v4", "--env-kwargs", pair]
        assert main([*argv, "--run-dir", str(run_dir)]) == 2
        err = capsys.readouterr().err.strip()
        assert what in err and "\n" not in err and "Traceback" not in err
        assert not run_dir.exists()


def test_maxpool_off_observes_the_last_frame_of_each_step():
    # Pong draws every other frame anew: in one of the two alignments of a 4-frame step with
    # them, the max over its last two frames overlays two positions of a moving paddle or ball;
    # the last frame alone never does, and is what maxpool=false observes in both envs
    pooled = make_atari_vec_env("PongNoFrameskip-v4", 1, 0, noop_max=0)
    last = make_atari_vec_env("PongNoFrameskip-v4", 1, 0, noop_max=0, maxpool=False)
    single = make_atari_env("PongNoFrameskip-v4", 0, noop_max=0, maxpool=False)
    pooled.reset(seed=0)
    last.reset(seed=0)
    single.reset(seed=0)
    differ = 0
    for t in range(200):
        a = np.array([2 if (t // 8) % 2 else 3])  # the paddle up and down
        p, *_ = pooled.step(a)
        o, *_ = last.step(a)
        e, *_ = single.step(int(a[0]))
        np.testing.assert_array_equal(e, o[0])
        assert (p[0, -1] >= o[0, -1]).all()  # a max over the last frame and the one before
        differ += int((p[0, -1] != o[0, -1]).any())
    assert differ > 50
    for env in (pooled, last, single):
        env.close()


def _pong_frame_by_frame() -> tuple[Any, Callable[[], float]]:
    """Pong in ale-py, one frame an act, no sticky actions, and the row of the agent's paddle
    (green, near the right edge) on the screen."""
    from ale_py import ALEInterface, roms

    ale = ALEInterface()
    ale.setInt("random_seed", 0)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.loadROM(roms.get_rom_path("pong"))

    def paddle() -> float:
        rows = np.all(ale.getScreenRGB()[34:194, 140:144] == [92, 186, 92], axis=-1)
        return float(np.nonzero(rows)[0].mean())

    return ale, paddle


def test_pong_draws_every_other_frame_so_odd_no_op_counts_see_two_drawings_a_step():
    # 8efeca9:docs/benchmarks.md#what-the-last-points-are: after FIRE and n no-ops, the last two
    # frames of each 4-frame step are one drawing where n is even and two where n is odd, so
    # the max over them overlays two positions of the moving paddle at odd n only
    ale, paddle = _pong_frame_by_frame()
    actions = ale.getMinimalActionSet()  # NOOP, FIRE, RIGHT (up), LEFT (down), ...

    for noops in range(4):
        ale.reset_game()
        ale.act(actions[1])
        for _ in range(noops):
            ale.act(actions[0])
        moving = two_drawings = 0
        for step in range(40):
            seen = []
            for _ in range(4):
                ale.act(actions[2] if (step // 5) % 2 else actions[3])
                seen.append(paddle())
            moving += seen[0] != seen[3]
            two_drawings += seen[2] != seen[3]
        assert moving >= 30
        if noops % 2:
            assert two_drawings == moving
        else:  # at most a step where the ball crosses the paddle's columns
            assert two_drawings <= 1


def test_pong_draws_the_paddle_on_alternate_frames_set_by_the_parity_and_a_press_from_the_next():
    # 8efeca9:docs/benchmarks.md#what-the-last-points-are: what else the no-op parity changes. The
    # paddle is drawn at a new place on a step's 1st and 3rd frames after an even no-op count,
    # on its 2nd and 4th after an odd one; a one-frame press on any of a step's frames first
    # shows at the next of those frames after it (not at one on the press's own frame). So
    # after an even count a step's first drawing comes before its action shows, and after an
    # odd count both of the step's drawings follow it
    ale, paddle = _pong_frame_by_frame()
    noop, fire, up, down = ale.getMinimalActionSet()[:4]

    def start(noops: int) -> None:  # FIRE, the no-ops, then 15 idle steps: the paddle is drawn
        ale.reset_game()
        ale.act(fire)
        for _ in range(noops + 60):
            ale.act(noop)

    for noops in range(4):
        start(noops)
        moves = [0, 0, 0, 0]
        last = paddle()
        for step in range(40):
            for i in range(4):
                ale.act(up if (step // 5) % 2 else down)
                moves[i] += paddle() != last
                last = paddle()
        drawn_at = [1, 3] if noops % 2 else [0, 2]
        assert [i for i in range(4) if moves[i] >= 30] == drawn_at, (noops, moves)
        assert sum(moves[i] for i in range(4) if i not in drawn_at) == 0, (noops, moves)
        for offset in range(4):  # a press on the step's frame `offset` (0-3), then idle
            start(noops)
            for _ in range(offset):
                ale.act(noop)
            before = paddle()
            shown = []
            for frame in range(offset, offset + 5):
                ale.act(up if frame == offset else noop)
                shown.append(paddle() != before)
            first = offset + shown.index(True)
            assert first == min(f for f in drawn_at + [f + 4 for f in drawn_at] if f > offset), (
                noops,
                offset,
                shown,
            )


def test_without_ale_py_atari_ids_ask_for_it(monkeypatch):
    monkeypatch.setattr(atari, "_ale_py", lambda: None)
    assert is_atari_id("ALE/Pong-v5") and is_atari_id("PongNoFrameskip-v4")
    assert not is_atari_id("CartPole-v1") and not is_atari_id("Ant-v4")
    msg = "--env: ALE/Pong-v5 needs ale-py: pip install -c constraints.txt -e '.[atari]'"
    with pytest.raises(UserError) as e:
        atari_settings("ALE/Pong-v5")
    assert str(e.value) == msg


def test_the_atari_preset_and_probe():
    from asyncrl.envs import probe_env
    from asyncrl.presets import auto_preset

    assert auto_preset("PongNoFrameskip-v4") == "atari" == auto_preset("ALE/Breakout-v5")
    assert auto_preset("CartPole-v1") == "cartpole" and auto_preset("Pendulum-v1") == "control"
    assert auto_preset("MinAtar/Breakout-v1") == "minatar"
    info = probe_env("ALE/Pong-v5")
    assert info.obs_shape == (4, 84, 84) and info.obs_dtype == "uint8"
    assert info.frames_per_step == 4 and info.action.n == 6
    with pytest.raises(UserError, match="unknown environment id"):
        probe_env("ALE/NoSuchGame-v5")


def test_the_worker_learns_across_a_lost_life_and_reports_whole_games(monkeypatch):
    import typing

    from asyncrl import algos
    from asyncrl.algos.a3c import A3C
    from asyncrl.backends.local import SharedMemory, run_worker
    from asyncrl.envs import probe_env
    from asyncrl.messages import Episodes
    from asyncrl.presets import preset
    from asyncrl.state import GlobalState

    class Recording(A3C):
        seen: typing.ClassVar[list] = []

        def loss(self, model, rollout, target_model=None):
            ro = rollout
            Recording.seen.append((ro.ends.copy(), ro.terminated.copy(), ro.valid.copy()))
            return super().loss(model, rollout, target_model)

    monkeypatch.setitem(algos.REGISTRY, "a3c", Recording)
    cfg = preset("atari", env="BreakoutNoFrameskip-v4", algo="a3c", envs_per_worker=1, steps=1500)
    cfg = cfg.validate()
    info = probe_env(cfg.env)
    algo = Recording(cfg, info)
    state = GlobalState.create(cfg, spec_of(algo), 1, False)
    outbox = []

    class Box:
        send = outbox.append

    run_worker(0, 0, cfg, info, spec_for(cfg, info), SharedMemory.create(state, 1), None, Box())
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
    for score, length, start in games:
        assert score >= 0 and length > 50
        assert 1 <= start <= 29  # ale-py's reset: FIRE, then 0 to 28 no-ops


# No evaluation during or after a run: --eval-every 0 with --stop-on train, and no re-scoring
NO_EVAL: dict = dict(eval_every=0, stop_on="train", rescore_episodes=0)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_a_short_pong_run_checkpoints_and_resumes(backend, run_dir):
    import json

    import asyncrl
    from asyncrl.checkpoint import load_checkpoint

    # no evaluations: ten whole Pong games of the untrained policy would take most of the
    # test's time (the evaluations have tests of their own)
    common = dict(
        env="PongNoFrameskip-v4", backend=backend, workers=2, envs_per_worker=4, **NO_EVAL
    )
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
    # the atari preset, picked from the env: APPO with PPO's Atari setting
    assert cfg["algo"] == "appo" and cfg["t_max"] == 128 and cfg["lr"] == 2.5e-4
    policy = asyncrl.load(run_dir)
    assert policy.spec.encoder == "a3c" and policy.spec.obs_dtype == "uint8"


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["a3c", "nstep-q", "onestep-q", "onestep-sarsa", "appo"])
def test_each_of_the_papers_methods_trains_on_an_atari_game(algo, run_dir):
    import asyncrl

    # the preset's settings (epsilon schedule, target network) on the paper's conv net, the
    # Q methods with Q heads on the same body, APPO with PPO's Atari setting (128-step
    # rollouts: 2 of them here); a few hundred steps through the real emulators
    summary = asyncrl.train(
        env="PongNoFrameskip-v4",
        algo=algo,
        backend="threads",
        workers=1,
        envs_per_worker=2,
        steps=400,
        run_dir=str(run_dir),
        progress=False,
        **NO_EVAL,
    )
    assert summary["ended"] == "budget" and summary["nonfinite_updates"] == 0
    assert summary["total_steps"] >= 400 and summary["total_frames"] == 4 * summary["total_steps"]
    policy = asyncrl.load(run_dir)
    assert policy.spec.kind == ("actor-critic" if algo in ("a3c", "appo") else "q")
    assert policy.spec.encoder == "a3c" and policy.spec.obs_dtype == "uint8"
    obs = np.zeros((4, 84, 84), np.uint8)
    assert policy.act(obs) in range(6)  # Pong's minimal action set


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
        **NO_EVAL,
    )
    video = tmp_path / "pong.mp4"
    scores = asyncrl.evaluate(run_dir, episodes=1, video=video)
    assert -21 <= scores[0] <= 21 and scores[0] == int(scores[0])  # a whole game's raw score
    reader = imageio.get_reader(video)
    meta = reader.get_meta_data()
    assert meta["codec"] == "h264" and meta["size"] == (160, 224)  # 210 padded to 224
    assert reader.count_frames() > 500  # a whole game, not one rally


def test_dead_units_tells_a_network_that_sees_every_frame_alike():
    """benchmarks/dead_units.py, the measure behind the Pong take-off finding: a conv layer
    whose every unit is below zero on every frame is dead, and the layer after it then gives
    every frame the same features."""
    import sys
    from pathlib import Path

    import torch

    from asyncrl.algos.a3c import A3C
    from asyncrl.envs import probe_env
    from asyncrl.models import build_model
    from asyncrl.presets import preset

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import dead_units

    x = dead_units.frames("PongNoFrameskip-v4", n=20)
    assert x.shape == (20, 4, 84, 84) and x.dtype == torch.uint8
    cfg = preset(None, env="PongNoFrameskip-v4", algo="a3c")
    model = build_model(spec_of(A3C(cfg, probe_env(cfg.env))))
    alive = dead_units.report(model, x)
    assert len(alive) == 3 and "dead 100.0%" not in "".join(alive)
    with torch.no_grad():
        model.pi_body.convs[1].bias.fill_(-100.0)
    dead = dead_units.report(model, x)
    assert dead[0] == alive[0]  # the layer before is untouched
    assert "layer 1 (Conv2d): dead 100.0%, mean activation 0.000" in dead[1]
    assert dead[2].endswith("std across frames 0.0000")


def test_the_ceiling_counts_the_paper_nets_flops_as_worked_by_hand():
    """benchmarks/atari.py ceiling: the network's FLOPs per agent step come from
    network_flops, which must see the first conv too (the encoder calls it functionally, past
    any module hook: a hook count once missed it and gave 9.4 MFLOP an agent step where the
    network does 20.7). By hand, multiply-adds per frame (outputs x fan-in): conv 16 8x8/4
    on 4x84x84 gives 16x20x20 outputs of 4x8x8 inputs each, conv 32 4x4/2 gives 32x9x9 of
    16x4x4, fc 256 of 32x9x9 = 2,592. Backward: every weight gradient (a forward's worth each)
    and the input gradients of all but the first layer (the pixels take none)."""
    import sys
    from pathlib import Path

    import torch

    from asyncrl.models import ConvEncoder

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import atari as atari_bench

    conv1, conv2, fc = 16 * 20 * 20 * 4 * 8 * 8, 32 * 9 * 9 * 16 * 4 * 4, 256 * 2592
    encoder = ConvEncoder("a3c", (4, 84, 84), channels_last=False)
    fwd, bwd = atari_bench.network_flops(encoder, torch.zeros((1, 4, 84, 84), dtype=torch.uint8))
    assert fwd == 2 * (conv1 + conv2 + fc)
    assert bwd == 2 * (conv1 + 2 * conv2 + 2 * fc)
    assert all(p.grad is None for p in encoder.parameters())  # it leaves no gradients behind
