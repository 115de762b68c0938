"""Action distributions, chosen from the action space: the algorithm never sees the action type.

A3C and :class:`asyncrl.policy.Policy` ask the distribution for ``sample``, ``log_prob``,
``entropy`` and ``mode`` (as PFRL's and SB3's policies do), so a softmax policy over Discrete
actions, a factorised one over MultiDiscrete actions (a softmax per part, log-probabilities
and entropies summed over the parts: SB3's ``MultiCategoricalDistribution``), a Bernoulli per
bit of MultiBinary actions and a Gaussian over Box actions are interchangeable.

Action masks (:mod:`asyncrl.actionmask`): a masked action's logit is set to the float's
lowest value before the softmax (sb3-contrib's ``MaskableCategorical``), so its probability is
exactly 0 when sampling, in the log-probabilities and in the entropy, whose terms 0 log 0 are
taken as 0 (no NaN); the gradient reaches only the valid actions' logits.

The categorical sampler of the behaviour policy draws in numpy by inverse CDF with the worker's
own generator: at a worker's batch sizes that is several times cheaper than
``torch.multinomial``, and it is part of why CartPole trains fast here.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F

from asyncrl.envs import ActionSpace


class Distribution(Protocol):
    """A batch of action distributions, one per row of the head's output."""

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """One action per row, drawn with ``rng`` (the worker's seeded generator)."""
        ...

    def sample_logp(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`sample`, and the log-probability of each action drawn (the behaviour
        policy's, which the rollout keeps for importance weights)."""
        ...

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """log pi(a|s) per row, summed over action dimensions."""
        ...

    def entropy(self) -> torch.Tensor:
        """H(pi(.|s)) per row, summed over action dimensions."""
        ...

    def mode(self) -> torch.Tensor:
        """The most likely action per row (the evaluation action)."""
        ...


def sample_categorical(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One sample per row of ``probs`` (B, n) by inverse CDF: cheaper than torch.multinomial
    at a worker's batch sizes, and seeded by the worker's own generator."""
    cdf = np.cumsum(probs, axis=1)
    # u in [0, the last cumulative sum), not [0, 1): a float32 sum can fall short of 1 by 1e-7,
    # and that sliver would go to the last action even where its probability is 0 (its
    # log-probability -87 then makes a huge PPO ratio); an action of probability 0 is never drawn
    u = rng.random((probs.shape[0], 1), dtype=probs.dtype) * cdf[:, -1:]
    return np.minimum((cdf <= u).sum(axis=1), probs.shape[1] - 1)


_TINY = np.finfo(np.float32).tiny  # the log of a probability that underflowed to 0 stays finite


def masked_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``logits`` with those where ``mask`` (bool, the same shape) is False set to the lowest
    float: their softmax probability is exactly 0, their exp underflowing (not -inf, whose
    differences would give NaN)."""
    if mask is None:
        return logits
    return logits.masked_fill(~mask, torch.finfo(logits.dtype).min)


class Categorical:
    """Softmax over ``logits`` (..., n), with the actions where ``mask`` (..., n) is False
    left out (probability 0)."""

    def __init__(self, logits: torch.Tensor, mask: torch.Tensor | None = None):
        self.logits = masked_logits(logits, mask)
        self.mask = mask
        self._logp: torch.Tensor | None = None

    def logp(self) -> torch.Tensor:
        """log pi(.|s), computed once for log_prob and entropy."""
        if self._logp is None:
            self._logp = F.log_softmax(self.logits, dim=-1)
        return self._logp

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        logits = self.logits.detach() if self.logits.requires_grad else self.logits
        return sample_categorical(torch.softmax(logits, dim=-1).numpy(), rng)

    def sample_logp(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        logits = self.logits.detach() if self.logits.requires_grad else self.logits
        probs = torch.softmax(logits, dim=-1).numpy()
        actions = sample_categorical(probs, rng)
        # from the probabilities the draw used: a gather and a log in numpy, a few us
        picked = probs[np.arange(len(actions)), actions]
        return actions, np.log(np.maximum(picked, _TINY))

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return self.logp().gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        logp = self.logp()
        plogp = logp.exp() * logp
        if self.mask is not None:  # 0 log 0 = 0 for the masked actions
            plogp = torch.where(self.mask, plogp, 0.0)
        return -plogp.sum(-1)

    def mode(self) -> torch.Tensor:
        return self.logits.argmax(-1)


class MultiCategorical:
    """Independent softmaxes over the parts of ``logits`` (..., sum(nvec)), part j's
    ``nvec[j]`` logits after the parts before it; actions (..., len(nvec)). Log-probabilities
    and entropies sum over the parts; ``mask`` (..., sum(nvec)) masks each part's actions."""

    def __init__(
        self, logits: torch.Tensor, nvec: tuple[int, ...], mask: torch.Tensor | None = None
    ):
        masks = [None] * len(nvec) if mask is None else mask.split(list(nvec), dim=-1)
        self.parts = [
            Categorical(lg, m)
            for lg, m in zip(logits.split(list(nvec), dim=-1), masks, strict=True)
        ]

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        return np.stack([p.sample(rng) for p in self.parts], axis=-1)

    def sample_logp(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        drawn = [p.sample_logp(rng) for p in self.parts]
        return np.stack([a for a, _ in drawn], axis=-1), sum(lp for _, lp in drawn)  # type: ignore[return-value]

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return sum(  # type: ignore[return-value]
            p.log_prob(actions[..., j]) for j, p in enumerate(self.parts)
        )

    def entropy(self) -> torch.Tensor:
        return sum(p.entropy() for p in self.parts)  # type: ignore[return-value]

    def mode(self) -> torch.Tensor:
        return torch.stack([p.mode() for p in self.parts], dim=-1)


class Bernoulli:
    """Independent bits, bit i 1 with probability sigmoid(``logits``[..., i]) (MultiBinary
    actions); log-probabilities and entropies sum over the bits."""

    def __init__(self, logits: torch.Tensor):
        self.logits = logits

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        logits = self.logits.detach() if self.logits.requires_grad else self.logits
        p = torch.sigmoid(logits).numpy()
        return (rng.random(p.shape, dtype=p.dtype) < p).astype(np.int64)

    def sample_logp(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        actions = self.sample(rng)
        with torch.no_grad():
            return actions, self.log_prob(torch.from_numpy(actions)).numpy()

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        # log p = l - softplus(l), log(1 - p) = -softplus(l): stable for large |l|
        return (actions.to(self.logits.dtype) * self.logits - F.softplus(self.logits)).sum(-1)

    def entropy(self) -> torch.Tensor:
        # -p log p - (1 - p) log(1 - p) = softplus(l) - p l
        return (F.softplus(self.logits) - torch.sigmoid(self.logits) * self.logits).sum(-1)

    def mode(self) -> torch.Tensor:
        return (self.logits > 0).long()


class DiagGaussian:
    """Independent normals with ``mean`` and ``std`` (..., d); log-probabilities and entropies
    sum over the d action dimensions (Mnih et al., 2016, Section 5.2)."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor):
        self.mean, self.std = mean, std

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        mean, std = self.mean.detach().numpy(), self.std.detach().numpy()
        noise = rng.standard_normal(mean.shape, dtype=np.float32)
        return (mean + std * noise).astype(np.float32)

    def sample_logp(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        actions = self.sample(rng)
        with torch.no_grad():
            return actions, self.log_prob(torch.from_numpy(actions)).numpy()

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        z = (actions - self.mean) / self.std
        return (-0.5 * z.pow(2) - self.std.log() - 0.5 * math.log(2 * math.pi)).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (0.5 + 0.5 * math.log(2 * math.pi) + self.std.log()).sum(-1)

    def mode(self) -> torch.Tensor:
        return self.mean


#: Gauss-Hermite nodes and weights (for E[f(u)], u ~ N(m, s^2) = sum w_k f(m + sqrt(2) s x_k) /
#: sqrt(pi)): 32 give the squashed entropy to 1e-3 nats for stds up to 2, and within 1% at 8,
#: where the kink of log(1 - tanh(u)^2) at 0 slows the rule (tests/test_distributions.py)
_HERMITE_NODES, _HERMITE_WEIGHTS = np.polynomial.hermite.hermgauss(32)


def _log_tanh_slope(u: torch.Tensor) -> torch.Tensor:
    """log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable for large |u|."""
    return 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))


class TanhGaussian(DiagGaussian):
    """A Gaussian over u whose action is tanh(u), scaled into the bounds by
    :meth:`ActionSpace.to_env` (``--squash``). Samples, log-probabilities and the rollout all
    hold u; the log-probability is that of the squashed action, log N(u) - sum log(1 -
    tanh(u)^2) (the change of variables; the bounds' constant scale is left out: it has no
    gradient, in the entropy neither). The mode is the mean, squashed by ``to_env`` like every
    action."""

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return super().log_prob(actions) - _log_tanh_slope(actions).sum(-1)

    def entropy(self) -> torch.Tensor:
        """The squashed action's: H(u) + E[sum log(1 - tanh(u)^2)], the expectation by
        Gauss-Hermite quadrature (no closed form). The Gaussian's H(u) alone grows with the std
        without end where the action's falls past std ~1 (the samples pile up at the bounds),
        so a bonus on it would push the policy towards bang-bang control. Quadrature rather
        than SB3's -log pi(a) of the sampled actions: that estimate's gradient is zero in
        expectation on-policy, and a fresh sample would draw on an RNG a resume must restore."""
        nodes = torch.as_tensor(_HERMITE_NODES, dtype=self.mean.dtype)
        weights = torch.as_tensor(_HERMITE_WEIGHTS / math.sqrt(math.pi), dtype=self.mean.dtype)
        u = self.mean.unsqueeze(-1) + math.sqrt(2.0) * self.std.unsqueeze(-1) * nodes
        return super().entropy() + (_log_tanh_slope(u) * weights).sum(-1).sum(-1)


def bound_excess(action: ActionSpace, dist: Distribution) -> torch.Tensor | None:
    """Per row: how far a clipped Gaussian's mean lies outside the action bounds, in
    half-ranges, squared and summed over the action's dimensions (None for any other
    distribution, a squashed one included, and for unbounded actions).

    A mean past a bound is a trap of clipping: the samples beyond it all become the bound, so
    the policy gradient no longer moves the mean back, and the std grows instead. rl_games'
    ``bounds_loss`` penalises it so (its soft bound 1.1 half-ranges; here the bound itself):
    inside the bounds the penalty is 0 and changes nothing."""
    if not isinstance(dist, DiagGaussian) or isinstance(dist, TanhGaussian):
        return None
    low = torch.as_tensor(action.low, dtype=dist.mean.dtype)
    high = torch.as_tensor(action.high, dtype=dist.mean.dtype)
    if not (torch.isfinite(low).all() and torch.isfinite(high).all()):
        return None
    mid, half = (high + low) / 2, (high - low) / 2
    z = (dist.mean.reshape(*dist.mean.shape[:-1], -1) - mid) / half
    return F.relu(z.abs() - 1.0).pow(2).sum(-1)


def distribution_for(
    action: ActionSpace, head: torch.Tensor, mask: torch.Tensor | None = None
) -> Distribution:
    """The distribution the policy head's output parameterises for this action space.

    Discrete: the head gives logits; MultiDiscrete: each part's logits, concatenated;
    MultiBinary: a logit per bit. Box: the head gives the mean and a log-std, concatenated on
    the last axis (the model decides whether the log-std depends on the state). ``mask``
    (bool, the head's shape; Discrete and MultiDiscrete only): False for the actions that have
    probability 0.
    """
    if action.kind == "discrete":
        return Categorical(head, mask)
    if action.kind == "multi_discrete":
        return MultiCategorical(head, action.nvec, mask)
    if mask is not None:
        raise ValueError(f"{action.describe()} actions take no action mask")
    if action.kind == "multi_binary":
        return Bernoulli(head)
    mean, log_std = head.chunk(2, dim=-1)
    return (TanhGaussian if action.squash else DiagGaussian)(mean, log_std.exp())
