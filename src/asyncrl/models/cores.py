"""Cores, between the encoder and the heads: the identity or a recurrent cell (:data:`CORES`)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
from torch import nn

from asyncrl.models.spec import ModelSpec


class Core(nn.Module):
    """Between the encoder and the heads: ``step(x, state, first) -> (h, state)`` for one step
    of B envs, ``unroll`` for a rollout. The state is one tensor ``(B, *state_shape)`` per
    worker (or evaluated batch); ``first[i]`` says env i starts an episode, so its state
    restarts from zero. A new core is a subclass and a line in :data:`CORES`."""

    out_dim: int
    #: whether a step's output depends on earlier steps: then a rollout is replayed in
    #: sequences, each from a stored state (APPO's minibatches are groups of whole rollouts or
    #: of --seq-len pieces), where a core without memory can take any set of transitions
    sequential: bool = True

    def initial_state(self, batch: int) -> torch.Tensor:
        raise NotImplementedError

    def step(
        self, x: torch.Tensor, state: torch.Tensor, first: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def unroll(
        self, x: torch.Tensor, state: torch.Tensor, first: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Outputs ``(T+1, B, out_dim)`` of features ``(T+1, B, d)`` from the state at their
        start, step by step (PFRL's way), and the state after them. Gradients reach back to
        the start of the rollout, not beyond (the stored state has no history)."""
        hs = []
        for t in range(x.shape[0]):
            h, state = self.step(x[t], state, first[t])
            hs.append(h)
        return torch.stack(hs), state


class IdentityCore(Core):
    """No memory: the features pass through, with an empty state ``(B, 0)``."""

    sequential = False

    def __init__(self, d_in: int, size: int):
        super().__init__()
        self.out_dim = d_in

    def initial_state(self, batch: int) -> torch.Tensor:
        return torch.zeros(batch, 0)

    def step(self, x, state, first):
        return x, state

    def unroll(self, x, state, first):
        return x, state


class RecurrentCore(Core):
    """A recurrent cell whose state ``(B, rows, size)`` is zeroed where an episode starts;
    ``h`` is row 0. Subclasses name the cell and how it steps."""

    rows: int

    def __init__(self, cell: nn.RNNCellBase):
        super().__init__()
        self.cell = cell
        for name, p in cell.named_parameters():
            (nn.init.orthogonal_ if "weight" in name else nn.init.zeros_)(p)
        self.out_dim = cell.hidden_size

    def initial_state(self, batch: int) -> torch.Tensor:
        return torch.zeros(batch, self.rows, self.out_dim)

    def step(self, x, state, first):
        state = self.cell_step(x, _restart(state, first))
        return state[:, 0], state

    def unroll(self, x, state, first):
        """As :meth:`Core.unroll`, but each stretch between episode starts in one call of
        :meth:`sequence`: torch's own RNN kernel runs it faster than the cell stepped from
        Python (docs/recurrent.md#the-bookkeeping). A stretch ends where any env of the batch
        starts an episode; there the states of those envs restart from zero."""
        starts = first[1:].any(dim=1).nonzero().flatten().add(1).tolist()
        bounds = [0, *starts, x.shape[0]]
        outs = []
        for a, b in itertools.pairwise(bounds):
            out, state = self.sequence(x[a:b], _restart(state, first[a]))
            outs.append(out)
        return torch.cat(outs), state

    def cell_step(self, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def sequence(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Outputs ``(L, B, size)`` of the cell run over ``x`` ``(L, B, d)`` from ``state``
        with no restart in between, and the state after them: here the cell stepped row by
        row; the LSTM and the GRU run torch's kernel for the whole stretch instead."""
        return Core.unroll(self, x, state, torch.zeros(x.shape[:2], dtype=torch.bool))

    def _weights(self) -> list[torch.Tensor]:
        # the cell's own parameters in the order torch's RNN functions take them, so the
        # kernel and the cell's step share weights (and state_dict names)
        c = self.cell
        return [c.weight_ih, c.weight_hh, c.bias_ih, c.bias_hh]


def _restart(state: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
    """The core state ``(B, rows, size)`` zeroed for the envs whose episode starts."""
    return state * (~first).to(state.dtype)[:, None, None]


class LSTMCore(RecurrentCore):
    """The paper's recurrent agent: an LSTM, state (h, c)."""

    rows = 2

    def __init__(self, d_in: int, size: int):
        super().__init__(nn.LSTMCell(d_in, size))

    def cell_step(self, x, state):
        h, c = self.cell(x, (state[:, 0], state[:, 1]))
        return torch.stack([h, c], dim=1)

    def sequence(self, x, state):
        hc = (state[:, 0][None].contiguous(), state[:, 1][None].contiguous())
        # nn.LSTM's own call (1 layer, biases, no dropout, one direction, time first): on CPU
        # oneDNN's LSTM kernel for float32
        out, h, c = torch._VF.lstm(
            x, hc, self._weights(), True, 1, 0.0, self.training, False, False
        )
        return out, torch.stack([h[0], c[0]], dim=1)


class GRUCore(RecurrentCore):
    """A GRU: state h alone, three gates to the LSTM's four (a quarter fewer weights)."""

    rows = 1

    def __init__(self, d_in: int, size: int):
        super().__init__(nn.GRUCell(d_in, size))

    def cell_step(self, x, state):
        return self.cell(x, state[:, 0])[:, None]

    def sequence(self, x, state):
        # nn.GRU's own call (as LSTMCore.sequence): ATen's C++ loop of the GRU cell
        h0 = state[:, 0][None].contiguous()
        out, h = torch._VF.gru(x, h0, self._weights(), True, 1, 0.0, self.training, False, False)
        return out, h[0][:, None]


CORES: dict[str, Callable[[int, int], Core]] = {
    "none": IdentityCore,
    "lstm": LSTMCore,
    "gru": GRUCore,
}


def build_core(spec: ModelSpec, d_in: int) -> Core:
    return CORES[spec.core](d_in, spec.core_size)
