"""The live ``tiresias`` baseline's decisions: the simulator's Tiresias, asked about the live jobs.

The replay keeps, per job, whether it holds its GPUs (submitted or resumed, not suspended) and the GPU-seconds
it has attained; each round :class:`LiveTiresias` presents them to the simulator's scheduler
(:class:`~submarine_elastic.sim.baselines.Tiresias`, the same object ``sim run --scheduler tiresias`` runs) as
its :class:`~submarine_elastic.sim.api.ClusterView` and turns the allocations it returns into the jobs to start
(or resume) and the jobs to suspend. Nothing here touches the cluster: :mod:`.runner` carries them out.

Its queue threshold is the simulator's (16 GPU-hours) times the replay's time scale, as every job's work is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from submarine_elastic.sim.api import ClusterConfig, ClusterView, JobView
from submarine_elastic.sim.baselines import Tiresias

#: The simulator's threshold between Tiresias' two queues, in attained GPU-seconds (before the time scale).
THRESHOLD_GPU_S = 16 * 3600.0


def scaled_tiresias(time_scale: float) -> Tiresias:
    """The simulator's Tiresias with its queue threshold scaled as a replay's work is (the live run and its
    ``--compare-sim`` both use this one)."""
    return Tiresias(threshold_gpu_s=THRESHOLD_GPU_S * time_scale)


@dataclass(frozen=True)
class LiveJob:
    """What a Tiresias round needs of one arrived, unfinished job.

    Attributes:
        holding: whether it holds its GPUs now (submitted or resumed, and not suspended).
        attained_gpu_s: its workers times the seconds it has held them, over all its runs.
    """

    name: str
    application: str
    arrival_s: float
    workers: int
    batch: int
    holding: bool
    attained_gpu_s: float


@dataclass(frozen=True)
class Round:
    """A round's decisions: jobs to start or resume, jobs to suspend (both in the scheduler's order)."""

    start: tuple[str, ...]
    suspend: tuple[str, ...]


class LiveTiresias:
    """Tiresias on a live cluster of ``nodes`` x ``gpus_per_node`` GPUs; keeps the scheduler's queues."""

    def __init__(self, nodes: int, gpus_per_node: int, time_scale: float) -> None:
        self.cluster = ClusterConfig(nodes, gpus_per_node)
        self.scheduler = scaled_tiresias(time_scale)

    def decide(self, now_s: float, jobs: Sequence[LiveJob]) -> Round:
        """The round at ``now_s`` for ``jobs`` (arrived, not finished, in arrival order)."""
        held = sum(j.workers for j in jobs if j.holding)
        view = ClusterView(
            now_s=now_s,
            cluster=self.cluster,
            free_gpus=max(0, self.cluster.total_gpus - held),
            jobs=tuple(_view(j) for j in jobs),
        )
        allocations = self.scheduler.allocate(view)
        start = tuple(n for n, a in allocations.items() if a.workers > 0)
        suspend = tuple(n for n, a in allocations.items() if a.workers == 0)
        return Round(start, suspend)

    def finished(self, name: str) -> None:
        self.scheduler.job_finished(name)


def _view(job: LiveJob) -> JobView:
    workers = job.workers if job.holding else 0
    return JobView(
        name=job.name,
        application=job.application,
        arrival_s=job.arrival_s,
        requested_replicas=job.workers,
        requested_batch_size=job.batch,
        min_replicas=job.workers,
        max_replicas=job.workers,
        workers=workers,
        batch_size=float(job.batch),
        progress=0.0,
        attained_gpu_s=job.attained_gpu_s,
        run_s=0.0,
        epoch=0,
        metric=None,
        throughput={},
        efficiency=1.0,
        resizing=False,
    )
