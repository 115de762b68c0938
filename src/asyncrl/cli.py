"""``asyncrl train | eval | export | plot | presets | tune``. The train options are generated
from :class:`Config`."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import inspect
import itertools
import re
import shutil
import sys
import threading
import time
import types
import typing
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NoReturn

from asyncrl.config import GROUPS, Config, choices, field_docs, field_hints, section_of
from asyncrl.configfile import read_config_file
from asyncrl.errors import Interrupted, TrainingError, UserError

if TYPE_CHECKING:
    from asyncrl.envs import EnvInfo
from asyncrl.presets import PRESETS, preset


class _Parser(argparse.ArgumentParser):
    _args: tuple[str, ...] = ()  # what this parser was given: its error looks at it

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._args = tuple(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse prints usage too)
        flag = re.fullmatch(r"argument (--[\w-]+): expected one argument", message)
        # argparse (up to Python 3.13) reads a value such as '-5s' or '-1e-3' as an option, and
        # says only that the value is missing: name the form it does read, so that the value's
        # own check speaks (an option next to the flag is a value left out: no hint)
        if flag and any(
            a == flag[1] and b.startswith("-") and b not in self._option_string_actions
            for a, b in itertools.pairwise(self._args)
        ):
            message += f"; a value that starts with '-' goes after '=': {flag[1]}=VALUE"
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _add_config_options(parser: argparse.ArgumentParser) -> None:
    """The train options, generated from the sections' fields: one argparse group a section,
    each option's help the first line of its field's docstring."""
    hints = field_hints()
    docs = field_docs()
    groups = {
        name: parser.add_argument_group(
            f"{name} options", (inspect.getdoc(cls) or "").splitlines()[0]
        )
        for name, cls in GROUPS.items()
    }
    sections = section_of()
    order = list(GROUPS)
    for f in sorted(dataclasses.fields(Config), key=lambda f: order.index(sections[f.name])):
        hint, _ = hints[f.name]
        flag = "--" + f.name.replace("_", "-")
        kw: dict[str, Any] = {"dest": f.name, "default": argparse.SUPPRESS}
        default = f.default
        summary = docs.get(f.name, "").split("\n")[0]
        help_ = summary + ("" if default in (None, ()) else f" (default: {default})")
        args = typing.get_args(hint)
        origin = typing.get_origin(hint)
        if hint is bool:
            kw["action"] = argparse.BooleanOptionalAction
        elif choices(f.name) is not None:
            kw["choices"] = list(choices(f.name) or ())
        elif origin is tuple:
            kw.update(type=args[0], nargs="+")
        elif hint in (int, float, str):
            kw["type"] = hint
        else:  # pragma: no cover - a new field type must be taught to the CLI
            raise TypeError(f"no CLI mapping for {f.name}: {hint}")
        if isinstance(hint, types.UnionType):  # pragma: no cover
            raise TypeError(f"no CLI mapping for {f.name}: {hint}")
        groups[sections[f.name]].add_argument(flag, help=help_.replace("%", "%%"), **kw)


def _formatter(prog: str) -> argparse.HelpFormatter:
    # a help line a screen wide (at least 100 columns): each option's help in two lines
    width = max(100, shutil.get_terminal_size().columns)
    return argparse.HelpFormatter(prog, width=min(width, 140), max_help_position=32)


def _debug(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: `asyncrl --debug eval ...` must not be reset by the subcommand's default.
    parser.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks"
    )


def _train_arguments(t: argparse.ArgumentParser) -> None:
    """``asyncrl train``'s arguments: the preset, a file, a resume and the config's options."""
    t.add_argument(
        "--preset",
        choices=PRESETS,
        default=None,
        help="base settings (asyncrl presets lists them); default: picked from --env",
    )
    t.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help="a TOML file of settings (or a run's config.json / config.toml) over the preset's",
    )
    t.add_argument(
        "--resume",
        metavar="RUN_DIR",
        default=None,
        help="continue RUN_DIR from its last checkpoint, with the options given here",
    )
    _debug(t)
    _add_config_options(t)


class _TrainOptions(_Parser):
    """``asyncrl train``'s options given to another command (``asyncrl tune ... -- OPTIONS``):
    an error is a :class:`UserError` of that command's, not an exit."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"after --: {message} (the options of asyncrl train --help)")


def parse_train_options(args: list[str]) -> argparse.Namespace:
    """``asyncrl train``'s options (as :func:`resolve` takes them) from a list of arguments."""
    parser = _TrainOptions(prog="asyncrl train", add_help=False)
    _train_arguments(parser)
    return parser.parse_args(args)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="asyncrl", description="Asynchronous deep RL (A3C and friends) on CPUs.")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    t = sub.add_parser(
        "train",
        help="train an agent (default: A3C on CartPole-v1, all cores)",
        formatter_class=_formatter,
        usage="asyncrl train [--env ENV] [--algo ALGO] [--config FILE] [options]",
        description="Train an agent. Settings come from the env's preset, then --config FILE, "
        "then the options given here (docs/configuration.md).",
    )
    _train_arguments(t)

    e = sub.add_parser("eval", help="mean and std of the return of a saved policy")
    e.add_argument("run_dir", metavar="RUN_DIR")
    e.add_argument("--episodes", type=int, default=10, help="episodes to run (default: 10)")
    e.add_argument("--seed", type=int, default=0, help="seed of the first episode (default: 0)")
    e.add_argument(
        "--which",
        choices=["best", "last"],
        default=None,
        help="best_model.pt (the best evaluation during training) or model.pt (the final "
        "parameters); default: the best where the run has one",
    )
    e.add_argument(
        "--stochastic",
        action="store_true",
        help="A3C, APPO: sample actions (seeded by --seed) instead of taking the most likely one",
    )
    e.add_argument(
        "--video",
        metavar="FILE.mp4",
        default=None,
        help="record the evaluated episodes to this MP4 file (pip install -e '.[video]')",
    )
    _debug(e)

    x = sub.add_parser(
        "export",
        help="a saved policy as a standalone ONNX or TorchScript module (docs/export.md)",
        description="Write the greedy policy of RUN_DIR as one module: observations (and the "
        "core's state) in, the action and the logits, Q values or Gaussian mean out. The ONNX "
        "file runs with onnxruntime and NumPy alone (docs/export.md).",
    )
    x.add_argument("run_dir", metavar="RUN_DIR")
    x.add_argument(
        "--format",
        choices=["onnx", "torchscript"],
        default="onnx",
        help="onnx (pip install 'asyncrl[export]'), or torchscript (torch.jit.load) "
        "(default: onnx)",
    )
    x.add_argument(
        "--which",
        choices=["best", "last"],
        default=None,
        help="best_model.pt or model.pt; default: the best where the run has one",
    )
    x.add_argument("--out", metavar="FILE", required=True, help="the file to write")
    x.add_argument("--force", action="store_true", help="replace --out where it exists")
    _debug(x)

    pl = sub.add_parser("plot", help="PNG learning curve of a run, or of several side by side")
    pl.add_argument("run_dir", metavar="RUN_DIR", nargs="+")
    pl.add_argument(
        "--out",
        default=None,
        help="output PNG (default: RUN_DIR/learning_curve.png; needed for several runs)",
    )
    pl.add_argument("--window", type=int, default=100, help="rolling-mean window (default: 100)")
    _debug(pl)

    tu = sub.add_parser(
        "tune",
        help="search a run's settings with Optuna; the best as a file for train --config",
        formatter_class=_formatter,
        usage="asyncrl tune --env ENV --trials N --run-dir DIR [--space FILE] [--steps N | "
        "--time-limit T] [--seeds K] [--resume] [--ray-address ADDR] [--parallel K] "
        "[-- TRAIN_OPTIONS]",
        description="Search the settings of a run with Optuna (TPE, median pruning on the "
        "runs' evaluations) and write the best as DIR/best.toml, which asyncrl train --config "
        "reads. Options after -- are asyncrl train's (--config FILE among them): the part "
        "every trial shares (docs/tune.md).",
    )
    tu.add_argument("--env", default=None, help="the env (default: CartPole-v1)")
    tu.add_argument(
        "--trials",
        type=int,
        required=True,
        metavar="N",
        help="finished trials (complete or pruned) the study holds at the end; with --resume, "
        "the new total",
    )
    tu.add_argument(
        "--run-dir", required=True, metavar="DIR", help="the tune's directory (a new one)"
    )
    tu.add_argument(
        "--space",
        metavar="FILE",
        default=None,
        help="the search space, a TOML file (default: the one shipped for the preset and "
        "algorithm)",
    )
    budget = tu.add_mutually_exclusive_group()
    budget.add_argument(
        "--steps",
        type=int,
        default=None,
        metavar="N",
        help="each run's budget of env steps (default: the preset's)",
    )
    budget.add_argument(
        "--time-limit",
        default=None,
        metavar="T",
        help="each run's budget of time ('10m'): the objective counts seconds",
    )
    tu.add_argument(
        "--seeds", type=int, default=1, metavar="K", help="runs a trial, one seed each (default: 1)"
    )
    tu.add_argument(
        "--resume",
        action="store_true",
        help="go on with the study in DIR (its own settings and space) up to --trials",
    )
    tu.add_argument(
        "--ray-address",
        metavar="ADDR",
        default=None,
        help="run trials as Ray actors on this cluster, one node's CPUs (or --workers) each; "
        "'local': a cluster of its own on this machine",
    )
    tu.add_argument(
        "--parallel",
        type=int,
        default=None,
        metavar="K",
        help="trials at a time (default: 1; with --ray-address, as many as the cluster holds)",
    )
    tu.add_argument("train_args", nargs="*", metavar="-- TRAIN_OPTIONS", help=argparse.SUPPRESS)
    _debug(tu)

    pr = sub.add_parser("presets", help="list the presets, or show one resolved for an env")
    pr.add_argument("name", metavar="NAME", nargs="?", default=None, help="the preset to show")
    pr.add_argument("--env", default=None, help="resolve it for this env (default: CartPole-v1)")
    pr.add_argument("--algo", default=None, help="resolve it for this algorithm")
    _debug(pr)
    return p


def _given(ns: argparse.Namespace) -> dict[str, Any]:
    """The config options given on the command line (nargs="+" options arrive as lists; the
    config holds tuples)."""
    fields = {f.name for f in dataclasses.fields(Config)}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in vars(ns).items() if k in fields}


def resolve(ns: argparse.Namespace) -> tuple[Config, EnvInfo]:
    """A new run's configuration from ``asyncrl train``'s options: the env's preset (or
    --preset), then --config FILE's values, then the options given; validated, and the env's
    one probe with it (it picks the preset and goes to train, which builds no env of its own:
    a bad env id or config is refused here, before Ray starts)."""
    from asyncrl.envs import parse_env_kwargs, probe_env

    cli = _given(ns)
    from_file = read_config_file(ns.config) if ns.config is not None else {}
    given = {**from_file, **cli}
    env = given.get("env", Config.env)
    info = probe_env(
        env, parse_env_kwargs(given.get("env_kwargs", ())), tuple(given.get("obs_keys", ()))
    )
    try:
        return preset(ns.preset, info=info, **given).validate().check_env(info), info
    except UserError as e:  # a value of the file's: name the file and its key
        named = re.match(r"--([\w-]+)(: .*)", str(e))
        if named and (key := named[1].replace("-", "_")) in from_file and key not in cli:
            raise UserError(f"--config {ns.config}: {key}{named[2]}") from e
        raise


def _train(ns: argparse.Namespace) -> int:
    cli = _given(ns)
    if ns.resume is not None:  # the run's own config: train probes its env and opens its cluster
        from asyncrl.trainer import train

        for flag in ("preset", "config"):
            if getattr(ns, flag) is not None:
                raise UserError(
                    f"--{flag}: a resumed run keeps its settings (config.json in the --resume "
                    f"directory; options given with --resume override them): drop --{flag}"
                )
        s = train(resume=ns.resume, started=ns.started, **cli)
    else:
        cfg, info = resolve(ns)
        with _cluster_while_importing(cfg):
            from asyncrl.trainer import train

            s = train(cfg, info=info, started=ns.started)
    # the kept model's score on new episodes first: the figures below were selected on
    kept = _kept_model_line(s)
    if kept:
        print(kept)
    if s["solved"]:
        # the score that met the rule: a confirming evaluation's mean, or the training
        # episodes' (--stop-on train, or no evaluation to confirm with); unknown from a
        # checkpoint written before it was kept
        by_eval = s["solved_by"] == "eval"
        what = "evaluation mean" if by_eval else "mean return"
        score = "-" if s["solve_return"] is None else f"{s['solve_return']:.1f}"
        # (Supervisor.evaluated keeps the solving evaluation as the best model)
        held = "; best_model.pt holds those parameters" if by_eval else ""
        print(
            f"solved: {what} {score} >= {s['target_return']:g} after {s['solve_steps']:,} "
            f"steps, {s['solve_seconds']:.1f} s (the stop rule's, selected for passing){held}"
        )
    else:
        ret = "-" if s["rolling_return"] is None else f"{s['rolling_return']:.1f}"
        why = "time limit reached" if s["ended"] == "time_limit" else "step budget spent"
        print(f"not solved: {why} ({s['total_steps']:,} steps), mean return {ret}")
    print(
        f"{s['total_steps']:,} steps in {s['wall_seconds']:.1f} s "
        f"({s['steps_per_second']:,.0f} steps/s); run directory: {s['run_dir']}"
    )
    return 0


def _kept_model_line(s: dict[str, Any]) -> str | None:
    """The kept model's re-scoring (summary.json's kept_model_*), in a line; None where the
    run re-scored nothing (--rescore-episodes 0, a fault or a signal before it)."""
    if s.get("kept_model") is None:
        return None
    n, planned = s["kept_model_episodes"], s["kept_model_planned_episodes"]
    if not n:
        return (
            f"kept model ({s['kept_model']}): the re-scoring was cut short before a wave of its "
            "new episodes ended whole"
        )
    short = " (the time limit cut the re-scoring short)" if s["kept_model_cut_short"] else ""
    of = f"{n} of {planned}" if n < planned else f"{n}"
    return (
        f"kept model ({s['kept_model']}): mean return {s['kept_model_return']:.1f} +/- "
        f"{s['kept_model_std']:.1f} over {of} new episodes{short}"
    )


@contextlib.contextmanager
def _cluster_while_importing(cfg: Config) -> Iterator[None]:
    """The run's cluster (:func:`asyncrl.backends.cluster_for`), the one ``train`` enters too,
    entered here first, while PyTorch and the trainer are imported: ``ray.init`` spends most of
    its seconds waiting for Ray's own processes to come up, time in which a thread imports what
    the run needs next. (Nothing has imported PyTorch yet: the config and the parser do not.)
    Train's block inside this one shares the cluster; this one ends it."""
    from asyncrl.backends import cluster_for

    if cfg.backend != "ray":  # nothing to start: no time to fill
        yield
        return

    def load() -> None:
        # an import that fails here fails again, with its one-line error, in the main thread
        with contextlib.suppress(Exception):
            importlib.import_module("asyncrl.trainer")

    with contextlib.ExitStack() as stack:
        importer = threading.Thread(target=load, name="asyncrl-import", daemon=True)
        importer.start()
        try:
            stack.enter_context(cluster_for(cfg))
        finally:  # never leave a thread in the middle of an import behind
            importer.join()
        yield


def _eval(ns: argparse.Namespace) -> int:
    import statistics

    from asyncrl.policy import check_evaluation, describe, evaluate, load

    check_evaluation(ns.episodes, ns.seed)  # before the model line: bad input prints one line
    print(f"model: {describe(load(ns.run_dir, ns.which))}")
    rets = evaluate(
        ns.run_dir,
        ns.episodes,
        ns.seed,
        deterministic=not ns.stochastic,
        video=ns.video,
        which=ns.which,
    )
    std = statistics.pstdev(rets)
    print(f"mean return {statistics.fmean(rets):.2f} +/- {std:.2f} over {len(rets)} episodes")
    if ns.video:
        print(f"video: {ns.video}")
    return 0


def _export(ns: argparse.Namespace) -> int:
    from asyncrl.export import export_policy

    done = export_policy(ns.run_dir, ns.out, ns.format, ns.which, ns.force)
    print(f"model: {done.model}")
    print(f"{done.format}: {done.path}")
    for what, ports in (("inputs", done.inputs), ("outputs", done.outputs)):
        print(f"  {what}: " + ", ".join(p.describe() for p in ports))
    return 0


def _plot(ns: argparse.Namespace) -> int:
    from asyncrl.plot import metrics_path, plot_run, plot_runs

    if ns.window < 1:
        raise UserError(f"--window: must be >= 1, got {ns.window}")
    if len(ns.run_dir) > 1:
        if ns.out is None:
            raise UserError("--out: several runs make one figure; name its file (--out runs.png)")
        print(plot_runs(ns.run_dir, ns.out, ns.window))
        return 0
    path = plot_run(ns.run_dir[0], ns.out, ns.window)
    print(path)
    if metrics_path(path).is_file():
        print(metrics_path(path))
    return 0


def _tune(ns: argparse.Namespace) -> int:
    from asyncrl.tune import tune

    fixed: list[str] = []
    for flag, value in (("--env", ns.env), ("--steps", ns.steps), ("--time-limit", ns.time_limit)):
        if value is not None:
            if ns.resume:
                raise UserError(
                    f"{flag}: a resumed tune keeps its settings (kept in its study): drop {flag}"
                )
            fixed += [flag, str(value)]
    for a in ns.train_args:
        flag = a.split("=", 1)[0]
        if flag in fixed[::2]:  # (the same option twice: which one would the trials get?)
            raise UserError(f"after --: {flag}: given before the -- too; give it once")
    with _terminate_as_interrupt():
        result = tune(
            ns.run_dir,
            trials=ns.trials,
            train_args=[*fixed, *ns.train_args],
            space=ns.space,
            seeds=ns.seeds,
            resume=ns.resume,
            ray_address=ns.ray_address,
            parallel=ns.parallel,
            echo=lambda line: print(line, flush=True),
        )
    return 0 if result["best_trial"] is not None else 1


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM as Ctrl-C: the tune stops the run under way cleanly, rather than leave it
    running without its parent."""
    import signal

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _presets(ns: argparse.Namespace) -> int:
    from asyncrl.configfile import config_toml
    from asyncrl.presets import describe

    if ns.name is None:
        width = max(len(n) for n in PRESETS)
        for name in PRESETS:
            print(f"{name:<{width}}  {describe(name)}")
        print("\nasyncrl presets NAME [--env ENV] shows one resolved; docs/presets.md says why")
        return 0
    over: dict[str, Any] = {"env": ns.env or Config.env}
    if ns.algo is not None:
        over["algo"] = ns.algo
    cfg = preset(ns.name, **over).validate()
    header = f"preset {ns.name} for {cfg.env}: {describe(ns.name)}\n(a valid --config FILE)"
    print(config_toml(cfg, header), end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()  # --time-limit counts from here: the command's whole time
    ns = build_parser().parse_args(argv)
    ns.started = started
    handler = {
        "train": _train,
        "eval": _eval,
        "export": _export,
        "plot": _plot,
        "presets": _presets,
        "tune": _tune,
    }[ns.command]
    try:
        return handler(ns)
    except UserError as e:
        if ns.debug:
            raise
        print(f"asyncrl {ns.command}: error: {e}", file=sys.stderr)
        return 2
    except Interrupted as e:
        print(f"asyncrl {ns.command}: {e}", file=sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt:
        again = ""
        if ns.command == "tune":  # the study keeps the finished trials
            again = f"; asyncrl tune --resume --run-dir {ns.run_dir} --trials {ns.trials} goes on"
        print(f"asyncrl {ns.command}: interrupted{again}", file=sys.stderr)
        return 130
    except TrainingError as e:
        if ns.debug and e.details:
            print(e.details, file=sys.stderr)
        print(f"asyncrl {ns.command}: error: {e}", file=sys.stderr)
        return 1
    except Exception as e:
        if ns.debug:
            raise
        print(
            f"asyncrl {ns.command}: error: {e} (run with --debug for the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
