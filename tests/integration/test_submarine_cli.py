"""Hadoop Submarine's QuickStart ``job run`` on the shared pseudo-cluster: its flags run (the saved-model path in
every container's environment, the quicklink in the service and in ``job show``, the TensorBoard component
answering HTTP at the link ``job show`` prints), and the flags of parameter servers are refused before any
service exists.

Where this Python has no ``tensorboard`` (TensorFlow 2.21 does not install it), a stand-in module of that name
takes its place (``STAND_IN``: it serves HTTP on the ``--host`` and ``--port`` it is given), so that the
component, its binding and its link are checked all the same; the refusal without any is checked too."""

from __future__ import annotations

import importlib.util
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
HAS_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None
#: ``python -m tensorboard.main --logdir D --host H --port P`` of the stand-in: HTTP 200 with its logdir.
STAND_IN = """
import argparse, http.server
p = argparse.ArgumentParser()
p.add_argument("--logdir"); p.add_argument("--host"); p.add_argument("--port", type=int)
p.add_argument("--reload_multifile")
a = p.parse_args()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("stand-in TensorBoard over " + a.logdir).encode()
        self.send_response(200); self.end_headers(); self.wfile.write(body)
http.server.HTTPServer((a.host, a.port), H).serve_forever()
"""


def stand_in_tensorboard(where: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A ``tensorboard`` package of :data:`STAND_IN` under ``where``, found by this process; returns the
    directory for the containers' ``PYTHONPATH``."""
    (where / "tensorboard").mkdir(parents=True)
    (where / "tensorboard" / "__init__.py").write_text("")
    (where / "tensorboard" / "main.py").write_text(STAND_IN)
    monkeypatch.syspath_prepend(str(where))
    return str(where)


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
    if not HAS_TENSORBOARD:
        no_board = CliRunner().invoke(
            cli, ["job", "run", "--name", "quickstart-tb", "--worker_launch_cmd", "x", "--tensorboard"],
            env={"SUBMARINE_RM_URL": rm},
        )  # fmt: skip
        assert no_board.exit_code == 2 and "has no tensorboard module" in no_board.output, no_board.output
        with pytest.raises(ServiceNotFoundError):
            yarn.status("quickstart-tb")

    board = ["--tensorboard", "--tensorboard_resources", "memory=512M,vcores=1"]
    if not HAS_TENSORBOARD:
        board += ["--env", f"PYTHONPATH={stand_in_tensorboard(tmp_path / 'site', monkeypatch)}"]
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

        def answers() -> int | None:
            try:
                return requests.get(link, timeout=5).status_code
            except requests.RequestException:
                return None

        assert eventually(answers, f"TensorBoard answering at {link}", 90) == 200
    finally:
        submarine(rm, "job", "kill", JOB)
