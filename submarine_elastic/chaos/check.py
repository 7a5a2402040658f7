"""The checker of a chaos run, over what it recorded, and the table it prints.

After the run: every fault recovered within its deadline (:mod:`.catalogue`); every job ended SUCCEEDED, or
ended as the fault that hit it meant (an operator's kill), its reason in ``job show``; every committed step once,
every sample once per epoch, and the whole of its planned samples (the replay's step-log checks); every rank
of a finished job ended with identical weights; the controller's records agree with the drivers' (every resize
the controller recorded applied is in that job's driver timeline); and nothing of the run left behind: no
process of its containers, no application of it live in the ResourceManager, no GPU held by a node, no job's
directory on HDFS.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import psutil

from submarine_elastic.chaos.targets import job_processes
from submarine_elastic.cluster import LocalCluster
from submarine_elastic.controller.api import DecisionRecord, DecisionState
from submarine_elastic.elastic.reconcile import REQUEUED
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.replay.plan import ReplayJob
from submarine_elastic.replay.records import JobRecord
from submarine_elastic.submit.jobfiles import HdfsJobFiles
from submarine_elastic.submit.store import load_outcome
from submarine_elastic.webhdfs import WebHdfsError
from submarine_elastic.yarn import YarnError, YarnServiceClient

if TYPE_CHECKING:
    from submarine_elastic.chaos.run import Injected

#: How long after the run its containers' processes and GPUs may take to go.
LEFTOVER_WAIT_S = 60.0


def cluster_unhealthy(cluster: LocalCluster) -> str:
    """What is wrong with the cluster now ("" when nothing): a daemon not running or stopped (SIGSTOP), the
    ResourceManager not answering, a NodeManager not RUNNING in it."""
    spec = cluster.spec()
    running = {d.name: d for d in cluster.running_daemons()}
    down = [name for name in spec.daemon_names() if name not in running]
    if down:
        return f"{', '.join(down)} not running"
    stopped = []
    for name, daemon in running.items():
        with contextlib.suppress(psutil.Error):
            if psutil.Process(daemon.pid).status() == psutil.STATUS_STOPPED:
                stopped.append(name)
    if stopped:
        return f"{', '.join(stopped)} stopped"
    status = cluster.status()
    if status.rm_error:
        return f"the ResourceManager: {status.rm_error}"
    states = sorted(n.state for n in status.nodes)
    if states != ["RUNNING"] * spec.nodes:
        return f"NodeManagers {', '.join(states) or 'none'} in the ResourceManager, not {spec.nodes} RUNNING"
    return ""


def faults(injected: Iterable[Injected], interrupted_s: float | None = None) -> list[str]:
    """A violation for each fault not recovered when it was due (its deadline, or that of the last fault stacked
    on it), naming what was still wrong; in a run interrupted ``interrupted_s`` after its start, only a fault due
    by then."""
    return [
        f"{f.kind} on {f.target} at +{f.at_s:.0f} s: not recovered by +{f.due_s:.0f} s ({f.deadline_s:.0f} s"
        f"{f', {f.stacked} later fault{_s(f.stacked)} stacked on it' if f.stacked else ''}): {f.missing}"
        for f in injected
        if f.recovered_s is None and (interrupted_s is None or f.due_s <= interrupted_s)
    ]


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def jobs(
    records: Sequence[JobRecord],
    log_dir: Callable[[ReplayJob], Path],
    ended_by_fault: set[str],
    *,
    interrupted: bool = False,
) -> list[str]:
    """A violation for each job that did not end as it should have, or whose step log or weights are wrong. In an
    ``interrupted`` run, a job still running when it was (and so killed) is judged by its step log alone."""
    found: list[str] = []
    for record in records:
        name = record.service
        cut_short = interrupted and record.ended_s is None
        meant = name in ended_by_fault or cut_short
        if record.ended_s is None and not cut_short:
            found.append(f"{name}: did not end")
        elif record.state != "SUCCEEDED" and not meant:
            outcome = load_outcome(name)
            why = outcome.error if outcome is not None and outcome.error else "no reason recorded"
            found.append(f"{name}: ended {record.state}: {why}")
        for problem in record.problems:
            if meant and problem.startswith("trained "):
                continue  # an operator killed it before it trained all its samples
            found.append(f"{name}: {problem}")
        if record.state == "SUCCEEDED":
            differ = weights_differ(log_dir(record.job))
            if differ:
                found.append(f"{name}: {differ}")
    return found


def controller_agrees(records: Sequence[JobRecord], decisions: Callable[[str], Sequence[DecisionRecord]]) -> list[str]:
    """A violation for each resize the controller recorded APPLIED (``decisions``: a job's, of its current run)
    that the job's driver did not apply: no entry of its timeline (as its outcome keeps it) to the same count,
    for the controller's reason or taken up again by a relaunched driver, while the driver's count when the
    controller decided was another (a decision to the count the driver has, one that sets the batch only, resizes
    nothing). Jobs without an outcome are judged by :func:`jobs`."""
    found: list[str] = []
    for record in records:
        outcome = load_outcome(record.service)
        if outcome is None:
            continue
        events = [(e.to_workers, e.reason) for e in outcome.timeline]
        timeline = sorted(outcome.timeline, key=lambda e: e.time)
        for d in decisions(record.service):
            if d.state is not DecisionState.APPLIED or d.to_workers == _count_at(timeline, d.time, record):
                continue
            if (d.to_workers, d.reason) not in events and (d.to_workers, REQUEUED) not in events:
                found.append(
                    f"{record.service}: the controller recorded {d.from_workers} -> {d.to_workers} workers applied "
                    f"({d.reason}); the driver's timeline has no such resize"
                )
    return found


def _count_at(timeline: Sequence[pb.ResizeEvent], when: float, record: JobRecord) -> int:
    """The driver's worker count at wall-clock ``when``, as its ``timeline`` (oldest first) says (the submitted
    count before it)."""
    count = record.job.workers
    for event in timeline:
        if event.time > when:
            break
        count = event.to_workers
    return count


def weights_differ(log_dir: Path) -> str:
    """Whether the ranks' final weights (``weights-rank*.npz``) differ ("" when they agree)."""
    paths = sorted(log_dir.glob("weights-rank*.npz"))
    if not paths:
        return "no rank wrote its final weights"
    first = np.load(paths[0])
    for path in paths[1:]:
        other = np.load(path)
        if first.files != other.files or any(not np.array_equal(first[k], other[k]) for k in first.files):
            return f"{path.name} differs from {paths[0].name}"
    return ""


def leftovers(
    cluster: LocalCluster,
    rm_url: str,
    applications: Mapping[str, str],
    others: Collection[str] = (),
    files: HdfsJobFiles | None = None,
) -> list[str]:
    """What the run left behind, waiting up to :data:`LEFTOVER_WAIT_S` for it to go: processes of its
    containers, its applications live in the ResourceManager (its jobs', ``applications``: id -> service, and
    the services ``others`` names), GPUs the nodes hold, and its jobs' directories on HDFS (``files``: the
    cluster's, None without HDFS)."""
    deadline = time.monotonic() + LEFTOVER_WAIT_S
    while True:
        found = _left(cluster, rm_url, applications, others) + _on_hdfs(files, set(applications.values()))
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(2.0)


def _left(cluster: LocalCluster, rm_url: str, applications: Mapping[str, str], others: Collection[str]) -> list[str]:
    found = [
        f"{t.name}: its {t.role} process (pid {t.pid}) still runs" for t in job_processes(cluster.dir, applications)
    ]
    try:
        with YarnServiceClient(rm_url) as yarn:
            live = sorted(a.name for a in yarn.list() if a.name in {*applications.values(), *others})
            gpus = sum(node.used_gpus for node in yarn.nodes())
    except YarnError as exc:
        return [*found, f"the ResourceManager did not answer: {exc}"]
    found += [f"{name}: its application is still live" for name in live]
    if gpus:
        found.append(f"the nodes still hold {gpus} GPUs")
    return found


def _on_hdfs(files: HdfsJobFiles | None, services: set[str]) -> list[str]:
    """The run's jobs whose directory (their token, keys, certificates) is still on HDFS."""
    if files is None:
        return []
    try:
        if files.hdfs.status(files.home) is None:
            return []
        left = sorted(name for name in files.hdfs.list(files.home) if name in services)
    except WebHdfsError as exc:
        return [f"HDFS did not answer: {exc}"]
    return [f"{name}: its files are still on HDFS ({files.path(name)})" for name in left]


def table(injected: Sequence[Injected], violations: Sequence[str]) -> str:
    """Per fault kind: injected, recovered, median and worst recovery, violations (recoveries missed); then the
    other violations (the jobs', what the run left behind); 80 columns."""
    rows = [f"{'fault':<16} {'injected':>8} {'recovered':>9} {'median s':>9} {'worst s':>8} {'violations':>10}"]
    for kind in sorted({f.kind for f in injected}):
        of = [f for f in injected if f.kind == kind]
        times = [t for t in (f.recovery_s for f in of) if t is not None]
        median = f"{statistics.median(times):.1f}" if times else "-"
        worst = f"{max(times):.1f}" if times else "-"
        rows.append(f"{kind:<16} {len(of):>8} {len(times):>9} {median:>9} {worst:>8} {len(of) - len(times):>10}")
    missed = sum(1 for f in injected if f.recovered_s is None)
    recovered = len(injected) - missed
    rows.append(f"{'all faults':<16} {len(injected):>8} {recovered:>9} {'':>9} {'':>8} {missed:>10}")
    rows.append(f"{'jobs, leftovers':<16} {'':>8} {'':>9} {'':>9} {'':>8} {len(violations) - missed:>10}")
    return "\n".join(rows)
