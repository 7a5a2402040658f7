"""A replayed job's step log (``examples/train_elastic.py --log-dir``), read back and checked.

Each committed step is one line per rank: its number, epoch, ring size, the step's whole global batch of
sample ids and the rank's own part, the time. From it: when the job first trained and when it ended, its ring
size over time, and whether it trained every committed step once and every sample once per epoch.
"""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class StepLog:
    """What a job's step log says: per committed step its time, ring size and epoch, and what is wrong."""

    times: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    samples: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def first_s(self) -> float | None:
        return self.times[0] if self.times else None

    @property
    def last_s(self) -> float | None:
        return self.times[-1] if self.times else None


def read_step_log(log_dir: Path, dataset_samples: int) -> StepLog:
    """Read and check the step log in ``log_dir``; a line cut short by a killed writer is left out. Problems
    named: a step missing or twice, ranks that disagree on a step or overlap in its ids, a sample trained twice
    in an epoch, a finished epoch that missed a sample."""
    steps: dict[int, list[dict]] = collections.defaultdict(list)
    for path in sorted(log_dir.glob("steps-*.jsonl")):
        text = path.read_text()
        for line in text[: text.rfind("\n") + 1].splitlines():
            record = json.loads(line)
            steps[record["step"]].append(record)
    log = StepLog()
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
