"""The README's first command: bring up the local pseudo-cluster and run a small elastic service on it.

Starts the cluster (unless one is up), submits ``yarn_service_specs/demo-service.json`` (a
``worker`` component whose containers each run a tiny Python loop), flexes it 2 -> 3 -> 1 through
the YARN Services API, showing which instances are READY and how long each change took, then
destroys the service. The cluster stays up for ``submarine cluster status``; ``submarine cluster
down`` stops it.

Run: ``python -m submarine_elastic.demo [--keep-service]``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console

from submarine_elastic.cluster import ClusterError, ClusterSpec, LocalCluster
from submarine_elastic.yarn import Service, YarnError, YarnServiceClient

SPEC = Path(__file__).resolve().parent.parent / "yarn_service_specs" / "demo-service.json"

console = Console()


def _ready(client: YarnServiceClient, name: str) -> str:
    names = [c.component_instance_name for c in client.ready_instances(name, "worker")]
    return ", ".join(names) or "none"


def run(keep_service: bool = False) -> int:
    cluster = LocalCluster()
    if cluster.running_daemons():
        rm_url = cluster.spec().rm_url
        console.print(f"using the running pseudo-cluster at {rm_url}")
    else:
        console.rule("starting the pseudo-cluster")
        rm_url = cluster.up(ClusterSpec(), progress=lambda m: console.print(f"  {m}"))

    spec = Service.from_json_file(SPEC)
    with YarnServiceClient(rm_url, poll_interval=0.5) as client:
        client.destroy(spec.name, missing_ok=True)
        console.rule(f"service {spec.name}")
        t0 = time.monotonic()
        try:
            client.create(spec, wait=True, timeout=300)
            console.print(f"created in {time.monotonic() - t0:.1f} s; READY: {_ready(client, spec.name)}")
            for n in (3, 1):
                client.set_target(spec.name, "worker", n)
                result = client.reconcile(spec.name, "worker", timeout=300)
                if not result.converged:
                    console.print(f"[red]flex to {n} did not converge: {result.error}[/red]")
                    return 1
                console.print(f"flexed to {n} in {result.elapsed_s:.1f} s; READY: {', '.join(result.ready_instances)}")
        finally:
            if not keep_service:
                client.destroy(spec.name, wait=True, missing_ok=True)
                console.print(f"service {spec.name} destroyed")
        if keep_service:
            console.print(f"service {spec.name} left running (see `submarine cluster status`)")
    console.print(f"the cluster stays up at {rm_url}; stop it with `submarine cluster down`")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m submarine_elastic.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--keep-service", action="store_true", help="leave the demo service running")
    args = parser.parse_args(argv)
    try:
        return run(keep_service=args.keep_service)
    except (ClusterError, YarnError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
