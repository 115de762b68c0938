"""The wheel ships what the package reads at run time (the presets, the tune's search spaces):
built from the checkout, installed into a new virtual environment outside it, it lists the
presets, finds the spaces and trains.

The environment takes the dependencies (PyTorch, Gymnasium, ...) from the interpreter running
the tests (``--system-site-packages``): installing them anew would download gigabytes; asyncrl
itself comes from the wheel alone, which the test checks."""

import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_installed_outside_the_checkout_lists_the_presets_and_trains(tmp_path):
    wheels = tmp_path / "wheels"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    build = subprocess.run(
        [*pip_wheel, "-q", "-w", str(wheels), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = wheels.glob("asyncrl-*.whl")
    env = tmp_path / "venv"
    venv.create(env, system_site_packages=True, with_pip=True)
    python = env / "bin" / "python"
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr
    away = tmp_path / "elsewhere"  # not the checkout: its src/ is not on the path
    away.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [python, *args], capture_output=True, text=True, cwd=away, timeout=300
        )

    where = run("-c", "import asyncrl; print(asyncrl.__file__)")
    assert where.returncode == 0 and str(env) in where.stdout, where.stdout + where.stderr
    presets = run("-m", "asyncrl.cli", "presets")
    assert presets.returncode == 0 and "atari" in presets.stdout, presets.stderr
    trained = run(
        "-m",
        "asyncrl.cli",
        "train",
        "--steps",
        "2000",
        "--workers",
        "1",
        "--backend",
        "threads",
        "--no-progress",
        "--run-dir",
        str(away / "run"),
    )
    assert trained.returncode == 0, trained.stderr
    assert (away / "run" / "config.toml").is_file() and (away / "run" / "model.pt").is_file()
    # asyncrl tune's default search spaces are package data too, each found by its rule
    spaces = run(
        "-c",
        "from asyncrl.tune.space import default_space, shipped_spaces\n"
        "print(len(shipped_spaces()), default_space('atari', 'appo').names)",
    )
    assert spaces.returncode == 0 and spaces.stdout.startswith("8 ("), spaces.stderr
