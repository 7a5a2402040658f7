"""Hadoop Submarine's QuickStart ``job run`` on the shared pseudo-cluster: its flags run (the saved-model path in
every container's environment, the quicklink in the service and in ``job show``, the TensorBoard component
answering HTTP at the link ``job show`` prints), and the flags of parameter servers are refused before any
service exists. The TensorBoard is the real one the install puts beside TensorFlow (``--tensorboard`` without it
is refused: tests/unit/test_job_submarine_flags.py)."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
import requests
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import ClusterSpec
from submarine_elastic.yarn import ServiceNotFoundError, YarnServiceClient
from tests.integration.conftest import container_processes, eventually, submarine

pytestmark = pytest.mark.integration

JOB = "quickstart"


def environment(container_id: str) -> dict[str, str]:
    """The environment YARN's launch script gave one container (its first process that still runs)."""
    for pid in container_processes(container_id):
        try:
            return psutil.Process(pid).environ()
        except psutil.Error:
            continue
    raise AssertionError(f"no process of container {container_id}")


def test_submarines_quickstart_runs_and_its_parameter_servers_are_refused(
    yarn: YarnServiceClient, cluster_spec: ClusterSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUBMARINE_JOBS_DIR", str(tmp_path / "jobs"))
    rm = cluster_spec.rm_url
    refused = CliRunner().invoke(
        cli,
        ["job", "run", "--name", "quickstart-ps", "--num_workers", "1", "--num_ps", "2",
         "--ps_resources", "memory=4G,vcores=2", "--ps_launch_cmd", "python ps.py", "--worker_launch_cmd", "x"],
        env={"SUBMARINE_RM_URL": rm},
    )  # fmt: skip
    assert refused.exit_code == 2 and "this job is allreduce (Horovod)" in refused.output, refused.output
    with pytest.raises(ServiceNotFoundError):
        yarn.status("quickstart-ps")
    board = ["--tensorboard", "--tensorboard_resources", "memory=512M,vcores=1"]
    out = submarine(
        rm, "job", "run", "--name", JOB, "--framework", "tensorflow", "--verbose", "--num_workers", "1",
        "--worker_resources", "memory=512M,vcores=1", "--worker_launch_cmd", "sleep 600",
        "--input_path", str(tmp_path / "input"), "--checkpoint_path", str(tmp_path / "ckpt"),
        "--saved_model_path", str(tmp_path / "model"), "--env", "DOCKER_JAVA_HOME=/opt/java",
        "--quicklink", "Notebook=http://worker-0:7070", "--conf", "yarn.service.am-restart.max-attempts=2",
        "--num_ps", "0", "--no_snapshot", *board,
    )  # fmt: skip
    try:
        assert f"job {JOB} submitted" in out and '"quicklinks"' in out  # --verbose printed the spec sent
        [worker] = yarn.wait_for_ready(JOB, "worker", 1, timeout=120)
        env = environment(worker.id)
        assert env["SUBMARINE_SAVED_MODEL_PATH"] == str(tmp_path / "model")
        assert env["SUBMARINE_INPUT_PATH"] == str(tmp_path / "input")
        assert env["SUBMARINE_TENSORBOARD_DIR"] == str(tmp_path / "ckpt" / "tensorboard")
        raw = yarn.status(JOB).raw
        assert raw["quicklinks"]["Notebook"] == "http://worker-0:7070"
        assert raw["configuration"]["properties"]["yarn.service.am-restart.max-attempts"] == "2"
        shown = submarine(rm, "job", "show", JOB)
        [notebook] = [line for line in shown.splitlines() if line.startswith("Notebook: ")]
        assert notebook.endswith(":7070") and "worker-0" not in notebook, shown
        [tensorboard] = yarn.wait_for_ready(JOB, "tensorboard", 1, timeout=120)
        assert environment(tensorboard.id)["SUBMARINE_TENSORBOARD_DIR"] == str(tmp_path / "ckpt" / "tensorboard")
        shown = submarine(rm, "job", "show", JOB)
        [link] = [line.split(": ", 1)[1] for line in shown.splitlines() if line.startswith("TensorBoard: ")]
        assert "tensorboard-0" not in link, shown

        def answers() -> dict | None:
            try:
                reply = requests.get(link.rstrip("/") + "/data/environment", timeout=5)
            except requests.RequestException:
                return None
            return reply.json() if reply.status_code == 200 else None

        # TensorBoard's own API, over the job's directory.
        shown_env = eventually(answers, f"TensorBoard answering at {link}", 90)
        assert shown_env["data_location"] == str(tmp_path / "ckpt" / "tensorboard"), shown_env
    finally:
        submarine(rm, "job", "kill", JOB)
