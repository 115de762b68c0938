"""Where a worker's time goes: the share of env step, forward pass (action selection), loss,
backward pass, gradient flattening and clipping, optimizer step and parameter pull in the
actor-learner loop.

One worker runs the real loop (`asyncrl.worker.Worker`, shared-memory store) in this process
with timers around each phase; the rest of the loop (rollout bookkeeping, episode reports,
counters) is "other". Median share over N seeds.

    python benchmarks/worker_profile.py --seeds 3
    python benchmarks/worker_profile.py --seeds 3 --algo nstep-q
    python benchmarks/worker_profile.py --seeds 3 --env PongNoFrameskip-v4 --steps 20000
    python benchmarks/worker_profile.py --seeds 1 --env PongNoFrameskip-v4 --algo appo \
        --steps 20000 envs_per_worker=8 t_max=128
"""

from __future__ import annotations

import argparse
import ast
import collections
import shlex
import statistics
import sys
import time
from typing import Any

import torch

import asyncrl.worker as worker_mod
from asyncrl.algos import make_algorithm
from asyncrl.backends.local import SharedMemory, SharedMemoryStore
from asyncrl.config import Config, preset
from asyncrl.envs import probe_env
from asyncrl.state import GlobalState
from asyncrl.worker import Worker


class _Discard:
    def send(self, msg: Any) -> None:
        pass


_inner: list[float] = []  # per open timed call: the time its own timed calls took


def timed(fn: Any, name: str, acc: collections.Counter) -> Any:
    """``fn`` charging its *own* time to ``acc[name]``: a timed call inside it (APPO's targets
    inside its first minibatch's loss) is charged to its own phase only, so the shares add up."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        _inner.append(0.0)
        try:
            return fn(*args, **kwargs)
        finally:
            spent = time.perf_counter() - t0
            acc[name] += spent - _inner.pop()
            if _inner:
                _inner[-1] += spent

    return wrapper


def profile(cfg: Config) -> tuple[collections.Counter, float]:
    torch.set_num_threads(1)
    info = probe_env(cfg.env)
    algo = make_algorithm(cfg, info)
    state = GlobalState.create(cfg, algo.model_spec(), 1, algo.uses_target_network)
    shared = SharedMemory.create(state, 1)
    acc: collections.Counter = collections.Counter()
    store = SharedMemoryStore(cfg, shared, _Discard(), 0, 0)
    w = Worker(0, 0, cfg, info, store, None)
    w.envs.step = timed(w.envs.step, "env step", acc)
    w.algo.act = timed(w.algo.act, "forward (act)", acc)
    w.algo.loss = timed(w.algo.loss, "loss forward", acc)
    if hasattr(w.algo, "minibatch_loss"):  # APPO: its updates call this, not loss
        w.algo.minibatch_loss = timed(w.algo.minibatch_loss, "loss forward", acc)
    if hasattr(w.algo, "prepare"):  # APPO: the targets and the frames' layout, once a rollout
        w.algo.prepare = timed(w.algo.prepare, "targets and layout (APPO)", acc)
    store.pull = timed(store.pull, "pull parameters", acc)
    store.push = timed(store.push, "optimizer step (push)", acc)
    store.refresh = timed(store.refresh, "refresh parameters (APPO, V-trace)", acc)
    backward = torch.Tensor.backward
    torch.Tensor.backward = timed(backward, "backward", acc)  # type: ignore[method-assign]
    grad_fn = worker_mod.flat_grad
    clip_fn = worker_mod.clip_grad_norm_
    worker_mod.flat_grad = timed(grad_fn, "flatten + clip gradient", acc)
    worker_mod.clip_grad_norm_ = timed(clip_fn, "flatten + clip gradient", acc)
    try:
        t0 = time.perf_counter()
        w.run()
        total = time.perf_counter() - t0
    finally:
        torch.Tensor.backward = backward  # type: ignore[method-assign]
        worker_mod.flat_grad, worker_mod.clip_grad_norm_ = grad_fn, clip_fn
    acc["other"] = total - sum(acc.values())
    return acc, state.steps() / total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=300_000)
    p.add_argument("--algo", default="a3c")
    p.add_argument("--env", default="CartPole-v1", help="the env's preset applies")
    p.add_argument("extra", nargs="*", help="Config fields as KEY=VALUE (e.g. envs_per_worker=8)")
    args = p.parse_args()
    extra = {k: ast.literal_eval(v) for k, v in (kv.split("=", 1) for kv in args.extra)}
    shares: dict[str, list[float]] = collections.defaultdict(list)
    rates = []
    for seed in range(args.seeds):
        cfg = preset(
            None, env=args.env, algo=args.algo, seed=seed, steps=args.steps, workers=1, **extra
        ).validate()
        acc, rate = profile(cfg)
        total = sum(acc.values())
        for k, v in acc.items():
            shares[k].append(v / total)
        rates.append(rate)
        print(f"seed {seed}: {rate:,.0f} env steps/s in one worker", flush=True)
    print(
        f"\n{args.env} {args.algo}, one worker, preset settings: median "
        f"{statistics.median(rates):,.0f} env steps/s"
    )
    print("| phase | share of the worker's time |\n|---|---|")
    for k in sorted(shares, key=lambda k: -statistics.median(shares[k])):
        print(f"| {k} | {100 * statistics.median(shares[k]):.1f}% |")
    print(f"reproduce: python benchmarks/worker_profile.py {shlex.join(sys.argv[1:])}")


if __name__ == "__main__":
    main()
