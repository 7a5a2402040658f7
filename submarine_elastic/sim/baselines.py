"""The non-elastic baselines every elastic policy is compared with.

All three run a job with exactly the workers and batch size its user asked for (capped at the cluster's
size), never resize it, and differ only in which waiting job starts when:

``fifo``
    Static FIFO: jobs start in arrival order; a job waits until its workers are free, and no job behind it
    starts first (head-of-line blocking).
``backfill``
    Static with backfill: jobs are considered in arrival order, and any job whose workers are free now
    starts, even ahead of an earlier job still waiting. The workload carries no runtime estimates, so
    there are no reservations (EASY backfilling needs them): a wide job can wait while narrow ones pass it.
``tiresias``
    Tiresias-like discretised least-attained-service (Gu et al., NSDI 2019, as the Pollux artifact
    configures it): two priority queues split at ``threshold_gpu_s`` of attained GPU time (16 GPU-hours);
    each round jobs are taken queue by queue, in arrival order within the first queue and in order of
    demotion within the second, and run while their workers fit; a running job that no longer fits is
    preempted (it pays ``ResizeCosts.start_s`` when it resumes, 30 s with :meth:`ResizeCosts.restart`).
"""

from __future__ import annotations

from collections.abc import Mapping

from submarine_elastic.sim.api import Allocation, ClusterView, JobView, Scheduler


def _want(job: JobView, view: ClusterView) -> int:
    return min(job.requested_replicas, view.cluster.total_gpus, job.max_replicas)


class StaticFifo(Scheduler):
    """Static FIFO with head-of-line blocking (see the module docstring)."""

    name = "fifo"
    backfill = False

    def allocate(self, view: ClusterView) -> Mapping[str, Allocation]:
        free = view.free_gpus
        out: dict[str, Allocation] = {}
        for job in view.jobs:
            if job.workers:
                continue
            want = _want(job, view)
            if want <= free:
                out[job.name] = Allocation(want, job.requested_batch_size)
                free -= want
            elif not self.backfill:
                break
        return out


class StaticBackfill(StaticFifo):
    """Static with backfill: any waiting job that fits starts (see the module docstring)."""

    name = "backfill"
    backfill = True


class Tiresias(Scheduler):
    """Two-queue discretised least-attained-service with preemption (see the module docstring)."""

    name = "tiresias"

    def __init__(self, threshold_gpu_s: float = 16 * 3600.0) -> None:
        """Raises:
        ValueError: ``threshold_gpu_s`` is not positive.
        """
        if not threshold_gpu_s > 0:
            raise ValueError(f"threshold_gpu_s must be > 0, got {threshold_gpu_s}")
        self.threshold_gpu_s = threshold_gpu_s
        self._demoted: dict[str, int] = {}

    def allocate(self, view: ClusterView) -> Mapping[str, Allocation]:
        for job in view.jobs:
            if job.name not in self._demoted and job.attained_gpu_s >= self.threshold_gpu_s:
                self._demoted[job.name] = len(self._demoted)
        arrival = {job.name: i for i, job in enumerate(view.jobs)}
        order = sorted(
            view.jobs,
            key=lambda j: (1, self._demoted[j.name]) if j.name in self._demoted else (0, arrival[j.name]),
        )
        capacity = view.cluster.total_gpus
        out: dict[str, Allocation] = {}
        for job in order:
            want = _want(job, view)
            if want <= capacity:
                capacity -= want
                if not job.workers:
                    out[job.name] = Allocation(want, job.requested_batch_size)
            elif job.workers:
                out[job.name] = Allocation(0)
        return out

    def job_finished(self, name: str) -> None:
        self._demoted.pop(name, None)


BASELINES: dict[str, type[Scheduler]] = {"fifo": StaticFifo, "backfill": StaticBackfill, "tiresias": Tiresias}
