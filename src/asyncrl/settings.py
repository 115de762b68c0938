"""The run's settings by concern: one section a room (the run, the env, evaluation and the stop
rule, the rollout and its targets, the optimiser, the network, Ray). Each section is a small
typed dataclass that owns its fields, their documentation and their own checks; the
algorithms' sections are in :mod:`asyncrl.algos.settings`. The run configuration
(:mod:`asyncrl.config`) assembles them for the user (one flat namespace: ``--lr``,
``lr = 3e-3``); the main process hands each room its own section (its ``section`` method).

A field's docstring is its documentation: the first line is the CLI's help (at most two lines
on a terminal), the rest is read in the docs. Checks that span sections are the assembly's
(its ``validate``), and which option applies to which algorithm, backend,
core and action space is one table (:mod:`asyncrl.config`'s ``APPLIES``). Imports no PyTorch:
the CLI refuses bad input before it starts Ray.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from typing import Any, Literal

from asyncrl.errors import UserError

#: The network cores (asyncrl.models.CORES builds them): a new core is a name here and its class
CoreName = Literal["none", "lstm", "gru"]


def need(ok: bool, flag: str, what: str) -> None:
    """Refuse an option with one line that names it and the fix."""
    if not ok:
        raise UserError(f"--{flag}: {what}")


@dataclass(frozen=True)
class Resumed:
    """Where a resumed run took up its learning-rate schedule: the global step, the seconds of
    its clock, and the rate it had there (:func:`asyncrl.optim.scheduled_lr`). Run state, not
    a setting: the main process hands it to the rooms that apply or log the rate."""

    step: int
    elapsed: float
    lr: float


@dataclass(frozen=True)
class CheckContext:
    """What a section's checks may read of the others (plain values, not the whole config)."""

    algo: str
    core: str
    envs_per_worker: int
    steps: int


@dataclass
class RunSettings:
    """The run: the algorithm, the backend, the budgets, the seed, checkpoints and faults."""

    algo: str = "a3c"
    """algorithm: a3c, appo, nstep-q, onestep-q or onestep-sarsa

    The env's preset picks appo for Atari, MuJoCo and LunarLander (docs/presets.md)."""
    backend: Literal["threads", "processes", "ray"] = "processes"
    """execution backend: threads, processes over shared memory, or a Ray parameter server

    Ray needs ``pip install '.[ray]'`` (docs/ray.md)."""
    workers: int | None = None
    """actor-learners (default: one per CPU core; with ray, per CPU of the cluster)"""
    envs_per_worker: int = 16
    """environments each worker steps together in one batched forward pass (paper: 1)"""
    steps: int = 500_000
    """global env-step budget: training stops when the workers have taken this many steps"""
    time_limit: str | None = None
    """a wall-time budget as well ('1800s', '30m', '2h'): the run ends on whichever comes first

    A resumed run's clock goes on from where it stopped. On Atari, APPO's rate then holds for
    half of it and falls to 0 at it (docs/presets.md#atari-time-limit)."""
    seed: int = 0
    """random seed (each worker and env draws streams of its own from it)"""
    run_dir: str | None = None
    """directory for the run's files (default: runs/ENV-ALGO-TIME); never overwritten"""
    checkpoint_every: str = "60s"
    """checkpoint interval: seconds ('60s') or global steps ('100000'); '0': only at the end"""
    max_worker_restarts: int = 10
    """restarts of failed or hung workers allowed in the whole run before it stops"""
    worker_timeout: float = 60.0
    """seconds without an update after which a worker counts as hung and is restarted"""
    max_nonfinite: int = 10
    """rollouts in a row with a non-finite loss or gradient (never applied) before it stops"""
    tensorboard: bool = True
    """write TensorBoard scalars to RUN_DIR/tb when tensorboard is installed"""
    progress: bool = True
    """show a live progress bar on a terminal (a log line every few seconds otherwise)"""
    track: bool = False
    """log the run to Weights & Biases as well (pip install "asyncrl[wandb]")

    The metrics TensorBoard gets, under the same names, the configuration and the summary; the
    files go under RUN_DIR/wandb, and WANDB_MODE=offline keeps them there (docs/callbacks.md)."""
    wandb_project: str | None = None
    """--track: the W&B project (default: asyncrl)"""
    wandb_entity: str | None = None
    """--track: the W&B entity, a team or user (default: W&B's default entity of the login)"""
    wandb_group: str | None = None
    """--track: a W&B group to put the run in (the seeds of one setting, say)"""

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

    def check(self, ctx: CheckContext) -> None:
        need(
            self.workers is None or self.workers >= 1,
            "workers",
            f"must be >= 1, got {self.workers}",
        )
        need(
            self.envs_per_worker >= 1,
            "envs-per-worker",
            f"must be >= 1, got {self.envs_per_worker}",
        )
        need(self.steps >= 1, "steps", f"must be >= 1, got {self.steps}")
        # numpy's SeedSequence takes no negative seed, PyTorch's none of 2**64 or more
        need(0 <= self.seed < 2**64, "seed", f"must be >= 0 and below 2**64, got {self.seed}")
        try:
            self.checkpoint_interval()
        except ValueError:
            need(
                False,
                "checkpoint-every",
                f"give seconds ('60s') or global steps ('100000'), got {self.checkpoint_every!r}",
            )
        try:
            self.time_limit_seconds()
        except ValueError:
            need(
                False,
                "time-limit",
                f"give a positive time such as '1800s', '30m' or '2h', got {self.time_limit!r}",
            )
        need(
            self.max_worker_restarts >= 0,
            "max-worker-restarts",
            f"must be >= 0, got {self.max_worker_restarts}",
        )
        need(self.worker_timeout > 0, "worker-timeout", f"must be > 0, got {self.worker_timeout}")
        need(self.max_nonfinite >= 1, "max-nonfinite", f"must be >= 1, got {self.max_nonfinite}")
        # before anything is written: the run directory is made only after the checks
        need(
            not self.track or importlib.util.find_spec("wandb") is not None,
            "track",
            'logging to Weights & Biases needs wandb: pip install "asyncrl[wandb]" (or drop '
            "--track)",
        )


@dataclass
class EnvSettings:
    """The environment."""

    env: str = "CartPole-v1"
    """Gymnasium environment id (or module:EnvId to import the module that registers it)"""
    env_kwargs: tuple[str, ...] = ()
    """KEY=VALUE arguments for gymnasium.make, values as literals (e.g. continuous=true)"""
    obs_keys: tuple[str, ...] = ()
    """the keys of a Dict observation to read (default: all), e.g. image direction

    Each key's space becomes a leaf of the network's input: an image Box through the conv
    encoder, another Box through the MLP, Discrete and MultiDiscrete one-hot, MultiBinary as
    floats. Leave out what asyncrl cannot encode, such as MiniGrid's mission text
    (docs/spaces.md)."""

    @property
    def env_kwargs_dict(self) -> dict[str, Any]:
        from asyncrl.envs import parse_env_kwargs

        return parse_env_kwargs(self.env_kwargs)

    def check(self, ctx: CheckContext) -> None:
        self.env_kwargs_dict  # noqa: B018 (raises the UserError for a malformed pair)
        # (whether the keys are the observation's own is the env's probe's check)
        if isinstance(self.obs_keys, str):  # obs_keys="image" would be read letter by letter
            need(False, "obs-keys", f"a tuple of keys, got the string {self.obs_keys!r}")
        twice = sorted({k for k in self.obs_keys if list(self.obs_keys).count(k) > 1})
        need(not twice, "obs-keys", f"{', '.join(twice)} given twice: give each key once")


@dataclass
class EvalSettings:
    """Evaluation during training, the best model kept, and the stop rule."""

    target_return: float | None = None
    """stop when the mean return reaches this (default: the env's reward threshold)"""
    window: int = 100
    """episodes in the rolling mean of the stop rule and the progress bar"""
    stop_on: Literal["eval", "train"] = "eval"
    """the stop rule: a confirmed evaluation reaching the target (eval) or the training episodes

    eval evaluates the current parameters each time the mean of the last `window` training
    episodes reaches the target, so the kept model scores the target when loaded; train stops
    on the training episodes alone (the paper's way) (docs/evaluation.md)."""
    eval_every: int | None = None
    """evaluate every this many env steps (default: a twentieth of --steps; 0: only the stop rule's)

    Evaluations run on envs of their own without stalling the workers: rows of
    evaluations.csv, and the best parameters kept as best_model.pt. The default also keeps
    their screens within a small share of the run's time (docs/evaluation.md)."""
    eval_episodes: int = 10
    """whole episodes (Atari: whole games with no-op starts) in each evaluation"""
    confirm_episodes: int = 100
    """new episodes that confirm an evaluation reaching the target (0: no confirmation)

    The confirmation counts, for the stop rule and the best model, on its mean alone: ten
    episodes are too few to tell a policy at the target from a lucky one."""
    confirm_stderr: float = 2.0
    """the stop rule asks a confirmation's mean less this many standard errors to reach the target

    A policy exactly at the target passes a plain-mean confirmation half the time, so a run
    that tries again and again would stop on a lucky one (docs/evaluation.md)."""
    rescore_episodes: int = 100
    """new episodes the kept model plays after training, for summary.json (0: none)

    The best evaluation and the stop rule's confirmation were selected for being high; these
    episodes, on starts no evaluation saw, were not: kept_model_return is their mean. Inside
    --time-limit, which training leaves them time for (docs/evaluation.md)."""
    eval_stochastic: bool = False
    """A3C, APPO: evaluate the sampled policy instead of its mode (the greedy action)"""

    def eval_interval(self, steps: int) -> int:
        """Env steps between two evaluations in a run of ``steps`` (0: only the stop rule's)."""
        return self.eval_every if self.eval_every is not None else max(1, steps // 20)

    def check(self, ctx: CheckContext) -> None:
        need(self.window >= 1, "window", f"must be >= 1, got {self.window}")
        need(
            self.eval_every is None or self.eval_every >= 0,
            "eval-every",
            f"must be >= 0 (0: only those --stop-on eval asks for), got {self.eval_every}",
        )
        need(self.eval_episodes >= 1, "eval-episodes", f"must be >= 1, got {self.eval_episodes}")
        need(
            self.confirm_episodes >= 0,
            "confirm-episodes",
            f"must be >= 0 (0: no confirmation), got {self.confirm_episodes}",
        )
        need(
            self.confirm_stderr >= 0,
            "confirm-stderr",
            f"must be >= 0 (0: the mean alone), got {self.confirm_stderr}",
        )
        need(
            self.rescore_episodes >= 0,
            "rescore-episodes",
            f"must be >= 0 (0: no re-scoring), got {self.rescore_episodes}",
        )


@dataclass
class RolloutSettings:
    """The rollout and the targets learnt from it: what every algorithm reads."""

    t_max: int = 8
    """steps per rollout before each asynchronous update (paper: 5)"""
    n_step: int | None = None
    """n-step horizon of the targets (default: t_max, the paper's forward view)"""
    missing: Literal["bootstrap", "zero"] = "bootstrap"
    """terms past the rollout: bootstrap from the value (bootstrap) or count them as 0 (zero)"""
    gamma: float = 0.99
    """discount factor"""
    reward_scale: float = 1.0
    """multiply the learning reward by this (episodes report the env's own reward)

    A small scale keeps the critic's gradient from swamping the actor's under one global
    clipping norm."""

    @property
    def horizon(self) -> int:
        return self.n_step if self.n_step is not None else self.t_max

    def check(self, ctx: CheckContext) -> None:
        need(self.t_max >= 1, "t-max", f"must be >= 1, got {self.t_max}")
        need(self.n_step is None or self.n_step >= 1, "n-step", f"must be >= 1, got {self.n_step}")
        need(0.0 < self.gamma <= 1.0, "gamma", f"must be in (0, 1], got {self.gamma}")
        need(self.reward_scale > 0, "reward-scale", f"must be > 0, got {self.reward_scale}")


@dataclass
class OptimSettings:
    """The shared optimiser, the update and the learning-rate schedule."""

    lr: float = 3e-3
    """learning rate (annealed linearly to 0 over the budget unless --lr-schedule constant)"""
    lr_schedule: Literal["linear", "constant"] = "linear"
    """learning-rate schedule over the budget (paper: linear)"""
    lr_anneal_from: float = 0.0
    """linear: the fraction of the budget over which the rate holds before it falls to 0

    0: it falls from the first step (the paper's schedule); for a run whose early progress
    needs the full rate and whose last points need a small one."""
    lr_anneal_over: Literal["steps", "time"] = "steps"
    """linear: the budget the rate falls over: --steps, or --time-limit as well (time)

    With time the rate is the lower of the two schedules, so it reaches 0 at whichever budget
    ends the run, on a CPU of any speed."""
    optimizer: Literal["rmsprop", "adam"] = "rmsprop"
    """shared optimizer: statistics shared by all workers"""
    rms_alpha: float = 0.99
    """RMSProp decay (paper: 0.99)"""
    rms_init: float | None = None
    """RMSProp's average of squared gradients at the start: 0 (torch.optim) or 1 (TensorFlow)

    From 1 the first updates are a warm-up; from 0 with a small --eps they move every
    parameter by up to lr / sqrt(1 - rms-alpha) (default: 1 with --backend ray, whose stale
    gradients repeat those moves, and in the atari preset; 0 elsewhere)."""
    eps: float = 1e-5
    """optimizer epsilon; RMSProp puts it inside the square root as the paper does (paper: 0.1)"""
    max_grad_norm: float = 40.0
    """clip each update's gradient to this global norm; 0 disables (paper: 40)"""

    def check(self, ctx: CheckContext) -> None:
        need(self.lr > 0.0, "lr", f"must be > 0, got {self.lr}")
        need(0.0 <= self.rms_alpha < 1.0, "rms-alpha", f"must be in [0, 1), got {self.rms_alpha}")
        need(
            0.0 <= self.lr_anneal_from < 1.0,
            "lr-anneal-from",
            f"must be in [0, 1), got {self.lr_anneal_from}",
        )
        for name in ("lr_anneal_from", "lr_anneal_over"):
            need(
                getattr(self, name) == getattr(OptimSettings, name) or self.lr_schedule == "linear",
                name.replace("_", "-"),
                "applies to --lr-schedule linear only; drop it or pick --lr-schedule linear",
            )
        need(
            self.rms_init is None or self.rms_init >= 0.0,
            "rms-init",
            f"must be >= 0, got {self.rms_init}",
        )
        need(self.eps > 0.0, "eps", f"must be > 0, got {self.eps}")
        need(self.max_grad_norm >= 0.0, "max-grad-norm", f"must be >= 0, got {self.max_grad_norm}")


@dataclass
class ModelSettings:
    """The network: encoder, core, heads and the observation normaliser (asyncrl.models)."""

    # (no annotation: a class attribute, not an option) the options of asyncrl's own encoders,
    # which an encoder of the user's own (--encoder) replaces, and the fix for each:
    # asyncrl.config's table refuses them beside --encoder
    BUILT_IN_ONLY = (
        ("net", "names asyncrl's own encoder, which --encoder replaces: drop --net or --encoder"),
        ("hidden", "sizes asyncrl's MLP encoder, which --encoder replaces: drop --hidden"),
        (
            "normalize_obs",
            "normalises the input of asyncrl's own encoders; --encoder's gets the observations "
            "as the env gives them: drop --normalize-obs (normalise inside your encoder)",
        ),
        (
            "precision",
            "sets the arithmetic of asyncrl's conv encoders; --encoder's runs as it is "
            "written: drop --precision",
        ),
    )

    net: Literal["auto", "mlp", "a3c", "nature", "minatar"] = "auto"
    """encoder: mlp, or for images the A3C paper's conv net, the Nature DQN's or MinAtar's

    auto picks from the observation space (docs/architecture.md)."""
    encoder: str | None = None
    """your own encoder in place of --net's: package.module:Class (docs/spaces.md)

    An nn.Module built as Class(observation_space, **encoder_kwargs), with an int attribute
    features_dim; forward(obs) takes the observations as the env gives them, a leading batch
    axis on each tensor (a dict of tensors for a Dict space, a tuple for a Tuple), and returns
    (B, features_dim) float32. The core and the heads follow it; its parameters are shared and
    learnt as asyncrl's own. It replaces the encoder --net, --hidden, --normalize-obs and
    --precision configure, so they stay at their defaults. In Python, asyncrl.train takes the
    class itself (encoder=MyEncoder) and records its import path: every process imports it
    from there (a class of the script itself, __main__, on the threads backend only)."""
    encoder_kwargs: tuple[str, ...] = ()
    """--encoder: KEY=VALUE keyword arguments for its class, values as literals (e.g. width=64)"""
    hidden: tuple[int, ...] | None = None
    """hidden layer sizes of the MLP (default: 64 64 for A3C and APPO, 128 128 for the Q methods)"""
    shared_trunk: bool | None = None
    """A3C, APPO: actor and critic share the encoder (default: for images and recurrent cores)"""
    core: CoreName = "none"
    """the core between the encoder and the heads: none (feed-forward), lstm or gru"""
    lstm_size: int | None = None
    """cells of the recurrent core, LSTM or GRU (default: 256 for images, 128 otherwise)"""
    prev_action_reward: bool = False
    """the recurrent core also takes the previous action and reward (IMPALA's, R2D2's agents)"""
    normalize_obs: bool = False
    """normalise vector observations by running statistics shared by all workers

    Saved with the model and applied (frozen) at evaluation."""
    obs_clip: float = 10.0
    """with --normalize-obs: clip normalised observations to +-this"""
    gaussian_std: Literal["param", "softplus"] | None = None
    """Box actions: the Gaussian's std a free parameter (param, default) or a softplus head"""
    log_std_init: float | None = None
    """Box actions with --gaussian-std param: the log-std the policy starts from (default: 0)"""
    squash: bool = False
    """Box actions: squash Gaussian samples into the bounds with tanh instead of clipping them"""
    precision: Literal["auto", "float32", "bfloat16"] = "float32"
    """the conv encoder's arithmetic; auto: bfloat16 where the CPU has AMX or AVX-512 BF16 units

    bfloat16 runs the conv layers under CPU autocast (parameters, gradients, the optimizer,
    the heads and the losses stay float32); the speed-up is measured in docs/atari.md#bfloat16."""

    def check(self, ctx: CheckContext) -> None:
        need(
            self.hidden is None or (len(self.hidden) >= 1 and all(h >= 1 for h in self.hidden)),
            "hidden",
            f"give one or more positive layer sizes, got {self.hidden}",
        )
        need(
            self.lstm_size is None or self.lstm_size >= 1,
            "lstm-size",
            f"must be >= 1, got {self.lstm_size}",
        )
        need(self.obs_clip > 0, "obs-clip", f"must be > 0, got {self.obs_clip}")
        # (a class given in Python, asyncrl.preset(encoder=MyEncoder), becomes its import path
        # in asyncrl.train, which tries it: asyncrl.models.user)
        if self.encoder is not None and not isinstance(self.encoder, type):
            module, sep, qual = str(self.encoder).partition(":")
            need(
                isinstance(self.encoder, str) and bool(sep and module and qual),
                "encoder",
                f"give package.module:Class, got {self.encoder!r}",
            )
        if self.encoder_kwargs:
            from asyncrl.envs import parse_env_kwargs

            need(self.encoder is not None, "encoder-kwargs", "add --encoder, or drop them")
            parse_env_kwargs(self.encoder_kwargs, "--encoder-kwargs")


@dataclass
class RaySettings:
    """The Ray backend: the cluster, the parameter server and its calls (docs/ray.md)."""

    address: str | None = None
    """ray: a running cluster to join (default: $RAY_ADDRESS, else a new one on loopback)"""
    max_staleness: int | None = None
    """ray: drop gradients computed from parameters more than this many versions old"""
    ray_batch: int | None = None
    """ray: rollouts whose gradients travel in one call (default: 8; APPO 1, a call a minibatch)"""
    ray_servers: int = 1
    """ray: parameter-server actors, each holding a slice of the parameters and statistics"""
    ray_pipeline: int | None = None
    """ray: calls left in flight while the worker collects, 0 or 1 (default: 1; APPO 0)"""
    ray_grad_dtype: Literal["float32", "bfloat16"] = "float32"
    """ray: the precision gradients travel in; bfloat16 halves the bytes"""

    def ray_tuning(self, algo: str) -> tuple[int, int]:
        """``(ray_batch, ray_pipeline)`` as a Ray run of ``algo`` uses them: as given, else the
        algorithm's. APPO's: each minibatch's gradient goes to the server alone and the
        worker waits for the parameters it produced, so the next minibatch is taken at them
        (as on shared memory); a batch of 8 with a call in flight left minibatches taken at
        one stale copy, the ratio near 1 and nothing clipped (docs/ray.md#appo-on-ray). The
        others: 8 rollouts a call, one call in flight (docs/ray.md)."""
        batch, pipeline = (1, 0) if algo == "appo" else (8, 1)
        return (
            batch if self.ray_batch is None else self.ray_batch,
            pipeline if self.ray_pipeline is None else self.ray_pipeline,
        )

    def check(self, ctx: CheckContext) -> None:
        need(
            self.max_staleness is None or self.max_staleness >= 0,
            "max-staleness",
            f"must be >= 0, got {self.max_staleness}",
        )
        need(
            self.ray_batch is None or self.ray_batch >= 1,
            "ray-batch",
            f"must be >= 1, got {self.ray_batch}",
        )
        need(self.ray_servers >= 1, "ray-servers", f"must be >= 1, got {self.ray_servers}")
        need(
            self.ray_pipeline in (None, 0, 1),
            "ray-pipeline",
            f"must be 0 or 1, got {self.ray_pipeline}",
        )
