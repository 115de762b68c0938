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
