"""Whole episodes of one policy played on several processes at once, for the work that runs
after training has stopped and its cores are free: the re-scoring of the kept model, and the
rest of an evaluation still under way then (:mod:`asyncrl.rescore`, :mod:`asyncrl.evaluation`).

Each process plays its share of the episodes as an evaluation does
(:func:`asyncrl.policy.play_episodes`: in waves on a vector env of its own, one batched forward
pass a step) and sends each return as its episode ends, so the caller keeps the episodes that
ended when it stops them at a deadline, and shows their progress. Only where the envs are
separate (Atari's emulators, Box2D's): a natively vectorized env (CartPole's) steps a wave of a
hundred in about the time of one, so one process is as fast. (Sample Factory and RLlib play their
evaluation episodes on workers of their own in the same way.)
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from asyncrl.messages import GlobalSnapshot
from asyncrl.models import ModelSpec
from asyncrl.policy import OutOfTime, Policy, StopFlag, Stopped, Which

#: the fewest episodes a process is started for: one costs a fork, an env and a network
MIN_SHARE = 2
#: seconds a process is given to end once told to stop, before it is terminated
_GRACE_S = 5.0


class PolicySource(Protocol):
    """What a process builds its policy from (picklable: a ``spawn`` process gets a copy)."""

    def build(self) -> Policy: ...


@dataclass(frozen=True)
class SavedPolicy:
    """A run's model file, as :func:`asyncrl.load` reads it (``which``: best, last or None)."""

    run_dir: str
    which: Which | None = None

    def build(self) -> Policy:
        from asyncrl.policy import load

        return load(self.run_dir, self.which)


@dataclass(frozen=True)
class SnapshotPolicy:
    """The parameters of a snapshot of the global state (an evaluation's)."""

    spec: ModelSpec
    algo: str
    env_id: str
    env_kwargs: dict[str, Any]
    snap: GlobalSnapshot

    def build(self) -> Policy:
        from asyncrl.evaluation import load_snapshot
        from asyncrl.models import build_model, flatten_parameters

        model = build_model(self.spec)
        load_snapshot(model, flatten_parameters(model), self.snap)
        return Policy(model, self.algo, self.spec, self.env_id, self.env_kwargs)


def separate_envs(env_id: str) -> bool:
    """Whether the evaluation envs of ``env_id`` are stepped one by one (Atari's, and any env
    without a native vector version), so that more processes play its episodes faster."""
    from asyncrl.envs import env_spec, is_atari

    spec = env_spec(env_id)
    return is_atari(spec) or spec.vector_entry_point is None


def spare_cores() -> int:
    """The cores this process may run on (its affinity, where the OS tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def processes_for(env_id: str, episodes: int) -> int:
    """Processes to play ``episodes`` episodes of ``env_id`` on once training has stopped: one
    a core, at least :data:`MIN_SHARE` episodes each, where the envs are separate; else 1."""
    if not separate_envs(env_id):
        return 1
    return max(1, min(spare_cores(), episodes // MIN_SHARE))


#: the seconds alone that a piece of play must be expected to take, for each way of starting a
#: process, before it is worth playing on several: a forked one starts in a moment; a spawned
#: one imports PyTorch and the env afresh
WORTH_ALONE_S = {"fork": 5.0, "spawn": 60.0}


def worth_processes(processes: int, seconds_alone: float) -> int:
    """``processes``, where play expected to take ``seconds_alone`` on one is worth the start
    of that many; else 1."""
    return processes if seconds_alone >= WORTH_ALONE_S[_start_method()] else 1


def _start_method() -> str:
    # fork, as the processes backend's workers start (milliseconds, PyTorch already imported),
    # but not from a Ray driver, whose gRPC threads a forked child must not inherit
    ray = sys.modules.get("ray")
    if sys.platform == "linux" and not (ray is not None and ray.is_initialized()):
        return "fork"
    return "spawn"


def play_parallel(
    source: PolicySource,
    seeds: Sequence[int],
    processes: int,
    *,
    deterministic: bool = True,
    rng_seed: Any = 0,
    stop: StopFlag | None = None,
    deadline: float | Callable[[], float | None] | None = None,
    on_episode: Callable[[int, float], None] | None = None,
) -> list[float]:
    """The returns of the episodes of ``seeds`` (in their order), played on ``processes``
    processes, episode i by process i % processes, each on a vector env of its own. As
    :func:`asyncrl.policy.play_episodes`: ``on_episode(i, ret)`` as episode i ends, then
    :class:`Stopped` once ``stop`` is set, :class:`OutOfTime` at ``deadline`` (a
    :func:`time.perf_counter` instant, or a function that tells it); a process that fails
    raises RuntimeError with its error. A stochastic policy samples from a generator of each
    process's own, from ``rng_seed``. Every process has ended when it returns or raises."""
    until = deadline if callable(deadline) else lambda: deadline
    ctx: Any = mp.get_context(_start_method())
    results: Any = ctx.Queue()
    told = ctx.Event()
    n = len(seeds)
    shares = [list(range(k, n, processes)) for k in range(processes)]
    procs = [
        ctx.Process(
            target=_play_share,
            args=(source, [seeds[i] for i in share], share, deterministic, rng_seed, k),
            kwargs={"results": results, "stop": told},
            name=f"asyncrl-play-{k}",
            daemon=True,
        )
        for k, share in enumerate(shares)
        if share
    ]
    ended: dict[int, float] = {}
    finished = 0

    def take(msg: tuple) -> None:
        nonlocal finished
        if msg[0] == "episode":
            ended[msg[1]] = msg[2]
            if on_episode is not None:
                on_episode(msg[1], msg[2])
        elif msg[0] == "failed":
            raise RuntimeError(msg[1])
        else:  # "done"
            finished += 1

    try:
        for p in procs:
            p.start()
        while finished < len(procs):
            if stop is not None and stop.is_set():
                raise Stopped
            if (t := until()) is not None and time.perf_counter() >= t:
                with contextlib.suppress(queue.Empty):  # the episodes that ended in time
                    while True:
                        take(results.get_nowait())
                raise OutOfTime
            try:
                take(results.get(timeout=0.1))
            except queue.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(
                        f"{dead[0].name} died (exit code {dead[0].exitcode})"
                    ) from None
    finally:
        told.set()
        limit = time.monotonic() + _GRACE_S
        for p in procs:
            if p.pid is not None:
                p.join(timeout=max(0.0, limit - time.monotonic()))
                if p.is_alive():
                    p.terminate()
                    p.join(timeout=1.0)
        results.close()
        results.cancel_join_thread()
    return [ended[i] for i in range(n)]


def _play_share(
    source: PolicySource,
    seeds: list[int],
    indices: list[int],
    deterministic: bool,
    rng_seed: Any,
    k: int,
    *,
    results: Any,
    stop: Any,
) -> None:
    """A process's share: its episodes' returns put on ``results`` as they end, then "done"
    (or "failed", with the error; nothing more once ``stop`` is set)."""
    # Ctrl-C reaches the whole process group: the main process alone decides how to stop
    # (it sets ``stop``), as with the processes backend's workers
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    import torch

    from asyncrl.policy import play_episodes

    torch.set_num_threads(1)  # one core's worth each, as a worker's
    try:
        policy = source.build()
        envs = policy.eval_envs(len(seeds), seeds[0])
        try:
            rng = np.random.default_rng(np.random.SeedSequence(rng_seed).spawn(k + 1)[k])
            play_episodes(
                policy, envs, seeds, deterministic, rng, stop=stop,
                on_episode=lambda i, ret: results.put(("episode", indices[i], ret)),
            )  # fmt: skip
        finally:
            envs.close()
        results.put(("done",))
    except Stopped:
        pass
    except Exception as e:
        results.put(("failed", f"{type(e).__name__}: {e}"))
