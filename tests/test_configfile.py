"""Configuration files and presets as data: ``--config FILE`` round-trips a run's settings, a bad
file is one line and exit 2 with nothing written, ``asyncrl presets`` shows the data, and the
help reads by section."""

import dataclasses
import json
import re
import subprocess
import sys
from importlib import resources

import pytest

import asyncrl.presets
from asyncrl.cli import build_parser, main, resolve
from asyncrl.config import GROUPS, Config
from asyncrl.configfile import config_toml, read_config_file, tomllib
from asyncrl.errors import UserError

QUICK = ["--steps", "3000", "--workers", "1", "--backend", "threads", "--no-progress"]


def resolved(*args: str) -> Config:
    """The configuration ``asyncrl train ARGS`` would run with."""
    return resolve(build_parser().parse_args(["train", *args]))[0]


def test_a_runs_saved_configuration_rerun_with_config_resolves_to_the_same(run_dir):
    assert main(["train", *QUICK, "--lr", "2e-3", "--hidden", "32", "--run-dir", str(run_dir)]) == 0
    saved = json.loads((run_dir / "config.json").read_text())
    for name in ("config.json", "config.toml"):
        again = resolved("--config", str(run_dir / name))
        assert again == Config.from_dict({**saved, "run_dir": None}), name
    # the command line overrides the file
    assert resolved("--config", str(run_dir / "config.toml"), "--lr", "5e-4").lr == 5e-4


@pytest.mark.parametrize(
    "args",
    [
        # APPO's layers, the time-limit layer, a preset's Q settings reset for APPO
        ["--env", "PongNoFrameskip-v4", "--time-limit", "30m"],
        ["--env", "PongNoFrameskip-v4", "--algo", "a3c", "--core", "lstm"],
        ["--env", "Pendulum-v1", "--algo", "appo"],
        ["--preset", "paper", "--algo", "nstep-q"],
    ],
)
def test_a_resolved_configuration_written_as_toml_reads_back_the_same(args, tmp_path):
    cfg = resolved(*args)
    path = tmp_path / "settings.toml"
    path.write_text(config_toml(cfg))
    assert resolved("--config", str(path)) == cfg


def test_a_file_may_give_options_at_the_top_level_or_in_their_sections(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('algo = "appo"\n[optimizer]\nlr = 1e-4\n[appo]\nepochs = 3\n')
    assert read_config_file(path) == {"algo": "appo", "lr": 1e-4, "epochs": 3}
    cfg = resolved("--config", str(path))
    assert (cfg.algo, cfg.lr, cfg.epochs) == ("appo", 1e-4, 3)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("lrr = 0.1\n", "unknown key 'lrr'"),
        ('lr = "fast"\n', "lr: must be a number, got 'fast'"),
        ("lr = nan\n", "lr: must be a number, got nan: give a finite number"),
        ("steps = 1.5\n", "steps: must be a whole number"),
        ("hidden = 64\n", "hidden: must be a list of a whole numbers, got 64: give a list"),
        ("epochs = 3\n", "epochs: a3c does not read it (it applies to appo): drop --epochs"),
        ("[optimizer]\nepochs = 3\n", "optimizer.epochs: epochs belongs to [appo], not"),
        ('algo = "ppo"\n', "algo: got 'ppo', choose one of a3c, appo"),
        ("lr = -1.0\n", "lr: must be > 0, got -1.0"),
        ("lr = ", "not a readable toml file"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_key_exit_2_and_nothing_written(
    text, says, tmp_path, capsys
):
    path, run = tmp_path / "bad.toml", tmp_path / "run"
    path.write_text(text)
    assert main(["train", "--config", str(path), *QUICK, "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--config {path}" in err and says in err, err
    assert not run.exists()


def test_a_missing_file_and_config_with_resume_are_refused(tmp_path, capsys):
    assert main(["train", "--config", str(tmp_path / "none.toml"), *QUICK]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["train", "--resume", str(tmp_path), "--config", "x.toml"]) == 2
    assert "--config: a resumed run keeps its settings" in capsys.readouterr().err


def test_the_presets_are_data_files_that_ship_in_the_package():
    names = asyncrl.presets.PRESETS
    assert len(names) >= 9 and {"cartpole", "atari", "control", "paper"} <= set(names)
    files = {f.name for f in resources.files("asyncrl.presets").iterdir()}
    assert {f"{n}.toml" for n in names} | {"appo.toml", "rules.toml"} <= files
    for name in names:  # every value a preset gives is an option of the config
        preset = asyncrl.presets.load(name)
        for part in ("settings", *asyncrl.presets.LAYERS):
            assert set(preset[part]) <= set(Config.__dataclass_fields__), (name, part)


def test_asyncrl_presets_lists_them_and_shows_one_resolved_as_a_valid_config_file(tmp_path):
    run = lambda *a: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "asyncrl.cli", "presets", *a], capture_output=True, text=True
    )
    listing = run()
    assert listing.returncode == 0
    assert all(re.search(rf"^{n}\s", listing.stdout, re.M) for n in asyncrl.presets.PRESETS)
    shown = run("atari", "--env", "PongNoFrameskip-v4")
    assert shown.returncode == 0, shown.stderr
    data = tomllib.loads(shown.stdout)
    assert data["run"]["algo"] == "appo" and data["appo"]["epochs"] == 2
    path = tmp_path / "atari.toml"
    path.write_text(shown.stdout)
    assert resolved("--config", str(path)) == resolved("--env", "PongNoFrameskip-v4")
    bad = run("nosuch")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "unknown preset" in bad.stderr


def test_train_help_is_grouped_by_section_with_each_option_in_two_lines():
    r = subprocess.run(
        [sys.executable, "-m", "asyncrl.cli", "train", "--help"],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "COLUMNS": "100"},
    )
    assert r.returncode == 0
    groups = re.findall(r"^(\w+) options:$", r.stdout, re.M)
    assert len(groups) >= 6 and set(groups) == set(GROUPS)
    # each option's entry: its line (or its flags' line) and at most two of help
    entries = re.split(r"\n(?=  --)", r.stdout.split("run options:")[1])
    for entry in entries:
        lines = [ln for ln in entry.split("\n\n")[0].splitlines() if ln.strip()]
        flags = lines[0].split("  ")[1] if len(lines[0].split()) > 1 else lines[0]
        help_lines = len(lines) - (1 if lines[0].strip() == flags.strip() else 0)
        assert help_lines <= 2, entry
    # no measured figure in a help text: a help says what an option does, the docs what it gave
    assert not re.search(r"\d+(\.\d+)?x |\d+%|0\.\d+-0\.\d+ of", r.stdout)


def test_the_user_error_names_the_option_given_on_the_command_line_not_the_file(tmp_path):
    path = tmp_path / "ok.toml"
    path.write_text("lr = 1e-3\n")
    with pytest.raises(UserError, match=r"^--lr: must be > 0"):
        resolved("--config", str(path), "--lr", "-1")


def test_a_section_hands_its_room_a_copy_of_its_fields_only():
    from asyncrl.algos.settings import APPOSettings
    from asyncrl.settings import OptimSettings

    cfg = Config(algo="appo", lr=1e-4, epochs=3)
    optim = cfg.section(OptimSettings)
    assert type(optim) is OptimSettings and optim.lr == 1e-4
    assert not hasattr(optim, "epochs")
    appo = cfg.algo_settings()
    assert type(appo) is APPOSettings and (appo.epochs, appo.t_max) == (3, cfg.t_max)
    assert {f.name for f in dataclasses.fields(appo)} < set(Config.__dataclass_fields__)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (dict(algo="appo", vtrace_pg="rho"), "--vtrace-pg: chooses V-trace's policy term"),
        (dict(algo="appo", normalize_over="minibatch"), "--normalize-over: says where"),
        (dict(algo="a3c", vtrace=True, vtrace_pg="rho"), "--vtrace-pg: a3c does not read it"),
    ],
)
def test_the_new_appo_options_apply_where_the_table_says(options, says):
    with pytest.raises(UserError, match=re.escape(says)):
        Config(**options).validate()
    # with what they need they are taken
    Config(algo="appo", vtrace=True, vtrace_pg="rho").validate()
    Config(algo="appo", normalize_advantage=True, normalize_over="minibatch").validate()
