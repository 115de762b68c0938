"""Environment construction and space checks.

Workers step a Gymnasium *vector* env (several copies of the env in one batched forward pass).
Where the env ships a natively vectorized implementation (CartPole does), it is used: one numpy
step for the whole batch instead of a Python loop over envs.

Gymnasium 1.x vector envs autoreset in *next-step* mode: the step that ends an episode returns
the final observation, and the following step resets that env (its action is ignored, its reward
is 0). The worker therefore sees the final observation as the next row of the rollout -- which is
exactly what a truncated episode must bootstrap from -- and masks out the reset step.
"""

from __future__ import annotations

import difflib
import importlib
import pickle
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from asyncrl.errors import UserError

# Said in the error for a continuous action space: which algorithms could take it.
DISCRETE_ONLY = (
    "no asyncrl algorithm supports other action spaces yet "
    "(a3c, nstep-q, onestep-q and onestep-sarsa all need Discrete actions)"
)


@dataclass(frozen=True)
class EnvInfo:
    """What the trainer learns from probing the env once."""

    env_id: str
    obs_dim: int
    obs_shape: tuple[int, ...]
    n_actions: int
    reward_threshold: float | None
    max_episode_steps: int | None


def _import_prefix(env_id: str) -> str:
    """``package.module:Env-v0`` imports the module (which registers the env) first, as
    ``gymnasium.make`` does; every worker, on any backend or machine, does the same."""
    module, sep, plain = env_id.rpartition(":")
    if sep:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise UserError(f"--env: cannot import {module!r} for {plain}: {e}") from None
    return plain


def env_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    try:
        return gym.spec(_import_prefix(env_id))
    except gym.error.Error as e:
        close = difflib.get_close_matches(env_id, list(gym.registry), n=3)
        hint = (
            f"did you mean {', '.join(close)}?"
            if close
            else "list ids with gymnasium.pprint_registry()"
        )
        raise UserError(
            f"--env: unknown environment id {env_id!r} ({type(e).__name__}); {hint}"
        ) from None


def probe_env(env_id: str, algo: str) -> EnvInfo:
    """Build the env once to read its spaces; reject spaces the algorithms cannot handle."""
    spec = env_spec(env_id)
    try:
        env = gym.make(spec.id)
    except Exception as e:  # an optional dependency of the env missing, say
        raise UserError(f"--env: cannot create {env_id!r}: {e}") from None
    try:
        obs_space, act_space = env.observation_space, env.action_space
        obs, _ = env.reset(seed=0)
    except Exception as e:
        raise UserError(f"--env: {env_id} fails on reset: {type(e).__name__}: {e}") from None
    finally:
        env.close()
    if not isinstance(act_space, gym.spaces.Discrete):
        raise UserError(
            f"--env: {env_id} has a {type(act_space).__name__} action space, but {algo} needs a "
            f"Discrete one; {DISCRETE_ONLY} (choose a discrete-action env such as CartPole-v1)"
        )
    if not isinstance(obs_space, gym.spaces.Box) or obs_space.shape is None:
        raise UserError(
            f"--env: {env_id} has a {type(obs_space).__name__} observation space; asyncrl "
            "supports Box observations (wrap the env with gymnasium.wrappers.FlattenObservation)"
        )
    obs = np.asarray(obs)
    if obs.shape != obs_space.shape or not np.can_cast(obs.dtype, np.float32, "same_kind"):
        raise UserError(
            f"--env: {env_id} returned an observation of shape {obs.shape} and dtype {obs.dtype}"
            f", but its observation_space declares {obs_space.shape} {obs_space.dtype}; fix the "
            "env or wrap it so the two agree"
        )
    return EnvInfo(
        env_id=env_id,
        obs_dim=int(np.prod(obs_space.shape)),
        obs_shape=tuple(obs_space.shape),
        n_actions=int(act_space.n),
        reward_threshold=spec.reward_threshold,
        max_episode_steps=spec.max_episode_steps,
    )


def make_vec_env(env_id: str, num_envs: int) -> gym.vector.VectorEnv:
    """``num_envs`` copies of the env, natively vectorized where the env offers it."""
    spec = env_spec(env_id)
    mode = "vector_entry_point" if spec.vector_entry_point is not None else "sync"
    env = gym.make_vec(spec.id, num_envs=num_envs, vectorization_mode=mode)
    autoreset = env.metadata.get("autoreset_mode")
    if autoreset is not None and autoreset != gym.vector.AutoresetMode.NEXT_STEP:
        raise RuntimeError(f"{env_id}: expected next-step autoreset, got {autoreset}")
    return env


def dump_vec_env(env: gym.vector.VectorEnv) -> bytes | None:
    """The vector env's whole state as bytes for a checkpoint, or None if it cannot be pickled.

    SyncVectorEnv keeps the factory functions it was built from (often lambdas, which pickle
    cannot take); they are not needed once the envs exist, so they are left out.
    """
    fns = getattr(env, "env_fns", None)
    try:
        if fns is not None:
            env.env_fns = None
        return pickle.dumps(env)
    except Exception:
        return None
    finally:
        if fns is not None:
            env.env_fns = fns
