"""Atari games from pixels with the DeepMind preprocessing (Mnih et al., 2015; the A3C paper's
Atari setting): up to 30 no-op starts, action repeat 4 with the max over the last two frames,
84x84 grayscale, a stack of the last 4 frames (oldest first), FIRE on reset where the game has
it, rewards clipped to [-1, 1] for learning, a lost life terminal for the learner, 108,000
emulator frames (30 minutes) per game at most.

Training runs ale-py's C++ vector env (``ale_py.vector_env.AtariVectorEnv``): the emulator
steps, frame pooling, resizing and stacking happen in C++, with no OpenCV and no Python loop
over envs, at several thousand agent steps per second per core. Evaluation and video play one
env through Gymnasium's ``AtariPreprocessing`` + ``FrameStackObservation`` (and a FIRE reset),
which render RGB frames; ``tests/test_atari.py`` checks the two agree (shapes, dtypes, action
sets, the first observations of a game).

What the learner sees and what is reported differ, as they must:

* ``reward``: clipped to [-1, 1]; ``info["score"]``: the raw game score of the step, which the
  worker adds up for the episode's return;
* ``terminated``: a life was lost or the game is over (V = 0 there); ``info["game_over"]``: the
  whole game ended (all lives lost, or the frame limit), the only end the episode counter, the
  scores and the stop rule count. After a lost life the game goes on: the next step is a real
  transition, not a reset, and the worker does not mask it;
* ``truncated``: the frame limit, a time limit: the learner bootstraps from V there.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from asyncrl.errors import UserError

FRAMESKIP = 4
STACK = 4
MAX_FRAMES = 108_000


def _ale() -> Any:
    try:
        import ale_py
    except ImportError:
        raise UserError(
            "Atari games need ale-py; install the extra: pip install -c constraints.txt -e "
            "'.[atari]'"
        ) from None
    gym.register_envs(ale_py)
    return ale_py


def atari_settings(env_id: str, repeat_action_probability: float | None = None) -> dict:
    """The game and the version's settings from the Gymnasium id (v4 NoFrameskip: no sticky
    actions; v5: sticky actions 0.25); an override wins."""
    _ale()
    kwargs = gym.spec(env_id).kwargs
    sticky = kwargs.get("repeat_action_probability", 0.25)
    if repeat_action_probability is not None:
        sticky = repeat_action_probability
    return {
        "game": kwargs["game"],
        "repeat_action_probability": float(sticky),
        "full_action_space": bool(kwargs.get("full_action_space", False)),
    }


class AtariVecEnv(gym.vector.VectorEnv):
    """``num_envs`` games in ale-py's C++ vector env, with the learner's and the reporter's
    views of each step (see the module docstring). Next-step autoreset, as every asyncrl env."""

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        *,
        repeat_action_probability: float | None = None,
        max_frames: int = MAX_FRAMES,
        noop_max: int = 30,
    ):
        from ale_py.vector_env import AtariVectorEnv

        s = atari_settings(env_id, repeat_action_probability)
        self.env = AtariVectorEnv(
            s["game"],
            num_envs,
            num_threads=1,  # one core per worker
            repeat_action_probability=s["repeat_action_probability"],
            full_action_space=s["full_action_space"],
            max_num_frames_per_episode=max_frames,
            frameskip=FRAMESKIP,
            stack_num=STACK,
            noop_max=noop_max,
            # terminated at a lost life *without* a reset (the game goes on); ale-py's
            # episodic_life instead restarts the whole game at every lost life
            episodic_life=False,
            life_loss_info=True,
            reward_clipping=False,  # clipped here, so that the raw score can be reported
            use_fire_reset=True,
        )
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}
        self.num_envs = num_envs
        self.single_observation_space = self.env.single_observation_space
        self.single_action_space = self.env.single_action_space
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        self.lives = np.zeros(num_envs, np.int32)

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[np.ndarray, dict]:
        obs, info = self.env.reset(seed=seed)
        self.lives = info["lives"].copy()
        return obs, info

    def step(self, actions: np.ndarray) -> tuple:
        obs, reward, terminated, truncated, info = self.env.step(np.asarray(actions))
        lives = info["lives"]
        # a game is over at the frame limit, with its last life, or when it ends with lives
        # left (a few games end on a timer): a terminal step that did not cost a life
        lost_life = terminated & (lives < self.lives) & (lives > 0)
        game_over = truncated | (terminated & ~lost_life)
        self.lives = lives.copy()
        info = {
            **info,
            "score": reward.astype(np.float64),
            "game_over": game_over,
            "lost_life": lost_life,
        }
        return obs, np.clip(reward, -1.0, 1.0).astype(np.float32), terminated, truncated, info

    def close(self, **kwargs: Any) -> None:
        self.env.close()


def make_atari_vec_env(
    env_id: str, num_envs: int, seed: int = 0, **kwargs: Any
) -> gym.vector.VectorEnv:
    return AtariVecEnv(env_id, num_envs, **kwargs)


class FireReset(gym.Wrapper):
    """Press FIRE after a reset in games that wait for it (Breakout's ball, for instance), as
    ale-py's vector env does with use_fire_reset."""

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(1)
        if terminated or truncated:
            obs, info = self.env.reset(**kwargs)
        return obs, info


def make_atari_env(
    env_id: str,
    seed: int = 0,
    *,
    render_mode: str | None = None,
    repeat_action_probability: float | None = None,
    noop_max: int = 30,
) -> gym.Env:
    """One game for evaluation and video: whole games, raw scores, the same observations as
    training (Gymnasium's wrappers, frames rendered in RGB on request)."""
    s = atari_settings(env_id, repeat_action_probability)
    env = gym.make(
        env_id,
        frameskip=1,
        repeat_action_probability=s["repeat_action_probability"],
        render_mode=render_mode,
        max_num_frames_per_episode=MAX_FRAMES,
    )
    env = gym.wrappers.AtariPreprocessing(
        env,
        noop_max=noop_max,
        frame_skip=FRAMESKIP,
        screen_size=84,
        terminal_on_life_loss=False,
        grayscale_obs=True,
        scale_obs=False,
    )
    if "FIRE" in env.unwrapped.get_action_meanings():  # type: ignore[attr-defined]
        env = FireReset(env)
    return gym.wrappers.FrameStackObservation(env, STACK)
