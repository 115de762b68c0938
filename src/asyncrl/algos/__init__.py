"""One file per algorithm of the paper; each gives its loss and behaviour policy."""

from __future__ import annotations

from asyncrl.algos.a3c import A3C
from asyncrl.algos.base import Algorithm
from asyncrl.config import Config
from asyncrl.envs import EnvInfo

REGISTRY: dict[str, type[Algorithm]] = {"a3c": A3C}


def make_algorithm(cfg: Config, info: EnvInfo) -> Algorithm:
    return REGISTRY[cfg.algo](cfg, info)


__all__ = ["REGISTRY", "Algorithm", "make_algorithm"]
