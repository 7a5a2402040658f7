"""A controller round's step: what to do, from what was observed and what the controller keeps of each job.

:func:`step` is pure (no clock, no I/O but its log lines): the observation (:class:`Observation`: the live
jobs, one driver status each, their metrics, the cluster's room) and each job's entry (:class:`Tracked`) in,
what changes out (:class:`Step`). In order it

1. follows each decision sent (:func:`follow`): applied once the driver's target, YARN's READY workers and the
   ring all have its size; else pending with why, stalled once ``stall_after`` seconds have passed; a job that
   ended or was submitted again fails it; a job whose driver's target is to be adopted takes it;
2. counts what each job holds (:func:`count_fixed` with ``--capacity`` slots, else :func:`count_yarn`);
3. builds the policy's :class:`~submarine_elastic.policy.Snapshot` and asks ``decide`` (the policy engine);
4. turns each decision into a record to store and a target to send (:func:`sends`), none for a busy job;
5. lowers the target of a job that asks for more than fits once it has asked for ``settle`` seconds
   (:func:`lower_short`): a running job's, and a job's that has not started (no ring seen yet, its driver
   answering), counted from the first round it asks, not from its ring's first report.

The service (:mod:`.service`) observes, runs the step, and carries out what it returns.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from submarine_elastic.controller.api import (
    DecisionRecord,
    DecisionState,
    DriverStatus,
    JobFootprint,
    JobRecord,
    JobSize,
    JobSource,
    NodeResources,
)
from submarine_elastic.controller.book import Converging, Follow, Tracked
from submarine_elastic.controller.capacity import SlotCount, fit
from submarine_elastic.controller.jobmetrics import HistoryRow, ReadMetrics
from submarine_elastic.policy import DEFAULT_QUEUE, Decision, JobMetrics, JobView, QueueShare, Snapshot
from submarine_elastic.protocol.proto import elastic_pb2 as pb

log = logging.getLogger(__name__)


class Held(NamedTuple):
    """Workers a job holds in one round: in its ring, and given to it but not in its ring yet."""

    current: int
    pending: int


@dataclass(frozen=True)
class Room:
    """What one round counts: the capacity in slots, what each job holds, who asks for more than fits."""

    capacity: int
    holding: dict[str, Held]  # by job id
    short: dict[str, tuple[int, str]]  # job id -> (workers that fit, why)
    #: the jobs of ``short`` that have not started: no ring reported, none ever seen by the controller
    unstarted: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ClusterRoom:
    """The cluster as YARN places containers, observed once a round (see :mod:`.capacity`).

    Attributes:
        nodes: the RUNNING nodes with their free room.
        footprints: each job that takes part, with its footprint (the slot's size where YARN shows none yet).
        slots: the nodes counted in slots of one size; None when no node can hold one.
        kept: the capacity in slots after the filter of dips (:class:`~.capacity.CapacityFilter`).
    """

    nodes: tuple[NodeResources, ...]
    footprints: Mapping[str, JobFootprint]
    slots: SlotCount | None
    kept: int = 0


@dataclass(frozen=True)
class Observation:
    """What one round read.

    Attributes:
        now: wall-clock seconds of the round.
        jobs: the live jobs, in submission order.
        statuses: each live job's driver status (None: its driver did not answer).
        metrics: each live job's metrics.
        batch_limits: each live job's batch limits, as its driver last reported them.
        queues: the scheduler's leaf queues ([] with ``--capacity``).
        capacity: ``--capacity`` slots, or None to count the cluster.
        cluster: the cluster's room (None with ``--capacity``, or when the nodes are unknown).
        ended: the jobs this round found ended (their service ended while the ResourceManager still lists their
            application); not in ``jobs``.
    """

    now: float
    jobs: tuple[JobRecord, ...]
    statuses: Mapping[str, DriverStatus | None]
    metrics: Mapping[str, ReadMetrics] = field(default_factory=dict)
    batch_limits: Mapping[str, tuple[int, int] | None] = field(default_factory=dict)
    queues: tuple[QueueShare, ...] = ()
    capacity: int | None = None
    cluster: ClusterRoom | None = None
    ended: tuple[JobRecord, ...] = ()

    def ring(self, job_id: str) -> int | None:
        status = self.statuses.get(job_id)
        return status.ring if status is not None else None


@dataclass(frozen=True)
class Send:
    """A decision of a round, recorded with its job's ``changes`` before any is sent, then sent to its driver.

    Attributes:
        record, changes: the decision and the fields of its job's record to set with it.
        run, previous_target: the job's run, and its target before (set back if the driver does not take it).
        replace: workers to replace (a replacement, not a resize).
        batch: the batch part of the target (global batch, accumulation steps, learning rate); None: the job's.
        restarts_cooldown: whether its being applied restarts the job's cooldown.
    """

    record: DecisionRecord
    changes: Mapping[str, Any]
    run: int
    previous_target: int
    replace: tuple[str, ...] = ()
    batch: pb.Target | None = None
    restarts_cooldown: bool = True


@dataclass(frozen=True)
class Step:
    """What a round's step came to.

    Attributes:
        follows: what following the decisions sent came to (applied before anything else).
        rings: the ring size of each job whose ring runs (its record's ``workers``; a pending job runs).
        counted: whether the room was counted (False: the nodes are unknown, and nothing below was decided).
        history: throughput figures to save.
        stalls: pending decisions a lowered target supersedes, to note as stalled before it is recorded.
        sends: decisions to record and send, in order.
        short_since: since when each job asks for more than fits.
    """

    follows: tuple[Follow, ...]
    rings: Mapping[str, int]
    counted: bool = False
    history: tuple[HistoryRow, ...] = ()
    stalls: tuple[Follow, ...] = ()
    sends: tuple[Send, ...] = ()
    short_since: Mapping[str, tuple[int, float]] = field(default_factory=dict)


# ---------------------------------------------------------------------- 1. following


def check(job_id: str, converging: Converging, seen: JobSize | None, now: float, stall_after: float) -> Follow | None:
    """Applied when the driver's target, YARN's READY workers and the ring all have the decided size; else pending
    with why, and stalled once ``stall_after`` seconds have passed since it was decided; None: nothing changed."""
    to = converging.record.to_workers
    why = "its driver does not answer" if seen is None else seen.lag(to)
    if why is None:
        log.info("resize of %s to %d applied: YARN and the ring have it", job_id, to)
        changes: dict[str, Any] = {"workers": to, "observed_at": now}
        if converging.restarts_cooldown:
            changes["last_resize_at"] = now
        return Follow(job_id, converging, None, finish=(DecisionState.APPLIED, None), changes=changes)
    stalled = converging.stalled or now - converging.record.time >= stall_after
    if stalled and not converging.stalled:
        log.warning(
            "resize of %s to %d stalled: not converged %.0f s after it was decided (%s)",
            job_id,
            to,
            now - converging.record.time,
            why,
        )
    if (why, stalled) == (converging.why, converging.stalled):
        return None
    return Follow(job_id, converging, replace(converging, why=why, stalled=stalled), progress=(why, stalled))


def _follow_one(
    job_id: str, job: JobRecord | None, tracked: Tracked, seen: JobSize | None, now: float, stall_after: float
) -> Follow | None:
    was = converging = tracked.converging
    unadopted = tracked.unadopted
    finish: tuple[DecisionState, str | None] | None = None
    changes: dict[str, Any] = {}
    if converging is not None and (job is None or job.run != converging.run):
        if not converging.stalled:
            why = "the job ended" if job is None else "the job was submitted again"
            finish = (DecisionState.FAILED, f"{why} before it converged")
        converging = None
    if job is None:
        unadopted = False  # a job that ended gets no resize anyway
    elif not tracked.sending and unadopted and seen is not None:
        # Take the driver's target as the job's: a resize the driver took is in flight, not undone. A pending
        # decision for another size was never taken by it (or was overtaken): it fails, nothing is sent.
        if seen.target != job.target:
            log.info(
                "job %s: its driver's target is %d workers (%d recorded here); the controller adopts it",
                job_id,
                seen.target,
                job.target,
            )
            changes["target"] = seen.target
        unadopted = False
        if converging is not None and converging.record.to_workers != seen.target:
            finish = (
                DecisionState.FAILED,
                f"its driver's target is {seen.target}, not {converging.record.to_workers}: the driver did not take "
                f"it before the controller restarted, or was resized since",
            )
            converging = None
    followed = Follow(job_id, was, converging, unadopted != tracked.unadopted, finish, None, changes)
    if job is not None and not tracked.sending and converging is not None:
        checked = check(job_id, converging, seen, now, stall_after)
        if checked is not None:
            followed = replace(
                followed,
                now=checked.now,
                finish=checked.finish,
                progress=checked.progress,
                changes={**changes, **checked.changes},
            )
    if followed.now is was and not followed.adopted and followed.finish is None and not followed.changes:
        return None
    return followed


def follow(
    jobs: Iterable[JobRecord],
    tracked: Mapping[str, Tracked],
    statuses: Mapping[str, DriverStatus | None],
    now: float,
    stall_after: float,
) -> list[Follow]:
    """Adopt the driver's target of each job that needs it, and move each decision sent on: applied, pending with
    why, or stalled; a decision of a job that ended, or of a run before the job's, fails. A job whose decision is
    being sent is left to its sender."""
    by_id = {job.job_id: job for job in jobs}
    out = []
    for job_id, entry in tracked.items():
        if entry.converging is None and not entry.unadopted:
            continue
        status = statuses.get(job_id)
        followed = _follow_one(job_id, by_id.get(job_id), entry, status.size if status else None, now, stall_after)
        if followed is not None:
            out.append(followed)
    return out


# ---------------------------------------------------------------------- 2. counting


def count_fixed(jobs: Iterable[JobRecord], rings: Mapping[str, int | None], capacity: int) -> Room:
    """``--capacity`` slots, one per worker whatever its size; every live job takes part."""
    jobs = list(jobs)
    held = sum(max(size, job.target) for job in jobs if (size := rings.get(job.job_id)) is not None)
    holding: dict[str, Held] = {}
    for job in jobs:
        size = rings.get(job.job_id)
        if size is not None:
            # Running: it holds its ring plus any scale-out in flight.
            holding[job.job_id] = Held(size, max(0, job.target - size))
        elif held + job.target <= capacity:
            # Not started yet, and what it asked for is free: it holds that while its ring forms.
            holding[job.job_id] = Held(0, job.target)
            held += job.target
        else:
            # Not started and the cluster is full: it waits, so the arbiter makes room for it.
            holding[job.job_id] = Held(0, 0)
    return Room(capacity=capacity, holding=holding, short={})


def takes_part(job: JobRecord, ring: int | None, footprint_known: bool) -> bool:
    """Whether a job takes part in counting the cluster: a job ``job run`` registered that YARN does not show yet
    may never get there (its submission can fail), and nobody gives it workers before it does; an application
    someone else started is not managed before its ring shows (its containers count as used room)."""
    if job.source is JobSource.CLI:
        return footprint_known
    return not (job.source is JobSource.YARN and ring is None)


def count_yarn(
    jobs: Iterable[JobRecord],
    rings: Mapping[str, int | None],
    cluster: ClusterRoom,
    answered: AbstractSet[str] = frozenset(),
) -> Room:
    """Slots as YARN places containers (see :mod:`.capacity`).

    A job holds the workers YARN gave it (in its ring or warming up) plus those it asked for that fit in the free
    slots, claimed in order of submission; what does not fit it does not hold. Neither is an arrival counted
    while YARN places its ApplicationMaster and driver in room that is free, but the free slots its minimum
    needs are kept back from the capacity meanwhile (in the same order), so that no policy hands them out. A
    job reported through the bridge that YARN does not know is taken to have workers of the slot's size. Short:
    a running job that asks for more than fits, and one that has not started (``answered``: its driver answered
    this round, with no ring, and no ring of it was ever seen) that does. The workers a running job holds above
    its target are on their way out (a shrink, often decided for another job, takes a commit and YARN's stop of
    the containers: longer than the settle time): a job they would fit is not short meanwhile (claimed in the
    same order), or it would be lowered while the room it was given comes free, and grown again the next round.
    """
    slots = cluster.slots
    if slots is None:
        return Room(capacity=0, holding={}, short={})
    footprints = cluster.footprints
    managed = sorted((job for job in jobs if job.job_id in footprints), key=lambda j: (j.submitted_at, j.job_id))
    # Only what YARN shows is filtered: room that arrivals' AMs and drivers will take is no dip.
    seen = slots.held + slots.free + slots.reserved
    capacity = max(0, cluster.kept - slots.reserved)
    free = slots.free + (cluster.kept - seen)  # a drop not acted on yet still counts as free
    # An arrival whose ApplicationMaster and driver fit in the free room waits until YARN has placed them
    # (seconds): where they land is YARN's choice, and room taken from others for its workers could go to them
    # instead. Their room stays counted as taken meanwhile.
    room = {n.node_id: n.free for n in cluster.nodes}
    placing = set()
    for job in managed:
        unplaced = footprints[job.job_id].unplaced
        if rings.get(job.job_id) is None and unplaced and (left := fit(room, unplaced)) is not None:
            room = left
            placing.add(job.job_id)
    holding: dict[str, Held] = {}
    short: dict[str, tuple[int, str]] = {}
    unstarted: set[str] = set()
    kept_back = 0
    leaving = sum(
        max(0, max(size, footprints[job.job_id].workers_allocated) - job.target)
        for job in managed
        if job.job_id not in placing and (size := rings.get(job.job_id)) is not None
    )
    for job in managed:
        if job.job_id in placing:
            # Nor is the room for its minimum handed out meanwhile: that is all it is sure to get once it shows,
            # and a slot given to a running job now would have to be taken back at a resize's cost.
            keep = min(job.min_workers, max(0, free))
            free -= keep
            kept_back += keep
            continue
        size = rings.get(job.job_id)
        current = size or 0
        given = max(current, footprints[job.job_id].workers_allocated)
        claim = min(max(0, job.target - given), max(0, free))
        free -= claim
        holding[job.job_id] = Held(current, given - current + claim)
        # A job whose driver answers and whose ring was never seen has not started: it can take a lower target.
        fresh = size is None and job.observed_at is None and job.job_id in answered
        coming = min(max(0, job.target - given - claim), leaving) if size is not None else 0
        leaving -= coming
        if (size is not None or fresh) and given + claim + coming < job.target:
            short[job.job_id] = (
                given + claim,
                f"only {given + claim} of its {job.target} workers fit "
                f"({footprints[job.job_id].worker} each; {slots.free} free slots of {slots.unit})"
                + ("; it has not started" if fresh else ""),
            )
            if fresh:
                unstarted.add(job.job_id)
    return Room(capacity=max(0, capacity - kept_back), holding=holding, short=short, unstarted=frozenset(unstarted))


# ---------------------------------------------------------------------- 3. the snapshot


def queue_of(job: JobRecord, queues: list[str]) -> str:
    """The leaf queue a job counts in: the one it names (a leaf name, or a path's last part), YARN's ``default``
    when it names none; the first of ``queues`` when that is not one of them; :data:`DEFAULT_QUEUE` (the one
    pool) when there are no queues."""
    leaf = (job.queue or DEFAULT_QUEUE).rsplit(".", 1)[-1]
    return leaf if leaf in queues else queues[0] if queues else DEFAULT_QUEUE


def view(job: JobRecord, held: Held, obs: Observation, names: list[str]) -> JobView:
    """The job as the policy sees it this round."""
    status = obs.statuses.get(job.job_id)
    ring = status is not None and status.ring is not None
    placement = status.placement if status is not None and ring else ()
    limits = obs.batch_limits.get(job.job_id)
    read = obs.metrics.get(job.job_id)
    metrics = read.metrics if read is not None else JobMetrics()
    if metrics.batch_size is None and status is not None and status.batch_size is not None:
        # Its report has not come (a controller just started, or its sender reconnecting): the batch its driver set
        # is the one it trains with; unknown, every round's batch would be a change, each a decision of its own.
        metrics = replace(metrics, batch_size=status.batch_size)
    return JobView(
        job_id=job.job_id,
        min_workers=job.min_workers,
        max_workers=job.max_workers,
        elastic=job.elastic,
        current_workers=held.current,
        pending_workers=held.pending,
        submitted_at=job.submitted_at,
        last_resize_at=job.last_resize_at,
        instances=status.instances if status is not None and ring else (),
        metrics=metrics,
        min_batch_size=limits[0] if limits else None,
        max_batch_size=limits[1] if limits else None,
        # What the driver last read; a count that no longer fits what the job holds (a resize between the two
        # reads) is left unknown rather than refused.
        placement=placement if sum(placement) <= held.current + held.pending else (),
        queue=queue_of(job, names),
        # Within its limits: a job found on the cluster may run outside the ones it is kept with.
        requested_workers=None if job.requested is None else min(max(job.requested, job.min_workers), job.max_workers),
    )


# ---------------------------------------------------------------------- 4. decisions to send


def batch_change(decision: Decision, metrics: JobMetrics | None, sent: pb.Target | None) -> pb.Target | None:
    """The batch part of the target ``decision`` asks of its job's driver, or None when it asks none or the same
    one its driver last took from this controller (``sent``). A learning rate alone keeps the batch the job
    reports."""
    if decision.batch_size is None and decision.learning_rate is None:
        return None
    batch_size = decision.batch_size
    if batch_size is None:
        batch_size = sent.batch_size if sent is not None else (metrics.batch_size if metrics is not None else None)
    if batch_size is None:
        log.warning("%s: a learning rate without a known batch size is not sent", decision.job_id)
        return None
    batch = pb.Target(batch_size=batch_size, accum_steps=decision.accum_steps or 0)
    if decision.learning_rate is not None:
        batch.learning_rate = decision.learning_rate
    return None if batch == sent else batch


def sends(
    decisions: Iterable[Decision],
    managed: Mapping[str, JobRecord],
    room: Room,
    tracked: Mapping[str, Tracked],
    metrics: Mapping[str, JobMetrics],
    now: float,
) -> tuple[list[Send], set[str]]:
    """Each decision for a job that is not busy as a record and a target to send: a replacement, a batch alone
    (no resize, no cooldown), or a resize from what the job holds; and the jobs that were decided for."""
    out: list[Send] = []
    decided: set[str] = set()
    idle = Tracked()
    for decision in decisions:
        job = managed[decision.job_id]
        entry = tracked.get(job.job_id, idle)
        if entry.busy:
            continue  # its last resize is still converging: none is stacked on it
        decided.add(job.job_id)
        batch = batch_change(decision, metrics.get(job.job_id), entry.batch_sent)
        if decision.replace and decision.target_workers == job.target:
            why = f"replace {', '.join(decision.replace)}: {decision.reason}"
            record = DecisionRecord(job.job_id, now, job.target, job.target, why)
            out.append(Send(record, {"last_resize_at": now}, job.run, job.target, replace=tuple(decision.replace)))
            continue
        if decision.target_workers == job.target:
            if batch is not None:
                record = DecisionRecord(job.job_id, now, job.target, job.target, decision.reason)
                out.append(Send(record, {}, job.run, job.target, batch=batch, restarts_cooldown=False))
            continue
        holding = sum(room.holding[job.job_id])
        record = DecisionRecord(job.job_id, now, holding, decision.target_workers, decision.reason)
        changes = {"target": decision.target_workers, "last_resize_at": now}
        out.append(Send(record, changes, job.run, job.target, batch=batch))
    return out, decided


# ---------------------------------------------------------------------- 5. targets that do not fit


def lower_short(
    managed: Iterable[JobRecord],
    room: Room,
    decided: set[str],
    tracked: Mapping[str, Tracked],
    now: float,
    settle: float,
) -> tuple[list[Follow], list[Send], dict[str, tuple[int, float]]]:
    """Bring a job's target down to what fits (at least its minimum) once it has asked for more for ``settle``
    seconds: an open YARN request would take the next room that frees, whoever the arbiter gives it to. The
    wait is YARN's lag (a container allocated shows in its service's status a heartbeat or two after the room
    it took left the nodes' free room): a job whose containers are being placed is not lowered. A job that has
    not started (``room.unstarted``) is lowered the same way, ``settle`` seconds after it first asked, not
    after its ring reports (its startup, tens of seconds, during which its requests took the GPUs that freed);
    the arbiter sizes it once its ring reports. Returns the pending decisions this supersedes (noted stalled),
    the lowered targets, and since when each job asks for more."""
    stalls: list[Follow] = []
    out: list[Send] = []
    since_now: dict[str, tuple[int, float]] = {}
    idle = Tracked()
    for job in managed:
        if job.job_id not in room.short:
            continue
        entry = tracked.get(job.job_id, idle)
        earlier = entry.short_since
        since = earlier[1] if earlier is not None and earlier[0] == job.run else now
        since_now[job.job_id] = (job.run, since)
        fits, why = room.short[job.job_id]
        to = max(fits, job.min_workers)
        if now - since < settle or job.job_id in decided or entry.sending or entry.unadopted or to >= job.target:
            continue
        # A grow still pending cannot converge in the room there is: it stalls, and this supersedes it.
        converging = entry.converging
        if converging is not None and not converging.stalled:
            noted = f"{converging.why}; {why}" if converging.why else why
            stalled = replace(converging, why=noted, stalled=True)
            stalls.append(Follow(job.job_id, converging, stalled, progress=(noted, True)))
        record = DecisionRecord(job.job_id, now, job.target, to, why)
        out.append(Send(record, {"target": to}, job.run, job.target, restarts_cooldown=False))
    return stalls, out, since_now


# ---------------------------------------------------------------------- the step


def step(
    obs: Observation,
    tracked: Mapping[str, Tracked],
    decide: Callable[[Snapshot], Iterable[Decision]],
    *,
    stall_after: float,
    settle: float,
) -> Step:
    """One round's step (see the module's steps). ``decide`` is the policy engine's."""
    follows = follow(obs.jobs, tracked, obs.statuses, obs.now, stall_after)
    after = dict(tracked)
    changed: dict[str, dict[str, Any]] = {}
    for followed in follows:
        after[followed.job_id] = followed.applied_to(after.get(followed.job_id, Tracked()))
        changed.setdefault(followed.job_id, {}).update(followed.changes)
    rings = {job.job_id: ring for job in obs.jobs if (ring := obs.ring(job.job_id)) is not None}
    jobs = [replace(job, **changed[job.job_id]) if job.job_id in changed else job for job in obs.jobs]
    all_rings = {job.job_id: obs.ring(job.job_id) for job in jobs}
    if obs.capacity is not None:
        room = count_fixed(jobs, all_rings, obs.capacity)
    elif obs.cluster is not None:
        answered = {job_id for job_id, status in obs.statuses.items() if status is not None}
        room = count_yarn(jobs, all_rings, obs.cluster, answered)
    else:
        return Step(tuple(follows), rings)
    managed = [job for job in jobs if job.job_id in room.holding]
    names = [q.name for q in obs.queues]
    views = tuple(view(job, room.holding[job.job_id], obs, names) for job in managed)
    history = tuple(row for job in managed if (read := obs.metrics.get(job.job_id)) for row in read.history)
    total = sum(v.holding for v in views)
    snapshot = Snapshot(
        now=obs.now, capacity=room.capacity, free=max(0, room.capacity - total), jobs=views, queues=obs.queues
    )
    metrics_of = {v.job_id: v.metrics for v in views}
    decided_sends, decided = sends(decide(snapshot), {j.job_id: j for j in managed}, room, after, metrics_of, obs.now)
    stalls, lowered, short_since = lower_short(managed, room, decided, after, obs.now, settle)
    return Step(tuple(follows), rings, True, history, tuple(stalls), (*decided_sends, *lowered), short_since)
