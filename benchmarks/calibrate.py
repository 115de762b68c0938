"""How fast this machine is today, as one figure to quote beside a result measured on it.

Runs of the same code and seed on this project's 2-core (virtual, shared) machine have differed
by about 1.5x in frames/s between sessions, so two learning-in-minutes results (Pong in 30
minutes) can be compared only together with the machine's speed when each was taken. The
figure: the median training frames/s of three whole `asyncrl train` processes of the atari
preset's A3C on Pong (2 workers, 40,000 agent steps, no evaluations; about a minute in all).
`benchmarks/suite.py` measures it once per invocation and keeps it with each result.

    python benchmarks/calibrate.py
"""

from __future__ import annotations

import datetime
import shlex

from common import SPEED_ARGS, machine_speed


def main() -> None:
    speed = machine_speed()
    runs = ", ".join(f"{f:,.0f}" for f in speed["runs"])
    print(f"machine speed: {speed['frames_per_second']:,.0f} frames/s (runs: {runs})")
    day = datetime.date.today().isoformat()
    print(f"on {day}; each run: asyncrl train {shlex.join(SPEED_ARGS)}")


if __name__ == "__main__":
    main()
