"""The recurrent core's learning pass: the unroll of APPO's Atari minibatch (2 games x 129
rows, 256 features, 256 cells), forward and backward, one thread, through torch's RNN kernel
(what the LSTM and GRU cores run) against the cell stepped row by row from Python (the
default of a core that names only its step). Median of --repeats timings each, interleaved.

    python benchmarks/recurrent.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from asyncrl.models import CORES, Core


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rows", type=int, default=129)
    p.add_argument("--envs", type=int, default=2)
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--cells", type=int, default=256)
    p.add_argument("--repeats", type=int, default=9)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    for name in ("lstm", "gru"):
        core = CORES[name](args.features, args.cells)
        x = torch.randn(args.rows, args.envs, args.features, requires_grad=True)
        start = torch.zeros(core.initial_state(args.envs).shape)
        first = torch.zeros(args.rows, args.envs, dtype=torch.bool)
        ways = {"kernel": type(core).unroll, "stepped": Core.unroll}
        times: dict[str, list[float]] = {w: [] for w in ways}
        for _ in range(args.repeats):
            for way, unroll in ways.items():
                t0 = time.perf_counter()
                out, _ = unroll(core, x, start, first)
                out.sum().backward()
                times[way].append(time.perf_counter() - t0)
        k, s = (statistics.median(times[w]) * 1e3 for w in ways)
        print(f"{name}: kernel {k:.1f} ms, stepped {s:.1f} ms (forward and backward; {s / k:.1f}x)")


if __name__ == "__main__":
    main()
