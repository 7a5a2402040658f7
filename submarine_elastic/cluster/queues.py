"""Queues on the pseudo-cluster: a CapacityScheduler hierarchy under ``root`` and the preemption monitor.

``up --queues prod:60,research:40`` gives each queue a guaranteed share of the cluster (``capacity``, percent;
the shares add up to 100) and a ceiling it may grow to by borrowing idle capacity (``maximum-capacity``, percent,
``prod:60:100``; default 100). A queue below its guarantee with requests pending takes it back by preemption:
the RM's ProportionalCapacityPreemptionPolicy, run by its scheduling monitor every ``MONITORING_INTERVAL_MS``,
marks containers of the queues over their guarantee (the application's ResourceManager protocol tells its AM),
and ``MAX_WAIT_BEFORE_KILL_MS`` later has the NodeManager kill those still running: SIGTERM, then SIGKILL
``SIGKILL_DELAY_MS`` after it.
"""

from __future__ import annotations

from submarine_elastic.cluster.api import QueueSpec, check_queues

#: ``capacity-scheduler.xml``'s prefix of the queue hierarchy.
PREFIX = "yarn.scheduler.capacity.root"
#: The preemption monitor's settings' prefix (``yarn-site.xml``).
PREEMPTION = "yarn.resourcemanager.monitor.capacity.preemption"
#: How often the monitor looks for queues below their guarantee (Hadoop's default: 3 s).
MONITORING_INTERVAL_MS = 1000
#: How long a marked container may run before the RM has it killed (Hadoop's default: 15 s).
MAX_WAIT_BEFORE_KILL_MS = 3000
#: The NodeManager's delay from SIGTERM to SIGKILL (Hadoop's default 250 ms leaves a process no time to leave
#: cleanly; 5 s is what a cluster running services that stop gracefully sets).
SIGKILL_DELAY_MS = 5000


def parse_queues(text: str) -> tuple[QueueSpec, ...]:
    """The queues of ``NAME:CAPACITY[:MAX],...`` (percent of the cluster, whole numbers).

    Raises:
        ValueError: an entry not of that form, a bad name, a number out of range, a name given twice, a
            maximum below the guarantee, or guarantees that do not add up to 100 (naming which).
    """
    queues = []
    for entry in (e.strip() for e in text.split(",")):
        parts = entry.split(":")
        if len(parts) not in (2, 3) or not all(p.strip().isdigit() for p in parts[1:]):
            raise ValueError(f"queue {entry!r} is not NAME:CAPACITY or NAME:CAPACITY:MAX (whole percent)")
        name = parts[0].strip()
        numbers = [int(p) for p in parts[1:]]
        queues.append(QueueSpec(name, numbers[0], numbers[1] if len(numbers) == 2 else 100))
    check_queues(queues)
    return tuple(queues)


def scheduler_settings(queues: tuple[QueueSpec, ...]) -> dict[str, str]:
    """The RM's ``capacity-scheduler.xml`` settings for ``queues`` under ``root``: anyone may submit to each,
    an application may use the whole of its queue (``user-limit-factor``, or one user's jobs would stop at the
    guarantee), the applications of a queue are served least-used first (the ``fair`` ordering policy: under
    FIFO one application's unmet ask holds back every later one, their ApplicationMasters too), and none is
    ever preempted by another of its own queue (intra-queue preemption stays off)."""
    settings = {f"{PREFIX}.queues": ",".join(q.name for q in queues)}
    for q in queues:
        key = f"{PREFIX}.{q.name}"
        settings.update(
            {
                f"{key}.capacity": str(q.capacity),
                f"{key}.maximum-capacity": str(q.max_capacity),
                f"{key}.user-limit-factor": str(100 / q.capacity) if q.capacity else "100",
                f"{key}.state": "RUNNING",
                f"{key}.ordering-policy": "fair",
                f"{key}.acl_submit_applications": "*",
                f"{key}.acl_administer_queue": "*",
            }
        )
    return settings


def monitor_settings() -> dict[str, str]:
    """The RM's ``yarn-site.xml`` settings that turn the preemption monitor on, prompt enough for a test to
    wait for: every round may preempt all a queue is owed at once (``total_preemption_per_round``,
    ``natural_termination_factor`` 1), a queue over its guarantee by any amount gives it back
    (``max_ignored_over_capacity`` 0), and only between queues."""
    return {
        "yarn.resourcemanager.scheduler.monitor.enable": "true",
        "yarn.resourcemanager.scheduler.monitor.policies": (
            "org.apache.hadoop.yarn.server.resourcemanager.monitor.capacity.ProportionalCapacityPreemptionPolicy"
        ),
        f"{PREEMPTION}.monitoring_interval": str(MONITORING_INTERVAL_MS),
        f"{PREEMPTION}.max_wait_before_kill": str(MAX_WAIT_BEFORE_KILL_MS),
        f"{PREEMPTION}.total_preemption_per_round": "1.0",
        f"{PREEMPTION}.natural_termination_factor": "1.0",
        f"{PREEMPTION}.max_ignored_over_capacity": "0",
        f"{PREEMPTION}.intra-queue-preemption.enabled": "false",
    }


def nodemanager_settings() -> dict[str, str]:
    """A NodeManager's ``yarn-site.xml`` settings on a cluster with preemption: the SIGTERM-to-SIGKILL delay
    a preempted container has to leave."""
    return {"yarn.nodemanager.sleep-delay-before-sigkill.ms": str(SIGKILL_DELAY_MS)}
