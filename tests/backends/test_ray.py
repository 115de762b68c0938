"""The Ray parameter server on a real two-node cluster on this machine (loopback only: the test
command runs pytest in a network namespace that has nothing else)."""

import os
import secrets
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch

ray = pytest.importorskip("ray")

# one cluster for the module (the fixture below): under scripts/test's pytest-xdist every test
# here runs in the same process
pytestmark = pytest.mark.xdist_group("ray")


import asyncrl  # noqa: E402
from asyncrl.algos.a3c import A3C  # noqa: E402
from asyncrl.backends import ray as ray_backend  # noqa: E402
from asyncrl.backends.ray import store as ray_store  # noqa: E402
from asyncrl.checkpoint import load_checkpoint  # noqa: E402
from asyncrl.messages import Finished  # noqa: E402
from asyncrl.worker import Worker  # noqa: E402
from tests.oracles import assert_the_kept_model_is_the_rows, spec_of  # noqa: E402


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from ray.cluster_utils import Cluster

    if any(not name.startswith("lo") for _, name in socket.if_nameindex()):
        # Ray may bind to every interface it finds; here it may only ever talk over loopback.
        why = "Ray clusters start only where loopback is the sole interface: use scripts/test"
        if os.environ.get("ASYNCRL_REQUIRE_RAY_TESTS") == "1":  # CI: never skip them silently
            pytest.fail(why)
        pytest.skip(why)

    # the fault-injection envs and their marker files must reach the Ray workers
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.environ["PYTHONPATH"] = repo + os.pathsep + os.environ.get("PYTHONPATH", "")
    os.environ["FAULT_DIR"] = str(tmp_path_factory.mktemp("faults"))
    # token authentication is on (conftest.py): every node and the driver share a secret
    assert os.environ["RAY_AUTH_MODE"] == "token"
    c = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "node_ip_address": "127.0.0.1",
            "include_dashboard": False,
            # a killed node is declared dead in about a second, not Ray's default 15 s
            "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 2},
        },
    )
    c.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    c.wait_for_nodes()
    ray.init(address=c.address, include_dashboard=False)
    yield c
    ray.shutdown()
    c.shutdown()


def test_the_ray_backend_runs_the_shared_worker_loop():
    # the same Worker class and algorithm code as every backend, not a copy; that RayStore
    # offers every call the loop makes is the Store protocol's job, checked by mypy
    import inspect

    assert "Worker(" in inspect.getsource(ray_backend.WorkerActor.run)
    assert Worker.run.__module__ == "asyncrl.worker" and A3C.loss.__module__ == "asyncrl.algos.a3c"


def test_the_server_records_staleness_and_drops_gradients_past_the_bound():
    # the server class itself, without Ray: same update rule as the shared-memory store
    from asyncrl.messages import GlobalSnapshot

    cfg = asyncrl.Config(backend="ray", max_staleness=1, lr_schedule="constant", lr=0.1)
    params = np.ones(3, np.float32)
    snap = GlobalSnapshot(
        params, {"square_avg": np.zeros(3, np.float32)}, None, 0, np.zeros((3, 2), np.int64)
    )
    server = ray_backend.ParameterServer(cfg, snap)
    grad = np.full(3, 0.5, np.float32)
    assert server.push(grad, version=0, n_steps=8, worker=0) == 8  # lag 0: applied
    after_one = server.state.params.clone()
    assert (after_one < 1).all()
    server.push(grad, version=0, n_steps=8, worker=1)  # lag 1: applied
    server.push(grad, version=0, n_steps=8, worker=0)  # lag 2 > 1: dropped
    server.push(None, version=2, n_steps=8, worker=1)  # non-finite: counted, nothing applied
    stats = server.statistics()
    assert stats["lags"] == {0: 1, 1: 1, 2: 1}
    assert stats["dropped"] == 1 and server.snapshot().counters[2].sum() == 1
    assert stats["version"] == 2 and server.steps == 32  # every step counts, applied or not
    assert "median 1" in ray_backend.staleness_line(stats["lags"], stats["dropped"])
    stream, steps, heard = server.drain()
    assert steps == 32 and stream[-1].stats == {"train/policy_lag": (3.0, 3)}
    # who called since the last drain: what the run's watch for hung workers reads
    assert heard == {0, 1}
    server.push(grad, version=2, n_steps=8, worker=1)
    assert server.drain()[2] == {1} and server.drain()[2] == set()


def test_the_server_anneals_over_the_clock_the_run_sends_it():
    # --lr-anneal-over time: the main process sends the run's elapsed time (RayRun.clock), and
    # the server runs it on by its own clock between sends
    import time

    from asyncrl.messages import GlobalSnapshot

    cfg = asyncrl.Config(backend="ray", lr=0.1, time_limit="10s", lr_anneal_over="time")
    snap = GlobalSnapshot(
        np.ones(3, np.float32), {"square_avg": np.zeros(3, np.float32)}, None, 0,
        np.zeros((3, 1), np.int64),
    )  # fmt: skip
    server = ray_backend.ParameterServer(cfg, snap)
    server.set_clock(9.0)
    assert 9.0 <= server.elapsed() < 9.5
    server.clock_at = (9.0, time.monotonic() - 1.0)  # sent a second ago: 10 s, the limit
    server.push(np.ones(3, np.float32), version=0, n_steps=4, worker=0)
    assert np.array_equal(server.state.params.numpy(), np.ones(3, np.float32))  # rate 0
    server.set_clock(5.0)
    server.push(np.ones(3, np.float32), version=1, n_steps=4, worker=0)
    assert (server.state.params.numpy() < 1).all()


@pytest.mark.slow
def test_a3c_on_a_two_node_cluster_reaches_475(cluster, run_dir, seed):
    """A3C over the parameter server confirms CartPole's 475. Ray's timing makes no run
    reproducible; measured (2026-11-24) on seeds 0-9 (ASYNCRL_TEST_SEED=S). Two CI runs on seed
    0 froze on one action under a median lag of 27 with RMSProp started at 0, which left the
    policy near-deterministic within 30k steps on every seed measured; Ray now starts it at 1
    (asyncrl.optim.rms_init_for, docs/ray.md#rmsprop-from-1-on-ray)."""
    summary = asyncrl.train(
        backend="ray",
        address=cluster.address,
        workers=2,
        seed=seed,
        # generous: Ray's timing is not reproducible, and one CI run with --ray-pipeline 1 (the
        # default now; twice the staleness of 0) collapsed from 212 and was at 152 after 1M steps
        steps=2_000_000,
        run_dir=str(run_dir),
        progress=False,
    )
    assert summary["solved"], summary
    assert summary["nodes"] == 2  # one worker actor on each node
    assert summary["rms_init"] == 1.0  # Ray's start (asyncrl.optim.rms_init_for)
    assert sum(summary["lags"].values()) > 0  # staleness recorded for every applied push
    load = summary["server"]  # --ray-batch 8: eight gradients in for each parameters out
    assert 0 < load["cpu_share"][0] < 1 and load["mb_in_per_s"] > 4 * load["mb_out_per_s"] > 0
    assert load["updates"] == sum(summary["lags"].values())  # dropped none
    assert (run_dir / "checkpoint.ckpt").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["kill", "raise", "hang"])
def test_a_failed_worker_actor_is_restarted_and_the_run_finishes(
    cluster, run_dir, fault, seed, capfd
):
    """kill: the actor's process is SIGKILLed; raise: its env raises in step; hang: its env
    sleeps for an hour in step, and its calls stop reaching the server. Each way the actor is
    replaced once (at its env's step 300, before any learning) and the run still learns (a run
    to 475 is test_a3c_on_a_two_node_cluster_reaches_475's). To 475, kill and raise were
    measured (2026-11-24) on seeds 1-5 too, hang (2026-11-26) on seeds 1-5
    (ASYNCRL_TEST_SEED=S)."""
    env = f"tests.envs_for_tests:asyncrl-test/CartPole-{fault}-v0"
    summary = asyncrl.train(
        backend="ray",
        address=cluster.address,
        # a hung worker is found after --worker-timeout; with a second one the run could reach
        # its target first (as on the processes backend): alone, it gets nowhere until replaced
        workers=1 if fault == "hang" else 2,
        seed=seed + 1,
        env=env,
        # as generous as the two-node test's: a solve needs an evaluation confirmed over 100
        # episodes, and one CI run of "kill" was at a best of 281 (not confirmed) by 1M
        steps=2_000_000,
        # the bar this test asks of learning (below) is its target: the restart is under test,
        # and the Ray learning tests above hold the stop rule at 195 and 475
        target_return=100.0,
        worker_timeout=5.0,
        run_dir=str(run_dir),
        progress=False,
    )
    err = capfd.readouterr().err
    s = summary
    assert s["worker_restarts"] == 1, err
    # the fields that say why first (pytest cuts a long dict)
    why = ({k: s.get(k) for k in ("ended", "total_steps", "best_eval_return")}, s)
    # it ends on its own rule: confirmed, or its whole budget counted
    assert s["solved"] or (s["ended"] == "budget" and s["total_steps"] >= 2_000_000), why
    # and the restarted run learned (random play scores about 22). Alone on the machine each
    # fault confirms 195 in 15-20 s; under CI's load, where the same two cores run the rest of
    # the suite and the gradients go tens of versions stale, one run of "raise" (2026-12-05)
    # failed to confirm 195, with a best evaluation of 128.8, as a run of the lost-node test
    # below collapsed at 248: 100 is what this test asks of learning, the Ray learning tests
    # above hold the stop rule itself
    assert s["solved"] or s["best_eval_return"] >= 100, why
    if fault == "hang":
        assert "worker 0" in err and "sent no update for 5 s (hung)" in err, err


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
    assert load_checkpoint(run_dir)["glob"].steps >= 20_000  # intact, and loadable
    assert not (run_dir / "model.pt").exists()  # nothing written from the lost global state


class _Ref:
    def __init__(self, reply, ready):
        self.reply, self.ready = reply, ready


class _FakeRay:
    """Just enough of ray.get to drive RayStore without a cluster."""

    def __init__(self):
        self.blocked_on: list = []

    def get(self, ref):
        if isinstance(ref, list):
            return [self.get(r) for r in ref]
        if not ref.ready:
            self.blocked_on.append(ref)  # a real ray.get would wait here
        return ref.reply


class _FakeServer:
    """Replies (version, params, target, steps, stop, stats) as the parameter server does; the
    newest call is still in flight, the older ones answered in order."""

    def __init__(self, stop_from_call=None):
        self.calls: list = []
        self.args: list = []
        self.steps = 0
        self.stop_from_call = stop_from_call
        self.push_pull = self

    def remote(self, grads, meta, reports, worker, want_target, obs_stats=None):
        pushes = [
            (None if grads is None else grads[i].copy(), v, n) for i, (_, v, n) in enumerate(meta)
        ]
        self.args.append((pushes, [e for msg in reports for e in msg.episodes]))
        for ref in self.calls:
            ref.ready = True
        v = len(self.calls)
        self.steps += sum(n for _, _, n in pushes)
        stop = self.stop_from_call is not None and v >= self.stop_from_call
        params = np.full(3, float(v), np.float32)
        ref = _Ref((v, params, None, self.steps, stop, None), ready=False)
        self.calls.append(ref)
        return ref


@pytest.mark.parametrize("pipeline", [0, 1])
def test_a_pipelined_worker_does_not_wait_for_the_push_it_just_sent(monkeypatch, pipeline):
    fake = _FakeRay()
    monkeypatch.setattr(ray_store, "ray", fake)
    server = _FakeServer()
    store = ray_backend.RayStore([server], 0, pipeline=pipeline, batch=1)
    local = torch.zeros(3)
    assert store.pull(local, None) == 0  # the first pull always waits: nothing to work with
    fake.blocked_on.clear()
    for k in range(1, 4):
        store.push(torch.ones(3), 8, store.version)
        version = store.pull(local, None)
        if pipeline:
            # the reply to push k is not waited for: the worker goes on with push k-1's reply
            assert not fake.blocked_on and version == k - 1
        else:
            # every pull waits for the reply to the push before it
            assert fake.blocked_on[-1] is server.calls[k] and version == k
        assert float(local[0]) == version and len(store.inflight) == pipeline
    store.snapshot(None)  # the last call is delivered before the loop ends
    assert not store.inflight


@pytest.mark.parametrize("pipeline", [0, 1])
def test_batched_pushes_send_every_gradient_and_episode_once_and_count_every_step(
    monkeypatch, pipeline
):
    monkeypatch.setattr(ray_store, "ray", _FakeRay())
    server = _FakeServer()
    store = ray_backend.RayStore([server], 0, pipeline=pipeline, batch=3)
    local = torch.zeros(3)
    store.pull(local, None)
    grad = torch.zeros(3)
    for k in range(7):
        grad.fill_(k)  # the worker reuses its gradient buffer
        step = store.push(grad, 8, store.version)
        store.report([Finished(float(k), 8)], {}, step)
        store.pull(local, None)
        # the worker's view of the global step: its own steps, whether sent or not
        assert store.global_step() == step == 8 * (k + 1)
    store.snapshot(None)
    sent = [p for pushes, _ in server.args for p in pushes]
    assert len(server.calls) == 1 + 3  # the first pull, two full batches, the rest at the end
    assert [float(g[0]) for g, _, _ in sent] == list(range(7))  # each once, copied when pushed
    # a rollout's episodes travel with its gradient, not a batch later
    assert [[e.ret for e in eps] for _, eps in server.args] == [[], [0, 1, 2], [3, 4, 5], [6]]
    assert server.steps == 7 * 8


def test_a_pipelined_worker_sees_the_stop_flag(monkeypatch):
    monkeypatch.setattr(ray_store, "ray", _FakeRay())
    server = _FakeServer(stop_from_call=2)
    store = ray_backend.RayStore([server], 0, pipeline=1, batch=1)
    local = torch.zeros(3)
    store.pull(local, None)
    seen = []
    for _ in range(4):
        store.push(torch.ones(3), 8, store.version)
        store.pull(local, None)
        seen.append(store.stopping())
    # call 2 says stop; its reply is taken at the pull that sends call 3
    assert seen == [False, False, True, True]


@pytest.mark.slow
def test_appo_with_vtrace_learns_on_the_cluster(cluster, run_dir, seed):
    """APPO's minibatch gradients go through the parameter server like A3C's, with the
    server's parameters pulled between them (as fresh as --ray-batch lets them be), and
    V-trace corrects for the lag: it learns CartPole, to a confirmed 195 (CartPole-v0's
    threshold: on the slower CI machine a run to 475 took from 49 to 145 s). To 475 it was
    measured (2026-11-24) on seeds 1-5 too (ASYNCRL_TEST_SEED=S), with APPO's call per
    minibatch; with A3C's batch of 8 seed 5 collapsed to a fixed action
    (docs/ray.md#appo-on-ray)."""
    summary = asyncrl.train(
        backend="ray",
        address=cluster.address,
        workers=2,
        seed=seed,
        algo="appo",
        vtrace=True,
        steps=2_000_000,
        target_return=195.0,
        run_dir=str(run_dir),
        progress=False,
    )
    assert summary["solved"], summary
    assert summary["best_eval_return"] >= 195
    # every minibatch's gradient reached the server: epochs x minibatches per rollout
    assert summary["server"]["updates"] > 4 * summary["total_steps"] / (8 * 16)


@pytest.mark.slow
def test_the_recurrent_agent_runs_on_the_cluster(cluster, run_dir):
    summary = asyncrl.train(
        backend="ray",
        address=cluster.address,
        workers=2,
        core="lstm",
        steps=20_000,
        target_return=1e9,
        run_dir=str(run_dir),
        progress=False,
    )
    assert summary["total_steps"] >= 20_000 and summary["episodes"] > 0
    assert asyncrl.load(run_dir).spec.core == "lstm"


def test_a_dict_observation_trains_on_the_cluster_and_its_policy_acts_on_dicts(cluster, run_dir):
    # the packed rows travel as any Box observation's: the workers' envs pack them themselves
    import gymnasium as gym

    import tests.envs_for_tests  # noqa: F401 (registers the env here too)

    env = "tests.envs_for_tests:asyncrl-test/DictCue-v0"
    summary = asyncrl.train(
        env=env, backend="ray", address=cluster.address, workers=2, envs_per_worker=4,
        steps=2_000, eval_every=1_000, eval_episodes=2, run_dir=str(run_dir), progress=False,
    )  # fmt: skip
    assert summary["total_steps"] >= 2_000 and summary["evaluations"] >= 1, summary
    policy = asyncrl.load(run_dir)
    obs, _ = gym.make("asyncrl-test/DictCue-v0").reset(seed=0)
    assert policy.spec.obs_layout is not None and policy.act(obs) in range(3)


def test_masked_multi_discrete_actions_run_on_the_cluster(cluster, run_dir):
    """The action space (its parts and its masks) travels to the worker actors in the env's
    probe and the model's spec; each actor wraps its envs and keeps the masks in its rollouts.
    The env raises on a masked action, in training and in evaluation."""
    env = "tests.envs_for_tests:asyncrl-test/PickMulti-v0"
    summary = asyncrl.train(
        env=env, algo="appo", core="lstm", prev_action_reward=True, backend="ray",
        address=cluster.address, workers=2, steps=3_000, target_return=1e9,
        run_dir=str(run_dir), progress=False,
    )  # fmt: skip
    assert summary["total_steps"] >= 3_000 and summary["episodes"] > 0
    policy = asyncrl.load(run_dir)
    assert policy.spec.action.masked and policy.spec.action.nvec == (4, 4)
    assert len(asyncrl.evaluate(run_dir, episodes=5)) == 5


def test_an_encoder_of_the_users_own_trains_on_the_cluster_by_its_import_path(cluster, run_dir):
    # each actor imports tests.user_encoders itself (the cluster's PYTHONPATH holds the repo):
    # the class never travels, its path does
    import gymnasium as gym

    import tests.envs_for_tests  # noqa: F401 (registers the env here too)

    summary = asyncrl.train(
        env="tests.envs_for_tests:asyncrl-test/DictCue-v0", encoder="tests.user_encoders:Seen",
        backend="ray", address=cluster.address, workers=2, envs_per_worker=4, steps=2_000,
        eval_every=0, stop_on="train", run_dir=str(run_dir), progress=False,
    )  # fmt: skip
    assert summary["total_steps"] >= 2_000, summary
    policy = asyncrl.load(run_dir)
    assert policy.spec.encoder_class == "tests.user_encoders:Seen"
    obs, _ = gym.make("asyncrl-test/DictCue-v0").reset(seed=0)
    assert policy.act(obs) in range(3)


def test_the_parameter_server_lives_on_the_driver_node(cluster, run_dir):
    import threading

    result = {}

    def train():
        result["summary"] = asyncrl.train(
            backend="ray",
            address=cluster.address,
            workers=2,
            steps=60_000,
            target_return=1e9,
            run_dir=str(run_dir),
            progress=False,
        )

    thread = threading.Thread(target=train)
    thread.start()
    here = ray.get_runtime_context().get_node_id()
    server = None
    while thread.is_alive() and server is None:
        names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]
        server = next((n for n in names if n.startswith(ray_backend.SERVER_NAME)), None)
        thread.join(0.05)
    assert server is not None
    assert ray.get(ray.get_actor(server).node.remote()) == here
    thread.join(120)
    assert result["summary"]["total_steps"] >= 60_000


def _train_in_thread(result: dict, **kwargs):
    import threading

    def train():
        result["summary"] = asyncrl.train(backend="ray", progress=False, **kwargs)

    thread = threading.Thread(target=train)
    thread.start()
    return thread


def _wait_for_episodes(run_dir, thread, n: int) -> None:
    """Until the run has reported ``n`` episodes: its workers are stepping."""
    episodes = run_dir / "episodes.csv"
    while thread.is_alive():
        if episodes.exists() and len(episodes.read_text().splitlines()) > n:
            return
        thread.join(0.1)


@pytest.mark.slow
def test_a_lost_node_costs_its_worker_and_the_run_finishes_without_it(cluster, run_dir, seed):
    """Three workers, one on a node that is then killed (no graceful shutdown): its worker
    cannot be restarted anywhere (the other two nodes' CPUs are taken), and the run must
    neither hang waiting for it nor lose the global state, and it learns on the two left.
    Measured (2026-11-24) on seeds 1-5 too (ASYNCRL_TEST_SEED=S)."""
    extra = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    cluster.wait_for_nodes()
    result: dict = {}
    thread = _train_in_thread(
        result,
        address=cluster.address,
        workers=3,
        seed=seed + 3,
        steps=3_000_000,
        run_dir=str(run_dir),
    )
    _wait_for_episodes(run_dir, thread, 30)
    cluster.remove_node(extra, allow_graceful=False)
    thread.join(600)
    assert not thread.is_alive()
    s = result["summary"]
    # it ends on its own rule: confirmed, or its whole budget counted
    assert s["solved"] or (s["ended"] == "budget" and s["total_steps"] >= 3_000_000)
    # and it learned on the two workers left (the node went at episode 30, near a return of
    # 20). Alone on the machine it confirms 475 in about 10 s; under CI's load (the rest of
    # the suite on the same two cores) its gradients ran 27 versions stale (median) and one
    # run's policy, at 248, collapsed onto one action for a minute and ended at its budget
    # with a best evaluation of 302 (2026-12-02), so 200 is what this test asks of learning;
    # the Ray learning tests above hold the stop rule itself. The fields that say why first
    # (pytest cuts a long dict)
    why = ("ended", "total_steps", "best_eval_return", "workers_lost", "worker_restarts")
    assert s["solved"] or s["best_eval_return"] >= 200, ({k: s.get(k) for k in why}, s)
    assert s["workers_lost"] == 1 and s["worker_restarts"] == 1
    assert s["nodes"] == 3 and s["nodes_lost"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("node_joins", [True, False], ids=["a-node-joins", "none-joins"])
def test_a_worker_waiting_for_a_cpu_holds_up_neither_the_run_nor_its_end(
    cluster, run_dir, node_joins
):
    # three workers on a cluster of two CPUs: the third waits, the run goes on with two; a
    # node that joins mid-run gets it (2026-11-27, the slower of the CI machines: its worker's
    # first episode came 8 s after the node was added, 6 s into a run of 18k steps a second,
    # so 600k steps leave it about 20 s). With none joining, the run still ends at its budget
    # (it once waited for that worker for ever: a lost node's worker, re-placed with no CPU
    # free, kept a run that did not solve going)
    steps = 600_000 if node_joins else 60_000
    result: dict = {}
    thread = _train_in_thread(
        result,
        address=cluster.address,
        workers=3,
        seed=4,
        steps=steps,
        target_return=1e9,
        run_dir=str(run_dir),
    )
    _wait_for_episodes(run_dir, thread, 30)
    joined = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1") if node_joins else None
    try:
        thread.join(600)
        assert not thread.is_alive()
        s = result["summary"]
        assert s["total_steps"] >= steps and s["ended"] == "budget"
        # the waiting worker ran on the node that joined, or never ran
        assert s["nodes"] == (3 if node_joins else 2) and s["workers_lost"] == 0
    finally:
        if joined is not None:
            cluster.remove_node(joined)
            cluster.wait_for_nodes()  # gone before the next test places its workers


def test_the_cli_starts_a_local_cluster_trains_and_ends_it(cluster, tmp_path):
    """``asyncrl train --backend ray`` without ``--address``: Ray starts (while PyTorch is
    imported), the run trains, and the command ends the cluster it started."""
    run = tmp_path / "run"
    args = ["train", "--backend", "ray", "--workers", "1", "--steps", "4000", "--run-dir", str(run)]
    r = subprocess.run(
        [sys.executable, "-m", "asyncrl.cli", *args, "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RAY_ADDRESS": ""},
    )
    assert r.returncode == 0, r.stderr
    import json

    summary = json.loads((run / "summary.json").read_text())
    assert summary["total_steps"] >= 4000 and summary["nodes"] == 1
    assert "not solved: step budget spent" in r.stdout


def test_the_cluster_refuses_a_client_without_its_token(cluster):
    code = f"import ray; ray.init(address={cluster.address!r}); print('connected')"

    def client(token: str) -> subprocess.CompletedProcess:
        # two tries to reach the GCS, not Ray's 20 a second apart: a refused client gives up
        # in about 3 s, and the right token shows that two are enough to connect
        env = {**os.environ, "RAY_AUTH_TOKEN": token, "RAY_NUM_REDIS_GET_RETRIES": "2"}
        return subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
        )

    refused = client(secrets.token_hex(32))  # a wrong secret
    assert refused.returncode != 0 and "connected" not in refused.stdout
    accepted = client(os.environ["RAY_AUTH_TOKEN"])
    assert accepted.returncode == 0 and "connected" in accepted.stdout, accepted.stderr


class _Direct:
    """A ParameterServer called in this process, every reply ready at once."""

    def __init__(self, server):
        self.push_pull = self
        self.server = server

    def remote(self, *args):
        return _Ref(self.server.push_pull(*args), ready=True)


def test_observation_statistics_reach_the_server_and_every_worker(monkeypatch):
    # --normalize-obs over Ray: each worker normalises with the server's statistics plus its
    # own unsent batches, and the server ends with the statistics of every observation
    from asyncrl.envs import probe_env
    from asyncrl.state import GlobalState

    monkeypatch.setattr(ray_store, "ray", _FakeRay())
    cfg = asyncrl.Config(env="Pendulum-v1", backend="ray", normalize_obs=True)
    info = probe_env(cfg.env)
    state = GlobalState.create(cfg, spec_of(A3C(cfg, info)), 1, False)
    server = ray_backend.ParameterServer(cfg, state.snapshot())
    stores = [
        ray_backend.RayStore(
            [_Direct(server)], w, pipeline=0, batch=2, obs_stats=server.obs_stats()
        )
        for w in range(2)
    ]
    local = torch.zeros(state.params.numel())
    for store in stores:
        store.pull(local, None)
    rng = np.random.default_rng(0)
    seen: list = []
    for k in range(5):
        for store in stores:
            obs = rng.normal(k, 1 + k, size=(7, 3)).astype(np.float32)
            seen.append(obs)
            store.observe(obs)
            store.push(torch.zeros_like(local), 7, store.version)
            store.pull(local, None)
            # acting sees its own batches at once, sent or not
            assert float(store.obs_stats()[0]) >= 7 * (k + 1)
    for store in stores:
        store.snapshot(None)
    everything = np.concatenate(seen)
    stats = server.state.obs_stats
    assert int(stats[0]) == len(everything)
    np.testing.assert_allclose(stats[1:4], everything.mean(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(stats[4:], everything.var(0), rtol=1e-4)


def _three_shards(cfg):
    """A fresh global state for Pendulum's A3C model, its bounds cut in 3, and 3 shard servers
    (in this process) holding it."""
    from asyncrl.envs import probe_env
    from asyncrl.state import GlobalState

    info = probe_env(cfg.env)
    snap = GlobalState.create(cfg, spec_of(A3C(cfg, info)), 1, False, False).snapshot()
    bounds = ray_backend.shard_bounds(snap.params.size, 3)
    shards = [
        ray_backend.ParameterServer(cfg, ray_backend.shard_snapshot(snap, a, b, k == 0))
        for k, (a, b) in enumerate(bounds)
    ]
    return snap, bounds, shards


@pytest.mark.parametrize("optimizer", ["rmsprop", "adam"])
def test_sharded_servers_apply_exactly_the_updates_of_one_server(monkeypatch, optimizer):
    from asyncrl.backends.ray.shards import SHARD_ALIGN

    # --ray-servers 3 against one server, on the same sequence of gradients, through RayStore
    # (which slices each gradient and puts the parameters back together): bit-for-bit equal
    monkeypatch.setattr(ray_store, "ray", _FakeRay())
    cfg = asyncrl.Config(env="Pendulum-v1", backend="ray", optimizer=optimizer, steps=1000)
    snap, bounds, shards = _three_shards(cfg)
    n = snap.params.size
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    # whole vectors of the optimizer kernels' width: Adam's fused kernel rounds a tail otherwise
    assert all(a % SHARD_ALIGN == 0 for a, _ in bounds)
    one = ray_backend.ParameterServer(cfg, snap)
    stores = [
        ray_backend.RayStore([_Direct(one)], 0, pipeline=0, batch=2),
        ray_backend.RayStore([_Direct(s) for s in shards], 0, pipeline=0, batch=2, bounds=bounds),
    ]
    locals_ = [torch.zeros(n), torch.zeros(n)]
    rng = np.random.default_rng(0)
    for store, local in zip(stores, locals_, strict=True):
        store.pull(local, None)
    for _ in range(7):
        grad = torch.from_numpy(rng.standard_normal(n).astype(np.float32))
        for store, local in zip(stores, locals_, strict=True):
            store.push(grad, 10, store.version)
            store.pull(local, None)
    for store in stores:
        store.snapshot(None)
    assert torch.equal(locals_[0], locals_[1])  # what the workers got back
    joined = ray_backend.join_snapshots([s.snapshot() for s in shards])
    whole = one.snapshot()
    assert np.array_equal(joined.params, whole.params) and not np.array_equal(
        whole.params, snap.params
    )
    assert joined.optimizer.keys() == whole.optimizer.keys()
    for k in whole.optimizer:
        assert np.array_equal(joined.optimizer[k], whole.optimizer[k]), k
    assert all(s.steps == one.steps == 70 for s in shards)


@pytest.mark.slow
def test_a_sharded_server_trains_on_the_cluster_checkpoints_and_resumes(cluster, run_dir):
    from asyncrl.checkpoint import load_checkpoint

    first = asyncrl.train(
        backend="ray",
        address=cluster.address,
        workers=2,
        ray_servers=2,
        ray_grad_dtype="bfloat16",
        steps=30_000,
        target_return=1e9,
        run_dir=str(run_dir),
        progress=False,
    )
    assert first["total_steps"] >= 30_000 and first["episodes"] > 0
    load = first["server"]  # the figures of both servers
    assert len(load["cpu_share"]) == 2 and all(0 < share < 1 for share in load["cpu_share"])
    assert load["mb_in_per_s"] > 0 and load["mb_out_per_s"] > 0
    saved = load_checkpoint(run_dir)["glob"]  # one whole state, put together from the servers
    model = asyncrl.load(run_dir, "last").model
    assert saved.params.size == sum(p.numel() for p in model.parameters())
    flat = torch.cat([p.detach().flatten() for p in model.parameters()]).numpy()
    assert np.array_equal(saved.params, flat)
    resumed = asyncrl.train(resume=run_dir, steps=60_000)
    assert resumed["resumed"] and resumed["total_steps"] >= 60_000


@pytest.mark.slow
def test_a_short_pong_run_over_ray_checkpoints_and_resumes(cluster, run_dir):
    # the Atari net (0.68M parameters, 2.7 MB a gradient) through the parameter server
    pytest.importorskip("ale_py")
    common = dict(
        env="PongNoFrameskip-v4",
        backend="ray",
        address=cluster.address,
        workers=2,
        envs_per_worker=4,
        progress=False,
        # no evaluations: ten whole Pong games of the untrained policy would take most of the
        # test's time (evaluations on Ray: test_evaluations_read_the_servers_parameters...)
        eval_every=0,
        stop_on="train",
        rescore_episodes=0,
    )
    summary = asyncrl.train(**common, steps=1_500, run_dir=str(run_dir))
    assert summary["total_steps"] >= 1_500 and summary["total_frames"] == 4 * summary["total_steps"]
    assert sum(summary["lags"].values()) > 0  # gradients applied by the server
    resumed = asyncrl.train(resume=run_dir, steps=3_000)
    assert resumed["resumed"] and resumed["total_steps"] >= 3_000
    assert asyncrl.load(run_dir).spec.encoder == "a3c"


@pytest.mark.slow
def test_observation_statistics_on_the_cluster_reach_the_saved_model(cluster, run_dir):
    summary = asyncrl.train(
        env="Pendulum-v1",
        backend="ray",
        address=cluster.address,
        workers=2,
        normalize_obs=True,
        steps=20_000,
        target_return=1e9,
        run_dir=str(run_dir),
        progress=False,
    )
    stats = asyncrl.load(run_dir, "last").model.obs_norm.stats
    # every worker's observations, merged by the server (a few of the last may be in flight)
    assert 0.9 * summary["total_steps"] <= float(stats[0]) <= summary["total_steps"]
    mean, var = stats[1:4], stats[4:]
    # statistics of real observations: cos and sin of the angle lie in [-1, 1]
    assert (mean[:2].abs() <= 1).all() and (var[:2] > 0).all() and (var[:2] <= 1).all()


def test_bfloat16_gradients_apply_the_rounded_updates_at_half_the_bytes(monkeypatch):
    # --ray-grad-dtype bfloat16 (with one server and sharded over 3) against float32 gradients
    # rounded to bfloat16 by hand: bit-for-bit the same updates, half the bytes in
    monkeypatch.setattr(ray_store, "ray", _FakeRay())
    cfg = asyncrl.Config(env="Pendulum-v1", backend="ray", ray_grad_dtype="bfloat16")
    snap, bounds, shards = _three_shards(cfg)
    n = snap.params.size
    by_hand = ray_backend.ParameterServer(cfg, snap)
    halved = ray_backend.ParameterServer(cfg, snap)
    stores = [
        ray_backend.RayStore([_Direct(by_hand)], 0, pipeline=0, batch=2),
        ray_backend.RayStore([_Direct(halved)], 0, pipeline=0, batch=2, bfloat16=True),
        ray_backend.RayStore(
            [_Direct(s) for s in shards], 0, pipeline=0, batch=2, bounds=bounds, bfloat16=True
        ),
    ]
    locals_ = [torch.zeros(n) for _ in stores]
    for store, local in zip(stores, locals_, strict=True):
        store.pull(local, None)
    rng = np.random.default_rng(0)
    for _ in range(7):
        grad = torch.from_numpy(rng.standard_normal(n).astype(np.float32) * 1e-3)
        rounded = grad.bfloat16().float()
        assert not torch.equal(rounded, grad)  # the rounding is real
        for store, local, g in zip(stores, locals_, [rounded, grad, grad], strict=True):
            store.push(g, 10, store.version)
            store.pull(local, None)
    for store in stores:
        store.snapshot(None)
    assert torch.equal(locals_[0], locals_[1]) and torch.equal(locals_[0], locals_[2])
    assert not np.array_equal(by_hand.snapshot().params, snap.params)
    full, half = by_hand.statistics(), halved.statistics()
    assert full["bytes_in"] == 7 * n * 4 and half["bytes_in"] == 7 * n * 2
    assert sum(s.statistics()["bytes_in"] for s in shards) == 7 * n * 2
    assert full["bytes_out"] == half["bytes_out"] == 5 * n * 4  # one reply per call, float32


def test_the_server_load_line_sums_the_servers_and_shares_each_core():
    stats = [
        {"seconds": 10.0, "cpu_seconds": 2.5, "bytes_in": 40e6, "bytes_out": 5e6, "version": 7},
        {"seconds": 9.0, "cpu_seconds": 0.9, "bytes_in": 40e6, "bytes_out": 5e6, "version": 7},
    ]
    load = ray_backend.server_load(stats)
    assert load == {"cpu_share": [0.25, 0.1], "mb_in_per_s": 8.0, "mb_out_per_s": 1.0, "updates": 7}
    line = ray_backend.server_line(load)
    assert "25%, 10% of a core" in line and "8.0 MB/s" in line and "1.0 MB/s" in line


def test_bfloat16_gradients_are_a_ray_option_only():
    with pytest.raises(asyncrl.UserError, match="ray-grad-dtype"):
        asyncrl.Config(backend="processes", ray_grad_dtype="bfloat16").validate()


class _Queued:
    """A ParameterServer in this process whose calls wait in a queue until the test runs them,
    in the order it picks among those whose arguments exist (Ray runs the calls of different
    workers in whatever order they reach each server, and a call that takes another call's
    result only once that result exists)."""

    def __init__(self, server):
        self.server, self.queue = server, []

    def __getattr__(self, name):
        return _QueuedMethod(self, name)

    def run_all(self, newest_first=False) -> bool:
        """Run every queued call whose arguments exist; whether any ran."""
        ran = False
        while ready := [
            i for i, t in enumerate(self.queue) if all(a.ready for a in t[1] if isinstance(a, _Ref))
        ]:
            name, args, refs = self.queue.pop(ready[-1] if newest_first else ready[0])
            out = getattr(self.server, name)(*[a.reply if isinstance(a, _Ref) else a for a in args])
            for ref, value in zip(refs, [out] if len(refs) == 1 else out, strict=True):
                ref.reply, ref.ready = value, True
            ran = True
        return ran


class _QueuedMethod:
    def __init__(self, actor, name, returns=1):
        self.actor, self.name, self.returns = actor, name, returns

    def options(self, num_returns=1):
        return _QueuedMethod(self.actor, self.name, num_returns)

    def remote(self, *args):
        refs = [_Ref(None, ready=False) for _ in range(self.returns)]
        self.actor.queue.append((self.name, args, refs))
        return refs[0] if self.returns == 1 else refs


class _DrivingRay:
    """ray.get over _Queued servers: a reply not there yet is waited for by running the calls
    that can run, oldest first."""

    def __init__(self, servers):
        self.servers = servers

    def get(self, ref):
        if isinstance(ref, list):
            return [self.get(r) for r in ref]
        while not ref.ready:
            assert any(s.run_all() for s in self.servers), "a call that can never run"
        return ref.reply


def test_a_gradient_is_applied_to_every_shard_or_to_none(monkeypatch):
    # --ray-servers 2 --max-staleness 0, two workers whose calls reach the two servers in
    # opposite orders: the first server applies A's gradient and drops B's (a version behind by
    # then); the second must do the same, not apply B's slice and drop A's (each shard deciding
    # by its own count of versions: half of each gradient applied)
    from asyncrl.envs import probe_env
    from asyncrl.state import GlobalState

    cfg = asyncrl.Config(
        env="Pendulum-v1", backend="ray", ray_servers=2, max_staleness=0, lr_schedule="constant"
    )
    info = probe_env(cfg.env)
    snap = GlobalState.create(cfg, spec_of(A3C(cfg, info)), 1, False, False).snapshot()
    n = snap.params.size
    bounds = ray_backend.shard_bounds(n, 2)
    shards = [
        _Queued(ray_backend.ParameterServer(cfg, ray_backend.shard_snapshot(snap, a, b, k == 0)))
        for k, (a, b) in enumerate(bounds)
    ]
    monkeypatch.setattr(ray_store, "ray", _DrivingRay(shards))
    stores = [
        ray_backend.RayStore(shards, w, pipeline=1, batch=1, bounds=bounds, one_decision=True)
        for w in range(2)
    ]
    locals_ = [torch.zeros(n) for _ in stores]
    for store, local in zip(stores, locals_, strict=True):
        assert store.pull(local, None) == 0
    rng = np.random.default_rng(0)
    grads = [torch.from_numpy(rng.standard_normal(n).astype(np.float32)) for _ in stores]
    for store, local, grad in zip(stores, locals_, grads, strict=True):
        store.push(grad, 10, store.version)
        store.pull(local, None)  # the call goes out; --ray-pipeline 1: not waited for
    assert [len(s.queue) for s in shards] == [2, 2]
    shards[1].run_all(newest_first=True)  # B's call first where it can run before the decision
    shards[0].run_all()  # A's call first
    shards[1].run_all(newest_first=True)
    for store in stores:
        store.snapshot(None)
    # one server fed the same gradients in the first server's order: A applied, B dropped
    one = ray_backend.ParameterServer(cfg, snap)
    one.push(grads[0], 0, 10, 0)
    one.push(grads[1], 0, 10, 1)
    assert one.dropped == 1
    joined = ray_backend.join_snapshots([s.server.snapshot() for s in shards])
    assert np.array_equal(joined.params, one.snapshot().params)
    assert [(s.server.version, s.server.dropped) for s in shards] == [(1, 1), (1, 1)]


def test_a_non_finite_update_on_ray_reaches_the_log_through_the_server(monkeypatch):
    from asyncrl.messages import GlobalSnapshot, NonFinite

    monkeypatch.setattr(ray_store, "ray", _FakeRay())
    cfg = asyncrl.Config(backend="ray")
    snap = GlobalSnapshot(
        np.ones(3, np.float32), {"square_avg": np.zeros(3, np.float32)}, None, 0, np.zeros((3, 1))
    )
    server = ray_backend.ParameterServer(cfg, snap)
    store = ray_backend.RayStore([_Direct(server)], 4, pipeline=0, batch=1)
    local = torch.zeros(3)
    store.pull(local, None)
    step = store.push(None, 5, store.version)
    store.nonfinite(step, "loss nan, gradient norm nan")
    store.pull(local, None)
    stream, steps, heard = server.drain()
    assert heard == {4}
    assert NonFinite(4, 5, "loss nan, gradient norm nan") in stream
    assert steps == 5 and server.nonfinite == 1 and server.version == 0


def test_counting_workers_starts_no_cluster(monkeypatch):
    # the count comes from the cluster the run has opened; nothing starts Ray to count CPUs
    from asyncrl.backends import ThisMachine, cluster_for, worker_count

    def no_init(*args, **kwargs):
        raise AssertionError("ray.init called")

    monkeypatch.setattr(ray, "init", no_init)
    cfg = asyncrl.Config(backend="ray")
    assert worker_count(cfg, ThisMachine(cpus=3)) == 3
    assert worker_count(asyncrl.Config(backend="ray", workers=2), ThisMachine(cpus=3)) == 2
    with cluster_for(asyncrl.Config(backend="threads")) as machine:
        assert machine.cpus == len(os.sched_getaffinity(0))  # the cores it may run on


def test_blocks_inside_an_open_cluster_share_it_and_the_last_one_ends_it(monkeypatch):
    # the CLI opens the cluster while PyTorch is imported and train opens it again: one start,
    # one end, by the outer block; a connection of the caller's is used and left open
    from asyncrl.backends import cluster_for
    from asyncrl.backends.ray import cluster as ray_cluster

    up: list = []
    ends: list = []

    class FakeRay:
        @staticmethod
        def is_initialized():
            return bool(up)

    monkeypatch.setattr(ray_cluster, "ray", FakeRay)
    monkeypatch.setattr(ray_cluster, "start_ray", lambda cfg: up.append("ours"))
    monkeypatch.setattr(ray_cluster, "stop_ray", lambda: (up.clear(), ends.append(1)))
    cfg = asyncrl.Config(backend="ray")
    with cluster_for(cfg):
        with cluster_for(cfg):
            assert up == ["ours"]
        assert up == ["ours"] and not ends  # the inner block leaves it to the outer one
    assert not up and ends == [1]
    up.append("theirs")  # e.g. a notebook's ray.init
    with cluster_for(cfg):
        pass
    assert up == ["theirs"] and ends == [1]


def test_a_python_api_run_ends_the_ray_it_started_and_leaves_a_joined_cluster(cluster, tmp_path):
    # a run that starts its own cluster shuts it down when it ends; one that joins a cluster
    # only disconnects, and the cluster goes on
    code = (
        "import sys, asyncrl, ray\n"
        "common = dict(backend='ray', workers=1, steps=2000, progress=False)\n"
        "asyncrl.train(**common, address=sys.argv[1], run_dir=sys.argv[2] + '/joined')\n"
        "assert not ray.is_initialized(), 'still connected to the joined cluster'\n"
        "asyncrl.train(**common, run_dir=sys.argv[2] + '/local')\n"
        "assert not ray.is_initialized(), 'the local cluster is still up'\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, cluster.address, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RAY_ADDRESS": ""},
    )
    assert r.returncode == 0, r.stderr
    assert ray.is_initialized() and ray.cluster_resources().get("CPU", 0) >= 1  # still there


def test_a_ray_train_command_probes_the_env_once_and_leaves_a_callers_connection(
    cluster, run_dir, monkeypatch
):
    # this process is connected to the cluster already (the fixture's ray.init): the command
    # joins through that connection and leaves it open; the env is built once here, by the
    # probe that picks the preset (the workers build theirs on the cluster)
    import gymnasium as gym

    from asyncrl.cli import main

    built: list = []
    for name in ("make", "make_vec"):
        real = getattr(gym, name)
        monkeypatch.setattr(
            gym, name, lambda *a, _real=real, **k: built.append(a) or _real(*a, **k)
        )
    args = ["train", "--backend", "ray", "--address", cluster.address, "--workers", "1"]
    args += ["--steps", "2000", "--run-dir", str(run_dir), "--no-progress"]
    # no evaluation nor re-scoring: their envs are built in this process too (after the run)
    args += ["--eval-every", "0", "--stop-on", "train", "--rescore-episodes", "0"]
    assert main(args) == 0
    assert len(built) == 1 and ray.is_initialized()


def test_evaluations_read_the_servers_parameters_and_keep_the_best(cluster, run_dir):
    import csv

    summary = asyncrl.train(
        backend="ray",
        address=cluster.address,
        workers=2,
        steps=20_000,
        eval_every=5_000,
        target_return=1e9,
        run_dir=str(run_dir),
        progress=False,
    )
    with open(run_dir / "evaluations.csv", newline="") as f:
        evals = list(csv.DictReader(f))
    # the server's parameters at each evaluation, and those it ended with; a due evaluation
    # waits while the last one plays, so on a loaded 2-core machine (two Ray workers, the
    # server, the evaluator) the one due at 10,000 can come too late to leave room for a third
    assert len(evals) == summary["evaluations"] >= 2
    assert int(evals[-1]["global_step"]) == summary["total_steps"]
    policy = asyncrl.load(run_dir)
    assert policy.source.name == "best_model.pt"
    assert_the_kept_model_is_the_rows(evals, policy.evaluation, summary)
    last = asyncrl.load(run_dir, "last").model
    saved = load_checkpoint(run_dir)["glob"].params
    np.testing.assert_array_equal(
        torch.cat([p.detach().flatten() for p in last.parameters()]).numpy(), saved
    )


def test_sharded_servers_on_the_cluster_take_one_decision_per_gradient(cluster):
    # the real Ray plumbing of one decision: the first server's second return (num_returns=2)
    # handed to the other server's call as an argument; with --max-staleness 0 and pipelined
    # calls from three stores many gradients are dropped, and both servers drop the same ones
    # (one caller here, so both see its calls in one order: the race itself is the test of
    # the queued servers above)
    from asyncrl.envs import probe_env
    from asyncrl.state import GlobalState

    cfg = asyncrl.Config(backend="ray", ray_servers=2, max_staleness=0, lr_schedule="constant")
    info = probe_env(cfg.env)
    snap = GlobalState.create(cfg, spec_of(A3C(cfg, info)), 1, False, False).snapshot()
    n = snap.params.size
    bounds = ray_backend.shard_bounds(n, 2)
    server_cls = ray.remote(num_cpus=0)(ray_backend.ParameterServer)
    servers = [
        server_cls.remote(cfg, ray_backend.shard_snapshot(snap, a, b, k == 0))
        for k, (a, b) in enumerate(bounds)
    ]
    try:
        stores = [
            ray_backend.RayStore(servers, w, pipeline=1, batch=2, bounds=bounds, one_decision=True)
            for w in range(3)
        ]
        local = torch.zeros(n)
        for store in stores:
            store.pull(local, None)
        rng = np.random.default_rng(0)
        for _ in range(10):
            for store in stores:
                grad = torch.from_numpy(rng.standard_normal(n).astype(np.float32) * 1e-3)
                store.push(grad, 10, store.version)
                store.pull(local, None)
        for store in stores:
            store.snapshot(None)
        first, second = ray.get([s.statistics.remote() for s in servers])
        assert first["dropped"] > 0 and first["version"] > 0
        assert first["version"] + first["dropped"] == 30
        assert (second["version"], second["dropped"]) == (first["version"], first["dropped"])
        parts = ray.get([s.snapshot.remote() for s in servers])
        assert ray_backend.join_snapshots(parts).params.size == n
    finally:
        for s in servers:
            ray.kill(s)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--env", "Pendulum-v1", "--algo", "nstep-q"], "nstep-q needs a Discrete one"),
        (["--squash"], "--squash: CartPole-v1 has Discrete actions"),
        (["--env", "MinAtar/Breakout-v1", "--normalize-obs"], "normalisation is for vector"),
        (["--resume", "RUN", "--no-normalize-obs"], "was trained with --normalize-obs"),
    ],
)
def test_bad_input_is_refused_before_ray_starts(args, needle, monkeypatch, tmp_path, capsys):
    # the CLI starts Ray while PyTorch is imported: every check of the config against the env
    # (and of a checkpoint against the config) must come before that, for new runs and resumes
    from asyncrl.backends.ray import cluster as ray_cluster
    from asyncrl.cli import main

    run = tmp_path / "run"
    if "RUN" in args:
        asyncrl.train(
            backend="threads", workers=1, steps=600, normalize_obs=True, progress=False,
            tensorboard=False, run_dir=str(run),
        )  # fmt: skip
        capsys.readouterr()  # (the run's own lines)
        args = [str(run) if a == "RUN" else a for a in args]
    else:
        args = [*args, "--run-dir", str(run)]

    def start_ray(cfg):
        raise RuntimeError("Ray started")

    monkeypatch.setattr(ray_cluster, "start_ray", start_ray)
    assert main(["train", "--backend", "ray", *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
