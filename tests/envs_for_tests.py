"""Tiny deterministic envs for tests, registered with Gymnasium on import."""

import typing

import gymnasium as gym
import numpy as np


class CounterEnv(gym.Env):
    """Observation = steps taken so far; reward 1 per step; terminates when the action is 1
    at step `terminate_at`, truncated by the TimeLimit the registration adds."""

    def __init__(self, terminate_at: int = 10**9):
        self.observation_space = gym.spaces.Box(0, 1e6, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.terminate_at = terminate_at
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], np.float32), 1.0, self.t == self.terminate_at, False, {}


gym.register("asyncrl-test/Counter-v0", entry_point=CounterEnv, max_episode_steps=3)
gym.register(
    "asyncrl-test/CounterTerminal-v0",
    entry_point=CounterEnv,
    max_episode_steps=5,
    kwargs={"terminate_at": 2},
)


# episodes that never end: only a stop ends play on it
gym.register("asyncrl-test/Endless-v0", entry_point=CounterEnv, max_episode_steps=None)


class BadShapeEnv(CounterEnv):
    """Declares a 1-dim observation but returns a 3-dim one."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}


gym.register("asyncrl-test/BadShape-v0", entry_point=BadShapeEnv, max_episode_steps=3)


class UnboundedActionsEnv(CounterEnv):
    """Box actions with no bounds: clipping is a no-op, tanh squashing has nothing to squash to."""

    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)


gym.register("asyncrl-test/Unbounded-v0", entry_point=UnboundedActionsEnv, max_episode_steps=3)


class LivesVecEnv(gym.vector.VectorEnv):
    """Games of two lives, as ale-py's vector env plays them (asyncrl.atari): step 2 loses a
    life (terminated, the game goes on: no reset), step 4 ends the game (terminated and
    ``info["game_over"]``), and the step after it is the next-step autoreset. The reward is 1
    a step (clipped, as the learner sees it), ``info["score"]`` 10 (the raw score)."""

    metadata: typing.ClassVar[dict] = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 1, **kwargs):
        self.num_envs = num_envs
        self.single_observation_space = gym.spaces.Box(0, 1e6, (1,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, num_envs
        )
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.t = np.zeros(num_envs, np.int64)
        self.reset_next = np.zeros(num_envs, bool)

    def reset(self, *, seed=None, options=None):
        self.t[:] = 0
        self.reset_next[:] = False
        return np.zeros((self.num_envs, 1), np.float32), {}

    def step(self, actions):
        restart = self.reset_next.copy()
        self.t = np.where(restart, 0, self.t + 1)
        playing = ~restart
        lost_life = playing & (self.t == 2)
        game_over = playing & (self.t == 4)
        self.reset_next = game_over
        info = {"score": 10.0 * playing, "game_over": game_over, "lost_life": lost_life}
        obs = self.t.astype(np.float32)[:, None]
        return obs, 1.0 * playing, lost_life | game_over, np.zeros(self.num_envs, bool), info


gym.register("asyncrl-test/Lives-v0", entry_point=CounterEnv, vector_entry_point=LivesVecEnv)


# ---------------------------------------------------------------- fault injection
# CartPole whose copy in a chosen worker misbehaves once, at a chosen step. "Once" is kept in a
# marker file, so a restarted worker (a new process, too) does not misbehave again; the file
# lives where the test says (the FAULT_DIR environment variable, inherited by workers).
import os  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from gymnasium.envs.classic_control.cartpole import CartPoleEnv  # noqa: E402

from asyncrl.worker import current_worker_id  # noqa: E402


class FaultyCartPole(CartPoleEnv):
    def __init__(self, fault="raise", worker=0, at_step=2000, once=True, **kw):
        super().__init__(**kw)
        self.fault, self.worker, self.at_step, self.once = fault, worker, at_step, once
        self.steps = 0

    def step(self, action):
        self.steps += 1
        fire = self.steps == self.at_step and current_worker_id() == self.worker and self._arm()
        if fire:
            self._misbehave()
        obs, r, term, trunc, info = super().step(action)
        if fire and self.fault == "nan-obs":
            obs = obs.copy()
            obs[0] = np.nan
        return obs, r, term, trunc, info

    def _arm(self):
        marker = Path(os.environ["FAULT_DIR"]) / f"fired-{self.fault}-{self.worker}"
        if self.once and marker.exists():
            return False
        marker.touch()
        return True

    def _misbehave(self):
        if self.fault == "raise":
            raise RuntimeError(f"injected fault in worker {self.worker}")
        if self.fault == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.fault == "hang":
            time.sleep(3600)
        if self.fault == "sigint-main":
            os.kill(os.getpid(), signal.SIGINT)  # threads backend: the main thread handles it


for _fault in ("raise", "kill", "hang", "nan-obs", "sigint-main"):
    gym.register(
        f"asyncrl-test/CartPole-{_fault}-v0",
        entry_point=FaultyCartPole,
        max_episode_steps=500,
        reward_threshold=475.0,
        kwargs={"fault": _fault, "at_step": 700 if _fault == "sigint-main" else 300},
    )
gym.register(
    "asyncrl-test/CartPole-always-raise-v0",
    entry_point=FaultyCartPole,
    max_episode_steps=500,
    kwargs={"fault": "raise", "once": False, "at_step": 50},
)


# ---------------------------------------------------------------- memory
class CartPoleNoVelocity(gym.ObservationWrapper):
    """CartPole-v1 with the velocities removed: the observation is (x, theta) only, so a
    memoryless policy cannot tell which way the pole is moving (the LSTM agent's test)."""

    def __init__(self, **kwargs):
        super().__init__(gym.make("CartPole-v1", **kwargs))
        self.observation_space = gym.spaces.Box(
            self.env.observation_space.low[[0, 2]], self.env.observation_space.high[[0, 2]]
        )

    def observation(self, obs):
        return obs[[0, 2]]


gym.register(
    "asyncrl-test/CartPoleNoVelocity-v1", entry_point=CartPoleNoVelocity, reward_threshold=475.0
)


class GuessEnv(gym.Env):
    """One of two arms pays 1 for the whole episode, drawn at reset; the observation is always
    0. Only the previous action and reward say which arm paid: a policy that sees them keeps
    pulling the arm that paid (at least 19 of 20 steps), one that does not gets half (10)."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(0, 1, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.arm = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.arm = int(self.np_random.integers(2))
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), float(action == self.arm), False, False, {}


gym.register("asyncrl-test/Guess-v0", entry_point=GuessEnv, max_episode_steps=20)


# ---------------------------------------------------------------- action spaces and masks
class MatchEnv(gym.Env):
    """A contextual bandit of MultiDiscrete actions: each step the observation is a one-hot
    target per part (sizes 3 and 4), and each part of the action that hits its target pays
    0.5. The space starts at (1, -2), so the policy's 0..n-1 must be shifted to hit. Episodes of
    10 steps: the best policy scores 10, a uniform one 10 x 0.5 x (1/3 + 1/4) = 2.9."""

    NVEC = (3, 4)
    START = (1, -2)

    def __init__(self):
        self.observation_space = gym.spaces.Box(0, 1, (sum(self.NVEC),), np.float32)
        self.action_space = gym.spaces.MultiDiscrete(self.NVEC, start=self.START)
        self.target = np.zeros(2, np.int64)

    def _obs(self):
        self.target = np.array([self.np_random.integers(n) for n in self.NVEC])
        obs = np.zeros(sum(self.NVEC), np.float32)
        obs[self.target + np.array([0, self.NVEC[0]])] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        assert self.action_space.contains(np.asarray(action)), action
        hits = (np.asarray(action) - self.START) == self.target
        return self._obs(), 0.5 * float(hits.sum()), False, False, {}


gym.register("asyncrl-test/Match-v0", entry_point=MatchEnv, max_episode_steps=10)


class BitsEnv(gym.Env):
    """MultiBinary actions: copy the 3 bits of the observation; each bit copied pays 1/3.
    Episodes of 10 steps: the best policy scores 10, a uniform one 5."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(0, 1, (3,), np.float32)
        self.action_space = gym.spaces.MultiBinary(3)
        self.bits = np.zeros(3, np.float32)

    def _obs(self):
        self.bits = self.np_random.integers(2, size=3).astype(np.float32)
        return self.bits.copy()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        assert self.action_space.contains(np.asarray(action)), action
        copied = float((np.asarray(action) == self.bits).sum()) / 3.0
        return self._obs(), copied, False, False, {}


gym.register("asyncrl-test/Bits-v0", entry_point=BitsEnv, max_episode_steps=10)


class ShiftedEnv(gym.Env):
    """A contextual bandit of Discrete(3) actions that start at -1: the observation is the
    one-hot of a target drawn each step, and the action ``target - 1`` pays 1. The policy's
    0..2 must be shifted to hit; the best policy scores 10 an episode of 10 steps, a uniform
    one 3.3."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(0, 1, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(3, start=-1)
        self.target = 0

    def _obs(self):
        self.target = int(self.np_random.integers(3))
        return np.eye(3, dtype=np.float32)[self.target]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        assert self.action_space.contains(int(action)), action
        reward = float(int(action) == self.target - 1)
        return self._obs(), reward, False, False, {}


gym.register("asyncrl-test/Shifted-v0", entry_point=ShiftedEnv, max_episode_steps=10)


class PickEnv(gym.Env):
    """Action masks. Of 4 actions each is valid with probability 1/2 at each step (at least
    one), and a valid action a pays (a + 1) / 4; an invalid one costs 1 and ends the episode
    (``strict``: raises, so that a test run fails loudly on it). The observation is always 0:
    only the mask says what is valid, so a policy blind to it scores little, where one that
    takes the highest valid action expects 10 x 12.25 / 15 = 8.2 in an episode of 10 steps
    (uniform among the valid ones: about 6).

    ``convention``: how the env gives its mask: ``info`` (``info["action_mask"]`` as int8, as
    Taxi), ``obs`` (an ``action_mask`` key of a Dict observation, as PettingZoo's classic
    games) or ``method`` (``action_masks()``, as sb3-contrib's MaskablePPO). ``multi``: two
    such choices at once, a MultiDiscrete([4, 4]) action, each part paying half."""

    def __init__(self, convention="info", multi=False, strict=False):
        self.convention, self.multi, self.strict = convention, multi, strict
        self.parts = 2 if multi else 1
        box = gym.spaces.Box(0, 1, (1,), np.float32)
        mask_space = gym.spaces.MultiBinary(4 * self.parts)
        self.observation_space = (
            gym.spaces.Dict({"obs": box, "action_mask": mask_space}) if convention == "obs" else box
        )
        self.action_space = gym.spaces.MultiDiscrete([4, 4]) if multi else gym.spaces.Discrete(4)
        self.mask = np.ones(4 * self.parts, np.int8)

    def _draw(self):
        for p in range(self.parts):
            part = np.zeros(4, np.int8)
            while not part.any():
                part = self.np_random.integers(2, size=4).astype(np.int8)
            self.mask[4 * p : 4 * p + 4] = part
        obs = np.zeros(1, np.float32)
        info = {"action_mask": self.mask.copy()} if self.convention == "info" else {}
        if self.convention == "obs":
            obs = {"obs": obs, "action_mask": self.mask.copy()}
        return obs, info

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._draw()

    def step(self, action):
        chosen = np.atleast_1d(np.asarray(action)) + 4 * np.arange(self.parts)
        valid = bool(self.mask[chosen].all())
        if not valid and self.strict:
            raise RuntimeError(f"PickEnv: the masked action {action} was taken")
        reward = float(((chosen % 4) + 1).sum()) / (4 * self.parts) if valid else -1.0
        obs, info = self._draw()
        return obs, reward, not valid, False, info


class PickMethodEnv(PickEnv):
    """:class:`PickEnv` whose mask comes from its ``action_masks()`` method."""

    def __init__(self, **kwargs):
        super().__init__("method", **kwargs)

    def action_masks(self):
        return self.mask.astype(bool)


for _conv in ("info", "obs", "method"):
    _entry = PickMethodEnv if _conv == "method" else PickEnv
    _kw = {} if _conv == "method" else {"convention": _conv}
    gym.register(
        f"asyncrl-test/Pick-{_conv}-v0", entry_point=_entry, max_episode_steps=10, kwargs=_kw
    )
    gym.register(
        f"asyncrl-test/PickStrict-{_conv}-v0",
        entry_point=_entry,
        max_episode_steps=10,
        kwargs={**_kw, "strict": True},
    )
gym.register(
    "asyncrl-test/PickMulti-v0",
    entry_point=PickEnv,
    max_episode_steps=10,
    kwargs={"multi": True, "strict": True},
)


class PickDictEnv(PickEnv):
    """:class:`PickEnv` (strict) with its mask as the ``action_mask`` key of a Dict
    observation beside two others: ``obs`` (the Box, always 0) and ``step`` (the steps taken
    in the episode, Discrete(10)): the wrapper leaves a Dict of the two. ``multi``: as
    PickEnv's."""

    def __init__(self, multi=False):
        super().__init__("obs", multi=multi, strict=True)
        spaces = dict(self.observation_space.spaces)
        self.observation_space = gym.spaces.Dict({**spaces, "step": gym.spaces.Discrete(10)})
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        obs, info = super().reset(seed=seed, options=options)
        return {**obs, "step": self.t}, info

    def step(self, action):
        obs, reward, term, trunc, info = super().step(action)
        self.t = min(self.t + 1, 9)
        return {**obs, "step": self.t}, reward, term, trunc, info


gym.register("asyncrl-test/PickDict-v0", entry_point=PickDictEnv, max_episode_steps=10)


class PickNestedEnv(PickDictEnv):
    """:class:`PickDictEnv`'s two keys under one, PettingZoo's ``observation``, beside the
    ``action_mask`` key: the wrapper leaves that one key's value, itself a Dict."""

    def __init__(self):
        super().__init__()
        inner = {k: v for k, v in self.observation_space.spaces.items() if k != "action_mask"}
        self.observation_space = gym.spaces.Dict(
            {
                "observation": gym.spaces.Dict(inner),
                "action_mask": self.observation_space["action_mask"],
            }
        )

    def _nest(self, obs):
        return {
            "observation": {k: obs[k] for k in ("obs", "step")},
            "action_mask": obs["action_mask"],
        }

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return self._nest(obs), info

    def step(self, action):
        obs, *rest = super().step(action)
        return (self._nest(obs), *rest)


gym.register("asyncrl-test/PickNested-v0", entry_point=PickNestedEnv, max_episode_steps=10)


class PickEmptyEnv(PickEnv):
    """:class:`PickEnv` (strict, the info mask) whose mask allows no action after step ``at``
    of each episode; with ``end`` the episode ends there (terminated in odd episodes,
    truncated in even ones, as a game over may come with an empty mask)."""

    def __init__(self, at=3, end=False):
        super().__init__("info", strict=True)
        self.at, self.end, self.t, self.episode = at, end, 0, 0

    def reset(self, *, seed=None, options=None):
        self.t, self.episode = 0, self.episode + 1
        return super().reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, term, trunc, info = super().step(action)
        self.t += 1
        if self.t == self.at:
            self.mask[:] = 0
            info["action_mask"] = self.mask.copy()
            if self.end:
                term, trunc = self.episode % 2 == 1, self.episode % 2 == 0
        return obs, reward, term, trunc, info


gym.register("asyncrl-test/PickEmpty-v0", entry_point=PickEmptyEnv, max_episode_steps=10)
gym.register(
    "asyncrl-test/PickEmptyAtEnd-v0",
    entry_point=PickEmptyEnv,
    max_episode_steps=10,
    kwargs={"end": True},
)


def _taxi_one_hot(**kwargs):
    """Taxi-v4 with its Discrete(500) observation one-hot (a Box asyncrl takes without the
    Dict/Discrete observation support); its info["action_mask"] passes through."""
    return gym.wrappers.FlattenObservation(gym.make("Taxi-v4", **kwargs))


gym.register("asyncrl-test/TaxiOneHot-v4", entry_point=_taxi_one_hot, max_episode_steps=None)


class _WithoutMask(gym.Wrapper):
    """The env with its info["action_mask"] taken out (the control of a masked run)."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return obs, {k: v for k, v in info.items() if k != "action_mask"}

    def step(self, action):
        obs, reward, term, trunc, info = self.env.step(action)
        return obs, reward, term, trunc, {k: v for k, v in info.items() if k != "action_mask"}


gym.register(
    "asyncrl-test/TaxiOneHotNoMask-v4",
    entry_point=lambda **kw: _WithoutMask(_taxi_one_hot(**kw)),
    max_episode_steps=None,
)


class FramesEnv(gym.Env):
    """Image observations of a given shape and dtype, random each step (Atari's uint8 frame
    stacks (4, 84, 84), MinAtar's bool (10, 10, C)): a network over images to train for a few
    steps and export. Reward 1 for action 0; episodes of 10 steps."""

    def __init__(self, shape=(4, 84, 84), dtype="uint8"):
        self.observation_space = gym.spaces.Box(0, 255 if dtype == "uint8" else 1, shape, dtype)
        self.action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._frame(), {}

    def step(self, action):
        return self._frame(), float(action == 0), False, False, {}

    def _frame(self):
        space = self.observation_space
        if space.dtype == np.uint8:
            return self.np_random.integers(0, 256, space.shape, dtype=np.uint8)
        return self.np_random.random(space.shape) < 0.5


gym.register("asyncrl-test/Frames-v0", entry_point=FramesEnv, max_episode_steps=10)
gym.register(
    "asyncrl-test/BoolFrames-v0",
    entry_point=FramesEnv,
    max_episode_steps=10,
    kwargs={"shape": (10, 10, 4), "dtype": "bool"},
)


# ---------------------------------------------------------------- structured observations
class DictCueEnv(gym.Env):
    """A Dict observation with a leaf of every kind, a Tuple nested inside: an image (uint8,
    6x6x3), a vector (float32), ``cue`` (Discrete(3) from start 1) and ``extra`` = (MultiBinary,
    {"k": MultiDiscrete}). Each step pays 1 when the action is ``cue - 1``; every other leaf is
    noise, drawn afresh each step (the image's dim, below 32 of 255: a learning test's budget
    stays small). Only a policy that reads the ``cue`` leaf beats chance: 10 an episode of 10
    steps, where guessing gets 3.3."""

    def __init__(self):
        self.observation_space = gym.spaces.Dict(
            {
                "image": gym.spaces.Box(0, 255, (6, 6, 3), np.uint8),
                "pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                "cue": gym.spaces.Discrete(3, start=1),
                "extra": gym.spaces.Tuple(
                    (
                        gym.spaces.MultiBinary(2),
                        gym.spaces.Dict({"k": gym.spaces.MultiDiscrete([2, 3])}),
                    )
                ),
            }
        )
        self.action_space = gym.spaces.Discrete(3)
        self.cue = 1

    def _obs(self):
        obs = self.observation_space.sample()  # noise, from the space's own generator
        obs["image"] //= 8
        self.cue = int(self.np_random.integers(1, 4))
        obs["cue"] = self.cue
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.observation_space.seed(int(self.np_random.integers(2**31)))
        return self._obs(), {}

    def step(self, action):
        reward = float(int(action) == self.cue - 1)
        return self._obs(), reward, False, False, {}


gym.register("asyncrl-test/DictCue-v0", entry_point=DictCueEnv, max_episode_steps=10)


class DictTextEnv(CounterEnv):
    """CounterEnv's observation as the ``count`` key of a Dict, beside a ``note`` Text leaf,
    which asyncrl cannot encode (``--obs-keys count`` leaves it out)."""

    def __init__(self):
        super().__init__()
        self.observation_space = gym.spaces.Dict(
            {"count": self.observation_space, "note": gym.spaces.Text(8)}
        )

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed)
        return {"count": obs, "note": "hello"}, info

    def step(self, action):
        obs, *rest = super().step(action)
        return {"count": obs, "note": "hello"}, *rest


gym.register("asyncrl-test/DictText-v0", entry_point=DictTextEnv, max_episode_steps=3)


# ---------------------------------------------------------------- slow episodes
class SlowCounterEnv(CounterEnv):
    """CounterEnv whose every step sleeps: its episodes take a known time (20 steps of 10 ms by
    default), whatever the machine's speed, and leave the cores free while they do."""

    def __init__(self, seconds: float = 0.01):
        super().__init__()
        self.seconds = seconds

    def step(self, action):
        time.sleep(self.seconds)
        return super().step(action)


gym.register("asyncrl-test/Slow-v0", entry_point=SlowCounterEnv, max_episode_steps=20)

# CartPole without its native vector version: stepped one env at a time, as Atari's are
gym.register("asyncrl-test/CartPoleSeparate-v0", entry_point=CartPoleEnv, max_episode_steps=500)
