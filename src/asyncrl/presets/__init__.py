"""The presets, as data: one TOML file each in this folder, and ``rules.toml``, which preset an
env gets when the user names none (docs/configuration.md).

A preset file has a ``description``, its ``[settings]`` (every algorithm's: a value that does
not apply to the run's algorithm, backend, core or action space is left out by the
applicability table, :data:`asyncrl.config.APPLIES`) and its layers for APPO: with
``--algo appo`` (the preset's own or the user's), ``appo.toml``'s settings and then the
preset's ``[appo]`` table come on top; with a recurrent core its ``[appo-recurrent]``, else
with ``--time-limit`` (and none of the table's options given) its ``[appo-time-limit]``.
TOML: typed values (numbers, booleans, lists), comments for each value's reason, and a reader
in the standard library (Python 3.11).

``{ frames = N }`` is a count in emulator frames, the paper's unit (:class:`Frames`).
"""

from __future__ import annotations

import sys
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from asyncrl.config import Config, reset_misfits
from asyncrl.errors import UserError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

if TYPE_CHECKING:
    from asyncrl.envs import EnvInfo


class Frames(int):
    """A count a preset gives in emulator frames, the paper's unit: :func:`preset` turns it
    into agent steps of the run's env (a quarter as many on Atari, where each action is
    repeated for 4 frames; as many elsewhere)."""


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


#: the layers a preset file may hold beside its settings
LAYERS = ("appo", "appo-recurrent", "appo-time-limit")


def _read(name: str) -> dict[str, Any]:
    try:
        text = resources.files(__name__).joinpath(f"{name}.toml").read_text()
    except FileNotFoundError:
        raise UserError(
            f"--preset: unknown preset {name!r}, choose one of {', '.join(PRESETS)}"
        ) from None
    return tomllib.loads(text)


def _values(table: dict[str, Any]) -> dict[str, Any]:
    """A preset table's values as the config takes them (lists as tuples, frames as
    :class:`Frames`)."""
    out: dict[str, Any] = {}
    for k, v in table.items():
        if isinstance(v, dict) and set(v) == {"frames"}:
            v = Frames(v["frames"])
        elif isinstance(v, list):
            v = tuple(v)
        out[k] = v
    return out


@cache
def load(name: str) -> dict[str, dict[str, Any]]:
    """The preset ``name``: ``{"settings": ..., "appo": ..., "appo-recurrent": ...,
    "appo-time-limit": ...}``, each a dict of option values, and its ``description``."""
    data = _read(name)
    out = {part: _values(data.get(part, {})) for part in ("settings", *LAYERS)}
    out["description"] = {"text": data.get("description", "")}
    return out


def _names() -> tuple[str, ...]:
    files = resources.files(__name__).iterdir()
    names = sorted(f.name[:-5] for f in files if f.name.endswith(".toml"))
    return tuple(n for n in names if n not in ("rules", "appo"))


PRESETS = _names()


@cache
def rules() -> list[dict[str, Any]]:
    """``rules.toml``'s rules, in order."""
    return tomllib.loads(resources.files(__name__).joinpath("rules.toml").read_text())["rule"]


def layers(name: str, algo: str, core: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The preset ``name``'s values for a run of ``algo`` with ``core``: its settings, and for
    APPO its layers (``overrides``: the user's options; a time-limit layer applies whole only
    where the user gave none of its options)."""
    p = load(name)
    values = dict(p["settings"])
    if algo == "appo":
        values |= load("appo")["settings"] | p["appo"]
        if core != "none":
            values |= p["appo-recurrent"]
        elif overrides.get("time_limit") is not None:
            timed = p["appo-time-limit"]
            if not overrides.keys() & timed.keys():  # a schedule of the user's wins whole
                values |= timed
    return values


def auto_preset(env: str, env_kwargs: tuple[str, ...] = (), obs_keys: tuple[str, ...] = ()) -> str:
    """The preset an env id selects when the user names none (``rules.toml``). Where the id
    does not tell, the action space does, and this probes the env. A caller that goes on to
    train probes it itself, once (:func:`asyncrl.envs.probe_env`), and hands the probe, which
    names the same preset, to :func:`preset` and :func:`asyncrl.train`."""
    plain = env.rpartition(":")[2]
    if plain.startswith("MinAtar/"):
        return "minatar"
    from asyncrl.envs import env_spec, parse_env_kwargs, preset_for, probe_env

    try:
        name = preset_for(env_spec(env))
        return name or probe_env(env, parse_env_kwargs(env_kwargs), tuple(obs_keys)).preset
    except Exception:  # an unknown or broken env: train reports it properly
        return "cartpole"


def preset(name: str | None, *, info: EnvInfo | None = None, **overrides: Any) -> Config:
    """A :class:`Config` from a named preset with ``overrides`` applied; ``None`` picks the
    preset the env calls for: the one ``info`` names (the env's probe, which then need not be
    made again: :func:`asyncrl.envs.probe_env`), else :func:`auto_preset`'s. A preset's value
    that does not fit the run (another algorithm's, a Gaussian's for discrete actions: the
    applicability table) is left out; the user's own are kept, for validation to refuse."""
    named = name is not None
    if name is None:
        env = overrides.get("env", Config.env)
        if info is None:
            name = auto_preset(env, overrides.get("env_kwargs", ()), overrides.get("obs_keys", ()))
        else:
            from asyncrl.envs import parse_env_kwargs, probed

            kwargs = parse_env_kwargs(overrides.get("env_kwargs", ()))
            name = probed(info, env, kwargs, tuple(overrides.get("obs_keys", ()))).preset
    if name not in PRESETS:
        raise UserError(f"--preset: unknown preset {name!r}, choose one of {', '.join(PRESETS)}")
    settings = load(name)["settings"]
    algo = overrides.get("algo", settings.get("algo", Config.algo))
    core = overrides.get("core", settings.get("core", Config.core))
    values = layers(name, algo, core, overrides)
    # a preset named for an env it was not made for (the env's own is picked from its spec:
    # no probe, no install needed to pick it)
    gaussian = {"gaussian_std", "log_std_init"}
    if named and info is None and "env" in overrides and values.keys() & gaussian:
        from asyncrl.envs import parse_env_kwargs, probe_env

        info = probe_env(
            overrides["env"],
            parse_env_kwargs(overrides.get("env_kwargs", ())),
            tuple(overrides.get("obs_keys", ())),
        )
    # a count the preset gives in frames becomes agent steps of this env; the user's are steps
    env = overrides.get("env", Config.env)
    values = {
        k: max(1, round(int(v) / _frames_per_step(env))) if isinstance(v, Frames) else v
        for k, v in values.items()
    }
    cfg = Config(**{**values, **overrides})
    return reset_misfits(cfg, overrides.keys(), None if info is None else info.action.kind)


def describe(name: str) -> str:
    """A preset's one-line description."""
    return str(load(name)["description"]["text"])


__all__ = ["LAYERS", "PRESETS", "auto_preset", "describe", "layers", "load", "preset", "rules"]
