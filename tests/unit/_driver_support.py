"""A real job driver serving its control plane on an in-process gRPC server, as the CLI finds it."""

from __future__ import annotations

import contextlib
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from types import SimpleNamespace

import grpc

from submarine_elastic.elastic.driver import JobDriver
from submarine_elastic.protocol.proto import elastic_pb2_grpc as pb_grpc
from submarine_elastic.submit.jobspec import INSECURE_MARK, SECRET_ENV, job_dir
from submarine_elastic.submit.store import remember_driver
from submarine_elastic.yarn import (
    ComponentStatus,
    ComponentTarget,
    NodeReport,
    QueueReport,
    ReconcileResult,
    ServiceStatus,
)


@dataclass
class RecordingYarn:
    """Stands in for the YARN service: records the targets the driver sets and YARN has each one at once (its
    worker component at the count set last, its instances worker-0..); reports the cluster it is given."""

    targets: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    free_queues: list[QueueReport] = field(default_factory=list)
    free_nodes: list[NodeReport] = field(default_factory=list)
    reconciled: int = 0

    def set_target(self, name: str, component: str, n: int, *, remove: Sequence[str] = ()) -> ComponentTarget:
        self.targets.append((n, tuple(remove)))
        return ComponentTarget(n, tuple(remove))

    def target(self, name: str, component: str) -> ComponentTarget | None:
        return ComponentTarget(*self.targets[-1]) if self.targets else None

    def reconcile(
        self, name: str, component: str, n: int | None = None, *, timeout: float, give_way: object = None
    ) -> ReconcileResult:
        self.reconciled += 1
        n = self.targets[-1][0] if self.targets else 0
        names = tuple(f"worker-{i}" for i in range(n))
        return ReconcileResult(name, component, n, n, n, names, "STABLE", converged=True)

    def status(self, name: str) -> ServiceStatus:
        """The worker component at the count the driver set last: nobody else changed it."""
        workers = ComponentStatus("worker", "STABLE", self.targets[-1][0] if self.targets else None)
        return ServiceStatus(name, "STABLE", components=(workers,))

    def queues(self) -> list[QueueReport]:
        return self.free_queues

    def nodes(self, states: Sequence[str] = ("RUNNING",)) -> list[NodeReport]:
        return self.free_nodes


class ReformingRing:
    """Stands in for Horovod's elastic driver across one re-form of its ring (one slot a host): each host of the
    ring records a state, ready (it asked for its slot in the next ring) or its exit (as Horovod's
    ``_handle_worker_exit`` does with the code the job driver returns: a success or a failure, nothing for a
    host no longer in the ring), and waits there until all have; the next ring is then the hosts its host
    manager lists. That list is what ``discover`` lists when asked; with ``discovery_lag``, it is read as
    Horovod's discovery thread reads it: ``discovery_lag`` seconds after the ring starts, then as often."""

    def __init__(
        self, hosts: Sequence[str], discover: Callable[[], Iterable[str]], discovery_lag: float | None = None
    ) -> None:
        self.assigned = set(hosts)
        self.states: dict[str, str] = {}
        self.rendezvous = 0
        self._discover = discover
        self._barrier = threading.Barrier(len(hosts), action=self._reform)
        self._worker_registry = self  # what the job driver reads of Horovod's registry
        self._action_event = threading.Event()
        self._action_event.set()
        self._wait_hosts_cond = threading.Condition()  # Horovod's hosts lock, notified when its hosts change
        self._read = SimpleNamespace(available_hosts=set(hosts))
        self._lag = discovery_lag
        self._done = threading.Event()
        if discovery_lag is not None:
            threading.Thread(target=self._discovery_thread, daemon=True, name="discovery").start()

    @property
    def _host_manager(self) -> SimpleNamespace:
        """Horovod's host manager: its ``current_hosts.available_hosts``."""
        if self._lag is None:
            return SimpleNamespace(current_hosts=SimpleNamespace(available_hosts=set(self._discover())))
        return SimpleNamespace(current_hosts=self._read)

    def _discovery_thread(self) -> None:
        assert self._lag is not None
        while not self._done.wait(self._lag):
            with self._wait_hosts_cond:
                hosts = set(self._discover())
                if hosts != self._read.available_hosts:
                    self._read = SimpleNamespace(available_hosts=hosts)
                    self._wait_hosts_cond.notify_all()

    def stop(self) -> None:
        self._done.set()

    @property
    def host_assignments(self) -> dict[str, list[SimpleNamespace]]:
        return {host: [SimpleNamespace(rank=rank)] for rank, host in enumerate(sorted(self.assigned))}

    def world_size(self) -> int:
        return len(self.assigned)

    def has_rank_assignment(self, host: str, local_rank: int) -> bool:
        return host in self.assigned

    def record_ready(self, host: str, local_rank: int) -> None:
        self._record(host, "READY")

    def handle_exit(self, host: str, exit_code: int) -> None:
        if host in self.assigned:
            self._record(host, "SUCCESS" if exit_code == 0 else "FAILURE")

    def get_recorded_slots(self) -> list[tuple[str, int]]:
        return [(host, 0) for host in self.states]

    def last_rendezvous(self) -> int:
        return self.rendezvous

    def finished(self) -> bool:
        return False

    def _record(self, host: str, state: str) -> None:
        self.states[host] = state
        self._barrier.wait(timeout=10)

    def _reform(self) -> None:
        self.assigned = set(self._host_manager.current_hosts.available_hosts)
        self.rendezvous += 1


@contextlib.contextmanager
def serving(servicer: JobDriver, name: str, token: str) -> Iterator[JobDriver]:
    """``servicer`` serving job ``name``'s control plane on a port of 127.0.0.1, plaintext (a job run
    ``--insecure``), the job's token and the driver's address where the CLI looks; all gone on the way out."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_ElasticDriverServicer_to_server(servicer.servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    directory = job_dir(name)
    directory.mkdir(parents=True)
    try:
        (directory / SECRET_ENV["SUBMARINE_JOB_TOKEN"]).write_text(token)
        (directory / INSECURE_MARK).write_text("")
        remember_driver(name, f"127.0.0.1:{port}")
        yield servicer
    finally:
        server.stop(0)
        shutil.rmtree(directory)
