"""Callbacks: the user's code, called in the main process as the run's events arrive (an
episode, an evaluation, an update of the learners' statistics), with a way to stop the run.

The shape follows Stable-Baselines3's ``BaseCallback`` (``stable_baselines3/common/
callbacks.py``): subclass, override the methods you need, return ``False`` from one to stop
training. Where asyncrl differs, and why:

- The workers run in threads, processes or Ray actors and are never paused for a callback, so
  there is no per-step hook (``_on_step``): the main process sees what the workers report, each
  finished episode, each evaluation and the learners' statistics every few seconds, and a
  callback gets those. A stop asked for ends the run at the workers' next rollout boundary.
- Only ``False`` stops. SB3 stops on any falsy return (``if not callback.on_step()``), so a
  ``_on_step`` that forgets its ``return True`` ends training at once; here ``None`` (no return
  at all) goes on.
- A stop is the run's ordinary end: the workers stop, the final parameters are evaluated (as at
  the end of the step budget), a checkpoint and ``summary.json`` are written (``"ended":
  "callback"``, ``"stopped_by"``: which method asked), and ``train`` returns the summary. The run
  resumes from its checkpoint with ``asyncrl.train(resume=RUN_DIR)``.
- A callback that raises stops the run the same way (no final evaluation: ``"ended":
  "callback_error"``), and ``train`` then raises that exception, its traceback intact. No
  callback is called after one has raised.

Callbacks run in the supervisor's loop, which also carries the workers' messages, checkpoints
and evaluations: keep them quick (hand slow work to a thread of your own). Imports no PyTorch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncrl.errors import UserError

if TYPE_CHECKING:
    from asyncrl.config import Config


@dataclass(frozen=True)
class TrainingStart:
    """The run is about to start its workers."""

    run_dir: Path
    config: Config
    #: continued from a checkpoint (``train(resume=...)``)
    resumed: bool
    #: the global step the run starts from (0, or the checkpoint's)
    global_step: int


@dataclass(frozen=True)
class EpisodeEvent:
    """A training episode finished (on Atari: a whole game, its raw score). The row of
    ``episodes.csv`` it became."""

    #: the run's count of finished episodes, this one included (``episodes.csv``'s ``episode``)
    episode: int
    worker: int
    episode_return: float
    length: int
    #: the global step the worker reported it at
    global_step: int
    wall_seconds: float
    #: the mean return of the last ``window`` training episodes (fewer at the start): the
    #: progress bar's and the ``--stop-on train`` rule's
    rolling_return: float
    window: int


@dataclass(frozen=True)
class EvaluationEvent:
    """An evaluation of the global parameters finished (a row of ``evaluations.csv``). Where
    ``is_best``, ``best_model.pt`` holds these parameters already."""

    index: int
    #: the global step at which the parameters were read
    global_step: int
    wall_seconds: float
    mean_return: float
    std_return: float
    min_return: float
    max_return: float
    #: episodes played (a confirmation's, where ``confirmed``; a re-screen's, where
    #: ``rescreened``)
    episodes: int
    returns: tuple[float, ...] = field(repr=False)
    #: the best evaluation so far (or the one that met the stop rule): kept as best_model.pt
    is_best: bool
    #: the screen reached the target and these are the confirmation's episodes
    confirmed: bool
    #: this evaluation met the ``--stop-on eval`` rule: the run stops on it
    solved: bool
    #: the evaluation's own seconds
    seconds: float
    #: the screen beat the kept model's score and these are a re-screen's new episodes, on
    #: which (beside the kept model's on the same starts) the model is kept or not
    #: (docs/evaluation.md#what-happens)
    rescreened: bool = False


@dataclass(frozen=True)
class UpdateEvent:
    """The learners' statistics averaged over the updates of the last few seconds (every
    ``asyncrl.monitor.METRICS_EVERY`` s, and once at the end): the row of ``metrics.csv``."""

    global_step: int
    wall_seconds: float
    #: each statistic's mean over the interval, named as in TensorBoard: ``loss/policy_loss``,
    #: ``loss/value_loss``, ``loss/entropy``, ``train/grad_norm``, ``train/learning_rate``, ...
    #: (docs/cli.md#the-run-directory lists them)
    metrics: Mapping[str, float]

    @property
    def learning_rate(self) -> float | None:
        return self.metrics.get("train/learning_rate")


@dataclass(frozen=True)
class TrainingEnd:
    """The run ended and wrote ``summary.json``: its contents."""

    run_dir: Path
    summary: Mapping[str, Any]


class Callback:
    """The base of a callback: override the methods you need (each default does nothing).

    Return ``False`` from :meth:`on_episode`, :meth:`on_evaluation` or :meth:`on_update` to
    stop the run cleanly (``None``, or no return, goes on); an exception stops it as well and
    then propagates out of :func:`asyncrl.train`. Any object with some of these methods works
    as a callback; subclassing documents it and lets a type checker read it.

    >>> class StopAt(asyncrl.Callback):
    ...     def on_evaluation(self, event):
    ...         return event.mean_return < 400   # False: stop once an evaluation reaches 400
    >>> asyncrl.train(env="CartPole-v1", callbacks=[StopAt()])   # doctest: +SKIP
    """

    def on_training_start(self, event: TrainingStart) -> None:
        """Before the workers start (what it returns is not read)."""

    def on_episode(self, event: EpisodeEvent) -> bool | None:
        """After each finished training episode."""
        return None

    def on_evaluation(self, event: EvaluationEvent) -> bool | None:
        """After each evaluation, its best model written."""
        return None

    def on_update(self, event: UpdateEvent) -> bool | None:
        """After each interval of the learners' statistics."""
        return None

    def on_training_end(self, event: TrainingEnd) -> None:
        """After ``summary.json`` is written, before :func:`asyncrl.train` returns or raises
        (not after a callback raised; what it returns is not read)."""


#: the methods a callback may have, in the order a run calls them
HOOKS = ("on_training_start", "on_episode", "on_evaluation", "on_update", "on_training_end")
#: those whose ``False`` stops the run
_STOPPERS = ("on_episode", "on_evaluation", "on_update")


class Hooks:
    """The run's callbacks, called in turn: it records the first that asks the run to stop
    (``stopped_by``) and the first exception (``error``), after which none is called again.
    The supervisor ends the run on either; the trainer raises the exception at the end."""

    def __init__(self, callbacks: Callback | Iterable[Callback] | None = None):
        self.callbacks = _checked(callbacks)
        self.stopped_by: str | None = None
        self.error: Exception | None = None

    def __bool__(self) -> bool:
        return bool(self.callbacks)

    def call(self, hook: str, event: object) -> None:
        for cb in self.callbacks:
            method = getattr(cb, hook, None)
            if method is None:
                continue
            try:
                answer = method(event)
            except Exception as e:  # (not a second Ctrl-C's KeyboardInterrupt: that exits)
                self.error, self.callbacks = e, []
                self.stopped_by = self.stopped_by or f"{type(cb).__name__}.{hook}"
                return
            if answer is False and hook in _STOPPERS and self.stopped_by is None:
                self.stopped_by = f"{type(cb).__name__}.{hook}"


def _checked(callbacks: Callback | Iterable[Callback] | None) -> list[Any]:
    """The callbacks as a list: one callback or several; a class instead of its instance, or
    an object with none of the methods, is refused with one line."""
    if callbacks is None:
        return []
    many = list(callbacks) if isinstance(callbacks, Iterable) else [callbacks]
    for cb in many:
        name = getattr(cb, "__name__", type(cb).__name__)
        if isinstance(cb, type):
            raise UserError(f"callbacks: {name} is a class; pass an instance of it: {name}()")
        if not any(callable(getattr(cb, hook, None)) for hook in HOOKS):
            raise UserError(
                f"callbacks: {name} has none of the methods {', '.join(HOOKS)}; subclass "
                "asyncrl.Callback and override the ones you need"
            )
    return many


__all__ = [
    "Callback",
    "EpisodeEvent",
    "EvaluationEvent",
    "TrainingEnd",
    "TrainingStart",
    "UpdateEvent",
]
