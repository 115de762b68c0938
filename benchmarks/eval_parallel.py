"""The seconds of N whole evaluation episodes (a confirmation's or the kept model's re-scoring)
on one process against several: what the work after training costs, and what the cores it
frees buy (asyncrl.parallel).

The policy is a run's kept model (``--run-dir``), or a new network of the env's preset (an
early policy: ``--init-seed``). Each way plays the same starts (the re-scoring's held-out
seeds of ``--seed``); a deterministic policy gives the same returns either way, which is
checked.

    python benchmarks/eval_parallel.py --env PongNoFrameskip-v4 --episodes 100 --processes 1 2
    python benchmarks/eval_parallel.py --run-dir runs/pong --episodes 100 --processes 1 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass

os.environ.setdefault("OMP_NUM_THREADS", "1")


@dataclass(frozen=True)
class FreshPolicy:
    """A new network of the env's preset (picklable, for asyncrl.parallel)."""

    env: str
    init_seed: int

    def build(self):
        import torch

        from asyncrl.algos import make_algorithm
        from asyncrl.algos.base import model_spec_for
        from asyncrl.envs import probe_env
        from asyncrl.models import build_model
        from asyncrl.policy import Policy
        from asyncrl.presets import preset

        info = probe_env(self.env)
        cfg = preset(None, env=self.env).validate()
        algo = make_algorithm(cfg.algo, cfg.algo_settings(), info)
        spec = model_spec_for(cfg, algo.model_kind, info, cfg.reward_scale)
        torch.manual_seed(self.init_seed)
        return Policy(build_model(spec), cfg.algo, spec, self.env, {})


def _cpu_seconds() -> float:
    """This process's CPU seconds and its ended children's: on a machine whose cores other
    work shares, the figure its load does not inflate."""
    import resource

    own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--env", default="PongNoFrameskip-v4")
    p.add_argument("--run-dir", default=None, help="a run's kept model instead of a new network")
    p.add_argument("--init-seed", type=int, default=0, help="the new network's initialisation")
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--seed", type=int, default=0, help="the run seed whose held-out starts play")
    p.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    args = p.parse_args()

    import torch

    from asyncrl.envs import make_eval_vec_env
    from asyncrl.evaluation import held_out_seeds
    from asyncrl.parallel import SavedPolicy, play_parallel
    from asyncrl.policy import play_episodes

    torch.set_num_threads(1)
    source = SavedPolicy(args.run_dir) if args.run_dir else FreshPolicy(args.env, args.init_seed)
    seeds = held_out_seeds(args.seed, args.episodes)
    seen = {}
    for n in args.processes:
        t0, cpu0 = time.perf_counter(), _cpu_seconds()
        if n == 1:  # as the re-scoring plays on one process: a vector env in this one
            policy = source.build()
            envs = make_eval_vec_env(policy.env_id, len(seeds), seeds[0], policy.env_kwargs)
            returns = play_episodes(policy, envs, seeds)
            envs.close()
        else:
            returns = play_parallel(source, seeds, n)
        seconds, cpu = time.perf_counter() - t0, _cpu_seconds() - cpu0
        seen[n] = returns
        print(
            f"{n} process(es): {len(returns)} episodes in {seconds:.1f} s ({cpu:.1f} CPU s), "
            f"mean return {statistics.fmean(returns):.2f} (min {min(returns):g}, "
            f"max {max(returns):g})",
            flush=True,
        )
    first = next(iter(seen.values()))
    print("the same returns each way:", all(r == first for r in seen.values()))
    print(f"load average: {os.getloadavg()}, cores: {len(os.sched_getaffinity(0))}")


if __name__ == "__main__":
    main()
