"""What runs after training stops, and the plan that fits it inside ``--time-limit``.

**The kept model re-scored.** The figures a run selects on are biased up: the best of many
noisy evaluations, and the confirmation's mean given that it passed the stop rule. So once
training has stopped, the model the run keeps (``best_model.pt``, else ``model.pt``: what
:func:`asyncrl.load` gives) plays ``--rescore-episodes`` new episodes, on starts no evaluation
saw (:func:`asyncrl.evaluation.held_out_seeds`), and ``summary.json`` reports their mean as
``kept_model_return``: an estimate nothing was selected on (the benchmark suite's way,
``benchmarks/suite.py``, made every run's).

**The time limit bounds the whole process.** :class:`TimePlan` reserves, before the limit, the
expected seconds of the work after training (the workers' last rollouts, the final evaluation,
the re-scoring), from measured evaluation episodes (from the training episodes until an
evaluation has measured them), and training stops that much before the limit. An evaluation
still under way then goes on, on the cores training has freed, until the re-scoring's share of
the time; what the limit cuts short is recorded as such and counts for nothing.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from asyncrl.envs import EVAL_WAVE, eval_wave
from asyncrl.evaluation import HELD_OUT_STREAM, held_out_seeds
from asyncrl.parallel import SavedPolicy, play_parallel, worth_processes
from asyncrl.policy import OutOfTime, StopFlag, Stopped, load, play_episodes

if TYPE_CHECKING:
    from asyncrl.evaluation import Evaluation

#: seconds reserved for the workers to end their last rollouts and the model files, the
#: checkpoint and the summary to be written, once training is told to stop on time, and at
#: most this share of the limit (a few seconds' run has short rollouts to end)
STOP_SECONDS = 5.0
STOP_SHARE = 0.05
#: the most of a run's time limit the reserve may take; past it the re-scoring is cut short
#: instead. The work after training reports on the training and must not take most of it:
#: the kept model it prices may be a greedy Atari policy that stalls every game to the frame
#: cap, and be replaced by a quick one at the last evaluation (docs/atari.md, "A greedy
#: policy that stalls")
RESERVE_SHARE = 0.25
#: the most a contender's games (:attr:`TimePlan.contender_per_episode`) may raise the
#: re-scoring's price, as a multiple of the kept model's: enough for a model the stop keeps
#: whose games outgrew the kept one's as it learned to survive, bounded so that a contender
#: whose greedy games stall cannot take the training's time (docs/atari.md)
CONTENDER_RAISE = 2.0
#: seconds between two progress lines of the work after training
PROGRESS_EVERY = 5.0


@dataclass
class TimePlan:
    """The time of a run with a limit, planned backwards from it: training stops at
    ``ends_at - reserve(...)``; the evaluations end by :meth:`evaluations_end`, the re-scoring
    by ``ends_at``. Expected seconds come from the evaluations' own episodes (one thread
    beside the workers: the work after training, on ``processes`` free cores, is faster)."""

    #: the run's time limit as a :func:`time.perf_counter` instant (None: no limit)
    ends_at: float | None
    #: the limit's seconds for this process (the reserve's cap is a share of them)
    seconds: float
    rescore_episodes: int
    eval_episodes: int
    #: processes that play once training has stopped (asyncrl.parallel.processes_for)
    processes: int
    #: the envs are stepped one by one (the cost is per episode) or natively vectorized (a
    #: wave of up to EVAL_WAVE costs about one episode's steps)
    separate: bool
    #: the run's workers and this machine's cores: an evaluation beside the workers has about
    #: cores / (workers + 1) of a core, a process after training a whole one
    workers: int = 1
    cores: int = 1
    envs: int = 1  # each worker's
    #: seconds of an evaluation episode (separate) or wave (natively vectorized), on a core
    #: of its own
    per_episode: float | None = None
    measured: bool = False
    #: the same, of the kept model's evaluation: what its re-scoring, and a re-screen of it,
    #: cost. (A greedy Atari policy that stalls plays each game to the 108,000-frame cap: a
    #: minute an episode, where the kept model's took 4 s. Planned on the stalled model's,
    #: the re-scoring's reserve took half of an hour's Battle Zone run.)
    kept_per_episode: float | None = None
    #: the training episodes' length (Supervisor.training_length: the last window's mean, or
    #: for waves its longest) now, and when the latest measured evaluation's parameters were
    #: handed over: the latest model's episodes are priced longer by the ratio where the
    #: training ones have lengthened since: a game that lengthens as the agent learns to
    #: survive outgrows an evaluation a quarter of an hour old (docs/evaluation.md). Never
    #: shorter: a greedy policy may stall where the sampled one's games end.
    length: float | None = None
    measured_length: float | None = None
    #: the training episodes' length when the kept model's parameters were handed over: where
    #: the training games have shortened much since, the latest model's likely end sooner than
    #: the kept model's that price the re-scoring (:meth:`overpriced`)
    kept_length: float | None = None
    #: the seconds an episode of the latest model that beat the kept model's score on its
    #: screen but lost the re-screen, and the training episodes' length at its handover: the
    #: final evaluation, of a later model, usually keeps one like it, and in games where a
    #: better policy survives longer its re-scoring outgrows the kept model's price. Cleared
    #: when a model is kept (its own price is then the kept one).
    contender_per_episode: float | None = None
    contender_length: float | None = None

    def observe(
        self,
        ev: Evaluation,
        training: bool = True,
        kept: bool = False,
        length: float | None = None,
    ) -> None:
        """Take the expected seconds from a finished evaluation (the latest: the policy's
        episodes grow as it learns); ``training``: it played beside the workers; ``kept``:
        its model is the one the run keeps now; ``length``: the training episodes' mean
        length when its parameters were handed over. A re-screen's kept-model episodes, timed
        on their own, measure the kept model again where the latest is not kept."""
        if ev.cut_short or ev.gave_up or ev.error is not None or not ev.returns:
            return
        # (where no length was known at the handover, the length now: the price measured is
        # the latest one)
        self.measured_length = length if length is not None else self.length
        seconds = ev.seconds - ev.screen_seconds if ev.confirmed else ev.seconds
        share = self.share() if training else 1.0
        # (a re-screen's evaluation played its screen and its re-screen, each as waves of
        # their own, and then the kept model's episodes; the waves played after the stop on
        # the processes training freed, at the seconds they would have taken on one)
        n = self.units(len(ev.returns), 1)
        own = n * (2 if ev.rescreened else 1)
        self.per_episode = (seconds - ev.kept_seconds + ev.saved_seconds) / own / share
        if kept:
            self.kept_per_episode = self.per_episode
            self.kept_length = self.measured_length
            self.contender_per_episode = self.contender_length = None
        else:
            if ev.kept_returns:
                self.kept_per_episode = (ev.kept_seconds + ev.kept_saved_seconds) / n / share
            # (one played after the stop: its processes' seconds are not a screen's, and
            # the work it would price is under way)
            if ev.rescreened and training:
                self.contender_per_episode = self.per_episode
                self.contender_length = self.measured_length
        self.measured = True

    def share(self) -> float:
        """How much slower an evaluation plays beside the workers than on a core of its own:
        it has about cores / (workers + 1) of a core."""
        return max(1.0, (self.workers + 1) / self.cores)

    def state_dict(self) -> dict[str, float | None]:
        """What a resumed run's plan starts from: the seconds an episode measured so far (of
        the kept model too, whose re-scoring the reserve prices; its evaluation may be long
        past)."""
        measured = self.per_episode if self.measured else None
        return {
            "per_episode": measured,
            "kept_per_episode": self.kept_per_episode,
            "measured_length": self.measured_length if self.measured else None,
            "kept_length": self.kept_length,
            "contender_per_episode": self.contender_per_episode,
            "contender_length": self.contender_length,
        }

    def load_state_dict(self, state: dict[str, float | None]) -> None:
        if state.get("per_episode") is not None:
            self.per_episode, self.measured = state["per_episode"], True
        self.kept_per_episode = state.get("kept_per_episode")
        self.measured_length = state.get("measured_length")
        self.kept_length = state.get("kept_length")
        self.contender_per_episode = state.get("contender_per_episode")
        self.contender_length = state.get("contender_length")

    def guess(self, mean_steps: float, most_steps: int, steps_per_second: float) -> None:
        """An episode's seconds as the training episodes tell them, until an evaluation has
        measured them (a run with a short limit may end before its first). Each worker steps
        its ``envs`` envs once in envs x workers / steps-per-second seconds, the learning's
        share included: separate envs cost that a step of each env, so an episode of
        ``mean_steps`` on average costs them for its steps; a natively vectorized wave costs
        about a worker's step of all of them a step, for the longest episode (``most_steps``)."""
        if self.measured or steps_per_second <= 0:
            return
        env_step = min(self.workers, self.cores) / steps_per_second
        if self.separate:
            self.per_episode = mean_steps * env_step
        else:
            self.per_episode = most_steps * self.envs * env_step

    def playing(self, episodes: int, processes: int | None = None, kept: bool = False) -> float:
        """The expected seconds of ``episodes`` episodes on ``processes`` (default: after
        training's) processes, of the latest model (or ``kept``, the kept one, where it has
        been measured)."""
        if kept and self.kept_per_episode:
            per: float | None = self.kept_per_episode
        else:
            per = None if self.per_episode is None else self.per_episode * self.lengthening()
        if per is None or episodes <= 0:
            return 0.0
        return per * self.units(episodes, processes)

    def lengthening(self) -> float:
        """How much longer the latest model's episodes are expected than the evaluation that
        measured them: the training episodes' lengthening since, at least 1."""
        return self.growth_since(self.measured_length)

    def growth_since(self, length: float | None) -> float:
        """The training episodes' length now over ``length`` (theirs at a handover), at least
        1 (1 where either is unknown)."""
        if not self.length or not length:
            return 1.0
        return max(1.0, self.length / length)

    def units(self, episodes: int, processes: int | None = None) -> int:
        """What ``episodes`` episodes on ``processes`` (default: after training's) processes
        cost, in episodes (or waves) of one process: a process's share of them, each stepped
        on its own, or the waves of a natively vectorized env."""
        p = self.processes if processes is None else processes
        return math.ceil(episodes / (p if self.separate else EVAL_WAVE))

    def rescoring(self) -> float:
        """The expected seconds of the re-scoring: the kept model's episodes, or a contender's
        lengthened as the training episodes have since its handover, where longer, up to
        :data:`CONTENDER_RAISE` times the kept model's."""
        own = self.kept_rescoring()
        if self.contender_per_episode is None:
            return own
        growth = self.growth_since(self.contender_length)
        contender = self.contender_per_episode * growth * self.units(self.rescore_episodes)
        return max(own, min(contender, CONTENDER_RAISE * own))

    def kept_rescoring(self) -> float:
        """The expected seconds of the kept model's re-scoring, on its own episodes."""
        return self.playing(self.rescore_episodes, kept=True)

    def evaluation(self, processes: int | None = None) -> float:
        """The expected seconds of an evaluation that does not reach the target: a screen of
        the latest model and, where it beats the kept model, a re-screen of both (whose
        episodes are then the kept model's kind, not a stalled one's), each played on its own."""
        return self.playing(self.eval_episodes, processes) + self.pairs(2, processes)

    def pairs(self, plays: int, processes: int | None = None) -> float:
        """The expected seconds of ``plays`` plays of a re-screen's episodes, at the kept
        model's seconds an episode."""
        return plays * self.playing(self.eval_episodes, processes, kept=True)

    def processes_for(self, episodes: int, kept: bool = False) -> int:
        """The processes to play ``episodes`` episodes (of the ``kept`` model) on after
        training: more than one only where the play is long enough to be worth their start."""
        return worth_processes(self.processes, self.playing(episodes, 1, kept=kept))

    def screen(self) -> float:
        """The expected seconds of an evaluation during training (one thread, beside the
        workers)."""
        return self.evaluation(1) * self.share()

    def reserve(self, final_evaluation: bool, under_way: int = 0, plays: int = 0) -> float:
        """The seconds training leaves before the limit: its stop, the ``under_way`` episodes
        left of an evaluation playing (a confirmation that began late finishes on the cores
        training frees, rather than being cut short) and the ``plays`` of a re-screen's
        episodes that may follow them, a final evaluation (where the run makes one) and the
        re-scoring; at most :data:`RESERVE_SHARE` of the limit."""
        return min(self.wanted(final_evaluation, under_way, plays), self.cap())

    def wanted(self, final_evaluation: bool, under_way: int = 0, plays: int = 0) -> float:
        """The expected seconds of the work after training (:meth:`reserve`, uncapped)."""
        want = self.stopping() + self.playing(under_way) + self.pairs(plays) + self.rescoring()
        return want + (self.evaluation() if final_evaluation else 0.0)

    def cap(self) -> float:
        return RESERVE_SHARE * self.seconds

    def squeezed(self) -> bool:
        """Whether the reserve's cap squeezes the work after training: the kept model's
        re-scoring then costs training time it may not need (the model is likely a greedy
        Atari policy that stalls every game to the frame cap, and a later one's games end)."""
        # on the kept model's own price: a contender raises the reserve, up to its cap, but a
        # learning model's longer games are not a stalled one's, for which the squeeze's
        # bounded screens are there (they would make the stop's model give up)
        kept_only = self.wanted(final_evaluation=True) - self.rescoring() + self.kept_rescoring()
        return kept_only > self.cap()

    def freeing_price(self) -> float:
        """The seconds an episode (or wave) of a model kept in place of the kept one may take
        for the work after training, priced on that model's episodes alone (its final
        evaluation's pair included), to fit the reserve's cap: the squeeze ends at or under it."""
        plays = self.units(self.rescore_episodes) + 3 * self.units(self.eval_episodes)
        return max(0.0, self.cap() - self.stopping()) / plays

    def kept_screen(self) -> float:
        """The expected seconds of a screen of the kept model's games beside the workers."""
        return self.playing(self.eval_episodes, 1, kept=True) * self.share()

    def overpriced(self) -> bool:
        """Whether the kept model's games price the re-scoring well over what the latest model's
        would cost, by the training games' lengths: shorter now by a ratio ``r`` of their length
        when the kept model was handed over (Pong's games are long while the points are close, and
        short once it wins them all), the latest model's re-scoring would save about ``(1 - r)`` of
        the kept model's, and a screen and re-screen of its games cost about ``r`` of two of the
        kept model's beside the workers: worth it where the saving is larger. (The training games
        are the sampled policy's, the evaluation's greedy: a guess the screen checks, and it gives
        up where it proves wrong.)"""
        if not self.length or not self.kept_length or self.kept_per_episode is None:
            return False
        r = self.length / self.kept_length
        return self.kept_rescoring() * (1.0 - r) > 2.0 * self.kept_screen() * r

    def repricing_screen(self) -> float | None:
        """The seconds each stage of a screen of the latest model before the stop may take,
        where such a screen can free training time (None where it cannot): a squeezed
        reserve's :meth:`quick_screen`, or where the kept model is :meth:`overpriced`, its own
        games' seconds (a latest model whose games take as long frees nothing)."""
        if self.kept_per_episode is None:
            return None
        if self.squeezed():
            return self.quick_screen()
        return self.kept_screen() if self.overpriced() else None

    def quick_screen(self) -> float:
        """The seconds each stage (screen, re-screen) of the screen before a squeezed reserve's
        stop may take beside the workers: past them, the latest model's episodes are too long
        to end the squeeze (:meth:`freeing_price`), and it gives up."""
        return self.final_screen(1) * self.share()

    def final_screen(self, processes: int | None = None) -> float:
        """The same of the final evaluation's stages, on ``processes`` (default: after
        training's) once training has stopped: where the squeeze holds, a final model whose
        episodes are too long to end it gives up and leaves the re-scoring its time."""
        return self.units(self.eval_episodes, processes) * self.freeing_price()

    def stopping(self) -> float:
        """The seconds reserved for training's stop and the files written after it."""
        return min(STOP_SECONDS, STOP_SHARE * self.seconds)

    def rescoring_slot(self) -> float:
        """The seconds before the limit kept for the re-scoring: its expected seconds, or where
        the reserve's cap squeezes them, what the cap leaves after the stop and the final
        evaluation (the re-scoring is then cut short, rather than the evaluations before it,
        which pick the model it scores; but a final evaluation whose games are too long to end
        the squeeze gives up: keeping its model would leave that model's re-scoring as short,
        :meth:`final_screen`)."""
        cap = self.cap() - self.stopping() - self.evaluation()
        return max(0.0, min(self.rescoring(), cap))

    def left(self) -> float | None:
        """Seconds to the limit (None: no limit)."""
        return None if self.ends_at is None else self.ends_at - time.perf_counter()

    def evaluations_end(self) -> float | None:
        """When an evaluation still playing is cut short: the re-scoring's slot before the
        limit. (Training stops before it, so none is cut while the workers learn.)"""
        return None if self.ends_at is None else self.ends_at - self.rescoring_slot()


@dataclass(frozen=True)
class Rescored:
    """The kept model's re-scoring: ``model`` the file it loaded, the returns of the episodes
    that ended, of ``planned``; ``cut_short`` where the limit (or a signal) came first."""

    model: str
    returns: tuple[float, ...]
    planned: int
    cut_short: bool
    seconds: float
    processes: int

    def summary(self) -> dict[str, Any]:
        n = len(self.returns)
        return {
            "kept_model": self.model,
            "kept_model_return": statistics.fmean(self.returns) if n else None,
            "kept_model_std": statistics.pstdev(self.returns) if n else None,
            "kept_model_episodes": n,
            "kept_model_planned_episodes": self.planned,
            "kept_model_cut_short": self.cut_short,
            "kept_model_seconds": self.seconds,
            "kept_model_error": None,
        }


def whole_waves(
    ended: dict[int, float] | set[int], episodes: int, processes: int, wave: Callable[[int], int]
) -> list[int]:
    """Which of the ``ended`` episodes (of ``episodes``, played on ``processes``) belong to a
    wave that ended whole. Each process plays its share (every ``processes``-th episode, as
    :func:`asyncrl.parallel.play_parallel` deals them; all of them on one) in waves of
    ``wave(len(share))`` episodes played together, one after another: where a deadline cuts a
    wave, the episodes of it that ended are its short ones (on Atari, mostly games lost
    early), and their mean would lean towards them. The waves before it ended whatever their
    games were."""
    whole: list[int] = []
    for k in range(processes):
        share = list(range(k, episodes, processes))
        size = wave(len(share)) if share else 1
        for start in range(0, len(share), size):
            members = share[start : start + size]
            if all(i in ended for i in members):
                whole += members
    return sorted(whole)


#: summary.json's fields of a run that re-scored nothing (--rescore-episodes 0, a fault, a signal)
NOT_RESCORED: dict[str, Any] = {
    "kept_model": None,
    "kept_model_return": None,
    "kept_model_std": None,
    "kept_model_episodes": 0,
    "kept_model_planned_episodes": 0,
    "kept_model_cut_short": False,
    "kept_model_seconds": 0.0,
    "kept_model_error": None,  # why a re-scoring failed (an env the main process cannot build)
}


def rescore_kept_model(
    run_dir: str | Path,
    seed: int,
    episodes: int,
    *,
    deterministic: bool = True,
    processes: int = 1,
    deadline: float | None = None,
    stop: StopFlag | None = None,
    log: Callable[[str], None] = print,
) -> Rescored:
    """Play the run's kept model (as :func:`asyncrl.load` loads it) on ``episodes`` episodes
    from :func:`~asyncrl.evaluation.held_out_seeds` of ``seed``, on ``processes`` processes,
    until ``deadline`` (a :func:`time.perf_counter` instant) or ``stop``; a progress line
    through ``log`` at the start, every few seconds and at the end."""
    t0 = time.perf_counter()
    policy = load(run_dir)
    name = policy.source.name if policy.source is not None else "model.pt"
    seeds = held_out_seeds(seed, episodes)
    ended: dict[int, float] = {}
    within = "" if deadline is None else f", within {max(0.0, deadline - t0):.0f} s"
    on = f" on {processes} processes" if processes > 1 else ""
    log(f"re-scoring the kept model ({name}) on {episodes} new episodes{on}{within}")

    def record(i: int, ret: float) -> None:
        ended[i] = ret

    def show() -> None:  # a line every few seconds, whether or not an episode has ended
        while not done.wait(PROGRESS_EVERY):
            log(f"re-scoring: {len(ended)}/{episodes} episodes, {time.perf_counter() - t0:.0f} s")

    done = threading.Event()
    shower = threading.Thread(target=show, name="asyncrl-rescore-progress", daemon=True)
    shower.start()
    cut, whole = False, []
    try:
        if processes > 1:
            play_parallel(
                SavedPolicy(str(run_dir)), seeds, processes, deterministic=deterministic,
                rng_seed=(seed, HELD_OUT_STREAM), stop=stop, deadline=deadline,
                on_episode=record,
            )  # fmt: skip
        else:
            envs = policy.eval_envs(episodes, seeds[0])
            try:
                rng = np.random.default_rng([seed, HELD_OUT_STREAM])
                play_episodes(
                    policy, envs, seeds, deterministic, rng, stop=stop, deadline=deadline,
                    on_episode=record,
                )  # fmt: skip
            finally:
                envs.close()
    except (OutOfTime, Stopped) as e:
        cut = True
        why = "the time limit" if isinstance(e, OutOfTime) else "a signal"
        whole = whole_waves(ended, episodes, processes, lambda n: eval_wave(policy.env_id, n))
        log(
            f"re-scoring cut short by {why}: {len(ended)} of {episodes} episodes ended, "
            f"{len(whole)} of them in waves that ended whole (the mean is theirs: a cut wave's "
            "episodes that ended are its short ones)"
        )
    finally:
        done.set()
        shower.join()
    seconds = time.perf_counter() - t0
    returns = tuple(ended[i] for i in (whole if cut else sorted(ended)))
    if not cut and seconds >= PROGRESS_EVERY:
        log(f"re-scored: {len(returns)}/{episodes} episodes in {seconds:.0f} s")
    return Rescored(name, returns, episodes, cut, seconds, processes)
