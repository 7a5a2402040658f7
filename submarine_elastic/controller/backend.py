"""The controller's view of a real YARN cluster: capacity from the ResourceManager, ring sizes and
resizes through each job's driver."""

from __future__ import annotations

import logging

import requests

from submarine_elastic.controller.service import JobBackend
from submarine_elastic.elastic.api import ElasticError
from submarine_elastic.elastic.client import JobClient
from submarine_elastic.yarn import YarnError, YarnServiceClient

log = logging.getLogger(__name__)


class YarnJobBackend(JobBackend):
    """Jobs of one ResourceManager.

    Args:
        rm_url: the ResourceManager web address.
        capacity: worker slots to offer; None derives them from the RM: one slot per free vcore of
            the cluster, less one AM and one driver container per live job.
    """

    def __init__(self, rm_url: str, *, capacity: int | None = None) -> None:
        self.rm_url = rm_url.rstrip("/")
        self.yarn = YarnServiceClient(rm_url)
        self._capacity = capacity
        self._clients: dict[str, JobClient] = {}

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self.yarn.close()

    def capacity(self, live_jobs: int) -> int:
        if self._capacity is not None:
            return self._capacity
        try:
            resp = requests.get(f"{self.rm_url}/ws/v1/cluster/metrics", timeout=5)
            resp.raise_for_status()
            vcores = int(resp.json()["clusterMetrics"]["totalVirtualCores"])
        except (requests.RequestException, KeyError, ValueError) as exc:
            log.warning("cluster capacity unknown (%s); assuming what the jobs hold", exc)
            return 0
        return max(0, vcores - 2 * live_jobs)

    def _client(self, job_id: str) -> JobClient | None:
        client = self._clients.get(job_id)
        if client is None:
            try:
                client = JobClient(job_id, self.yarn, timeout=3, locate_timeout=2)
            except (ElasticError, YarnError):
                return None
            self._clients[job_id] = client
        return client

    def ring_size(self, job_id: str) -> int | None:
        client = self._client(job_id)
        if client is None:
            return None
        try:
            status = client.status()
        except ElasticError:
            self._clients.pop(job_id, None)
            return None
        return int(status.world_size) if status.phase == "running" else None

    def instances(self, job_id: str) -> tuple[str, ...]:
        client = self._client(job_id)
        if client is None:
            return ()
        try:
            status = client.status()
        except ElasticError:
            return ()
        return tuple(w.instance for w in status.workers if w.rank >= 0)

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
            client.flex(workers, remove=remove, reason=reason)
            client.wait_for_size(workers, timeout)

    def resize(self, job_id: str, workers: int, reason: str, timeout: float) -> None:
        client = self._client(job_id)
        if client is None:
            raise ElasticError(f"the driver of job {job_id} is not reachable")
        client.flex(workers, reason=reason)
        client.wait_for_size(workers, timeout)

    def cluster_jobs(self) -> dict[str, int] | None:
        try:
            apps = self.yarn.list()
        except YarnError as exc:
            log.warning("cannot list the cluster's applications: %s", exc)
            return None
        # A service's containers include its AM (and, for our jobs, the driver): not worker slots.
        return {a.name: max(1, (a.running_containers or 0) - 2) for a in apps}
