"""The Ray parameter server on a real two-node cluster on this machine (loopback only: the test
command runs pytest in a network namespace that has nothing else)."""

import os

import pytest

ray = pytest.importorskip("ray")

import asyncrl  # noqa: E402
from asyncrl.algos.a3c import A3C  # noqa: E402
from asyncrl.backends import ray as ray_backend  # noqa: E402
from asyncrl.worker import Worker  # noqa: E402


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from ray.cluster_utils import Cluster

    # the fault-injection envs and their marker files must reach the Ray workers
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.environ["PYTHONPATH"] = repo + os.pathsep + os.environ.get("PYTHONPATH", "")
    os.environ["FAULT_DIR"] = str(tmp_path_factory.mktemp("faults"))
    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False},
    )
    c.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    c.wait_for_nodes()
    ray.init(address=c.address, include_dashboard=False)
    yield c
    ray.shutdown()
    c.shutdown()


def test_the_ray_backend_runs_the_shared_worker_loop():
    # the same Worker class and algorithm code as every backend, not a copy
    import inspect

    assert "Worker(" in inspect.getsource(ray_backend.WorkerActor.run)
    assert ray_backend.RayStore.__dict__.keys() >= {"pull", "push", "report", "stopping"}
    assert Worker.run.__module__ == "asyncrl.worker" and A3C.loss.__module__ == "asyncrl.algos.a3c"


@pytest.mark.slow
def test_a3c_on_a_two_node_cluster_reaches_475(cluster, run_dir):
    summary = asyncrl.train(
        backend="ray",
        address=cluster.address,
        workers=2,
        seed=0,
        steps=1_000_000,
        run_dir=str(run_dir),
        progress=False,
    )
    assert summary["solved"], summary
    assert summary["nodes"] == 2  # one worker actor on each node
    assert sum(summary["lags"].values()) > 0  # staleness recorded for every applied push
    assert (run_dir / "checkpoint.ckpt").is_file()


@pytest.mark.slow
def test_a_killed_worker_actor_is_restarted_and_the_run_finishes(cluster, run_dir):
    env = "tests.envs_for_tests:asyncrl-test/CartPole-kill-v0"
    summary = asyncrl.train(
        backend="ray",
        address=cluster.address,
        workers=2,
        seed=1,
        env=env,
        steps=1_000_000,
        run_dir=str(run_dir),
        progress=False,
    )
    assert summary["worker_restarts"] == 1
    assert summary["solved"], summary
