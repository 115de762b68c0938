"""asyncrl: asynchronous deep reinforcement learning (Mnih et al., 2016) on plain CPUs.

>>> import asyncrl
>>> summary = asyncrl.train(env="CartPole-v1", workers=2)      # doctest: +SKIP
>>> policy = asyncrl.load(summary["run_dir"])                  # doctest: +SKIP
>>> policy.act(obs)                                            # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from asyncrl.config import Config
from asyncrl.errors import UserError
from asyncrl.presets import preset

if TYPE_CHECKING:
    from asyncrl.callbacks import Callback
    from asyncrl.policy import Policy, evaluate, load
    from asyncrl.trainer import train

# Imported on first use: the config and the CLI's parsing never pay for PyTorch (which lets
# the CLI start Ray while PyTorch is imported), loading a policy never pays for the trainer.
_LAZY = {
    "train": "asyncrl.trainer",
    "Callback": "asyncrl.callbacks",
    "Policy": "asyncrl.policy",
    "evaluate": "asyncrl.policy",
    "load": "asyncrl.policy",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'asyncrl' has no attribute {name!r}")


__all__ = ["Callback", "Config", "Policy", "UserError", "evaluate", "load", "preset", "train"]
__version__ = "0.1.0"
