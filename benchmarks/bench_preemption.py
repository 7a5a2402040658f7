"""YARN preempts a research job's workers for a prod job: what it costs, three ways, side by side.

The scenario of ``tests/integration/test_queue_preemption.py`` (``tests/integration/queues.py``) on its own
pseudo-cluster: 2 nodes, queues prod:50 and research:50; a research job of 4 workers fills the whole cluster
(borrowing prod's idle half); once it trains, a fixed-size job of one container arrives in prod and runs
``--prod-seconds``; YARN's preemption monitor takes two of research's workers for it. The research job, in turn:

- elastic: ``submarine job run --elastic --queue research`` of ``examples/train_elastic.py`` (1..4 workers):
  a preempted worker leaves the ring at its next commit, the job goes on with two and grows back when the
  prod job ends;
- plain Horovod: ``examples/horovod/tape_elastic.py``, a Horovod elastic script as written for
  ``horovodrun`` (its own ``hvd.init()``, nothing of this project), under the same ``job run --elastic
  --queue research`` (as ``tests/integration/test_plain_horovod.py`` runs it);
- fixed-size: ``examples/train_elastic.py`` under ``job run --queue research`` without ``--elastic`` (4..4
  workers): the ring cannot go on below 4, and YARN Services asks for the preempted workers again, which the
  queue gives back only when the prod job ends (where it hung in every run so far: see docs/cluster.md).

Each commits every 4 steps and sleeps 30 ms after each step. Measured, from the scripts' step logs (wall clock
of each step's last computation, ring size) and YARN:

- prod start: the prod job's submission -> its container READY (as the test measures it);
- steps redone: committed steps computed more than once by rank 0 (a step rolled back and trained again),
  counted from the metrics stream for ``train_elastic.py`` (its step log holds committed steps only) and from
  ``tape_elastic.py``'s step log (which logs every step it computes);
- not training: the sum of the gaps over :data:`STALL_S` between consecutive committed steps (the ring stood
  still: re-forming, or waiting for containers), from the prod job's submission until the job trained
  :data:`STEPS` steps at 4 workers again after the prod job ended; split into those that began while the prod
  job ran (the preemption) and after (growing back);
- training time lost: not training + steps redone x the median step at 4 workers before the preemption;
- the steps trained while the prod job ran (its container's launch to the end of its ``sleep``, at
  ``--prod-seconds`` after the launch: YARN says the service ended seconds later), and the time from that end
  to the first step of the research job at 4 workers again.

Writes ``benchmarks/results/preemption.json`` and ``preemption.md`` and prints the table.
Run: ``.venv/bin/python benchmarks/bench_preemption.py [--only elastic] [--prod-seconds 30] [--port-base 27800]``
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
sys.path.insert(0, str(REPO))

from submarine_elastic.cluster import LocalCluster  # noqa: E402
from submarine_elastic.metrics.server import MetricsServer  # noqa: E402
from submarine_elastic.metrics.store import InMemoryStore  # noqa: E402
from submarine_elastic.protocol.api import ElasticError  # noqa: E402
from submarine_elastic.submit.client import JobClient  # noqa: E402
from submarine_elastic.yarn import YarnError, YarnServiceClient  # noqa: E402
from tests.integration.conftest import eventually  # noqa: E402
from tests.integration.jobcheck import steps_by_number  # noqa: E402
from tests.integration.queues import (  # noqa: E402
    RESEARCH_WORKERS,
    ended,
    queues_spec,
    ready,
    run_research_job,
    start_prod,
)
from tests.tls import cluster_metrics_tls  # noqa: E402

#: Committed steps at 4 workers before the prod job arrives, and again after it ended.
STEPS = 12
#: A gap between two committed steps longer than this is the ring standing still (a step takes ~0.1-0.3 s).
STALL_S = 1.0
#: How long after the prod job's end the research job has to train :data:`STEPS` steps at 4 workers again.
BACK_S = 300.0
METRICS_TOKEN = "bench-preemption-token"
TRAIN = f"{sys.executable} {REPO}/examples/train_elastic.py --samples 2048 --epochs 100000 --step-sleep 0.03"
PLAIN = (
    f"{sys.executable} {REPO}/examples/horovod/tape_elastic.py --batches 1000000 --batches-per-commit 4 "
    "--step-sleep 0.03"
)


@dataclass(frozen=True)
class Variant:
    """One way to run the research job."""

    label: str
    #: the training command, to which ``--until-file`` and ``--log-dir`` are added
    command: str
    elastic: bool
    #: the step log holds every computed step (else committed ones only, and the metrics stream counts redone)
    logs_every_step: bool
    env: tuple[tuple[str, str], ...] = ()


VARIANTS = {
    "elastic": Variant("elastic (submarine job run --elastic)", TRAIN, True, False),
    "plain": Variant("plain Horovod elastic script", PLAIN, True, True, (("TF_USE_LEGACY_KERAS", "1"),)),
    "fixed": Variant("fixed-size (job run without --elastic)", TRAIN, False, False),
}


def committed(log_dir: Path) -> list[tuple[int, float, int]]:
    """(step, when its last computation ended, ring size) per step, in order. For a log of every computed step
    the last computation is the one that stayed (a step rolled back is computed again, later)."""
    out = []
    for step, records in sorted(steps_by_number(log_dir).items()):
        last = max(records, key=lambda r: r["time"])
        out.append((step, last["time"], last["size"]))
    return out


def steps_at(log_dir: Path, size: int, since: float) -> int:
    return sum(1 for _, t, s in committed(log_dir) if s == size and t > since)


def rank0_runs_from_log(log_dir: Path) -> collections.Counter[int]:
    return collections.Counter(step for step, rs in steps_by_number(log_dir).items() for r in rs if r["rank"] == 0)


def rank0_runs_from_metrics(store: InMemoryStore, name: str) -> collections.Counter[int]:
    return collections.Counter(p.point.step for p in store.series(name, 100_000) if p.worker.rank == 0)


def measure(
    variant: Variant, rm_url: str, work: Path, name: str, prod_seconds: int, store: InMemoryStore, env: dict[str, str]
) -> dict[str, object]:
    """Runs the scenario once for ``variant`` and returns what it cost (see the module)."""
    log_dir = work / "log"
    command = f"{variant.command} --until-file {work}/stop --log-dir {log_dir}"
    prod = f"{name}-prod"
    with YarnServiceClient(rm_url, poll_interval=0.5) as yarn:
        run_research_job(rm_url, name, command, elastic=variant.elastic, env={**dict(variant.env), **env})
        try:
            with JobClient(name, yarn, locate_timeout=120) as job:
                job.wait_for_size(RESEARCH_WORKERS, timeout=300)
                eventually(lambda: steps_at(log_dir, RESEARCH_WORKERS, 0) >= STEPS, "steps at 4", 180)
                submitted_at, prod_start_s = start_prod(yarn, prod, prod_seconds)
                [container] = ready(yarn, prod, "main")
                # Its `sleep` ends prod_seconds after the launch; YARN says the service ended only later.
                launched = container.launch_time_ms / 1000 if container.launch_time_ms else time.time()
                prod_started_at, prod_ended_at = launched, launched + prod_seconds
                eventually(lambda: ended(yarn, prod), "the prod job's end", prod_seconds + 120)
                trained_again = wait_for(lambda: steps_at(log_dir, RESEARCH_WORKERS, prod_ended_at) >= STEPS, BACK_S)
                given_up_at = time.time()
                status = job.status()
        finally:
            (work / "stop").touch()
            yarn.destroy(name, missing_ok=True)
            yarn.destroy(prod, missing_ok=True)
    steps = committed(log_dir)
    runs = rank0_runs_from_log(log_dir) if variant.logs_every_step else rank0_runs_from_metrics(store, name)
    redone = sum(n - 1 for step, n in runs.items() if n > 1 and any(s == step for s, _, _ in steps))
    before = [t for _, t, s in steps if t < submitted_at and s == RESEARCH_WORKERS]
    step_s = statistics.median(b - a for a, b in zip(before, before[1:], strict=False))
    back = [t for _, t, s in steps if t > prod_ended_at and s == RESEARCH_WORKERS][STEPS - 1] if trained_again else None
    end = back or given_up_at
    times = [max(t for _, t, _ in steps if t <= submitted_at)] + [t for _, t, _ in steps if submitted_at < t <= end]
    if back is None:
        times.append(given_up_at)  # still standing when given up: the stall counts until then
    gaps = [(a, b - a) for a, b in zip(times, times[1:], strict=False) if b - a > STALL_S]
    stalls = [g for _, g in gaps]
    stalls_preempted = [g for a, g in gaps if a < prod_ended_at]
    full_again = None
    if back is not None:
        last_other = max((t for _, t, s in steps if s != RESEARCH_WORKERS and t < back), default=prod_ended_at)
        full_again = min(t for _, t, s in steps if t > max(last_other, prod_ended_at) and s == RESEARCH_WORKERS)
    while_prod = [s for _, t, s in steps if prod_started_at < t < prod_ended_at]
    return {
        "variant": variant.label,
        "prod_start_s": round(prod_start_s, 2),
        "steps_redone": redone,
        "not_training_s": round(sum(stalls), 2),
        "stalls_s": [round(s, 2) for s in stalls],
        "not_training_preempted_s": round(sum(stalls_preempted), 2),
        "not_training_growing_back_s": round(sum(stalls) - sum(stalls_preempted), 2),
        "step_s": round(step_s, 3),
        "time_lost_s": round(sum(stalls) + redone * step_s, 2),
        "steps_while_prod_ran": len(while_prod),
        "ring_sizes_while_prod_ran": sorted(set(while_prod)),
        "back_at_4_after_prod_s": None if full_again is None else round(full_again - prod_ended_at, 2),
        #: False: not at 4 workers again within BACK_S of the prod job's end; the times are then lower bounds
        "trained_again": back is not None,
        "worker_failures": len(status.failures),
        "preemptions": sorted(e.reason for e in status.timeline if e.reason.startswith("preempted")),
        "job_error": status.error,
    }


def wait_for(check: Callable[[], bool], timeout: float) -> bool:
    """Whether ``check`` came true within ``timeout`` s (read every half second)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", choices=sorted(VARIANTS), help="run only these variants")
    parser.add_argument("--prod-seconds", type=int, default=30, help="how long the prod job runs")
    parser.add_argument("--port-base", type=int, default=27800)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-preemption-"))
    os.environ["SUBMARINE_JOBS_DIR"] = str(root / "jobs")
    print(f"working in {root}", flush=True)
    results: dict[str, object] = {
        "machine": f"{platform.node()} {os.cpu_count()} cores",
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "prod_seconds": args.prod_seconds,
    }
    spec = queues_spec(args.port_base)
    cluster = LocalCluster(root / "cluster")
    metrics = MetricsServer(
        InMemoryStore(points_per_job=100_000), token=METRICS_TOKEN, tls=cluster_metrics_tls("127.0.0.1")
    ).start()
    env = {"SUBMARINE_METRICS_ENDPOINT": metrics.address, "SUBMARINE_METRICS_TOKEN": METRICS_TOKEN}
    rows: dict[str, object] = {}
    try:
        cluster.up(spec, timeout=240)
        for key in args.only or VARIANTS:
            work = root / key
            work.mkdir()
            print(f"{key}:", flush=True)
            started = time.monotonic()
            try:
                rows[key] = measure(
                    VARIANTS[key], spec.rm_url, work, f"pre-{key}", args.prod_seconds, metrics.store, env
                )
            except (AssertionError, ElasticError, YarnError, TimeoutError, ValueError, IndexError) as exc:
                rows[key] = {"variant": VARIANTS[key].label, "error": f"{type(exc).__name__}: {exc}"}
            rows[key]["wall_s"] = round(time.monotonic() - started, 1)  # type: ignore[index]
            print(json.dumps(rows[key]), flush=True)
            wait_research_empty(spec.rm_url)
    finally:
        metrics.stop()
        cluster.down()
    results["load_after"] = [round(x, 2) for x in os.getloadavg()]
    results["variants"] = rows
    RESULTS.mkdir(exist_ok=True)
    if args.only and (RESULTS / "preemption.json").exists():
        results = merged(json.loads((RESULTS / "preemption.json").read_text()), results)
    (RESULTS / "preemption.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / "preemption.md").write_text(markdown(results))
    print(markdown(results))


def wait_research_empty(rm_url: str) -> None:
    """The next variant starts on an empty cluster: no container left in either queue."""
    with YarnServiceClient(rm_url, poll_interval=0.5) as yarn:
        used: Callable[[], bool] = lambda: all(q.used_capacity == 0 for q in yarn.queues())  # noqa: E731
        eventually(used, "the queues to empty", 120)


def merged(previous: dict, results: dict) -> dict:
    """``results`` of a run of some variants (``--only``) with the other variants of the ``previous`` results
    file, each row keeping the load it ran under."""
    for row in results["variants"].values():
        row["load_before"], row["load_after"] = results["load_before"], results["load_after"]
    for row in previous["variants"].values():
        row.setdefault("load_before", previous["load_before"])
        row.setdefault("load_after", previous["load_after"])
    rows = {**previous["variants"], **results["variants"]}
    return {**results, "variants": {k: rows[k] for k in VARIANTS if k in rows}, "load_before": "per variant",
            "load_after": "per variant"}  # fmt: skip


def markdown(results: dict[str, object]) -> str:
    rows = results["variants"]
    assert isinstance(rows, dict)
    lines = [
        "# YARN preempts a research job's workers: elastic, plain Horovod, fixed-size",
        "",
        f"Machine: {results['machine']}, load (1, 5, 15 min) {results['load_before']} before, "
        f"{results['load_after']} after. `benchmarks/bench_preemption.py`."
        if results["load_before"] != "per variant"
        else f"Machine: {results['machine']}; the variants ran in separate runs, each load (1, 5, 15 min) below the "
        "table. `benchmarks/bench_preemption.py`.",
        "",
        "2 nodes of 1536 MB, queues prod:50 / research:50; the research job (4 workers of 512 MB, its AM and "
        f"driver: the whole cluster) trains; a prod job of one 512 MB container arrives and runs "
        f"{results['prod_seconds']} s; YARN preempts two research workers for it.",
        "",
        "| research job | prod start s | steps redone | ring still: preempted s | growing back s "
        "| training time lost s | steps while prod ran (ring) | back at 4 after prod s | worker failures |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows.values():
        if "error" in row:
            lines.append(f"| {row['variant']} | failed: {row['error']} ||||||||")
            continue
        ring = "/".join(str(s) for s in row["ring_sizes_while_prod_ran"]) or "-"
        back = row["back_at_4_after_prod_s"]
        at_least = "" if row["trained_again"] else "> "
        back = f"{back:.1f}" if back is not None else f"not within {BACK_S:.0f} (given up)"
        lines.append(
            f"| {row['variant']} | {row['prod_start_s']:.1f} | {row['steps_redone']} "
            f"| {row['not_training_preempted_s']:.1f} | {row['not_training_growing_back_s']:.1f} "
            f"| {at_least}{row['time_lost_s']:.1f} | {row['steps_while_prod_ran']} ({ring}) "
            f"| {back} | {row['worker_failures']} |"
        )
    lines += [
        f"\n{row['variant']}: load {row['load_before']} before, {row['load_after']} after."
        for row in rows.values()
        if "load_before" in row
    ]
    lines += [
        "",
        f"Ring still: the sum of the gaps over {STALL_S:.0f} s between consecutive committed steps, from the prod "
        f"job's submission until {STEPS} steps at 4 workers after it ended; those that began while the prod job "
        "ran, and after (growing back). Training time lost: both, plus the steps redone times the median step at "
        "4 workers before. Steps redone: committed steps rank 0 computed more than once (the metrics stream for "
        "`train_elastic.py`, the step log for `tape_elastic.py`). The prod job ran from its container's launch "
        "to the end of its `sleep`.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
