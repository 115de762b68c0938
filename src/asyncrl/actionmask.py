"""Action masks: which actions are valid at each step, in the conventions users already have,
normalised per env by one wrapper into ``info["action_mask"]`` (bool, one entry per logit of the
policy: Discrete's ``n``, MultiDiscrete's parts concatenated).

The conventions, in the order :func:`mask_source` looks for them:

* ``obs``: an ``action_mask`` key of a ``Dict`` observation (PettingZoo's classic games). The
  wrapper moves it out of the observation into the info; where one key is left, the
  observation is that key's value itself;
* ``method``: an ``action_masks()`` method of the env (sb3-contrib's MaskablePPO), called after
  each reset and step;
* ``info``: ``info["action_mask"]`` from the env itself (Gymnasium's Taxi, as int8).

Whether an env has masks is decided once, when :func:`asyncrl.envs.probe_env` probes it
(:attr:`asyncrl.envs.ActionSpace.masked`); an env without them gets no wrapper and no mask work
anywhere. Where it has them, the worker reads each step's masks from the vector env's info
(:func:`read_masks`) and keeps them in the rollout (``Rollout.masks``) for the learner, as it
keeps the behaviour log-probabilities.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import gymnasium as gym
import numpy as np

from asyncrl.errors import EnvFault, UserError

if TYPE_CHECKING:
    from asyncrl.envs import ActionSpace

MaskSource = Literal["obs", "method", "info"]

KEY = "action_mask"


def mask_source(env: gym.Env, reset_info: dict[str, Any]) -> MaskSource | None:
    """Where ``env`` (one env, just reset with ``reset_info``) gives its action masks; None
    where it gives none."""
    space = env.observation_space
    if isinstance(space, gym.spaces.Dict) and KEY in space.spaces:
        return "obs"
    if callable(_masks_method(env)):
        return "method"
    if KEY in reset_info:
        return "info"
    return None


def _masks_method(env: gym.Env) -> Any:
    try:  # (Gymnasium 1.x wrappers forward no attributes: ask down the stack)
        return env.get_wrapper_attr("action_masks")
    except AttributeError:
        return None


class ActionMasks(gym.Wrapper):
    """One env's action masks as ``info["action_mask"]`` (bool), whatever its convention
    (:func:`mask_source`; the info's own mask where it finds no other)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        space = env.observation_space
        self._from_obs = isinstance(space, gym.spaces.Dict) and KEY in space.spaces
        # looked up at each call, not kept: a bound method would pickle as a getattr call,
        # which a checkpoint's env state may not hold (asyncrl.checkpoint)
        self._from_method = not self._from_obs and callable(_masks_method(env))
        if self._from_obs:
            assert isinstance(space, gym.spaces.Dict)
            rest = {k: v for k, v in space.spaces.items() if k != KEY}
            # one key left: its value is the observation (no Dict of one)
            self._single = next(iter(rest)) if len(rest) == 1 else None
            self.observation_space = (
                rest[self._single] if self._single is not None else gym.spaces.Dict(rest)
            )

    def _with_mask(self, obs: Any, info: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        info = dict(info)
        if self._from_obs:
            obs = dict(obs)
            info[KEY] = obs.pop(KEY)
            if self._single is not None:
                obs = obs[self._single]
        elif self._from_method:
            info[KEY] = self.env.get_wrapper_attr("action_masks")()
        if KEY in info:
            info[KEY] = np.asarray(info[KEY], bool).reshape(-1)
        return obs, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        return self._with_mask(*self.env.reset(**kwargs))

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, term, trunc, info = self.env.step(action)
        obs, info = self._with_mask(obs, info)
        return obs, reward, term, trunc, info


def check_probed_mask(env_id: str, source: MaskSource, action: ActionSpace, mask: Any) -> None:
    """The probe's first mask (``info["action_mask"]`` after :class:`ActionMasks`) fits the
    ``action`` space, one entry per logit; else one line naming the problem and the fix."""
    where = {
        "obs": f"the {KEY!r} key of its observation",
        "method": "its action_masks() method",
        "info": f'info["{KEY}"]',
    }[source]
    if action.kind not in ("discrete", "multi_discrete"):
        raise UserError(
            f"--env: {env_id} gives action masks ({where}) for {action.describe()} actions; "
            "asyncrl masks Discrete and MultiDiscrete actions only: drop the mask (a wrapper "
            "that removes it)"
        )
    shape, dim = np.shape(mask), action.dim
    if shape != (dim,):
        raise UserError(
            f"--env: {env_id}'s action mask ({where}) has shape {shape}, but its action space "
            f"has {dim} actions (MultiDiscrete: the parts' sizes summed): give one entry per "
            "action"
        )


def without_valid(masks: np.ndarray, parts: tuple[int, ...]) -> np.ndarray:
    """Per row of ``masks`` ``(N, sum(parts))``: whether some part (the one of Discrete
    actions; each of MultiDiscrete's, of the sizes ``parts``) has no valid action."""
    offsets = np.cumsum((0, *parts[:-1]))
    return np.asarray(~np.logical_or.reduceat(masks, offsets, axis=-1).all(-1))


def read_masks(
    info: dict[str, Any],
    num_envs: int,
    parts: tuple[int, ...],
    done: np.ndarray | None,
    who: str,
) -> np.ndarray:
    """The masks ``(num_envs, sum(parts))`` (bool) in a vector env's step (or reset) ``info``
    (``parts``: the sizes of the action space's parts, :attr:`ActionSpace.parts`). The rows of
    ``done`` envs (an episode's final observation, where no action is taken) are made all True
    where the env gave none valid, so that no learner meets such a row (a truncated episode's
    bootstrap takes the unmasked max there). Raises :class:`EnvFault` (``who``, the env, begins
    its line) where the env gave no mask, one of another shape, or none valid where an action
    must be taken."""
    raw = info.get(KEY)
    if raw is None:
        raise EnvFault(f'{who} gave no info["{KEY}"], where its first reset gave one')
    masks = np.asarray(raw, bool)
    dim = sum(parts)
    if masks.shape != (num_envs, dim):
        raise EnvFault(f"{who} gave an action mask of shape {masks.shape[1:]}, not ({dim},)")
    empty = without_valid(masks, parts)
    if empty.any():
        stuck = np.flatnonzero(empty if done is None else empty & ~done)
        if stuck.size:
            raise EnvFault(
                f"{who} gave an action mask with no valid action (env {int(stuck[0])}) for an "
                "observation it must act on: fix the env's mask"
            )
        masks = masks.copy()
        masks[empty] = True
    return masks
