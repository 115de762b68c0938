"""What a Ray run adds to the log and to ``summary.json``: the staleness of the gradients the
server received and the servers' load (each one's CPU share, the megabytes per second in and
out), measured by the servers themselves (absent if a server died before the end)."""

from __future__ import annotations

from typing import Any

import numpy as np


def server_load(stats: list[dict[str, Any]]) -> dict[str, Any]:
    """The parameter server's load over the run, from each server's ``statistics()``: the share
    of one core each server's process used (CPU seconds over wall seconds) and the megabytes
    per second of arrays to and from all of them."""
    seconds = max(s["seconds"] for s in stats)
    return {
        "cpu_share": [round(s["cpu_seconds"] / max(s["seconds"], 1e-9), 4) for s in stats],
        "mb_in_per_s": round(sum(s["bytes_in"] for s in stats) / 1e6 / max(seconds, 1e-9), 2),
        "mb_out_per_s": round(sum(s["bytes_out"] for s in stats) / 1e6 / max(seconds, 1e-9), 2),
        "updates": stats[0]["version"],
    }


def server_line(load: dict[str, Any]) -> str:
    shares = ", ".join(f"{share:.0%}" for share in load["cpu_share"])
    return (
        f"parameter server: {shares} of a core; {load['mb_in_per_s']:,.1f} MB/s of gradients in, "
        f"{load['mb_out_per_s']:,.1f} MB/s of parameters out (means over the run)"
    )


def staleness_line(lags: dict[int, int], dropped: int) -> str:
    """The distribution of gradient staleness (versions behind) in one line."""
    if not lags:
        return "staleness: no gradient applied"
    values = np.repeat(np.array(list(lags), dtype=float), list(lags.values()))
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return (
        f"staleness (parameter versions behind) of {values.size:,} gradients: median {p50:g}, "
        f"p90 {p90:g}, p99 {p99:g}, max {values.max():g}; dropped {dropped:,}"
    )


__all__ = ["server_line", "server_load", "staleness_line"]
