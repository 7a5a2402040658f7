"""The Horovod side of a job's driver: the agents attached to it, which double as Horovod's host discovery,
the rendezvous server its ranks meet at, and the address that server listens on.

:class:`AgentRegistry` answers Horovod's discovery poll from the agents' states in memory: a
worker is offered only once its training process is warm (so a joiner never stalls the ring) and is withdrawn
before YARN is asked to remove it (so scale-in happens at a commit boundary). Each agent process is its own
Horovod host (keyed by container id and agent pid), so a worker YARN relaunches is never the blacklisted one.
Who goes on a scale-in is the reconcile step's (:func:`submarine_elastic.elastic.reconcile.plan_resize`); the
driver (:mod:`submarine_elastic.elastic.driver`) holds one registry and one rendezvous server
(:class:`~submarine_elastic.elastic.horovod_adapter.BoundRendezvousServer`) and carries out its targets through
them.
"""

from __future__ import annotations

import queue
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from submarine_elastic import netif
from submarine_elastic.elastic.horovod_adapter import HostDiscovery
from submarine_elastic.elastic.reconcile import first_ring_ready
from submarine_elastic.protocol.api import Adoption, GlooInterfaceError, WorkerState, advance
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.yarn import instance_number

#: The exit a process lost with its agent is recorded with: killed (its agent, container or host killed), a worker
#: lost on the way, not an error of the script's. With code 1, a job whose other workers had just finished its
#: training ended FAILED when an agent was killed in the last seconds (a chaos run).
LOST_EXIT = -int(signal.SIGKILL)


@dataclass
class AgentHandle:
    """One attached agent (one worker incarnation); its ``state`` changes only through the registry."""

    agent_id: str  # the Horovod host key
    instance: str
    container_id: str
    host: str
    #: the minor numbers of its node's GPUs its training process sees (its Hello's)
    gpus: tuple[int, ...] = ()
    #: the NodeManager it runs on, ``host:port`` (its Hello's; empty: not known)
    node: str = ""
    commands: queue.Queue[pb.AgentCommand | None] = field(default_factory=queue.Queue)
    state: WorkerState = WorkerState.ATTACHED
    exit_code: int | None = None
    exited: threading.Event = field(default_factory=threading.Event)
    #: its gRPC stream is open (a fact about the connection; an agent that goes ends LEFT or EXITED)
    connected: bool = True
    #: its training process asked to join a ring (it reached WARM)
    joined: bool = False
    #: whether it kept training while the job's driver was replaced (this incarnation adopted it, at its rank
    #: then) and was sent this incarnation's Reform
    adoption: Adoption = Adoption.NONE
    adopted_rank: int = -1
    #: its NodeManager is stopping its container (YARN preempts it): it leaves without the driver asking
    preempted: bool = False
    #: when its stream to the driver was lost (monotonic; None: open): the driver waits
    #: :data:`~submarine_elastic.elastic.jobdriver.REATTACH_GRACE_S` for it to re-attach before it counts its
    #: process lost, offering it to Horovod meanwhile (its process may train on in the ring)
    stream_lost_at: float | None = None

    @property
    def number(self) -> int:
        return instance_number(self.instance)

    @property
    def staying(self) -> bool:
        """It is the job's and stays: attached, its process live, and not on its way out on the driver's word
        (LEAVING) or YARN's (preempted)."""
        return (
            self.connected
            and self.state in (WorkerState.ATTACHED, WorkerState.WARM, WorkerState.RUNNING)
            and not self.preempted
        )

    @property
    def adopted(self) -> bool:
        """It trained in the previous incarnation's ring when it attached to this one."""
        return self.adoption is not Adoption.NONE


class AgentRegistry(HostDiscovery):
    """The agents attached to this driver; doubles as Horovod's host discovery."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Condition()
        self._agents: dict[str, AgentHandle] = {}
        #: while set, Horovod is offered only adopted workers (a new incarnation re-forming their ring)
        self.adopting = False
        #: the Horovod hosts of the last ring opened (:attr:`DriverState.ring`), by this driver or its predecessor
        self.ring: tuple[str, ...] = ()
        #: the job's worker target as the resizer applies it (None: no cap): no warm worker beyond it is offered
        self.target: Callable[[], int] | None = None

    def add(self, agent: AgentHandle) -> None:
        """Register a new agent; earlier, disconnected incarnations of its instance are forgotten."""
        with self._lock:
            for key, old in list(self._agents.items()):
                if old.instance == agent.instance and not old.connected:
                    del self._agents[key]
            self._agents[agent.agent_id] = agent
            self._lock.notify_all()

    def move(self, agent_id: str, to: WorkerState) -> AgentHandle | None:
        """Move the agent to ``to`` (WARM also marks it joined); None when no such agent is registered.

        Raises:
            IllegalTransitionError: ``to`` cannot follow its state.
        """
        with self._lock:
            agent = self._agents.get(agent_id)
            if agent is not None:
                agent.state = advance(agent.instance, agent.state, to)
                agent.joined = agent.joined or to is WorkerState.WARM
            self._lock.notify_all()
            return agent

    def lose(self, agent: AgentHandle) -> None:
        """``agent`` went without a word (its stream gone past its grace, or the next agent came in its container):
        its process is lost to the job, ended as killed (:data:`LOST_EXIT`)."""
        self.end(agent, LOST_EXIT)

    def end(self, agent: AgentHandle, exit_code: int, *, asked: bool = False) -> None:
        """Its training process ended with ``exit_code`` (kept if one was already known): LEFT when it was leaving,
        or ``asked`` to end (its agent says so: told to leave or stop, by the driver or on its NodeManager's
        SIGTERM, whether or not the driver heard of it first), else EXITED; wakes whoever waits for it. A process
        that left on request never finished its training, whatever its exit code. Ending an ended agent changes
        nothing."""
        with self._lock:
            if not agent.state.ended:
                if asked and agent.state in (WorkerState.WARM, WorkerState.RUNNING):
                    agent.state = advance(agent.instance, agent.state, WorkerState.LEAVING)
                to = WorkerState.LEFT if agent.state is WorkerState.LEAVING else WorkerState.EXITED
                agent.state = advance(agent.instance, agent.state, to)
            if agent.exit_code is None:
                agent.exit_code = exit_code
            agent.exited.set()
            self._lock.notify_all()

    def lose_stream(self, agent: AgentHandle, commands: queue.Queue[pb.AgentCommand | None]) -> bool:
        """``agent``'s stream whose replies were ``commands`` ended: True when that was its current stream (now
        marked lost), False when the agent has re-attached on another since."""
        with self._lock:
            if agent.commands is not commands:
                return False
            if agent.stream_lost_at is None:
                agent.stream_lost_at = time.monotonic()
            return True

    def disconnect(self, agent: AgentHandle, commands: queue.Queue[pb.AgentCommand | None]) -> bool:
        """``agent`` is gone for good with its stream of ``commands``: no longer connected (so no longer offered
        to Horovod). False, changing nothing, when it re-attached on another stream meanwhile."""
        with self._lock:
            if agent.commands is not commands:
                return False
            agent.connected = False
            self._lock.notify_all()
            return True

    def take_back(self, agent_id: str, container_id: str, state: WorkerState) -> AgentHandle | None:
        """An agent re-attaching to the driver that lost its stream: the registered one of ``agent_id`` in
        ``container_id``, not ended and in ``state`` (as its process says), gets a new command queue, which holds
        ``Reattached`` and then what the lost stream had not sent; the lost stream's replies end. None (changing
        nothing) when no such agent is registered, or it is in another state (a command it missed moved it)."""
        with self._lock:
            known = self._agents.get(agent_id)
            if known is None or known.container_id != container_id or known.state.ended or known.state is not state:
                return None
            lost, known.commands = known.commands, queue.Queue()
            known.commands.put(pb.AgentCommand(reattached=pb.Reattached()))
            while True:
                try:
                    command = lost.get_nowait()
                except queue.Empty:
                    break
                if command is not None:
                    known.commands.put(command)
            lost.put(None)  # the lost stream's replies end, if they had not
            known.connected, known.stream_lost_at = True, None
            self._lock.notify_all()
            return known

    def get(self, agent_id: str) -> AgentHandle | None:
        with self._lock:
            return self._agents.get(agent_id)

    def snapshot(self) -> list[AgentHandle]:
        with self._lock:
            return list(self._agents.values())

    def statuses(self, ranks: dict[str, int]) -> list[pb.WorkerStatus]:
        """Every agent as ``JobStatus`` lists it, by instance number, with its rank in ``ranks`` (by agent id)."""
        return [
            pb.WorkerStatus(
                instance=a.instance,
                container_id=a.container_id,
                state=cast(pb.WorkerState, a.state.wire),
                rank=ranks.get(a.agent_id, -1),
                exit_code=a.exit_code,
                preempted=a.preempted,
                gpus=a.gpus,
                node=a.node,
            )
            for a in sorted(self.snapshot(), key=lambda a: (a.number, a.agent_id))
        ]

    def available(self) -> list[AgentHandle]:
        """Workers Horovod may use: connected, warm or running, not leaving, not exited; while ``adopting``,
        only the adopted ones, in their old rank order."""
        with self._lock:
            usable = [
                a for a in self._agents.values() if a.connected and a.state in (WorkerState.WARM, WorkerState.RUNNING)
            ]
            if self.adopting:
                usable = sorted((a for a in usable if a.adopted), key=lambda a: a.adopted_rank)
            return usable

    def end_adoption(self) -> None:
        with self._lock:
            self.adopting = False
            self._lock.notify_all()

    def wait(self, predicate: object, timeout: float) -> bool:
        with self._lock:
            return self._lock.wait_for(predicate, timeout)  # type: ignore[arg-type]

    def await_first_ring(
        self, target: Callable[[], int], minimum: int, timeout: float, stop: threading.Event
    ) -> float | None:
        """Blocks until a job's first ring may form (:func:`~submarine_elastic.elastic.reconcile.first_ring_ready`:
        ``target()`` workers warm, or at least ``minimum`` once no container came for a while), or ``stop`` is set;
        returns for how long the number of live agents had not changed then (s). None: ``timeout`` s passed first.
        """
        started = time.monotonic()
        placed, placed_at = 0, started  # live agents (containers YARN started), and since when that many

        def enough() -> bool:
            nonlocal placed, placed_at
            warm = len(self.available())
            now = time.monotonic()
            live = sum(1 for a in self.snapshot() if a.connected and not a.state.ended)
            if live != placed:
                placed, placed_at = live, now
            return first_ring_ready(
                warm=warm, live=live, target=target(), minimum=minimum,
                waited_s=now - started, unchanged_s=now - placed_at,
            )  # fmt: skip

        while not self.wait(lambda: enough() or stop.is_set(), 1.0):
            if time.monotonic() - started > timeout:
                return None
            if stop.is_set():
                break
        return time.monotonic() - placed_at

    def find_available_hosts_and_slots(self) -> dict[str, int]:
        """Horovod's hosts: every worker in the ring (RUNNING), and warm ones up to :attr:`target` in the order
        they attached. A warm worker beyond it (a container YARN started late for an instance a scale-in
        removes, before YARN stops it) waits out of the ring rather than have it re-form twice. Workers leave
        the ring only as the driver withdraws them (LEAVING), never by this cap."""
        usable = self.available()
        if self.target is not None:
            running = [a for a in usable if a.state is WorkerState.RUNNING]
            room = max(0, self.target() - len(running))
            warm = [a for a in usable if a.state is not WorkerState.RUNNING]
            if len(warm) > room:
                held = {a.agent_id for a in warm[room:]}
                usable = [a for a in usable if a.agent_id not in held]
        return {a.agent_id: 1 for a in usable}


def rendezvous_address(iface: str, advertised: str) -> str:
    """The address Horovod's rendezvous listens on, which the ranks dial: ``advertised`` (the driver's own
    address) when it is on ``iface``, else the first IPv4 address of ``iface`` (an override naming another
    interface), on loopback 127.0.0.1.

    Raises:
        GlooInterfaceError: ``iface`` has no IPv4 address (no such interface here).
        OSError: ``advertised`` does not resolve.
    """
    if iface == netif.LOOPBACK:
        return "127.0.0.1"
    address = socket.gethostbyname(advertised)
    if netif.interface_for_address(address) == iface:
        return address
    import psutil

    for addr in psutil.net_if_addrs().get(iface, []):
        if addr.family == socket.AF_INET:
            return str(addr.address)
    raise GlooInterfaceError(
        f"interface {iface!r} (SUBMARINE_GLOO_IFACE, or the one holding {advertised}) has no IPv4 address here"
    )


def gloo_endpoint(advertised: str, override: str | None) -> tuple[str, str]:
    """(interface, rendezvous address) of a driver whose control plane is at ``advertised``: the interface
    is ``override`` (``SUBMARINE_GLOO_IFACE``) when given, else the one holding ``advertised``, which routes
    to every host its workers dial the driver from (:func:`netif.gloo_interface`).

    Raises:
        GlooInterfaceError: the interface has no IPv4 address.
        OSError: ``advertised`` does not resolve.
    """
    iface = netif.gloo_interface(advertised, override)
    return iface, rendezvous_address(iface, advertised)
