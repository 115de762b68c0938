"""Evaluation during training: a reader of the global parameters, as a checkpoint is.

The supervisor hands the :class:`Evaluator` a snapshot of the global state (shared memory, or
the Ray server's) when an evaluation is due; a thread of the main process plays whole episodes
of the policy on envs of its own (greedy by default, whole games with no-op starts on Atari, as
``asyncrl eval``) and hands back an :class:`Evaluation`, which the monitor records and the
trainer keeps as the best model when it is the best so far. No worker waits for it: it only
shares the cores, one evaluation at a time.

(SB3's ``EvalCallback``, RLlib's evaluation workers and PFRL's evaluator in
``train_agent_async`` give their users the same: a number for the policy itself rather than
for the exploring episodes, and the best model kept.)
"""

from __future__ import annotations

import math
import queue
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np
import torch

from asyncrl.messages import GlobalSnapshot
from asyncrl.models import ModelSpec, build_model, flatten_parameters
from asyncrl.policy import OutOfTime, Policy, Stopped, play_episodes

#: a tag mixed into the evaluation envs' seeds, so they never share a stream with a worker's
_EVAL_STREAM = 0xE7A1
#: and the re-scoring's (held_out_seeds)
HELD_OUT_STREAM = 0x5C0E
#: why :meth:`Evaluator._episodes` stopped short: the run's deadline came, or the seconds a
#: screen before the stop that re-prices the reserve was given (``within``)
OUT_OF_TIME, GAVE_UP = "out of time", "gave up"
#: the stage of a re-screen's second play: the kept model's, on the same starts
KEPT_PAIR = "re-screen of the kept model"
#: The reset seeds are 32-bit, and their top bit says who plays them: clear for the evaluations
#: during training (screens and confirmations, :func:`eval_seeds`), set for the re-scoring of
#: the kept model after it (:func:`held_out_seeds`). The two sets are disjoint by construction,
#: not by the odds of two draws colliding: the re-scoring never replays a start the selection
#: of the model saw. (A natively vectorized env draws a wave's starts from the wave's first
#: seed, which is in its set's half too.)
HELD_OUT_BIT = 1 << 31


def eval_seeds(seed: int, index: int, episodes: int) -> list[int]:
    """The reset seeds of evaluation ``index`` of a run: new episodes each time (the best
    model is not picked on a fixed set of starts), the same ones on a rerun of the seed; all
    under :data:`HELD_OUT_BIT`."""
    ss = np.random.SeedSequence([seed, _EVAL_STREAM, index])
    return [int(s) & (HELD_OUT_BIT - 1) for s in ss.generate_state(episodes, np.uint32)]


def held_out_seeds(seed: int, episodes: int) -> list[int]:
    """The reset seeds of the kept model's re-scoring after training: at or over
    :data:`HELD_OUT_BIT`, so none is an evaluation's, the same ones on a rerun of the seed."""
    ss = np.random.SeedSequence([seed, HELD_OUT_STREAM])
    return [int(s) | HELD_OUT_BIT for s in ss.generate_state(episodes, np.uint32)]


def confirm_margin(tries: int, first: float, episodes: int = 100) -> float:
    """The standard errors the ``tries``-th try of a run's stop rule must clear, on a mean of
    ``episodes`` episodes: ``first`` (--confirm-stderr) at the first, more at each later one. A
    policy whose true mean is exactly the target passes the k-th try with probability
    (1 - Phi(first)) / k^2, so the run as a whole, trying as often as it likes, passes with at
    most about (pi^2 / 6)(1 - Phi(first)) (under 4% at the default 2). A fixed margin would let
    a run that tries again and again stop on a lucky confirmation (docs/evaluation.md).

    The mean less k standard errors estimated from the episodes is Student's t with
    ``episodes - 1`` degrees of freedom, whose tails are heavier than the normal's where the
    later margins reach: the quantile is the normal's with the Cornish-Fisher correction."""
    if tries <= 1:
        return first
    tail = (1.0 - NormalDist().cdf(first)) / tries**2
    z = -NormalDist().inv_cdf(max(tail, 1e-300))  # (the upper tail, accurate when tiny)
    nu = max(1, episodes - 1)
    return z + (z**3 + z) / (4 * nu) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * nu**2)


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of the global parameters at ``global_step``."""

    index: int
    global_step: int
    wall_seconds: float  # of the run, when the parameters were read
    returns: tuple[float, ...]
    seconds: float  # the evaluation's own time
    snapshot: GlobalSnapshot | None = field(default=None, repr=False, compare=False)
    error: str | None = None  # the evaluation failed (the run goes on without it)
    confirmed: bool = False  # the screen reached the target: ``returns`` are the confirmation's
    # the screen's own time, its re-screen's included (what a periodic evaluation costs)
    screen_seconds: float = 0.0
    # the run's time ran out before the screen (or, ``confirmed``, the confirmation) ended: the
    # episodes that did are ``returns``, of ``planned``; it counts for nothing (the ones that
    # ended first are the short ones)
    cut_short: bool = False
    planned: int = 0
    # the screen beat the kept model's score without reaching the target: ``returns`` are a
    # re-screen's, as many new episodes (Evaluator)
    rescreened: bool = False
    # the kept model's returns on the re-screen's starts (none where no model was kept in
    # this process): the paired comparison the model is kept or not on
    kept_returns: tuple[float, ...] = ()
    # the seconds of the kept model's episodes of a re-screen, timed on their own: they
    # price the kept model's re-scoring, the rest of ``seconds`` the latest model's episodes
    kept_seconds: float = 0.0
    # a screen before the stop that re-prices the reserve (Evaluator.submit's ``within``) whose
    # model's episodes proved too long to free time: it stopped playing, and counts for nothing
    gave_up: bool = False
    # what the processes training freed saved it (Evaluator.processes): the seconds its plays
    # on them would have taken on one, less theirs; of the latest model's episodes that
    # ``seconds`` prices (a confirmation's, not its screen's), and of the kept model's pair.
    # An evaluation under way at the stop plays its next waves on them: its waves on this
    # thread and on the processes are priced each as they played (TimePlan.observe)
    saved_seconds: float = 0.0
    kept_saved_seconds: float = 0.0

    @property
    def mean(self) -> float:
        return statistics.fmean(self.returns)

    @property
    def stage(self) -> str:
        """What ``returns`` are: a "screen"'s, a "re-screen"'s or a "confirmation"'s."""
        return "confirmation" if self.confirmed else "re-screen" if self.rescreened else "screen"

    @property
    def played(self) -> int:
        """The episodes played in all: a re-screen's screen and the kept model's episodes
        too (a confirmation's screen is in ``screen_seconds``, and not counted here)."""
        return len(self.returns) * (2 if self.rescreened else 1) + len(self.kept_returns)

    @property
    def beats_kept(self) -> bool | None:
        """Whether a re-screen beat the kept model on the same starts (None: no such pair)."""
        if not self.kept_returns:
            return None
        return self.mean > statistics.fmean(self.kept_returns)

    @property
    def std(self) -> float:
        return statistics.pstdev(self.returns)

    @property
    def stderr(self) -> float:
        """The standard error of the mean (0 for a single episode)."""
        n = len(self.returns)
        return statistics.stdev(self.returns) / math.sqrt(n) if n > 1 else 0.0

    def reaches(self, target: float, stderrs: float) -> bool:
        """Whether the mean less ``stderrs`` standard errors is at or above ``target``."""
        return self.mean - stderrs * self.stderr >= target


class Evaluator:
    """Plays ``episodes`` episodes of the policy on each snapshot :meth:`submit` hands it, in a
    thread of its own; :meth:`results` returns the finished evaluations.

    With ``confirm=(target, n)``, an evaluation whose mean reaches ``target`` plays ``n`` new
    episodes and reports theirs instead: a screen, then a confirmation.
    Ten episodes are cheap but too few to stop on: a run evaluates often and stops on the first
    pass, so a policy below the target gets many tries at a lucky ten (a CartPole run on a CI
    machine kept one whose ten passed 475 and whose next twenty averaged 455).

    For the same reason they are too few to keep a model on: an evaluation whose screen beats
    :attr:`bar` (the kept model's score) without reaching the target plays as many new episodes
    and reports theirs instead, a re-screen, and the kept model (:meth:`keep`) plays the same
    starts. The kept model is replaced only where the new one beats it on those: a paired
    comparison, which the starts' own spread (a Pendulum hanging down or upright) does not
    decide, and on episodes nothing selected (a Pendulum run kept a model whose lucky screen
    scored -134.9 and whose 100 new episodes averaged -348.8; runs kept an early model on a
    lucky re-screen where their last was better by 8 to 32). SB3's ``EvalCallback`` keeps
    the best of single screens."""

    def __init__(
        self,
        spec: ModelSpec,
        algo: str,
        env_id: str,
        env_kwargs: dict[str, Any],
        *,
        episodes: int,
        deterministic: bool,
        seed: int,
        confirm: tuple[float, int] | None = None,
        deadline: Callable[[], float | None] = lambda: None,
    ):
        self.spec, self.algo, self.env_id, self.env_kwargs = spec, algo, env_id, env_kwargs
        self.episodes, self.deterministic, self.seed = episodes, deterministic, seed
        self.confirm = confirm
        #: the run's target (None: none), which a screen that reaches it without a
        #: confirmation tries as it is (the stop rule's), not re-screened
        self.target = confirm[0] if confirm else None
        #: the kept model's score (None: no model kept yet), read when a screen ends: a screen
        #: that beats it is re-screened (set by the trainer to the monitor's best evaluation)
        self.bar: Callable[[], float | None] = lambda: None
        self._kept: GlobalSnapshot | None = None  # the kept model's parameters (keep())
        #: when the run's time for evaluations ends (a time.perf_counter instant, or None): an
        #: evaluation still playing then is cut short (read at every step: the plan changes)
        self.deadline = deadline
        #: processes to play in (set once training has stopped and its cores are free): the
        #: evaluation under way plays its remaining episodes on them (asyncrl.parallel)
        self.processes = 1
        #: the seconds the processes saved each stage of the evaluation under way
        self._saved: dict[str, float] = {}
        #: the evaluation under way, for a progress line: its stage ("screen" or
        #: "confirmation"), episodes ended, episodes planned, and its perf_counter start
        self.progress: tuple[str, int, int, float] | None = None
        self._requests: queue.Queue[tuple[int, int, float, GlobalSnapshot, float | None] | None] = (
            queue.Queue()
        )
        self._results: queue.Queue[Evaluation] = queue.Queue()
        self._pending = 0  # submitted, not yet taken back (only the caller's thread counts)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()  # close(): end the evaluation under way

    @property
    def busy(self) -> bool:
        return self._pending > 0

    def submit(
        self,
        index: int,
        global_step: int,
        wall: float,
        snap: GlobalSnapshot,
        within: float | None = None,
    ) -> bool:
        """Evaluate ``snap``; False (and nothing done) while an evaluation is under way.

        ``within``: the seconds each of its stages may take, past which it gives up
        (:attr:`Evaluation.gave_up`), and a re-screen is compared with the kept model's score
        rather than played beside it: the screen before the stop that re-prices the reserve,
        which asks only whether a model whose episodes end (or end sooner) beats a kept one
        whose episodes stall (or last long): the kept model's plays would cost what the screen
        is there to free."""
        if self._pending:
            return False
        self._pending += 1
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="asyncrl-eval", daemon=True)
            self._thread.start()
        self._requests.put((index, global_step, wall, snap, within))
        return True

    def keep(self, snap: GlobalSnapshot | None) -> None:
        """The parameters the run keeps now (best_model.pt's): a later re-screen plays them on
        its starts too. (Called between evaluations, by the thread that submits them.)"""
        self._kept = snap

    def results(self) -> list[Evaluation]:
        """The evaluations finished since the last call."""
        out = []
        while True:
            try:
                out.append(self._results.get_nowait())
            except queue.Empty:
                break
        self._pending -= len(out)
        return out

    def wait(
        self, give_up: Callable[[], bool] = lambda: False, tick: Callable[[], None] = lambda: None
    ) -> list[Evaluation]:
        """:meth:`results`, once the evaluation under way (if any) has finished, or as soon as
        ``give_up()`` (a signal meanwhile: the user wants out); ``tick()`` every 0.2 s while
        it waits (a progress line)."""
        out = []
        while self._pending and not give_up():
            tick()
            try:
                out.append(self._results.get(timeout=0.2))
            except queue.Empty:
                continue
            self._pending -= 1
        return out + self.results()

    def close(self) -> None:
        """End the thread, and the evaluation under way at its next step: a thread left
        running into the interpreter's exit (an Atari evaluation of 10 games takes a minute)
        can be inside torch or the emulator when C++ tears down under it."""
        if self._thread is not None:
            self._stop.set()
            self._requests.put(None)
            self._thread.join(timeout=60.0)

    # ------------------------------------------------------------------ the thread
    def _loop(self) -> None:
        # one core's worth, like a worker (OpenMP's count is this thread's own: train sets the
        # main thread's, asyncrl.trainer._one_thread)
        torch.set_num_threads(1)
        from asyncrl.envs import make_eval_vec_env

        # envs by the episodes they play side by side: the screen's, and the confirmation's
        # wider wave, each built at its first use
        waves: dict[int, Any] = {}

        def envs_for(episodes: int) -> Any:
            if episodes not in waves:
                waves[episodes] = make_eval_vec_env(
                    self.env_id,
                    episodes,
                    self.seed,
                    self.env_kwargs,
                    self.spec.obs_layout,
                    self.spec.action.masked,
                )
            return waves[episodes]

        rng = np.random.default_rng([self.seed, _EVAL_STREAM])
        # the network the snapshots are loaded into, and a second for the kept model's
        policy: tuple[Policy, torch.Tensor] | None = None
        kept: tuple[Policy, torch.Tensor] | None = None
        try:
            while (request := self._requests.get()) is not None:
                index, step, wall, snap, within = request
                t0 = time.perf_counter()
                self._saved = {}
                # every request gets an answer, failed or not: the run waits for the last one
                try:
                    if policy is None:
                        policy, kept = self._policy(), self._policy()
                    load_snapshot(policy[0].model, policy[1], snap)
                    returns, stage, screen, cut, pair, paired, gave_up = self._play(
                        policy, kept, envs_for, index, rng, snap, within
                    )
                    seconds = time.perf_counter() - t0
                    ev = Evaluation(
                        index, step, wall, tuple(returns), seconds, snap, None,
                        stage == "confirmation", screen, cut is not None and not gave_up,
                        cut or 0, stage == "re-screen", tuple(pair), paired, gave_up,
                        *self._saved_by(stage),
                    )  # fmt: skip
                except Stopped:  # close(): nobody waits for this answer
                    break
                except Exception as e:  # reported; the run goes on without evaluations
                    ev = Evaluation(index, step, wall, (), time.perf_counter() - t0, None, str(e))
                self._results.put(ev)
        finally:
            for vec in waves.values():
                vec.close()

    def _saved_by(self, stage: str) -> tuple[float, float]:
        """What the processes saved the evaluation just played, whose returns are ``stage``'s:
        the latest model's episodes that price it (a confirmation's alone), and the kept
        model's pair (:attr:`Evaluation.saved_seconds`)."""
        pair = self._saved.get(KEPT_PAIR, 0.0)
        own = self._saved.get(stage, 0.0)
        if stage == "re-screen":
            own += self._saved.get("screen", 0.0)
        return own, pair

    def _policy(self) -> tuple[Policy, torch.Tensor]:
        """A network to load snapshots into, and its parameters as one flat tensor."""
        model = build_model(self.spec)
        flat = flatten_parameters(model)
        return Policy(model, self.algo, self.spec, self.env_id, self.env_kwargs), flat

    def _play(
        self,
        policy: tuple[Policy, torch.Tensor],
        kept: tuple[Policy, torch.Tensor] | None,
        envs_for: Callable[[int], Any],
        index: int,
        rng: np.random.Generator,
        snap: GlobalSnapshot,
        within: float | None = None,
    ) -> tuple[list[float], str, float, int | None, list[float], float, bool]:
        """The screen's returns; where they reach the target, the confirmation's instead, and
        where they beat the kept model's score (:attr:`bar`), a re-screen's: new episodes, for
        the screen's were picked for passing and would bias the mean up. And the stage the
        returns are of (:attr:`Evaluation.stage`), the screen's seconds (a re-screen's
        included), where the deadline cut a stage short (or it gave up, past ``within``), the
        episodes it planned (None where nothing was cut), a re-screen's pair: the kept model's
        returns on its starts, and their seconds, and whether it gave up."""
        t0 = time.perf_counter()
        m, n = self.episodes, self.confirm[1] if self.confirm else 0
        # the confirmation's seeds, then the re-screen's: each evaluation's own, never a
        # screen's or another evaluation's (eval_seeds)
        seeds = eval_seeds(self.seed, index, m + max(n, m))
        returns, cut = self._episodes("screen", policy[0], envs_for, seeds[:m], rng, snap, within)
        if cut:
            return returns, "screen", time.perf_counter() - t0, m, [], 0.0, cut == GAVE_UP
        mean = statistics.fmean(returns)
        if self.confirm is not None and mean >= self.confirm[0]:
            screen = time.perf_counter() - t0
            more, cut = self._episodes("confirmation", policy[0], envs_for, seeds[m:], rng, snap)
            return more, "confirmation", screen, n if cut else None, [], 0.0, False
        bar = self.bar()
        # (a screen at the target with no confirmation is the stop rule's try itself)
        reached = self.target is not None and mean >= self.target
        if bar is None or mean <= bar or reached:
            return returns, "screen", time.perf_counter() - t0, None, [], 0.0, False
        # both models on the same starts and, where they sample, the same stream of draws
        again = seeds[m : 2 * m]
        draws = [self.seed, _EVAL_STREAM, index, 1]
        more, cut = self._episodes(
            "re-screen", policy[0], envs_for, again, np.random.default_rng(draws), snap, within
        )
        gave_up = cut == GAVE_UP
        pair: list[float] = []
        paired = time.perf_counter()
        kept_snap = self._kept if within is None else None  # (``within``: the score instead)
        if not cut and kept is not None and kept_snap is not None:
            load_snapshot(kept[0].model, kept[1], kept_snap)
            pair, pair_cut = self._episodes(
                KEPT_PAIR, kept[0], envs_for, again,
                np.random.default_rng(draws), kept_snap,
            )  # fmt: skip
            if pair_cut:  # the new model's re-screen is whole: compared with the score instead
                pair = []
        paired = time.perf_counter() - paired  # (a pair the deadline cut took time too)
        cut_at = m if cut else None
        return more, "re-screen", time.perf_counter() - t0, cut_at, pair, paired, gave_up

    def _episodes(
        self,
        stage: str,
        policy: Policy,
        envs_for: Callable[[int], Any],
        seeds: list[int],
        rng: np.random.Generator,
        snap: GlobalSnapshot,
        within: float | None = None,
    ) -> tuple[list[float], str | None]:
        """The returns of the episodes of ``seeds`` in their order, and None; or, where the
        deadline came first, those of the episodes that had ended, and :data:`OUT_OF_TIME`
        (:data:`GAVE_UP` where ``within`` seconds of this play came first). Wave by wave on
        this thread, or, once :attr:`processes` is over 1 (training has stopped), the waves
        left on that many processes."""
        ended: dict[int, float] = {}
        start = time.perf_counter()
        self.progress = (stage, 0, len(seeds), start)
        deadline = self.deadline
        given_up_at = math.inf if within is None else start + within
        if within is not None:

            def deadline() -> float:
                limit = self.deadline()
                return given_up_at if limit is None else min(limit, given_up_at)

        def record(i: int, ret: float) -> None:
            ended[i] = ret
            self.progress = (stage, len(ended), len(seeds), start)

        envs = envs_for(len(seeds))
        try:
            for at in range(0, len(seeds), envs.num_envs):
                on_episode = lambda i, r, at=at: record(at + i, r)  # noqa: E731
                if self.processes > 1 and len(seeds) - at > 1:
                    from asyncrl.parallel import SnapshotPolicy, play_parallel

                    source = SnapshotPolicy(
                        self.spec, self.algo, self.env_id, self.env_kwargs, snap
                    )
                    parallel_start = time.perf_counter()
                    try:
                        play_parallel(
                            source, seeds[at:], self.processes, deterministic=self.deterministic,
                            rng_seed=(self.seed, _EVAL_STREAM, seeds[at]), stop=self._stop,
                            deadline=deadline, on_episode=on_episode,
                        )  # fmt: skip
                    finally:
                        # each process plays its share of them, one after another (as
                        # TimePlan.units counts): on one, they would have taken that many times
                        # longer
                        k = len(seeds) - at
                        took = time.perf_counter() - parallel_start
                        saved = took * (k / math.ceil(k / self.processes) - 1)
                        self._saved[stage] = self._saved.get(stage, 0.0) + saved
                    break
                wave = play_episodes(
                    policy, envs, seeds[at : at + envs.num_envs], self.deterministic, rng,
                    stop=self._stop, deadline=deadline, on_episode=on_episode,
                )  # fmt: skip
                for i, ret in enumerate(wave):
                    ended[at + i] = ret
        except OutOfTime:
            # the bound that came first, not the clock now (processes take a few seconds to
            # end, in which the run's deadline may pass too)
            limit = self.deadline()
            gave_up = given_up_at < (math.inf if limit is None else limit)
            return [ended[i] for i in sorted(ended)], GAVE_UP if gave_up else OUT_OF_TIME
        finally:
            self.progress = None
        return [ended[i] for i in range(len(seeds))], None


@torch.no_grad()
def load_snapshot(model: torch.nn.Module, flat: torch.Tensor, snap: GlobalSnapshot) -> None:
    """Give ``model`` (whose parameters are views of ``flat``) the snapshot's parameters and
    observation statistics."""
    # np.require copies only a read-only array (Ray's object store hands those out), which
    # torch.from_numpy warns about even though nothing here writes to it
    flat.copy_(torch.from_numpy(np.require(snap.params, requirements="W")))
    norm = getattr(model, "obs_norm", None)
    if norm is not None and snap.obs_stats is not None:
        norm.stats.copy_(torch.from_numpy(np.require(snap.obs_stats, requirements="W")))
