"""The demo: its workload plans on the cluster it starts, bad arguments and a cluster without GPUs are refused
before anything runs, and each decision in its picture carries the speed-up it predicted."""

from __future__ import annotations

from pathlib import Path

import pytest

from submarine_elastic import demo
from submarine_elastic.cluster import ClusterError, ClusterSpec
from submarine_elastic.replay import plan_replay
from submarine_elastic.replay.report import predicted_speedup
from submarine_elastic.replay.runner import replay_cluster_spec


def test_the_demo_workload_plans_on_the_cluster_it_starts_and_every_job_waits_under_static() -> None:
    spec = replay_cluster_spec()
    plan = plan_replay(str(demo.WORKLOAD), time_scale=0.03, nodes=spec.nodes, gpus_per_node=spec.gpus_per_node)
    assert len(plan.jobs) == 5 and {j.application for j in plan.jobs} == {"cifar10", "deepspeech2", "bert", "ncf"}
    # Each of the first four asks for more than half the GPUs: static FIFO runs them one after the other.
    assert all(2 * j.workers > plan.gpus for j in plan.jobs[:4])
    assert max(j.arrival_s for j in plan.jobs) < 60


def test_a_running_cluster_without_gpus_is_refused_with_what_to_do() -> None:
    class NoGpus:
        def running_daemons(self) -> list[object]:
            return [object()]

        def spec(self) -> ClusterSpec:
            return ClusterSpec()

    with pytest.raises(ClusterError, match="no GPUs: stop it with `submarine cluster down`"):
        demo.cluster_url(NoGpus())  # type: ignore[arg-type]


def test_bad_time_scale_is_refused_before_anything_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(demo, "cluster_url", lambda _c: ("http://127.0.0.1:1", 2, 4))
    assert demo.main(["--time-scale", "0", "--out", str(tmp_path)]) == 1
    assert not any(tmp_path.iterdir())


def test_each_decision_is_marked_with_the_speedup_it_predicted_at_the_count_it_chose() -> None:
    assert predicted_speedup("goodput: 1 -> 2 workers, speedup 1.34; batch 64 -> 96") == 1.34
    assert predicted_speedup("goodput: most speedup (1.80) at 3 workers") == 1.8
    shrink = "goodput: fewer workers are as fast: predicted at 1: 5075 useful samples/s (speedup 1.00); measured at 2"
    assert predicted_speedup(shrink + " workers 2531 samples/s (13 ms a step of 32), ... (speedup 0.69)") == 1.0
    measured_first = "goodput: fewer workers are as fast: measured at 2 workers ... (speedup 0.61); predicted at 1: "
    assert predicted_speedup(measured_first + "6399 useful samples/s (speedup 1.00)") == 1.0
    assert predicted_speedup("fair share: 2 of the 4 it wants") is None


def test_an_interrupt_ends_the_demo_with_a_line_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*_a: object, **_k: object) -> None:
        raise KeyboardInterrupt("SIGTERM")

    monkeypatch.setattr(demo, "cluster_url", lambda _c: ("http://127.0.0.1:1", 2, 4))
    monkeypatch.setattr(demo, "run_policies", interrupted)
    assert demo.main(["--out", str(tmp_path)]) == 130
    assert "interrupted: the jobs it had submitted were killed" in capsys.readouterr().out
