"""Atari games from pixels with the DeepMind preprocessing (Mnih et al., 2015, kept by the A3C
paper): up to 30 no-op starts, action repeat 4 with the max over the last two frames, 84x84
grayscale, a stack of the last 4 frames, FIRE on reset where the game has FIRE, rewards clipped
to [-1, 1] for learning, a lost life terminal for the learner, at most 108,000 emulator frames
(30 minutes) per game.

Training runs ale-py's C++ vector env (``ale_py.vector_env.AtariVectorEnv``): emulation, frame
pooling, resizing and stacking all happen in C++ (its OpenCV is built in: training needs no
OpenCV wheel), with no Python per env and frame. Measured on one core: Pong, 16 envs, random
actions, about 2,200 agent steps/s (8,800 frames/s), against about 1,600 through Gymnasium's
wrappers; the emulator alone runs about 12,000 frames/s, so the rest costs ~30%. A worker drives
its envs on one thread (``num_threads=1``): our workers are processes, one per core. Evaluation
and video play one env through Gymnasium's ``AtariPreprocessing`` + ``FrameStackObservation``
(plus :class:`FireReset`), which can render RGB frames and need ``opencv-python``.

What the learner sees and what is reported differ, as they must, so ale-py's own clipping and
life handling are off and both views are derived here from its raw step:

* ``reward``: the game reward clipped to [-1, 1]; ``info["score"]``: the raw reward of the step,
  which the worker adds up into the game's score;
* ``terminated``: a life was lost or the game is over (V = 0 there); ``info["game_over"]``: the
  whole game ended (all lives lost, or the frame limit), the only end the episode counter, the
  scores and the stop rule count. After a lost life the game goes on: the next step is a real
  transition (its action is played), not a reset, so the worker must not mask it;
* ``truncated``: the frame limit without a lost life: a time limit, the learner bootstraps.

What ale-py 0.12 does, checked by running it (``tests/test_atari.py`` pins all of it):

* ``episodic_life=True`` restarts the *whole game* at every lost life (lives go back to 5 in
  Breakout), so no game is ever finished. ``life_loss_info=True`` sets ``terminated`` at a lost
  life and plays on, but then ``terminated`` no longer tells which ends are game overs; and
  ``reward_clipping`` hides the raw score. All three are off; the info dict holds ``env_id``,
  ``lives``, ``frame_number`` and ``episode_frame_number`` (int32 arrays), to which
  :meth:`AtariVecEnv.step` adds ``score``, ``game_over``, ``lost_life`` (a life lost, the
  game going on) and ``start_frames`` (the frames the game's reset played, FIRE where the
  game has it and the no-ops: ``episode_frame_number`` after it; the worker writes it into
  ``episodes.csv``).
  In Breakout the last life goes 1 -> 0 on the game-over step itself.
* Stacks are oldest frame first; after a reset the three older slots are zeros, not copies of
  the first frame (the evaluation env pads with zeros too, so the two agree).
* The frame limit counts only frames played by the agent (4 per step), not the FIRE and no-op
  frames of the reset: a limit of F frames truncates at exactly F / 4 agent steps.
* Next-step autoreset: the step after a game over ignores its action and returns reward 0,
  ``terminated = truncated = False`` and the new game's first observation (zeros + one frame).
* Seeds must fit a C ``int``; :meth:`AtariVecEnv.reset` derives one per env with
  ``SeedSequence`` so that any seed works and no two envs of nearby seeds share a game. A seeded
  reset reloads the ROM: about 0.1 s per env, as is building one.
* No-op starts: ale-py presses FIRE for one frame, then 0 to 28 no-ops; Gymnasium's wrapper
  (with :class:`FireReset` under it) FIRE, then 1 to 30 no-ops. Both are "up to 30".
* With no-op starts off, the two envs give identical observations for the same actions: the
  FIRE frame before the no-ops, max-pooling, grayscale palette and INTER_AREA resize all agree.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np

from asyncrl.errors import UserError

FRAMESKIP = 4
STACK = 4
SCREEN = 84
NOOP_MAX = 30
#: the learner's reward is the game's clipped to +-this (DeepMind's); info['score'] keeps it raw
REWARD_CLIP = 1.0
MAX_FRAMES = 108_000
_INSTALL = "pip install -c constraints.txt -e '.[atari]'"
# Gymnasium's legacy Atari ids (PongNoFrameskip-v4, Pong-v0): recognised without ale-py only to
# tell the user to install it
_LEGACY_ID = re.compile(r"[A-Z][A-Za-z]*(NoFrameskip)?-v[04]")


def _plain(env_id: str) -> str:
    """``ale_py:ALE/Pong-v5`` -> ``ALE/Pong-v5`` (the module prefix gymnasium.make accepts)."""
    return env_id.rpartition(":")[2]


def _ale_py() -> ModuleType | None:
    """ale-py, with its games registered (Gymnasium 1.x registers them only when ale-py is
    imported), or None if it is not installed: Atari is an optional extra."""
    try:
        import ale_py
    except ImportError:
        return None
    gym.register_envs(ale_py)
    return ale_py


def is_ale_spec(spec: gym.envs.registration.EnvSpec | None) -> bool:
    return spec is not None and str(spec.entry_point).startswith("ale_py")


def is_atari_id(env_id: str) -> bool:
    """Whether ``env_id`` names an ale-py game (``ALE/Pong-v5``, ``PongNoFrameskip-v4``...).

    With ale-py installed the registry decides, so every ROM it ships is known and nothing else
    is claimed. Without it, ids of the ALE's shapes count as Atari so that the caller goes on to
    :func:`atari_settings` and its "install ale-py" error, rather than "unknown id".
    """
    plain = _plain(env_id)
    ale_py = _ale_py()
    spec = gym.registry.get(plain)
    if spec is not None or ale_py is not None:
        return is_ale_spec(spec)
    return plain.startswith("ALE/") or _LEGACY_ID.fullmatch(plain) is not None


@dataclass(frozen=True)
class AtariSettings:
    """What the Gymnasium id fixes about the game; everything else (frame skip 4, no-ops, 84x84
    grayscale, the stack) is the DeepMind preprocessing, the same for every id."""

    game: str
    """ale-py's ROM name, snake_case (``"pong"``, ``"space_invaders"``)"""
    repeat_action_probability: float
    """sticky actions: 0.0 for the v4 ids (the A3C paper's setting), 0.25 for v0 and v5"""
    full_action_space: bool
    """all 18 joystick actions rather than the game's minimal set"""


def atari_settings(
    env_id: str,
    repeat_action_probability: float | None = None,
    full_action_space: bool | None = None,
) -> AtariSettings:
    """The game and the version's settings from the id's Gymnasium spec, so that the C++ env
    plays what ``gymnasium.make(env_id)`` would; an explicit setting wins (``--env-kwargs
    repeat_action_probability=0`` trains a v5 game without sticky actions, say)."""
    plain = _plain(env_id)
    if _ale_py() is None:
        raise UserError(f"--env: {plain} needs ale-py: {_INSTALL}")
    spec = gym.registry.get(plain)
    if spec is None or not is_ale_spec(spec):
        ale_ids = [k for k, s in gym.registry.items() if is_ale_spec(s)]
        close = difflib.get_close_matches(plain, ale_ids, n=3)
        hint = (
            f"did you mean {', '.join(close)}?"
            if close
            else "Atari ids look like ALE/Pong-v5 or PongNoFrameskip-v4"
        )
        raise UserError(f"--env: {plain!r} is not an Atari game ale-py knows; {hint}")
    kwargs = spec.kwargs
    sticky = kwargs.get("repeat_action_probability", 0.25)  # AtariEnv's own default
    if repeat_action_probability is not None:
        sticky = repeat_action_probability
    if not 0.0 <= sticky <= 1.0:
        raise UserError(
            f"--env: repeat_action_probability must be in [0, 1], got {sticky} for {plain}"
        )
    return AtariSettings(
        game=str(kwargs["game"]),
        repeat_action_probability=float(sticky),
        full_action_space=bool(
            kwargs.get("full_action_space", False)
            if full_action_space is None
            else full_action_space
        ),
    )


#: what ``--env-kwargs`` may set on an Atari game; the rest (frame skip, observation type,
#: life handling...) is the DeepMind preprocessing, which training and evaluation share.
#: ``maxpool=false`` observes the last frame of each 4-frame step alone, not the max over its
#: last two: the game and its score are the same, only what the agent sees changes
ENV_KWARGS = ("repeat_action_probability", "full_action_space", "maxpool")


def env_overrides(kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """``--env-kwargs`` for an Atari game, checked: keyword arguments for
    :func:`make_atari_vec_env` and :func:`make_atari_env`."""
    kwargs = dict(kwargs or {})
    unknown = sorted(set(kwargs) - set(ENV_KWARGS))
    if unknown:
        raise UserError(
            f"--env-kwargs: Atari games take {', '.join(ENV_KWARGS)} (the DeepMind "
            f"preprocessing fixes the rest), got {', '.join(unknown)}"
        )
    sticky = kwargs.get("repeat_action_probability")
    if sticky is not None and (isinstance(sticky, bool) or not isinstance(sticky, int | float)):
        raise UserError(f"--env-kwargs: repeat_action_probability must be a number, got {sticky!r}")
    for key in ("full_action_space", "maxpool"):
        value = kwargs.get(key)
        if value is not None and not isinstance(value, bool):
            raise UserError(f"--env-kwargs: {key} must be true or false, got {value!r}")
    return kwargs


def _env_seeds(seed: int, n: int) -> np.ndarray:
    """``n`` emulator seeds from one: ale-py takes a C ``int`` per env and would give env i of
    seed s the game of env i - 1 of seed s + 1 (it uses s, s + 1, ...); SeedSequence takes any
    non-negative seed and gives every env a stream of its own."""
    words = np.random.SeedSequence(int(seed)).generate_state(n, np.uint32)
    return (words >> 1).astype(np.int64)  # < 2**31


class AtariVecEnv(gym.vector.VectorEnv):
    """``num_envs`` games in ale-py's C++ vector env with the learner's and the reporter's views
    of each step (see the module docstring). Next-step autoreset, as every asyncrl env."""

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int = 0,
        *,
        repeat_action_probability: float | None = None,
        full_action_space: bool | None = None,
        max_frames: int = MAX_FRAMES,
        noop_max: int = NOOP_MAX,
        maxpool: bool = True,
    ):
        from ale_py.vector_env import AtariVectorEnv

        if num_envs < 1 or max_frames < 1 or noop_max < 0:
            raise ValueError(f"bad {num_envs=}, {max_frames=} or {noop_max=}")
        self.settings = atari_settings(env_id, repeat_action_probability, full_action_space)
        self._env: Any = AtariVectorEnv(
            self.settings.game,
            num_envs,
            num_threads=1,  # one core per worker process: no thread pool to fight over cores
            thread_affinity_offset=-1,  # pinning would stack every worker's thread on core 0
            max_num_frames_per_episode=max_frames,
            repeat_action_probability=self.settings.repeat_action_probability,
            full_action_space=self.settings.full_action_space,
            autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
            img_height=SCREEN,
            img_width=SCREEN,
            grayscale=True,
            stack_num=STACK,
            frameskip=FRAMESKIP,
            maxpool=maxpool,
            noop_max=noop_max,
            # both off: episodic_life restarts the whole game at a lost life, and either one
            # or reward_clipping would hide the raw view; step() derives both views instead
            episodic_life=False,
            life_loss_info=False,
            reward_clipping=False,
            use_fire_reset=True,
        )
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}
        self.num_envs = num_envs
        self.single_observation_space = self._env.single_observation_space
        self.single_action_space = self._env.single_action_space
        self.observation_space = self._env.observation_space
        self.action_space = self._env.action_space
        self._seed = seed
        self._seeded = False
        self._lives = np.zeros(num_envs, np.int32)
        # each game's reset frames, and which games the last step ended (the next step is
        # their reset step, whose frame counter gives the new game's)
        self._start = np.zeros(num_envs, np.int64)
        self._ended = np.zeros(num_envs, bool)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start new games (those in ``options["reset_mask"]``, or all). The first reset uses
        the constructor's seed when given none, so a run is reproducible either way; a later
        unseeded reset continues the emulators' random streams."""
        if seed is None and not self._seeded:
            seed = self._seed
        seeds = None
        if seed is not None:
            mask = (options or {}).get("reset_mask")
            n = self.num_envs if mask is None else int(np.count_nonzero(mask))
            seeds = _env_seeds(seed, n)
            self._seeded = True
        obs, info = self._env.reset(seed=seeds, options=options)
        self._lives = info["lives"].copy()
        mask = (options or {}).get("reset_mask")
        new = slice(None) if mask is None else np.asarray(mask, bool)
        self._start[new] = info["episode_frame_number"][new]
        self._ended[new] = False
        return obs, info

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One agent step (4 frames) of every game: the learner's reward, terminated and
        truncated, and the reporter's ``info["score"]`` and ``info["game_over"]``."""
        obs, raw, ale_terminated, ale_truncated, info = self._env.step(
            np.asarray(actions, dtype=np.int64)
        )
        # with ale-py's life handling off, its terminated and truncated say exactly "the game
        # ended" (so the next step is the reset step); a lost life is read off the counter (a
        # reset step has more lives, not fewer)
        game_over = ale_terminated | ale_truncated
        fewer_lives = info["lives"] < self._lives
        self._lives = info["lives"].copy()
        terminated = ale_terminated | fewer_lives
        # the Pong games of one alignment (the no-op count, start_frames - 1, mod 4) play
        # alike, and apart from the others' (8efeca9:docs/benchmarks.md#what-the-last-points-are):
        # kept to tell them apart
        self._start[self._ended] = info["episode_frame_number"][self._ended]
        self._ended = game_over.copy()
        info = {**info, "score": raw.astype(np.float64), "game_over": game_over}
        info["lost_life"] = fewer_lives & ~game_over  # and the game goes on
        info["start_frames"] = self._start.copy()
        reward = np.clip(raw, -REWARD_CLIP, REWARD_CLIP).astype(np.float32)
        return obs, reward, terminated, ale_truncated & ~terminated, info

    def close_extras(self, **kwargs: Any) -> None:
        """Drop the C++ env: its destructor joins the emulator thread."""
        self._env.close()
        self._env = None


def make_atari_vec_env(
    env_id: str,
    num_envs: int,
    seed: int,
    *,
    repeat_action_probability: float | None = None,
    full_action_space: bool | None = None,
    max_frames: int = MAX_FRAMES,
    noop_max: int = NOOP_MAX,
    maxpool: bool = True,
) -> gym.vector.VectorEnv:
    """The training env: ``num_envs`` games of ``env_id`` on one core (see
    :class:`AtariVecEnv`). ``noop_max=0`` turns the random no-op starts off (for tests)."""
    return AtariVecEnv(
        env_id,
        num_envs,
        seed,
        repeat_action_probability=repeat_action_probability,
        full_action_space=full_action_space,
        max_frames=max_frames,
        noop_max=noop_max,
        maxpool=maxpool,
    )


class FireReset(gym.Wrapper):
    """Press FIRE for one frame after every reset, as ale-py's vector env does: games such as
    Breakout wait for it, and an agent that never learns to press it never sees a ball.
    Gymnasium 1.x has no such wrapper. It goes *under* ``AtariPreprocessing`` (on the
    frameskip-1 env), so the FIRE frame precedes the no-ops as in the C++ env.

    ``after_lost_life`` also presses it for one frame after each lost life (evaluation's
    choice, :func:`make_atari_env`): Breakout waits for FIRE after a lost life too, and a greedy
    policy that never picks it stalls the game until the frame limit (27,000 agent steps; one
    10-game evaluation of a Breakout run took 385 s that way). SB3's ``AtariWrapper`` does the
    same (``FireResetEnv`` under ``EpisodicLifeEnv``). Training does not: the sampling policy
    learns to serve."""

    def __init__(self, env: gym.Env, after_lost_life: bool = False):
        super().__init__(env)
        self.fire = env.unwrapped.get_action_meanings().index("FIRE")  # type: ignore[attr-defined]
        self.after_lost_life = after_lost_life
        self.lives = 0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(self.fire)
        if terminated or truncated:  # never seen; a game cannot end in one frame
            obs, info = self.env.reset(**kwargs)
        self.lives = info["lives"]
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        lost = info["lives"] < self.lives
        self.lives = info["lives"]
        if self.after_lost_life and lost and not (terminated or truncated):
            obs, more, terminated, truncated, info = self.env.step(self.fire)
            reward = float(reward) + float(more)
        return obs, float(reward), terminated, truncated, info


class _LastFrame(gym.wrappers.AtariPreprocessing):
    """``AtariPreprocessing`` observing the last frame of each step alone, as the C++ env with
    ``maxpool=False``: its buffer 0 holds the last frame and its pooling takes the maximum with
    buffer 1, here zeros (uint8: the maximum is buffer 0)."""

    def _get_obs(self) -> Any:
        self.obs_buffer[1].fill(0)
        return super()._get_obs()


class _SeedFirstReset(gym.Wrapper):
    """Reset with the env's seed when the first reset names none, so ``make_atari_env(id, seed)``
    is reproducible as the vector env is."""

    def __init__(self, env: gym.Env, seed: int):
        super().__init__(env)
        self._seed, self._seeded = seed, False
        env.action_space.seed(seed)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if seed is None and not self._seeded:
            seed = self._seed
        self._seeded = True
        return self.env.reset(seed=seed, options=options)


def make_atari_env(
    env_id: str,
    seed: int,
    *,
    render_mode: str | None = None,
    repeat_action_probability: float | None = None,
    full_action_space: bool | None = None,
    noop_max: int = NOOP_MAX,
    max_frames: int = MAX_FRAMES,
    fire_after_lost_life: bool = False,
    maxpool: bool = True,
) -> gym.Env:
    """One game for evaluation and video: whole games (a lost life is not an end) with raw
    scores, through Gymnasium's wrappers, which can render RGB frames (the C++ env cannot),
    observing exactly what training observes: uint8 (4, 84, 84) stacks, oldest frame first,
    zeros before the first frame of a game. ``fire_after_lost_life``: see :class:`FireReset`
    (evaluation's env sets it; the frame limit then counts those FIRE frames too)."""
    s = atari_settings(env_id, repeat_action_probability, full_action_space)
    env = gym.make(
        _plain(env_id),
        frameskip=1,
        repeat_action_probability=s.repeat_action_probability,
        full_action_space=s.full_action_space,
        render_mode=render_mode,
        max_num_frames_per_episode=max_frames,
    )
    if "FIRE" in env.unwrapped.get_action_meanings():  # type: ignore[attr-defined]
        env = FireReset(env, after_lost_life=fire_after_lost_life)
    preprocessing = gym.wrappers.AtariPreprocessing if maxpool else _LastFrame
    env = preprocessing(
        env,
        noop_max=noop_max,
        frame_skip=FRAMESKIP,
        screen_size=SCREEN,
        terminal_on_life_loss=False,
        grayscale_obs=True,
        scale_obs=False,
    )
    env = gym.wrappers.FrameStackObservation(env, STACK, padding_type="zero")
    return _SeedFirstReset(env, seed)
