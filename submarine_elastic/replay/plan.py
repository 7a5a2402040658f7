"""What a live replay submits: the simulator's workload, scaled in time, checked before anything is submitted.

A workload row (``name,time,application,num_replicas,batch_size``, the simulator's format) becomes one job
of ``examples/train_elastic.py`` on emulated accelerators (:mod:`tf_hooks.emulate`) with the application's
measured GPU profile. Its amount of work is the samples the simulator's job of that row trains to its end at
its submitted global batch (:meth:`~submarine_elastic.sim.physics.Application.samples_to_finish`), so a job's
JCT means the same live and simulated. Both the arrival times and the work are multiplied by the time scale,
so that a workload of hours runs in minutes: the step times stay those of the profile; what shrinks is how
many steps a job takes and how far apart the jobs arrive.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from submarine_elastic.limits import SERVICE_NAME_MAX_LENGTH
from submarine_elastic.sim.api import JobSpec, UnknownApplicationError, WorkloadError
from submarine_elastic.sim.physics import TraceCatalog
from submarine_elastic.sim.workload import load_workload, resolve_workload, sample_jobs, write_workload

#: Steps between two commits of a replayed job (the example's --commit-every).
COMMIT_EVERY = 4
#: Characters a run's tag takes before a job's name in its YARN service name (``s1a2b-``).
TAG_LENGTH = 6
#: Samples of the generated data set a replayed job trains on, at least; more for a batch that needs them.
DATASET_SAMPLES = 4096


class ReplayError(ValueError):
    """A workload cannot be replayed as asked; the message names the row and the value."""


@dataclass(frozen=True)
class ReplayJob:
    """One job of a replay, in the replay's time (seconds after it starts)."""

    name: str
    #: the workload's own name of the job, and the line of its row
    workload_name: str
    line: int
    arrival_s: float
    application: str
    workers: int
    max_workers: int
    batch: int
    #: samples trained to the job's end (the scaled work)
    samples: int
    #: the profile's seconds for that work at the submitted workers on one node's GPUs (none waiting)
    alone_s: float

    @property
    def dataset_samples(self) -> int:
        """Samples of the generated data set it trains on: whole batches, several a epoch."""
        return max(DATASET_SAMPLES, 4 * self.batch)


@dataclass(frozen=True)
class ReplayPlan:
    """A workload ready to be replayed on ``nodes`` x ``gpus_per_node`` (stand-in) GPUs."""

    workload: str
    time_scale: float
    #: arrivals are further multiplied by this (< 1: a denser, more contended load)
    arrival_scale: float
    nodes: int
    gpus_per_node: int
    jobs: tuple[ReplayJob, ...]

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def describe(self) -> str:
        last = max(j.arrival_s for j in self.jobs)
        work = sum(j.alone_s * j.workers for j in self.jobs)
        return (
            f"{len(self.jobs)} jobs of {self.workload} arriving over {last:.0f} s (time scale {self.time_scale:g}"
            + (f", arrivals x{self.arrival_scale:g}" if self.arrival_scale != 1 else "")
            + f") on {self.nodes}x{self.gpus_per_node} emulated GPUs; {work / 60:.1f} GPU-minutes of work at their "
            f"submitted sizes, {self.offered_load():.2f} of the GPUs over the arrivals"
        )

    def offered_load(self) -> float:
        """GPU-seconds of work at the submitted sizes over the GPU-seconds from the first arrival to the last."""
        span = max(j.arrival_s for j in self.jobs) - min(j.arrival_s for j in self.jobs)
        work = sum(j.alone_s * j.workers for j in self.jobs)
        return work / (span * self.gpus) if span > 0 else float("inf")


def service_name(prefix: str, name: str) -> str:
    """The YARN service name of a workload job: ``prefix`` then the name in [a-z0-9-]."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    full = f"{prefix}{cleaned}"
    longest = SERVICE_NAME_MAX_LENGTH - TAG_LENGTH
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", full) or len(full) > longest:
        raise ReplayError(
            f"job {name!r}: {full!r} makes no YARN service name ([a-z0-9-], at most {longest} characters after "
            "the run's tag)"
        )
    return full


def plan_replay(
    workload: str,
    *,
    time_scale: float,
    nodes: int,
    gpus_per_node: int,
    prefix: str = "",
    arrival_scale: float = 1.0,
    sample: int | None = None,
    seed: int = 0,
    catalog: TraceCatalog | None = None,
) -> ReplayPlan:
    """Read and check a workload for a live replay on ``nodes`` x ``gpus_per_node`` GPUs.

    Raises:
        ReplayError: no GPUs, a time scale out of (0, 1], a row naming an unknown application, a job that can
            never fit the cluster, or one that the time scale makes shorter than a commit (each naming the
            row and the value); an unreadable workload.
    """
    if gpus_per_node < 1 or nodes < 1:
        raise ReplayError(
            f"a replay runs on emulated GPUs and the cluster has {nodes} node(s) with {gpus_per_node} GPU(s) "
            "each: start it with `submarine cluster up --gpus-per-node N`"
        )
    if not (math.isfinite(time_scale) and 0 < time_scale <= 1):
        raise ReplayError(f"--time-scale must be in (0, 1], got {time_scale}")
    if not (math.isfinite(arrival_scale) and arrival_scale > 0):
        raise ReplayError(f"--arrival-scale must be > 0, got {arrival_scale}")
    catalog = catalog or TraceCatalog()
    try:
        path = resolve_workload(workload)
        specs = load_workload(path)
    except WorkloadError as exc:
        raise ReplayError(str(exc)) from None
    if sample is not None:
        try:
            specs = sample_jobs(specs, sample, seed)
        except ValueError as exc:
            raise ReplayError(f"--sample: {exc}") from None
    lines = _lines(path)
    plan = ReplayPlan(
        workload=workload,
        time_scale=time_scale,
        arrival_scale=arrival_scale,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        jobs=tuple(
            _job(
                spec,
                str(path),
                lines.get(spec.name, 0),
                time_scale,
                arrival_scale,
                nodes * gpus_per_node,
                gpus_per_node,
                prefix,
                catalog,
            )
            for spec in specs
        ),
    )
    check_jobs(plan.jobs)
    return plan


def _job(
    spec: JobSpec,
    source: str,
    line: int,
    scale: float,
    arrival_scale: float,
    gpus: int,
    per_node: int,
    prefix: str,
    catalog: TraceCatalog,
) -> ReplayJob:
    where = f"{source} line {line} (job {spec.name!r})"
    try:
        app = catalog.get(spec.application)
    except UnknownApplicationError as exc:
        raise ReplayError(f"{where}: application {spec.application!r}: {exc}") from None
    if spec.num_replicas > gpus:
        raise ReplayError(
            f"{where}: num_replicas {spec.num_replicas} can never fit: the cluster has {gpus} GPUs (one a worker)"
        )
    batch = int(app.clamp_batch(spec.batch_size))
    samples = int(app.samples_to_finish(batch) * scale)
    if samples < COMMIT_EVERY * batch:
        raise ReplayError(
            f"{where}: time scale {scale:g} leaves {samples} samples, less than one commit "
            f"({COMMIT_EVERY} steps of batch {batch}): use a larger --time-scale"
        )
    placement = _packed(spec.num_replicas, per_node)
    alone = samples / batch * app.iteration(placement, batch).seconds
    return ReplayJob(
        name=service_name(prefix, spec.name),
        workload_name=spec.name,
        line=line,
        arrival_s=spec.arrival_s * scale * arrival_scale,
        application=spec.application,
        workers=spec.num_replicas,
        max_workers=max(spec.num_replicas, min(gpus, app.max_useful_replicas())),
        batch=batch,
        samples=samples,
        alone_s=alone,
    )


def _packed(workers: int, per_node: int) -> tuple[int, ...]:
    full, rest = divmod(workers, per_node)
    return tuple([per_node] * full + ([rest] if rest else []))


def _lines(path: Path) -> dict[str, int]:
    """Line of each job name in the workload file (for messages)."""
    out: dict[str, int] = {}
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        name = text.split(",", 1)[0].strip()
        out.setdefault(name, number)
    return out


def check_jobs(jobs: Sequence[ReplayJob]) -> None:
    """Refuses two jobs of one service name (two workload names that clean to the same).

    Raises:
        ReplayError: naming both rows.
    """
    seen: dict[str, ReplayJob] = {}
    for job in jobs:
        other = seen.setdefault(job.name, job)
        if other is not job:
            raise ReplayError(
                f"jobs {other.workload_name!r} (line {other.line}) and {job.workload_name!r} (line {job.line}) "
                f"both become the YARN service {job.name!r}"
            )


def fitting_sample(workload: str, count: int, gpus: int, seed: int, path: Path) -> Path:
    """``count`` jobs drawn by ``seed`` from the rows of ``workload`` whose submitted workers fit ``gpus``,
    written to ``path`` as a workload CSV (the simulator's format), for a replay on a small cluster.

    Raises:
        ReplayError: the workload cannot be read, or has fewer than ``count`` such rows.
    """
    try:
        specs = [s for s in load_workload(resolve_workload(workload)) if s.num_replicas <= gpus]
        picked = sample_jobs(specs, count, seed)
    except (WorkloadError, ValueError) as exc:
        raise ReplayError(f"{workload}: {exc}") from None
    write_workload(picked, path)
    return path
