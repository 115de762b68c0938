"""float32 against bfloat16 (``--precision``) for a pixel network on this CPU: the learning pass
(forward and backward of the whole actor-critic, APPO's minibatch of 256 Pong frames, NHWC as a
worker's learning pass) and the act forward (8 games, NCHW, no gradient), one thread, as a
worker runs them. Prints the median milliseconds over seeds and the ratio bfloat16 / float32,
with the CPU and its bfloat16 units (AMX, AVX-512 BF16), which `--precision auto` reads.

    python benchmarks/precision.py --seeds 3
    python benchmarks/precision.py --seeds 3 --net nature --batch 512

A ratio under 1 is bfloat16 faster. A whole run's frames/s also counts the emulators and the
acting pass: measure it with `benchmarks/interleaved.py` (docs/atari.md#bfloat16). With
``--compile``, the float32 learning pass is also timed with the encoder under ``torch.compile``
(PyTorch's inductor; docs/benchmarks.md#atari-a-faster-worker-step), after its compilation.
With ``--layouts``, the learning pass on frames laid out as APPO's worker lays them out, NHWC
against the first layer's space-to-depth form (docs/atari.md#the-first-layer-as-a-2x2-conv);
``--precisions float32`` times float32 alone, on a CPU that would emulate bfloat16.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Literal

import torch
from common import cpu

from asyncrl.envs import ActionSpace
from asyncrl.models import ActorCritic, ModelSpec, build_model, space_to_depth

Precision = Literal["float32", "bfloat16"]


def time_pass(
    net: str,
    precision: Precision,
    batch: int,
    grad: bool,
    seed: int,
    n: int,
    compiled: bool = False,
    layout: Literal["nchw", "nhwc", "s2d"] = "nchw",
) -> float:
    """Median seconds of ``n`` calls (after 3 warm-up calls, which compile the encoder where
    ``compiled``) of one pass of a fresh network, on frames stored NCHW (the pass copies them
    NHWC), or as APPO's worker hands them over: laid out once a rollout, NHWC or in the first
    layer's space-to-depth form (``ConvEncoder.learning_layout``)."""
    torch.manual_seed(seed)
    spec = ModelSpec(
        "actor-critic",
        (4, 84, 84),
        ActionSpace("discrete", 6),
        obs_dtype="uint8",
        encoder=net,  # type: ignore[arg-type]
        precision=precision,
    )
    model = build_model(spec)
    assert isinstance(model, ActorCritic)
    if compiled:  # every pass reaches the (shared) encoder through this reference
        object.__setattr__(model, "_encode", torch.compile(model.encoder))
    obs = torch.randint(0, 256, (batch, 4, 84, 84), dtype=torch.uint8)
    if layout == "nhwc":
        obs = obs.movedim(1, -1).contiguous().movedim(-1, 1)
    elif layout == "s2d":
        obs = torch.from_numpy(space_to_depth(obs.numpy(), 4)).movedim(-1, -3)
    state, first = model.initial_state(batch), torch.zeros(batch, dtype=torch.bool)
    times = []
    for _ in range(n + 3):
        t0 = time.perf_counter()
        if grad:
            # APPO's minibatch: single transitions, every row learnt from (no bootstrap row)
            model.zero_grad(set_to_none=True)
            params, values = model.unroll(obs[None], state, first[None], bootstrap=False)
            (params.logsumexp(-1).mean() + values.square().mean()).backward()
        else:
            with torch.no_grad():
                model.act(obs, state, first)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[3:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--net", choices=["a3c", "nature"], default="a3c")
    p.add_argument("--batch", type=int, default=256, help="learning pass rows (APPO: 256)")
    p.add_argument("--act-batch", type=int, default=8, help="games a worker acts for (APPO: 8)")
    p.add_argument("--calls", type=int, default=20, help="timed calls a seed and variant")
    p.add_argument(
        "--precisions",
        nargs="+",
        choices=["float32", "bfloat16"],
        default=["float32", "bfloat16"],
        help="the precisions to time (bfloat16 emulated on a CPU without its units takes "
        "minutes); the ratio is printed where both are",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="also time the float32 learning pass with the encoder under torch.compile",
    )
    p.add_argument(
        "--layouts",
        action="store_true",
        help="also time the learning pass on frames laid out NHWC and in space-to-depth form",
    )
    args = p.parse_args()
    torch.set_num_threads(1)
    print(f"CPU: {cpu()}; {args.net} net, one thread, median of {args.seeds} seeds")
    for name, batch, grad in (
        (f"learning pass, {args.batch} frames", args.batch, True),
        (f"act forward, {args.act_batch} games", args.act_batch, False),
    ):
        ms = {}
        for precision in args.precisions:
            runs = [
                time_pass(args.net, precision, batch, grad, seed, args.calls)
                for seed in range(args.seeds)
            ]
            ms[precision] = 1e3 * statistics.median(runs)
        line = ", ".join(f"{k} {v:.2f} ms" for k, v in ms.items())
        if len(ms) == 2:
            line += f", ratio {ms['bfloat16'] / ms['float32']:.2f}"
        print(f"{name}: {line}")
    if args.layouts:
        for precision in args.precisions:
            ms = {
                layout: 1e3
                * statistics.median(
                    time_pass(
                        args.net, precision, args.batch, True, seed, args.calls, False, layout
                    )
                    for seed in range(args.seeds)
                )
                for layout in ("nhwc", "s2d")
            }
            print(
                f"learning pass, {args.batch} frames laid out, {precision}: NHWC {ms['nhwc']:.2f}"
                f" ms, space-to-depth {ms['s2d']:.2f} ms, ratio {ms['s2d'] / ms['nhwc']:.2f}"
            )
    if args.compile:
        ms = {
            c: 1e3
            * statistics.median(
                time_pass(args.net, "float32", args.batch, True, seed, args.calls, compiled=c)
                for seed in range(args.seeds)
            )
            for c in (False, True)
        }
        print(
            f"learning pass, {args.batch} frames, float32: eager {ms[False]:.2f} ms, "
            f"torch.compile {ms[True]:.2f} ms, ratio {ms[True] / ms[False]:.2f}"
        )
    flags = " ".join(
        f"--{k.replace('_', '-')}"
        + ("" if isinstance(v, bool) else f" {' '.join(v) if isinstance(v, list) else v}")
        for k, v in vars(args).items()
        if v is not False
    )
    print(f"command: python benchmarks/precision.py {flags}")


if __name__ == "__main__":
    main()
