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


def test_the_server_records_staleness_and_drops_gradients_past_the_bound():
    # the server class itself, without Ray: same update rule as the shared-memory store
    import numpy as np

    from asyncrl.trainer import staleness_line

    cfg = asyncrl.Config(backend="ray", max_staleness=1, lr_schedule="constant", lr=0.1)
    params = np.ones(3, np.float32)
    server = ray_backend.ParameterServer(cfg, params, None, None, steps=0, episodes=0)
    grad = np.full(3, 0.5, np.float32)
    assert server.push(grad, version=0, n_steps=8, worker=0) == 8  # lag 0: applied
    after_one = server.params.clone()
    assert (after_one < 1).all()
    server.push(grad, version=0, n_steps=8, worker=1)  # lag 1: applied
    server.push(grad, version=0, n_steps=8, worker=0)  # lag 2 > 1: dropped
    server.push(None, version=2, n_steps=8, worker=1)  # non-finite: counted, nothing applied
    state = server.state()
    assert state["lags"] == {0: 1, 1: 1, 2: 1}
    assert state["dropped"] == 1 and state["nonfinite"] == 1
    assert state["version"] == 2 and state["steps"] == 32  # every step counts, applied or not
    assert "median 1" in staleness_line(state["lags"], state["dropped"])


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
@pytest.mark.parametrize("fault", ["kill", "raise"])
def test_a_failed_worker_actor_is_restarted_and_the_run_finishes(cluster, run_dir, fault):
    # kill: the actor's process is SIGKILLed; raise: its env raises in step
    env = f"tests.envs_for_tests:asyncrl-test/CartPole-{fault}-v0"
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


@pytest.mark.slow
def test_a_dead_parameter_server_stops_the_run_and_keeps_the_checkpoint(cluster, run_dir):
    import threading

    from asyncrl.checkpoint import load_checkpoint
    from asyncrl.trainer import TrainingError

    result: dict = {}

    def train() -> None:
        try:
            asyncrl.train(
                backend="ray",
                address=cluster.address,
                workers=2,
                seed=2,
                steps=10_000_000,
                target_return=1e9,
                checkpoint_every="20000",
                run_dir=str(run_dir),
                progress=False,
            )
        except TrainingError as e:
            result["error"] = e

    thread = threading.Thread(target=train)
    thread.start()
    ckpt = run_dir / "checkpoint.ckpt"
    while not ckpt.exists() and thread.is_alive():
        thread.join(0.1)
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]
    server = next(n for n in names if n.startswith(ray_backend.SERVER_NAME))
    ray.kill(ray.get_actor(server))
    thread.join(60)
    assert not thread.is_alive()
    assert "parameter server died" in str(result["error"])
    assert load_checkpoint(run_dir)["counters"][0].sum() >= 20_000  # intact, and loadable
    assert not (run_dir / "model.pt").exists()  # nothing written from the lost global state
