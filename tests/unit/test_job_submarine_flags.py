"""Hadoop Submarine's ``job run`` flags: each accepted with its meaning here, or refused before anything is
submitted with why and what to run instead; resources in Submarine's grammar; its YAML job file (``-f``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import responses
from click.testing import CliRunner

from submarine_elastic.cli import job as job_cli
from submarine_elastic.cli.jobview import quicklinks
from submarine_elastic.cli.main import cli
from submarine_elastic.submit.api import JobSpecError
from submarine_elastic.submit.jobspec import (
    KEYTAB_FILE,
    SERVICE_PROPERTIES,
    JobRequest,
    WorkerResources,
    build_service,
    job_secrets,
    with_credentials,
)
from submarine_elastic.submit.service import JobFlags, prepare
from submarine_elastic.submit.submarine_flags import SubmarineFlagError, load_job_file
from submarine_elastic.yarn import ServiceStatus

RM = "http://rm.example:8088"
QUICKSTART = (
    "--name", "tf-job-001", "--framework", "tensorflow", "--verbose", "--input_path", "/data/mnist",
    "--checkpoint_path", "/shared/ckpt", "--saved_model_path", "/shared/model", "--num_workers", "2",
    "--worker_resources", "memory=2G,vcores=1", "--worker_launch_cmd", "python mnist.py",
    "--env", "DOCKER_JAVA_HOME=/opt/java", "--quicklink", "Notebook=http://worker-0:7070",
    "--conf", "yarn.service.am-restart.max-attempts=3", "--num_ps", "0",
)  # fmt: skip


@pytest.fixture(autouse=True)
def jobs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SUBMARINE_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("SUBMARINE_RM_URL", RM)
    monkeypatch.delenv("SUBMARINE_YARN_AUTH", raising=False)
    monkeypatch.setenv("SUBMARINE_INSECURE", "1")
    return tmp_path / "jobs"


@pytest.fixture()
def tensorboard_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``tensorboard`` module this interpreter finds (the job's Python must have one for --tensorboard)."""
    (tmp_path / "site" / "tensorboard").mkdir(parents=True)
    (tmp_path / "site" / "tensorboard" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["job", "run", *args, "--workdir", str(Path.cwd())])
    return result.exit_code, " ".join(result.output.split())


def request(flags: JobFlags, tmp_path: Path) -> JobRequest:
    return with_credentials(prepare(flags, lambda _name: (RM, None), cwd=tmp_path))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("memory=8G,vcores=2", WorkerResources(8192, 2)),
        ("memory=2048M,vcores=1", WorkerResources(2048, 1)),
        ("memory-mb=2048,vcores=1,gpu=1", WorkerResources(2048, 1, 1)),
        ("memory=4G,vcores=2,yarn.io/gpu=2", WorkerResources(4096, 2, 2)),
        ("memory=1G,vcores=1,yarn.io/fpga=1", WorkerResources(1024, 1, 0, (("yarn.io/fpga", 1),))),
    ],
)
def test_submarines_resource_grammar(text: str, expected: WorkerResources) -> None:
    assert WorkerResources.parse(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("memory=8T", "memory is not a number"),
        ("memory=2G,memory-mb=2048", "not both"),
        ("vcores=2", "memory"),
        ("memory=2G,gpu=1,yarn.io/gpu=1", "given twice"),
        ("memory=2G,Disk Space=1", "not a resource name"),
    ],
)
def test_a_bad_resource_string_names_the_flag_and_what_is_wrong(text: str, why: str) -> None:
    with pytest.raises(JobSpecError, match=rf"--tensorboard_resources: .*{why}"):
        WorkerResources.parse(text, "--tensorboard_resources")


@pytest.mark.usefixtures("tensorboard_installed")
@responses.activate
@pytest.mark.parametrize(
    ("args", "flag", "said"),
    [
        (("--num_ps", "2", "--ps_resources", "memory=4G,vcores=2", "--ps_launch_cmd", "python ps.py"), "--num_ps",
         "parameter servers: this job is allreduce (Horovod)"),
        (("--ps_docker_image", "tf:ps"), "--ps_docker_image", "drop --ps_docker_image and give the workers' count"),
        (("--num_schedulers", "1"), "--num_schedulers", "MXNet schedulers"),
        (("--framework", "pytorch"), "--framework", "run a TensorFlow script"),
        (("--framework", "mxnet"), "--framework", "no place in an allreduce ring"),
        (("--conf", "submarine.runtime.class=x"), "--conf", "Submarine's own client"),
        (("--quicklink", "UI=ftp://worker-0:21"), "--quicklink", "not an http(s) URL"),
        (("--tensorboard_resources", "memory=2G"), "--tensorboard", "need --tensorboard"),
        (("--principal", "me@EXAMPLE.COM"), "--principal", "needs --keytab"),
        (("--worker_docker_image", "tf:a", "--docker_image", "tf:b"), "--worker_docker_image", "one image"),
        (("--tensorboard", "hdfs://nn:8020/tb"), "--tensorboard", "not a local absolute directory"),
    ],
)  # fmt: skip
def test_a_flag_without_meaning_here_is_refused_before_anything_is_sent(args: tuple[str, ...], flag: str, said: str):
    code, out = run("--name", "mnist", "--worker_launch_cmd", "python train.py", *args)
    assert code in (1, 2), out  # 2: a usage error of the flag, 1: the value it leads to refused
    assert (f"Invalid value for {flag}" in out or f"Error: {flag}" in out) and said in out, out
    assert not responses.calls  # refused before the ResourceManager is asked anything


def test_submarines_quickstart_flags_reach_the_spec(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sent: list[JobRequest] = []
    monkeypatch.setattr(job_cli, "check_cluster", lambda yarn, req: (req, False))
    monkeypatch.setattr(job_cli, "submit", lambda yarn, req, files=None: sent.append(req) or with_credentials(req))
    with responses.RequestsMock(assert_all_requests_are_fired=False):
        code, out = run(*QUICKSTART)
    assert code == 0, out
    assert '"SUBMARINE_SAVED_MODEL_PATH": "/shared/model"' in out  # --verbose: the spec sent
    spec = build_service(with_credentials(sent[0])).to_dict()
    env = spec["configuration"]["env"]
    assert (env["SUBMARINE_SAVED_MODEL_PATH"], env["SUBMARINE_INPUT_PATH"]) == ("/shared/model", "/data/mnist")
    assert "SUBMARINE_TENSORBOARD_DIR" not in env
    assert spec["configuration"]["properties"] == {
        "yarn.service.am-restart.max-attempts": "3",  # --conf
        **SERVICE_PROPERTIES,  # every job's
    }
    assert spec["quicklinks"] == {"Notebook": "http://worker-0:7070"}
    worker = next(c for c in spec["components"] if c["name"] == "worker")
    assert worker["resource"] == {"cpus": 1, "memory": "2048"}


@pytest.mark.usefixtures("tensorboard_installed")
def test_tensorboard_is_a_component_bound_to_its_node_over_the_checkpoints_directory(tmp_path: Path) -> None:
    flags = JobFlags(name="mnist", worker_launch_cmd="python train.py", checkpoint_path="/shared/ckpt",
                     tensorboard="", tensorboard_resources="memory=2G,vcores=2", insecure=True)  # fmt: skip
    req = request(flags, tmp_path)
    spec = build_service(req).to_dict()
    board = next(c for c in spec["components"] if c["name"] == "tensorboard")
    assert board["number_of_containers"] == 1 and board["resource"] == {"cpus": 2, "memory": "2048"}
    port = req.tensorboard.port if req.tensorboard else 0
    assert board["launch_command"].endswith(
        f"-m tensorboard.main --logdir /shared/ckpt/tensorboard --host $NM_HOST --port {port} --reload_multifile true"
    )
    assert "bind_all" not in board["launch_command"] and "0.0.0.0" not in board["launch_command"]
    assert spec["configuration"]["env"]["SUBMARINE_TENSORBOARD_DIR"] == "/shared/ckpt/tensorboard"
    assert spec["quicklinks"] == {"TensorBoard": f"http://tensorboard-0:{port}/"}
    assert 21000 <= port < 32000


@pytest.mark.usefixtures("tensorboard_installed")
def test_tensorboard_without_a_checkpoint_path_reads_the_jobs_directory(tmp_path: Path, jobs_dir: Path) -> None:
    req = request(JobFlags(name="mnist", worker_launch_cmd="python train.py", tensorboard="", insecure=True), tmp_path)
    assert req.tensorboard is not None
    assert req.tensorboard.logdir == f"{(jobs_dir / 'mnist').resolve()}/tensorboard"
    given = request(JobFlags(name="mnist", worker_launch_cmd="x", tensorboard="/tb/runs", insecure=True), tmp_path)
    assert given.tensorboard is not None and given.tensorboard.logdir == "/tb/runs"


def test_tensorboard_is_refused_where_the_jobs_python_has_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # importlib.util.find_spec then finds none
    with responses.RequestsMock():
        code, out = run("--name", "mnist", "--worker_launch_cmd", "python train.py", "--tensorboard")
    assert code == 2, out
    assert f"the job's Python ({sys.executable}) has no tensorboard module" in out


def test_job_show_points_an_instances_quicklink_at_its_host() -> None:
    status = ServiceStatus.from_json(
        {
            "name": "mnist",
            "state": "STABLE",
            "quicklinks": {"TensorBoard": "http://tensorboard-0:23456/", "Docs": "https://example.org/x"},
            "components": [
                {"name": "tensorboard", "number_of_containers": 1,
                 "containers": [{"id": "c1", "component_instance_name": "tensorboard-0", "bare_host": "node7",
                                 "state": "READY"}]},
            ],
        }
    )  # fmt: skip
    assert quicklinks(status) == [("Docs", "https://example.org/x"), ("TensorBoard", "http://node7:23456/")]


def keytab(tmp_path: Path) -> Path:
    path = tmp_path / "me.keytab"
    path.write_bytes(b"\x05\x02" + b"\0" * 30)
    return path


def test_keytab_distributed_travels_as_a_secret_else_its_path_is_named(tmp_path: Path) -> None:
    common = {"name": "mnist", "worker_launch_cmd": "x", "insecure": True, "principal": "me@EXAMPLE.COM"}
    shipped = request(JobFlags(keytab=keytab(tmp_path), distribute_keytab=True, **common), tmp_path)  # type: ignore[arg-type]
    env = build_service(shipped).to_dict()["configuration"]["env"]
    assert KEYTAB_FILE in job_secrets(shipped) and env["SUBMARINE_YARN_KEYTAB"] == f"$PWD/{KEYTAB_FILE}"
    assert env["SUBMARINE_YARN_PRINCIPAL"] == "me@EXAMPLE.COM" and env["SUBMARINE_YARN_AUTH"] == "kerberos"
    on_nodes = request(JobFlags(keytab=keytab(tmp_path), **common), tmp_path)  # type: ignore[arg-type]
    env = build_service(on_nodes).to_dict()["configuration"]["env"]
    assert KEYTAB_FILE not in job_secrets(on_nodes)
    assert env["SUBMARINE_YARN_KEYTAB"] == str(keytab(tmp_path))
    with pytest.raises(JobSpecError, match="--keytab .*: not a Kerberos keytab"):
        (tmp_path / "bad").write_text("nope")
        request(JobFlags(keytab=tmp_path / "bad", **common), tmp_path)  # type: ignore[arg-type]


@pytest.mark.usefixtures("tensorboard_installed")
def test_the_job_file_sets_the_flags_the_command_line_leaves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text(
        "spec:\n  name: from-file\n  framework: TensorFlow\n"
        "configs:\n  input_path: /data/in\n  envs:\n    - A=1\n  quicklinks:\n    - UI=http://worker-0:80\n"
        "  wait_job_finish: false\n"
        "roles:\n  worker:\n    resources: memory=1G,vcores=1\n    replicas: 3\n    launch_cmd: python a.py\n"
        "scheduling:\n  queue: research\n"
        "tensorBoard:\n  resources: memory=1G,vcores=1\n"
    )
    values = load_job_file(job_file)
    assert values["num_workers"] == 3 and values["env_pairs"] == ("A=1",) and values["tensorboard"] == ""
    sent: list[JobRequest] = []
    monkeypatch.setattr(job_cli, "check_cluster", lambda yarn, req: (req, False))
    monkeypatch.setattr(job_cli, "submit", lambda yarn, req, files=None: sent.append(req) or req)
    code, out = run("-f", str(job_file), "--num_workers", "2", "--name", "from-cli")
    assert code == 0, out
    req = sent[0]
    assert (req.name, req.limits.num, req.launch_cmd, req.input_path, req.queue) == (
        "from-cli", 2, "python a.py", "/data/in", "research"
    )  # fmt: skip
    assert req.env["A"] == "1" and req.quicklinks == {"UI": "http://worker-0:80"} and req.tensorboard is not None


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("configs:\n  input_pth: /x\n", "unknown key 'input_pth'"),
        ("roles:\n  chief:\n    replicas: 1\n", "unknown role 'chief'"),
        ("roles:\n  worker:\n    gpus: 1\n", "unknown key 'gpus'"),
        ("cluster:\n  x: 1\n", "unknown section 'cluster'"),
        ("roles:\n  worker:\n    replicas: two\n", "expected a whole number"),
    ],
)
def test_an_unknown_key_of_the_job_file_is_refused_naming_it(tmp_path: Path, text: str, named: str) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text(text)
    with pytest.raises(SubmarineFlagError, match=named):
        load_job_file(job_file)
    code, out = run("-f", str(job_file))
    assert code == 2 and named in out, out
