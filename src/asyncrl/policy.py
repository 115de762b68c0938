"""Loading a trained policy from a run directory, and evaluating it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from asyncrl.algos import REGISTRY
from asyncrl.errors import UserError
from asyncrl.models import ModelSpec, build_model
from asyncrl.trainer import CONFIG_FILE, MODEL_FILE


class Policy:
    """A trained network with ``act(obs)``: greedy by default (argmax of logits or of Q)."""

    def __init__(self, model: torch.nn.Module, algo: str, spec: ModelSpec, env_id: str):
        self.model = model.eval()
        self.algo = algo
        self.spec = spec
        self.env_id = env_id
        self._greedy = REGISTRY[algo].greedy

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray | int:
        """Action(s) for one observation (returns an int) or a batch (returns an array)."""
        x = torch.as_tensor(np.asarray(obs, dtype=np.float32))
        single = x.dim() == 1
        x = x.reshape(1 if single else x.shape[0], -1)
        if deterministic or self.spec.kind != "actor-critic":
            a = self._greedy(self.model, x)
        else:
            a = torch.multinomial(torch.softmax(self.model.logits(x), -1), 1).squeeze(-1)
        return int(a[0]) if single else a.numpy()


def _require_run_dir(run_dir: str | Path) -> Path:
    path = Path(run_dir)
    if not path.is_dir():
        raise UserError(f"run directory {path} does not exist; pass the RUN_DIR of a training run")
    if not (path / MODEL_FILE).is_file():
        raise UserError(f"{path} has no {MODEL_FILE}; pass the RUN_DIR of a finished training run")
    return path


def load(run_dir: str | Path) -> Policy:
    """The policy saved in ``run_dir`` by ``asyncrl train``."""
    path = _require_run_dir(run_dir)
    try:
        blob = torch.load(path / MODEL_FILE, map_location="cpu", weights_only=True)
        spec = ModelSpec.from_dict(blob["spec"])
        model = build_model(spec)
        model.load_state_dict(blob["state_dict"])
    except Exception as e:
        raise UserError(f"{path / MODEL_FILE} cannot be read ({type(e).__name__}: {e})") from None
    env_id = json.loads((path / CONFIG_FILE).read_text())["env"]
    return Policy(model, blob["algo"], spec, env_id)


def evaluate(
    run_dir: str | Path, episodes: int = 10, seed: int = 0, deterministic: bool = True
) -> list[float]:
    """Returns of ``episodes`` full episodes of the saved policy."""
    import gymnasium as gym

    if episodes < 1:
        raise UserError(f"--episodes: must be >= 1, got {episodes}")
    policy = load(run_dir)
    env = gym.make(policy.env_id)
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            obs, r, term, trunc, _ = env.step(policy.act(obs, deterministic))
            total += float(r)
            done = term or trunc
        returns.append(total)
    env.close()
    return returns
