"""Shared optimizers, gradient clipping and the learning-rate schedule.

The global parameters live in one flat tensor (see :func:`asyncrl.models.flatten_parameters`).
A shared optimizer owns statistics of the same shape, created in shared memory *before* the
workers start, and applies a worker's flat gradient to the global vector in a few fused ops,
without locks (Hogwild, Recht et al., 2011), as the paper does.
"""

from __future__ import annotations

from typing import Protocol

import torch

from asyncrl.settings import Resumed


class OptimizerSettings(Protocol):
    """What the shared optimizer reads: the optimiser's section and the backend."""

    @property
    def optimizer(self) -> str: ...
    @property
    def lr(self) -> float: ...
    @property
    def rms_alpha(self) -> float: ...
    @property
    def rms_init(self) -> float | None: ...
    @property
    def eps(self) -> float: ...
    @property
    def backend(self) -> str: ...


class ScheduleSettings(Protocol):
    """What the learning-rate schedule reads: the optimiser's schedule and the run's budgets."""

    @property
    def lr(self) -> float: ...
    @property
    def lr_schedule(self) -> str: ...
    @property
    def lr_anneal_from(self) -> float: ...
    @property
    def lr_anneal_over(self) -> str: ...
    @property
    def steps(self) -> int: ...
    @property
    def lr_from(self) -> Resumed | None: ...
    def time_limit_seconds(self) -> float | None: ...


def _shared_zeros_like(t: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(t).share_memory_()


class SharedRMSprop:
    """RMSProp with statistics shared by every worker (the paper's "Shared RMSProp", S7/S8).

        g     <- alpha * g + (1 - alpha) * grad^2
        theta <- theta - lr * grad / sqrt(g + eps)

    ``eps`` is *inside* the square root as in the paper and TensorFlow; ``torch.optim.RMSprop``
    puts it outside, which matters with the paper's eps = 0.1.

    ``g`` starts at ``init``: 0 as in ``torch.optim.RMSprop``, or 1 as in TensorFlow's RMSProp
    (and so OpenAI Baselines' A2C and Stable-Baselines3's ``RMSpropTFLike``). From 0 with a
    small eps the first updates move each parameter by up to ``lr / sqrt(1 - alpha)``, ten
    times lr at alpha 0.99, whatever the size of its gradient; from 1 they start far below lr
    and grow to it as the average forgets its start: a warm-up.
    """

    def __init__(
        self,
        params: torch.Tensor,
        lr: float,
        alpha: float = 0.99,
        eps: float = 0.1,
        init: float = 0.0,
    ):
        if params.dim() != 1:
            raise ValueError("SharedRMSprop takes the flat parameter vector")
        self.params = params
        self.lr, self.alpha, self.eps = lr, alpha, eps
        self.square_avg = _shared_zeros_like(params).fill_(init)

    def step(self, grad: torch.Tensor, lr: float | None = None) -> None:
        lr = self.lr if lr is None else lr
        self.square_avg.mul_(self.alpha).addcmul_(grad, grad, value=1.0 - self.alpha)
        self.params.addcdiv_(grad, self.square_avg.add(self.eps).sqrt_(), value=-lr)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"square_avg": self.square_avg.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.square_avg.copy_(state["square_avg"])


class SharedAdam:
    """Adam with shared moments *and a shared step counter*.

    Several popular A3C repositories keep Adam's step per process, so the bias correction of
    every worker restarts from step 1; here the counter is one shared tensor. Its increment is
    not atomic across processes (Hogwild): a lost increment only nudges the bias correction.
    """

    def __init__(
        self,
        params: torch.Tensor,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ):
        if params.dim() != 1:
            raise ValueError("SharedAdam takes the flat parameter vector")
        self.params = params
        self.lr, self.betas, self.eps = lr, betas, eps
        self.exp_avg = _shared_zeros_like(params)
        self.exp_avg_sq = _shared_zeros_like(params)
        self.step_count = torch.zeros(1, dtype=torch.int64).share_memory_()

    def step(self, grad: torch.Tensor, lr: float | None = None) -> None:
        if grad.shape != self.params.shape:
            raise ValueError(
                f"a gradient of shape {tuple(grad.shape)} for {self.params.numel()} parameters"
            )
        lr = self.lr if lr is None else lr
        b1, b2 = self.betas
        self.step_count.add_(1)
        # The kernel torch.optim.Adam(fused=True) runs on CPU (private by name, stable with
        # torch pinned): one pass over the four vectors where the arithmetic written out made
        # nine, each over memory the emulators had evicted from the caches (measured at 8efeca9:
        # docs/benchmarks.md, "the shared Adam step"). It reads the step as a float tensor (this
        # worker's view of the shared count), and the gradient's memory as contiguous float32
        # whatever it is given: hence the conversion, free for the flat float32 gradients the
        # stores pass.
        grad = grad.to(self.params.dtype).contiguous()
        t = torch.tensor(float(self.step_count.item()))
        torch._fused_adam_(
            [self.params], [grad], [self.exp_avg], [self.exp_avg_sq], [], [t],
            lr=lr, beta1=b1, beta2=b2, weight_decay=0.0, eps=self.eps,
            amsgrad=False, maximize=False,
        )  # fmt: skip

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {
            "exp_avg": self.exp_avg.clone(),
            "exp_avg_sq": self.exp_avg_sq.clone(),
            "step_count": self.step_count.clone(),
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.exp_avg.copy_(state["exp_avg"])
        self.exp_avg_sq.copy_(state["exp_avg_sq"])
        self.step_count.copy_(state["step_count"])


SharedOptimizer = SharedRMSprop | SharedAdam


def make_optimizer(cfg: OptimizerSettings, params: torch.Tensor) -> SharedOptimizer:
    """The shared optimizer ``cfg`` names, over the flat parameter vector ``params``."""
    if cfg.optimizer == "rmsprop":
        return SharedRMSprop(params, cfg.lr, alpha=cfg.rms_alpha, eps=cfg.eps, init=rms_start(cfg))
    if cfg.optimizer == "adam":
        return SharedAdam(params, cfg.lr, eps=cfg.eps)
    raise ValueError(f"unknown optimizer {cfg.optimizer!r}")


def rms_start(cfg: OptimizerSettings) -> float:
    """RMSProp's starting average of squared gradients: ``--rms-init`` (or the preset's: 1 on
    Atari), else the backend's."""
    return cfg.rms_init if cfg.rms_init is not None else rms_init_for(cfg.backend)


def rms_init_for(backend: str) -> float:
    """RMSProp's starting average where ``--rms-init`` is not given: 1 on Ray, 0 elsewhere.

    From 0 the first updates are sign steps of up to ten times lr on every parameter. On shared
    memory each worker sees the last one's effect before its next gradient; on Ray a worker's
    gradients are taken at parameters many versions old, so a run of those steps goes the same
    way unchecked, and on CartPole the policy could freeze on one action
    (docs/ray.md#rmsprop-from-1-on-ray)."""
    return 1.0 if backend == "ray" else 0.0


def linear_lr(lr: float, step: float, total_steps: float, hold: float = 0.0) -> float:
    """The paper's schedule: lr annealed linearly to 0 over the step budget; with ``hold`` > 0
    it first stays at lr for that fraction of the budget, then falls linearly to 0 at its end.
    (``step`` and ``total_steps`` may be any measure of the budget: steps or seconds.)"""
    start = hold * total_steps
    if step <= start:
        return lr
    return lr * max(0.0, 1.0 - (step - start) / (total_steps - start))


def scheduled_lr(cfg: ScheduleSettings, step: int, elapsed: float = 0.0) -> float:
    """The rate ``cfg``'s schedule gives at global step ``step``, ``elapsed`` seconds into the
    run (the clock of ``--time-limit``): the one place the updates and the logged
    ``train/learning_rate`` read it from, so the two cannot disagree.

    With ``--lr-anneal-over time`` the rate is the lower of the schedule over ``--steps`` and
    the same schedule over ``--time-limit``: the rate reaches 0 at whichever budget ends the
    run, so a run ended by its time limit anneals fully on a CPU of any speed, where a step
    budget sized for one CPU leaves a slower one the held rate all run (docs/presets.md).

    A resumed run (``cfg.lr_from``) goes on from the rate it had and follows the schedule of
    its new budget down from there, scaled to that rate: a larger budget given on resume does
    not raise the rate back (a linear schedule over 10M steps resumed at 8M with 20M would
    jump from 0.2 lr to 0.6 lr), and the rate never rises within a run unless the schedule
    holds it."""
    lr = cfg.lr * _fraction(cfg, step, elapsed)
    start = cfg.lr_from
    if start is not None and start.lr < cfg.lr * _fraction(cfg, start.step, start.elapsed):
        # (where the new schedule gives the rate the run had, nothing to scale: the same budget)
        f0 = _fraction(cfg, start.step, start.elapsed)
        lr = min(lr, start.lr * _fraction(cfg, step, elapsed) / f0)
    return lr


def _fraction(cfg: ScheduleSettings, step: float, elapsed: float) -> float:
    """The schedule's rate at ``step`` and ``elapsed`` as a fraction of --lr."""
    if cfg.lr_schedule == "constant":
        return 1.0
    f = linear_lr(1.0, step, cfg.steps, cfg.lr_anneal_from)
    if cfg.lr_anneal_over == "time":
        limit = cfg.time_limit_seconds()
        assert limit is not None  # the config checks it
        f = min(f, linear_lr(1.0, elapsed, limit, cfg.lr_anneal_from))
    return f


def clip_grad_norm_(grad: torch.Tensor, max_norm: float) -> float:
    """Scale the flat gradient in place to norm <= max_norm; return the norm before clipping."""
    norm = float(grad.norm())
    if max_norm > 0 and norm > max_norm:
        grad.mul_(max_norm / (norm + 1e-6))
    return norm
