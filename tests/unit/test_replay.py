"""Live replay: the plan (bad input refused naming the row and value), the step-log checks, the figures and the
simulator on the same plan. The live runs themselves are in tests/integration/test_replay_live.py."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from submarine_elastic.protocol.api import JobPhase
from submarine_elastic.protocol.records import JobOutcome
from submarine_elastic.replay import runner
from submarine_elastic.replay.plan import ReplayError, fitting_sample, plan_replay
from submarine_elastic.replay.records import JobRecord, LiveRun, ReplayRunError, ended_state, load_runs
from submarine_elastic.replay.report import summary, table, utilisation, write
from submarine_elastic.replay.runner import LiveReplay
from submarine_elastic.replay.simulate import ScaledCatalog, measured_costs, simulate_plan
from submarine_elastic.replay.steplog import read_step_log
from submarine_elastic.sim import ResizeCosts, TraceCatalog
from submarine_elastic.submit.jobspec import outcome_path
from submarine_elastic.yarn import RM_UNREACHABLE_EXIT

HEADER = "name,time,application,num_replicas,batch_size\n"


def workload(tmp_path: Path, rows: str) -> str:
    path = tmp_path / "w.csv"
    path.write_text(HEADER + rows)
    return str(path)


def plan(tmp_path: Path, rows: str, **kw):
    kw = {"time_scale": 0.01, "nodes": 2, "gpus_per_node": 4, **kw}
    return plan_replay(workload(tmp_path, rows), **kw)


def test_work_is_the_simulated_jobs_samples_scaled_and_arrivals_scaled(tmp_path: Path):
    p = plan(tmp_path, "a,100,cifar10,2,512\nb,300,ncf,1,32768\n", time_scale=0.02, arrival_scale=0.5, prefix="r-")
    app = TraceCatalog().get("cifar10")
    a, b = p.jobs
    assert (a.name, a.workload_name, a.line) == ("r-a", "a", 2)
    assert a.samples == int(app.samples_to_finish(512) * 0.02)
    assert a.arrival_s == pytest.approx(1.0) and b.arrival_s == pytest.approx(3.0)
    assert a.max_workers == 8  # the cluster's GPUs, below what cifar10 can use
    assert "emulated GPUs" in p.describe()


@pytest.mark.parametrize(
    ("rows", "kw", "message"),
    [
        ("a,0,resnet,1,64\n", {}, r"line 2 \(job 'a'\).*application 'resnet'"),
        (
            "a,0,cifar10,1,512\nbig,5,cifar10,9,2048\n",
            {},
            r"line 3 \(job 'big'\): num_replicas 9 can never fit.*8 GPUs",
        ),
        ("a,0,ncf,1,32768\n", {"time_scale": 1e-6}, r"line 2 \(job 'a'\): time scale 1e-06 leaves \d+ samples.*commit"),
        ("a,0,cifar10,1,512\n", {"gpus_per_node": 0}, r"emulated GPUs.*0 GPU\(s\).*--gpus-per-node"),
        ("a,0,cifar10,1,512\n", {"time_scale": 2.0}, r"--time-scale must be in \(0, 1\], got 2.0"),
        ("a,0,cifar10,1,512\nA,1,cifar10,1,512\n", {}, r"'a' \(line 2\) and 'A' \(line 3\) both become"),
    ],
)
def test_bad_input_is_refused_naming_the_row_and_value(tmp_path: Path, rows: str, kw: dict, message: str):
    with pytest.raises(ReplayError, match=message):
        plan(tmp_path, rows, **kw)


def test_static_and_elastic_submissions(tmp_path: Path):
    p = plan(tmp_path, "a,0,cifar10,2,512\n")
    static = LiveReplay(p, "static", rm_url="http://x", out=tmp_path).job_run_args(p.jobs[0])
    elastic = LiveReplay(p, "goodput+goodput", rm_url="http://x", out=tmp_path).job_run_args(p.jobs[0])
    assert "--elastic" not in static and static[static.index("--num_workers") + 1] == "2"
    assert elastic[elastic.index("--max_workers") + 1] == "8"
    assert elastic[elastic.index("--min_batch_size") + 1] == elastic[elastic.index("--max_batch_size") + 1] == "512"
    command = elastic[elastic.index("--worker_launch_cmd") + 1]
    assert "--emulate cifar10" in command and f"--total-samples {p.jobs[0].samples}" in command
    assert "gpu=1" in elastic[elastic.index("--worker_resources") + 1]
    for args in (static, elastic):  # the emulated device's workers: Horovod's cycle at 10 ms, not its 1
        env = [args[i + 1] for i, a in enumerate(args) if a == "--env"]
        assert "SUBMARINE_EMULATE=cifar10" in env and "HOROVOD_CYCLE_TIME=10" in env
    assert "--queue" not in elastic  # YARN's default queue
    queued = LiveReplay(p, "goodput+goodput", rm_url="http://x", out=tmp_path, queue="research").job_run_args(p.jobs[0])
    assert queued[queued.index("--queue") + 1] == "research"


def test_a_submission_the_resourcemanager_did_not_answer_is_made_again_and_a_refused_one_ends_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """As a user's submission script would: `job run` exiting 69 (the RM is away: a restart, a pause) is tried
    again until it is taken; exiting 1 (refused) is not."""
    p = plan(tmp_path, "a,0,cifar10,2,512\n")
    replay = LiveReplay(p, "goodput+goodput", rm_url="http://x", out=tmp_path, say=lambda line: None)
    monkeypatch.setattr(runner, "SUBMIT_RETRY_EVERY_S", 0.0)
    monkeypatch.setattr(replay, "_held_by_yarn", lambda service: False)
    exits = [RM_UNREACHABLE_EXIT, RM_UNREACHABLE_EXIT, 0]
    calls: list[tuple[str, ...]] = []

    def job_run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        return subprocess.CompletedProcess(args, exits.pop(0), "", "the ResourceManager is unreachable")

    monkeypatch.setattr(replay, "submarine", job_run)
    replay._submit(replay.records[0])
    assert len(calls) == 3 and len(set(calls)) == 1
    exits[:] = [1]
    with pytest.raises(ReplayRunError, match="is unreachable"):
        replay._submit(replay.records[0])
    assert len(calls) == 4


def test_static_admits_in_arrival_order_while_the_workers_fit(tmp_path: Path):
    p = plan(tmp_path, "a,0,cifar10,6,2048\nb,1,cifar10,4,1024\nc,2,ncf,1,32768\n")
    replay = LiveReplay(p, "static", rm_url="http://x", out=tmp_path)
    a, b, c = replay.records
    assert replay._admit([a, b, c]) == [a]
    a.submitted_s = 0.0
    assert replay._admit([b, c]) == []  # c would fit, but no job behind a waiting one starts first (FIFO)
    a.ended_s = 50.0
    assert replay._admit([b, c]) == [b, c]
    assert a.service.startswith("s") and a.service.endswith("-a")
    other = LiveReplay(p, "static", rm_url="http://x", out=tmp_path)
    assert other.records[0].service != a.service  # YARN keeps a stopped service's name: each run its own


def write_log(folder: Path, steps: list[tuple[int, int, list[int], float]], ranks: int = 1) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for step, epoch, batch, t in steps:
        for rank in range(ranks):
            own = batch[rank::ranks]
            lines.append(json.dumps({"step": step, "epoch": epoch, "rank": rank, "size": ranks, "ids": own,
                                     "batch": batch, "time": t}))  # fmt: skip
    (folder / "steps-1.jsonl").write_text("\n".join(lines) + "\n")


def test_step_log_exactly_once_passes_and_each_fault_is_named(tmp_path: Path):
    good = [(0, 0, [0, 1], 1.0), (1, 0, [2, 3], 2.0), (2, 1, [3, 1], 3.0)]
    write_log(tmp_path / "good", good, ranks=2)
    log = read_step_log(tmp_path / "good", dataset_samples=4)
    assert log.problems == [] and log.samples == 6 and log.first_s == 1.0 and log.last_s == 3.0
    write_log(tmp_path / "twice", [(0, 0, [0, 1], 1.0), (1, 0, [1, 2], 2.0), (2, 1, [0], 3.0)])
    assert read_step_log(tmp_path / "twice", 4).problems == ["epoch 0: 1 samples trained twice"]
    write_log(tmp_path / "missed", [(0, 0, [0, 1], 1.0), (1, 1, [0], 2.0)])
    assert read_step_log(tmp_path / "missed", 4).problems == ["epoch 0: 2 samples never trained"]
    write_log(tmp_path / "gap", [(0, 0, [0], 1.0), (2, 0, [1], 2.0)])
    assert read_step_log(tmp_path / "gap", 4).problems == ["committed steps missing: [1]"]


def fake_run(tmp_path: Path, policy: str) -> LiveRun:
    p = plan(tmp_path, "a,0,cifar10,2,512\nb,100,cifar10,4,1024\n")
    a, b = (JobRecord(j, f"e0000-{j.name}") for j in p.jobs)
    a.submitted_s, a.first_step_s, a.last_step_s, a.state = 0.0, 20.0, 60.0, "SUCCEEDED"
    a.ring = [(20.0, 2), (40.0, 4), (41.0, 4), (60.0, 4)]
    b.submitted_s, b.first_step_s, b.last_step_s, b.state = 1.0, 31.0, 101.0, "SUCCEEDED"
    b.ring = [(31.0, 4), (50.0, 4), (101.0, 4)]
    return LiveRun(policy, p, 0.0, [a, b], {"r-a": [(38.0, 2, 4, "goodput: speedup 1.8")]}, 110.0)


def test_figures_of_a_run_and_its_files(tmp_path: Path):
    run = fake_run(tmp_path, "goodput+goodput")
    s = summary(run)
    assert s["mean_jct_s"] == pytest.approx((60.0 + 100.0) / 2)
    assert s["makespan_s"] == 101.0 and s["accelerators"] == "emulated" and s["decisions"] == 1
    # GPUs in a ring over 0..101 s: a 2 for 20 s and 4 for 20 s, b 4 for 70 s; of 8 GPUs
    assert utilisation(run, 101.0) == pytest.approx((2 * 20 + 4 * 20 + 4 * 70) / 8 / 101, rel=0.02)
    paths = write([run], tmp_path / "out", {"goodput+goodput": 85.0})
    data = json.loads(paths["json"].read_text())
    assert "emulated" in data["note"] and data["runs"][0]["jobs_detail"][0]["jct_s"] == 60.0
    assert paths["png"].stat().st_size > 10_000
    text = table([s], {"goodput+goodput": 85.0})
    assert "| goodput+goodput | 2/2 | 80 s |" in text and "emulated" in text
    assert max(len(line) for line in text.splitlines()[2:]) <= 80


def test_costs_measured_from_a_run(tmp_path: Path):
    measured = measured_costs([fake_run(tmp_path, "goodput+goodput")])
    assert measured.starts == 2 and measured.start_s == pytest.approx(25.0)  # 20 - 0 and 31 - 1
    # a's ring grew 2 -> 4 between 20 and 40 s; its steps at 4 are 1 and 19 s apart (median 10)
    assert measured.scale_outs == 1 and measured.scale_out_s == pytest.approx(10.0)
    assert measured.costs().scale_in_s == ResizeCosts().scale_in_s  # never measured: the default


def test_the_simulator_runs_the_same_plan_scaled(tmp_path: Path):
    p = plan(tmp_path, "a,0,cifar10,2,512\n", time_scale=0.01)
    app, scaled = TraceCatalog().get("cifar10"), ScaledCatalog(0.01).get("cifar10")
    assert scaled.target_progress == pytest.approx(app.target_progress * 0.01)
    assert TraceCatalog().get("cifar10").target_progress == app.target_progress  # the original is untouched
    result = simulate_plan(p, "static", ResizeCosts(start_s=10.0), 2.0)
    alone = p.jobs[0].alone_s
    assert result.jobs[0].jct_s == pytest.approx(10.0 + alone, rel=0.02)


def test_fitting_sample_keeps_rows_that_fit(tmp_path: Path):
    path = fitting_sample("workload-1", 12, 8, 3, tmp_path / "w.csv")
    p = plan_replay(str(path), time_scale=0.12, nodes=2, gpus_per_node=4)
    assert len(p.jobs) == 12 and max(j.workers for j in p.jobs) <= 8


def test_a_job_whose_service_was_destroyed_unseen_ends_once_yarn_has_said_so_for_a_while(tmp_path: Path) -> None:
    """A chaos run: a job killed (its service destroyed) while the ResourceManager did not answer was never seen
    ended, and the replay waited for it until its timeout. A created job's service that YARN says does not exist
    for :data:`runner.GONE_S` was destroyed: the job ended then, STOPPED."""
    from submarine_elastic.yarn import ServiceNotFoundError

    class Yarn:
        def status(self, service: str) -> object:
            raise ServiceNotFoundError(f"Service {service} not found")

    said: list[str] = []
    p = plan(tmp_path, "a,0,cifar10,2,512\n")
    replay = LiveReplay(p, "goodput+goodput", rm_url="http://x", out=tmp_path, say=said.append)
    record = replay.records[0]
    replay._look(Yarn(), 0.0)  # type: ignore[arg-type]
    assert record.gone_since is None and record.ended_s is None  # not created yet: its submission is under way
    record.created = True
    start = time.time()  # a look's clock is time.time() - t0: these looks come 100 s, then later, into the run

    def look_at(run_s: float) -> None:
        replay._look(Yarn(), start - run_s)  # type: ignore[arg-type]

    look_at(100.0)
    look_at(100.0 + runner.GONE_S / 2)
    assert record.ended_s is None and record.gone_since is not None  # gone for a moment only: not yet ended
    gone = record.gone_since
    look_at(100.0 + runner.GONE_S + 1)
    assert (record.ended_s, record.state) == (gone, "STOPPED")
    assert said[-1].endswith("ends STOPPED: its service is gone (destroyed)")


def test_a_job_yarn_shows_stopped_after_its_am_exited_ended_as_its_driver_recorded(tmp_path: Path) -> None:
    """YARN's services API shows a service SUCCEEDED while its ApplicationMaster runs and STOPPED once that has
    exited, until the RM has the application FINISHED: a replay that read it then left a job that trained every
    sample out of its figures. Its driver's record says how it ended."""
    assert ended_state("r-finished", "STOPPED") == "STOPPED"  # no record: as YARN says
    outcome_path("r-finished").parent.mkdir(parents=True, exist_ok=True)
    outcome_path("r-finished").write_text(JobOutcome(job="r-finished", phase=JobPhase.FINISHED).model_dump_json())
    assert ended_state("r-finished", "STOPPED") == "SUCCEEDED"
    assert ended_state("r-finished", "FAILED") == "FAILED"
    outcome_path("r-failed").write_text(
        JobOutcome(job="r-failed", phase=JobPhase.FAILED, error="worker-1 lost").model_dump_json()
    )
    # A driver that concluded the job failed exits 0 (YARN would relaunch it): YARN shows it SUCCEEDED.
    assert [ended_state("r-failed", s) for s in ("STOPPED", "SUCCEEDED", "FAILED")] == ["FAILED"] * 3


def test_a_runs_results_file_gives_back_the_same_figures(tmp_path: Path) -> None:
    """``bench_live.py --report`` works a run's figures out again from its replay.json: the same summary and
    measured costs as the run gave; a job its driver recorded finished counts, though YARN was read STOPPED."""
    run = fake_run(tmp_path, "static")
    run.records[1].state = "STOPPED"
    outcome_path(run.records[1].service).parent.mkdir(parents=True, exist_ok=True)
    outcome_path(run.records[1].service).write_text(
        JobOutcome(job=run.records[1].service, phase=JobPhase.FINISHED).model_dump_json()
    )
    path = write([run], tmp_path / "out")["json"]
    [again] = load_runs(path, run.plan)
    assert summary(again)["finished"] == 2 and summary(run)["finished"] == 1
    run.records[1].state = "SUCCEEDED"
    assert {k: v for k, v in summary(again).items() if k != "wall_s"} == {
        k: v for k, v in summary(run).items() if k != "wall_s"
    }
    assert measured_costs([again]).describe() == measured_costs([run]).describe()
    with pytest.raises(ReplayRunError, match="not in the plan"):
        load_runs(path, plan(tmp_path, "z,0,cifar10,2,512\n"))


def test_a_signal_named_interrupts_the_block_like_ctrl_c_and_its_old_handler_comes_back() -> None:
    import os
    import signal

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        with runner.interrupted_by(signal.SIGTERM, signal.SIGUSR2):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # interrupted: the handler raises
    assert signal.getsignal(signal.SIGTERM) is before
    assert signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL
