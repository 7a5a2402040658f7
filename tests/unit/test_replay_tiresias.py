"""The live ``tiresias`` baseline against a fake cluster: the simulator's Tiresias decides, the replay submits,
suspends (stops the service) and resumes (starts it again) whole jobs, each at its submitted size with a
checkpoint every commit; a resumed job's step log is checked across its suspension; the simulator beside it
runs the same Tiresias."""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from submarine_elastic.replay.plan import plan_replay
from submarine_elastic.replay.records import JobRecord, LiveRun, ReplayRunError
from submarine_elastic.replay.report import summary, utilisation
from submarine_elastic.replay.runner import CHECKPOINT_EVERY, LiveReplay
from submarine_elastic.replay.simulate import measured_costs, scheduler_for, simulate_plan
from submarine_elastic.replay.steplog import read_step_log
from submarine_elastic.replay.tiresias import THRESHOLD_GPU_S, LiveJob, LiveTiresias
from submarine_elastic.sim import ResizeCosts, Tiresias

HEADER = "name,time,application,num_replicas,batch_size\n"


def make_plan(tmp_path: Path, rows: str, time_scale: float = 0.01):
    path = tmp_path / "w.csv"
    path.write_text(HEADER + rows)
    return plan_replay(str(path), time_scale=time_scale, nodes=2, gpus_per_node=2)


@dataclass
class Worker:
    ready_count: int


@dataclass
class Status:
    is_terminal: bool
    workers: int

    @property
    def state(self) -> str:
        return "STOPPED" if self.is_terminal else "STABLE"

    def component(self, name: str) -> Worker | None:
        return Worker(self.workers) if name == "worker" else None


@dataclass
class FakeYarn:
    """The services as the replay sees them: each RUNNING with its workers, or STOPPED; every stop and start."""

    states: dict[str, bool] = field(default_factory=dict)  # service -> stopped
    calls: list[tuple[str, str]] = field(default_factory=list)

    def status(self, name: str) -> Status:
        return Status(self.states[name], 0 if self.states[name] else 2)

    def stop(self, name: str, *, wait: bool = True) -> None:
        assert not wait  # the replay never blocks its loop on YARN
        self.calls.append(("stop", name))

    def start(self, name: str, *, wait: bool = True) -> None:
        assert not wait
        self.calls.append(("start", name))


class FakePool:
    """Runs nothing: records what the replay submits."""

    def __init__(self) -> None:
        self.submitted: list[str] = []

    def submit(self, fn: Callable[[JobRecord], None], record: JobRecord) -> concurrent.futures.Future[None]:
        self.submitted.append(record.job.name)
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        done.set_result(None)
        return done


def test_tiresias_decisions_are_the_simulators():
    """Arrival order within the first queue; a running job that no longer fits behind an earlier one is
    suspended; a job past the threshold drops to the second queue, behind every job of the first."""
    tiresias = LiveTiresias(nodes=2, gpus_per_node=2, time_scale=0.001)
    assert isinstance(tiresias.scheduler, Tiresias)
    assert tiresias.scheduler.threshold_gpu_s == pytest.approx(THRESHOLD_GPU_S * 0.001)  # 57.6 GPU-s

    def job(name: str, workers: int, holding: bool, attained: float = 0.0) -> LiveJob:
        return LiveJob(name, "cifar10", ord(name), workers, 512, holding, attained)

    # a holds 2, b (4) waits, c (2) fits beside a: c starts, b waits (no entry for it).
    first = tiresias.decide(10.0, [job("a", 2, True), job("b", 4, False), job("c", 2, False)])
    assert (first.start, first.suspend) == (("c",), ())
    # a is gone: b, earlier than c, takes the four GPUs and c is suspended.
    tiresias.finished("a")
    second = tiresias.decide(20.0, [job("b", 4, False), job("c", 2, True)])
    assert (second.start, second.suspend) == (("b",), ("c",))
    # b has attained more than the threshold: demoted, c goes first again and b is suspended.
    third = tiresias.decide(30.0, [job("b", 4, True, attained=60.0), job("c", 2, False)])
    assert (third.start, third.suspend) == (("c",), ("b",))


def test_a_tiresias_job_is_submitted_at_its_size_with_a_checkpoint_every_commit(tmp_path: Path):
    p = make_plan(tmp_path, "a,0,cifar10,2,512\n")
    replay = LiveReplay(p, "tiresias", rm_url="http://x", out=tmp_path)
    args = replay.job_run_args(p.jobs[0])
    assert "--elastic" not in args and args[args.index("--num_workers") + 1] == "2"
    assert args[args.index("--checkpoint_path") + 1] == str(tmp_path / "a" / "checkpoint")
    assert args[args.index("--checkpoint_every") + 1] == str(CHECKPOINT_EVERY) == "1"
    assert replay.records[0].service.startswith("t") and not replay.elastic
    static = LiveReplay(p, "static", rm_url="http://x", out=tmp_path).job_run_args(p.jobs[0])
    assert "--checkpoint_path" not in static


@pytest.mark.parametrize(
    ("policy", "message"),
    [("fifo", r"'fifo' is a simulator baseline.*'static'.*'tiresias'"), ("nope+goodput", r"'nope\+goodput'.*nope")],
)
def test_a_policy_without_a_live_run_is_refused_before_anything_runs(tmp_path: Path, policy: str, message: str):
    p = make_plan(tmp_path, "a,0,cifar10,1,512\n")
    with pytest.raises(ReplayRunError, match=message):
        LiveReplay(p, policy, rm_url="http://127.0.0.1:1", out=tmp_path)


def test_tiresias_suspends_a_job_whole_and_resumes_it_from_its_checkpoint(tmp_path: Path):
    """On a fake cluster of 4 GPUs: a (2) and c (2) run while b (4) waits; when a ends, b starts and c is
    suspended (its service stopped); when b ends, c is resumed (its service started again) and runs to its end.
    Its GPU-seconds held count only while it holds them; every suspension and resumption is a decision."""
    p = make_plan(tmp_path, "a,0,cifar10,2,512\nb,1,cifar10,4,512\nc,2,cifar10,2,512\n")
    replay = LiveReplay(p, "tiresias", rm_url="http://x", out=tmp_path, say=lambda line: None)
    assert replay.tiresias is not None
    a, b, c = replay.records
    yarn, pool = FakeYarn(), FakePool()
    pending: dict[str, concurrent.futures.Future[None]] = {}
    queue: list[JobRecord] = []

    def round_at(now: float) -> None:
        for record in replay.records:
            if record.job.arrival_s <= now and record not in queue and record.submitted_s is None:
                queue.append(record)
        replay._tiresias_round(replay.tiresias, yarn, now, queue, pool, pending)  # type: ignore[arg-type]
        for record in replay.records:
            if record.service in pending:
                del pending[record.service]
                record.created = True
                yarn.states[record.service] = False
        replay._look(yarn, 0.0)  # type: ignore[arg-type]

    round_at(a.job.arrival_s)
    round_at(c.job.arrival_s)
    assert pool.submitted == ["a", "c"] and b.submitted_s is None
    yarn.states[a.service] = True  # a ends
    round_at(10.0)
    assert a.ended_s is not None
    round_at(11.0)  # b, earlier than c, takes the 4 GPUs: c is stopped
    assert pool.submitted == ["a", "c", "b"] and yarn.calls == [("stop", c.service)]
    assert c.suspending and c.stopped_s == [11.0] and c.holding_since is None
    assert c.attained_gpu_s == pytest.approx(2 * (11.0 - c.job.arrival_s), rel=0.05)
    yarn.states[c.service] = True  # YARN has it stopped: suspended, not ended
    round_at(12.0)
    assert c.suspended and c.ended_s is None and not c.suspending
    attained = c.attained_gpu_s
    round_at(30.0)
    assert c.attained(30.0) == attained  # held nothing while suspended
    yarn.states[b.service] = True  # b ends; c is resumed
    round_at(40.0)
    round_at(41.0)
    assert yarn.calls == [("stop", c.service), ("start", c.service)] and c.resumed_s == [41.0]
    assert c.resuming and c.ended_s is None  # its status still says STOPPED: not its end
    yarn.states[c.service] = False
    round_at(42.0)
    assert not c.resuming
    yarn.states[c.service] = True
    round_at(50.0)
    assert c.ended_s is not None and all(r.ended_s is not None for r in replay.records)
    assert [(before, after) for _, before, after, _ in replay._decisions["c"]] == [(0, 2), (2, 0), (0, 2)]
    assert "preempts" in replay._decisions["c"][1][3] and "checkpoint" in replay._decisions["c"][2][3]
    assert c.as_dict()["suspended_s"] == [11.0] and c.as_dict()["resumed_s"] == [41.0]


def write_run(path: Path, steps: range, epoch_of: Callable[[int], int], t0: float, per: int = 2) -> None:
    lines = []
    for i, step in enumerate(steps):
        batch = [(step * per + k) % 8 for k in range(per)]
        lines.append(json.dumps({"step": step, "epoch": epoch_of(step), "rank": 0, "size": 1, "ids": batch,
                                 "batch": batch, "time": t0 + i}))  # fmt: skip
    path.write_text("\n".join(lines) + "\n")


def test_a_resumed_jobs_step_log_holds_every_step_and_sample_once_across_its_suspension(tmp_path: Path):
    """The first run logged steps 0-5, its last checkpoint was at step 4; resumed at 15 s, the second run logs
    4-7. Steps 4 and 5 of the first run were trained again from the checkpoint: left out, counted, and every
    other check holds. Without the resumption's time, the same log is a step trained twice."""
    log = tmp_path / "log"
    log.mkdir()
    epoch_of = lambda step: step // 4  # noqa: E731 - 4 steps of 2 samples an epoch of 8
    write_run(log / "steps-100.jsonl", range(6), epoch_of, 1.0)
    write_run(log / "steps-200.jsonl", range(4, 8), epoch_of, 20.0)
    steps = read_step_log(log, dataset_samples=8, resumed=[15.0])
    assert steps.problems == [] and steps.rolled_back == 2
    assert steps.samples == 16 and len(steps.times) == 8 and steps.times[4] == 20.0
    assert any("logged it twice" in p for p in read_step_log(log, dataset_samples=8).problems)
    # A resumption from an older checkpoint than the last committed step would lose nothing; one that skips
    # steps is named.
    write_run(log / "steps-200.jsonl", range(7, 8), epoch_of, 20.0)
    assert read_step_log(log, 8, resumed=[15.0]).problems == ["committed steps missing: [6]"]


def tiresias_run(tmp_path: Path) -> LiveRun:
    p = make_plan(tmp_path, "a,0,cifar10,2,512\nb,1,cifar10,4,512\n")
    a, b = (JobRecord(j, f"t0000-{j.name}") for j in p.jobs)
    a.submitted_s, a.first_step_s, a.last_step_s, a.state = 0.0, 20.0, 80.0, "SUCCEEDED"
    a.ring = [(20.0, 2), (30.0, 2), (60.0, 2), (80.0, 2)]
    a.stopped_s, a.resumed_s, a.resumed_step_s = [35.0], [50.0], [60.0]
    b.submitted_s, b.first_step_s, b.last_step_s, b.state = 35.0, 45.0, 49.0, "SUCCEEDED"
    b.ring = [(45.0, 4), (49.0, 4)]
    return LiveRun("tiresias", p, 0.0, [a, b], {"a": [(35.0, 2, 0, "tiresias preempts it")]}, 90.0)


def test_a_suspended_jobs_jct_counts_its_suspension_and_its_gpus_do_not(tmp_path: Path):
    run = tiresias_run(tmp_path)
    s = summary(run)
    assert s["mean_jct_s"] == pytest.approx((80.0 + 49.0 - run.records[1].job.arrival_s) / 2, abs=0.01)
    assert s["suspensions"] == 1
    # a trains 2 GPUs over 20-35 s and 60-80 s (suspended from 35 s to its first step after resuming), b 4 over 45-49
    assert utilisation(run, 80.0) == pytest.approx((2 * 15 + 2 * 20 + 4 * 4) / 4 / 80, rel=0.02)


def test_the_simulator_beside_a_live_tiresias_run_uses_its_restart_cost(tmp_path: Path):
    run = tiresias_run(tmp_path)
    measured = measured_costs([run])
    # starts: a 20 - 0, b 45 - 35, and a's resumption 60 - 50
    assert (measured.starts, measured.start_s, measured.restarts, measured.restart_s) == (3, 10.0, 1, 10.0)
    assert "restart 10.0 s (1)" in measured.describe()
    scheduler = scheduler_for(run.plan, "tiresias")
    assert isinstance(scheduler, Tiresias) and scheduler.threshold_gpu_s == pytest.approx(THRESHOLD_GPU_S * 0.01)
    result = simulate_plan(run.plan, "tiresias", measured.costs(ResizeCosts()), 2.0)
    assert result.summary.jobs == 2 and result.summary.mean_jct_s > 0
