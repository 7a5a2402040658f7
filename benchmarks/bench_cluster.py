"""The floor every resize pays: pseudo-cluster start-up and YARN flex latency, measured on real daemons.

Measures, on its own cluster directory and ports (so a developer's cluster is untouched):
- ``cluster up`` until every NodeManager is RUNNING, and ``cluster down``, over ``--up-runs`` runs;
- flex out: the PUT that grows ``worker`` by one, until the new container is READY in the service status;
- flex in: the PUT that shrinks it by one, until the removed container has left the status and its
  process has exited;
each over ``--flex-runs`` rounds. Prints medians (and min/max) and writes
``benchmarks/results/cluster.json`` and ``cluster.md``.

Run: ``.venv/bin/python benchmarks/bench_cluster.py [--up-runs 3] [--flex-runs 5]``
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

from submarine_elastic.cluster import ClusterSpec, LocalCluster
from submarine_elastic.yarn import Component, Resource, RestartPolicy, Service, YarnServiceClient

RESULTS = Path(__file__).resolve().parent / "results"
POLL_S = 0.05


def _container_alive(container_id: str) -> bool:
    marker = f"CONTAINER_ID={container_id}\0".encode()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker in (proc / "environ").read_bytes():
                    return True
            except OSError:
                continue
    return False


def _summary(samples: list[float]) -> dict[str, float | list[float]]:
    return {
        "median_s": round(statistics.median(samples), 3),
        "min_s": round(min(samples), 3),
        "max_s": round(max(samples), 3),
        "samples_s": [round(s, 3) for s in samples],
    }


def bench_up_down(runs: int, port_base: int) -> tuple[list[float], list[float]]:
    ups, downs = [], []
    for i in range(runs):
        with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
            cluster = LocalCluster(Path(tmp))
            t0 = time.perf_counter()
            cluster.up(ClusterSpec(nodes=2, port_base=port_base))
            ups.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            cluster.down()
            downs.append(time.perf_counter() - t0)
        print(f"  up/down run {i + 1}/{runs}: up {ups[-1]:.2f} s, down {downs[-1]:.2f} s", flush=True)
    return ups, downs


def bench_flex(runs: int, port_base: int) -> tuple[list[float], list[float], list[float]]:
    out_ready, in_listed, in_gone = [], [], []
    name = "flexbench"
    spec = Service(
        name=name,
        version="1",
        components=[
            Component(
                name="worker",
                number_of_containers=1,
                launch_command="sleep 3600",
                resource=Resource(cpus=1, memory="256"),
                restart_policy=RestartPolicy.ALWAYS,
            )
        ],
    )
    with tempfile.TemporaryDirectory(prefix="bench-flex-") as tmp:
        cluster = LocalCluster(Path(tmp))
        rm_url = cluster.up(ClusterSpec(nodes=2, port_base=port_base))
        try:
            with YarnServiceClient(rm_url, poll_interval=POLL_S) as client:
                client.create(spec, wait=True, timeout=300)
                for i in range(runs):
                    t0 = time.perf_counter()
                    client.flex(name, "worker", 2)
                    while len(client.ready_instances(name, "worker")) < 2:
                        time.sleep(POLL_S)
                    out_ready.append(time.perf_counter() - t0)

                    removed = {c.component_instance_name: c.id for c in client.ready_instances(name, "worker")}[
                        "worker-1"
                    ]
                    t0 = time.perf_counter()
                    client.flex(name, "worker", 1)
                    listed_at = None
                    while True:
                        now = time.perf_counter()
                        if listed_at is None and removed not in {
                            c.id for c in client.status(name).component("worker").containers
                        }:
                            listed_at = now
                        if listed_at is not None and not _container_alive(removed):
                            break
                        time.sleep(POLL_S)
                    in_listed.append(listed_at - t0)
                    in_gone.append(time.perf_counter() - t0)
                    print(
                        f"  flex round {i + 1}/{runs}: out->READY {out_ready[-1]:.2f} s, "
                        f"in->unlisted {in_listed[-1]:.2f} s, in->process gone {in_gone[-1]:.2f} s",
                        flush=True,
                    )
                client.destroy(name, wait=True)
        finally:
            cluster.down()
    return out_ready, in_listed, in_gone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--up-runs", type=int, default=3)
    parser.add_argument("--flex-runs", type=int, default=5)
    parser.add_argument("--port-base", type=int, default=20000)
    args = parser.parse_args()

    print("cluster up/down:", flush=True)
    ups, downs = bench_up_down(args.up_runs, args.port_base)
    print("flex latency:", flush=True)
    out_ready, in_listed, in_gone = bench_flex(args.flex_runs, args.port_base)

    results = {
        "machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version()},
        "hadoop": "3.4.2",
        "cluster_up_to_ready": _summary(ups),
        "cluster_down": _summary(downs),
        "flex_out_put_to_new_container_ready": _summary(out_ready),
        "flex_in_put_to_container_unlisted": _summary(in_listed),
        "flex_in_put_to_container_process_gone": _summary(in_gone),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cluster.json").write_text(json.dumps(results, indent=2) + "\n")
    rows = [
        ("cluster up → all NMs RUNNING", results["cluster_up_to_ready"]),
        ("cluster down", results["cluster_down"]),
        ("flex +1: PUT → new container READY", results["flex_out_put_to_new_container_ready"]),
        ("flex −1: PUT → container gone from status", results["flex_in_put_to_container_unlisted"]),
        ("flex −1: PUT → container process exited", results["flex_in_put_to_container_process_gone"]),
    ]
    lines = [
        "# Pseudo-cluster and flex latency",
        "",
        f"Hadoop 3.4.2, 2 NodeManagers, {results['machine']['cpus']} CPUs; "
        f"{args.up_runs} up/down runs, {args.flex_runs} flex rounds; polled every {POLL_S * 1000:.0f} ms.",
        "",
        "| what | median s | min s | max s |",
        "|---|---|---|---|",
    ]
    lines += [f"| {label} | {r['median_s']} | {r['min_s']} | {r['max_s']} |" for label, r in rows]
    (RESULTS / "cluster.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
