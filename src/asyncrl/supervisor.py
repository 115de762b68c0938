"""The main process's loop over a run, the same for every backend: it reads the workers'
messages, counts faults against the restart limit and has the run restart a worker, asks for
checkpoints and writes them, hands the evaluator snapshots of the global state and keeps the
best, and stops the run on the stop rule, the step or time budget, a signal or a fatal error. How
workers are started, restarted and heard from is the run's business (:class:`Run`: shared
memory for threads and processes, a parameter server for Ray)."""

from __future__ import annotations

import enum
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from asyncrl.callbacks import EvaluationEvent
from asyncrl.evaluation import confirm_margin
from asyncrl.messages import (
    Done,
    Episodes,
    Failed,
    GlobalSnapshot,
    Lost,
    Message,
    NonFinite,
    Notice,
    Snapshot,
    WorkerSnapshot,
)
from asyncrl.monitor import Monitor

if TYPE_CHECKING:
    from asyncrl.evaluation import Evaluation, Evaluator
    from asyncrl.rescore import TimePlan


#: with the default --eval-every, the most of a run's wall time so far that its evaluations'
#: screens may have taken. The evaluation is one thread beside the workers' (on 2 workers, one
#: of three on two cores), so while it runs the workers lose a share of their speed. Counted
#: over the whole run, not from the last one: paced on the last screen alone, one long Pong
#: screen early in a run held the next back for most of it (docs/evaluation.md)
EVAL_SHARE = 0.05


class Ended(enum.Enum):
    """How a run ended."""

    BUDGET = "the step budget was spent"
    TIME_LIMIT = "the time limit was reached"
    SOLVED = "the stop rule fired"
    INTERRUPTED = "a signal stopped it"
    FAILED = "worker faults past the restart limit"
    DIVERGED = "rollouts in a row with non-finite updates"
    SERVER_LOST = "the parameter server died"
    CALLBACK = "a callback returned False"
    CALLBACK_ERROR = "a callback raised an exception"

    @property
    def keeps_last_checkpoint(self) -> bool:
        """The global state is gone (server) or its workers are mid-way through bad updates
        (NaN): the last good checkpoint stays as it was."""
        return self in (Ended.DIVERGED, Ended.SERVER_LOST)


class ServerLost(Exception):
    """The run's global state died with its holder (the Ray parameter server)."""


@dataclass
class Outcome:
    """How the run ended, for the trainer."""

    ended: Ended = Ended.BUDGET
    error: str | None = None  # the message of a fatal end
    details: str = ""  # the worker's traceback, for --debug
    signal: int | None = None  # the signal that interrupted the run
    restarts: int = 0
    workers: dict[int, dict] = field(default_factory=dict)  # each worker's last own state
    glob: GlobalSnapshot | None = None  # the global state to save at the end
    # the seconds training left before --time-limit for the work after it, where it stopped
    # on time (asyncrl.rescore.TimePlan)
    reserved: float | None = None
    # the evaluations the limit cut short (summary.json's evaluations_cut_short)
    cut_short: list[dict[str, Any]] = field(default_factory=list)
    # the bounded evaluations that gave up: the screen before the stop that re-prices the
    # reserve, a squeezed reserve's final evaluation (summary.json's evaluations_gave_up)
    gave_up: list[dict[str, Any]] = field(default_factory=list)


class Run(Protocol):
    """One run's workers, whatever runs them."""

    workers: int

    def start(self, states: dict[int, dict]) -> None:
        """Start every worker, from its checkpointed state where there is one."""
        ...

    def receive(self, timeout: float) -> list[Message]:
        """Messages from the workers (and :class:`Lost` for those found dead or hung), waiting
        up to ``timeout`` s for the first. Raises :class:`ServerLost`."""
        ...

    def incarnation(self, wid: int) -> int: ...

    def restart(self, wid: int) -> None:
        """Start worker ``wid`` again with fresh env state."""
        ...

    def retire(self, wid: int) -> None:
        """Worker ``wid`` is not to run again."""
        ...

    def global_step(self) -> int: ...

    def clock(self, elapsed: float) -> None:
        """The run's elapsed seconds (the clock of --time-limit, continued across a resume),
        for the updates of a schedule over time (--lr-anneal-over time)."""
        ...

    def request_snapshots(self) -> tuple[int, set[int]]:
        """Ask for a checkpoint: the request id and the workers whose :class:`Snapshot` it
        waits for (none where the global state can be read at once)."""
        ...

    def checkpoint_state(self, workers: dict[int, WorkerSnapshot]) -> GlobalSnapshot:
        """The global state to checkpoint along with the workers' latest snapshots."""
        ...

    def stop(self) -> None:
        """Ask every worker to stop at its next rollout boundary."""
        ...

    def finish(self, workers: dict[int, WorkerSnapshot]) -> GlobalSnapshot:
        """Wait for the workers, release them; the final global state. Raises ServerLost."""
        ...

    def closing(self) -> tuple[dict[str, Any], list[str]]:
        """Fields the run adds to summary.json, and lines for the log (Ray: staleness)."""
        ...


class SupervisorSettings(Protocol):
    """What the supervisor reads: the run's budgets, checkpoints and fault limits, and the
    evaluation schedule and stop rule."""

    @property
    def steps(self) -> int: ...
    @property
    def window(self) -> int: ...
    @property
    def stop_on(self) -> str: ...
    @property
    def eval_every(self) -> int | None: ...
    @property
    def confirm_stderr(self) -> float: ...
    @property
    def max_worker_restarts(self) -> int: ...
    def eval_interval(self, steps: int) -> int: ...
    def checkpoint_interval(self) -> tuple[str, float]: ...
    def time_limit_seconds(self) -> float | None: ...


class Supervisor:
    def __init__(
        self,
        cfg: SupervisorSettings,
        run: Run,
        monitor: Monitor,
        write_checkpoint: Callable[[GlobalSnapshot, dict[int, dict], int], None],
        restarts: int = 0,
        evaluator: Evaluator | None = None,
        save_best: Callable[[Evaluation], None] | None = None,
        plan: TimePlan | None = None,
    ):
        self.cfg, self.run_, self.monitor = cfg, run, monitor
        self.write_checkpoint = write_checkpoint
        self.evaluator, self.save_best = evaluator, save_best
        # the work after training: its expected seconds, and with a time limit, when training
        # stops so that it fits inside
        self.plan = plan
        # the training episodes' steps, count and longest this session (the plan's guess)
        self.episode_steps = self.episodes_seen = self.longest_episode = 0
        # the last window's training episode lengths, and their mean when each evaluation's
        # parameters were handed over (TimePlan.length: a game that lengthens as the agent
        # learns outgrows the evaluation that priced it)
        self.lengths: deque[int] = deque(maxlen=max(1, cfg.window))
        self.length_at: dict[int, float] = {}
        self.last_eval_step = run.global_step()
        # --stop-on eval: the training mean reached the target, an evaluation is wanted; it is
        # asked for again only after a quarter of a window of new episodes (not back to back)
        self.eval_wanted = False
        self.eval_asked_at = -(10**9)
        self.outcome = Outcome(restarts=restarts)
        self.snapshots: dict[int, WorkerSnapshot] = {}
        self.done: set[int] = set()
        self.stopping = False
        # the workers have stopped, however the run ended (a step budget's end sets no
        # ``stopping``): what plays now has the cores to itself
        self.trained = False
        self.ckpt_kind, self.ckpt_every = cfg.checkpoint_interval()
        self.time_limit = cfg.time_limit_seconds()
        self.last_ckpt = (time.monotonic(), run.global_step())
        self.pending: tuple[int, set[int]] | None = None  # request id, workers yet to answer
        self.repriced = False  # the screen before the stop (re-pricing) is under way or done
        # its index while it plays: its stages end before the stop, bounded, and play none of
        # the kept model's games, so the reserve does not price them (maybe_end_on_time)
        self.repricing: int | None = None

    def run(self, worker_states: dict[int, dict]) -> Outcome:
        self.run_.clock(self.monitor.elapsed())
        self.run_.start(worker_states)
        self.monitor.start_display()
        try:
            while len(self.done) < self.run_.workers:
                for msg in self.run_.receive(timeout=0.1):
                    self.handle(msg)
                self.maybe_checkpoint()
                self.maybe_evaluate()
                self.maybe_end_on_time()
                self.maybe_end_on_callback()
                self.run_.clock(self.monitor.elapsed())
                self.monitor.refresh(self.run_.global_step())
            self.outcome.glob = self.run_.finish(self.snapshots)
        except ServerLost as e:
            self.end(Ended.SERVER_LOST, f"the parameter server died ({e})")
        self.outcome.workers = {w: s.worker for w, s in self.snapshots.items() if s.worker}
        return self.outcome

    # ------------------------------------------------------------------ ending
    def maybe_end_on_time(self) -> None:
        if self.stopping:
            return
        plan = self.plan
        if plan is not None and self.episodes_seen:
            # until an evaluation has measured an episode's seconds, the training episodes
            # tell them (the stop rule's first evaluation can come too late in a short run)
            sps = self.monitor.global_step / max(self.monitor.elapsed(), 1e-9)
            plan.guess(self.episode_steps / self.episodes_seen, self.longest_episode, sps)
            plan.length = self.training_length()
        if plan is None or plan.ends_at is None:
            limit = self.time_limit
            if limit is not None and self.monitor.elapsed() >= limit:
                self.end(Ended.TIME_LIMIT)
            return
        # the work after training (its stop, the rest of an evaluation under way, the final
        # evaluation, the re-scoring) inside the limit: training stops that long before it
        ev, under_way, plays = self.evaluator, 0, 0
        # (not the re-pricing screen's: it began as late as its two stages, each bounded, end
        # before the stop, and it plays none of the kept model's games)
        counted = self.repricing is None and ev is not None and ev.busy
        if counted and ev is not None and (progress := ev.progress) is not None:
            under_way = progress[2] - progress[1]
            # and where a screen beats the kept model, a re-screen of both models (priced as
            # the kept model's episodes: a stalled screen's model is not re-screened)
            plays = {"screen": 2, "re-screen": 1}.get(progress[0], 0)
        reserve = plan.reserve(final_evaluation=ev is not None, under_way=under_way, plays=plays)
        left = plan.left()
        if left is not None and left <= reserve:
            self.outcome.reserved = reserve
            self.end(Ended.TIME_LIMIT)

    def training_length(self) -> float | None:
        """The training games' length the plan's price of the latest model follows: the mean
        of the last window's, or their longest where a natively vectorized env plays waves (a
        wave lasts its longest game); None until a quarter of a window has ended (the short
        games end first)."""
        n = len(self.lengths)
        if self.plan is None or n < max(1, (self.lengths.maxlen or 1) // 4):
            return None
        return sum(self.lengths) / n if self.plan.separate else float(max(self.lengths))

    def maybe_end_on_callback(self) -> None:
        """A user's callback asked the run to stop, or raised (:mod:`asyncrl.callbacks`)."""
        hooks = self.monitor.hooks
        if hooks.stopped_by is not None and not self.stopping:
            self.end(Ended.CALLBACK_ERROR if hooks.error is not None else Ended.CALLBACK)

    def interrupt(self, signum: int) -> None:
        self.outcome.signal = signum
        self.end(Ended.INTERRUPTED)

    def end(self, how: Ended, error: str | None = None, details: str = "") -> None:
        """The first reason to end wins; a stop rule after a fault does not hide the fault."""
        if not self.stopping or (error and self.outcome.error is None):
            self.outcome.ended, self.outcome.error, self.outcome.details = how, error, details
        self.stopping = True
        self.run_.stop()

    # ------------------------------------------------------------------ messages
    def handle(self, msg: Message) -> None:
        run = self.run_
        match msg:
            case Episodes(worker=w, episodes=episodes, global_step=step, stats=stats):
                self.monitor.add_stats(stats)
                for ep in episodes:
                    self.episode_steps += ep.length
                    self.episodes_seen += 1
                    self.longest_episode = max(self.longest_episode, ep.length)
                    self.lengths.append(ep.length)
                    if self.monitor.episode(w, ep, step) and not self.stopping:
                        if self.cfg.stop_on == "train" or self.evaluator is None:
                            if not self.monitor.solved:
                                self.monitor.mark_solved(step, self.monitor.rolling_return, "train")
                            self.end(Ended.SOLVED)
                        else:
                            self.eval_wanted = True
            case Snapshot(worker=w, incarnation=inc, request=request, snapshot=snap):
                if inc == run.incarnation(w):
                    self.snapshots[w] = snap
                    if self.pending and self.pending[0] == request:
                        self.pending[1].discard(w)
                        self.finish_checkpoint_if_ready()
            case NonFinite(worker=w, global_step=step, what=what):
                self.monitor.log(f"worker {w}: non-finite update skipped at step {step:,} ({what})")
                self.monitor.scalar("faults/nonfinite_updates", 1, step)
            case Failed(worker=w, incarnation=inc, text=text, traceback=tb, diverged=diverged):
                if inc != run.incarnation(w):
                    return
                if diverged:
                    self.monitor.log(f"worker {w} failed: {text}")
                    self.end(Ended.DIVERGED, f"worker {w} failed: {text}", tb)
                    self.retire(w)
                else:
                    self.fault(w, f"failed: {text}", tb)
            case Notice(text=text):
                self.monitor.log(text)
            case Lost(worker=w, incarnation=inc, why=why):
                if w not in self.done and inc == run.incarnation(w):
                    self.fault(w, why)
            case Done(worker=w, incarnation=inc, snapshot=snap):
                if inc == run.incarnation(w):
                    if snap is not None:
                        self.snapshots[w] = snap
                    self.done.add(w)
                    self.forget_pending(w)

    # ------------------------------------------------------------------ faults
    def fault(self, wid: int, why: str, details: str = "") -> None:
        """A worker failed, died or hung: restart it, unless stopping, the step budget is spent,
        or it is past the limit."""
        if self.stopping or self.run_.global_step() >= self.cfg.steps:  # nothing to restart for
            self.retire(wid)
            return
        self.outcome.restarts += 1
        limit = self.cfg.max_worker_restarts
        if self.outcome.restarts > limit:
            self.monitor.log(f"worker {wid} {why}")
            self.retire(wid)
            self.end(
                Ended.FAILED,
                f"worker {wid} {why}; that is {self.outcome.restarts} worker faults, over the "
                f"limit of --max-worker-restarts {limit}",
                details,
            )
            return
        self.monitor.log(
            f"worker {wid} {why}; restarting it with fresh env state "
            f"(restart {self.outcome.restarts} of at most {limit})"
        )
        self.monitor.scalar(
            "faults/worker_restarts", self.outcome.restarts, self.run_.global_step()
        )
        self.forget_pending(wid)
        self.run_.restart(wid)

    def retire(self, wid: int) -> None:
        self.run_.retire(wid)
        self.done.add(wid)
        self.forget_pending(wid)

    # ------------------------------------------------------------------ evaluations
    def maybe_evaluate(self) -> None:
        """Hand the evaluator the global state when an evaluation is due (every --eval-every
        steps) or wanted (the stop rule's), and take what it has finished."""
        ev = self.evaluator
        if ev is None:
            return
        for result in ev.results():
            self.evaluated(result)
        if self.stopping or self.evaluator is None or ev.busy:  # None: one failed just now
            return
        step = self.run_.global_step()
        every = self.cfg.eval_interval(self.cfg.steps)
        due = every > 0 and step - self.last_eval_step >= every
        if due and self.cfg.eval_every is None:
            # the default interval also keeps evaluation's share of the run's time small: the
            # screens so far within EVAL_SHARE of the run's time so far
            due = self.monitor.screen_seconds <= EVAL_SHARE * self.monitor.elapsed()
        plan = self.plan
        left = None if plan is None else plan.left()
        reprice, within = False, None
        if plan is not None and left is not None:
            room = left - plan.reserve(final_evaluation=True)
            # none that would still be playing when training stops for the time limit: the
            # final evaluation, of later parameters, takes its place
            due = due and room >= plan.screen()
            # but where the kept model's episodes squeeze the reserve to its cap, or price it
            # well over what the latest model's would cost (plan.overpriced), one screen of
            # the latest parameters (in a run that evaluates as it trains), as late as its
            # two stages, each given repricing_screen(), end before the stop with a few
            # seconds to spare (the later, the more trained the model it tries): if they beat
            # the kept model's score, they are kept,
            # and their episodes (which usually end: a stalled greedy policy's do not) price
            # the re-scoring, and training goes on for the time that frees. It plays no pair
            # of the kept model, whose long games it is there to spare, and gives up once its
            # own episodes prove too long to free time (docs/atari.md, "A kept model the stop
            # replaces")
            within = None if self.repriced or every <= 0 else plan.repricing_screen()
            reprice = (
                within is not None
                and step > self.last_eval_step
                and 0 < room < min(plan.screen(), 2 * within + plan.stopping())
            )
        wanted = self.eval_wanted and (
            self.monitor.episodes - self.eval_asked_at >= max(1, self.cfg.window // 4)
        )
        if due or wanted or reprice:
            index = self.monitor.evaluations
            if self.evaluate_now(step, within=within if reprice else None) and reprice:
                self.repricing = index
            self.eval_wanted = False
            if wanted:
                self.eval_asked_at = self.monitor.episodes
            if reprice:
                self.repriced = True
                squeezed = plan is not None and plan.squeezed()
                why = "is at its cap" if squeezed else "is priced on the kept model's long games"
                self.monitor.log(
                    f"the re-scoring's reserve {why}: screening the latest model before "
                    "training stops"
                )

    def evaluate_now(
        self, step: int, snap: GlobalSnapshot | None = None, within: float | None = None
    ) -> bool:
        """Hand the evaluator the global state (``snap``, or the run's now): a reader of the
        parameters, as a checkpoint is (``within``: :meth:`Evaluator.submit`'s). False while
        it is busy."""
        assert self.evaluator is not None
        snap = snap if snap is not None else self.run_.checkpoint_state({})
        index = self.monitor.evaluations
        if not self.evaluator.submit(index, step, self.monitor.elapsed(), snap, within=within):
            return False
        self.monitor.evaluations = index + 1
        self.last_eval_step = step
        if (length := self.training_length()) is not None:
            self.length_at[index] = length
        return True

    def evaluated(self, result: Evaluation) -> None:
        length = self.length_at.pop(result.index, None)
        if result.index == self.repricing:
            self.repricing = None
        if result.error is not None:
            self.monitor.log(
                f"evaluation {result.index} failed ({result.error}); the run goes on without "
                "evaluations"
            )
            self.evaluator = None
            return
        if result.gave_up:  # (its episodes that ended first are the short ones, as below)
            played = "screen" if result.stage == "screen" else "screen and re-screen"
            which, then = ("latest", "")
            if self.stopping:  # the final evaluation
                which, then = "final", "; the kept model's re-scoring has the time"
            self.monitor.log(
                f"evaluation {result.index}: the {which} model's {played} took "
                f"{result.seconds:.0f} s, too long for its episodes to shorten the re-scoring; "
                f"it gave up and counts for nothing{then}"
            )
            self.outcome.gave_up.append(_record(result))
            return
        if result.cut_short:
            # the episodes that ended first are the short ones, and a confirmation of fewer
            # episodes is not the rule's: it counts for nothing (no row, no best, no try)
            stage = result.stage
            n = len(result.returns)
            self.monitor.log(
                f"evaluation {result.index}: the time limit cut its {stage} short at {n} of "
                f"{result.planned} episodes; it counts for nothing"
            )
            self.outcome.cut_short.append(_record(result))
            return
        # a confirmation is rare and its cost is the stop rule's: the periodic schedule paces
        # itself on the screens alone (a 100-episode confirmation, ten screens' worth, would
        # hold it back), which the monitor adds up
        target = self.monitor.target
        # a try of the stop rule: a confirmation (or, without one, a screen at the target; never
        # a re-screen, whose screen was under it), each asking more standard errors than the
        # last, so that a run's chance of stopping on a lucky one stays bounded however often it
        # tries (evaluation.confirm_margin)
        screen_at_target = result.stage == "screen" and target is not None and result.mean >= target
        tried = target is not None and (result.confirmed or screen_at_target)
        if tried and self.cfg.stop_on == "eval" and not self.monitor.solved:
            self.monitor.tries += 1
        margin = confirm_margin(self.monitor.tries, self.cfg.confirm_stderr, len(result.returns))
        solves = (
            self.cfg.stop_on == "eval"
            and target is not None
            and tried
            and result.reaches(target, margin)
            and not self.monitor.solved
        )
        # the stop rule's promise: the model a solved run keeps is the one that met it
        best = self.monitor.evaluation(result, keep=solves)
        if self.plan is not None:
            training = not (self.stopping or self.trained)
            self.plan.observe(result, training=training, kept=best, length=length)
        if best and self.save_best is not None:
            self.save_best(result)
        if best and self.evaluator is not None:  # a later re-screen plays it too
            self.evaluator.keep(result.snapshot)
        if solves:
            self.monitor.mark_solved(result.global_step, result.mean, "eval")
            if not self.stopping:
                self.end(Ended.SOLVED)
        if self.monitor.hooks:  # after best_model.pt is written: a callback may read it
            self.monitor.hooks.call("on_evaluation", _event(result, best, solves))

    def final_evaluation(self) -> None:
        """After the workers stopped: the evaluation under way, then one of the final
        parameters where the run ended on its budget of steps or time (or on the training
        episodes, with --stop-on train), so that the best model is the better of the best and
        the last. None after a signal (the user wants out), a fault (the final state is not
        trusted) or an evaluation that solved the task (best_model.pt holds its
        parameters)."""
        self.trained = True
        ev, glob = self.evaluator, self.outcome.glob
        if ev is None:
            return
        ended = self.outcome.ended
        # training has stopped: the evaluation under way, and the final one, play the rest of
        # their episodes on the cores it has freed (asyncrl.parallel)
        if self.plan is not None:
            ev.processes = self.plan.processes_for(
                max(ev.episodes, ev.confirm[1] if ev.confirm else 0)
            )
        # after a signal, no waiting for an evaluation under way (an Atari one takes seconds),
        # also for a signal that comes while waiting
        signalled = lambda: self.outcome.signal is not None  # noqa: E731
        shown = [time.monotonic()]

        def progress() -> None:  # what runs after training shows how far it is
            under_way = ev.progress
            if under_way is None or time.monotonic() - shown[0] < 5.0:
                return
            shown[0] = time.monotonic()
            stage, done, total, start = under_way
            self.monitor.log(
                f"training has stopped; evaluation {self.monitor.evaluations - 1}'s {stage}: "
                f"{done}/{total} episodes, {time.perf_counter() - start:.0f} s"
            )

        waited = ev.results() if ended is Ended.INTERRUPTED else ev.wait(signalled, progress)
        for result in waited:
            self.evaluated(result)
        # (a callback's False is the user's own budget: the run ends as on its budget)
        budget = ended in (Ended.BUDGET, Ended.TIME_LIMIT, Ended.CALLBACK)
        final = budget or (ended is Ended.SOLVED and self.cfg.stop_on == "train")
        # (a confirmation under way when the time ran short can solve the run after training
        # stopped on time: best_model.pt then holds the parameters that met the rule)
        solved = self.monitor.solved and self.monitor.solved_by == "eval"
        if glob is None or self.evaluator is None or not final or solved or signalled():
            return
        end = None if self.plan is None else self.plan.evaluations_end()
        if end is not None and time.perf_counter() >= end:  # no time left for one
            self.monitor.log("the time limit leaves no time for the final evaluation")
            self.outcome.cut_short.append(
                {"evaluation": None, "global_step": glob.steps, "stage": "screen"}
                | {"episodes": 0, "planned": ev.episodes, "seconds": 0.0}
            )
            return
        # where the kept model's games squeeze the reserve, the final evaluation is bounded as
        # the screen before the stop is: a final model whose games are as long (a greedy
        # policy that stalls too) gives up, and the re-scoring has the time it would have
        # taken (docs/evaluation.md#a-time-limit-bounds-the-whole-process)
        # (a run that ended on its time: one that ended early has the time to play it out)
        plan = self.plan
        squeezed = (
            ended is Ended.TIME_LIMIT
            and plan is not None
            and plan.kept_per_episode is not None
            and plan.squeezed()
        )
        within = plan.final_screen(ev.processes) if squeezed and plan is not None else None
        if glob.steps > self.last_eval_step and self.evaluate_now(glob.steps, glob, within=within):
            for result in ev.wait(signalled, progress):
                self.evaluated(result)

    # ------------------------------------------------------------------ checkpoints
    def maybe_checkpoint(self) -> None:
        if self.pending is not None or self.ckpt_kind == "off" or self.stopping:
            return
        t, s = self.last_ckpt
        step = self.run_.global_step()
        due = (
            time.monotonic() - t >= self.ckpt_every
            if self.ckpt_kind == "seconds"
            else step - s >= self.ckpt_every
        )
        if due:
            # Local workers answer at their next rollout boundary with their state and the
            # global one; a parameter server's state is read at once.
            self.last_ckpt = (time.monotonic(), step)
            request, waiting = self.run_.request_snapshots()
            self.pending = (request, waiting - self.done)
            self.finish_checkpoint_if_ready()

    def forget_pending(self, wid: int) -> None:
        if self.pending is not None:
            self.pending[1].discard(wid)
            self.finish_checkpoint_if_ready()

    def finish_checkpoint_if_ready(self) -> None:
        if self.pending is not None and not self.pending[1]:
            self.pending = None
            glob = self.run_.checkpoint_state(self.snapshots)
            workers = {w: s.worker for w, s in self.snapshots.items() if s.worker}
            self.write_checkpoint(glob, workers, self.outcome.restarts)


def _event(ev: Evaluation, best: bool, solved: bool) -> EvaluationEvent:
    return EvaluationEvent(
        index=ev.index,
        global_step=ev.global_step,
        wall_seconds=ev.wall_seconds,
        mean_return=ev.mean,
        std_return=ev.std,
        min_return=min(ev.returns),
        max_return=max(ev.returns),
        episodes=len(ev.returns),
        returns=ev.returns,
        is_best=best,
        confirmed=ev.confirmed,
        rescreened=ev.rescreened,
        solved=solved,
        seconds=ev.seconds,
    )


def _record(result: Evaluation) -> dict[str, Any]:
    """An evaluation that counts for nothing, as summary.json lists it."""
    return {
        "evaluation": result.index,
        "global_step": result.global_step,
        "stage": result.stage,
        "episodes": len(result.returns),
        "planned": result.planned,
        "seconds": result.seconds,
    }
