"""The chaos run's parts that need no cluster: the catalogue's draws, finding a job's processes from YARN's
container paths, reading a step log's newest step, and the checker's verdicts and table."""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from submarine_elastic.chaos import ChaosRun, Injected, catalogue
from submarine_elastic.chaos import check as chaos_check
from submarine_elastic.chaos.catalogue import draw, select
from submarine_elastic.chaos.targets import AGENT, DAEMON, HOST, PROD, TRAINING, Target, job_processes, newest_step
from submarine_elastic.cluster.api import DaemonStartError
from submarine_elastic.controller.api import DecisionRecord, DecisionState
from submarine_elastic.elastic.reconcile import REQUEUED
from submarine_elastic.protocol.api import JobPhase
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.protocol.records import JobOutcome
from submarine_elastic.replay.plan import ReplayJob
from submarine_elastic.replay.records import JobRecord
from submarine_elastic.submit.jobfiles import HdfsJobFiles
from submarine_elastic.submit.jobspec import outcome_path


class FakeWorld:
    """The processes a draw sees: given per role."""

    def __init__(self, by_role: dict[str, list[Target]], services: list[str] = ()) -> None:
        self.by_role = by_role
        self.services = list(services)

    def targets(self, role: str) -> list[Target]:
        return self.by_role.get(role, [])

    def running_services(self) -> list[str]:
        return self.services

    def job_limits(self, service: str) -> tuple[int, int] | None:
        return (1, 4) if service in self.services else None


def test_a_draw_takes_only_kinds_that_have_a_target_and_repeats_with_its_seed() -> None:
    world = FakeWorld({TRAINING: [Target(TRAINING, "j/c1", 11, "j"), Target(TRAINING, "j/c2", 12, "j")]})
    kinds = catalogue(random.Random(0))
    draws = [draw(kinds, world, rng) for rng in (random.Random(3), random.Random(3))]
    assert draws[0] is not None and draws[0] == draws[1]
    kind, target = draws[0]
    assert kind.name in ("kill-training", "stop-training") and target.pid in (11, 12)
    assert draw(kinds, FakeWorld({}), random.Random(0)) is None


def test_a_daemon_kind_hits_only_its_daemon() -> None:
    world = FakeWorld({DAEMON: [Target(DAEMON, "zk", 1), Target(DAEMON, "rm", 2), Target(DAEMON, "nm-0", 3)]})
    rng = random.Random(0)
    for name, pid in (("kill-rm", 2), ("kill-zk", 1), ("kill-nm", 3)):
        (kind,) = select(catalogue(rng), [name])
        assert [draw([kind], world, rng)[1].pid for _ in range(5)] == [pid] * 5  # type: ignore[index]


def test_hdfs_host_and_queue_kinds_hit_only_what_the_cluster_has() -> None:
    daemons = [Target(DAEMON, "nn", 1), Target(DAEMON, "dn-0", 2), Target(DAEMON, "dn-1", 3), Target(DAEMON, "rm", 4)]
    world = FakeWorld({DAEMON: daemons, HOST: [Target(HOST, "host-1", 0), Target(HOST, "host-2", 0)]})
    rng = random.Random(0)
    (nn,) = select(catalogue(rng), ["kill-nn"])
    assert {draw([nn], world, rng)[1].name for _ in range(10)} == {"nn"}  # type: ignore[index]
    (dn,) = select(catalogue(rng), ["kill-dn"])
    assert {draw([dn], world, rng)[1].name for _ in range(30)} == {"dn-0", "dn-1"}  # type: ignore[index]
    for name in ("kill-host", "cut-host"):
        (kind,) = select(catalogue(rng), [name])
        assert kind.heal is not None and kind.cluster_wide
        assert {draw([kind], world, rng)[1].name for _ in range(30)} == {"host-1", "host-2"}  # type: ignore[index]
        assert draw([kind], FakeWorld({DAEMON: daemons}), rng) is None  # on loopback: never drawn
    (prod,) = select(catalogue(rng), ["prod-job"])
    assert prod.heal is not None and prod.cluster_wide and prod.hold_s == 60
    assert draw([prod], FakeWorld({PROD: [Target(PROD, "e1-prod-3", 0)]}), rng)[1].name == "e1-prod-3"  # type: ignore[index]
    assert draw([prod], world, rng) is None  # a cluster without a prod queue


def test_select_refuses_an_unknown_kind_naming_the_catalogue() -> None:
    with pytest.raises(ValueError, match=r"no fault kind kill-everything; the catalogue has kill-training, "):
        select(catalogue(random.Random(0)), ["kill-training", "kill-everything"])
    assert [k.name for k in select(catalogue(random.Random(0)), ["kill-rm", "kill-rm"])] == ["kill-rm"]


def test_a_jobs_processes_are_found_under_its_containers_launch_script(tmp_path: Path) -> None:
    cluster_dir = tmp_path / "cluster"
    container = cluster_dir / "nm-1" / "local" / "usercache" / "u" / "appcache" / "application_17_0003"
    script = f"{container}/container_17_0003_01_000002/launch_container.sh"
    child = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', '/x/train_elastic.py']); "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', 'submarine_elastic.elastic.agent']); "
        "time.sleep(60)"
    )
    root = subprocess.Popen([sys.executable, "-c", child, script])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", script.replace("_17_", "_18_")])
    try:
        found: list[Target] = []
        for _ in range(100):  # the children start
            found = job_processes(cluster_dir, {"application_17_0003": "my-job"})
            if {t.role for t in found} == {TRAINING, AGENT}:
                break
            subprocess.run(["sleep", "0.05"], check=True)
        training = [t for t in found if t.role == TRAINING]
        assert len(training) == 1 and training[0].service == "my-job"
        assert training[0].name == "my-job/container_17_0003_01_000002"
        assert all(t.service == "my-job" for t in found)  # never the other application's
        assert sorted(t.role for t in found) == [AGENT, TRAINING]
        assert job_processes(cluster_dir, {}) == []
    finally:
        for proc in (root, other):
            proc.kill()
            proc.wait()


def test_the_newest_step_is_the_latest_rank_line_and_a_line_cut_short_is_skipped(tmp_path: Path) -> None:
    assert newest_step(tmp_path) is None
    (tmp_path / "steps-rank0.jsonl").write_text(
        json.dumps({"step": 4, "time": 100.0, "size": 2}) + "\n" + '{"step": 5, "ti'
    )
    (tmp_path / "steps-rank1.jsonl").write_text(
        json.dumps({"step": 3, "time": 90.0, "size": 2}) + "\n" + json.dumps({"step": 4, "time": 101.5, "size": 3})
        + "\n"
    )  # fmt: skip
    assert newest_step(tmp_path) == (101.5, 3)


def _record(name: str, state: str | None, problems: list[str], ended: bool = True) -> JobRecord:
    job = ReplayJob(name, name, 1, 0.0, "cifar10", 2, 4, 64, 6400, 10.0)
    return JobRecord(job, f"t-{name}", ended_s=10.0 if ended else None, state=state, problems=problems)


def test_the_checker_names_each_job_that_ended_wrong(tmp_path: Path) -> None:
    log = tmp_path / "ok"
    log.mkdir()
    weights = {"a": np.arange(4.0)}
    np.savez(log / "weights-rank0.npz", **weights)
    np.savez(log / "weights-rank1.npz", **weights)
    records = [
        _record("ok", "SUCCEEDED", []),
        _record("failed", "FAILED", []),
        _record("killed", "STOPPED", ["trained 10 of its 6400 samples"]),
        _record("twice", "SUCCEEDED", ["step 7: a rank logged it twice (a committed step trained twice)"]),
        _record("running", None, [], ended=False),
    ]
    found = chaos_check.jobs(records, lambda job: tmp_path / job.name, {"t-killed"})
    assert found == [
        "t-failed: ended FAILED: no reason recorded",
        "t-twice: step 7: a rank logged it twice (a committed step trained twice)",
        "t-twice: no rank wrote its final weights",
        "t-running: did not end",
    ]
    # An interrupted run killed the jobs still running: short of samples is no violation, a step trained twice is.
    twice = "step 3: a rank logged it twice (a committed step trained twice)"
    cut = [_record("cut", None, ["trained 10 of its 6400 samples"], False), _record("cut-twice", None, [twice], False)]
    assert chaos_check.jobs(cut, lambda job: tmp_path / job.name, set(), interrupted=True) == [f"t-cut-twice: {twice}"]


def test_the_checker_names_a_resize_the_controller_recorded_applied_that_no_driver_applied() -> None:
    def decision(time: float, to: int, reason: str, state: DecisionState = DecisionState.APPLIED) -> DecisionRecord:
        error = "gone" if state is DecisionState.FAILED else None
        return DecisionRecord("x", time, 1, to, reason, state=state, error=error)

    timeline = [  # submitted with 2 workers
        pb.ResizeEvent(time=10.0, from_workers=2, to_workers=4, reason="goodput: 4 workers pay"),
        pb.ResizeEvent(time=20.0, from_workers=4, to_workers=3, reason="preempted by YARN: worker-3"),
        pb.ResizeEvent(time=30.0, from_workers=3, to_workers=1, reason=REQUEUED),
    ]
    for name in ("agree", "differ"):
        outcome_path(f"t-{name}").parent.mkdir(parents=True, exist_ok=True)
        outcome_path(f"t-{name}").write_text(
            JobOutcome(job=f"t-{name}", phase=JobPhase.FINISHED, timeline=timeline).model_dump_json()
        )
    decisions = {
        "t-agree": [
            decision(9.0, 4, "goodput: 4 workers pay"),
            decision(12.0, 4, "goodput: keeps 4 workers; batch 128 -> 256"),  # the count it had: batch only
            decision(29.0, 1, "goodput: 1 worker"),  # taken up by a relaunched driver
            decision(25.0, 2, "goodput: 2 workers", DecisionState.FAILED),  # never applied, and says so
        ],
        "t-differ": [
            decision(15.0, 3, "goodput: 3 workers"),  # 3 came from YARN later, not from this
            decision(25.0, 4, "goodput: keeps 4 workers; batch 128 -> 256"),  # the driver had 3 by then
        ],
        "t-none": [decision(9.0, 5, "goodput: 5")],  # no outcome: judged by jobs()
    }
    records = [_record(n, "SUCCEEDED", []) for n in ("agree", "differ", "none")]
    found = chaos_check.controller_agrees(records, lambda service: decisions[service])
    assert found == [
        "t-differ: the controller recorded 1 -> 3 workers applied (goodput: 3 workers); the driver's timeline "
        "has no such resize",
        "t-differ: the controller recorded 1 -> 4 workers applied (goodput: keeps 4 workers; batch 128 -> 256); "
        "the driver's timeline has no such resize",
    ]


def test_the_checker_names_a_jobs_directory_left_on_hdfs_but_not_another_runs() -> None:
    class Hdfs:
        user = "root"

        def __init__(self, names: list[str] | None) -> None:
            self.names = names

        def status(self, path: str) -> dict[str, str] | None:
            return None if self.names is None else {"type": "DIRECTORY"}

        def list(self, path: str) -> dict[str, dict[str, str]]:
            assert self.names is not None and path == "/submarine-jobs/root"
            return {n: {} for n in self.names}

    files = HdfsJobFiles(Hdfs(["t-done", "other-run-job"]), "hdfs://nn:8020")  # type: ignore[arg-type]
    assert chaos_check._on_hdfs(files, {"t-done", "t-gone"}) == [
        "t-done: its files are still on HDFS (/submarine-jobs/root/t-done)"
    ]
    assert chaos_check._on_hdfs(HdfsJobFiles(Hdfs(None), "hdfs://nn:8020"), {"t-done"}) == []  # type: ignore[arg-type]
    assert chaos_check._on_hdfs(None, {"t-done"}) == []  # a cluster without HDFS


def test_weights_that_differ_in_one_value_are_found(tmp_path: Path) -> None:
    np.savez(tmp_path / "weights-rank0.npz", np.zeros(3), np.ones(2))
    np.savez(tmp_path / "weights-rank1.npz", np.zeros(3), np.ones(2))
    assert chaos_check.weights_differ(tmp_path) == ""
    np.savez(tmp_path / "weights-rank2.npz", np.zeros(3), np.array([1.0, 1.0 + 1e-12]))
    assert chaos_check.weights_differ(tmp_path) == "weights-rank2.npz differs from weights-rank0.npz"


def test_the_table_counts_each_kind_and_fits_80_columns() -> None:
    faults = [
        Injected("kill-rm", "rm", None, 10.0, "SIGKILL", 240, recovered_s=40.0),
        Injected("kill-rm", "rm", None, 100.0, "SIGKILL", 240, recovered_s=120.0),
        Injected("kill-training", "j/c", "j", 50.0, "SIGKILL", 180, missing="j: no committed step since"),
    ]
    violations = [*chaos_check.faults(faults), "t-j: ended FAILED: lost"]
    assert violations[0] == "kill-training on j/c at +50 s: not recovered by +230 s (180 s): j: no committed step since"
    shown = chaos_check.table(faults, violations)
    lines = shown.splitlines()
    assert max(map(len, lines)) <= 80
    assert lines[1].split() == ["kill-rm", "2", "2", "25.0", "30.0", "0"]
    assert lines[2].split() == ["kill-training", "1", "0", "-", "-", "1"]
    assert lines[3].split() == ["all", "faults", "3", "2", "1"]
    assert lines[4].split() == ["jobs,", "leftovers", "1"]


def test_a_fault_is_due_at_the_deadline_of_the_last_fault_stacked_on_what_it_touched() -> None:
    """A job re-forming after a killed agent, then the ResourceManager paused: the agent's fault is judged at the
    pause's deadline, not its own. A later fault on another job's process moves nothing; a recovered fault stays."""
    agent = Injected("kill-agent", "a/c1", "a", 100.0, "SIGKILL", 120, ["a"])
    done = Injected("kill-agent", "b/c1", "b", 90.0, "SIGKILL", 120, ["b"], recovered_s=110.0)
    for later in (Injected("kill-training", "c/c2", "c", 150.0, "SIGKILL", 180, ["c"]),
                  Injected("stop-rm", "rm", None, 160.0, "SIGSTOP", 240, ["a", "b"], cluster_wide=True)):  # fmt: skip
        agent.stack(later)
        done.stack(later)
    assert (agent.due_s, agent.stacked) == (400.0, 1)
    assert (done.due_s, done.stacked) == (210.0, 0)
    agent.missing = "a: YARN has 2 READY workers, its ring 3"
    assert chaos_check.faults([agent]) == [
        "kill-agent on a/c1 at +100 s: not recovered by +400 s (120 s, 1 later fault stacked on it): "
        "a: YARN has 2 READY workers, its ring 3"
    ]
    assert chaos_check.faults([agent], interrupted_s=399.0) == []


def test_a_chaos_run_refuses_a_replay_with_no_controller() -> None:
    class Static:
        elastic = False
        policy = "static"

    with pytest.raises(ValueError, match="not 'static'"):
        ChaosRun(Static(), None, duration_s=60, every_s=10, seed=0)  # type: ignore[arg-type]


class FakeDaemon:
    """A daemon as ``LocalCluster.running_daemons`` lists it."""

    def __init__(self, name: str, pid: int = 1) -> None:
        self.name, self.pid = name, pid


class OneRmCluster:
    """A cluster whose one daemon, the ResourceManager, is the process ``rm``; ``restart`` is its heal."""

    def __init__(self, rm: subprocess.Popen[bytes], restart: Callable[[str], None]) -> None:
        self.rm, self.restart = rm, restart

    def running_daemons(self) -> list[FakeDaemon]:
        return [FakeDaemon("rm", self.rm.pid if self.rm.poll() is None else 4242)]


def test_a_daemon_is_not_drawn_again_while_its_heal_starts_it_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ResourceManager killed again while the first kill's heal waited for its NodeManagers left that heal
    waiting on a dead process (seen in a run): a target whose heal is under way is not drawn."""
    rm = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    restarting, restarted = threading.Event(), threading.Event()

    def restart(name: str) -> None:
        restarting.set()
        restarted.wait(10)  # started, waiting for its NodeManagers

    class Replay:
        elastic, policy, records = True, "goodput+goodput", []

    chaos = ChaosRun(Replay(), OneRmCluster(rm, restart), duration_s=60, every_s=10, seed=0, say=lambda line: None)  # type: ignore[arg-type]
    monkeypatch.setattr(chaos, "_unrepaired", lambda services, since: "")
    (kill_rm,) = select(catalogue(random.Random(0)), ["kill-rm"])
    kill_rm = dataclasses.replace(kill_rm, hold_s=0.0)
    try:
        chaos._inject(kill_rm, chaos.targets(DAEMON)[0])
        assert rm.wait(10) == -9
        assert restarting.wait(10)
        assert chaos.targets(DAEMON) == []  # its heal is under way
        restarted.set()
        chaos._watchers[0].join(10)
        assert [t.name for t in chaos.targets(DAEMON)] == ["rm"]
    finally:
        restarted.set()
        rm.kill()


def test_a_heal_whose_daemon_started_while_another_died_is_done_and_one_that_did_not_start_tries_again(
    tmp_path: Path,
) -> None:
    """A DataNode's heal waits for the cluster, and the NameNode is killed meanwhile (seen in a run): the restart
    raises naming the NameNode. The DataNode runs: healed. A daemon that did not start is started again."""

    class Cluster:
        def __init__(self) -> None:
            self.running: list[str] = []
            self.failures = [DaemonStartError("nn", "exited during start", tmp_path / "nn.log", "")]

        def running_daemons(self) -> list[FakeDaemon]:
            return [FakeDaemon(n) for n in self.running]

        def restart(self, name: str) -> None:
            if name == "dn-0":
                self.running.append(name)
            if self.failures:
                raise self.failures.pop()

    class Replay:
        elastic, policy, records = True, "goodput+goodput", []

    cluster = Cluster()
    chaos = ChaosRun(Replay(), cluster, duration_s=60, every_s=10, seed=0, say=lambda line: None)  # type: ignore[arg-type]
    chaos.restart_daemon("dn-0")
    assert cluster.running == ["dn-0"] and cluster.failures == []
    # The NameNode's own start failed (another fault killed a DataNode meanwhile): not running, tried again.
    cluster.failures = [DaemonStartError("dn-1", "exited during start", tmp_path / "dn.log", "")]
    chaos.restart_daemon("nn")
    assert cluster.failures == []


def test_an_interrupted_run_heals_what_it_holds_at_once_and_stops_watching(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C (or SIGTERM) on a chaos run: it ends within seconds (not after its faults' holds and deadlines),
    what a fault holds (a killed daemon to start again) is healed first, and what ran is judged: a fault whose
    deadline had not passed is no violation."""
    rm = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    healed = threading.Event()

    class Replay:
        elastic, policy, records, rm_url = True, "goodput+goodput", [], ""

        def run(self) -> None:
            raise KeyboardInterrupt

        def log_dir(self, job: ReplayJob) -> Path:
            raise AssertionError("no job ran")

    cluster = OneRmCluster(rm, lambda name: healed.set())
    chaos = ChaosRun(Replay(), cluster, duration_s=600, every_s=300, seed=0, say=lambda line: None)  # type: ignore[arg-type]
    monkeypatch.setattr(chaos, "_unrepaired", lambda services, since: "the ResourceManager: not answering")
    (kill_rm,) = select(catalogue(random.Random(0)), ["kill-rm"])
    kill_rm = dataclasses.replace(kill_rm, hold_s=300.0, deadline_s=600.0)
    try:
        chaos._inject(kill_rm, chaos.targets(DAEMON)[0])
        monkeypatch.setattr(chaos, "_applications", dict)
        monkeypatch.setattr(chaos, "_job_files", lambda: None)
        monkeypatch.setattr(chaos, "_controller_agrees", lambda records: [])
        monkeypatch.setattr(chaos_check, "leftovers", lambda *args: [])
        started = time.monotonic()
        result = chaos.run()
        assert time.monotonic() - started < 15
        assert healed.is_set() and chaos.faults[0].recovered_s is None
        assert result.interrupted_s is not None and result.violations == []
        assert result.as_dict()["interrupted_s"] == result.interrupted_s
    finally:
        rm.kill()


def test_an_operators_flex_and_kill_are_the_commands_an_operator_types() -> None:
    calls: list[tuple[str, ...]] = []

    class Operator(FakeWorld):
        def submarine(self, *args: str) -> subprocess.CompletedProcess[str]:
            calls.append(args)
            return subprocess.CompletedProcess(args, 0, "", "")

    world = Operator({}, services=["s-job"])
    flex, kill = select(catalogue(random.Random(5)), ["flex", "kill-job"])
    _, target = draw([flex], world, random.Random(0))  # type: ignore[misc]
    said = flex.inject(world, target)
    (args,) = calls
    assert args[:3] == ("job", "flex", "s-job") and args[3] == "--workers" and args[5] == "--no-wait"
    assert 1 <= int(args[4]) <= 4 and said == f"job flex --workers {args[4]}: exit 0"
    assert kill.ends_job and kill.inject(world, target) == "job kill: exit 0" and calls[-1] == ("job", "kill", "s-job")
