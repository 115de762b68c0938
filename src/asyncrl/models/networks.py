"""The networks: an encoder, a core and heads; the actor-critic's policy and value, or Q
values (:func:`build_model`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from asyncrl.distributions import Distribution, distribution_for
from asyncrl.models.cores import Core, build_core
from asyncrl.models.encoders import (
    ConvEncoder,
    MLPEncoder,
    MultiInputEncoder,
    _linear,
    build_encoder,
    encode_rollout,
)
from asyncrl.models.normalizer import ObsNormalizer, build_normalizer
from asyncrl.models.spec import ModelSpec
from asyncrl.models.user import UserEncoder


class Network(nn.Module):
    """What both networks share: an encoder (its normaliser inside), a core, and the core's
    state. Subclasses give :meth:`act` and :meth:`unroll` their heads."""

    encoder: MLPEncoder | ConvEncoder | MultiInputEncoder | UserEncoder
    core: Core
    #: inputs the core takes beside the encoder's features (:attr:`ModelSpec.context_dim`)
    context_dim: int = 0
    # The behaviour policy runs once per env step, where each nn.Module attribute lookup
    # costs more than a plain one: plain references to what it touches (the same objects:
    # flatten_parameters and load_state_dict change their data in place).
    _encode: Callable[[torch.Tensor], torch.Tensor]
    _core_step: Callable[..., tuple[torch.Tensor, torch.Tensor]]

    def _bind_hot_path(self) -> None:
        object.__setattr__(self, "_encode", self.encoder.forward)
        object.__setattr__(self, "_core_step", self.core.step)
        # model.pt files written before the core was a module of its own
        self._register_load_state_dict_pre_hook(_rename_legacy_keys, with_module=True)

    @property
    def obs_norm(self) -> ObsNormalizer | None:
        norm = getattr(self.encoder, "norm", None)
        return norm if isinstance(norm, ObsNormalizer) else None

    def initial_state(self, batch: int) -> torch.Tensor:
        """The core's state for ``batch`` envs at the start of their episodes (may be empty)."""
        return self.core.initial_state(batch)

    @contextmanager
    def fixed_weights(self) -> Iterator[None]:
        """A span in which the parameters do not change: a worker's rollout, between its pull
        and its first update. Inside it, a bfloat16 conv encoder's passes without gradient
        read weights converted once on entry, where autocast converts them again on each call
        (:meth:`ConvEncoder.fix_weights`); everything else runs as outside it. Changing the
        parameters inside it would leave those passes on the old weights."""
        convs = [m for m in self.modules() if isinstance(m, ConvEncoder)]
        for m in convs:
            m.fix_weights()
        try:
            yield
        finally:
            for m in convs:
                m.release_weights()

    def _build_core(self, spec: ModelSpec, features: int) -> None:
        self.context_dim = spec.context_dim
        self.core = build_core(spec, features + spec.context_dim)

    def _with_context(self, x: torch.Tensor, context: torch.Tensor | None) -> torch.Tensor:
        """Features ``(..., d)`` with the context ``(..., context_dim)`` appended where the
        core takes one (the previous action and reward); unchanged otherwise."""
        if not self.context_dim:
            return x
        if context is None:
            raise ValueError(
                "this network's core takes the previous action and reward "
                "(ModelSpec.prev_action_reward): pass their context"
            )
        return torch.cat([x, context], dim=-1)

    def _features(
        self,
        obs: torch.Tensor,
        state: torch.Tensor,
        first: torch.Tensor,
        bootstrap: bool = True,
        context: torch.Tensor | None = None,
    ):
        """The core's outputs ``(T+1, B, d)`` over a rollout, from its start state."""
        x = self._with_context(encode_rollout(self._encode, obs, bootstrap), context)
        return self.core.unroll(x, state, first)[0]

    @torch.no_grad()
    def burn_in(
        self,
        obs: torch.Tensor,
        state: torch.Tensor,
        first: torch.Tensor,
        context: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The core's state after observations ``(K, B, ...)`` from ``state``, episode starts
        ``first`` ``(K, B)`` restarting it, without gradient: R2D2's burn-in (APPO's
        --burn-in). Only the core's state comes out; no head runs."""
        x = self._with_context(encode_rollout(self._encode, obs, False), context)
        return self.core.unroll(x, state, first)[1]


def _rename_legacy_keys(
    module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any
) -> None:
    # model.pt files written before the normaliser moved into the encoder and the LSTM into a
    # core module: obs_norm.stats -> <encoder>.norm.stats, lstm.* -> core.cell.*
    for key in list(state_dict):
        rest = key[len(prefix) :]
        if rest == "obs_norm.stats":
            stats = state_dict.pop(key)
            for name, _ in module.named_buffers(remove_duplicate=False):
                if name.endswith("norm.stats"):
                    state_dict[prefix + name] = stats
        elif rest.startswith("lstm."):
            state_dict[f"{prefix}core.cell.{rest[5:]}"] = state_dict.pop(key)


class ActorCritic(Network):
    """Policy (the parameters of a distribution) and state value; one encoder shared by both
    heads (the paper) or one each."""

    _pi_w: torch.Tensor
    _pi_b: torch.Tensor

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.action = spec.action
        norm = build_normalizer(spec)
        self.pi_body = build_encoder(spec, norm)
        # a recurrent agent has one encoder and one core for both heads (the paper's); a
        # separate critic trunk (the default for vectors) is a feed-forward net's option
        shared = spec.shared_trunk or spec.core != "none"
        self.v_body = self.pi_body if shared else build_encoder(spec, norm)
        self.shared_trunk = shared
        self._build_core(spec, self.pi_body.out_dim)
        d = self.core.out_dim
        self.pi_head = _linear(d, spec.action.dim, 0.01)
        self.v_head = _linear(d, 1, 1.0)
        box = spec.action.kind == "box"
        # Box actions: a state-independent log-std (the common choice today; SB3, PPO), or
        # the paper's softplus head (the paper says variance; asyncrl's head is the std)
        self.softplus_std = box and spec.gaussian_std == "softplus"
        self.std_head = _linear(d, spec.action.dim, 0.01) if self.softplus_std else None
        self.log_std = (
            nn.Parameter(torch.full((spec.action.dim,), float(spec.log_std_init)))
            if box and not self.softplus_std
            else None
        )
        self._bind_hot_path()
        object.__setattr__(self, "_pi_w", self.pi_head.weight)
        object.__setattr__(self, "_pi_b", self.pi_head.bias)

    @property
    def encoder(self) -> MLPEncoder | ConvEncoder | MultiInputEncoder | UserEncoder:  # type: ignore[override]
        return self.pi_body

    def act(
        self,
        obs: torch.Tensor,
        state: torch.Tensor,
        first: torch.Tensor,
        context: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of B envs: distribution parameters ``(B, ...)`` and the core's new state.
        (The critic is not run: A3C acts without a value; :meth:`act_value` runs it.)
        ``context`` ``(B, context_dim)``: the previous action and reward, where the core takes
        them (:func:`write_context`)."""
        h, state = self._core_step(self._with_context(self._encode(obs), context), state, first)
        return self._policy(h), state

    def act_value(
        self,
        obs: torch.Tensor,
        state: torch.Tensor,
        first: torch.Tensor,
        context: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`act` with the critic run too: distribution parameters, values ``(B,)`` and
        the core's new state. For a learner that takes its targets from the values of the
        policy that acted (APPO's, as PPO's): on a shared trunk the value costs one dot product
        an env."""
        h, state = self._core_step(self._with_context(self._encode(obs), context), state, first)
        hv = h if self.shared_trunk else self._with_context(self.v_body(obs), context)
        return self._policy(h), self._value(hv), state

    def unroll(
        self,
        obs: torch.Tensor,
        state: torch.Tensor,
        first: torch.Tensor,
        bootstrap: bool = True,
        context: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A rollout's observations ``(T+1, B, ...)`` from the core's state at its start:
        distribution parameters ``(T+1, B, ...)`` and values ``(T+1, B)``; the last row is a
        target, computed without gradient through the encoder (:func:`encode_rollout`), unless
        ``bootstrap=False`` (a batch of transitions, every row learnt from). ``context``
        ``(T+1, B, context_dim)``: each row's previous action and reward, where the core takes
        them."""
        h = self._features(obs, state, first, bootstrap, context)
        if self.shared_trunk:
            hv = h
        else:
            hv = self._with_context(encode_rollout(self.v_body.forward, obs, bootstrap), context)
        return self._policy(h), self._value(hv)

    def _value(self, hv: torch.Tensor) -> torch.Tensor:
        return F.linear(hv, self.v_head.weight, self.v_head.bias).squeeze(-1)

    def _policy(self, h: torch.Tensor) -> torch.Tensor:
        out = F.linear(h, self._pi_w, self._pi_b)
        if self.log_std is not None:
            out = torch.cat([out, self.log_std.expand_as(out)], dim=-1)
        elif self.std_head is not None:
            # softplus(0) = log 2: the initial std is about 0.7
            std = F.softplus(self.std_head(h)) + 1e-4
            out = torch.cat([out, std.log()], dim=-1)
        return out

    def distribution(self, params: torch.Tensor, mask: torch.Tensor | None = None) -> Distribution:
        """The action distribution of the policy head's ``params``; ``mask`` (bool, the
        logits' shape): the valid actions, the others of probability 0."""
        return distribution_for(self.action, params, mask)


class QNetwork(Network):
    """Action values Q(s, .): encoder, core, a linear head."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.body = build_encoder(spec, build_normalizer(spec))
        self._build_core(spec, self.body.out_dim)
        self.head = _linear(self.core.out_dim, spec.action.n, 1.0)
        self._bind_hot_path()

    @property
    def encoder(self) -> MLPEncoder | ConvEncoder | MultiInputEncoder | UserEncoder:  # type: ignore[override]
        return self.body

    def act(
        self,
        obs: torch.Tensor,
        state: torch.Tensor,
        first: torch.Tensor,
        context: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Q values ``(B, A)`` for one step of B envs, and the core's new state."""
        h, state = self._core_step(self._with_context(self._encode(obs), context), state, first)
        return F.linear(h, self.head.weight, self.head.bias), state

    def unroll(
        self,
        obs: torch.Tensor,
        state: torch.Tensor,
        first: torch.Tensor,
        context: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Q values ``(T+1, B, A)`` of a rollout recomputed from the core's start state (the
        last row without gradient through the encoder)."""
        h = self._features(obs, state, first, context=context)
        return F.linear(h, self.head.weight, self.head.bias)


def build_model(spec: ModelSpec) -> ActorCritic | QNetwork:
    if spec.kind == "actor-critic":
        return ActorCritic(spec)
    if spec.kind == "q":
        return QNetwork(spec)
    raise ValueError(f"unknown model kind {spec.kind!r}")
