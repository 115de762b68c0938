"""Tiny deterministic envs for tests, registered with Gymnasium on import."""

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
