"""The controller on the real pseudo-cluster: capacity counted from the nodes' memory and vcores; a job
arriving to a full cluster starts at once by taking workers from an elastic job above its minimum, and
gives them back when it leaves."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import ClusterSpec
from submarine_elastic.controller import locate
from submarine_elastic.controller.api import ControllerError, JobSource, JobState
from submarine_elastic.controller.client import ControllerClient
from submarine_elastic.controller.store import ControllerStore
from submarine_elastic.daemon import process
from submarine_elastic.submit.client import JobClient
from submarine_elastic.yarn import YarnServiceClient
from tests.integration.conftest import cli_args, eventually

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def submarine(*args: str) -> str:
    result = CliRunner().invoke(cli, cli_args(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def run_job(name: str, work: Path, *flags: str, memory_mb: int = 1024) -> None:
    cmd = (
        f"{sys.executable} {REPO}/examples/train_elastic.py --samples 2048 --epochs 1000 --step-sleep 0.05 "
        f"--until-file {work}/stop --log-dir {work}/log"
    )
    submarine(
        "job",
        "run",
        "--name",
        name,
        "--worker_resources",
        f"memory-mb={memory_mb},vcores=1",
        "--worker_launch_cmd",
        cmd,
        *flags,
    )


def connect(directory: Path) -> ControllerClient:
    """The running controller, through its API (what the CLI and the bridge use)."""
    client = ControllerClient.connect(directory)
    assert client is not None, "no controller runs"
    return client


def wait_applied(ctl: ControllerClient, job: str, count: int, timeout: float = 120) -> list[tuple[int, int, bool]]:
    """The job's decisions once ``count`` of them are applied (the controller marks them after the ring confirms)."""

    def decided() -> list[tuple[int, int, bool]] | None:
        decisions = [(d.from_workers, d.to_workers, d.applied) for d in ctl.timeline(job)]
        return decisions if sum(applied for *_, applied in decisions) >= count else None

    return eventually(decided, f"{count} applied decisions of {job}", timeout)


def wait_ring(job: JobClient, size: int, timeout: float = 240) -> None:
    eventually(lambda: job.status().world_size == size, f"{job.job} reaching {size} workers", timeout)


def test_an_arrival_takes_workers_from_an_elastic_job_and_gives_them_back(
    controller_dir: Path, cluster_spec: ClusterSpec, tmp_path: Path
):
    """Capacity counted from the nodes (no --capacity): workers of 2048 MB, 1 vcore on NodeManagers of
    4096 MB, 4 vcores, where each job's ApplicationMaster and driver (512 MB, 1 vcore each) also take room.
    The elastic job asks for 4 and gets what fits (2 or 3, as YARN placed its AM and driver); the
    controller withdraws the rest of its request. A fixed-size job of one worker arrives to the full
    cluster: the elastic job goes down as far as needed for the arrival's worker and, where the room left
    beside the elastic job's AM and driver has too few vcores, for the arrival's AM and driver (to 1; or to
    2 of 3, seen in CI, as YARN had placed the containers by then) — and gets its workers back when the
    arrival leaves. The controller, SIGKILLed while that resize is in flight, comes back, adopts the driver's
    target, counts the resize applied once YARN and the ring have it, and resizes nothing."""
    out = submarine("controller", "start", "--policy", "static", "--interval", "1")
    assert "controller running" in out
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with YarnServiceClient(cluster_spec.rm_url, poll_interval=0.5) as yarn:
        try:
            run_job(
                "ctl-elastic",
                tmp_path / "a",
                "--elastic",
                "--num_workers",
                "4",
                "--min_workers",
                "1",
                "--max_workers",
                "4",
                "--policy",
                "greedy",
                memory_mb=2048,
            )
            ctl = connect(controller_dir)
            [(asked, fits, applied)] = wait_applied(ctl, "ctl-elastic", 1)
            assert asked == 4 and fits in (2, 3) and applied, ctl.timeline("ctl-elastic")
            assert f"only {fits} of its 4 workers fit (2048 MB, 1 vcore each" in ctl.timeline("ctl-elastic")[0].reason
            job = ctl.job("ctl-elastic")
            assert (job.state, job.source, job.policy) == (JobState.RUNNING, JobSource.CLI, "greedy")
            with JobClient("ctl-elastic", yarn, locate_timeout=120) as elastic:
                wait_ring(elastic, fits)
                assert "ctl-elastic" in submarine("controller", "status")
                # A fixed-size job arrives to the full cluster: it does not wait for the elastic one.
                run_job("ctl-fixed", tmp_path / "b", "--num_workers", "1", memory_mb=2048)
                with JobClient("ctl-fixed", yarn, locate_timeout=120) as fixed:
                    wait_ring(fixed, 1)
                    # 1, or 2 where YARN had placed the arrival's AM beside the elastic job's before the round.
                    shrunk = elastic.status().world_size
                    assert 1 <= shrunk < fits
                assert wait_applied(ctl, "ctl-elastic", 2) == [(4, fits, True), (fits, shrunk, True)]
                gave = fits - shrunk
                assert ctl.timeline("ctl-elastic")[1].reason == f"fair share: gives {gave} to ctl-fixed ({gave})"
                shown = submarine("job", "show", "ctl-elastic")
                assert "controller decisions" in shown
                # It leaves: the elastic job is given its workers back.
                submarine("job", "kill", "ctl-fixed")
                assert ctl.job("ctl-fixed").state is JobState.FINISHED  # told by job kill, not found out later
                # The room comes back as YARN frees the arrival's containers: one grow or several, one at a time.
                grow = eventually(lambda: ctl.timeline("ctl-elastic")[2:], "a grow back decided", 60, interval=0.1)[0]
                assert grow.from_workers == shrunk and shrunk < grow.to_workers <= fits, grow
                # The controller dies while YARN starts the containers and the ring re-forms; it comes back,
                # takes the driver's target as the job's, follows the resize to its end and undoes nothing.
                assert not grow.applied, f"YARN and the ring had {grow.to_workers} workers at once: nothing in flight"
                ctl.close()
                killed = locate.running(controller_dir)
                assert killed is not None
                os.kill(killed.pid, signal.SIGKILL)
                eventually(
                    lambda: locate.running(controller_dir) is None, "the killed controller gone", 10, interval=0.1
                )
                submarine("controller", "start", "--policy", "static", "--interval", "1")
                ctl = connect(controller_dir)
                restarted = locate.running(controller_dir)
                assert restarted is not None and restarted.pid != killed.pid
                assert ctl.job("ctl-elastic").target >= grow.to_workers, "the grow in flight was not adopted"
                wait_ring(elastic, fits)

                def regrown() -> list[tuple[int, int, bool]] | None:
                    after = [(d.from_workers, d.to_workers, d.applied) for d in ctl.timeline("ctl-elastic")[2:]]
                    return after if after[-1][1:] == (fits, True) else None

                after = eventually(regrown, f"ctl-elastic given its {fits} workers back", 120)
                assert after[0] == (shrunk, grow.to_workers, True), after
                assert all(to > start and applied for start, to, applied in after), f"a resize was undone: {after}"
                driver = [(e.from_workers, e.to_workers) for e in elastic.status().timeline]
                since = driver[driver.index((shrunk, grow.to_workers)) :]
                assert all(to > start for start, to in since), f"the driver was resized down after the grow: {driver}"
                ctl.close()
        finally:
            for name in ("ctl-elastic", "ctl-fixed"):
                yarn.destroy(name, missing_ok=True)
    status = submarine("controller", "status", "--all")
    assert "ctl-elastic" in status and "controller running" in status
    assert "controller stopped" in submarine("controller", "stop")
    assert locate.running(controller_dir) is None


def test_scaling_efficiency_resizes_a_job_on_its_own(controller_dir: Path, cluster_spec: ClusterSpec, tmp_path: Path):
    """A job that does not scale (its steps are dominated by a fixed sleep) is probed with one more worker,
    measured, and given the worker back, by the policy alone."""
    submarine("controller", "start", "--interval", "1", "--cooldown", "5", "--capacity", "4")
    (tmp_path / "job").mkdir()
    policy = "scaling-efficiency(probe_every_steps=30, threshold=0.7)"
    with YarnServiceClient(cluster_spec.rm_url, poll_interval=0.5) as yarn:
        try:
            run_job(
                "ctl-probe",
                tmp_path / "job",
                "--elastic",
                "--num_workers",
                "1",
                "--min_workers",
                "1",
                "--max_workers",
                "2",
                "--policy",
                policy,
            )
            with connect(controller_dir) as ctl:
                eventually(
                    lambda: len([d for d in ctl.timeline("ctl-probe") if d.applied]) >= 2,
                    "the policy probing a second worker and giving it back",
                    timeout=300,
                    interval=1,
                )
                probe, back = ctl.timeline("ctl-probe")[:2]
            assert (probe.from_workers, probe.to_workers) == (1, 2)
            assert (back.from_workers, back.to_workers) == (2, 1)
            assert "probing" in probe.reason and back.reason
            # The throughput history by world size, as the controller keeps it (read-only: it is the controller's).
            saved = ControllerStore(controller_dir / locate.DB, readonly=True)
            throughput = saved.throughput("ctl-probe")
            saved.close()
            assert {1, 2} <= set(throughput), throughput
        finally:
            yarn.destroy("ctl-probe", missing_ok=True)


def test_a_controller_that_cannot_start_says_why_and_one_that_runs_is_not_started_twice(tmp_path: Path):
    """No cluster needed: the controller starts against a ResourceManager that does not answer."""
    where = tmp_path / "controller"
    with pytest.raises(ControllerError, match="(?s)exited with status 2.*no policy named 'nope'"):
        process.start("http://127.0.0.1:9", policy="nope", directory=where, timeout=60)
    assert locate.running(where) is None
    first = process.start("http://127.0.0.1:9", directory=where, timeout=60)
    try:
        assert process.start("http://127.0.0.1:9", directory=where) == first
        assert (where / locate.API_TOKEN).stat().st_mode & 0o777 == 0o600
    finally:
        assert process.stop(where)
    assert not process.stop(where)


#: tgkill(2): a signal to one thread of a process (what the kernel may do with a process's SIGTERM).
_TGKILL = {"x86_64": 234, "aarch64": 131}


def test_a_sigterm_taken_by_any_of_its_threads_stops_the_controller(tmp_path: Path):
    """Seen: `controller stop` timed out and the controller ran on, its SIGTERM taken by a gRPC thread while
    the main thread, which alone runs Python's signal handlers, slept in an untimed wait."""
    import ctypes
    import platform

    import psutil

    if platform.machine() not in _TGKILL:
        pytest.skip(f"no tgkill number known for {platform.machine()}")
    where = tmp_path / "controller"
    info = process.start("http://127.0.0.1:9", directory=where, timeout=60)
    daemon = psutil.Process(info.pid)
    other = next(t.id for t in daemon.threads() if t.id != info.pid)
    try:
        assert ctypes.CDLL(None).syscall(_TGKILL[platform.machine()], info.pid, other, signal.SIGTERM) == 0
        gone, _ = psutil.wait_procs([daemon], timeout=20)
        assert gone, "the controller ignored a SIGTERM that a thread other than its main one took"
    finally:
        if daemon.is_running():
            daemon.kill()
    assert locate.running(where) is None and not (where / locate.STATE).exists()
