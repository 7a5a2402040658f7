"""docker/: the image and the docker-compose cluster, checked without a Docker engine.

Every container command goes through the real CLI (``--prepare``, which writes the configuration and
prints the command instead of running it), so a flag the CLI does not know, a role it does not have, or
a host name that does not match a service fails here; ``--dry-run`` prints the same and writes nothing.
"""

from __future__ import annotations

import configparser
import re
import shlex
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import ClusterSpec, LocalCluster, Placement, local
from submarine_elastic.cluster.gpu import parse_nvidia_smi
from submarine_elastic.cluster.hdfs import HDFS_FRAMEWORK, HDFS_SERVICES

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"


def compose(environ: dict[str, str]) -> dict[str, Any]:
    """docker-compose.yml as Compose reads it with ``environ``: each ``${VAR:-default}`` interpolated."""
    text = (DOCKER / "docker-compose.yml").read_text()
    return yaml.safe_load(re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: environ.get(m[1]) or m[2], text))


COMPOSE: dict[str, Any] = compose({})
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
NODEMANAGERS = sorted(name for name in SERVICES if name.startswith("nodemanager"))
DATANODES = sorted(name for name in SERVICES if name.startswith("datanode"))


def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) of docker/Dockerfile, continuation lines joined, comments left out."""
    text = re.sub(r"\\\n", " ", (DOCKER / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction, args in dockerfile():
        if instruction == "ENV":
            env.update(dict(pair.split("=", 1) for pair in shlex.split(args)))
    return env


def site(path: Path) -> dict[str, str]:
    return {prop.findtext("name", ""): prop.findtext("value", "") for prop in ET.parse(path).getroot().iter("property")}


@pytest.fixture()
def fake_lib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "hadoop-yarn-server-resourcemanager-3.4.2.jar").write_bytes(b"")
    monkeypatch.setenv("SUBMARINE_HADOOP_LIB", str(lib))
    return lib


def prepare(command: list[str], cluster_dir: Path, flag: str = "--prepare") -> str:
    assert command[:2] == ["cluster", "daemon"], command
    result = CliRunner().invoke(cli, [*command, flag, "--cluster-dir", str(cluster_dir)])
    assert result.exit_code == 0, f"{command}: {result.output}"
    return result.output


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its size and modification time (ns)."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def test_the_cluster_has_zookeeper_a_resourcemanager_and_nodemanagers() -> None:
    assert {"zookeeper", "resourcemanager"} <= set(SERVICES)
    assert len(NODEMANAGERS) >= 2
    for name, service in SERVICES.items():
        assert service["hostname"] == name, "the daemons reach each other by service name"
        assert service["image"] == "submarine-elastic:latest"
        assert service["build"] == {"context": "..", "dockerfile": "docker/Dockerfile"}


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_each_container_command_is_a_daemon_the_cli_runs(name: str, tmp_path: Path, fake_lib: Path) -> None:
    command = [str(part) for part in SERVICES[name]["command"]]
    role = command[2]
    assert name.startswith(role)
    printed = prepare(command, tmp_path / name)
    assert printed.splitlines()[-1].split()[0].endswith("java")
    spec = ClusterSpec()
    if role == "zookeeper":
        assert f"clientPort={spec.zk_port}" in (tmp_path / name / "conf" / "zk" / "zoo.cfg").read_text()
        return
    daemon = {"resourcemanager": "rm", "nodemanager": "nm-0", "namenode": "nn", "datanode": "dn-0"}[role]
    conf = tmp_path / name / "conf" / daemon
    core, yarn, hdfs = site(conf / "core-site.xml"), site(conf / "yarn-site.xml"), site(conf / "hdfs-site.xml")
    assert core["hadoop.registry.zk.quorum"] == f"zookeeper:{spec.zk_port}"
    assert yarn["yarn.resourcemanager.hostname"] == "resourcemanager"
    assert yarn["yarn.resourcemanager.webapp.address"] == f"resourcemanager:{spec.rm_web_port}"
    assert yarn["yarn.resourcemanager.bind-host"] == "0.0.0.0"
    # Every daemon is on the cluster's HDFS, reached by the NameNode's service name.
    assert core["fs.defaultFS"] == f"hdfs://namenode:{spec.namenode_port}"
    assert hdfs["dfs.namenode.http-address"] == f"namenode:{spec.namenode_web_port}"
    assert yarn["yarn.service.base.path"] == HDFS_SERVICES
    assert yarn["yarn.service.framework.path"] == f"hdfs://namenode:{spec.namenode_port}{HDFS_FRAMEWORK}"
    if role == "datanode":
        assert hdfs["dfs.datanode.hostname"] == name and hdfs["dfs.datanode.address"].startswith("0.0.0.0:")
    if role == "nodemanager":
        assert yarn["yarn.nodemanager.hostname"] == name
        assert yarn["yarn.nodemanager.address"].startswith(f"{name}:")


def test_gpus_per_node_reaches_the_rm_and_every_nodemanager(tmp_path: Path, fake_lib: Path) -> None:
    """SUBMARINE_GPUS_PER_NODE=2: the RM declares yarn.io/gpu and schedules by every resource; each NodeManager
    runs the GPU plugin on a stand-in nvidia-smi of its own that prints 2 devices."""
    services = compose({"SUBMARINE_GPUS_PER_NODE": "2"})["services"]
    for name in ["resourcemanager", *NODEMANAGERS]:
        command = [str(part) for part in services[name]["command"]]
        assert command[command.index("--gpus-per-node") + 1] == "2", name
        prepare(command, tmp_path / name)
        daemon = "rm" if name == "resourcemanager" else "nm-0"
        conf = tmp_path / name / "conf" / daemon
        assert site(conf / "resource-types.xml") == {"yarn.resource-types": "yarn.io/gpu"}
        if daemon == "rm":
            assert site(conf / "capacity-scheduler.xml")["yarn.scheduler.capacity.resource-calculator"].endswith(
                "DominantResourceCalculator"
            )
            continue
        found = site(conf / "yarn-site.xml")["yarn.nodemanager.resource-plugins.gpu.path-to-discovery-executables"]
        printed = subprocess.run([f"{found}/nvidia-smi", "-x", "-q"], capture_output=True, check=True).stdout
        assert [d.minor_number for d in parse_nvidia_smi(printed)] == [0, 1]
    without = [s["command"] for n, s in SERVICES.items() if n == "resourcemanager" or n in NODEMANAGERS]
    assert all(c[c.index("--gpus-per-node") + 1] == "0" for c in without), "no GPUs unless asked"


def test_queues_reach_the_rm_and_every_nodemanager(tmp_path: Path, fake_lib: Path) -> None:
    """SUBMARINE_QUEUES=prod:60,research:40: the RM has those queues and preemption on, each NodeManager the
    SIGTERM-to-SIGKILL delay; without it, the one default queue."""
    services = compose({"SUBMARINE_QUEUES": "prod:60,research:40"})["services"]
    for name in ["resourcemanager", *NODEMANAGERS]:
        prepare([str(part) for part in services[name]["command"]], tmp_path / name)
    rm = tmp_path / "resourcemanager" / "conf" / "rm"
    assert site(rm / "capacity-scheduler.xml")["yarn.scheduler.capacity.root.queues"] == "prod,research"
    assert site(rm / "yarn-site.xml")["yarn.resourcemanager.scheduler.monitor.enable"] == "true"
    for name in NODEMANAGERS:
        yarn = site(tmp_path / name / "conf" / "nm-0" / "yarn-site.xml")
        assert yarn["yarn.nodemanager.sleep-delay-before-sigkill.ms"] == "5000", name
    without = [s["command"] for n, s in SERVICES.items() if n == "resourcemanager" or n in NODEMANAGERS]
    assert all(c[c.index("--queues") + 1] == "" for c in without), "one queue unless asked"


def test_the_jobs_directory_is_a_volume_shared_by_the_rm_and_every_node_and_hdfs_keeps_its_own() -> None:
    """A job's driver records how the job ended in the jobs directory, which `job show` reads where `job run`
    ran; the services' and the jobs' files are on HDFS (no volume every node mounts), whose NameNode and
    DataNodes keep their blocks in volumes of their own."""
    env = dockerfile_env()
    for name in ["resourcemanager", *NODEMANAGERS]:
        assert f"jobs:{env['SUBMARINE_JOBS_DIR']}" in SERVICES[name]["volumes"], name
        assert not [v for v in SERVICES[name]["volumes"] if v.startswith("yarn-services:")], name
    hdfs = f"{env['SUBMARINE_CLUSTER_DIR']}/hdfs"
    mounts = [v for name in ("namenode", *DATANODES) for v in SERVICES[name]["volumes"]]
    assert len(DATANODES) >= 2 and len({m.split(":")[0] for m in mounts}) == len(mounts) == 1 + len(DATANODES)
    assert all(m.endswith(f":{hdfs}") for m in mounts)
    assert {m.split(":")[0] for m in mounts} | {"jobs"} == set(COMPOSE["volumes"])
    # `job run` in the RM's container finds the HDFS through the RM's configuration.
    assert SERVICES["resourcemanager"]["environment"]["HADOOP_CONF_DIR"] == f"{env['SUBMARINE_CLUSTER_DIR']}/conf/rm"


def test_ports_and_health_checks_match_the_cluster_spec() -> None:
    spec = ClusterSpec()
    assert SERVICES["resourcemanager"]["ports"] == [f"127.0.0.1:{spec.rm_web_port}:{spec.rm_web_port}"]
    for service in SERVICES.values():
        assert service["environment"]["SUBMARINE_RM_URL"] == f"http://resourcemanager:{spec.rm_web_port}"
    assert f"/dev/tcp/127.0.0.1/{spec.zk_port} " in " ".join(SERVICES["zookeeper"]["healthcheck"]["test"])
    assert " ".join(SERVICES["resourcemanager"]["healthcheck"]["test"]).endswith(f"/{spec.rm_web_port}")
    assert SERVICES["resourcemanager"]["depends_on"]["zookeeper"]["condition"] == "service_healthy"
    for name in NODEMANAGERS:
        assert SERVICES[name]["depends_on"]["resourcemanager"]["condition"] == "service_healthy"
    assert " ".join(SERVICES["namenode"]["healthcheck"]["test"]).endswith(f"/{spec.namenode_web_port}")
    for name in ["resourcemanager", *DATANODES]:
        assert SERVICES[name]["depends_on"]["namenode"]["condition"] == "service_healthy"


def test_every_published_port_is_on_the_hosts_loopback_only() -> None:
    """A port published without an address is open on every interface of the host."""
    published = [(name, port) for name, service in SERVICES.items() for port in service.get("ports", [])]
    assert published
    for name, port in published:
        assert isinstance(port, str) and port.startswith("127.0.0.1:"), f"{name} publishes {port!r} beyond loopback"


def test_the_daemons_and_jobs_run_as_an_unprivileged_user_owning_only_the_volumes() -> None:
    steps = dockerfile()
    users = [args.strip() for instruction, args in steps if instruction == "USER"]
    assert users and users[-1] not in ("root", "0", "0:0"), "the containers would run as root"
    last_user = max(i for i, (instruction, _) in enumerate(steps) if instruction == "USER")
    assert not [args for instruction, args in steps[last_user:] if instruction == "RUN"], "a RUN after USER"
    setup = next(args for instruction, args in steps if instruction == "RUN" and "useradd" in args)
    assert users[-1] in setup.split()
    env = dockerfile_env()
    for directory in (f"{env['SUBMARINE_CLUSTER_DIR']}/hdfs", env["SUBMARINE_JOBS_DIR"]):
        assert directory in setup, f"{directory} is a volume the user must own"
    assert f"chown -R {users[-1]}:{users[-1]} {env['SUBMARINE_CLUSTER_DIR']}" in setup
    assert f"chmod 0700 {env['SUBMARINE_JOBS_DIR']}" in setup
    for service in SERVICES.values():
        assert service.get("user") in (None, users[-1]), "a service overrides the image's user"
        assert not service.get("privileged"), "a privileged container"


def test_the_shared_configuration_refuses_anonymous_web_requests_and_lets_no_user_act_for_others() -> None:
    """Both clusters read this core-site.xml: a REST call without a user is refused, and no proxy user (a
    wildcard let root impersonate anyone from any host) is configured."""
    core = site(ROOT / "submarine_elastic" / "cluster" / "hadoop" / "conf" / "core-site.xml")
    assert core["hadoop.http.authentication.simple.anonymous.allowed"] == "false"
    assert not [name for name in core if name.startswith("hadoop.proxyuser.")]


def test_the_image_copies_what_exists_and_installs_with_the_project_script() -> None:
    steps = dockerfile()
    copies = [shlex.split(args) for instruction, args in steps if instruction == "COPY"]
    assert copies
    for *sources, _dest in copies:
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
    copied = {Path(source).parts[0] for *sources, _ in copies for source in sources}
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    packages = setup["options.packages.find"]["include"].split()
    assert {package.rstrip("*") for package in packages} <= copied
    runs = [args for instruction, args in steps if instruction == "RUN"]
    assert any("scripts/install.sh" in run for run in runs)
    workdir = next(args for instruction, args in steps if instruction == "WORKDIR")
    assert dockerfile_env()["PATH"].startswith(f"{workdir}/.venv/bin:"), "install.sh puts the venv in the repo"
    entrypoint = next(args for instruction, args in steps if instruction == "ENTRYPOINT")
    assert entrypoint == '["submarine"]'
    assert "submarine = submarine_elastic.cli.main:main" in setup["options.entry_points"]["console_scripts"]


def test_the_image_step_that_prepares_the_am_archive_runs(tmp_path: Path, fake_lib: Path) -> None:
    (step,) = [args for instruction, args in dockerfile() if instruction == "RUN" and args.startswith("submarine ")]
    first = shlex.split(step.split("&&")[0].split(">")[0])
    assert first[0] == "submarine"
    args = first[1:]
    at = args.index("--cluster-dir")
    del args[at : at + 2]
    args.remove("--prepare")
    prepare(args, tmp_path / "prepare")
    assert (fake_lib.parent / "service-dep.tar.gz").is_file()


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_dry_run_writes_nothing_and_shows_what_prepare_writes(name: str, tmp_path: Path, fake_lib: Path) -> None:
    """Seen: `cluster daemon --dry-run` rewrote a configuration file. It now only prints."""
    command = [str(part) for part in SERVICES[name]["command"]]
    cluster_dir = tmp_path / "cluster"
    cluster_dir.mkdir()
    (cluster_dir / "keep.txt").write_text("a file of the user's")
    before = tree(tmp_path)
    shown = prepare(command, cluster_dir, "--dry-run")
    assert tree(tmp_path) == before, "--dry-run wrote to disk"
    written = prepare(command, cluster_dir)
    assert shown.splitlines()[-1] == written.splitlines()[-1], "the same command"
    notes = [line for line in shown.splitlines() if line.startswith("# would write ")]
    assert notes and all(Path(line.removeprefix("# would write ")).is_file() for line in notes)
    role = command[2]
    if role != "zookeeper":
        assert "# would pack 1 jars into" in shown
        assert "#   yarn.resourcemanager.hostname=resourcemanager" in shown
    second = prepare(command, cluster_dir, "--dry-run")
    assert "would pack" not in second and "would create" not in second, "the archive and directories exist now"


def test_dry_run_and_prepare_together_are_refused(tmp_path: Path, fake_lib: Path) -> None:
    result = CliRunner().invoke(
        cli, ["cluster", "daemon", "zookeeper", "--dry-run", "--prepare", "--cluster-dir", str(tmp_path)]
    )
    assert result.exit_code != 0 and "choose one" in result.output
    assert list(tmp_path.iterdir()) == [fake_lib]


def test_the_build_context_leaves_out_what_the_image_builds_itself() -> None:
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert {".venv", "build", ".git"} <= ignored


@pytest.mark.parametrize("role", ["namenode", "datanode", "resourcemanager", "nodemanager"])
def test_compose_and_the_cluster_on_hosts_run_each_daemon_with_the_same_command_and_files(
    role: str, tmp_path: Path, fake_lib: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One source: `cluster daemon ROLE` (each compose container) and `cluster up --hosts` start a daemon with
    the same JVM command and write the same configuration files, changing the same settings; only addresses,
    directories and where the log goes differ."""
    name = {"resourcemanager": "rm", "nodemanager": "nm-1", "namenode": "nn", "datanode": "dn-1"}[role]
    service = next(s for s in SERVICES.values() if s["command"][2] == role)
    compose = LocalCluster(tmp_path / "compose")
    args = [str(part) for part in service["command"]]
    node_host = args[args.index("--node-host") + 1] if "--node-host" in args else "resourcemanager"
    plan = compose.daemon_plan(
        role, ClusterSpec(nodes=1, hdfs=True), Placement("zookeeper", "resourcemanager", node_host)
    )

    spawned: list[list[str]] = []
    monkeypatch.setattr(local, "spawn", lambda directory, n, cmd, env, **kw: spawned.append(cmd))
    hosts = LocalCluster(tmp_path / "hosts")
    spec = ClusterSpec(nodes=2, hosts=2, subnet="10.77.0.0/24")
    hosts._start_daemon("java", name, spec)
    tarball = tmp_path / "service-dep.tar.gz"
    files, settings = hosts.conf.daemon_files(name, spec, tarball, node=1 if name[-1] == "1" else None)

    def same(command: list[str] | tuple[str, ...], root: Path, daemon: str) -> list[str]:
        text = [a.replace(str(root), "DIR").replace(daemon, "DAEMON") for a in command]
        return [a.replace("console", "LOG").replace("RFA", "LOG") for a in text if not a.endswith("java")]

    compose_daemon = next(p.parent.name for p in plan.files)
    assert same(plan.command, compose.dir, compose_daemon) == same(spawned[0], hosts.dir, name)
    # The same files, each relative to its daemon's configuration directory.
    assert sorted(str(p.relative_to(compose.dir / "conf" / compose_daemon)) for p in plan.files) == sorted(
        str(p.relative_to(hosts.dir / "conf" / name)) for p in files
    )
    for path, changed in plan.settings.items():
        ours = settings[hosts.dir / "conf" / name / path.name]
        # The compose daemons also listen on every interface (bind-host): the hosts' bind their own address.
        assert set(ours) == {k for k in changed if not k.endswith("bind-host")}, path.name
