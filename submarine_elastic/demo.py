"""The README's first command: elastic TensorFlow jobs on the local pseudo-cluster, resized by the policy.

Starts the pseudo-cluster (unless one is up) and the controller with the goodput job policy and arbiter,
submits two elastic jobs of ``examples/train_elastic.py --data digits`` (a small convolutional network on the
handwritten digits scikit-learn ships) with ``submarine job run --elastic`` (global batch 32..512) and, while
they train, a third that arrives. Nothing is flexed by hand: the controller sizes each job,
workers and batch, from what its workers report (step times, gradient noise scale, loss) and from the jobs
arriving and leaving; each decision is printed with its reason as it is taken. When the jobs have finished it
draws their workers, global batch and loss over time, each decision marked with the speed-up it predicted,
into a PNG and prints its path.
The controller is stopped at the end; the cluster stays up (``submarine cluster down`` stops it).

Run: ``python -m submarine_elastic.demo [--epochs N] [--arrival-s S] [--out DIR]``
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from submarine_elastic.cluster import ClusterError, ClusterSpec, LocalCluster
from submarine_elastic.yarn import ServiceNotFoundError, YarnError, YarnServiceClient

REPO = Path(__file__).resolve().parent.parent
console = Console()

#: How long the demo waits for its jobs to finish before it gives up on them (and kills them).
FINISH_TIMEOUT_S = 900.0
POLL_S = 2.0


@dataclass(frozen=True)
class DemoJob:
    """One job of the demo: its name, its limits, when it is submitted (seconds after the first)."""

    name: str
    workers: int
    min_workers: int
    max_workers: int
    submit_after_s: float = 0.0


@dataclass
class Series:
    """What a job's step log says over time: per committed step, the time, the ring size, the global batch
    and rank 0's loss."""

    times: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)


def read_steps(log_dir: Path) -> Series:
    """A job's series from the step logs its ranks wrote (``steps-*.jsonl`` of ``examples/train_elastic.py``);
    a step counts once, at the time its last rank ended it. Lines cut short by a killed writer are skipped."""
    steps: dict[int, list[dict]] = collections.defaultdict(list)
    for path in sorted(log_dir.glob("steps-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            steps[record["step"]].append(record)
    series = Series()
    for _, records in sorted(steps.items()):
        series.times.append(max(r["time"] for r in records))
        series.sizes.append(records[0]["size"])
        series.batches.append(records[0].get("global_batch", 0))
        first = min(records, key=lambda r: r["rank"])
        series.losses.append(float(first["loss"]))
    return series


def draw(
    series: dict[str, Series], decisions: dict[str, list[tuple[float, int, int, str]]], t0: float, out: Path
) -> Path:
    """Workers, global batch and loss of each job over time (seconds after ``t0``), each decision of the
    controller a marker on its job's workers line; written to ``out`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_w, ax_b, ax_l) = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, s) in enumerate(sorted(series.items())):
        color = colors[i % len(colors)]
        t = [x - t0 for x in s.times]
        ax_w.step(t, s.sizes, where="post", color=color, label=name)
        ax_b.step(t, s.batches, where="post", color=color)
        ax_l.plot(t, s.losses, color=color, linewidth=0.8)
        for when, _old, new, reason in decisions.get(name, []):
            ax_w.plot([when - t0], [new], marker="v", color=color, markersize=8, linestyle="none")
            predicted = predicted_speedup(reason)
            if predicted is not None:
                ax_w.annotate(
                    f"{predicted:.2f}", (when - t0, new), textcoords="offset points", xytext=(0, 7),
                    ha="center", fontsize=7, color=color,
                )  # fmt: skip
    ax_w.set_ylabel("workers in the ring")
    ax_w.legend(loc="upper right")
    ax_w.set_title(
        "jobs resized by the controller (▼: a decision at the count it asked for, with its predicted speed-up)"
    )
    ax_b.set_ylabel("global batch")
    ax_l.set_ylabel("loss (rank 0)")
    ax_l.set_yscale("log")
    ax_l.set_xlabel("seconds since the first job was submitted")
    for ax in (ax_w, ax_b, ax_l):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def predicted_speedup(reason: str) -> float | None:
    """The speed-up a goodput decision predicted at the count it chose (the ``speedup X`` after ``predicted at``
    where the reason has one, else its first), or None where the reason gives none."""
    found = re.search(r"predicted at \d+:[^(]*\(speedup (\d+(?:\.\d+)?)", reason) or re.search(
        r"speedup \(?(\d+(?:\.\d+)?)", reason
    )
    return float(found.group(1)) if found else None


def _submarine(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    cli = Path(sys.executable).parent / "submarine"
    done = subprocess.run([str(cli), *args], env=env, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"submarine {' '.join(args[:2])} failed: {(done.stderr or done.stdout).strip()}")
    return done


def run(epochs: int, arrival_s: float, out: Path) -> int:
    cluster = LocalCluster()
    if cluster.running_daemons():
        rm_url = cluster.spec().rm_url
        console.print(f"using the running pseudo-cluster at {rm_url}")
    else:
        console.rule("starting the pseudo-cluster")
        rm_url = cluster.up(ClusterSpec(), progress=lambda m: console.print(f"  {m}"))

    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SUBMARINE_RM_URL": rm_url, "SUBMARINE_CONTROLLER_DIR": str(out / "controller")}
    jobs = [
        DemoJob("demo-a", 2, 1, 4),
        DemoJob("demo-b", 1, 1, 4),
        DemoJob("demo-c", 1, 1, 3, submit_after_s=arrival_s),
    ]
    console.rule("the controller: goodput policy and arbiter")
    start = ["controller", "start", "--policy", "goodput", "--arbiter", "goodput", "--interval", "2"]
    console.print("submarine " + " ".join(start))
    _submarine(*start, env=env)
    decisions: dict[str, list[tuple[float, int, int, str]]] = {}
    submitted: dict[str, float] = {}
    t0 = time.time()
    try:
        deadline = time.monotonic() + FINISH_TIMEOUT_S
        with YarnServiceClient(rm_url) as yarn:
            while True:
                now = time.time()
                for job in jobs:
                    if job.name not in submitted and now - t0 >= job.submit_after_s:
                        submitted[job.name] = now
                        _submit(job, epochs, out, env)
                _print_new_decisions(jobs, submitted, decisions, t0, env)
                if len(submitted) == len(jobs) and all(_ended(job.name, yarn) for job in jobs):
                    break
                if time.monotonic() > deadline:
                    console.print(f"[red]the jobs did not finish within {FINISH_TIMEOUT_S:.0f} s[/red]")
                    return 1
                time.sleep(POLL_S)
        _print_new_decisions(jobs, submitted, decisions, t0, env)
    finally:
        for job in jobs:
            if job.name in submitted:
                _submarine("job", "kill", job.name, env=env, check=False)
        _submarine("controller", "stop", env=env, check=False)

    console.rule("what they learned")
    for job in jobs:
        finals = sorted((out / job.name / "log").glob("final-rank*.json"))
        if not finals:
            console.print(f"[red]{job.name} left no result in {out / job.name / 'log'}[/red]")
            return 1
        final = json.loads(finals[0].read_text())
        took = _series(out, job).times[-1] - submitted[job.name]
        console.print(
            f"{job.name}: {final['step']} steps in {took:.0f} s, accuracy {final['accuracy']:.3f} on each of its "
            f"{len(finals)} last ranks, {len(decisions.get(job.name, []))} decisions"
        )
    series = {job.name: _series(out, job) for job in jobs}
    picture = draw(series, decisions, t0, out / "demo.png")
    console.print(f"picture of workers, batch and loss per job: [bold]{picture}[/bold]")
    console.print(f"the cluster stays up at {rm_url}; stop it with `submarine cluster down`")
    return 0


def _series(out: Path, job: DemoJob) -> Series:
    return read_steps(out / job.name / "log")


def _submit(job: DemoJob, epochs: int, out: Path, env: dict[str, str]) -> None:
    log = out / job.name / "log"
    command = (
        f"{sys.executable} {REPO}/examples/train_elastic.py --data digits --epochs {epochs} --step-sleep 0.03 "
        f"--log-dir {log}"
    )
    args = [
        "job", "run", "--name", job.name, "--elastic",
        "--num_workers", str(job.workers), "--min_workers", str(job.min_workers), "--max_workers", str(job.max_workers),
        "--worker_resources", "memory-mb=1024,vcores=1", "--min_batch_size", "32", "--max_batch_size", "512",
        "--worker_launch_cmd", command,
    ]  # fmt: skip
    console.print(f"[bold]{job.name}[/bold] arrives: submarine {' '.join(args[:-1])} '{command}'", soft_wrap=True)
    _submarine(*args, env=env)


def _ended(name: str, yarn: YarnServiceClient) -> bool:
    """The job's service has stopped (finished, failed or killed) or is gone."""
    try:
        return yarn.status(name).is_terminal
    except ServiceNotFoundError:
        return True
    except YarnError:
        return False


def _print_new_decisions(
    jobs: list[DemoJob],
    submitted: dict[str, float],
    decisions: dict[str, list[tuple[float, int, int, str]]],
    t0: float,
    env: dict[str, str],
) -> None:
    from submarine_elastic.controller.api import ControllerError
    from submarine_elastic.controller.client import view

    try:
        with view(Path(env["SUBMARINE_CONTROLLER_DIR"])) as controller:
            if controller is None:
                return
            for job in jobs:
                if job.name not in submitted:
                    continue
                try:
                    timeline = controller.timeline(job.name)
                except ControllerError:
                    continue
                seen = decisions.setdefault(job.name, [])
                for d in timeline[len(seen) :]:
                    seen.append((d.time, d.from_workers, d.to_workers, d.reason))
                    console.print(
                        f"  +{d.time - t0:5.0f} s  {job.name}: {d.from_workers} -> {d.to_workers} workers: {d.reason}",
                        soft_wrap=True,
                    )
    except ControllerError as exc:
        console.print(f"  (the controller did not answer: {exc})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m submarine_elastic.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=80, help="epochs each job trains [80]")
    parser.add_argument("--arrival-s", type=float, default=60.0, help="when the third job arrives [60 s]")
    parser.add_argument("--out", type=Path, default=None, help="where logs and the picture go [a new temp dir]")
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error(f"--epochs must be at least 1, got {args.epochs}")
    out = args.out or Path(tempfile.mkdtemp(prefix="submarine-demo-"))
    try:
        return run(args.epochs, args.arrival_s, out)
    except (ClusterError, RuntimeError, TimeoutError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
