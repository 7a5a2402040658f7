"""What it costs a job to carry its code (and a packed Python environment) to the nodes.

1. Snapshot, on this machine: the time to pack ``--workdir`` (default: this checkout) into the job's archive,
   its files and bytes before and after compression, twice (the second gives the same content-addressed name).
2. On a 3-host cluster with HDFS (``cluster up --hosts 3``, root): jobs of 3 workers, one a host, each running
   ``sleep``, submitted with ``submarine job run`` side by side:

   - ``--no_snapshot``: the baseline, nothing localized but the job's secrets;
   - the snapshot: uploaded to the job's HDFS directory and localized on each host;
   - the snapshot again (a second job of the same code: uploaded again into its own directory);
   - with ``--python-env ARCHIVE`` also: the packed environment, first (uploaded once) and cached (a second
     job: nothing uploaded, localized again, as YARN localizes per application).

   For each: ``job run``'s wall time (snapshot, upload, submission) and the time from ``job run`` to all three
   workers running (YARN localizes before it starts a container); the bytes uploaded.

Writes ``benchmarks/results/jobcode.json`` and ``jobcode.md``.
Run: ``.venv/bin/python benchmarks/bench_jobcode.py [--workdir DIR] [--python-env ARCHIVE] [--port-base 27500]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import ClusterSpec, LocalCluster
from submarine_elastic.submit.jobcode import PackedEnv, snapshot
from submarine_elastic.yarn import YarnError, YarnServiceClient

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
HOSTS = 3
NODE_MB = 2560
#: Two do not fit one NodeManager: each worker has a host of its own.
WORKER_MB = 1536


def measure_snapshot(workdir: Path) -> dict[str, float | int | str]:
    """Packs ``workdir`` twice; the time of each and what the archive holds."""
    with tempfile.TemporaryDirectory() as into:
        t0 = time.monotonic()
        first = snapshot(workdir, [], Path(into))
        t1 = time.monotonic()
        again = snapshot(workdir, [], Path(into))
        t2 = time.monotonic()
    return {
        "workdir": str(workdir),
        "files": first.files,
        "content_bytes": first.content_bytes,
        "archive_bytes": first.archive_bytes,
        "first_s": round(t1 - t0, 3),
        "again_s": round(t2 - t1, 3),
        "same_name": first.name == again.name,
    }


def run_job(rm: str, name: str, workdir: Path, flags: list[str]) -> dict[str, float]:
    """``job run`` of 3 sleeping workers; seconds to its return and to all three workers running."""
    args = [
        "job", "run", "--name", name, "--num_workers", "3",
        "--worker_resources", f"memory-mb={WORKER_MB},vcores=1", "--worker_launch_cmd", "sleep 600",
        "--workdir", str(workdir), *flags,
    ]  # fmt: skip
    t0 = time.monotonic()
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    submitted = time.monotonic() - t0
    if result.exit_code != 0:
        raise SystemExit(f"job run {name} failed: {result.output}")
    with YarnServiceClient(rm, poll_interval=0.5) as yarn:
        deadline = t0 + 600
        while not _all_running(yarn, name):
            if time.monotonic() > deadline:
                raise SystemExit(f"{name}: the workers did not all run within 600 s")
            time.sleep(0.25)
        running = time.monotonic() - t0
        yarn.destroy(name, wait=True, missing_ok=True)
    return {"job_run_s": round(submitted, 2), "workers_running_s": round(running, 2)}


def _all_running(yarn: YarnServiceClient, name: str) -> bool:
    try:
        return len(yarn.ready_instances(name, "worker")) >= HOSTS
    except YarnError:  # the service's AM does not know its components yet
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=REPO, help="the code to snapshot (default: this checkout)")
    parser.add_argument("--python-env", type=Path, default=None, help="a packed environment (.tar.gz) to localize")
    parser.add_argument("--port-base", type=int, default=27500)
    parser.add_argument("--snapshot-only", action="store_true", help="measure the snapshot only, no cluster")
    args = parser.parse_args()

    results: dict[str, object] = {"machine": f"{platform.node()} {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"}
    results["snapshot"] = measure_snapshot(args.workdir.resolve())
    print(json.dumps(results["snapshot"]))
    if not args.snapshot_only:
        results["cluster"] = on_cluster(args)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "jobcode.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / "jobcode.md").write_text(markdown(results))
    print(markdown(results))


def on_cluster(args: argparse.Namespace) -> dict[str, object]:
    subnet = f"198.19.{args.port_base // 100 % 256}.0/24"
    spec = ClusterSpec(
        nodes=HOSTS, hosts=HOSTS, subnet=subnet, node_memory_mb=NODE_MB, node_vcores=4, port_base=args.port_base
    )
    rows: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="bench-jobcode-") as tmp:
        cluster = LocalCluster(Path(tmp) / "cluster")
        os.environ.update(
            SUBMARINE_RM_URL=spec.rm_url,
            SUBMARINE_CLUSTER_DIR=str(cluster.dir),
            SUBMARINE_JOBS_DIR=str(Path(tmp) / "jobs"),
            SUBMARINE_INSECURE="1",
        )
        try:
            cluster.up(spec, timeout=240)
            code = snapshot(args.workdir.resolve(), [], Path(tmp))
            rows["baseline (--no_snapshot)"] = run_job(spec.rm_url, "b-plain", args.workdir, ["--no_snapshot"])
            rows["snapshot, first"] = run_job(spec.rm_url, "b-code", args.workdir, []) | {
                "uploaded_bytes": code.archive_bytes
            }
            rows["snapshot, another job"] = run_job(spec.rm_url, "b-code2", args.workdir, []) | {
                "uploaded_bytes": code.archive_bytes
            }
            if args.python_env is not None:
                env = PackedEnv.load(args.python_env)
                flags = ["--python_env", str(args.python_env)]
                rows["snapshot + env, first"] = run_job(spec.rm_url, "b-env", args.workdir, flags) | {
                    "uploaded_bytes": code.archive_bytes + env.archive_bytes
                }
                rows["snapshot + env, cached"] = run_job(spec.rm_url, "b-env2", args.workdir, flags) | {
                    "uploaded_bytes": code.archive_bytes
                }
                rows["env_archive_bytes"] = env.archive_bytes
        finally:
            cluster.down()
    return rows


def markdown(results: dict[str, object]) -> str:
    snap = results["snapshot"]
    assert isinstance(snap, dict)
    lines = [
        "# What a job's code (and environment) costs to carry",
        "",
        f"Machine: {results['machine']}. `benchmarks/bench_jobcode.py`.",
        "",
        f"Snapshot of `{snap['workdir']}`: {snap['files']} entries, {snap['content_bytes'] / 2**20:.2f} MiB of files, "
        f"{snap['archive_bytes'] / 2**20:.2f} MiB packed; {snap['first_s']:.2f} s, again {snap['again_s']:.2f} s "
        f"(same name: {snap['same_name']}).",
    ]
    cluster = results.get("cluster")
    if isinstance(cluster, dict):
        lines += [
            "",
            "3 workers, one on each of 3 hosts (HDFS on the hosts), seconds from `job run`:",
            "",
            "| job | `job run` returned | all 3 workers running | uploaded |",
            "|---|---|---|---|",
        ]
        for label, row in cluster.items():
            if isinstance(row, dict):
                up = row.get("uploaded_bytes", 0) / 2**20
                lines.append(f"| {label} | {row['job_run_s']:.2f} | {row['workers_running_s']:.2f} | {up:.2f} MiB |")
        if "env_archive_bytes" in cluster:
            lines += [
                "",
                f"The packed environment: {cluster['env_archive_bytes'] / 2**20:.0f} MiB, uploaded once (its hash "
                "names it) and localized with PRIVATE visibility, so the cached job finds it extracted on each node. "
                "`job run` reads the whole archive once for its hash and its `bin/python`.",
            ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
