"""A replayed job's step log (``examples/train_elastic.py --log-dir``), read back and checked.

Each committed step is one line per rank: its number, epoch, ring size, the step's whole global batch of
sample ids and the rank's own part, the time. From it: when the job first trained and when it ended, its ring
size over time, and whether it trained every committed step once and every sample once per epoch.

A job suspended whole and resumed from its checkpoint (the live ``tiresias``) logs on from the checkpoint's
step: whatever an earlier run logged from that step on was trained again after the checkpoint it resumed from,
so it is left out (counted in ``rolled_back``) and the checks hold for the steps the model kept.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class StepLog:
    """What a job's step log says: per committed step its time, ring size and epoch, and what is wrong."""

    times: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    samples: int = 0
    problems: list[str] = field(default_factory=list)
    #: steps an earlier run logged that a resumed run trained again from its checkpoint
    rolled_back: int = 0

    @property
    def first_s(self) -> float | None:
        return self.times[0] if self.times else None

    @property
    def last_s(self) -> float | None:
        return self.times[-1] if self.times else None


def read_step_log(log_dir: Path, dataset_samples: int, resumed: Sequence[float] = ()) -> StepLog:
    """Read and check the step log in ``log_dir``; a line cut short by a killed writer is left out. ``resumed``:
    the times (wall clock) the job was resumed from its checkpoint; a step a run logged at or after the first
    step of a later run is left out as rolled back. Problems named: a step missing or twice, ranks that
    disagree on a step or overlap in its ids, a sample trained twice in an epoch, a finished epoch that missed
    a sample."""
    runs: dict[int, list[dict]] = collections.defaultdict(list)  # by the resumption each record follows
    for path in sorted(log_dir.glob("steps-*.jsonl")):
        text = path.read_text()
        for line in text[: text.rfind("\n") + 1].splitlines():
            record = json.loads(line)
            runs[sum(1 for t in resumed if t <= record["time"])].append(record)
    log = StepLog()
    steps: dict[int, list[dict]] = collections.defaultdict(list)
    later_first: int | None = None  # the first step of any later run
    for run in sorted(runs, reverse=True):
        kept = [r for r in runs[run] if later_first is None or r["step"] < later_first]
        log.rolled_back += len({r["step"] for r in runs[run]} - {r["step"] for r in kept})
        for record in kept:
            steps[record["step"]].append(record)
        first = min((r["step"] for r in runs[run]), default=None)
        if first is not None:
            later_first = first if later_first is None else min(later_first, first)
    per_epoch: dict[int, list[int]] = collections.defaultdict(list)
    for number in sorted(steps):
        records = steps[number]
        first = records[0]
        log.times.append(max(r["time"] for r in records))
        log.sizes.append(int(first["size"]))
        log.samples += len(first["batch"])
        if any(r["size"] != first["size"] or r["batch"] != first["batch"] for r in records):
            log.problems.append(f"step {number}: its ranks disagree on the ring size or the batch")
        ranks = [r["rank"] for r in records]
        if len(set(ranks)) != len(ranks):
            log.problems.append(f"step {number}: a rank logged it twice (a committed step trained twice)")
        own = [i for r in records for i in r["ids"]]
        if len(own) != len(set(own)) or not set(own) <= set(first["batch"]):
            log.problems.append(f"step {number}: the ranks' ids overlap or are not the step's")
        per_epoch[int(first["epoch"])].extend(first["batch"])
    if sorted(steps) != list(range(len(steps))):
        missing = sorted(set(range(max(steps, default=-1) + 1)) - set(steps))
        log.problems.append(f"committed steps missing: {missing[:10]}")
    last_epoch = max(per_epoch, default=0)
    for epoch, ids in sorted(per_epoch.items()):
        if len(ids) != len(set(ids)):
            log.problems.append(f"epoch {epoch}: {len(ids) - len(set(ids))} samples trained twice")
        elif epoch < last_epoch and sorted(ids) != list(range(dataset_samples)):
            log.problems.append(f"epoch {epoch}: {dataset_samples - len(set(ids))} samples never trained")
    return log
