"""Atari-5: the 57-game median human-normalised score estimated from five games (Aitchison,
Sweetser and Hutter, ICML 2023, "Atari-5: Distilling the Arcade Learning Environment down to
Five Games"; github.com/maitchison/Atari-5).

The regression (its ``atari5.py``): a game's score ``s`` is human-normalised in percent,
``100 (score - random) / (human - random)``, and the 57-game median ``m`` in percent is
estimated from a subset's games with no intercept, in ``log10(1 + max(0, .))``::

    log10(1 + m) = sum_i w_i log10(1 + max(0, s_i))

Battle Zone, Double Dunk, Name This Game, Phoenix and Q*bert are its Atari-5; Atari-3 (Battle
Zone, Name This Game, Phoenix) and Atari-1 (Name This Game) are subsets of them. The
coefficients and errors are data (``[estimate.*]`` in benchmarks/suites.toml), and so are the
suite that runs the games and the bars it is read against (``[suite.atari-5]``).

    python benchmarks/atari5.py extract PATH/TO/Atari-5/dataset.csv   # the fit's data, below
    python benchmarks/atari5.py fit          # the regressions from that data, against suites.toml
    python benchmarks/atari5.py estimate BattleZone=11340 DoubleDunk=0.1 NameThisGame=5614 \\
        Phoenix=28181.8 Qbert=13752.3       # raw scores -> the 57-game median estimate

``fit`` needs ``benchmarks/atari5_data.csv``, which ``extract`` writes from the paper's
``dataset.csv`` (maitchison/Atari-5, MIT License): the published per-game scores of the
algorithms the paper fitted on, with their 57-game medians. It is not tracked; the suite's
estimate needs only the coefficients.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
#: the fit's data: ``extract``'s output (not tracked)
DATA = HERE / "atari5_data.csv"
#: the commit of maitchison/Atari-5 whose dataset.csv the fit was checked against
SOURCE_COMMIT = "118cad542c94bc6e57181bb259a17d020e0a330f"
#: resamples of the bootstrap over seeds (as suite.py's intervals)
RESAMPLES = 10_000


@dataclass(frozen=True)
class Regression:
    """One published subset: its games (the suite's game names), their coefficients, and the
    paper's cross-validated mean relative error of the estimate in percent."""

    name: str
    games: tuple[str, ...]
    weights: tuple[float, ...]
    error: float


@dataclass(frozen=True)
class Bar:
    """A published algorithm to read the estimate against: its true 57-game median (%) and
    its raw scores on the games, from which the same regression estimates it."""

    name: str
    median: float
    scores: dict[str, float]
    source: str = ""


@dataclass(frozen=True)
class Reuse:
    """Runs of another suite that stand for one of this suite's tasks: the same command's
    settings (``settings``: their digest, suite.py's ``settings_digest``), run before."""

    task: str
    suite: str
    batch: str
    settings: str
    note: str = ""


@dataclass(frozen=True)
class Plan:
    """A suite's estimate: the regressions to try in order (the first whose games all have
    runs), the bars, and the runs it reuses."""

    regressions: tuple[Regression, ...]
    bars: tuple[Bar, ...] = ()
    reuse: tuple[Reuse, ...] = ()


def regressions(data: Mapping) -> dict[str, Regression]:
    """The ``[estimate.NAME]`` tables of suites.toml."""
    out = {}
    for key, t in data.get("estimate", {}).items():
        if len(t["games"]) != len(t["weights"]):
            raise ValueError(f"suites.toml: estimate.{key}: one weight a game")
        out[key] = Regression(
            t["name"], tuple(t["games"]), tuple(float(w) for w in t["weights"]), float(t["error"])
        )
    return out


def plans(data: Mapping) -> dict[str, Plan]:
    """Suite name -> its :class:`Plan`, for the suites of suites.toml with an ``estimate``."""
    known = regressions(data)
    out = {}
    for name, s in data.get("suite", {}).items():
        if "estimate" not in s:
            continue
        regs = tuple(known[k] for k in s["estimate"])
        bars = tuple(
            Bar(b["name"], float(b["median"]), {g: float(v) for g, v in b["scores"].items()},
                b.get("source", ""))
            for b in s.get("bar", ())
        )  # fmt: skip
        reuse = tuple(
            Reuse(r["task"], r["suite"], r["batch"], r["settings"], r.get("note", ""))
            for r in s.get("reuse", ())
        )
        out[name] = Plan(regs, bars, reuse)
    return out


# ---------------------------------------------------------------------- the estimator
def normalised(score: float | np.ndarray, random: float, human: float) -> float | np.ndarray:
    """The human-normalised score in percent: 0 at random play, 100 at the human tester's."""
    return 100.0 * (np.asarray(score, dtype=float) - random) / (human - random)


def transform(x: float | np.ndarray) -> np.ndarray:
    """The regression's space: ``log10(1 + max(0, x))`` (a score below random counts as 0)."""
    return np.log10(1.0 + np.clip(np.asarray(x, dtype=float), 0.0, None))


def estimate(reg: Regression, hn: Mapping[str, float | np.ndarray]) -> float | np.ndarray:
    """The 57-game median (%) from the human-normalised scores (%) of ``reg``'s games (arrays
    estimate element-wise: a bootstrap's resamples in one call)."""
    total = sum(w * transform(hn[g]) for g, w in zip(reg.games, reg.weights, strict=True))
    out = 10.0**total - 1.0
    return float(out) if np.ndim(out) == 0 else out


def from_raw(
    reg: Regression, scores: Mapping[str, float], human: Mapping[str, tuple[float, float]]
) -> float:
    """:func:`estimate` from raw game scores, ``human``: game -> (random, human)."""
    return float(estimate(reg, {g: normalised(scores[g], *human[g]) for g in reg.games}))


@dataclass
class Result:
    """An estimate from a suite's runs: which regression gave it, the value and its 95%
    bootstrap interval over seeds (%), the runs it rests on, and what is missing."""

    reg: Regression | None
    value: float | None = None
    low: float | None = None
    high: float | None = None
    runs: int = 0
    missing_games: list[str] = field(default_factory=list)
    missing_seeds: dict[str, list[int]] = field(default_factory=dict)
    #: of the runs, those another suite ran (suite.py's reuse)
    reused: int = 0

    @property
    def partial(self) -> bool:
        return bool(self.missing_games or self.missing_seeds)


def per_game(values: Sequence[float]) -> float:
    """A game's score over its seeds: the median (the five-games table's figure)."""
    return statistics.median(values)


def from_runs(
    plan: Plan,
    human: Mapping[str, tuple[float, float]],
    scores: Mapping[str, Mapping[int, float]],
    seeds: int,
    resamples: int = RESAMPLES,
    rng_seed: int = 0,
) -> Result:
    """The estimate from runs: ``scores`` game -> seed -> score (the mean of the run's last 100
    games), ``seeds`` the seeds 0..N-1 each game should have. Each game's score is the median
    over its seeds; the interval resamples the seeds of each game independently (a stratified
    bootstrap, rliable's for scores over tasks), percentile, 95%. The first of the plan's
    regressions whose games all have runs gives it; none: ``value`` None."""
    full = plan.regressions[0]
    have = {g for g in full.games if scores.get(g)}
    missing_games = [g for g in full.games if g not in have]
    reg = next((r for r in plan.regressions if set(r.games) <= have), None)
    if reg is None:
        return Result(None, missing_games=missing_games)
    values = {g: [scores[g][s] for s in sorted(scores[g])] for g in reg.games}
    point = estimate(reg, {g: normalised(per_game(v), *human[g]) for g, v in values.items()})
    rng = np.random.default_rng(rng_seed)
    resampled = {}
    for g, v in values.items():
        a = np.asarray(v, dtype=float)
        idx = rng.integers(0, len(a), size=(resamples, len(a)))
        resampled[g] = normalised(np.median(a[idx], axis=1), *human[g])
    boot = np.asarray(estimate(reg, resampled))
    low, high = np.percentile(boot, [2.5, 97.5])
    missing_seeds = {
        g: [s for s in range(seeds) if s not in scores[g]]
        for g in reg.games
        if any(s not in scores[g] for s in range(seeds))
    }
    return Result(
        reg, float(point), float(low), float(high), sum(len(v) for v in values.values()),
        missing_games, missing_seeds,
    )  # fmt: skip


def headline(res: Result, seeds: int) -> str:
    """The line ``--report-only`` prints: ``Atari-5 median estimate: X% (...)``, marked
    PARTIAL where games or seeds are missing, or why it cannot be estimated."""
    if res.reg is None:
        return (
            f"Atari-5 median estimate: cannot be estimated (no runs of "
            f"{', '.join(res.missing_games)})"
        )
    why = []
    if res.missing_games:
        why.append(f"no runs of {', '.join(res.missing_games)}: by {res.reg.name}")
    for g, missing in res.missing_seeds.items():
        why.append(f"{g} lacks seed{'s' if len(missing) > 1 else ''} "
                   f"{', '.join(str(s) for s in missing)}")  # fmt: skip
    games = len(res.reg.games)
    runs = f"{res.runs} runs" + (f", {res.reused} of them reused" if res.reused else "")
    if not res.partial:
        runs += f": {games} games x {seeds} seeds"
    mark = f" (PARTIAL: {'; '.join(why)})" if why else ""
    return (
        f"Atari-5 median estimate{mark}: {res.value:.1f}% (95% CI {res.low:.1f}-{res.high:.1f}% "
        f"over seeds; {runs}; the regression's own error about {res.reg.error:g}%)"
    )


# ---------------------------------------------------------------------- the fit
def read_upstream(path: Path) -> dict[str, dict[str, float]]:
    """Atari-5's ``dataset.csv`` (one row per algorithm and game, its ``Normalized`` score in
    percent with the repository's random and human scores): algorithm -> game -> score. A pair
    given twice keeps its last row, as the repository's ``Algorithm.game_scores`` does."""
    out: dict[str, dict[str, float]] = {}
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row.get("In57", "True") != "True":
                continue
            out.setdefault(row["Algorithm"], {})[row["Game"]] = float(row["Normalized"])
    return out


def extract(upstream: Path, games: Sequence[str], out: Path = DATA) -> int:
    """Write the fit's data from Atari-5's ``dataset.csv``: per algorithm its number of games,
    its 57-game median and its scores on ``games`` (human-normalised, %); the rows written."""
    algos = read_upstream(upstream)
    with open(out, "w", newline="", encoding="utf-8") as f:
        f.write(
            f"# from maitchison/Atari-5 at {SOURCE_COMMIT}, dataset.csv (MIT License, "
            "Copyright (c) 2022 Matthew Aitchison): the algorithms the paper fitted on, "
            "their 57-game median and scores, human-normalised in %, written by "
            "`python benchmarks/atari5.py extract`\n"
        )
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["algorithm", "games", "median_57", *games])
        for name in sorted(algos):
            s = algos[name]
            w.writerow(
                [name, len(s), repr(statistics.median(s.values()))]
                + [repr(s[g.lower()]) if g.lower() in s else "" for g in games]
            )
    return len(algos)


def read_data(path: Path = DATA) -> tuple[list[str], np.ndarray, dict[str, np.ndarray]]:
    """``extract``'s file: the algorithms (sorted, as the paper's pivot table orders them),
    their 57-game medians, and game -> scores (NaN where an algorithm has none)."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    names = [r["algorithm"] for r in rows]
    median = np.array([float(r["median_57"]) for r in rows])
    games = [k for k in rows[0] if k not in ("algorithm", "games", "median_57")]
    cols = {g: np.array([float(r[g]) if r[g] else np.nan for r in rows]) for g in games}
    return names, median, cols


def fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with no intercept (the paper's ``fit_intercept=False``)."""
    w, *_ = np.linalg.lstsq(x, y, rcond=None)
    return w


def cv_error(x: np.ndarray, y: np.ndarray, folds: int = 10, seed: int = 1982) -> float:
    """The paper's error of a subset: the mean over 10 folds of the mean absolute error of the
    log10 estimate, as a relative error in percent (times ln 10 times 100). The folds are
    scikit-learn's ``KFold(10, shuffle=True, random_state=1982)``: the rows shuffled by
    numpy's legacy generator, the first ``n % 10`` folds one row larger."""
    n = len(y)
    order = np.arange(n)
    np.random.RandomState(seed).shuffle(order)
    sizes = np.full(folds, n // folds)
    sizes[: n % folds] += 1
    errors, start = [], 0
    for size in sizes:
        test = order[start : start + size]
        start += size
        train = np.setdiff1d(np.arange(n), test)
        w = fit(x[train], y[train])
        errors.append(np.mean(np.abs(y[test] - x[test] @ w)))
    return float(np.mean(errors) * np.log(10) * 100)


def fit_subset(
    reg: Regression, names: list[str], median: np.ndarray, cols: Mapping[str, np.ndarray]
) -> tuple[np.ndarray, int, float]:
    """``reg``'s coefficients fitted on the algorithms with all its games, their number and the
    cross-validated error (%)."""
    x = np.column_stack([cols[g] for g in reg.games])
    keep = ~np.isnan(x).any(axis=1)
    x, y = transform(x[keep]), transform(median[keep])
    return fit(x, y), int(keep.sum()), cv_error(x, y)


# ---------------------------------------------------------------------- the command line
def _suites() -> dict:
    return tomllib.loads((HERE / "suites.toml").read_text())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser(
        "extract", help="write benchmarks/atari5_data.csv from Atari-5's dataset.csv"
    )
    e.add_argument("dataset", type=Path)
    f = sub.add_parser("fit", help="fit the regressions of suites.toml, beside their coefficients")
    f.add_argument("--data", type=Path, default=DATA)
    s = sub.add_parser("estimate", help="the estimate from raw scores, GAME=SCORE each")
    s.add_argument("scores", nargs="+", metavar="GAME=SCORE")
    args = p.parse_args(argv)
    data = _suites()
    regs = regressions(data)
    if args.cmd == "extract":
        games = list(dict.fromkeys(g for r in regs.values() for g in r.games))
        print(f"{extract(args.dataset, games)} algorithms -> {DATA}")
    elif args.cmd == "fit":
        if not args.data.is_file():
            sys.exit(f"no {args.data}: python benchmarks/atari5.py extract PATH/TO/dataset.csv")
        names, median, cols = read_data(args.data)
        for reg in regs.values():
            w, n, err = fit_subset(reg, names, median, cols)
            print(f"{reg.name}: {n} algorithms; cross-validated error {err:.2f}% "
                  f"(published {reg.error:g}%)")  # fmt: skip
            for g, mine, pub in zip(reg.games, w, reg.weights, strict=True):
                print(f"  {g:<14} fitted {mine:.16f}  published {pub:.16f}  "
                      f"difference {mine - pub:+.1e}")  # fmt: skip
    else:
        given = dict(a.split("=", 1) for a in args.scores)
        human = {g: tuple(t["human"]) for g, t in data["game"].items() if "human" in t}
        reg = regs["atari-5"]
        missing = [g for g in reg.games if g not in given]
        if missing:
            sys.exit(f"give a score for each of {', '.join(reg.games)} (missing {missing[0]})")
        scores = {g: float(v) for g, v in given.items()}
        for g in reg.games:
            print(f"{g:<14} {scores[g]:>12,.1f}  human-normalised "
                  f"{float(normalised(scores[g], *human[g])):8.1f}%")  # fmt: skip
        print(f"{reg.name} estimate of the 57-game median: {from_raw(reg, scores, human):.1f}%")


if __name__ == "__main__":
    main()
