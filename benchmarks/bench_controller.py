"""The controller's cost as the cluster grows: decision latency and memory from 10 to 1,000 jobs (4,000 GPUs)
under every built-in pair of job policy and arbiter, and the simulator's wall time and memory from 160 to
1,600 jobs.

Controller: N synthetic jobs stream step points into the metrics store (as the gRPC service would hold them,
with step times that grow with the ring and a gradient noise scale, so the goodput model has what it reads
live); each round closes a metrics window and runs one controller round (``ControllerService.tick``): read
every job's size and metrics, build the snapshot, run the policy engine, record each decision in SQLite, and
send the flex call. Every round one job leaves and one arrives to a full cluster (4 slots per job, 4,000 at
1,000 jobs), needing 6 workers at least, so the arbiter resizes several jobs. ``--policy all`` runs every built-in pair
(:func:`builtin_pairs`: each job policy with each arbiter). The job backend answers at once, so what is
measured is the controller's own work. Latency: per decision, from the window closed to its flex call sent;
per round, the whole round. The first round, which sizes every job at once (N decisions), is reported apart
and left out of the percentiles; beside the wall time, the CPU time of the round (all threads), which other
load on the machine does not inflate. Between rounds the controller's loop runs the cycle collector
(``ControllerService.collect_garbage``): the benchmark does too, outside the round, and reports its CPU time
apart. Memory: what the controller and its metrics store hold on the Python heap after the rounds (tracemalloc,
in a second run of 5 rounds, apart so that tracing does not slow the timed one). Each job count runs in fresh
processes.

Simulator: k copies of the Pollux workloads 1-4 in turn (160 jobs each, renamed) on a cluster k times the
16x4 GPUs of one, so the load per GPU stays that of one workload; wall time, CPU time and peak memory of one
``goodput+goodput`` run, each in a fresh process (peak memory: the process's peak resident set over its size
before the run). The growth table gives b in cost ~ jobs^b between each count and the next, and overall.

Writes ``benchmarks/results/controller.json``, ``controller.md`` and ``controller.png``.

Run: ``.venv/bin/python benchmarks/bench_controller.py [--jobs 10,100,250,500,1000] [--rounds 30]
[--policy greedy+fair-share --policy goodput+goodput | --policy all] [--sim-jobs 160,320,800,1600] [--quick]``
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import psutil
from _common import int_list

from submarine_elastic.controller.api import ClusterApp, JobBackend, JobFootprint, NodeResources
from submarine_elastic.controller.service import METRICS_JOBS, ControllerService, metrics_store
from submarine_elastic.controller.store import ControllerStore
from submarine_elastic.metrics.proto import metrics_pb2
from submarine_elastic.metrics.store import InMemoryStore
from submarine_elastic.policy import PolicyEngine, load_arbiter_spec, load_job_policy_spec
from submarine_elastic.protocol.proto import elastic_pb2 as pb

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_P99_MS = 100.0
TARGET_JOBS = 1000
SIM_TARGET_S = 30.0
SIM_TARGET_GROWTH = 1.2
SLOTS_PER_JOB = 4
#: The workers an arriving job needs (at least): more than a departure frees, so the arbiter shrinks others.
ARRIVAL = SLOTS_PER_JOB + 2
WORKLOAD_JOBS = 160
DEFAULT_POLICIES = ["greedy+fair-share", "goodput+goodput"]
#: The built-in job policies that need options, with the ones the benchmark runs them with.
CONFIGURED = {
    "composite": "composite(policies=[convergence, scaling-efficiency])",
    "utility": "utility(price_per_worker_hour=1.0, value_per_sample=0.001)",
}


#: ``--jobs`` and ``--sim-jobs``: whole numbers of at least 2.
JOB_COUNTS = int_list("job counts", 2)


def builtin_pairs() -> list[str]:
    """Every built-in job policy with every built-in arbiter, as ``job-policy+arbiter``; the two that take no
    defaults as :data:`CONFIGURED` gives them."""
    from submarine_elastic.policy import ClusterArbiter, JobPolicy
    from submarine_elastic.policy.loader import BUILTIN_POLICIES, load_policy_class

    classes = {name: load_policy_class(name) for name in sorted(BUILTIN_POLICIES)}
    jobs = [CONFIGURED.get(name, name) for name, cls in classes.items() if issubclass(cls, JobPolicy)]
    arbiters = [name for name, cls in classes.items() if issubclass(cls, ClusterArbiter)]
    return [f"{j}+{a}" for a in arbiters for j in jobs]


class InstantCluster(JobBackend):
    """The controller is given its capacity in slots (``--capacity``), so nodes and footprints are not read."""

    def __init__(self) -> None:
        self.sizes: dict[str, int] = {}
        self.sent: list[float] = []

    def nodes(self) -> list[NodeResources] | None:
        return None

    def footprint(self, job_id: str) -> JobFootprint | None:
        return None

    def ring_size(self, job_id: str) -> int | None:
        return self.sizes.get(job_id)

    def set_target(self, job_id: str, target: pb.Target) -> None:
        self.sent.append(time.perf_counter())
        self.sizes[job_id] = target.workers

    def cluster_jobs(self) -> dict[str, ClusterApp] | None:
        return None


def report(store: InMemoryStore, job: str, size: int, seq: int, step: int) -> None:
    """One step of every rank of ``job``: 32 samples per worker in a step that takes longer on a larger ring
    (speed-up 1.9 at 2 workers, 2.6 at 3), with a noise scale of 300 samples."""
    step_time = 0.1 * (1 + 0.05 * (size - 1) ** 1.5)
    for rank in range(size):
        store.ingest(
            metrics_pb2.ReportBatch(
                job_id=job,
                worker=metrics_pb2.WorkerRef(instance=f"worker-{rank}", rank=rank),
                incarnation="i1",
                world_size=size,
                points=[
                    metrics_pb2.StepPoint(
                        seq=seq,
                        step=step,
                        loss=1.0 / (1 + step),
                        examples_per_second=32 / step_time,
                        step_time_seconds=step_time,
                        batch_size=32,
                        wall_time=time.time(),
                        grad_sq_norm=1.0,
                        grad_variance=300.0,
                        gradient_noise_scale=300.0,
                    )
                ],
            )
        )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _rss_mib() -> float:
    return float(psutil.Process().memory_info().rss) / 2**20


def measure_controller(jobs: int, rounds: int, spec: str, *, memory: bool = False) -> dict[str, Any]:
    """One controller with ``jobs`` jobs under ``spec`` (``job-policy+arbiter``), ``rounds`` rounds after
    the first; with ``memory``, traced by tracemalloc."""
    job_policy, arbiter = spec.split("+", 1)
    if memory:
        tracemalloc.start()
    cluster = InstantCluster()
    metrics = metrics_store()  # the controller's own: every job's metrics up to METRICS_JOBS jobs
    if jobs > METRICS_JOBS:
        raise ValueError(f"{jobs} jobs are more than the controller keeps the metrics of ({METRICS_JOBS})")
    with tempfile.TemporaryDirectory() as tmp:
        service = ControllerService(
            ControllerStore(Path(tmp) / "c.db"),
            PolicyEngine(load_job_policy_spec(job_policy), load_arbiter_spec(arbiter), cooldown_s=0),
            cluster,
            metrics=metrics,
            interval=3600,
            capacity=SLOTS_PER_JOB * jobs,
        )
        for i in range(jobs):
            job = f"job-{i:04d}"
            service.job_submitted(job, 1, 8, 2)
            cluster.sizes[job] = 2
        per_decision: list[float] = []
        per_round: list[float] = []
        cpu_per_round: list[float] = []
        collect_cpu: list[float] = []
        first: dict[str, float] = {}
        decisions = 0
        next_id = jobs
        for r in range(rounds + 1):
            for job, size in list(cluster.sizes.items()):
                report(metrics, job, size, seq=r + 1, step=r)
            arriving = None
            if r > 0:  # one job leaves and one arrives to a full cluster: the arbiter reshuffles the others
                leaving = next(iter(cluster.sizes))
                service.job_finished(leaving)
                del cluster.sizes[leaving]
                arriving = f"job-{next_id:04d}"
                next_id += 1
                service.job_submitted(arriving, ARRIVAL, 8, ARRIVAL)
            cluster.sent.clear()
            window_closed, cpu0 = time.perf_counter(), time.process_time()
            recorded = service.tick()
            service.wait_idle(60)
            took = time.perf_counter() - window_closed
            cpu = time.process_time() - cpu0
            sent = [t - window_closed for t in cluster.sent]
            if r == 0:
                first = {"decisions": len(recorded), "round_ms": round(took * 1e3, 1)}
            else:
                per_round.append(took)
                cpu_per_round.append(cpu)
                per_decision += sent
                decisions += len(recorded)
            if arriving is not None:
                cluster.sizes.setdefault(arriving, ARRIVAL)
            collect0 = time.process_time()
            service.collect_garbage()  # as the controller's loop does between rounds
            if r > 0:
                collect_cpu.append(time.process_time() - collect0)
        if memory:
            gc.collect()  # what is held, not garbage waiting for the cycle collector
        held = tracemalloc.get_traced_memory()[0] / 2**20 if memory else None
        service.store.close()
    return {
        "jobs": jobs,
        "slots_per_job": SLOTS_PER_JOB,
        "policy": spec,
        "rounds": rounds,
        "decisions": decisions,
        "decision_ms": _stats(per_decision),
        "round_ms": _stats(per_round),
        "round_cpu_ms": _stats(cpu_per_round),
        "between_rounds_cpu_ms": _stats(collect_cpu),
        "first_round": first,
        "heap_mib": None if held is None else round(held, 1),
    }


def _stats(seconds: list[float]) -> dict[str, float | None]:
    if not seconds:
        return {"median": None, "p99": None}
    return {
        "median": round(statistics.median(seconds) * 1e3, 2),
        "p99": round(percentile(seconds, 0.99) * 1e3, 2),
    }


def measure_simulator(jobs: int) -> dict[str, Any]:
    """One ``goodput+goodput`` run of ``jobs`` (a multiple of 160) Pollux jobs on 16x4 GPUs per 160."""
    from submarine_elastic import env
    from submarine_elastic.sim import ClusterConfig, JobSpec, TraceCatalog, load_scheduler, load_workload, simulate

    if jobs % WORKLOAD_JOBS:
        raise ValueError(f"simulator job counts are multiples of {WORKLOAD_JOBS}, got {jobs}")
    copies = jobs // WORKLOAD_JOBS
    catalog = TraceCatalog()
    data = env.settings().pollux_data_directory() / "workloads"
    workload: list[JobSpec] = []
    for k in range(copies):
        for j in load_workload(data / f"workload-{k % 4 + 1}.csv", catalog.names()):
            workload.append(
                JobSpec(
                    f"c{k}-{j.name}",
                    j.arrival_s,
                    j.application,
                    j.num_replicas,
                    j.batch_size,
                    j.min_replicas,
                    j.max_replicas,
                )  # fmt: skip
            )
    workload.sort(key=lambda j: j.arrival_s)
    base_mib = _rss_mib()
    t0, cpu0 = time.perf_counter(), time.process_time()
    result = simulate(workload, ClusterConfig(16 * copies, 4), load_scheduler("goodput+goodput"), catalog=catalog)
    return {
        "jobs": jobs,
        "gpus": 64 * copies,
        "wall_s": round(time.perf_counter() - t0, 1),
        "cpu_s": round(time.process_time() - cpu0, 1),
        "rounds": result.summary.rounds,
        "finished": result.summary.finished,
        "peak_mib_over_base": round(_peak_rss_mib() - base_mib, 1),
    }


def _in_fresh_process(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, check=False, cwd=Path(__file__).parent
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench_controller {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _growth(points: list[tuple[int, float]]) -> float | None:
    """The exponent b of value ~ jobs^b between the smallest and largest job count."""
    import math

    usable = [(n, v) for n, v in points if v and v > 0]
    if len(usable) < 2:
        return None
    (n0, v0), (n1, v1) = usable[0], usable[-1]
    return round(math.log(v1 / v0) / math.log(n1 / n0), 2)


def _growth_steps(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """b in cost ~ jobs^b from each simulator count to the next, of the wall and the CPU time."""
    return [
        {
            "from": a["jobs"],
            "to": b["jobs"],
            "wall_b": _growth([(a["jobs"], a["wall_s"]), (b["jobs"], b["wall_s"])]),
            "cpu_b": _growth([(a["jobs"], a["cpu_s"]), (b["jobs"], b["cpu_s"])]),
        }
        for a, b in zip(rows, rows[1:], strict=False)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=JOB_COUNTS, default=[10, 100, 250, 500, 1000], help="controller job counts")
    parser.add_argument("--rounds", type=int, default=30, help="controller rounds after the first")
    parser.add_argument("--policy", action="append", help="job-policy+arbiter (repeatable), or all")
    parser.add_argument("--sim-jobs", type=JOB_COUNTS, default=[160, 320, 800, 1600], help="simulator job counts")
    parser.add_argument("--quick", action="store_true", help="10 and 50 jobs, 160 and 320 in the simulator")
    parser.add_argument(
        "--part",
        choices=("all", "controller", "simulator"),
        default="all",
        help="measure only one part; the other's results are kept from the last results file",
    )
    parser.add_argument("--one-controller", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--memory", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-memory", action="store_true", help="skip the traced run (keep the last heap figure)")
    parser.add_argument("--one-simulator", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    policies = args.policy or DEFAULT_POLICIES
    if "all" in policies:
        policies = builtin_pairs()
    if args.one_controller is not None:
        print(json.dumps(measure_controller(args.one_controller, args.rounds, policies[0], memory=args.memory)))
        return
    if args.one_simulator is not None:
        print(json.dumps(measure_simulator(args.one_simulator)))
        return
    counts, sim_counts = ([10, 50], [160, 320]) if args.quick else (args.jobs, args.sim_jobs)

    load_start = round(psutil.getloadavg()[0], 2)
    kept: dict[str, Any] = {}
    if args.part != "all":
        kept = json.loads((RESULTS / "controller.json").read_text())
    # --part keeps the last file's rows: another part's, and this part's for the pairs and counts not run now
    controller: dict[str, list[dict[str, Any]]] = {
        spec: same  # rows of another cluster shape (slots per job) are not kept
        for spec, rows in kept.get("controller", {}).items()
        if (same := [r for r in rows if r.get("slots_per_job") == SLOTS_PER_JOB])
    }
    for spec in policies if args.part != "simulator" else ():
        rows = {r["jobs"]: r for r in controller.get(spec, [])}
        for n in counts:
            row = _in_fresh_process("--one-controller", str(n), "--rounds", str(args.rounds), "--policy", spec)
            if not args.no_memory:
                traced = _in_fresh_process("--one-controller", str(n), "--rounds", "5", "--policy", spec, "--memory")
                row["heap_mib"] = traced["heap_mib"]
            elif n in rows and rows[n].get("heap_mib") is not None:
                row["heap_mib"] = rows[n]["heap_mib"]  # the last measured, kept
            rows[n] = row
            controller[spec] = [rows[k] for k in sorted(rows)]
            print(
                f"controller {spec} {n:4d} jobs: decision p50 {row['decision_ms']['median']} ms, "
                f"p99 {row['decision_ms']['p99']} ms, round p99 {row['round_ms']['p99']} ms "
                f"(cpu p99 {row['round_cpu_ms']['p99']} ms), first round {row['first_round']['round_ms']} ms, "
                f"heap {row['heap_mib']} MiB",
                flush=True,
            )
    simulator: list[dict[str, Any]] = kept.get("simulator", []) if args.part == "controller" else []
    for n in sim_counts if args.part != "controller" else ():
        row = _in_fresh_process("--one-simulator", str(n))
        simulator.append(row)
        print(
            f"simulator {n:5d} jobs on {row['gpus']} GPUs: {row['wall_s']} s wall, {row['cpu_s']} s cpu, "
            f"+{row['peak_mib_over_base']} MiB",
            flush=True,
        )
    results = {
        "machine": {
            "cpus": psutil.cpu_count(),
            "load_average_start": load_start,
            "load_average": round(psutil.getloadavg()[0], 2),
            "python": platform.python_version(),
        },  # fmt: skip
        "slots_per_job": SLOTS_PER_JOB,
        "target_p99_ms": TARGET_P99_MS,
        "target_jobs": TARGET_JOBS,
        "simulator_target_s": SIM_TARGET_S,
        "simulator_target_growth": SIM_TARGET_GROWTH,
        "controller": controller,
        "simulator": simulator,
        "growth_exponent": {
            **{
                f"{spec} decision p99": _growth([(r["jobs"], r["decision_ms"]["p99"]) for r in rows])
                for spec, rows in controller.items()
            },
            **{
                f"{spec} round CPU p50": _growth([(r["jobs"], r["round_cpu_ms"]["median"]) for r in rows])
                for spec, rows in controller.items()
            },
            **{
                f"{spec} memory": _growth([(r["jobs"], r["heap_mib"]) for r in rows])
                for spec, rows in controller.items()
            },
            "simulator wall": _growth([(r["jobs"], r["wall_s"]) for r in simulator]),
            "simulator CPU": _growth([(r["jobs"], r["cpu_s"]) for r in simulator]),
            "simulator memory": _growth([(r["jobs"], r["peak_mib_over_base"]) for r in simulator]),
        },
        "simulator_growth_steps": _growth_steps(simulator),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "controller.json").write_text(json.dumps(results, indent=2) + "\n")
    _plot(results, RESULTS / "controller.png")
    text = _markdown(results, args.rounds)
    (RESULTS / "controller.md").write_text(text)
    print(text)


def _plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_c, ax_m, ax_s) = plt.subplots(1, 4, figsize=(19, 6))
    for spec, rows in results["controller"].items():
        n = [r["jobs"] for r in rows]
        ax_t.plot(n, [r["decision_ms"]["p99"] for r in rows], marker="o", label=spec)
        ax_c.plot(n, [r["round_cpu_ms"]["median"] for r in rows], marker="o", label=spec)
        ax_m.plot(n, [r["heap_mib"] for r in rows], marker="o", label=spec)
    for ax in (ax_t, ax_c):
        ax.axhline(results["target_p99_ms"], color="grey", linestyle=":", label="target")
    ax_t.set(xlabel="jobs", ylabel="ms", title="decision p99 (wall, under load)")
    ax_c.set(xlabel="jobs", ylabel="ms", title="round CPU p50")
    ax_m.set(xlabel="jobs", ylabel="MiB", title="controller: Python heap held")
    sim = results["simulator"]
    ax_s.plot([r["jobs"] for r in sim], [r["wall_s"] for r in sim], marker="o", label="wall s")
    ax_s.plot([r["jobs"] for r in sim], [r["cpu_s"] for r in sim], marker="^", label="CPU s")
    ax_s.plot([r["jobs"] for r in sim], [r["peak_mib_over_base"] for r in sim], marker="s", label="peak MiB")
    ax_s.axhline(results.get("simulator_target_s", SIM_TARGET_S), color="grey", linestyle=":", label="target s")
    ax_s.set(xlabel="jobs (cluster grown with them)", title="simulator, goodput+goodput")
    for ax in (ax_t, ax_c, ax_m, ax_s):
        ax.grid(alpha=0.3)
    ax_s.legend(fontsize=7)
    handles, labels = ax_c.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7)
    fig.tight_layout(rect=(0, 0.05 + 0.035 * (len(labels) // 4), 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _targets(results: dict[str, Any]) -> list[str]:
    """Each target, met or missed, with its figure."""
    out = []
    at = results.get("target_jobs", TARGET_JOBS)
    limit = results["target_p99_ms"]
    for spec, rows in results["controller"].items():
        row = next((r for r in rows if r["jobs"] == at), None)
        if row is None:
            continue
        p99, cpu = row["decision_ms"]["p99"], row["round_cpu_ms"]["p99"]
        what = "decision p99"
        if p99 is None:  # no decision in the timed rounds (the arrival waits): a decision would wait for the round
            p99, what = row["round_ms"]["p99"], "no decision made; round p99"
        verdict = "met" if p99 < limit else "missed"
        out.append(
            f"- {spec} at {at} jobs: {what} {p99} ms (round CPU p99 {cpu} ms), target under {limit:.0f} ms: "
            f"{verdict}{'' if p99 < limit or cpu >= limit else ' on the wall clock; met in CPU time'}"
        )
    sim = results["simulator"]
    if sim:
        top = sim[-1]
        cap = results.get("simulator_target_s", SIM_TARGET_S)
        out.append(
            f"- simulator at {top['jobs']} jobs: {top['wall_s']} s wall ({top['cpu_s']} s CPU), target under "
            f"{cap:.0f} s: {'met' if top['wall_s'] < cap else 'missed'}"
            f"{'' if top['wall_s'] < cap or top['cpu_s'] >= cap else ' on the wall clock; met in CPU time'}"
        )
        growth = results["growth_exponent"].get("simulator CPU")
        most = results.get("simulator_target_growth", SIM_TARGET_GROWTH)
        if growth is not None:
            out.append(
                f"- simulator growth: CPU time ~ jobs^{growth} (wall ^{results['growth_exponent']['simulator wall']}), "
                f"target at most ^{most}: {'met' if growth <= most else 'missed'}"
            )
    return out


def _markdown(results: dict[str, Any], rounds: int) -> str:
    m = results["machine"]
    slots = results.get("slots_per_job", SLOTS_PER_JOB)
    lines = [
        "# The controller's cost as the cluster grows",
        "",
        f"{m['cpus']} CPUs shared with other work, load average {m.get('load_average_start')} at the start and "
        f"{m['load_average']} at the end of the last part run, Python {m['python']}: the wall figures carry that "
        "load, the CPU figures (this process's own time) much less. Each row a fresh process. Controller: "
        f"{slots} slots per job ({slots * results.get('target_jobs', TARGET_JOBS)} GPUs at "
        f"{results.get('target_jobs', TARGET_JOBS)} jobs), the rounds given after the first (one departure and "
        "one arrival each), job backend answers at once; the first round (every job sized at once) apart. "
        f"Target: decision p99 under {results['target_p99_ms']:.0f} ms at {results.get('target_jobs', TARGET_JOBS)} "
        "jobs with every built-in pair.",
        "",
        "## Targets",
        "",
        *_targets(results),
        "",
        "## Controller",
        "",
        "| policy | jobs | rounds | decisions | decision p50 ms | decision p99 ms | round p50 ms | round p99 ms "
        "| round CPU p50 ms | round CPU p99 ms | collection between rounds CPU p50, p99 ms "
        "| first round (decisions, ms) | heap MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for spec, rows in results["controller"].items():
        for r in rows:
            between = r.get("between_rounds_cpu_ms") or {"median": None, "p99": None}
            lines.append(
                f"| {spec} | {r['jobs']} | {r.get('rounds', rounds)} | {r['decisions']} | {r['decision_ms']['median']} "
                f"| {r['decision_ms']['p99']} | {r['round_ms']['median']} | {r['round_ms']['p99']} "
                f"| {r['round_cpu_ms']['median']} | {r['round_cpu_ms']['p99']} | {between['median']}, {between['p99']} "
                f"| {r['first_round']['decisions']}, {r['first_round']['round_ms']} "
                f"| {r['heap_mib']} |"
            )
    lines += [
        "",
        "## Simulator",
        "",
        "goodput+goodput, k copies of the Pollux workloads 1-4 on k x 16x4 GPUs:",
        "",
        "| jobs | GPUs | rounds | finished | wall s | CPU s | peak MiB over base |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results["simulator"]:
        lines.append(
            f"| {r['jobs']} | {r['gpus']} | {r['rounds']} | {r['finished']} | {r['wall_s']} | {r['cpu_s']} "
            f"| {r['peak_mib_over_base']} |"
        )
    steps = results.get("simulator_growth_steps") or []
    if steps:
        lines += ["", "Growth from each count to the next, b in cost ~ jobs^b:", ""]
        lines += ["| jobs | b of wall | b of CPU |", "|---|---|---|"]
        lines += [f"| {g['from']} -> {g['to']} | {g['wall_b']} | {g['cpu_b']} |" for g in steps]
    lines += ["", "## Growth", "", "b in cost ~ jobs^b between the smallest and largest count:", ""]
    lines += [f"- {k}: {v}" for k, v in results["growth_exponent"].items() if v is not None]
    lines += ["", "![cost by job count](controller.png)"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
