"""One file per algorithm (the paper's four, and APPO); each gives its loss and behaviour
policy. Each algorithm's settings are in :mod:`asyncrl.algos.settings`, which imports no
PyTorch; the algorithms themselves load on first use (``REGISTRY``, ``make_algorithm``), so
that reading the settings does not import them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from asyncrl.algos.base import Algorithm
    from asyncrl.envs import EnvInfo
    from asyncrl.settings import RolloutSettings

    REGISTRY: dict[str, type[Algorithm]]


def _registry() -> dict[str, type[Algorithm]]:
    from asyncrl.algos.a3c import A3C
    from asyncrl.algos.appo import APPO
    from asyncrl.algos.nstep_q import NStepQ
    from asyncrl.algos.onestep_q import OneStepQ
    from asyncrl.algos.onestep_sarsa import OneStepSarsa

    return {cls.name: cls for cls in (A3C, APPO, NStepQ, OneStepQ, OneStepSarsa)}


def __getattr__(name: str) -> Any:
    if name == "REGISTRY":  # built once, on first use (tests may patch its entries)
        globals()["REGISTRY"] = registry = _registry()
        return registry
    if name == "Algorithm":
        from asyncrl.algos.base import Algorithm

        return Algorithm
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_algorithm(name: str, settings: RolloutSettings, info: EnvInfo) -> Algorithm:
    """The algorithm ``name`` with its section ``settings`` for this env (the config has
    refused an action space it cannot take)."""
    registry: dict[str, type[Algorithm]] = globals().get("REGISTRY") or __getattr__("REGISTRY")
    return registry[name](settings, info)


__all__ = ["REGISTRY", "Algorithm", "make_algorithm"]
