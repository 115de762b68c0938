"""Callbacks (``asyncrl.train(..., callbacks=[...])``): each kind is called with the run's own
values on threads and processes; a False stops the run as its budget would, with a checkpoint
that resumes; an exception stops it too and propagates. ``--track``: the run logged to Weights &
Biases offline, the same scalars as TensorBoard; without wandb, one line and nothing written."""

from __future__ import annotations

import csv
import json
import re
import statistics
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import asyncrl
from asyncrl import monitor, worker
from asyncrl.callbacks import EpisodeEvent, EvaluationEvent, TrainingEnd, TrainingStart, UpdateEvent
from asyncrl.checkpoint import load_checkpoint
from asyncrl.cli import main
from asyncrl.errors import UserError

QUICK = dict(workers=1, seed=0, eval_every=2_000, progress=False, target_return=1e9)


def csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


class Recorder(asyncrl.Callback):
    """Keeps every event; returns None (goes on) from each."""

    def __init__(self) -> None:
        self.starts: list[TrainingStart] = []
        self.episodes: list[EpisodeEvent] = []
        self.evaluations: list[EvaluationEvent] = []
        self.updates: list[UpdateEvent] = []
        self.ends: list[TrainingEnd] = []

    def on_training_start(self, event: TrainingStart) -> None:
        self.starts.append(event)

    def on_episode(self, event: EpisodeEvent) -> None:
        self.episodes.append(event)

    def on_evaluation(self, event: EvaluationEvent) -> None:
        self.evaluations.append(event)

    def on_update(self, event: UpdateEvent) -> None:
        self.updates.append(event)

    def on_training_end(self, event: TrainingEnd) -> None:
        self.ends.append(event)


class GoOn:
    """Not a subclass: any object with the methods is a callback. True and None go on."""

    def on_episode(self, event: EpisodeEvent) -> bool:
        return True

    def on_update(self, event: UpdateEvent) -> None:
        return None


@pytest.fixture
def often(monkeypatch: pytest.MonkeyPatch) -> None:
    """An update event at every turn of the supervisor's loop where the workers sent
    statistics, and statistics with every report (forked workers inherit the setting)."""
    monkeypatch.setattr(monitor, "METRICS_EVERY", 0.0)
    monkeypatch.setattr(worker, "STATS_EVERY", 0.0)


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_each_callback_gets_the_runs_own_values(backend, run_dir, often):
    rec = Recorder()
    summary = asyncrl.train(
        backend=backend, steps=6_000, run_dir=str(run_dir), callbacks=[rec, GoOn()], **QUICK
    )
    assert summary["ended"] == "budget" and summary["stopped_by"] is None

    (start,) = rec.starts
    assert start.run_dir == run_dir and start.config.backend == backend
    assert (start.resumed, start.global_step) == (False, 0)

    # every episode, as episodes.csv has it (CartPole: a reward of 1 a step)
    episodes = csv_rows(run_dir / "episodes.csv")
    assert len(rec.episodes) == len(episodes) == summary["episodes"] > 10
    assert [e.episode for e in rec.episodes] == list(range(1, len(episodes) + 1))
    for e, row in zip(rec.episodes, episodes, strict=True):
        assert e.episode_return == pytest.approx(float(row["return"]), rel=1e-5)
        assert e.length == int(row["length"]) == e.episode_return
        assert (e.worker, e.global_step) == (0, int(row["global_step"]))
    returns = [e.episode_return for e in rec.episodes]
    for i in (0, 5, len(returns) - 1):
        window = returns[max(0, i + 1 - 100) : i + 1]
        assert rec.episodes[i].rolling_return == pytest.approx(statistics.fmean(window))
    assert rec.episodes[-1].rolling_return == pytest.approx(summary["rolling_return"])

    # every evaluation, the final one's included; is_best marks each model kept (the rows too)
    evaluations = csv_rows(run_dir / "evaluations.csv")
    assert len(rec.evaluations) == len(evaluations) == summary["evaluations"] >= 3
    for e, row in zip(rec.evaluations, evaluations, strict=True):
        assert (e.index, e.global_step) == (int(row["evaluation"]), int(row["global_step"]))
        assert e.mean_return == pytest.approx(float(row["mean"]), rel=1e-5)
        assert e.min_return <= e.mean_return <= e.max_return and e.episodes == len(e.returns) == 10
        assert e.is_best == (row["kept"] == "1") and not (e.solved or e.confirmed)
        assert e.rescreened == (row["stage"] == "re-screen")
    assert rec.evaluations[0].is_best
    kept = [e for e in rec.evaluations if e.is_best][-1]
    assert asyncrl.load(run_dir).evaluation["global_step"] == kept.global_step

    # every row of metrics.csv, under TensorBoard's names; the learning rate falls
    metrics = csv_rows(run_dir / "metrics.csv")
    assert len(rec.updates) == len(metrics) >= 3
    for e, row in zip(rec.updates, metrics, strict=True):
        assert e.global_step == int(row["global_step"])
        assert e.metrics["loss/policy_loss"] == pytest.approx(float(row["loss_policy_loss"]), 1e-5)
    first, last = rec.updates[0].learning_rate, rec.updates[-1].learning_rate
    assert first is not None and last is not None and 0 <= last < first <= 3e-3

    (end,) = rec.ends
    assert end.summary == json.loads((run_dir / "summary.json").read_text())


def stopper(hook: str) -> asyncrl.Callback:
    """A callback whose ``hook`` returns False the first time it is called."""
    return type("Stopper", (asyncrl.Callback,), {hook: lambda self, event: False})()


@pytest.mark.parametrize("hook", ["on_episode", "on_evaluation", "on_update"])
def test_false_stops_the_run_with_a_checkpoint_that_resumes(hook, run_dir, often):
    budget = 1_000_000
    summary = asyncrl.train(
        backend="threads", steps=budget, run_dir=str(run_dir), callbacks=stopper(hook), **QUICK
    )
    assert summary["ended"] == "callback" and summary["stopped_by"] == f"Stopper.{hook}"
    # the first event stops it: episodes at once, updates within a few rollouts, evaluations
    # at the first --eval-every 2000 (the workers go on while one runs)
    steps = summary["total_steps"]
    assert 0 < steps < 50_000
    assert load_checkpoint(run_dir)["glob"].steps == steps
    # the run ends as on its budget: the final parameters evaluated, the models written
    evals = csv_rows(run_dir / "evaluations.csv")
    assert int(evals[-1]["global_step"]) == steps
    assert (run_dir / "model.pt").is_file() and (run_dir / "best_model.pt").is_file()

    more = asyncrl.train(resume=run_dir, steps=steps + 2_000)
    assert more["resumed"] and more["ended"] == "budget" and more["stopped_by"] is None
    assert more["total_steps"] >= steps + 2_000


class Boom(asyncrl.Callback):
    def on_episode(self, event: EpisodeEvent) -> None:
        if event.episode == 3:
            raise ValueError("boom at episode 3")


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_a_callback_that_raises_stops_the_run_and_its_error_propagates(backend, run_dir):
    rec = Recorder()
    with pytest.raises(ValueError, match="boom at episode 3") as raised:
        asyncrl.train(
            backend=backend,
            steps=1_000_000,
            run_dir=str(run_dir),
            callbacks=[Boom(), rec],
            **QUICK,
        )
    # the user's own exception, its traceback reaching the line that raised it
    assert raised.traceback[-1].name == "on_episode"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["ended"] == "callback_error" and summary["stopped_by"] == "Boom.on_episode"
    assert load_checkpoint(run_dir)["glob"].steps == summary["total_steps"] < 50_000
    if sys.version_info >= (3, 11):
        assert f"resume={str(run_dir)!r}" in "".join(raised.value.__notes__)
    # no callback is called after one raised: the recorder heard of episodes 1 and 2 only, and
    # of no end
    assert [e.episode for e in rec.episodes] == [1, 2] and not rec.ends
    assert summary["episodes"] >= 3

    more = asyncrl.train(resume=run_dir, steps=summary["total_steps"] + 2_000)
    assert more["ended"] == "budget"


@pytest.mark.parametrize(
    ("hook", "ended"), [("on_training_start", "callback_error"), ("on_training_end", "budget")]
)
def test_an_error_at_the_start_or_the_end_propagates_too(hook, ended, run_dir):
    """Raised at the start, it stops the run at once (with a checkpoint); at the end, the run
    has ended as it would have and its summary is written, then it propagates."""

    def fail(self, event):
        raise RuntimeError(f"no {hook}")

    bad = type("Bad", (asyncrl.Callback,), {hook: fail})()
    with pytest.raises(RuntimeError, match=f"no {hook}"):
        asyncrl.train(backend="threads", steps=3_000, run_dir=str(run_dir), callbacks=bad, **QUICK)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["ended"] == ended and load_checkpoint(run_dir)["glob"].steps > 0
    assert summary["stopped_by"] == (f"Bad.{hook}" if hook == "on_training_start" else None)


@pytest.mark.parametrize(
    ("callbacks", "message"),
    [
        ([Recorder], "callbacks: Recorder is a class; pass an instance of it: Recorder()"),
        ([object()], "callbacks: object has none of the methods on_training_start, "),
        (print, "callbacks: print has none of the methods"),
    ],
)
def test_a_callback_that_is_no_callback_is_refused_before_anything_is_written(
    callbacks, message, run_dir
):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        asyncrl.train(backend="threads", steps=1_000, run_dir=str(run_dir), callbacks=callbacks)
    assert not run_dir.exists()


def test_the_callback_names_import_no_pytorch():
    code = (
        "import sys, asyncrl; asyncrl.Callback; "
        "from asyncrl.callbacks import EpisodeEvent, EvaluationEvent, UpdateEvent; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_docs_example_stops_on_its_callback(tmp_path, monkeypatch):
    """docs/callbacks.md's example, as written but on one worker of this machine."""
    text = (Path(__file__).parents[1] / "docs" / "callbacks.md").read_text()
    found = re.search(r"```python\n(.*?)```", text, re.S)
    assert found is not None
    code = found[1]
    train = asyncrl.train
    mine = dict(workers=1, backend="threads", seed=0, progress=False, run_dir=str(tmp_path / "r"))
    monkeypatch.setattr(asyncrl, "train", lambda **kw: train(**kw, **mine))
    example: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(code, "docs/callbacks.md", "exec"), example)
    summary = example["summary"]
    assert summary["ended"] == "callback", summary
    assert summary["stopped_by"] == "StopAtTarget.on_evaluation"
    assert summary["best_eval_return"] >= 300.0 and summary["total_steps"] < 500_000
    assert example["losses"].rows


# ------------------------------------------------------------------ --track (Weights & Biases)


def wandb_records(path: Path) -> list[Any]:
    """The records of a W&B run file (``run-ID.wandb``): LevelDB's log format behind W&B's
    7-byte header (``:W&B``, a magic number, a version), each record a ``Record`` proto."""
    from wandb.proto import wandb_internal_pb2 as pb

    block, header = 32_768, 7
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    out, pos, parts = [], header, b""
    while pos + header <= len(data):
        left = block - pos % block
        if left < header:  # a block's tail too short for a record header: padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + header])
        if kind == 0:  # zeros to the block's end
            pos += left
            continue
        parts += data[pos + header : pos + header + length]
        pos += header + length
        if kind in (1, 4):  # FULL, or the LAST piece of one
            record = pb.Record()
            record.ParseFromString(parts)
            out.append(record)
            parts = b""
    return out


def wandb_run(folder: Path) -> dict[str, Any]:
    """What a W&B run file holds: its run record, config, history rows and summary."""
    (path,) = folder.glob("run-*.wandb")
    run: dict[str, Any] = {"history": [], "config": {}, "summary": {}}
    for r in wandb_records(path):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            run["run"] = r.run
        elif kind in ("history", "config", "summary"):
            items = r.history.item if kind == "history" else getattr(r, kind).update
            values = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}
            if kind == "history":
                run["history"].append(values)
            else:
                run[kind].update(values)
    return run


def wandb_done() -> None:
    """W&B's service ended: it has written the run files to their end (``run.finish`` returns
    before they are), and the next run reads its settings (``WANDB_MODE``) afresh."""
    import wandb

    wandb.teardown()


@pytest.fixture
def wandb_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home"))
    yield
    wandb_done()


def test_track_logs_what_tensorboard_gets_offline_and_a_resume_goes_on(run_dir, wandb_offline):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    summary = asyncrl.train(
        backend="processes",
        steps=6_000,
        run_dir=str(run_dir),
        track=True,
        wandb_project="asyncrl-tests",
        wandb_group="callbacks",
        **QUICK,
    )
    wandb_done()
    (folder,) = (run_dir / "wandb").glob("offline-run-*")
    run = wandb_run(folder)
    record = run["run"]
    assert (record.project, record.run_group, record.display_name) == (
        "asyncrl-tests",
        "callbacks",
        run_dir.name,
    )
    run_id = (run_dir / "wandb" / "run-id").read_text()
    assert record.run_id == run_id
    config = run["config"]
    assert config["env"] == "CartPole-v1" and config["track"] is True
    assert config["wandb_group"] == "callbacks"
    assert run["summary"]["total_steps"] == summary["total_steps"]
    assert run["summary"]["ended"] == "budget"

    # each TensorBoard scalar, at the same steps with the same values
    tb = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0})
    tb.Reload()
    history: list[dict[str, Any]] = run["history"]
    logged = {k for row in history for k in row if not k.startswith("_")} - {"global_step"}
    assert logged == set(tb.Tags()["scalars"])
    assert {"episode/return", "eval/mean_return", "train/learning_rate"} <= logged
    for tag in logged:
        points = [(row["global_step"], row[tag]) for row in history if tag in row]
        expected = [(e.step, e.value) for e in tb.Scalars(tag)]
        assert [s for s, _ in points] == [s for s, _ in expected], tag
        assert [v for _, v in points] == pytest.approx([v for _, v in expected], rel=1e-6), tag
    # one row for an episode's three scalars
    assert len([row for row in history if "episode/return" in row]) == summary["episodes"]

    # a resume logs on to the same W&B run
    asyncrl.train(resume=run_dir, steps=8_000)
    wandb_done()
    folders = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(folders) == 2
    again = wandb_run(next(f for f in folders if f != folder))
    assert again["run"].run_id == run_id
    assert max(row["global_step"] for row in again["history"]) >= 8_000


def test_the_wandb_summary_is_summary_json_as_written(tmp_path, wandb_offline):
    """A Ray run's summary counts its gradients by staleness under int keys, which W&B's
    summary refuses: it gets them as summary.json has them."""
    from asyncrl.rundir import RunDir
    from asyncrl.tracking import WandbLogger

    logger = WandbLogger(RunDir(tmp_path), {"env": "CartPole-v1"}, project="asyncrl-tests")
    logger.add_scalar("episode/return", 10.0, 5)
    logger.finish({"ended": "budget", "lags": {0: 3, 1: 2}})
    wandb_done()
    (folder,) = (tmp_path / "wandb").glob("offline-run-*")
    run = wandb_run(folder)
    assert run["summary"]["lags"] == {"0": 3, "1": 2} and run["summary"]["ended"] == "budget"
    assert [row["episode/return"] for row in run["history"]] == [10.0]


def test_track_without_wandb_is_one_line_and_writes_nothing(run_dir, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb fails, as uninstalled
    args = ["train", "--track", "--run-dir", str(run_dir), "--no-progress"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and 'pip install "asyncrl[wandb]"' in err
    assert not run_dir.exists()
    with pytest.raises(UserError, match="--track: "):
        asyncrl.train(track=True, run_dir=str(run_dir))
    assert not run_dir.exists()


def test_the_wandb_options_need_track(run_dir, capsys):
    assert main(["train", "--wandb-project", "p", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "--wandb-project: names --track's W&B run: add --track" in err and err.count("\n") == 1
    assert not run_dir.exists()


def test_track_online_without_a_login_is_one_line_and_writes_nothing(
    run_dir, monkeypatch, tmp_path, capsys
):
    pytest.importorskip("wandb")
    wandb_done()  # (no offline setting left from another test)
    for var in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"  # no ~/.netrc, no W&B settings: no key anywhere
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("NETRC", str(home / ".netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(home / "wandb"))
    args = ["train", "--track", "--run-dir", str(run_dir), "--no-progress"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--track: W&B cannot log in" in err and "WANDB_MODE=offline" in err
    assert not run_dir.exists()
