"""The ``pseudo-cluster`` DSE backend with a fake job runner: how a point becomes a job request, how the
loss is watched through a real in-process metrics service, and that a failing point is recorded, cleaned
up after, and does not stop the run."""

from __future__ import annotations

import csv
import logging
import shlex
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
import responses

from submarine_elastic.cluster import LocalCluster
from submarine_elastic.dse import (
    BackendError,
    JobRunner,
    JobState,
    Point,
    PseudoClusterBackend,
    SpaceError,
    make_backend,
    parse_space,
    resolve_rm_url,
    run_space,
    sample_points,
)
from submarine_elastic.dse.pseudo_cluster import METRICS, LossTracker
from submarine_elastic.metrics.proto import metrics_pb2
from submarine_elastic.submit.jobspec import JobRequest
from tf_hooks.api import StepRecord
from tf_hooks.config import MetricsConfig
from tf_hooks.sender import make_sink

RM = "http://rm.test:8088"
PY = shlex.quote(sys.executable)
DECREASING = [2.0, 1.5, 1.0, 0.6, 0.4, 0.3, 0.2, 0.15, 0.1, 0.08]
STOPPED = JobState(True, True, "service state=STOPPED")


class FakeRunner(JobRunner):
    """Jobs that stream the given losses (one point per rank and step) to the endpoint in their env.

    ``end``: the state the job reaches once it has streamed everything (None: it runs until killed).
    ``fail_submit``: submitting raises. Every call is recorded.
    """

    def __init__(
        self,
        losses: list[float] | None = None,
        *,
        end: JobState | None = STOPPED,
        fail_submit: bool = False,
        per_job: dict[str, tuple[list[float], JobState | None]] | None = None,
    ) -> None:
        self.losses = losses if losses is not None else DECREASING
        self.end = end
        self.fail_submit = fail_submit
        self.per_job = per_job or {}
        self.requests: list[JobRequest] = []
        self.killed: list[str] = []
        self.closed = 0
        self._done: dict[str, threading.Event] = {}
        self._stop: dict[str, threading.Event] = {}

    def submit(self, request: JobRequest) -> None:
        self.requests.append(request)
        if self.fail_submit:
            raise BackendError(f"cannot submit job {request.name}: the RM said no")
        done, stop = threading.Event(), threading.Event()
        self._done[request.name], self._stop[request.name] = done, stop
        losses, _ = self.per_job.get(request.name, (self.losses, self.end))
        threading.Thread(target=self._train, args=(request, losses, done, stop), daemon=True).start()

    @staticmethod
    def _train(request: JobRequest, losses: list[float], done: threading.Event, stop: threading.Event) -> None:
        size = request.limits.num
        sinks = [
            make_sink(
                MetricsConfig(
                    endpoint=request.env["SUBMARINE_METRICS_ENDPOINT"],
                    token=request.env["SUBMARINE_METRICS_TOKEN"],
                    job_id=request.name,
                    instance=f"worker-{rank}",
                    flush_interval=0.02,
                )
            )
            for rank in range(size)
        ]
        for step, loss in enumerate(losses):
            if stop.is_set():
                break
            time.sleep(0.02)
            for rank, sink in enumerate(sinks):
                sink.record(
                    StepRecord(
                        step=step,
                        wall_time=time.time(),
                        rank=rank,
                        world_size=size,
                        loss=loss,
                        examples_per_second=100.0,
                        step_time_seconds=0.01,
                        batch_size=32,
                    )
                )
            for sink in sinks:  # each step delivered before the next: the watcher sees the points step by step
                sink.flush(5.0)
        for sink in sinks:
            sink.close(timeout=5.0)
        done.set()

    def state(self, name: str) -> JobState:
        _, end = self.per_job.get(name, (self.losses, self.end))
        if end is not None and self._done[name].is_set():
            return end
        return JobState(False, True, "service state=STABLE")

    def describe(self, name: str) -> str:
        return f"fake job {name}: service state=ACCEPTED"

    def kill(self, name: str) -> None:
        self.killed.append(name)
        if name in self._stop:
            self._stop[name].set()
            self._done[name].wait(10)

    def close(self) -> None:
        self.closed += 1


@pytest.fixture(autouse=True)
def plaintext_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-point metrics services here are plaintext: the hooks use them only when told to."""
    monkeypatch.setenv("SUBMARINE_INSECURE", "1")


def backend(runner: JobRunner, **options: object) -> PseudoClusterBackend:
    settings: dict[str, object] = {"rm_url": RM, "workdir": "/work/here", "poll_s": 0.05, "state_poll_s": 0.1}
    settings.update(options)
    return PseudoClusterBackend(runner=runner, **settings)  # type: ignore[arg-type]


def refuses_connections(endpoint: str) -> bool:
    host, port = endpoint.rsplit(":", 1)
    with socket.socket() as s:
        return s.connect_ex((host, int(port))) != 0


# --- points to job requests ---------------------------------------------------------------------------


def test_a_point_becomes_the_job_request_and_its_metrics_come_from_the_stream():
    runner = FakeRunner()
    b = backend(runner, command="{python} examples/train_elastic.py --epochs 3 --lr {lr}", loss_window=3)
    point = Point({"workers": 2, "batch_size": 128, "commit_interval": 8, "lr": 0.1}, {"target_loss": 0.5})

    metrics = b.measure(point)

    (req,) = runner.requests
    assert req.name == f"dse-{point.point_id}"
    assert req.launch_cmd == f"{PY} examples/train_elastic.py --epochs 3 --lr 0.1 --global-batch 128 --commit-every 8"
    assert (req.limits.num, req.limits.min, req.limits.max) == (2, 1, 2)
    assert req.elastic is True
    assert req.rm_url == RM
    assert req.workdir == Path("/work/here")
    assert (req.resources.memory_mb, req.resources.vcores) == (1024, 1)
    endpoint = req.env["SUBMARINE_METRICS_ENDPOINT"]
    assert endpoint.startswith("127.0.0.1:")
    assert len(req.env["SUBMARINE_METRICS_TOKEN"]) >= 16
    # Mean of the last 3 steps first <= 0.5 at step 5 (0.6, 0.4, 0.3): 6 steps trained.
    assert metrics["reached"] == 1.0
    assert metrics["steps_to_target"] == 6.0
    assert 0.0 < metrics["time_to_target_s"] < 5.0
    assert metrics["final_loss"] == pytest.approx((0.6 + 0.4 + 0.3) / 3)
    assert metrics["samples_per_s"] == pytest.approx(200.0)  # 100/s per rank at world size 2
    assert metrics["world_size"] == 2.0
    assert metrics["startup_s"] >= 0.0
    assert set(metrics) <= set(METRICS)
    assert runner.killed == [req.name]
    assert refuses_connections(endpoint), "the point's metrics service is still up"


def test_each_point_gets_its_own_metrics_service_and_token():
    runner = FakeRunner()
    b = backend(runner)
    b.measure(Point({"workers": 1}, {"target_loss": 0.5}))
    b.measure(Point({"workers": 2}, {"target_loss": 0.5}))
    first, second = runner.requests
    assert first.env["SUBMARINE_METRICS_TOKEN"] != second.env["SUBMARINE_METRICS_TOKEN"]
    assert first.name != second.name


@pytest.mark.parametrize(
    ("values", "command", "limits", "elastic", "launch"),
    [
        ({"workers": 3, "elastic": False}, None, (3, 3, 3), False, "{py} examples/train_elastic.py"),
        ({"workers": 3, "elastic": "fixed"}, None, (3, 3, 3), False, "{py} examples/train_elastic.py"),
        ({"workers": 3, "min_workers": 2, "max_workers": 4}, None, (3, 2, 4), True, "{py} examples/train_elastic.py"),
        (
            {"workers": 2, "batch_per_worker": 32, "commit_every": 2},
            None,
            (2, 1, 2),
            True,
            "{py} examples/train_elastic.py --global-batch 64 --commit-every 2",
        ),
        (
            {"workers": 2.0, "global_batch": 64.0},
            None,
            (2, 1, 2),
            True,
            "{py} examples/train_elastic.py --global-batch 64",
        ),
        (
            {"batch_size": 32, "opt": "sgd momentum"},
            "{python} t.py --gb {batch_size} --opt {opt} --name {job}",
            (1, 1, 1),
            True,
            "{py} t.py --gb 32 --opt 'sgd momentum' --name dse-{pid}",
        ),
        ({"lr": 0.05}, "python t.py --lr {lr:.3f}", (1, 1, 1), True, "python t.py --lr 0.050"),
    ],
)
def test_settings_map_to_limits_and_flags(values, command, limits, elastic, launch):
    b = backend(FakeRunner(), **({"command": command} if command else {}))
    point = Point(values, {"target_loss": 0.1})
    plan = b.plan(point)
    assert (plan.limits.num, plan.limits.min, plan.limits.max) == limits
    assert plan.elastic is elastic
    assert plan.launch_cmd == launch.format(py=PY, pid=point.point_id)
    assert plan.target_loss == 0.1


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"lr": 0.1}, r"lr: neither a job setting nor a placeholder"),
        ({"workers": 1.5}, r"workers must be a whole number, got 1.5"),
        ({"workers": 0}, r"--num_workers must be at least 1"),
        ({"elastic": "maybe"}, r"elastic must be true/false"),
        ({"elastic": False, "workers": 2, "min_workers": 1}, r"min_workers 1 needs elastic"),
        ({"batch_size": 64, "batch_per_worker": 32}, r"give one of batch_size, batch_per_worker"),
        ({"commit_interval": 0}, r"commit_interval must be at least 1"),
        ({"worker_resources": "vcores=1"}, r"--worker_resources: "),
        ({"target_loss": "low"}, r"target_loss must be a number"),
    ],
)
def test_bad_settings_fail_the_point_before_anything_starts(values, message):
    runner = FakeRunner()
    b = backend(runner)
    with pytest.raises(BackendError, match=message):
        b.measure(Point(values, {} if "target_loss" in values else {"target_loss": 0.1}))
    assert runner.requests == [] and runner.killed == []


def test_a_target_loss_is_required():
    with pytest.raises(BackendError, match=r"target_loss is not set \(put it under fixed: or parameters:\)"):
        backend(FakeRunner()).plan(Point({"workers": 1}))


def test_a_placeholder_without_a_setting_is_named():
    b = backend(FakeRunner(), command="python t.py --lr {lr}")
    with pytest.raises(BackendError, match=r"the command uses \{lr\}, which is not set"):
        b.plan(Point({"workers": 1}, {"target_loss": 0.1}))


def test_the_backend_knows_its_settings_and_the_template_placeholders():
    b = backend(FakeRunner(), command="{python} t.py --lr {lr} --name {job}-{point_id}")
    assert {"workers", "batch_size", "elastic", "commit_interval", "target_loss", "lr"} <= b.parameters()
    assert not {"python", "job", "point_id"} & b.parameters()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"command": "  "}, r"needs a command"),
        ({"command": "python t.py {oops"}, r"bad template"),
        ({"job_name": "dse-{lr}"}, r"job_name may only use \{point_id\}"),
        ({"timeout_s": 0}, r"timeout_s must be positive"),
        ({"loss_window": -1}, r"loss_window must be >= 0"),
        ({"worker_resources": "memory-mb=x"}, r"not a number"),
    ],
)
def test_bad_backend_options_are_refused(options, message):
    with pytest.raises(BackendError, match=message):
        backend(FakeRunner(), **options)


# --- watching and the failure path ----------------------------------------------------------------------


def test_a_failing_point_is_recorded_with_its_reason_and_the_run_goes_on(tmp_path: Path):
    space = parse_space(
        {
            "name": "fails",
            "backend": {"type": "pseudo-cluster"},
            "objective": "time_to_target_s",
            "fixed": {"target_loss": 0.5},
            "parameters": {"workers": [1, 2]},
        }
    )
    bad, good = sample_points(space)
    runner = FakeRunner(
        per_job={
            f"dse-{bad.point_id}": ([2.0, 1.9, 1.8], JobState(True, False, "service state=FAILED: worker exited 1")),
        }
    )
    summary = run_space(space, backend(runner, loss_window=2), [bad, good], tmp_path)

    assert (summary.measured, summary.failed) == (2, 1)
    rows = {r["workers"]: r for r in csv.DictReader((tmp_path / "results.csv").open())}
    assert rows["1"]["status"] == "failed"
    assert "ended before reaching loss 0.5" in rows["1"]["error"]
    assert "FAILED: worker exited 1" in rows["1"]["error"]
    assert rows["1"]["time_to_target_s"] == ""
    assert rows["2"]["status"] == "ok" and float(rows["2"]["time_to_target_s"]) > 0
    assert runner.killed == [f"dse-{bad.point_id}", f"dse-{good.point_id}"]
    for req in runner.requests:
        assert refuses_connections(req.env["SUBMARINE_METRICS_ENDPOINT"])


def test_a_refused_submit_fails_the_point_and_still_cleans_up():
    runner = FakeRunner(fail_submit=True)
    with pytest.raises(BackendError, match=r"cannot submit job dse-\w+: the RM said no"):
        backend(runner).measure(Point({"workers": 1}, {"target_loss": 0.5}))
    (req,) = runner.requests
    assert runner.killed == [req.name]
    assert refuses_connections(req.env["SUBMARINE_METRICS_ENDPOINT"])


def test_no_step_within_the_timeout_fails_with_what_the_cluster_says():
    runner = FakeRunner([], end=None)
    with pytest.raises(BackendError, match=r"reported no step within 1 s: fake job dse-\w+: service state=ACCEPTED"):
        backend(runner, timeout_s=0.6).measure(Point({"workers": 1}, {"target_loss": 0.5}))
    assert len(runner.killed) == 1


def test_a_job_that_ends_without_a_step_fails():
    runner = FakeRunner([])
    with pytest.raises(BackendError, match=r"ended without reporting a step: does its command report to"):
        backend(runner).measure(Point({"workers": 1}, {"target_loss": 0.5}))


def test_a_job_that_ends_short_of_the_target_is_measured_as_not_reached():
    runner = FakeRunner([2.0, 1.8, 1.6, 1.4])
    metrics = backend(runner, loss_window=2).measure(Point({"workers": 1}, {"target_loss": 0.5}))
    assert metrics["reached"] == 0.0
    assert "time_to_target_s" not in metrics and "steps_to_target" not in metrics
    assert metrics["steps"] == 4.0
    assert metrics["final_loss"] == pytest.approx(1.5)
    assert metrics["samples_per_s"] == pytest.approx(100.0)


def test_a_timeout_after_some_steps_is_measured_as_not_reached():
    runner = FakeRunner([2.0] * 10, end=None)
    metrics = backend(runner, timeout_s=1.0, loss_window=2).measure(Point({"workers": 1}, {"target_loss": 0.5}))
    assert metrics["reached"] == 0.0 and metrics["steps"] == 10.0
    assert runner.killed


def test_the_store_ema_can_be_the_smoothed_loss():
    runner = FakeRunner([1.0] + [0.01] * 30)
    metrics = backend(runner, loss_window=0).measure(Point({"workers": 1}, {"target_loss": 0.5}))
    assert metrics["reached"] == 1.0
    # EMA with alpha 0.1 from 1.0 towards 0.01 drops below 0.5 after 7 more points.
    assert metrics["steps_to_target"] == pytest.approx(8.0, abs=1.0)


def test_interrupting_a_point_still_kills_the_job_and_stops_the_service():
    class Interrupted(FakeRunner):
        def state(self, name: str) -> JobState:
            raise KeyboardInterrupt

    runner = Interrupted([], end=None)
    with pytest.raises(KeyboardInterrupt):
        backend(runner).measure(Point({"workers": 1}, {"target_loss": 0.5}))
    (req,) = runner.requests
    assert runner.killed == [req.name]
    assert refuses_connections(req.env["SUBMARINE_METRICS_ENDPOINT"])


def test_a_job_that_cannot_be_removed_keeps_its_measurement_and_warns(caplog: pytest.LogCaptureFixture):
    class Sticky(FakeRunner):
        def kill(self, name: str) -> None:
            super().kill(name)
            raise BackendError(f"cannot remove job {name}: RM timeout")

    with caplog.at_level(logging.WARNING, logger="submarine_elastic.dse.pseudo_cluster"):
        metrics = backend(Sticky(), loss_window=3).measure(Point({"workers": 1}, {"target_loss": 0.5}))
    assert metrics["reached"] == 1.0
    assert "may still run: cannot remove job" in caplog.text


def test_an_unknown_setting_in_the_space_stops_the_run_before_any_job(tmp_path: Path):
    space = parse_space(
        {
            "name": "s",
            "backend": {"type": "pseudo-cluster"},
            "fixed": {"target_loss": 0.5},
            "parameters": {"policy": ["fifo", "greedy"]},
        }
    )
    runner = FakeRunner()
    with pytest.raises(BackendError, match=r"the pseudo-cluster backend has no setting policy"):
        run_space(space, backend(runner), sample_points(space), tmp_path)
    assert runner.requests == []


# --- the smoothed loss ----------------------------------------------------------------------------------


def recorded(step: int, loss: float, wall: float, rank: int = 0) -> metrics_pb2.RecordedPoint:
    return metrics_pb2.RecordedPoint(
        worker=metrics_pb2.WorkerRef(instance=f"w{rank}", rank=rank),
        world_size=2,
        point=metrics_pb2.StepPoint(step=step, wall_time=wall, loss=loss, step_time_seconds=0.5),
    )


def test_the_window_averages_ranks_then_steps_and_decides_on_full_windows_only():
    t = LossTracker(target=1.0, window=2)
    t.add([recorded(0, 0.5, 10.0)])
    assert not t.reached and t.smoothed is None  # one step: not a full window
    t.add([recorded(1, 2.0, 11.0), recorded(1, 1.0, 11.1, rank=1)])  # step 1: (2 + 1) / 2
    assert t.smoothed == pytest.approx((0.5 + 1.5) / 2) and t.reached
    assert (t.reached_at, t.reached_step, t.first_start) == (11.1, 1, 9.5)


def test_a_recomputed_step_replaces_the_rolled_back_one():
    t = LossTracker(target=0.1, window=2)
    t.add([recorded(0, 1.0, 1.0), recorded(1, 1.0, 2.0), recorded(2, 1.0, 3.0)])
    t.add([recorded(1, 0.1, 4.0), recorded(2, 0.05, 5.0)])  # after a rollback to step 1
    assert t.reached and t.reached_step == 2 and t.reached_at == 5.0
    assert t.last_step == 2


def test_the_tracker_refuses_bad_targets():
    with pytest.raises(ValueError, match="finite"):
        LossTracker(float("nan"), 1)
    with pytest.raises(ValueError, match="loss_window"):
        LossTracker(1.0, -1)


# --- the ResourceManager and the space file -------------------------------------------------------------


def test_the_rm_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SUBMARINE_RM_URL", "http://env-rm:8088")
    assert resolve_rm_url(probe=False) == "http://env-rm:8088"
    assert resolve_rm_url("http://given:1", probe=False) == "http://given:1"


def test_without_an_rm_the_error_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv("SUBMARINE_RM_URL", raising=False)
    with pytest.raises(
        BackendError, match=r"set SUBMARINE_RM_URL or start the pseudo-cluster with `submarine cluster up`"
    ):
        resolve_rm_url(cluster=LocalCluster(tmp_path / "none"))


def test_a_recorded_but_stopped_cluster_is_not_used(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv("SUBMARINE_RM_URL", raising=False)
    cluster = LocalCluster(tmp_path / "c")
    cluster.dir.mkdir()
    cluster.state_file.write_text(
        '{"spec": {"port_base": 23000}, "daemons": [{"name": "rm", "pid": 999999999, "start_ticks": 1, "log": "x"}]}'
    )
    with pytest.raises(BackendError, match=r"is not running: start it with `submarine cluster up`"):
        resolve_rm_url(cluster=cluster)


@responses.activate
def test_the_rm_is_asked_for_its_version_first():
    responses.get(f"{RM}/app/v1/services/version", json={"hadoop_version": "3.3.6"})
    assert resolve_rm_url(RM) == RM
    responses.get("http://dead:8088/app/v1/services/version", body=requests.ConnectionError("refused"))
    with pytest.raises(BackendError, match=r"no ResourceManager answers at http://dead:8088"):
        resolve_rm_url("http://dead:8088")


def test_a_space_file_names_the_backend_and_its_options(tmp_path: Path):
    space = parse_space(
        {
            "name": "real",
            "backend": {
                "type": "pseudo-cluster",
                "command": "{python} examples/train_elastic.py --epochs 5",
                "timeout_s": 120,
                "loss_window": 5,
                "env": {"TF_CPP_MIN_LOG_LEVEL": "2"},
                "rm_url": RM,
                "workdir": str(tmp_path),
            },
            "objective": "time_to_target_s",
            "fixed": {"target_loss": 0.2},
            "parameters": {"workers": [1, 2], "batch_size": [32, 64]},
        }
    )
    assert space.backend == "pseudo-cluster"
    b = make_backend(space.backend, dict(space.backend_options))
    assert isinstance(b, PseudoClusterBackend)
    assert (b.rm_url, b.timeout_s, b.loss_window, b.workdir) == (RM, 120.0, 5, str(tmp_path))
    assert b.env == {"TF_CPP_MIN_LOG_LEVEL": "2"}
    assert parse_space({"name": "s", "backend": "pseudo-cluster", "parameters": {"workers": [1]}}).backend == (
        "pseudo-cluster"
    )


def test_a_space_file_with_an_unknown_backend_option_is_refused():
    with pytest.raises(SpaceError, match=r"pseudo-cluster\.colour: Extra inputs are not permitted"):
        parse_space(
            {"name": "s", "backend": {"type": "pseudo-cluster", "colour": "red"}, "parameters": {"workers": [1]}}
        )


def test_the_run_stops_before_any_job_when_no_cluster_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv("SUBMARINE_RM_URL", raising=False)
    space = parse_space(
        {"name": "s", "backend": "pseudo-cluster", "fixed": {"target_loss": 0.5}, "parameters": {"workers": [1]}}
    )
    backend = make_backend(space.backend, dict(space.backend_options))  # asks nobody yet
    with pytest.raises(BackendError, match=r"start the pseudo-cluster with `submarine cluster up`"):
        run_space(space, backend, sample_points(space), tmp_path)
    assert not (tmp_path / "results.csv").exists()


def test_a_finished_space_resumes_without_a_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv("SUBMARINE_RM_URL", raising=False)
    space = parse_space(
        {"name": "s", "backend": "pseudo-cluster", "fixed": {"target_loss": 0.5}, "parameters": {"workers": [1]}}
    )
    points = sample_points(space)
    assert run_space(space, backend(FakeRunner(), loss_window=3), points, tmp_path).measured == 1
    summary = run_space(space, PseudoClusterBackend(), points, tmp_path)
    assert (summary.measured, summary.skipped) == (0, 1)
