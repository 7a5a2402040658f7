"""Integration tests run against a real pseudo-cluster, started once per test session.

It uses its own directory and port base (``SUBMARINE_TEST_PORT_BASE``, default 19000), so it does
not collide with a cluster the developer has up on the default ports.

Under pytest-xdist (``make test`` runs ``-n 2 --dist loadscope``) each worker is a session of its own, whose
clusters take the ports :data:`WORKER_PORT_STRIDE` above the previous worker's; a worker runs a test module
start to end (its module fixtures made once), and the modules on the session's cluster on hosts
(:data:`~tests.integration.hosts.ON_HOSTS`) all on one worker, so that cluster is started once.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import signal
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import psutil
import pytest
from click.testing import CliRunner
from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import ClusterSpec, LocalCluster
from submarine_elastic.yarn import ServiceState, YarnServiceClient
from tests.integration.hosts import ON_HOSTS, HostsCluster, HostsClusters, can_make_hosts

#: Between the port bases of two pytest-xdist workers: above the highest port a session takes (its cluster on
#: hosts at +1300, see tests/integration/hosts.py).
WORKER_PORT_STRIDE = 2000


def _worker_index() -> int:
    """0, or N for pytest-xdist's worker ``gwN``."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0


PORT_BASE = int(os.environ.get("SUBMARINE_TEST_PORT_BASE", "19000")) + WORKER_PORT_STRIDE * _worker_index()
#: Query of a REST call to the ResourceManager or a NodeManager: the cluster refuses anonymous requests (401).
AS_USER = {"user.name": "test"}

T = TypeVar("T")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The test that takes the session's cluster on hosts down (``hosts_cluster_down``) runs after every other."""
    down = [item for item in items if item.get_closest_marker("hosts_cluster_down")]
    items[:] = [item for item in items if item not in down] + down


#: What a failed test's report shows of each job driver that logged during it: its last lines, from so many.
DRIVER_LOG_TAIL_LINES = 40
DRIVER_LOGS_SHOWN = 3


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report ends with the tail of every job driver's log written to while it ran (the
    containers' ``stderr.txt`` under the session's clusters): what the driver saw is gone with the cluster."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if call.when != "call" or not report.failed:
        return
    base = item.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    found = {path.resolve() for path in base.glob("*/**/logs/application_*/container_*/stderr.txt")}  # no links
    logs = [
        path for path in found if path.stat().st_mtime >= call.start and " driver " in path.read_text(errors="replace")
    ]
    for path in sorted(logs, key=lambda p: p.stat().st_mtime)[-DRIVER_LOGS_SHOWN:]:
        tail = path.read_text(errors="replace").splitlines()[-DRIVER_LOG_TAIL_LINES:]
        report.sections.append((f"driver log {path.parent.name} (last {len(tail)} lines)", "\n".join(tail)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadscope``: a worker runs a whole module, and the modules on hosts as one unit."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "hosts" if Path(module).name in ON_HOSTS else module

    return ModuleScheduling(config, log)


@pytest.fixture(scope="session")
def cluster_spec() -> ClusterSpec:
    return ClusterSpec(nodes=2, node_memory_mb=4096, node_vcores=4, port_base=PORT_BASE)


@pytest.fixture(scope="session")
def yarn_cluster(tmp_path_factory: pytest.TempPathFactory, cluster_spec: ClusterSpec) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster"))
    cluster.up(cluster_spec, timeout=240)
    try:
        yield cluster
    finally:
        cluster.down()


@contextlib.contextmanager
def own_cluster(tmp_path_factory: pytest.TempPathFactory, name: str, spec: ClusterSpec) -> Iterator[LocalCluster]:
    """A module's pseudo-cluster of its own, in a temporary directory ``name``; down at the end unless a test took
    it down itself (a power loss leaves no state file)."""
    cluster = LocalCluster(tmp_path_factory.mktemp(name))
    cluster.up(spec, timeout=240)
    try:
        yield cluster
    finally:
        if cluster.state_file.exists():
            cluster.down()


@pytest.fixture(scope="session")
def _hosts_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostsClusters]:
    if not can_make_hosts():
        pytest.skip("hosts are network namespaces: root and iproute2 (CI runs as root)")
    with HostsClusters(tmp_path_factory, PORT_BASE) as clusters:
        yield clusters


@pytest.fixture()
def hosts_cluster(_hosts_clusters: HostsClusters) -> HostsCluster:
    """The session's 3-host cluster (``tests/integration/hosts.py``), started on first use and again only if a test
    took it down; skipped without root or ``ip``."""
    return _hosts_clusters.running()


@pytest.fixture()
def yarn(yarn_cluster: LocalCluster, cluster_spec: ClusterSpec) -> Iterator[YarnServiceClient]:
    with YarnServiceClient(cluster_spec.rm_url, poll_interval=0.5) as client:
        yield client


@pytest.fixture()
def controller_dir(
    yarn_cluster: LocalCluster, cluster_spec: ClusterSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """A controller directory of the test's own, named by SUBMARINE_CONTROLLER_DIR (with the session cluster's
    SUBMARINE_RM_URL) for the controller the test starts; the controller is stopped afterwards."""
    from submarine_elastic.daemon import process

    directory = tmp_path / "controller"
    monkeypatch.setenv("SUBMARINE_CONTROLLER_DIR", str(directory))
    monkeypatch.setenv("SUBMARINE_RM_URL", cluster_spec.rm_url)
    yield directory
    process.stop(directory)


#: Horovod's background thread wakes every HOROVOD_CYCLE_TIME ms (1 by default) to coordinate the ring, even
#: while the training loop sleeps: measured on this 2-core machine, a rank of a two-rank ring that allreduces
#: a small tensor every 30 ms used 20-25 % of a core by default and 7-8 % at 10 ms. The test jobs run several
#: rings beside the cluster's daemons on two cores, so each job the tests submit runs at 10 ms.
TEST_JOB_ENV = ("--env", "HOROVOD_CYCLE_TIME=10")


def cli_args(args: Sequence[str]) -> list[str]:
    """``args`` of a ``submarine`` command, with :data:`TEST_JOB_ENV` given to a ``job run``."""
    args = list(args)
    if args[:2] == ["job", "run"] and not any(a.startswith("HOROVOD_CYCLE_TIME=") for a in args):
        return [*args[:2], *TEST_JOB_ENV, *args[2:]]
    return args


def submarine(rm_url: str, *args: str) -> str:
    """Run the ``submarine`` command in-process against ``rm_url``; a non-zero exit fails the test."""
    result = CliRunner().invoke(cli, cli_args(args), env={"SUBMARINE_RM_URL": rm_url}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def run_job(
    rm_url: str,
    name: str,
    command: str,
    *,
    workers: int = 2,
    env: dict[str, str] | None = None,
    flags: tuple[str, ...] = (),
) -> str:
    """``submarine job run --elastic`` of ``command`` with 1..3 workers of 1024 MB and 1 vcore."""
    return submarine(
        rm_url,
        "job",
        "run",
        "--name",
        name,
        "--elastic",
        "--num_workers",
        str(workers),
        "--min_workers",
        "1",
        "--max_workers",
        "3",
        "--worker_resources",
        "memory-mb=1024,vcores=1",
        "--worker_launch_cmd",
        command,
        *[arg for k, v in (env or {}).items() for arg in ("--env", f"{k}={v}")],
        *flags,
    )


def committed_steps(log_dir: Path) -> dict[int, list[dict]]:
    """A training script's step log (``steps-*.jsonl``, one JSON record per rank and step) by step number."""
    steps: dict[int, list[dict]] = collections.defaultdict(list)
    for path in log_dir.glob("steps-*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            steps[record["step"]].append(record)
    return dict(steps)


def eventually(check: Callable[[], T], what: str, timeout: float, interval: float = 0.5) -> T:
    """Call ``check`` every ``interval`` s until it returns something true, and return that; fail naming
    ``what`` when ``timeout`` s pass first. What ``check`` raises (a failed assert) ends the wait at once."""
    retrying = Retrying(
        stop=stop_after_delay(timeout), wait=wait_fixed(interval), retry=retry_if_result(lambda answer: not answer)
    )
    try:
        return retrying(check)
    except RetryError as exc:
        raise AssertionError(f"{what} within {timeout} s") from exc


def wait_finished(yarn: YarnServiceClient, name: str, timeout: float = 180) -> None:
    """Block until the job's service ended; a FAILED end fails the test."""

    def ended() -> ServiceState | str | None:
        state = yarn.status(name).state
        return state if state in (ServiceState.STOPPED, ServiceState.SUCCEEDED, ServiceState.FAILED) else None

    assert eventually(ended, f"job {name} to finish", timeout, interval=1) != ServiceState.FAILED, f"job {name} failed"


def _below(roots: list[psutil.Process]) -> dict[int, psutil.Process]:
    """``roots`` and every process below them, by pid; never this process or its ancestors."""
    me = psutil.Process()
    spared = {me.pid, *(p.pid for p in me.parents())}
    found: dict[int, psutil.Process] = {}
    for root in roots:
        try:
            family = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        found.update({p.pid: p for p in family if p.pid not in spared})
    return found


def _running(procs: dict[int, psutil.Process]) -> list[int]:
    alive = []
    for pid, proc in procs.items():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.Error:
            continue
    return sorted(alive)


def processes_under(path: Path) -> list[int]:
    """Pids of the processes that work in ``path`` (their working directory is inside it) or name a path
    inside it on their command line, and of every process below those. Never by environment: a process
    started with ``path`` in its environment (a ``make``, a docker image's every process) is not one."""
    root = str(path.resolve())
    names = re.compile(re.escape(root) + r"(/|$)")
    roots = []
    for proc in psutil.process_iter(["cwd", "cmdline"]):
        cwd = proc.info["cwd"] or ""
        if cwd == root or cwd.startswith(root + "/") or any(names.search(a) for a in proc.info["cmdline"] or ()):
            roots.append(proc)
    return _running(_below(roots))


def sigkill(pids: Sequence[int]) -> None:
    """SIGKILL each of ``pids``, as a machine's failure would; one already gone (it ended when another of them
    did: its NodeManager stops a container whose launch script died) is what was wanted."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def container_processes(container_id: str) -> list[int]:
    """Pids of the processes YARN started for one container: its launch scripts (their command lines name
    the container's directories) and every process below them."""
    marker = f"/{container_id}/"
    roots = [p for p in psutil.process_iter(["cmdline"]) if any(marker in a for a in p.info["cmdline"] or ())]
    return _running(_below(roots))
