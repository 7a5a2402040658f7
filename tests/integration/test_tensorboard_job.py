"""A job on the pseudo-cluster with a TensorBoard directory and a saved model path: flexed 2 -> 3 by ``job flex``,
its run holds rank 0's steps (every committed step, at the size it trained at) and the driver's decisions with
their reasons; when it ends, rank 0's SavedModel holds the weights every rank ended with."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from submarine_elastic.cluster import ClusterSpec
from submarine_elastic.submit.client import JobClient
from submarine_elastic.yarn import YarnServiceClient
from tests.integration.conftest import submarine
from tests.integration.jobcheck import check_training, finish, start_job, wait_for_steps_at

accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator", reason="TensorBoard is not installed"
)
tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed")


def test_a_flexed_jobs_run_holds_its_steps_and_decisions_and_its_model_is_saved(
    yarn: YarnServiceClient, cluster_spec: ClusterSpec, tmp_path: Path
) -> None:
    name = "tensorboard-job"
    board, saved = tmp_path / "tensorboard", tmp_path / "model"
    env = {"SUBMARINE_TENSORBOARD_DIR": str(board), "SUBMARINE_SAVED_MODEL_PATH": str(saved)}
    if os.environ.get("PYTHONPATH"):  # where this Python finds TensorBoard, for the job's containers too
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    start_job(cluster_spec.rm_url, name, tmp_path, env=env)
    try:
        with JobClient(name, yarn, locate_timeout=120) as job:
            job.wait_for_size(2, timeout=240)
            wait_for_steps_at(tmp_path / "log", 2, count=5)
            out = submarine(cluster_spec.rm_url, "job", "flex", name, "--workers", "3", "--timeout", "240")
            assert "ring has 3 workers" in out
            wait_for_steps_at(tmp_path / "log", 3, count=5)
        finish(yarn, name, tmp_path)
    finally:
        yarn.destroy(name, missing_ok=True)
    steps = check_training(tmp_path / "log")
    run = accumulator.EventAccumulator(str(board), size_guidance={accumulator.SCALARS: 0, accumulator.TENSORS: 0})
    run.Reload()
    workers = {e.step: e.value for e in run.Scalars("train/workers")}
    loss = {e.step: e.value for e in run.Scalars("train/loss")}
    # Every committed step is in the run (a step trained again after a rollback holds its last value).
    assert set(steps) <= set(workers), sorted(set(steps) - set(workers))[:10]
    for step, records in steps.items():
        assert workers[step] == records[0]["size"], step
        assert loss[step] == pytest.approx(records[-1]["loss"], rel=1e-6), step
    assert [(e.step, e.value) for e in run.Scalars("decision/workers")] == [(1, 3.0)]
    (reason,) = [e.tensor_proto.string_val[0].decode() for e in run.Tensors("decision/reason")]
    assert reason == "target 3 workers (2 in force): submarine job flex"
    loaded = tf.saved_model.load(str(saved))
    with np.load(tmp_path / "log" / "weights-rank0.npz") as final:
        expected = [final[f"arr_{i}"] for i in range(len(final.files))]
    got = [v.numpy() for v in loaded.trainable_variables]
    assert len(got) == len(expected) and all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))
