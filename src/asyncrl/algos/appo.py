"""APPO: asynchronous proximal policy optimisation (Schulman et al., 2017's clipped surrogate on
rollouts from asynchronous actor-learners; the distributed PPO of Heess et al., 2017, arXiv
1707.02286, and Sample Factory's main algorithm).

A3C takes one gradient step per rollout and throws the rollout away. APPO takes ``epochs``
passes over it, each in ``minibatches`` random minibatches, and pushes every
minibatch's gradient through the same store as A3C's (the shared optimizer, lock-free, or the
Ray server). Before each minibatch the worker pulls the global parameters (other workers have
moved them meanwhile), so the rollout is off-policy by then, and the loss corrects for it with
the behaviour log-probabilities the rollout recorded at acting time:

    ratio_t = pi(a_t|s_t) / mu(a_t|s_t)                          mu: the policy that acted
    L_pi    = -min(ratio_t A_t, clip(ratio_t, 1 - eps, 1 + eps) A_t)
    L_v     = (V(s_t) - R_t)^2        (or the larger of it and the clipped value's, --value-clip)
    loss    = L_pi + value_coef L_v - beta H(pi(.|s_t))   (means over the minibatch)

The targets ``R_t`` and advantages ``A_t`` are computed once per rollout, before its first
minibatch (A3C's :meth:`~asyncrl.algos.a3c.A3C.targets`: n-step or GAE(lambda)), from the values
the critic gave as the policy acted, recorded with the rollout: PPO's way (Schulman et al.;
SB3's, CleanRL's, Sample Factory's). With --vtrace they are V-trace's, computed for each
minibatch from its own values and importance weights pi/mu at the parameters pulled for it
(Sample Factory's learner: :meth:`APPO.vtrace_minibatch`), its minibatches groups of whole
rollouts. Otherwise a minibatch is a
random set of transitions, or with a recurrent core a random set of sequences that the core
replays from a recorded state: whole rollouts from their start, or with --seq-len L pieces of
L steps, each from the state the core had there as the policy acted (Sample Factory's and
R2D2's stored state; :meth:`APPO.minibatches`), or with --burn-in K that of K steps earlier run
over them at the learner's parameters (R2D2's burn-in). Pulling
between minibatches is what makes the clip mean anything here: without it, every
minibatch's gradient would be taken at the parameters that acted (ratio 1, nothing ever
clipped) and applied to parameters that others have moved on.

Deviation from PPO's sequential form: the minibatch gradients of other workers land between
ours, so the proximal step is relative to the behaviour policy mu (its recorded log-probability),
not to a snapshot the worker holds; this is APPO's form (Sample Factory, RLlib's APPO).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np
import torch

from asyncrl.algos.a3c import A3C, normalized
from asyncrl.algos.settings import APPOSettings
from asyncrl.distributions import bound_excess
from asyncrl.rollout import Rollout

#: what a rollout's first minibatch computes for every later one: the targets, advantages and
#: values ``(T, B)``, their statistics, and the observations in the learning pass's layout (or
#: None: the rollout's own)
Prepared = tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, float], np.ndarray | None]


class APPO(A3C):
    name = "appo"
    cfg: APPOSettings

    @property
    def fresh_parameters(self) -> bool:  # type: ignore[override]
        return True

    def start_worker(self, worker_id: int, rng: np.random.Generator) -> None:
        super().start_worker(worker_id, rng)
        self.rng = rng  # the worker's: the minibatches' shuffles are part of its seeded stream
        self.acted_values: list[torch.Tensor] = []  # V(s_t) of this rollout's steps so far
        # --seq-len: the core's state carried into each step of the rollout so far, and then
        # all of them (T, B, ...): where each sequence of a minibatch starts its replay
        self.acted_states: list[torch.Tensor] = []
        self.seq_states: torch.Tensor | None = None
        self.record_states = 0 < self.cfg.seq_len < self.cfg.t_max  # (--vtrace refuses it)
        # the values as the policy acted: PPO's targets, or with --vtrace (whose targets are
        # each minibatch's own) --value-clip's baseline alone: no critic pass a step for nothing
        self.record_values = not self.cfg.vtrace or self.cfg.value_clip > 0

    def begin_rollout(self, model: Any, global_step: int) -> None:
        super().begin_rollout(model, global_step)
        self.acted_values, self.acted_states = [], []

    def act(self, model, obs, global_step, rng, first, context=None, mask=None):
        # the critic too: the targets take the values of the policy that acted (PPO's), which
        # spares the learner a pass over the rollout
        if not self.record_values:
            return super().act(model, obs, global_step, rng, first, context, mask)
        state = self.carried_state(model, obs)
        if self.record_states:  # a reference: a recurrent core makes a new state each step
            self.acted_states.append(state)
        params, value, self.state = model.act_value(obs, state, torch.from_numpy(first), context)
        self.acted_values.append(value)
        return model.distribution(params, mask).sample_logp(rng)

    def end_rollout(self, model, rollout, global_step, rng):
        if self.acted_states:
            self.seq_states = torch.stack(self.acted_states)
        if not self.record_values:
            return
        # V(obs[T]) for the bootstrap, from the core's state after the last step (left as it
        # is: the next rollout's first step acts on the same observation with it)
        last, first = torch.from_numpy(rollout.obs[-1]), torch.from_numpy(rollout.first[-1])
        context = torch.from_numpy(rollout.context[-1])
        _, value, _ = model.act_value(last, self.state, first, context)
        rollout.values[:] = torch.stack([*self.acted_values, value]).numpy()

    def updates(
        self, model: Any, rollout: Rollout, target_model: Any = None
    ) -> Iterator[Callable[[], tuple[torch.Tensor, dict[str, float]]]]:
        prepared: list[Prepared] = []
        # V-trace's traces run through whole rollouts: its minibatches are groups of envs
        whole = model.core.sequential or self.cfg.vtrace
        for _ in range(self.cfg.epochs):
            for times, envs in self.minibatches(rollout, whole):
                yield partial(self.minibatch_loss, model, rollout, times, envs, prepared)

    def minibatches(
        self, rollout: Rollout, sequential: bool
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """One pass's minibatches, each the ``(times, envs)`` indices ``(L, n)`` of n
        sequences of L steps. A ``sequential`` core (one with memory) replays sequences of
        --seq-len steps (L = T with 0: whole rollouts, a minibatch a group of envs), a random
        set of the rollout's ``T / L x B``; without memory the network learns from any
        transitions (L = 1: a random set of the valid ones, which decorrelates the minibatches
        as SB3's and CleanRL's shuffles do; Sample Factory's ``recurrence`` is the same
        choice)."""
        T, B = rollout.t_max, rollout.num_envs
        m = self.cfg.minibatches
        if sequential:
            L = self.cfg.seq_len or T
            # sequence k is env k % B's steps from (k // B) * L: with L = T, env k
            order = self.rng.permutation(T // L * B)
            steps = np.arange(L)[:, None]
            return [
                (steps + g[None] // B * L, (g % B)[None].repeat(L, 0))
                for g in np.array_split(order, min(m, order.size))
            ]
        flat = self.rng.permutation(np.flatnonzero(rollout.valid))
        return [(idx[None] // B, idx[None] % B) for idx in np.array_split(flat, min(m, flat.size))]

    @torch.no_grad()
    def prepare(self, model: Any, rollout: Rollout) -> Prepared:
        """The rollout's targets, advantages and values ``(T, B)`` from the values recorded as
        it acted, statistics of them, and (for a feed-forward conv net) its observations laid
        out once for the learning passes of every epoch. (--vtrace: each minibatch's own,
        :meth:`vtrace_minibatch`.)"""
        T = rollout.t_max
        values_np = rollout.values
        stats: dict[str, float] = {}
        returns = adv = values_np[:T]
        if not self.cfg.vtrace:  # pi = mu: the behaviour policy's log-probabilities
            per_rollout = self.cfg.normalize_over == "rollout"
            returns, adv, stats = self.targets(rollout, values_np, None, normalize=per_rollout)
            stats |= explained_variance(returns, values_np[:T], rollout.valid)
        # a recurrent core replays sequences from the rollout as stored (unroll_minibatch)
        sequential = model.core.sequential or self.cfg.vtrace
        learn_obs = None if sequential else model.encoder.learning_layout(rollout.obs)
        return returns, adv, values_np[:T], stats, learn_obs

    def vtrace_minibatch(
        self, model: Any, rollout: Rollout, envs: np.ndarray
    ) -> tuple[Any, torch.Tensor, torch.Tensor, np.ndarray, np.ndarray, dict[str, float]]:
        """--vtrace: a minibatch of whole rollouts of the envs ``envs`` at the parameters now,
        and V-trace's targets and advantages from its own values and ratios pi/mu (Sample
        Factory's learner; IMPALA's, whose one batch is the minibatch): the distribution,
        the log-probabilities of the actions taken and the values ``(T, n)`` with their
        gradient, then the targets, the advantages and their statistics. The advantages keep
        their rho, or not (--vtrace-pg ratio: the clipped ratio applies the weight alone)."""
        T = rollout.t_max
        params, values = self.unroll(model, rollout, envs)  # (T+1, n, ...): with the bootstrap
        dist = model.distribution(params[:T], rollout.masks_at(slice(T), envs))
        logp = dist.log_prob(torch.from_numpy(rollout.actions[:, envs]))
        v = values.detach().numpy()
        rho = self.cfg.vtrace_pg == "rho"
        returns, adv, stats = self.targets(rollout, v, logp, envs, rho_weighted=rho)
        stats |= explained_variance(returns, v[:T], rollout.valid[:, envs])
        return dist, logp, values[:T], returns, adv, stats

    def minibatch_loss(
        self,
        model: Any,
        rollout: Rollout,
        times: np.ndarray,
        envs: np.ndarray,
        prepared: list[Prepared],
    ) -> tuple[torch.Tensor, dict[str, float]]:
        cfg = self.cfg
        first_call = not prepared
        if first_call:  # once a rollout
            prepared.append(self.prepare(model, rollout))
        returns, adv, old_v, stats, learn_obs = prepared[0]
        if cfg.vtrace:  # the targets of this minibatch, at the parameters pulled for it
            dist, logp, v, ret_mb, adv_mb, stats = self.vtrace_minibatch(model, rollout, envs[0])
            a, ret = torch.from_numpy(adv_mb), torch.from_numpy(ret_mb)
        else:
            params, v = self.unroll_minibatch(model, rollout, times, envs, learn_obs)
            # the masks recorded as the policy acted: pi and mu over the same valid actions
            dist = model.distribution(params, rollout.masks_at(times, envs))
            logp = dist.log_prob(torch.from_numpy(rollout.actions[times, envs]))
            mb_adv = adv[times, envs]
            if cfg.normalize_advantage and cfg.normalize_over == "minibatch":
                mb_adv = normalized(mb_adv, rollout.valid[times, envs])
            a, ret = torch.from_numpy(mb_adv), torch.from_numpy(returns[times, envs])
        mask = torch.from_numpy(rollout.valid[times, envs]).float()
        # a fixed count, as every loss here (docs/algorithms.md#every-transition-weighs-the-same):
        # the transitions drawn, or a recurrent core's sequences' slots, masked reset steps
        # included, so a reset step weighs nothing and dilutes nothing
        n = float(times.size)
        # against the recorded mu; with --vtrace (--vtrace-pg rho) the advantages hold rho =
        # min(rho_bar, pi/mu) too, so the ratio weights them again: Sample Factory's
        # combination (docs/algorithms.md)
        log_ratio = logp - torch.from_numpy(rollout.logp[times, envs])
        ratio = log_ratio.exp()
        clipped = torch.clamp(ratio, 1.0 - cfg.clip, 1.0 + cfg.clip)
        policy_loss = -(torch.min(ratio * a, clipped * a) * mask).sum() / n
        value_err = (v - ret).pow(2)
        if cfg.value_clip > 0:
            old = torch.from_numpy(old_v[times, envs])
            v_clipped = old + torch.clamp(v - old, -cfg.value_clip, cfg.value_clip)
            value_err = torch.max(value_err, (v_clipped - ret).pow(2))
        value_loss = (value_err * mask).sum() / n
        entropy = (dist.entropy() * mask).sum() / n
        loss = policy_loss + cfg.value_coef * value_loss - self.entropy_coef * entropy
        if cfg.bound_coef:
            excess = bound_excess(model.action, dist)
            if excess is not None:
                loss = loss + cfg.bound_coef * (excess * mask).sum() / n
        with torch.no_grad():  # the diagnostics: means over the transitions
            count = max(float(mask.sum()), 1.0)
            # Schulman's low-variance estimator of KL(mu || pi): (ratio - 1) - log ratio
            approx_kl = float((((ratio - 1.0) - log_ratio) * mask).sum() / count)
            clip_fraction = float((((ratio - 1.0).abs() > cfg.clip).float() * mask).sum() / count)
        out = {
            "loss/policy_loss": float(policy_loss.detach()),
            "loss/value_loss": float(value_loss.detach()),
            "loss/entropy": float(entropy.detach()),
            "appo/approx_kl": approx_kl,
            "appo/clip_fraction": clip_fraction,
        }
        return loss, ({**stats, **out} if first_call else out)

    def unroll_minibatch(
        self,
        model: Any,
        rollout: Rollout,
        times: np.ndarray,
        envs: np.ndarray,
        learn_obs: np.ndarray | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The network's distribution parameters and values ``(L, n, ...)`` over a minibatch's
        sequences: from the core's state at the rollout's start (whole sequences; the
        bootstrap row the unroll adds is dropped), from the state recorded as the policy acted
        at each sequence's first step (--seq-len), or none (single transitions, a stateless
        core). Without a bootstrap row, which the targets computed before the first minibatch
        already used; from ``learn_obs``, the same observations in the encoder's learning
        layout, where given."""
        if times.shape[0] == rollout.t_max:
            params, values = self.unroll(model, rollout, envs[0])
            return params[:-1], values[:-1]
        if learn_obs is None:
            obs = torch.from_numpy(rollout.obs[times, envs])
        else:  # a view with NHWC strides of an NCHW shape (the first layer's space-to-depth
            # images on Atari): the encoder copies nothing
            obs = torch.from_numpy(learn_obs[times, envs]).movedim(-1, -3)
        first = torch.from_numpy(rollout.first[times, envs])
        context = torch.from_numpy(rollout.context[times, envs])
        if self.seq_states is not None:  # (recorded only for a recurrent core)
            # the state as it acted, not as these parameters would give it: R2D2's "stored
            # state", Sample Factory's; the gradient stops at the sequence start
            start = (
                self.burned_in(model, rollout, self.seq_states, times[0], envs[0])
                if self.cfg.burn_in
                else self.seq_states[times[0], envs[0]]
            )
        else:
            start = model.initial_state(envs.shape[1])
        return model.unroll(obs, start, first, bootstrap=False, context=context)

    def burned_in(
        self,
        model: Any,
        rollout: Rollout,
        states: torch.Tensor,
        t0: np.ndarray,
        env: np.ndarray,
    ) -> torch.Tensor:
        """--burn-in K: the start states ``(n, ...)`` of sequences from steps ``t0`` of envs
        ``env``, each the state recorded K steps before it (``states`` ``(T, B, ...)``) run
        over those K steps at the parameters now (R2D2's burn-in). A sequence at the rollout's
        start (t0 < K, so t0 = 0: K is at most --seq-len) keeps its recorded state: its steps
        before lie in the last rollout, which is gone."""
        k = self.cfg.burn_in
        start = states[t0, env]  # a copy (advanced indexing)
        late = np.flatnonzero(t0 >= k)
        if late.size:
            steps = t0[late][None] - k + np.arange(k)[:, None]  # (K, m)
            envs = env[late][None].repeat(k, 0)
            start[torch.from_numpy(late)] = model.burn_in(
                torch.from_numpy(rollout.obs[steps, envs]),
                states[steps[0], envs[0]],
                torch.from_numpy(rollout.first[steps, envs]),
                torch.from_numpy(rollout.context[steps, envs]),
            )
        return start

    def loss(self, model, rollout: Rollout, target_model=None):
        """One pass of one minibatch holding the whole rollout (for callers that want one
        loss)."""
        T, B = rollout.t_max, rollout.num_envs
        times, envs = np.arange(T)[:, None].repeat(B, 1), np.arange(B)[None].repeat(T, 0)
        return self.minibatch_loss(model, rollout, times, envs, [])


def explained_variance(returns: np.ndarray, values: np.ndarray, valid: np.ndarray) -> dict:
    """``train/explained_variance`` of the critic's ``values`` for the targets ``returns``
    (1: the values explain them; 0: no better than their mean), where they vary."""
    var = returns[valid].var() if valid.any() else 0.0
    if var <= 0:
        return {}
    return {"train/explained_variance": float(1.0 - (returns - values)[valid].var() / var)}
