"""What an infrastructure fault costs an elastic training job: time back to full size, steps redone.

Runs every scenario of ``tests/integration/faults.py`` (the ones ``tests/integration/test_job_faults.py``
tests) ``--repeats`` times on a pseudo-cluster of its own: an elastic job of ``examples/train_elastic.py``
trains, the fault is injected, and the run is held to the same checks as the test (ring back at full size,
YARN's worker containers exactly the ring's members, every committed step once, identical weights, a healthy
cluster). Per fault it reports:

- fault -> full size: the fault -> the first committed step at full size after the last one at another size;
- longest pause: the longest gap between committed steps from the last one before the fault to recovery;
- YARN agrees: the fault -> YARN's READY workers are exactly the ring's members;
- steps redone: steps rank 0 ran whose result was thrown away (from the metrics stream), per run;
- what the scenario marked (a daemon back, the ring shrunk, ...), medians;
- beside it, what the same fault did to a job on the same pseudo-cluster before the project handled it
  (:data:`BEFORE`, measured then, not by this script).

A scenario added to ``SCENARIOS`` in ``tests/integration/faults.py`` (one function) is run here too.

Writes ``benchmarks/results/faults.json`` and ``faults.md``.
Run: ``.venv/bin/python benchmarks/bench_faults.py [--repeats 3] [--only rm_kill] [--port-base 20900]``;
``--markdown-only`` writes ``faults.md`` again from ``faults.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
sys.path.insert(0, str(REPO))

from submarine_elastic.cluster import ClusterSpec, LocalCluster  # noqa: E402
from submarine_elastic.protocol.api import ElasticError  # noqa: E402
from submarine_elastic.yarn import YarnError  # noqa: E402
from tests.integration.faults import SCENARIOS, FaultReport, run_fault  # noqa: E402

#: What each fault did to a training job on the same pseudo-cluster before the project handled it (no driver
#: recovery, no hung-process bound, ResourceManager recovery off, a dead NodeManager LOST only after 10 min, YARN
#: not reconciled with the ring), as measured then; this script does not measure it. In parentheses where that
#: fault differed from the scenario's.
BEFORE = {
    "nm_kill": (
        "(the NodeManager held 2 workers and stayed dead) survived while the orphaned processes lived; the RM "
        "listed the node RUNNING for 10 min; a worker dying later was never relaunched (ring 2, target 3)"
    ),
    "nm_lost": (
        "(the NodeManager held 2 workers) survived while the orphaned processes lived; the RM listed the node "
        "RUNNING for 10 min; a worker dying later was never relaunched (ring 2, target 3)"
    ),
    "rm_kill": "job lost (RM recovery was off: the NodeManagers resynced and killed every container)",
    "rm_freeze": "the CLI said 'ring has 1 workers' while YARN kept 3 containers for 98 s",
    "driver_kill": "job lost (the agents stopped their training processes), every committed step lost (no checkpoint)",
    "driver_freeze": (
        "job lost: the driver counted every closed stream a lost worker, Horovod stopped the ring, and the agents' "
        "re-attaches were refused"
    ),
    "worker_hang": (
        "(stopped 60 s) survived, but the ring waited the whole 60 s (the worker was not evicted); training again "
        "0.2 s after SIGCONT"
    ),
}


def cell(values: list[float]) -> str:
    """A table cell: the median (the max) of ``values``."""
    return f"{statistics.median(values):.2f} ({max(values):.2f})" if values else "-"


def tree() -> dict[str, object]:
    """The commit the run measures, the product files the working tree changes from it (they are measured too:
    the jobs run the tree's code), and a digest of those changes, to tell whether they moved during the run."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout

    product = ["submarine_elastic", "tf_hooks", "examples", "yarn_service_specs"]
    changed = git("status", "--porcelain", "--", *product).splitlines()
    return {
        "commit": git("rev-parse", "--short", "HEAD").strip(),
        "uncommitted": sorted(line[3:] for line in changed),
        "digest": hashlib.sha256(git("diff", "HEAD", "--", *product).encode()).hexdigest()[:12],
    }


def summary(values: list[float]) -> dict[str, object]:
    return {
        "median": round(statistics.median(values), 2) if values else None,
        "max": round(max(values), 2) if values else None,
        "samples": values,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each fault")
    parser.add_argument("--only", action="append", choices=sorted(SCENARIOS), help="run only these faults")
    parser.add_argument("--port-base", type=int, default=20900)
    parser.add_argument("--markdown-only", action="store_true", help="write faults.md again from faults.json")
    args = parser.parse_args()
    if args.markdown_only:
        (RESULTS / "faults.md").write_text(markdown(json.loads((RESULTS / "faults.json").read_text())))
        return
    chosen = [SCENARIOS[n] for n in (args.only or SCENARIOS)]
    root = Path(tempfile.mkdtemp(prefix="bench-faults-"))
    # The jobs' tokens and the controller's state stay in the run's own directory.
    os.environ["SUBMARINE_JOBS_DIR"] = str(root / "jobs")
    os.environ["SUBMARINE_CONTROLLER_DIR"] = str(root / "controller")
    print(f"working in {root}", flush=True)
    spec = ClusterSpec(nodes=2, node_memory_mb=4096, node_vcores=4, port_base=args.port_base)
    cluster = LocalCluster(root / "cluster")
    cluster.up(spec, timeout=240)
    reports: dict[str, list[FaultReport]] = {s.name: [] for s in chosen}
    failures: dict[str, list[str]] = {s.name: [] for s in chosen}
    started = time.monotonic()
    measured = tree()
    try:
        for i in range(args.repeats):
            for scenario in chosen:
                work = root / f"{scenario.name}-{i}"
                work.mkdir()
                try:
                    report = run_fault(scenario, cluster, work)
                except (AssertionError, TimeoutError, ElasticError, YarnError) as exc:
                    failures[scenario.name].append(str(exc).splitlines()[0])
                    print(f"  {scenario.name} run {i + 1}: FAILED\n{traceback.format_exc()}", flush=True)
                    continue
                reports[scenario.name].append(report)
                print(
                    f"  {scenario.name} run {i + 1}/{args.repeats}: full size again {report.recovery_s} s, "
                    f"YARN agrees {report.yarn_agrees_s} s, {report.steps_redone} steps redone",
                    flush=True,
                )
    finally:
        cluster.down()

    faults: dict[str, dict] = {}
    for scenario in chosen:
        runs = reports[scenario.name]
        marks = sorted({k for r in runs for k in r.timings_s})
        faults[scenario.name] = {
            "fault": scenario.title,
            "before": BEFORE.get(scenario.name),
            "workers": scenario.workers,
            "full_size": runs[0].full_size if runs else None,
            "runs": len(runs),
            "failed": failures[scenario.name],
            "recovery_s": summary([r.recovery_s for r in runs]),
            "longest_pause_s": summary([r.longest_pause_s for r in runs]),
            "yarn_agrees_s": summary([r.yarn_agrees_s for r in runs]),
            "steps_redone": summary([float(r.steps_redone) for r in runs]),
            "marks_s": {k: summary([r.timings_s[k] for r in runs if k in r.timings_s]) for k in marks},
            "containers_replaced": sum(len(r.containers_replaced) for r in runs),
            "reports": [asdict(r) for r in runs],
        }
    results = {
        "cluster": {"nodes": spec.nodes, "node_memory_mb": spec.node_memory_mb, "node_vcores": spec.node_vcores},
        "cores": os.cpu_count(),
        "repeats": args.repeats,
        "minutes": round((time.monotonic() - started) / 60, 1),
        "tree": {**measured, "changed_during_run": tree()["digest"] != measured["digest"]},
        "faults": faults,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "faults.json").write_text(json.dumps(results, indent=2) + "\n")
    text = markdown(results)
    (RESULTS / "faults.md").write_text(text)
    print(text)


def markdown(results: dict) -> str:
    """``faults.md`` from what ``faults.json`` holds."""
    lines = [
        "# Infrastructure faults under a training elastic job",
        "",
        "`examples/train_elastic.py` (commit every 4 steps, ~0.05 s a step) as an elastic job on the pseudo-cluster "
        f"({results['cluster']['nodes']} NodeManagers of {results['cluster']['node_memory_mb']} MB and "
        f"{results['cluster']['node_vcores']} vcores, on {results['cores']} cores shared with other work); each fault "
        f"injected mid-training, {results['repeats']} runs each. Seconds from the fault, median (max). Every run that "
        "counts passed the checks of `tests/integration/test_job_faults.py` and `test_job_recovery.py`: ring back at "
        "full size with YARN's READY workers exactly its members, every committed step once, every sample once per "
        "epoch, identical weights on every rank, a healthy cluster after.",
        "",
        *measured_tree(results.get("tree")),
        "| fault | before | workers -> full size | runs ok | fault -> training at full size | longest pause "
        "| YARN agrees | steps redone | marks (median) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for f in results["faults"].values():
        marked = ", ".join(f"{k.removesuffix('_s').replace('_', ' ')} {v['median']}" for k, v in f["marks_s"].items())
        lines.append(
            f"| {f['fault']} | {f.get('before') or '-'} | {f['workers']} -> {f['full_size']} "
            f"| {f['runs']} of {results['repeats']} "
            f"| {cell(f['recovery_s']['samples'])} | {cell(f['longest_pause_s']['samples'])} "
            f"| {cell(f['yarn_agrees_s']['samples'])} | {cell(f['steps_redone']['samples'])} | {marked} |"
        )
    lines += [
        "",
        "Fault -> training at full size: the first committed step at full size after the last one at another size "
        "(for a fault that never shrank the ring, the first step after it). YARN agrees: its READY worker containers "
        "are exactly the ring's members; for the frozen ResourceManager this includes the freeze (until rm resumed). "
        "Steps redone: steps rank 0 ran whose result was rolled back, from the metrics stream (the step log has only "
        "committed steps). Marks: what the scenario noted, in seconds from the fault. Before: what the same fault "
        "did to a training job on the same pseudo-cluster before the project handled it (no driver recovery, no "
        "hung-process bound, ResourceManager recovery off, a dead NodeManager LOST only after 10 min, YARN not "
        "reconciled with the ring), as measured then, not by this script; in parentheses where that fault differed "
        "from this one.",
    ]
    failed = {n: f["failed"] for n, f in results["faults"].items() if f["failed"]}
    if failed:
        lines += ["", "Runs that failed a check:", *[f"- {n}: {'; '.join(msgs)}" for n, msgs in failed.items()]]
    return "\n".join(lines) + "\n"


def measured_tree(state: dict | None) -> list[str]:
    """The lines saying which code the runs measured, when ``faults.json`` has it."""
    if not state:
        return []
    line = f"Measured at commit {state['commit']}"
    if state["uncommitted"]:
        line += f" with the working tree's uncommitted changes to {', '.join(state['uncommitted'])}"
        line += " (which changed during the run)" if state["changed_during_run"] else ""
    return [line + ".", ""]


if __name__ == "__main__":
    main()
