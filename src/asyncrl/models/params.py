"""The flat parameter vector: every parameter of a model a view into one tensor, and the
gradient as one vector."""

from __future__ import annotations

import torch
from torch import nn


def flatten_parameters(model: nn.Module, flat: torch.Tensor | None = None) -> torch.Tensor:
    """Make every parameter of ``model`` a view into one contiguous 1-D tensor and return it.

    One flat vector makes a pull one ``copy_``, a push one fused optimizer update, and a shared
    memory segment (or a Ray object) one buffer instead of a dict of small tensors. If ``flat``
    is given (the shared global vector), the parameters become views into it.
    """
    params = list(model.parameters())
    if flat is None:
        flat = torch.cat([p.detach().reshape(-1) for p in params]).contiguous()
    offset = 0
    for p in params:
        n = p.numel()
        p.data = flat[offset : offset + n].view_as(p)
        offset += n
    if offset != flat.numel():
        raise ValueError(f"flat vector has {flat.numel()} elements, model needs {offset}")
    return flat


def flat_grad(model: nn.Module) -> torch.Tensor:
    """The gradient of every parameter as one flat vector (zeros where a grad is missing)."""
    return torch.cat(
        [
            (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
            for p in model.parameters()
        ]
    )
