"""The job's target and the driver's verdict on it, apart from the ring host that carries them out.

1. :class:`TargetBook` takes every :class:`pb.Target` a client sends (``job flex``, the controller, a
   replacement): it checks it against the job's limits and the one batch rule
   (:func:`submarine_elastic.limits.batch_setting_problem`), numbers it (``version``, unique and increasing
   under concurrent calls), stamps it, keeps the batch timeline, and hands the targets to the resizer in
   version order, so the last target taken is the one the job ends at.
2. :func:`plan_resize` is the reconcile step's action for a target: from the count in force and the live
   workers (instance, number, rank), who leaves the ring and what YARN is told.
3. :func:`lost_agents` is its action on what YARN reports of the worker containers: the agents that still run
   where YARN counts their container lost (evicted from the ring by the driver), each with why.
4. :func:`verdict` is the reconcile step's answer, as data: from the target in force, the ring, the workers
   leaving and YARN's last reconciliation, whether the job has converged and, if not, why (``lag``). The
   driver puts it in ``JobStatus``; the controller and ``submarine job flex --wait`` read it there.
Nothing here talks to YARN, Horovod or gRPC: each piece is a function of its inputs, tested as such.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from submarine_elastic.limits import batch_setting_problem
from submarine_elastic.protocol.api import BatchLimits, FlexRefusedError, Limits
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.yarn import ContainerState, ContainerStatus, NodeReport, QueueReport

if TYPE_CHECKING:
    from submarine_elastic.elastic.ringhost import AgentHandle
    from submarine_elastic.protocol.records import DriverState

#: The states in which YARN no longer runs a container.
ENDED_CONTAINER_STATES = frozenset({ContainerState.STOPPED, ContainerState.FAILED, ContainerState.SUCCEEDED})
#: The reason of a target a relaunched driver takes up again (asked of its predecessor, not applied by it).
REQUEUED = "asked for before the driver was relaunched"
#: Targets that set a batch kept in a job's batch timeline (the latest ones; the one in force is among them).
MAX_BATCH_TIMELINE = 64


def target_problem(
    target: pb.Target, limits: Limits, batch_limits: BatchLimits | None, known: Iterable[str]
) -> str | None:
    """Why the job's driver refuses ``target`` (naming the value), or None when it takes it.

    ``known``: the worker instances the driver knows (``remove`` may name only those). A learning rate or
    accumulation without a batch size is refused: they are a batch setting's parts.
    """
    if target.workers > limits.max:
        return f"{target.workers} workers is above the job's --max_workers {limits.max}"
    if target.workers < limits.min:
        return f"{target.workers} workers is below the job's --min_workers {limits.min}"
    if not target.HasField("batch_size"):
        if target.HasField("accum_steps") or target.HasField("learning_rate"):
            return "accumulation steps and a learning rate come with a batch size"
    else:
        problem = batch_setting_problem(
            target.batch_size,
            target.accum_steps,
            target.learning_rate if target.HasField("learning_rate") else None,
            min_batch_size=batch_limits.min if batch_limits else None,
            max_batch_size=batch_limits.max if batch_limits else None,
        )
        if problem is not None:
            return problem
    names = set(known)
    unknown = [name for name in target.remove if name not in names]
    if unknown:
        return f"unknown worker instances: {', '.join(unknown)}"
    return None


def same_batch(a: pb.Target | None, b: pb.Target) -> bool:
    """Whether ``b`` asks the batch ``a`` set (batch, accumulation and learning rate alike)."""
    return a is not None and (a.batch_size, a.accum_steps, a.learning_rate, a.HasField("learning_rate")) == (
        b.batch_size,
        b.accum_steps,
        b.learning_rate,
        b.HasField("learning_rate"),
    )


class TargetBook:
    """The targets a job's driver took, numbered; every method is safe under concurrent calls (the driver's
    gRPC threads) and none blocks beyond its lock.

    ``workers`` is the worker count the resizer last applied, ``requested`` the newest one taken; they differ
    while a resize is queued or running. ``on_batch`` is called, under the book's lock (so in version order),
    with each target that changes the job's batch.
    """

    def __init__(
        self,
        workers: int,
        *,
        requested: int | None = None,
        version: int = 0,
        batch_timeline: Sequence[pb.Target] = (),
        timeline: Sequence[pb.ResizeEvent] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._workers = workers
        self._requested = workers if requested is None else requested
        self._version = max([version, *(b.version for b in batch_timeline)])
        self._batch_timeline = list(batch_timeline)[-MAX_BATCH_TIMELINE:]
        self._timeline = list(timeline)
        self._pending: queue.Queue[pb.Target] = queue.Queue()

    @classmethod
    def resumed(cls, workers: int, state: DriverState | None) -> TargetBook:
        """The book of a driver whose predecessor left ``state``: its targets, timelines and version go on (None:
        the job's first driver, at ``workers``)."""
        if state is None:
            return cls(workers)
        return cls(
            state.target or workers,
            requested=state.requested or state.target or workers,
            version=state.version,
            batch_timeline=state.batch_timeline,
            timeline=state.timeline,
        )

    def take(
        self,
        target: pb.Target,
        limits: Limits,
        batch_limits: BatchLimits | None,
        known: Iterable[str],
        on_batch: Callable[[pb.Target], None] = lambda _: None,
    ) -> tuple[pb.Target, int]:
        """Checks ``target``, numbers and stamps it, and queues it for the resizer; returns the target as taken
        and the worker target before it.

        Raises:
            FlexRefusedError: :func:`target_problem` names what is wrong (nothing is taken).
        """
        problem = target_problem(target, limits, batch_limits, known)
        if problem is not None:
            raise FlexRefusedError(problem)
        taken = pb.Target()
        taken.CopyFrom(target)
        if not taken.reason:
            taken.reason = "requested"
        with self._lock:
            self._version += 1
            taken.version = self._version
            taken.time = self._clock()
            previous = self._workers
            self._requested = taken.workers
            if taken.HasField("batch_size") and not same_batch(self.batch, taken):
                self._batch_timeline = [*self._batch_timeline, taken][-MAX_BATCH_TIMELINE:]
                on_batch(taken)
            self._pending.put(taken)
        return taken, previous

    def next(self, timeout: float | None) -> pb.Target | None:
        """The oldest target the resizer has not applied yet, waiting up to ``timeout`` s (None: for ever)."""
        try:
            return self._pending.get(timeout=timeout)
        except queue.Empty:
            return None

    def applied(self, workers: int, reason: str) -> int:
        """The resizer now applies ``workers`` (a new count, or named workers replaced at the same one): kept,
        with its timeline entry; returns the previous count."""
        with self._lock:
            previous, self._workers = self._workers, workers
            self._timeline.append(
                pb.ResizeEvent(time=self._clock(), from_workers=previous, to_workers=workers, reason=reason)
            )
            return previous

    def noted(self, from_workers: int, to_workers: int, reason: str) -> None:
        """A count someone else gave YARN that the driver refused and put back (``from_workers`` -> the target
        ``to_workers``): kept in the timeline with why; the target stays as it is."""
        with self._lock:
            self._timeline.append(
                pb.ResizeEvent(time=self._clock(), from_workers=from_workers, to_workers=to_workers, reason=reason)
            )

    def put_back(self, reason: str) -> None:
        """Queues the newest count taken again, under its version, for the resizer to give YARN back (YARN was
        given another count, which the driver refused)."""
        with self._lock:
            self._pending.put(pb.Target(workers=self._requested, reason=reason, version=self._version))

    def requeue_requested(self, reason: str) -> None:
        """Queues the newest count taken again (a driver relaunched while a resize was pending takes it up)."""
        with self._lock:
            if self._requested != self._workers:
                self._pending.put(pb.Target(workers=self._requested, reason=reason, version=self._version))

    @property
    def pending(self) -> int:
        """Targets taken that the resizer has not picked up yet."""
        return self._pending.qsize()

    @property
    def workers(self) -> int:
        with self._lock:
            return self._workers

    @property
    def requested(self) -> int:
        with self._lock:
            return self._requested

    @property
    def version(self) -> int:
        with self._lock:
            return self._version

    @property
    def batch(self) -> pb.Target | None:
        """The target that set the batch in force (None: the job's own, never set). Callers hold no lock."""
        timeline = self._batch_timeline
        return timeline[-1] if timeline else None

    @property
    def batch_timeline(self) -> list[pb.Target]:
        with self._lock:
            return list(self._batch_timeline)

    @property
    def timeline(self) -> list[pb.ResizeEvent]:
        with self._lock:
            return list(self._timeline)


@dataclass(frozen=True)
class Member:
    """What a resize plan reads of one live worker: its instance, the instance's number, and its rank in the
    ring (-1: not in it)."""

    instance: str
    number: int
    rank: int = -1


@dataclass(frozen=True)
class ResizePlan:
    """The actions of one resize to ``workers``: the instances told to leave the ring (the driver waits for them
    to go), then YARN's new count, with ``remove`` naming the instances YARN must take away (empty where YARN's
    own choice on a scale-in, the highest-numbered instances, are the leavers)."""

    workers: int
    leavers: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()


def choose_leavers(live: Sequence[Member], count: int) -> list[Member]:
    """The ``count`` workers a scale-in removes: those not in the ring first (cheapest), then the highest ranks,
    so rank 0 (and whatever the script does only there) stays where it is."""
    if count <= 0:
        return []
    return sorted(live, key=lambda m: (0 if m.rank < 0 else 1, -m.rank, -m.number))[:count]


def plan_resize(current: int, target: pb.Target, live: Sequence[Member]) -> ResizePlan | None:
    """What the driver does for ``target`` when the count in force is ``current`` (None: nothing, the job has
    it). A scale-out only tells YARN; a scale-in (or named workers replaced at the same count) first takes the
    leavers out of the ring: those ``target.remove`` names, else :func:`choose_leavers`."""
    if target.workers == current and not target.remove:
        return None
    if target.workers > current:
        return ResizePlan(target.workers)
    named = set(target.remove)
    leavers = [m for m in live if m.instance in named] if named else choose_leavers(live, len(live) - target.workers)
    highest = sorted(live, key=lambda m: m.number)[len(live) - len(leavers) :]
    by_name = {m.instance for m in leavers} != {m.instance for m in highest}
    names = tuple(m.instance for m in leavers)
    return ResizePlan(target.workers, names, names if by_name else ())


def stopped_by_the_scale_in(live: Sequence[Member], target: int, removing: Collection[str]) -> set[str]:
    """The live workers YARN Services stops on its own while it brings the worker component down to ``target``:
    those the driver named, else its own choice on a flex down, the highest-numbered instances. A SIGTERM to any
    other worker's container comes from somewhere else (the scheduler preempting it)."""
    extra = len(live) - target
    if extra <= 0:
        return set()
    named = {m.instance for m in live if m.instance in removing}
    if named:
        return named
    return {m.instance for m in sorted(live, key=lambda m: m.number, reverse=True)[:extra]}


def _allocation_order(container_id: str) -> tuple[int, ...]:
    """container_[e<epoch>_]<cluster ts>_<app>_<attempt>_<number>: YARN allocates in (attempt, number) order."""
    return tuple(int(p) for p in container_id.split("_")[-2:] if p.isdigit())


def lost_agents(agents: Sequence[AgentHandle], containers: Sequence[ContainerStatus]) -> list[tuple[AgentHandle, str]]:
    """The attached agents whose container YARN no longer runs, each with why.

    When the ResourceManager declares a NodeManager LOST, it counts the node's containers lost: the service's
    ApplicationMaster lists each STOPPED and relaunches its instance in a new container on another node, whose
    agent attaches as a new worker. But the old container's processes may live on without their NodeManager,
    still in the ring. Only what YARN says counts: the agent's container listed as ended, or its instance running
    in a later container. A container YARN does not list at all (an ApplicationMaster still recovering its
    containers, one started a moment ago) counts nobody out. Agents leaving, ended or disconnected are left alone,
    and so are preempted ones: YARN counts a preempted container ended while its agent still stops the process
    (which the ring of a job at ``--min_workers`` keeps until then), and that is no loss.
    """
    listed = {c.id: c for c in containers}
    running = {c.component_instance_name: c for c in containers if c.state not in ENDED_CONTAINER_STATES}
    lost: list[tuple[AgentHandle, str]] = []
    for agent in agents:
        if not agent.staying:
            continue
        mine = listed.get(agent.container_id)
        if mine is not None and mine.state not in ENDED_CONTAINER_STATES:
            continue  # YARN runs it
        now = running.get(agent.instance)
        if now is not None and _allocation_order(now.id) <= _allocation_order(agent.container_id):
            now = None  # an earlier container of its instance: not its successor
        if mine is None and now is None:
            continue  # not listed, nor a successor: no word from YARN
        where = (mine.bare_host or mine.hostname) if mine is not None else None
        lost.append(
            (
                agent,
                f"{agent.instance}'s container {agent.container_id} was lost with its NodeManager on "
                f"{where or agent.host}: YARN counts it "
                + (str(mine.state) if mine is not None else "gone")
                + (f" and relaunched {agent.instance} in container {now.id}" if now is not None else "")
                + "; its agent still ran and was stopped, out of the ring",
            )
        )
    return lost


def workers_that_fit(
    queues: Sequence[QueueReport], nodes: Sequence[NodeReport], memory_mb: int, vcores: int, queue: str | None
) -> int:
    """How many more workers of ``memory_mb`` and ``vcores`` the cluster can place now without anyone waiting:
    0 while any queue has containers pending (capacity taken now would be preempted back for them); else what
    the running nodes' free resources hold, worker by worker, and, for a job in ``queue`` (a leaf name or
    path), no more than that queue's maximum leaves room for."""
    if any(q.pending_containers for q in queues):
        return 0
    on_nodes = sum(min(n.free_memory_mb // memory_mb, n.free_vcores // vcores) for n in nodes if n.state == "RUNNING")
    mine = next((q for q in queues if queue in (q.name, q.path)), None) if queue else None
    if mine is None:
        return on_nodes
    in_queue = min(
        (mine.max_memory_mb - mine.used_memory_mb) // memory_mb, (mine.max_vcores - mine.used_vcores) // vcores
    )
    return max(0, min(on_nodes, in_queue))


def grow_back(workers: int, preempted_from: int | None, fits: int) -> int | None:
    """The worker target a job YARN preempted grows back to: towards ``preempted_from`` (its target before the
    preemption), by the ``fits`` workers the cluster can hold now; None: stay at ``workers``."""
    if preempted_from is None or fits <= 0 or workers >= preempted_from:
        return None
    return min(preempted_from, workers + fits)


#: A job's first ring forms once its target of workers is warm; with fewer (at least ``--min_workers``) once
#: every container YARN started holds a warm worker and none came for START_SETTLE_S (the others are not placed:
#: the cluster is full; they join the ring as YARN places them), and at the latest after START_WAIT_S.
START_SETTLE_S = 5.0
START_WAIT_S = 30.0


def first_ring_ready(*, warm: int, live: int, target: int, minimum: int, waited_s: float, unchanged_s: float) -> bool:
    """Whether a job's first ring may form now: ``warm`` of its ``live`` agents (one a container YARN started)
    are warm, the job's ``target`` and ``--min_workers`` ``minimum``; it has waited ``waited_s`` and the number
    of live agents has not changed for ``unchanged_s``."""
    if warm >= target:
        return True
    if warm < minimum:
        return False
    return (warm == live and unchanged_s > START_SETTLE_S) or waited_s > START_WAIT_S


#: How a target an operator set through YARN's own tools is named in the job's timeline and status.
THROUGH_YARN = "through YARN"


@dataclass(frozen=True)
class YarnChange:
    """What the driver does about a worker count YARN was given by someone else (``yarn app -flex``,
    ``-decommission``, the Services REST API, YARN's UI): take it as the operator's target (``target``, with the
    instances YARN removes by name), or refuse it (``refused`` says why) and put YARN back to ``put_back``."""

    desired: int
    target: pb.Target | None = None
    refused: str = ""
    put_back: int = 0
    #: YARN named the instances it removes (a decommission), rather than only lowering its count
    by_name: bool = False


def yarn_change(
    desired: int | None,
    ours: int,
    limits: Limits,
    *,
    decommissioned: Collection[str] = (),
    removing: Collection[str] = (),
    live: Sequence[Member] = (),
) -> YarnChange | None:
    """The reconcile step's action when YARN's desired worker count (``desired``, its ``number_of_containers``)
    is not the count the driver last gave it (``ours``) while the driver is not changing it itself: None when
    they agree (or YARN's count is not known).

    A count within the job's limits is the operator's target, versioned like any other, its reason saying it came
    through YARN; the live instances YARN decommissioned that the driver did not name (``removing``) leave by
    name; on a flex down, the live workers YARN stops on its own (its highest-numbered instances) are named as
    the leavers, so the ring loses those and no other. A count outside the limits is refused and YARN put back
    to ``ours``.
    """
    if desired is None or desired == ours:
        return None
    names = {m.instance for m in live}
    named = sorted(i for i in decommissioned if i in names and i not in set(removing))
    how = f"decommission of {', '.join(named)}" if named else "flex"
    if desired > limits.max or desired < limits.min:
        bound = (
            f"above the job's --max_workers {limits.max}"
            if desired > limits.max
            else f"below the job's --min_workers {limits.min}"
        )
        why = f"YARN was given {desired} workers ({how} {THROUGH_YARN}): {desired} is {bound}"
        return YarnChange(
            desired, refused=f"{why}; refused, YARN put back to {ours}", put_back=ours, by_name=bool(named)
        )
    reason = f"{how} {THROUGH_YARN}: {ours} -> {desired} workers"
    leavers = named or sorted(stopped_by_the_scale_in(live, desired, ()))
    return YarnChange(desired, target=pb.Target(workers=desired, remove=leavers, reason=reason), by_name=bool(named))
