"""Hadoop's own ``yarn`` tools on a running elastic job, through ``submarine yarn app ...``: each change has a
defined outcome (the operator's target, or refused and YARN put back), and no change leaves the job converging
for ever.

One job (2 workers, limits 1..3) is reused by the tests in file order: a decommission (2 -> 1), a flex to 3, one to
5 (put back), "-1" (3 -> 2), "+1" (Hadoop's 1), -stop/-start (a new ring at 1), then -destroy. A job of its own,
at 1 worker, is flexed through YARN to none.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import ClusterSpec, LocalCluster
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.submit.client import JobClient
from submarine_elastic.submit.jobspec import job_dir
from submarine_elastic.yarn import ServiceNotFoundError, ServiceState, YarnError, YarnServiceClient
from tests.integration.conftest import committed_steps, container_processes, eventually
from tests.integration.jobcheck import start_job

pytestmark = pytest.mark.integration

NAME = "yarn-tools"


@dataclass
class Job:
    yarn: YarnServiceClient
    cluster: LocalCluster
    rm_url: str
    work: Path

    def hadoop(self, *args: str) -> str:
        """``submarine yarn ARGS...`` against the session's cluster; Hadoop's non-zero exit fails the test."""
        result = CliRunner().invoke(
            cli,
            ["yarn", "--cluster-dir", str(self.cluster.dir), *args],
            env={"SUBMARINE_RM_URL": self.rm_url},
            catch_exceptions=False,
        )
        assert result.exit_code == 0, result.output
        return result.output

    def status(self) -> pb.JobStatus:
        with JobClient(NAME, self.yarn, locate_timeout=120) as client:
            return client.status()

    def settled(self, workers: int, timeout: float = 120) -> pb.JobStatus:
        """Waits until the driver's target is ``workers``, converged (ring and YARN at it), and YARN's desired
        count is ``workers`` too."""

        def at() -> pb.JobStatus | None:
            st = self.status()
            desired = self.yarn.status(NAME).component("worker")
            ok = st.target == workers and st.converged and desired is not None
            return st if ok and desired.number_of_containers == workers else None

        try:
            return eventually(at, f"the job settled at {workers} workers", timeout)
        except Exception as exc:  # the job ended, or never settled: what its driver logged says why
            raise AssertionError(f"{exc}\n--- the job's driver logged:\n{self.driver_log()}") from exc

    def driver_log(self, lines: int = 120) -> str:
        """The last ``lines`` of what the job's driver containers wrote (every attempt's, oldest first)."""
        try:
            app = self.yarn.status(NAME).id
        except YarnError as exc:
            return f"(not read: {exc})"
        found = []
        for script in sorted(self.cluster.dir.glob(f"nm-*/logs/{app}/container_*/launch_container.sh")):
            if "submarine_elastic.elastic.driver" in script.read_text(errors="replace"):
                err = script.with_name("stderr.txt")
                text = err.read_text(errors="replace").splitlines()[-lines:] if err.exists() else []
                found.append(f"[{script.parent.name}]\n" + "\n".join(text))
        return "\n".join(found) or "(no driver container log found)"


@pytest.fixture(scope="module")
def job(
    yarn_cluster: LocalCluster, cluster_spec: ClusterSpec, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Job]:
    work = tmp_path_factory.mktemp("yarn-tools")
    home = tmp_path_factory.getbasetemp() / "submarine-home"
    with pytest.MonkeyPatch.context() as env, YarnServiceClient(cluster_spec.rm_url, poll_interval=0.5) as yarn:
        # The job's files where each test's private state directories (tests/conftest.py) look for them.
        env.setenv("SUBMARINE_JOBS_DIR", str(home / "jobs"))
        env.setenv("SUBMARINE_CA_DIR", str(home / "ca"))
        start_job(cluster_spec.rm_url, NAME, work)
        try:
            with JobClient(NAME, yarn, locate_timeout=120) as client:
                client.wait_for_size(2, timeout=240)
            yield Job(yarn, yarn_cluster, cluster_spec.rm_url, work)
        finally:
            yarn.destroy(NAME, missing_ok=True)


def test_a_decommission_through_yarn_takes_that_worker_out(job: Job):
    st = job.settled(2)
    victim = sorted(w.instance for w in st.workers if w.state == pb.WorkerState.Value("WORKER_RUNNING"))[0]
    job.hadoop("app", "-decommission", NAME, "-instances", victim)
    st = job.settled(1)
    assert st.timeline[-1].reason == f"decommission of {victim} through YARN: 2 -> 1 workers"
    assert victim not in [w.instance for w in st.workers if w.rank >= 0]


def test_a_flex_through_yarn_is_the_operators_target(job: Job):
    before = job.status().version
    job.hadoop("app", "-flex", NAME, "-component", "worker", "3")
    st = job.settled(3)
    assert st.version == before + 1
    assert st.timeline[-1].reason == "flex through YARN: 1 -> 3 workers"
    assert st.world_size == 3


def test_a_flex_outside_the_limits_is_refused_and_put_back(job: Job):
    before = job.status().version
    job.hadoop("app", "-flex", NAME, "-component", "worker", "5")
    st = eventually(
        lambda: (s := job.status()) and "refused" in s.timeline[-1].reason and s, "the refusal in the timeline", 60
    )
    assert "5 is above the job's --max_workers 3; refused, YARN put back to 3" in st.timeline[-1].reason
    st = job.settled(3)
    assert st.version == before  # no target taken


def test_a_relative_flex_down_is_taken_from_the_count_yarn_was_last_flexed_to(job: Job):
    # "-1" is applied by the ResourceManager to the count in the service's saved definition, which each flex
    # (the refused 5, then the driver's put-back to 3) rewrote: 2, within the limits.
    job.hadoop("app", "-flex", NAME, "-component", "worker", "-1")
    st = job.settled(2)
    assert st.timeline[-1].reason == "flex through YARN: 3 -> 2 workers"


def test_plus_one_is_read_by_hadoop_as_the_count_one(job: Job):
    # Hadoop's REST client parses "+1" with Long.parseLong: the absolute count 1, taken as the operator's target.
    job.hadoop("app", "-flex", NAME, "-component", "worker", "+1")
    st = job.settled(1)
    assert st.timeline[-1].reason == "flex through YARN: 2 -> 1 workers"


def test_the_jobs_application_master_logs_into_its_containers_log_directory(job: Job):
    """Where an operator looks when a job misbehaves in YARN: the AM's own log beside its stdout and stderr,
    kept with the container's logs (not in its working directory, which YARN deletes with the application)."""
    app = job.yarn.status(NAME).id
    logs = list(job.cluster.dir.glob(f"nm-*/logs/{app}/container_*_000001/serviceam.log"))
    assert len(logs) == 1, f"no ApplicationMaster log of {app} (or more than one attempt's): {logs}"
    text = logs[0].read_text(errors="replace")
    assert NAME in text and "worker" in text, text[-2000:]


def test_stop_then_start_starts_a_new_ring_and_says_what_is_lost(job: Job):
    job.hadoop("app", "-stop", NAME)
    eventually(lambda: job.yarn.status(NAME).state == ServiceState.STOPPED, "the service stopped", 60)
    job.hadoop("app", "-start", NAME)
    with JobClient(NAME, job.yarn, locate_timeout=180) as client:
        client.wait_for_size(1, timeout=240)  # the count it had, which YARN's saved definition holds too
    (restart,) = [e for e in job.status().timeline if "started again by YARN" in e.reason]
    assert restart.to_workers == 1
    assert "no --checkpoint_path: the training starts again from its first step" in restart.reason
    shown = CliRunner().invoke(cli, ["job", "show", NAME], env={"SUBMARINE_RM_URL": job.rm_url})
    assert shown.exit_code == 0, shown.output
    flat = " ".join(shown.output.replace("│", " ").split())  # the resizes table's reason cells, unwrapped
    assert "started again by YARN" in flat and "what it trained is lost" in flat


def test_destroy_leaves_no_job_files_nor_processes(job: Job):
    containers = [c.id for comp in job.yarn.status(NAME).components for c in comp.containers]
    assert containers
    job.hadoop("app", "-destroy", NAME)
    with pytest.raises(ServiceNotFoundError):
        job.yarn.status(NAME)
    assert not job_dir(NAME).exists()
    assert [p.name for p in job_dir(NAME).parent.iterdir() if p.name.startswith(NAME)] == []
    eventually(lambda: not any(container_processes(c) for c in containers), "the job's processes gone", 30)


def test_a_flex_through_yarn_to_no_worker_ends_a_job_without_checkpoints_saying_what_was_lost(
    yarn_cluster: LocalCluster, cluster_spec: ClusterSpec, tmp_path: Path
):
    # A job of its own, at 1 worker (--min_workers 1): YARN stops the container at once, and the driver's put-back
    # comes too late for what the worker held. The job ended with Horovod's exit codes as its reason, or, when
    # the process left at a commit, SUCCEEDED with its training unfinished.
    name = "yarn-to-none"
    with YarnServiceClient(cluster_spec.rm_url, poll_interval=0.5) as yarn:
        start_job(cluster_spec.rm_url, name, tmp_path, workers=1)
        try:
            with JobClient(name, yarn, locate_timeout=120) as client:
                client.wait_for_size(1, timeout=240)
            Job(yarn, yarn_cluster, cluster_spec.rm_url, tmp_path).hadoop(
                "app", "-flex", name, "-component", "worker", "0"
            )
            ended = (ServiceState.STOPPED, ServiceState.SUCCEEDED, ServiceState.FAILED)
            eventually(lambda: yarn.status(name).state in ended, "the job to end", 120)
            shown = CliRunner().invoke(cli, ["job", "show", name], env={"SUBMARINE_RM_URL": cluster_spec.rm_url})
            flat = " ".join(shown.output.replace("│", " ").split())
            assert "ended: FAILED" in flat, shown.output
            assert "the whole job was lost: YARN stopped worker-0" in flat, shown.output
        finally:
            yarn.destroy(name, missing_ok=True)
    # Nothing trained again from the first step after the loss: each committed step once, by its one worker.
    steps = committed_steps(tmp_path / "log")
    assert steps and all(len(records) == 1 for records in steps.values())
