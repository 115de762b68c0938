import numpy as np
import pytest
import torch

from asyncrl.envs import ActionSpace
from asyncrl.models import (
    ActorCritic,
    ModelSpec,
    QNetwork,
    build_model,
    flat_grad,
    flatten_parameters,
    write_context,
)
from tests.oracles import forward, mlp_spec


def test_flat_parameters_are_views():
    model = ActorCritic(mlp_spec("actor-critic", 4, 2))
    flat = flatten_parameters(model)
    flat.zero_()
    assert all(float(p.detach().abs().sum()) == 0.0 for p in model.parameters())
    flat.add_(1.0)
    logits, v = forward(model, torch.zeros(1, 4))
    assert torch.all(logits == logits[0, 0]) and v.shape == (1,)


def test_flatten_into_a_given_vector_checks_the_size():
    model = ActorCritic(mlp_spec("actor-critic", 4, 2))
    n = sum(p.numel() for p in model.parameters())
    with pytest.raises(ValueError, match="elements"):
        flatten_parameters(model, torch.zeros(n + 1))


@pytest.mark.parametrize("shared", [True, False])
def test_shared_or_separate_trunk(shared):
    model = ActorCritic(mlp_spec("actor-critic", 4, 3, hidden=(16, 16), shared_trunk=shared))
    logits, v = forward(model, torch.randn(5, 4))
    assert logits.shape == (5, 3) and v.shape == (5,)
    v.sum().backward()
    policy_trunk_grad = model.pi_body.layers[0].weight.grad
    # with a shared trunk the value loss trains the policy's hidden layers; separate: it cannot
    assert (policy_trunk_grad is not None) == shared


@pytest.mark.parametrize("shared", [True, False])
def test_acting_and_the_unroll_agree(shared):
    # the behaviour policy acts with act(); the loss recomputes the rollout with unroll(), the
    # last row (the bootstrap) without gradient: the same parameters and values either way
    spec = mlp_spec("actor-critic", 4, 3, hidden=(16, 16), shared_trunk=shared)
    model = ActorCritic(spec)
    T1, B = 4, 5
    obs = torch.randn(T1, B, 4)
    state, first = model.initial_state(B), torch.zeros(T1, B, dtype=torch.bool)
    params, values = model.unroll(obs, state, first)
    assert params.shape == (T1, B, 3) and values.shape == (T1, B) and state.shape == (B, 0)
    for t in range(T1):
        p, s = model.act(obs[t], state, first[t])
        torch.testing.assert_close(p, params[t])
        assert s is state  # the identity core carries its empty state through
    assert values[:-1].requires_grad and not torch.equal(values[0], values[-1])
    flipped = model.unroll(obs.flip(0), state, first)[1]
    torch.testing.assert_close(flipped[0], values[-1])  # the same value, with or without grad


def test_the_context_is_the_previous_action_one_hot_or_as_taken_and_the_reward():
    out = np.full((3, 4), 9.0, np.float32)  # stale values are overwritten
    write_context(ActionSpace("discrete", 3), np.array([2, 0, 1]), np.array([1, -1, 0.5]), out)
    np.testing.assert_array_equal(
        out,
        [[0, 0, 1, 1], [1, 0, 0, -1], [0, 1, 0, 0.5]],  # one-hot, then the reward
    )
    box = ActionSpace("box", shape=(2,), low=(-1.0, -1.0), high=(1.0, 1.0))
    out = np.zeros((2, 3), np.float32)
    write_context(box, np.array([[0.5, -1.0], [0.25, 1.0]]), np.array([-2.0, 3.0]), out)
    np.testing.assert_array_equal(out, [[0.5, -1, -2], [0.25, 1, 3]])


def test_the_context_reward_is_the_learning_reward_and_sizes_the_core():
    # Atari's learning reward is clipped to +-1; --reward-scale multiplies it: evaluation, on
    # raw scores, must give the core what training gave it
    spec = mlp_spec(
        "actor-critic", 4, 6, prev_action_reward=True, reward_clip=1.0, reward_scale=0.5
    )
    np.testing.assert_array_equal(
        spec.learning_reward(np.array([4.0, -7.0, 0.5])), [0.5, -0.5, 0.25]
    )
    assert spec.context_dim == 7  # 6 actions one-hot and the reward
    assert mlp_spec("actor-critic", 4, 6).context_dim == 0
    for core in ("none", "lstm"):
        for kind, cls in (("actor-critic", ActorCritic), ("q", QNetwork)):
            model = cls(mlp_spec(kind, 4, 6, hidden=(8,), core=core, prev_action_reward=True))
            first = model.core.cell.input_size if core == "lstm" else model.core.out_dim
            assert first == 8 + 7


@pytest.mark.parametrize(
    ("kind", "core", "shared"),
    [("actor-critic", "none", True), ("actor-critic", "none", False),
     ("actor-critic", "lstm", True), ("q", "none", True), ("q", "gru", True)],
)  # fmt: skip
def test_the_context_reaches_every_head_and_the_unroll_steps_as_acting_does(kind, core, shared):
    torch.manual_seed(0)
    spec = mlp_spec(
        kind, 4, 3, hidden=(8,), core=core, core_size=8, shared_trunk=shared,
        prev_action_reward=True,
    )  # fmt: skip
    model = build_model(spec)
    T1, B = 5, 2
    obs, context = torch.randn(T1, B, 4), torch.randn(T1, B, spec.context_dim)
    first = torch.zeros(T1, B, dtype=torch.bool)
    first[0] = True
    start = model.initial_state(B)
    with torch.no_grad():
        out = model.unroll(obs, start, first, context=context)
        other = model.unroll(obs, start, first, context=torch.zeros_like(context))
        outs = out if isinstance(out, tuple) else (out,)
        state = start
        for t in range(T1):  # acting, step by step, gives the unroll's rows
            step, state = model.act(obs[t], state, first[t], context[t])
            torch.testing.assert_close(step, outs[0][t])
        if kind == "actor-critic":  # the critic too, on a shared trunk or its own
            state = start
            for t in range(T1):
                _, value, state = model.act_value(obs[t], state, first[t], context[t])
                torch.testing.assert_close(value, outs[1][t])
    for a, b in zip(outs, other if isinstance(other, tuple) else (other,), strict=True):
        assert not torch.allclose(a, b)  # the policy or Q values, and the values, see it
    with pytest.raises(ValueError, match="previous action and reward"):
        model.act(obs[0], start, first[0])


def test_q_network_and_build():
    spec = mlp_spec("q", 4, 2)
    assert isinstance(build_model(spec), QNetwork)
    assert forward(build_model(spec), torch.zeros(3, 4)).shape == (3, 2)
    assert ModelSpec.from_dict(spec.to_dict()) == spec


IMAGE = ModelSpec("actor-critic", (4, 84, 84), ActionSpace("discrete", 6), obs_dtype="uint8")
BOX = ActionSpace("box", shape=(3,), low=(-1.0,) * 3, high=(1.0,) * 3)


@pytest.mark.parametrize(
    "spec",
    [
        mlp_spec("actor-critic", 4, 2),
        mlp_spec("q", 4, 2, hidden=(8,)),
        ModelSpec("actor-critic", (3,), BOX, hidden=(8,), shared_trunk=False),
        ModelSpec("actor-critic", (4, 84, 84), ActionSpace("discrete", 6), encoder="a3c"),
        ModelSpec("q", (4, 84, 84), ActionSpace("discrete", 6), encoder="nature"),
        ModelSpec(
            "actor-critic",
            (10, 10, 4),
            ActionSpace("discrete", 3),
            encoder="minatar",
            channels_last=True,
        ),
    ],
    ids=["mlp", "q-mlp", "gaussian", "a3c-conv", "nature-q", "minatar"],
)
def test_every_parameter_lives_in_the_flat_vector(spec):
    # a pull, a push and a checkpoint move the flat vector only: a parameter outside it would
    # silently never be shared
    model = build_model(spec)
    flat = flatten_parameters(model)
    base, end = flat.data_ptr(), flat.data_ptr() + flat.numel() * flat.element_size()
    for name, p in model.named_parameters():
        assert base <= p.data_ptr() < end, name
    assert sum(p.numel() for p in model.parameters()) == flat.numel()
    assert ModelSpec.from_dict(spec.to_dict()) == spec
    obs = torch.zeros(2, *spec.obs_shape, dtype=getattr(torch, spec.obs_dtype))
    out = forward(model, obs)
    (out[0] if isinstance(out, tuple) else out).sum().backward()
    assert flat_grad(model).shape == flat.shape


def test_paper_network_shapes_and_parameter_count():
    # conv 16 8x8/4 -> (16, 20, 20), conv 32 4x4/2 -> (32, 9, 9), fc 256, heads 6 + 1
    model = build_model(dataclass_replace(IMAGE, encoder="a3c", shared_trunk=True))
    expected = (4 * 16 * 64 + 16) + (16 * 32 * 16 + 32) + (32 * 81 * 256 + 256) + (256 * 6 + 6)
    expected += 256 + 1
    assert sum(p.numel() for p in model.parameters()) == expected
    nature = build_model(dataclass_replace(IMAGE, kind="q", encoder="nature"))
    # conv 32 8x8/4 -> 20, 64 4x4/2 -> 9, 64 3x3/1 -> 7; fc 512; 6 Q values
    n = (4 * 32 * 64 + 32) + (32 * 64 * 16 + 64) + (64 * 64 * 9 + 64) + (64 * 49 * 512 + 512)
    assert sum(p.numel() for p in nature.parameters()) == n + 512 * 6 + 6


def test_uint8_pixels_are_scaled_inside_the_network():
    model = build_model(dataclass_replace(IMAGE, encoder="a3c"))
    x = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    a, _ = forward(model, x)
    b, _ = forward(model, x.float() / 255.0)
    torch.testing.assert_close(a, b)


def _plain_nchw(enc, x: torch.Tensor) -> torch.Tensor:
    """The encoder's features from its own parameters by plain NCHW float32 layers."""
    import torch.nn.functional as F

    y = x.float() / 255.0
    for conv in enc.convs:
        y = F.relu(F.conv2d(y, conv.weight, conv.bias, conv.stride))
    return F.relu(F.linear(y.reshape(len(x), -1), enc.fc.weight, enc.fc.bias))


@pytest.mark.parametrize("encoder", ["a3c", "nature"])
def test_the_learning_pass_computes_what_plain_nchw_convolutions_compute(encoder, monkeypatch):
    """The encoder runs its convs on NHWC memory when gradients are on (faster backward);
    the features and every parameter's gradient must be those of the plain NCHW layers."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = build_model(dataclass_replace(IMAGE, encoder=encoder))
    enc = model.encoder
    x = torch.randint(0, 256, (6, 4, 84, 84), dtype=torch.uint8)
    w = torch.randn(enc.out_dim)
    layouts: list[bool] = []  # each conv's input: NHWC or not
    conv2d = F.conv2d

    def recording(x, weight, *args):
        layouts.append(x.is_contiguous(memory_format=torch.channels_last))
        return conv2d(x, weight, *args)

    monkeypatch.setattr(F, "conv2d", recording)
    (enc(x) @ w).sum().backward()
    got = [p.grad.clone() for p in enc.parameters()]
    with torch.no_grad():
        acted = enc(x)
    monkeypatch.undo()
    n = len(enc.convs)
    assert layouts == [True] * n + [False] * n  # NHWC to learn, NCHW to act
    enc.zero_grad()
    ref = _plain_nchw(enc, x)
    (ref @ w).sum().backward()
    torch.testing.assert_close(acted, ref.detach())
    # the two layouts sum in different orders: rounding apart (a seed whose pre-activation
    # lands within rounding of 0 flips that ReLU's gradient; seed 0 has none)
    for g, p in zip(got, enc.parameters(), strict=True):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-4)


def test_space_to_depth_moves_each_block_of_pixels_into_channels():
    """Worked by hand: block (i, j) of size s x s of channel c lands at pixel (i, j), channel
    c*s*s + dy*s + dx, for bytes and for wider elements (float32's 16-byte groups)."""
    from asyncrl.models import space_to_depth

    for dtype in (np.uint8, np.float32):
        obs = np.arange(2 * 3 * 8 * 12).reshape(2, 3, 8, 12).astype(dtype)  # (N, C, H, W)
        out = space_to_depth(obs, 4)
        assert out.shape == (2, 2, 3, 48) and out.dtype == dtype
        for n, c, y, x in np.ndindex(2, 3, 8, 12):
            assert out[n, y // 4, x // 4, c * 16 + (y % 4) * 4 + x % 4] == obs[n, c, y, x]
    assert space_to_depth(np.zeros((5, 7, 4, 84, 84), np.uint8), 4).shape == (5, 7, 21, 21, 64)


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
@pytest.mark.parametrize("encoder", ["a3c", "nature"])
def test_the_first_layer_on_space_to_depth_images_computes_the_8x8_conv(encoder, precision):
    """APPO's learning pass reads ``learning_layout``'s images (each 4 x 4 block of pixels as
    64 channels) with the first layer as a 2x2 conv of stride 1: the features and every
    gradient must be those of the plain 8x8 conv of stride 4 on the env's images."""
    torch.manual_seed(0)
    enc = build_model(dataclass_replace(IMAGE, encoder=encoder, precision=precision)).encoder
    obs = np.random.default_rng(0).integers(0, 256, (2, 3, 4, 84, 84), dtype=np.uint8)
    layout = enc.learning_layout(obs)
    assert layout is not None and layout.shape == (2, 3, 21, 21, 64)
    w = torch.randn(enc.out_dim)
    features = enc(torch.from_numpy(layout).movedim(-1, -3))
    (features @ w).sum().backward()
    got = [p.grad.clone() for p in enc.parameters()]
    enc.zero_grad()
    ref = _plain_nchw(enc, torch.from_numpy(obs).reshape(6, 4, 84, 84))
    (ref @ w).sum().backward()
    if precision == "float32":  # the same sums in another order
        torch.testing.assert_close(features, ref.detach(), rtol=1e-4, atol=1e-4)
        for g, p in zip(got, enc.parameters(), strict=True):
            torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-4)
    else:  # to bfloat16's precision, as the plain layout's (test below)
        assert _rel(features.detach(), ref.detach()) < 0.02
        for g, p in zip(got, enc.parameters(), strict=True):
            assert _rel(g, p.grad) < 0.15


def test_images_the_first_layer_cannot_tile_keep_the_plain_nhwc_layout():
    """A first layer whose kernel is not twice its stride (MinAtar's 3x3/1) or an image that
    is not a whole number of strides (86 = 4 x 21 + 2) learns from plain NHWC copies."""
    from asyncrl.models import ConvEncoder

    enc = ConvEncoder("a3c", (4, 86, 86), channels_last=False)
    assert enc.s2d == 0
    obs = np.random.default_rng(0).integers(0, 256, (3, 4, 86, 86), dtype=np.uint8)
    np.testing.assert_array_equal(enc.learning_layout(obs), obs.transpose(0, 2, 3, 1))
    assert ConvEncoder("minatar", (10, 10, 4), channels_last=True).s2d == 0
    assert ConvEncoder("a3c", (4, 84, 84), channels_last=False).s2d == 4


def test_gaussian_head_gives_mean_and_state_independent_log_std():
    model = build_model(ModelSpec("actor-critic", (3,), BOX, hidden=(8,)))
    params, v = forward(model, torch.randn(5, 3))
    assert params.shape == (5, 6) and v.shape == (5,)
    dist = model.distribution(params)
    torch.testing.assert_close(dist.std, torch.ones(5, 3))  # log-std starts at 0
    a = dist.sample(np.random.default_rng(0))
    assert a.shape == (5, 3) and a.dtype == np.float32


def dataclass_replace(spec, **kw):
    import dataclasses

    return dataclasses.replace(spec, **kw)


def test_running_obs_stats_merge_batches_exactly():
    from asyncrl.models import ObsNormalizer, update_obs_stats

    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(n, 3)).astype(np.float32) for n in (5, 17, 1, 40)]
    norm = ObsNormalizer(3, clip=10.0)
    for b in batches:
        update_obs_stats(norm.stats, b)
    allx = np.concatenate(batches)
    assert float(norm.stats[0]) == len(allx)
    np.testing.assert_allclose(norm.stats[1:4].numpy(), allx.mean(0), rtol=1e-5)
    np.testing.assert_allclose(norm.stats[4:].numpy(), allx.var(0), rtol=1e-4)
    out = norm(torch.from_numpy(allx))
    np.testing.assert_allclose(out.mean(0).numpy(), 0.0, atol=1e-4)
    assert float(norm(torch.full((1, 3), 1e6)).max()) == 10.0  # clipped


def test_statistics_kept_in_rows_merge_to_those_of_all_the_observations():
    # shared-memory workers each write a row of their own (no lost merges) and normalise with
    # the start merged with every row; an empty row (count 0) counts for nothing
    from asyncrl.models import ObsNormalizer, combine_obs_stats, update_obs_stats

    rng = np.random.default_rng(1)
    start = rng.normal(-1.0, 0.5, size=(30, 2)).astype(np.float32)
    seen = [rng.normal(5.0, 3.0, size=(n, 2)).astype(np.float32) for n in (7, 60)]
    base = ObsNormalizer(2, clip=10.0).stats
    update_obs_stats(base, start)
    rows = torch.zeros(3, 5)  # the third worker has seen nothing yet
    for row, batch in zip(rows, seen, strict=False):
        update_obs_stats(row, batch[:4])
        update_obs_stats(row, batch[4:])
    out = torch.empty(5)
    combine_obs_stats(base, rows, out)
    allx = np.concatenate([start, *seen]).astype(np.float64)
    assert float(out[0]) == len(allx)
    np.testing.assert_allclose(out[1:3].numpy(), allx.mean(0), rtol=1e-5)
    np.testing.assert_allclose(out[3:].numpy(), allx.var(0), rtol=1e-4)
    # nothing seen anywhere: the normaliser's start (mean 0, variance 1) as it is
    fresh = ObsNormalizer(2, clip=10.0).stats
    combine_obs_stats(fresh, torch.zeros(2, 5), out)
    assert out.tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]


def test_uint8_vector_observations_normalise_on_the_scale_their_statistics_have():
    # the statistics are gathered from the rollout's raw values (0-255); the normaliser must
    # read the same values, not the encoder's 1/255-scaled ones (every input would sit near
    # -1.7 standard deviations then)
    from asyncrl.models import update_obs_stats

    spec = ModelSpec("actor-critic", (3,), ActionSpace("discrete", 2), "uint8", obs_clip=10.0)
    model = build_model(spec)
    obs = np.random.default_rng(0).integers(0, 256, size=(1000, 3), dtype=np.uint8)
    update_obs_stats(model.obs_norm.stats, obs)
    x = model.obs_norm(torch.from_numpy(obs))
    np.testing.assert_allclose(x.mean(0).numpy(), 0.0, atol=1e-4)
    np.testing.assert_allclose(x.std(0).numpy(), 1.0, atol=1e-2)


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_normalised_runs_share_checkpoint_and_freeze_their_statistics(backend, tmp_path):
    import asyncrl
    from asyncrl.checkpoint import load_checkpoint

    run_dir = tmp_path / "run"
    summary = asyncrl.train(
        env="Pendulum-v1",
        backend=backend,
        workers=2,
        normalize_obs=True,
        steps=4_000,
        run_dir=str(run_dir),
        progress=False,
    )
    stats = load_checkpoint(run_dir)["glob"].obs_stats
    # both workers' observations, each kept in a row of its own: none lost to a race
    assert stats[0] == summary["total_steps"]
    policy = asyncrl.load(run_dir, "last")
    saved = policy.model.obs_norm.stats.clone()
    np.testing.assert_allclose(saved.numpy(), stats)
    asyncrl.evaluate(run_dir, episodes=1, which="last")
    torch.testing.assert_close(asyncrl.load(run_dir, "last").model.obs_norm.stats, saved)  # frozen
    resumed = asyncrl.train(resume=run_dir, steps=6_000, progress=False)
    after = load_checkpoint(run_dir)["glob"].obs_stats
    assert after[0] > stats[0] and resumed["total_steps"] >= 6_000  # restored, then grown


def test_every_core_name_is_built_and_says_whether_it_has_memory():
    # the CLI's --core choices are the cores models.CORES builds; a core with memory (a state
    # of its own) must be replayed whole (Core.sequential), which APPO's minibatches follow
    import typing

    from asyncrl.models import CORES
    from asyncrl.settings import CoreName

    assert set(typing.get_args(CoreName)) == set(CORES)
    for name, build in CORES.items():
        core = build(6, 4)
        x, first = torch.randn(3, 6), torch.tensor([False, True, False])
        h, state = core.step(x, core.initial_state(3), first)
        assert h.shape == (3, core.out_dim)
        assert core.sequential == (state[0].numel() > 0), name


MINATAR = ModelSpec(
    "actor-critic",
    (10, 10, 4),
    ActionSpace("discrete", 3),
    obs_dtype="bool",
    encoder="minatar",
    channels_last=True,
)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize(
    ("spec", "obs"),
    [
        (dataclass_replace(IMAGE, encoder="a3c"), lambda: torch.randint(0, 256, (6, 4, 84, 84))),
        (dataclass_replace(IMAGE, encoder="nature"), lambda: torch.randint(0, 256, (6, 4, 84, 84))),
        (MINATAR, lambda: torch.rand(6, 10, 10, 4) < 0.2),
    ],
    ids=["a3c-uint8", "nature-uint8", "minatar-bool"],
)
def test_a_bfloat16_encoder_gives_float32s_features_and_gradients_to_its_precision(spec, obs):
    """--precision bfloat16 runs the conv layers under CPU autocast (uint8 pixels with the
    1/255 folded into the first layer's weights; other inputs as float32 does): features and
    gradients come out float32, those of the float32 net to bfloat16's 8 bits of mantissa (a
    lost 1/255, a layer left out or a gradient dropped is off by far more) in the learning
    pass (NHWC) and the acting pass (NCHW) alike; the parameters stay float32."""
    torch.manual_seed(0)
    x = obs()
    x = x.to(torch.uint8) if x.dtype == torch.int64 else x
    models = [build_model(spec), build_model(dataclass_replace(spec, precision="bfloat16"))]
    ref, bf = (m.encoder for m in models)
    bf.load_state_dict(ref.state_dict())
    w = torch.randn(ref.out_dim)
    feats, grads, acts, fixed = [], [], [], []
    for model, enc in zip(models, (ref, bf), strict=True):
        f = enc(x)
        (f @ w).sum().backward()
        feats.append(f)
        grads.append([p.grad for p in enc.parameters()])
        with torch.no_grad():
            acts.append(enc(x))
        with torch.no_grad(), model.fixed_weights():  # a worker's rollout
            fixed.append(enc(x))
        assert f.dtype == acts[-1].dtype == fixed[-1].dtype == torch.float32
        assert all(p.dtype == torch.float32 for p in enc.parameters())
    # measured (seed 0): features within 0.5%, gradients within 8% (the first conv layer's of
    # the Nature net, at the end of the longest chain of bfloat16 products)
    assert _rel(feats[1].detach(), feats[0].detach()) < 0.02
    assert _rel(acts[1], acts[0]) < 0.02  # the acting pass held to float32's, not to itself
    assert _rel(acts[1], feats[1].detach()) < 0.02  # the behaviour policy's are the learner's
    # the rollout's pass on weights converted once: as close, and float32's unchanged
    assert _rel(fixed[1], acts[0]) < 0.02
    assert torch.equal(fixed[0], acts[0])
    for g_bf, g_ref in zip(*grads, strict=True):
        assert g_bf.dtype == torch.float32
        assert _rel(g_bf, g_ref) < 0.15


def test_fixed_weights_serve_only_passes_without_gradient_and_only_inside_the_span():
    """The bfloat16 copies a rollout acts with are the parameters of its start: a pass with
    gradient inside the span (the learner's) reads the parameters themselves, and after the
    span a changed parameter is seen at once (a copy kept past it would act on old weights)."""
    torch.manual_seed(0)
    model = build_model(dataclass_replace(IMAGE, encoder="a3c", precision="bfloat16"))
    enc = model.encoder
    x = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        before = enc(x)
    with model.fixed_weights():
        with torch.no_grad():
            acted = enc(x)
        learnt = enc(x)
        assert learnt.requires_grad and torch.equal(learnt.detach(), before)
        with torch.no_grad():
            enc.fc.bias.add_(1.0)  # a change inside the span is not seen (the promise)
            assert torch.equal(enc(x), acted)
    with torch.no_grad():
        after = enc(x)
    assert _rel(acted, before) < 0.02
    moved = (after - before)[before > 0]  # each active feature by the fc's new bias
    assert moved.numel() > 100 and (moved - 1.0).abs().max() < 0.05


@pytest.mark.parametrize(
    ("amx", "avx512_bf16", "expected"),
    [
        (True, False, True),
        (False, True, True),
        (False, False, False),
        (None, None, False),
        (True, None, True),
    ],
)
def test_bfloat16_units_are_amx_or_avx512_bf16(monkeypatch, amx, avx512_bf16, expected):
    """Either unit makes bfloat16 faster than float32 (AMX on Intel, AVX-512 BF16 on AMD Zen
    4); neither, or torch without the private probes (None: they raise), is float32; a torch
    that drops one probe still finds the other unit."""
    from asyncrl.models import cpu_has_bfloat16_units

    def probe(value):
        def f():
            if value is None:
                raise AttributeError("no such probe in this torch")
            return value

        return f

    # raising=False: the probes are private, and this must run on a torch without them too
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", probe(amx), raising=False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", probe(avx512_bf16), raising=False)
    assert cpu_has_bfloat16_units() is expected


def test_the_precision_is_resolved_when_the_network_is_chosen(monkeypatch):
    """auto is bfloat16 for a conv encoder on a CPU with AMX or AVX-512 BF16, float32 elsewhere
    and for an MLP; bfloat16 asked for an MLP is a clear error; a spec saved before the field
    existed loads as float32."""
    from asyncrl.algos import base
    from asyncrl.config import Config
    from asyncrl.envs import EnvInfo
    from asyncrl.errors import UserError

    pixels = EnvInfo("Pong", (4, 84, 84), "uint8", ActionSpace("discrete", 6))
    vector = EnvInfo("CartPole", (4,), "float32", ActionSpace("discrete", 2))
    for fast in (True, False):
        monkeypatch.setattr(base, "cpu_has_bfloat16_units", lambda fast=fast: fast)
        auto = Config(precision="auto")
        assert base.model_spec_for(auto, "actor-critic", pixels).precision == (
            "bfloat16" if fast else "float32"
        )
        assert base.model_spec_for(auto, "actor-critic", vector).precision == "float32"
        assert base.model_spec_for(Config(), "q", pixels).precision == "float32"
        assert base.model_spec_for(Config(precision="bfloat16"), "q", pixels).precision == (
            "bfloat16"
        )
    with pytest.raises(UserError, match="--precision bfloat16 is for conv encoders"):
        base.model_spec_for(Config(precision="bfloat16"), "actor-critic", vector)
    old = IMAGE.to_dict()
    del old["precision"]
    assert ModelSpec.from_dict(old).precision == "float32"


def test_auto_is_decided_once_by_the_driver_and_a_saved_bfloat16_model_loads_anywhere(
    monkeypatch, run_dir
):
    """A short MinAtar run (a conv net) with --precision auto on a CPU said to have a bfloat16
    unit: the workers get the driver's decision, not "auto" to decide again on their own CPU (a
    Ray node's may differ); summary.json records it and config.json keeps "auto" for a resume.
    Its model, loaded where the CPU has no unit, computes in float32 (bfloat16 would only be
    emulated there; the parameters are float32 either way) and acts as the bfloat16 one does."""
    pytest.importorskip("minatar")
    import json

    import asyncrl
    from asyncrl import policy as policy_module
    from asyncrl import trainer
    from asyncrl.algos import base

    # a machine with the units, whatever this one has (the loader asks too: a model saved in
    # bfloat16 loads so only where they are)
    monkeypatch.setattr(base, "cpu_has_bfloat16_units", lambda: True)
    monkeypatch.setattr(policy_module, "cpu_has_bfloat16_units", lambda: True)
    seen = []
    real = trainer.make_run

    def make_run(cfg, info, spec, state):  # the workers build their model from the spec
        seen.append(spec.precision)
        return real(cfg, info, spec, state)

    monkeypatch.setattr(trainer, "make_run", make_run)
    summary = asyncrl.train(
        env="MinAtar/Breakout-v1",
        backend="threads",
        workers=1,
        steps=300,
        precision="auto",
        run_dir=str(run_dir),
        progress=False,
    )
    assert seen == ["bfloat16"]
    assert summary["precision"] == "bfloat16"
    assert json.loads((run_dir / "config.json").read_text())["precision"] == "auto"
    here = asyncrl.load(run_dir, "last")
    assert here.spec.precision == "bfloat16"
    monkeypatch.setattr(policy_module, "cpu_has_bfloat16_units", lambda: False)
    elsewhere = asyncrl.load(run_dir, "last")
    assert elsewhere.spec.precision == "float32"
    for p_here, p_there in zip(here.model.parameters(), elsewhere.model.parameters(), strict=True):
        assert torch.equal(p_here, p_there)
    obs = torch.rand(64, *here.spec.obs_shape) < 0.3  # MinAtar's 0/1 channels
    state, first = here.model.initial_state(64), torch.zeros(64, dtype=torch.bool)
    with torch.no_grad():
        logits_bf16, _ = here.model.act(obs, state, first)
        logits_f32, _ = elsewhere.model.act(obs, state, first)
    assert logits_bf16.dtype == logits_f32.dtype == torch.float32
    assert 0 < _rel(logits_bf16, logits_f32) < 0.05  # rounding apart, not the same computation
