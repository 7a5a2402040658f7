"""The README's first command: an elastic TensorFlow job on the local pseudo-cluster, resized while it trains.

Starts the pseudo-cluster (unless one is up), submits ``examples/train_elastic.py`` as an elastic job
with 2 workers (exactly what ``submarine job run --elastic ...`` does), resizes it 2 -> 3 -> 1 -> 2
through the job's driver (what ``submarine job flex`` does) while it trains, shows each resize, lets it
finish its epoch, and prints what it learned. The cluster stays up; ``submarine cluster down`` stops it.

Run: ``python -m submarine_elastic.demo [--name NAME]``
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from submarine_elastic.cluster import ClusterError, ClusterSpec, LocalCluster
from submarine_elastic.elastic.api import ElasticError, Limits
from submarine_elastic.elastic.client import JobClient, forget_job, submit
from submarine_elastic.elastic.jobspec import JobRequest, WorkerResources
from submarine_elastic.yarn import YarnError, YarnServiceClient

REPO = Path(__file__).resolve().parent.parent
console = Console()


def run(name: str) -> int:
    cluster = LocalCluster()
    if cluster.running_daemons():
        rm_url = cluster.spec().rm_url
        console.print(f"using the running pseudo-cluster at {rm_url}")
    else:
        console.rule("starting the pseudo-cluster")
        rm_url = cluster.up(ClusterSpec(), progress=lambda m: console.print(f"  {m}"))

    work = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    command = (
        f"{sys.executable} {REPO}/examples/train_elastic.py --epochs 50 --step-sleep 0.03 "
        f"--until-file {work}/stop --log-dir {work}/log"
    )
    req = JobRequest(
        name=name,
        launch_cmd=command,
        limits=Limits(2, 1, 3),
        resources=WorkerResources(1024, 1),
        rm_url=rm_url,
        workdir=REPO,
    )
    console.rule(f"elastic job {name}")
    console.print(
        f"submarine job run --name {name} --elastic --num_workers 2 --min_workers 1 --max_workers 3 "
        f"--worker_launch_cmd '{command}'",
        soft_wrap=True,
    )
    with YarnServiceClient(rm_url, poll_interval=0.5) as yarn:
        submit(yarn, req, replace=True)
        try:
            with JobClient(name, yarn, locate_timeout=120) as job:
                t0 = time.monotonic()
                job.wait_for_size(2, timeout=300)
                console.print(f"training with 2 workers ({time.monotonic() - t0:.1f} s after submit)")
                for n in (3, 1, 2):
                    time.sleep(3)
                    t0 = time.monotonic()
                    job.flex(n, reason="demo")
                    st = job.wait_for_size(n, timeout=300)
                    ranks = ", ".join(f"{w.instance}=rank {w.rank}" for w in st.workers if w.rank >= 0)
                    console.print(f"flexed to {n} in {time.monotonic() - t0:.1f} s: {ranks}")
                (work / "stop").touch()
                deadline = time.monotonic() + 300
                while not yarn.status(name).is_terminal:
                    if time.monotonic() > deadline:
                        console.print("[red]the job did not finish within 300 s[/red]")
                        return 1
                    time.sleep(1)
        finally:
            yarn.destroy(name, missing_ok=True)
            forget_job(name)
    finals = [json.loads(p.read_text()) for p in sorted((work / "log").glob("final-rank*.json"))]
    if not finals:
        console.print(f"[red]the job left no result in {work}/log[/red]")
        return 1
    console.print(
        f"finished after {finals[0]['step']} steps: accuracy {finals[0]['accuracy']:.3f} on every rank "
        f"({len(finals)} ranks at the end); step log in {work}/log"
    )
    console.print(f"the cluster stays up at {rm_url}; stop it with `submarine cluster down`")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m submarine_elastic.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="demo-elastic", help="job name [demo-elastic]")
    args = parser.parse_args(argv)
    try:
        return run(args.name)
    except (ClusterError, YarnError, ElasticError, TimeoutError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
