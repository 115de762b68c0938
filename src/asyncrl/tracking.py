"""``--track``: the run logged to Weights & Biases, beside TensorBoard and the CSVs.

The monitor hands every scalar it writes to TensorBoard to :class:`WandbLogger` as well (the
episodes', the evaluations' and the learners' statistics, the faults), so the two hold the same
metrics under the same names; the run's configuration goes in as W&B's config and
``summary.json`` as its summary. CleanRL does the same through ``wandb.init(...,
sync_tensorboard=True)``, which patches ``torch.utils.tensorboard``; asyncrl writes its own
event files (:mod:`asyncrl.tbevents`), so it logs to W&B directly.

W&B's files go under ``RUN_DIR/wandb``; with ``WANDB_MODE=offline`` nothing leaves the machine
(``wandb sync RUN_DIR/wandb/offline-run-*`` uploads them later). A resumed run logs on to the
same W&B run: its id is kept in ``RUN_DIR/wandb/run-id``.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from typing import Any

from asyncrl.errors import UserError
from asyncrl.rundir import RunDir, write_atomically

#: the x-axis of every metric: W&B's own step must only grow, while the workers' episodes can
#: arrive a few steps out of order (each reports its own view of the global step)
STEP = "global_step"


def check_login() -> None:
    """Before the run directory is made: W&B's login where it will log online (a terminal
    prompts for the key, as ``wandb login`` does), so that a run that cannot log is refused
    with nothing written."""
    if os.environ.get("WANDB_MODE", "online") in ("offline", "dryrun", "disabled"):
        return
    import wandb

    try:
        wandb.login(verify=False)
    except Exception as e:  # (wandb.errors.UsageError: no key, and no terminal to ask on)
        raise UserError(
            f"--track: W&B cannot log in ({e}); log in with `wandb login`, or log offline "
            "with WANDB_MODE=offline"
        ) from None


class WandbLogger:
    """One W&B run for one asyncrl run: scalars through :meth:`add_scalar` (the monitor's
    writer interface, as :class:`asyncrl.tbevents.ScalarWriter`), the summary at
    :meth:`finish`."""

    def __init__(
        self,
        run_dir: RunDir,
        config: Mapping[str, Any],
        *,
        project: str | None,
        entity: str | None = None,
        group: str | None = None,
    ):
        import wandb

        id_file = run_dir.path / "wandb" / "run-id"
        run_id = id_file.read_text().strip() if id_file.is_file() else uuid.uuid4().hex[:12]
        try:
            self.run = wandb.init(
                project=project or "asyncrl",
                entity=entity,
                group=group,
                name=run_dir.path.name,
                id=run_id,
                resume="allow",
                dir=str(run_dir.path),
                # no capture of the console: the processes backend forks its workers after
                # this, and each would inherit streams that write to W&B's service
                settings=wandb.Settings(console="off"),
            )
        except Exception as e:  # (wandb.errors.UsageError and CommError: no login, no network)
            raise UserError(
                f"--track: W&B could not start its run ({type(e).__name__}: {e}); log in with "
                "`wandb login`, or log offline with WANDB_MODE=offline"
            ) from None
        if not id_file.is_file():  # (W&B made the folder)
            write_atomically(id_file, lambda f: f.write(run_id.encode()))
        # the options of a resume may differ from the first run's: they replace them
        self.run.config.update(dict(config), allow_val_change=True)
        self.run.define_metric(STEP)
        self.run.define_metric("*", step_metric=STEP)
        self._row: dict[str, float] = {}
        self._step: int | None = None
        self._finished = False

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        """Gather the scalars of one step into one row of W&B's history (the three of an
        episode, the five of an evaluation, the statistics of an interval); a tag seen again
        (a second episode reported at the same step) starts a new row."""
        if self._row and (step != self._step or tag in self._row):
            self.flush()
        self._row[tag] = float(value)
        self._step = step

    def flush(self) -> None:
        if self._row:
            self.run.log({**self._row, STEP: self._step})
            self._row = {}

    def close(self) -> None:
        """The monitor is done writing (the run is not: :meth:`finish`)."""
        self.flush()

    def finish(self, summary: Mapping[str, Any] | None, failed: bool = False) -> None:
        """The run ended: ``summary`` (summary.json; None where it was not written) as W&B's
        summary, and the run closed."""
        if self._finished:
            return
        self._finished = True
        self.flush()
        if summary is not None:  # as summary.json holds it (W&B takes no int keys: Ray's lags)
            self.run.summary.update(json.loads(json.dumps(summary)))
        self.run.finish(exit_code=1 if failed else 0)


__all__ = ["WandbLogger", "check_login"]
