"""Presets picked from the env, and the Gaussian options reaching the model."""

import torch

from asyncrl.algos import make_algorithm
from asyncrl.config import auto_preset, preset
from asyncrl.envs import probe_env
from asyncrl.models import build_model


def test_box_envs_pick_the_continuous_presets():
    # Gymnasium registers the MuJoCo ids without the mujoco extra: the pick needs no install
    assert auto_preset("HalfCheetah-v5") == "mujoco" == auto_preset("Hopper-v5")
    assert auto_preset("Pendulum-v1") == "control"
    assert auto_preset("CartPole-v1") == "cartpole"
    # Box2D: Box actions pick box2d (a long horizon, not control's gamma 0.9); LunarLander's
    # discrete actions stay with the vector-observation defaults
    assert auto_preset("BipedalWalker-v3") == "box2d"
    assert auto_preset("LunarLander-v3", ("continuous=true",)) == "box2d"
    assert auto_preset("LunarLander-v3") == "cartpole"
    walker = preset(None, env="BipedalWalker-v3")
    assert walker.gamma == 0.99 and walker.max_grad_norm == 0.5 and walker.normalize_obs
    cfg = preset(None, env="HalfCheetah-v5")
    assert cfg.normalize_obs and cfg.gae_lambda == 0.95 and cfg.log_std_init == -1.0


def test_the_initial_log_std_reaches_the_gaussian():
    cfg = preset("control", env="Pendulum-v1", log_std_init=-0.5)
    model = build_model(make_algorithm(cfg, probe_env(cfg.env)).model_spec())
    params = model.policy(torch.zeros(3, 3))
    std = model.distribution(params).std
    torch.testing.assert_close(std, torch.full((3, 1), float(torch.tensor(-0.5).exp())))
