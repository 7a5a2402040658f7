"""Schedulers by name: the static baselines, or any policy the controller accepts.

A spec is one of ``fifo``, ``backfill``, ``tiresias`` (:mod:`~submarine_elastic.sim.baselines`), or
``JOB_POLICY[+ARBITER]``: a job policy and a cluster arbiter, each an entry-point name of the group
``submarine_elastic.policies`` (``scaling-efficiency``, ``goodput``, ...) or ``module:Class``, loaded by
:mod:`submarine_elastic.policy.loader` exactly as the controller loads them, each optionally followed by
constructor options in parentheses: ``utility(deadline_s=7200)+goodput(min_gain=0.05)``. Option values
are read as YAML scalars (``7200`` an int, ``0.5`` a float, ``true`` a bool, anything else a string).
The arbiter defaults to ``fair-share``. ``greedy+goodput`` is the Pollux-like combination: every job asks
for its maximum and the goodput arbiter gives each worker to the job it speeds up most.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from submarine_elastic.policy import PolicyConfigError, PolicyError, QueueShare, load_arbiter, load_job_policy
from submarine_elastic.policy.engine import DEFAULT_COOLDOWN_S, PolicyEngine
from submarine_elastic.policy.loader import parse_spec, split_top_level
from submarine_elastic.sim.api import Scheduler, SchedulerError
from submarine_elastic.sim.baselines import BASELINES
from submarine_elastic.sim.policy_adapter import PolicyScheduler

DEFAULT_ARBITER = "fair-share"


def load_scheduler(
    spec: str, *, cooldown_s: float = DEFAULT_COOLDOWN_S, elastic: bool = True, queues: Sequence[QueueShare] = ()
) -> Scheduler:
    """Build the scheduler named by ``spec`` (see the module docstring).

    ``cooldown_s`` is the policy engine's minimum time between two resizes of a job; ``elastic=False``
    presents every job to the policies as fixed at its requested size; ``queues`` are the cluster's queues,
    the policies decide within each. All three are ignored for baselines.

    Raises:
        SchedulerError: the spec is empty, or a policy or arbiter cannot be loaded or built (the
            message names it and says why).
    """
    spec = spec.strip()
    if not spec:
        raise SchedulerError(f"a scheduler is needed: one of {', '.join(BASELINES)} or JOB_POLICY[+ARBITER]")
    baseline = BASELINES.get(spec)
    if baseline is not None:
        return baseline()
    parts = split_top_level(spec, "+")
    if len(parts) > 2 or not parts[0]:
        raise SchedulerError(f"scheduler {spec!r}: expected JOB_POLICY[+ARBITER]")
    policy_name, policy_options = _parse_part(parts[0], spec)
    arbiter_name, arbiter_options = _parse_part(parts[1], spec) if len(parts) == 2 else (DEFAULT_ARBITER, {})
    try:
        engine = PolicyEngine(
            load_job_policy(policy_name, **policy_options),
            load_arbiter(arbiter_name, **arbiter_options),
            cooldown_s=cooldown_s,
        )
    except PolicyError as exc:
        raise SchedulerError(f"scheduler {spec!r}: {exc}") from exc
    name = spec if len(parts) == 2 else f"{spec}+{DEFAULT_ARBITER}"
    return PolicyScheduler(engine, name, elastic=elastic, queues=queues)


def _parse_part(part: str, spec: str) -> tuple[str, dict[str, Any]]:
    try:
        return parse_spec(part)
    except PolicyConfigError as exc:
        raise SchedulerError(f"scheduler {spec!r}: {exc}") from exc
