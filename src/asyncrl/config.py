"""The run configuration: the sections (:mod:`asyncrl.settings`, :mod:`asyncrl.algos.settings`)
assembled into one typed object, validated once, and the one table of which option applies
where. The main process reads it; every other room receives its own section
(:meth:`Config.section`) or plain arguments. The CLI and configuration files are generated
from the sections' fields (:mod:`asyncrl.cli`, :mod:`asyncrl.configfile`); the presets are data
(:mod:`asyncrl.presets`)."""

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
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from asyncrl.algos.settings import (
    ACTION_KINDS,
    ALGOS,
    SECTIONS,
    AlgoSettings,
    APPOSettings,
    OneStepSettings,
    PolicyGradientSettings,
    QSettings,
)
from asyncrl.errors import UserError
from asyncrl.settings import (
    CheckContext,
    EnvSettings,
    EvalSettings,
    ModelSettings,
    OptimSettings,
    RaySettings,
    Resumed,
    RolloutSettings,
    RunSettings,
    need,
)

if TYPE_CHECKING:
    from asyncrl.envs import EnvInfo

S = TypeVar("S")


#: the sections by name, in the order the CLI's help and the files written show them
GROUPS: dict[str, type] = dict(
    run=RunSettings, env=EnvSettings, evaluation=EvalSettings, rollout=RolloutSettings,
    optimizer=OptimSettings, model=ModelSettings, ray=RaySettings,
    a3c=PolicyGradientSettings, appo=APPOSettings, q=QSettings, onestep=OneStepSettings,
)  # fmt: skip


@dataclass
class Config(
    RunSettings,
    EnvSettings,
    EvalSettings,
    OptimSettings,
    ModelSettings,
    RaySettings,
    AlgoSettings,
):
    """A training run: every section's fields in one namespace (``cfg.lr``, ``--lr``). Defaults
    are the tuned CartPole preset; ``--preset paper`` gives the paper's hyper-parameters (Mnih
    et al., 2016, Section 8 of the supplement)."""

    def section(self, cls: type[S]) -> S:
        """A copy of the section ``cls``'s fields: what the room that reads them receives."""
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        return cls(**{f.name: getattr(self, f.name) for f in fields if hasattr(self, f.name)})

    @property
    def lr_from(self) -> Resumed | None:
        """Where a resumed run took up its schedule: run state, which the sections that apply
        or log the rate carry (:class:`BackendSection`, :class:`MonitorSection`), not a setting."""
        return None

    def backend_section(self) -> BackendSection:
        """What a backend receives: its own options, and what it hands its workers, their
        store and the parameter server, the algorithm's section among them."""
        out = self.section(BackendSection)
        out.algorithm = self.algo_settings()
        return out

    def algo_settings(self) -> RolloutSettings:
        """This run's algorithm's section, its defaults settled: what the algorithm (and each
        worker) receives."""
        s = self.section(SECTIONS[self.algo])
        if isinstance(s, PolicyGradientSettings) and s.entropy_anneal_steps is None:
            s.entropy_anneal_steps = self.steps  # an annealing ends at the budget by default
        return s

    def entropy_coef_at(self, global_step: int, budget: int | None = None) -> float:
        return super().entropy_coef_at(global_step, self.steps if budget is None else budget)

    def validate(self) -> Config:
        """Raise :class:`UserError` naming the first invalid field and how to fix it: the
        values themselves (choices, finite numbers), each section's own checks, the checks
        across sections, then the applicability table (after the range checks, so that a
        value out of range is reported as that)."""
        self._check_values()
        ctx = CheckContext(self.algo, self.core, self.envs_per_worker, self.steps)
        for cls in _sections():
            check = vars(cls).get("check")
            if check is not None:
                check(self, ctx)
        self._check_across()
        for name, fault in misfits(self).items():
            # (a boolean option set False was given as --no-NAME)
            flag = f"no-{_flag(name)}" if getattr(self, name) is False else _flag(name)
            raise UserError(f"--{flag}: {fault}")
        return self

    def _check_values(self) -> None:
        """Every choice one of its choices; every number a finite number (NaN passes a range
        check, and a stop rule at --target-return nan never fires; inf passes a lower bound)."""
        for name, (choices, optional) in _choice_fields().items():
            value = getattr(self, name)
            need(
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
                    need(
                        isinstance(x, numbers.Integral) and not isinstance(x, bool),
                        _flag(name),
                        f"must be a whole number, got {value!r}",
                    )
                else:
                    need(
                        isinstance(x, numbers.Real) and not isinstance(x, bool),
                        _flag(name),
                        f"must be a number, got {value!r}",
                    )
                    need(math.isfinite(x), _flag(name), f"must be a finite number, got {value!r}")

    def _check_across(self) -> None:
        """The rules that read two sections."""
        one_step = self.algo in ("onestep-q", "onestep-sarsa")
        need(
            not (one_step and self.missing == "zero"),
            "missing",
            f"{self.algo} bootstraps every transition from the next state; 'zero' would drop "
            "the bootstrap of each rollout's last transition (learning from r alone there): "
            "drop --missing zero",
        )
        need(
            self.n_step is None or not (one_step or self.gae_lambda is not None),
            "n-step",
            f"{'GAE' if self.gae_lambda is not None else self.algo} has no n-step horizon "
            f"({'lambda sets it' if self.gae_lambda is not None else 'it is one step'}); "
            "drop --n-step",
        )
        need(
            self.lr_anneal_over == "steps" or self.time_limit is not None,
            "lr-anneal-over",
            "time needs the time budget to fall over: add --time-limit (e.g. 60m)",
        )
        need(
            self.core == "none" or self.algo != "onestep-sarsa",
            "core",
            f"one-step Sarsa has no {self.core.upper()} core (its next action is drawn a step "
            "ahead of the recurrent state): use a3c, appo, nstep-q or onestep-q, or drop "
            f"--core {self.core}",
        )

    def check_env(self, info: EnvInfo) -> Config:
        """Raise :class:`UserError` where the config does not fit the env's probe: the
        algorithm must take its action space, and the observation and action options must fit
        its spaces. Imports no PyTorch."""
        kinds = ACTION_KINDS[self.algo]
        if info.action.kind not in kinds:
            takers = [a for a, k in ACTION_KINDS.items() if info.action.kind in k]
            want = " or ".join(k.capitalize() for k in kinds)
            raise UserError(
                f"--env: {info.env_id} has a {info.action.describe()} action space, but "
                f"{self.algo} needs a {want} one; use --algo {' / '.join(takers)}, or an env "
                f"with {want} actions"
            )
        need(
            not self.normalize_obs or info.has_vectors(self.net),
            "normalize-obs",
            f"{info.env_id} has {info.describe_obs()} observations; normalisation is for vector "
            "observations (images are scaled by 1/255 in the network)",
        )
        need(
            not self.squash or info.action.kind == "box",
            "squash",
            f"{info.env_id} has {info.action.describe()} actions; squashing is for Box actions "
            "(drop --squash)",
        )
        # (the range in float32, as the env gets the actions: 3.4e38 and more overflows)
        spans = [h - lo for lo, h in zip(info.action.low, info.action.high, strict=True)]
        need(
            not self.squash or all(math.isfinite(d) and d < 3.4e38 for d in spans),
            "squash",
            f"{info.env_id}'s action bounds are not all finite (or span more than float32 "
            "holds); tanh squashes onto finite bounds only (drop --squash: actions are then "
            "clipped to the bounds)",
        )
        for name in misfits(self, info.action.kind):
            if name in BOX_ONLY:
                raise UserError(
                    f"--{_flag(name)}: {info.env_id} has {info.action.describe()} actions; "
                    f"--{_flag(name)} {getattr(self, name)} would shape a Gaussian policy of Box "
                    f"actions: drop --{_flag(name)} (a preset for Box actions sets it where not "
                    "given the env)"
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
        for name, (hint, _) in field_hints().items():
            if typing.get_origin(hint) is tuple and d.get(name) is not None:
                try:
                    d[name] = tuple(d[name])
                except TypeError:
                    raise UserError(f"config field {name}: a list, not {d[name]!r}") from None
        return cls(**d)


# ------------------------------------------------------------------ what each room receives


@dataclass
class SupervisorSection(RunSettings, EvalSettings):
    """The supervisor's: the run's budgets, checkpoints and fault limits, and the evaluations'
    schedule and the stop rule."""


@dataclass
class MonitorSection(RunSettings, EvalSettings, OptimSettings, PolicyGradientSettings):
    """The monitor's: the stop rule's window, the outputs, and the schedules it logs."""

    lr_from: Resumed | None = None


@dataclass
class BackendSection(RunSettings, EnvSettings, OptimSettings, RaySettings, QSettings):
    """A backend's (:meth:`Config.backend_section`)."""

    algorithm: RolloutSettings | None = None
    lr_from: Resumed | None = None

    def algo_settings(self) -> RolloutSettings:
        assert self.algorithm is not None  # (set by Config.backend_section)
        return self.algorithm


# ------------------------------------------------------------------ the applicability table


def _flag(name: str) -> str:
    return name.replace("_", "-")


@dataclass(frozen=True)
class Rule:
    """Where an option fits: ``fits(cfg, action_kind)`` (action_kind None: not yet known), and
    the fix to name where it does not."""

    fits: Callable[[Config, str | None], bool]
    fix: Callable[[Config], str]


def _at_default(name: str, when: Callable[[Config, str | None], bool], fix: str) -> Rule:
    """An option read only ``when``: elsewhere it must stay at its default."""
    return Rule(
        lambda c, kind: when(c, kind) or getattr(c, name) == field_default(name), lambda c: fix
    )


def _when(name: str, when: Callable[[Config, str | None], bool], fix: str) -> tuple[str, Rule]:
    """A row of the table: the option ``name`` is read only ``when``."""
    return name, _at_default(name, when, fix)


def _ray_only(name: str, why: str) -> Rule:
    return Rule(
        lambda c, kind: c.backend == "ray" or getattr(c, name) == field_default(name),
        lambda c: (
            f"applies to --backend ray only ({why}; this run's backend is {c.backend}): "
            f"drop --{_flag(name)}, or add --backend ray"
        ),
    )


def _algorithm_rules() -> dict[str, Rule]:
    """An algorithm section's option applies to the algorithms whose section has it."""
    rules: dict[str, Rule] = {}
    own = {f.name for f in dataclasses.fields(RolloutSettings)}
    for f in dataclasses.fields(AlgoSettings):
        if f.name in own:
            continue
        readers = tuple(a for a, s in SECTIONS.items() if f.name in s.__dataclass_fields__)
        rules[f.name] = _read_by(f.name, readers)
    return rules


def _read_by(name: str, readers: tuple[str, ...]) -> Rule:
    return Rule(
        lambda c, kind: c.algo in readers or getattr(c, name) == field_default(name),
        lambda c: (
            f"{c.algo} does not read it (it applies to {', '.join(readers)}): drop --{_flag(name)}"
        ),
    )


_RAY_WHY = {
    "ray_grad_dtype": "other backends share parameters in memory",
    "address": "it names the Ray cluster to join",
    "max_staleness": "shared memory has no stale gradients to drop",
    "ray_servers": "other backends share parameters in memory",
    "ray_batch": "other backends apply each gradient in memory as it is taken",
    "ray_pipeline": "other backends make no calls to overlap",
}

#: the options only a Gaussian policy (Box actions) reads
BOX_ONLY = ("gaussian_std", "log_std_init", "bound_coef")
PG = ("a3c", "appo")

#: Which option applies to which algorithm, backend, core and action space: the one statement
#: of it, as (option, rule) pairs in the order the checks report them (an option may have
#: several). Preset resolution leaves out a preset's value that does not fit
#: (:func:`asyncrl.presets.preset`), validation refuses one given (:meth:`Config.validate`),
#: and a resumed run's saved one goes back to its default (what an older version accepted and
#: ignored: :func:`asyncrl.trainer`).
APPLIES: list[tuple[str, Rule]] = [
    _when(
        "eval_stochastic",
        lambda c, k: c.algo in PG,
        "the Q methods act greedily at evaluation (their epsilon is a training schedule, "
        "not a policy); drop --eval-stochastic",
    ),
    # V-trace's targets, as GAE's, run to the rollout's end and always bootstrap there
    _when(
        "n_step",
        lambda c, k: not c.vtrace,
        "V-trace has no n-step horizon (its traces run to the rollout's end, cut by c-bar "
        "and lambda): drop --n-step or --vtrace",
    ),
    _when(
        "missing",
        lambda c, k: not c.vtrace,
        "V-trace always bootstraps from the rollout's last value: drop --missing zero or --vtrace",
    ),
    _when(
        "rms_init",
        lambda c, k: c.optimizer == "rmsprop",
        "is RMSProp's; --optimizer adam starts its averages at 0: drop --rms-init",
    ),
    _when(
        "lstm_size",
        lambda c, k: c.core != "none",
        "sizes a recurrent core and this network has none: add --core lstm (or gru), or "
        "drop --lstm-size",
    ),
    # a recurrent core carries one state for actor and critic (the paper's LSTM agent):
    # separate networks would need two
    (
        "shared_trunk",
        Rule(
            lambda c, k: c.core == "none" or c.shared_trunk is not False,
            lambda c: (
                f"the {c.core.upper()} core is shared by actor and critic (one recurrent "
                "state for both): drop --no-shared-trunk, or --core"
            ),
        ),
    ),
    *((name, _ray_only(name, why)) for name, why in _RAY_WHY.items()),
    *(
        (
            name,
            _at_default(
                name,
                lambda c, k: k in (None, "box"),
                "shapes a Gaussian policy of Box actions, and this env's actions are not Box: "
                f"drop --{_flag(name)}",
            ),
        )
        for name in BOX_ONLY
    ),
    *_algorithm_rules().items(),
    # actor and critic: one trunk or two (a Q network is one)
    (
        "shared_trunk",
        Rule(
            lambda c, k: c.algo in PG or c.shared_trunk is None,
            lambda c: f"{c.algo} does not read it (it applies to a3c, appo): drop --shared-trunk",
        ),
    ),
    # the feed-forward net's identity core would hand the context to its linear heads, which
    # can only add a bias per action and per unit of reward, never "stay after a reward, switch
    # after none" (an XOR of the two: tests/test_learning.py's Guess env)
    _when(
        "prev_action_reward",
        lambda c, k: c.core != "none",
        "gives a recurrent core the previous action and reward (a feed-forward net's linear "
        "heads could not combine them): add --core lstm or gru, or drop --prev-action-reward",
    ),
    _when(
        "seq_len",
        lambda c, k: c.core != "none",
        "cuts a recurrent core's rollouts into sequences: add --core lstm or gru, or drop "
        "--seq-len (a feed-forward net learns from single transitions)",
    ),
    _when(
        "burn_in",
        lambda c, k: c.seq_len > 0,
        "refreshes the start state of --seq-len's pieces: add --seq-len L (and a recurrent "
        "core), or drop --burn-in",
    ),
    _when(
        "normalize_over",
        lambda c, k: c.normalize_advantage and not c.vtrace,
        "says where --normalize-advantage scales (with --vtrace: each minibatch): add "
        "--normalize-advantage, or drop --normalize-over",
    ),
    _when(
        "vtrace_pg",
        lambda c, k: c.vtrace,
        "chooses V-trace's policy term: add --vtrace, or drop --vtrace-pg",
    ),
    _when(
        "rho_bar",
        lambda c, k: c.vtrace,
        "truncates V-trace's importance weights: add --vtrace, or drop --rho-bar",
    ),
    _when(
        "c_bar",
        lambda c, k: c.vtrace,
        "truncates V-trace's importance weights: add --vtrace, or drop --c-bar",
    ),
    *(_when(n, lambda c, k: not c.encoder, f) for n, f in ModelSettings.BUILT_IN_ONLY),
    _when(
        "obs_clip",
        lambda c, k: c.normalize_obs,
        "clips normalised observations: add --normalize-obs, or drop --obs-clip",
    ),
    _when(
        "log_std_init",
        lambda c, k: c.gaussian_std != "softplus",
        "is where --gaussian-std param's log-std starts; softplus computes the std from a "
        "head: drop --log-std-init",
    ),
    _when(
        "rms_alpha",
        lambda c, k: c.optimizer == "rmsprop",
        "is RMSProp's decay; --optimizer adam has its own betas: drop --rms-alpha",
    ),
    *(
        _when(n, lambda c, k: c.track, "names --track's W&B run: add --track, or drop it")
        for n in ("wandb_project", "wandb_entity", "wandb_group")
    ),
    # (--confirm-episodes counts with --stop-on train too: a confirmation picks the best model)
    _when(
        "confirm_stderr",
        lambda c, k: c.stop_on == "eval",
        "is the stop rule's margin on a confirmed evaluation, which --stop-on train does "
        "not wait for: drop --confirm-stderr, or --stop-on train",
    ),
]


def misfits(cfg: Config, action_kind: str | None = None) -> dict[str, str]:
    """The options of ``cfg`` that do not fit where they are (:data:`APPLIES`), each with the
    fix to name, in the table's order; ``action_kind`` None: the action space not yet known."""
    out: dict[str, str] = {}
    for name, rule in APPLIES:
        if name not in out and not rule.fits(cfg, action_kind):
            out[name] = rule.fix(cfg)
    return out


def reset_misfits(cfg: Config, keep: typing.Collection[str], action_kind: str | None) -> Config:
    """``cfg`` with the options that do not fit back at their defaults, but those in ``keep``
    (the user's own, which validation then refuses). A reset can make another fit: repeat
    until nothing changes."""
    for _ in range(len(APPLIES)):
        reset = {n: field_default(n) for n in misfits(cfg, action_kind) if n not in keep}
        reset = {n: v for n, v in reset.items() if getattr(cfg, n) != v}
        if not reset:
            break
        cfg = dataclasses.replace(cfg, **reset)
    return cfg


# ------------------------------------------------------------------ fields and their docs


def field_default(name: str) -> Any:
    """The default of the :class:`Config` field ``name``."""
    return Config.__dataclass_fields__[name].default


@cache
def _sections() -> tuple[type, ...]:
    """The section classes, base first (a subclass's checks after its base's)."""
    return tuple(cls for cls in reversed(Config.__mro__) if cls is not object and cls is not Config)


@cache
def section_of() -> dict[str, str]:
    """Each field's section name (:data:`GROUPS`): the class that declares it."""
    by_class = {cls: name for name, cls in GROUPS.items()}
    out: dict[str, str] = {}
    for cls in _sections():
        for name in vars(cls).get("__annotations__", {}):
            if cls in by_class:
                out[name] = by_class[cls]
    return out


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
    """The fields with a fixed set of values, optional or not: their choices, and whether
    they may be left unset (``algo`` from the algorithms' table)."""
    out = {
        name: (typing.get_args(hint), optional)
        for name, (hint, optional) in field_hints().items()
        if typing.get_origin(hint) is Literal
    }
    return {"algo": (ALGOS, False), **out}


def choices(name: str) -> tuple[str, ...] | None:
    """The values the field ``name`` takes, where it has a fixed set."""
    found = _choice_fields().get(name)
    return None if found is None else found[0]


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


@cache
def field_docs() -> dict[str, str]:
    """The docstring under each field of every section (CleanRL style): the first line is the
    CLI's help, the whole is the reference."""
    docs: dict[str, str] = {}
    for cls in _sections():
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        body = tree.body[0].body  # type: ignore[attr-defined]
        for node, nxt in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[node.target.id] = inspect.cleandoc(nxt.value.value)
    return docs


BACKENDS: tuple[str, ...] = typing.get_args(field_hints()["backend"][0])
