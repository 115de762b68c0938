"""Presets picked from the env, the Gaussian options reaching the model, and the checks of
every option's value."""

import dataclasses
import math
import re

import pytest
import torch

import asyncrl
from asyncrl.algos import make_algorithm
from asyncrl.cli import main
from asyncrl.config import Config, _numeric_fields
from asyncrl.envs import probe_env
from asyncrl.errors import UserError
from asyncrl.models import build_model
from asyncrl.presets import auto_preset, preset
from tests.oracles import spec_of

Q_METHODS = ("nstep-q", "onestep-q", "onestep-sarsa")


def test_box_envs_pick_the_continuous_presets():
    # Gymnasium registers the MuJoCo ids without the mujoco extra: the pick needs no install
    assert auto_preset("HalfCheetah-v5") == "mujoco" == auto_preset("Hopper-v5")
    assert auto_preset("Pendulum-v1") == "control"
    assert auto_preset("CartPole-v1") == "cartpole"
    # Box2D: Box actions pick box2d (a long horizon, not control's gamma 0.95); LunarLander's
    # discrete actions pick APPO over the vector-observation defaults, and classic control's
    # discrete tasks keep A3C's
    assert auto_preset("BipedalWalker-v3") == "box2d"
    assert auto_preset("LunarLander-v3", ("continuous=true",)) == "box2d-lander"
    assert auto_preset("LunarLander-v3") == "box2d-discrete"
    lander = preset(None, env="LunarLander-v3")
    assert lander.algo == "appo" and lander.steps == 3_000_000
    assert lander == preset("cartpole", env="LunarLander-v3", algo="appo", steps=3_000_000)
    lander_a3c = preset(None, env="LunarLander-v3", algo="a3c")
    assert lander_a3c == preset("cartpole", env="LunarLander-v3", steps=3_000_000)
    for env in ("Acrobot-v1", "MountainCar-v0"):
        assert auto_preset(env) == "cartpole" and preset(None, env=env).algo == "a3c"
    walker = preset(None, env="BipedalWalker-v3")
    assert walker.gamma == 0.99 and walker.max_grad_norm == 0.5 and walker.normalize_obs
    assert walker.algo == "a3c" and walker.t_max == 8 and walker.optimizer == "rmsprop"
    # LunarLanderContinuous: the same settings with APPO in mujoco's PPO shape (64-step
    # rollouts, 10 epochs of 8 minibatches, lr 3e-4), as --algo appo gives BipedalWalker
    lander = preset(None, env="LunarLander-v3", env_kwargs=("continuous=true",))
    # a bare string from the Python API is one line naming the fix, not a letter-by-letter read
    with pytest.raises(UserError, match=r"got the string 'continuous=true': give \('c") as e:
        Config(env="LunarLander-v3", env_kwargs="continuous=true").validate()  # type: ignore[arg-type]
    assert "\n" not in str(e.value)
    cheetah = preset(None, env="HalfCheetah-v5")
    walker_appo = preset(None, env="BipedalWalker-v3", algo="appo")
    assert lander.algo == "appo" == cheetah.algo and lander.steps == 3_000_000
    for name in ("t_max", "epochs", "minibatches", "lr", "envs_per_worker", "optimizer"):
        assert getattr(lander, name) == getattr(cheetah, name) == getattr(walker_appo, name)
    assert lander.normalize_obs and lander.reward_scale == walker.reward_scale
    cfg = preset(None, env="HalfCheetah-v5")
    assert cfg.normalize_obs and cfg.gae_lambda == 0.95 and cfg.log_std_init == -1.0


def test_the_initial_log_std_reaches_the_gaussian():
    cfg = preset("control", env="Pendulum-v1", log_std_init=-0.5)
    model = build_model(spec_of(make_algorithm(cfg.algo, cfg, probe_env(cfg.env))))
    params, _ = model.act(
        torch.zeros(3, 3), model.initial_state(3), torch.ones(3, dtype=torch.bool)
    )
    std = model.distribution(params).std
    torch.testing.assert_close(std, torch.full((3, 1), float(torch.tensor(-0.5).exp())))


def test_the_paper_preset_counts_the_papers_frames_on_atari():
    """The paper refreshes theta^- every 40,000 frames and anneals epsilon over 4M frames;
    Atari repeats each action for 4 frames, so those are 10,000 and 1M agent steps."""
    pytest.importorskip("ale_py")
    pong = preset("paper", env="PongNoFrameskip-v4", algo="nstep-q")
    assert (pong.target_update, pong.eps_anneal_steps) == (10_000, 1_000_000)
    assert type(pong.target_update) is int and type(pong.eps_anneal_steps) is int
    cartpole = preset("paper", env="CartPole-v1", algo="onestep-q")  # a step is a frame
    assert (cartpole.target_update, cartpole.eps_anneal_steps) == (40_000, 4_000_000)
    # a count the user gives is in agent steps, as the option says
    q = preset("paper", env="PongNoFrameskip-v4", algo="nstep-q", target_update=500)
    assert q.target_update == 500


@pytest.mark.parametrize("algo", ["a3c", "appo", "nstep-q", "onestep-sarsa"])
def test_a_preset_sets_only_what_the_algorithm_reads(algo):
    """The atari preset holds settings for every learner (A3C's loss weights, the Q methods'
    target period and epsilons); each algorithm gets its own and the others stay at their
    defaults, so the config a run saves claims nothing it ignored, and validates."""
    cfg = preset("atari", env="PongNoFrameskip-v4", algo=algo).validate()
    q = algo in Q_METHODS
    assert (cfg.target_update == 10_000) is q and (cfg.eps_anneal_steps == 1_000_000) is q
    assert (cfg.value_coef == 0.25) is (not q)


def test_the_atari_preset_starts_rmsprop_at_1_and_adam_gets_no_rmsprop_start():
    """A3C and the Q methods on Atari start RMSProp's average at 1 (TensorFlow's, and the
    RMSProp of the A2C whose settings the preset took); APPO's Adam, or --optimizer adam, has
    no such start, and a run that names one gets its own."""
    for algo in ("a3c", "nstep-q"):
        assert preset("atari", env="PongNoFrameskip-v4", algo=algo).validate().rms_init == 1.0
    assert preset("atari", env="PongNoFrameskip-v4", algo="appo").validate().rms_init is None
    adam = preset("atari", env="PongNoFrameskip-v4", algo="a3c", optimizer="adam").validate()
    assert adam.optimizer == "adam" and adam.rms_init is None
    assert preset("atari", env="PongNoFrameskip-v4", algo="a3c", rms_init=0.0).rms_init == 0.0
    assert preset("cartpole", algo="a3c").rms_init is None  # the backend's start (0; Ray 1)


def test_the_atari_preset_holds_then_anneals_the_rate_over_a_given_time_limit(monkeypatch):
    """With --time-limit (and no schedule of the user's) APPO on Atari holds Adam's rate for
    half the limit, then to 0 at it (docs/presets.md#atari-time-limit); otherwise, and for
    A3C, a recurrent core or another preset, nothing changes."""
    pytest.importorskip("ale_py")
    pong = "PongNoFrameskip-v4"

    def schedule(cfg: Config) -> tuple:
        return cfg.lr_schedule, cfg.lr_anneal_over, cfg.lr_anneal_from

    timed = preset(None, env=pong, time_limit="30m").validate()
    assert schedule(timed) == ("linear", "time", 0.5)
    # and nothing else changes
    hold = dict(lr_schedule="linear", lr_anneal_over="time", lr_anneal_from=0.5)
    assert timed == dataclasses.replace(preset(None, env=pong), time_limit="30m", **hold)
    assert schedule(preset(None, env=pong)) == ("constant", "steps", 0.0)  # no limit: constant
    assert schedule(preset(None, env=pong, time_limit=None)) == ("constant", "steps", 0.0)
    # a schedule of the user's own wins whole (the hold's parts alone would not validate)
    assert schedule(preset(None, env=pong, time_limit="1h", lr_schedule="constant")) == (
        "constant", "steps", 0.0,
    )  # fmt: skip
    own = preset(None, env=pong, time_limit="1h", lr_schedule="linear").validate()
    assert schedule(own) == ("linear", "steps", 0.0)
    for other in (
        dict(env=pong, algo="a3c"),
        dict(env=pong, core="lstm"),
        dict(env="CartPole-v1", algo="appo"),
    ):
        assert schedule(preset(None, time_limit="1h", **other)) == schedule(preset(None, **other))
    # the CLI hands the preset only the options given: `asyncrl train --time-limit` gets it
    import asyncrl.trainer

    seen: list[Config] = []

    def train(cfg: Config, **kwargs) -> dict:
        seen.append(cfg)
        raise UserError("stopped before training")  # (the CLI's exit 2)

    monkeypatch.setattr(asyncrl.trainer, "train", train)
    assert main(["train", "--env", pong, "--time-limit", "30m"]) == 2
    assert seen == [timed]


def test_appo_puts_ppos_setting_over_the_envs_preset():
    """--algo appo layers PPO's optimiser over the env's preset, and the preset's own APPO
    shape on top (Atari: PPO's Atari setting); the A3C preset underneath is untouched."""
    pytest.importorskip("ale_py")
    pong = preset(None, env="PongNoFrameskip-v4", algo="appo")
    # PPO's 16 gradient steps a rollout, in 2 passes of 8 minibatches (docs/presets.md#atari)
    assert (pong.envs_per_worker, pong.t_max, pong.epochs, pong.minibatches) == (8, 128, 2, 8)
    assert (pong.clip, pong.lr, pong.optimizer, pong.eps) == (0.1, 2.5e-4, "adam", 1e-5)
    assert pong.entropy_coef == 0.01 and pong.value_coef == 0.25  # the atari preset's
    # bfloat16 where the CPU has AMX or AVX-512 BF16: measured for APPO's four passes a frame,
    # not for A3C
    assert (
        pong.precision == "auto"
        and preset(None, env="PongNoFrameskip-v4", algo="a3c").precision == "float32"
    )
    # APPO is the atari preset's algorithm; --algo a3c gets the A3C settings under it
    assert preset(None, env="PongNoFrameskip-v4") == pong
    a3c = preset(None, env="PongNoFrameskip-v4", algo="a3c")
    assert (a3c.envs_per_worker, a3c.t_max, a3c.lr, a3c.optimizer) == (4, 20, 1.4e-3, "rmsprop")
    # what the user gives wins over both layers
    assert preset(None, env="PongNoFrameskip-v4", algo="appo", t_max=64).t_max == 64
    # with a recurrent core a minibatch is a group of envs: 2 x 8 would be one game's stream,
    # so the LSTM and the GRU take PPO's 4 passes of 4 (two games each); given, the user's wins
    for core in ("lstm", "gru"):
        rec = preset(None, env="PongNoFrameskip-v4", core=core).validate()
        assert (rec.epochs, rec.minibatches, rec.envs_per_worker) == (4, 4, 8)
        assert preset(None, env="PongNoFrameskip-v4", core=core, minibatches=8).minibatches == 8
    assert preset(None, env="PongNoFrameskip-v4", core="none") == pong
    # only the atari preset's shape is measured with a core: control's stays its own
    ctl, ff = preset("control", algo="appo", core="lstm"), preset("control", algo="appo")
    assert (ctl.epochs, ctl.minibatches) == (ff.epochs, ff.minibatches) == (10, 8)
    assert preset(None, env="PongNoFrameskip-v4", algo="a3c", core="lstm").t_max == 20
    # on Ray each minibatch's gradient is a call of its own, answered before the next
    # minibatch (tests/backends/test_ray.py learns with it); A3C keeps its batch of 8: the
    # algorithm's where not given, the presets leave Ray's tuning unset
    assert (pong.ray_batch, pong.ray_pipeline, pong.ray_tuning(pong.algo)) == (None, None, (1, 0))
    assert (a3c.ray_batch, a3c.ray_pipeline, a3c.ray_tuning(a3c.algo)) == (None, None, (8, 1))
    given = preset(None, env="CartPole-v1", algo="appo", backend="ray", ray_batch=4)
    assert given.ray_tuning(given.algo) == (4, 0)


@pytest.mark.parametrize("name", ["ray_batch", "ray_pipeline"])
def test_ray_tuning_off_ray_is_refused_however_given(name):
    """Ray's tuning is unset until given (a Ray run takes its algorithm's:
    Config.ray_tuning), so given off Ray, in a Config as on the command line, it is refused:
    the run would ignore it. A preset's config holds none."""
    flag, value = "--" + name.replace("_", "-"), 0 if "pipe" in name else 2
    with pytest.raises(UserError, match=f"{flag}: applies to --backend ray only .* processes"):
        preset(None, env="CartPole-v1", algo="appo", **{name: value}).validate()
    # the value a preset used to set on every backend, given in a Config: refused all the same
    cfg = Config(env="CartPole-v1", backend="threads", **{name: 1})
    with pytest.raises(UserError, match=f"{flag}: applies to --backend ray only .* threads"):
        asyncrl.train(cfg, progress=False)
    appo = preset(None, env="CartPole-v1", algo="appo").validate()
    assert (appo.backend, appo.ray_batch, appo.ray_pipeline) == ("processes", None, None)
    assert preset(None, env="CartPole-v1", algo="appo", backend="ray", **{name: value}).validate()


def test_the_gaussians_options_are_for_box_actions():
    """A preset's Gaussian options are left out for other actions (the probe given, or made for
    the env named); given, they are refused. --log-std-init is --gaussian-std param's alone."""
    info = probe_env("CartPole-v1")
    cfg = preset("mujoco", info=info, env="CartPole-v1").check_env(info)
    assert (cfg.log_std_init, cfg.gaussian_std) == (None, None)
    assert preset("box2d", env="LunarLander-v3").check_env(probe_env("LunarLander-v3"))
    softplus = preset("mujoco", env="Pendulum-v1", gaussian_std="softplus").validate()
    assert softplus.log_std_init is None
    with pytest.raises(UserError, match="--log-std-init: is where --gaussian-std param's"):
        preset("mujoco", env="Pendulum-v1", gaussian_std="softplus", log_std_init=-2.0).validate()
    # given at the Gaussian's own defaults (param, 0) too: unset until given, so refused alike
    for given in ({"log_std_init": -1.0}, {"gaussian_std": "softplus"}, {"log_std_init": 0.0}):
        (name,) = given
        with pytest.raises(UserError, match=f"--{name.replace('_', '-')}: CartPole-v1 has Disc"):
            preset("mujoco", info=info, env="CartPole-v1", **given).check_env(info)
        with pytest.raises(UserError, match=f"--{name.replace('_', '-')}: CartPole-v1 has Disc"):
            Config(env="CartPole-v1", **given).check_env(info)
    # a Box preset made without its env keeps its options; a Discrete env given later is
    # refused with the way out named
    with pytest.raises(
        UserError, match=re.escape("--log-std-init -1.0 would shape a Gaussian policy of Box")
    ):
        dataclasses.replace(preset("mujoco"), env="CartPole-v1").check_env(info)
    pendulum = probe_env("Pendulum-v1")
    assert preset("mujoco", info=pendulum, env="Pendulum-v1").log_std_init == -1.0
    # unset, the Gaussian starts from ModelSpec's defaults: a parameter at log-std 0
    spec = spec_of(
        make_algorithm(Config(env="Pendulum-v1").algo, Config(env="Pendulum-v1"), pendulum)
    )
    assert (spec.gaussian_std, spec.log_std_init) == ("param", 0.0)
    spec = spec_of(
        make_algorithm(
            preset("mujoco", env="Pendulum-v1").algo, preset("mujoco", env="Pendulum-v1"), pendulum
        )
    )
    assert (spec.gaussian_std, spec.log_std_init) == ("param", -1.0)


QUICK = ["--steps", "2000", "--workers", "1", "--backend", "threads", "--no-progress"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        # NaN compares false with everything: a stop rule at NaN never fires
        (["--target-return", "nan"], "--target-return: must be a finite number, got nan"),
        (["--lr", "inf"], "--lr: must be a finite number, got inf"),
        (["--log-std-init", "nan"], "--log-std-init: must be a finite number, got nan"),
        (["--gamma", "nan"], "--gamma: must be a finite number, got nan"),
        (["--worker-timeout", "inf"], "--worker-timeout: must be a finite number, got inf"),
        (["--eps-probs", "0.4", "nan", "0.3"], "--eps-probs: must be a finite number"),
        (["--seed", "-1"], "--seed: must be >= 0"),
        (["--eps-start", "1.5"], "--eps-start: must be in [0, 1], got 1.5"),
        (["--time-limit", "30min"], "--time-limit: give a positive time such as '1800s'"),
        (["--time-limit", "0m"], "--time-limit: give a positive time"),
        (["--time-limit", "inf"], "--time-limit: give a positive time"),
        (["--rms-init", "-1"], "--rms-init: must be >= 0, got -1.0"),
        (["--rms-init", "nan"], "--rms-init: must be a finite number"),
        (["--lr-anneal-from", "1"], "--lr-anneal-from: must be in [0, 1), got 1.0"),
        (
            ["--lr-anneal-from", "0.5", "--lr-schedule", "constant"],
            "--lr-anneal-from: applies to --lr-schedule linear only",
        ),
        (["--lr-anneal-over", "time"], "--lr-anneal-over: time needs the time budget to fall"),
        (
            ["--lr-anneal-over", "time", "--time-limit", "1h", "--lr-schedule", "constant"],
            "--lr-anneal-over: applies to --lr-schedule linear only",
        ),
        # argparse reads '-1e-3' and '-5s' as options, so it says only that the value is
        # missing: the error names the '=' form, under which the value's own check speaks
        # (values that no version of argparse reads as numbers: 3.14 reads '-1e-3' as one)
        (["--lr", "-x"], "expected one argument; a value that starts with '-' goes after"),
        (["--checkpoint-every", "-s5"], "'=': --checkpoint-every=VALUE"),
        # a value left out, an option next: no hint
        (["--lr", "--seed", "1"], "argument --lr: expected one argument (see asyncrl train"),
        (["--checkpoint-every=-5s"], "--checkpoint-every: give seconds ('60s') or global"),
        (["--lr=-1e-3"], "--lr: must be > 0, got -0.001"),
        # read only on Ray, or by a Gaussian policy
        (["--ray-batch", "4"], "--ray-batch: applies to --backend ray only (other backends"),
        (["--ray-pipeline", "0"], "drop --ray-pipeline, or add --backend ray"),
        (["--log-std-init=-1"], "--log-std-init: CartPole-v1 has Discrete actions"),
        (["--gaussian-std", "softplus"], ": drop --gaussian-std"),
        # given at the Gaussian's defaults: read by no policy of Discrete actions all the same
        (["--log-std-init", "0"], "--log-std-init: CartPole-v1 has Discrete actions"),
        (["--gaussian-std", "param"], ": drop --gaussian-std"),
    ],
)
def test_a_number_that_is_not_finite_or_in_range_is_one_line_and_exit_2(
    args, needle, tmp_path, capsys
):
    run_dir = tmp_path / "run"
    try:
        code = main(["train", *QUICK, *args, "--run-dir", str(run_dir)])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert needle in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not run_dir.exists()  # nothing written


def test_every_float_option_refuses_nan_and_inf():
    defaults = Config()
    floats = [name for name, kind in _numeric_fields().items() if kind is float]
    assert {"target_return", "lr", "log_std_init", "eps_finals", "worker_timeout"} <= set(floats)
    for name in floats:
        for bad in (math.nan, math.inf, -math.inf):
            value = (bad,) if isinstance(getattr(defaults, name), tuple) else bad
            with pytest.raises(UserError, match=f"^--{name.replace('_', '-')}: must be a finite"):
                Config(**{name: value}).validate()


def test_a_value_of_the_wrong_type_is_named_not_a_traceback():
    with pytest.raises(UserError, match="--lr: must be a number, got '3e-3'"):
        Config(lr="3e-3").validate()  # type: ignore[arg-type]
    with pytest.raises(UserError, match=r"--steps: must be a whole number, got 1000\.5"):
        Config(steps=1000.5).validate()  # type: ignore[arg-type]
    with pytest.raises(UserError, match="--ray-grad-dtype: got 'float16', choose one of"):
        Config(backend="ray", ray_grad_dtype="float16").validate()  # type: ignore[arg-type]


def test_a_probe_travels_only_to_a_run_of_the_env_it_probed():
    # train(info=...) takes the caller's probe instead of building the env again: a probe of
    # another env, or of the same env with other gymnasium.make arguments, is refused
    from asyncrl.envs import probed
    from asyncrl.errors import UserError

    info = probe_env("LunarLander-v3", {"continuous": True})
    assert info.action.kind == "box"
    assert probed(info, "LunarLander-v3", {"continuous": True}) is info
    with pytest.raises(UserError, match="probe it with the run's --env-kwargs"):
        probed(info, "LunarLander-v3", {})
    with pytest.raises(UserError, match="a probe of 'LunarLander-v3'"):
        probed(info, "CartPole-v1")


def test_every_algorithm_says_which_action_spaces_it_takes():
    # Config.check_env refuses an action space from this table, before any PyTorch import
    from asyncrl.algos import REGISTRY
    from asyncrl.config import ACTION_KINDS

    assert set(ACTION_KINDS) == set(REGISTRY)
    kinds = ("discrete", "box", "multi_discrete", "multi_binary")
    assert ACTION_KINDS["a3c"] == kinds and ACTION_KINDS["nstep-q"] == ("discrete",)


def test_the_entropy_schedule_anneals_linearly_then_holds_and_defaults_to_the_budget():
    cfg = Config(entropy_coef=0.02, entropy_final=0.004, entropy_anneal_steps=400)
    assert [cfg.entropy_coef_at(s) for s in (0, 100, 400, 4000)] == pytest.approx(
        [0.02, 0.016, 0.004, 0.004]
    )
    budget = Config(entropy_coef=0.01, entropy_final=0.0, steps=1000)  # over --steps
    assert budget.entropy_coef_at(250) == pytest.approx(0.0075)
    assert Config(entropy_coef=0.03).entropy_coef_at(10**9) == 0.03  # constant by default
    # held at --entropy-coef until --entropy-anneal-from, then linear to the final value
    late = Config(entropy_coef=0.01, entropy_final=0.002, entropy_anneal_from=100,
                  entropy_anneal_steps=500)  # fmt: skip
    assert [late.entropy_coef_at(s) for s in (0, 100, 300, 500, 600)] == pytest.approx(
        [0.01, 0.01, 0.006, 0.002, 0.002]
    )


@pytest.mark.parametrize(
    "options, flag",
    [
        (dict(entropy_final=-0.1), "--entropy-final"),
        (dict(entropy_final=0.0, entropy_anneal_steps=0), "--entropy-anneal-steps"),
        (dict(entropy_anneal_steps=1000), "--entropy-anneal-steps"),  # without a final value
        (dict(entropy_anneal_from=1000), "--entropy-anneal-from"),
        (
            dict(entropy_final=0.0, entropy_anneal_from=500, entropy_anneal_steps=500),
            "--entropy-anneal-from",
        ),
        (dict(entropy_final=0.0, entropy_anneal_from=-1), "--entropy-anneal-from"),
        (dict(algo="onestep-q", entropy_final=0.0), "--entropy-final"),  # no entropy bonus
    ],
)
def test_entropy_schedule_options_out_of_place_are_refused(options, flag):
    with pytest.raises(UserError, match=flag):
        Config(**options).validate()


@pytest.mark.parametrize(
    "options, needle",
    [
        (dict(t_max=8, seq_len=4), "--seq-len: cuts a recurrent core's rollouts"),  # no core
        (dict(algo="a3c", core="lstm", t_max=8, seq_len=4), "--seq-len: a3c does not read it"),
        (dict(core="lstm", t_max=128, seq_len=48), "--seq-len: 48 does not divide --t-max 128"),
        (dict(core="lstm", seq_len=-1), "--seq-len: must be 0 (whole rollouts) or 2 or more"),
        # 8 envs x 128 / 64 = 16 sequences a rollout: 32 minibatches cannot be drawn
        (
            dict(core="lstm", envs_per_worker=8, t_max=128, seq_len=64, minibatches=32),
            "give --minibatches 16 or fewer, or a shorter --seq-len",
        ),
        (
            dict(core="gru", envs_per_worker=4, minibatches=8),
            "give --minibatches 4 or fewer, --envs-per-worker 8 or more, or --seq-len L",
        ),
        (dict(core="lstm", t_max=8, seq_len=1), "--seq-len: must be 0 (whole rollouts) or 2"),
        (dict(core="lstm", t_max=8, seq_len=4, vtrace=True), "drop --seq-len or --vtrace"),
        # what is wrong first: not read at all, before a length that does not divide
        (dict(t_max=8, seq_len=3), "--seq-len: cuts a recurrent core's rollouts"),
        (dict(algo="a3c", core="lstm", t_max=8, seq_len=3), "--seq-len: a3c does not read it"),
        (dict(core="lstm", t_max=8, burn_in=2), "--burn-in: refreshes the start state"),
        (dict(core="lstm", t_max=8, seq_len=4, burn_in=5), "--burn-in: must be 0 to --seq-len (4)"),
        (dict(core="lstm", t_max=8, seq_len=4, burn_in=-1), "--burn-in: must be 0 to --seq-len"),
        (dict(algo="a3c", core="lstm", burn_in=2), "--burn-in: a3c does not read it"),
        (dict(core="lstm", t_max=8, seq_len=8, burn_in=2), "--seq-len 8 is the whole rollout"),
    ],
)
def test_seq_len_out_of_place_is_refused(options, needle):
    with pytest.raises(UserError, match=re.escape(needle)):
        Config(**{"algo": "appo", **options}).validate()


@pytest.mark.parametrize("algo", ["a3c", "appo", "nstep-q", "onestep-sarsa"])
def test_the_previous_action_and_reward_need_a_recurrent_core(algo):
    # the feed-forward net's linear heads cannot combine them (tests/test_learning.py's Guess)
    with pytest.raises(UserError, match=re.escape("--prev-action-reward: gives a recurrent core")):
        Config(algo=algo, prev_action_reward=True).validate()
    if algo != "onestep-sarsa":  # (which takes no core)
        Config(algo=algo, core="gru", prev_action_reward=True).validate()


def test_burn_in_up_to_the_piece_length_is_taken():
    cfg = Config(algo="appo", core="lstm", envs_per_worker=8, t_max=128, seq_len=32)
    assert dataclasses.replace(cfg, burn_in=32).validate().burn_in == 32


def test_seq_len_lets_a_recurrent_core_take_more_minibatches_than_envs():
    cfg = Config(algo="appo", core="lstm", envs_per_worker=8, t_max=128, seq_len=32)
    assert dataclasses.replace(cfg, minibatches=32).validate().minibatches == 32
