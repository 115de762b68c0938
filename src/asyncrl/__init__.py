"""asyncrl: asynchronous deep reinforcement learning (Mnih et al., 2016) on plain CPUs.

>>> import asyncrl
>>> summary = asyncrl.train(env="CartPole-v1", workers=2)      # doctest: +SKIP
>>> policy = asyncrl.load(summary["run_dir"])                  # doctest: +SKIP
>>> policy.act(obs)                                            # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asyncrl.config import Config, preset
from asyncrl.errors import UserError
from asyncrl.policy import Policy, evaluate, load

if TYPE_CHECKING:
    from asyncrl.trainer import train


def __getattr__(name: str) -> Any:
    # ``asyncrl.train`` imports the trainer (supervisor, backends) on first use only: loading
    # and evaluating a policy never pays for it.
    if name == "train":
        from asyncrl.trainer import train

        return train
    raise AttributeError(f"module 'asyncrl' has no attribute {name!r}")


__all__ = ["Config", "Policy", "UserError", "evaluate", "load", "preset", "train"]
__version__ = "0.1.0"
