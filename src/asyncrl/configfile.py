"""Configuration files: ``asyncrl train --config FILE`` reads one, a run writes one.

A file is TOML (or a run directory's ``config.json``): options by their config names, at the
top level or in tables named for their sections (``[optimizer] lr = 1e-3``; the sections are
:data:`asyncrl.config.GROUPS`). Its values override the preset's, and options on the command
line override the file's. A run writes ``config.toml`` beside ``config.json``, in sections: a
valid ``--config`` that gives the same resolved configuration again. ``run_dir`` is not read
from a file (a new run gets a directory of its own).
"""

from __future__ import annotations

import json
import math
import numbers
import sys
import typing
from pathlib import Path
from typing import Any, Literal

from asyncrl.algos.settings import SECTIONS, AlgoSettings
from asyncrl.config import GROUPS, Config, field_default, field_hints, section_of
from asyncrl.errors import UserError
from asyncrl.settings import RolloutSettings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: options a file does not carry: where this run's files go
NOT_IN_FILES = ("run_dir",)


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The options a configuration file gives, checked one by one: a known key, in its own
    section, of the right type, a finite number. :class:`UserError` names the file, the key
    and the fix."""
    p = Path(path)
    where = f"--config {p}"
    if not p.is_file():
        raise UserError(f"{where}: no such file; give the path of a TOML file (or a config.json)")
    try:
        text = p.read_text()
        data = json.loads(text) if p.suffix == ".json" else tomllib.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UserError(f"{where}: not a readable {p.suffix[1:] or 'TOML'} file ({e})") from None
    if not isinstance(data, dict):
        raise UserError(f"{where}: the file must hold a table of options")
    out: dict[str, Any] = {}
    sections = section_of()
    for key, value in data.items():
        if key in GROUPS and isinstance(value, dict):
            for name, v in value.items():
                if name in sections and sections[name] != key:
                    raise UserError(
                        f"{where}: {key}.{name}: {name} belongs to [{sections[name]}], not "
                        f"[{key}]: move it there (or to the top level)"
                    )
                out[name] = _checked(where, f"{key}.{name}", name, v)
        else:
            out[key] = _checked(where, key, key, value)
    for name in NOT_IN_FILES:
        out.pop(name, None)
    return out


def check_option_name(where: str, key: str, name: str, what: str = "option") -> None:
    """One line where ``name`` (``key`` as written, in ``where``) is no option of the config's,
    with the options it may have meant."""
    hints = field_hints()
    if name not in hints:
        close = [n for n in hints if n.split("_")[0] == name.split("_")[0]][:3]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UserError(
            f"{where}: unknown {what} {key!r}{hint}; the options are those of asyncrl train "
            "--help, with _ for -"
        )


def _checked(where: str, key: str, name: str, value: Any) -> Any:
    """``value`` for the option ``name`` as the config takes it, or one line on what is wrong."""
    check_option_name(where, key, name, "key")
    hint, optional = field_hints()[name]
    if value is None and (optional or field_default(name) is None):
        return None
    want = _describe(hint)
    bad = f"{where}: {key}: must be {want}, got {value!r}"
    origin = typing.get_origin(hint)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise UserError(f"{bad}: give a list, e.g. [{value!r}]")
        return tuple(_scalar(bad, typing.get_args(hint)[0], x) for x in value)
    if origin is Literal:
        if value not in typing.get_args(hint):
            raise UserError(f"{bad}")
        return value
    return _scalar(bad, hint, value)


def _scalar(bad: str, hint: Any, value: Any) -> Any:
    if hint is bool:
        if not isinstance(value, bool):
            raise UserError(f"{bad}: write true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise UserError(bad)
        return int(value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise UserError(bad)
        if not math.isfinite(value):
            raise UserError(f"{bad}: give a finite number")
        return float(value)
    if hint is str and not isinstance(value, str):
        raise UserError(f"{bad}: quote it")
    return value


def _describe(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is tuple:
        return f"a list of {_describe(typing.get_args(hint)[0])}s"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    return {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}.get(
        hint, str(hint)
    )


def config_toml(cfg: Config, header: str = "") -> str:
    """``cfg`` as a TOML file in sections, every option whose value is not None (None is each
    such option's default: left out, it stays that), but the sections the run does not read
    (another algorithm's, Ray's off Ray: at their defaults, which validation sees to): what
    ``--config`` reads back."""
    values = cfg.to_dict()
    sections = section_of()
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    read = SECTIONS[cfg.algo].__mro__
    for group, cls in GROUPS.items():
        algorithms = cls in AlgoSettings.__mro__ and cls is not RolloutSettings
        if (algorithms and cls not in read) or (group == "ray" and cfg.backend != "ray"):
            continue
        names = [
            n
            for n in sections
            if sections[n] == group and values[n] is not None and n not in NOT_IN_FILES
        ]
        if not names:
            continue
        lines += ["", f"[{group}]"]
        lines += [f"{n} = {_toml_value(values[n])}" for n in names]
    return "\n".join(lines).lstrip("\n") + "\n"


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string is a JSON string
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {v!r}")


__all__ = ["config_toml", "read_config_file"]
