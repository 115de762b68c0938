"""How much of a pixel network is alive: per layer of the conv encoder, the share of units (a
conv layer's channels, the fully connected layer's units) that are zero after their ReLU on
every one of 200 frames of random play, the mean activation, and how much the activations vary
from frame to frame. A network whose features have died sees every frame alike, and so its
policy cannot tell the frames apart: on Pong, A3C runs that never took off had lost most of
their conv features (docs/benchmarks.md#atari-pong-in-30-minutes-a3c-against-appo as of commit
8efeca9).

    python benchmarks/dead_units.py RUN_DIR [RUN_DIR ...]        # model.pt, else the checkpoint
    python benchmarks/dead_units.py --fresh RUN_DIR              # a new net of the run's shape

The frames are the same for every run (PongNoFrameskip-v4, seed 123, random actions; --env
for another game).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from asyncrl.checkpoint import load_checkpoint
from asyncrl.envs import make_eval_env
from asyncrl.models import ActorCritic, ModelSpec, as_float, build_model


def frames(env_id: str, n: int = 200, seed: int = 123) -> torch.Tensor:
    env = make_eval_env(env_id, seed)
    env.reset(seed=seed)
    rng = np.random.default_rng(0)
    out = []
    while len(out) < n:
        obs, _, term, trunc, _ = env.step(int(rng.integers(env.action_space.n)))
        out.append(np.asarray(obs))  # a frame every step: 4 emulator frames apart
        if term or trunc:
            env.reset()
    return torch.as_tensor(np.stack(out))


def network(run_dir: Path, fresh: bool) -> torch.nn.Module:
    """The run's final parameters (model.pt), or its checkpoint's while it runs; ``fresh``: a
    new net of its shape (seeded), as training starts."""
    ckpt = load_checkpoint(run_dir)
    torch.manual_seed(0)
    model = build_model(ModelSpec.from_dict(ckpt["spec"]))
    if fresh:
        return model
    final = run_dir / "model.pt"
    if final.is_file():
        model.load_state_dict(torch.load(final, weights_only=False)["state_dict"])
    else:
        flat = torch.as_tensor(ckpt["glob"].params)
        torch.nn.utils.vector_to_parameters(flat, model.parameters())
    return model


@torch.no_grad()
def report(model: torch.nn.Module, x: torch.Tensor) -> list[str]:
    assert isinstance(model, ActorCritic), "an actor-critic (A3C or APPO) run"
    enc = model.pi_body
    h = as_float(x.movedim(-1, -3) if enc.channels_last else x)
    layers = []
    for conv in enc.convs:
        h = F.relu(conv(h))
        layers.append(h.transpose(0, 1).flatten(1))  # (channels, frames x positions)
    fc = F.relu(enc.fc(h.flatten(1)))
    layers.append(fc.T)  # (units, frames)
    lines = []
    for i, (a, act) in enumerate(zip(layers, [*enc.convs, enc.fc], strict=True)):
        dead = (a.max(1).values <= 0).float().mean().item()
        per_frame = act_per_frame(a, x.shape[0])
        lines.append(
            f"  layer {i} ({type(act).__name__}): dead {dead:.1%}, mean activation "
            f"{a.mean():.3f}, std across frames {per_frame:.4f}"
        )
    return lines


def act_per_frame(a: torch.Tensor, n: int) -> float:
    """The mean over units of the standard deviation across frames of each unit's activation."""
    return float(a.reshape(a.shape[0], n, -1).std(1).mean())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--fresh", action="store_true", help="a new network of each run's shape")
    p.add_argument("--env", default="PongNoFrameskip-v4")
    args = p.parse_args()
    torch.set_num_threads(1)
    x = frames(args.env)
    for run in args.runs:
        print(f"{run}{' (fresh)' if args.fresh else ''}:")
        print("\n".join(report(network(run, args.fresh), x)))


if __name__ == "__main__":
    main()
