"""Each algorithm family's settings and their checks, and which algorithm reads which.

An algorithm's section extends :class:`~asyncrl.settings.RolloutSettings` (every algorithm
reads its rollout and targets), so the algorithm receives one object with all it reads. These
live here, not beside each algorithm's maths, because they must import no PyTorch: the CLI
checks a command before it imports PyTorch and starts Ray. Adding an algorithm: its file, its
section here (if it has settings of its own) and a row of :data:`SECTIONS`, its class in
:data:`asyncrl.algos.REGISTRY`, and its preset data; :mod:`asyncrl.config` reads them from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from asyncrl.settings import CheckContext, RolloutSettings, need


@dataclass
class PolicyGradientSettings(RolloutSettings):
    """A3C's (and APPO's): advantages, loss weights, the entropy bonus, V-trace."""

    gae_lambda: float | None = None
    """A3C, APPO: GAE(lambda) advantages instead of n-step ones; with --vtrace, V-trace's lambda"""
    normalize_advantage: bool = False
    """A3C, APPO: scale each rollout's advantages to mean 0 and std 1 (SB3's; the paper does not)"""
    vtrace: bool = False
    """A3C, APPO: learn at the current parameters, correcting with V-trace (Espeholt et al., 2018)

    The rollout's older behaviour policy is corrected for by V-trace's truncated importance
    weights."""
    rho_bar: float = 1.0
    """--vtrace: truncation of the importance weights in the targets and advantages"""
    c_bar: float = 1.0
    """--vtrace: truncation of the traces (how far a correction reaches back)"""
    entropy_coef: float = 0.01
    """A3C, APPO: weight beta of the entropy bonus, which rewards entropy (paper: 0.01)"""
    entropy_final: float | None = None
    """A3C, APPO: anneal the bonus linearly to this (default: constant)

    Between the global steps --entropy-anneal-from and --entropy-anneal-steps, then held
    (RLlib's entropy_coeff_schedule; paper: a constant beta)."""
    entropy_anneal_from: int = 0
    """A3C, APPO: the global step where --entropy-final's annealing starts"""
    entropy_anneal_steps: int | None = None
    """A3C, APPO: the global step by which --entropy-final is reached (default: the budget)"""
    value_coef: float = 0.5
    """A3C, APPO: weight of the value loss (R - V)^2"""
    bound_coef: float = 0.0
    """Box actions, clipped: weight of a penalty on the Gaussian's mean outside the bounds

    The squared distance past the bounds, in half-ranges (rl_games' bounds loss): a mean past
    a bound gets no gradient back from clipped samples (docs/continuous.md)."""

    def entropy_coef_at(self, global_step: int, budget: int | None = None) -> float:
        """The entropy bonus's weight at ``global_step``: --entropy-coef, annealed linearly to
        --entropy-final (where given) from --entropy-anneal-from to --entropy-anneal-steps
        (else ``budget``, the run's steps: the section an algorithm receives has it settled),
        and held after."""
        if self.entropy_final is None:
            return self.entropy_coef
        end = self.entropy_anneal_steps or budget
        if end is None:
            raise ValueError("entropy_anneal_steps is unsettled: give the run's budget")
        start = self.entropy_anneal_from
        frac = min(1.0, max(0.0, (global_step - start) / (end - start)))
        return self.entropy_coef + frac * (self.entropy_final - self.entropy_coef)

    def check(self, ctx: CheckContext) -> None:
        need(
            self.gae_lambda is None or 0.0 <= self.gae_lambda <= 1.0,
            "gae-lambda",
            f"must be in [0, 1], got {self.gae_lambda}",
        )
        need(
            self.gae_lambda is None or self.missing == "bootstrap",
            "gae-lambda",
            "GAE always bootstraps; drop --missing zero or --gae-lambda",
        )
        need(self.entropy_coef >= 0.0, "entropy-coef", f"must be >= 0, got {self.entropy_coef}")
        need(
            self.entropy_final is None or self.entropy_final >= 0.0,
            "entropy-final",
            f"must be >= 0, got {self.entropy_final}",
        )
        need(
            self.entropy_anneal_steps is None or self.entropy_anneal_steps >= 1,
            "entropy-anneal-steps",
            f"must be >= 1, got {self.entropy_anneal_steps}",
        )
        for name in ("entropy_anneal_from", "entropy_anneal_steps"):
            need(
                getattr(self, name) == getattr(PolicyGradientSettings, name)
                or self.entropy_final is not None,
                name.replace("_", "-"),
                "says when the bonus anneals to --entropy-final: give --entropy-final too",
            )
        need(
            self.entropy_final is None
            or 0 <= self.entropy_anneal_from < (self.entropy_anneal_steps or ctx.steps),
            "entropy-anneal-from",
            f"must be >= 0 and below the step where the annealing ends (--entropy-anneal-steps, "
            f"else --steps), got {self.entropy_anneal_from}",
        )
        need(self.value_coef >= 0.0, "value-coef", f"must be >= 0, got {self.value_coef}")
        need(self.rho_bar > 0.0, "rho-bar", f"must be > 0, got {self.rho_bar}")
        need(self.c_bar > 0.0, "c-bar", f"must be > 0, got {self.c_bar}")


@dataclass
class APPOSettings(PolicyGradientSettings):
    """APPO's: passes and minibatches over each rollout, PPO's clip, recurrent sequences."""

    epochs: int = 4
    """APPO: passes over each rollout"""
    minibatches: int = 4
    """APPO: minibatches of each pass (random transitions; with a recurrent core, sequences)"""
    seq_len: int = 0
    """APPO with a recurrent core: replay sequences of this many steps (0: whole rollouts)

    Each replayed from the core's state recorded at its start as the policy acted (Sample
    Factory's recurrence, RLlib's max_seq_len). Must divide --t-max."""
    burn_in: int = 0
    """--seq-len: refresh each piece's start state over this many steps before it (R2D2's)"""
    clip: float = 0.2
    """APPO: PPO's clip range epsilon of the probability ratio"""
    value_clip: float = 0.0
    """APPO: clip the value's move from the rollout's values to this (0: no clipping)"""
    normalize_over: Literal["rollout", "minibatch"] = "rollout"
    """APPO --normalize-advantage: over each rollout, or each minibatch (SB3's, CleanRL's)

    With --vtrace each minibatch's own advantages are scaled: they are computed there."""
    vtrace_pg: Literal["rho", "ratio"] = "ratio"
    """APPO --vtrace: the clipped ratio on the advantage without rho (ratio) or rho-weighted (rho)

    ratio applies the importance weight once, through the clipped ratio; rho is Sample
    Factory's, which weighs it twice (docs/algorithms.md#appo-with-v-trace)."""

    def check(self, ctx: CheckContext) -> None:
        need(self.epochs >= 1, "epochs", f"must be >= 1, got {self.epochs}")
        need(self.minibatches >= 1, "minibatches", f"must be >= 1, got {self.minibatches}")
        pieces = ctx.algo == "appo" and ctx.core != "none"
        # V-trace's minibatches are groups of whole rollouts too, a recurrent core's or not
        groups = pieces or (ctx.algo == "appo" and self.vtrace)
        need(
            self.seq_len == 0 or self.seq_len >= 2,
            "seq-len",
            f"must be 0 (whole rollouts) or 2 or more, got {self.seq_len} (a piece of one step "
            "could hold an autoreset step alone: nothing to learn from)",
        )
        need(
            not pieces or self.seq_len == 0 or self.t_max % self.seq_len == 0,
            "seq-len",
            f"{self.seq_len} does not divide --t-max {self.t_max}: every sequence of a "
            "minibatch has the same length (give a divisor of --t-max, or 0 for whole rollouts)",
        )
        need(
            not pieces or not self.vtrace or self.seq_len == 0,
            "seq-len",
            "V-trace's targets come from the learner's pass over whole rollouts, and --seq-len "
            "replays pieces from the states the policy acted with: drop --seq-len or --vtrace",
        )
        need(
            0 <= self.burn_in <= self.seq_len if self.seq_len else self.burn_in >= 0,
            "burn-in",
            f"must be 0 to --seq-len ({self.seq_len}), got {self.burn_in}: a piece burns in "
            "over the steps of the piece before it",
        )
        need(
            not (pieces and self.burn_in and self.seq_len >= self.t_max),
            "burn-in",
            f"--seq-len {self.seq_len} is the whole rollout (--t-max {self.t_max}): no piece has "
            "steps before it to burn in over; give a shorter --seq-len, or drop --burn-in",
        )
        B = ctx.envs_per_worker
        cut = self.t_max // self.seq_len if pieces and self.seq_len else 1
        fix = (
            "or a shorter --seq-len"
            if self.seq_len
            else f"--envs-per-worker {self.minibatches} or more, or --seq-len L to cut each "
            "rollout into pieces of L steps"
        )
        need(
            not groups or self.minibatches <= B * cut,
            "minibatches",
            f"with {'--vtrace' if not pieces else '--core ' + ctx.core} each minibatch is a "
            f"group of sequences, {B * cut} a "
            "rollout (--envs-per-worker x --t-max / --seq-len; whole rollouts without "
            f"--seq-len): give --minibatches {B * cut} or fewer, {fix}",
        )
        need(
            ctx.algo != "appo" or self.minibatches <= B * self.t_max,
            "minibatches",
            f"{self.minibatches} minibatches of a rollout of {B * self.t_max} "
            "transitions (--t-max x --envs-per-worker): give fewer",
        )
        need(0.0 < self.clip < 1.0, "clip", f"must be in (0, 1), got {self.clip}")
        need(self.value_clip >= 0.0, "value-clip", f"must be >= 0, got {self.value_clip}")


@dataclass
class QSettings(RolloutSettings):
    """The Q methods': the target network and each worker's exploration schedule."""

    target_update: int = 2_000
    """Q methods: copy the parameters to the target network every this many global steps

    Paper: 40,000 frames; --preset paper counts them as frames (10,000 steps on Atari)."""
    eps_start: float = 1.0
    """Q methods: exploration epsilon at the start, annealed linearly to each worker's final one"""
    eps_finals: tuple[float, ...] = (0.1, 0.01, 0.05)
    """Q methods: final epsilons a worker draws its own from (paper: 0.1, 0.01, 0.5)"""
    eps_probs: tuple[float, ...] = (0.4, 0.3, 0.3)
    """Q methods: probabilities of the final epsilons (paper: 0.4, 0.3, 0.3)"""
    eps_anneal_steps: int = 100_000
    """Q methods: global steps over which epsilon is annealed (paper: 4M frames)"""

    def check(self, ctx: CheckContext) -> None:
        need(self.target_update >= 1, "target-update", f"must be >= 1, got {self.target_update}")
        need(0.0 <= self.eps_start <= 1.0, "eps-start", f"must be in [0, 1], got {self.eps_start}")
        need(
            all(0.0 <= e <= 1.0 for e in self.eps_finals),
            "eps-finals",
            "exploration epsilons must lie in [0, 1]",
        )
        need(
            len(self.eps_finals) == len(self.eps_probs) >= 1
            and all(p >= 0 for p in self.eps_probs)
            and abs(sum(self.eps_probs) - 1.0) < 1e-6,
            "eps-probs",
            "give one probability per final epsilon, summing to 1",
        )
        need(
            self.eps_anneal_steps >= 1,
            "eps-anneal-steps",
            f"must be >= 1, got {self.eps_anneal_steps}",
        )


@dataclass
class OneStepSettings(QSettings):
    """The one-step methods' gradient accumulation (n-step Q applies one per rollout)."""

    async_update: int = 5
    """one-step Q / Sarsa: apply the accumulated gradient every this many steps or at an episode end

    The paper's I_AsyncUpdate = 5."""

    def check(self, ctx: CheckContext) -> None:
        need(self.async_update >= 1, "async-update", f"must be >= 1, got {self.async_update}")


@dataclass
class AlgoSettings(APPOSettings, OneStepSettings):
    """Every algorithm's settings together: what the run configuration assembles."""


#: each algorithm's section: what it reads, and so which options apply to it
SECTIONS: dict[str, type[RolloutSettings]] = {
    "a3c": PolicyGradientSettings,
    "appo": APPOSettings,
    "nstep-q": QSettings,
    "onestep-q": OneStepSettings,
    "onestep-sarsa": OneStepSettings,
}

#: The action spaces each algorithm takes: the Q methods' argmax needs one finite set of
#: actions (a MultiDiscrete space's product of parts, or MultiBinary's 2^bits, would need a Q
#: value for each combination); the actor-critics sample a categorical (a factorised one per
#: part for MultiDiscrete), a Bernoulli per bit or a Gaussian.
ACTION_KINDS: dict[str, tuple[str, ...]] = {
    "a3c": ("discrete", "box", "multi_discrete", "multi_binary"),
    "appo": ("discrete", "box", "multi_discrete", "multi_binary"),
    "nstep-q": ("discrete",),
    "onestep-q": ("discrete",),
    "onestep-sarsa": ("discrete",),
}

ALGOS = tuple(SECTIONS)
