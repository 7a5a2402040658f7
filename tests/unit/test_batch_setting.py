"""A batch set for a running job: the driver takes it as part of a target (SetTarget, within the job's batch
limits), keeps it in its state file, reports it in Status and sends the target to every agent; an agent hands
it to its training process once that is in a ring; the training process keeps the newest. The pure parts of
the training side:
the learning rate a set batch gets (AdaScale's gain, or the rule's scaling) and the micro-batches of a step."""

from __future__ import annotations

import json
import math
import socket
import threading
from pathlib import Path

import grpc
import numpy as np
import pytest

from submarine_elastic import env
from submarine_elastic.controller.api import ClusterApp, JobBackend, JobFootprint, NodeResources
from submarine_elastic.controller.service import ControllerService
from submarine_elastic.controller.store import ControllerStore
from submarine_elastic.elastic import agent as agent_mod
from submarine_elastic.elastic.driver import JobDriver
from submarine_elastic.elastic.reconcile import MAX_BATCH_TIMELINE
from submarine_elastic.elastic.ringhost import AgentHandle
from submarine_elastic.limits import MAX_ACCUM_STEPS
from submarine_elastic.policy import Decision, JobPolicy, JobView, PolicyEngine, Snapshot, load_arbiter
from submarine_elastic.protocol.api import AgentState, BatchLimits, Limits
from submarine_elastic.protocol.channel import FrameReader, encode
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from tf_hooks.elastic import data, ring
from tf_hooks.elastic.rules import BatchRule, BatchSetting, adascale_gain, ramp_lr

APP = "application_1795518217586_0001"


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class Context:
    """The part of a gRPC servicer context SetTarget uses: abort raises, as gRPC's does."""

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


LIMITS = BatchLimits(32, 512)


def make_driver(state_file: Path | None = None, limits: BatchLimits | None = LIMITS) -> JobDriver:
    return JobDriver(
        "job",
        Limits(2, 1, 3),
        yarn=None,  # type: ignore[arg-type]
        token="t",
        iface="lo",
        elastic_timeout=60,
        state_file=state_file,
        app=APP,
        batch_limits=limits,
    )


def attach(driver: JobDriver, n: int) -> AgentHandle:
    agent = AgentHandle(f"container_{n}-a1", f"worker-{n}", f"container_{n}", "127.0.0.1")
    driver.registry.add(agent)
    return agent


def commands(agent: AgentHandle) -> list[pb.AgentCommand]:
    out = []
    while not agent.commands.empty():
        command = agent.commands.get_nowait()
        assert command is not None
        out.append(command)
    return out


def flex(driver: JobDriver, **fields: object) -> pb.FlexReply:
    return driver.servicer.SetTarget(pb.Target(**fields), Context())  # type: ignore[arg-type]


def test_the_driver_takes_a_batch_setting_reports_it_and_sends_it_to_every_agent() -> None:
    driver = make_driver()
    agents = [attach(driver, 0), attach(driver, 1)]
    flex(driver, workers=2, batch_size=128, accum_steps=1, reason="goodput: noise scale 900 allows batch 128")
    status = driver.servicer.Status(pb.StatusRequest(), None)  # type: ignore[arg-type]
    assert (status.batch.batch_size, status.batch.accum_steps, status.batch.version) == (128, 1, 1)
    assert status.batch.reason == "goodput: noise scale 900 allows batch 128"
    assert (status.min_batch_size, status.max_batch_size) == (32, 512)
    for agent in agents:
        [command] = commands(agent)
        assert command.WhichOneof("command") == "target" and command.target.batch_size == 128

    flex(driver, workers=2, batch_size=256, learning_rate=0.2, reason="operator")
    status = driver.servicer.Status(pb.StatusRequest(), None)  # type: ignore[arg-type]
    assert [(b.version, b.batch_size, b.reason) for b in status.batch_timeline] == [
        (1, 128, "goodput: noise scale 900 allows batch 128"),
        (2, 256, "operator"),
    ]
    assert status.batch.learning_rate == 0.2
    # An agent that attaches later is sent the setting in effect first thing (the driver's Attach does it).
    late = attach(driver, 2)
    late.commands.put(pb.AgentCommand(target=driver.batch_timeline[-1]))
    assert commands(late)[0].target.version == 2
    # A resize alone leaves the batch as it is.
    flex(driver, workers=3)
    assert driver.servicer.Status(pb.StatusRequest(), None).batch.version == 2  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"batch_size": 16}, "batch size 16 is outside the job's [--min_batch_size 32, --max_batch_size 512]"),
        ({"batch_size": 1024}, "batch size 1024 is outside"),
        ({"accum_steps": 2}, "accumulation steps and a learning rate come with a batch size"),
        (
            {"batch_size": 64, "accum_steps": MAX_ACCUM_STEPS + 1},
            f"accumulation steps must lie in [0, {MAX_ACCUM_STEPS}]",
        ),
        ({"batch_size": 64, "learning_rate": math.nan}, "learning rate must be a finite number > 0"),
        ({"batch_size": 64, "learning_rate": -0.1}, "learning rate must be a finite number > 0"),
    ],
)
def test_a_batch_setting_out_of_bounds_is_refused_naming_the_value(fields: dict[str, object], says: str) -> None:
    driver = make_driver()
    agent = attach(driver, 0)
    with pytest.raises(Aborted) as refused:
        flex(driver, workers=2, **fields)
    assert refused.value.code is grpc.StatusCode.INVALID_ARGUMENT and says in refused.value.details
    assert not driver.batch_timeline and not commands(agent)


def test_without_batch_limits_any_batch_is_taken() -> None:
    driver = make_driver(limits=None)
    flex(driver, workers=2, batch_size=100_000)
    assert driver.batch_timeline[-1].batch_size == 100_000


def test_the_batch_timeline_keeps_the_latest_settings_only() -> None:
    driver = make_driver(limits=None)
    for n in range(MAX_BATCH_TIMELINE + 5):
        flex(driver, workers=2, batch_size=n + 1)
    assert len(driver.batch_timeline) == MAX_BATCH_TIMELINE
    assert driver.batch_timeline[-1].version == MAX_BATCH_TIMELINE + 5


def test_a_relaunched_driver_keeps_the_batch_setting_and_its_timeline(tmp_path: Path) -> None:
    state_file = tmp_path / "job.driver.json"
    first = make_driver(state_file)
    flex(first, workers=2, batch_size=64, accum_steps=3, reason="goodput")
    first._persist()
    assert json.loads(state_file.read_text())["batch_timeline"][0]["batch_size"] == 64
    second = make_driver(state_file)
    status = second.servicer.Status(pb.StatusRequest(), None)  # type: ignore[arg-type]
    assert (status.batch.batch_size, status.batch.accum_steps, status.batch.reason) == (64, 3, "goodput")
    flex(second, workers=2, batch_size=96)
    assert second.batch_timeline[-1].version == 2  # versions go on from the predecessor's


def relayed(ours: socket.socket) -> list[pb.ToTraining]:
    ours.settimeout(0.2)
    reader = FrameReader(pb.ToTraining)
    out: list[pb.ToTraining] = []
    try:
        while chunk := ours.recv(65536):
            out += reader.feed(chunk)
    except TimeoutError:
        pass
    return out


def test_the_agent_holds_a_setting_until_its_process_is_in_a_ring_then_relays_each_new_one() -> None:
    worker = agent_mod.Agent("true", "worker-0", "container_0", "127.0.0.1")
    ours, worker.training.channel_end = socket.socketpair()
    setting = pb.Target(workers=2, batch_size=128, accum_steps=1, version=1, reason="goodput")
    worker._handle(pb.AgentCommand(target=setting))
    assert relayed(ours) == []  # the process waits for its slot's environment first
    worker._state = AgentState.WARM
    worker._handle(pb.AgentCommand(start=pb.Start(env={"HOROVOD_RANK": "0"})))
    start, target = relayed(ours)
    assert start == pb.ToTraining(start=pb.Start(env={"HOROVOD_RANK": "0"}))
    assert target == pb.ToTraining(target=setting)  # the same message the driver sent, to the end
    worker._handle(pb.AgentCommand(target=pb.Target(workers=3)))  # a count alone: nothing for the process
    worker._handle(pb.AgentCommand(target=pb.Target(workers=2, batch_size=256, version=3)))
    worker._handle(pb.AgentCommand(target=setting))  # an older one sent again (a re-attach): not relayed
    assert [m.target.version for m in relayed(ours)] == [3]


def test_the_training_process_keeps_the_newest_setting_its_agent_relayed() -> None:
    ours, theirs = socket.socketpair()
    channel = ring.AgentChannel(theirs)
    for version, size in ((2, 256), (1, 128)):
        ours.sendall(encode(pb.ToTraining(target=pb.Target(workers=2, batch_size=size, version=version))))
    ours.sendall(encode(pb.ToTraining(target=pb.Target(workers=2, batch_size=-1, version=3))))  # bad: ignored
    ours.sendall(encode(pb.ToTraining(target=pb.Target(workers=3, version=4))))  # no batch: nothing to take
    replies = FrameReader(pb.FromTraining)

    def answer_ping() -> None:
        while True:
            for message in replies.feed(ours.recv(65536)):
                if message.WhichOneof("message") == "ping":  # else heartbeats
                    ours.sendall(encode(pb.ToTraining(pong=message.ping)))
                    return

    threading.Thread(target=answer_ping, daemon=True).start()
    assert channel.sync()  # everything sent before it has been read
    assert channel.batch == BatchSetting(256, 0, None, version=2)
    ours.close()


def test_the_learning_rate_of_a_set_batch_follows_adascales_gain_or_the_rules_scaling() -> None:
    rule = BatchRule("fixed_global", 64, 0.1)
    assert rule.lr_for_batch(64) == pytest.approx(0.1)
    assert rule.lr_for_batch(256) == pytest.approx(0.4)  # linear without a noise scale
    assert BatchRule("fixed_global", 64, 0.1, lr_scaling="sqrt").lr_for_batch(256) == pytest.approx(0.2)
    assert BatchRule("fixed_global", 64, 0.1, lr_scaling="none").lr_for_batch(256) == pytest.approx(0.1)
    # Gain between 1 (no noise: a bigger batch buys nothing) and the batch ratio (all noise).
    assert adascale_gain(256, 64, 0.0) == pytest.approx(1.0)
    assert adascale_gain(256, 64, 1e12) == pytest.approx(4.0)
    assert rule.lr_for_batch(256, noise_scale=64) == pytest.approx(0.1 * (64 / 64 + 1) / (64 / 256 + 1))
    with pytest.raises(ValueError, match="global_batch must be >= 1"):
        rule.lr_for_batch(0)
    # Momentum compensation: a ramp from the rate in effect to the new one over ramp_steps steps.
    assert [ramp_lr(s, 10, 0.1, 0.3, 4) for s in (10, 12, 14, 20)] == pytest.approx([0.1, 0.2, 0.3, 0.3])


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"batch_size": 0}, "batch size must lie in \\[1, 16777216\\], got 0"),
        ({"batch_size": 8, "accum_steps": -1}, "accumulation steps must lie in \\[0, 1024\\], got -1"),
        ({"batch_size": 8, "learning_rate": math.inf}, "learning rate must be a finite number > 0"),
    ],
)
def test_a_bad_batch_setting_names_the_value(fields: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        BatchSetting(**fields)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="target 7 sets no batch"):
        BatchSetting.from_target(pb.Target(workers=2, accum_steps=1, version=7))


def test_the_micro_batches_of_a_step_cover_its_samples_once_over_every_rank() -> None:
    permutation = data.epoch_permutation(100, epoch=0)
    for micro in (1, 3):
        parts = [data.micro_shards(permutation, 40, 50, micro, rank, 3) for rank in range(3)]
        assert all(len(p) == micro for p in parts)
        ids = np.concatenate([part for rank in parts for part in rank])
        assert sorted(ids.tolist()) == sorted(permutation[40:90].tolist())
    assert [p.tolist() for p in data.micro_shards(permutation, 0, 10, 1, 1, 2)] == [
        data.shard(permutation, 0, 10, 1, 2).tolist()
    ]
    with pytest.raises(ValueError, match="micro_batches must be >= 1"):
        data.micro_shards(permutation, 0, 10, 0, 0, 1)


def test_the_jobs_batch_limits_come_from_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SUBMARINE_MIN_BATCH_SIZE", raising=False)
    monkeypatch.delenv("SUBMARINE_MAX_BATCH_SIZE", raising=False)
    assert env.settings().batch_limits() is None
    monkeypatch.setenv("SUBMARINE_MIN_BATCH_SIZE", "32")
    with pytest.raises(ValueError, match="SUBMARINE_MAX_BATCH_SIZE must be a positive integer, got None"):
        env.settings().batch_limits()
    monkeypatch.setenv("SUBMARINE_MAX_BATCH_SIZE", "256")
    assert env.settings().batch_limits() == (32, 256)
    with pytest.raises(ValueError, match="--min_batch_size 512 is above --max_batch_size 256"):
        BatchLimits(512, 256)


def test_the_same_setting_asked_again_is_no_new_setting() -> None:
    driver = make_driver()
    agent = attach(driver, 0)
    for _ in range(3):  # a controller that restarted, or a retried request
        flex(driver, workers=2, batch_size=128, accum_steps=1, reason="goodput")
    assert [b.version for b in driver.batch_timeline] == [1]
    assert len(commands(agent)) == 1


class BatchPolicy(JobPolicy):
    """Keeps the job's size and asks for a batch of 128 (accumulation 1) until the job reports it."""

    name = "batch-128"
    limits_seen: list[tuple[int | None, int | None]] = []

    def propose(self, job: JobView, snapshot: Snapshot) -> Decision | None:
        self.limits_seen.append((job.min_batch_size, job.max_batch_size))
        return Decision(job.job_id, job.holding, "goodput: batch 128", batch_size=128, accum_steps=1)


class BatchCluster(JobBackend):
    """A job of 2 workers whose driver records each batch setting and resize it is sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[object, ...]] = []

    def nodes(self) -> list[NodeResources] | None:
        raise AssertionError("with --capacity the nodes are not read")

    def footprint(self, job_id: str) -> JobFootprint | None:
        raise AssertionError("with --capacity no footprint is read")

    def ring_size(self, job_id: str) -> int | None:
        return 2

    def set_target(self, job_id: str, target: pb.Target) -> None:
        self.sent.append((job_id, target))

    def batch_limits(self, job_id: str) -> tuple[int, int] | None:
        return (32, 512)

    def cluster_jobs(self) -> dict[str, ClusterApp] | None:
        return None


def test_the_controller_shows_the_policy_the_batch_limits_and_sends_a_batch_to_the_driver_once(tmp_path: Path) -> None:
    cluster = BatchCluster()
    policy = BatchPolicy()
    engine = PolicyEngine(policy, load_arbiter("fair-share"))
    service = ControllerService(ControllerStore(tmp_path / "c.db"), engine, cluster, interval=1, capacity=4)
    service.job_submitted("job", 1, 2, 2)
    [record] = service.tick()
    assert service.wait_idle(10)
    assert (record.from_workers, record.to_workers, record.reason) == (2, 2, "goodput: batch 128")
    sent = [("job", pb.Target(workers=2, batch_size=128, accum_steps=1, reason="goodput: batch 128"))]
    assert cluster.sent == sent
    # The job has not reported the new batch yet, so the policy asks again: nothing is sent twice.
    service.tick()
    assert service.wait_idle(10)
    assert cluster.sent == sent
    # The policy saw the job's batch limits as its driver reports them.
    assert set(policy.limits_seen) == {(32, 512)}
