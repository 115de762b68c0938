"""asyncrl: asynchronous deep reinforcement learning (Mnih et al., 2016) on plain CPUs.

>>> import asyncrl
>>> summary = asyncrl.train(env="CartPole-v1", workers=2)      # doctest: +SKIP
>>> policy = asyncrl.load(summary["run_dir"])                  # doctest: +SKIP
>>> policy.act(obs)                                            # doctest: +SKIP
"""

from __future__ import annotations

from asyncrl.config import Config, preset
from asyncrl.errors import UserError
from asyncrl.policy import Policy, evaluate, load
from asyncrl.trainer import train

__all__ = ["Config", "Policy", "UserError", "evaluate", "load", "preset", "train"]
__version__ = "0.1.0"
