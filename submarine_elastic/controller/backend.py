"""The controller's view of a real YARN cluster: nodes and container sizes from the ResourceManager, ring
sizes and resizes through each job's driver, and each job's READY workers from its service."""

from __future__ import annotations

import json
import logging
from collections import Counter

from submarine_elastic import resources
from submarine_elastic.cluster.jobfiles import JobFilesLookupError, cluster_job_files
from submarine_elastic.controller.api import (
    DEFAULT_WORKER,
    ClusterApp,
    DriverStatus,
    JobBackend,
    JobFootprint,
    JobSize,
    NodeResources,
    Resources,
)
from submarine_elastic.policy import QueueShare
from submarine_elastic.protocol.api import DRIVER_COMPONENT, WORKER_COMPONENT, ElasticError, JobPhase, WorkerState
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.submit.client import JobClient
from submarine_elastic.submit.store import forget_job
from submarine_elastic.webhdfs import WebHdfsError
from submarine_elastic.yarn import LIVE_APP_STATES, ComponentStatus, ServiceNotFoundError, YarnError, YarnServiceClient

log = logging.getLogger(__name__)

#: YARN's defaults for the service ApplicationMaster when the RM's configuration does not say.
AM_DEFAULT = Resources(1024, 1)
#: The controller's requests to the RM are bounded: a round never waits on a hung RM for minutes.
RM_TIMEOUT = (5.0, 15.0)


def _template_sizes() -> tuple[Resources, Resources]:
    """(driver, worker) container sizes of the job template (what a job gets unless it says otherwise)."""
    template = resources.job_template()
    try:
        components = {c["name"]: c["resource"] for c in json.loads(template.read_text())["components"]}
        return tuple(  # type: ignore[return-value]
            Resources(int(components[name]["memory"]), int(components[name]["cpus"]))
            for name in (DRIVER_COMPONENT, WORKER_COMPONENT)
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("the job template %s cannot be read (%s); assuming its usual sizes", template, exc)
        return Resources(512, 1), DEFAULT_WORKER


def _size(component: ComponentStatus, default: Resources) -> Resources:
    if component.memory_mb and component.vcores:
        return Resources(component.memory_mb, component.vcores, component.gpus)
    return default


def placement_of(status: pb.JobStatus) -> tuple[int, ...]:
    """The ring members on each node, most first, from a driver's Status; () unless every member's node is known
    (an agent of an older release names none: a partial count would tell the policy a wrong spread)."""
    members = [w.node for w in status.workers if w.rank >= 0]
    if not members or not all(members):
        return ()
    return tuple(sorted(Counter(members).values(), reverse=True))


class YarnJobBackend(JobBackend):
    """Jobs of one ResourceManager.

    Args:
        rm_url: the ResourceManager web address.
    """

    def __init__(self, rm_url: str) -> None:
        self.rm_url = rm_url.rstrip("/")
        self.yarn = YarnServiceClient(rm_url, timeout=RM_TIMEOUT)
        self._clients: dict[str, JobClient] = {}
        self._driver, self._worker = _template_sizes()
        self._am: Resources | None = None
        self._queues: list[QueueShare] = []  # as the RM last reported them

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self.yarn.close()

    # ------------------------------------------------------------------ room

    def nodes(self) -> list[NodeResources] | None:
        try:
            reports = self.yarn.nodes()
        except YarnError as exc:
            log.warning("cannot read the cluster's nodes: %s", exc)
            return None
        return [
            NodeResources(n.node_id, free=Resources(n.free_memory_mb, n.free_vcores, n.free_gpus), gpus=n.total_gpus)
            for n in reports
        ]

    def queues(self) -> list[QueueShare]:
        """The RM's leaf queues (absolute capacities, percent of the cluster, as shares; the RM reports them as
        single-precision floats, 60 as 60.000004, so they are rounded to a thousandth of a percent); the last
        ones read when the RM does not answer, so a round never counts a cluster with queues as one pool."""
        try:
            reports = self.yarn.queues()
        except YarnError as exc:
            log.warning("cannot read the scheduler's queues (%s); counting with the last ones read", exc)
            return self._queues
        names = [q.name for q in reports]
        try:
            if len(set(names)) != len(names):
                raise ValueError(f"two leaf queues share a name ({', '.join(q.path for q in reports)})")
            self._queues = [
                QueueShare(q.name, round(q.capacity, 3) / 100, round(max(q.capacity, q.max_capacity), 3) / 100)
                for q in reports
            ]
        except ValueError as exc:  # not a CapacityScheduler answer the policies can split by
            log.warning("the scheduler's queues cannot be used (%s); counting the cluster as one pool", exc)
            self._queues = []
        return self._queues

    def default_worker(self) -> Resources:
        return self._worker

    def _am_size(self) -> Resources:
        """The service ApplicationMaster's container (``yarn.service.am-resource.*`` of the RM), read once."""
        if self._am is None:
            try:
                memory = self.yarn.config_value("yarn.service.am-resource.memory")
                cpus = self.yarn.config_value("yarn.service.am-resource.cpus")
            except YarnError as exc:
                log.warning("cannot read the ApplicationMaster's size from the RM (%s); assuming %s", exc, AM_DEFAULT)
                return AM_DEFAULT
            try:
                self._am = Resources(
                    int(memory) if memory else AM_DEFAULT.memory_mb, int(cpus) if cpus else AM_DEFAULT.vcores
                )
            except ValueError:
                self._am = AM_DEFAULT
        return self._am

    def footprint(self, job_id: str) -> JobFootprint | None:
        try:
            status = self.yarn.status(job_id)
        except ServiceNotFoundError:
            return None
        except (YarnError, ValueError) as exc:
            log.warning("cannot read job %s from the RM: %s", job_id, exc)
            return None
        if status.is_terminal:
            # Ended as its ApplicationMaster says, while it finishes (its components in the answer). The RM answers
            # STOPPED alone for a service with no application yet, one it does not know and one whose AM is gone.
            ended = status.id if status.components else None
            return JobFootprint(self._worker, ended_app=ended) if ended else None
        if not status.components:
            # Its ApplicationMaster does not run yet, so YARN shows no spec: the template's sizes.
            return JobFootprint(self._worker, 0, unplaced=(self._am_size(), self._driver))
        worker = status.component(WORKER_COMPONENT)
        driver = status.component(DRIVER_COMPONENT)
        if worker is None or driver is None:
            return None  # not one of our jobs
        return JobFootprint(
            _size(worker, self._worker),
            len(worker.containers),
            unplaced=() if driver.containers else (_size(driver, self._driver),),
        )

    # ------------------------------------------------------------------ jobs

    def _client(self, job_id: str) -> JobClient | None:
        client = self._clients.get(job_id)
        if client is None:
            try:
                client = JobClient(job_id, self.yarn, timeout=3, locate_timeout=2)
            except (ElasticError, YarnError):
                return None
            self._clients[job_id] = client
        return client

    def status(self, job_id: str) -> DriverStatus | None:
        """One Status call to the job's driver: its target, ring, READY workers as it last read them, leavers,
        ring members, batch limits and placement; None when it does not answer."""
        client = self._client(job_id)
        if client is None:
            return None
        try:
            status = client.status()
        except ElasticError:
            self._clients.pop(job_id, None)
            return None
        return DriverStatus(
            size=JobSize(
                target=int(status.target),
                ring=int(status.world_size),
                yarn_ready=int(status.yarn_ready) if status.HasField("yarn_ready") else None,
                leaving=tuple(w.instance for w in status.workers if w.state == WorkerState.LEAVING.wire),
            ),
            ring=int(status.world_size) if status.phase == JobPhase.RUNNING.wire else None,
            instances=tuple(w.instance for w in status.workers if w.rank >= 0),
            batch_limits=(
                (int(status.min_batch_size), int(status.max_batch_size)) if status.max_batch_size > 0 else None
            ),
            placement=placement_of(status),
            batch_size=(
                int(status.batch.batch_size)
                if status.HasField("batch") and status.batch.HasField("batch_size")
                else None
            ),
        )

    def replace(self, job_id: str, instances: tuple[str, ...], timeout: float) -> None:
        """Swap the named workers for fresh containers at the job's size: grow first where ``--max_workers``
        allows (the ring never runs short), else drop them at a commit boundary first and grow back."""
        client = self._client(job_id)
        if client is None:
            raise ElasticError(f"the driver of job {job_id} is not reachable")
        status = client.status()
        size, n, why = status.target, len(instances), ", ".join(instances)
        steps = [(size + n, [], f"replacements for {why}"), (size, list(instances), f"replace {why}")]
        if size + n > status.max_workers:
            steps = [(size - n, list(instances), f"replace {why}"), (size, [], f"replacements for {why}")]
        for workers, remove, reason in steps:
            client.set_target(pb.Target(workers=workers, remove=remove, reason=reason))
            client.wait_for_size(workers, timeout)

    def set_target(self, job_id: str, target: pb.Target) -> None:
        client = self._client(job_id)
        if client is None:
            raise ElasticError(f"the driver of job {job_id} is not reachable")
        client.set_target(target)

    def cluster_jobs(self) -> dict[str, ClusterApp] | None:
        try:
            apps = self.yarn.list()
        except YarnError as exc:
            log.warning("cannot list the cluster's applications: %s", exc)
            return None
        found: dict[str, ClusterApp] = {}
        for a in sorted(apps, key=lambda a: a.started_time_ms or 0):  # the latest of a name wins
            # A service's containers include its AM (and, for our jobs, the driver): not worker slots.
            found[a.name] = ClusterApp(
                a.name,
                a.id,
                max(1, (a.running_containers or 0) - 2),
                started_at=(a.started_time_ms or 0) / 1000,
                queue=a.queue,
            )
        return found

    def application_ended(self, app_id: str) -> bool | None:
        try:
            state = self.yarn.app_state(app_id)
        except YarnError as exc:
            log.warning("cannot read application %s: %s", app_id, exc)
            return None
        return None if state is None else state not in LIVE_APP_STATES

    def job_ended(self, job_id: str) -> None:
        """Closes the job's client and removes its files: the local ones, and its directory on the cluster's
        HDFS (its token, keys and certificates), which nothing reads once its application ended. Safe to call
        again.

        Raises:
            OSError: a file could not be removed; with HDFS away (down, in safe mode), its directory there.
        """
        client = self._clients.pop(job_id, None)
        if client is not None:
            client.close()
        stays = ""
        try:
            files = cluster_job_files(self.rm_url)
            if files is not None:
                files.remove(job_id)
        except (JobFilesLookupError, WebHdfsError, YarnError) as exc:
            stays = f"its files on HDFS: {exc}"
        forget_job(job_id)
        if stays:
            raise OSError(stays)
