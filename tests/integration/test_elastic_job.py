"""Elastic Horovod jobs on the real pseudo-cluster, with real TensorFlow and Horovod.

The example script logs every committed step (ring size, the sample ids of each rank, the loss) and
its final weights; the assertions are what a user would check: the job resizes when told, every
epoch trains on each sample exactly once, no committed step is lost, all ranks end identical. The flexed job also
has a TensorBoard directory and a saved model path: its run holds every committed step and each decision with its
reason, and rank 0's SavedModel the weights every rank ended with.
"""

from __future__ import annotations

import collections
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from click.testing import CliRunner
from tensorboard.backend.event_processing import event_accumulator

from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import ClusterSpec, LocalCluster
from submarine_elastic.metrics.server import MetricsServer
from submarine_elastic.metrics.store import InMemoryStore
from submarine_elastic.protocol.locate import driver_address
from submarine_elastic.protocol.proto.elastic_pb2 import StatusRequest
from submarine_elastic.protocol.proto.elastic_pb2_grpc import ElasticDriverStub
from submarine_elastic.submit.client import JobClient
from submarine_elastic.submit.store import load_token
from submarine_elastic.yarn import YarnServiceClient
from tests.integration.conftest import eventually, sigkill, submarine
from tests.integration.jobcheck import check_training, finish, start_job, wait_for_steps_at
from tests.integration.jobcheck import training_pids as _training_pids
from tests.tls import cluster_metrics_tls, self_signed

pytestmark = pytest.mark.integration


@pytest.fixture()
def metrics_service() -> Iterator[MetricsServer]:
    """A metrics service on mutual TLS: job run gives the job's hooks the CA and a client certificate."""
    server = MetricsServer(
        InMemoryStore(points_per_job=50_000), token="metrics-test-token", tls=cluster_metrics_tls()
    ).start()
    yield server
    server.stop()


def test_flex_2_3_1_2_keeps_every_sample_and_step(
    yarn: YarnServiceClient,
    yarn_cluster: LocalCluster,
    cluster_spec: ClusterSpec,
    tmp_path: Path,
    metrics_service: MetricsServer,
):
    name = "elastic-flex"
    board, saved = tmp_path / "tensorboard", tmp_path / "model"
    job_env = {
        "SUBMARINE_METRICS_ENDPOINT": metrics_service.address,
        "SUBMARINE_METRICS_TOKEN": "metrics-test-token",
        "SUBMARINE_TENSORBOARD_DIR": str(board),
        "SUBMARINE_SAVED_MODEL_PATH": str(saved),
    }
    start_job(cluster_spec.rm_url, name, tmp_path, env=job_env)
    try:
        with JobClient(name, yarn, locate_timeout=120) as job:
            job.wait_for_size(2, timeout=240)
            for n in (3, 1, 2):
                out = submarine(cluster_spec.rm_url, "job", "flex", name, "--workers", str(n), "--timeout", "240")
                assert f"ring has {n} workers" in out
                if n == 1:
                    # Scale-in kept the worker holding rank 0, and is complete in YARN too: only it is left.
                    (kept,) = [w.instance for w in job.status().workers if w.rank == 0]
                    eventually(
                        lambda kept=kept: (
                            [c.component_instance_name for c in yarn.ready_instances(name, "worker")] == [kept]
                        ),
                        "the removed containers gone from YARN",
                        60,
                    )
                wait_for_steps_at(tmp_path / "log", n, count=5)  # train at this size before the next resize
            assert [e.to_workers for e in job.status().timeline] == [3, 1, 2]
        # The tokens reached the driver, the agents and the hooks, yet neither the service the RM
        # shows nor the RM's log (which records every spec it is sent) holds them.
        job_token = load_token(name)
        assert job_token
        rm_log = (yarn_cluster.dir / "logs" / "rm.log").read_text()
        assert f"name: {name}" in rm_log, "the RM no longer logs the spec: this check checks nothing"
        for shown in (json.dumps(yarn.status(name).raw), rm_log):
            assert job_token not in shown and "metrics-test-token" not in shown
        finish(yarn, name, tmp_path)
    finally:
        yarn.destroy(name, missing_ok=True)
    steps = check_training(tmp_path / "log")
    sizes = [steps[s][0]["size"] for s in sorted(steps)]
    assert {1, 2, 3} <= set(sizes)
    assert sizes[0] == 2 and sizes[-1] == 2
    # The metrics stream saw every step at the ring size it really ran with.
    points = metrics_service.store.series(name, 50_000)
    reported: dict[int, set[int]] = collections.defaultdict(set)
    for p in points:
        reported[p.point.step].add(p.world_size)
    assert set(reported) >= set(steps), f"steps without metrics: {sorted(set(steps) - set(reported))[:10]}"
    for step, records in steps.items():
        assert reported[step] == {records[0]["size"]}, (
            f"step {step}: metrics {reported[step]}, ring {records[0]['size']}"
        )
    summary = metrics_service.store.summary(name)
    assert {t.world_size for t in summary.throughput} >= {1, 2, 3}
    check_tensorboard_run(board, steps, flexes=[3, 1, 2])
    check_saved_model(saved, tmp_path / "log")


def check_tensorboard_run(board: Path, steps: dict[int, list[dict]], flexes: list[int]) -> None:
    """The job's TensorBoard run holds every committed step at the size it trained at with rank 0's loss (a step
    trained again after a rollback holds its last value), and each ``job flex`` as a decision with its reason."""
    acc = event_accumulator
    run = acc.EventAccumulator(str(board), size_guidance={acc.SCALARS: 0, acc.TENSORS: 0})
    run.Reload()
    workers = {e.step: e.value for e in run.Scalars("train/workers")}
    loss = {e.step: e.value for e in run.Scalars("train/loss")}
    assert set(steps) <= set(workers), sorted(set(steps) - set(workers))[:10]
    for step, records in steps.items():
        assert workers[step] == records[0]["size"], step
        assert loss[step] == pytest.approx(records[-1]["loss"], rel=1e-6), step
    assert [e.value for e in run.Scalars("decision/workers")] == [float(n) for n in flexes]
    reasons = [e.tensor_proto.string_val[0].decode() for e in run.Tensors("decision/reason")]
    in_force = [2, *flexes[:-1]]
    assert reasons == [
        f"target {n} workers ({was} in force): submarine job flex" for n, was in zip(flexes, in_force, strict=True)
    ]


def check_saved_model(saved: Path, log: Path) -> None:
    """Rank 0's SavedModel, exported at the job's end, holds the weights every rank ended with."""
    import tensorflow as tf  # here: the test process imports TensorFlow only for this check

    loaded = tf.saved_model.load(str(saved))
    with np.load(log / "weights-rank0.npz") as final:
        expected = [final[f"arr_{i}"] for i in range(len(final.files))]
    got = [v.numpy() for v in loaded.trainable_variables]
    assert len(got) == len(expected) and all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))


def test_flex_outside_the_limits_is_refused(yarn: YarnServiceClient, cluster_spec: ClusterSpec, tmp_path: Path):
    name = "elastic-limits"
    start_job(cluster_spec.rm_url, name, tmp_path, workers=1)
    try:
        with JobClient(name, yarn, locate_timeout=120) as job:
            job.wait_for_size(1, timeout=240)
        result = CliRunner().invoke(
            cli, ["job", "flex", name, "--workers", "4"], env={"SUBMARINE_RM_URL": cluster_spec.rm_url}
        )
        assert result.exit_code != 0
        assert "above the job's --max_workers 3" in result.output
        assert yarn.status(name).component("worker").number_of_containers == 1
    finally:
        yarn.destroy(name, missing_ok=True)


def test_a_job_with_tls_answers_its_agents_and_flex_over_tls_only(
    yarn: YarnServiceClient, cluster_spec: ClusterSpec, tmp_path: Path
):
    name = "elastic-tls"
    cert, key = self_signed(tmp_path / "pki", ["localhost", "127.0.0.1", socket.gethostname(), socket.getfqdn()])
    start_job(cluster_spec.rm_url, name, tmp_path, 1, None, "--tls_cert", str(cert), "--tls_key", str(key))
    try:
        with JobClient(name, yarn, locate_timeout=120) as job:
            job.wait_for_size(1, timeout=240)  # the agent attached over TLS
        out = submarine(cluster_spec.rm_url, "job", "flex", name, "--workers", "2", "--timeout", "240")
        assert "ring has 2 workers" in out
        target = driver_address(name, client=yarn, timeout=30)
        with grpc.insecure_channel(target) as plain:
            with pytest.raises(grpc.RpcError) as refused:
                ElasticDriverStub(plain).Status(StatusRequest(), timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        yarn.destroy(name, missing_ok=True)


def test_a_killed_worker_costs_at_most_the_uncommitted_steps(
    yarn: YarnServiceClient, cluster_spec: ClusterSpec, tmp_path: Path
):
    name = "elastic-kill"
    start_job(cluster_spec.rm_url, name, tmp_path)
    try:
        with JobClient(name, yarn, locate_timeout=120) as job:
            job.wait_for_size(2, timeout=240)
            time.sleep(3)
            before = {w.instance: w.container_id for w in job.status().workers}
            victims = _training_pids(before["worker-1"])
            assert victims, "worker-1's training process not found"
            sigkill(victims)
            # The job goes on without it, YARN relaunches it, and it rejoins.
            eventually(lambda: job.status().world_size == 1, "the ring re-formed without the killed worker", 60, 0.2)
            job.wait_for_size(2, timeout=240)
            after = job.status()
            assert {w.instance for w in after.workers if w.rank >= 0} == {"worker-0", "worker-1"}
            assert before["worker-1"] == [w.container_id for w in after.workers if w.instance == "worker-1"][0]
            again = _training_pids(before["worker-1"])
            assert again and not set(again) & set(victims)
            time.sleep(2)
        finish(yarn, name, tmp_path)
    finally:
        yarn.destroy(name, missing_ok=True)
    steps = check_training(tmp_path / "log")
    assert 1 in {steps[s][0]["size"] for s in steps}, "the ring never ran without the killed worker"
