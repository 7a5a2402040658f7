"""Running the example elastic job on the pseudo-cluster and checking what it trained.

``examples/train_elastic.py`` logs every committed step (ring size, the sample ids of each rank, the loss,
the time) and each rank's final weights under ``<work>/log``; the checks here read that log as a user
would: the job resized when told, every epoch trained on each sample exactly once, no committed step was
lost or repeated, every rank ended with the same weights.
"""

from __future__ import annotations

import collections
import contextlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil

from submarine_elastic.yarn import YarnServiceClient
from tests.integration.conftest import committed_steps, container_processes, eventually, run_job, wait_finished

REPO = Path(__file__).resolve().parents[2]
SAMPLES = 2048
#: The training part of scikit-learn's handwritten digits (examples/train_elastic.py --data digits).
DIGITS_SAMPLES = 1500


def start_job(
    rm_url: str,
    name: str,
    work: Path,
    workers: int = 2,
    env: dict[str, str] | None = None,
    *flags: str,
    data: str = "blobs",
) -> None:
    """``submarine job run --elastic`` of the example script, training whole epochs until ``<work>/stop``
    exists (see :func:`finish`) and logging its steps under ``<work>/log``. ``data``: ``blobs``, the cheapest
    job (generated numbers), or ``digits``, a small convolutional network on real handwritten digits. Each step
    is followed by a 30 ms sleep, outside its measured time: a job that trains flat out would take both cores
    of a small machine and slow every container start beside it."""
    if data == "digits":
        trains = f"--data digits --samples {DIGITS_SAMPLES} --epochs 1000"
    elif data == "blobs":
        trains = f"--samples {SAMPLES} --epochs 100"
    else:
        raise ValueError(f"data must be blobs or digits, got {data!r}")
    cmd = (
        f"{sys.executable} {REPO}/examples/train_elastic.py {trains} --step-sleep 0.03 "
        f"--until-file {work}/stop --log-dir {work}/log"
    )
    run_job(rm_url, name, cmd, workers=workers, env=env, flags=flags)


def wait_for_steps_at(log_dir: Path, size: int, count: int, timeout: float = 120) -> None:
    """Blocks until the step log holds ``count`` more steps trained in a ring of ``size`` than when called."""

    def at_size() -> int:
        return sum(1 for records in committed_steps(log_dir).values() if records[0]["size"] == size)

    goal = at_size() + count
    eventually(lambda: at_size() >= goal, f"{count} steps at size {size}", timeout)


def finish(yarn: YarnServiceClient, name: str, work: Path, timeout: float = 180) -> None:
    """Let the job finish its epoch and end; a FAILED end fails the test."""
    (work / "stop").touch()
    wait_finished(yarn, name, timeout)


def check_training(log_dir: Path, *, lost_at: float | None = None, samples: int = SAMPLES) -> dict[int, list[dict]]:
    """Assert what a user checks in the step log and the final weights; return the steps by number.
    ``samples``: how many the job trains on per epoch.

    With ``lost_at``, the job was lost whole at that moment and resumed from a checkpoint: the steps after the
    checkpoint were trained twice, and each step's last record wins (:func:`steps_across_a_loss`)."""
    if lost_at is None:
        steps = committed_steps(log_dir)
    else:
        before, after = steps_across_a_loss(log_dir, lost_at)
        steps = {**before, **after}
    # No committed step lost or doubled: steps 0..N-1 each appear, every rank's record of a step agrees,
    # and the ranks' own ids are disjoint parts of the step's global batch.
    assert sorted(steps) == list(range(len(steps)))
    for step, records in steps.items():
        size, batch = records[0]["size"], records[0]["batch"]
        assert all(r["size"] == size and r["batch"] == batch for r in records), f"step {step}: {records}"
        assert len({r["rank"] for r in records}) == len(records) and all(0 <= r["rank"] < size for r in records)
        own = [i for r in records for i in r["ids"]]
        assert len(own) == len(set(own)) and set(own) <= set(batch), f"step {step}: ranks' ids overlap or stray"
    # Exactly-once data: each finished epoch covers every sample once, across all resizes and failures.
    per_epoch: dict[int, list[int]] = collections.defaultdict(list)
    for records in steps.values():
        per_epoch[records[0]["epoch"]].extend(records[0]["batch"])
    assert len(per_epoch) >= 2
    for epoch, ids in per_epoch.items():
        assert sorted(ids) == list(range(samples)), f"epoch {epoch}: {len(ids)} ids, {len(set(ids))} distinct"
    # Every rank ends with the same weights.
    finals = [np.load(p) for p in sorted(log_dir.glob("weights-rank*.npz"))]
    assert finals
    for other in finals[1:]:
        for key in finals[0].files:
            np.testing.assert_array_equal(finals[0][key], other[key])
    # Training works: the loss falls.
    losses = [steps[s][0]["loss"] for s in sorted(steps)]
    assert np.mean(losses[-10:]) < np.mean(losses[:10]) / 5
    return steps


def steps_across_a_loss(log_dir: Path, lost_at: float) -> tuple[dict[int, list[dict]], dict[int, list[dict]]]:
    """The step log of a job lost whole at ``lost_at`` (every process killed) and resumed from a checkpoint,
    split into the steps committed before the loss and those committed after, each by step number.

    Every record before the loss was written by a process of the first run (it stamped the time and was killed
    afterwards), every one after by a process of the resumed run, so the moment splits the log into the two
    runs exactly. The resumed run goes on from the checkpoint's step, at or before the last step the first run
    committed: it trains the steps from there again, and the model ends with what their second attempt taught.
    So each step's last record wins: the merged log ``{**before, **after}`` must hold every step once, from
    one run, and cover every sample once per epoch, as a job that was never lost. Within each run a step
    appears once (``check_training`` checks each step's ranks are distinct), and the resumed run's steps are
    one unbroken range (it neither skips a step nor goes back).

    A process killed while writing its records may leave an unfinished last line; only a file whose every
    whole record predates the loss (a killed process's) may, and that line is left out (it is one of the
    steps redone after the loss, or one not yet committed).
    """
    before: dict[int, list[dict]] = collections.defaultdict(list)
    after: dict[int, list[dict]] = collections.defaultdict(list)
    for path in log_dir.glob("steps-*.jsonl"):
        text = path.read_text()
        whole = text[: text.rfind("\n") + 1]
        records = [json.loads(line) for line in whole.splitlines()]
        if whole != text:
            assert all(r["time"] < lost_at for r in records), f"{path} has an unfinished line after the loss"
        for record in records:
            (before if record["time"] < lost_at else after)[record["step"]].append(record)
    assert after, "no step was committed after the loss"
    assert sorted(after) == list(range(min(after), max(after) + 1)), "the resumed run skipped steps"
    return dict(before), dict(after)


@dataclass(frozen=True)
class Step:
    """One committed step as the step log has it: its number, when it ended (on its last rank), the ring size,
    its epoch."""

    number: int
    time: float
    size: int
    epoch: int


def steps_by_number(log_dir: Path) -> dict[int, list[dict]]:
    """Every whole record of the step log, by step number. Read while the job runs: a line still being written
    is left for the next read."""
    steps: dict[int, list[dict]] = collections.defaultdict(list)
    for path in log_dir.glob("steps-*.jsonl"):
        text = path.read_text()
        for line in text[: text.rfind("\n") + 1].splitlines():
            record = json.loads(line)
            steps[record["step"]].append(record)
    return dict(steps)


def step_times(log_dir: Path) -> list[Step]:
    """The committed steps so far, in order (read while the job runs, as :func:`steps_by_number`)."""
    steps = steps_by_number(log_dir)
    return [Step(n, max(r["time"] for r in rs), rs[0]["size"], rs[0]["epoch"]) for n, rs in sorted(steps.items())]


def training_pids(container_id: str) -> list[int]:
    """The training processes (train_elastic.py) among the processes of one worker container."""
    pids = []
    for pid in container_processes(container_id):
        with contextlib.suppress(psutil.Error):
            if any(arg.endswith("train_elastic.py") for arg in psutil.Process(pid).cmdline()):
                pids.append(pid)
    return pids
