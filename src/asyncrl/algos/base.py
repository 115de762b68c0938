"""What every algorithm provides to the one worker loop. The loop never branches on the algorithm;
the algorithm never knows which backend runs it.

An :class:`Algorithm` instance lives in one worker: its attributes are that worker's algorithm
state (the Q-learners' exploration draw, Sarsa's pending next action, the network core's state),
set up in :meth:`start_worker`, carried across rollouts through the hooks :meth:`begin_rollout`
and :meth:`end_rollout`, and checkpointed through :meth:`worker_state`.

Acting and learning go through the network's two calls (:mod:`asyncrl.models`): ``act`` on one
step with the core's state, ``unroll`` over a rollout from the state at its start. Every core
has a state (the identity's is empty), so nothing here knows whether the network is recurrent.
Evaluation (:class:`asyncrl.policy.Policy`) acts through :meth:`Algorithm.eval_step`, on the
same network call, with a state of its own.
"""

from __future__ import annotations

import dataclasses
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from asyncrl.envs import EnvInfo
from asyncrl.errors import UserError
from asyncrl.models import Encoder, ModelSpec, conv_net_problem, cpu_has_bfloat16_units
from asyncrl.rollout import Rollout
from asyncrl.settings import ModelSettings, RolloutSettings
from asyncrl.spaces import auto_conv_net, space_to_json


class Algorithm(ABC):
    """One algorithm of the paper: its network, its behaviour policy and its loss."""

    name: str
    #: whether workers keep a target network theta^- (the Q-learners do, A3C does not)
    uses_target_network: bool = False
    #: apply the update as soon as an episode ends instead of after the full rollout
    update_at_episode_end: bool = False
    #: each update is computed at the current global parameters (pulled just before it), not
    #: at those that acted: the rollout is then off-policy, and the loss corrects for it with
    #: the recorded behaviour log-probabilities (APPO, --vtrace)
    fresh_parameters: bool = False

    #: the network it learns: an actor-critic or a Q network
    model_kind: Literal["actor-critic", "q"]

    def __init__(self, cfg: RolloutSettings, info: EnvInfo):
        self.cfg = cfg
        self.info = info
        # the core's state of each env of this worker, carried from rollout to rollout (empty
        # for the identity core); the state at a rollout's start is kept for the loss, which
        # recomputes the rollout from it
        self.state: torch.Tensor | None = None
        self.start_state: torch.Tensor | None = None

    def rollout_length(self) -> int:
        """Steps per update: t_max (the one-step methods use their I_AsyncUpdate)."""
        return self.cfg.t_max

    def loss_denominator(self, rollout: Rollout) -> float:
        """Every transition weighs the same: losses are divided by the *full* rollout length
        times the envs, not by the transitions this rollout happens to hold, so one cut short
        at an episode end (one-step methods) or holding reset steps counts its transitions at
        the same weight as any other (the paper sums them; a constant factor is the lr's)."""
        return float(max(self.rollout_length(), rollout.t_max) * rollout.num_envs)

    # ------------------------------------------------------------------ per-worker state
    def start_worker(self, worker_id: int, rng: np.random.Generator) -> None:  # noqa: B027
        """Set up this worker's algorithm state; nothing by default."""

    def worker_state(self) -> dict[str, Any]:
        """This worker's algorithm state, for a checkpoint."""
        return {} if self.state is None else {"core": self.state.numpy().copy()}

    def load_worker_state(self, state: dict[str, Any]) -> None:
        core = state.get("core", state.get("lstm"))  # "lstm": checkpoints before --core gru
        if core is not None:
            self.state = torch.from_numpy(core)

    def envs_restarted(self) -> None:  # noqa: B027
        """The worker's envs start new games after a resume whose checkpoint could not keep
        them: forget what belongs to their last observations. Nothing by default: the core's
        state restarts anyway, every env's next observation being a first."""

    def begin_rollout(self, model: nn.Module, global_step: int) -> None:
        """Called before the first step of a rollout: the core's state is stored here."""
        self.start_state = self.state  # None until the first step: zeros then

    def network_step(
        self,
        model: Any,
        obs: torch.Tensor,
        first: np.ndarray,
        context: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The network's output for this step (distribution parameters, or Q values), carrying
        this worker's core state."""
        state = self.carried_state(model, obs)
        out, self.state = model.act(obs, state, torch.from_numpy(first), context)
        return out

    def carried_state(self, model: Any, obs: torch.Tensor) -> torch.Tensor:
        """The core's state carried into this step (zeros at the worker's first)."""
        if self.state is None:
            self.state = self.start_state = model.initial_state(obs.shape[0])
        return self.state

    def unroll(self, model: Any, rollout: Rollout, envs: np.ndarray | None = None) -> Any:
        """The network over the whole rollout ``(T+1, B, ...)`` (or the columns ``envs`` of
        it), recomputed from the core's state at its start (PFRL's way for recurrent nets; one
        batched pass for feed-forward ones)."""
        start = self.start_state
        if start is None:  # no step acted yet: the zero state
            start = model.initial_state(rollout.num_envs)
        obs, first = torch.from_numpy(rollout.obs), torch.from_numpy(rollout.first)
        context = torch.from_numpy(rollout.context)
        if envs is not None:
            obs, first, start = obs[:, envs], first[:, envs], start[envs]
            context = context[:, envs]
        return model.unroll(obs, start, first, context=context)

    def end_rollout(  # noqa: B027
        self, model: nn.Module, rollout: Rollout, global_step: int, rng: np.random.Generator
    ) -> None:
        """Called after the last step, with ``rollout.obs[-1]`` the state after it; under
        no_grad, before :meth:`loss`."""

    # ------------------------------------------------------------------ acting and learning
    @abstractmethod
    def act(
        self,
        model: nn.Module,
        obs: torch.Tensor,
        global_step: int,
        rng: np.random.Generator,
        first: np.ndarray,
        context: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Behaviour actions for a batch of observations ``(B, *obs_shape)`` and their
        log-probabilities under the behaviour policy; under no_grad. ``first[i]``: ``obs[i]``
        starts an episode (a recurrent state restarts from zero). ``context``: the previous
        action and reward ``(B, k)``, for a core that takes them (``Rollout.context``).
        ``mask``: the valid actions ``(B, mask_dim)`` (bool) of an env with action masks
        (``Rollout.masks``), None for one without; a masked action is never taken."""

    @abstractmethod
    def loss(
        self, model: nn.Module, rollout: Rollout, target_model: nn.Module | None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss whose gradient is the rollout's accumulated update, and statistics named as
        in TensorBoard (``loss/...``, ``train/...``)."""

    def updates(
        self, model: nn.Module, rollout: Rollout, target_model: nn.Module | None
    ) -> Iterator[Callable[[], tuple[torch.Tensor, dict[str, float]]]]:
        """The rollout's updates, in order: each a call that computes one loss with the
        model's parameters as they are when it is made (the worker pushes each one's gradient
        before the next; with :attr:`fresh_parameters` it pulls the global parameters before
        each). One, :meth:`loss`, for the paper's methods; APPO's epochs x minibatches."""
        yield lambda: self.loss(model, rollout, target_model)

    @classmethod
    @abstractmethod
    def eval_step(
        cls,
        model: Any,
        obs: torch.Tensor,
        state: torch.Tensor,
        first: torch.Tensor,
        deterministic: bool,
        rng: np.random.Generator,
        context: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> tuple[np.ndarray, torch.Tensor]:
        """The evaluation policy's actions for a batch (the mode, or argmax Q; a sample with
        ``deterministic=False`` where the algorithm has a stochastic policy) and the core's new
        state; under no_grad. The same network call as :meth:`act`, with the caller's state;
        ``mask`` as :meth:`act`'s."""


def model_spec_for(
    cfg: ModelSettings,
    kind: Literal["actor-critic", "q"],
    info: EnvInfo,
    reward_scale: float = 1.0,
) -> ModelSpec:
    """The network the model section asks for on this env: the encoder from ``--net``
    (``auto``: a conv net for images, the A3C paper's for Atari-sized ones, MinAtar's for small
    ones; an MLP for vectors). ``reward_scale``: the learning reward's, which a core that
    takes the previous reward is given (``--prev-action-reward``). A structured observation's
    image leaves all get the one conv net ``--net`` names (``auto``: MinAtar's where one of
    them is small) and ``--net mlp`` reads them as vectors (:func:`_leaf_encoder`).
    ``--encoder``: the user's own in place of all that, on the observation space the probe
    recorded (:mod:`asyncrl.models.user`; :func:`asyncrl.models.check_encoder` tries it)."""
    if cfg.encoder is not None:
        return _user_encoder_spec(cfg, kind, info, reward_scale)
    if info.obs_layout is not None:
        encoder, image = _leaf_encoder(cfg.net, info)
        channels_last, problem = False, None
    else:
        shape = info.obs_shape
        image = len(shape) == 3
        # MinAtar gives (10, 10, C) and Atari frame stacks (4, 84, 84): channels are the short
        # axis
        channels_last = image and shape[-1] < shape[0]
        if cfg.net == "auto":
            encoder = auto_conv_net(shape, channels_last) if image else "mlp"
        else:
            encoder = cfg.net
        problem = None if encoder == "mlp" else conv_net_problem(encoder, shape, channels_last)
    if problem is not None and cfg.net == "auto":  # images too small for even MinAtar's
        raise UserError(f"--net auto picked {encoder}, but {problem}: use --net mlp")
    if problem is not None:
        raise UserError(
            f"--net {encoder}: {problem}; use --net auto (it picks from the observations)"
        )
    precision = cfg.precision
    if precision == "auto":
        precision = "bfloat16" if encoder != "mlp" and cpu_has_bfloat16_units() else "float32"
    elif precision == "bfloat16" and encoder == "mlp":
        raise UserError(
            "--precision bfloat16 is for conv encoders (image observations); an MLP gains "
            "nothing from it: drop the flag or pass --precision float32"
        )
    return ModelSpec(
        **_beside_the_encoder(cfg, kind, info, reward_scale, image),
        obs_clip=cfg.obs_clip if cfg.normalize_obs else 0.0,
        # (the MLP's default width: the Q methods' larger, as the paper's value networks)
        hidden=tuple(cfg.hidden or ((64, 64) if kind == "actor-critic" else (128, 128))),
        shared_trunk=cfg.shared_trunk if cfg.shared_trunk is not None else image,
        encoder=encoder,
        channels_last=channels_last,
        precision=precision,
    )


def _beside_the_encoder(
    cfg: ModelSettings,
    kind: Literal["actor-critic", "q"],
    info: EnvInfo,
    reward_scale: float,
    image: bool,
) -> dict[str, Any]:
    """The spec's fields that do not depend on the encoder, built-in or the user's: the
    observation and its leaves, the action space, the Gaussian's options where given (ModelSpec
    holds their defaults), the core and its context."""
    return dict(
        kind=kind,
        obs_shape=info.obs_shape,
        obs_dtype=info.obs_dtype,
        obs_leaves=() if info.obs_layout is None else info.obs_layout.leaves,
        action=dataclasses.replace(info.action, squash=cfg.squash),
        **{n: v for n in ("gaussian_std", "log_std_init") if (v := getattr(cfg, n)) is not None},
        core=cfg.core,
        core_size=cfg.lstm_size or (256 if image else 128),
        prev_action_reward=cfg.prev_action_reward,
        reward_clip=info.reward_clip if cfg.prev_action_reward else 0.0,
        reward_scale=reward_scale if cfg.prev_action_reward else 1.0,
    )


def _user_encoder_spec(
    cfg: ModelSettings,
    kind: Literal["actor-critic", "q"],
    info: EnvInfo,
    reward_scale: float,
) -> ModelSpec:
    """The network of an encoder of the user's own (``--encoder``): its import path, its
    arguments and the observation space it is built on; the core and heads as for asyncrl's
    encoders. Actor and critic share it by default (SB3's ``share_features_extractor``)."""
    assert cfg.encoder is not None
    space = info.obs_space
    if not space:
        if info.obs_layout is not None:
            raise ValueError("an EnvInfo with a layout and no obs_space: probe the env")
        # (a probe made by hand records no space: a Box of the dtype's range)
        dtype = np.dtype(info.obs_dtype)
        low, high = (0, 255) if dtype == np.uint8 else (-np.inf, np.inf)
        space = space_to_json(gym.spaces.Box(low, high, info.obs_shape, dtype))
    image = len(info.obs_shape) == 3
    return ModelSpec(
        **_beside_the_encoder(cfg, kind, info, reward_scale, image),
        shared_trunk=cfg.shared_trunk if cfg.shared_trunk is not None else True,
        encoder_class=cfg.encoder,
        encoder_kwargs=tuple(cfg.encoder_kwargs),
        obs_space=space,
    )


def _leaf_encoder(net: str, info: EnvInfo) -> tuple[Encoder, bool]:
    """The conv net for a structured observation's image leaves (``mlp``: none, or they are
    read as vectors), and whether a conv net reads one."""
    assert info.obs_layout is not None
    images = [leaf for leaf in info.obs_layout.leaves if leaf.kind == "image"]
    if net == "mlp" or (net == "auto" and not images):
        return "mlp", False
    if not images:
        raise UserError(
            f"--net {net}: {info.env_id}'s observations have no image leaf "
            f"({info.describe_obs()}); use --net auto or mlp"
        )
    if net == "auto":  # (every image leaf is one that MinAtar's net reads: asyncrl.spaces)
        picks = {auto_conv_net(x.image_shape, x.channels_last) for x in images}
        return ("minatar" if "minatar" in picks else "a3c"), True
    for leaf in images:
        problem = conv_net_problem(net, leaf.image_shape, leaf.channels_last)
        if problem is not None:
            raise UserError(
                f"--net {net}: {info.env_id}'s image leaf {leaf.name!r}: {problem}; use "
                "--net auto (it picks from the observations)"
            )
    return typing.cast(Encoder, net), True
