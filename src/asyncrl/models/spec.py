"""What a model is rebuilt from: :class:`ModelSpec`, a plain dict on disk; and the core's
context of the previous action and reward (:func:`write_context`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from asyncrl.envs import ActionSpace
from asyncrl.settings import CoreName
from asyncrl.spaces import ObsLayout, ObsLeaf

Encoder = Literal["mlp", "a3c", "nature", "minatar"]


@dataclass(frozen=True)
class ModelSpec:
    """Everything needed to rebuild a model."""

    kind: Literal["actor-critic", "q"]
    obs_shape: tuple[int, ...]
    action: ActionSpace
    obs_dtype: str = "float32"
    hidden: tuple[int, ...] = (64, 64)
    shared_trunk: bool = True
    encoder: Encoder = "mlp"
    #: images stored (H, W, C) (MinAtar) rather than (C, H, W) (Atari frame stacks)
    channels_last: bool = False
    #: normalise observations by running mean and variance, clipped to +-obs_clip (0: off)
    obs_clip: float = 0.0
    #: Box actions: "param" (a state-independent log-std) or "softplus" (a softplus of a
    #: second linear head; the paper's softplus "variance" head, read here as the std)
    gaussian_std: Literal["param", "softplus"] = "param"
    #: the initial log-std of a state-independent Gaussian
    log_std_init: float = 0.0
    #: the core between encoder and heads (:data:`CORES`), and its width if it has one
    core: CoreName = "none"
    core_size: int = 128
    #: the core also takes the previous action and learning reward (:func:`write_context`):
    #: the env's reward clipped to +-reward_clip (0: not clipped) and times reward_scale, so
    #: that evaluation, on raw scores, gives the core what training gave it
    prev_action_reward: bool = False
    reward_clip: float = 0.0
    reward_scale: float = 1.0
    #: the conv encoder's arithmetic (float32, or bfloat16 under CPU autocast; its output and
    #: everything after it stay float32)
    precision: Literal["float32", "bfloat16"] = "float32"
    #: a structured (Dict, Tuple, ...) observation's leaves, packed into rows of ``obs_shape``
    #: ``(size,)`` and ``obs_dtype`` (:mod:`asyncrl.spaces`): the encoder unpacks and encodes
    #: each by its kind, image leaves with the conv net ``encoder`` names. Empty: one Box
    #: observation, as every model before structured observations had
    obs_leaves: tuple[ObsLeaf, ...] = ()
    #: an encoder of the user's own (``--encoder``) in place of the built-in one ``encoder``
    #: names: the import path ``module:QualName`` of its class, which every process that
    #: builds the model imports (:mod:`asyncrl.models.user`); "": none
    encoder_class: str = ""
    #: its constructor's keyword arguments, as ``KEY=VALUE`` literals (``--encoder-kwargs``)
    encoder_kwargs: tuple[str, ...] = ()
    #: the observation space it is built on, as JSON (:func:`asyncrl.spaces.space_to_json`)
    obs_space: str = ""

    @property
    def obs_layout(self) -> ObsLayout | None:
        """The packing of a structured observation (None: a Box, stored as it is)."""
        return ObsLayout(self.obs_leaves, self.obs_dtype) if self.obs_leaves else None

    def to_dict(self) -> dict:
        return asdict(self)

    def learning_reward(self, reward: np.ndarray) -> np.ndarray:
        """The learning reward of an env's raw ``reward`` (``(B,)``): what the core's context
        takes."""
        r = np.asarray(reward, np.float32)
        if self.reward_clip:
            r = np.clip(r, -self.reward_clip, self.reward_clip)
        return r * np.float32(self.reward_scale)

    @property
    def context_dim(self) -> int:
        """Inputs the core takes beside the encoder's features: the previous action's encoding
        and reward (0: none)."""
        return self.action.dim + 1 if self.prev_action_reward else 0

    @classmethod
    def from_dict(cls, d: dict) -> ModelSpec:
        a = d["action"]
        action = ActionSpace(
            a["kind"],
            a["n"],
            tuple(a["shape"]),
            tuple(a["low"]),
            tuple(a["high"]),
            a.get("squash", False),
            # (specs written before MultiDiscrete actions and masks have none of these)
            tuple(a.get("nvec", ())),
            tuple(a.get("start", ())),
            a.get("masked", False),
        )
        return cls(
            **{
                **d,
                "obs_shape": tuple(d["obs_shape"]),
                "hidden": tuple(d["hidden"]),
                "action": action,
                # (absent from checkpoints written before structured observations)
                "obs_leaves": tuple(ObsLeaf.from_dict(x) for x in d.get("obs_leaves", ())),
                "encoder_kwargs": tuple(d.get("encoder_kwargs", ())),
            }
        )


def write_context(
    action: ActionSpace, acted: np.ndarray, reward: np.ndarray, out: np.ndarray
) -> None:
    """The core's context for the step after ``acted`` ``(B, ...)`` (as the env took it) and
    ``reward`` ``(B,)``, written into ``out`` ``(B, action.dim + 1)``: the action one-hot for
    Discrete actions (a number would order them; the space's start taken off), a one-hot per
    part for MultiDiscrete ones, the bits for MultiBinary ones and the action itself for Box
    ones, then the reward. An episode's first step gets zeros instead (the caller's: it knows
    which steps are first)."""
    k = action.dim
    if action.kind == "discrete":
        out[:, :k] = 0.0
        out[np.arange(len(acted)), action.from_env(acted)] = 1.0
    elif action.kind == "multi_discrete":
        out[:, :k] = 0.0
        # part j's one-hot starts at the sum of the sizes of the parts before it
        offsets = np.cumsum((0, *action.nvec[:-1]))
        out[np.arange(len(acted))[:, None], action.from_env(acted) + offsets] = 1.0
    else:
        out[:, :k] = acted.reshape(len(acted), k)
    out[:, k] = reward
