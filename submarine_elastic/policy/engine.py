"""The policy engine: job policies, then an arbiter, with containment and anti-flapping around both.

One entry point, :meth:`PolicyEngine.decide`, takes a :class:`Snapshot` and returns the decisions of
that round. The live controller and the trace-driven simulator call it unchanged; it reads no clock
(time is ``Snapshot.now``) and iterates in a fixed order, so equal inputs give equal outputs.

A round, per job in snapshot order:

1. lifecycle hooks of its job policy (``before_train``, ``on_resize``, ``after_step``; ``after_train``
   for jobs that left);
2. ``propose`` (elastic jobs only). An exception or a nonsensical decision (wrong job, outside
   ``[min_workers, max_workers]``, an unknown instance to replace) is refused: logged, kept in
   :attr:`PolicyEngine.last_refusals`, and the job's wish becomes "keep the size" (its minimum while
   waiting);
3. anti-flapping: a voluntary change within ``cooldown_s`` of the job's ``last_resize_at`` is held,
   and so is one that reverses the job's previous change within ``reversal_cooldown_s``;
4. the arbiter splits the available slots; each allocation that breaks a rule (see
   :meth:`ClusterArbiter.allocate`) is refused, and if the total still exceeds the capacity the
   growths of the latest-submitted jobs are refused until it fits;
5. a batch size (and accumulation) an arbiter gives with an accepted allocation is chosen for the count
   it gives, and takes the place of the job policy's; otherwise the job policy's batch size applies, but
   only at the count the job policy asked for it with (at another count it was not chosen for it). With a
   change of count the batch goes out even where it is the job's (it was chosen for the new count). The
   nodes a job should span (``Decision.nodes``) follow the same rule; at the count a job holds, nodes below
   those it spans move its workers closer together: a change of its worker set, which the cooldown holds
   and which a job that is not elastic never makes.

With two or more queues in the snapshot (``Snapshot.queues``), step 4 runs once per queue: the available slots
are split among the queues (:func:`~submarine_elastic.policy.queues.split_slots`: guarantees first, then the
idle rest to queues that want more, each up to its maximum), and each queue's jobs are arbitrated on its
slots alone, by the queue's own copy of the arbiter (made when the queue is first seen, so what an arbiter
remembers of its jobs stays within their queue). A growth beyond its queue's slots is refused like one beyond
the cluster's; a queue that holds more than its slots (another queue's jobs asked for their guarantee back)
shrinks its elastic jobs, the largest first, to their minimum at most, as a waiting job's arrival would (a job
shrunk within its cooldown already is left), but only as far as the other queues take the slots this round (an
arrival that cannot start even so takes nothing, as in one pool). Then growths of the latest-submitted jobs are
refused until all queues together fit the cluster.

The cooldown holds every change of a job, the arbiter's included, with one exception: a waiting job
may start by taking workers from a job inside its cooldown, unless that job already gave workers
(was shrunk) within the cooldown. So no job shrinks twice within ``cooldown_s``.

A job id seen with another ``submitted_at`` than before is a new job: the old one gets
``after_train`` and the new one ``before_train``.
"""

from __future__ import annotations

import copy
import functools
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from submarine_elastic.limits import batch_setting_problem

from .api import (
    Allocation,
    ClusterArbiter,
    Decision,
    JobPolicy,
    JobView,
    PolicyConfigError,
    PolicyStateError,
    Refusal,
    Request,
    Snapshot,
)
from .queues import split_slots

__all__ = ["DEFAULT_COOLDOWN_S", "PolicyEngine"]

_log = logging.getLogger(__name__)

#: Seconds after a resize during which a job's size is not changed voluntarily.
DEFAULT_COOLDOWN_S = 60.0
_STATE_VERSION = 1
_T = TypeVar("_T")


@dataclass
class _Seen:
    """What the engine remembers of a job between rounds."""

    workers: int
    step: int
    direction: int = 0  # sign of the last size change the engine decided
    shrunk_at: float | None = None  # when the engine last decided to shrink it
    submitted_at: float | None = None  # tells a job submitted again under the same id from the one before

    def to_json(self) -> dict[str, Any]:
        return {
            "workers": self.workers,
            "step": self.step,
            "direction": self.direction,
            "shrunk_at": self.shrunk_at,
            "submitted_at": self.submitted_at,
        }


def _batch_problem(job: JobView, batch_size: int, accum_steps: int | None) -> str | None:
    """Why the job's driver would refuse this batch (the shared rule, against the job's batch limits when it has
    them); None if it takes it. Callers ask only of a batch that would be sent (:meth:`PolicyEngine._final`):
    the batch a job has is kept, not sent, and may lie outside the range policies may set."""
    return batch_setting_problem(
        batch_size, accum_steps or 0, min_batch_size=job.min_batch_size, max_batch_size=job.max_batch_size
    )


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def _sign(value: int) -> int:
    return (value > 0) - (value < 0)


def _moves(job: JobView, nodes: int | None) -> bool:
    """Whether ``nodes`` asks a running job to span fewer nodes than it does (to move its workers)."""
    return nodes is not None and job.nodes is not None and nodes < job.nodes


class PolicyEngine:
    """Runs a job policy per job and one arbiter over all jobs, and contains both.

    Args:
        job_policy: the policy of every job without its own (default: :class:`StaticPolicy`, which
            keeps sizes and starts waiting jobs at their minimum).
        arbiter: splits capacity among jobs (default: :class:`FairShareArbiter`).
        job_policies: per-job policies by job id, overriding ``job_policy``.
        cooldown_s: no voluntary size change of a job within this many seconds of its last resize.
        reversal_cooldown_s: no voluntary change in the direction opposite to the job's previous
            change within this many seconds of it (hysteresis; default ``2 * cooldown_s``).
        logger: where decisions (INFO) and refusals (WARNING) go.

    Raises:
        PolicyConfigError: a policy is not a :class:`JobPolicy` / :class:`ClusterArbiter`, or a time is
            negative or not finite.
    """

    def __init__(
        self,
        job_policy: JobPolicy | None = None,
        arbiter: ClusterArbiter | None = None,
        *,
        job_policies: Mapping[str, JobPolicy] | None = None,
        cooldown_s: float = DEFAULT_COOLDOWN_S,
        reversal_cooldown_s: float | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        if job_policy is None:
            from .basic import StaticPolicy

            job_policy = StaticPolicy()
        if arbiter is None:
            from .fair_share import FairShareArbiter

            arbiter = FairShareArbiter()
        if not isinstance(job_policy, JobPolicy):
            raise PolicyConfigError(f"job_policy must be a JobPolicy, got {job_policy!r}")
        if not isinstance(arbiter, ClusterArbiter):
            raise PolicyConfigError(f"arbiter must be a ClusterArbiter, got {arbiter!r}")
        if not isinstance(cooldown_s, int | float) or not math.isfinite(cooldown_s) or cooldown_s < 0:
            raise PolicyConfigError(f"cooldown_s must be a finite number >= 0, got {cooldown_s!r}")
        if reversal_cooldown_s is None:
            reversal_cooldown_s = 2 * cooldown_s
        if (
            not isinstance(reversal_cooldown_s, int | float)
            or not math.isfinite(reversal_cooldown_s)
            or reversal_cooldown_s < 0
        ):
            raise PolicyConfigError(f"reversal_cooldown_s must be a finite number >= 0, got {reversal_cooldown_s!r}")
        self.job_policy = job_policy
        self.arbiter = arbiter
        self.cooldown_s = float(cooldown_s)
        self.reversal_cooldown_s = float(reversal_cooldown_s)
        self._log = logger or _log
        self._job_policies: dict[str, JobPolicy] = {}
        for job_id, policy in (job_policies or {}).items():
            self.set_job_policy(job_id, policy)
        self._seen: dict[str, _Seen] = {}
        self._refusals: tuple[Refusal, ...] = ()
        self._queue_arbiters: dict[str, ClusterArbiter] = {}  # queue name -> its copy of the arbiter

    # ------------------------------------------------------------------------------------- config

    def set_job_policy(self, job_id: str, policy: JobPolicy | None) -> None:
        """Give one job its own policy (None: back to the default one). Takes effect next round.

        Raises:
            PolicyConfigError: ``policy`` is neither None nor a :class:`JobPolicy`, or ``job_id`` is empty.
        """
        if not isinstance(job_id, str) or not job_id:
            raise PolicyConfigError(f"job_id must be a non-empty string, got {job_id!r}")
        if policy is None:
            self._job_policies.pop(job_id, None)
            return
        if not isinstance(policy, JobPolicy):
            raise PolicyConfigError(f"policy for {job_id!r} must be a JobPolicy, got {policy!r}")
        self._job_policies[job_id] = policy

    def policy_for(self, job_id: str) -> JobPolicy:
        """The job policy that decides for ``job_id``."""
        return self._job_policies.get(job_id, self.job_policy)

    @property
    def last_refusals(self) -> tuple[Refusal, ...]:
        """What the last :meth:`decide` refused, in the order it happened."""
        return self._refusals

    # ------------------------------------------------------------------------------------- decide

    def decide(self, snapshot: Snapshot) -> list[Decision]:
        """One policy round: the changes to make, one :class:`Decision` per job that should change
        (size, instances to replace, batch size or learning rate), in snapshot order.

        Jobs without a decision keep their size. Never raises because of a policy: failures are refused
        and listed in :attr:`last_refusals`. Does not block beyond the policies' own work.

        Raises:
            TypeError: ``snapshot`` is not a :class:`Snapshot`.
        """
        if not isinstance(snapshot, Snapshot):
            raise TypeError(f"decide needs a Snapshot, got {type(snapshot).__name__}")
        refusals: list[Refusal] = []
        self._departures(snapshot, refusals)

        requests: list[Request] = []
        extras: dict[str, Decision] = {}
        for job in snapshot.jobs:
            request, extra = self._request(job, snapshot, refusals)
            requests.append(request)
            if extra is not None:
                extras[job.job_id] = extra

        if len(snapshot.queues) > 1:
            targets, arbiter_reasons, batches = self._arbitrate_queues(snapshot, requests, refusals)
        else:
            targets, arbiter_reasons, batches = self._arbitrate(snapshot, requests, refusals, self.arbiter)

        decisions: list[Decision] = []
        for request in requests:
            decision = self._final(
                request,
                targets[request.job_id],
                arbiter_reasons,
                extras.get(request.job_id),
                snapshot.now,
                batches.get(request.job_id),
            )
            if decision is not None:
                decisions.append(decision)
                self._log.info(
                    "policy decision for %s: %d -> %d workers: %s",
                    decision.job_id,
                    request.holding,
                    decision.target_workers,
                    decision.reason,
                )
        self._refusals = tuple(refusals)
        return decisions

    def _refuse(self, refusals: list[Refusal], job_id: str | None, source: str, reason: str) -> None:
        refusals.append(Refusal(job_id=job_id, source=source, reason=reason))
        self._log.warning("refused output of %s for %s: %s", source, job_id or "all jobs", reason)

    def _call(
        self, refusals: list[Refusal], job_id: str | None, source: str, what: str, fn: Callable[[], _T]
    ) -> tuple[bool, _T | None]:
        """Run a policy's code; an exception becomes a refusal. Returns (ok, result)."""
        try:
            return True, fn()
        except Exception as exc:  # noqa: BLE001 - containment: a user policy may raise anything
            self._refuse(refusals, job_id, source, f"{what} raised {type(exc).__name__}: {exc}")
            return False, None

    def _departures(self, snapshot: Snapshot, refusals: list[Refusal]) -> None:
        present = {job.job_id: job.submitted_at for job in snapshot.jobs}

        def gone(job_id: str) -> bool:
            if job_id not in present:
                return True
            before = self._seen[job_id].submitted_at
            return before is not None and before != present[job_id]

        for job_id in [j for j in self._seen if gone(j)]:
            policy = self.policy_for(job_id)
            self._call(
                refusals,
                job_id,
                policy.display_name,
                "after_train",
                functools.partial(policy.after_train, job_id, snapshot),
            )
            del self._seen[job_id]

    def _hooks(self, job: JobView, snapshot: Snapshot, policy: JobPolicy, refusals: list[Refusal]) -> bool:
        """Call the lifecycle hooks due for ``job``; False if one raised."""
        source = policy.display_name
        seen = self._seen.get(job.job_id)
        ok = True
        if seen is None:
            ok, _ = self._call(refusals, job.job_id, source, "before_train", lambda: policy.before_train(job, snapshot))
            self._seen[job.job_id] = _Seen(
                workers=job.current_workers, step=job.metrics.step, submitted_at=job.submitted_at
            )
            return ok
        if job.current_workers != seen.workers:
            previous = seen.workers
            hook_ok, _ = self._call(
                refusals, job.job_id, source, "on_resize", lambda: policy.on_resize(job, previous, snapshot)
            )
            ok = ok and hook_ok
        if job.metrics.step > seen.step:
            hook_ok, _ = self._call(
                refusals, job.job_id, source, "after_step", lambda: policy.after_step(job, snapshot)
            )
            ok = ok and hook_ok
        seen.workers = job.current_workers
        seen.step = job.metrics.step
        seen.submitted_at = job.submitted_at
        return ok

    def _request(self, job: JobView, snapshot: Snapshot, refusals: list[Refusal]) -> tuple[Request, Decision | None]:
        policy = self.policy_for(job.job_id)
        source = policy.display_name
        hooks_ok = self._hooks(job, snapshot, policy, refusals)
        in_cooldown = job.last_resize_at is not None and snapshot.now - job.last_resize_at < self.cooldown_s
        settled = in_cooldown and not job.waiting
        shrunk_at = self._seen[job.job_id].shrunk_at
        preemptible = not settled or shrunk_at is None or snapshot.now - shrunk_at >= self.cooldown_s
        base = _clamp(job.holding, job.min_workers, job.max_workers)
        if job.waiting:
            base_reason = f"waiting: starts at its minimum of {job.min_workers}"
        elif base != job.holding:
            base_reason = f"back within its limits [{job.min_workers}, {job.max_workers}]"
        else:
            base_reason = f"keeps {base}"
        if not job.elastic:
            return Request(
                job=job, desired=job.min_workers, settled=not job.waiting, reason="fixed size (not elastic)"
            ), None
        if not hooks_ok:
            return Request(job=job, desired=base, settled=settled, reason=base_reason, preemptible=preemptible), None

        ok, proposal = self._call(refusals, job.job_id, source, "propose", lambda: policy.propose(job, snapshot))
        if not ok or proposal is None:
            return Request(job=job, desired=base, settled=settled, reason=base_reason, preemptible=preemptible), None
        if not isinstance(proposal, Decision):
            problem: str | None = f"propose returned {type(proposal).__name__}, not a Decision or None"
        else:
            problem = self._check_proposal(job, proposal)
        if problem is not None or not isinstance(proposal, Decision):
            self._refuse(refusals, job.job_id, source, problem or "not a Decision")
            return Request(job=job, desired=base, settled=settled, reason=base_reason, preemptible=preemptible), None

        desired, reason = proposal.target_workers, proposal.reason
        replace = proposal.replace
        if desired != base:
            seen = self._seen[job.job_id]
            since = None if job.last_resize_at is None else snapshot.now - job.last_resize_at
            if in_cooldown and since is not None:
                reason = f"cooldown: {self.cooldown_s - since:.0f}s left before changing {base} -> {desired}"
                desired = base
            elif (
                since is not None
                and seen.direction != 0
                and _sign(desired - base) == -seen.direction
                and since < self.reversal_cooldown_s
            ):
                reason = (
                    f"hysteresis: {base} -> {desired} would reverse the last change; "
                    f"{self.reversal_cooldown_s - since:.0f}s left"
                )
                desired = base
        if replace and in_cooldown:
            self._log.info("%s: replacing %s waits for the cooldown", job.job_id, ", ".join(replace))
            replace = ()
        # a batch and nodes are chosen for the count the policy asked for: held at another, they go with it
        asked = desired == proposal.target_workers
        extra = Decision(
            job_id=job.job_id,
            target_workers=desired,
            reason=reason,
            batch_size=proposal.batch_size if asked else None,
            learning_rate=proposal.learning_rate,
            replace=replace,
            accum_steps=proposal.accum_steps if asked else None,
            nodes=proposal.nodes if asked else None,
        )
        return Request(job=job, desired=desired, settled=settled, reason=reason, preemptible=preemptible), extra

    @staticmethod
    def _check_proposal(job: JobView, proposal: Decision) -> str | None:
        """Why ``proposal`` cannot be applied to ``job``, or None when it can."""
        if proposal.job_id != job.job_id:
            return f"decision for job {proposal.job_id!r} returned while deciding for {job.job_id!r}"
        if not job.min_workers <= proposal.target_workers <= job.max_workers:
            return (
                f"target {proposal.target_workers} is outside the job's limits [{job.min_workers}, {job.max_workers}]"
            )
        if (
            proposal.batch_size is not None
            and proposal.batch_size != job.metrics.batch_size
            and (problem := _batch_problem(job, proposal.batch_size, proposal.accum_steps))
        ):
            return problem
        if proposal.replace:
            if job.waiting:
                return f"cannot replace {', '.join(proposal.replace)} of a job that has not started"
            unknown = sorted(set(proposal.replace) - job.known_instances)
            if unknown:
                return f"replace names unknown instances {', '.join(unknown)}"
        return None

    def _arbitrate(
        self, snapshot: Snapshot, requests: Sequence[Request], refusals: list[Refusal], arbiter: ClusterArbiter
    ) -> tuple[dict[str, int], dict[str, str], dict[str, Allocation]]:
        """The worker count of every job, ``arbiter``'s reasons, and its accepted allocations that set a
        batch size or nodes (for the count they give)."""
        source = arbiter.display_name
        targets = {r.job_id: r.holding for r in requests}
        by_id = {r.job_id: r for r in requests}
        reasons: dict[str, str] = {}
        if not requests:
            return targets, reasons, {}
        ok, result = self._call(refusals, None, source, "allocate", lambda: arbiter.allocate(snapshot, requests))
        if not ok:
            return targets, reasons, {}
        if isinstance(result, str | bytes) or not isinstance(result, Sequence):
            self._refuse(refusals, None, source, f"allocate returned {type(result).__name__}, not a sequence")
            return targets, reasons, {}

        accepted: dict[str, Allocation] = {}
        for allocation in result:
            if not isinstance(allocation, Allocation):
                self._refuse(
                    refusals, None, source, f"allocate returned {type(allocation).__name__}, not an Allocation"
                )
                continue
            request = by_id.get(allocation.job_id)
            problem = self._check_allocation(request, allocation, accepted)
            if problem is not None:
                self._refuse(refusals, allocation.job_id, source, problem)
                continue
            accepted[allocation.job_id] = allocation

        admits = any(
            by_id[a.job_id].job.waiting and a.workers >= by_id[a.job_id].job.min_workers for a in accepted.values()
        )
        for job_id, allocation in list(accepted.items()):
            request = by_id[job_id]
            if request.settled and allocation.workers < request.holding and not (admits and request.preemptible):
                why = "" if request.preemptible else " (it was shrunk within the cooldown already)"
                self._refuse(
                    refusals,
                    job_id,
                    source,
                    f"shrinks {request.holding} -> {allocation.workers} during its cooldown{why}",
                )
                del accepted[job_id]

        for job_id, allocation in accepted.items():
            targets[job_id] = allocation.workers
            reasons[job_id] = allocation.reason

        self._refuse_growths(requests, targets, reasons, snapshot.available, refusals, source)
        chosen = {
            job_id: a
            for job_id, a in accepted.items()
            if (a.batch_size is not None or a.nodes is not None) and targets[job_id] == a.workers
        }
        return targets, reasons, chosen

    def _refuse_growths(
        self,
        requests: Sequence[Request],
        targets: dict[str, int],
        reasons: dict[str, str],
        available: int,
        refusals: list[Refusal],
        source: str,
        where: str = "",
    ) -> None:
        """Over ``available``: refuse growths, latest-submitted job first, until the jobs fit (in place)."""
        growers = sorted(
            (r for r in requests if targets[r.job_id] > r.holding),
            key=lambda r: (r.job.submitted_at, r.job_id),
            reverse=True,
        )
        for request in growers:
            total = sum(targets[r.job_id] for r in requests)
            if total <= available:
                break
            self._refuse(
                refusals, request.job_id, source, f"{total} workers in total exceed the {available} available{where}"
            )
            targets[request.job_id] = request.holding
            reasons.pop(request.job_id, None)

    def _arbitrate_queues(
        self, snapshot: Snapshot, requests: Sequence[Request], refusals: list[Refusal]
    ) -> tuple[dict[str, int], dict[str, str], dict[str, Allocation]]:
        """:meth:`_arbitrate` within each queue on the slots :func:`split_slots` gives it (see the module
        docstring), then the queues together within the cluster."""
        demand: dict[str, int] = {}
        for r in requests:
            fixed = (r.settled or not r.job.elastic) and not r.job.waiting
            demand[r.job.queue] = demand.get(r.job.queue, 0) + (r.holding if fixed else r.desired)
        slots = split_slots(snapshot.available, snapshot.queues, demand)
        targets: dict[str, int] = {}
        reasons: dict[str, str] = {}
        chosen: dict[str, Allocation] = {}
        for queue in snapshot.queues:
            mine = [r for r in requests if r.job.queue == queue.name]
            if not mine:
                continue
            room = slots[queue.name]
            view = Snapshot(
                now=snapshot.now,
                capacity=room,
                free=max(0, room - sum(r.holding for r in mine)),
                jobs=tuple(r.job for r in mine),
                slots_per_node=snapshot.slots_per_node,
            )
            arbiter = self._queue_arbiter(queue.name, refusals)
            got, why, batches = self._arbitrate(view, mine, refusals, arbiter)
            targets.update(got)
            reasons.update(why)
            chosen.update(batches)
        for queue in snapshot.queues:
            # Over its slots, a queue gives back what the others take this round, down to its slots at most:
            # slots its owner's jobs cannot use yet (an arrival that does not fit) stay where they are.
            mine = [r for r in requests if r.job.queue == queue.name]
            others = sum(targets.values()) - sum(targets[r.job_id] for r in mine)
            keep = min(queue.slots(snapshot.available)[1], max(slots[queue.name], snapshot.available - others))
            self._reclaim(mine, targets, reasons, keep, queue.name)
        self._refuse_growths(requests, targets, reasons, snapshot.available, refusals, self.arbiter.display_name)
        return targets, reasons, {job_id: a for job_id, a in chosen.items() if targets[job_id] == a.workers}

    def _queue_arbiter(self, queue: str, refusals: list[Refusal]) -> ClusterArbiter:
        """The queue's own copy of the arbiter (the arbiter itself where it cannot be copied)."""
        found = self._queue_arbiters.get(queue)
        if found is None:
            ok, made = self._call(
                refusals,
                None,
                self.arbiter.display_name,
                f"copying for queue {queue}",
                lambda: copy.deepcopy(self.arbiter),
            )
            found = self._queue_arbiters[queue] = made if ok and isinstance(made, ClusterArbiter) else self.arbiter
        return found

    @staticmethod
    def _reclaim(
        requests: Sequence[Request], targets: dict[str, int], reasons: dict[str, str], room: int, queue: str
    ) -> None:
        """A queue's jobs holding more than ``room`` shrink, the elastic ones, the largest (then the latest
        submitted) first, never below their minimum nor a job shrunk within its cooldown (in place)."""
        over = sum(targets[r.job_id] for r in requests) - room
        donors = [r for r in requests if r.job.elastic and not r.job.waiting and r.preemptible]
        while over > 0:
            able = [r for r in donors if targets[r.job_id] > r.job.min_workers]
            if not able:
                return
            donor = max(able, key=lambda r: (targets[r.job_id], r.job.submitted_at, r.job_id))
            targets[donor.job_id] -= 1
            reasons[donor.job_id] = f"queue {queue}: gives back to the {room} workers it may hold now"
            over -= 1

    @staticmethod
    def _check_allocation(
        request: Request | None, allocation: Allocation, accepted: Mapping[str, Allocation]
    ) -> str | None:
        if request is None:
            return f"allocation for unknown job {allocation.job_id!r}"
        if allocation.job_id in accepted:
            return "second allocation for the same job"
        job = request.job
        kept = allocation.batch_size == job.metrics.batch_size and (
            allocation.accum_steps is None or allocation.accum_steps == job.metrics.accum_steps
        )
        if (
            allocation.batch_size is not None
            and not kept
            and (problem := _batch_problem(job, allocation.batch_size, allocation.accum_steps))
        ):
            return problem
        if allocation.workers == request.holding:
            if not _moves(job, allocation.nodes):
                return None
            if not job.elastic:
                return f"moves a job that is not elastic ({job.nodes} -> {allocation.nodes} nodes)"
            if request.settled:
                return f"moves its workers ({job.nodes} -> {allocation.nodes} nodes) during its cooldown"
            return None
        if not job.min_workers <= allocation.workers <= job.max_workers:
            return f"{allocation.workers} workers is outside the job's limits [{job.min_workers}, {job.max_workers}]"
        if not job.elastic and not job.waiting:
            return f"resizes a job that is not elastic ({request.holding} -> {allocation.workers})"
        if request.settled and allocation.workers > request.holding:
            return f"grows {request.holding} -> {allocation.workers} during its cooldown"
        return None

    def _final(
        self,
        request: Request,
        target: int,
        arbiter_reasons: Mapping[str, str],
        extra: Decision | None,
        now: float,
        allocation: Allocation | None = None,
    ) -> Decision | None:
        job = request.job
        if target != request.holding:
            reason = request.reason if target == request.desired else arbiter_reasons.get(job.job_id, request.reason)
        else:
            reason = extra.reason if extra is not None else request.reason
        replace: tuple[str, ...] = ()
        batch_size = learning_rate = accum_steps = nodes = None
        if extra is not None:
            replace = extra.replace if not job.waiting else ()
            if (
                extra.batch_size is not None
                and (extra.batch_size != job.metrics.batch_size or target != request.holding)
                and target == extra.target_workers
            ):
                batch_size, accum_steps = extra.batch_size, extra.accum_steps
            if extra.learning_rate is not None and extra.learning_rate != job.metrics.learning_rate:
                learning_rate = extra.learning_rate
            if target == extra.target_workers:
                nodes = extra.nodes
        if allocation is not None and allocation.batch_size is not None:
            # the arbiter chose the batch for the count it gave: it replaces the job policy's
            batch_size = accum_steps = None
            if (
                allocation.batch_size != job.metrics.batch_size
                or (allocation.accum_steps is not None and allocation.accum_steps != job.metrics.accum_steps)
                or target != request.holding
            ):
                batch_size, accum_steps = allocation.batch_size, allocation.accum_steps
                if target == request.holding:
                    reason = allocation.reason
        if allocation is not None and allocation.nodes is not None:
            nodes = allocation.nodes
        moves = target == request.holding and _moves(job, nodes) and job.elastic and not request.settled
        if target == request.holding and not moves:
            nodes = None  # the job keeps its workers where they are
        elif moves and allocation is not None and allocation.nodes is not None:
            reason = allocation.reason
        if target == request.holding and not replace and batch_size is None and learning_rate is None and not moves:
            return None
        if target != request.holding:
            seen = self._seen[job.job_id]
            seen.direction = _sign(target - request.holding)
            if target < request.holding:
                seen.shrunk_at = now
        return Decision(
            job_id=job.job_id,
            target_workers=target,
            reason=reason,
            batch_size=batch_size,
            learning_rate=learning_rate,
            replace=replace,
            accum_steps=accum_steps,
            nodes=nodes,
        )

    # -------------------------------------------------------------------------------------- state

    def state_dict(self) -> dict[str, Any]:
        """The engine's memory and every policy's, JSON-serialisable. Does not block."""
        return {
            "version": _STATE_VERSION,
            "jobs": {job_id: seen.to_json() for job_id, seen in sorted(self._seen.items())},
            "job_policy": self.job_policy.state_dict(),
            "job_policies": {job_id: p.state_dict() for job_id, p in sorted(self._job_policies.items())},
            "arbiter": self.arbiter.state_dict(),
        } | (
            {
                "queue_arbiters": {
                    q: a.state_dict() for q, a in sorted(self._queue_arbiters.items()) if a is not self.arbiter
                }
            }
            if self._queue_arbiters
            else {}
        )

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output. Per-job policies must be set (:meth:`set_job_policy`) first.

        Raises:
            PolicyStateError: wrong version or shape, or state for a per-job policy that is not set.
        """
        if not isinstance(state, Mapping) or state.get("version") != _STATE_VERSION:
            raise PolicyStateError(f"engine state must be a mapping with version {_STATE_VERSION}, got {state!r}")
        jobs = state.get("jobs", {})
        seen: dict[str, _Seen] = {}
        try:
            for job_id, entry in jobs.items():
                shrunk_at, submitted_at = entry.get("shrunk_at"), entry.get("submitted_at")
                seen[str(job_id)] = _Seen(
                    workers=int(entry["workers"]),
                    step=int(entry["step"]),
                    direction=_sign(int(entry["direction"])),
                    shrunk_at=None if shrunk_at is None else float(shrunk_at),
                    submitted_at=None if submitted_at is None else float(submitted_at),
                )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise PolicyStateError(f"engine state: bad jobs entry: {exc}") from exc
        per_job = state.get("job_policies", {})
        if not isinstance(per_job, Mapping):
            raise PolicyStateError(f"engine state: job_policies must be a mapping, got {per_job!r}")
        missing = sorted(set(per_job) - set(self._job_policies))
        if missing:
            raise PolicyStateError(f"engine state holds policies of jobs {missing} that have no policy set")
        self.job_policy.load_state_dict(state.get("job_policy", {}))
        for job_id, policy_state in per_job.items():
            self._job_policies[job_id].load_state_dict(policy_state)
        self.arbiter.load_state_dict(state.get("arbiter", {}))
        queue_arbiters = state.get("queue_arbiters", {})
        if not isinstance(queue_arbiters, Mapping):
            raise PolicyStateError(f"engine state: queue_arbiters must be a mapping, got {queue_arbiters!r}")
        self._queue_arbiters = {}
        for queue, arbiter_state in queue_arbiters.items():
            try:
                arbiter = copy.deepcopy(self.arbiter)
            except Exception as exc:  # noqa: BLE001 - a user arbiter may refuse to be copied in any way
                raise PolicyStateError(f"engine state: the arbiter cannot be copied for queue {queue}: {exc}") from exc
            arbiter.load_state_dict(arbiter_state)
            self._queue_arbiters[str(queue)] = arbiter
        self._seen = seen
