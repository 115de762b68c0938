"""The run configuration: one typed dataclass, validated once; the CLI is generated from it."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import math
import numbers
import textwrap
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, Literal

from asyncrl.errors import UserError


class Frames(int):
    """A count a preset gives in emulator frames, the paper's unit: :class:`Config` turns it
    into agent steps of its env when it is built (a quarter as many on Atari, where each action
    is repeated for 4 frames; as many elsewhere)."""


def _frames_per_step(env: str) -> int:
    """Emulator frames per agent step of ``env``, as :func:`asyncrl.envs.probe_env` reports
    them: Atari's action repeat, 1 otherwise (and for an env id that cannot be looked up, which
    the trainer reports properly)."""
    from asyncrl import atari
    from asyncrl.envs import env_spec, is_atari

    try:
        return atari.FRAMESKIP if is_atari(env_spec(env)) else 1
    except Exception:
        return 1


#: The network cores (asyncrl.models.CORES builds them): a new core is a name here and its class
CoreName = Literal["none", "lstm", "gru"]

#: The action spaces each algorithm takes: the Q methods' argmax needs a finite set of actions;
#: the actor-critics sample a categorical or a Gaussian.
ACTION_KINDS: dict[str, tuple[str, ...]] = {
    "a3c": ("discrete", "box"),
    "appo": ("discrete", "box"),
    "nstep-q": ("discrete",),
    "onestep-q": ("discrete",),
    "onestep-sarsa": ("discrete",),
}


@dataclass
class Config:
    """A training run. Defaults are the tuned CartPole preset; ``--preset paper`` gives the
    paper's hyper-parameters (Mnih et al., 2016, Section 8 of the supplement)."""

    algo: Literal["a3c", "appo", "nstep-q", "onestep-q", "onestep-sarsa"] = "a3c"
    """algorithm: the paper's four, or appo (asynchronous PPO: several clipped passes over
    each rollout); the env's preset picks appo for Atari, MuJoCo and LunarLander (atari,
    mujoco, box2d-lander, box2d-discrete)"""
    env: str = "CartPole-v1"
    """Gymnasium environment id"""
    env_kwargs: tuple[str, ...] = ()
    """KEY=VALUE arguments for gymnasium.make, values as literals (e.g. continuous=true)"""
    backend: Literal["threads", "processes", "ray"] = "processes"
    """execution backend: threads share one process, processes share memory (Hogwild), ray runs
    a parameter server and workers across a cluster (pip install '.[ray]')"""
    workers: int | None = None
    """number of actor-learners (default: one per CPU core; with ray, per CPU of the cluster)"""
    address: str | None = None
    """ray: address of a running cluster to join ('ray start --head' prints it; default:
    $RAY_ADDRESS if set, else a new cluster in this process, on loopback)"""
    max_staleness: int | None = None
    """ray: drop gradients computed from parameters more than this many versions old (lag is
    counted per gradient, so it grows by one within each call of --ray-batch gradients)"""
    ray_batch: int | None = None
    """ray: rollouts whose gradients travel to the parameter server in one call (each is
    applied as an update of its own); fewer calls, staler gradients (default: 8; APPO 1, a
    call per minibatch)"""
    ray_servers: int = 1
    """ray: parameter-server actors, each holding a contiguous slice of the parameters and of
    the optimizer statistics (a sharded server, for many workers and big models; each worker
    call goes to every one in parallel)"""
    ray_pipeline: int | None = None
    """ray: calls left in flight while the worker goes on collecting (0 or 1); 1 hides the
    round trip (the worker steps its envs while its gradients travel; measurements in
    docs/ray.md) at the cost of one more call's worth (--ray-batch rollouts) of staleness; 0
    waits for each reply (default: 1; APPO 0)"""
    ray_grad_dtype: Literal["float32", "bfloat16"] = "float32"
    """ray: the precision gradients travel to the parameter server in; bfloat16 halves the bytes
    in (7 bits of mantissa, rounded to nearest; the server's optimizer works in float32)"""
    envs_per_worker: int = 16
    """environments each worker steps together in one batched forward pass (paper: 1)"""
    steps: int = 500_000
    """global env-step budget: training stops when the workers have taken this many steps"""
    time_limit: str | None = None
    """a wall-time budget as well ('1800s', '30m', '2h'; a resumed run's clock goes on from
    where it stopped): the run ends on whichever budget is spent first, as on --steps (the
    final parameters evaluated, the best model the better of the best and the last), where a
    signal (timeout -s INT) ends it without evaluating the last; on Atari, APPO's rate then
    holds for half of it and falls to 0 at it (docs/presets.md#atari-time-limit)"""
    target_return: float | None = None
    """stop when the mean return of the last `window` episodes reaches this
    (default: the env's reward threshold; 475 for CartPole-v1)"""
    window: int = 100
    """episodes in the rolling mean used by the stop rule and the progress bar"""
    stop_on: Literal["eval", "train"] = "eval"
    """the stop rule: eval stops when an evaluation of the current parameters reaches
    --target-return (one is run each time the mean of the last `window` training episodes
    reaches it), so the model a solved run keeps scores the target when loaded; train stops on
    the training episodes alone (the paper's way: exploring episodes, parameters that go on
    changing under Hogwild)"""
    eval_every: int | None = None
    """evaluate the global parameters every this many env steps, on envs of their own, without
    stalling the workers: rows of evaluations.csv, and the best parameters kept as
    best_model.pt (default: every twentieth of --steps, and no more often than keeps the
    evaluations' screens within 5% of the run's time so far). 0: only the evaluations
    --stop-on eval asks for and one of the final parameters; 0 with --stop-on train: none"""
    eval_episodes: int = 10
    """whole episodes (Atari: whole games with no-op starts) in each evaluation"""
    confirm_episodes: int = 100
    """an evaluation whose mean reaches the target plays this many new episodes, and counts (for
    --stop-on eval and the best model) on their mean alone: ten episodes are too few to tell a
    policy at the target from a lucky one (Gym's definition of solved is a mean over 100).
    0: no confirmation"""
    confirm_stderr: float = 2.0
    """--stop-on eval counts an evaluation as reaching the target when its mean less this many
    standard errors of that mean does: a policy whose true mean sits at the target passes a
    100-episode confirmation half the time, so a run that tries again and again would stop on a
    lucky one (0: the mean alone; 2: about a 2% chance of that per try)"""
    eval_stochastic: bool = False
    """A3C, APPO: evaluate the sampled policy instead of its mode (the greedy action)"""
    t_max: int = 8
    """steps per rollout before each asynchronous update (paper: 5)"""
    n_step: int | None = None
    """n-step horizon of the targets (default: t_max, the paper's forward view)"""
    missing: Literal["bootstrap", "zero"] = "bootstrap"
    """horizon past the rollout: 'bootstrap' = use maximum terms possible (bootstrap from V),
    'zero' = missing terms treated as 0"""
    gae_lambda: float | None = None
    """A3C, APPO: use GAE(lambda) advantages instead of n-step advantages (default: off, as the
    paper); with --vtrace, V-trace's lambda"""
    normalize_advantage: bool = False
    """A3C, APPO: scale each rollout's advantages to mean 0 and std 1 before the policy
    gradient (SB3's normalize_advantage; the paper does not)"""
    vtrace: bool = False
    """A3C, APPO: learn at the current global parameters, correcting for the rollout's older
    behaviour policy with V-trace's truncated importance weights (Espeholt et al., 2018)"""
    rho_bar: float = 1.0
    """--vtrace: truncation of the importance weights in the targets and advantages"""
    c_bar: float = 1.0
    """--vtrace: truncation of the traces (how far a correction reaches back)"""
    epochs: int = 4
    """APPO: passes over each rollout"""
    minibatches: int = 4
    """APPO: minibatches of each pass over a rollout: random sets of its transitions, or with
    a recurrent core groups of its envs' sequences (whole rollouts, or --seq-len steps: the
    core replays its state)"""
    seq_len: int = 0
    """APPO with a recurrent core: cut each env's rollout into sequences of this many steps,
    each replayed from the core's state recorded at its start as the policy acted, and draw
    the minibatches from all of them (Sample Factory's recurrence, RLlib's max_seq_len); 0:
    whole rollouts from the rollout's start (a minibatch is then a group of envs). Must
    divide --t-max"""
    burn_in: int = 0
    """--seq-len: refresh each piece's start state by running the core, without gradient,
    over this many steps before the piece from the state recorded there (R2D2's burn-in,
    Kapturowski et al., 2019), so a piece starts from the state the learner's parameters
    give rather than the acting ones'; a rollout's first piece keeps its recorded state (no
    steps before it). At most --seq-len, which must then be shorter than --t-max; 0: none"""
    clip: float = 0.2
    """APPO: PPO's clip range epsilon of the probability ratio"""
    value_clip: float = 0.0
    """APPO: clip the value's move from the rollout's values to this (0: no clipping); the
    values the policy recorded as it acted, with --vtrace the learner's at the rollout's first
    minibatch"""
    gamma: float = 0.99
    """discount factor"""
    lr: float = 3e-3
    """learning rate (annealed linearly to 0 over the step budget unless --lr-schedule constant)"""
    lr_schedule: Literal["linear", "constant"] = "linear"
    """learning-rate schedule over the step budget (paper: linear)"""
    lr_anneal_from: float = 0.0
    """--lr-schedule linear: the fraction of --steps over which the rate holds at --lr before
    its linear fall to 0 at --steps (0: it falls from the first step, the paper's schedule);
    for a run whose early progress needs the full rate and whose last points need a small one"""
    lr_anneal_over: Literal["steps", "time"] = "steps"
    """--lr-schedule linear: the budget the rate falls over: steps (--steps, the paper's) or
    time (also --time-limit, the run's wall time: the rate is the lower of the two schedules,
    so it reaches 0 at whichever budget ends the run, on a CPU of any speed)"""
    optimizer: Literal["rmsprop", "adam"] = "rmsprop"
    """shared optimizer: statistics shared by all workers"""
    rms_alpha: float = 0.99
    """RMSProp decay (paper: 0.99)"""
    rms_init: float | None = None
    """RMSProp's average of squared gradients at the start: 0 (torch.optim.RMSprop) or 1
    (TensorFlow, Baselines' and SB3's A2C): from 1 the first updates are a warm-up, where from 0
    with a small --eps they move every parameter by up to lr / sqrt(1 - rms-alpha) (default: 1
    with --backend ray, whose stale gradients repeat those moves, and in the atari preset; 0
    elsewhere)"""
    eps: float = 1e-5
    """optimizer epsilon; RMSProp puts it inside the square root as the paper does (paper: 0.1)"""
    entropy_coef: float = 0.01
    """A3C, APPO: weight beta of the entropy bonus, which rewards entropy (paper: 0.01)"""
    entropy_final: float | None = None
    """A3C, APPO: anneal the entropy bonus linearly from --entropy-coef to this between the
    global steps --entropy-anneal-from and --entropy-anneal-steps, then hold it (a piecewise
    schedule like RLlib's entropy_coeff_schedule; paper: a constant beta); default: constant"""
    entropy_anneal_from: int = 0
    """A3C, APPO: the global step where --entropy-final's annealing starts (--entropy-coef until
    then): a policy that has not yet learnt to score needs the bonus (docs/algorithms.md)"""
    entropy_anneal_steps: int | None = None
    """A3C, APPO: the global step by which --entropy-final is reached (default: the step
    budget, as the lr's schedule)"""
    value_coef: float = 0.5
    """A3C, APPO: weight of the value loss (R - V)^2"""
    max_grad_norm: float = 40.0
    """clip each update's gradient to this global norm; 0 disables (paper: 40)"""
    hidden: tuple[int, ...] | None = None
    """hidden layer sizes of the MLP (default: 64 64 for A3C, 128 128 for the Q methods)"""
    shared_trunk: bool | None = None
    """A3C: actor and critic share the encoder (the paper) or are separate networks (default:
    shared for images and with a recurrent core, separate otherwise)"""
    normalize_obs: bool = False
    """normalise vector observations by a running mean and variance shared by all workers,
    saved with the model and applied (frozen) at evaluation"""
    reward_scale: float = 1.0
    """multiply the learning reward by this (episodes report the env's own); a small scale keeps
    the critic's gradient from swamping the actor's under one global clipping norm"""
    obs_clip: float = 10.0
    """with --normalize-obs: clip normalised observations to +-this (it only bounds the inputs,
    so a resumed run may change it; --normalize-obs itself it may not)"""
    gaussian_std: Literal["param", "softplus"] | None = None
    """A3C with Box actions: the Gaussian's std as a state-independent parameter (param, the
    default) or a softplus of a second head (softplus, the paper)"""
    log_std_init: float | None = None
    """A3C with Box actions and --gaussian-std param: the log-std the policy starts from
    (default: 0, a standard deviation of 1)"""
    squash: bool = False
    """A3C with Box actions: squash Gaussian samples into the bounds with tanh (the
    log-probability takes the change of variables) instead of clipping them (the default, as
    SB3's)"""
    core: CoreName = "none"
    """the network's core between the encoder and the heads: none (feed-forward), an LSTM (the
    paper's recurrent agent) or a GRU; a recurrent core for A3C, APPO, n-step Q and one-step Q"""
    lstm_size: int | None = None
    """cells of the recurrent core, LSTM or GRU (default: 256 for images, 128 otherwise)"""
    prev_action_reward: bool = False
    """the recurrent core takes the previous step's action (one-hot for Discrete actions; for
    Box, as the env took it) and learning reward (clipped on Atari) beside the observation's
    features, zeros at an episode's first step: IMPALA's and R2D2's agents (RLlib's
    lstm_use_prev_action and lstm_use_prev_reward; paper: the observation alone)"""
    net: Literal["auto", "mlp", "a3c", "nature", "minatar"] = "auto"
    """encoder: mlp for vectors; for images the A3C paper's conv net (a3c), the Nature DQN net
    (nature) or MinAtar's small one (minatar); auto picks from the observation space"""
    precision: Literal["auto", "float32", "bfloat16"] = "float32"
    """the conv encoder's arithmetic: bfloat16 runs its layers in bfloat16 (CPU autocast:
    parameters, gradients, the optimizer, the heads and the losses stay float32), a learning
    pass in 0.5-0.65 of float32's time on a CPU with AMX or AVX-512 BF16 (emulated on one with
    neither); auto: bfloat16 where the CPU has either, float32 elsewhere (the atari preset's
    APPO's choice)"""
    target_update: int = 2_000
    """Q methods: copy the global parameters to the shared target network theta^- every this
    many global agent steps (paper: 40,000 frames; --preset paper counts them as frames, so
    10,000 steps on Atari, where a step is 4 frames)"""
    async_update: int = 5
    """one-step Q / Sarsa: apply the accumulated gradient every this many steps of a worker, or
    at an episode end (paper: I_AsyncUpdate = 5)"""
    eps_start: float = 1.0
    """Q methods: exploration epsilon at the start, annealed linearly to each worker's final one"""
    eps_finals: tuple[float, ...] = (0.1, 0.01, 0.05)
    """Q methods: final epsilons a worker draws its own from (paper: 0.1, 0.01, 0.5)"""
    eps_probs: tuple[float, ...] = (0.4, 0.3, 0.3)
    """Q methods: probabilities of the final epsilons (paper: 0.4, 0.3, 0.3)"""
    eps_anneal_steps: int = 100_000
    """Q methods: global agent steps over which epsilon is annealed (paper: 4 million frames;
    --preset paper counts them as frames, so 1 million steps on Atari)"""
    seed: int = 0
    """random seed (worker i uses seed-derived streams of its own)"""
    run_dir: str | None = None
    """directory for config, episodes.csv, model, summary
    (default: runs/ENV-ALGO-TIME); never overwritten"""
    checkpoint_every: str = "60s"
    """checkpoint interval: seconds ('60s') or global steps ('100000'); '0' checkpoints only at
    the end"""
    max_worker_restarts: int = 10
    """restarts of failed or hung workers allowed in the whole run before it stops"""
    worker_timeout: float = 60.0
    """seconds without an update after which a worker counts as hung and is restarted (on Ray:
    seconds without a call of its reaching the parameter server)"""
    max_nonfinite: int = 10
    """rollouts in a row with a non-finite loss or gradient (none is ever applied) before the run
    stops"""
    tensorboard: bool = True
    """write TensorBoard scalars to RUN_DIR/tb when tensorboard is installed"""
    progress: bool = True
    """show a live progress bar on a terminal (a log line every few seconds otherwise)"""

    def __post_init__(self) -> None:
        # a count a preset gives in frames (the paper's unit, :class:`Frames`) becomes agent
        # steps of this env; a count given by the user is agent steps already
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Frames):
                setattr(self, f.name, max(1, round(int(value) / _frames_per_step(self.env))))

    # ---------------------------------------------------------------- derived and checks
    def entropy_coef_at(self, global_step: int) -> float:
        """The entropy bonus's weight at ``global_step``: --entropy-coef, annealed linearly to
        --entropy-final (where given) from the step --entropy-anneal-from to the step
        --entropy-anneal-steps (the step budget by default), and held after."""
        if self.entropy_final is None:
            return self.entropy_coef
        start, end = self.entropy_anneal_from, self.entropy_anneal_steps or self.steps
        frac = min(1.0, max(0.0, (global_step - start) / (end - start)))
        return self.entropy_coef + frac * (self.entropy_final - self.entropy_coef)

    @property
    def hidden_sizes(self) -> tuple[int, ...]:
        if self.hidden is not None:
            return tuple(self.hidden)
        return (64, 64) if self.algo in ("a3c", "appo") else (128, 128)

    @property
    def eval_interval(self) -> int:
        """Env steps between two evaluations (0: none but those the stop rule asks for)."""
        return self.eval_every if self.eval_every is not None else max(1, self.steps // 20)

    def checkpoint_interval(self) -> tuple[str, float]:
        """('seconds', x), ('steps', n) or ('off', 0); ValueError if malformed."""
        text = str(self.checkpoint_every).strip().lower()
        if text.endswith("s"):
            value = float(text[:-1])
            kind = "seconds"
        else:
            value = float(int(text))
            kind = "steps"
        if value < 0 or not math.isfinite(value):
            raise ValueError(text)
        return ("off", 0.0) if value == 0 else (kind, value)

    def time_limit_seconds(self) -> float | None:
        """--time-limit in seconds (None: no limit); ValueError if malformed."""
        if self.time_limit is None:
            return None
        text = str(self.time_limit).strip().lower()
        scale = {"s": 1.0, "m": 60.0, "h": 3600.0}.get(text[-1:])
        value = float(text[:-1] if scale else text) * (scale or 1.0)
        if value <= 0 or not math.isfinite(value):
            raise ValueError(text)
        return value

    @property
    def env_kwargs_dict(self) -> dict[str, Any]:
        from asyncrl.envs import parse_env_kwargs

        return parse_env_kwargs(self.env_kwargs)

    @property
    def horizon(self) -> int:
        return self.n_step if self.n_step is not None else self.t_max

    def validate(self) -> Config:
        """Raise :class:`UserError` naming the first invalid field and how to fix it.

        The checks run by concern, each group a method of its own: the values themselves
        (choices, finite numbers), the run, the backends, the targets and the optimiser every
        algorithm shares, A3C's options, the Q methods', the network, and the observation and
        Box-action options."""
        self._check_values()
        self._check_run()
        self._check_backends()
        self._check_targets()
        self._check_optimizer()
        self._check_a3c()
        self._check_q_methods()
        self._check_network()
        self._check_continuous()
        self._check_algorithm_options()
        return self

    def _check_values(self) -> None:
        """Every choice one of its choices; every number a finite number. NaN compares false
        with everything, so a range check alone lets it through (and a stop rule at
        --target-return nan never fires); inf passes a lower bound (an infinite --lr or
        --log-std-init makes the first update or the first action NaN)."""
        for name, (choices, optional) in _choice_fields().items():
            value = getattr(self, name)
            _need(
                value in choices or (optional and value is None),
                _flag(name),
                f"got {value!r}, choose one of {', '.join(choices)}",
            )
        for name, kind in _numeric_fields().items():
            value = getattr(self, name)
            if value is None:  # an optional number left to its default
                continue
            for x in value if isinstance(value, tuple | list) else (value,):
                if kind is int:
                    _need(
                        isinstance(x, numbers.Integral) and not isinstance(x, bool),
                        _flag(name),
                        f"must be a whole number, got {value!r}",
                    )
                else:
                    _need(
                        isinstance(x, numbers.Real) and not isinstance(x, bool),
                        _flag(name),
                        f"must be a number, got {value!r}",
                    )
                    _need(
                        math.isfinite(x),
                        _flag(name),
                        f"must be a finite number, got {value!r}",
                    )

    def _check_run(self) -> None:
        """The run: its workers, budget, stop rule, seed, checkpoints and fault limits."""
        _need(
            self.workers is None or self.workers >= 1,
            "workers",
            f"must be >= 1, got {self.workers}",
        )
        _need(
            self.envs_per_worker >= 1,
            "envs-per-worker",
            f"must be >= 1, got {self.envs_per_worker}",
        )
        _need(self.steps >= 1, "steps", f"must be >= 1, got {self.steps}")
        _need(self.window >= 1, "window", f"must be >= 1, got {self.window}")
        _need(
            self.eval_every is None or self.eval_every >= 0,
            "eval-every",
            f"must be >= 0 (0: only those --stop-on eval asks for), got {self.eval_every}",
        )
        _need(self.eval_episodes >= 1, "eval-episodes", f"must be >= 1, got {self.eval_episodes}")
        _need(
            self.confirm_episodes >= 0,
            "confirm-episodes",
            f"must be >= 0 (0: no confirmation), got {self.confirm_episodes}",
        )
        _need(
            self.confirm_stderr >= 0,
            "confirm-stderr",
            f"must be >= 0 (0: the mean alone), got {self.confirm_stderr}",
        )
        _need(
            not self.eval_stochastic or self.algo in ("a3c", "appo"),
            "eval-stochastic",
            f"{self.algo} acts greedily at evaluation (its epsilon is a training schedule, not a "
            "policy); drop --eval-stochastic",
        )
        # numpy's SeedSequence takes no negative seed, PyTorch's none of 2**64 or more
        _need(0 <= self.seed < 2**64, "seed", f"must be >= 0 and below 2**64, got {self.seed}")
        self.env_kwargs_dict  # noqa: B018 (raises the UserError for a malformed pair)
        try:
            self.checkpoint_interval()
        except ValueError:
            _need(
                False,
                "checkpoint-every",
                f"give seconds ('60s') or global steps ('100000'), got {self.checkpoint_every!r}",
            )
        try:
            self.time_limit_seconds()
        except ValueError:
            _need(
                False,
                "time-limit",
                f"give a positive time such as '1800s', '30m' or '2h', got {self.time_limit!r}",
            )
        _need(
            self.max_worker_restarts >= 0,
            "max-worker-restarts",
            f"must be >= 0, got {self.max_worker_restarts}",
        )
        _need(self.worker_timeout > 0, "worker-timeout", f"must be > 0, got {self.worker_timeout}")
        _need(self.max_nonfinite >= 1, "max-nonfinite", f"must be >= 1, got {self.max_nonfinite}")

    def _check_backends(self) -> None:
        """The Ray options, and that they are given with --backend ray only where they would
        otherwise be silently ignored."""
        _need(
            self.max_staleness is None or self.max_staleness >= 0,
            "max-staleness",
            f"must be >= 0, got {self.max_staleness}",
        )
        _need(
            self.ray_batch is None or self.ray_batch >= 1,
            "ray-batch",
            f"must be >= 1, got {self.ray_batch}",
        )
        _need(self.ray_servers >= 1, "ray-servers", f"must be >= 1, got {self.ray_servers}")
        _need(
            self.ray_pipeline in (None, 0, 1),
            "ray-pipeline",
            f"must be 0 or 1, got {self.ray_pipeline}",
        )
        for name, (default, why) in RAY_ONLY.items():
            _need(
                getattr(self, name) == default or self.backend == "ray",
                _flag(name),
                f"applies to --backend ray only ({why}; this run's backend is {self.backend}): "
                f"drop --{_flag(name)}, or add --backend ray",
            )

    def ray_tuning(self) -> tuple[int, int]:
        """``(ray_batch, ray_pipeline)`` as a Ray run uses them: as given, else the
        algorithm's. APPO's: each minibatch's gradient goes to the server alone and the
        worker waits for the parameters it produced, so the next minibatch is taken at them
        (as on shared memory). A3C's batch of 8 with a call in flight left 8-16 minibatches
        taken at one stale copy: the ratio stays near 1, nothing is clipped, and CartPole
        could collapse to a fixed action (docs/ray.md#appo-on-ray). The others: 8 rollouts a
        call, one call in flight (docs/ray.md)."""
        batch, pipeline = (1, 0) if self.algo == "appo" else (8, 1)
        return (
            batch if self.ray_batch is None else self.ray_batch,
            pipeline if self.ray_pipeline is None else self.ray_pipeline,
        )

    def _check_targets(self) -> None:
        """The rollout and the targets learnt from it (every algorithm)."""
        _need(self.t_max >= 1, "t-max", f"must be >= 1, got {self.t_max}")
        _need(self.n_step is None or self.n_step >= 1, "n-step", f"must be >= 1, got {self.n_step}")
        _need(0.0 < self.gamma <= 1.0, "gamma", f"must be in (0, 1], got {self.gamma}")
        _need(self.reward_scale > 0, "reward-scale", f"must be > 0, got {self.reward_scale}")
        one_step = self.algo in ("onestep-q", "onestep-sarsa")
        _need(
            not (one_step and self.missing == "zero"),
            "missing",
            f"{self.algo} bootstraps every transition from the next state; 'zero' would drop "
            "the bootstrap of each rollout's last transition (learning from r alone there): "
            "drop --missing zero",
        )
        _need(
            self.n_step is None or not (one_step or self.gae_lambda is not None),
            "n-step",
            f"{'GAE' if self.gae_lambda is not None else self.algo} has no n-step horizon "
            f"({'lambda sets it' if self.gae_lambda is not None else 'it is one step'}); "
            "drop --n-step",
        )

    def _check_optimizer(self) -> None:
        """The shared optimiser and the update (every algorithm)."""
        _need(self.lr > 0.0, "lr", f"must be > 0, got {self.lr}")
        _need(0.0 <= self.rms_alpha < 1.0, "rms-alpha", f"must be in [0, 1), got {self.rms_alpha}")
        _need(
            0.0 <= self.lr_anneal_from < 1.0,
            "lr-anneal-from",
            f"must be in [0, 1), got {self.lr_anneal_from}",
        )
        _need(
            self.lr_anneal_from == 0.0 or self.lr_schedule == "linear",
            "lr-anneal-from",
            "applies to --lr-schedule linear only; drop it or pick --lr-schedule linear",
        )
        _need(
            self.lr_anneal_over == "steps" or self.lr_schedule == "linear",
            "lr-anneal-over",
            "applies to --lr-schedule linear only; drop it or pick --lr-schedule linear",
        )
        _need(
            self.lr_anneal_over == "steps" or self.time_limit is not None,
            "lr-anneal-over",
            "time needs the time budget to fall over: add --time-limit (e.g. 60m)",
        )
        _need(
            self.rms_init is None or self.optimizer == "rmsprop",
            "rms-init",
            "is RMSProp's; --optimizer adam starts its averages at 0: drop --rms-init",
        )
        _need(
            self.rms_init is None or self.rms_init >= 0.0,
            "rms-init",
            f"must be >= 0, got {self.rms_init}",
        )
        _need(self.eps > 0.0, "eps", f"must be > 0, got {self.eps}")
        _need(
            self.max_grad_norm >= 0.0,
            "max-grad-norm",
            f"must be >= 0, got {self.max_grad_norm}",
        )

    def _check_a3c(self) -> None:
        """A3C's and APPO's advantages, loss weights, V-trace and PPO options."""
        _need(
            self.gae_lambda is None or 0.0 <= self.gae_lambda <= 1.0,
            "gae-lambda",
            f"must be in [0, 1], got {self.gae_lambda}",
        )
        _need(
            self.gae_lambda is None or self.missing == "bootstrap",
            "gae-lambda",
            "GAE always bootstraps; drop --missing zero or --gae-lambda",
        )
        _need(self.entropy_coef >= 0.0, "entropy-coef", f"must be >= 0, got {self.entropy_coef}")
        _need(
            self.entropy_final is None or self.entropy_final >= 0.0,
            "entropy-final",
            f"must be >= 0, got {self.entropy_final}",
        )
        _need(
            self.entropy_anneal_steps is None or self.entropy_anneal_steps >= 1,
            "entropy-anneal-steps",
            f"must be >= 1, got {self.entropy_anneal_steps}",
        )
        for name in ("entropy_anneal_from", "entropy_anneal_steps"):
            _need(
                getattr(self, name) == field_default(name) or self.entropy_final is not None,
                _flag(name),
                "says when the bonus anneals to --entropy-final: give --entropy-final too",
            )
        _need(
            self.entropy_final is None
            or 0 <= self.entropy_anneal_from < (self.entropy_anneal_steps or self.steps),
            "entropy-anneal-from",
            f"must be >= 0 and below the step where the annealing ends (--entropy-anneal-steps, "
            f"else --steps), got {self.entropy_anneal_from}",
        )
        _need(self.value_coef >= 0.0, "value-coef", f"must be >= 0, got {self.value_coef}")
        policy_gradient = self.algo in ("a3c", "appo")
        _need(
            not self.vtrace or policy_gradient,
            "vtrace",
            f"V-trace corrects a policy gradient; {self.algo} has none: use a3c or appo",
        )
        # V-trace's targets, as GAE's, run to the rollout's end and always bootstrap there
        _need(
            not (self.vtrace and self.n_step is not None),
            "n-step",
            "V-trace has no n-step horizon (its traces run to the rollout's end, cut by c-bar "
            "and lambda): drop --n-step or --vtrace",
        )
        _need(
            not (self.vtrace and self.missing == "zero"),
            "missing",
            "V-trace always bootstraps from the rollout's last value: drop --missing zero or "
            "--vtrace",
        )
        _need(self.rho_bar > 0.0, "rho-bar", f"must be > 0, got {self.rho_bar}")
        _need(self.c_bar > 0.0, "c-bar", f"must be > 0, got {self.c_bar}")
        _need(self.epochs >= 1, "epochs", f"must be >= 1, got {self.epochs}")
        _need(self.minibatches >= 1, "minibatches", f"must be >= 1, got {self.minibatches}")
        # (where it is read: elsewhere ALGO_ONLY and READ_WITH name the problem, later)
        pieces = self.algo == "appo" and self.core != "none"
        _need(
            self.seq_len == 0 or self.seq_len >= 2,
            "seq-len",
            f"must be 0 (whole rollouts) or 2 or more, got {self.seq_len} (a piece of one step "
            "could hold an autoreset step alone: nothing to learn from)",
        )
        _need(
            not pieces or self.seq_len == 0 or self.t_max % self.seq_len == 0,
            "seq-len",
            f"{self.seq_len} does not divide --t-max {self.t_max}: every sequence of a "
            "minibatch has the same length (give a divisor of --t-max, or 0 for whole rollouts)",
        )
        _need(
            not pieces or not self.vtrace or self.seq_len == 0,
            "seq-len",
            "V-trace's targets come from the learner's pass over whole rollouts, and --seq-len "
            "replays pieces from the states the policy acted with: drop --seq-len or --vtrace",
        )
        _need(
            0 <= self.burn_in <= self.seq_len if self.seq_len else self.burn_in >= 0,
            "burn-in",
            f"must be 0 to --seq-len ({self.seq_len}), got {self.burn_in}: a piece burns in "
            "over the steps of the piece before it",
        )
        _need(
            not (pieces and self.burn_in and self.seq_len >= self.t_max),
            "burn-in",
            f"--seq-len {self.seq_len} is the whole rollout (--t-max {self.t_max}): no piece has "
            "steps before it to burn in over; give a shorter --seq-len, or drop --burn-in",
        )
        cut = self.t_max // self.seq_len if pieces and self.seq_len else 1
        fix = (
            "or a shorter --seq-len"
            if self.seq_len
            else f"--envs-per-worker {self.minibatches} or more, or --seq-len L to cut each "
            "rollout into pieces of L steps"
        )
        _need(
            not pieces or self.minibatches <= self.envs_per_worker * cut,
            "minibatches",
            f"with --core {self.core} each minibatch is a group of sequences, "
            f"{self.envs_per_worker * cut} a rollout (--envs-per-worker x --t-max / --seq-len; "
            f"whole rollouts without --seq-len): give --minibatches {self.envs_per_worker * cut} "
            f"or fewer, {fix}",
        )
        _need(
            self.algo != "appo" or self.minibatches <= self.envs_per_worker * self.t_max,
            "minibatches",
            f"{self.minibatches} minibatches of a rollout of {self.envs_per_worker * self.t_max} "
            "transitions (--t-max x --envs-per-worker): give fewer",
        )
        _need(0.0 < self.clip < 1.0, "clip", f"must be in (0, 1), got {self.clip}")
        _need(self.value_clip >= 0.0, "value-clip", f"must be >= 0, got {self.value_clip}")

    def _check_q_methods(self) -> None:
        """The Q methods' target network, update period and exploration schedule."""
        _need(self.target_update >= 1, "target-update", f"must be >= 1, got {self.target_update}")
        _need(self.async_update >= 1, "async-update", f"must be >= 1, got {self.async_update}")
        _need(0.0 <= self.eps_start <= 1.0, "eps-start", f"must be in [0, 1], got {self.eps_start}")
        _need(
            all(0.0 <= e <= 1.0 for e in self.eps_finals),
            "eps-finals",
            "exploration epsilons must lie in [0, 1]",
        )
        _need(
            len(self.eps_finals) == len(self.eps_probs) >= 1
            and all(p >= 0 for p in self.eps_probs)
            and abs(sum(self.eps_probs) - 1.0) < 1e-6,
            "eps-probs",
            "give one probability per final epsilon, summing to 1",
        )
        _need(
            self.eps_anneal_steps >= 1,
            "eps-anneal-steps",
            f"must be >= 1, got {self.eps_anneal_steps}",
        )

    def _check_network(self) -> None:
        """The network's layers and its core."""
        _need(
            self.hidden is None or (len(self.hidden) >= 1 and all(h >= 1 for h in self.hidden)),
            "hidden",
            f"give one or more positive layer sizes, got {self.hidden}",
        )
        _need(
            self.core == "none" or self.algo != "onestep-sarsa",
            "core",
            f"one-step Sarsa has no {self.core.upper()} core (its next action is drawn a step "
            "ahead of the recurrent state): use a3c, appo, nstep-q or onestep-q, or drop "
            f"--core {self.core}",
        )
        _need(
            self.lstm_size is None or self.lstm_size >= 1,
            "lstm-size",
            f"must be >= 1, got {self.lstm_size}",
        )
        _need(
            self.lstm_size is None or self.core != "none",
            "lstm-size",
            "sizes a recurrent core and this network has none: add --core lstm (or gru), or "
            "drop --lstm-size",
        )
        # a recurrent core carries one state for actor and critic (the paper's LSTM agent):
        # separate networks would need two
        _need(
            self.shared_trunk is not False or self.core == "none",
            "no-shared-trunk",
            f"the {self.core.upper()} core is shared by actor and critic (one recurrent state "
            "for both): drop --no-shared-trunk, or --core",
        )

    def _check_algorithm_options(self) -> None:
        """No option the run would ignore: --epochs with A3C, --gae-lambda with a Q method,
        --target-update with A3C or APPO, --rho-bar without --vtrace left a run that did not
        do what its command said, and its config.json claimed the option (after the range
        checks, so that a value out of range is reported as that)."""
        for name, algos in ALGO_ONLY.items():
            _need(
                self.algo in algos or getattr(self, name) == field_default(name),
                _flag(name),
                f"{self.algo} does not read it (it applies to {', '.join(algos)}): drop "
                f"--{_flag(name)}",
            )
        for name, (read, why) in READ_WITH.items():
            _need(read(self) or getattr(self, name) == field_default(name), _flag(name), why)

    def _check_continuous(self) -> None:
        """Observation normalisation and the Gaussian policy of Box actions (its initial
        log-std needs no range beyond being finite, which :meth:`_check_values` sees to)."""
        _need(self.obs_clip > 0, "obs-clip", f"must be > 0, got {self.obs_clip}")

    def check_env(self, info: EnvInfo) -> Config:
        """Raise :class:`UserError` where the config does not fit the env's probe: the
        algorithm must take its action space, and the observation and action options must fit
        its spaces. Imports no PyTorch, so that the CLI refuses bad input before it starts Ray
        (which it does while PyTorch is imported)."""
        kinds = ACTION_KINDS[self.algo]
        if info.action.kind not in kinds:
            takers = [a for a, k in ACTION_KINDS.items() if info.action.kind in k]
            need = " or ".join(k.capitalize() for k in kinds)
            raise UserError(
                f"--env: {info.env_id} has a {info.action.describe()} action space, but "
                f"{self.algo} needs a {need} one; use --algo {' / '.join(takers)}, or an env "
                f"with {need} actions"
            )
        _need(
            not self.normalize_obs or len(info.obs_shape) == 1,
            "normalize-obs",
            f"{info.env_id} has {info.obs_shape} observations; normalisation is for vector "
            "observations (images are scaled by 1/255 in the network)",
        )
        _need(
            not self.squash or info.action.kind == "box",
            "squash",
            f"{info.env_id} has {info.action.describe()} actions; squashing is for Box actions "
            "(drop --squash)",
        )
        # (the range in float32, as the env gets the actions: 3.4e38 and more overflows)
        spans = [h - lo for lo, h in zip(info.action.low, info.action.high, strict=True)]
        _need(
            not self.squash or all(math.isfinite(d) and d < 3.4e38 for d in spans),
            "squash",
            f"{info.env_id}'s action bounds are not all finite (or span more than float32 "
            "holds); tanh squashes onto finite bounds only (drop --squash: actions are then "
            "clipped to the bounds)",
        )
        for name in BOX_ONLY:
            _need(
                info.action.kind == "box" or getattr(self, name) is None,
                _flag(name),
                f"{info.env_id} has {info.action.describe()} actions; --{_flag(name)} "
                f"{getattr(self, name)} would shape a Gaussian policy of Box actions: drop "
                f"--{_flag(name)} (a preset for Box actions sets it where not given the env)",
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Config:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise UserError(f"unknown config field(s) {', '.join(unknown)}")
        d = dict(d)
        for name in ("hidden", "eps_finals", "eps_probs", "env_kwargs"):
            if d.get(name) is not None:
                try:
                    d[name] = tuple(d[name])
                except TypeError:
                    raise UserError(f"config field {name}: a list, not {d[name]!r}") from None
        return cls(**d)


#: the options only --backend ray reads: their defaults, and why another backend refuses them
#: (a resumed run's saved ones go back to these instead: asyncrl.trainer)
RAY_ONLY: dict[str, tuple[Any, str]] = {
    "ray_grad_dtype": ("float32", "other backends share parameters in memory"),
    "address": (None, "it names the Ray cluster to join"),
    "max_staleness": (None, "shared memory has no stale gradients to drop"),
    "ray_servers": (1, "other backends share parameters in memory"),
    "ray_batch": (None, "other backends apply each gradient in memory as it is taken"),
    "ray_pipeline": (None, "other backends make no calls to overlap"),
}

#: the options only a Gaussian policy (Box actions) reads: a preset's value is left out for
#: other action spaces (:func:`preset`), one given is refused (:meth:`Config.check_env`), and
#: a resumed run's saved one goes back to its default (asyncrl.trainer)
BOX_ONLY = ("gaussian_std", "log_std_init")


POLICY_GRADIENT = ("a3c", "appo")
Q_METHODS = ("nstep-q", "onestep-q", "onestep-sarsa")
#: the options only some algorithms read, and those algorithms: a preset's value for another
#: algorithm is left out (the atari preset's Q schedule under APPO: :func:`preset`), one given
#: for another is refused (:meth:`Config.validate`), and a resumed run's saved one goes back to
#: its default (what an older version accepted and ignored: asyncrl.trainer)
ALGO_ONLY: dict[str, tuple[str, ...]] = {
    "gae_lambda": POLICY_GRADIENT,
    "normalize_advantage": POLICY_GRADIENT,
    "entropy_coef": POLICY_GRADIENT,
    "entropy_final": POLICY_GRADIENT,
    "entropy_anneal_from": POLICY_GRADIENT,
    "entropy_anneal_steps": POLICY_GRADIENT,
    "value_coef": POLICY_GRADIENT,
    # actor and critic: one trunk or two (a Q network is one)
    "shared_trunk": POLICY_GRADIENT,
    "epochs": ("appo",),
    "minibatches": ("appo",),
    "seq_len": ("appo",),
    "burn_in": ("appo",),
    "clip": ("appo",),
    "value_clip": ("appo",),
    "target_update": Q_METHODS,
    "eps_start": Q_METHODS,
    "eps_finals": Q_METHODS,
    "eps_probs": Q_METHODS,
    "eps_anneal_steps": Q_METHODS,
    # the one-step methods' gradient accumulation; n-step Q applies one per rollout
    "async_update": ("onestep-q", "onestep-sarsa"),
}


#: the options read only when another setting is on: when, and why they are refused otherwise
#: (:meth:`Config.validate`; a resumed run's saved one goes back to its default: asyncrl.trainer)
READ_WITH: dict[str, tuple[Callable[[Config], bool], str]] = {
    # the feed-forward net's identity core would hand the context to its linear heads, which
    # can only add a bias per action and per unit of reward, never "stay after a reward, switch
    # after none" (an XOR of the two: tests/test_learning.py's Guess env)
    "prev_action_reward": (
        lambda c: c.core != "none",
        "gives a recurrent core the previous action and reward (a feed-forward net's linear "
        "heads could not combine them): add --core lstm or gru, or drop --prev-action-reward",
    ),
    "seq_len": (
        lambda c: c.core != "none",
        "cuts a recurrent core's rollouts into sequences: add --core lstm or gru, or drop "
        "--seq-len (a feed-forward net learns from single transitions)",
    ),
    "burn_in": (
        lambda c: c.seq_len > 0,
        "refreshes the start state of --seq-len's pieces: add --seq-len L (and a recurrent "
        "core), or drop --burn-in",
    ),
    "rho_bar": (
        lambda c: c.vtrace,
        "truncates V-trace's importance weights: add --vtrace, or drop --rho-bar",
    ),
    "c_bar": (
        lambda c: c.vtrace,
        "truncates V-trace's importance weights: add --vtrace, or drop --c-bar",
    ),
    "obs_clip": (
        lambda c: c.normalize_obs,
        "clips normalised observations: add --normalize-obs, or drop --obs-clip",
    ),
    "log_std_init": (
        lambda c: c.gaussian_std != "softplus",
        "is where --gaussian-std param's log-std starts; softplus computes the std from a head: "
        "drop --log-std-init",
    ),
    "rms_alpha": (
        lambda c: c.optimizer == "rmsprop",
        "is RMSProp's decay; --optimizer adam has its own betas: drop --rms-alpha",
    ),
    # (--confirm-episodes counts with --stop-on train too: a confirmation picks the best model)
    "confirm_stderr": (
        lambda c: c.stop_on == "eval",
        "is the stop rule's margin on a confirmed evaluation, which --stop-on train does not "
        "wait for: drop --confirm-stderr, or --stop-on train",
    ),
}


def field_default(name: str) -> Any:
    """The default of the :class:`Config` field ``name``."""
    return Config.__dataclass_fields__[name].default


def _need(ok: bool, flag: str, what: str) -> None:
    if not ok:
        raise UserError(f"--{flag}: {what}")


@cache
def field_hints() -> dict[str, tuple[Any, bool]]:
    """Each :class:`Config` field's type with ``| None`` taken off, and whether it had it (the
    option may be left unset: None, its default)."""
    out: dict[str, tuple[Any, bool]] = {}
    for name, hint in typing.get_type_hints(Config).items():
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = typing.get_origin(hint) in (types.UnionType, typing.Union) and len(args) == 1
        out[name] = (args[0] if optional else hint, optional)
    return out


@cache
def _choice_fields() -> dict[str, tuple[tuple[str, ...], bool]]:
    """The fields whose type is a ``Literal``, optional or not: their choices, and whether
    they may be left unset."""
    return {
        name: (typing.get_args(hint), optional)
        for name, (hint, optional) in field_hints().items()
        if typing.get_origin(hint) is Literal
    }


@cache
def _numeric_fields() -> dict[str, type]:
    """The fields holding numbers, optional or not, one or a tuple of them: name -> int or
    float."""
    out: dict[str, type] = {}
    for name, (hint, _) in field_hints().items():
        if typing.get_origin(hint) is tuple:
            hint = typing.get_args(hint)[0]
        if hint in (int, float):
            out[name] = hint
    return out


# Long-horizon locomotion with Box actions, MuJoCo's and Box2D's (presets mujoco and box2d)
_LOCOMOTION: dict[str, Any] = dict(
    envs_per_worker=8,
    t_max=8,
    lr=2e-3,
    gamma=0.99,
    gae_lambda=0.95,
    entropy_coef=0.0,
    max_grad_norm=0.5,
    reward_scale=0.1,
    normalize_obs=True,
    log_std_init=-1.0,
)


# The paper's setting, one flag away (Mnih et al., 2016, supplement Section 8): one env per
# actor-learner, t_max = 5, shared RMSProp with alpha 0.99 and eps 0.1, gradient clipping at 40,
# entropy 0.01, linear annealing; for the Q methods a target network refreshed every 40,000
# frames, I_AsyncUpdate = 5, epsilon annealed over 4M frames to finals {0.1, 0.01, 0.5} with
# probabilities {0.4, 0.3, 0.3}. The paper samples lr log-uniformly in [1e-4, 1e-2]; 7e-4 is
# the usual single choice.
_PRESETS: dict[str, dict[str, Any]] = {
    "cartpole": {},
    # Atari from pixels: the paper's RMSProp alpha 0.99, entropy 0.01, lr annealed to 0, target
    # network every 40,000 frames (10,000 agent steps), epsilon finals over 4M frames (1M agent
    # steps), the paper's conv net with a shared trunk, and the batch-averaged loss of A2C
    # (Stable-Baselines3's rl-zoo Atari setting: RMSProp eps 1e-5, value weight 0.25, gradient
    # norm 0.5). Tuned on Pong and Breakout (the runs and their scores: docs/presets.md):
    # - 4 envs per worker and lr 1.4e-3: more and larger updates per frame than A2C's (more
    #   envs per worker or a smaller lr learnt slower, a larger lr worse);
    # - t_max 20 where the paper has 5: a Pong point is scored long after the hit that wins it,
    #   and a 20-step return carries it back in one update where 5-step returns wait for the
    #   critic to relay it; a quarter of the updates also costs less learning per frame, so more
    #   frames are played in the same time.
    # APPO by default (its layer below, PPO's Atari setting): on Pong it took off on 9 runs of 9
    # where this A3C took off on 6 of 9, and it climbs several times as fast per frame; in an
    # hour it scored 152 on Breakout and 604 on Space Invaders, this A3C 97 and 527
    # (docs/presets.md#atari). --algo a3c gets A3C's settings above, the Q methods theirs.
    "atari": dict(
        algo="appo",
        envs_per_worker=4,
        t_max=20,
        lr=1.4e-3,
        optimizer="rmsprop",
        rms_alpha=0.99,
        eps=1e-5,
        entropy_coef=0.01,
        value_coef=0.25,
        max_grad_norm=0.5,
        # RMSProp's average of squared gradients from 1, as in the TensorFlow-like RMSProp of
        # the A2C whose eps this preset took (SB3's RMSpropTFLike): from 0 the first updates
        # move every weight by up to 10x lr, and on Pong A3C then never took off on 3 runs of
        # 9, the conv features dead; from 1 it took off on 4 of 4 (docs/benchmarks.md, A3C
        # against APPO). Adam's presets drop it (preset)
        rms_init=1.0,
        lr_schedule="linear",
        steps=10_000_000,
        target_update=10_000,
        async_update=5,
        eps_finals=(0.1, 0.01, 0.5),
        eps_probs=(0.4, 0.3, 0.3),
        eps_anneal_steps=1_000_000,
        checkpoint_every="300s",
    ),
    # Continuous control (Box actions outside MuJoCo and Box2D: Pendulum, MountainCar...):
    # tuned on Pendulum-v1 (docs/presets.md): gamma 0.9 and GAE(0.9), observations
    # normalised, rewards scaled by 1/8, 8 envs a worker (more updates per step), a large lr
    # with no gradient clipping, no entropy bonus
    "control": dict(
        envs_per_worker=8,
        t_max=8,
        lr=5e-3,
        gamma=0.9,
        gae_lambda=0.9,
        entropy_coef=0.0,
        max_grad_norm=0.0,
        reward_scale=0.125,
        normalize_obs=True,
        # the lr anneals to 0 over the budget, and Pendulum's policy must settle to pass a
        # confirmed greedy evaluation: a short budget lets it settle sooner (600k against 2M:
        # docs/presets.md)
        steps=600_000,
    ),
    # MuJoCo locomotion (HalfCheetah, Hopper, Walker2d, Ant, ...): tuned on HalfCheetah-v5
    # (docs/presets.md): the paper's gamma 0.99 with GAE(0.95), observations normalised,
    # rewards scaled by 1/10, a narrower initial Gaussian, gradient clipping, no entropy bonus
    # APPO by default (its layer below): it scored about twice A3C's best setting on
    # HalfCheetah-v5 at 1M steps, where A3C left some seeds in a poor gait (the figures:
    # docs/presets.md); --algo a3c gets A3C's settings above
    "mujoco": dict(_LOCOMOTION, steps=1_000_000, algo="appo"),
    # Box2D with Box actions (BipedalWalker, CarRacing): rewards that come at the end of long
    # episodes (the far end of the course), for which control's gamma 0.9 is short-sighted;
    # mujoco's settings, measured on BipedalWalker and LunarLanderContinuous (docs/presets.md).
    # A3C: on BipedalWalker it walked long before APPO in mujoco's shape (docs/presets.md)
    "box2d": dict(_LOCOMOTION, steps=5_000_000),
    # LunarLanderContinuous: box2d's settings with APPO, which solved it on every seed tried
    # where box2d's A3C solved none (docs/presets.md)
    "box2d-lander": dict(_LOCOMOTION, steps=3_000_000, algo="appo"),
    # Box2D with discrete actions (LunarLander-v3): the vector-observation defaults with APPO,
    # which solved it on every seed tried where A3C on the same defaults solved none
    # (docs/presets.md); --algo a3c gets cartpole's A3C
    "box2d-discrete": dict(algo="appo", steps=3_000_000),
    # MinAtar's 10x10 games: small conv net, CartPole-like batch settings
    "minatar": dict(
        envs_per_worker=16,
        t_max=5,
        lr=1e-3,
        eps=1e-5,
        entropy_coef=0.01,
        max_grad_norm=0.5,
        value_coef=0.5,
        steps=2_000_000,
    ),
    "paper": dict(
        envs_per_worker=1,
        t_max=5,
        lr=7e-4,
        optimizer="rmsprop",
        rms_alpha=0.99,
        eps=0.1,
        entropy_coef=0.01,
        max_grad_norm=40.0,
        lr_schedule="linear",
        shared_trunk=True,
        # the paper counts these in frames: 10,000 and 1M agent steps on Atari
        target_update=Frames(40_000),
        async_update=5,
        eps_finals=(0.1, 0.01, 0.5),
        eps_probs=(0.4, 0.3, 0.3),
        eps_anneal_steps=Frames(4_000_000),
    ),
}


# APPO over any preset: PPO's optimiser and advantages (SB3's, CleanRL's defaults: Adam with eps
# 1e-5, GAE(0.95), normalised advantages, gradients clipped at 0.5, 4 epochs of 4 minibatches,
# clip 0.2); a preset's own APPO settings (_APPO_BY_PRESET) come on top. The env's preset
# stays A3C's for --algo a3c.
_APPO: dict[str, Any] = dict(
    optimizer="adam",
    eps=1e-5,
    lr=1e-3,
    gae_lambda=0.95,
    normalize_advantage=True,
    max_grad_norm=0.5,
    lr_schedule="constant",
)
_PPO_LOCOMOTION: dict[str, Any] = dict(
    envs_per_worker=8, t_max=64, epochs=10, minibatches=8, lr=3e-4
)
_APPO_BY_PRESET: dict[str, dict[str, Any]] = {
    # Pendulum-v1 (docs/benchmarks.md#appo-and-v-trace): SB3's ratio of gradient steps to
    # samples (10 epochs of 64-transition minibatches) learnt in the fewest steps of those tried
    "control": dict(envs_per_worker=8, t_max=64, epochs=10, minibatches=8),
    # MuJoCo: CleanRL's and SB3's PPO defaults (lr 3e-4, 10 epochs of 64-transition
    # minibatches), in the shape of control's rollouts
    "mujoco": _PPO_LOCOMOTION,
    # Box2D with Box actions: mujoco's (LunarLanderContinuous solved with it; BipedalWalker
    # lagged far behind A3C with it, above)
    "box2d": _PPO_LOCOMOTION,
    "box2d-lander": _PPO_LOCOMOTION,
    # PPO's Atari setting (Schulman et al., 2017; SB3's and CleanRL's): 8 games x 128 steps a
    # rollout, clip 0.1, Adam at 2.5e-4: the atari preset's algorithm (above). Deviation: its
    # 16 gradient steps a rollout are taken in 2 passes of 8 minibatches (128 transitions), not
    # 4 of 4: Pong learnt nearly as much a frame at 1.2-1.5x the frames a second (the learning
    # passes are half a worker's time) and reached 18 sooner on each seed, Breakout about level
    # by the minute; 2 passes of 4 learnt half as much a frame
    # (docs/benchmarks.md#two-passes-of-eight-minibatches). In bfloat16 where the CPU has AMX
    # or AVX-512 BF16: each learning pass 0.5-0.65 of float32's time there
    # (docs/atari.md#bfloat16)
    "atari": dict(
        lr=2.5e-4,
        envs_per_worker=8,
        t_max=128,
        epochs=2,
        minibatches=8,
        clip=0.1,
        precision="auto",
    ),
}
#: APPO with a recurrent core, over _APPO_BY_PRESET: a minibatch is then a group of a worker's
#: envs (whole sequences), and the atari preset's 8 minibatches of 8 games are one game's 128
#: steps each, a batch of one stream; on Pong the LSTM in that shape stood at -20.4 to -18.4
#: after 30 minutes on 3 of 3 seeds, its critic unfit (explained variance under 0.1 on seed 2),
#: and in 2 passes of 4 (two games) took off at 3.7M frames as the feed-forward net. Atari
#: takes PPO's published 4 passes of 4 (two games a minibatch, CleanRL's ppo_atari_lstm): the
#: LSTM reached 18 at 6.9-9.4M frames on 3 of 3 seeds
#: (docs/recurrent.md#the-atari-presets-shape-with-a-recurrent-core)
_APPO_RECURRENT_BY_PRESET: dict[str, dict[str, Any]] = {
    "atari": dict(epochs=4, minibatches=4),
}
#: APPO with a feed-forward net on Atari when the user gives --time-limit (and no lr schedule of
#: their own): Adam's rate held for the first half of the limit, then linearly to 0 at it, as
#: PPO anneals over its budget (CleanRL, SB3's Atari zoo) but over the clock, so it ends at 0 on
#: a CPU of any speed. Over the hour it put each of the paper's five games over its 16-core A3C
#: at 40M frames on every seed run on a Zen 4, where the constant rate missed Pong's 20; in 30
#: minutes Pong reached 18 at 14.6-17.8 minutes on 3 of 3 seeds, the rate at 81% or more by
#: then: the fall did not cost the 18 (docs/benchmarks.md#hold-over-time-zen4,
#: #hold-over-time-pong30). Without a time limit the rate stays constant: there is no budget
#: the schedule could be sure to end on
_APPO_TIME_LIMIT_BY_PRESET: dict[str, dict[str, Any]] = {
    "atari": dict(lr_schedule="linear", lr_anneal_over="time", lr_anneal_from=0.5),
}


if TYPE_CHECKING:
    from asyncrl.envs import EnvInfo


def auto_preset(env: str, env_kwargs: tuple[str, ...] = ()) -> str:
    """The preset an env id selects when the user names none: atari for ALE games, minatar
    for MinAtar, mujoco for Gymnasium's MuJoCo tasks, box2d for Box2D's with Box actions
    (box2d-lander for LunarLander's) and box2d-discrete for the others, control for other Box
    actions, cartpole (the vector-observation defaults) otherwise
    (:func:`asyncrl.envs.preset_for`).

    Where the id does not tell, the action space does, and this probes the env. A caller that
    goes on to train probes it itself, once (:func:`asyncrl.envs.probe_env`), and hands the
    probe, which names the same preset, to :func:`preset` and :func:`asyncrl.train`."""
    plain = env.rpartition(":")[2]
    if plain.startswith("MinAtar/"):
        return "minatar"
    from asyncrl.envs import env_spec, parse_env_kwargs, preset_for, probe_env

    try:
        name = preset_for(env_spec(env))
        return name or probe_env(env, parse_env_kwargs(env_kwargs)).preset
    except Exception:  # an unknown or broken env: train reports it properly
        return "cartpole"


def preset(name: str | None, *, info: EnvInfo | None = None, **overrides: Any) -> Config:
    """A :class:`Config` from a named preset with ``overrides`` applied; ``None`` picks the
    preset the env calls for: the one ``info`` names (the env's probe, which then need not be
    made again: :func:`asyncrl.envs.probe_env`), else :func:`auto_preset`'s. A preset's
    Gaussian options are left out where the env's actions are not Box (``info``, or a probe
    of the env named, where a named preset sets them)."""
    named = name is not None
    if name is None:
        env = overrides.get("env", Config.env)
        if info is None:
            name = auto_preset(env, overrides.get("env_kwargs", ()))
        else:
            from asyncrl.envs import parse_env_kwargs, probed

            kwargs = parse_env_kwargs(overrides.get("env_kwargs", ()))
            name = probed(info, env, kwargs).preset
    if name not in _PRESETS:
        raise UserError(f"--preset: unknown preset {name!r}, choose one of {', '.join(_PRESETS)}")
    values = dict(_PRESETS[name])
    algo = overrides.get("algo", values.get("algo", Config.algo))
    if algo == "appo":
        values |= _APPO | _APPO_BY_PRESET.get(name, {})
        if overrides.get("core", values.get("core", Config.core)) != "none":
            values |= _APPO_RECURRENT_BY_PRESET.get(name, {})
        elif overrides.get("time_limit") is not None:
            timed = _APPO_TIME_LIMIT_BY_PRESET.get(name, {})
            if not overrides.keys() & timed.keys():  # a schedule of the user's wins whole
                values |= timed
    values = {k: v for k, v in values.items() if algo in ALGO_ONLY.get(k, (algo,))}
    # a preset named for an env it was not made for (the env's own is picked from its spec:
    # no probe, no install needed to pick it)
    if named and info is None and "env" in overrides and any(k in values for k in BOX_ONLY):
        from asyncrl.envs import parse_env_kwargs, probe_env

        info = probe_env(overrides["env"], parse_env_kwargs(overrides.get("env_kwargs", ())))
    if info is not None and info.action.kind != "box":  # (--preset mujoco on CartPole)
        values = {k: v for k, v in values.items() if k not in BOX_ONLY}
    if {**values, **overrides}.get("gaussian_std") == "softplus":
        values.pop("log_std_init", None)  # (softplus: the std comes from a head)
    if {**values, **overrides}.get("optimizer", Config.optimizer) != "rmsprop":
        values.pop("rms_init", None)  # RMSProp's start: nothing to Adam (APPO's layer)
    return Config(**{**values, **overrides})


def _flag(name: str) -> str:
    return name.replace("_", "-")


def literal_choices(name: str) -> tuple[str, ...]:
    hint = Config.__annotations__[name]
    inner = hint[hint.index("[") + 1 : hint.rindex("]")]
    return tuple(ast.literal_eval(f"({inner},)"))


@cache
def field_docs() -> dict[str, str]:
    """The docstring under each field of :class:`Config` (CleanRL style), for the CLI help."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(Config)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, nxt in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


ALGOS = literal_choices("algo")
BACKENDS = literal_choices("backend")
PRESETS = tuple(_PRESETS)
