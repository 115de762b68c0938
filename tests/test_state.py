"""The global state: the target network's refresh, snapshots and restore."""

import numpy as np
import pytest
import torch

from asyncrl.config import Config
from asyncrl.errors import UserError
from asyncrl.state import STEPS, GlobalState
from tests.oracles import mlp_spec


def make(workers=2, target_update=100):
    cfg = Config(algo="nstep-q", target_update=target_update, lr_schedule="constant")
    return cfg, GlobalState.create(cfg, mlp_spec("q", 4, 2, hidden=(4,)), workers, True)


def test_the_target_is_refreshed_once_per_period_even_when_increments_interleave():
    # Worker A adds 60 steps (global 90 -> 150, crossing 100) but another worker's 60 land
    # before A reads the global step: A sees 210 - 60 = 150..210, which never straddles a
    # multiple of 100 in A's own window [150, 210). The period count catches it.
    cfg, state = make()
    grad = torch.ones_like(state.params)
    state.counters[STEPS, 0] = 90
    state.apply_update(cfg, grad, 90)
    assert not torch.equal(state.target_params, state.params)  # period 0: no refresh yet
    state.apply_update(cfg, grad, 210)  # both increments landed: period 2 > 0
    assert torch.equal(state.target_params, state.params)
    assert int(state.target_period[0]) == 2
    before = state.target_params.clone()
    state.apply_update(cfg, grad, 250)  # same period: no refresh
    assert torch.equal(state.target_params, before)


def test_snapshot_restore_round_trip_and_fit_check(tmp_path):
    cfg, state = make()
    state.apply_update(cfg, torch.ones_like(state.params), 150)
    state.counters[STEPS] = torch.tensor([5, 7])
    snap = state.snapshot()
    _, other = make()
    other.restore(snap)
    assert torch.equal(other.params, state.params) and torch.equal(other.counters, state.counters)
    assert int(other.target_period[0]) == 1
    _, three = make(workers=3)
    three.restore(snap)  # another worker count: the totals carry over
    assert three.steps() == 12
    small = GlobalState.create(cfg, mlp_spec("q", 4, 2, hidden=(3,)), 2, True)
    with pytest.raises(UserError, match="does not fit its config"):
        small.check_fits(snap, tmp_path)
    assert isinstance(snap.params, np.ndarray) and snap.steps == 12
