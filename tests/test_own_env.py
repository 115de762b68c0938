"""docs/own-env.md's end-to-end example, as the page writes it: a user's env module in a folder
of its own (a Dict observation with an action mask), Gymnasium's checker, then `asyncrl train`,
`eval` and `export` on it from that folder."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import asyncrl

PAGE = Path(__file__).parents[1] / "docs" / "own-env.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", PAGE.read_text(), re.S)


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """The user's folder: the page's corridor.py in it, importable here as from the CLI."""
    module = next(b for b in blocks("python") if b.startswith("# corridor.py"))
    (tmp_path / "corridor.py").write_text(module)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    sys.modules.pop("corridor", None)


def commands() -> list[list[str]]:
    """The page's asyncrl commands (comments dropped), in order."""
    lines = next(b for b in blocks("bash") if "asyncrl train --env corridor" in b).splitlines()
    return [line.split("#")[0].split() for line in lines if line.startswith("asyncrl ")]


def asyncrl_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "asyncrl.cli", *args], capture_output=True, text=True, timeout=600
    )


def test_the_page_checks_trains_evaluates_and_exports_its_env(user_dir):
    checker = next(b for b in blocks("python") if "check_env" in b)
    exec(compile(checker, "docs/own-env.md", "exec"), {})  # Gymnasium's checker passes

    train, evaluate, export = commands()
    assert train[:3] == ["asyncrl", "train", "--env"] and evaluate[:2] == ["asyncrl", "eval"]
    # the page's commands, on two workers and a fixed seed; generous: it solves in about 25k
    done = asyncrl_cli(*train[1:], "--seed", "0", "--workers", "2", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert asyncrl.load("runs/corridor").evaluation is not None
    # the run's own re-scoring of its kept model, on envs built as its training envs were
    summary = json.loads(Path("runs/corridor/summary.json").read_text())
    assert summary["kept_model_episodes"] == 100, summary
    assert summary["kept_model_return"] >= 0.9, summary
    done = asyncrl_cli(*evaluate[1:], "--seed", "1000000")
    assert done.returncode == 0, done.stderr

    # the kept model on new episodes (the best scores 0.97 on average)
    returns = asyncrl.evaluate("runs/corridor", episodes=100, seed=10**6)
    assert np.mean(returns) >= 0.9, returns

    pytest.importorskip("onnxruntime")
    done = asyncrl_cli(*export[1:])
    assert done.returncode == 0, done.stderr
    import corridor

    from asyncrl.onnx_policy import OnnxPolicy

    onnx, policy = OnnxPolicy("corridor.onnx"), asyncrl.load("runs/corridor")
    env = corridor.Corridor()
    for episode in range(20):
        obs, _ = env.reset(seed=episode)
        for _ in range(30):
            action = policy.act(obs)
            assert int(onnx.act(obs)) == int(action)
            obs, reward, term, _, _ = env.step(action)
            assert reward != -1.0  # never into a wall
            if term:
                break
