"""The Keras ``fit`` example as an elastic job on the real pseudo-cluster, under Keras 3 (``tf.keras``)
and Keras 2 (``tf_keras``), with real Horovod.

The example writes the committed per-epoch history, each final rank's weights, accuracy and Keras, and
the timings of every ring re-form it went through; the assertions are what a user would check: the job
resizes when told, every rank ends with the same weights (a joiner got rank 0's model and optimizer, and
every step's gradients were averaged over the ring of that step), and the model reaches its accuracy.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from submarine_elastic.cluster import ClusterSpec
from submarine_elastic.metrics.api import UnknownJobError
from submarine_elastic.metrics.server import MetricsServer
from submarine_elastic.submit.client import JobClient
from submarine_elastic.yarn import YarnServiceClient
from tests.integration.conftest import eventually, submarine, wait_finished
from tests.tls import cluster_metrics_tls

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SAMPLES = 2048
MIN_ACCURACY = 0.95
TOKEN = "keras-elastic-test-token"


@pytest.fixture()
def metrics() -> Iterator[MetricsServer]:
    server = MetricsServer(token=TOKEN, tls=cluster_metrics_tls()).start()
    yield server
    server.stop(grace=0)


#: Steps of an epoch: SAMPLES at the example's global batch of 64.
EPOCH_STEPS = SAMPLES // 64


def reported(metrics: MetricsServer, job: str, size: int) -> int | None:
    """The newest step the job reported while its ring had ``size`` workers (None: not at that size now)."""
    try:
        summary = metrics.store.summary(job)
    except UnknownJobError:
        return None
    return summary.last_step if summary.world_size == size else None


#: TF_USE_LEGACY_KERAS of the job for each Keras, and the major version its ranks must then train with.
KERAS = {"keras3": ("0", "3"), "keras2": ("1", "2")}


@pytest.mark.parametrize("keras", sorted(KERAS))
def test_keras_fit_flexes_2_3_1_2_and_every_rank_ends_identical(
    yarn: YarnServiceClient, cluster_spec: ClusterSpec, metrics: MetricsServer, tmp_path: Path, keras: str
):
    legacy, major = KERAS[keras]
    name = f"keras-elastic-flex-{keras}"
    log = tmp_path / "log"
    cmd = (
        f"{sys.executable} {REPO}/examples/train_keras_elastic.py --samples {SAMPLES} --epochs 100 "
        f"--step-sleep 0.02 --until-file {tmp_path}/stop --log-dir {log} "
        f"2>>{tmp_path}/stderr-$SUBMARINE_WORKER_INSTANCE.txt"
    )
    submarine(
        cluster_spec.rm_url,
        *("job", "run", "--name", name, "--elastic", "--num_workers", "2", "--min_workers", "1"),
        *(
            "--max_workers",
            "3",
            "--worker_resources",
            "memory-mb=1024,vcores=1",
            "--env",
            f"TF_USE_LEGACY_KERAS={legacy}",
        ),
        *("--env", f"SUBMARINE_METRICS_ENDPOINT={metrics.address}", "--env", f"SUBMARINE_METRICS_TOKEN={TOKEN}"),
        *("--worker_launch_cmd", cmd),
    )
    try:
        with JobClient(name, yarn, locate_timeout=120) as job:
            job.wait_for_size(2, timeout=240)
            for n in (3, 1, 2):
                out = submarine(cluster_spec.rm_url, "job", "flex", name, "--workers", str(n), "--timeout", "240")
                assert f"ring has {n} workers" in out
                # More than an epoch's steps at this size, as the job reports them: an epoch ends at it.
                since = eventually(lambda n=n: reported(metrics, name, n), f"steps reported at {n} workers", 120)
                eventually(
                    lambda n=n, since=since: (reported(metrics, name, n) or 0) > since + EPOCH_STEPS,
                    f"an epoch's steps at {n} workers",
                    240,
                )
            assert [e.to_workers for e in job.status().timeline] == [3, 1, 2]
        (tmp_path / "stop").touch()
        wait_finished(yarn, name)
    finally:
        yarn.destroy(name, missing_ok=True)

    history = json.loads((log / "history.json").read_text())
    assert [r["epoch"] for r in history] == list(range(len(history))), "an epoch was lost or repeated"
    sizes = [r["workers"] for r in history]
    assert {1, 2, 3} <= set(sizes) and sizes[-1] == 2
    assert history[-1]["loss"] < history[0]["loss"] / 5

    finals = {p.name: json.loads(p.read_text()) for p in sorted(log.glob("final-rank*.json"))}
    assert sorted(finals) == ["final-rank0.json", "final-rank1.json"]
    for final in finals.values():
        assert final["keras"].split(".")[0] == major
        assert final["accuracy"] >= MIN_ACCURACY
        assert final["epochs"] == len(history)
    weights = [np.load(p) for p in sorted(log.glob("weights-rank*.npz"))]
    assert len(weights) == 2
    for key in weights[0].files:
        np.testing.assert_array_equal(weights[0][key], weights[1][key])

    # Rank 0 at the end held rank 0 in every ring (scale-in removes the highest ranks): it saw every
    # re-form, each one short.
    resets = finals["final-rank0.json"]["resets"]
    assert [(r["size_before"], r["size_after"]) for r in resets] == [(2, 3), (3, 1), (1, 2)]
    for r in resets:
        assert r["reformed"] - r["left_fit"] < 10, r
        assert r["resumed"] - r["reformed"] < 10, r

    # The MetricsCallback reported every rank's steps with the ring it trained in.
    points = metrics.store.series(name, 100_000)
    by_step: dict[int, list] = {}
    for p in points:
        assert 0 <= p.worker.rank < p.world_size
        by_step.setdefault(p.point.step, []).append(p)
    assert {1, 2, 3} <= {p.world_size for p in points}
    for step, reports in by_step.items():
        assert len({p.world_size for p in reports}) == 1, f"step {step}: ranks disagree on the ring size"
        assert len({p.worker.rank for p in reports}) == len(reports) <= reports[0].world_size
    last = max(by_step)
    assert last == finals["final-rank0.json"]["steps"] and len(by_step[last]) == 2
    assert all(p.point.learning_rate == pytest.approx(0.05) for p in points)
