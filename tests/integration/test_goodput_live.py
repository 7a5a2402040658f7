"""A running job's batch size changed live by a controller decision, on the real pseudo-cluster: the controller
sends a policy's batch setting to the job's driver, the workers of examples/train_elastic.py take it at one
commit with no restart (the ring stays as it is), every sample of each epoch is trained on exactly once
across the change, the ranks end with the same weights, and `job show` gives the change with its reason."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from submarine_elastic.cluster import ClusterSpec
from submarine_elastic.controller import locate
from submarine_elastic.controller.api import JobState
from submarine_elastic.controller.client import ControllerClient
from submarine_elastic.policy import Decision, JobPolicy, JobView, Snapshot
from submarine_elastic.submit.client import JobClient
from submarine_elastic.yarn import YarnServiceClient
from tests.integration import jobcheck
from tests.integration.conftest import committed_steps, eventually, submarine

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NEW_BATCH, NEW_ACCUM = 96, 1
REASON = f"live test: batch {NEW_BATCH} in {NEW_ACCUM + 1} micro-batches"


class SetBatchOnce(JobPolicy):
    """Keeps the job's size; once it has trained 20 steps, asks for a global batch of 96 in two micro-batches
    (the engine stops asking once the job reports that batch)."""

    name = "set-batch-once"

    def propose(self, job: JobView, snapshot: Snapshot) -> Decision | None:
        if (job.metrics.step or 0) < 20:
            return None
        return Decision(job.job_id, job.holding, REASON, batch_size=NEW_BATCH, accum_steps=NEW_ACCUM)


@pytest.fixture()
def policy_controller_dir(controller_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's controller directory, its controller able to load this module's policy."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    return controller_dir


def test_a_decision_changes_a_running_jobs_batch_at_a_commit_with_data_exactly_once(
    policy_controller_dir: Path, cluster_spec: ClusterSpec, tmp_path: Path
) -> None:
    rm = cluster_spec.rm_url
    submarine(rm, "controller", "start", "--policy", "static", "--interval", "1")
    work = tmp_path / "job"
    work.mkdir()
    name = "live-batch"
    with YarnServiceClient(rm, poll_interval=0.5) as yarn:
        try:
            jobcheck.start_job(rm, name, work, 2, None, "--policy", f"{__name__}:SetBatchOnce")
            with JobClient(name, yarn, locate_timeout=120) as job:
                status = eventually(
                    lambda: (s := job.status()).batch.version >= 1 and s, "the driver taking the batch setting", 180
                )
                assert (status.batch.batch_size, status.batch.accum_steps, status.batch.reason) == (
                    NEW_BATCH,
                    NEW_ACCUM,
                    REASON,
                )
                eventually(
                    lambda: any(r[0]["global_batch"] == NEW_BATCH for r in committed_steps(work / "log").values()),
                    "the workers training on the new batch",
                    120,
                )
                assert len(job.status().batch_timeline) == 1, "the setting was sent twice"
                shown = submarine(rm, "job", "show", name)
                assert REASON in shown, shown
                resizes = list(job.status().timeline)
            jobcheck.finish(yarn, name, work)
        finally:
            yarn.destroy(name, missing_ok=True)
    # Exactly-once data across the change, no committed step lost or repeated, the same weights on each rank.
    steps = jobcheck.check_training(work / "log")
    first = [steps[s][0] for s in sorted(steps)]
    assert {r["size"] for r in first} == {2}, "the ring changed"
    switch = next(r["step"] for r in first if r["global_batch"] == NEW_BATCH)
    assert switch % 4 == 0, f"the batch changed at step {switch}, not at a commit (every 4 steps)"
    assert {(r["global_batch"], r["accum_steps"]) for r in first if r["step"] < switch} == {(64, 0)}
    assert {(r["global_batch"], r["accum_steps"]) for r in first if r["step"] >= switch} == {(NEW_BATCH, NEW_ACCUM)}
    assert all(len(r["batch"]) <= NEW_BATCH for r in first)
    assert len(resizes) <= 1, f"the job was resized or re-formed: {resizes}"


def test_the_goodput_policy_sizes_workers_and_batch_from_what_jobs_report_while_another_arrives(
    controller_dir: Path, cluster_spec: ClusterSpec, tmp_path: Path
) -> None:
    """The controller's own goodput policy and arbiter, nothing injected, on real training (a small convolutional
    network on scikit-learn's handwritten digits): two jobs with batch limits report their step times and
    gradient noise scale, and the first job's batch is set from them; a third arrives into a cluster of three
    worker slots (``--capacity 3``), so the first job, the only one above its minimum, is resized: by its own
    measurements if they show one worker is as fast as two (as on a small machine; the reason gives the figures),
    else by the arbiter for the arrival (the reason names it). Every change is applied at a commit, `job show`
    and the controller's history give its reason, and every job trains each sample once per epoch with the same
    weights on every rank. Once job b has left, no job is parked at its minimum beside the free slot: it grows, or
    the controller logged that its model predicts no larger count faster by more than a resize costs."""
    rm = cluster_spec.rm_url
    submarine(rm, "controller", "start", "--policy", "goodput", "--arbiter", "goodput", "--interval", "1",
              "--cooldown", "5", "--capacity", "3")  # fmt: skip
    flags = ("--min_batch_size", "32", "--max_batch_size", "512")
    names = ["goodput-a", "goodput-b", "goodput-c"]
    work = {name: tmp_path / name for name in names}
    for directory in work.values():
        directory.mkdir()

    def sizes(name: str) -> set[int]:
        return {r[0]["size"] for r in committed_steps(work[name] / "log").values()}

    ctl = ControllerClient.connect(controller_dir)
    assert ctl is not None, "no controller runs"
    with YarnServiceClient(rm, poll_interval=0.5) as yarn, ctl:
        try:
            jobcheck.start_job(rm, names[0], work[names[0]], 2, None, *flags, data="digits")
            jobcheck.start_job(rm, names[1], work[names[1]], 1, None, *flags, data="digits")
            with JobClient(names[0], yarn, locate_timeout=120) as job:
                status = eventually(
                    lambda: (s := job.status()).batch.version >= 1 and s, "the policy setting job a's batch", 240
                )
                assert status.batch.batch_size != 64 and status.batch.reason.startswith("goodput"), status.batch
                jobcheck.start_job(rm, names[2], work[names[2]], 1, None, *flags, data="digits")  # arrives
                eventually(lambda: len(sizes(names[0])) > 1, "job a's ring resized by the policy", 240)
                shown = submarine(rm, "job", "show", names[0])
                settings = job.status().batch_timeline
                assert "batch settings" in shown and "goodput:" in shown, shown
                assert any(f"global batch {b.batch_size}," in shown for b in settings), (settings, shown)
            eventually(lambda: committed_steps(work[names[2]] / "log"), "the arrived job training", 240)
            resized = eventually(
                lambda: [d for d in ctl.timeline(names[0]) if d.applied and d.from_workers != d.to_workers],
                "job a's resize applied in YARN and the ring",
                120,
            )
            assert all(d.reason.startswith("goodput") for d in resized), ctl.timeline(names[0])
            jobcheck.finish(yarn, names[1], work[names[1]])  # job b leaves: a slot is free beside jobs a and c
            eventually(lambda: ctl.job(names[1]).state is JobState.FINISHED, "the controller seeing job b leave", 60)
            for name in (names[0], names[2]):
                verdict = eventually(lambda n=name: not_parked(ctl, controller_dir, n, 3), f"{name} not parked", 60)
                print(f"{name} beside a free slot: {verdict}")
            for name in (names[0], names[2]):
                jobcheck.finish(yarn, name, work[name])
            # Sound decisions: a job is shrunk only for another job, named, or because its own measured speed-up
            # says fewer workers are as fast, with the figures it measured.
            for name in names:
                for d in ctl.timeline(name):
                    if d.to_workers < d.from_workers:
                        own = all(p in d.reason for p in ("fewer workers are as fast", "measured at", "samples/s"))
                        assert own or any(f"for {other}" in d.reason for other in names if other != name), d
        finally:
            for name in names:
                yarn.destroy(name, missing_ok=True)
    for name in names:
        jobcheck.check_training(work[name] / "log", samples=jobcheck.DIGITS_SAMPLES)
    first = [s[0] for _, s in sorted(committed_steps(work[names[0]] / "log").items())]
    assert len({r["global_batch"] for r in first}) > 1 and len({r["size"] for r in first}) > 1


#: What the goodput arbiter logs of a job it leaves at its minimum beside free slots.
STAYS = re.compile(
    r"goodput: (?P<job>\S+) stays at its minimum of (?P<low>\d+) beside (?P<free>\d+) free slots: speedup [\d.]+ "
    r"there, (?:at most (?P<larger>[\d.]+) predicted at \d+|no larger count within its cap of \d+), "
    r"a resize needs more than (?P<needs>[\d.]+|inf)(?P<held>; held: .*)?$",
    re.MULTILINE,
)


def not_parked(ctl: ControllerClient, controller_dir: Path, name: str, capacity: int) -> str | None:
    """Why the job is not parked at its minimum beside the free slots of the cluster: it holds more than
    its minimum, or the controller's last word on it there is that no larger count is predicted faster by more
    than a resize costs; None while neither holds."""
    job = ctl.job(name)
    if job.target > job.min_workers:
        return f"holds {job.target} workers, above its minimum of {job.min_workers}"
    log = (controller_dir / locate.LOG).read_text()
    free = capacity - sum(j.target for j in ctl.jobs() if j.state is not JobState.FINISHED)
    if free <= 0:
        return "no slot is free"
    said = [m for m in STAYS.finditer(log) if m["job"] == name and int(m["free"]) == free]
    if not said:
        return None
    last = said[-1]
    predicted = float("-inf") if last["larger"] is None else float(last["larger"])
    return last.group(0) if predicted <= float(last["needs"]) and not last["held"] else None
