"""The README's first command: the mission shown live. A short workload replayed on the local pseudo-cluster
twice, static and elastic, on emulated GPUs; the cluster finishes its jobs sooner elastic.

Starts the pseudo-cluster with 2 nodes x 4 stand-in GPUs (unless one with GPUs is up) and replays
``examples/replay/demo.csv`` (five jobs of the Pollux applications, cifar10 ResNet-18, DeepSpeech2, BERT and
NCF, arriving within 40 s, each asking for most of the cluster) with ``submarine replay``: first ``static``
(every job at its submitted size, waiting in arrival order until its GPUs are free), then ``goodput+goodput``
(every job elastic, the controller sizing it). Each step's model math and allreduce run for real; the step is
then held for the GPU time its application's measured profile gives (``tf_hooks.emulate``). Every arrival,
end and controller decision is printed with its reason as it happens; at the end each run's mean JCT beside
the simulator's for the same runs, and one picture of both runs (every job's GPUs over time, the elastic run's
decisions marked, the jobs finished over time) whose path is printed. The cluster stays up (``submarine
cluster down`` stops it).

Run: ``python -m submarine_elastic.demo [--time-scale S] [--out DIR]``
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from submarine_elastic.cluster import ClusterError, LocalCluster
from submarine_elastic.replay import ReplayError, ReplayRunError, plan_replay
from submarine_elastic.replay.report import summary, table, write
from submarine_elastic.replay.runner import INTERVAL_S, STATIC, replay_cluster_spec, run_policies
from submarine_elastic.replay.simulate import compare_runs

REPO = Path(__file__).resolve().parent.parent
WORKLOAD = REPO / "examples" / "replay" / "demo.csv"
POLICIES = (STATIC, "goodput+goodput")
console = Console()


def cluster_url(cluster: LocalCluster) -> tuple[str, int, int]:
    """The running pseudo-cluster's RM (started with GPUs if none runs) and its nodes and GPUs per node.

    Raises:
        ClusterError: the running cluster has no GPUs (named with what to do).
    """
    if cluster.running_daemons():
        spec = cluster.spec()
        if spec.gpus_per_node < 1:
            raise ClusterError(
                "the running pseudo-cluster has no GPUs: stop it with `submarine cluster down` and run the demo "
                "again (it starts one with 2 nodes x 4 stand-in GPUs)"
            )
        console.print(f"using the running pseudo-cluster at {spec.rm_url}")
        return spec.rm_url, spec.nodes, spec.gpus_per_node
    console.rule("starting the pseudo-cluster: 2 nodes x 4 stand-in GPUs")
    spec = replay_cluster_spec()
    return cluster.up(spec, progress=lambda m: console.print(f"  {m}")), spec.nodes, spec.gpus_per_node


def run(time_scale: float, out: Path) -> int:
    rm_url, nodes, per_node = cluster_url(LocalCluster())
    plan = plan_replay(str(WORKLOAD), time_scale=time_scale, nodes=nodes, gpus_per_node=per_node)
    console.print(f"replay: {plan.describe()}", highlight=False)
    runs = run_policies(
        plan,
        POLICIES,
        rm_url=rm_url,
        out=out,
        say=lambda line: console.print(line, soft_wrap=True, highlight=False),
        heading=console.rule,
    )
    figures = [summary(r) for r in runs]
    sims, lines = compare_runs(runs, INTERVAL_S)
    paths = write(runs, out, sims)
    console.rule("the cluster's jobs, static and elastic")
    for line in lines:
        console.print(line, highlight=False)
    console.print(table(figures, sims), soft_wrap=True)
    static, elastic = (f["mean_jct_s"] for f in figures)
    if isinstance(static, float) and isinstance(elastic, float):
        console.print(
            f"mean JCT static {static:.0f} s, elastic {elastic:.0f} s: [bold]{elastic / static:.2f}[/bold] of "
            "static (emulated GPUs)"
        )
    problems = {name: p for f in figures for name, p in dict(f["problems"]).items()}  # type: ignore[call-overload]
    for name, found in problems.items():
        console.print(f"[red]{name}: {'; '.join(found)}[/red]")
    console.print(f"picture of both runs: [bold]{paths['png']}[/bold]")
    console.print("the cluster stays up; stop it with `submarine cluster down`")
    return 1 if problems or any(f["finished"] != f["jobs"] for f in figures) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m submarine_elastic.demo", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--time-scale", type=float, default=0.03, help="the workload's arrivals and work times this [0.03]"
    )
    parser.add_argument("--out", type=Path, default=None, help="where logs and the picture go [a new temp dir]")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="submarine-demo-"))
    try:
        return run(args.time_scale, out)
    except (ClusterError, ReplayError, ReplayRunError, TimeoutError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 1
    except KeyboardInterrupt:
        console.print("interrupted: the jobs it had submitted were killed; the cluster stays up")
        return 130


if __name__ == "__main__":
    sys.exit(main())
