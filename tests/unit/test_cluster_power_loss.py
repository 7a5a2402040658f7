"""What ``cluster up`` does over the directory of a cluster that died (a power loss, a reboot): whether it starts
the same cluster again with its state, and what stale pieces it clears (the integration test is
tests/integration/test_power_loss.py)."""

from __future__ import annotations

import threading
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import cast

import pytest

from submarine_elastic import resources
from submarine_elastic.cluster.api import ClusterSpec, ClusterSpecChangedError, Daemon, QueueSpec
from submarine_elastic.cluster.processes import clear_container_pid_files
from submarine_elastic.cluster.state import ZK_DATA, StateFile, recovery
from submarine_elastic.elastic.adoption import Adopter
from submarine_elastic.elastic.ringhost import AgentHandle, AgentRegistry
from submarine_elastic.protocol.api import JobPhase, WorkerState
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.protocol.records import RING_GONE, DriverState

SPEC = ClusterSpec(nodes=2, port_base=21000, queues=(QueueSpec("prod", 60), QueueSpec("research", 40)))


def _died(directory: Path, spec: ClusterSpec = SPEC) -> StateFile:
    """A cluster directory as a power loss leaves it: the state file with its daemons (all dead), ZooKeeper's data."""
    directory.mkdir(parents=True, exist_ok=True)
    state = StateFile(directory / "cluster.json")
    state.write(spec, [Daemon("zk", 999_999, 1, directory / "logs" / "zk.log")])
    (directory / ZK_DATA).mkdir(parents=True)
    return state


def test_a_dead_cluster_with_its_state_is_started_again(tmp_path: Path):
    state = _died(tmp_path)
    again, why = recovery(state, SPEC, tmp_path / ZK_DATA)
    assert again
    assert why == "ZooKeeper's data (the RM's applications) and the NodeManagers' recovery state kept"


def test_nothing_recorded_starts_afresh_silently(tmp_path: Path):
    # Never started, or stopped by `down` (which removes the state file).
    assert recovery(StateFile(tmp_path / "cluster.json"), SPEC, tmp_path / ZK_DATA) == (False, "")


def test_zookeepers_data_gone_starts_afresh_saying_why(tmp_path: Path):
    state = _died(tmp_path)
    (tmp_path / ZK_DATA).rmdir()
    again, why = recovery(state, SPEC, tmp_path / ZK_DATA)
    assert not again
    assert "ZooKeeper's data" in why and "starting afresh" in why


def test_an_unreadable_state_file_starts_afresh_saying_why(tmp_path: Path):
    state = _died(tmp_path)
    state.path.write_text('{"spec": {"nodes": "two"')
    again, why = recovery(state, SPEC, tmp_path / ZK_DATA)
    assert not again
    assert str(state.path) in why and "unreadable" in why


def test_other_options_are_refused_naming_each_difference(tmp_path: Path):
    state = _died(tmp_path)
    other = ClusterSpec(nodes=3, port_base=21000)
    with pytest.raises(ClusterSpecChangedError) as err:
        recovery(state, other, tmp_path / ZK_DATA)
    message = str(err.value)
    assert "nodes 2 -> 3" in message and "queues" in message and "--fresh" in message
    assert "port_base" not in message


def test_pid_files_of_the_dead_containers_are_cleared_but_not_an_exit_code(tmp_path: Path):
    private = tmp_path / "nm-0" / "local" / "nmPrivate" / "application_1_0001"
    lost = private / "container_1_0001_01_000002" / "container_1_0001_01_000002.pid"
    ended = private / "container_1_0001_01_000003" / "container_1_0001_01_000003.pid"
    for pid_file in (lost, ended):
        pid_file.parent.mkdir(parents=True)
        pid_file.write_text("12345\n")
    ended.with_name(ended.name + ".exitcode").write_text("0")
    assert clear_container_pid_files(tmp_path) == [lost]
    assert not lost.exists() and ended.exists()


def test_a_new_application_master_waits_briefly_for_containers_that_are_gone():
    site = ET.parse(resources.hadoop_conf() / "yarn-site.xml").getroot()
    values = {p.findtext("name"): p.findtext("value") for p in site}
    # After a power loss no container comes back: the default (120 s) would hold every job that long.
    assert int(values["yarn.service.container-recovery.timeout.ms"] or 0) <= 30_000
    assert values["yarn.resourcemanager.recovery.enabled"] == "true"
    assert values["yarn.nodemanager.recovery.enabled"] == "true"


def _relaunched_after_a_loss(previous: DriverState) -> tuple[Adopter, AgentRegistry]:
    """A relaunched driver's adoption where its predecessor's ring is gone: as many new workers' agents attached
    as it had (so the wait for that ring ends at once)."""
    registry = AgentRegistry()
    for i in range(previous.world_size or previous.target):
        registry.add(AgentHandle(f"a{i}", f"worker-{i}", f"c-new-{i}", "h", state=WorkerState.WARM))
    return Adopter(registry, previous, 1), registry


def test_a_whole_ring_lost_without_a_checkpoint_ends_the_job_naming_what_was_lost(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("SUBMARINE_CHECKPOINT_PATH", raising=False)
    adopter, _registry = _relaunched_after_a_loss(DriverState(app="a", target=2, world_size=2))
    assert not adopter.await_ring(threading.Event())
    assert adopter.lost.startswith("the whole job was lost: no worker of its ring of 2")
    assert "--checkpoint_path" in adopter.lost


def test_a_whole_ring_lost_with_a_checkpoint_forms_a_new_ring(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("SUBMARINE_CHECKPOINT_PATH", str(tmp_path / "ckpt"))
    for commits in (10, 5):
        (tmp_path / "ckpt").mkdir(exist_ok=True)
        (tmp_path / "ckpt" / f"ckpt-{commits:012d}.npz").write_bytes(b"")
    (tmp_path / "ckpt" / ".ckpt-000000000015.npz.tmp").write_bytes(b"")  # one being written: not whole yet
    adopter, registry = _relaunched_after_a_loss(DriverState(app="a", target=2, world_size=2))
    assert not adopter.await_ring(threading.Event())
    assert adopter.lost == "" and not registry.adopting
    assert adopter.resumed == (
        "no worker of its ring outlived the previous driver (a ring of 2; the whole job was lost, or stopped, at "
        f"once): a new ring resumes from the newest checkpoint, of commit 10 ({tmp_path / 'ckpt'})"
    )


def test_a_ring_lost_before_its_first_checkpoint_starts_from_step_0(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("SUBMARINE_CHECKPOINT_PATH", str(tmp_path / "ckpt"))
    adopter, _registry = _relaunched_after_a_loss(DriverState(app="a", target=1, world_size=1))
    assert not adopter.await_ring(threading.Event())
    assert adopter.lost == "" and adopter.resumed.endswith(
        f"starts from step 0: no checkpoint in {tmp_path / 'ckpt'} yet"
    )


def test_a_predecessor_that_never_formed_a_ring_lost_nothing(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("SUBMARINE_CHECKPOINT_PATH", raising=False)
    adopter, _registry = _relaunched_after_a_loss(DriverState(app="a", target=1, world_size=0))
    assert not adopter.await_ring(threading.Event())
    assert adopter.lost == ""


def test_a_loss_a_predecessor_concluded_is_concluded_again(monkeypatch: pytest.MonkeyPatch):
    # After a power loss the NodeManager relaunches the driver's container, which ends the job; the service's new
    # ApplicationMaster, which never knew that container, starts another driver: it ends the job the same way.
    monkeypatch.delenv("SUBMARINE_CHECKPOINT_PATH", raising=False)
    first, _registry = _relaunched_after_a_loss(DriverState(app="a", target=1, world_size=1))
    first.await_ring(threading.Event())
    again, _registry = _relaunched_after_a_loss(DriverState(app="a", target=1, world_size=0, error=first.lost))
    assert not again.await_ring(threading.Event())
    assert again.lost == first.lost


def test_job_show_says_what_a_ring_formed_anew_resumed_from():
    from submarine_elastic.cli import jobview

    reason = f"{RING_GONE} (a ring of 2; the whole job was lost, or stopped, at once): a new ring resumes from x"
    st = pb.JobStatus(
        phase=cast(pb.JobPhase, JobPhase.RUNNING.wire),
        world_size=2,
        target=2,
        incarnations=[pb.DriverIncarnation(number=1, started=100.0), pb.DriverIncarnation(number=2, started=200.0)],
        timeline=[
            pb.ResizeEvent(time=150.0, from_workers=0, to_workers=2, reason=f"{RING_GONE} (an older one)"),
            pb.ResizeEvent(time=201.0, from_workers=0, to_workers=2, reason=reason),
        ],
    )
    with jobview.console.capture() as captured:
        jobview.print_driver_view(st)
    lines = captured.get().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("driver: incarnation 2 "))
    assert " ".join(" ".join(lines[at + 1 : at + 3]).split()).startswith(reason)
    assert "(an older one)" not in " ".join(lines[: at + 3])
