"""Ways to run the Atari acting forward pass faster on this CPU (issue #28, item 1): the act
forward of a worker's step, timed as the worker runs it (one core, the emulators stepping
between calls so that they evict the network from the caches), in each variant:

    python benchmarks/act_inference.py --seeds 3                  # Pong, the atari preset's sizes
    python benchmarks/act_inference.py --env BreakoutNoFrameskip-v4 --envs 8

- ``fp32``: today's path (float32, NCHW, ``torch.no_grad``);
- ``channels_last``: the conv weights and input in NHWC, the layout oneDNN prefers;
- ``bf16``: CPU autocast to bfloat16 (the CPU has AVX-512 BF16);
- ``int8-fc``: the fully connected layer (2.6 MB of float32 weights, most of the network's
  bytes) quantised to int8 with dynamic activation scales (``torch.ao`` dynamic quantisation,
  fbgemm's VNNI kernels); the acting copy would be requantised after each pull;
- ``bf16-fc``: the fc's weights kept in bfloat16 (1.3 MB), converted once per pull;
- ``bf16-cached``: every layer's weights in bfloat16, converted once per pull, the input
  converted from uint8 (the encoder's own bfloat16 path casts the float32 weights on every call
  under autocast);
- ``mkldnn``: the convs and the fc converted to oneDNN's blocked layout
  (``torch.utils.mkldnn.to_mkldnn``).

Each variant's probabilities are compared with fp32's (the largest absolute difference), and
the cost of requantising the fc (``int8-fc``) or converting (``mkldnn``) is timed: a worker pulls
new parameters once per rollout (t_max steps), so that cost is paid once per t_max act calls.
Prints the median over seeds of microseconds per act call and per agent step. Then the idea of
reusing the acting forward pass in the loss (its graph kept, no second forward), timed against
today's way over whole rollouts.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
import torch.utils.mkldnn


def variants(
    model: torch.nn.Module,
) -> dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], Callable[[], object]]]:
    """name -> (the act forward on a uint8 batch, the per-pull preparation it needs)."""
    enc = model.encoder
    head = model._policy

    def fp32(x: torch.Tensor) -> torch.Tensor:
        return head(enc(x))

    cl = copy.deepcopy(enc).to(memory_format=torch.channels_last)

    def channels_last(x: torch.Tensor) -> torch.Tensor:
        y = (x.float() / 255.0).contiguous(memory_format=torch.channels_last)
        for conv in cl.convs:
            y = F.relu(conv(y))
        return head(F.relu(cl.fc(y.flatten(1))))

    def bf16(x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return head(enc(x).float())

    q: dict[str, torch.nn.Module] = {}

    def quantise() -> None:
        q["fc"] = torch.ao.quantization.quantize_dynamic(
            torch.nn.Sequential(enc.fc), {torch.nn.Linear}, dtype=torch.qint8
        )

    quantise()

    def int8_fc(x: torch.Tensor) -> torch.Tensor:
        y = x.float() / 255.0
        for conv in enc.convs:
            y = F.relu(conv(y))
        return head(F.relu(q["fc"](y.flatten(1))))

    bf: dict[str, torch.Tensor] = {}

    def to_bf16() -> None:
        bf["w"], bf["b"] = enc.fc.weight.to(torch.bfloat16), enc.fc.bias.to(torch.bfloat16)

    to_bf16()

    def bf16_fc(x: torch.Tensor) -> torch.Tensor:
        y = x.float() / 255.0
        for conv in enc.convs:
            y = F.relu(conv(y))
        y = F.linear(y.flatten(1).to(torch.bfloat16), bf["w"], bf["b"])
        return head(F.relu(y.float()))

    cast: list[tuple[torch.Tensor, torch.Tensor, int]] = []
    fcw: dict[str, torch.Tensor] = {}

    def to_bf16_all() -> None:
        # every layer's weights in bfloat16 once per pull, the 1/255 folded into the first
        # conv's (as the encoder's learning pass does): no autocast casts a call
        cast.clear()
        for i, conv in enumerate(enc.convs):
            w = conv.weight * (1.0 / 255.0) if i == 0 else conv.weight
            cast.append((w.to(torch.bfloat16), conv.bias.to(torch.bfloat16), conv.stride[0]))
        fcw["w"], fcw["b"] = enc.fc.weight.to(torch.bfloat16), enc.fc.bias.to(torch.bfloat16)

    to_bf16_all()

    def bf16_cached(x: torch.Tensor) -> torch.Tensor:
        y = x.to(torch.bfloat16)
        for w, b, s in cast:
            y = F.relu(F.conv2d(y, w, b, s))
        return head(F.relu(F.linear(y.flatten(1), fcw["w"], fcw["b"])).float())

    cast_cl: list[tuple[torch.Tensor, torch.Tensor, int]] = []

    def to_bf16_nhwc() -> None:
        to_bf16_all()
        cast_cl[:] = [(w.contiguous(memory_format=torch.channels_last), b, s) for w, b, s in cast]

    to_bf16_nhwc()

    def bf16_cached_nhwc(x: torch.Tensor) -> torch.Tensor:
        y = x.contiguous(memory_format=torch.channels_last).to(torch.bfloat16)
        for w, b, s in cast_cl:
            y = F.relu(F.conv2d(y, w, b, s))
        return head(F.relu(F.linear(y.flatten(1), fcw["w"], fcw["b"])).float())

    mk: dict[str, torch.nn.Module] = {}

    def to_mkldnn() -> None:
        mk["enc"] = torch.utils.mkldnn.to_mkldnn(copy.deepcopy(enc))

    to_mkldnn()

    def mkldnn(x: torch.Tensor) -> torch.Tensor:
        y = (x.float() / 255.0).to_mkldnn()
        m = mk["enc"]
        for conv in m.convs:
            y = torch.relu(conv(y))
        y = y.to_dense().flatten(1)
        return head(F.relu(enc.fc(y)))

    return {
        "fp32": (fp32, lambda: None),
        "channels_last": (channels_last, lambda: cl.load_state_dict(enc.state_dict())),
        "bf16": (bf16, lambda: None),
        "int8-fc": (int8_fc, quantise),
        "bf16-fc": (bf16_fc, to_bf16),
        "mkldnn": (mkldnn, to_mkldnn),
        "bf16-cached": (bf16_cached, to_bf16_all),
        "bf16-cached-nhwc": (bf16_cached_nhwc, to_bf16_nhwc),
    }


def reuse(model: torch.nn.Module, env, obs, T: int, B: int, rounds: int, rng) -> dict[str, float]:
    """Seconds of network work per agent step (env steps left out) of a rollout done two ways:
    today's (act without gradient, then one batched forward and backward over the T x B rows)
    and the acting forward kept with its graph and reused by the loss (no second forward; the
    backward runs through T graphs of B rows each). The loss stands in for A3C's: the policy's
    log-probabilities and a value head, summed."""
    enc, head = model.encoder, model._policy
    value = torch.nn.Linear(enc.out_dim, 1)
    n = int(env.single_action_space.n)
    out = {"today": 0.0, "reuse": 0.0}
    for r in range(2 * rounds):
        way = "today" if r % 2 == 0 else "reuse"
        spent, frames = 0.0, []
        kept = []
        for _ in range(T):
            obs, *_ = env.step(rng.integers(n, size=B))
            x = torch.from_numpy(obs)
            frames.append(x)
            t0 = time.perf_counter()
            if way == "today":
                with torch.no_grad():
                    torch.softmax(head(enc(x)), -1)
            else:
                h = enc(x)
                torch.softmax(head(h.detach()), -1)
                kept.append(h)
            spent += time.perf_counter() - t0
        t0 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        value.zero_grad(set_to_none=True)
        h = enc(torch.stack(frames).flatten(0, 1)) if way == "today" else torch.cat(kept)
        with torch.no_grad():
            enc(torch.from_numpy(obs))  # the bootstrap row
        loss = torch.log_softmax(head(h), -1).sum() + value(h).sum()
        loss.backward()
        spent += time.perf_counter() - t0
        out[way] += spent / (T * B) / rounds
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--env", default="PongNoFrameskip-v4")
    ap.add_argument("--envs", type=int, default=None, help="games per worker (the preset's)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2000, help="act calls timed per variant")
    ap.add_argument("--rounds", type=int, default=50, help="rollouts timed each way (reuse)")
    args = ap.parse_args()

    from asyncrl.algos import make_algorithm
    from asyncrl.atari import make_atari_vec_env
    from asyncrl.config import preset
    from asyncrl.envs import probe_env
    from asyncrl.models import build_model

    torch.set_num_threads(1)
    cfg = preset(None, env=args.env, algo="a3c").validate()  # A3C's acting sizes
    B, T = args.envs or cfg.envs_per_worker, cfg.t_max
    info = probe_env(cfg.env)
    per: dict[str, list[float]] = {}
    prep: dict[str, list[float]] = {}
    diff: dict[str, float] = {}
    ways: dict[str, list[float]] = {"today": [], "reuse": []}
    for seed in range(args.seeds):
        torch.manual_seed(seed)
        model = build_model(make_algorithm(cfg, info).model_spec())
        env = make_atari_vec_env(cfg.env, B, seed)
        obs, _ = env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        n = int(env.single_action_space.n)  # type: ignore[attr-defined]
        with torch.no_grad():
            vs = variants(model)
            ref = torch.softmax(vs["fp32"][0](torch.from_numpy(obs)), -1)
            for name, (fwd, prepare) in vs.items():
                p = torch.softmax(fwd(torch.from_numpy(obs)).float(), -1)
                diff[name] = max(diff.get(name, 0.0), float((p - ref).abs().max()))
                t0 = time.perf_counter()
                for _ in range(20):
                    prepare()
                prep.setdefault(name, []).append((time.perf_counter() - t0) / 20)
                spent = 0.0
                for _ in range(args.steps):
                    obs, *_ = env.step(rng.integers(n, size=B))  # evicts, as in a worker
                    x = torch.from_numpy(obs)
                    t0 = time.perf_counter()
                    fwd(x)
                    spent += time.perf_counter() - t0
                per.setdefault(name, []).append(spent / args.steps)
        for way, v in reuse(model, env, obs, T, B, args.rounds, rng).items():
            ways[way].append(v)
        env.close()
    base = statistics.median(per["fp32"])
    print(
        f"\n{cfg.env}, batch {B} (one worker's games), t_max {T}, one core, "
        f"median of {args.seeds} seeds:"
    )
    print(
        "| variant | us per act call | us per agent step | vs fp32 "
        "| per-pull cost / t_max, us per call | max prob diff |"
    )
    print("|---|---|---|---|---|---|")
    for name in per:
        m = statistics.median(per[name])
        pp = statistics.median(prep[name]) / T
        print(
            f"| {name} | {m * 1e6:,.0f} | {m / B * 1e6:,.0f} | {m / base:.2f}x | {pp * 1e6:,.0f} "
            f"| {diff[name]:.1e} |"
        )

    t, r = statistics.median(ways["today"]), statistics.median(ways["reuse"])
    print(
        f"\nnetwork work per agent step over a rollout of {T} x {B}: today's {t * 1e6:,.0f} us "
        f"(act, then a batched forward and backward); the acting forward reused by the loss "
        f"{r * 1e6:,.0f} us ({r / t:.2f}x)"
    )


if __name__ == "__main__":
    main()
