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
from asyncrl.errors import UserError

REGISTRY: dict[str, type[Algorithm]] = {
    cls.name: cls for cls in (A3C, APPO, NStepQ, OneStepQ, OneStepSarsa)
}


def make_algorithm(cfg: Config, info: EnvInfo) -> Algorithm:
    """The algorithm of ``cfg`` for this env; a clear error if it cannot take the action space."""
    cls = REGISTRY[cfg.algo]
    if info.action.kind not in cls.action_kinds:
        takers = [n for n, c in REGISTRY.items() if info.action.kind in c.action_kinds]
        need = " or ".join(k.capitalize() for k in cls.action_kinds)
        raise UserError(
            f"--env: {info.env_id} has a {info.action.describe()} action space, but {cfg.algo} "
            f"needs a {need} one; use --algo {' / '.join(takers)}, or an env with "
            f"{need} actions"
        )
    return cls(cfg, info)


__all__ = ["REGISTRY", "Algorithm", "make_algorithm"]
