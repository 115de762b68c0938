"""One file per algorithm (the paper's four, and APPO); each gives its loss and behaviour
policy."""

from __future__ import annotations

from asyncrl.algos.a3c import A3C
from asyncrl.algos.appo import APPO
from asyncrl.algos.base import Algorithm
from asyncrl.algos.nstep_q import NStepQ
from asyncrl.algos.onestep_q import OneStepQ
from asyncrl.algos.onestep_sarsa import OneStepSarsa
from asyncrl.config import Config
from asyncrl.envs import EnvInfo

REGISTRY: dict[str, type[Algorithm]] = {
    cls.name: cls for cls in (A3C, APPO, NStepQ, OneStepQ, OneStepSarsa)
}


def make_algorithm(cfg: Config, info: EnvInfo) -> Algorithm:
    """The algorithm of ``cfg`` for this env (``cfg.check_env(info)`` has refused an action
    space it cannot take)."""
    return REGISTRY[cfg.algo](cfg, info)


__all__ = ["REGISTRY", "Algorithm", "make_algorithm"]
