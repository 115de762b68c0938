"""A tune's search space, as data: a TOML file that names options of ``asyncrl train`` (by
their config names, ``t_max`` or ``t-max``) and the values to try for each::

    lr = { type = "float", low = 1e-4, high = 1e-2, log = true }
    t_max = { choices = [5, 8, 16, 32] }
    target_update = { type = "int", low = 500, high = 20000, log = true }
    gae_lambda = { choices = ["none", 0.95, 1.0] }   # "none": the option unset (n-step here)
    hidden = { choices = [[64, 64], [128, 128]] }

A ``float`` or ``int`` range samples uniformly, or log-uniformly with ``log = true``, on a grid
of ``step`` where given (Optuna's ``suggest_float`` and ``suggest_int``); ``choices`` is a list
(``suggest_categorical``). The package ships a space for each algorithm family and for the
presets that need their own ranges (``spaces/``, chosen by ``spaces/rules.toml``).

A space is checked against the run before anything is written: an unknown option, an option the
tune owns (the budget, the seed, the stop rule), a value of the wrong type, and an option the
run's algorithm, core or action space does not read (:data:`asyncrl.config.APPLIES`) are each
refused with one line. An option that applies only with another's sampled value (``rho_bar``
with ``vtrace = { choices = [true, false] }``) is accepted, and goes back to its default in the
trials that sample the other way, as a preset's value does (:func:`asyncrl.config.reset_misfits`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import sys
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from asyncrl.config import Config, field_default, field_hints, misfits, reset_misfits
from asyncrl.configfile import _checked, check_option_name
from asyncrl.errors import UserError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: options a space may not hold, and why: the tune sets them itself (each trial's budget, seed
#: and directory), or they define the objective the trials are compared by
NOT_TUNED = {
    "env": "the tune searches one env: give it to asyncrl tune (--env)",
    "env_kwargs": "the tune searches one env: give them after -- (--env-kwargs)",
    "algo": "the tune searches one algorithm's settings: give --algo after --",
    "steps": "it is each trial's budget: give asyncrl tune --steps",
    "time_limit": "it is each trial's budget: give asyncrl tune --time-limit",
    "seed": "the trials run on --seeds seeds of their own",
    "run_dir": "each trial has a directory of its own under the tune's",
    "target_return": "it is the objective's target: give it after -- (--target-return)",
    "stop_on": "it is the stop rule the objective counts steps to: give it after --",
    "window": "it is the stop rule the objective counts steps to: give it after --",
    "confirm_episodes": "it is the stop rule the objective counts steps to: give it after --",
    "confirm_stderr": "it is the stop rule the objective counts steps to: give it after --",
    "eval_every": "the trials are compared on their evaluations: give it after --",
    "eval_episodes": "the trials are compared on their evaluations: give it after --",
    "eval_stochastic": "the trials are compared on their evaluations: give it after --",
    "checkpoint_every": "it changes no learning: give it after --",
    "progress": "it changes no learning: give it after --",
    "tensorboard": "it changes no learning: give it after --",
}

#: the keys a dimension's table may hold
_KEYS = {"type", "low", "high", "log", "step", "choices"}


@dataclass(frozen=True)
class Dimension:
    """One option of a space: a range (``float``, ``int``) or a list of ``choices``, in the
    config's own values (None for "none", tuples for lists)."""

    name: str
    kind: str  # "float", "int" or "choice"
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] = ()
    as_float: bool = False  # an int range of a float option (its values given as floats)

    def suggest(self, trial: Any) -> Any:
        """This option's value for an Optuna trial."""
        if self.kind == "float":
            return trial.suggest_float(self.name, self.low, self.high, log=self.log, step=self.step)
        if self.kind == "int":
            step = 1 if self.step is None else int(self.step)
            x = trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log, step=step)
            return float(x) if self.as_float else x
        return self.decode(trial.suggest_categorical(self.name, [_encode(c) for c in self.choices]))

    def decode(self, raw: Any) -> Any:
        """An Optuna parameter's value as the config takes it."""
        if self.kind == "choice":
            return tuple(json.loads(raw)) if isinstance(raw, str) and _is_list(raw) else raw
        return int(raw) if self.kind == "int" and not self.as_float else float(raw)

    def encode(self, value: Any) -> tuple[bool, Any]:
        """``(True, the Optuna parameter)`` for a value of the config this dimension holds,
        ``(False, None)`` for one outside it."""
        if self.kind == "choice":
            return (value in self.choices), _encode(value)
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            return False, None
        inside = self.low <= value <= self.high and (self.kind == "float" or value == int(value))
        if inside and self.step is not None:
            inside = math.isclose((value - self.low) / self.step % 1.0, 0.0, abs_tol=1e-9)
        return inside, value

    def corners(self) -> tuple[Any, ...]:
        """The values the checks try: every choice, or a range's ends."""
        if self.kind == "choice":
            return self.choices
        ends = (self.low, self.high)
        return tuple(int(x) for x in ends) if self.kind == "int" and not self.as_float else ends

    def describe(self) -> str:
        if self.kind == "choice":
            return "{" + ", ".join(_show(c) for c in self.choices) + "}"
        scale = ", log" if self.log else ""
        step = f", step {_show(self.step)}" if self.step is not None else ""
        return f"[{_show(self.low)}, {_show(self.high)}{scale}{step}]"


def _encode(value: Any) -> Any:
    """A choice as Optuna stores it: a scalar as it is, a list as JSON text."""
    return json.dumps(list(value)) if isinstance(value, tuple) else value


def _is_list(raw: str) -> bool:
    return raw.startswith("[") and raw.endswith("]")


def _show(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, tuple):
        return "[" + ", ".join(_show(x) for x in v) + "]"
    return json.dumps(v) if isinstance(v, str) else str(v)


@dataclass(frozen=True)
class Space:
    """A parsed search space: its dimensions, where it came from, and its text (kept with the
    study, so that ``--resume`` searches the same space)."""

    dims: tuple[Dimension, ...]
    source: str
    text: str

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dims)

    def sample(self, trial: Any) -> dict[str, Any]:
        """A setting drawn for an Optuna trial: option -> value, as the config takes it."""
        return {d.name: d.suggest(trial) for d in self.dims}

    def decode(self, params: dict[str, Any]) -> dict[str, Any]:
        """An Optuna trial's parameters as config values."""
        return {d.name: d.decode(params[d.name]) for d in self.dims if d.name in params}

    def encode(self, cfg: Config) -> dict[str, Any]:
        """The parameters of ``cfg``'s own values, for those the space holds: the trial that
        tries the run's setting as it is (a preset's)."""
        out = {}
        for d in self.dims:
            inside, raw = d.encode(getattr(cfg, d.name))
            if inside:
                out[d.name] = raw
        return out

    def config(self, fixed: Config, values: dict[str, Any], action_kind: str | None) -> Config:
        """The run's config with ``values`` over ``fixed``: a value that does not apply where
        the others put it (``rho_bar`` without V-trace) back at its default, then validated.
        :class:`UserError` where the setting is not valid."""
        keep = {f.name for f in dataclasses.fields(Config)} - set(self.names)
        cfg = reset_misfits(dataclasses.replace(fixed, **values), keep, action_kind)
        return cfg.validate()

    def check(self, fixed: Config, action_kind: str | None, seed: int = 0) -> Space:
        """Refuse, with one line, a value of the space that no trial could run: one that the
        run's algorithm, backend, core or action space does not read, or that the config's
        checks refuse, whatever the space's other options take. Each value is tried with the
        others at their choices or a range's ends, a few hundred draws at most."""
        rng = random.Random(seed)
        for d in self.dims:
            for value in d.corners():
                fault = None
                for tries in range(64):
                    others = {e.name: rng.choice(e.corners()) for e in self.dims if e is not d}
                    if tries == 0:  # first with the others at the run's own values
                        others = {k: getattr(fixed, k) for k in others}
                    fault = self._fault(fixed, d, value, others, action_kind)
                    if fault is None:
                        break
                if fault is not None:
                    raise UserError(f"--space {self.source}: {d.name} = {_show(value)}: {fault}")
        return self

    def _fault(
        self,
        fixed: Config,
        d: Dimension,
        value: Any,
        others: dict[str, Any],
        action_kind: str | None,
    ) -> str | None:
        """What is wrong with ``d = value`` where the other options take ``others``, or None."""
        flag = "--" + d.name.replace("_", "-")
        try:
            cfg = self.config(fixed, {**others, d.name: value}, action_kind)
        except UserError as e:
            return _reworded(str(e), flag)
        if getattr(cfg, d.name) != value:  # put back at its default: not read here
            fault = misfits(dataclasses.replace(cfg, **{d.name: value}), action_kind).get(d.name)
            return _reworded(fault or "the run does not read it: drop it from the space", flag)
        return None


def _reworded(fault: str, flag: str) -> str:
    """A config check's line about one option, as said of the space's value."""
    for prefix in (f"{flag}: ", f"--no-{flag[2:]}: "):
        fault = fault.removeprefix(prefix)
    return fault.replace(f"drop {flag}", "drop it from the space")


def parse_space(text: str, source: str) -> Space:
    """A space from its TOML text; :class:`UserError` names the option and the fix."""
    where = f"--space {source}"
    try:
        data = tomllib.loads(text)
    except ValueError as e:
        raise UserError(f"{where}: not a readable TOML file ({e})") from None
    dims = []
    for key, spec in data.items():
        name = key.replace("-", "_")
        check_option_name(where, key, name)
        if name in NOT_TUNED:
            raise UserError(f"{where}: {key}: not searched by a tune ({NOT_TUNED[name]})")
        if not isinstance(spec, dict):
            raise UserError(
                f"{where}: {key}: give a table, e.g. {key} = {{ choices = [...] }} or "
                f'{key} = {{ type = "float", low = 0.1, high = 1.0 }}'
            )
        dims.append(_dimension(where, key, name, spec))
    if not dims:
        raise UserError(f"{where}: the space names no option; add one, e.g. lr = {{ ... }}")
    return Space(tuple(dims), source, text)


def _dimension(where: str, key: str, name: str, spec: dict[str, Any]) -> Dimension:
    extra = sorted(set(spec) - _KEYS)
    if extra:
        raise UserError(
            f"{where}: {key}: unknown key {extra[0]!r}; a dimension has choices, or type, "
            "low, high and optionally log and step"
        )
    hint, optional = field_hints()[name]
    if "choices" in spec:
        if set(spec) - {"choices"}:
            raise UserError(f"{where}: {key}: choices is a dimension alone: drop the other keys")
        choices = spec["choices"]
        if not isinstance(choices, list) or not choices:
            raise UserError(f"{where}: {key}: choices must be a list of one or more values")
        none_ok = optional or field_default(name) is None
        values = tuple(
            None if c == "none" and none_ok else _checked(where, key, name, c) for c in choices
        )
        if len(set(map(_encode, values))) < len(values):
            raise UserError(f"{where}: {key}: a choice is listed twice; list each once")
        return Dimension(name, "choice", choices=values)
    kind = spec.get("type")
    if kind not in ("float", "int"):
        raise UserError(
            f'{where}: {key}: give type = "float" or "int" with low and high, or choices = [...]'
        )
    if hint is not float and not (kind == "int" and hint is int):
        what = 'a whole number: use type = "int"' if hint is int else "not a number"
        raise UserError(f"{where}: {key}: {name} is {what} (or give choices = [...])")
    whole = kind == "int"
    bounds = []
    for b in ("low", "high"):
        v = spec.get(b)
        x = float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan
        if not math.isfinite(x) or (whole and not x.is_integer()):
            what = "a whole number" if whole else "a finite number"
            raise UserError(f"{where}: {key}: {b} must be {what}, got {v!r}")
        bounds.append(x)
    low, high = bounds
    if not low < high:
        raise UserError(
            f"{where}: {key}: low must be below high, got {_show(low)} and {_show(high)}"
        )
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise UserError(f"{where}: {key}: log must be true or false, got {log!r}")
    if log and low <= 0:
        raise UserError(f"{where}: {key}: a log scale needs low > 0, got {_show(low)}")
    step = spec.get("step")
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, int | float) or not step > 0:
            raise UserError(f"{where}: {key}: step must be a number > 0, got {step!r}")
        if whole and not float(step).is_integer():
            raise UserError(f"{where}: {key}: an int range's step must be whole, got {step!r}")
        if log:
            raise UserError(f"{where}: {key}: a range has log or step, not both: drop one")
        step = float(step)
    return Dimension(name, kind, low=low, high=high, log=log, step=step, as_float=hint is float)


def read_space(path: str | Path) -> Space:
    """A space file of the user's (``--space FILE``)."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"--space {p}: no such file; give the path of a TOML search space")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"--space {p}: cannot read it ({e})") from None
    return parse_space(text, str(p))


@cache
def _rules() -> list[dict[str, Any]]:
    text = resources.files(__package__).joinpath("spaces", "rules.toml").read_text()
    return tomllib.loads(text)["rule"]


def default_space_name(preset: str, algo: str) -> str:
    """The file of ``spaces/`` that a tune of ``algo`` under ``preset`` searches where no
    ``--space`` is given: the first rule of ``spaces/rules.toml`` that matches."""
    for rule in _rules():
        if algo in rule["algos"] and preset in rule.get("presets", [preset]):
            return str(rule["space"])
    raise UserError(f"no default search space for {algo}; give one with --space FILE")


def default_space(preset: str, algo: str) -> Space:
    """The space shipped for a preset and algorithm (:func:`default_space_name`)."""
    name = default_space_name(preset, algo)
    text = resources.files(__package__).joinpath("spaces", name).read_text()
    return parse_space(text, f"{name} (the default for {algo} under the {preset} preset)")


def shipped_spaces() -> list[str]:
    """The space files the package ships."""
    files = resources.files(__package__).joinpath("spaces").iterdir()
    return sorted(f.name for f in files if f.name.endswith(".toml") and f.name != "rules.toml")


def describe(space: Space, values: dict[str, Any]) -> str:
    """A setting as ``name=value`` pairs in the space's order."""
    return " ".join(f"{k}={_show(values[k])}" for k in space.names if k in values)


__all__ = [
    "NOT_TUNED",
    "Dimension",
    "Space",
    "default_space",
    "default_space_name",
    "describe",
    "parse_space",
    "read_space",
    "shipped_spaces",
]
